"""What the scheduler publishes per loop: msgspec messages, a text rendering and the Chrome trace.

`ScheduleReport` is the dashboard's message (one per `for`/`loop` op).  `chrome_trace()` turns a list
of reports into Chrome-trace JSON (opens in Perfetto / chrome://tracing): one process per loop, one
thread per overlapped iteration; a loop-level complete event and, for every iteration ``i`` in
``0 .. stage_count-1``, one complete event per op at ``i * II + start`` -- so each op appears once per
stage of the pipeline fill.  Every event's ``args`` carry the loop's ``ii`` and ``stage_count``.
Times are cycles (written as microseconds, Chrome trace's unit).  Output is deterministic.
"""
from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .machine import NUM_SLOTS, mask_slots, slot_name


class SlotUse(msgspec.Struct, frozen=True):
    slot: int
    name: str
    offset: int
    duration: int


class PoolRequest(msgspec.Struct, frozen=True):
    pool: str
    amount: int
    offset: int
    duration: int


class ScheduledOp(msgspec.Struct, frozen=True):
    index: int                       # node index = position in the loop body (terminator excluded)
    name: str                        # cuda_tile op name
    rclass: str                      # resource class (machine.py)
    start: int
    stage: int                       # start // ii
    order: int                       # rank inside the stage: (stage, order) is a total order
    cycle: int                       # start % ii: the modulo-RRT row of its first footprint cycle
    latency: int
    duration: int                    # footprint length (max over the triples)
    slots: list[SlotUse] = []
    pools: list[PoolRequest] = []
    loc: int = 0
    async_capable: bool = False
    arm: str = ""                    # which placement arm seated it
    rejections: int = 0              # G3 (reservation table) probe failures
    evictions: int = 0
    gid: int | None = None
    leader_gid: int | None = None
    group: int | None = None         # DSU root of its gid (G4 group)
    max_depth: int = 0
    force_serial: bool = False
    note: str = ""
    partition: str = ""              # a warp-specialised loop's: producer | consumer


class Partition(msgspec.Struct, frozen=True):
    """A warpgroup of a warp-specialised loop and the body ops it runs (schedule-loops)."""
    name: str                        # producer | consumer
    warpgroup: int
    registers: int = 0               # the producer's setmaxnreg.dec target, the consumer's (the kernel's) .maxnreg
    ops: list[int] = []              # ScheduledOp indices


class DepEdge(msgspec.Struct, frozen=True):
    src: int
    dst: int
    latency: int
    distance: int
    kind: str                        # data | token | carried | memory | order | control


class ArmResult(msgspec.Struct, frozen=True):
    arm: str
    ok: bool
    reason: str = ""
    steps: int = 0
    evictions: int = 0


class IIAttempt(msgspec.Struct, frozen=True):
    ii: int
    ok: bool
    arm: str = ""                    # the arm that succeeded
    reason: str = ""                 # why this II failed (every arm's reason)
    arms: list[ArmResult] = []
    conflict_op: int = -1            # the first reservation-table rejection seen, if any
    conflict_start: int = -1
    conflict_row: int = -1
    conflict_resource: str = ""
    conflict_holders: list[int] = []


class RRTCell(msgspec.Struct, frozen=True):
    slot: int
    name: str
    used: int
    capacity: int
    ops: list[int]


class RRTRow(msgspec.Struct, frozen=True):
    cycle: int
    mask: int                        # 64-bit row: every slot in use this cycle (bit = slot - 1)
    full: int                        # the slots at capacity (what the probe tests)
    cells: list[RRTCell] = []
    pools: dict[str, int] = {}


class ScheduleReport(msgspec.Struct, frozen=True):
    kernel: str
    loop: int                        # ordinal of the loop op in the kernel (pre-order walk)
    loop_op: str                     # for | loop
    gpu_name: str
    family: str
    strategy: str                    # serial | modulo
    rule: str                        # the selector rule that fired
    ok: bool
    ii: int
    mii: int
    res_mii: int
    rec_mii: int
    fine_mii: int
    dep_mii: int
    ii_cap: int
    stage_count: int
    module: str = ""                 # the input's path or name, when the caller gives one
    loc: int = 0
    depth: int = 0                   # loop nesting depth (0 = outermost)
    parent: int = -1                 # ordinal of the enclosing loop, -1 if none
    res_bottleneck: str = ""
    span_stages: int = 0             # the seeds' ceil_div(max(start + latency) + 1, II)
    prologue_copies: int = 0         # stage_count - 1
    num_ops: int = 0
    ops: list[ScheduledOp] = []
    edges: list[DepEdge] = []
    attempts: list[IIAttempt] = []
    rrt: list[RRTRow] = []
    rrt_slots: list[str] = []        # the slots that appear in the table, ascending id
    truncated: bool = False
    message: str = ""
    notes: list[str] = []
    partitions: list[Partition] = []  # warp-specialised: the producer and the consumer warpgroup
    ring_depth: int = 0              # warp-specialised: stage buffers between them


# ---------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------

def format_rrt(report: ScheduleReport) -> str:
    """The reservation table drawn like the wiki's worked example: II rows x active slots; a cell
    shows the ops holding the slot in that cycle (`.` when free)."""
    names = report.rrt_slots
    if not report.rrt or not names:
        return "(empty reservation table)"
    cells = {(row.cycle, c.name): c for row in report.rrt for c in row.cells}
    width = {n: max(len(n), max((len(",".join(map(str, cells[(r.cycle, n)].ops))) for r in report.rrt
                                 if (r.cycle, n) in cells), default=1)) for n in names}
    lines = ["cycle  " + "  ".join(n.rjust(width[n]) for n in names)]
    for row in report.rrt:
        parts = []
        for n in names:
            c = cells.get((row.cycle, n))
            txt = ",".join(map(str, c.ops)) if c else "."
            parts.append(txt.rjust(width[n]))
        lines.append(f"{row.cycle:5d}  " + "  ".join(parts))
    return "\n".join(lines)


def format_report(report: ScheduleReport) -> str:
    head = (f"{report.kernel} loop {report.loop} ({report.loop_op}) on {report.gpu_name}: {report.strategy} "
            f"[{report.rule}] II={report.ii} stages={report.stage_count} "
            f"MII={report.mii} (res {report.res_mii}, rec {report.rec_mii}, fine {report.fine_mii}, "
            f"dep {report.dep_mii})")
    lines = [head]
    if not report.ok:
        lines.append(f"  FAILED: {report.message}")
    for a in report.attempts:
        lines.append(f"  II {a.ii}: " + (f"ok ({a.arm})" if a.ok else f"failed: {a.reason}"))
    for p in report.partitions:
        regs = f"setmaxnreg {p.registers}" if p.name == "producer" else f"{p.registers} registers (.maxnreg)"
        lines.append(f"  partition {p.name}: warpgroup {p.warpgroup}, {regs}, ring depth {report.ring_depth}, "
                     f"ops {','.join(map(str, p.ops))}")
    lines.append("  idx op                   class            start stage order lat slots")
    for o in sorted(report.ops, key=lambda o: (o.stage, o.order)):
        slots = ",".join(f"{s.name}@{s.offset}+{s.duration}" for s in o.slots) or "-"
        lines.append(f"  {o.index:3d} {o.name:20s} {o.rclass:16s} {o.start:5d} {o.stage:5d} {o.order:5d} "
                     f"{o.latency:3d} {slots}")
    lines.append("  " + format_rrt(report).replace("\n", "\n  "))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Chrome trace
# ---------------------------------------------------------------------------

def _event(name: str, ph: str, pid: int, tid: int, ts: int, dur: int, args: dict, cat: str = "") -> dict:
    ev = {"name": name, "ph": ph, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
    if cat:
        ev["cat"] = cat
    return ev


def chrome_trace(reports: Iterable[ScheduleReport]) -> dict:
    events: list[dict] = []
    for k, r in enumerate(reports):
        pid = k + 1
        stages = max(r.stage_count, 1) if r.ok else 0
        base = {"ii": r.ii, "stage_count": r.stage_count}
        where = f"{r.module}: " if r.module else ""
        title = f"{where}{r.kernel} loop {r.loop} ({r.loop_op}) {r.gpu_name} II={r.ii} stages={r.stage_count}"
        events.append(_event("process_name", "M", pid, 0, 0, 0, {**base, "name": title}))
        events.append(_event("process_sort_index", "M", pid, 0, 0, 0, {**base, "sort_index": k}))
        events.append(_event("thread_name", "M", pid, 0, 0, 0, {**base, "name": "loop"}))
        for i in range(stages):
            events.append(_event("thread_name", "M", pid, i + 1, 0, 0, {**base, "name": f"iteration {i}"}))
        end = max([1] + [o.start + max(1, o.duration, o.latency) for o in r.ops]) if r.ok else 1
        span = (stages - 1) * r.ii + end if r.ok else 1
        events.append(_event(f"{r.kernel} loop {r.loop}", "X", pid, 0, 0, span, {
            **base, "module": r.module, "kernel": r.kernel, "loop": r.loop, "loop_op": r.loop_op, "gpu_name": r.gpu_name,
            "family": r.family, "strategy": r.strategy, "rule": r.rule, "ok": r.ok, "mii": r.mii,
            "res_mii": r.res_mii, "rec_mii": r.rec_mii, "fine_mii": r.fine_mii, "dep_mii": r.dep_mii,
            "span_stages": r.span_stages, "prologue_copies": r.prologue_copies, "num_ops": r.num_ops,
            "ii_tried": [a.ii for a in r.attempts], "message": r.message, **_partition_args(r)}, cat="loop"))
        if not r.ok:
            continue
        ops = sorted(r.ops, key=lambda o: (o.stage, o.order))
        for i in range(stages):
            for o in ops:
                events.append(_event(o.name, "X", pid, i + 1, i * r.ii + o.start, max(1, o.duration), {
                    **base, "op": o.index, "iteration": i, "stage": o.stage, "order": o.order,
                    "cycle": o.cycle, "start": o.start, "latency": o.latency, "rclass": o.rclass,
                    "slots": ",".join(f"{s.name}@{s.offset}+{s.duration}" for s in o.slots),
                    **({"partition": o.partition} if o.partition else {})}, cat="op"))
    return {"traceEvents": events, "otherData": {"producer": "tileiras_async.schedule", "time_unit": "1 cycle = 1 us"}}


def _partition_args(r: ScheduleReport) -> dict:
    """A warp-specialised loop's partitions and ring depth for its trace event (nothing for other loops)."""
    if not r.partitions:
        return {}
    return {"ring_depth": r.ring_depth, "partitions": [msgspec.to_builtins(p) for p in r.partitions]}


def schedule_trace_json(reports: Iterable[ScheduleReport]) -> str:
    import json   # here: the stages import this module for ScheduleReport on every compile, traces are rare
    return json.dumps(chrome_trace(reports), separators=(",", ":"))


def write_schedule_trace(path: str, reports: Iterable[ScheduleReport]) -> None:
    """`--schedule-trace-file F`: write the Chrome trace of `reports` to F."""
    text = schedule_trace_json(reports)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.write("\n")


def rrt_rows(table, ii: int) -> tuple[list[RRTRow], list[str]]:
    """RRTRow messages (and the active slot names) from a modulo ReservationTable."""
    rows: list[RRTRow] = []
    active = 0
    for r in range(ii):
        cells = []
        for s in mask_slots(table.occupied[r]):
            cells.append(RRTCell(s, slot_name(s), table.used[r][s], table.model.cap(s),
                                 sorted(set(table.holders[r][s]))))
        active |= table.occupied[r]
        rows.append(RRTRow(r, table.occupied[r], table.full[r], cells, dict(sorted(table.pool_used[r].items()))))
    return rows, [slot_name(s) for s in mask_slots(active) if s <= NUM_SLOTS]
