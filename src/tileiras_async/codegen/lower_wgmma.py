"""mmaf and mmai as Hopper `wgmma.mma_async`, following a `tilegpu.analysis.wgmma.WgmmaPlan` (sm_90a).

The plan (instruction, warpgroup split, accumulator layout, swizzled K-major operand layouts, descriptors)
was decided by the passes; this module only emits it, in steps a software-pipelined loop can also call on
buffers it manages:

1. `scratch_address`: the op's scratch as a shared-memory address rounded up to the swizzle repeat (the plan
   asks for the slack), once per kernel in the entry block.
2. `stage_chunk`: A and B (in registers, any layout) stored into their swizzled K-major places: a per-thread
   part computed once plus, per register, a constant (XOR where the two share address bits: the swizzle);
   runs of registers along K become one vector store.  Elements of another K chunk are skipped (or, where
   the chunk depends on the thread, sent to the trash slot).
3. `publish`: `fence.proxy.async.shared::cta` (the generic-proxy stores become visible to the async proxy
   that wgmma reads through), then `bar.sync` (every thread's stores are done).
4. `issue_chunk`: `wgmma.fence`, one `wgmma.mma_async` per K step and warpgroup tile with run-time
   descriptors (an entry-block template plus the constant start offset >> 4), `wgmma.commit_group`.
   Accumulators are tied "+f"/"+r" operands (.f16 accumulators packed two per 32-bit register).
5. `wait`: `wgmma.wait_group N`, again with the accumulators tied, so nothing reads them before the group
   retired.

`lower_wgmma` puts them together for an unpipelined op: per K chunk stage, publish, issue, wait 0.  In a
software-pipelined loop the copies write each element at `swizzled_offset` of its stage buffer (cp.async:
the swizzle moves whole 16-byte chunks), the unit's `async_wait` fences them for the async proxy before the
barrier, and `lower_wgmma_staged` issues and waits for the unit's group.
"""
from __future__ import annotations

from ..ir.core import Operation
from ..tilegpu.layout import LinearLayout
from ..tilegpu.analysis.wgmma import SmemOperand, WgmmaPlan, register_a_fragments
from .emitter import KernelEmitter, LoweringError
from .values import SHARED_PTR, Tile


# ---------------------------------------------------------------------------------------------------------
# addresses
# ---------------------------------------------------------------------------------------------------------

def scratch_address(em: KernelEmitter, op: Operation, plan: WgmmaPlan) -> str:
    """i32 (entry block): the shared-memory address of op's scratch rounded up to `plan.align`, which the
    plan's scratch size leaves room for."""
    off = em.scratch_base(op)
    sym = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    up = em.b.entry_value(f"add i32 {sym}, {off + plan.align - 1}")
    return em.b.entry_value(f"and i32 {up}, {-plan.align}")


def over_thread_bits(em: KernelEmitter, layout: LinearLayout, part, combine: str = "add",
                     lanes: bool = True) -> tuple[str, int]:
    """(i32 computed from the thread id (em.thread_value), bits it may set): `combine` ("add" or "xor")
    over this thread's set lane (unless not `lanes`) and warp bits of part(basis)."""
    if lanes and combine == "add":
        # lane bits are the thread id's bits 0-4 and warp bits the next ones: a field may run across both
        # (an operand's row bits often do), so the fields are taken over the thread id itself
        contribs = [part(b) for b in layout.bases[1]] + [part(b) for b in layout.bases[2]]
        return combine_bits(em, em.tid, contribs)
    acc, mask = "0", 0
    for src, bases in ((em.lane, layout.bases[1] if lanes else ()), (em.warp, layout.bases[2])):
        acc, m = combine_bits(em, src, [part(b) for b in bases], acc, combine)
        mask |= m
    return acc, mask


def combine_bits(em: KernelEmitter, src: str, contribs: list[int], acc: str = "0",
                 combine: str = "add") -> tuple[str, int]:
    """(`acc` combined with contribs[bit] for each set bit of the thread value `src`, bits it may set)."""
    mask = 0
    for bit, width, c in thread_bit_fields(contribs, combine == "add"):
        field = em.thread_value(f"lshr i32 {src}, {bit}") if bit else src
        field = em.thread_value(f"and i32 {field}, {(1 << width) - 1}")
        term = em.thread_value(f"mul i32 {field}, {c}")
        acc = term if acc == "0" else em.thread_value(f"{combine} i32 {acc}, {term}")
        mask |= c * ((1 << width) - 1)
    return acc, mask


def thread_bit_fields(contribs: list[int], merge: bool) -> list[tuple[int, int, int]]:
    """(first bit, width, contribution of the first bit) per field of consecutive thread-id bits whose
    contributions double from one bit to the next (with `merge`; else one field per bit), zero ones left out:
    such a field adds (its bits as a number) x (the first contribution) -- one shift, mask and multiply for
    the field instead of one per bit (a staging offset's lane and warp bits often form two or three)."""
    fields: list[list[int]] = []
    for bit, c in enumerate(contribs):
        if not c:
            continue
        last = fields[-1] if fields else None
        if merge and last is not None and last[0] + last[1] == bit and c == last[2] << last[1]:
            last[1] += 1
        else:
            fields.append([bit, 1, c])
    return [tuple(f) for f in fields]


def _smem_ptr(em: KernelEmitter, addr: str, const: int = 0) -> str:
    """ptr addrspace(3) to shared address `addr` + const (constant offsets fold into the st.shared)."""
    p = em.b.value(f"inttoptr i32 {addr} to {SHARED_PTR}", "sp")
    if const:
        p = em.b.value(f"getelementptr i8, {SHARED_PTR} {p}, i32 {const}", "sp")
    return p


def swizzled_offset(em: KernelEmitter, sm: SmemOperand, b: str, row: str, k: str) -> str:
    """i32: `sm.offset(b, row, k)` for run-time coordinates (i32 values or literals; k within the chunk):
    what a pipelined loop's copy of an element or vector writes to.  Dimensions are powers of two, so the
    divisions are shifts and masks."""
    w, e = sm.width, sm.ebytes
    if sm.major == "mn":
        per = w // e
        terms = [(_shr(em, row, per), sm.kc * w), (k, w), (_and(em, row, per - 1), e)]
    else:
        kb = _mul(em, k, e)
        terms = [(_shr(em, kb, w), sm.rows * w), (row, w), (_and(em, kb, w - 1), 1)]
    terms.append((b, sm.batch_bytes))
    lin = "0"
    for v, scale in terms:
        lin = _add(em, lin, _mul(em, v, scale))
    if w > sm.atom and lin != "0":
        phase = _and(em, em.b.value(f"lshr i32 {lin}, 7"), w // sm.atom - 1)
        lin = em.b.value(f"xor i32 {lin}, {_mul(em, phase, sm.atom)}")
    return _add(em, lin, str(sm.base)) if sm.base else lin


def _mul(em: KernelEmitter, v: str, c: int) -> str:
    if v == "0" or c == 0:
        return "0"
    if c == 1:
        return v
    if v.lstrip("-").isdigit():
        return str(int(v) * c)
    if c & (c - 1) == 0:
        return em.b.value(f"shl i32 {v}, {c.bit_length() - 1}")
    return em.b.value(f"mul i32 {v}, {c}")


def _add(em: KernelEmitter, a: str, b: str) -> str:
    if a == "0":
        return b
    if b == "0":
        return a
    return em.b.value(f"add i32 {a}, {b}")


def _shr(em: KernelEmitter, v: str, c: int) -> str:
    """v // c (c a power of two)."""
    if v == "0" or c == 1:
        return v
    if v.lstrip("-").isdigit():
        return str(int(v) // c)
    return em.b.value(f"lshr i32 {v}, {c.bit_length() - 1}")


def _and(em: KernelEmitter, v: str, mask: int) -> str:
    if v == "0" or mask == 0:
        return "0"
    if v.lstrip("-").isdigit():
        return str(int(v) & mask)
    return em.b.value(f"and i32 {v}, {mask}")


# ---------------------------------------------------------------------------------------------------------
# staging
# ---------------------------------------------------------------------------------------------------------

def stage_entries(layout: LinearLayout, plan: WgmmaPlan, role: str, chunk: int, vec: int):
    """What `stage_chunk` stores of one operand for K chunk `chunk`: (whether chunk membership depends on
    the thread, [(first register, constant offset, required thread chunk part or None)]), one entry per
    `vec` registers holding distinct elements."""
    thread_hi = any(plan.chunk_part(role, b) for bases in layout.bases[1:] for b in bases)
    want = chunk * plan.kc
    out, done = [], set()
    for r in range(0, layout.num_registers, vec):
        coord = layout.register_coord(r)
        if coord in done:
            continue
        done.add(coord)
        hi = plan.chunk_part(role, coord)
        if thread_hi:
            out.append((r, plan.stage_offset(role, coord), want ^ hi))
        elif hi == want:
            out.append((r, plan.stage_offset(role, coord), None))
    return thread_hi, out


def stage_operand(em: KernelEmitter, plan: WgmmaPlan, role: str, t: Tile, base: str, chunk: int,
                  vec: int) -> None:
    """Store tile `t` (the lhs for role "a", the rhs for "b") for K chunk `chunk` into its swizzled place
    in the scratch at shared address `base` (scratch_address), `vec` registers per store."""
    if t.is_scalar:
        raise LoweringError("mma operands must be tiles")
    layout = t.layout
    sm = plan.operand(role)
    dynamic, entries = stage_entries(layout, plan, role, chunk, vec)
    thread, tmask = over_thread_bits(em, layout, lambda bs: plan.stage_offset(role, bs), "xor")
    if dynamic:
        thread_hi, _ = over_thread_bits(em, layout, lambda bs: plan.chunk_part(role, bs), "xor")
        trash = em.b.value(f"add i32 {base}, {plan.trash}")
    # per register constant c: the bits the thread part may also set are XORed in (once per distinct value,
    # in the entry block), the others are an immediate offset; `base` may be a value of the current block
    # (a pipelined loop's buffer)
    starts: dict[int, str] = {}

    def row_start(overlap: int) -> str:
        if overlap not in starts:
            x = str(overlap) if thread == "0" else (em.thread_value(f"xor i32 {thread}, {overlap}") if overlap
                                                    else thread)
            starts[overlap] = base if x == "0" else em.b.value(f"add i32 {base}, {x}")
        return starts[overlap]

    lt = t.llvm
    vty = lt if vec == 1 else f"<{vec} x {lt}>"
    for r, const, need in entries:
        overlap = const & tmask
        rest = const & ~tmask
        at = row_start(overlap)
        if vec == 1:
            val = t.regs[r]
        else:
            val = "poison"
            for j in range(vec):
                val = em.b.value(f"insertelement {vty} {val}, {lt} {t.regs[r + j]}, i32 {j}")
        rest += sm.base
        if need is None:
            ptr = _smem_ptr(em, at, rest)
        else:
            addr = em.b.value(f"add i32 {at}, {rest}") if rest else at
            here = em.b.value(f"icmp eq i32 {thread_hi}, {need}")
            ptr = _smem_ptr(em, em.b.value(f"select i1 {here}, i32 {addr}, i32 {trash}"))
        em.b.emit(f"store {vty} {val}, {SHARED_PTR} {ptr}, align {vec * sm.ebytes}")


def stage_hoisted(em: KernelEmitter, op: Operation, plan: WgmmaPlan, base: str) -> None:
    """A loop-invariant A (`stage_operand` with a wgmma plan) into its swizzled place at shared address `base`
    (aligned to the swizzle repeat), whole K, fenced for the async proxy: a barrier before the first mma that
    reads it publishes it."""
    stage_operand(em, plan, "a", em.get(op.operands["value"]), base, 0, (op.attrs.get("store_vectors") or (1,))[0])
    em.b.asm("void", "fence.proxy.async.shared::cta;", "~{memory}", [])


def stage_chunk(em: KernelEmitter, op: Operation, plan: WgmmaPlan, lhs: Tile, rhs: Tile, base: str,
                chunk: int) -> None:
    """A and B of K chunk `chunk` of mma `op` into the scratch at `base` (publish before issuing), as many
    registers per store as select-access-forms decided."""
    va, vb = op.attrs["store_vectors"]
    stage_operand(em, plan, "a", lhs, base, chunk, va)
    stage_operand(em, plan, "b", rhs, base, chunk, vb)


def publish(em: KernelEmitter) -> None:
    """Make every thread's shared-memory stores visible to the wgmma (async proxy) reads."""
    em.b.asm("void", "fence.proxy.async.shared::cta;", "~{memory}", [])
    em.barrier()


# ---------------------------------------------------------------------------------------------------------
# issuing
# ---------------------------------------------------------------------------------------------------------

def descriptor_bases(em: KernelEmitter, plan: WgmmaPlan, base: str) -> tuple[str, str]:
    """i64 (entry block): descriptor templates | (start >> 4) with start = the scratch plus this warpgroup's
    part; an instruction adds its constant start offset (Issue.a_off/b_off, operand base included) >> 4
    (no carry into the other fields: shared addresses are below 256 KiB)."""
    da, db = plan.descriptors()
    wg = em.thread_value(f"lshr i32 {em.warp}, 2")
    out = []
    for desc, pick in ((da, 0), (db, 1)):
        addr = base
        for bit, offs in enumerate(plan.warpgroup_bits()):
            if offs[pick]:
                one = em.thread_value(f"and i32 {em.thread_value(f'lshr i32 {wg}, {bit}')}, 1")
                addr = em.thread_value(f"add i32 {addr}, {em.thread_value(f'mul i32 {one}, {offs[pick]}')}")
        start = em.thread_value(f"zext i32 {em.thread_value(f'lshr i32 {addr}, 4')} to i64")
        out.append(em.thread_value(f"or i64 {start}, {_i64(desc.template())}"))
    return out[0], out[1]


def _i64(x: int) -> int:
    """An unsigned 64-bit constant as LLVM writes i64 literals (signed)."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _acc_kind(plan: WgmmaPlan) -> tuple[str, str]:
    """(LLVM type, constraint letter) of one 32-bit D register."""
    return ("float", "f") if plan.instr.acc == "float" else ("i32", "r")


def pack_accumulators(em: KernelEmitter, plan: WgmmaPlan, regs: list[str]) -> list[str]:
    """Accumulator elements (plan.c registers) -> D registers (32 bits; .f16 accumulators two per register,
    element 2j in the low half)."""
    if plan.instr.acc_per_reg == 1:
        return list(regs)
    words = []
    for j in range(0, len(regs), 2):
        v = em.b.value(f"insertelement <2 x half> poison, half {regs[j]}, i32 0")
        v = em.b.value(f"insertelement <2 x half> {v}, half {regs[j + 1]}, i32 1")
        words.append(em.b.value(f"bitcast <2 x half> {v} to i32"))
    return words


def unpack_accumulators(em: KernelEmitter, plan: WgmmaPlan, words: list[str]) -> list[str]:
    if plan.instr.acc_per_reg == 1:
        return list(words)
    regs = []
    for w in words:
        v = em.b.value(f"bitcast i32 {w} to <2 x half>")
        regs += [em.b.value(f"extractelement <2 x half> {v}, i32 {e}") for e in range(2)]
    return regs


def _tied_asm(em: KernelEmitter, plan: WgmmaPlan, template: str, words: list[str] | int,
              extra: list[tuple[str, str, str]] = ()) -> list[str]:
    """An asm statement that reads and rewrites `words` (tied operands $0..), with `extra` (type, value,
    constraint) inputs after them; returns the new words.  `words` a count: that many fresh outputs, read
    from nothing (an mma with scale-d 0: D = A B)."""
    lt, c = _acc_kind(plan)
    fresh = isinstance(words, int)
    n = words if fresh else len(words)
    rt = "{ " + ", ".join([lt] * n) + " }"
    tied = [] if fresh else [str(j) for j in range(n)]
    cons = ",".join([f"={c}"] * n + tied + [x[2] for x in extra] + ["~{memory}"])
    args = ([] if fresh else [(lt, w) for w in words]) + [(x[0], x[1]) for x in extra]
    res = em.b.asm(rt, template, cons, args, hint="wg")
    return [em.b.value(f"extractvalue {rt} {res}, {j}") for j in range(n)]


def _mma_template(plan: WgmmaPlan, nregs: int, fresh: bool = False) -> str:
    """One wgmma.mma_async of `nregs` D registers ($0..), A's and B's descriptors after the tied inputs (or,
    `fresh`, right after D: scale-d 0, D = A B)."""
    d = ", ".join(f"${j}" for j in range(nregs))
    first = nregs if fresh else 2 * nregs
    a, b = f"${first}", f"${first + 1}"
    scale_d = 0 if fresh else 1
    if not plan.instr.scaled:
        tail = f", {scale_d}"
    elif plan.instr.transposable:   # imm-trans-a 0 (A K-major), imm-trans-b 1 when B is N-major
        tail = f", {scale_d}, 1, 1, 0, {int(plan.b_major == 'mn')}"
    else:
        tail = f", {scale_d}, 1, 1"
    return f"{plan.ptx} {{{d}}}, {a}, {b}{tail};"


def issue_chunk(em: KernelEmitter, plan: WgmmaPlan, words: list[str], descs: tuple[str, str],
                shift: str | int = 0, zero: bool = False) -> list[str]:
    """wgmma.fence, every instruction of one K chunk, commit_group.  The operands are where `stage_chunk`
    put them, `shift` bytes further (i32 value or constant: the stage buffer of a pipelined loop, a multiple
    of plan.align).  `words`: D registers (pack_accumulators), returned updated (not readable before `wait`).
    `zero`: the accumulator is zero: the first K step writes D with scale-d 0, reading no register."""
    em.b.asm("void", "wgmma.fence.sync.aligned;", "~{memory}", [])
    if isinstance(shift, str):
        s64 = em.b.value(f"zext i32 {em.b.value(f'lshr i32 {shift}, 4')} to i64")
        descs = tuple(em.b.value(f"add i64 {d}, {s64}", "desc") for d in descs)
        shift = 0
    words = list(words)
    per = plan.instr.acc_per_reg
    steps = plan.issues()
    first = steps[0]
    for step in steps:
        for iss in step:
            idx = [r // per for r in iss.c_regs[::per]]
            da = _desc(em, descs[0], (iss.a_off + shift) >> 4)
            db = _desc(em, descs[1], (iss.b_off + shift) >> 4)
            fresh = zero and step is first
            out = _tied_asm(em, plan, _mma_template(plan, len(idx), fresh), len(idx) if fresh else
                            [words[i] for i in idx], [("i64", da, "l"), ("i64", db, "l")])
            for i, v in zip(idx, out):
                words[i] = v
    em.b.asm("void", "wgmma.commit_group.sync.aligned;", "~{memory}", [])
    return words


def _desc(em: KernelEmitter, base: str, add: int) -> str:
    return base if not add else em.b.value(f"add i64 {base}, {add}", "desc")


def wait(em: KernelEmitter, plan: WgmmaPlan, words: list[str], pending: int = 0) -> list[str]:
    """wgmma.wait_group `pending`: the accumulators of every older group are final afterwards."""
    return _tied_asm(em, plan, f"wgmma.wait_group.sync.aligned {pending};", words)


# ---------------------------------------------------------------------------------------------------------
# the op
# ---------------------------------------------------------------------------------------------------------

def lower_wgmma_staged(em: KernelEmitter, staged: Operation, plan: WgmmaPlan, unit_off: str) -> None:
    """One K chunk (`unit`) of a pipelined loop's mma on wgmma: the copies put A and B in the stage buffer at
    `unit_off` (from the scratch; aligned to the swizzle repeat at run time) in the plan's swizzled layouts,
    and the wait before the barrier fenced them for the async proxy; issue the chunk's instructions and wait
    for them (the next copies into this buffer come after the next barrier)."""
    p = plan.chunked(staged.attrs["kc"])
    sym = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    descs = descriptor_bases(em, p, sym)
    words = pack_accumulators(em, p, list(em.expect(staged.operands["acc"]).regs))
    shift = int(unit_off) if unit_off.lstrip("-").isdigit() else unit_off
    words = issue_chunk(em, p, words, descs, shift)
    words = wait(em, p, words, 0)
    em.set(staged.result, Tile(staged.result.type, p.c, unpack_accumulators(em, p, words)))


def lower_wgmma_landed(em: KernelEmitter, op: Operation, plan: WgmmaPlan, unit_off: str,
                       a_buffer: str | None) -> None:
    """An mma whose B operand landed in a ring slot at `unit_off` (from the scratch; `operand.base` further)
    in the plan's B layout, whole K.  A: from the buffer at shared address `a_buffer` (an entry value: staged
    before the loop and published), from the lhs's registers (`a_registers`: wgmma's register-A fragments),
    or staged from registers into the op's scratch and published here.  Issue with B's descriptors pointing
    into the slot, wait."""
    lhs = em.get(op.operands["lhs"]) if "lhs" in op.operands else None
    acc = em.expect(op.operands["acc"])
    fragments = None
    if op.attrs.get("a_registers"):
        fragments = register_a_fragments(plan, lhs.layout)
        if fragments is None:
            raise LoweringError("internal: the lhs does not hold wgmma's register-A fragments")
        base = None
    elif a_buffer is not None:
        base = a_buffer
    else:
        base = scratch_address(em, op, plan)
        stage_operand(em, plan, "a", lhs, base, 0, (op.attrs.get("store_vectors") or (1,))[0])
        publish(em)
    da, db = landed_descriptors(em, op, plan, base, unit_off)
    zero = bool(op.attrs.get("acc_zero"))
    words = [] if zero else pack_accumulators(em, plan, list(acc.regs))
    if zero:    # D is written whole by the first K step (scale-d 0): its registers need no zeros first
        words = [""] * (len(acc.regs) // plan.instr.acc_per_reg)
    if fragments is None:
        words = issue_chunk(em, plan, words, (da, db), zero=zero)
    else:
        words = _issue_register_a(em, plan, words, db, _pack_fragments(em, lhs, fragments), zero)
    words = wait(em, plan, words, 0)
    em.set(op.result, Tile(op.result.type, plan.c, unpack_accumulators(em, plan, words)))


def landed_descriptors(em: KernelEmitter, op: Operation, plan: WgmmaPlan, a_base: str | None,
                       unit_off: str) -> tuple[str | None, str]:
    """(A's descriptor base at shared address `a_base`, None without one; B's, pointing into the ring slot at
    `unit_off` from the scratch) of an mma whose B landed (`tilegpu.mma_landed`)."""
    da, db, rebase = landed_bases(em, op, plan, a_base)
    shift = em.b.value(f"add i32 {unit_off}, {rebase}") if rebase else unit_off
    s64 = em.b.value(f"sext i32 {em.b.value(f'ashr i32 {shift}, 4')} to i64")
    return da, em.b.value(f"add i64 {db}, {s64}", "desc")


def landed_bases(em: KernelEmitter, op: Operation, plan: WgmmaPlan,
                 a_base: str | None) -> tuple[str | None, str, int]:
    """(A's descriptor base at shared address `a_base`, None without one; B's at the scratch (entry block);
    the bytes B's slot is from there, besides the slot's own offset) of an mma whose B landed: the
    instructions' B offsets count from plan.b_smem.base, the tile is at the slot's operand base instead."""
    sym = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    da = descriptor_bases(em, plan, a_base)[0] if a_base is not None else None
    _, db = descriptor_bases(em, plan, sym)
    return da, db, op.attrs["operand"].base - plan.b_smem.base


def _pack_fragments(em: KernelEmitter, lhs: Tile, fragments) -> list[list[str]]:
    """Per issue, A's four 32-bit registers: each two 16-bit lhs elements (the first in the low half)."""
    lt = lhs.llvm
    out = []
    for regs in fragments:
        words = []
        for lo, hi in regs:
            v = em.b.value(f"insertelement <2 x {lt}> poison, {lt} {lhs.regs[lo]}, i32 0")
            v = em.b.value(f"insertelement <2 x {lt}> {v}, {lt} {lhs.regs[hi]}, i32 1")
            words.append(em.b.value(f"bitcast <2 x {lt}> {v} to i32"))
        out.append(words)
    return out


def _issue_register_a(em: KernelEmitter, plan: WgmmaPlan, words: list[str], db: str,
                      a_words: list[list[str]], zero: bool = False) -> list[str]:
    """wgmma.fence, every instruction with A from registers (`a_words`: per K step and M tile) and B through
    descriptor base `db`, commit_group (`zero`: as issue_chunk's)."""
    em.b.asm("void", "wgmma.fence.sync.aligned;", "~{memory}", [])
    words = list(words)
    per = plan.instr.acc_per_reg
    for ks, step in enumerate(plan.issues()):
        for i, iss in enumerate(step):
            a = a_words[ks * plan.rm + i // plan.rn]
            idx = [r // per for r in iss.c_regs[::per]]
            n = len(idx)
            fresh = zero and ks == 0
            first = n if fresh else 2 * n
            d = ", ".join(f"${j}" for j in range(n))
            av = ", ".join(f"${first + j}" for j in range(4))
            template = (f"{plan.ptx} {{{d}}}, {{{av}}}, ${first + 4}, {0 if fresh else 1}, 1, 1, "
                        f"{int(plan.b_major == 'mn')};")
            out = _tied_asm(em, plan, template, n if fresh else [words[j] for j in idx],
                            [("i32", w, "r") for w in a] + [("i64", _desc(em, db, iss.b_off >> 4), "l")])
            for j, v in zip(idx, out):
                words[j] = v
    em.b.asm("void", "wgmma.commit_group.sync.aligned;", "~{memory}", [])
    return words


def lower_wgmma(em: KernelEmitter, op: Operation, plan: WgmmaPlan) -> None:
    lhs, rhs = em.get(op.operands["lhs"]), em.get(op.operands["rhs"])
    acc = em.expect(op.operands["acc"])
    base = scratch_address(em, op, plan)
    descs = descriptor_bases(em, plan, base)
    words = pack_accumulators(em, plan, list(acc.regs))
    for chunk in range(plan.chunks):
        if chunk:   # every warpgroup is done reading the previous chunk (the first: insert-barriers decided)
            em.barrier()
        stage_chunk(em, op, plan, lhs, rhs, base, chunk)
        publish(em)
        words = issue_chunk(em, plan, words, descs)
        words = wait(em, plan, words, 0)
    em.set(op.result, Tile(op.result.type, plan.c, unpack_accumulators(em, plan, words)))
