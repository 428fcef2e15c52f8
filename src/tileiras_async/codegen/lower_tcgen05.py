"""mmaf and mmai as Blackwell `tcgen05.mma`, following a `tilegpu.analysis.tcgen05.Tcgen05Plan` (sm_100a).

The plan (kind, instruction shape, tensor-memory columns, the accumulator's register layout, the swizzled
operand layouts, both descriptors) was decided by the passes; this module emits it.  A and B are staged the
way wgmma's are (codegen/lower_wgmma.py: the same canonical layouts; a pipelined loop's copies put them in
its stage buffers), then, per execution of the op:

1. `acquire` (after the first chunk is staged): warp 0 allocates the accumulator's tensor-memory columns
   (`tcgen05.alloc`, address written to a per-kernel shared-memory slot), thread 0 initialises the op's
   mbarrier; `fence.proxy.async` + a barrier publish both and the staged operands, every thread reads the
   TMEM address and `tcgen05.st`s its accumulator registers into its lanes; a barrier.
2. Per K chunk: (staging and publishing, but for the first), thread 0
   issues every `tcgen05.mma` of the chunk (descriptors: an entry-block template plus the start >> 4) and
   `tcgen05.commit`s them to the mbarrier; every thread waits for that phase (`mbarrier.try_wait.parity`):
   the chunk's operands are read and D is written, so the next chunk may overwrite them.
3. `release`: `tcgen05.ld` brings D back into the same registers' layout, then (after a barrier) warp 0
   deallocates the columns and thread 0 invalidates the mbarrier, so the next execution (a loop's next
   iteration) starts afresh: every exit path of the op frees what it allocated.

A warp-specialised consumer's columns are allocated once instead (`tilegpu.tmem_alloc` at the kernel's entry,
before the CTA barrier that publishes the TMA mbarriers, and `tilegpu.tmem_free` at the consumer's end), and
mbarriers take the place of the consumer's barriers: an acquire's stores before the issue (warp 0 waits for
every consumer thread's arrival on the stores' mbarrier), a release's loads after the mmas (every thread
arrives on the mmas' mbarrier, which the commit completes, and waits for its own arrival's phase: no parity
to carry between executions), the deallocation after the last loads (the stores' mbarrier again, warp 0).

`tcgen05.fence::before_thread_sync` / `after_thread_sync` order the tensor-memory accesses around each
barrier and mbarrier synchronisation, as NVIDIA's sm_100 code does.  Single-thread and single-warp steps are predicated inside the asm
(`setp` on the thread / warp index), so the control flow stays that of the tile program; an op's group of
mmas and its commit are one asm statement the other threads branch through (`issue`).
"""
from __future__ import annotations

from ..ir.core import Operation
from ..tilegpu.analysis.mma import recorded_plan
from ..tilegpu.analysis.tcgen05 import SUBPARTITION_WARPS, Tcgen05Plan
from .emitter import KernelEmitter, lowers
from .lower_software_pipeline import unit_offset
from .lower_tensor_copy import TCGEN05_COMMIT, _thread0, is_thread0, tcgen05_commit
from .lower_wgmma import descriptor_bases, landed_bases, scratch_address, stage_chunk, stage_operand
from .values import SHARED_PTR, Tile

MBAR_BYTES = 8


def _bars(em: KernelEmitter, slots: int = 2) -> tuple[str, str]:
    """(mbarrier, TMEM address slot): shared addresses (i32, entry block) of the kernel's 16-byte global
    (`slots` 3: 24 bytes, the stores' mbarrier of a `tilegpu.tmem_alloc` after them, `_stores_bar`)."""
    if em.tcgen05_bars is None:
        name = em.unique_global("tcgen05")
        em.module_ir.add_global(f"{name} = internal addrspace(3) global [{slots} x i64] undef, align 8")
        bar = em.b.entry_value(f"ptrtoint {SHARED_PTR} {name} to i32")
        em.tcgen05_bars = (bar, em.b.entry_value(f"add i32 {bar}, {MBAR_BYTES}"))
    return em.tcgen05_bars


def _only(em: KernelEmitter, who: str, body: str, args: list[tuple[str, str]], cons: str) -> None:
    """`body` (operands from $1) executed by thread 0 (who="thread") or by warp 0 (who="warp")."""
    idx = em.tid if who == "thread" else em.warp
    em.b.asm("void", f"{{ .reg .pred p; setp.eq.u32 p, $0, 0; @p {body} }}",
             ",".join(["r"] + ([cons] if cons else []) + ["~{memory}"]), [("i32", idx)] + args)


def _fence(em: KernelEmitter, when: str) -> None:
    em.b.asm("void", f"tcgen05.fence::{when}_thread_sync;", "~{memory}", [])


def _sync(em: KernelEmitter) -> None:
    """A barrier that orders tensor-memory accesses on either side of it."""
    _fence(em, "before")
    em.barrier()
    _fence(em, "after")


def _to_words(em: KernelEmitter, plan: Tcgen05Plan, regs: list[str]) -> list[str]:
    if plan.instr.acc != "float":
        return list(regs)
    return [em.b.value(f"bitcast float {r} to i32") for r in regs]


def _from_words(em: KernelEmitter, plan: Tcgen05Plan, words: list[str]) -> list[str]:
    if plan.instr.acc != "float":
        return list(words)
    return [em.b.value(f"bitcast i32 {w} to float") for w in words]


def _thread_taddr(em: KernelEmitter, plan: Tcgen05Plan, taddr: str) -> str:
    """The TMEM address this warp's tcgen05.ld/st start at: its sub-partition's first lane, and (more than
    4 warps) its part of the column space."""
    sub = em.b.value(f"and i32 {em.warp}, {SUBPARTITION_WARPS - 1}")
    addr = em.b.value(f"add i32 {taddr}, {em.b.value(f'shl i32 {sub}, 21')}")    # 32 lanes << 16
    if plan.splits > 1:
        part = em.b.value(f"lshr i32 {em.warp}, 2")
        addr = em.b.value(f"add i32 {addr}, {em.b.value(f'mul i32 {part}, {plan.per_warp}')}")
    return addr


def _ldst_suffix(plan: Tcgen05Plan) -> str:
    return f"{plan.ld_shape}.x{plan.ld_regs}.b32"


def _half_split(plan: Tcgen05Plan) -> str:
    return f", {plan.ld_regs}" if plan.ld_shape == "16x32bx2" else ""


def _address(em: KernelEmitter) -> str:
    """The allocated columns' address, read from the kernel's slot (after their allocation was published)."""
    _, slot = _bars(em)
    return em.b.asm("i32", "ld.shared.u32 $0, [$1];", "=r,r,~{memory}", [("i32", slot)], hint="taddr")


def _store(em: KernelEmitter, plan: Tcgen05Plan, acc_regs: list[str], taddr: str | None = None) -> str:
    """Every thread stores its accumulator registers into the columns at `taddr` (default: those whose address
    the slot holds, after their allocation was published) and waits for its stores; returns the address."""
    taddr = taddr or _address(em)
    mine = _thread_taddr(em, plan, taddr)
    words = _to_words(em, plan, acc_regs)
    n = len(words)
    regs = ", ".join(f"${j + 1}" for j in range(n))
    em.b.asm("void", f"tcgen05.st.sync.aligned.{_ldst_suffix(plan)} [$0]{_half_split(plan)}, {{{regs}}};",
             ",".join(["r"] * (n + 1) + ["~{memory}"]), [("i32", mine)] + [("i32", w) for w in words])
    em.b.asm("void", "tcgen05.wait::st.sync.aligned;", "~{memory}", [])
    return taddr


def acquire(em: KernelEmitter, plan: Tcgen05Plan, acc_regs: list[str] | None, sync: bool = True) -> str:
    """Allocate the columns and the mbarrier, store the accumulator into TMEM; returns the TMEM address.
    The caller staged the first chunk's operands before (their registers are dead by the time the
    accumulator's are stored): the first barrier publishes them too.  Ends with the threads synchronised,
    the accumulator in TMEM, ready for the mma.  `acc_regs` None: nothing to store (a zero accumulator the
    first mma overwrites, enable-input-d off)."""
    bar, slot = _bars(em)
    _only(em, "warp", f"tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [$1], {plan.tmem_cols};",
          [("i32", slot)], "r")
    # the initialisation is made visible to the async proxy (tcgen05.commit arrives through it)
    _only(em, "thread", "mbarrier.init.shared.b64 [$1], 1; @p fence.mbarrier_init.release.cluster;",
          [("i32", bar)], "r")
    _publish(em)
    if acc_regs is None:    # nothing stored: the publishing barrier is the last one the issue needs
        return _address(em)
    taddr = _store(em, plan, acc_regs)
    if sync:    # else a barrier of the caller's comes between the stores and the first issue
        _sync(em)
    else:
        _fence(em, "before")
    return taddr


def issue_and_wait(em: KernelEmitter, plan: Tcgen05Plan, taddr: str, descs: tuple[str, str], phase: int | str,
                   shift: str | int = 0, committed: bool = False, zero: bool = False,
                   b_slot: tuple[str, int] | None = None) -> None:
    """After the chunk's operands were published: thread 0 issues the chunk's instructions and commits them
    to the mbarrier; every thread waits for that (phase's) completion.  `phase`: the parity, or an i32
    register holding it.  `committed`: only the issue (what follows commits them: a tma_arrive with
    `commit`).  `zero`: the first K step ignores D (enable-input-d off): the accumulator was not stored."""
    bar, _ = _bars(em)
    issue(em, plan, taddr, descs, shift, zero, None if committed else bar, b_slot)
    if not committed:
        _wait(em, bar, phase)


def issue(em: KernelEmitter, plan: Tcgen05Plan, taddr: str, descs: tuple[str, str], shift: str | int = 0,
          zero: bool = False, commit: str | None = None, b_slot: tuple[str, int] | None = None) -> None:
    """Thread 0 issues every `tcgen05.mma` of the op (all its K steps) and, given `commit` (an mbarrier),
    commits them to it; the other threads branch past the whole group, so the instructions' descriptor
    arithmetic runs on the issuing thread alone (a thread-0 predicate on each instruction had every thread
    execute each one, and its descriptors).  One asm statement: the branch and the group stay inside it, so
    the control flow is the tile program's and the threads reconverge right after it.
    `descs`: the descriptor bases.  `shift`: the bytes both operands are from there, a constant or an i32
    register (a stage buffer's offset: added outside the asm, where LLVM hoists it out of a loop that
    reuses the buffer).  `b_slot`: (an i32 register, a constant) whose sum B alone is from there (a landed
    tile's ring slot, a new one each iteration: added on the issuing thread)."""
    if isinstance(shift, str):
        s64 = em.b.value(f"zext i32 {em.b.value(f'lshr i32 {shift}, 4')} to i64")
        descs = tuple(em.b.value(f"add i64 {d}, {s64}", "desc") for d in descs)
        shift = 0
    args = [("i32", taddr), ("i64", descs[0]), ("i64", descs[1])]
    if b_slot is not None:
        args.append(("i32", b_slot[0]))
    body = _group_text(plan, shift, zero, None if b_slot is None else b_slot[1])
    if commit is not None:
        args.append(("i32", commit))
        body += f" {TCGEN05_COMMIT} [${len(args) - 1}];"
    regs = ".reg .pred on, off; .reg .b64 db, a, b; .reg .b32 d, id, s;"
    if em.single_thread:     # one thread runs the code anyway (the producer's region)
        text = f"{{ {regs} {body} }}"
    else:
        args.append(("i1", is_thread0(em, negate=True)))
        text = f"{{ {regs} @${len(args) - 1} bra $$tci${{:uid}}; {body} $$tci${{:uid}}: }}"
    em.b.asm("void", text, ",".join([("l" if t == "i64" else "b" if t == "i1" else "r") for t, _ in args]
                                    + ["~{memory}"]), args)


def _group_text(plan: Tcgen05Plan, shift: int, zero: bool, b_slot: int | None) -> str:
    """PTX issuing the op's instructions: D's columns from $0 (the TMEM address), the descriptors from the
    bases $1 (A) and $2 (B) plus the instruction's start offset + `shift` (>> 4: the start field counts 16
    bytes), B's moved by $3 + `b_slot` bytes unless that is None; enable-input-d off for a `zero`
    accumulator's first K step (the accumulator was not stored), on after it."""
    out = ["setp.eq.u32 on, 0, 0;", f"mov.b32 id, {plan.instr_descriptor()};"]
    if zero:
        out.append("setp.ne.u32 off, 0, 0;")
    db = "$2"
    if b_slot is not None:
        out += [f"add.s32 s, $3, {b_slot};" if b_slot else "mov.b32 s, $3;", "shr.s32 s, s, 4;",
                "cvt.s64.s32 b, s;", "add.s64 db, $2, b;"]
        db = "db"
    steps = plan.issues()
    for step in steps:
        enable = "off" if zero and step is steps[0] else "on"
        for iss in step:
            a = _offset_desc(out, "a", "$1", (iss.a_off + shift) >> 4)
            b = _offset_desc(out, "b", db, (iss.b_off + shift) >> 4)
            d = "$0"
            if iss.d_col:
                out.append(f"add.u32 d, $0, {iss.d_col};")
                d = "d"
            out.append(f"{plan.ptx} [{d}], {a}, {b}, id, {enable};")
    return " ".join(out)


def _offset_desc(out: list[str], reg: str, base: str, add: int) -> str:
    """The descriptor `base` + `add` (the start address field's units, 16 bytes): `base` itself, or `reg`
    computed into `out`."""
    if not add:
        return base
    out.append(f"add.s64 {reg}, {base}, {add};")
    return reg


def _wait(em: KernelEmitter, bar: str, phase: int | str) -> None:
    """Every thread waits for the completion of `phase` of mbarrier `bar`, then orders its tensor-memory
    accesses after it."""
    args = [("i32", bar)] + ([] if isinstance(phase, int) else [("i32", phase)])
    parity = f"{phase & 1}" if isinstance(phase, int) else "$1"
    em.b.asm("void", "{ .reg .pred w; $$tcw${:uid}: mbarrier.try_wait.parity.shared.b64 w, [$0], "
                     f"{parity}; @!w bra $$tcw${{:uid}}; }}", ",".join(["r"] * len(args) + ["~{memory}"]), args)
    _fence(em, "after")


def release(em: KernelEmitter, plan: Tcgen05Plan, taddr: str) -> list[str]:
    """Load D into registers (plan.c's layout), free the columns and the mbarrier; returns the registers."""
    bar, _ = _bars(em)
    words = _load(em, plan, taddr)
    _sync(em)
    _only(em, "warp", f"tcgen05.dealloc.cta_group::1.sync.aligned.b32 $1, {plan.tmem_cols};", [("i32", taddr)], "r")
    _only(em, "thread", "mbarrier.inval.shared.b64 [$1];", [("i32", bar)], "r")
    return _from_words(em, plan, words)


def _load(em: KernelEmitter, plan: Tcgen05Plan, taddr: str) -> list[str]:
    """D's words in this thread's registers (tcgen05.ld, waited for)."""
    mine = _thread_taddr(em, plan, taddr)
    n = plan.ld_regs
    rt = "{ " + ", ".join(["i32"] * n) + " }"
    regs = ", ".join(f"${j}" for j in range(n))
    res = em.b.asm(rt, f"tcgen05.ld.sync.aligned.{_ldst_suffix(plan)} {{{regs}}}, [${n}]{_half_split(plan)};",
                   ",".join(["=r"] * n + ["r", "~{memory}"]), [("i32", mine)], hint="tm")
    words = [em.b.value(f"extractvalue {rt} {res}, {j}") for j in range(n)]
    # the wait ties the loaded registers: nothing reads them before the load completed
    cons = ",".join(["=r"] * n + [str(j) for j in range(n)] + ["~{memory}"])
    res = em.b.asm(rt, "tcgen05.wait::ld.sync.aligned;", cons, [("i32", w) for w in words], hint="tm")
    return [em.b.value(f"extractvalue {rt} {res}, {j}") for j in range(n)]


def _publish(em: KernelEmitter) -> None:
    """Every thread's staging stores visible to the tensor core (the async proxy)."""
    em.b.asm("void", "fence.proxy.async.shared::cta;", "~{memory}", [])
    _sync(em)


def lower_tcgen05(em: KernelEmitter, op: Operation, plan: Tcgen05Plan) -> None:
    lhs, rhs = em.get(op.operands["lhs"]), em.get(op.operands["rhs"])
    acc = em.expect(op.operands["acc"])
    base = scratch_address(em, op, plan)
    descs = descriptor_bases(em, plan, base)
    stage_chunk(em, op, plan, lhs, rhs, base, 0)
    taddr = acquire(em, plan, list(acc.regs))
    for chunk in range(plan.chunks):
        if chunk:   # every thread saw the previous chunk's mma complete: its operands may be overwritten
            stage_chunk(em, op, plan, lhs, rhs, base, chunk)
            _publish(em)
        issue_and_wait(em, plan, taddr, descs, chunk)
    em.set(op.result, Tile(op.result.type, plan.c, release(em, plan, taddr)))


def lower_tcgen05_staged(em: KernelEmitter, staged: Operation, plan: Tcgen05Plan, unit_off: str) -> None:
    """One K chunk (`unit`) of a pipelined loop's mma: the copies put A and B in the stage buffer at
    `unit_off` (from the scratch, aligned to the swizzle repeat at run time) and the unit's wait fenced them
    for the async proxy before its barrier; issue the chunk and wait for it (the next copies into this buffer
    come after the next barrier)."""
    p = plan.chunked(staged.attrs["kc"])
    descs, shift = _unit_operands(em, p, unit_off)
    taddr = acquire(em, p, list(em.expect(staged.operands["acc"]).regs))
    issue_and_wait(em, p, taddr, descs, 0, shift)
    em.set(staged.result, Tile(staged.result.type, p.c, release(em, p, taddr)))


def lower_tcgen05_landed(em: KernelEmitter, op: Operation, plan: Tcgen05Plan, unit_off: str,
                         a_buffer: str | None) -> None:
    """An mma whose B operand landed in a ring slot (`tilegpu.mma_landed`, codegen/lower_wgmma.py's
    `landed_descriptors`), whole K: A from the buffer at `a_buffer` (staged before the loop) or staged into
    the op's scratch (the acquire's barrier publishes it), then acquire, issue, wait and release as an
    unpipelined op does."""
    base = a_buffer
    if base is None:
        base = scratch_address(em, op, plan)
        stage_operand(em, plan, "a", em.get(op.operands["lhs"]), base, 0, (op.attrs.get("store_vectors") or (1,))[0])
    da, db, rebase = landed_bases(em, op, plan, base)
    descs, b_slot = (da, db), (unit_off, rebase)
    zero = bool(op.attrs.get("acc_zero"))
    if "tmem_column" in op.attrs:
        em.set(op.result, Tile(op.result.type, plan.c,
                               _landed_allocated(em, op, plan, descs, b_slot, staged=a_buffer is None)))
        return
    taddr = acquire(em, plan, None if zero else list(em.expect(op.operands["acc"]).regs))
    issue_and_wait(em, plan, taddr, descs, 0, zero=zero, b_slot=b_slot)
    em.set(op.result, Tile(op.result.type, plan.c, release(em, plan, taddr)))


def _landed_allocated(em: KernelEmitter, op: Operation, plan: Tcgen05Plan, descs: tuple[str, str],
                      b_slot: tuple[str, int], staged: bool) -> list[str]:
    """A `tmem_column` mma_landed on its columns of the entry's allocation: every thread stores its
    accumulator (unless zero) and arrives on the stores' mbarrier after its stores, its staging of A and its
    loads of these columns' previous accumulator; warp 0 waits for them all and thread 0 issues and commits
    to the mmas' mbarrier; every thread arrives there too and waits for its own arrival's phase (no parity
    carried), then loads D.  `stores_ordered` (keep-accumulators-in-tensor-memory): nothing stored nor
    staged, and a later op's wait orders the previous loads: no arrival nor wait on the stores' mbarrier.
    Returns D's registers."""
    zero = bool(op.attrs.get("acc_zero"))
    if staged:      # the staging stores visible to the tensor core
        em.b.asm("void", "fence.proxy.async.shared::cta;", "~{memory}", [])
    taddr = em.b.value(f"add i32 {_address(em)}, {op.attrs['tmem_column']}") if op.attrs["tmem_column"] \
        else _address(em)
    _fence(em, "after")
    if not op.attrs.get("stores_ordered"):
        if not zero:
            _store(em, plan, list(em.expect(op.operands["acc"]).regs), taddr)
        _fence(em, "before")
        _arrive_and_wait(em, _stores_bar(em), warp0=True)
        _fence(em, "after")
    bar, _ = _bars(em)
    issue(em, plan, taddr, descs, zero=zero, commit=bar, b_slot=b_slot)
    _arrive_and_wait(em, bar, warp0=False)
    _fence(em, "after")
    return _from_words(em, plan, _load(em, plan, taddr))


def _unit_operands(em: KernelEmitter, plan: Tcgen05Plan, unit_off: str) -> tuple[tuple[str, str], str | int]:
    """(descriptor bases, shift) of a K unit whose stage buffer is `unit_off` bytes from the scratch."""
    sym = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    return descriptor_bases(em, plan, sym), int(unit_off) if unit_off.lstrip("-").isdigit() else unit_off


# A pipelined loop's accumulator kept in tensor memory (tilegpu/passes/tmem_accumulators.py): acquired once
# before the loop, one issue + wait per K chunk on the loop-carried mbarrier phase, released once after it.

def _loop_plan(em: KernelEmitter, op: Operation) -> Tcgen05Plan:
    return recorded_plan(op.attrs["mma"]).chunked(op.attrs["kc"])


@lowers("tilegpu.tmem_acquire")
def _tmem_acquire(em: KernelEmitter, op: Operation) -> None:
    acc = list(em.expect(op.operands["acc"]).regs)
    if op.attrs.get("allocated") and op.attrs.get("acc_zero"):   # after the unit's barrier: nothing to store
        taddr = _address(em)
    elif op.attrs.get("allocated"):
        taddr = _store_allocated(em, _loop_plan(em, op), acc)
    else:   # acc_zero: nothing stored, the acquire's barrier is its last step
        taddr = acquire(em, _loop_plan(em, op), None if op.attrs.get("acc_zero") else acc,
                        sync=not op.attrs.get("barrier_follows"))
    em.set(op.result, Tile(op.result.type, None, [taddr]))


@lowers("tilegpu.tmem_mma_staged")
def _tmem_mma_staged(em: KernelEmitter, op: Operation) -> None:
    plan = _loop_plan(em, op)
    descs, shift = _unit_operands(em, plan, unit_offset(em, op))
    phase = em.expect(op.operands["phase"]).regs[0]
    committed = bool(op.attrs.get("committed"))
    _fence(em, "after")     # the barrier before this unit may be the one that ordered the acquire's stores
    issue_and_wait(em, plan, em.expect(op.operands["tmem"]).regs[0], descs, phase, shift, committed,
                   zero=bool(op.attrs.get("acc_zero")))
    nxt = phase if committed else em.b.value(f"xor i32 {phase}, 1")   # committed: its mbarrier unused
    em.set(op.result, Tile(op.result.type, None, [nxt]))


@lowers("tilegpu.tmem_release")
def _tmem_release(em: KernelEmitter, op: Operation) -> None:
    plan = _loop_plan(em, op)
    taddr = em.expect(op.operands["tmem"]).regs[0]
    if op.attrs.get("allocated") and op.attrs.get("committed"):
        # one commit tracks the mmas (committed to the ring's mbarriers so far); every consumer thread
        # arrives too, so each waits for the phase its own arrival is in: no parity to carry from one
        # execution to the next (the mbarrier is initialised once, at the kernel's entry)
        bar, _ = _bars(em)
        tcgen05_commit(em, bar)
        _arrive_and_wait(em, bar, warp0=False)
        _fence(em, "after")
        em.set(op.result, Tile(op.result.type, plan.c, _from_words(em, plan, _load(em, plan, taddr))))
        return
    if op.attrs.get("allocated"):   # every thread waited for the last unit's commit; the columns stay
        words = _load(em, plan, taddr)
        _fence(em, "before")        # the next barrier orders these loads before the next issue
        em.set(op.result, Tile(op.result.type, plan.c, _from_words(em, plan, words)))
        return
    if op.attrs.get("committed"):   # the mmas went to other mbarriers: one commit here tracks them all
        bar, _ = _bars(em)
        tcgen05_commit(em, bar)
        _wait(em, bar, 0)
    em.set(op.result, Tile(op.result.type, plan.c, release(em, plan, taddr)))


# A warp-specialised consumer's tensor memory allocated once at the kernel's entry (tilegpu.tmem_alloc, from
# keep-accumulators-in-tensor-memory): mbarriers instead of consumer barriers around each acquire and release.

def _stores_bar(em: KernelEmitter) -> str:
    """The mbarrier every consumer thread arrives on after its tcgen05.st (and before tmem_free)."""
    bar, _ = _bars(em)
    return em.b.entry_value(f"add i32 {bar}, {2 * MBAR_BYTES}")


def _arrive_and_wait(em: KernelEmitter, bar: str, warp0: bool) -> None:
    """Every thread arrives on mbarrier `bar`; every thread (or, `warp0`, warp 0's alone) then waits for the
    phase of its own arrival (its state, not a parity) to complete."""
    arrive = "mbarrier.arrive.shared.b64 st, [$0];"
    wait = "$$tsw${:uid}: mbarrier.try_wait.shared.b64 w, [$0], st; @!w bra $$tsw${:uid};"
    if not warp0:
        em.b.asm("void", f"{{ .reg .pred w; .reg .b64 st; {arrive} {wait} }}", "r,~{memory}", [("i32", bar)])
        return
    em.b.asm("void", f"{{ .reg .pred p, w; .reg .b64 st; {arrive} setp.ne.u32 p, $1, 0; @p bra $$tsd${{:uid}}; "
                     f"{wait} $$tsd${{:uid}}: }}", "r,r,~{memory}", [("i32", bar), ("i32", em.warp)])


def _columns(em: KernelEmitter, op: Operation) -> int:
    """A tmem_alloc's (tmem_free's) columns: its own `columns` (an attention loop's) or its mma's."""
    return op.attrs["columns"] if "columns" in op.attrs else _loop_plan(em, op).tmem_cols


@lowers("tilegpu.tmem_alloc")
def _tmem_alloc(em: KernelEmitter, op: Operation) -> None:
    """Warp 0 allocates the columns, thread 0 initialises the mmas' mbarrier (the consumer threads' arrivals
    and the commit's) and the stores' (the consumer threads'); the CTA barrier that follows (the TMA
    mbarriers' publication, every thread's) publishes them."""
    if op.attrs.get("per_unit"):
        _alloc_per_unit(em, op)
        return
    bar, slot = _bars(em, 3)
    threads = em.num_threads
    _only(em, "warp", f"tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [$1], {_columns(em, op)};",
          [("i32", slot)], "r")
    _thread0(em, [f"mbarrier.init.shared.b64 [$1], {threads + 1}",
                  f"mbarrier.init.shared.b64 [$1+{2 * MBAR_BYTES}], {threads}",
                  "fence.mbarrier_init.release.cluster"], [("i32", bar)], branch=True)
    _fence(em, "before")


def _store_allocated(em: KernelEmitter, plan: Tcgen05Plan, acc_regs: list[str]) -> str:
    """The accumulator stored into the columns allocated at the entry; warp 0, whose thread 0 issues, goes on
    once every consumer thread's stores are done (their arrivals on the stores' mbarrier; the whole warp
    waits, so its lanes do not diverge before its next .aligned instruction).  A thread's stores also come
    after its loads of the previous execution's accumulator, so the wait orders those before the issue too."""
    _fence(em, "after")
    taddr = _store(em, plan, acc_regs)
    _fence(em, "before")
    _arrive_and_wait(em, _stores_bar(em), warp0=True)
    return taddr


def _alloc_per_unit(em: KernelEmitter, op: Operation) -> None:
    """Warp 0 allocates the columns, thread 0 initialises the mmas' mbarrier for the units' commits (one
    arrival a phase); the first unit's barrier publishes both (every thread reads the address after it)."""
    bar, slot = _bars(em)
    _only(em, "warp", f"tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [$1], {_columns(em, op)};",
          [("i32", slot)], "r")
    _only(em, "thread", "mbarrier.init.shared.b64 [$1], 1; @p fence.mbarrier_init.release.cluster;",
          [("i32", bar)], "r")
    _fence(em, "before")


@lowers("tilegpu.tmem_free")
def _tmem_free(em: KernelEmitter, op: Operation) -> None:
    """After every consumer thread's last tcgen05.ld (its arrival on the stores' mbarrier), warp 0 reads the
    columns' address and frees them; the other warps branch around all of it.  `per_unit`: after a CTA
    barrier (every thread passes it, whether the loop ran or not), warp 0 frees the columns and thread 0
    invalidates the mbarrier."""
    if op.attrs.get("per_unit"):
        bar, _ = _bars(em)
        _sync(em)
        _only(em, "warp", f"tcgen05.dealloc.cta_group::1.sync.aligned.b32 $1, {_columns(em, op)};",
              [("i32", _address(em))], "r")
        _only(em, "thread", "mbarrier.inval.shared.b64 [$1];", [("i32", bar)], "r")
        return
    _, slot = _bars(em)
    cols = _columns(em, op)
    em.b.asm("void", "{ .reg .pred p, w; .reg .b64 st; .reg .b32 a; tcgen05.fence::before_thread_sync; "
                     "mbarrier.arrive.shared.b64 st, [$0]; setp.ne.u32 p, $2, 0; @p bra $$tfd${:uid}; "
                     "$$tfw${:uid}: mbarrier.try_wait.shared.b64 w, [$0], st; @!w bra $$tfw${:uid}; "
                     "tcgen05.fence::after_thread_sync; ld.shared.u32 a, [$1]; "
                     f"tcgen05.dealloc.cta_group::1.sync.aligned.b32 a, {cols}; $$tfd${{:uid}}: }}",
             "r,r,r,~{memory}", [("i32", _stores_bar(em)), ("i32", slot), ("i32", em.warp)])
