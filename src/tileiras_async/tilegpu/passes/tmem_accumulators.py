"""keep-accumulators-in-tensor-memory: a pipelined tcgen05 K-loop keeps its accumulator in tensor memory.

Contract: in: IR after hoist-operand-staging (pipelined loops made, no shared-memory offsets yet). out: a
pipelined `for` whose loop-carried accumulator feeds only a `tilegpu.mma_staged` lowered to tcgen05, whose
result the loop carries on at the same position, becomes
    %t = tilegpu.tmem_acquire %init            (columns allocated, the mbarrier set up, the accumulator stored)
    for ... iter (%phase = 0) { %next = tilegpu.tmem_mma_staged %t, %phase, ...; continue %next }
    %acc = tilegpu.tmem_release %t             (the accumulator loaded back, columns and mbarrier freed)
and the loop's result is %acc.  Each K chunk then only issues its mmas and waits for them (the mbarrier's
phase alternates, so the loop carries it): the 64-128 accumulator registers per thread no longer cross
between registers and tensor memory, and the allocation and its two barriers leave the loop.
Loops whose accumulator is read otherwise (an epilogue inside the loop), and loops running another tcgen05
op (they share the kernel's one mbarrier and column-address slot), keep the per-chunk form.  A loop's two
versions (copy widths) share one acquire before them and one release after them.  A chain that starts afresh
each iteration from zero (bf16) is acquired and released inside the loop, storing nothing: its acquire's
barrier takes the place of the first unit's, or, where every acquire of the kernel is such a chain's, the
columns are allocated once at the entry (`tmem_alloc` `per_unit`) and the iterations only read their address.
A warp-specialised consumer's columns are allocated once at the entry (`tilegpu.tmem_alloc` / `tmem_free`);
its K-loop, when it only waits for stage buffers, issues and commits, gets `one_warp`: warp 0 alone runs it.
An attention loop's tcgen05 `mma_landed`s (S = Q K^T, O += P V) get columns of one allocation at the entry
(`tmem_column`), so no iteration allocates, frees or passes a CTA barrier for them; one that stores and
stages nothing (S) and whose previous loads a later one's wait orders gets `stores_ordered`: no wait of its own.
"""
from __future__ import annotations

from ...ir import types as T
from ...ir.core import Operation
from .. import scalars
from ..ir import KernelIR, parent_blocks, replace_values, walk_ops, zero_constant
from ..analysis.mma import recorded_plan
from ..ops import (BARRIER, MMA_LANDED, TMA_BARRIERS, TMEM_ACQUIRE, TMEM_ALLOC, TMEM_FREE, TMEM_MMA_STAGED,
                   TMEM_RELEASE, VIEWS_ALIGNED, WARP_SPECIALIZE)
from ..analysis.tcgen05 import TMEM_MIN_ALLOC, Tcgen05Plan
from ..types import LayoutTile


def run(k: KernelIR) -> None:
    where = parent_blocks(k.fn.body)
    for loop in [op for op in walk_ops(k.fn.body) if op.name == "for" and op.attrs.get("pipelined")]:
        body = loop.regions[0].blocks[0]
        chains = [(acc, chain) for acc in body.args[1:] if (chain := _tcgen05_chain(loop, acc))]
        # the kernel's tcgen05 ops share one mbarrier and one column-address slot: an accumulator may stay in
        # tensor memory through the loop only when no other tcgen05 op runs in it
        if len(chains) == 1 and _tcgen05_ops(body) == len(chains[0][1]):
            _keep_in_tmem(k, loop, *chains[0], where[id(loop)])
        elif not chains:
            # one K unit alone gains nothing from tmem_acquire/release (mma_staged does the same), unless
            # committed: a warp-specialised consumer's, whose columns may then be allocated at the entry
            chain = _iteration_chain(body)
            if (len(chain) > 1 or chain and chain[0].attrs.get("committed")) and _tcgen05_ops(body) == len(chain):
                _keep_through_iteration(k, body, chain)
    _share_across_versions(k)
    _allocate_for_every_iteration(k)
    _allocate_at_entry(k)
    _allocate_landed_at_entry(k)


def _tcgen05_ops(body) -> int:
    return sum(1 for o in walk_ops(body) if o.name in ("mmaf", "mmai", "tilegpu.mma_staged")
               and isinstance(recorded_plan(o.attrs["mma"] if o.name == "tilegpu.mma_staged" else o), Tcgen05Plan))


def _uses(ops, value) -> list[Operation]:
    return [o for o in ops if any(v is value for v in o.operand_values())]


def _tcgen05_chain(loop: Operation, acc) -> list[Operation]:
    """The `mma_staged` ops (one per K unit of an iteration, on tcgen05) that the loop-carried `acc` flows
    through, each using the previous one's result and nothing else using any of them, the last one's result
    carried on at acc's position; [] when acc is anything else."""
    body = loop.regions[0].blocks[0]
    inside = list(walk_ops(body))
    term = body.ops[-1]
    chain, value = [], acc
    while True:
        users = _uses(inside, value)
        if len(users) != 1:
            return []
        (user,) = users
        if user is term:
            carried = term.operand_values()
            return chain if chain and carried.index(value) == acc.index - 1 and carried.count(value) == 1 else []
        if (user.name != "tilegpu.mma_staged" or user.operands["acc"] is not value
                or not isinstance(recorded_plan(user.attrs["mma"]), Tcgen05Plan)):
            return []
        chain.append(user)
        value = user.result


def _iteration_chain(body) -> list[Operation]:
    """The tcgen05 `mma_staged` ops of one iteration that start from a value the iteration does not make by
    mma and pass the accumulator on from one to the next (cuTile's bf16 K-loops: zero, unit 0, unit 1, then
    round and add), all in the loop body itself; [] when there is no single such chain."""
    inside = list(walk_ops(body))
    staged = [o for o in body.ops if o.name == "tilegpu.mma_staged"
              and isinstance(recorded_plan(o.attrs["mma"]), Tcgen05Plan)]
    starts = [o for o in staged if o.operands["acc"].owner not in staged]
    if len(starts) != 1:
        return []
    chain = [starts[0]]
    while True:
        users = _uses(inside, chain[-1].result)
        if len(users) != 1 or users[0] not in staged or users[0].operands["acc"] is not chain[-1].result:
            return chain if len(chain) == len(staged) else []
        chain.append(users[0])


def _thread_phase(body, chain: list[Operation], tmem, phase):
    """Each op of `chain` replaced by a tmem_mma_staged on `tmem`, threading the mbarrier phase from `phase`;
    returns the last phase."""
    for mma in chain:
        staged = Operation(TMEM_MMA_STAGED, {"tmem": tmem, "phase": phase, "buffer": mma.operands["buffer"],
                                             "slot": mma.operands.get("slot")},
                           dict(mma.attrs), [LayoutTile((), T.I32, None)], loc=mma.loc)
        body.ops[body.ops.index(mma)] = staged
        phase = staged.result
    return phase


def _committed(first: Operation) -> dict:
    """The release's `committed` where the chain's mmas are committed to other mbarriers (a warp-specialised
    consumer's: the stage buffers' empty ones), so that the release first waits for them all."""
    return {"committed": True} if first.attrs.get("committed") else {}


def _acquire(acc, attrs: dict, barrier_follows: bool, loc) -> tuple[list[Operation], Operation, object]:
    """([tmem_acquire of `acc`, the phase constant 0], the acquire, the phase)."""
    acquire = Operation(TMEM_ACQUIRE, {"acc": acc}, dict(attrs, **({"barrier_follows": True} if barrier_follows
                                                                    else {})),
                        [LayoutTile((), T.I32, None)], loc=loc)
    ops = [acquire]
    return ops, acquire, scalars.const(ops, 0, T.I32, loc)


def _barrier_before(body, op: Operation) -> int | None:
    """Index in `body` of the last `tilegpu.barrier` before `op` (None: there is none)."""
    at = body.ops.index(op)
    return next((i for i in range(at - 1, -1, -1) if body.ops[i].name == "tilegpu.barrier"), None)


def _keep_through_iteration(k: KernelIR, body, chain: list[Operation]) -> None:
    first, last = chain[0], chain[-1]
    attrs = {"mma": first.attrs["mma"], "kc": first.attrs["kc"]}
    # acquired before the unit's own barrier when the initial accumulator exists by then: that barrier then
    # also orders the stores before the first issue, and the acquire needs none of its own
    at = _barrier_before(body, first)
    acc = first.operands["acc"]
    made_inside = not isinstance(acc.owner, Operation) or acc.owner in walk_ops(body)
    if at is None or (made_inside and not (acc.owner in body.ops[:at])):
        at = body.ops.index(first)
    merged = _publishes_unit(body, at, acc, first)
    if merged:      # the acquire's barrier in place of the unit's
        before, acquire, phase0 = _acquire(acc, dict(attrs, acc_zero=True), False, first.loc)
        body.ops[at:at + 1] = before
    else:
        before, acquire, phase0 = _acquire(acc, attrs, body.ops[at].name == "tilegpu.barrier", first.loc)
        body.ops[at:at] = before
    end = _thread_phase(body, chain, acquire.result, phase0)
    if merged:
        next(o for o in body.ops if o.name == TMEM_MMA_STAGED.name and o.operands["phase"] is phase0) \
            .attrs["acc_zero"] = True
    release = Operation(TMEM_RELEASE, {"tmem": acquire.result}, dict(attrs, **_committed(first)),
                        [last.result.type], loc=last.loc)
    body.ops.insert(body.ops.index(end.owner) + 1, release)
    replace_values(body, {id(last.result): release.result})
    k.remark("passed", "tensorcore", "AccumulatorInTensorMemory",
             f"the accumulator stays in tensor memory through the iteration's {len(chain)} K units"
             + ("; it starts from zero: nothing is stored, and the acquire's barrier publishes the first unit "
                "too" if merged else ""), first.attrs["mma"])


def _publishes_unit(body, at: int, acc, first: Operation) -> bool:
    """Whether the acquire may take the place of the unit's barrier at `at`, one barrier where there were two
    back to back: the chain starts from a zero constant (nothing to store: the acquire's own barrier, which
    publishes the columns' address and the mbarrier, is its last step, and after the unit's wait and fence it
    publishes the unit's copies too; the first K step ignores D), and the mmas are not committed elsewhere (a
    warp-specialised consumer's acquire is allocated at the entry, without a barrier of its own).  The bf16
    matmul on sm_100, unhinted: 8 -> 6 CTA barriers, and no tcgen05.st per iteration."""
    return (body.ops[at].name == "tilegpu.barrier" and zero_constant(acc)
            and not first.attrs.get("committed"))


def _share_across_versions(k: KernelIR) -> None:
    """A K-loop emitted once per copy width (the pipeline's versions, an `if` on `tilegpu.views_aligned`) whose
    versions each keep the accumulator in tensor memory for the whole loop gets one acquire before the `if`
    and one release after it, instead of one of each per version: one allocation's barrier and one
    deallocation's for the kernel, where each version had its own (a version's code holds both), and the
    release's tcgen05.ld and unpacking emitted once (unhinted matmul_f16_f16out_128x128x64 on sm_100: 8 -> 6
    CTA barriers).  The `if` then yields nothing: the release makes the accumulator."""
    for ifop in [o for o in walk_ops(k.fn.body) if o.name == "if" and _versions_if(o)]:
        found = [_whole_loop_pair(r.blocks[0], ifop) for r in ifop.regions]
        if None in found:
            continue
        (acq, rel), (other_acq, other_rel) = found
        if (acq.operands["acc"] is not other_acq.operands["acc"] or acq.attrs != other_acq.attrs
                or rel.attrs != other_rel.attrs):
            continue
        then_block, else_block = (r.blocks[0] for r in ifop.regions)
        then_block.ops.remove(acq)
        else_block.ops.remove(other_acq)
        replace_values(else_block, {id(other_acq.result): acq.result})
        for block, release in ((then_block, rel), (else_block, other_rel)):
            block.ops.remove(release)
            block.ops[-1].operands["operands"] = []
        outer = parent_blocks(k.fn.body)[id(ifop)]
        at = outer.ops.index(ifop)
        outer.ops[at:at + 1] = [acq, ifop, rel]
        (result,) = ifop.results
        ifop.results = []
        replace_values(k.fn.body, {id(result): rel.result})
        k.remark("passed", "tensorcore", "AccumulatorInTensorMemory",
                 "the K-loop's versions share one acquire before them and one release after them",
                 acq.attrs["mma"])


def _allocate_for_every_iteration(k: KernelIR) -> None:
    """Where every acquire of the kernel is a per-iteration chain's from zero (`acc_zero`: each iteration of
    the bf16 matmul's loop, in each version), the columns are allocated once at the entry (`tmem_alloc`
    `per_unit`: the mmas' mbarrier counts the units' commits, its phase back at 0 after each iteration's
    even number of units) and freed once before the return, after a CTA barrier: an iteration neither
    allocates nor frees, so its acquire only reads the columns' address after the unit's barrier (which
    comes back: it publishes the allocation too) and its release only loads D, ordered before the next
    iteration's issue by that iteration's barrier.  Per iteration one CTA barrier where there were two and the
    allocation, deallocation and mbarrier set-up (unhinted matmul_bf16_64x64x64 on sm_100: 4 -> 3 CTA
    barriers).  Only with one mma plan for them all, no other tcgen05 op and a single exit at the end."""
    body = k.fn.body
    acquires = [o for o in walk_ops(body) if o.name == TMEM_ACQUIRE.name]
    releases = [o for o in walk_ops(body) if o.name == TMEM_RELEASE.name]
    if not acquires or not all(a.attrs.get("acc_zero") and not a.attrs.get("allocated") for a in acquires):
        return
    if len({(id(a.attrs["mma"]), a.attrs["kc"]) for a in acquires}) != 1 or _tcgen05_ops(body) or \
            _landed_tcgen05(body) or any(o.name in (TMEM_ALLOC.name, WARP_SPECIALIZE.name) for o in walk_ops(body)):
        return
    if sum(o.name == "return" for o in walk_ops(body)) != 1 or body.ops[-1].name != "return":
        return
    ops = list(walk_ops(body))
    if any(sum(o.name == TMEM_MMA_STAGED.name and o.operands["tmem"] is a.result for o in ops) % 2 for a in acquires):
        return      # an odd number of units would leave the mbarrier's phase at 1 for the next iteration
    where = parent_blocks(body)
    for acquire in acquires:
        block = where[id(acquire)]
        block.ops.insert(block.ops.index(acquire), Operation(BARRIER, loc=acquire.loc))
        acquire.attrs["allocated"] = True
    for release in releases:
        release.attrs["allocated"] = True
    attrs = {"mma": acquires[0].attrs["mma"], "kc": acquires[0].attrs["kc"], "per_unit": True}
    body.ops.insert(0, Operation(TMEM_ALLOC, {}, dict(attrs), [], loc=acquires[0].loc))
    body.ops.insert(len(body.ops) - 1, Operation(TMEM_FREE, {}, dict(attrs), [], loc=body.ops[-1].loc))
    k.remark("passed", "tensorcore", "AccumulatorInTensorMemory",
             "the columns are allocated once for every iteration's accumulator", acquires[0].attrs["mma"])


def _versions_if(op: Operation) -> bool:
    """Whether `op` is the `if` between a pipelined loop's two versions, yielding its one result."""
    cond = op.operands["condition"].owner
    return (isinstance(cond, Operation) and cond.name == VIEWS_ALIGNED.name and len(op.results) == 1
            and all(r.blocks for r in op.regions))


def _whole_loop_pair(block, ifop: Operation) -> tuple[Operation, Operation] | None:
    """(acquire, release) of the version in `block`: its only ones, at its top level, of an accumulator made
    before `ifop`, the release's result only yielded by the block; None otherwise."""
    nested = [o for o in walk_ops(block) if o.name in (TMEM_ACQUIRE.name, TMEM_RELEASE.name)]
    acquires = [o for o in block.ops if o.name == TMEM_ACQUIRE.name]
    releases = [o for o in block.ops if o.name == TMEM_RELEASE.name]
    if len(nested) != 2 or len(acquires) != 1 or len(releases) != 1:
        return None
    acq, rel = acquires[0], releases[0]
    acc = acq.operands["acc"].owner
    if isinstance(acc, Operation) and any(acc is o for o in walk_ops(block)):
        return None
    if rel.operands["tmem"] is not acq.result or block.ops[-1].operand_values() != [rel.result]:
        return None
    users = [o for o in walk_ops(block) if any(v is rel.result for v in o.operand_values())]
    return (acq, rel) if users == [block.ops[-1]] else None


def _publish_tma_barriers_with(block, acquire: Operation) -> None:
    """The loop's TMA mbarriers (a `tilegpu.tma_barriers` before the acquire in its block) need no CTA barrier of
    their own: the acquire's barrier comes before any other warp waits on them (their waits are in the
    loop), and warp 0, whose elected lane issues the prologue's copies, only needs its own lanes ordered.
    Not where a `tilegpu.warp_specialize` comes between: its producer warpgroup waits on them and issues
    copies without ever reaching the acquire (whose barrier then counts the consumer's threads alone)."""
    ops = block.ops[:block.ops.index(acquire)]
    for i, op in enumerate(ops):
        if op.name == TMA_BARRIERS.name and not any(o.name == WARP_SPECIALIZE.name for o in ops[i + 1:]):
            op.attrs["barrier_follows"] = True


def _keep_in_tmem(k: KernelIR, loop: Operation, acc, chain: list[Operation], outer) -> None:
    body = loop.regions[0].blocks[0]
    i = acc.index - 1                           # acc's position among the loop's carried values
    first, last = chain[0], chain[-1]
    loc = first.loc
    attrs = {"mma": first.attrs["mma"], "kc": first.attrs["kc"]}
    # barrier_follows: every iteration passes the loop's barrier before its first issue
    before, acquire, phase0 = _acquire(loop.operands["initValues"][i], attrs,
                                       _barrier_before(body, first) is not None, loc)
    loop.operands["initValues"][i] = phase0
    acc.type = phase0.type
    replace_values(body, {id(last.result): _thread_phase(body, chain, acquire.result, acc)})
    result = loop.results[i]
    release = Operation(TMEM_RELEASE, {"tmem": acquire.result}, dict(attrs, **_committed(first)), [result.type],
                        loc=loc)
    result.type = phase0.type
    at = outer.ops.index(loop)
    outer.ops[at:at + 1] = [*before, loop, release]
    replace_values(outer, {id(result): release.result})
    if not acquire.attrs.get("barrier_follows"):
        _publish_tma_barriers_with(outer, acquire)
    k.remark("passed", "tensorcore", "AccumulatorInTensorMemory",
             "the K-loop's accumulator stays in tensor memory: stored once before the loop, loaded once after",
             first.attrs["mma"])


def _allocate_at_entry(k: KernelIR) -> None:
    """A warp-specialised consumer's tensor memory allocated once, at the kernel's entry, instead of by each
    acquire: the CTA barrier that publishes the TMA mbarriers (every thread passes it before the split) then
    publishes the columns' address and the tcgen05 mbarriers too, and mbarriers order the rest -- the stores
    before the issue (thread 0 waits for every consumer thread's arrival), the mmas before the loads (every
    consumer thread waits for the commit), the last loads before the deallocation (warp 0 waits) -- where
    the acquire and the release each needed a barrier of the consumer warpgroup (NVIDIA's sm_100 code has
    none either).  Only where the kernel has one acquire, its mmas committed to the ring (so the release's
    commit and wait are its mbarrier's only phase), and its code a single exit at the end."""
    body = k.fn.body
    acquires = [o for o in walk_ops(body) if o.name == TMEM_ACQUIRE.name]
    releases = [o for o in walk_ops(body) if o.name == TMEM_RELEASE.name]
    if len(acquires) != 1 or len(releases) != 1 or acquires[0].attrs.get("barrier_follows"):
        return
    if not releases[0].attrs.get("committed"):
        return
    top = [o.name for o in body.ops]
    if WARP_SPECIALIZE.name not in top or TMA_BARRIERS.name not in top:
        return
    publish = body.ops[top.index(TMA_BARRIERS.name)]
    if publish.attrs.get("barrier_follows") or top.index(TMA_BARRIERS.name) > top.index(WARP_SPECIALIZE.name):
        return
    if sum(o.name == "return" for o in walk_ops(body)) != 1 or body.ops[-1].name != "return":
        return
    attrs = {"mma": acquires[0].attrs["mma"], "kc": acquires[0].attrs["kc"]}
    body.ops.insert(top.index(TMA_BARRIERS.name), Operation(TMEM_ALLOC, {}, dict(attrs), [], loc=publish.loc))
    body.ops.insert(len(body.ops) - 1, Operation(TMEM_FREE, {}, dict(attrs), [], loc=body.ops[-1].loc))
    acquires[0].attrs["allocated"] = True
    releases[0].attrs["allocated"] = True
    _issue_from_one_warp(k, acquires[0])


# what a K-loop may hold for warp 0 alone to run it: its waits for the stage buffers, its mmas (issued by
# thread 0 anyway), the commits that free the buffers, and the uniform scalar arithmetic of its counters
_ISSUE_ONLY = {"tilegpu.tma_wait", TMEM_MMA_STAGED.name, "tilegpu.tma_arrive", "continue"}
_COUNTER_ARITH = {"constant", "addi", "subi", "muli", "divi", "remi", "andi", "ori", "xori", "shli", "shri",
                  "cmpi", "select", "trunci", "exti", "mini", "maxi"}


def _issue_only(op: Operation) -> bool:
    if op.name in _ISSUE_ONLY:
        return not (op.name == "tilegpu.tma_arrive" and not op.attrs.get("commit"))
    return op.name in _COUNTER_ARITH and all(r.type.shape == () for r in op.results)


def _issue_from_one_warp(k: KernelIR, acquire: Operation) -> None:
    """The K-loop after an allocated acquire runs on warp 0 alone (`one_warp`) where it only waits for stage
    buffers, issues mmas and commits them to the buffers' empty mbarriers, and nothing reads its results:
    the other consumer warps have nothing to do until the release's wait for the commit (its mbarrier counts
    their arrivals, not their passes through the loop).  They otherwise spun on every buffer's full mbarrier
    and ran the loop's predicated issues: 3/4 of a 128-thread consumer's loop instructions (launch set
    sm_100, executed: matmul_tf32_64x64x32 0.67x NVIDIA's where it was 1.02x).  A warp, not thread 0 alone:
    in a branch on the thread index ptxas cannot tell the mmas' descriptors are uniform and loops over the
    lanes for each (+60 to +111 static SASS instructions); a branch on the warp index costs it one.  NVIDIA's
    sm_100 code runs its mma loop on one warp too."""
    block = parent_blocks(k.fn.body)[id(acquire)]
    at = block.ops.index(acquire)
    loop = next((o for o in block.ops[at + 1:] if o.name == "for"), None)
    if loop is None or any(o.name == TMEM_RELEASE.name for o in block.ops[at + 1:block.ops.index(loop)]):
        return
    used = {id(v) for o in walk_ops(k.fn.body) for v in o.operand_values()}
    if any(id(r) in used for r in loop.results):
        return
    inside = list(walk_ops(loop.regions[0].blocks[0]))
    if not all(_issue_only(o) for o in inside):
        return
    if not any(o.name == TMEM_MMA_STAGED.name and o.attrs.get("committed") for o in inside):
        return
    loop.attrs["one_warp"] = True
    k.remark("passed", "tensorcore", "AccumulatorInTensorMemory",
             "warp 0 alone runs the K-loop (its waits, mmas and commits); the other consumer warps wait for "
             "the accumulator", acquire.attrs["mma"])


TMEM_COLUMNS = 512      # an SM's tensor memory: 128 lanes x 512 columns of 32 bits


def _landed_tcgen05(body) -> list[Operation]:
    return [o for o in walk_ops(body) if o.name == MMA_LANDED.name and isinstance(o.attrs["mma_plan"], Tcgen05Plan)]


def _allocate_landed_at_entry(k: KernelIR) -> None:
    """Every tcgen05 `mma_landed` of the kernel (an attention loop's: S's 128 columns, O's 64) gets its own
    columns of one allocation made at the entry, before the CTA barrier that publishes the ring's mbarriers
    (it publishes the columns' address and the tcgen05 mbarriers too), freed once at the end: each execution
    then orders its stores (and its staged A) before the issue, and the previous execution's loads of its
    columns too, by warp 0's wait on the stores' mbarrier, and its loads after the mmas by every thread's
    wait on the commit's, where the per-execution allocation took three or two CTA barriers (launch set sm_100
    fmha: 5 of the loop's 7).  Only where they are the kernel's only tcgen05 ops, their columns fit, the kernel
    is not warp-specialised and its code has a single exit at the end."""
    body = k.fn.body
    landed = _landed_tcgen05(body)
    if not landed or _tcgen05_ops(body) or any(o.name == TMEM_ACQUIRE.name for o in walk_ops(body)):
        return
    top = [o.name for o in body.ops]
    if WARP_SPECIALIZE.name in top or sum(o.name == "return" for o in walk_ops(body)) != 1 or top[-1] != "return":
        return
    publish = next((o for o in body.ops if o.name == TMA_BARRIERS.name and not o.attrs.get("barrier_follows")), None)
    if publish is None or any(_top_level(body, op) < body.ops.index(publish) for op in landed):
        return
    first, columns = _assign_columns(landed)
    if columns > TMEM_COLUMNS:
        return
    for op in landed:
        op.attrs["tmem_column"] = first[id(op)]
    _drop_redundant_stores_waits(k, landed)
    loc = publish.loc
    body.ops.insert(body.ops.index(publish), Operation(TMEM_ALLOC, {}, {"columns": columns}, [], loc=loc))
    body.ops.insert(len(body.ops) - 1, Operation(TMEM_FREE, {}, {"columns": columns}, [], loc=body.ops[-1].loc))
    k.remark("passed", "tensorcore", "AccumulatorInTensorMemory",
             f"the attention loop's {len(landed)} tcgen05 accumulators get {columns} tensor-memory columns "
             "allocated once at the kernel's entry", landed[0].attrs["mma"])


def _drop_redundant_stores_waits(k: KernelIR, landed: list[Operation]) -> None:
    """`stores_ordered` on each `tmem_column` mma_landed whose wait on the stores' mbarrier (and every thread's
    arrival that feeds it) orders nothing another wait does not (`_stores_ordered_later`), the last of a block
    first (an op's rule leans on the waits after it)."""
    where = parent_blocks(k.fn.body)
    for op in reversed(landed):
        if _stores_ordered_later(where[id(op)], op):
            op.attrs["stores_ordered"] = True
            k.remark("passed", "tensorcore", "StoresWaitOrdered",
                     "the tcgen05 mma stores and stages nothing, and the next mma's wait on the stores' mbarrier "
                     "orders every thread's loads of its previous accumulator before its issue: no wait of its "
                     "own", op.attrs["mma"])


def _stores_ordered_later(block, op: Operation) -> bool:
    """Whether all that `op`'s wait on the stores' mbarrier orders before its issue is ordered by a later
    mma_landed's wait already.  The wait orders each thread's tcgen05.st of the accumulator, its staging of A
    and its loads of these columns' previous accumulator: with `acc_zero` nothing is stored and with an
    `a_buffer` nothing staged, and these columns are `op`'s alone, so the loads are those of `op`'s previous
    execution.  A later `tmem_column` mma_landed of the same block that keeps its wait follows each execution
    of `op` before the next (the block -- a loop body -- ends no execution early and `op` is not nested in
    a branch): every thread arrives there after its loads of `op`'s result (the tcgen05.ld waited for, then
    tcgen05.fence::before_thread_sync), and warp 0, whose thread 0 issues `op` next, waits for those arrivals
    (then tcgen05.fence::after_thread_sync, which orders all of its later tcgen05 ops).  The first execution
    has no earlier loads: the CTA barrier after the allocation orders the rest."""
    if not (op.attrs.get("acc_zero") and "a_buffer" in op.operands) or not any(o is op for o in block.ops):
        return False
    for o in block.ops[next(i for i, o in enumerate(block.ops) if o is op) + 1:]:
        if any(n.name in _EXITS for n in (o, *_nested(o))):
            return False
        if o.name == MMA_LANDED.name and "tmem_column" in o.attrs and not o.attrs.get("stores_ordered"):
            return True
    return False


_EXITS = ("break", "continue", "return")     # (a loop body's own `continue` ends it, after every op)


def _top_level(body, op: Operation) -> int:
    """Index in `body` of the op that holds `op` (or is it)."""
    return next(i for i, o in enumerate(body.ops) if o is op or any(n is op for n in _nested(o)))


def _nested(op: Operation):
    for region in op.regions:
        for block in region.blocks:
            yield from walk_ops(block)


def _assign_columns(landed: list[Operation]) -> tuple[dict[int, int], int]:
    """({id(op): its first column}, the allocation's columns: a power of two, at least TMEM_MIN_ALLOC); the
    widest first, so that each starts at a multiple of its own power-of-two width."""
    first, at = {}, 0
    for op in sorted(landed, key=lambda o: -o.attrs["mma_plan"].tmem_cols):
        first[id(op)] = at
        at += op.attrs["mma_plan"].tmem_cols
    return first, max(TMEM_MIN_ALLOC, 1 << (at - 1).bit_length())
