"""select-tile-tensor-copies: which tile loads land by TMA (a tensor map) instead of per-thread ld.global.

Contract: in: IR with layouts, before schedule-loops (no loop scheduled, pipelined or prefetched yet; the decision
reads only the launch hints' facts, the views and the layouts).  out: the IR is unchanged but for attributes: a
`load_view_tko` that `tilegpu.analysis.tensor_maps.plan_tile_copy` accepts -- a 1-D or 2-D tile of f16/bf16/f32/i32
through a view with zero padding (TMA writes zeros outside the tensor; NVIDIA's tool, too, loads only such views
by TMA), whose launch hints promise a unit inner stride and 16-byte aligned base and outer strides, in boxes of at
most 256 elements a dimension whose rows are multiples of 16 bytes -- and that a loop loads again each iteration
or that is in a kernel with a `reduce` (where NVIDIA's tool uses TMA: a one-shot elementwise, scan or gather tile
keeps its vectorised ld.global and pays for no mbarrier) gets `tma`, its `tilegpu.analysis.tensor_maps.TileCopy`: its map
in a hidden entry parameter after the kernel's own (loads of one array in the same boxes share a map) and its
mbarrier slot, one a load.  schedule-loops books such a load in the machine model's TMA class (`tma_load`) and
never prefetches it through registers (software_pipeline.movable_loads); issue-tile-tensor-copies, after the
K-loop passes, turns it into the copies the attribute describes.

A load is TMA or prefetched through registers, never both, and TMA wins: a loop whose movable loads are all TMA
is kept serial (the copies fly from the hoisted issue to the first use), the others of its loads may still be
prefetched.  Measured on the launch set (bench/dynamic_instructions.py, bench/codegen_quality.py; sm_90, sm_100
alike) for the three kernels where the rules differ: executed thread-instructions / static SASS / registers for
(a) register prefetch of TMA copies (the former mixed form), (b) TMA, loop serial (this rule), (c) register
prefetch with ld.global instead of TMA:
  cumsum_carry_i32_t128   (a)    71,808 / 130 / 25   (b)    65,664 / 122 / 24   (c)    64,512 / 111 / 26
  layernorm_f16_128       (a)   864,256 / 612 / 28   (b)   765,952 / 449 / 29   (c)   753,664 / 673 / 40
  layernorm_f32_64        (a) 1,462,272 / 667 / 28   (b) 1,191,936 / 392 / 27   (c) 1,155,072 / 626 / 39
(c) executes 1.6-3.2% fewer instructions than (b) but is up to 60% more code and 11-12 more registers, and
NVIDIA's tool loads these tiles by TMA too (the maps are NVIDIA's).  A ring of `DISTANCE + 1` buffers issued
iterations ahead would add its slot and phase arithmetic to (b)'s count; what it would hide of the latency
wants a timing on the device.

Loads whose token orders later memory operations or that are not weak stay as they are, and so do all loads of
a kernel with an mma (its shared memory and its loads are the K-loop passes' business), of a kernel without
launch hints, beyond _BUDGET bytes of buffers, and on targets without TMA or whose hooks' parameter layout is
not known (targets.HOOK_PARAM_BANK_BASE: sm_90, sm_100).
"""
from __future__ import annotations

import dataclasses

import msgspec

from ...ir.core import Operation
from ...ir.enums import MemoryOrderingSemantics as MO
from ..ir import KernelIR, parents_of, walk_ops
from ..analysis.tensor_maps import TileCopy, kernel_hooks, param_layout, plan_tile_copy

_BUDGET = 16384         # bytes of tile buffers a kernel may declare
_MMA_PREFIX = ("mma", "tilegpu.mma", "tilegpu.tmem")
_LOOPS = ("for", "loop")


def _used_values(k: KernelIR) -> set[int]:
    """ids of the values some op uses."""
    return {id(v) for op in walk_ops(k.fn.body) for v in op.operand_values()}


def _eligible(op: Operation, used: set[int]) -> bool:
    """A weak tile load whose token orders nothing."""
    return op.attrs.get("memory_ordering_semantics", MO.weak) == MO.weak and id(op.results[1]) not in used


def run(k: KernelIR) -> None:
    tgt = k.options.known_target
    if tgt is None or not (tgt.has_tma and tgt.has_tensor_map_hooks):
        return
    ops = list(walk_ops(k.fn.body))
    loads = [op for op in ops if op.name == "load_view_tko"]
    if not loads or any(op.name.startswith(_MMA_PREFIX) for op in ops):
        return
    used = _used_values(k)
    reducing = any(op.name == "reduce" for op in ops)
    parent = parents_of(k.fn.body)
    hooks = kernel_hooks(k)
    first_param = len(hooks.params) if hooks is not None else len(param_layout(k.fn.type.inputs))
    plans: list[tuple[Operation, TileCopy]] = []
    maps: dict = {}       # a map's description with parameter 0 -> the parameter it is in
    budget = _BUDGET
    for op in loads:
        if not _eligible(op, used) or not (reducing or _in_loop(op, parent)):
            continue
        plan = plan_tile_copy(op, k.fn.body.args, first_param + len(maps), len(plans))
        if isinstance(plan, str) or plan.bytes > budget:
            continue
        # loads of the same array in the same boxes share one map (NVIDIA's hooks write one per array too)
        param = maps.setdefault(msgspec.structs.replace(plan.map, param=0), plan.map.param)
        plans.append((op, dataclasses.replace(plan, map=msgspec.structs.replace(plan.map, param=param))))
        budget -= plan.bytes
    for op, plan in plans:
        op.attrs["tma"] = plan
        k.remark("passed", "memory", "TileTensorCopies",
                 f"the {'x'.join(map(str, plan.shape))} tile load is TMA: {plan.copies} box(es) of "
                 f"{'x'.join(map(str, plan.map.box))} through the map in parameter {plan.map.param}", op)


def loop_of(op: Operation, parent: dict[int, Operation]) -> Operation | None:
    """The innermost loop around `op`."""
    p = parent.get(id(op))
    while p is not None and p.name not in _LOOPS:
        p = parent.get(id(p))
    return p


def _in_loop(op: Operation, parent: dict[int, Operation]) -> bool:
    return loop_of(op, parent) is not None


