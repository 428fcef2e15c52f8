"""Uniform scalar integer ops for passes that build IR (loop bounds, tile indices of other iterations).

Each helper appends the op it makes to `out` and returns its result; every value is a rank-0 tile every
thread holds.
"""
from __future__ import annotations

from ..bytecode.opspec import OPS_BY_NAME
from ..ir import types as T
from ..ir.attrs import DenseElements
from ..ir.core import Operation, Value
from ..ir.enums import IntegerOverflow
from .types import LayoutTile


def op(out: list, name: str, operands: dict, attrs: dict, ty, loc) -> Value:
    made = Operation(OPS_BY_NAME[name], operands, attrs, [ty], loc=loc)
    out.append(made)
    return made.result


def const(out: list, value: int, elem: T.IntType, loc) -> Value:
    raw = int(value).to_bytes(max(1, elem.width // 8), "little", signed=True)
    return op(out, "constant", {}, {"value": DenseElements(T.TileType((), elem), raw)}, LayoutTile((), elem, None), loc)


def add(out: list, a: Value, b: Value, loc) -> Value:
    return op(out, "addi", {"lhs": a, "rhs": b}, {"overflow": IntegerOverflow.none}, a.type, loc)


def mul(out: list, a: Value, b: Value, loc) -> Value:
    return op(out, "muli", {"lhs": a, "rhs": b}, {"overflow": IntegerOverflow.none}, a.type, loc)


def iteration(out: list, iv: Value, step: Value, d: int, loc) -> Value:
    """iv + d * step: the induction variable d iterations later."""
    if d == 0:
        return iv
    return add(out, iv, mul(out, step, const(out, d, iv.type.elem, loc), loc), loc)
