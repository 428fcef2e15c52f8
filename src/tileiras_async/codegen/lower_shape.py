"""Shape ops: one mechanism (write the source to shared memory, read each result element from where
it comes from) covers reshape, broadcast, extract, cat and insert; permute only relabels the layout."""
from __future__ import annotations

from typing import Callable

from ..ir import types as T
from ..ir.core import Operation
from .emitter import KernelEmitter, LoweringError, lowers
from ..tilegpu.types import layout_of
from .values import Tile


def _gather(em: KernelEmitter, src: Tile, res_ty: T.TileType, src_index: Callable[[list[str]], str]) -> Tile:
    layout = layout_of(res_ty)
    em.barrier()
    em.store_to_shared(src)
    em.barrier()
    return em.load_from_shared(res_ty, layout, src_index)


@lowers("reshape")
def _reshape(em: KernelEmitter, op: Operation) -> None:
    """Nothing moves: assign-layouts gave the result the source's placement over the new shape (a scalar
    result comes from a one-element tile every thread holds)."""
    src: Tile = em.get(op.operands["source"])
    ty: T.TileType = op.result.type
    layout = layout_of(ty)
    if src.is_scalar:
        em.set(op.result, em.broadcast_scalar(Tile(ty, None, src.regs), layout))
    elif layout is None:
        em.set(op.result, Tile(ty, None, [_held_everywhere(src)]))
    else:
        em.set(op.result, Tile(ty, layout, src.regs))


def _held_everywhere(t: Tile) -> str:
    if t.type.num_elements() != 1:
        raise LoweringError("internal: a reshape to a scalar from a tile of several elements")
    return t.regs[0]


@lowers("broadcast")
def _broadcast(em: KernelEmitter, op: Operation) -> None:
    """Nothing moves: the source arrives in the result's layout collapsed along the broadcast dimensions, so
    register r of the result is register r of the source."""
    src: Tile = em.get(op.operands["source"])
    ty: T.TileType = op.result.type
    if src.is_scalar:
        em.set(op.result, em.broadcast_scalar(Tile(ty, None, src.regs), layout_of(ty)))
    else:
        em.set(op.result, Tile(ty, layout_of(ty), src.regs))


@lowers("permute")
def _permute(em: KernelEmitter, op: Operation) -> None:
    src: Tile = em.get(op.operands["source"])
    ty: T.TileType = op.result.type
    # the same registers under the transposed layout (assign-layouts permuted it)
    em.set(op.result, Tile(ty, layout_of(ty), src.regs))


def _offset_coords(em: KernelEmitter, coords: list[str], starts: list[str]) -> list[str]:
    return [c if s == "0" else em.b.value(f"add i32 {c}, {s}") for c, s in zip(coords, starts)]


def _scaled_indices(em: KernelEmitter, op: Operation, name: str, shape) -> list[str]:
    out = []
    for v, extent in zip(op.operands[name], shape):
        t = em.get(v)
        i = t.regs[0]
        if t.llvm == "i64":
            i = em.b.value(f"trunc i64 {i} to i32")
        elif t.llvm != "i32":
            i = em.b.value(f"zext {t.llvm} {i} to i32")
        out.append(em.b.value(f"mul i32 {i}, {extent}"))
    return out


@lowers("extract")
def _extract(em: KernelEmitter, op: Operation) -> None:
    src: Tile = em.get(op.operands["source"])
    ty: T.TileType = op.result.type
    starts = _scaled_indices(em, op, "indices", ty.shape)
    em.set(op.result, _gather(em, src, ty,
                              lambda c: em.linear_index(_offset_coords(em, c, starts), src.type.shape)))


@lowers("cat")
def _cat(em: KernelEmitter, op: Operation) -> None:
    a: Tile = em.get(op.operands["lhs"])
    b: Tile = em.get(op.operands["rhs"])
    dim = op.attrs["dim"]
    ty: T.TileType = op.result.type
    shift = ["0"] * len(ty.shape)
    shift[dim] = str(a.type.shape[dim])
    layout = layout_of(ty)
    em.barrier()
    em.store_to_shared(a, dst_index=lambda c: em.linear_index(c, ty.shape), capacity=ty.num_elements())
    em.store_to_shared(b, dst_index=lambda c: em.linear_index(_offset_coords(em, c, shift), ty.shape),
                       capacity=ty.num_elements())
    em.barrier()
    em.set(op.result, em.load_from_shared(ty, layout, lambda c: em.linear_index(c, ty.shape)))


@lowers("insert")
def _insert(em: KernelEmitter, op: Operation) -> None:
    src: Tile = em.get(op.operands["source"])
    dst: Tile = em.get(op.operands["destination"])
    ty: T.TileType = op.result.type
    starts = _scaled_indices(em, op, "indices", src.type.shape)
    layout = layout_of(ty)
    em.barrier()
    em.store_to_shared(dst)
    em.barrier()
    em.store_to_shared(src, dst_index=lambda c: em.linear_index(_offset_coords(em, c, starts), ty.shape),
                       capacity=ty.num_elements())
    em.barrier()
    em.set(op.result, em.load_from_shared(ty, layout, lambda c: em.linear_index(c, ty.shape)))
