"""schedule-loops: a modulo schedule for every loop; for K-loops, the schedule the pipeliner will follow.

Contract: in: tile-GPU IR with layouts. out: the IR is unchanged but for attributes: every `for`/`loop` gets
`schedule` (its ordinal among the kernel's loops, pre-order) and `schedule_report`, its `ScheduleReport`
(what --schedule-trace-file, the dashboard and the remarks show: `tilegpu.decisions.loop_schedules`).

A K-loop that `tilegpu.analysis.software_pipeline.analyze` accepts is scheduled in its pipelined form: the loads become async
copies whose consumers read data fetched `P` iterations earlier (prefetch edges, distance -P), the reshapes and
ftofs between a load and the mma are fused into the mma (they run where it reads its fragments), and the
scheduler must use the modulo strategy.  P starts at --num-stages - 1 and is lowered until the schedule has at
most --num-stages stages.  The loads and the mma get `stage`/`order` attributes from the report, and the
loop a `pipeline_plan` (`tilegpu.decisions.PipelinePlan`: candidate and geometry) for the pipeline pass.  Every other loop
runs its body in program order: its report is the serial schedule (its tile loads are ld.global, as the code
does them, but for those select-tile-tensor-copies, before this pass, gave `tma`: TMA copies, `tma_load`).  A
`for` loop without an mma whose loads may move (`software_pipeline.movable_loads`: never a TMA one) and hold at most
PREFETCH_REGS registers per thread for DISTANCE iterations is scheduled prefetched: those loads in stage 0, every
other op of the body in stage DISTANCE (the loads of iteration i + DISTANCE run beside the rest of iteration i),
each stage in program order; every op of the body gets its `stage`/`order`, the report says "prefetched DISTANCE
iterations ahead", and the pipeline pass expands the loop as they say.  A loop that runs several mmas (no K-loop) whose B
tiles the body loads and that `tilegpu.analysis.attention_pipeline.analyze_attention` accepts -- an attention loop on
wgmma whose K and V can land by TMA -- gets an `attention_plan` (the ring: slots, the tiles' places and maps) and
its serial schedule with those loads `stages - 1` iterations ahead of the rest of the body (loads in stage 0,
the rest in stage `stages - 1`, each stage in program order; rule "attention-pipelined: ..."); the pipeline
pass expands it.  That loop's TMA decision is made here, by analyze_attention (choose-stage-copies decides only
K-loops', which such a loop is not, so no load gets both): its maps, boxes and B majors (select-mma's) are fixed
with the ring.  Any other loop's rule says "kept serial: <why>" (for a loop with several mmas, also why it is
not attention-shaped).  Prefetching and tile TMA are one or the other: a load select-tile-tensor-copies made a
TMA copy already lands in shared memory while the iteration runs up to its first use (its issue is hoisted), and
carrying it in registers too would pay the mbarrier and the registers both.  The machine model's classes name
what the lowering emits: cp.async copies, TMA copies (`tma_load`) for the K-loop loads choose-stage-copies,
before this pass, gave `stage_copy = "tma"` (select-tensor-copies, after it, builds them for the geometry fixed
here) and for the tile loads given `tma`, and the mma instruction select-mma recorded.
"""
from __future__ import annotations

import msgspec

from ...ir.core import Block, Operation, Region
from ...schedule.machine import machine_model
from ...targets import shared_memory_limit
from ..decisions import ATTENTION_PLAN, PIPELINE_PLAN, SCHEDULE_REPORT, STAGE_COPY, PipelinePlan
from ..ir import KernelIR
from ..analysis.mma import SHARED_LIMIT
from ..analysis.tcgen05 import Tcgen05Plan
from ...schedule.report import Partition
from ..analysis.attention_pipeline import analyze_attention
from ..analysis.software_pipeline import (_WRITE_PREFIXES, DISTANCE, FAILED, MIN_STAGES, PREFETCH_REGS,
                                 Candidate, analyze, chunk_bounds, copy_versions, load_registers, movable_loads,
                                 plan_geometry, stage_budget)

_LOOPS = ("for", "loop")
# whether schedule-loops splits the eligible TMA K-loops into a producer and a consumer warpgroup
# (`warp_specialization`).  Measured on the launch set's sm_90 TMA matmuls at the default 4 stages
# (bench/codegen_quality.py, bench/dynamic_instructions.py --set public-launch), single warpgroup -> split:
# static SASS (NVIDIA's) / executed thread-instructions (NVIDIA's)
#   matmul_f16_f32acc_64x64x32   (1 K chunk per iteration)   246 -> 229 (405) / 229,338 -> 205,530 (415,002)
#   matmul_bf16_64x64x64         (2 chunks)                  446 -> 410 (465) / 318,844 -> 286,076 (301,136)
#   matmul_f16_f16out_128x128x64 (4 chunks)                  735 -> 620 (635) / 204,032 -> 162,020 (147,934)
# and f16out at --num-stages 2 / 3 (static): 578 -> 524 / 742 -> 686.  What made large accumulators lose
# before: left a constant, the accumulator's init let LLVM fold the epilogue's f32 -> f16 conversion into the
# loop's zero-trip path, whose copies of that constant (128 moves per thread for f16out) landed in the block
# every consumer thread runs; the consumer now materialises the init in registers (`tilegpu.materialize`,
# warp_specialized_loop.py), which the zero-trip path reuses.
# On sm_100 (tcgen05: the accumulator stays in tensor memory; each unit's mmas committed to the slot's empty
# mbarrier): f32acc 356 -> 330 (497) / 255,744 -> 200,922, bf16 542 -> 496 (913) / 317,952 -> 289,148,
# f16out 677 -> 592 (644) / 173,568 -> 141,284 (with --num-stages 2: 464 -> 490 / 143,616 -> 133,256).
WARP_SPECIALIZE = True
PRODUCER_REGISTERS = 40     # the producer's setmaxnreg.dec target: it holds addresses and counters only
CONSUMER_SPARE_REGISTERS = 40   # the consumer's registers besides the accumulator's (addresses, the epilogue)


def run(k: KernelIR) -> None:
    gpu = getattr(k.options.target, "name", k.options.target)
    model = machine_model(gpu)                              # a K-loop's form once pipelined: cp.async copies
    serial_model = machine_model(gpu, copies="ld.global")   # a loop the code runs as written: loads to registers
    for ordinal, (op, depth, parent) in enumerate(_loops(k.fn.body)):
        op.attrs["schedule"] = ordinal
        enabled = int(k.options.pipeline_stages or 1) >= MIN_STAGES
        cand = analyze(k.options, op) if enabled else None
        report, why = None, None
        if isinstance(cand, Candidate):
            report, why, geom = _pipelined(k, model, cand, ordinal, depth, parent)
            if report is not None:
                op.attrs[PIPELINE_PLAN] = PipelinePlan(cand, geom)
                report = _partitioned(k, cand, geom, report)
        elif isinstance(cand, str):
            why = cand
        attention = _attention_plan(k, op) if enabled and isinstance(cand, str) else None
        if isinstance(attention, str):
            why = f"{why}; not attention-shaped: {attention}"
        elif attention is not None:
            why = None
            op.attrs[ATTENTION_PLAN] = attention
        if why is not None:
            k.remark("missed", "pipelining", "LoopNotPipelined", f"{FAILED}: {why}", op)
        if report is None:   # the code runs the body in program order: say so, and why
            from ...schedule.analyze import schedule_loop   # (with the first loop: most kernels have none)
            from ...schedule.modulo import ScheduleOptions
            if why is None:
                why = "not a K-loop (no mma fed by loads of its body)" if enabled else "pipelining is off"
            report = schedule_loop(op, serial_model, ScheduleOptions(strategy="serial"), kernel=k.name,
                                   loop=ordinal, depth=depth, parent=parent, module=k.source)
            report = (_landed(op, report, attention) if ATTENTION_PLAN in op.attrs else _prefetched(op, report)) or \
                msgspec.structs.replace(report, rule=f"kept serial: {why}")
        op.attrs[SCHEDULE_REPORT] = report


def _prefetched(loop: Operation, serial):
    """The serial schedule `serial` of `loop` with its movable loads DISTANCE iterations ahead, its body's ops
    given their `stage`/`order`; None where the loop is not prefetched."""
    loads = movable_loads(loop) if loop.name == "for" and serial.ok else []
    regs = sum(load_registers(ld) for ld in loads)
    if not loads or DISTANCE * regs > PREFETCH_REGS:
        return None
    rule = (f"prefetched {DISTANCE} iterations ahead: {len(loads)} tile load(s), {regs * DISTANCE} register(s) "
            f"per thread in flight")
    return _ahead(loop, serial, {id(ld) for ld in loads}, DISTANCE, rule)


def _ahead(loop: Operation, serial, moved: set[int], distance: int, rule: str):
    """`serial` with the body's ops `moved` (ids) in stage 0 and every other one in stage `distance`, each
    stage in the serial order, the ops given their `stage`/`order`: loads `distance` iterations ahead."""
    body = [o for o in loop.regions[0].block.ops if not o.spec.is_terminator]
    stage = {r.index: 0 if id(body[r.index]) in moved else distance for r in serial.ops}
    order, placed = {}, {0: 0, distance: 0}    # each stage in the serial order
    for r in sorted(serial.ops, key=lambda r: r.order):
        order[r.index] = placed[stage[r.index]]
        placed[stage[r.index]] += 1
    ops = [msgspec.structs.replace(r, stage=stage[r.index], order=order[r.index]) for r in serial.ops]
    for r in ops:
        body[r.index].attrs["stage"], body[r.index].attrs["order"] = r.stage, r.order
    return msgspec.structs.replace(serial, ops=ops, rule=rule, stage_count=distance + 1, prologue_copies=distance)


def _attention_plan(k: KernelIR, loop: Operation):
    """An attention-shaped loop's AttentionPlan (tilegpu.analysis.attention_pipeline), why the loop is not one
    that can be pipelined so, or None (it runs fewer than two mmas)."""
    gpu = getattr(k.options.target, "name", k.options.target)
    return analyze_attention(k, loop, int(k.options.pipeline_stages), shared_memory_limit(gpu))


def _landed(loop: Operation, serial, plan):
    """The serial schedule `serial` of an attention-shaped loop with its landed B loads `plan.ahead`
    iterations ahead of the rest of the body (each stage in program order), its body's ops given their
    `stage`/`order`; None where the serial schedule failed."""
    if not serial.ok:
        return None
    rule = (f"attention-pipelined: the B tiles of {len(plan.landed)} mmas land by TMA in a ring of {plan.stages} "
            f"slots of {plan.unit_bytes} bytes, {plan.ahead} iteration(s) ahead of their mmas")
    return _ahead(loop, serial, {id(ld.x.load) for ld in plan.landed}, plan.ahead, rule)


def _pipelined(k: KernelIR, model, cand: Candidate, ordinal: int, depth: int, parent: int):
    """(report, None, geometry) with the loads and the mma in different stages, or (None, why not, None)."""
    from ...schedule.analyze import schedule_loop
    from ...schedule.modulo import ScheduleOptions
    limit = int(k.options.pipeline_stages)
    bounds = chunk_bounds(cand)
    if isinstance(bounds, str):
        return None, bounds, None
    kdim, min_kc = bounds
    budget = stage_budget(cand)
    geom = plan_geometry(cand, kdim, min_kc, limit, budget)
    if geom is None:
        return None, f"{MIN_STAGES} stage buffers do not fit in {SHARED_LIMIT} bytes of shared memory", None
    if not copy_versions(cand, geom):
        return None, "the tile rows are shorter than a 4-byte copy", None
    limit = geom.stages
    loop, ops = _async_form(cand)
    report = None
    for prefetch in range(limit - 1, -1, -1):
        report = schedule_loop(loop, model, ScheduleOptions(strategy="modulo", prefetch_stages=prefetch),
                               kernel=k.name, loop=ordinal, depth=depth, parent=parent, module=k.source)
        if not report.ok:
            return None, f"the scheduler found no schedule ({report.message})", None
        if report.stage_count <= limit:
            break
    placed = {id(o): r for o, r in zip(ops, report.ops)}
    loads = [placed[id(x.load)] for x in (cand.a, cand.b)]
    mma = placed[id(cand.mma)]
    if not all(r.async_capable for r in loads):
        return None, f"the scheduler does not classify the loads as asynchronous copies ({loads[0].rclass})", None
    stages = mma.stage - max(r.stage for r in loads) + 1
    if stages < MIN_STAGES:
        return None, f"the schedule keeps the loads and the mma in one stage (II {report.ii})", None
    geom = plan_geometry(cand, kdim, min_kc, stages, budget)   # the buffers this schedule needs
    for o, r in zip(ops, report.ops):
        o.attrs["stage"], o.attrs["order"] = r.stage, r.order
    for x in (cand.a, cand.b):
        for o in x.chain:
            o.attrs["stage"] = mma.stage   # fused: they run where the mma reads its fragments
    return report, None, geom


def _partitioned(k: KernelIR, cand: Candidate, geom, report):
    """`report` with the loop's ops in a producer and a consumer warpgroup (their `partition`s written on the
    ops) where `warp_specialization` chooses it; else `report` as it is, the reason in its notes."""
    why = warp_specialization(k, cand, geom)
    if why:
        return msgspec.structs.replace(report, notes=[*report.notes, f"not warp-specialised: {why}"])
    body = [o for o in cand.loop.regions[0].block.ops if not o.spec.is_terminator]
    producer = {id(x.load) for x in (cand.a, cand.b)}
    ops = []
    for r in report.ops:
        part = "producer" if id(body[r.index]) in producer else "consumer"
        body[r.index].attrs["partition"] = part
        ops.append(msgspec.structs.replace(r, partition=part))
    for x in (cand.a, cand.b):
        for o in x.chain:
            o.attrs["partition"] = "consumer"   # fused into the mma
    consumer = consumer_registers(cand)
    parts = [Partition("consumer", 0, consumer, [r.index for r in ops if r.partition == "consumer"]),
             Partition("producer", 1, PRODUCER_REGISTERS, [r.index for r in ops if r.partition == "producer"])]
    rule = (f"{report.rule}; warp-specialised: a producer warpgroup issues the TMA copies {geom.stages} stage "
            f"buffers ahead (setmaxnreg {PRODUCER_REGISTERS}), the consumer warpgroup runs the "
            f"{'tcgen05 mma' if isinstance(cand.wgmma, Tcgen05Plan) else 'wgmma'} ({consumer} registers)")
    return msgspec.structs.replace(report, ops=ops, partitions=parts, ring_depth=geom.stages, rule=rule)


def consumer_registers(cand: Candidate) -> int:
    """The consumer's registers per thread (the kernel's at entry, .maxnreg): the accumulator's and
    CONSUMER_SPARE_REGISTERS, a multiple of 8 as setmaxnreg counts are.  Without a bound ptxas gives a kernel
    that uses setmaxnreg 255 registers, one CTA per SM."""
    return -(-(accumulator_registers(cand) + CONSUMER_SPARE_REGISTERS) // 8) * 8


def accumulator_registers(cand: Candidate) -> int:
    """The wgmma accumulator's registers per thread of the consumer warpgroup."""
    p = cand.wgmma
    return p.B * p.M * p.N // (p.num_warps * 32) // p.instr.acc_per_reg


def warp_specialization(k: KernelIR, cand: Candidate, geom) -> str:
    """Why the K-loop is not split into a producer and a consumer warpgroup ('' where it is): wgmma loops
    (sm_90) and tcgen05 loops (sm_100: a Tcgen05Plan is a WgmmaPlan) whose A and B choose-stage-copies gave
    TMA stage copies, at the kernel's top level (the producer warpgroup leaves the kernel after its loop),
    nothing before them writing memory (every thread of both warpgroups runs it), the first such loop of the
    kernel, and the policy (WARP_SPECIALIZE) on."""
    tgt = k.options.known_target
    if not WARP_SPECIALIZE:
        return "off (WARP_SPECIALIZE)"
    if cand.wgmma is None or tgt is None or not (tgt.has_tma and tgt.has_tensor_map_hooks):
        return "not a wgmma loop with tensor copies"
    if not all(x.load.attrs.get(STAGE_COPY) == "tma" for x in (cand.a, cand.b)):
        return "A and B are not both TMA copies"
    top = k.fn.body.ops
    if not any(o is cand.loop for o in top):
        return "the loop is not at the kernel's top level"
    before = top[:next(i for i, o in enumerate(top) if o is cand.loop)]
    if any(_writes(x) or "partition" in x.attrs for o in before for x in o.walk()):
        return "what runs before the loop writes memory, prints or is warp-specialised already"
    return ""


def _writes(op: Operation) -> bool:
    """Whether `op` has an effect the producer threads would repeat (memory writes, prints)."""
    return op.name == "print_tko" or any(op.name.startswith(p) for p in _WRITE_PREFIXES)


def _async_form(cand: Candidate) -> tuple[Operation, list[Operation]]:
    """A stand-in loop for the scheduler: the body as the pipeliner will run it (the loads' reshape/ftof
    chains fused into the mma), sharing the real ops (nothing is inserted into the IR)."""
    body = cand.loop.regions[0].block
    fused = {id(o) for x in (cand.a, cand.b) for o in x.chain}
    mma = cand.mma
    fused_mma = Operation(mma.spec, {**mma.operands, "lhs": cand.a.load.results[0], "rhs": cand.b.load.results[0]},
                          dict(mma.attrs), [r.type for r in mma.results], loc=mma.loc)
    ops = [fused_mma if o is mma else o for o in body.ops if id(o) not in fused]
    stand_in = Block()
    stand_in.args = body.args
    stand_in.ops = ops
    loop = Operation(cand.loop.spec, dict(cand.loop.operands), dict(cand.loop.attrs), [], [Region([stand_in])],
                     cand.loop.loc)
    real = [mma if o is fused_mma else o for o in ops if o.name not in ("continue", "yield")]
    return loop, real


def _loops(body: Block):
    """(loop op, depth, parent ordinal) of every loop, pre-order (an enclosing loop first)."""
    out = []
    stack = [(iter(body.ops), 0, -1)]
    while stack:
        it, depth, parent = stack[-1]
        op = next(it, None)
        if op is None:
            stack.pop()
            continue
        if op.name in _LOOPS:
            out.append((op, depth, parent))
            inner = (depth + 1, len(out) - 1)
        else:
            inner = (depth, parent)
        if op.regions:
            stack.append((iter([o for r in op.regions for b in r.blocks for o in b.ops]), *inner))
    return out
