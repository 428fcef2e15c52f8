"""issue-tile-tensor-copies: the tile loads select-tile-tensor-copies gave `tma` become TMA copies.

Contract: in: IR after keep-accumulators-in-tensor-memory (loops pipelined and prefetched, no shared-memory
offsets yet), `load_view_tko`s carrying `tma` (a `tilegpu.analysis.tensor_maps.TileCopy`, each its own mbarrier slot:
two loads with one slot are a LoweringError).  out: each becomes a `tilegpu.tma_issue` and a `tilegpu.tma_read`
of the same tile in the same layout.  The issue moves up its block as far as its operands allow (the pure ops
making its view and index move with it), past ops that write no memory and order nothing, never past a loop, a
branch or another issue; the read sits right before the first op that uses the tile: the copies fly meanwhile.

Each load has a shared buffer of its own (code generation declares it, 128-byte aligned, apart from the buffers
allocate-shared-memory places, so no other access ever shares its bytes); inside a loop its issue carries
`fence_reads` (the previous iteration's generic-proxy reads are fenced from the async proxy's writes) and
`after_reads` (its copies wait at a barrier for those reads) unless an op with its own barrier (a reduce or
scan across warps) runs every iteration between the read and the next issue, or an earlier issue of the block
has that barrier.  One `tilegpu.tma_barriers` at the start of the kernel holds an mbarrier per slot, which
every thread arrives on once per issue.
"""
from __future__ import annotations

from ...ir import types as T
from ...ir.core import Operation
from ...ir.opdef import is_ordered, writes_memory
from ..errors import LoweringError
from ..ir import KernelIR, parent_blocks, parents_of, replace_values, walk_blocks, walk_ops
from ..ops import TMA_BARRIERS, TMA_ISSUE, TMA_READ
from ..analysis.smem import self_syncing
from ..analysis.tensor_maps import TileCopy
from ..types import LayoutTile
from .tile_tensor_copies import loop_of

_STOPS = ("for", "loop", "if", TMA_ISSUE.name)    # issues keep their order and stay out of control flow


def run(k: KernelIR) -> None:
    plans = [(op, op.attrs["tma"]) for op in walk_ops(k.fn.body)
             if op.name == "load_view_tko" and isinstance(op.attrs.get("tma"), TileCopy)]
    if plans:
        _check_slots(plans)
        _rewrite(k, plans)


def _check_slots(plans: list[tuple[Operation, TileCopy]]) -> None:
    """One mbarrier and one buffer a load: a pass that copied a decided load (a prefetch) broke the decision."""
    seen: set[int] = set()
    for op, plan in plans:
        if plan.slot in seen:
            raise LoweringError(f"two tile loads share TMA slot {plan.slot}: a decided load was copied", op.loc)
        seen.add(plan.slot)


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
    bars = Operation(TMA_BARRIERS, {}, {"stages": 1 + max(plan.slot for _, plan in plans), "count": k.options.num_warps * 32, "maps": []},
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
        loop = loop_of(op, parent)
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
