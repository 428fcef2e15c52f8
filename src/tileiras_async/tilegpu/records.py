"""The records (the passes' dataclasses) that tile-GPU op attributes hold, by the kind the text names them
with (`#tilegpu.<kind><...>`).  The printer and the parser both ask this one table, so the two cannot
drift: a record class missing here is printed as `#tilegpu.opaque<...>` and a round-trip test fails."""
from __future__ import annotations

import re
import sys

from ..schedule.report import (ArmResult, DepEdge, IIAttempt, Partition, PoolRequest, RRTCell, RRTRow,
                               ScheduledOp, ScheduleReport, SlotUse)
from .decisions import PipelinedLoop, PipelinePlan
from .analysis.attention_pipeline import AttentionPlan, Landed
from .analysis.mma import FmaPlan, Instr, MmaPlan, Staging
from .passes.select_access_forms import FragmentLoads
from .passes.split_arg_reductions import ArgOrder
from .analysis.smem import DimBits
from .analysis.software_pipeline import Candidate, Geometry, Operand, PipelineInfo
from .analysis.tcgen05 import Tcgen05Descriptor, Tcgen05Issue, Tcgen05Plan
from .analysis.tensor_maps import HookValue, KernelHooks, TensorCopy, TensorMapSpec, TileCopy, TileStore
from .analysis.wgmma import Issue, SmemDescriptor, SmemOperand, WgmmaInstr, WgmmaPlan


def kind_of(cls: type) -> str:
    """A record's kind in the text: its class name in snake case (MmaPlan -> mma_plan)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.__name__).lower()


_CLASSES = (
    FmaPlan, Instr, MmaPlan, Staging, ArgOrder, DimBits, Candidate, Geometry, Operand, PipelineInfo,
    Tcgen05Descriptor, Tcgen05Issue, Tcgen05Plan, Issue, SmemDescriptor, SmemOperand, WgmmaInstr, WgmmaPlan,
    PipelinePlan, PipelinedLoop, FragmentLoads, HookValue, KernelHooks, TensorCopy, TensorMapSpec, TileCopy, TileStore,
    ScheduleReport, ScheduledOp, SlotUse, PoolRequest, DepEdge, ArmResult, IIAttempt, RRTCell, RRTRow, Partition,
    AttentionPlan, Landed)
RECORDS: dict[str, type] = {kind_of(c): c for c in _CLASSES}
assert len(RECORDS) == len(_CLASSES), "two record classes share a kind"


_CONSTANTS: dict[type, dict[object, object]] = {}


def canonical(record):
    """The named constant of its module that a frozen record equals (mma.F8_F32, wgmma.WG_I8_I32, ...), else
    the record itself: code generation tells instructions apart by identity, so one read back from the text
    must be that very object."""
    cls = type(record)
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        return record
    table = _CONSTANTS.get(cls)
    if table is None:
        module = vars(sys.modules[cls.__module__])
        table = _CONSTANTS[cls] = {v: v for v in module.values() if type(v) is cls}
    try:
        return table.get(record, record)
    except TypeError:   # a field that cannot be hashed: no constant holds one
        return record
