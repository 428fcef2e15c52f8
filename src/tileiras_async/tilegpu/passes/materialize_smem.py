"""materialize-shared-memory: every use of shared memory becomes explicit IR.

Contract: in: tile-GPU IR with layouts. out:
- a `tilegpu.convert_layout` that would move data between threads becomes `local_alloc` + `local_store` +
  `local_load` (the conversions left move nothing: register relabelling, splat constants, uniforms);
- `extract` (unless it selects registers: `smem.register_extract`), `cat`, `insert`, `pack`, `unpack` become
  the same three ops with the addressing in attributes
  (pack/unpack of 4-bit elements stage through their own scratch: two elements share a byte);
- ops that stage through shared memory themselves get a `scratch_bytes` attribute (allocate-shared-memory
  adds `scratch_offset`).
No barriers yet: insert-barriers places them where the accesses need them.
"""
from __future__ import annotations

from ...ir import types as T
from ...ir.core import Operation, Value
from ..errors import LoweringError
from ..ir import KernelIR, replace_values, walk_blocks
from ..ops import CONVERT_LAYOUT, LOCAL_ALLOC, LOCAL_LOAD, LOCAL_STORE
from ..analysis.smem import free_conversion, scratch_bytes, selected_registers, sub_byte_bytes_view
from ..types import SmemType, elem_bytes, layout_of

_SHAPE_OPS = frozenset({"extract", "cat", "insert", "pack", "unpack"})


def run(k: KernelIR) -> None:
    mapping: dict[int, Value] = {}
    for block in list(walk_blocks(k.fn.body)):
        out: list[Operation] = []
        staged: dict[int, Value] = {}     # per extracted tile: the buffer an earlier extract of it stored it in
        for op in block.ops:
            if op.name == CONVERT_LAYOUT.name and not free_conversion(op.operands["source"],
                                                                          layout_of(op.result.type)):
                out += _through_smem(op, mapping)
            elif op.name in _SHAPE_OPS and not (op.name in ("pack", "unpack") and sub_byte_bytes_view(op)) \
                    and selected_registers(op) is None:
                out += _shape_op(op, mapping, staged)
            else:
                n = scratch_bytes(op)
                if n:
                    op.attrs["scratch_bytes"] = n
                out.append(op)
        block.ops = out
    replace_values(k.fn.body, mapping)


def _alloc(nbytes: int, loc: int) -> Operation:
    return Operation(LOCAL_ALLOC, {}, {}, [SmemType(max(nbytes, 1))], loc=loc)


def _store(value: Value, buf: Value, shape, loc: int, shift=None, offsets=(), scale=None) -> Operation:
    attrs = {"shape": tuple(shape)}
    if shift:
        attrs["shift"] = tuple(shift)
    if offsets:
        attrs["scale"] = tuple(scale)
    return Operation(LOCAL_STORE, {"value": value, "buffer": buf, "offsets": list(offsets)}, attrs, loc=loc)


def _load(buf: Value, ty, shape, loc: int, offsets=(), scale=None) -> Operation:
    attrs = {"shape": tuple(shape)}
    if offsets:
        attrs["scale"] = tuple(scale)
    return Operation(LOCAL_LOAD, {"buffer": buf, "offsets": list(offsets)}, attrs, [ty], loc=loc)


def _nbytes(ty: T.TileType) -> int:
    return ty.num_elements() * elem_bytes(ty.elem)


def _through_smem(op: Operation, mapping: dict) -> list[Operation]:
    src = op.operands["source"]
    shape = src.type.shape
    a = _alloc(_nbytes(src.type), op.loc)
    st = _store(src, a.result, shape, op.loc)
    ld = _load(a.result, op.result.type, shape, op.loc)
    mapping[id(op.result)] = ld.result
    return [a, st, ld]


def _shape_op(op: Operation, mapping: dict, staged: dict) -> list[Operation]:
    res = op.result
    ty = res.type
    loc = op.loc
    if op.name == "extract":   # several extracts of one tile (a complex's halves) share its staging
        src = op.operands["source"]
        ops = []
        buf = staged.get(id(src))
        if buf is None:
            a = _alloc(_nbytes(src.type), loc)
            buf = staged[id(src)] = a.result
            ops = [a, _store(src, buf, src.type.shape, loc)]
        ops.append(_load(buf, ty, src.type.shape, loc, op.operands["indices"], ty.shape))
    elif op.name == "cat":
        lhs, rhs, dim = op.operands["lhs"], op.operands["rhs"], op.attrs["dim"]
        shift = [0] * len(ty.shape)
        shift[dim] = lhs.type.shape[dim]
        a = _alloc(_nbytes(ty), loc)
        ops = [a, _store(lhs, a.result, ty.shape, loc), _store(rhs, a.result, ty.shape, loc, shift=shift),
               _load(a.result, ty, ty.shape, loc)]
    elif op.name == "insert":
        src, dst = op.operands["source"], op.operands["destination"]
        a = _alloc(_nbytes(ty), loc)
        ops = [a, _store(dst, a.result, ty.shape, loc),
               _store(src, a.result, ty.shape, loc, offsets=op.operands["indices"], scale=src.type.shape),
               _load(a.result, ty, ty.shape, loc)]
    else:  # pack / unpack: the same bytes read as another element type
        src = op.operands["source"]
        for e in (src.type.elem, ty.elem):
            if isinstance(e, (T.IntType, T.FloatType)) and e.width < 8 and e != T.I1:   # (4-bit: not here)
                raise LoweringError(f"{op.name} of sub-byte element type {e} is not supported yet", op)
        a = _alloc(_nbytes(src.type), loc)
        ops = [a, _store(src, a.result, src.type.shape, loc), _load(a.result, ty, ty.shape, loc)]
    mapping[id(res)] = ops[-1].result
    return ops

