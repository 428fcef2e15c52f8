"""What the passes need to know about `mmaf_scaled` (lowered in codegen/lower_mma_scaled.py).

The op runs as one fp8 `mmaf` per K block of the scales (block-scaled tensor cores work the same way): the
block product is an ordinary mmaf whose operands are the block's elements (e2m1 widened to e4m3, which is
exact) and whose accumulator is f32.  So the op's result lives in that product's layout, the accumulator
converts to it, and the op's scratch must hold the staged operands, the block product's own staging and
the staged scales -- one phase at a time (the lowering puts a barrier between phases).
"""
from __future__ import annotations

from ...bytecode.opspec import OPS_BY_NAME
from ...ir import types as T
from ...ir.core import Operation, Value
from ..layout import LinearLayout
from .mma import FMA_PLAN, recorded_plan, result_layout as mma_result_layout
from ..options import CodegenOptions
from ..types import align, elem_bytes

_FP8 = ("f8E4M3FN", "f8E5M2")


def block_elem(elem: T.Type) -> T.Type:
    """The element type a block's operand goes through the tensor cores as."""
    return elem if getattr(elem, "name", "") in _FP8 else T.F8E4M3FN


BLOCK_PRODUCT = "scaled_block_product"    # attribute of the mmaf of one K block


def block_size(op: Operation) -> int:
    return op.operands["lhs"].type.shape[-1] // op.operands["lhs_scale"].type.shape[-1]


def block_product(op: Operation, acc_type: T.Type | None = None) -> Operation:
    """The mmaf of one K block (operand values are placeholders: the lowering binds them)."""
    lhs, rhs = op.operands["lhs"].type, op.operands["rhs"].type
    b = block_size(op)
    a_t = T.TileType(lhs.shape[:-1] + (b,), block_elem(lhs.elem))
    b_t = T.TileType(rhs.shape[:-2] + (b, rhs.shape[-1]), block_elem(rhs.elem))
    c_t = acc_type or T.TileType(tuple(op.result.type.shape), T.F32)
    spec = OPS_BY_NAME["mmaf"]
    attrs = {x.name: False for x in spec.attrs if x.kind == "unit"}
    attrs[BLOCK_PRODUCT] = True     # select-mma: stays on mma.sync (tilegpu.analysis.tcgen05)
    return Operation(spec, {"lhs": Value(a_t), "rhs": Value(b_t), "acc": Value(c_t)}, attrs, [c_t], loc=op.loc)


def result_layout(options: CodegenOptions, op: Operation) -> LinearLayout:
    """The layout of the block products (whose plan select-mma recorded on the op), hence of the op's
    accumulator and result."""
    return mma_result_layout(options, op)


def staged_operand_bytes(op: Operation) -> tuple[int, int]:
    """(bytes, offset of rhs) of lhs and rhs staged one after the other, one byte per element."""
    lhs, rhs = op.operands["lhs"].type, op.operands["rhs"].type
    at = align(lhs.num_elements())
    return at + rhs.num_elements(), at


def staged_scale_bytes(op: Operation) -> tuple[int, int]:
    ls, rs = op.operands["lhs_scale"].type, op.operands["rhs_scale"].type
    at = align(ls.num_elements() * elem_bytes(ls.elem))
    return at + rs.num_elements() * elem_bytes(rs.elem), at


def _product_bytes(op: Operation) -> int:
    plan = recorded_plan(op)     # the block products' (select-mma), fp8 widened to f16 on the FMA chain
    return (plan if plan is not None else recorded_plan(op, FMA_PLAN)).smem_bytes


def scale_offset(op: Operation) -> int:
    """Where the scales sit in the op's scratch: after the operands' staging and the block products' own,
    which reuse the same bytes one after the other."""
    return align(max(staged_operand_bytes(op)[0], _product_bytes(op)))


def scratch_bytes(op: Operation) -> int:
    return scale_offset(op) + staged_scale_bytes(op)[0]
