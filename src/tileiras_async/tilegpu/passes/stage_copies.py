"""choose-stage-copies: which operands of a K-loop land in their stage buffers by TMA (a tensor map), decided
once, before the loop is scheduled.

Contract: in: IR with layouts and select-mma's plans, before schedule-loops.  out: the IR is unchanged but for
one attribute: the A or B `load_view_tko` of a K-loop that `tilegpu.analysis.software_pipeline.analyze` accepts
gets `stage_copy = "tma"` (tilegpu.decisions.STAGE_COPY) where its stage copies, once the loop is pipelined,
are TMA copies instead of cp.async: a wgmma/tcgen05 operand that `tilegpu.analysis.tensor_maps.plan_tensor_copy`
accepts, an mma.sync / FMA operand that `plan_staged_tensor_copy` accepts whose unpadded stage rows
(`software_pipeline.unpadded_stage_layout`) fit the padded ring.  The stage layout depends on the geometry
(stages, K chunk) schedule-loops fixes later: an operand is chosen only where every geometry it may fix
(`software_pipeline.plan_geometry` for MIN_STAGES up to --num-stages stages) admits the copies, so that the
copies of whichever it fixes can be built.  schedule-loops books such a load in the machine model's TMA
class (`tma_load`) and splits a wgmma loop whose A and B are both TMA into producer and consumer warpgroups;
select-tensor-copies, after it, builds the copies (maps, boxes, swizzle) for the geometry the schedule
fixed.  Nothing is chosen where pipelining is off, on targets without TMA or whose hooks' parameter layout
is not known (targets.HOOK_PARAM_BANK_BASE: sm_90, sm_100), or for views the launch hints do not make
eligible (kernels without hints keep their cp.async copies).
"""
from __future__ import annotations

from ..analysis.software_pipeline import (MIN_STAGES, Candidate, analyze, chunk_bounds, chunk_geometry,
                                          plan_geometry, stage_budget, unpadded_stage_layout)
from ..analysis.tensor_maps import plan_tensor_copy
from ..decisions import STAGE_COPY
from ..ir import KernelIR, walk_ops
from .tensor_copies import staged_plans


def run(k: KernelIR) -> None:
    tgt = k.options.known_target
    if tgt is None or not (tgt.has_tma and tgt.has_tensor_map_hooks):
        return
    limit = int(k.options.pipeline_stages or 1)
    if limit < MIN_STAGES:
        return
    for loop in [op for op in walk_ops(k.fn.body) if op.name == "for"]:
        cand = analyze(k.options, loop)
        if isinstance(cand, Candidate):
            for x in tma_operands(cand, k.fn.body.args, limit):
                x.load.attrs[STAGE_COPY] = "tma"


def tma_operands(cand: Candidate, args, limit: int) -> list:
    """The operands of K-loop `cand` whose stage copies can be TMA in every geometry schedule-loops may fix for
    it (at most `limit` stages; module docstring); `cand`'s layouts are left as the last geometry tried."""
    bounds = chunk_bounds(cand)
    if isinstance(bounds, str):
        return []
    kdim, min_kc = bounds
    budget = stage_budget(cand)
    geoms = {}
    for s in range(MIN_STAGES, limit + 1):
        g = plan_geometry(cand, kdim, min_kc, s, budget)
        if g is not None:
            geoms[(g.stages, g.kc)] = g
    xs = [cand.a, cand.b] if geoms else []
    for g in geoms.values():
        chunk_geometry(cand, kdim, g.kc, g.stages)
        if cand.wgmma is not None:
            xs = [x for x in xs if not isinstance(plan_tensor_copy(x, g.kc, args, 0), str)]
        else:
            planned = {id(x) for x, _ in staged_plans(cand, xs, g.kc, args, 0)}
            xs = [x for x in xs if id(x) in planned]
    if cand.wgmma is None and xs and not all(_unpadded_fits(cand, xs, kdim, g, args) for g in geoms.values()):
        return []
    return xs


def _unpadded_fits(cand: Candidate, xs: list, kdim: int, geom, args) -> bool:
    """Whether the stage buffers of `geom` with the rows of `xs` unpadded for their tensor copies fit the ring
    planned with padded rows."""
    geom = chunk_geometry(cand, kdim, geom.kc, geom.stages)
    for x, plan in staged_plans(cand, xs, geom.kc, args, 0):
        x.tma = plan
    fits = unpadded_stage_layout(cand, geom)
    for x in xs:
        x.tma = None
    return fits
