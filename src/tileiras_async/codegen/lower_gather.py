"""Gather/scatter views (`make_gather_scatter_view`; cuTile's `ct.load`/`ct.store` with an index tile and
slices): loads and stores through them, masked per element, with the view's padding value.

Along `sparse_dim` the access index is a 1-D tile: tile row r reads tensor coordinate index[r].  Every
other index is an element offset (cuTile passes a `ct.Slice`'s start), so tile coordinate c lies at
index + c.  Coordinates outside the tensor view (negative sparse indices included: they compare as
huge unsigned numbers) are masked: loads read the padding value, stores skip them.

The index tile's elements live in other threads' registers than the elements they place, so the
index tile goes through the access op's scratch (tilegpu/analysis/smem.py sizes it), and every element reads its
row's index there.
"""
from __future__ import annotations

from ..ir.core import Operation
from .emitter import KernelEmitter, lowers
from .lower_memory import VIEW_ACCESSORS, _and, _i64
from .values import GLOBAL_PTR, SHARED_PTR, GatherScatterView, Tile, llvm_type


@lowers("make_gather_scatter_view")
def _make_gather_scatter_view(em: KernelEmitter, op: Operation) -> None:
    em.set(op.result, GatherScatterView(op.result.type, em.get(op.operands["tensor_view"])))


def _sparse_index(em: KernelEmitter, op: Operation, rows: Tile):
    """The index tile made readable by every thread (through the access op's scratch): a function from a
    row (i32) to its index (i64)."""
    base = em.scratch_base(op)      # insert-barriers separated it from the ops before
    em.store_to_shared(rows, base)
    em.barrier()
    lt = rows.llvm

    def index_of(row: str) -> str:
        slot = em.shared_slot(row, rows.elem, base)
        return _i64(em, em.b.value(f"load {lt}, {SHARED_PTR} {slot}", "gi"), lt)
    return index_of


def gather_accessor(em: KernelEmitter, op: Operation, gv: GatherScatterView, index: list[Tile]):
    """(emitter, access op, view, index tiles) -> coords -> (address, in-bounds predicate), for lower_memory's
    loads and stores."""
    sd = gv.type.sparse_dim
    view = gv.view
    row_index = _sparse_index(em, op, index[sd])
    starts = [None if i == sd else _i64(em, t.regs[0], t.llvm) for i, t in enumerate(index)]
    elem_lt = llvm_type(view.type.elem)

    def access(coords: list[str]):
        offset = "0"
        inb = None
        for d, c in enumerate(coords):
            if d == sd:
                pos = row_index(c)
            else:
                pos = em.b.value(f"add i64 {starts[d]}, {em.b.value(f'zext i32 {c} to i64')}")
            inb = _and(em, inb, em.b.value(f"icmp ult i64 {pos}, {view.shape[d]}"))
            offset = em.b.value(f"add i64 {offset}, {em.b.value(f'mul i64 {pos}, {view.strides[d]}')}")
        lt = elem_lt if elem_lt != "i1" else "i8"
        return em.b.value(f"getelementptr {lt}, {GLOBAL_PTR} {view.base}, i64 {offset}", "ga"), inb
    return access


VIEW_ACCESSORS[GatherScatterView] = gather_accessor
