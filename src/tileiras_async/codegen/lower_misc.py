"""Debugging and module-level ops: print_tko, assert, globals, alloca, pack/unpack, grid dependency
control and the alias fence.

print_tko prints once per tile block (CTA), like the real tileiras and the interpreter
(interp/printf.py): a rank-0 tile is one value, a tile of rank >= 1 is nested brackets with ", "
between elements, every element formatted with the conversion specification.  The operands are
staged in shared memory; thread 0 takes a module-wide spin lock (so the lines of different CTAs do
not interleave) and calls vprintf once per at most 32 values.  Each specification is rewritten so the
value's C type matches it exactly (%d/%i: signed 64-bit, %u/%o/%x/%X: unsigned 64-bit of the element's
width, float conversions: double), which makes the output the interpreter's.

assert prints, for every false element (once, from its primary copy), the line the real tileiras
prints: "(unknown):0: tile block: [x, y, z], position: [i, j]: <message>", then the failing threads
wait 0.5 ms (so the other prints reach the host) and trap.
"""
from __future__ import annotations

import re

from ..ir import types as T
from ..ir.core import Module, Operation
from .emitter import KernelEmitter, lowers, target_has
from .lower_basic import dense_elements, element_literal
from .lower_elementwise import FP8, fp8_to_f32
from .values import GLOBAL_PTR, SHARED_PTR, TOKEN, Tile, elem_bytes, llvm_type

# the printf conversion specifications the interpreter recognises (interp/printf.py)
_SPEC = re.compile(rb"%([-+ #0]*)(\d+)?(?:\.(\d*))?(hh|h|ll|l|j|z|t|L|q)?([diouxXeEfFgGaAcsp%])")
_MAX_ARGS = 32  # vprintf reads at most 32 arguments per call


def _bytes(v) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


def _escape_c(text: bytes) -> str:
    """Bytes as an LLVM c"..." string body."""
    return "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in text)


def string_global(em: KernelEmitter, text: bytes, hint: str = "str") -> str:
    """A NUL-terminated constant string in global memory; returns a generic pointer to it."""
    name = em.unique_global(hint)
    data = text + b"\0"
    em.module_ir.add_global(f"{name} = internal addrspace(1) constant [{len(data)} x i8] "
                            f'c"{_escape_c(data)}", align 1')
    return em.b.value(f"addrspacecast ptr addrspace(1) {name} to ptr", "fmt")


def vprintf(em: KernelEmitter, fmt: bytes, args: list[tuple[str, str]]) -> None:
    """vprintf(fmt, buffer) with the arguments packed as C varargs (each aligned to its size)."""
    ptr = string_global(em, fmt, "printf.fmt")
    if not args:
        buf = "null"
    else:
        offsets, size = [], 0
        for ty, _ in args:
            n = 8 if ty in ("i64", "double", "ptr") else 4
            size = (size + n - 1) // n * n
            offsets.append(size)
            size += n
        buf = em.b.fresh("pbuf")
        em.b.emit_entry(f"{buf} = alloca [{size} x i8], align 8")
        for (ty, v), off in zip(args, offsets):
            slot = em.b.value(f"getelementptr i8, ptr {buf}, i32 {off}")
            em.b.emit(f"store {ty} {v}, ptr {slot}, align {8 if ty in ('i64', 'double', 'ptr') else 4}")
    em.b.call("i32", "vprintf", [("ptr", ptr), ("ptr", buf)])


# -- print_tko --------------------------------------------------------------------------------------

def _print_value(em: KernelEmitter, v: str, elem: T.Type, flags: bytes, width: bytes | None,
                 prec: bytes | None, conv: bytes) -> tuple[bytes, tuple[str, str]]:
    """(C conversion specification, vprintf argument) printing element `v` as the interpreter does."""
    lt = llvm_type(elem)
    head = b"%" + flags + (width or b"") + (b"." + prec if prec is not None else b"")
    is_int = isinstance(elem, T.IntType)
    is_ptr = isinstance(elem, T.PointerType)
    c = conv.decode()
    if is_ptr:
        v, lt, is_int = em.b.value(f"ptrtoint {lt} {v} to i64"), "i64", True
    elif isinstance(elem, T.FloatType) and elem.name in FP8:
        v, lt = fp8_to_f32(em, v, elem.name), "float"
    if c in "di" or (c == "s" and is_int):
        if is_int:
            val = v if lt == "i64" else em.b.value(f"sext {lt} {v} to i64")
        else:
            val = _float_to_i64(em, v, lt)
        return head + b"lld" if c != "s" else b"%" + flags + (width or b"") + b"lld", ("i64", val)
    if c in "uoxX":
        if is_int:
            val = v if lt == "i64" else em.b.value(f"zext {lt} {v} to i64")
        else:
            val = _float_to_i64(em, v, lt)
        return head + b"ll" + conv, ("i64", val)
    if c == "c":
        if is_int:
            val = v if lt == "i32" else em.b.value(f"{'trunc' if lt == 'i64' else 'sext'} {lt} {v} to i32")
        else:
            val = em.b.value(f"trunc i64 {_float_to_i64(em, v, lt)} to i32")
        return head + b"c", ("i32", em.b.value(f"and i32 {val}, 255"))
    if c == "p":
        val = v if is_int and lt == "i64" else (em.b.value(f"zext {lt} {v} to i64") if is_int
                                                 else em.b.value(f"bitcast {lt} {v} to i{elem_bytes(elem) * 8}"))
        return head + b"p", ("i64", val)
    # floating conversions (and %s of a float: its shortest decimal form is close to %g)
    if is_int:
        val = em.b.value(f"sitofp {lt} {v} to double")
    elif lt == "double":
        val = v
    else:
        val = em.b.value(f"fpext {lt} {v} to double")
    return (head + conv if c != "s" else b"%" + flags + (width or b"") + b"g"), ("double", val)


def _float_to_i64(em: KernelEmitter, v: str, lt: str) -> str:
    """trunc(x) as an integer, 0 for NaN and infinities (what the interpreter prints)."""
    x = v if lt == "double" else em.b.value(f"fpext {lt} {v} to double")
    i = em.b.call("i64", "llvm.fptosi.sat.i64.f64", [("double", x)])
    mag = em.b.call("double", "llvm.fabs.f64", [("double", x)])
    finite = em.b.value(f"fcmp olt double {mag}, 0x7FF0000000000000")
    return em.b.value(f"select i1 {finite}, i64 {i}, i64 0")


def _nested(shape: tuple[int, ...], leaf) -> list:
    """The print structure of a tile: literal bytes and leaf(linear index) items, row-major."""
    out: list = []

    def walk(dim: int, base: int) -> None:
        if dim == len(shape):
            out.append(leaf(base))
            return
        out.append(b"[")
        stride = 1
        for s in shape[dim + 1:]:
            stride *= s
        for i in range(shape[dim]):
            if i:
                out.append(b", ")
            walk(dim + 1, base + i * stride)
        out.append(b"]")
    walk(0, 0)
    return out


def print_lock(em: KernelEmitter) -> str:
    """The kernel module's print mutex (an i32 in global memory, 0 = free)."""
    if em.print_mutex is None:
        em.print_mutex = em.unique_global("printf.mutex")
        em.module_ir.add_global(f"{em.print_mutex} = internal addrspace(1) global i32 0, align 4")
    return em.print_mutex


@lowers("print_tko")
def _print(em: KernelEmitter, op: Operation) -> None:
    fmt = _bytes(op.attrs.get("str", b""))
    args: list[Tile] = [em.get(v) for v in op.operands.get("args") or []]
    # stage the tile operands in shared memory (scalars are in every thread already)
    bases: dict[int, int] = {}
    staged = [(i, t) for i, t in enumerate(args) if not t.is_scalar]
    if staged:
        offset = em.scratch_base(op)
        for i, t in staged:
            offset = (offset + 15) // 16 * 16
            bases[i] = offset
            em.store_to_shared(t, byte_base=offset)
            offset += t.type.num_elements() * elem_bytes(t.elem)
        em.barrier()

    # the whole line as literal bytes and (arg, linear index, spec parts) items
    items: list = []
    pos, k = 0, 0
    for m in _SPEC.finditer(fmt):
        items.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, _length, conv = m.groups()
        if conv == b"%":
            items.append(b"%")
        elif k >= len(args):
            items.append(m.group(0))  # no operand left: printed as written
        else:
            t, parts = args[k], (flags, width, prec, conv)
            items.extend(_nested(t.type.shape, lambda idx, a=k, p=parts: (a, idx, p)))
            k += 1
    items.append(fmt[pos:])

    lock, body, done = (em.b.reserve_block(h) for h in ("print.lock", "print.body", "print.done"))
    is_first = em.b.value(f"icmp eq i32 {em.tid}, 0")
    em.b.cond_br(is_first, lock, done)
    em.b.start_block(lock)
    mutex = print_lock(em)
    old = em.b.asm("i32", "atom.acquire.gpu.global.exch.b32 $0, [$1], 1;", "=r,l,~{memory}", [(GLOBAL_PTR, mutex)])
    busy = em.b.value(f"icmp ne i32 {old}, 0")
    em.b.cond_br(busy, lock, body)
    em.b.start_block(body)

    text, call_args = b"", []
    for item in items:
        if isinstance(item, bytes):
            text += item.replace(b"%", b"%%")
            continue
        a, idx, (flags, width, prec, conv) = item
        t = args[a]
        if t.is_scalar:
            v = t.regs[0]
        else:
            p = em.shared_slot(str(idx), t.elem, bases[a])
            v = em.b.value(f"load {t.llvm}, {SHARED_PTR} {p}", "pv")
        spec, arg = _print_value(em, v, t.elem, flags, width, prec, conv)
        if len(call_args) == _MAX_ARGS:
            vprintf(em, text, call_args)
            text, call_args = b"", []
        text += spec
        call_args.append(arg)
    if text or call_args:
        vprintf(em, text, call_args)

    em.b.asm("void", "st.release.gpu.global.b32 [$0], 0;", "l,~{memory}", [(GLOBAL_PTR, mutex)])
    em.b.br(done)
    em.b.start_block(done)
    for r in op.results:
        em.set(r, TOKEN)


# -- assert ----------------------------------------------------------------------------------------

def _sreg(em: KernelEmitter, name: str) -> str:
    return em.b.call("i32", f"llvm.nvvm.read.ptx.sreg.{name}", [])


@lowers("assert")
def _assert(em: KernelEmitter, op: Operation) -> None:
    cond: Tile = em.get(op.operands["condition"])
    message = _bytes(op.attrs.get("message", b""))
    rank = len(cond.type.shape)
    position = b"[" + b", ".join([b"%d"] * rank) + b"]"
    line = (b"(unknown):0: tile block: [%d, %d, %d], position: " + position + b": "
            + message.replace(b"%", b"%%") + b"\n")
    if cond.is_scalar:
        layout, primary = None, em.b.value(f"icmp eq i32 {em.tid}, 0")
    else:
        layout, primary = cond.layout, em.is_primary(cond.layout)
    dup = 0 if layout is None else layout.duplicate_register_mask()
    any_failed = "false"
    for r, ok in enumerate(cond.regs):
        if r & dup:
            continue
        failed = em.b.value(f"xor i1 {ok}, true")
        if primary is not None:
            failed = em.b.value(f"and i1 {failed}, {primary}")
        any_failed = failed if any_failed == "false" else em.b.value(f"or i1 {any_failed}, {failed}")
        report, after = em.b.reserve_block("assert.report"), em.b.reserve_block("assert.next")
        em.b.cond_br(failed, report, after)
        em.b.start_block(report)
        args = [("i32", _sreg(em, f"ctaid.{a}")) for a in "xyz"]
        if layout is not None:
            args += [("i32", c) for c in em.coords(layout, r)]
        vprintf(em, line, args)
        em.b.br(after)
        em.b.start_block(after)
    if any_failed == "false":
        return
    trap, cont = em.b.reserve_block("assert.trap"), em.b.reserve_block("assert.cont")
    em.b.cond_br(any_failed, trap, cont)
    em.b.start_block(trap)
    # give the other threads' reports time to reach the host before the context dies
    em.b.asm("void", "{ .reg .pred p; .reg .u64 t0, t1; mov.u64 t0, %globaltimer; add.s64 t0, t0, 500000; "
                     "$$wait${:uid}: mov.u64 t1, %globaltimer; setp.lt.s64 p, t1, t0; @p bra $$wait${:uid}; } trap;",
             "~{memory}", [])
    em.b.emit("unreachable")
    em.b.start_block(cont)


# -- globals ---------------------------------------------------------------------------------------

def _symbol(name) -> str:
    text = _bytes(name).decode(errors="replace")
    if re.fullmatch(r"[A-Za-z$._][A-Za-z0-9$._]*", text):
        return f"@{text}"
    return '@"' + _escape_c(_bytes(name)) + '"'


def globals_llvm_ir(module: Module) -> str | None:
    """The module's `global`s as one LLVM module (None if there are none), to be linked with the
    kernels (each kernel only declares the globals it uses).  Public globals keep external linkage
    (`.visible .global`, reachable from the host); private ones are linkonce_odr (dropped when no
    kernel uses them).  The initial values are the dense constants, in linear order."""
    if not module.globals:
        return None
    from .llvmir import ModuleIR
    lines = [f'target triple = "{ModuleIR.TRIPLE}"', f'target datalayout = "{ModuleIR.DATALAYOUT}"', ""]
    for g in module.globals:
        ty: T.TileType = g.type
        lt = llvm_type(ty.elem)
        storage = "i8" if lt == "i1" else lt
        count = ty.num_elements()
        parts = dense_elements(ty.elem, g.value.raw, count)
        if len(parts) == 1:
            parts = parts * count
        values = ", ".join(f"{storage} {_storage_literal(ty.elem, p)}" for p in parts)
        linkage = "" if g.visibility == 0 else "linkonce_odr "
        align = f", align {g.alignment}" if g.alignment else f", align {max(1, elem_bytes(ty.elem))}"
        lines.append(f"{_symbol(g.name)} = {linkage}addrspace(1) global [{count} x {storage}] "
                     f"[{values}]{align}")
    return "\n".join(lines) + "\n"


def _storage_literal(elem: T.Type, raw: bytes) -> str:
    if isinstance(elem, T.IntType) and elem.width == 1:
        return "1" if raw[0] else "0"
    return element_literal(elem, raw)


@lowers("get_global")
def _get_global(em: KernelEmitter, op: Operation) -> None:
    sym = _symbol(op.attrs["name"])
    if sym not in em.declared_globals:
        em.declared_globals.add(sym)
        em.module_ir.add_global(f"{sym} = external addrspace(1) global i8")
    em.set(op.result, Tile(op.result.type, None, [sym]))


@lowers("global")
def _global(em: KernelEmitter, op: Operation) -> None:
    """Module-level; its storage comes from `globals_llvm_ir`."""


# -- alloca ----------------------------------------------------------------------------------------

@lowers("alloca")
def _alloca(em: KernelEmitter, op: Operation) -> None:
    """One allocation per tile block from the device heap (what the real tileiras calls), made by
    thread 0 and shared through shared memory; a failed allocation traps."""
    ty: T.TileType = op.result.type
    pointee = ty.elem.pointee
    size = int(op.attrs["num_elem"]) * max(1, elem_bytes(pointee))
    align = max(1, int(op.attrs.get("alignment", 1) or 1))
    base = em.scratch_base(op)
    alloc, fail, share, done = (em.b.reserve_block(h) for h in
                                ("alloca.call", "alloca.fail", "alloca.share", "alloca.done"))
    is_first = em.b.value(f"icmp eq i32 {em.tid}, 0")
    em.b.cond_br(is_first, alloc, done)
    em.b.start_block(alloc)
    p = em.b.call("ptr", "__cuda_syscall_aligned_malloc", [("i64", str(size)), ("i64", str(align))])
    null = em.b.value(f"icmp eq ptr {p}, null")
    em.b.cond_br(null, fail, share)
    em.b.start_block(fail)
    em.b.call("void", "llvm.trap", [])
    em.b.emit("unreachable")
    em.b.start_block(share)
    em.b.emit(f"store ptr {p}, {SHARED_PTR} {em.shared_slot('0', T.I64, base)}")
    em.b.br(done)
    em.b.start_block(done)
    em.barrier()
    g = em.b.value(f"load ptr, {SHARED_PTR} {em.shared_slot('0', T.I64, base)}")
    em.set(op.result, Tile(ty, None, [em.b.value(f"addrspacecast ptr {g} to {GLOBAL_PTR}")]))
    block = _enclosing_block(em.fn.body, op)
    if block is not None:
        em.block_exit_hooks.setdefault(id(block), []).append(lambda: _free(em, g))


def _free(em: KernelEmitter, p: str) -> None:
    """End of an alloca's block: once every thread is done with it, thread 0 frees it.

    Called by the emitter before it lowers the terminator of the block (`block_exit_hooks`)."""
    em.barrier()
    call, done = em.b.reserve_block("free.call"), em.b.reserve_block("free.done")
    em.b.cond_br(em.b.value(f"icmp eq i32 {em.tid}, 0"), call, done)
    em.b.start_block(call)
    em.b.call("void", "free", [("ptr", p)])
    em.b.br(done)
    em.b.start_block(done)


def _enclosing_block(block, op: Operation):
    for o in block.ops:
        if o is op:
            return block
        for region in o.regions:
            for b in region.blocks:
                found = _enclosing_block(b, op)
                if found is not None:
                    return found
    return None


# -- grid dependency control, fences -------------------------------------------------------------------

def _gdc(instr: str):
    def lower(em: KernelEmitter, op: Operation) -> None:
        if target_has(em, "has_griddepcontrol"):  # below sm_90 the op is a no-op
            em.b.asm("void", f"{instr};", "~{memory}", [])
        for r in op.results:
            em.set(r, TOKEN)
    return lower


lowers("gdc_wait_tko")(_gdc("griddepcontrol.wait"))
lowers("gdc_launch_dependents_tko")(_gdc("griddepcontrol.launch_dependents"))


@lowers("memory_fence_alias_tko")
def _fence_alias(em: KernelEmitter, op: Operation) -> None:
    """Order accesses to the same memory through different virtual addresses (fence.proxy.alias,
    sm_70+), in every thread, then across the CTA (a tile op's elements live in many threads)."""
    em.b.asm("void", "fence.proxy.alias;", "~{memory}", [])
    em.barrier()
    for r in op.results:
        em.set(r, TOKEN)

