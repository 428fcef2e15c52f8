"""The warp-specialised form of a K-loop whose schedule gives its ops partitions (schedule-loops: wgmma and
tcgen05 loops whose A and B copies are TMA): the pipeline pass's expansion for such a loop.

The CTA gets a second warpgroup.  Before the split every thread runs what precedes the loop and the ring's
mbarriers are initialised (`tma_barriers` with `empty`: a "full" ring, one arrival per TMA operand plus the
bytes, and an "empty" ring, the consumer's releases).  `tilegpu.warp_specialize` then sends the producer
warpgroup's first thread into its region (its other threads exit): a loop over the same iterations that, for each
K chunk (unit u, slot u mod S), waits until the consumer released the slot's previous unit (`tma_wait` with
`empty`), then one thread expects the chunk's bytes on full[slot] and issues the boxes (`async_copy` with
`tma`); it runs up to the ring depth S ahead by itself, so there is no prologue.  The producer exits after its
loop.  The consumer warpgroup (threads
0 .. 127: the thread indices its layouts were assigned for) runs the loop as written with, per unit, a wait for
full[slot] (`tma_wait`), the mma (`mma_staged`) and the release of the slot (`tma_arrive`); then the rest of
the kernel, whose barriers count its threads alone.  A wgmma is waited for by every consumer thread, each of
which then arrives (an empty ring of CONSUMER_THREADS arrivals); a tcgen05 mma (sm_100) is not waited for:
the thread that issued it commits it to the slot's empty mbarrier (`committed` on the mma, `commit` on the
release; a ring of one arrival), so the slot frees itself when the mma has read it, and the accumulator's
release waits for all of them once, after the loop.  No `tma_release` ends it: the mbarriers have a shared
global of their own that nothing reuses, so they need no invalidation, nor the consumer a barrier for one.
"""
from __future__ import annotations

from ...bytecode.opspec import OPS_BY_NAME
from ...ir import types as T
from ...ir.core import Block, Operation, Region, Value
from ..decisions import PIPELINED, SCHEDULE_REPORT
from ..errors import LoweringError
from ..ops import LOCAL_ALLOC, MATERIALIZE, MMA_STAGED, TMA_ARRIVE, TMA_BARRIERS, TMA_WAIT, WARP_SPECIALIZE
from ..analysis.software_pipeline import copy_versions
from ..analysis.tcgen05 import Tcgen05Plan
from ..types import LayoutTile, SmemType, layout_of

CONSUMER_THREADS = 128      # one warpgroup: the threads the kernel's layouts spread its work over
PRODUCER_WARPGROUP = 1      # the consumer keeps warpgroup 0, so its thread indices are the layouts' own
_LOOP_ATTRS_NOT_COPIED = ("schedule", SCHEDULE_REPORT, PIPELINED)
I32 = LayoutTile((), T.I32, None)


class WarpSpecializedForm:
    """The warp-specialised expansion, mixed into the pipeline pass's K-loop expander (whose scalar helpers,
    copies and loop cloning it uses): what differs from the single-warpgroup form."""
    # a unit's slot is its ordinal mod the ring depth: both warpgroups count units, nothing else is carried
    carries_first_slot = False

    def expand(self) -> tuple[list[Operation], list[Value]]:
        report = self.cand.loop.attrs[SCHEDULE_REPORT]
        producer = next((p for p in report.partitions if p.name == "producer"), None)
        consumer = next((p for p in report.partitions if p.name == "consumer"), None)
        if producer is None or consumer is None or report.ring_depth != self.geom.stages:
            raise LoweringError("the K-loop's ops have partitions but its schedule report names no producer and "
                                f"consumer with a ring of {self.geom.stages} stage buffers")
        if len(self.tma) != 2:
            raise LoweringError("a warp-specialised K-loop's A and B copies are TMA copies: select-tensor-copies "
                                f"made {len(self.tma)} of them TMA")
        versions = copy_versions(self.cand, self.geom)
        if len(versions) != 1:
            raise LoweringError("a warp-specialised K-loop has one version (TMA copies need no alignment check)")
        out: list[Operation] = []
        ring_op = Operation(LOCAL_ALLOC, {}, {}, [SmemType(self.geom.ring_bytes)], loc=self.loc)
        if self.geom.align:
            ring_op.attrs["align"] = self.geom.align
        out.append(ring_op)
        ring = ring_op.result
        # the arrivals that release a slot: every consumer thread's, or the tcgen05 mma's completion (one)
        releases = 1 if self.mma_releases() else CONSUMER_THREADS
        bars = Operation(TMA_BARRIERS, {}, {"stages": self.geom.stages, "count": len(self.tma),
                                            "maps": [x.tma.map.param for x in self.tma], "empty": releases},
                         [I32], loc=self.loc)
        out.append(bars)
        self.barriers = bars.result
        region: list[Operation] = []
        self.producer_loop(region, ring, versions[0])
        out.append(Operation(WARP_SPECIALIZE, {}, {"producer_warpgroup": PRODUCER_WARPGROUP,
                                                   "producer_regs": producer.registers,
                                                   "consumer_regs": consumer.registers},
                             [], [Region([Block([], region)])], loc=self.loc))
        results = self.pipelined_loop(out, ring, versions[0])
        for op in out:
            if op.name == self.cand.loop.name:   # the consumer's loop: it waits on the producer, unrolling
                op.attrs["unroll"] = False       # only repeats the waits and the releases
        return out, results

    def remark(self) -> str:
        g = self.geom
        [version] = copy_versions(self.cand, g)     # one: expand() refused any other
        name = "+".join(f"{role}{vb}" for role, vb in sorted(version.items()))
        return (f"K-loop software-pipelined and warp-specialised: a producer warpgroup issues the TMA copies "
                f"into a ring of {g.stages} stage buffers, the consumer warpgroup runs the mma ({g.chunks} "
                f"K-chunk(s) of {g.kc} per iteration; versions: {name})")

    def producer_loop(self, out: list, ring: Value, vbs: dict) -> None:
        """The producer's loop over the K-loop's iterations: per unit, wait for its slot, then issue its copies."""
        loop = self.cand.loop
        c = self.geom.chunks
        body = Block([self.lb.type, I32])
        iv, issued = body.args
        for chunk in range(c):
            unit = issued if chunk == 0 else self.add(body.ops, issued, self.const(body.ops, chunk, T.I32))
            body.ops.append(Operation(TMA_WAIT, {"barriers": self.barriers, "unit": unit},
                                      {"stages": self.geom.stages, "empty": True}, loc=self.loc))
            self.copies(body.ops, iv, 0, chunk, ring, self.mod_stages(body.ops, unit), vbs, guard=False)
        nxt = self.add(body.ops, issued, self.const(body.ops, c, T.I32))
        body.ops.append(Operation(OPS_BY_NAME["continue"], {"operands": [nxt]}, {}, [], loc=self.loc))
        attrs = {n: v for n, v in loop.attrs.items() if n not in _LOOP_ATTRS_NOT_COPIED}
        attrs["unroll"] = False     # a copy of the waits and the issue per unrolled iteration buys nothing
        out.append(Operation(loop.spec, {"lowerBound": self.lb, "upperBound": self.ub, "step": self.step,
                                         "initValues": [self.const(out, 0, T.I32)]}, attrs, [I32],
                             [Region([body])], loc=self.loc))

    def prologue(self, out: list, ring: Value, vbs: dict) -> None:
        """None: the producer runs ahead of the consumer by itself, as far as the ring allows."""

    def loop_inits(self, out: list, inits: list[Value]) -> list[Value]:
        """A wgmma accumulator's initial value materialised in the consumer's registers (`materialize`):
        left a constant, LLVM folds the epilogue's conversion into the loop's zero-trip path and copies that
        constant into the converted registers in the block every consumer thread runs before the loop (128
        moves per thread for a 128x128 f16 result); materialised, the zero-trip path reuses the init's
        registers.  A tcgen05 accumulator stays in tensor memory (keep-accumulators-in-tensor-memory)."""
        if self.mma_releases():
            return inits
        held = []
        for v in inits:
            if layout_of(v.type) is None:
                held.append(v)
                continue
            op = Operation(MATERIALIZE, {"source": v}, {}, [v.type], loc=self.loc)
            out.append(op)
            held.append(op.result)
        return held

    def drain(self, out: list) -> None:
        """Nothing: the consumer waited for every unit's copies (no cp.async groups)."""

    def units(self, out: list, ring: Value, vbs: dict, iv: Value, bufj, acc: Value) -> Value:
        """The consumer's units of one iteration: wait for the slot's copies, the wgmma, release the slot."""
        g = self.geom
        for u in range(g.chunks):
            unit = self.consumed if u == 0 else self.add(out, self.consumed, self.const(out, u, T.I32))
            out.append(Operation(TMA_WAIT, {"barriers": self.barriers, "unit": unit}, {"stages": g.stages},
                                 loc=self.loc))
            operands = {"acc": acc, "buffer": ring}
            attrs = {"mma": self.cand.mma, "a": self.cand.a, "b": self.cand.b, "unit": u, "kc": g.kc,
                     "unit_bytes": g.unit_bytes}
            operands["slot"] = self.mod_stages(out, unit)
            release = {"stages": g.stages}
            if self.mma_releases():
                attrs["committed"] = release["commit"] = True
            mma = Operation(MMA_STAGED, operands, attrs, [acc.type], loc=self.cand.mma.loc)
            out.append(mma)
            acc = mma.result
            out.append(Operation(TMA_ARRIVE, {"barriers": self.barriers, "unit": unit}, release, loc=self.loc))
        return acc

    def mma_releases(self) -> bool:
        """Whether the mma itself releases each slot (tcgen05: one thread issues it and commits it to the
        slot's empty mbarrier, so the consumer neither waits for it nor arrives; wgmma: every consumer thread
        waits for its wgmma and arrives)."""
        return isinstance(self.cand.wgmma, Tcgen05Plan)
