"""The op dispatch table: op name -> handler(interp, op, env).

A handler reads its operands from `env` (Value -> numpy array / view / token),
writes its results into `env`, and returns None, or a `Signal` when the op ends
its block (yield / continue / break / return, or a nested region that ended
with one of those).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import types as T

HANDLERS: dict[str, Callable] = {}


def handler(*names: str):
    def deco(fn):
        for n in names:
            if n in HANDLERS:
                raise RuntimeError(f"two handlers for {n}")
            HANDLERS[n] = fn
        return fn
    return deco


class Signal:
    """How a block ended: kind in {"yield", "continue", "break", "return"} plus the values passed."""

    __slots__ = ("kind", "values")

    def __init__(self, kind: str, values: list):
        self.kind = kind
        self.values = values

    def __repr__(self) -> str:
        return f"<Signal {self.kind} {len(self.values)}>"


class Token:
    """Token values carry no data: everything runs in program order."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<token>"


TOKEN = Token()


def elem(v) -> T.Type:
    """Element type of a Value of tile type."""
    t = v.type
    return t.elem if isinstance(t, T.TileType) else t


def shape(v) -> tuple[int, ...]:
    t = v.type
    return t.shape if isinstance(t, T.TileType) else ()


def as_array(x, dtype) -> np.ndarray:
    """numpy scalars / arrays -> ndarray of `dtype` (no copy when already so)."""
    if isinstance(x, np.ndarray) and x.dtype == dtype:
        return x
    return np.asarray(x, dtype=dtype)


def uint_scalar(x, width: int) -> int:
    """A 0-d integer tile value as a Python int, read as unsigned."""
    return int(np.asarray(x).reshape(())) & ((1 << width) - 1)


def sint_scalar(x, width: int) -> int:
    v = uint_scalar(x, width)
    return v - (1 << width) if v >= 1 << (width - 1) else v
