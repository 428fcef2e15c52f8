"""The pipeline pass's expansion of an attention-shaped loop (schedule-loops' `attention_plan`:
tilegpu.analysis.attention_pipeline): its mmas' B tiles land by TMA in a ring of slots, `ahead` iterations
before the mmas read them.

    a = local_alloc; Q -> a                       a loop-invariant A (Q), once (loops share it): a tensor
                                                  copy on an mbarrier of its own (Landed.a_tma; its load
                                                  goes), else a stage_operand
    ring = local_alloc (stages slots, aligned at run time)
    bars = tma_barriers                           per slot a "full" mbarrier (the copies' bytes) and an
                                                  "empty" one (every thread's release; wgmma only); its CTA barrier
                                                  publishes `a` too
    for d in 0 .. ahead-1: if lb + d*step < ub: async_copy (tma) of every landed tile of iteration d -> slot d
    tma_wait (Q's mbarrier)                       Q landed
    materialize O's init                          (the zero-trip path then copies nothing)
    for iv ... iter (..., %consumed = 0):
        tma_wait empty bars, %consumed + ahead    that slot was released for its previous unit (wgmma only)
        if iv + ahead*step < ub: async_copy ...   iteration i+ahead's tiles -> slot (consumed + ahead) % stages
        tma_wait bars, %consumed                  iteration i's tiles landed
        ... the body, each landed load (and its reshapes) gone, each of its mmas a `tilegpu.mma_landed`
            reading B from slot consumed % stages, A from `a`, from its registers (P) or its scratch ...
        tma_arrive bars, %consumed                (after the last mma) every thread releases the slot (wgmma)
        continue ..., %consumed + 1

A slot is refilled once every thread released it: each thread's mmas completed their reads of it (it waited
for its wgmma group) before it arrives, and every thread waits for the phase of those arrivals before the
copies are issued -- no CTA barrier in the loop.  Where every mma of the loop runs on tcgen05 the slot needs
no release (`_reads_done_at_commit`): no "empty" mbarriers, arrivals nor waits for them.  The loop's ops lose the
`stage`/`order` the schedule gave them (the expansion is where they run).
"""
from __future__ import annotations

import dataclasses

from ...bytecode.opspec import OPS_BY_NAME
from ...ir import types as T
from ...ir.core import Block, Operation, Region, Value
from ...ir.enums import ComparisonPredicate, Signedness
from .. import scalars
from ..analysis.attention_pipeline import AttentionPlan, landed_scratch_bytes, numbered
from ..analysis.tcgen05 import Tcgen05Plan
from ..analysis.tensor_maps import param_layout, tile_copy_maps
from ..decisions import ATTENTION_PLAN, PIPELINE_PLAN, PIPELINED
from ..ir import KernelIR, clone_op, parent_blocks, replace_values, walk_ops, zero_constant
from ..ops import (ASYNC_COPY, LOCAL_ALLOC, MATERIALIZE, MMA_LANDED, STAGE_OPERAND, TMA_ARRIVE, TMA_BARRIERS, TMA_RELEASE,
                   TMA_WAIT)
from ..types import LayoutTile, SmemType

I1 = LayoutTile((), T.I1, None)
I32 = LayoutTile((), T.I32, None)


def expand_attention_loops(k: KernelIR, plans: list[AttentionPlan], runs_again) -> None:
    """Expand each planned loop in place; their maps numbered after the kernel's other maps (`_number_maps`)."""
    _number_maps(k, plans)
    staged: dict = {}   # (id(value), A layout) -> the buffer a stage_operand filled (loops share it)
    where = parent_blocks(k.fn.body)
    last = None         # the previous loop's _Ring
    for plan in plans:
        block = where[id(plan.loop)]
        expansion = _Expansion(plan, k.options.num_threads)
        new_ops = _hoisted_a(plan, expansion, staged)
        release = runs_again(k, plan.loop)
        shared = last if last is not None and last.shares_with(block, plan, release) else None
        more, results = expansion.build(release, shared.ring if shared else None)
        if shared:
            # initialised with the first ring's mbarriers, published by their CTA barrier
            block.ops.insert(block.ops.index(shared.bars), more.pop(0))
        at = next(i for i, o in enumerate(block.ops) if o is plan.loop)
        new_ops += more
        block.ops[at:at + 1] = new_ops
        last = shared or _Ring(block, expansion.ring, expansion.bars.owner, plan, release)
        replace_values(k.fn.body, {id(old): new for old, new in zip(plan.loop.results, results)})
        k.remark("passed", "pipelining", "LoopPipelined",
                 f"attention-shaped loop pipelined: {len(plan.landed)} B tile(s) land by TMA in a ring of "
                 f"{plan.stages} slots, {plan.ahead} iteration(s) ahead of their mmas", plan.loop)
    _drop_unused_loads(k, [ld.a_tma for plan in plans for ld in plan.landed if ld.a_tma is not None])


def _number_maps(k: KernelIR, plans: list[AttentionPlan]) -> None:
    """One map per array and box (loops of one array share it), numbered after the kernel's other maps in the
    order of the arrays' parameters (Q, K, V: NVIDIA's tool numbers its maps so)."""
    xs = [x for plan in plans for ld in plan.landed for x in (ld.x, ld.a_tma) if x is not None]
    first = len(param_layout(k.fn.type.inputs)) + _maps_before(k)
    described = sorted(dict.fromkeys(numbered(x.tma, 0).map for x in xs), key=lambda m: (m.base, m.box))
    params = {m: first + i for i, m in enumerate(described)}
    for x in xs:
        x.tma = numbered(x.tma, params[numbered(x.tma, 0).map])


def _drop_unused_loads(k: KernelIR, landed: list) -> None:
    """The loads (and their reshapes) of the A operands that landed by TMA, once nothing reads their
    registers any more (every mma that did reads the buffer now)."""
    where = parent_blocks(k.fn.body)
    for x in {id(x.load): x for x in landed}.values():
        ops = list(reversed(x.chain)) + [x.load]     # users first
        for op in ops:
            if any(v is r for o in walk_ops(k.fn.body) for v in o.operand_values() for r in op.results):
                return
            block = where[id(op)]
            block.ops = [o for o in block.ops if o is not op]


def _hoisted_a(plan: AttentionPlan, expansion: "_Expansion", staged: dict) -> list[Operation]:
    """The buffers and `stage_operand`s of the plan's hoisted A operands (before the loop; one a value and
    layout, whichever loop stages it first), each recorded in `expansion.a_buffers`."""
    out = []
    for ld in plan.landed:
        if ld.a_source != "hoisted":
            continue
        value = ld.mma.operands["lhs"]
        key = (id(value), ld.plan.a_smem)
        if key not in staged:
            alloc = Operation(LOCAL_ALLOC, {}, {"align": ld.plan.align}, [SmemType(landed_scratch_bytes(ld.plan))],
                              loc=ld.mma.loc)
            out.append(alloc)
            if ld.a_tma is None:
                out.append(Operation(STAGE_OPERAND, {"value": value, "buffer": alloc.result},
                                     {"mma": ld.mma, "role": "a", "mma_plan": ld.plan}, loc=ld.mma.loc))
            else:
                out += expansion.land_a(ld, alloc.result)
            staged[key] = alloc.result
        expansion.a_buffers[id(ld.mma)] = staged[key]
    return out


def _maps_before(k: KernelIR) -> int:
    """The maps select-tensor-copies gave the K-loops' operands and the tile loads' (numbered first)."""
    cands = [op.attrs[PIPELINE_PLAN].cand for op in walk_ops(k.fn.body) if PIPELINE_PLAN in op.attrs]
    return sum(x.tma is not None for c in cands for x in (c.a, c.b)) + len(tile_copy_maps(k.fn.body))


def _tcgen05(plan: AttentionPlan) -> bool:
    return all(isinstance(ld.plan, Tcgen05Plan) for ld in plan.landed)


@dataclasses.dataclass
class _Ring:
    """An expanded loop's ring (its buffer and the `tma_barriers` that publishes its mbarriers)."""
    block: Block
    ring: Value
    bars: Operation
    plan: AttentionPlan
    release: bool

    def shares_with(self, block: Block, plan: AttentionPlan, release: bool) -> bool:
        """A later tcgen05 loop of the same block with a ring of the same geometry (the causal kernel's masked
        loop after its unmasked one) fills this ring's buffer again, on mbarriers of its own initialised with
        this ring's, before their CTA barrier: between the loops no CTA barrier is needed, as every thread
        (the lane of warp 0 that issues the next copies too) waited for the commit of the first loop's last
        mmas, whose completion covers every read of the slots by the earlier ones (one thread issued them
        all).  Not where either loop runs again (its mbarriers are invalidated and initialised each time)."""
        return (block is self.block and not (release or self.release) and _tcgen05(plan) and _tcgen05(self.plan)
                and (plan.ring_bytes, plan.align) == (self.plan.ring_bytes, self.plan.align))


class _Expansion:
    def __init__(self, plan: AttentionPlan, threads: int):
        self.plan = plan
        self.threads = threads      # the arrivals that release a slot: every thread's
        self.releases = not _reads_done_at_commit(plan)
        loop = plan.loop
        self.lb, self.ub, self.step = (loop.operands[n] for n in ("lowerBound", "upperBound", "step"))
        self.unsigned = bool(loop.attrs.get("unsignedCmp"))
        self.loc = loop.loc
        self.ring: Value | None = None
        self.bars: Value | None = None
        self.a_buffers: dict[int, Value] = {}   # id(mma) -> the buffer its hoisted A was staged into
        self.a_waits: list[Value] = []          # the mbarriers of hoisted A copies to wait for before the loop

    def build(self, release: bool, ring: Value | None = None) -> tuple[list[Operation], list[Value]]:
        """(the ops replacing the loop, its results); given an earlier loop's `ring`, the ops start with this
        ring's `tma_barriers` (with `barrier_follows`), for the caller to put beside the earlier one."""
        p, out = self.plan, []
        attrs = {"stages": p.stages, "count": len(p.landed), "maps": [ld.x.tma.map.param for ld in p.landed]}
        if self.releases:
            attrs["empty"] = self.threads
        if ring is None:
            alloc = Operation(LOCAL_ALLOC, {}, {"align": p.align}, [SmemType(p.ring_bytes)], loc=self.loc)
            out.append(alloc)
            ring = alloc.result
        else:
            attrs["barrier_follows"] = True
        bars = Operation(TMA_BARRIERS, {}, attrs, [I32], loc=self.loc)
        out.append(bars)
        self.ring, self.bars = ring, bars.result
        for d in range(p.ahead):
            self.copies(out, scalars.iteration(out, self.lb, self.step, d, self.loc), d)
        for a in self.a_waits:
            out.append(Operation(TMA_WAIT, {"barriers": a, "unit": scalars.const(out, 0, T.I32, self.loc)},
                                 {"stages": 1}, loc=self.loc))
        results = self.loop(out)
        if release:
            out.append(Operation(TMA_RELEASE, {"barriers": self.bars}, {"stages": p.stages}, loc=self.loc))
        return out, results

    def land_a(self, ld, buffer: Value) -> list[Operation]:
        """A hoisted A's tensor copy into `buffer` on an mbarrier of its own, issued before the ring's
        mbarriers are initialised (`barrier_follows`: their CTA barrier publishes this one's initialisation
        before anyone waits); every thread waits for it right before the loop (`a_waits`)."""
        x = ld.a_tma
        bars = Operation(TMA_BARRIERS, {}, {"stages": 1, "count": 1, "maps": [x.tma.map.param],
                                            "barrier_follows": True}, [I32], loc=self.loc)
        copy = Operation(ASYNC_COPY, {"view": x.load.operands["view"], "buffer": buffer, "barriers": bars.result,
                                      "indices": list(x.load.operands["index"])},
                         {"role": "a", "operand": x, "chunk": 0, "kc": ld.plan.K, "vb": x.eb, "tma": x.tma,
                          "unit_bytes": 0, "stages": 1, "slot": 0, "landed": True}, loc=self.loc)
        self.a_waits.append(bars.result)
        return [bars, copy]

    def copies(self, out: list, target: Value, slot) -> None:
        """The tensor copies of iteration `target`'s landed tiles into `slot` (an int or an i32 value), if that
        iteration runs."""
        body: list[Operation] = []
        vmap = {id(self.plan.loop.regions[0].block.args[0]): target}
        body += [clone_op(o, vmap) for o in self.plan.slice_ops]
        for o in body:
            _unschedule(o)
        for ld in self.plan.landed:
            x = ld.x
            operands = {"view": x.load.operands["view"], "buffer": self.ring, "barriers": self.bars,
                        "indices": [vmap.get(id(v), v) for v in x.load.operands["index"]]}
            attrs = {"role": x.role, "operand": x, "chunk": 0, "kc": ld.plan.K, "vb": x.eb, "tma": x.tma,
                     "unit_bytes": self.plan.unit_bytes, "stages": self.plan.stages, "landed": True}
            if isinstance(slot, int):
                attrs["slot"] = slot
            else:
                operands["slot"] = slot
            body.append(Operation(ASYNC_COPY, operands, attrs, loc=self.loc))
        sign = Signedness.unsigned if self.unsigned else Signedness.signed
        cond = scalars.op(out, "cmpi", {"lhs": target, "rhs": self.ub},
                          {"comparison_predicate": ComparisonPredicate.less_than, "signedness": sign}, I1, self.loc)
        body.append(Operation(OPS_BY_NAME["yield"], {"operands": []}, {}, [], loc=self.loc))
        out.append(Operation(OPS_BY_NAME["if"], {"condition": cond}, {}, [],
                             [Region([Block([], body)]), Region([])], loc=self.loc))

    def held(self, out: list, v: Value) -> Value:
        """A loop-carried accumulator's initial value (O's), a constant, materialised in registers
        (`tilegpu.materialize`, as a warp-specialised K-loop's): left a constant, the loop's zero-trip path
        copies it into the registers the loop's results live in.  (The running max and sum hold each row's
        value in many registers: materialised, their copies cost more moves than they save.)"""
        if not (isinstance(v.owner, Operation) and v.owner.name == "constant") or \
                all(v.type != ld.mma.result.type for ld in self.plan.landed):
            return v
        op = Operation(MATERIALIZE, {"source": v}, {}, [v.type], loc=self.loc)
        out.append(op)
        return op.result

    def released(self, out: list, unit: Value) -> None:
        """Every thread waits until the slot of `unit` was released by every thread for its previous unit
        (unit - stages; a fresh mbarrier's first round passes).  All threads wait, not only the issuing warp:
        a warp held back alone would reach its warpgroup's next wgmma out of step with the others."""
        out.append(Operation(TMA_WAIT, {"barriers": self.bars, "unit": unit},
                             {"stages": self.plan.stages, "empty": True}, loc=self.loc))

    def landed(self, out: list, unit: Value) -> None:
        """Every thread waits until the tiles of `unit` landed (the phase of its slot's "full" mbarrier)."""
        out.append(Operation(TMA_WAIT, {"barriers": self.bars, "unit": unit}, {"stages": self.plan.stages},
                             loc=self.loc))

    def release(self, out: list, unit: Value) -> None:
        """Every thread arrives on the "empty" mbarrier of `unit`'s slot: its mmas completed their reads of it
        (each waited for its wgmma group, or its tcgen05 commit), so the copies of unit + stages may land."""
        out.append(Operation(TMA_ARRIVE, {"barriers": self.bars, "unit": unit}, {"stages": self.plan.stages},
                             loc=self.loc))

    def slot(self, out: list, unit: Value) -> Value:
        s = self.plan.stages
        if s & (s - 1) == 0:
            return scalars.op(out, "andi", {"lhs": unit, "rhs": scalars.const(out, s - 1, T.I32, self.loc)}, {},
                              I32, self.loc)
        return scalars.op(out, "remi", {"lhs": unit, "rhs": scalars.const(out, s, T.I32, self.loc)},
                          {"signedness": Signedness.signed}, I32, self.loc)

    def loop(self, out: list) -> list[Value]:
        p = self.plan
        loop = p.loop
        old = loop.regions[0].block
        body = Block([a.type for a in old.args] + [I32])
        vmap = {id(a): b for a, b in zip(old.args, body.args)}
        iv, consumed = body.args[0], body.args[-1]
        ops = body.ops
        ahead = scalars.add(ops, consumed, scalars.const(ops, p.ahead, T.I32, self.loc), self.loc)
        if self.releases:
            self.released(ops, ahead)
        self.copies(ops, scalars.iteration(ops, iv, self.step, p.ahead, self.loc), self.slot(ops, ahead))
        self.landed(ops, consumed)
        slot = self.slot(ops, consumed)
        landed = {id(ld.mma): ld for ld in p.landed}
        gone = {id(o) for ld in p.landed for o in (ld.x.load, *ld.x.chain)}
        for op in old.ops:
            if id(op) in gone:
                continue
            if op is old.ops[-1]:
                nxt = scalars.add(ops, consumed, scalars.const(ops, 1, T.I32, self.loc), self.loc)
                vals = [vmap.get(id(v), v) for v in op.operands["operands"]] + [nxt]
                ops.append(Operation(op.spec, {"operands": vals}, dict(op.attrs), [], loc=op.loc))
                continue
            ld = landed.get(id(op))
            if ld is None:
                copy = clone_op(op, vmap)
                _unschedule(copy)
                ops.append(copy)
                continue
            operands = {"lhs": vmap.get(id(op.operands["lhs"]), op.operands["lhs"]),
                        "acc": vmap.get(id(op.operands["acc"]), op.operands["acc"]), "buffer": self.ring, "slot": slot}
            attrs = {"mma": op, "mma_plan": ld.plan, "operand": ld.x, "unit_bytes": p.unit_bytes}
            if zero_constant(op.operands["acc"]):
                attrs["acc_zero"] = True    # S = Q K^T starts from zero each iteration
            if ld.a_source == "hoisted":     # A is read from its buffer: the registers are no operand
                operands["a_buffer"] = self.a_buffers[id(op)]
                del operands["lhs"]
            elif ld.a_source == "registers":
                attrs["a_registers"] = True
            else:
                attrs["scratch_bytes"] = landed_scratch_bytes(ld.plan)
            mma = Operation(MMA_LANDED, operands, attrs, [op.result.type], loc=op.loc)
            ops.append(mma)
            vmap[id(op.result)] = mma.result
            if op is p.landed[-1].mma and self.releases:      # the iteration's last read of its slot
                self.release(ops, consumed)
        inits = [self.held(out, v) for v in loop.operands["initValues"]] + [scalars.const(out, 0, T.I32, self.loc)]
        new = Operation(loop.spec, {"lowerBound": self.lb, "upperBound": self.ub, "step": self.step,
                                    "initValues": inits},
                        {n: v for n, v in loop.attrs.items() if n != ATTENTION_PLAN},
                        [r.type for r in loop.results] + [I32], [Region([body])], loop.loc)
        new.attrs[PIPELINED] = True
        out.append(new)
        return list(new.results[:len(loop.results)])


def _reads_done_at_commit(plan: AttentionPlan) -> bool:
    """Whether the commits of the mmas that read a slot already order those reads before its refill, so that
    no "empty" mbarrier need release it: every mma of the loop runs on tcgen05.  A slot holds the landed B
    tiles alone, which only the tensor core reads (A comes from its own buffer or scratch); thread 0 issues
    the mmas, each followed by a commit whose mbarrier every thread -- the one issuing the copies too --
    waits for before it goes on (both lowerings of a tcgen05 mma_landed), and a commit's arrival comes once
    every earlier mma of its thread completed its reads.  The copies into the slot of unit u (issued in
    iteration u + 1, after the iteration-u mmas' commits) follow them: the order a tcgen05.commit onto a
    producer's "empty" mbarrier gives.  wgmma's threads read the slot in their own warpgroups' steps, which
    each thread's wait orders only for itself: their releases stay."""
    return _tcgen05(plan)


def _unschedule(op: Operation) -> None:
    """The schedule is spent once the loop is expanded: an op is where it runs."""
    for o in [op, *(x for r in op.regions for b in r.blocks for x in b.walk())]:
        o.attrs.pop("stage", None)
        o.attrs.pop("order", None)
