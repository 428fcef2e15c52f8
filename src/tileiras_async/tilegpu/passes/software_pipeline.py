"""pipeline: expand every loop schedule-loops scheduled in stages: a K-loop into its prologue, steady state and drain
through a ring of shared-memory stage buffers, a prefetched loop through a ring of loop-carried registers.

Contract: in: IR after schedule-loops (a K-loop to pipeline carries `pipeline_plan`: candidate and geometry; the
ops of every loop it scheduled in stages carry `stage`/`order`).  out: each such loop replaced by explicit IR that
follows its schedule.  What the expansion takes from the schedule: how far ahead a load's copies run (the stage
distance from the load to its users: the mma, or the rest of a prefetched body), hence which copies the
prologue issues and which unit (iteration) each copy in the steady state serves, and the order of the new
body (by stage, then order: the copies of the earlier stage before the mma or the users of the later one,
among themselves in their order).  What it takes from the plan: the buffers and the chunks.

A K-loop: a ring of S shared-memory stage buffers (`local_alloc`; S from the plan), split into units of one K
chunk of A and B each; a schedule stage is one unit, so with the mma D = (mma stage - load stage) stages after
the loads, 1 <= D <= S-1 (schedule-loops schedules D = S-1): the copies of the first D units before the loop
(`tilegpu.async_copy` + `async_commit`, guarded by whether their iteration runs); in the loop, for each unit t of
the iteration: `async_wait` D-1, a barrier, the copies of the unit D ahead, `async_commit`, and
`tilegpu.mma_staged` reading unit t from its buffer (the loads and the reshape/ftof chains between them and the
mma are gone: the mma reads what the copies staged); after the loop, `async_wait` 0. Fewer waits and barriers
where they suffice: on tcgen05 two units share one (`pairs_units`: the even unit's wait, D-2, covers the odd
one's copies too), or a version whose copies are synchronous stores passes one per iteration
(`stores_before_barrier`: each unit stores first); elsewhere such a version stores two units after each even
unit's barrier, S-2 ahead (`stores_pairs`). The ring's accesses are ordered among themselves by those waits and
barriers; insert-barriers separates them from other accesses to the same bytes before and after the loop. The
load indices of a future iteration are computed by copies of the body's index arithmetic with the induction
variable advanced. Strides are run-time values, so the loop is emitted once per copy width the views may allow
(`tilegpu.views_aligned` picks the widest at run time): 16-byte vectors, 4-byte copies, one element at a time. A
group is committed even when nothing is issued, so the group arithmetic holds for trip counts 0, 1 and fewer
than S.

Operands select-tensor-copies gave `tma` are copied by TMA instead: one mbarrier per stage buffer
(`tilegpu.tma_barriers` before the prologue, `tma_release` after the loop where it runs again inside another
loop), their copies carry `tma` and the barriers (one elected thread expects the chunk's bytes on the slot's
mbarrier and issues the boxes), and before the barrier of each unit every thread waits for the unit's phase
(`tma_wait`; the loop carries the number of units consumed, whose quotient by S is the phase).  Where every
operand is a tensor copy that wgmma or tcgen05 reads (`tma_only`) there are no cp.async groups to commit or
wait for, and on tcgen05 no barrier per unit either (`unit_barrier`); where the others go through registers
(`transpose`: `synchronous`) there are none either, each unit's wait only its fence (`groupless`).  Where mma.sync or FMA reads such a ring
(in a loop that runs once), "empty" mbarriers release its buffers instead of a barrier per unit
(`mbarrier_releases`: each thread's `tma_arrive` after the unit's mma, a `tma_wait` with `empty` before the
copies that refill a buffer), and it has no cp.async groups either.

A K-loop whose ops the schedule put in partitions (a producer warpgroup for the TMA copies, a consumer one for
the mma: schedule-loops' warp specialisation) is expanded into the warp-specialised form instead
(passes/warp_specialized_loop.py).

An attention-shaped loop schedule-loops accepted (`attention_plan`: its mmas' B tiles land by TMA in a ring,
tilegpu.analysis.attention_pipeline) is expanded by passes/attention_loop.py: a ring slot per iteration in
flight, the tiles of the iterations the schedule runs ahead issued before the loop, each iteration issuing
those of the one `stages - 1` ahead after a barrier and waiting for its own on the slot's mbarrier.

A prefetched loop (no mma; its loads in a stage D before the rest of the body): the loads of iterations 0 .. D-1
before the loop, and in the body the loads (with copies of their index arithmetic) for iteration i + D first,
their tiles carried through D new loop-carried values each (the body reads the oldest), then the rest of the
body.  A remark says which loops were changed.
"""
from __future__ import annotations

from ...bytecode.opspec import OPS_BY_NAME
from ...ir import types as T
from ...ir.core import Block, Operation, Region, Value
from ...ir.enums import ComparisonPredicate, IntegerOverflow, Signedness
from ..ir import KernelIR, clone_op, parent_blocks, replace_values, walk_ops
from ..ops import (ASYNC_COMMIT, ASYNC_COPY, ASYNC_WAIT, BARRIER, CONVERT_STAGE, LOCAL_ALLOC, MMA_STAGED,
                   TMA_ARRIVE, TMA_BARRIERS, TMA_RELEASE, TMA_WAIT, VIEWS_ALIGNED)
from .. import scalars
from ..decisions import ATTENTION_PLAN, PIPELINE_PLAN, PIPELINED, SCHEDULE_REPORT, PipelinedLoop
from ..errors import LoweringError
from ..analysis.software_pipeline import (Candidate, Geometry, copy_versions, index_slice, load_registers,
                                           staged_conversions, transposed_copy)
from ..analysis.tcgen05 import Tcgen05Plan
from ..types import LayoutTile, SmemType
from .attention_loop import expand_attention_loops
from .warp_specialized_loop import WarpSpecializedForm

I1 = LayoutTile((), T.I1, None)
I32 = LayoutTile((), T.I32, None)


def run(k: KernelIR) -> None:
    plans = [op.attrs.pop(PIPELINE_PLAN) for op in list(walk_ops(k.fn.body)) if PIPELINE_PLAN in op.attrs]
    if plans:
        _expand_k_loops(k, plans)
    attention = [op.attrs.pop(ATTENTION_PLAN) for op in list(walk_ops(k.fn.body)) if ATTENTION_PLAN in op.attrs]
    if attention:
        expand_attention_loops(k, attention, _runs_again)
    loops = [op for op in walk_ops(k.fn.body) if op.name == "for" and not op.attrs.get(PIPELINED) and _staged(op)]
    for loop in reversed(loops):          # inner loops first: an outer loop's body is final when it is done
        _prefetch(k, loop)


def _expand_k_loops(k: KernelIR, plans: list) -> None:
    parent_block = parent_blocks(k.fn.body)
    for cand, geom in ((p.cand, p.geom) for p in plans):
        report = cand.loop.attrs[SCHEDULE_REPORT]
        block = parent_block[id(cand.loop)]
        i = next(j for j, o in enumerate(block.ops) if o is cand.loop)
        expander = _expander(k, cand, geom)
        new_ops, results = expander.expand()
        ring = new_ops[0]
        block.ops[i:i + 1] = new_ops
        replace_values(k.fn.body, {id(old): new for old, new in zip(cand.loop.results, results)})
        if isinstance(expander, WarpSpecializedForm):
            k.remark("passed", "pipelining", "LoopPipelined", expander.remark(), cand.loop)
        else:
            k.remark("passed", "pipelining", "LoopPipelined",
                     f"K-loop software-pipelined: {geom.stages} stages of cp.async copies into shared memory "
                     f"({geom.chunks} K-chunk(s) of {geom.kc} per iteration; versions: "
                     f"{', '.join(_version_name(v) for v in copy_versions(cand, geom))})", cand.loop)
        record = PipelinedLoop(cand, report, geom, ring)
        for op in Block(ops=new_ops).walk():
            if op.name == cand.loop.name and op.attrs.get(PIPELINED) is True:
                op.attrs[PIPELINED] = record


def _expander(k: KernelIR, cand: Candidate, geom: Geometry) -> "_Expander":
    """The expansion the schedule asks for: warp-specialised where it gave the loop's ops partitions."""
    if any("partition" in o.attrs for o in (cand.a.load, cand.b.load, cand.mma)):
        return _WarpSpecializedExpander(k, cand, geom)
    return _Expander(k, cand, geom)


def _version_name(vbs: dict) -> str:
    return "+".join(f"{role}{vb}" for role, vb in sorted(vbs.items()))


class _Expander:
    # the buffer of an iteration's first unit is carried through the loop where the chunks do not divide the ring
    carries_first_slot = True

    def __init__(self, k: KernelIR, cand: Candidate, geom: Geometry):
        self.k = k
        self.cand = cand
        self.geom = geom
        loop = cand.loop
        self.lb, self.ub, self.step = (loop.operands[n] for n in ("lowerBound", "upperBound", "step"))
        self.it = self.lb.type.elem                       # the induction variable's integer type
        self.unsigned = bool(loop.attrs.get("unsignedCmp"))
        self.loc = loop.loc
        self.tma = [x for x in (cand.a, cand.b) if x.tma is not None]
        self.barriers: Value | None = None      # the tma_barriers result
        self.ahead, self.copy_order = _k_loop_schedule(cand, geom)
        self.scheduled_ahead = self.ahead       # a version whose stores go in pairs runs them fewer units ahead
        self.synchronous = False                # the loop version being expanded copies nothing by cp.async
        self.stores_synchronously = False       # ... nor asynchronously at all (loads, then shared stores)

    # -- scalar arithmetic on uniform values ------------------------------------------------------------
    def _op(self, out: list, name: str, operands: dict, attrs: dict, ty) -> Value:
        return scalars.op(out, name, operands, attrs, ty, self.loc)

    def const(self, out: list, value: int, elem=None) -> Value:
        return scalars.const(out, value, elem or self.it, self.loc)

    def add(self, out: list, a: Value, b: Value) -> Value:
        return scalars.add(out, a, b, self.loc)

    def mul(self, out: list, a: Value, b: Value) -> Value:
        return scalars.mul(out, a, b, self.loc)

    def less(self, out: list, a: Value, b: Value) -> Value:
        sign = Signedness.unsigned if self.unsigned else Signedness.signed
        return self._op(out, "cmpi", {"lhs": a, "rhs": b}, {"comparison_predicate": ComparisonPredicate.less_than,
                                                             "signedness": sign}, I1)

    def iteration(self, out: list, iv: Value, d: int) -> Value:
        return scalars.iteration(out, iv, self.step, d, self.loc)

    def mod_stages(self, out: list, x: Value) -> Value:
        s = self.geom.stages
        if s & (s - 1) == 0:
            return self._op(out, "andi", {"lhs": x, "rhs": self.const(out, s - 1, T.I32)}, {}, x.type)
        return self._op(out, "remi", {"lhs": x, "rhs": self.const(out, s, T.I32)},
                        {"signedness": Signedness.signed}, x.type)

    # -- the copies of one unit ------------------------------------------------------------------------------
    def copies(self, out: list, iv: Value, d: int, chunk: int, ring: Value, slot, vbs: dict, guard: bool) -> None:
        """The copies of chunk `chunk` of iteration iv + d*step into `slot` (an int, or an (i32 value, offset)
        pair), inside an `if` on whether that iteration runs when `guard`."""
        target = self.iteration(out, iv, d)
        body: list[Operation] = []
        indices = self.indices(body, target)
        for x in self.copy_order:
            operands = {"view": x.load.operands["view"], "buffer": ring, "indices": indices[x.role]}
            attrs = {"role": x.role, "operand": x, "chunk": chunk, "kc": self.geom.kc, "vb": vbs[x.role],
                     "unit_bytes": self.geom.unit_bytes, "stages": self.geom.stages}
            _place_slot(slot, attrs, operands)
            if x.tma is not None:
                attrs["tma"] = x.tma
                operands["barriers"] = self.barriers
            elif transposed_copy(x, vbs[x.role]):
                attrs["transpose"] = True
            body.append(Operation(ASYNC_COPY, operands, attrs, loc=self.loc))
        if not guard:
            out.extend(body)
            return
        cond = self.less(out, target, self.ub)
        body.append(Operation(OPS_BY_NAME["yield"], {"operands": []}, {}, [], loc=self.loc))
        out.append(Operation(OPS_BY_NAME["if"], {"condition": cond}, {}, [],
                             [Region([Block([], body)]), Region([])], loc=self.loc))

    def indices(self, out: list, iv: Value) -> dict[str, list[Value]]:
        """The loads' index values for the iteration whose induction variable is `iv`: the body's index
        arithmetic copied with the induction variable replaced."""
        block = self.cand.loop.regions[0].block
        vmap = {id(block.args[0]): iv}
        for o in self.cand.slice_ops:
            copy = Operation(o.spec, {n: _mapped(v, vmap) for n, v in o.operands.items()}, dict(o.attrs),
                             [r.type for r in o.results], loc=o.loc)
            for old, new in zip(o.results, copy.results):
                vmap[id(old)] = new
            out.append(copy)
        return {x.role: [_mapped(v, vmap) for v in x.load.operands["index"]] for x in (self.cand.a, self.cand.b)}

    # -- the whole loop ---------------------------------------------------------------------------------
    def expand(self) -> tuple[list[Operation], list[Value]]:
        out: list[Operation] = []
        ring_op = Operation(LOCAL_ALLOC, {}, {}, [SmemType(self.geom.ring_bytes)], loc=self.loc)
        if self.geom.align:
            ring_op.attrs["align"] = self.geom.align   # codegen aligns the base at run time (wgmma)
        out.append(ring_op)
        ring = ring_op.result
        if self.tma:
            releases = {"empty": self.k.options.num_warps * 32} if self.mbarrier_releases else {}
            bars = Operation(TMA_BARRIERS, {}, {"stages": self.geom.stages, "count": len(self.tma),
                                                "maps": [x.tma.map.param for x in self.tma], **releases}, [I32],
                             loc=self.loc)
            out.append(bars)
            self.barriers = bars.result
        versions = copy_versions(self.cand, self.geom)
        results = self.versions(out, ring, versions)
        if self.tma and _runs_again(self.k, self.cand.loop):
            out.append(Operation(TMA_RELEASE, {"barriers": self.barriers}, {"stages": self.geom.stages},
                                 loc=self.loc))
        return out, results

    def versions(self, out: list, ring: Value, versions: list) -> list[Value]:
        """The loop for the first version whose views allow its copy widths; the last needs no check."""
        vbs = versions[0]
        if len(versions) == 1:
            return self.pipelined_loop(out, ring, vbs)
        cond = Operation(VIEWS_ALIGNED, {"view_a": self.cand.a.load.operands["view"],
                                         "view_b": self.cand.b.load.operands["view"]},
                         {"vb": vbs, "operands": (self.cand.a, self.cand.b), "kc": self.geom.kc}, [I1], loc=self.loc)
        out.append(cond)
        then_ops: list[Operation] = []
        then_res = self.pipelined_loop(then_ops, ring, vbs)
        then_ops.append(Operation(OPS_BY_NAME["yield"], {"operands": then_res}, {}, [], loc=self.loc))
        else_ops: list[Operation] = []
        else_res = self.versions(else_ops, ring, versions[1:])
        else_ops.append(Operation(OPS_BY_NAME["yield"], {"operands": else_res}, {}, [], loc=self.loc))
        ifop = Operation(OPS_BY_NAME["if"], {"condition": cond.result}, {}, [r.type for r in self.cand.loop.results],
                         [Region([Block([], then_ops)]), Region([Block([], else_ops)])], loc=self.loc)
        out.append(ifop)
        return list(ifop.results)

    def pipelined_loop(self, out: list, ring: Value, vbs: dict) -> list[Value]:
        g = self.geom
        s, c = g.stages, g.chunks
        self.synchronous = all(x.tma is not None or transposed_copy(x, vbs[x.role]) for x in (self.cand.a,
                                                                                                self.cand.b))
        self.stores_synchronously = all(x.tma is None and (vbs[x.role] < 4 or transposed_copy(x, vbs[x.role]))
                                        for x in (self.cand.a, self.cand.b))
        self.ahead = self.geom.stages - 2 if self.stores_pairs else self.scheduled_ahead
        self.prologue(out, ring, vbs)
        loop = self.cand.loop
        old = loop.regions[0].block
        dynamic = self.carries_first_slot and c % s != 0   # the buffer of an iteration's first unit moves
        # carried i32s: the buffer of the iteration's first unit (dynamic), the units consumed before it (TMA)
        extra = [I32] * (int(dynamic) + int(bool(self.tma)))
        body = Block([a.type for a in old.args] + extra)
        vmap = {id(a): b for a, b in zip(old.args, body.args)}
        iv = body.args[0]
        carried = body.args[len(old.args):]
        bufj = carried[0] if dynamic else None
        self.consumed = carried[-1] if self.tma else None
        dropped = {id(x.load) for x in (self.cand.a, self.cand.b)} | {id(o) for x in (self.cand.a, self.cand.b)
                                                                      for o in x.chain}
        for op in old.ops:
            if id(op) in dropped:
                continue
            if op is self.cand.mma:
                acc = _mapped(op.operands["acc"], vmap)
                acc = self.units(body.ops, ring, vbs, iv, bufj, acc)
                vmap[id(op.result)] = acc
                continue
            if op.name == "continue":
                vals = [_mapped(v, vmap) for v in op.operands["operands"]]
                if dynamic:
                    vals.append(self.mod_stages(body.ops, self.add(body.ops, bufj, self.const(body.ops, c, T.I32))))
                if self.tma:
                    vals.append(self.add(body.ops, self.consumed, self.const(body.ops, c, T.I32)))
                body.ops.append(Operation(op.spec, {"operands": vals}, dict(op.attrs), [], loc=op.loc))
                continue
            copy = clone_op(op, vmap)
            body.ops.append(copy)
        inits = self.loop_inits(out, [_mapped(v, {}) for v in loop.operands["initValues"]])
        inits += [self.const(out, 0, T.I32) for _ in extra]
        new = Operation(loop.spec, {"lowerBound": self.lb, "upperBound": self.ub, "step": self.step,
                                    "initValues": inits}, dict(loop.attrs),
                        [r.type for r in loop.results] + extra, [Region([body])], loop.loc)
        new.attrs["pipelined"] = True
        out.append(new)
        self.drain(out)
        return list(new.results[:len(loop.results)])

    def loop_inits(self, out: list, inits: list[Value]) -> list[Value]:
        """The pipelined loop's initial values: the K-loop's own."""
        return inits

    def drain(self, out: list) -> None:
        """After the loop: every copy group retired (none without cp.async copies)."""
        if not self.tma_only:
            out.append(Operation(ASYNC_WAIT, {}, {"pending": 0}, loc=self.loc))

    def prologue(self, out: list, ring: Value, vbs: dict) -> None:
        """The copies of the units the schedule runs ahead of the first mma, one commit group each.  Whole
        iterations ahead are a loop LLVM may not unroll when there are two or more (each unrolled copy block is
        a full set of address computations, per loop version); the units past them are unrolled."""
        g = self.geom
        s, c = g.stages, g.chunks
        full = self.ahead // c if self.ahead // c >= 2 else 0
        if full:
            ity = self.lb.type
            body = Block([ity])
            d = body.args[0]
            target = self.add(body.ops, self.lb, self.mul(body.ops, self.step, d))
            first = self.mul(body.ops, self.i32(body.ops, d), self.const(body.ops, c, T.I32)) if c > 1 else \
                self.i32(body.ops, d)
            for chunk in range(c):
                slot = first if chunk == 0 else self.add(body.ops, first, self.const(body.ops, chunk, T.I32))
                self.copies(body.ops, target, 0, chunk, ring, slot, vbs, guard=True)
                self.commit(body.ops)
            body.ops.append(Operation(OPS_BY_NAME["continue"], {"operands": []}, {}, [], loc=self.loc))
            bounds = {"lowerBound": self.const(out, 0), "upperBound": self.const(out, full),
                      "step": self.const(out, 1), "initValues": []}
            out.append(Operation(self.cand.loop.spec, bounds, {"unroll": False}, [], [Region([body])], self.loc))
        for u in range(full * c, self.ahead):
            d, chunk = divmod(u, c)
            self.copies(out, self.lb, d, chunk, ring, u % s, vbs, guard=True)
            self.commit(out)

    def i32(self, out: list, x: Value) -> Value:
        """x (a uniform integer of the loop's type) as the i32 a ring slot is."""
        if x.type.elem == T.I32:
            return x
        return self._op(out, "trunci", {"from": x}, {"overflow": IntegerOverflow.none}, LayoutTile((), T.I32, None))

    def units(self, out: list, ring: Value, vbs: dict, iv: Value, bufj: Value | None, acc: Value) -> Value:
        g = self.geom
        s, c = g.stages, g.chunks
        converted = self.converted_in_place
        early = self.stores_before_barrier
        # units published by one wait and barrier
        group = c if early else 2 if self.pairs_units or self.stores_pairs else 1
        unit = None
        for u in range(c):
            published = u % group != 0          # with the unit before it
            if early:
                self.refill(out, u, iv, ring, vbs, bufj, unit)
            if not self.tma_only and not published:
                attrs = {} if converted else self.wait_attrs()
                if self.synchronous:    # no group to wait for: the fence alone, where there is one
                    attrs = {**attrs, "groupless": True} if attrs else None
                if attrs is not None:
                    out.append(Operation(ASYNC_WAIT, {}, {"pending": max(0, self.ahead - group), **attrs},
                                         loc=self.loc))
            if self.tma:        # the unit's tensor copies landed (their mbarrier phase completed)
                unit = self.consumed if u == 0 else self.add(out, self.consumed, self.const(out, u, T.I32))
                out.append(Operation(TMA_WAIT, {"barriers": self.barriers, "unit": unit}, {"stages": s},
                                     loc=self.loc))
            unit_slot = self.slot(out, bufj, u)
            for i, x in enumerate(converted):     # each thread converts what it copied: its wait covers it
                attrs = {"role": x.role, "operand": x, "chunk": u, "kc": g.kc, "vb": vbs[x.role],
                         "unit_bytes": g.unit_bytes, "stages": s, **(self.wait_attrs() if i == len(converted) - 1
                                                                       else {})}
                operands = {"buffer": ring}
                _place_slot(unit_slot, attrs, operands)
                out.append(Operation(CONVERT_STAGE, operands, attrs, loc=self.loc))
            if self.unit_barrier and not published:
                out.append(Operation(BARRIER, loc=self.loc))  # unit u landed; every warp is done with u - 1
            if not early:
                self.refill(out, u, iv, ring, vbs, bufj, unit)
            operands = {"acc": acc, "buffer": ring}
            attrs = {"mma": self.cand.mma, "a": self.cand.a, "b": self.cand.b, "unit": u, "kc": g.kc,
                     "unit_bytes": g.unit_bytes}
            _place_slot(unit_slot, attrs, operands)
            mma = Operation(MMA_STAGED, operands, attrs, [acc.type], loc=self.cand.mma.loc)
            out.append(mma)
            acc = mma.result
            if self.mbarrier_releases:  # this thread's reads of the unit fenced for the async proxy, released
                out.append(Operation(TMA_ARRIVE, {"barriers": self.barriers, "unit": unit},
                                     {"stages": s, "fence_reads": True}, loc=self.loc))
        return acc

    def refill(self, out: list, u: int, iv: Value, ring: Value, vbs: dict, bufj: Value | None, unit) -> None:
        """Unit u's copies of the units ahead (`refills`), one commit group each (the copies: an earlier stage
        than the mma, a later one)."""
        c = self.geom.chunks
        for ahead in self.refills(u):
            d, chunk = divmod(ahead, c)
            if self.mbarrier_releases:  # the unit S before the one the copies refill its buffer with is released
                refill = self.add(out, unit, self.const(out, self.ahead, T.I32))
                out.append(Operation(TMA_WAIT, {"barriers": self.barriers, "unit": refill},
                                     {"stages": self.geom.stages, "empty": True}, loc=self.loc))
            self.copies(out, iv, d, chunk, ring, self.slot(out, bufj, ahead), vbs, guard=d > 0)
            self.commit(out)

    # -- the ring's order when every operand lands by TMA ---------------------------------------------------
    @property
    def tma_only(self) -> bool:
        """Every operand lands by TMA and a tensor core reads it through the async proxy (wgmma, tcgen05): no
        cp.async groups to commit or wait for (the copies' mbarrier orders their landing before the reads).
        An mma.sync / FMA loop's fragment reads are the generic proxy's: its unit's `async_wait` keeps the
        fence.proxy.async that orders them before the tensor copies that overwrite the buffer."""
        return len(self.tma) == 2 and (self.cand.wgmma is not None or self.mbarrier_releases)

    @property
    def mbarrier_releases(self) -> bool:
        """Whether an "empty" mbarrier per stage buffer releases it instead of a CTA barrier per unit: where every
        operand lands by TMA and mma.sync or FMA reads it (the generic proxy's reads) in a loop that runs once
        (its mbarriers initialised once).  Each thread fences its reads of a unit for the async proxy and
        arrives on the buffer's empty mbarrier (every thread's arrival a phase) after the unit's mma; before
        the copies that refill a buffer the threads wait for the release of its previous unit (NVIDIA's
        warp-specialised code releases these rings the same way): the buffers' only synchronisation, so
        no cp.async group either (`tma_only`) and no CTA barrier in the loop."""
        return (len(self.tma) == 2 and self.cand.wgmma is None and not _runs_again(self.k, self.cand.loop)
                and not self.converted_in_place)

    @property
    def unit_barrier(self) -> bool:
        """Whether each unit needs a CTA barrier: for what cp.async copies landed, and before a refill, for every
        warp to be done reading the buffer -- except with TMA copies read by tcgen05, where every thread (the
        issuing one included) already waited for the unit's mma to complete before the next unit.  (With
        wgmma, mbarrier releases -- each thread arriving once its wgmma completed, every thread waiting for
        them before the refill -- cost more than the barrier they replace in one warpgroup: on the launch set
        matmul_f16_f16out_128x128x64 827 vs 751 static SASS instructions, 1.68 vs 1.61 x NVIDIA's executed.)"""
        return not (self.tma_only and isinstance(self.cand.wgmma, Tcgen05Plan) or self.mbarrier_releases)

    @property
    def converted_in_place(self) -> list:
        """The operands whose landed chunks are converted in place (`converted_in_place`): a wait and barrier
        of their own per unit, so no unit is published with another."""
        return [x for x in (self.cand.a, self.cand.b) if converted_in_place(x)]

    @property
    def pairs_units(self) -> bool:
        """Whether one wait and one barrier publish two units (the even one and the next), halving the loop's
        CTA barriers: where each thread's copies of both have been issued by then (the copies run at least
        two units ahead) and the barrier is not needed for the buffer a unit's copies refill: on tcgen05 one
        mma reads the whole buffer and every thread waits for its commit before the next unit.  (Not on
        wgmma: there each thread's wgmma.wait_group orders its warpgroup's reads, which the race checker does
        not take for an order between threads.)  cp.async or register copies only (TMA copies have their
        mbarriers) and no chunk converted in place (its conversion comes after its own wait).  The odd unit's
        copies are then waited for one unit earlier: they have the copies of D-1 units to land behind, not D
        (unhinted sm_100: matmul_f16_f16out_128x128x64 12 -> 8 CTA barriers, matmul_bf16_64x64x64 6 -> 4)."""
        return (isinstance(self.cand.wgmma, Tcgen05Plan) and not self.tma and self.geom.chunks % 2 == 0
                and self.ahead >= 2
                and not self.converted_in_place)

    @property
    def stores_before_barrier(self) -> bool:
        """Whether a version whose copies are synchronous stores, on tcgen05, passes one barrier per iteration
        (at unit 0): each unit stores the unit S-1 ahead before anything else, so the stores of every unit of
        the next C come before that barrier (they run S-1 >= C-1 units ahead), and the buffer a unit refills
        was read by an mma whose commit every thread waited for.  Unhinted matmul_f16_f16out_128x128x64 on
        sm_100: the fallback version's 2 CTA barriers -> 1."""
        return (self.stores_synchronously and isinstance(self.cand.wgmma, Tcgen05Plan)
                and self.geom.chunks > 1 and self.ahead >= self.geom.chunks - 1
                and not self.converted_in_place)

    @property
    def stores_pairs(self) -> bool:
        """Whether a version whose copies are synchronous (loads into registers, then shared stores: 8/16-bit
        elements one at a time, or transposed) stores two units after one barrier and passes none at the odd
        units, halving its CTA barriers: after the barrier of even unit u it stores units u+S-2 and u+S-1,
        into the buffers of units u-2 and u-1 (read before that barrier), so units u and u+1 were stored
        before it.  The copies then run S-2 units ahead, not S-1: no loss where each thread's stores wait for
        its loads anyway.  Needs S >= 4 (u+1 stored before u's barrier), an even number of units per
        iteration, and the barrier for the refilled buffers (not tcgen05: `pairs_units` there).  Unhinted
        matmul_f16_f16out_128x128x64 on sm_80 and sm_90: 8 -> 6 CTA barriers (the fallback version's 4 -> 2)."""
        return (self.stores_synchronously and not isinstance(self.cand.wgmma, Tcgen05Plan)
                and self.geom.stages >= 4 and self.geom.chunks % 2 == 0 and self.scheduled_ahead >= 2
                and not self.converted_in_place)

    def refills(self, u: int) -> list[int]:
        """The units whose copies unit u issues (after its barrier, if it has one): the one `ahead` units on,
        or with `stores_pairs` two at an even unit and none at an odd one."""
        if not self.stores_pairs:
            return [u + self.ahead]
        return [u + self.ahead, u + self.ahead + 1] if u % 2 == 0 else []

    def commit(self, out: list) -> None:
        """Close a unit's cp.async group (none without cp.async copies: every operand by TMA, or by TMA and
        loads into registers -- a wgmma's tf32 B transposed -- matmul_tf32_64x64x32 on sm_90 as cuTile
        launches it, whose empty groups' commits and waits were 2.6% of its executed instructions)."""
        if not (self.tma_only or self.synchronous):
            out.append(Operation(ASYNC_COMMIT, loc=self.loc))

    def wait_attrs(self) -> dict:
        """A wgmma reads the stage buffers through the async proxy: each thread's landed copies are fenced
        for it before the barrier that publishes them.  Tensor copies write them through it: each thread's
        reads of the buffer a copy after the barrier overwrites are fenced before it too."""
        return {"fence_proxy_async": True} if self.cand.wgmma is not None or self.tma else {}

    def slot(self, out: list, bufj: Value | None, u: int):
        """The buffer of unit u of this iteration (past the iteration's end for copies ahead)."""
        if bufj is None:
            return u % self.geom.stages
        x = bufj if u == 0 else self.add(out, bufj, self.const(out, u, T.I32))
        return self.mod_stages(out, x)


def _runs_again(k: KernelIR, loop: Operation) -> bool:
    """Whether a loop sits in another loop, so that its TMA mbarriers are initialised again: only then are they
    invalidated after it (and a barrier waits for every thread's last wait first).  At the kernel's end valid
    mbarriers are no harm (NVIDIA's TMA kernels never invalidate theirs)."""
    return any(o is not loop and o.name in ("for", "loop") and any(x is loop for x in walk_ops(o.regions[0].block))
               for o in walk_ops(k.fn.body))


class _WarpSpecializedExpander(WarpSpecializedForm, _Expander):
    """A K-loop whose schedule gives its ops partitions (passes/warp_specialized_loop.py)."""


def _k_loop_schedule(cand: Candidate, geom: Geometry) -> tuple[int, list]:
    """(units the copies run ahead of the mma, the operands in the order their copies are issued), from the
    `stage`/`order` schedule-loops gave the loads and the mma."""
    loads = [x.load for x in (cand.a, cand.b)]
    if any("stage" not in o.attrs for o in (*loads, cand.mma)):
        raise LoweringError("the K-loop's loads and mma have no stage: schedule-loops places them")
    stage_a, stage_b = (o.attrs["stage"] for o in loads)
    if stage_a != stage_b:
        raise LoweringError(f"the schedule puts the A and B loads in stages {stage_a} and {stage_b}: a unit's "
                            f"copies are one commit group")
    ahead = cand.mma.attrs["stage"] - stage_a
    if not 1 <= ahead < geom.stages:
        raise LoweringError(f"the schedule runs the mma {ahead} stage(s) after its loads: a ring of "
                            f"{geom.stages} buffers serves 1 to {geom.stages - 1}")
    return ahead, sorted((cand.a, cand.b), key=lambda x: x.load.attrs.get("order", 0))


def _staged(loop: Operation) -> bool:
    """Whether schedule-loops put the loop's body in more than one stage."""
    stages = {o.attrs["stage"] for o in loop.regions[0].block.ops if "stage" in o.attrs}
    return len(stages) > 1


def _prefetch(k: KernelIR, loop: Operation) -> None:
    """Expand a prefetched loop (module docstring): the loads of its earlier stage run ahead of the rest."""
    body = loop.regions[0].block
    ops = _in_schedule_order(body.ops[:-1])
    last = max(o.attrs["stage"] for o in ops if "stage" in o.attrs)
    loads = [o for o in ops if o.attrs.get("stage", last) < last]
    if any(o.name != "load_view_tko" for o in loads):
        raise LoweringError(f"the schedule runs '{next(o.name for o in loads if o.name != 'load_view_tko')}' "
                            f"ahead of the loop body: only tile loads are prefetched")
    distances = {last - o.attrs["stage"] for o in loads}
    if len(distances) != 1:
        raise LoweringError(f"the schedule puts the prefetched loads {sorted(distances)} stages ahead: one "
                            f"distance per loop")
    distance = distances.pop()
    top = {id(o) for o in body.ops}
    slices: dict[int, Operation] = {}
    if not all(index_slice(i, body, top, slices) for ld in loads for i in ld.operands["index"]):
        raise LoweringError("a prefetched load's tile index depends on values the loop computes")
    slice_ops = [o for o in body.ops if id(o) in slices]
    lb, step = loop.operands["lowerBound"], loop.operands["step"]
    iv = body.args[0]
    parent = parent_blocks(k.fn.body)[id(loop)]
    at = next(i for i, o in enumerate(parent.ops) if o is loop)
    before: list[Operation] = []
    ahead = [_issue(before, loads, slice_ops, iv, lb, step, d, loop.loc) for d in range(distance)]
    parent.ops[at:at] = before
    # the body: the loads for iteration i + distance first, the carried tiles in place of the loads
    top_ops: list[Operation] = []
    nxt = _issue(top_ops, loads, slice_ops, iv, iv, step, distance, loop.loc)
    carried = []
    for j, ld in enumerate(loads):
        ty = ld.results[0].type
        args = []
        for d in range(distance):
            a = Value(ty, body, len(body.args))
            body.args.append(a)
            args.append(a)
            loop.operands["initValues"] = list(loop.operands["initValues"]) + [ahead[d][j]]
            loop.results.append(Value(ty, loop, len(loop.results)))
        carried.append(args)
    gone = {id(ld) for ld in loads}
    term = body.ops[-1]
    body.ops = top_ops + [o for o in ops if id(o) not in gone] + [term]
    replace_values(body, {id(ld.results[0]): args[0] for ld, args in zip(loads, carried)})
    term.operands["operands"] = list(term.operands["operands"]) + [
        v for args, new in zip(carried, nxt) for v in args[1:] + [new]]
    regs = sum(load_registers(ld) for ld in loads)
    k.remark("passed", "pipelining", "LoadsPrefetched",
             f"loop loads issued {distance} iterations ahead ({len(loads)} tile load(s), "
             f"{regs * distance} register(s) per thread in flight)", loop)


def _in_schedule_order(ops: list[Operation]) -> list[Operation]:
    """`ops` by (stage, order); an op the schedule does not place stays right after the op before it."""
    keys, key = [], (-1, -1)
    for o in ops:
        if "stage" in o.attrs:
            key = (o.attrs["stage"], o.attrs.get("order", 0))
        keys.append(key)
    return [o for _, _, o in sorted(zip(keys, range(len(ops)), ops), key=lambda t: t[:2])]


def _issue(out: list, loads: list[Operation], slices: list[Operation], iv: Value, base: Value, step: Value,
           d: int, loc) -> list[Value]:
    """Copies of the index ops and the loads for iteration base + d * step (appended to `out`); the tiles."""
    vmap = {id(iv): scalars.iteration(out, base, step, d, loc)}
    out += [clone_op(o, vmap) for o in slices]
    copies = [clone_op(ld, vmap) for ld in loads]
    for c in copies:        # the schedule is spent: a copy is where it runs
        c.attrs.pop("stage", None)
        c.attrs.pop("order", None)
    out += copies
    return [c.results[0] for c in copies]


def _place_slot(slot, attrs: dict, operands: dict) -> None:
    """A stage buffer known at compile time is an attribute, one chosen at run time an i32 operand."""
    if isinstance(slot, int):
        attrs["slot"] = slot
    else:
        operands["slot"] = slot


def converted_in_place(x) -> bool:
    """A wgmma operand with a conversion between its load and the mma that the tensor core does not do itself
    (tilegpu.analysis.software_pipeline.staged_conversions): wgmma reads shared memory as it is, so the landed chunk is
    converted in place before the barrier that publishes it (the copies stay asynchronous)."""
    return x.smem is not None and bool(staged_conversions(x))


def _mapped(v, vmap: dict):
    if isinstance(v, Value):
        return vmap.get(id(v), v)
    if isinstance(v, list):
        return [vmap.get(id(x), x) for x in v]
    return v
