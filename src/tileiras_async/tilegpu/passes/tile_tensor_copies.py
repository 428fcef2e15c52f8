"""select-tile-tensor-copies: which tile loads land by TMA (a tensor map) instead of per-thread ld.global.

Contract: in: IR after keep-accumulators-in-tensor-memory (layouts assigned, loops pipelined and prefetched, no
shared-memory offsets yet). out: a `load_view_tko` that `tilegpu.tensor_maps.plan_tile_copy` accepts -- a 1-D
or 2-D tile of f16/bf16/f32/i32 through a view with zero padding (TMA writes zeros outside the tensor; NVIDIA's
tool, too, loads only such views by TMA), whose launch hints promise a unit inner stride and 16-byte aligned
base and outer strides, in boxes of at most 256 elements a dimension whose rows are multiples of 16 bytes --
and that a loop loads again each iteration or that is in a kernel with a `reduce` (where NVIDIA's tool uses
TMA: a one-shot elementwise, scan or gather tile keeps its vectorised ld.global and pays for no mbarrier)
becomes a `tilegpu.tma_load` of the same tile in the same layout, its map in a hidden entry parameter after the
kernel's own and the K-loop maps of select-tensor-copies (loads of one array in the same boxes share a map).

Each tma_load has a shared buffer of its own (code generation declares it, 128-byte aligned, apart from the
buffers allocate-shared-memory places, so no other access ever shares its bytes); inside a loop it carries
`fence_reads` (the previous iteration's generic-proxy reads are fenced from the async proxy's writes) and,
unless the loop body runs an op with its own barrier every iteration, `after_reads`: its copies wait at a
barrier for those reads.  One `tilegpu.tma_barriers` at the start of the kernel holds an mbarrier per tma_load,
which every thread arrives on once per execution.

Loads whose token orders later memory operations or that are not weak stay as they are, and so do all loads of
a kernel with an mma (its shared memory and its loads are the K-loop passes' business), of a kernel without
launch hints, beyond _BUDGET bytes of buffers, and on targets without TMA or whose hooks' parameter layout is
not known (targets.HOOK_PARAM_BANK_BASE: sm_90, sm_100).
"""
from __future__ import annotations

import dataclasses

import msgspec

from ...ir import types as T
from ...ir.core import Operation
from ...ir.enums import MemoryOrderingSemantics as MO
from ..ir import KernelIR, parent_blocks, parents_of, replace_values, walk_ops
from ..ops import TMA_BARRIERS, TMA_LOAD
from ..tensor_maps import TileCopy, kernel_hooks, param_layout, plan_tile_copy
from ..smem import self_syncing
from ..types import LayoutTile

_BUDGET = 16384         # bytes of tma_load buffers a kernel may declare
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
    if plans:
        _rewrite(k, plans)


def _loop_of(op: Operation, parent: dict[int, Operation]) -> Operation | None:
    """The innermost loop around `op`."""
    p = parent.get(id(op))
    while p is not None and p.name not in _LOOPS:
        p = parent.get(id(p))
    return p


def _in_loop(op: Operation, parent: dict[int, Operation]) -> bool:
    return _loop_of(op, parent) is not None


def _synced_every_iteration(loop: Operation) -> bool:
    """The loop's body runs an op with its own CTA barrier (a reduce or scan across warps) every iteration:
    between a tma_load's reads of its buffer in one iteration and its copies in the next."""
    return any(self_syncing(o) for r in loop.regions for b in r.blocks for o in b.ops)


def _rewrite(k: KernelIR, plans: list[tuple[Operation, TileCopy]]) -> None:
    """Each planned load becomes a tma_load; the kernel's first op initialises the mbarriers."""
    bars = Operation(TMA_BARRIERS, {}, {"stages": len(plans), "count": k.options.num_warps * 32, "maps": []},
                     [LayoutTile((), T.I32, None)], loc=k.fn.body.ops[0].loc)
    where = parent_blocks(k.fn.body)
    parent = parents_of(k.fn.body)
    mapping = {}
    for op, plan in plans:
        ty = op.results[0].type
        attrs = {"tma": plan}
        loop = _loop_of(op, parent)
        if loop is not None:
            attrs["fence_reads"] = True
            if not _synced_every_iteration(loop):
                attrs["after_reads"] = True
        load = Operation(TMA_LOAD, {"view": op.operands["view"], "barriers": bars.result,
                                    "index": list(op.operands["index"])}, attrs, [ty], loc=op.loc)
        block = where[id(op)]
        block.ops[block.ops.index(op)] = load
        mapping[id(op.results[0])] = load.result
        k.remark("passed", "memory", "TileTensorCopies",
                 f"the {'x'.join(map(str, ty.shape))} tile load is TMA: {plan.copies} box(es) of "
                 f"{'x'.join(map(str, plan.map.box))} through the map in parameter {plan.map.param}", op)
    k.fn.body.ops.insert(0, bars)
    replace_values(k.fn.body, mapping)
