"""select-tensor-copies: which pipelined K-loop operands land by TMA (tensor maps) instead of cp.async.

Contract: in: IR after schedule-loops (a K-loop it pipelines carries its `pipeline_plan`). out: the IR
is unchanged; an operand of a wgmma K-loop that `tilegpu.analysis.tensor_maps.plan_tensor_copy` accepts gets `tma` (a
TensorCopy: its map in a hidden entry parameter appended after the kernel's own, box and swizzle of its stage
layout), which the pipeline pass puts on its copies; so does an operand of an mma.sync or FMA K-loop that
`plan_staged_tensor_copy` accepts (one box per chunk, swizzled where ldmatrix reads it), whose stage rows
lose their padding (`software_pipeline.unpadded_stage_layout`: the plan's geometry changes, the ring is
aligned for TMA); `tensor_maps.kernel_hooks` reads the kernel's launch hooks (tilegpu.analysis.tensor_maps.KernelHooks:
every entry parameter's size and the maps), from which code generation declares the hidden parameters and
writes the host object that fills them.  Operands the hints do not make eligible keep their cp.async
copies, so kernels without launch hints compile as before; so do targets whose hooks' parameter layout is
not known (targets.HOOK_PARAM_BANK_BASE: sm_90, sm_100).
"""
from __future__ import annotations

from ..decisions import PIPELINE_PLAN
from ..ir import KernelIR, walk_ops
from ..analysis.mma import MmaPlan, recorded_plan
from ..analysis.software_pipeline import unpadded_stage_layout
from ..analysis.tensor_maps import param_layout, plan_staged_tensor_copy, plan_tensor_copy
from .select_access_forms import fragment_loads


def run(k: KernelIR) -> None:
    tgt = k.options.known_target
    pipelines = [op.attrs[PIPELINE_PLAN] for op in walk_ops(k.fn.body) if PIPELINE_PLAN in op.attrs]
    if tgt is None or not (tgt.has_tma and tgt.has_tensor_map_hooks) or not pipelines:
        return
    layout = param_layout(k.fn.type.inputs)
    maps = []
    for pipelined in pipelines:
        cand, geom = pipelined.cand, pipelined.geom
        if cand.wgmma is None:
            _staged_copies(k, cand, geom, len(layout), maps)
            continue
        for x in (cand.a, cand.b):
            plan = plan_tensor_copy(x, geom.kc, k.fn.body.args, len(layout) + len(maps))
            if isinstance(plan, str):
                continue
            x.tma = plan
            maps.append(plan.map)
            k.remark("passed", "pipelining", "TensorCopies",
                     f"the {x.role} operand's stage copies are TMA: {plan.columns} box(es) of "
                     f"{plan.box[0]} x {plan.box[1]} ({plan.map.swizzle} swizzle) per K chunk", cand.loop)


def _staged_copies(k: KernelIR, cand, geom, params: int, maps: list) -> None:
    """The operands of an mma.sync / FMA K-loop that get TMA copies (tensor_maps.plan_staged_tensor_copy),
    their stage rows unpadded for it; none when that layout does not fit the planned ring."""
    mma = recorded_plan(cand.mma)
    loads = fragment_loads(mma, cand.a, cand.b, geom.kc) if isinstance(mma, MmaPlan) else None
    chosen = []
    for x in (cand.a, cand.b):
        plan = plan_staged_tensor_copy(x, geom.kc, k.fn.body.args, params + len(maps) + len(chosen),
                                       _reads_pieces(x, loads))
        if not isinstance(plan, str):
            x.tma = plan
            chosen.append(x)
    if chosen and not unpadded_stage_layout(cand, geom):
        for x in chosen:
            x.tma = None
        return
    for x in chosen:
        maps.append(x.tma.map)
        k.remark("passed", "pipelining", "TensorCopies",
                 f"the {x.role} operand's stage copies are TMA: one box of {' x '.join(map(str, x.tma.box))} "
                 f"per K chunk into unpadded rows ({x.tma.map.swizzle} swizzle)", cand.loop)


def _reads_pieces(x, loads) -> bool:
    """Whether every fragment read of mma.sync operand `x` stays within one 16-byte piece of its stage row
    (what a swizzle moves whole): ldmatrix's rows, and A's words (consecutive elements of a row); B's words
    gather elements of several rows.  None `loads`: not mma.sync (the FMA chain's reads are not)."""
    return loads is not None and (x.role == "a" or loads.b)
