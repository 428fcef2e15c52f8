"""Schedule generation as an analysis over a module: one ScheduleReport per `for`/`loop` op.

    reports = schedule_module(module, "sm_100")
    write_schedule_trace("trace.json", reports)      # --schedule-trace-file

The analysis never changes the IR (materialization is a separate, later step).
"""
from __future__ import annotations

from ..ir.core import Module, Operation
from .constraints import parse_op_constraints
from .depgraph import DepGraph, Edge, build_loop_graph
from .machine import MachineModel, machine_model, slot_name
from .modulo import ScheduleError, ScheduleOptions, ScheduleResult, schedule_graph
from .report import (
    ArmResult,
    DepEdge,
    IIAttempt,
    PoolRequest,
    ScheduledOp,
    ScheduleReport,
    SlotUse,
    rrt_rows,
)


def report_from_result(g: DepGraph, res: ScheduleResult, model: MachineModel, *, kernel: str = "",
                       loop: int = 0, loop_op: str = "for", loc: int = 0, depth: int = 0,
                       parent: int = -1, module: str = "") -> ScheduleReport:
    ops = []
    for i, nd in enumerate(g.nodes):
        c = nd.constraints
        ops.append(ScheduledOp(
            index=i, name=nd.name, rclass=nd.res.rclass, start=res.starts[i], stage=res.stages[i],
            order=res.orders[i], cycle=res.starts[i] % res.ii if res.ii else 0, latency=nd.latency,
            duration=nd.res.length,
            slots=[SlotUse(u.slot, slot_name(u.slot), u.offset, u.duration) for u in nd.res.uses],
            pools=[PoolRequest(p.pool, p.amount, p.offset, p.duration) for p in nd.res.pools],
            loc=nd.loc, async_capable=nd.res.async_capable, arm=res.arms[i], rejections=res.rejections[i],
            evictions=res.evictions[i], gid=c.gid if c.has_gid else None,
            leader_gid=c.leader_gid if c.any else None, group=res.groups[i] if res.groups else None,
            max_depth=c.max_depth, force_serial=c.force_serial, note=nd.res.note))
    attempts = []
    for a in res.attempts:
        cf = a.conflict
        attempts.append(IIAttempt(
            a.ii, a.ok, a.arm, a.reason, [ArmResult(x.arm, x.ok, x.reason, x.steps, x.evictions) for x in a.arms],
            cf.node if cf else -1, cf.cycle if cf else -1, cf.row if cf else -1, cf.resource if cf else "",
            list(cf.holders) if cf else []))
    rows, active = rrt_rows(res.table, res.ii) if res.table is not None else ([], [])
    m = res.mii
    return ScheduleReport(
        kernel=kernel, loop=loop, loop_op=loop_op, gpu_name=model.gpu_name, family=model.family, module=module,
        strategy=res.strategy, rule=res.rule, ok=res.ok, ii=res.ii, mii=m.mii, res_mii=m.res, rec_mii=m.rec,
        fine_mii=m.fine, dep_mii=m.dep, ii_cap=res.ii_cap, stage_count=res.stage_count, loc=loc, depth=depth,
        parent=parent, res_bottleneck=m.res_bottleneck, span_stages=res.span_stages,
        prologue_copies=max(res.stage_count - 1, 0), num_ops=g.n, ops=ops,
        edges=[DepEdge(e.src, e.dst, e.latency, e.distance, e.kind) for e in g.edges], attempts=attempts,
        rrt=rows, rrt_slots=active, truncated=res.truncated, message=res.message, notes=list(model.notes))


def schedule_loop(loop_op: Operation, model: MachineModel, options: ScheduleOptions | None = None, *,
                  kernel: str = "", loop: int = 0, depth: int = 0, parent: int = -1,
                  module: str = "") -> ScheduleReport:
    try:
        g = build_loop_graph(loop_op, model)
        if options is not None and options.prefetch_stages:
            g = with_prefetch(g, options.prefetch_stages)
        force = parse_op_constraints(loop_op, model.gpu_name).force_serial
        res = schedule_graph(g, model, options, loop_force_serial=force)
    except Exception as e:  # noqa: BLE001 -- an analysis never takes the compile down with it
        msg = str(e) if isinstance(e, ScheduleError) else f"internal error: {type(e).__name__}: {e}"
        return ScheduleReport(kernel=kernel, loop=loop, loop_op=loop_op.name, gpu_name=model.gpu_name,
                              family=model.family, module=module, strategy="", rule="", ok=False, ii=0, mii=0, res_mii=0,
                              rec_mii=0, fine_mii=0, dep_mii=0, ii_cap=0, stage_count=0, loc=loop_op.loc,
                              depth=depth, parent=parent, message=msg, notes=list(model.notes))
    return report_from_result(g, res, model, kernel=kernel, loop=loop, loop_op=loop_op.name, loc=loop_op.loc,
                              depth=depth, parent=parent, module=module)


ASYNC_COPIES = frozenset({"cp_async_load", "tma_load"})


def with_prefetch(g: DepGraph, stages: int) -> DepGraph:
    """The graph of a software-pipelined loop: each async copy's data edges become prefetch edges of distance
    -stages (the copy for iteration i + stages is issued in iteration i)."""
    edges = [Edge(e.src, e.dst, e.latency, -stages, "prefetch")
             if e.kind == "data" and e.distance == 0 and g.nodes[e.src].res.rclass in ASYNC_COPIES else e
             for e in g.edges]
    return DepGraph(g.nodes, edges)


def _loops(op: Operation, depth: int, parent: int, out: list):
    """Pre-order (op, depth, parent ordinal) of the loop ops nested in `op`'s regions."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                if inner.spec.is_loop:
                    ordinal = len(out)
                    out.append((inner, depth, parent))
                    _loops(inner, depth + 1, ordinal, out)
                else:
                    _loops(inner, depth, parent, out)


def module_loops(module: Module) -> list[tuple[str, list[tuple[Operation, int, int]]]]:
    out = []
    for fn in module.functions:
        loops: list = []
        for op in fn.body.ops:
            if op.spec.is_loop:
                ordinal = len(loops)
                loops.append((op, 0, -1))
                _loops(op, 1, ordinal, loops)
            else:
                _loops(op, 0, -1, loops)
        out.append((fn.name.decode(errors="replace"), loops))
    return out


def schedule_module(module: Module, gpu_name: str, options: ScheduleOptions | None = None, *,
                    name: str = "") -> list[ScheduleReport]:
    """One ScheduleReport per `for`/`loop` op of every function, functions in module order, loops in
    pre-order (an enclosing loop before the loops nested in it).  `name` (the input path) is copied
    into each report for the dashboard and the trace."""
    model = machine_model(gpu_name)
    reports = []
    for kernel, loops in module_loops(module):
        for ordinal, (op, depth, parent) in enumerate(loops):
            reports.append(schedule_loop(op, model, options, kernel=kernel, loop=ordinal, depth=depth,
                                         parent=parent, module=name))
    return reports
