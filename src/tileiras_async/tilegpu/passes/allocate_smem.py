"""allocate-shared-memory: give every shared-memory buffer its place in the kernel's static shared memory.

Contract: in: IR after materialize-shared-memory. out: every `local_alloc` has an `offset` attribute and
every op with `scratch_bytes` a `scratch_offset`; buffers whose lifetimes overlap (in program order, a
buffer used inside a loop it was not allocated in living through the whole loop; the scratch of an op with
its own staging barrier living until the next op with scratch, unless that does not fit) never share bytes,
others may. More than the target's per-CTA limit
(targets.shared_memory_limit: above the 48 KiB a kernel may declare without opt-in, as NVIDIA's tool allows
through ptxas --enable-extended-smem), less the staging buffers of TMA stores (select-tile-tensor-stores:
shared memory of their own), is an error.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from ...targets import shared_memory_limit
from ..errors import LoweringError
from ..ir import KernelIR
from ..ops import LOCAL_ALLOC
from ..types import align
from ..analysis.smem import self_syncing
from ..analysis.tensor_maps import tile_store_bytes

_LOOPS = ("for", "loop")


@dataclass
class _Frame:
    ops: list
    loops: tuple          # the loops around these ops, outermost first
    loop: object = None   # the loop whose body this is (its span closes when the frame ends)
    i: int = 0


@dataclass
class _Walk:
    position: dict = field(default_factory=dict)   # id(op) -> position in program order
    loops: dict = field(default_factory=dict)      # id(op) -> the loops around it
    spans: dict = field(default_factory=dict)      # id(loop) -> (first, last) position
    uses: dict = field(default_factory=dict)       # id(value) -> [(position, loops)]
    requests: list = field(default_factory=list)   # (op, size, attribute)


def _walk(k: KernelIR) -> _Walk:
    w = _Walk()
    pos = 0
    frames = [_Frame(k.fn.body.ops, ())]
    while frames:
        f = frames[-1]
        if f.i >= len(f.ops):
            frames.pop()
            if f.loop is not None:
                w.spans[id(f.loop)] = (w.spans[id(f.loop)][0], pos - 1)
            continue
        op = f.ops[f.i]
        f.i += 1
        w.position[id(op)] = pos
        w.loops[id(op)] = f.loops
        for v in op.operand_values():
            w.uses.setdefault(id(v), []).append((pos, f.loops))
        if op.name == LOCAL_ALLOC.name:
            w.requests.append((op, op.result.type.nbytes, "offset"))
        elif op.attrs.get("scratch_bytes"):
            w.requests.append((op, op.attrs["scratch_bytes"], "scratch_offset"))
        pos += 1
        if op.regions:
            inner = [o for r in op.regions for b in r.blocks for o in b.ops]
            if op.name in _LOOPS:
                w.spans[id(op)] = (pos - 1, pos - 1)
                frames.append(_Frame(inner, f.loops + (op,), op))
            else:
                frames.append(_Frame(inner, f.loops))
    return w


def run(k: KernelIR) -> None:
    w = _walk(k)
    # the staging buffers of TMA stores are shared memory of their own beside these buffers
    limit = shared_memory_limit(k.options.target) - tile_store_bytes(k.fn.body)
    intervals = _lifetimes(w)
    spaced = list(intervals)
    _keep_apart_from_the_next_scratch(spaced, w)
    total, places = _first_fit(spaced)
    if total > limit:
        # Keeping each scratch apart from the next one's only saves barriers; where that costs more than the
        # target has, scratch lives just during its op and insert-barriers orders what then shares bytes.
        total, places = _first_fit(intervals)
    if total > limit:
        raise LoweringError(f"the kernel needs {total} bytes of shared memory (limit {limit})")
    for op, attr, offset in places:
        op.attrs[attr] = offset


def least_shared_bytes(k: KernelIR) -> int:
    """The fewest bytes this pass can place the kernel's buffers in as the IR is now (each scratch living
    just during its op): what a buffer of another pass's choosing, beside them, has to fit with."""
    return _first_fit(_lifetimes(_walk(k)))[0]


def _lifetimes(w: _Walk) -> list:
    """(first, last position, size, op, attribute) per request: a buffer from its allocation to its last use
    (through every loop it is used in but not allocated in), a scratch during its op."""
    intervals = []
    for op, size, attr in w.requests:
        at = w.position[id(op)]
        lo = hi = at
        if attr == "offset":
            around = set(map(id, w.loops[id(op)]))
            for pos, loops in w.uses.get(id(op.result), []):
                lo, hi = min(lo, pos), max(hi, pos)
                for loop in loops:
                    if id(loop) not in around:
                        lo, hi = min(lo, w.spans[id(loop)][0]), max(hi, w.spans[id(loop)][1])
        intervals.append((lo, hi, size, op, attr))
    return intervals


def _keep_apart_from_the_next_scratch(intervals: list, w: _Walk) -> None:
    """An op that stages through scratch with its own barrier (smem.self_syncing) reads it at its
    end; the next op with scratch writes its own at its start. On separate bytes the two need no barrier
    between them (the later op's own barrier orders them), so such a scratch lives until the next scratch
    user -- in a loop whose body has no later one, through the whole loop (the next is the body's first, in
    the next iteration)."""
    starts = sorted(w.position[id(op)] for op, _, attr in w.requests if attr == "scratch_offset")
    for i, (lo, hi, size, op, attr) in enumerate(intervals):
        if attr != "scratch_offset" or not self_syncing(op):
            continue
        k = bisect_right(starts, hi)
        following = starts[k] if k < len(starts) else None   # the next scratch user in program order
        loops = w.loops[id(op)]
        if loops:
            first, last = w.spans[id(loops[-1])]
            if following is None or following > last:        # none later in the loop body: the next
                lo, hi = min(lo, first), max(hi, last)         # iteration's first one follows
        if following is not None:
            hi = max(hi, following)
        intervals[i] = (lo, hi, size, op, attr)


def _first_fit(intervals) -> tuple[int, list]:
    """Place each buffer at the lowest 16-byte-aligned offset free of every buffer alive at the same time:
    (the bytes they take, [(op, attribute, offset)])."""
    placed: list[tuple[int, int, int, int]] = []   # (lo, hi, offset, end)
    places = []
    total = 0
    for lo, hi, size, op, attr in sorted(intervals, key=lambda x: (x[0], -x[2], x[1])):
        placed = [p for p in placed if p[1] >= lo]   # ended before this one starts: never overlaps again
        offset = 0
        for o, e in sorted((o, e) for plo, phi, o, e in placed if plo <= hi and lo <= phi):
            if offset + size <= o:
                break
            offset = max(offset, align(e))
        places.append((op, attr, offset))
        placed.append((lo, hi, offset, offset + size))
        total = max(total, offset + size)
    return total, places
