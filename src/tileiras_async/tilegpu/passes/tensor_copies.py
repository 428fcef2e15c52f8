"""select-tensor-copies: the TMA copies (tensor maps) of the pipelined K-loop operands choose-stage-copies chose,
built for the geometry schedule-loops fixed.

Contract: in: IR after schedule-loops (a K-loop it pipelines carries its `pipeline_plan`; its A/B loads carry
`stage_copy = "tma"` where choose-stage-copies, before the schedule, chose TMA copies for them).  out: the IR
is unchanged; such an operand of a wgmma K-loop gets `tma` (a `tilegpu.analysis.tensor_maps.TensorCopy` from
`plan_tensor_copy`: its map in a hidden entry parameter appended after the kernel's own, box and swizzle of its
stage layout), which the pipeline pass puts on its copies; so does such an operand of an mma.sync or FMA K-loop
(`plan_staged_tensor_copy`: one box per chunk, swizzled where ldmatrix reads it), whose stage rows lose their
padding (`software_pipeline.unpadded_stage_layout`: the plan's geometry changes, the ring is aligned for TMA);
`tensor_maps.kernel_hooks` reads the kernel's launch hooks (tilegpu.analysis.tensor_maps.KernelHooks: every
entry parameter's size and the maps), from which code generation declares the hidden parameters and writes
the host object that fills them.  Nothing is decided here: choose-stage-copies chose only what every
geometry the schedule may fix admits, so a chosen operand whose copies cannot be built is an internal error.
"""
from __future__ import annotations

from ..decisions import PIPELINE_PLAN, STAGE_COPY
from ..errors import LoweringError
from ..ir import KernelIR, walk_ops
from ..analysis.mma import MmaPlan, recorded_plan
from ..analysis.software_pipeline import unpadded_stage_layout
from ..analysis.tensor_maps import param_layout, plan_staged_tensor_copy, plan_tensor_copy
from .select_access_forms import fragment_loads


def run(k: KernelIR) -> None:
    pipelines = [op.attrs[PIPELINE_PLAN] for op in walk_ops(k.fn.body) if PIPELINE_PLAN in op.attrs]
    layout = param_layout(k.fn.type.inputs)
    maps = []
    for pipelined in pipelines:
        cand, geom = pipelined.cand, pipelined.geom
        chosen = [x for x in (cand.a, cand.b) if x.load.attrs.get(STAGE_COPY) == "tma"]
        if not chosen:
            continue
        tgt = k.options.known_target
        if tgt is None or not (tgt.has_tma and tgt.has_tensor_map_hooks):
            gpu = getattr(k.options.target, "name", k.options.target)
            raise LoweringError(f"stage copies chosen TMA for {gpu}, which has no tensor maps", cand.loop)
        if cand.wgmma is None:
            _staged_copies(k, cand, geom, chosen, len(layout), maps)
            continue
        for x in chosen:
            plan = plan_tensor_copy(x, geom.kc, k.fn.body.args, len(layout) + len(maps))
            if isinstance(plan, str):
                raise LoweringError(f"internal: the {x.role} operand's stage copies were chosen TMA, but {plan}",
                                    cand.loop)
            x.tma = plan
            maps.append(plan.map)
            k.remark("passed", "pipelining", "TensorCopies",
                     f"the {x.role} operand's stage copies are TMA: {plan.columns} box(es) of "
                     f"{plan.box[0]} x {plan.box[1]} ({plan.map.swizzle} swizzle) per K chunk", cand.loop)


def staged_plans(cand, xs: list, kc: int, args, param: int) -> list:
    """(operand, TensorCopy) for those of `xs` (operands of an mma.sync / FMA K-loop, staged in K chunks of kc)
    that tensor_maps.plan_staged_tensor_copy accepts, their maps in entry parameters from `param` on."""
    mma = recorded_plan(cand.mma)
    loads = fragment_loads(mma, cand.a, cand.b, kc) if isinstance(mma, MmaPlan) else None
    out = []
    for x in xs:
        plan = plan_staged_tensor_copy(x, kc, args, param + len(out), _reads_pieces(x, loads))
        if not isinstance(plan, str):
            out.append((x, plan))
    return out


def _staged_copies(k: KernelIR, cand, geom, chosen: list, params: int, maps: list) -> None:
    """The chosen operands of an mma.sync / FMA K-loop get their TMA copies, their stage rows unpadded."""
    planned = staged_plans(cand, chosen, geom.kc, k.fn.body.args, params + len(maps))
    for x, plan in planned:
        x.tma = plan
    if len(planned) != len(chosen) or not unpadded_stage_layout(cand, geom):
        raise LoweringError("internal: the stage copies were chosen TMA, but the fixed geometry does not admit "
                            "them", cand.loop)
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
