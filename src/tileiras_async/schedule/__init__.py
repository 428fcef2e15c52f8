"""Schedule generation (an analysis): per-loop dependence graph, machine model, MII, II search and
modulo placement, published as ScheduleReport messages and a Chrome trace.  See README.md."""
import importlib

# The names below are loaded on first use (PEP 562): the stages import `schedule.report` for its message type
# on every compile, which runs this file first, and most kernels have no loop to schedule; a cold drop-in
# compile then loads neither the scheduler nor its dependence graphs.
TYPE_CHECKING = False
if TYPE_CHECKING:
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

_HOME = {name: module for module, names in (
    ("analyze", ("module_loops", "report_from_result", "schedule_loop", "schedule_module")),
    ("depgraph", ("DepGraph", "Edge", "Node", "build_loop_graph")),
    ("machine", ("FAMILIES", "MachineModel", "OpResources", "PoolUse", "ResourceUse", "classify", "family_of",
                 "machine_model")),
    ("modulo", ("MIIParts", "ReservationTable", "ScheduleError", "ScheduleOptions", "ScheduleResult",
                "check_schedule", "compute_mii", "schedule_graph")),
    ("report", ("IIAttempt", "ScheduledOp", "ScheduleReport", "chrome_trace", "format_report", "format_rrt",
                "schedule_trace_json", "write_schedule_trace")),
) for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
