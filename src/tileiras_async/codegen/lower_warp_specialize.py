"""`tilegpu.warp_specialize`: the CTA split into a producer warpgroup, which runs the op's region and exits,
and the consumer warpgroup, which goes on with the rest of the kernel (tilegpu/passes/warp_specialized_loop.py
decided the split; this module spells it in PTX).

The producer lowers its registers first (`setmaxnreg.dec`, a warpgroup-wide instruction: every producer thread
runs it); then its first thread alone runs the region (the others exit), lowered as one thread's code
(`single_thread`: its thread index is 0 and what "thread 0" does runs unpredicated, so ptxas issues each TMA
copy once instead of looping over the lanes that a thread-index predicate might leave active).  After the split every barrier is `barrier.sync 1, <consumer threads>`: the
producer threads have exited and never arrive at barrier 0.
"""
from __future__ import annotations

from ..ir.core import Operation
from .emitter import KernelEmitter, LoweringError, lowers
from .values import Tile

# an LLVM element type -> the inline-asm constraint and the move's PTX type
_MOVES = {"float": ("f", "b32"), "i32": ("r", "b32"), "half": ("h", "b16"), "bfloat": ("h", "b16"),
          "i16": ("h", "b16"), "double": ("d", "b64"), "i64": ("l", "b64")}


@lowers("tilegpu.warp_specialize")
def _warp_specialize(em: KernelEmitter, op: Operation) -> None:
    threads = em.num_threads                       # a warpgroup's: what the layouts spread work over
    first = op.attrs["producer_warpgroup"] * threads
    producer, consumer = em.b.reserve_block("ws.producer"), em.b.reserve_block("ws.consumer")
    group = em.b.value(f"udiv i32 {em.tid}, {threads}")
    em.b.cond_br(em.b.value(f"icmp eq i32 {group}, {op.attrs['producer_warpgroup']}"), producer, consumer)
    em.b.start_block(producer)
    em.b.asm("void", f"setmaxnreg.dec.sync.aligned.u32 {op.attrs['producer_regs']};", "~{memory}", [])
    saved = (em.tid, em.lane, em.warp, em._thread_coords)
    em._thread_coords = {}
    region, idle = em.b.reserve_block("ws.region"), em.b.reserve_block("ws.idle")
    em.b.cond_br(em.b.value(f"icmp eq i32 {em.tid}, {first}"), region, idle)
    em.b.start_block(idle)
    em.b.emit("ret void")
    em.b.start_block(region)
    em.tid = em.lane = em.warp = "0"
    em.single_thread = True
    em.emit_block(op.regions[0].block)
    em.single_thread = False
    em.b.emit("ret void")
    em.tid, em.lane, em.warp, em._thread_coords = saved
    em.b.start_block(consumer)
    em.consumer_barrier = (1, threads)



@lowers("tilegpu.materialize")
def _materialize(em: KernelEmitter, op: Operation) -> None:
    """One move per register, each an asm statement of its own (side effects: LLVM neither merges the moves
    nor folds their constant into the phis downstream)."""
    src = em.expect(op.operands["source"])
    move = _MOVES.get(src.llvm)
    if move is None:
        raise LoweringError(f"tilegpu.materialize of {src.llvm} elements: no register move for that type")
    con, ptx = move
    regs = [em.b.asm(src.llvm, f"mov.{ptx} $0, $1;", f"={con},{con}", [(src.llvm, r)]) for r in src.regs]
    em.set(op.result, Tile(op.result.type, src.layout, regs))
