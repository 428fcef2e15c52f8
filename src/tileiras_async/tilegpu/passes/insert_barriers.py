"""insert-barriers: a `bar.sync` exactly where one thread's shared-memory access could race another's.

Contract: in: IR after allocate-shared-memory (buffers have offsets). out: a `tilegpu.barrier` before every
access that overlaps an access made since the last barrier, when one of the two writes (RAW, WAR, WAW
across threads); none elsewhere. Every thread runs the same path (conditions and loop bounds are uniform),
so a barrier inside an `if` or a loop is legal. Loops: what the end of an iteration left pending meets the
start of the next; an op that stages through its own scratch writes it first and reads it last (a reduce or
scan across warps waits at its own barrier in between, which orders every earlier access too) -- but a
`tmem_column` mma_landed, whose every thread waits for its mmas, leaves no read of it pending.  A
`tma_barriers` ends with a CTA barrier of its own (but with `barrier_follows`): it orders what came before
(an attention loop's hoisted A, staged before its ring's mbarriers are initialised).
"""
from __future__ import annotations

from ...ir.core import Block, Operation, Value
from ...ir.opdef import effects_of
from ..ir import KernelIR, parents_of, walk_ops
from ..ops import BARRIER, LOCAL_ALLOC, MMA_LANDED, SHARED, TMA_BARRIERS, RingAccess
from ..analysis.smem import self_syncing

Access = tuple[int, int, str, int]      # (first byte, end byte, "r" | "w", protocol: 0 or a ring's id)
State = frozenset

# ops that synchronise the CTA themselves
_SYNCING = frozenset({BARRIER.name, "memory_fence_alias_tko"})


def _synchronises(op: Operation) -> bool:
    """A CTA barrier: the ops above, and a `tma_barriers` that ends with its own (unless a later barrier
    publishes its mbarriers: `barrier_follows`)."""
    return op.name in _SYNCING or (op.name == TMA_BARRIERS.name and not op.attrs.get("barrier_follows"))
_EXITS = frozenset({"continue", "break", "return"})

def run(k: KernelIR) -> None:
    _Barriers(k.fn.body).block(k.fn.body, frozenset(), insert=True)


def _buffer(op: Operation, buffer: Value) -> tuple[int, int]:
    alloc = buffer.owner
    if not isinstance(alloc, Operation) or alloc.name != LOCAL_ALLOC.name or "offset" not in alloc.attrs:
        raise ValueError(f"{op.name}: its buffer has no place in shared memory")
    lo = alloc.attrs["offset"]
    return lo, lo + alloc.result.type.nbytes


def accesses(op: Operation) -> tuple[list[Access], list[Access]]:
    """(what the op does first, what it leaves pending): its shared-memory accesses at its start and end,
    from its declared effects on buffers.  A pipelined loop's copies and mma access their ring under their
    own protocol (`RingAccess`: cp.async waits and the pipeline's barriers order them): they conflict only
    with accesses outside it, and with an earlier run of the same loop (`_fresh_rings`)."""
    declared = [(e, v) for e, v in effects_of(op)
                if e.resource == SHARED and e.kind in ("read", "write") and isinstance(v, Value)]
    ring = op.spec.has_trait(RingAccess)
    a = [(*_buffer(op, v), "w" if e.kind == "write" else "r", id(v) if ring else 0) for e, v in declared]
    if "scratch_offset" not in op.attrs:
        return a, a
    lo = op.attrs["scratch_offset"]
    hi = lo + op.attrs["scratch_bytes"]
    if _waits_for_its_reads(op):
        return [(lo, hi, "w", 0)], a
    # with scratch, buffers are read after the op's own barrier (mma_prestaged's hoisted operand)
    return [(lo, hi, "w", 0)], [(lo, hi, "r", 0)] + a


def _waits_for_its_reads(op: Operation) -> bool:
    """A `tmem_column` mma_landed (tcgen05 on columns allocated at the entry) leaves no read of its scratch
    pending: every thread waits for the commit of its mmas before loading D, so the tensor core has read the
    staged A before any thread goes on to write there again (an attention loop's P, staged each iteration:
    no CTA barrier between two iterations' stagings)."""
    return op.name == MMA_LANDED.name and "tmem_column" in op.attrs


def _conflict(state: State, acc: Access) -> bool:
    lo, hi, kind, protocol = acc
    return any(plo < hi and lo < phi and "w" in (kind, pkind) and not (protocol and protocol == pprot)
               for plo, phi, pkind, pprot in state)


class _Barriers:
    def __init__(self, body: Block):
        self.touched = _ops_touching_smem(body)   # id(region op) for those with shared-memory accesses inside

    def block(self, block: Block, state: State, insert: bool) -> State:
        out = []
        for op in block.ops:
            if _synchronises(op):
                state = frozenset()
                out.append(op)
                continue
            # an op's own accesses (a reduce's or scan's scratch: its regions are combiners), then its regions'
            first, pending = accesses(op)
            if any(_conflict(state, a) for a in first):
                if insert:
                    out.append(Operation(BARRIER, loc=op.loc))
                state = frozenset()
            if op.regions and id(op) in self.touched:
                state = self.region_op(op, state, insert)
            if self_syncing(op):
                state = frozenset()     # its own barrier (between its writes and its reads) orders all before
            state = state | frozenset(pending)
            out.append(op)
        if insert:
            block.ops = out
        return state

    def region_op(self, op: Operation, state: State, insert: bool) -> State:
        blocks = [b for r in op.regions for b in r.blocks]
        if op.name in ("for", "loop"):
            # an iteration starts with what came before the loop or what an earlier iteration left pending
            entry = state | _fresh_rings(_tail(blocks[0]), blocks[0])
            self.block(blocks[0], entry, insert)
            return entry
        ends = [self.block(b, state, insert) for b in blocks]
        if len(blocks) < 2:
            ends.append(state)   # an `if` without else: the condition may be false
        out = frozenset()
        for e in ends:
            out |= e
        return out


def _fresh_rings(pending: State, body: Block) -> State:
    """What an iteration of a loop whose body is `body` meets of an earlier one: a ring allocated in the body
    is filled afresh by each iteration (a pipelined K-loop inside a persistent kernel's loop over tiles):
    its protocol orders the accesses of one run of its K-loop only, so those of an earlier run are plain
    accesses to the next run's prologue copies (the previous tile's last stages may still be being read)."""
    inside = {id(o.result) for o in walk_ops(body) if o.name == LOCAL_ALLOC.name}
    return frozenset((lo, hi, kind, 0 if prot in inside else prot) for lo, hi, kind, prot in pending)


def _tail(block: Block) -> State:
    """What the end of `block` can leave pending whatever came before it (a superset): the accesses after its
    last top-level synchronisation -- a barrier, or a self-syncing op's own (which leaves its reads) --, all
    of a region op's.  The body's end state from any entry S lies within S and this, so S | _tail is where a
    loop's iterations start; computed by one walk (no re-run of nested loops, whatever their depth)."""
    out: set[Access] = set()
    if any(o.name in _EXITS and o is not block.ops[-1] for o in walk_ops(block)):
        # an iteration may end (or the loop be left) anywhere: all of the body's accesses
        return frozenset(a for o in walk_ops(block) for part in accesses(o) for a in part)
    for op in reversed(block.ops):
        if _synchronises(op):
            break
        first, pending = accesses(op)
        out.update(pending)
        if self_syncing(op):
            break
        for inner in (o for r in op.regions for b in r.blocks for o in walk_ops(b)):
            for part in accesses(inner):
                out.update(part)
    return frozenset(out)


def _ops_touching_smem(body: Block) -> set[int]:
    """ids of the region ops whose regions (at any depth) access shared memory or synchronise."""
    parent = parents_of(body)
    out: set[int] = set()
    for op in walk_ops(body):
        if _synchronises(op) or any(accesses(op)):
            p = parent.get(id(op))
            while p is not None and id(p) not in out:
                out.add(id(p))
                p = parent.get(id(p))
    return out
