"""Shared-memory facts the passes decide with and code generation follows.

* which layout conversions move nothing (`free_conversion`), which extracts are register selections
  (`register_extract`),
* where a dimension's coordinate bits live in a layout (`dim_bits`: registers, lanes or warps),
* how much scratch an op that stages data through shared memory needs (`scratch_bytes`), and what it
  does to it (`scratch_effects`): it writes the scratch first and reads it last, with its own barrier in
  between, so the barrier pass only has to separate it from other ops.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import types as T
from ...ir.core import Operation, Value
from ..layout import LinearLayout
from ..errors import LoweringError
from .mma import FMA_PLAN, recorded_plan
from ..types import align, elem_bytes, is_splat, layout_of


def free_conversion(v: Value, target: LinearLayout | None) -> bool:
    """Whether converting `v` to `target` needs no data movement between threads: a uniform value, a splat
    constant (every register is the same literal), or a layout whose threads already hold what they need."""
    src = layout_of(v.type)
    if target is None or src is None or src == target:
        return True
    if is_uniform(v):
        return True
    return target.register_map_from(src) is not None


def constant_index(v: Value) -> int | None:
    """The value of a scalar integer constant (None: not one)."""
    owner = v.owner
    if (isinstance(owner, Operation) and owner.name == "constant" and not v.type.shape
            and isinstance(v.type.elem, T.IntType) and v.type.elem.width > 1):
        return int.from_bytes(owner.attrs["value"].raw[:v.type.elem.width // 8], "little", signed=True)
    return None


def register_extract(op: Operation) -> tuple[LinearLayout, list[int]] | None:
    """For an `extract` at constant indices whose box every thread already holds in registers (a complex
    number's real or imaginary half, one of a tile's register-held rows): the result's layout and, per its
    register, the source register it is; None when the extract must go through shared memory."""
    src = op.operands["source"]
    layout = layout_of(src.type)
    index = [constant_index(v) for v in op.operands["indices"]]
    if layout is None or any(i is None for i in index):
        return None
    shape = tuple(op.result.type.shape)
    offset = tuple(i * n for i, n in zip(index, shape))
    if any(o < 0 or o + n > m for o, n, m in zip(offset, shape, src.type.shape)):
        return None
    return layout.sub_box(shape, offset)


# ops whose lowering writes their scratch, waits at a barrier, then reads it: reduce and scan across warps,
# and mmaf/mmai staging their operands for mma.sync or FMA (codegen/lower_mma; mma_prestaged: the operand it
# does not read from a stage_operand buffer); wgmma/tcgen05 stage otherwise
SELF_SYNCING = frozenset({"reduce", "scan", "mmaf", "mmai", "tilegpu.mma_prestaged"})
_ASYNC_MMA = ("wgmma", "tcgen05")


def self_syncing(op: Operation) -> bool:
    """`op` stages through its own scratch with a barrier between its writes and its reads: that barrier
    orders every shared-memory access before the op (insert-barriers), and its scratch need not share bytes
    with the next op's (allocate-shared-memory)."""
    if op.name not in SELF_SYNCING or "scratch_bytes" not in op.attrs:
        return False
    return not str(op.attrs.get("instruction", "")).startswith(_ASYNC_MMA)


def selected_registers(op: Operation) -> list[int] | None:
    """For an extract that assign-layouts laid out as a register selection: per result register, the source
    register it is (None: the extract goes through shared memory)."""
    sub = register_extract(op) if op.name == "extract" else None
    return sub[1] if sub is not None and sub[0] == layout_of(op.result.type) else None


UNIFORM_CHAIN = frozenset({"broadcast", "reshape", "tilegpu.convert_layout"})


def is_uniform(v: Value) -> bool:
    """Every element of `v` is the same value: a splat constant, a one-element tile, or a broadcast or
    reshape of such a value (each thread holds it in registers, so any layout is a relabelling)."""
    while True:
        if not v.type.shape or all(d == 1 for d in v.type.shape):
            return True
        owner = v.owner
        if not isinstance(owner, Operation):
            return False
        if owner.name == "constant":
            return is_splat(owner.attrs["value"].raw, v.type.elem)
        if owner.name not in UNIFORM_CHAIN:
            return False
        v = owner.operands["source"]


# -- where a dimension lives -----------------------------------------------------------------------------

@dataclass(frozen=True)
class DimBits:
    """The bits of one dimension's coordinate in a layout, by kind: (bit index, weight) pairs."""
    regs: tuple[tuple[int, int], ...]
    lanes: tuple[tuple[int, int], ...]
    warps: tuple[tuple[int, int], ...]

    @property
    def reg_mask(self) -> int:
        return sum(1 << b for b, _ in self.regs)


def dim_bits(layout: LinearLayout, dim: int) -> DimBits:
    out: list[list[tuple[int, int]]] = [[], [], []]
    for kind, bases in enumerate(layout.bases):
        for bit, basis in enumerate(bases):
            if not basis[dim]:
                continue
            if any(c for d, c in enumerate(basis) if d != dim) or basis[dim] & (basis[dim] - 1):
                raise LoweringError("a layout basis moves along several dimensions at once")
            out[kind].append((bit, basis[dim]))
    return DimBits(*(tuple(x) for x in out))


# -- scratch of the ops that stage through shared memory -----------------------------------------------------

def _staged_tiles_bytes(tiles, per_tile) -> int:
    offset = 0
    for t in tiles:
        offset = align(offset) + per_tile(t)
    return offset


def scratch_bytes(op: Operation) -> int:
    """Bytes of shared memory `op`'s lowering stages through (0: none)."""
    name = op.name
    if name in ("reduce", "scan"):
        operands = op.operands["operands"]
        layout = layout_of(operands[0].type)
        bits = dim_bits(layout, op.attrs["dim"])
        if not bits.warps:
            return 0
        if name == "reduce":
            count = op.results[0].type.num_elements() if op.results[0].type.shape else 1
            nw = 1 << len(bits.warps)
            return _staged_tiles_bytes(operands, lambda v: count * nw * elem_bytes(v.type.elem))
        return _staged_tiles_bytes(operands, lambda v: layout.num_elements * elem_bytes(v.type.elem))
    if name in ("mmaf", "mmai"):
        plan = recorded_plan(op)     # select-mma's, fp8 widened to f16 on the FMA chain
        return (plan if plan is not None else recorded_plan(op, FMA_PLAN)).smem_bytes
    if name in ("atomic_rmw_tko", "atomic_cas_tko"):
        ptrs = layout_of(op.operands["pointers"].type)
        if ptrs is not None and not ptrs.replicated():
            return 0   # every element's value comes back to the one thread that holds it
        ty = op.results[0].type
        return (ty.num_elements() + 1) * elem_bytes(ty.elem)
    if name == "print_tko":
        tiles = [v for v in op.operands.get("args") or [] if v.type.shape]
        return _staged_tiles_bytes(tiles, lambda v: v.type.num_elements() * elem_bytes(v.type.elem))
    if name == "alloca":
        return 8
    if name == "mmaf_scaled":
        from .scaled_mma import scratch_bytes as scaled_scratch
        return scaled_scratch(op)
    if name in ("load_view_tko", "store_view_tko") and isinstance(op.operands["view"].type, T.GatherScatterViewType):
        rows = op.operands["index"][op.operands["view"].type.sparse_dim].type   # the sparse index tile
        return rows.num_elements() * elem_bytes(rows.elem)
    if name in ("pack", "unpack") and sub_byte_bytes_view(op):
        return op.operands["source"].type.num_elements() * elem_bytes(op.operands["source"].type.elem)
    return 0


def sub_byte_bytes_view(op: Operation) -> bool:
    """pack/unpack of 4-bit elements (two to a byte): staged by their own lowering, not by local_* ops."""
    return any(isinstance(e, (T.IntType, T.FloatType)) and e.width == 4
               for e in (op.operands["source"].type.elem, op.result.type.elem))
