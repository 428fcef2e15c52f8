"""Shape ops and shared memory: reshape, broadcast and permute relabel registers (assign-layouts chose
layouts for which nothing moves); `tilegpu.local_store` / `local_load` move tiles through the buffers
materialize-shared-memory made (layout changes, extract, cat, insert, pack, unpack) at the offsets
allocate-shared-memory chose, and `tilegpu.barrier` is where insert-barriers put one."""
from __future__ import annotations


from ..ir import types as T
from ..ir.core import Operation
from .emitter import KernelEmitter, LoweringError, lowers
from ..tilegpu.types import layout_of
from .values import Tile


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


@lowers("extract")
def _extract(em: KernelEmitter, op: Operation) -> None:
    """An extract left in the IR selects registers (materialize-shared-memory staged every other one)."""
    from ..tilegpu.analysis.smem import selected_registers
    regs = selected_registers(op)
    if regs is None:
        raise LoweringError("an extract that is not a register selection reached code generation", op)
    src = em.expect(op.operands["source"])
    em.set(op.result, Tile(op.result.type, layout_of(op.result.type), [src.regs[r] for r in regs]))


@lowers("permute")
def _permute(em: KernelEmitter, op: Operation) -> None:
    src: Tile = em.get(op.operands["source"])
    ty: T.TileType = op.result.type
    # the same registers under the transposed layout (assign-layouts permuted it)
    em.set(op.result, Tile(ty, layout_of(ty), src.regs))


def _offset_coords(em: KernelEmitter, coords: list[str], starts: list[str]) -> list[str]:
    return [c if s == "0" else em.b.value(f"add i32 {c}, {s}") for c, s in zip(coords, starts)]


def _starts(em: KernelEmitter, op: Operation) -> list[str]:
    """Per dimension, the element offset a local_store/local_load adds: the static `shift` plus the
    dynamic offsets times `scale`."""
    shape = op.attrs["shape"]
    shift = op.attrs.get("shift", (0,) * len(shape))
    starts = [str(x) for x in shift]
    offsets = op.operands.get("offsets") or []
    for d, (v, extent) in enumerate(zip(offsets, op.attrs.get("scale", ()))):
        t = em.get(v)
        i = t.regs[0]
        if t.llvm == "i64":
            i = em.b.value(f"trunc i64 {i} to i32")
        elif t.llvm != "i32":
            i = em.b.value(f"zext {t.llvm} {i} to i32")
        scaled = em.b.value(f"mul i32 {i}, {extent}")
        starts[d] = scaled if starts[d] == "0" else em.b.value(f"add i32 {scaled}, {starts[d]}")
    return starts


def _buffer_base(em: KernelEmitter, op: Operation) -> int:
    return op.operands["buffer"].owner.attrs["offset"]


@lowers("tilegpu.local_alloc")
def _local_alloc(em: KernelEmitter, op: Operation) -> None:
    em.reserve_shared(op.attrs["offset"] + op.result.type.nbytes)
    em.set(op.result, None)


@lowers("tilegpu.local_store")
def _local_store(em: KernelEmitter, op: Operation) -> None:
    t: Tile = em.get(op.operands["value"])
    shape = op.attrs["shape"]
    starts = _starts(em, op)
    count = 1
    for d in shape:
        count *= d
    em.store_to_shared(t, _buffer_base(em, op),
                       dst_index=lambda c: em.linear_index(_offset_coords(em, c, starts), shape), capacity=count)


@lowers("tilegpu.local_load")
def _local_load(em: KernelEmitter, op: Operation) -> None:
    ty: T.TileType = op.result.type
    shape = op.attrs["shape"]
    starts = _starts(em, op)
    em.set(op.result, em.load_from_shared(ty, layout_of(ty), lambda c: em.linear_index(
        _offset_coords(em, c, starts) if c else starts, shape), _buffer_base(em, op)))


@lowers("tilegpu.barrier")
def _barrier(em: KernelEmitter, op: Operation) -> None:
    em.barrier()
