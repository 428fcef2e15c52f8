"""select-tile-tensor-copies: which tile loads land by TMA (a tensor map) instead of per-thread ld.global.

Contract: in: IR after keep-accumulators-in-tensor-memory (layouts assigned, loops pipelined and prefetched, no
shared-memory offsets yet). out: a `load_view_tko` that `tilegpu.tensor_maps.plan_tile_copy` accepts -- a 1-D
or 2-D tile of f16/bf16/f32/i32 through a view with zero padding (TMA writes zeros outside the tensor; NVIDIA's
tool, too, loads only such views by TMA), whose launch hints promise a unit inner stride and 16-byte aligned
base and outer strides, in boxes of at most 256 elements a dimension whose rows are multiples of 16 bytes --
and that a loop loads again each iteration or that is in a kernel with a `reduce` (where NVIDIA's tool uses
TMA: a one-shot elementwise, scan or gather tile keeps its vectorised ld.global and pays for no mbarrier)
becomes a `tilegpu.tma_issue` and a `tilegpu.tma_read` of the same tile in the same layout, its map in a hidden
entry parameter after the kernel's own and the K-loop maps of select-tensor-copies (loads of one array in the
same boxes share a map).  The issue moves up its block as far as its operands allow (the pure ops making its
view and index move with it), past ops that write no memory and order nothing, never past a loop, a branch or
another issue; the read sits right before the first op that uses the tile: the copies fly meanwhile (a
prefetched load's, while the iteration computes).

Each load has a shared buffer of its own (code generation declares it, 128-byte aligned, apart from the buffers
allocate-shared-memory places, so no other access ever shares its bytes); inside a loop its issue carries
`fence_reads` (the previous iteration's generic-proxy reads are fenced from the async proxy's writes) and
`after_reads` (its copies wait at a barrier for those reads) unless an op with its own barrier (a reduce or
scan across warps) runs every iteration between the read and the next issue, or an earlier issue of the block
has that barrier.  One `tilegpu.tma_barriers` at the start of the kernel holds an mbarrier per load, which
every thread arrives on once per issue.

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
from ...ir.opdef import is_ordered, writes_memory
from ..ir import KernelIR, parent_blocks, parents_of, replace_values, walk_blocks, walk_ops
from ..ops import TMA_BARRIERS, TMA_ISSUE, TMA_READ
from ..tensor_maps import TileCopy, kernel_hooks, param_layout, plan_tile_copy
from ..smem import self_syncing
from ..types import LayoutTile

_BUDGET = 16384         # bytes of tile buffers a kernel may declare
_MMA_PREFIX = ("mma", "tilegpu.mma", "tilegpu.tmem")
_LOOPS = ("for", "loop")
_STOPS = ("for", "loop", "if", TMA_ISSUE.name)    # issues keep their order and stay out of control flow


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


def _synced_between(body: list[Operation], issue: int, read: int) -> bool:
    """An op of a loop body with its own CTA barrier (a reduce or scan across warps) runs every iteration
    outside ops issue..read-1 (the read is placed before op `read`): between one iteration's reads of the
    buffer and the next iteration's copies into it."""
    return any(self_syncing(o) for i, o in enumerate(body) if i < issue or i >= read)


def _first_user(block_ops: list[Operation], after: int, value) -> int:
    """The index of the first op of the block after `after` that uses `value`, itself or in its regions (the
    terminator, which the value cannot outlive, when none does)."""
    for i in range(after + 1, len(block_ops)):
        o = block_ops[i]
        if any(v is value for inner in (o, *_nested_ops(o)) for v in inner.operand_values()):
            return i
    return len(block_ops) - 1


def _earliest(block_ops: list[Operation], at: int, load: Operation) -> tuple[int, list[Operation]]:
    """How far up its block a load's copies may be issued, and the pure ops defining its operands that move
    up with it (its view, a constant index): past ops that neither write memory nor order their effects and
    are no loop, branch or other issue -- so that the copies fly while, say, a reduction of another tile
    runs."""
    needed = {id(v) for v in load.operand_values()}
    carried: list[Operation] = []
    while at > 0:
        prev = block_ops[at - 1]
        defines = any(id(r) in needed for r in prev.results)
        if defines and not prev.regions and prev.spec.effects is None:
            carried.insert(0, prev)
            needed |= {id(v) for v in prev.operand_values()}
        elif (defines or prev.name in _STOPS or writes_memory(prev) or is_ordered(prev)
                or any(writes_memory(o) or is_ordered(o) for o in _nested_ops(prev))):
            break
        at -= 1
    return at, carried


def _nested_ops(op: Operation):
    for r in op.regions:
        for b in r.blocks:
            yield from walk_ops(b)


def _rewrite(k: KernelIR, plans: list[tuple[Operation, TileCopy]]) -> None:
    """Each planned load becomes a tma_issue as early as it may and a tma_read right before the first op
    that uses the tile; the kernel's first op initialises the mbarriers."""
    bars = Operation(TMA_BARRIERS, {}, {"stages": len(plans), "count": k.options.num_warps * 32, "maps": []},
                     [LayoutTile((), T.I32, None)], loc=k.fn.body.ops[0].loc)
    where = parent_blocks(k.fn.body)
    parent = parents_of(k.fn.body)
    mapping = {}
    for op, plan in plans:
        ty = op.results[0].type
        block = where[id(op)]
        use = _first_user(block.ops, block.ops.index(op), op.results[0])
        at, carried = _earliest(block.ops, block.ops.index(op), op)
        attrs = {"tma": plan}
        loop = _loop_of(op, parent)
        if loop is not None:
            attrs["fence_reads"] = True
            body = loop.regions[0].blocks[0].ops
            if block.ops is not body or not _synced_between(body, at, use):
                attrs["after_reads"] = True
        issue = Operation(TMA_ISSUE, {"view": op.operands["view"], "barriers": bars.result,
                                      "index": list(op.operands["index"])}, attrs,
                          [LayoutTile((), T.I64, None)], loc=op.loc)
        read = Operation(TMA_READ, {"barriers": bars.result, "state": issue.result}, {"tma": plan}, [ty],
                         loc=op.loc)
        block.ops[use:use] = [read]
        moved = {id(o) for o in carried} | {id(op)}
        block.ops[at:] = carried + [issue] + [o for o in block.ops[at:] if id(o) not in moved]
        mapping[id(op.results[0])] = read.result
        k.remark("passed", "memory", "TileTensorCopies",
                 f"the {'x'.join(map(str, ty.shape))} tile load is TMA: {plan.copies} box(es) of "
                 f"{'x'.join(map(str, plan.map.box))} through the map in parameter {plan.map.param}", op)
    k.fn.body.ops.insert(0, bars)
    replace_values(k.fn.body, mapping)
    _one_barrier_a_block(k)


def _one_barrier_a_block(k: KernelIR) -> None:
    """Of the tma_issues of one block that wait for earlier reads at a barrier, the first one's barrier
    serves the rest: every read of their buffers since their previous issue precedes it."""
    for b in walk_blocks(k.fn.body):
        issues = [o for o in b.ops if o.name == TMA_ISSUE.name and o.attrs.get("after_reads")]
        for o in issues[1:]:
            del o.attrs["after_reads"]
