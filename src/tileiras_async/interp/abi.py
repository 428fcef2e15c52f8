"""The cuTile calling convention (``cutile_python_v1``): kernel arguments <-> entry parameters.

Each array argument becomes ``ptr<T>``, then its ``ndim`` shape values, then its
``ndim`` strides in elements (in the index type: i32, or i64 for
``index_dtype=int64``); each scalar becomes one parameter; constants are baked
into the module.  The mangled symbol (``<fn>_Kt1_A2f32_3l0_Sf32_I64``) spells
the argument list out, which gives error messages the user's view of it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..ir import types as T

_DTYPE_NAMES = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "tf32": "tfloat32",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "b": "bool", "b1": "bool", "i1": "bool", "bool": "bool",
    "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "f8e8m0fnu": "float8_e8m0fnu",
}


@dataclass(frozen=True)
class ParamSpec:
    kind: str            # "array" | "scalar"
    dtype: str           # cuTile dtype name (float32, bfloat16, uint8, ...) or the type's spelling
    ndim: int = 0

    def describe(self) -> str:
        if self.kind == "array":
            return f"{self.dtype} array ({self.ndim}-D)"
        return f"{self.dtype} scalar"


_SYM = re.compile(r"^(.*?)_Kt(\d+)_(.*)$")
_ARR = re.compile(r"^A(\d+)([a-z][a-z0-9]*)$")
_SCAL = re.compile(r"^S([a-z][a-z0-9]*)$")
_MOD = re.compile(r"^(\d+[a-z]\d+|w)$")
_CONST = re.compile(r"^(I-?\d+|B[01]|F[0-9a-fA-FxXpP.+-]+|C.*)$")


def parse_symbol(symbol: str) -> list[ParamSpec] | None:
    """Runtime parameters from a mangled cuTile symbol, or None if it does not look like one."""
    m = _SYM.match(symbol)
    if not m:
        return None
    out: list[ParamSpec] = []
    for tok in m.group(3).split("_"):
        if not tok:
            continue
        a = _ARR.match(tok)
        if a:
            out.append(ParamSpec("array", _DTYPE_NAMES.get(a.group(2), a.group(2)), int(a.group(1))))
            continue
        s = _SCAL.match(tok)
        if s:
            out.append(ParamSpec("scalar", _DTYPE_NAMES.get(s.group(1), s.group(1))))
            continue
        if _MOD.match(tok) or _CONST.match(tok):
            continue
        return None
    return out


def _is_index(t: T.Type) -> bool:
    return isinstance(t, T.IntType) and t.width in (32, 64)


def specs_match(specs: list[ParamSpec], params: list[T.Type]) -> bool:
    """Do the mangled specs expand to exactly the entry's parameter kinds?"""
    i = 0
    for s in specs:
        if s.kind == "array":
            if i >= len(params) or not isinstance(params[i], T.PointerType):
                return False
            idx = params[i + 1:i + 1 + 2 * s.ndim]
            if len(idx) != 2 * s.ndim or not all(_is_index(t) for t in idx):
                return False
            i += 1 + 2 * s.ndim
        else:
            if i >= len(params) or isinstance(params[i], T.PointerType):
                return False
            i += 1
    return i == len(params)


def describe_entry(params: list[T.Type]) -> str:
    return "(" + ", ".join(str(t) for t in params) + ")"


def numpy_matches(dt: np.dtype, elem: T.Type) -> tuple[bool, str]:
    """Can an array of numpy dtype `dt` be passed for elements of cuda_tile type `elem`?

    Returns (ok, what the kernel wants) -- the second part for messages.
    """
    if isinstance(elem, T.IntType):
        if elem.width == 1:
            return dt.kind in "biu" and dt.itemsize == 1, "bool (or 1-byte integer) data"
        if elem.width == 4:
            return False, "4-bit integer data (not supported by the interpreter)"
        nb = elem.width // 8
        return dt.kind in "iu" and dt.itemsize == nb, f"a {nb}-byte integer dtype (int{elem.width} or uint{elem.width})"
    if isinstance(elem, T.FloatType):
        n = elem.name
        if n in ("f16", "f32", "f64"):
            want = {"f16": "float16", "f32": "float32", "f64": "float64"}[n]
            return dt == np.dtype(want), want
        if n == "tf32":
            return dt == np.dtype(np.float32), "float32 (tf32 elements are stored as f32)"
        if n == "bf16":
            return (dt.kind == "u" and dt.itemsize == 2) or dt.name == "bfloat16", \
                "bfloat16 raw bits in a uint16 array"
        if n in ("f8E4M3FN", "f8E5M2", "f8E8M0FNU"):
            ml = {"f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E8M0FNU": "float8_e8m0fnu"}[n]
            return (dt.kind == "u" and dt.itemsize == 1) or dt.name == ml, f"{n} raw bits in a uint8 array"
        return False, f"{n} data (not supported by the interpreter)"
    return False, str(elem)
