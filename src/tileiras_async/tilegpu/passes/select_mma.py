"""select-mma: choose the instruction every mmaf/mmai runs on.

Contract: in: tile-GPU IR. out: every `mmaf`/`mmai` has an `instruction` attribute: "wgmma.<key>" (Hopper's
warpgroup MMA, `tilegpu.analysis.wgmma.WG_INSTRS`: on sm_90 for tiles of 64+ rows, where NVIDIA's tileiras uses
HGMMA), the key of an mma.sync instruction (`tilegpu.analysis.mma.INSTRS`: shapes and types for the target) or "fma"
(the FMA chain on CUDA cores: f32 x f32, which NVIDIA's tool computes exactly, and shapes too small for any
instruction), and a tensorcore remark says which and why; every mmaf/mmai also gets `mma_plan` (its
`tilegpu.analysis.mma` plan: None for the FMA chain, which gets `fma_plan`) and every mmaf_scaled those of its block
products. Later passes (layouts, shared memory, pipelining) and code generation follow the attributes; none
chooses again.
"""
from __future__ import annotations

from ..ir import KernelIR, walk_ops
from ..errors import LoweringError
from ...ir import types as T
from ..analysis.mma import (_FP8, FMA_PLAN, INSTRS_BY_KEY, MMA_PLAN, MMA_PLAN_ERROR, TCGEN05_PREFIX, WGMMA_PREFIX, _name,
                   choose_instruction, fma_plan_for, plan_for, recorded_plan)
from ..analysis.scaled_mma import block_product
from ..analysis.tcgen05 import tcgen05_choice
from ..analysis.wgmma import wgmma_choice


def run(k: KernelIR) -> None:
    for op in walk_ops(k.fn.body):
        if op.name == "mmaf_scaled":
            _record_plan(k, op, block_product(op))
        if op.name not in ("mmaf", "mmai"):
            continue
        key = choose_instruction(k.options, op)
        op.attrs["instruction"] = key
        _record_plan(k, op, op)
        lhs, rhs = op.operands["lhs"].type, op.operands["rhs"].type
        what = (f"{op.name} {'x'.join(map(str, op.result.type.shape))} ({lhs.elem} x {rhs.elem} -> "
                f"{op.result.type.elem})")
        if key == "fma":
            k.remark("missed", "tensorcore", "MmaOnCudaCores",
                     f"{what} computed with FMA on CUDA cores (no tensor-core instruction for these types or this "
                     f"shape)", op)
        elif key.startswith(TCGEN05_PREFIX):
            _remark_tcgen05(k, op, what)
        elif key.startswith(WGMMA_PREFIX):
            plan = recorded_plan(op)
            k.remark("passed", "tensorcore", "MmaInstruction",
                     f"{what} lowered to wgmma.mma_async {plan.shape_name} ({plan.instr.key}, "
                     f"{plan.wm * plan.wb * plan.wn} warpgroup(s), {plan.rb * plan.rm * plan.rn} instruction(s) per "
                     f"K step)", op)
        else:
            instr = INSTRS_BY_KEY[key]
            k.remark("passed", "tensorcore", "MmaInstruction",
                     f"{what} lowered to mma.sync m{instr.m}n{instr.n}k{instr.k} ({instr.key}){_not_wgmma(k, op)}",
                     op)


def _record_plan(k: KernelIR, op, mma) -> None:
    """`mma_plan`: how `mma` (the op itself, or an mmaf_scaled's block product) maps onto the instruction;
    the later passes and code generation follow it. A plan that cannot be made is recorded as why
    (`mma_plan_error`): the first pass that needs the plan reports it (assign-layouts, in the order of the
    kernel's ops), so a kernel failing for another reason first still says that."""
    try:
        op.attrs[MMA_PLAN] = plan = plan_for(k.options, mma)
    except LoweringError as e:
        op.attrs[MMA_PLAN_ERROR] = str(e)
        return
    if plan is None:   # the FMA chain stages its operands as the loads give them, fp8 widened to f16
        lhs, rhs = (mma.operands[n].type.elem for n in ("lhs", "rhs"))
        op.attrs[FMA_PLAN] = fma_plan_for(mma, *(T.F16 if _name(e) in _FP8 else e for e in (lhs, rhs)))


def _remark_tcgen05(k: KernelIR, op, what: str) -> None:
    plan = recorded_plan(op)
    k.remark("passed", "tensorcore", "MmaInstruction",
             f"{what} lowered to {plan.ptx} {plan.shape_name} ({plan.instr.key}, {plan.rb * plan.rm * plan.rn} "
             f"instruction(s) per K step, {plan.tmem_cols} tensor-memory columns)", op)


def _not_wgmma(k: KernelIR, op) -> str:
    """On sm_90 (sm_100, sm_120), why the op keeps mma.sync (the remark's tail)."""
    tgt = k.options.known_target
    if tgt is None:
        return ""
    if tgt.is_blackwell and not tgt.has_tensor_memory:
        return f"; the best {tgt.name} has (no wgmma or tcgen05 there)"
    if tgt.has_tcgen05:
        if getattr(k.options, "mma_instruction", "auto") == "mma.sync":
            return "; not tcgen05: mma.sync was asked for"
        return f"; not tcgen05: {tcgen05_choice(k.options, op)}"
    if not tgt.has_wgmma:
        return ""
    if getattr(k.options, "mma_instruction", "auto") == "mma.sync":
        return "; not wgmma: mma.sync was asked for"
    return f"; not wgmma: {wgmma_choice(k.options, op)}"
