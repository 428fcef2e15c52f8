"""What the caller promises about a kernel's arguments: the launch hints as facts passes can query.

cuTile specialises a kernel on its arrays at launch: a 16-byte aligned base becomes `assume div_by<16>` on the
pointer (bytes), a stride that is a multiple of 16 bytes `assume div_by<16 / itemsize>` on the stride (elements), a
unit stride a literal 1 in the tensor view's type. A hint is a promise: code relies on it and never checks it, so
a fact here may remove a run-time check (or a whole loop version that only a failed check would run).
"""
from __future__ import annotations

from ...ir import types as T
from ...ir.attrs import DivByAttr
from ...ir.core import Operation, Value


def _power_of_two_part(n: int) -> int:
    return n & -n if n > 0 else 1


def known_divisor(v: Value) -> int:
    """The largest power of two the scalar `v` is promised to be a multiple of (1: nothing known).  Walks the
    chain of `assume`s over `v`; a pointer's divisor is in bytes, an integer's in units of itself."""
    best = 1
    while isinstance(v.owner, Operation) and v.owner.name == "assume":
        pred = v.owner.attrs.get("predicate")
        if isinstance(pred, DivByAttr) and pred.every is None and pred.along is None:
            best = max(best, _power_of_two_part(pred.divisor))
        v = v.owner.operands["value"]
    return best


def _defining(v: Value, name: str) -> Operation | None:
    return v.owner if isinstance(v.owner, Operation) and v.owner.name == name else None


def view_strides_and_base(partition_view: Value) -> tuple[int, list[tuple[int, int]]] | None:
    """(base divisor in bytes, [(literal stride or 0, stride divisor in elements) per tensor dimension]) of the
    tensor view a partition view is made from; None when the view's origin is not in sight."""
    part = _defining(partition_view, "make_partition_view")
    tview = _defining(part.operands["tensor_view"], "make_tensor_view") if part is not None else None
    if tview is None:
        return None
    dynamic = iter(tview.operands["dynamicStrides"])
    strides = []
    for s in tview.result.type.strides:
        strides.append((0, known_divisor(next(dynamic))) if s == T.DYNAMIC else (s, _power_of_two_part(abs(s))))
    return known_divisor(tview.operands["base"]), strides


def unit_stride_dim(partition_view: Value, rank: int) -> int | None:
    """The tile dimension that runs along the tensor dimension of literal stride 1 (the last one, or another
    where the view's dim_map transposes), None when the facts promise none."""
    facts = view_strides_and_base(partition_view)
    if facts is None:
        return None
    dims = partition_view.type.dim_map
    return next((i for i in range(rank) if facts[1][dims[i]][0] == 1), None)


def read_along_k(rhs: Value) -> bool:
    """Whether an mma's B operand (K x N) is a tile read (through reshapes) from a view whose unit stride runs
    along K: a transposed read such as attention's K^T, whose rows of K are what memory holds contiguously."""
    while isinstance(rhs.owner, Operation) and rhs.owner.name == "reshape":
        src = rhs.owner.operands["source"]
        if tuple(src.type.shape[-2:]) != tuple(rhs.type.shape[-2:]):
            return False
        rhs = src
    owner = rhs.owner
    if not isinstance(owner, Operation) or owner.name != "load_view_tko" or len(rhs.type.shape) < 2:
        return False
    rank = len(rhs.type.shape)
    return unit_stride_dim(owner.operands["view"], rank) == rank - 2


def view_rows_aligned(partition_view: Value, tile_rank: int, elem_bytes: int, width: int) -> bool:
    """Whether the promises alone make every row of the view's tiles start on a `width`-byte boundary with unit
    stride along the tile's last dimension: what `tilegpu.views_aligned` checks at run time (innermost stride 1,
    base and every other stride multiples of `width` bytes)."""
    facts = view_strides_and_base(partition_view)
    if facts is None:
        return False
    base, strides = facts
    dims = partition_view.type.dim_map
    if strides[dims[tile_rank - 1]][0] != 1 or base % width:
        return False
    return all((strides[dims[i]][1] * elem_bytes) % width == 0 for i in range(tile_rank - 1))


def view_extent_divisor(partition_view: Value, tile_dim: int) -> int:
    """The largest power of two the extent of the tensor dimension under tile dimension `tile_dim` is promised
    to be a multiple of (1: nothing known): a literal extent's, or its `assume div_by` chain's."""
    part = _defining(partition_view, "make_partition_view")
    tview = _defining(part.operands["tensor_view"], "make_tensor_view") if part is not None else None
    if tview is None:
        return 1
    dim = partition_view.type.dim_map[tile_dim]
    dynamic = iter(tview.operands["dynamicShape"])
    for d, n in enumerate(tview.result.type.shape):
        v = next(dynamic) if n == T.DYNAMIC else None
        if d == dim:
            return known_divisor(v) if v is not None else _power_of_two_part(n)
    return 1
