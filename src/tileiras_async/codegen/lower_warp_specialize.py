"""`tilegpu.warp_specialize`: the CTA split into a producer warpgroup, which runs the op's region and exits,
and the consumer warpgroup, which goes on with the rest of the kernel (tilegpu/passes/warp_specialized_loop.py
decided the split; this module spells it in PTX).

The producer lowers its registers first (`setmaxnreg.dec`, a warpgroup-wide instruction: every producer thread
runs it); then its first warp alone runs the region (the others exit: one thread issues the copies, a warp
waits), seeing thread indices from 0, so "thread 0" of what it lowers (the TMA copies' issuing
thread) is its first thread.  After the split every barrier is `barrier.sync 1, <consumer threads>`: the
producer threads have exited and never arrive at barrier 0.
"""
from __future__ import annotations

from ..ir.core import Operation
from .emitter import WARP_SIZE, KernelEmitter, lowers


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
    em.tid = em.b.value(f"sub i32 {em.tid}, {first}", "ptid")
    em.lane = em.b.value(f"and i32 {em.tid}, {WARP_SIZE - 1}", "lane")
    em.warp = em.b.value(f"lshr i32 {em.tid}, 5", "warp")
    em._thread_coords = {}
    region, idle = em.b.reserve_block("ws.region"), em.b.reserve_block("ws.idle")
    em.b.cond_br(em.b.value(f"icmp ult i32 {em.tid}, {WARP_SIZE}"), region, idle)
    em.b.start_block(idle)
    em.b.emit("ret void")
    em.b.start_block(region)
    em.emit_block(op.regions[0].block)
    em.b.emit("ret void")
    em.tid, em.lane, em.warp, em._thread_coords = saved
    em.b.start_block(consumer)
    em.consumer_barrier = (1, threads)

