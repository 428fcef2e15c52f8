"""select-mma: choose the instruction every mmaf/mmai runs on.

Contract: in: tile-GPU IR. out: every `mmaf`/`mmai` has an `instruction` attribute: the key of the tensor-core
instruction (`tilegpu.mma.INSTRS`: mma.sync shapes and types for the target) or "fma" (the FMA chain on CUDA
cores: f32 x f32, which NVIDIA's tool computes exactly, and shapes too small for any instruction), and a
tensorcore remark says which and why. Later passes (layouts, shared memory, pipelining) and code generation
follow the attribute; none chooses again.
"""
from __future__ import annotations

from ..ir import KernelIR, walk_ops
from ..mma import select_instr


def run(k: KernelIR) -> None:
    for op in walk_ops(k.fn.body):
        if op.name not in ("mmaf", "mmai"):
            continue
        instr = select_instr(k.options, op)
        op.attrs["instruction"] = instr.key if instr is not None else "fma"
        lhs, rhs = op.operands["lhs"].type, op.operands["rhs"].type
        what = (f"{op.name} {'x'.join(map(str, op.result.type.shape))} ({lhs.elem} x {rhs.elem} -> "
                f"{op.result.type.elem})")
        if instr is None:
            k.remark("missed", "tensorcore", "MmaOnCudaCores",
                     f"{what} computed with FMA on CUDA cores (no tensor-core instruction for these types or this "
                     f"shape)", op)
        else:
            k.remark("passed", "tensorcore", "MmaInstruction",
                     f"{what} lowered to mma.sync m{instr.m}n{instr.n}k{instr.k} ({instr.key})", op)
