"""Decisions the passes record on the IR for later passes and code generation to read.

A pass that decides something about an op writes it as an attribute of that op; whoever follows reads the
attribute and never decides again (nor reaches into a side table of the kernel).  This module names those
attributes whose values are records rather than plain numbers, and the readers that collect them.

    schedule_report   on every `for`/`loop` (schedule-loops): its `ScheduleReport`, the schedule the code follows
    pipeline_plan     on a K-loop schedule-loops scheduled in its pipelined form: `PipelinePlan`, what the
                      pipeline pass expands (consumed by it)
    stage_copy        on the A/B load of a K-loop (choose-stage-copies): "tma" where the loop's stage copies of
                      that operand, once pipelined, are TMA copies (absent: cp.async); schedule-loops books
                      them so, select-tensor-copies builds them for the geometry the schedule fixed
    pipelined         on each loop the pipeline pass emitted for a K-loop: `PipelinedLoop` (every copy version
                      of one K-loop carries the same record)
    attention_plan    on an attention-shaped `for` loop schedule-loops scheduled so: its `AttentionPlan`
                      (analysis.attention_pipeline: the landed B tiles, the ring's slots), what the pipeline
                      pass expands (consumed by it)

Every record class is declared in records.py, so each prints and reads back.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Operation
from .ir import walk_ops

SCHEDULE_REPORT = "schedule_report"
PIPELINE_PLAN = "pipeline_plan"
PIPELINED = "pipelined"
STAGE_COPY = "stage_copy"
ATTENTION_PLAN = "attention_plan"   # an attention-shaped loop schedule-loops accepted (analysis.attention_pipeline)

_LOOPS = ("for", "loop")


@dataclass(frozen=True, eq=False)
class PipelinePlan:
    """A K-loop schedule-loops accepted: the candidate (its loads, chain and mma) and the stage geometry."""
    cand: object        # tilegpu.analysis.software_pipeline.Candidate
    geom: object        # tilegpu.analysis.software_pipeline.Geometry

    def __repr__(self) -> str:
        return f"#pipeline_plan<stages = {self.geom.stages}, chunks = {self.geom.chunks}, kc = {self.geom.kc}>"


@dataclass(frozen=True, eq=False)
class PipelinedLoop:
    """What the pipeline pass built for one K-loop: the plan it followed, the schedule and the ring of stage
    buffers (its `local_alloc`: allocate-shared-memory gives it its offset)."""
    cand: object
    report: object      # schedule.report.ScheduleReport
    geom: object
    ring: Operation

    def __iter__(self):
        return iter((self.cand, self.report, self.geom, self.ring))

    def __repr__(self) -> str:
        return f"#pipelined<stages = {self.geom.stages}, chunks = {self.geom.chunks}, kc = {self.geom.kc}>"


def loop_schedules(body: Block) -> list:
    """The `schedule_report` of every loop under `body`, in schedule-loops' order (a loop emitted more than
    once, as the copy versions of a pipelined loop are, counts once)."""
    reports = {}
    for op in walk_ops(body):
        if op.name in _LOOPS and SCHEDULE_REPORT in op.attrs:
            reports.setdefault(op.attrs["schedule"], op.attrs[SCHEDULE_REPORT])
    return [reports[i] for i in sorted(reports)]


def pipelined_loops(body: Block) -> list[PipelinedLoop]:
    """The `pipelined` record of every software-pipelined K-loop under `body`, once each, in program order."""
    seen: dict[int, PipelinedLoop] = {}
    for op in walk_ops(body):
        rec = op.attrs.get(PIPELINED) if op.name in _LOOPS else None
        if isinstance(rec, PipelinedLoop):
            seen.setdefault(id(rec), rec)
    return list(seen.values())
