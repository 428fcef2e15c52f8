"""Atomics on global memory: atomic_rmw_tko, atomic_cas_tko and atomic_red_view_tko.

Each element is one PTX `atom{.sem}{.scope}.global.<op>.<type>` (inline assembly, so the memory
ordering and scope are spelled exactly), predicated on the element's mask bit.

A tile layout may hold an element in several threads (or several registers of one thread).  The
atomic must happen once per element, so only the element's primary copy performs it; the other
copies get the old value through shared memory (the primary writes it, everyone reads it back).
Tiles with at least as many elements as the CTA has threads are first moved to the default
layout, which then has no replicas and needs no broadcast.

Masked-off elements return 0 (atomic_rmw_tko: implementation-defined) or `cmp` (atomic_cas_tko,
as specified).  bf16 `addf` has a native atom only from sm_90; elsewhere (or when the target is
unknown) it is a compare-and-swap loop on the 16-bit word, adding in f32 and rounding to nearest
even once, which gives the same result.
"""
from __future__ import annotations

from collections.abc import Callable

from ..ir import types as T
from ..ir.core import Operation
from ..ir.enums import AtomicRMWMode as M
from ..ir.enums import MemoryOrderingSemantics as MO
from ..ir.enums import MemoryScope
from .emitter import KernelEmitter, LoweringError, lowers, target_has
from .values import GLOBAL_PTR, SHARED_PTR, PartitionView, TOKEN, Tile, llvm_type

_SCOPE = {MemoryScope.tl_blk: "cta", MemoryScope.device: "gpu", MemoryScope.sys: "sys"}
_SEM = {MO.weak: "relaxed", MO.relaxed: "relaxed", MO.acquire: "acquire", MO.release: "release",
        MO.acq_rel: "acq_rel"}
# element llvm type -> (PTX register constraint, integer register type, bits)
_REG = {"i32": ("r", "i32", 32), "float": ("r", "i32", 32), "i64": ("l", "i64", 64),
        "double": ("l", "i64", 64), "half": ("h", "i16", 16), "bfloat": ("h", "i16", 16)}


def ordering(op: Operation) -> str:
    """`.sem.scope` of an atomic."""
    sem = _SEM[MO(op.attrs.get("memory_ordering_semantics", MO.relaxed))]
    scope = _SCOPE[MemoryScope(op.attrs.get("memory_scope", MemoryScope.device))]
    return f".{sem}.{scope}"


def _ptx_op(mode: M, lt: str, bf16_add: bool) -> str | None:
    """`<op>.<type>` of the atom instruction, or None when it needs a CAS loop."""
    bits = _REG[lt][2] if lt in _REG else 0
    if mode == M.addf:
        if lt == "float":
            return "add.f32"
        if lt == "double":
            return "add.f64"
        if lt == "half":
            return "add.noftz.f16"
        if lt == "bfloat":
            return "add.noftz.bf16" if bf16_add else None
    elif lt in ("i32", "i64"):
        return {M.add: f"add.u{bits}", M.and_: f"and.b{bits}", M.or_: f"or.b{bits}",
                M.xor: f"xor.b{bits}", M.max: f"max.s{bits}", M.min: f"min.s{bits}",
                M.umax: f"max.u{bits}", M.umin: f"min.u{bits}", M.xchg: f"exch.b{bits}"}[mode]
    elif mode == M.xchg and lt in ("float", "double"):
        return f"exch.b{bits}"
    raise LoweringError(f"atomic mode '{mode.spelling}' is not supported on element type {lt}")


def to_bits(em: KernelEmitter, v: str, lt: str) -> str:
    rt = _REG[lt][1]
    return v if lt == rt else em.b.value(f"bitcast {lt} {v} to {rt}")


def from_bits(em: KernelEmitter, v: str, lt: str) -> str:
    rt = _REG[lt][1]
    return v if lt == rt else em.b.value(f"bitcast {rt} {v} to {lt}")


def _pred_i32(em: KernelEmitter, pred: str) -> str:
    return em.b.value(f"zext i1 {pred} to i32")


def atom(em: KernelEmitter, instr: str, lt: str, addr: str, operands: list[str], pred: str | None,
         fill: str) -> str:
    """`instr $0, [addr], operands...` on one element, predicated; returns the old value (or `fill`
    where `pred` is false)."""
    cls, rt, bits = _REG[lt]
    ops = [to_bits(em, v, lt) for v in operands]
    slots = ", ".join(f"${i + 2}" for i in range(len(ops)))
    args = [(GLOBAL_PTR, addr)] + [(rt, v) for v in ops]
    if pred is None:
        v = em.b.asm(rt, f"{instr} $0, [$1], {slots};", f"={cls},l" + f",{cls}" * len(ops), args)
    else:
        k = len(ops) + 2
        text = (f"{{ .reg .pred p; setp.ne.b32 p, ${k}, 0; mov.b{bits} $0, ${k + 1}; "
                f"@p {instr} $0, [$1], {slots}; }}")
        args += [("i32", _pred_i32(em, pred)), (rt, to_bits(em, fill, lt))]
        v = em.b.asm(rt, text, f"={cls},l" + f",{cls}" * len(ops) + f",r,{cls}", args)
    return from_bits(em, v, lt)


def _half_add_cas_loop(em: KernelEmitter, op: Operation, lt: str, addr: str, arg: str, pred: str | None,
                       fill: str) -> str:
    """old = *addr; *addr = round(old + arg), atomically, by compare-and-swap of the 16-bit word."""
    order = ordering(op)
    fill_bits = to_bits(em, fill, lt) if pred is not None else None
    pre = em.b.block_label
    head, done = em.b.reserve_block("cas.head"), em.b.reserve_block("cas.done")
    start = em.b.reserve_block("cas.start") if pred is not None else None
    if pred is not None:
        em.b.cond_br(pred, start, done)
        em.b.start_block(start)
    first = em.b.asm("i16", "ld.relaxed.gpu.global.b16 $0, [$1];", "=h,l", [(GLOBAL_PTR, addr)])
    entry = em.b.block_label
    em.b.br(head)
    em.b.start_block(head)
    assumed = em.b.phi("i16", "assumed")
    assumed.add(first, entry)
    old = em.b.value(f"bitcast i16 {assumed.name} to {lt}")
    wide = [em.b.value(f"fpext {lt} {x} to float") for x in (old, arg)]
    total = em.b.value(f"fadd float {wide[0]}, {wide[1]}")
    new = to_bits(em, em.b.value(f"fptrunc float {total} to {lt}"), lt)
    seen = em.b.asm("i16", f"atom{order}.global.cas.b16 $0, [$1], $2, $3;", "=h,l,h,h",
                    [(GLOBAL_PTR, addr), ("i16", assumed.name), ("i16", new)])
    assumed.add(seen, head)
    again = em.b.value(f"icmp ne i16 {seen}, {assumed.name}")
    em.b.cond_br(again, head, done)
    em.b.start_block(done)
    if pred is None:
        return from_bits(em, seen, lt)
    result = em.b.phi("i16", "old")
    result.add(fill_bits, pre)
    result.add(seen, head)
    return from_bits(em, result.name, lt)


# -- layouts and replicas ---------------------------------------------------------------------

def _and(em: KernelEmitter, a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return em.b.value(f"and i1 {a}, {b}")


def per_element(em: KernelEmitter, op: Operation, ptrs: Tile, others: list[Tile | None], res_ty: T.TileType | None,
                one: Callable[[int, str, list[str | None], str | None], str | None]) -> Tile | None:
    """Run `one(register, address, other operand registers, predicate)` once per element of `ptrs`
    (in its primary copy) and return the results as a tile every copy holds (None if `res_ty` is
    None: nothing to return)."""
    if ptrs.is_scalar:
        layout = None
        primary = em.b.value(f"icmp eq i32 {em.tid}, 0")
    else:
        layout = ptrs.layout
        primary = em.is_primary(layout)
    n = 1 if layout is None else layout.num_registers
    dup_mask = 0 if layout is None else layout.duplicate_register_mask()
    results: list[str | None] = [None] * n
    for r in range(n):
        if r & dup_mask:
            continue
        results[r] = one(r, ptrs.regs[r], [None if t is None else t.regs[r] for t in others], primary)
    if res_ty is None:
        return None
    for r in range(n):
        if results[r] is None:
            results[r] = results[r & ~dup_mask]
    if primary is None:
        return Tile(res_ty, layout, results)
    return _broadcast_from_primary(em, em.scratch_base(op), res_ty, layout, primary, results)


def _broadcast_from_primary(em: KernelEmitter, base: int, ty: T.TileType, layout, primary: str,
                            regs: list[str]) -> Tile:
    """Every copy gets the value the primary copy of each element computed (through the op's scratch at
    `base`; the other copies write to a trash slot past the end)."""
    count = ty.num_elements()
    lt = llvm_type(ty.elem)
    for r, v in enumerate(regs):
        idx = "0" if layout is None else em.linear_index(em.coords(layout, r), ty.shape)
        slot = em.b.value(f"select i1 {primary}, i32 {idx}, i32 {count}")
        em.b.emit(f"store {lt} {v}, {SHARED_PTR} {em.shared_slot(slot, ty.elem, base)}")
    em.barrier()
    shape = ty.shape
    return em.load_from_shared(ty, layout, lambda c: "0" if layout is None else em.linear_index(c, shape), base)


# -- the ops -------------------------------------------------------------------------------------

def _fill_zero(lt: str) -> str:
    return {"float": "0.0", "double": "0.0", "half": "0xH0000", "bfloat": "0xR0000"}.get(lt, "0")


def rmw_element(em: KernelEmitter, op: Operation, mode: M, lt: str, addr: str, arg: str,
                pred: str | None) -> str:
    instr = _ptx_op(mode, lt, target_has(em, "has_bf16_atomic_add"))
    if instr is None:
        return _half_add_cas_loop(em, op, lt, addr, arg, pred, _fill_zero(lt))
    return atom(em, f"atom{ordering(op)}.global.{instr}", lt, addr, [arg], pred, _fill_zero(lt))


@lowers("atomic_rmw_tko")
def _atomic_rmw(em: KernelEmitter, op: Operation) -> None:
    mode = M(op.attrs["mode"])
    ptrs: Tile = em.get(op.operands["pointers"])
    arg = em.get(op.operands["arg"])
    mask = em.tile(op.operands.get("mask"))
    lt = llvm_type(op.results[0].type.elem)

    def one(r, addr, o, primary):
        return rmw_element(em, op, mode, lt, addr, o[0], _and(em, primary, o[1]))
    em.set(op.results[0], per_element(em, op, ptrs, [arg, mask], op.results[0].type, one))
    em.set(op.results[1], TOKEN)


@lowers("atomic_cas_tko")
def _atomic_cas(em: KernelEmitter, op: Operation) -> None:
    ptrs: Tile = em.get(op.operands["pointers"])
    cmp, val = em.get(op.operands["cmp"]), em.get(op.operands["val"])
    mask = em.tile(op.operands.get("mask"))
    lt = llvm_type(op.results[0].type.elem)
    if lt not in ("i32", "i64", "float", "double"):
        raise LoweringError(f"atomic_cas_tko is not supported on element type {op.results[0].type.elem}")
    bits = _REG[lt][2]

    def one(r, addr, o, primary):
        # a masked-off element returns cmp (and so does a replica, until the broadcast replaces it)
        return atom(em, f"atom{ordering(op)}.global.cas.b{bits}", lt, addr, [o[0], o[1]],
                    _and(em, primary, o[2]), o[0])
    em.set(op.results[0], per_element(em, op, ptrs, [cmp, val, mask], op.results[0].type, one))
    em.set(op.results[1], TOKEN)


@lowers("atomic_red_view_tko")
def _atomic_red_view(em: KernelEmitter, op: Operation) -> None:
    from .lower_memory import (
        _view_access,  # the same addressing as load/store through a view
    )
    pv = em.get(op.operands["view"])
    if not isinstance(pv, PartitionView):
        raise LoweringError("atomic reductions through this view kind are not supported yet")
    mode = M(op.attrs["mode"])
    if mode == M.xchg:
        raise LoweringError("atomic_red_view_tko does not support mode 'xchg'")
    index = [em.get(v) for v in op.operands["index"]]
    value: Tile = em.get(op.operands["value"])
    layout = value.layout
    primary = em.b.value(f"icmp eq i32 {em.tid}, 0") if layout is None else em.is_primary(layout)
    lt = value.llvm
    n = 1 if layout is None else layout.num_registers
    dup_mask = 0 if layout is None else layout.duplicate_register_mask()
    for r in range(n):
        if r & dup_mask:
            continue
        coords = em.coords(layout, r) if layout else ["0"] * len(pv.type.tile_shape)
        addr, inb = _view_access(em, pv, index, coords)
        rmw_element(em, op, mode, lt, addr, value.regs[r], _and(em, primary, inb))
    em.set(op.results[0], TOKEN)
