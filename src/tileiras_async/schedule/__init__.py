"""Schedule generation (an analysis): per-loop dependence graph, machine model, MII, II search and
modulo placement, published as ScheduleReport messages and a Chrome trace.  See README.md."""
from .analyze import module_loops, report_from_result, schedule_loop, schedule_module
from .depgraph import DepGraph, Edge, Node, build_loop_graph
from .machine import (
    FAMILIES,
    MachineModel,
    OpResources,
    PoolUse,
    ResourceUse,
    classify,
    family_of,
    machine_model,
)
from .modulo import (
    MIIParts,
    ReservationTable,
    ScheduleError,
    ScheduleOptions,
    ScheduleResult,
    check_schedule,
    compute_mii,
    schedule_graph,
)
from .report import (
    IIAttempt,
    ScheduledOp,
    ScheduleReport,
    chrome_trace,
    format_report,
    format_rrt,
    schedule_trace_json,
    write_schedule_trace,
)

__all__ = [
    "FAMILIES", "DepGraph", "Edge", "IIAttempt", "MIIParts", "MachineModel", "Node", "OpResources", "PoolUse",
    "ReservationTable", "ResourceUse", "ScheduleError", "ScheduleOptions", "ScheduleReport", "ScheduleResult",
    "ScheduledOp", "build_loop_graph", "check_schedule", "chrome_trace", "classify", "compute_mii", "family_of",
    "format_report", "format_rrt", "machine_model", "module_loops", "report_from_result", "schedule_graph",
    "schedule_loop", "schedule_module", "schedule_trace_json", "write_schedule_trace",
]
