"""vectorize-view-accesses: tile loads and stores the launch hints make aligned move up to 16 bytes at a time.

Contract: in: tile-GPU IR with final layouts. out: a weak `load_view_tko` / `store_view_tko` through a partition
view whose facts (tilegpu/analysis/facts.py: the caller's `assume div_by` and literal strides) promise, for a width of `v`
elements, that (1) the tile's last dimension (or, through a transposing view, another one) runs along a tensor
dimension of literal stride 1, (2) the base and
every other stride are multiples of `v` elements' bytes, (3) that dimension's extent is a multiple of `v`, and
whose layout gives each thread runs of `v` registers holding consecutive elements of that dimension that
start at multiples of `v`, carries `vector_width = v` (the widest such power of two, at most 16 bytes and at least
4): codegen then moves each run with one vector access and one bounds check (by (3), a run is wholly inside or
wholly outside the view). Without hints (the views' strides are run-time values) nothing changes: a hint is a
promise the code relies on, never one it checks.
"""
from __future__ import annotations

from ...ir import types as T
from ...ir.enums import MemoryOrderingSemantics as MO
from ..analysis.facts import known_divisor, unit_stride_dim, view_strides_and_base
from ..ir import KernelIR, walk_ops
from ..types import elem_bytes, layout_of

ACCESSES = {"load_view_tko": lambda op: op.results[0].type, "store_view_tko": lambda op: op.operands["tile"].type}
MAX_BYTES = 16
MIN_BYTES = 4   # a narrower vector saves nothing over the element accesses of 32-bit registers


def run(k: KernelIR) -> None:
    for op in walk_ops(k.fn.body):
        tile_type = ACCESSES.get(op.name, lambda _: None)(op)
        if tile_type is None or op.attrs.get("memory_ordering_semantics", MO.weak) != MO.weak:
            continue
        width = vector_width(op.operands["view"], tile_type)
        if width > 1:
            op.attrs["vector_width"] = width


def _vectorisable_element(elem: T.Type) -> bool:
    """Whole-byte numbers (not i1, not sub-byte floats, not pointers): what a packed 32-bit word holds."""
    return isinstance(elem, (T.FloatType, T.IntType)) and elem.width in (8, 16, 32, 64)


def vector_width(view, tile_type, layout=None) -> int:
    """The widest run of elements one access may move (1: element by element); `layout`: the tile's, or
    another one a pass weighs for it."""
    layout = layout or layout_of(tile_type)
    elem = tile_type.elem
    facts = view_strides_and_base(view)
    if layout is None or facts is None or not _vectorisable_element(elem):
        return 1
    base, strides = facts
    dims = view.type.dim_map
    rank = len(tile_type.shape)
    run_dim = rank - 1 if strides[dims[rank - 1]][0] == 1 else unit_stride_dim(view, rank)
    if run_dim is None:
        return 1
    eb = elem_bytes(elem)
    width = min(layout.contiguous_registers(run_dim), MAX_BYTES // eb, max(1, base // eb),
                _extent_divisor(view.owner, dims[run_dim]))
    for i in range(rank):
        if i != run_dim:
            width = min(width, strides[dims[i]][1])    # each other stride: a multiple of the run (elements)
    width = _largest_power_of_two_at_most(width)
    while width > 1 and not _runs_start_aligned(layout, width, run_dim):
        width //= 2
    return width if width * eb >= MIN_BYTES else 1


def _extent_divisor(partition_view_op, dim: int) -> int:
    tview = partition_view_op.operands["tensor_view"].owner
    dynamic = iter(tview.operands["dynamicShape"])
    for d, s in enumerate(tview.result.type.shape):
        value = next(dynamic) if s == T.DYNAMIC else None
        if d == dim:
            return known_divisor(value) if value is not None else (s & -s if s > 0 else 1)
    return 1


def _largest_power_of_two_at_most(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _runs_start_aligned(layout, width: int, dim: int) -> bool:
    """Every register, lane and warp basis outside a run's first log2(width) register bits moves coordinate
    `dim` by a multiple of `width`: runs start at multiples of it."""
    run_bits = width.bit_length() - 1
    others = list(layout.bases[0][run_bits:]) + list(layout.bases[1]) + list(layout.bases[2])
    return all(b[dim] % width == 0 for b in others)
