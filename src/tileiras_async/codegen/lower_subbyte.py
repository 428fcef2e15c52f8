"""pack / unpack of 4-bit elements (cuTile's pack_to_bytes / unpack_from_bytes with e2m1 or i4).

A 4-bit element travels one per register, in the low bits; in memory two share a byte, the first in the low
nibble.  The source goes through the op's scratch (materialize-shared-memory gave it one; byte-wide
pack/unpack are plain local_store/local_load instead) and every result element picks its nibble or joins
its two there.
"""
from __future__ import annotations

from ..ir import types as T
from ..ir.core import Operation
from ..tilegpu.types import layout_of
from .emitter import KernelEmitter, lowers
from .values import SHARED_PTR, Tile, llvm_type


def _byte(em: KernelEmitter, base: int, index: str) -> str:
    return em.b.value(f"load i8, {SHARED_PTR} {em.shared_slot(index, T.I8, base)}")


def _nibbles_from_bytes(em: KernelEmitter, base: int, ty: T.TileType) -> Tile:
    """Element i of the (1-D) result is nibble i % 2 of byte i // 2."""
    layout = layout_of(ty)
    regs = []
    for r in range(layout.num_registers):
        i = em.coords(layout, r)[0]
        byte = _byte(em, base, em.b.value(f"lshr i32 {i}, 1"))
        odd = em.b.value(f"and i32 {i}, 1")
        shift = em.b.value(f"trunc i32 {em.b.value(f'shl i32 {odd}, 2')} to i8")
        nib = em.b.value(f"and i8 {em.b.value(f'lshr i8 {byte}, {shift}')}, 15")
        regs.append(nib if llvm_type(ty.elem) == "i8" else em.b.value(f"trunc i8 {nib} to {llvm_type(ty.elem)}"))
    return Tile(ty, layout, regs)


def _bytes_from_nibbles(em: KernelEmitter, base: int, ty: T.TileType) -> Tile:
    """Byte j of the (1-D) result joins elements 2j (low nibble) and 2j + 1 (high)."""
    layout = layout_of(ty)
    regs = []
    for r in range(layout.num_registers):
        lo_i = em.b.value(f"shl i32 {em.coords(layout, r)[0]}, 1")
        lo = _byte(em, base, lo_i)
        hi = _byte(em, base, em.b.value(f"or i32 {lo_i}, 1"))
        both = em.b.value(f"or i8 {em.b.value(f'and i8 {lo}, 15')}, {em.b.value(f'shl i8 {hi}, 4')}")
        regs.append(both if llvm_type(ty.elem) == "i8" else em.b.value(f"bitcast i8 {both} to {llvm_type(ty.elem)}"))
    return Tile(ty, layout, regs)


@lowers("pack", "unpack")
def _pack_unpack(em: KernelEmitter, op: Operation) -> None:
    src: Tile = em.get(op.operands["source"])
    ty: T.TileType = op.result.type
    base = em.scratch_base(op)      # insert-barriers separated it from the ops before
    em.store_to_shared(src, base)   # (a 4-bit source element takes a byte here)
    em.barrier()
    unpacking = getattr(ty.elem, "width", 8) < 8
    em.set(op.result, (_nibbles_from_bytes if unpacking else _bytes_from_nibbles)(em, base, ty))
