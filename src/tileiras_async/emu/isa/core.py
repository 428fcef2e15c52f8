"""The shared machinery of the instruction builders: the opcode registry, modifier parsing
(`Mods`), operand access (pre-resolved register rows, immediates, getters for dynamic values,
destination rows, masked writes), address operands and state spaces, and `build`, which turns one
linked instruction into its closure (guard predicate folded into the lane mask).
"""
from __future__ import annotations

import numpy as np

from .. import fp
from ..errors import TrapError, UnsupportedInstruction
from ..parser import TYPE_SIZES, Addr, FImm, Imm, Pair, Sink
from ..program import RegRef, SpecialRef, SymRef

u8, u16, u32, u64 = np.uint8, np.uint16, np.uint32, np.uint64
i8, i16, i32, i64 = np.int8, np.int16, np.int32, np.int64
f16, f32, f64 = np.float16, np.float32, np.float64

NPDT = {
    "b8": u8, "u8": u8, "s8": i8, "b16": u16, "u16": u16, "s16": i16, "f16": f16, "bf16": u16,
    "b32": u32, "u32": u32, "s32": i32, "f32": f32, "f16x2": u32, "bf16x2": u32, "tf32": u32,
    "b64": u64, "u64": u64, "s64": i64, "f64": f64, "e4m3x2": u16, "e5m2x2": u16,
    "u16x2": u32, "s16x2": u32, "f32x2": u64, "pred": np.bool_, "e2m3x2": u16, "e3m2x2": u16, "e2m1x2": u8,
}
UINT = {1: u8, 2: u16, 4: u32, 8: u64}
SINT = {1: i8, 2: i16, 4: i32, 8: i64}
FLOAT_TYPES = {"f16", "bf16", "f32", "f64", "f16x2", "bf16x2", "f32x2", "tf32"}
REGW = {"16": 2, "32": 4, "64": 8}

OPS: dict = {}
BATCH_START: list = []      # fn(machine): reset a family's per-batch state (async units, tensor memory)
BATCH_END: list = []        # fn(machine): after a batch of CTAs ran to completion (leak checks)


def op(*names):
    def reg(fn):
        for n in names:
            OPS[n] = fn
        return fn
    return reg


def on_batch_start(fn):
    BATCH_START.append(fn)
    return fn


def on_batch_end(fn):
    BATCH_END.append(fn)
    return fn


# ============================================================================ modifiers


class Mods:
    """The modifiers of an instruction; every one must be consumed by its builder."""

    def __init__(self, li):
        self.li = li
        parts = li.opcode.split(".")
        self.base = parts[0]
        self.parts = parts[1:]
        self.used = [False] * len(self.parts)

    def err(self, msg: str) -> UnsupportedInstruction:
        return UnsupportedInstruction(msg, line=self.li.line, text=self.li.text)

    def take(self, *names):
        for i, p in enumerate(self.parts):
            if not self.used[i] and p in names:
                self.used[i] = True
                return p
        return None

    def has(self, name: str) -> bool:
        return self.take(name) is not None

    def take_prefix(self, prefix: str):
        for i, p in enumerate(self.parts):
            if not self.used[i] and p.startswith(prefix):
                self.used[i] = True
                return p
        return None

    def types(self) -> list:
        out = []
        for i, p in enumerate(self.parts):
            if not self.used[i] and p in TYPE_SIZES:
                self.used[i] = True
                out.append(p)
        return out

    def type1(self, allowed=None) -> str:
        ts = self.types()
        if len(ts) != 1:
            raise self.err(f"{self.li.opcode}: expected one type, got {ts or 'none'}")
        if allowed is not None and ts[0] not in allowed:
            raise self.err(f"type .{ts[0]} of {self.base} is not supported")
        return ts[0]

    def ignore(self, *names) -> None:
        for i, p in enumerate(self.parts):
            if not self.used[i] and (p in names or p.split("::")[0] in names):
                self.used[i] = True

    def done(self) -> None:
        for i, p in enumerate(self.parts):
            if not self.used[i]:
                raise self.err(f"modifier .{p} of {self.base} is not supported")

    def done_control(self, allowed=()) -> None:
        self.ignore(*allowed)
        self.done()


# ============================================================================ operands


def _err(li, msg) -> UnsupportedInstruction:
    return UnsupportedInstruction(msg, line=li.line, text=li.text)


def imm_value(o, t: str, li):
    """A numpy scalar of the storage type of `t` for an immediate operand."""
    dt = NPDT[t]
    size = TYPE_SIZES[t]
    if t == "pred":
        if isinstance(o, Imm):
            return np.bool_(o.value != 0)
        raise _err(li, f"bad predicate immediate {o}")
    if t in ("f32", "f64"):
        if isinstance(o, FImm):
            return dt(o.value)
        return dt(float(o.value))
    if t in ("f16", "bf16", "f16x2", "bf16x2", "tf32", "f32x2"):
        if isinstance(o, FImm) and t in ("f16", "bf16"):
            v = np.float64(o.value)
            if t == "f16":
                return np.float16(v)
            return np.uint16(fp.encode(fp.round_fmt(np.array([v]), "bf16"), "bf16")[0])
        if isinstance(o, Imm):
            return UINT[size](o.value & ((1 << (8 * size)) - 1))
        raise _err(li, f"immediate {o} for .{t}")
    # integer / bit types
    if isinstance(o, FImm):
        bits = o.bits if o.width == 8 * size or size > 4 else (
            int(np.float32(o.value).view(np.uint32)) if size == 4 else o.bits)
        v = bits & ((1 << (8 * size)) - 1)
    else:
        v = o.value & ((1 << (8 * size)) - 1)
    return UINT[size](v).view(dt) if dt != UINT[size] else UINT[size](v)


def src(mc, o, t: str, li):
    """Operand as an array (register row / special register) or scalar (immediate); None if dynamic."""
    size = TYPE_SIZES[t]
    if isinstance(o, RegRef):
        if o.cls == "p":
            if t != "pred":
                raise _err(li, f"predicate register {o} used as .{t}")
            return mc.row(o, np.bool_)
        if t == "pred":
            raise _err(li, f"register {o} used as a predicate")
        if REGW[o.cls] == size or (size == 1 and o.cls == "16"):
            if size == 1:
                return None
            return mc.row(o, NPDT[t])
        if REGW[o.cls] > size:
            return None
        raise _err(li, f"register {o} ({REGW[o.cls] * 8}-bit) is too narrow for .{t}")
    if isinstance(o, (Imm, FImm)):
        return imm_value(o, t, li)
    if isinstance(o, SpecialRef):
        v = mc.special(o)
        if v is None:
            return None
        if isinstance(v, np.ndarray):
            if v.dtype.itemsize != size:
                return None
            return v.view(NPDT[t]) if v.dtype != NPDT[t] else v
        if v.dtype.itemsize != size:
            return NPDT[t](v) if size > v.dtype.itemsize else None
        return v.view(NPDT[t]) if v.dtype != NPDT[t] else v
    if isinstance(o, tuple) and o and o[0] == "not":
        return None
    if isinstance(o, SymRef) and o.kind in ("shared", "dynshared", "global", "local", "kparam"):
        _sp, val = mc.sym_value(o)
        return UINT[size](val & ((1 << (8 * size)) - 1)).view(NPDT[t]) if t in NPDT else None
    raise _err(li, f"operand {o} cannot be read as .{t}")


def getter(mc, o, t: str, li):
    """A zero-argument callable returning the operand's current value as .{t}."""
    s = src(mc, o, t, li)
    if s is not None:
        return lambda: s
    size = TYPE_SIZES[t]
    if isinstance(o, RegRef):
        row = mc.row(o, UINT[REGW[o.cls]])
        dt = NPDT[t]
        nd = UINT[size]
        if dt == nd:
            return lambda: row.astype(nd)
        return lambda: row.astype(nd).view(dt)
    if isinstance(o, tuple) and o[0] == "not":
        row = mc.row(o[1], np.bool_)
        return lambda: ~row
    if isinstance(o, SpecialRef):
        if o.name in ("%clock", "%clock64", "%clock_hi", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"):
            dt = NPDT[t]

            def clk():
                v = mc.thread_instructions + mc.instructions * 7
                if o.name.startswith("%globaltimer"):
                    v *= 1000
                if o.name.endswith("_hi"):
                    v >>= 32
                return UINT[size](v & ((1 << (8 * size)) - 1)).view(dt)
            return clk
        v = mc.special(o)
        dt = NPDT[t]
        return lambda: np.asarray(v).astype(UINT[size]).view(dt)
    raise _err(li, f"operand {o} cannot be read as .{t}")


def dst(mc, o, t: str, li):
    """Destination row for writing a .{t} value (None for the sink `_`)."""
    if isinstance(o, Sink):
        return None
    if not isinstance(o, RegRef):
        raise _err(li, f"destination {o} is not a register")
    if t == "pred":
        if o.cls != "p":
            raise _err(li, f"destination {o} is not a predicate")
        return mc.row(o, np.bool_)
    if o.cls == "p":
        raise _err(li, f"predicate {o} used as a .{t} destination")
    size = TYPE_SIZES[t]
    w = REGW[o.cls]
    if w == size:
        return mc.row(o, NPDT[t])
    if w > size:
        if t[0] == "s":
            return mc.row(o, SINT[w])
        if t[0] in "bu":
            return mc.row(o, UINT[w])
        raise _err(li, f"{w * 8}-bit register {o} for a .{t} result")
    raise _err(li, f"register {o} is too narrow for .{t}")


def _dst_pair(mc, li, ta: str, tb: str):
    """The rows of a destination `a|b` (first operand) as .{ta} and .{tb}; (row, None) without `|b`."""
    d0 = li.ops[0]
    if isinstance(d0, Pair):
        return dst(mc, d0.a, ta, li), dst(mc, d0.b, tb, li)
    return dst(mc, d0, ta, li), None


def put(d, m, v):
    """Write v into destination row d for the lanes in mask m."""
    if d is None:
        return
    if m is True:
        np.copyto(d, v, casting="unsafe")
    else:
        if isinstance(v, np.ndarray) and v.dtype != d.dtype:
            v = v.astype(d.dtype)
        elif not isinstance(v, np.ndarray):
            v = np.asarray(v).astype(d.dtype)
        np.putmask(d, m, v)


def bl(v, L):
    """`v` as a length-L lane array (scalars are broadcast)."""
    if type(v) is np.ndarray and v.shape == (L,):
        return v
    v = np.asarray(v)
    if v.ndim == 0:
        return np.full(L, v, dtype=v.dtype)
    return np.ascontiguousarray(np.broadcast_to(v, (L,)))


def _needs_getters(*vals):
    return any(v is None for v in vals)


def simple(mc, li, t, fn, ops, dtype_out=None):
    """Generic closure: d = fn(*sources) with every source read as .{t}."""
    d = dst(mc, li.ops[0], dtype_out or t, li)
    srcs = [src(mc, o, t, li) for o in ops]
    if not _needs_getters(*srcs):
        def f(m):
            put(d, m, fn(*srcs))
        return f
    gs = [getter(mc, o, t, li) for o in ops]

    def g(m):
        put(d, m, fn(*[x() for x in gs]))
    return g


def ufunc2(mc, li, t, uf):
    """d = uf(a, b) with a numpy ufunc whose result has the destination dtype."""
    d = dst(mc, li.ops[0], t, li)
    a = src(mc, li.ops[1], t, li)
    b = src(mc, li.ops[2], t, li)
    if d is None:
        return lambda m: None
    if a is None or b is None or d.dtype != NPDT[t]:
        return simple(mc, li, t, uf, li.ops[1:3])

    def f(m):
        if m is True:
            uf(a, b, out=d)
        else:
            np.putmask(d, m, uf(a, b))
    return f


def _has_float_type(mods) -> bool:
    """Whether any type modifier is a float type (the float builder of a mixed int/float opcode)."""
    return any(p in TYPE_SIZES and p in FLOAT_TYPES for p in mods.parts)


def check_nops(li, n, *alts):
    if len(li.ops) != n and len(li.ops) not in alts:
        raise _err(li, f"{li.opcode} takes {n} operands, got {len(li.ops)}")


# ============================================================================ build entry


def build(mc, li):
    base = li.opcode.split(".")[0]
    b = OPS.get(base)
    if b is None:
        raise UnsupportedInstruction(f"instruction '{li.opcode}' is not supported", line=li.line, text=li.text,
                                     kernel=mc.prog.kernel)
    try:
        f = b(mc, li)
    except UnsupportedInstruction as e:
        e.kernel = e.kernel or mc.prog.kernel
        if e.line is None:
            e.line, e.text = li.line, li.text
        raise
    if li.pred is None:
        return f
    prow = mc.row(li.pred, np.bool_)
    if li.pred_neg:
        def g(m):
            f(~prow if m is True else m & ~prow)
    else:
        def g(m):
            f(prow.copy() if m is True else m & prow)
    return g


def commit_groups(mm, committed, records) -> None:
    """`commit_group` of an asynchronous unit (cp.async, bulk copies, wgmma): the uncommitted operations
    (group -1) of the threads in `mm` join each thread's next group.  `records`: (lanes, group) arrays per
    recorded operation; `committed`: groups committed so far per thread."""
    for lanes, seq in records:
        sel = mm[lanes] & (seq < 0)
        if sel.any():
            seq[sel] = committed[lanes[sel]]
    committed[mm] += 1


def retired(mm, committed, lanes, seq, keep: int):
    """Which of an operation's lanes `wait_group keep` by the threads in `mm` retires: those in a
    committed group older than the thread's `keep` most recent ones."""
    return mm[lanes] & (seq >= 0) & (seq < committed[lanes] - keep)


def full_mask(mc, m):
    return np.ones(mc.L, bool) if m is True else m


def raise_trap(mc, li, m):
    mm = full_mask(mc, m)
    e = TrapError(f"kernel executed '{li.opcode}'", line=li.line, text=li.text, kernel=mc.prog.kernel)
    e.lane = int(np.argmax(mm))
    mc._annotate(e)
    raise e



# ============================================================================ memory


_CACHE_MODS = {"weak", "volatile", "relaxed", "acquire", "release", "mmio", "sys", "gpu", "cta", "cluster",
               "ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc", "unified",
               "L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last",
               "L1::no_allocate", "L2::evict_normal", "L2::evict_first", "L2::evict_last",
               "L2::64B", "L2::128B", "L2::256B", "level::eviction_priority", "level::prefetch_size"}


def _space(mods, default="generic"):
    sp = None
    for i, p in enumerate(mods.parts):
        if not mods.used[i] and p.split("::")[0] in ("global", "shared", "local", "param", "const"):
            q = p.split("::")
            if len(q) == 2 and q[1] not in ("cta", "cluster", "entry", "func"):
                continue
            mods.used[i] = True
            sp = q[0]
            if p == "shared::cluster":
                sp = "shared"
            if p in ("param::func",):
                sp = "param"
            break
    return sp or default


def address_fn(mc, a, li):
    """(space_hint, fn(idx, full) -> uint64 addresses) for an address operand."""
    if not isinstance(a, Addr):
        raise _err(li, f"expected an address operand, got {a}")
    off = a.offset
    if a.base is None:
        c = u64(off & 0xFFFFFFFFFFFFFFFF)
        return None, lambda idx, full: np.full(len(idx), c, dtype=u64)
    if isinstance(a.base, SymRef):
        if a.base.kind in ("label", "func"):
            raise _err(li, f"'{a.base.name}' is not a variable")
        space, val = mc.sym_value(a.base)
        c = u64((val + off) & 0xFFFFFFFFFFFFFFFF)
        return space, lambda idx, full: np.full(len(idx), c, dtype=u64)
    if isinstance(a.base, RegRef):
        if a.base.cls == "64":
            row = mc.row(a.base, u64)
        elif a.base.cls == "32":
            row32 = mc.row(a.base, u32)
            if off:
                c = u64(off & 0xFFFFFFFFFFFFFFFF)
                return None, lambda idx, full: (row32 if full else row32[idx]).astype(u64) + c
            return None, lambda idx, full: (row32 if full else row32[idx]).astype(u64)
        else:
            raise _err(li, f"register {a.base} cannot hold an address")
        if off:
            c = u64(off & 0xFFFFFFFFFFFFFFFF)
            return None, lambda idx, full: (row if full else row[idx]) + c
        return None, lambda idx, full: row if full else row[idx]
    raise _err(li, f"bad address base {a.base}")


def _lanes(mc, m):
    if m is True:
        return mc.all_idx, True
    idx = np.flatnonzero(m)
    return idx, False
