"""Instruction semantics: one builder per PTX opcode family.

A builder gets the machine and a linked instruction, checks every modifier
(anything it does not know is an `UnsupportedInstruction` naming the modifier
and the PTX line -- never a guess) and returns a closure ``f(mask)`` that
executes the instruction for all active lanes at once.  ``mask`` is ``True``
when every lane of the batch is active, else a boolean lane mask; a guard
predicate is folded into the mask by `build`.

Register operands are pre-resolved to row views of the register files, so the
common instructions are one or two numpy calls.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from . import fp
from .errors import ConvergenceError, TrapError, UnsupportedInstruction
from .memory import LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW
from .parser import TYPE_SIZES, Addr, FImm, Imm, Pair, Sink, Vec
from .program import RegRef, SpecialRef, SymRef

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


def op(*names):
    def reg(fn):
        for n in names:
            OPS[n] = fn
        return fn
    return reg


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


def full_mask(mc, m):
    return np.ones(mc.L, bool) if m is True else m


def raise_trap(mc, li, m):
    mm = full_mask(mc, m)
    e = TrapError(f"kernel executed '{li.opcode}'", line=li.line, text=li.text, kernel=mc.prog.kernel)
    e.lane = int(np.argmax(mm))
    mc._annotate(e)
    raise e


# ============================================================================ data movement


@op("mov")
def _mov(mc, li):
    mods = Mods(li)
    t = mods.type1()
    mods.done()
    check_nops(li, 2)
    d, a = li.ops
    size = TYPE_SIZES[t]
    if isinstance(d, Vec):          # unpack: mov.b32 {lo, hi}, %r
        n = len(d.items)
        if n * (size // n) != size or size % n:
            raise _err(li, "bad vector unpack")
        part = size // n
        row = src(mc, a, t, li)
        if row is None or not isinstance(row, np.ndarray):
            g = getter(mc, a, t, li)
        else:
            g = None
        outs = []
        for k, it in enumerate(d.items):
            if isinstance(it, Sink):
                outs.append(None)
                continue
            outs.append(dst(mc, it, {2: "b16", 4: "b32", 8: "b64", 1: "b8"}[part], li))

        def f(m):
            v = g() if g is not None else row
            v = bl(v, mc.L).view(UINT[part]).reshape(mc.L, n)
            for k, dd in enumerate(outs):
                if dd is not None:
                    put(dd, m, v[:, k])
        return f
    if isinstance(a, Vec):          # pack: mov.b64 %rd, {lo, hi}
        n = len(a.items)
        part = size // n
        pt = {2: "b16", 4: "b32", 8: "b64", 1: "b8"}[part]
        gs = [getter(mc, it, pt, li) for it in a.items]
        dd = dst(mc, d, t, li)

        def f(m):
            v = np.empty((mc.L, n), dtype=UINT[part])
            for k, g in enumerate(gs):
                v[:, k] = g()
            put(dd, m, v.reshape(-1).view(dd.dtype))
        return f
    if isinstance(a, SymRef) and a.kind in ("label", "func"):
        raise _err(li, f"taking the address of {a.kind} '{a.name}' is not supported")
    dd = dst(mc, d, t, li)
    s = src(mc, a, t, li)
    if s is not None:
        if isinstance(s, np.ndarray) and dd is not None and s.dtype != dd.dtype:
            s = s.view(dd.dtype) if s.dtype.itemsize == dd.dtype.itemsize else s.astype(dd.dtype)

        def f(m):
            if m is True:
                np.copyto(dd, s, casting="unsafe")
            else:
                np.putmask(dd, m, s)
        return f
    g = getter(mc, a, t, li)
    return lambda m: put(dd, m, g())


def _pred_logic(mc, li, fn, n):
    check_nops(li, n + 1)
    d = dst(mc, li.ops[0], "pred", li)
    gs = [getter(mc, o, "pred", li) for o in li.ops[1:]]
    return lambda m: put(d, m, fn(*[g() for g in gs]))


@op("and", "or", "xor")
def _logic(mc, li):
    mods = Mods(li)
    t = mods.type1({"pred", "b16", "b32", "b64"})
    mods.done()
    uf = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[mods.base]
    if t == "pred":
        return _pred_logic(mc, li, uf, 2)
    check_nops(li, 3)
    return ufunc2(mc, li, t, uf)


@op("not")
def _not(mc, li):
    mods = Mods(li)
    t = mods.type1({"pred", "b16", "b32", "b64"})
    mods.done()
    if t == "pred":
        return _pred_logic(mc, li, np.logical_not, 1)
    check_nops(li, 2)
    return simple(mc, li, t, np.invert, li.ops[1:2])


@op("cnot")
def _cnot(mc, li):
    mods = Mods(li)
    t = mods.type1({"b16", "b32", "b64"})
    mods.done()
    one = NPDT[t](1)
    return simple(mc, li, t, lambda a: (a == 0).astype(NPDT[t]) * one, li.ops[1:2])


@op("lop3")
def _lop3(mc, li):
    mods = Mods(li)
    t = mods.type1({"b32"})
    mods.done()
    check_nops(li, 5)
    lut = li.ops[4]
    if not isinstance(lut, Imm):
        raise _err(li, "lop3 lookup table must be an immediate")
    lut = lut.value & 0xFF

    def fn(a, b, c, _x):
        a, b, c = np.broadcast_arrays(a, b, c)
        r = np.zeros(np.shape(a), dtype=u32)
        for i in range(8):
            if lut >> i & 1:
                term = (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
                r |= term
        return r
    return simple(mc, li, t, fn, li.ops[1:5])


@op("selp")
def _selp(mc, li):
    mods = Mods(li)
    t = mods.type1()
    mods.done()
    check_nops(li, 4)
    d = dst(mc, li.ops[0], t, li)
    a = src(mc, li.ops[1], t, li)
    b = src(mc, li.ops[2], t, li)
    c = src(mc, li.ops[3], "pred", li)
    if a is None or b is None or c is None:
        ga, gb, gc = (getter(mc, o, tt, li) for o, tt in zip(li.ops[1:], (t, t, "pred")))
        return lambda m: put(d, m, np.where(gc(), ga(), gb()))
    if d is not None and isinstance(a, np.generic) and isinstance(b, np.generic) and t[0] in "bus" \
            and int(a) in (0, 1) and int(b) == 1 - int(a):
        # selp 1, 0, p (a predicate as an integer): a cast of the predicate row
        if int(a) == 1:
            def f1(m):
                if m is True:
                    np.copyto(d, c, casting="unsafe")
                else:
                    np.putmask(d, m, c.astype(d.dtype))
            return f1

        def f0(m):
            put(d, m, ~c)
        return f0

    def f(m):
        put(d, m, np.where(c, a, b))
    return f


@op("slct")
def _slct(mc, li):
    mods = Mods(li)
    ts = mods.types()
    ftz = mods.has("ftz")
    mods.done()
    if len(ts) != 2:
        raise _err(li, "slct needs two types")
    t, ct = ts

    def fn(a, b, c):
        if ct == "f32":
            c = fp.flush_subnormal(c) if ftz else c
            return np.where(c >= 0, a, b)
        return np.where(c >= 0, a, b)
    d = dst(mc, li.ops[0], t, li)
    gs = [getter(mc, o, tt, li) for o, tt in zip(li.ops[1:], (t, t, ct))]
    return lambda m: put(d, m, fn(*[g() for g in gs]))


# ============================================================================ integer arithmetic


def _itype(mods, allowed=("u16", "u32", "u64", "s16", "s32", "s64", "b16", "b32", "b64")):
    return mods.type1(set(allowed))


@op("add", "sub")
def _addsub(mc, li):
    mods = Mods(li)
    if _has_float_type(mods):
        return _float_arith(mc, li, mods)
    cc = mods.has("cc")
    sat = mods.has("sat")
    t = _itype(mods)
    mods.done()
    check_nops(li, 3)
    if mods.base == "sub" and not cc and not sat:
        return ufunc2(mc, li, t, np.subtract)
    if not cc and not sat:
        return ufunc2(mc, li, t, np.add)
    if sat:
        if t != "s32":
            raise _err(li, f".sat is only defined for .s32 ({li.opcode})")
        sgn = 1 if mods.base == "add" else -1
        return simple(mc, li, t, lambda a, b: np.clip(a.astype(i64) + sgn * np.asarray(b, i64),
                                                      -2 ** 31, 2 ** 31 - 1), li.ops[1:3])
    return _carry_op(mc, li, t, "add" if mods.base == "add" else "sub", carry_in=False, carry_out=True)


@op("addc", "subc")
def _addc(mc, li):
    mods = Mods(li)
    cc = mods.has("cc")
    t = _itype(mods, ("u32", "s32", "u64", "s64"))
    mods.done()
    check_nops(li, 3)
    return _carry_op(mc, li, t, "add" if mods.base == "addc" else "sub", carry_in=True, carry_out=cc)


def _carry_op(mc, li, t, kind, carry_in, carry_out):
    size = TYPE_SIZES[t]
    ut = "u32" if size == 4 else "u64"
    d = dst(mc, li.ops[0], ut, li)
    ga = getter(mc, li.ops[1], ut, li)
    gb = getter(mc, li.ops[2], ut, li)
    cc = mc.cc
    mask = (1 << (8 * size)) - 1

    def f(m):
        a = bl(ga(), mc.L).astype(object if size == 8 else i64)
        b = bl(gb(), mc.L).astype(object if size == 8 else i64)
        cin = cc.astype(i64) if carry_in else 0
        if size == 8:
            cin = cin.astype(object) if carry_in else 0
        if kind == "add":
            s = a + b + cin
            co = s > mask
        else:
            s = a - b - cin
            co = s < 0
        res = np.array([int(x) & mask for x in s], dtype=u64) if size == 8 else (s & mask).astype(u32)
        put(d, m, res)
        if carry_out:
            put(cc, m, np.asarray(co, dtype=bool).astype(u32))
    return f


def _mul_parts(a, b, t):
    """(lo, hi) of the full product of a, b as .{t} (arrays of the storage dtype)."""
    size = TYPE_SIZES[t]
    signed = t[0] == "s"
    if size <= 4:
        wide = (np.asarray(a).astype(i64) * np.asarray(b).astype(i64)) if signed else \
            (np.asarray(a).astype(u64) * np.asarray(b).astype(u64))
        return wide, None
    # 64 x 64 -> 128 via 32-bit limbs
    au = np.asarray(a).astype(u64) if not signed else np.asarray(a).view(u64) if np.asarray(a).dtype == i64 \
        else np.asarray(a).astype(i64).view(u64)
    bu = np.asarray(b).astype(u64) if not signed else np.asarray(b).view(u64) if np.asarray(b).dtype == i64 \
        else np.asarray(b).astype(i64).view(u64)
    au, bu = np.broadcast_arrays(au, bu)
    M = u64(0xFFFFFFFF)
    a0, a1 = au & M, au >> u64(32)
    b0, b1 = bu & M, bu >> u64(32)
    p00 = a0 * b0
    p01 = a0 * b1
    p10 = a1 * b0
    p11 = a1 * b1
    mid = (p00 >> u64(32)) + (p01 & M) + (p10 & M)
    lo = (p00 & M) | ((mid & M) << u64(32))
    hi = p11 + (p01 >> u64(32)) + (p10 >> u64(32)) + (mid >> u64(32))
    if signed:
        # signed high part: subtract b if a < 0, a if b < 0
        hi = hi - np.where(au >> u64(63) == 1, bu, u64(0)) - np.where(bu >> u64(63) == 1, au, u64(0))
    return lo, hi


@op("mul")
def _mul(mc, li):
    mods = Mods(li)
    if _has_float_type(mods):
        return _float_arith(mc, li, mods)
    mode = mods.take("lo", "hi", "wide")
    t = _itype(mods, ("u16", "u32", "u64", "s16", "s32", "s64"))
    mods.done()
    check_nops(li, 3)
    size = TYPE_SIZES[t]
    if mode in (None, "lo"):
        return ufunc2(mc, li, t, np.multiply)
    if mode == "wide":
        if size == 8:
            raise _err(li, "mul.wide is not defined for 64-bit types")
        wt = {2: "s32", 4: "s64"}[size] if t[0] == "s" else {2: "u32", 4: "u64"}[size]
        wdt = NPDT[wt]
        d = dst(mc, li.ops[0], wt, li)
        ga, gb = getter(mc, li.ops[1], t, li), getter(mc, li.ops[2], t, li)
        a, b = src(mc, li.ops[1], t, li), src(mc, li.ops[2], t, li)
        if a is not None and b is not None:
            if isinstance(b, np.generic):
                bw = wdt(b)

                def f(m):
                    if m is True:
                        np.multiply(a, bw, out=d, dtype=wdt, casting="unsafe")
                    else:
                        np.putmask(d, m, np.multiply(a, bw, dtype=wdt, casting="unsafe"))
                return f

            def f2(m):
                put(d, m, np.multiply(a.astype(wdt), b.astype(wdt) if isinstance(b, np.ndarray) else wdt(b)))
            return f2
        return lambda m: put(d, m, np.multiply(np.asarray(ga()).astype(wdt), np.asarray(gb()).astype(wdt)))
    # hi
    sh = 8 * size

    def fn(a, b):
        lo, hi = _mul_parts(a, b, t)
        if hi is None:
            return lo >> (i64(sh) if t[0] == "s" else u64(sh))
        return hi
    return simple(mc, li, t, fn, li.ops[1:3])


@op("mad")
def _mad(mc, li):
    mods = Mods(li)
    if _has_float_type(mods):
        return _float_arith(mc, li, mods)
    mode = mods.take("lo", "hi", "wide")
    cc = mods.has("cc")
    sat = mods.has("sat")
    t = _itype(mods, ("u16", "u32", "u64", "s16", "s32", "s64"))
    mods.done()
    check_nops(li, 4)
    size = TYPE_SIZES[t]
    if cc:
        return _mad_cc(mc, li, t, mode or "lo", carry_in=False, carry_out=True)
    if mode in (None, "lo"):
        dt = NPDT[t]

        def fn(a, b, c):
            return np.multiply(a, b, dtype=dt, casting="unsafe") + c
        return simple(mc, li, t, fn, li.ops[1:4])
    if mode == "wide":
        wt = {2: "s32", 4: "s64"}[size] if t[0] == "s" else {2: "u32", 4: "u64"}[size]
        wdt = NPDT[wt]
        d = dst(mc, li.ops[0], wt, li)
        ga, gb = getter(mc, li.ops[1], t, li), getter(mc, li.ops[2], t, li)
        gc = getter(mc, li.ops[3], wt, li)
        return lambda m: put(d, m, np.asarray(ga()).astype(wdt) * np.asarray(gb()).astype(wdt) + gc())
    sh = 8 * size

    def fnh(a, b, c):
        lo, hi = _mul_parts(a, b, t)
        h = (lo >> (i64(sh) if t[0] == "s" else u64(sh))) if hi is None else hi
        if sat:
            if t != "s32":
                raise _err(li, "mad.hi.sat is only defined for .s32")
            return np.clip(h.astype(i64) + np.asarray(c, i64), -2 ** 31, 2 ** 31 - 1)
        return h.astype(NPDT[t]) + c if hi is not None else h + np.asarray(c).astype(h.dtype)
    return simple(mc, li, t, fnh, li.ops[1:4])


@op("madc")
def _madc(mc, li):
    mods = Mods(li)
    mode = mods.take("lo", "hi")
    cc = mods.has("cc")
    t = _itype(mods, ("u32", "s32", "u64", "s64"))
    mods.done()
    check_nops(li, 4)
    return _mad_cc(mc, li, t, mode or "lo", carry_in=True, carry_out=cc)


def _mad_cc(mc, li, t, mode, carry_in, carry_out):
    size = TYPE_SIZES[t]
    if size != 4:
        raise _err(li, "64-bit mad with carry is not supported")
    ut = "u32"
    d = dst(mc, li.ops[0], ut, li)
    ga, gb = getter(mc, li.ops[1], t, li), getter(mc, li.ops[2], t, li)
    gc = getter(mc, li.ops[3], ut, li)
    cc = mc.cc

    def f(m):
        a = bl(ga(), mc.L)
        b = bl(gb(), mc.L)
        if t[0] == "s":
            p = a.astype(i64) * b.astype(i64)
            p = p.view(u64)
        else:
            p = a.astype(u64) * b.astype(u64)
        part = (p & u64(0xFFFFFFFF)) if mode == "lo" else (p >> u64(32))
        s = part + np.asarray(gc()).astype(u64) + (cc.astype(u64) if carry_in else u64(0))
        put(d, m, (s & u64(0xFFFFFFFF)).astype(u32))
        if carry_out:
            put(cc, m, (s >> u64(32)).astype(u32) & u32(1))
    return f


@op("mul24", "mad24")
def _mul24(mc, li):
    mods = Mods(li)
    mode = mods.take("lo", "hi")
    sat = mods.has("sat")
    t = _itype(mods, ("u32", "s32"))
    mods.done()
    is_mad = mods.base == "mad24"
    check_nops(li, 4 if is_mad else 3)

    def fn(a, b, *c):
        if t == "s32":
            a24 = (np.asarray(a).astype(i64) << 40) >> 40
            b24 = (np.asarray(b).astype(i64) << 40) >> 40
        else:
            a24 = np.asarray(a).astype(i64) & 0xFFFFFF
            b24 = np.asarray(b).astype(i64) & 0xFFFFFF
        p = a24 * b24
        r = (p >> 16) if mode == "hi" else p
        if c:
            r = r + np.asarray(c[0]).astype(i64)
        if sat:
            return np.clip(r, -2 ** 31, 2 ** 31 - 1)
        return r & 0xFFFFFFFF
    return simple(mc, li, t, fn, li.ops[1:])


@op("div", "rem")
def _divrem(mc, li):
    mods = Mods(li)
    if _has_float_type(mods):
        return _float_arith(mc, li, mods)
    t = _itype(mods, ("u16", "u32", "u64", "s16", "s32", "s64"))
    mods.done()
    check_nops(li, 3)
    size = TYPE_SIZES[t]
    signed = t[0] == "s"
    is_div = mods.base == "div"
    dt = NPDT[t]

    def fn(a, b):
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        zero = b == 0
        bs = np.where(zero, 1, b).astype(dt)
        if signed:
            if size < 8:
                q = np.trunc(a.astype(f64) / bs.astype(f64)).astype(i64)
                r = a.astype(i64) - q * bs.astype(i64)
            else:
                aa = a.astype(i64)
                bb = bs.astype(i64)
                ovf = (aa == np.iinfo(i64).min) & (bb == -1)
                bb = np.where(ovf, 1, bb)
                q = np.abs(aa) // np.abs(bb)
                q = np.where((aa < 0) != (bb < 0), -q, q)
                q = np.where(ovf, aa, q)
                r = np.where(ovf, 0, aa - q * bb)
        else:
            q = a // bs
            r = a % bs
        if is_div:
            return np.where(zero, dt(-1) if signed else np.iinfo(dt).max, q).astype(dt)
        return np.where(zero, a, r).astype(dt)
    return simple(mc, li, t, fn, li.ops[1:3])


@op("abs", "neg")
def _absneg(mc, li):
    mods = Mods(li)
    if _has_float_type(mods):
        return _float_absneg(mc, li, mods)
    t = _itype(mods, ("s16", "s32", "s64"))
    mods.done()
    check_nops(li, 2)
    return simple(mc, li, t, np.abs if mods.base == "abs" else np.negative, li.ops[1:2])


@op("min", "max")
def _minmax(mc, li):
    mods = Mods(li)
    if _has_float_type(mods):
        return _float_minmax(mc, li, mods)
    relu = mods.has("relu")
    t = _itype(mods, ("u16", "u32", "u64", "s16", "s32", "s64", "u16x2", "s16x2"))
    mods.done()
    check_nops(li, 3)
    uf = np.minimum if mods.base == "min" else np.maximum
    if t in ("u16x2", "s16x2"):
        et = u16 if t == "u16x2" else i16

        def fn(a, b):
            a = bl(np.asarray(a, u32), mc.L).view(et)
            b = bl(np.asarray(b, u32), mc.L).view(et)
            r = uf(a, b)
            if relu:
                r = np.maximum(r, 0).astype(et)
            return r.view(u32)
        return simple(mc, li, t, fn, li.ops[1:3])
    if relu:
        return simple(mc, li, t, lambda a, b: np.maximum(uf(a, b), 0), li.ops[1:3])
    return ufunc2(mc, li, t, uf)


@op("popc")
def _popc(mc, li):
    mods = Mods(li)
    t = mods.type1({"b32", "b64"})
    mods.done()
    d = dst(mc, li.ops[0], "u32", li)
    g = getter(mc, li.ops[1], t, li)
    return lambda m: put(d, m, _popcount(g()).astype(u32))


_POP8 = np.array([i.bit_count() for i in range(256)], dtype=np.uint8)


def _popcount(x):
    x = np.asarray(x)
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    b = np.ascontiguousarray(x).view(np.uint8).reshape(x.shape + (x.dtype.itemsize,))
    return _POP8[b].sum(-1)


def _bitlen(x, size):
    """Number of significant bits of unsigned values (0 for 0)."""
    x = np.asarray(x).astype(u64)
    if size <= 4:
        _, e = np.frexp(x.astype(f64))
        return e.astype(i64)
    hi = x >> u64(32)
    lo = x & u64(0xFFFFFFFF)
    _, eh = np.frexp(hi.astype(f64))
    _, el = np.frexp(lo.astype(f64))
    return np.where(hi > 0, eh.astype(i64) + 32, el.astype(i64))


@op("clz")
def _clz(mc, li):
    mods = Mods(li)
    t = mods.type1({"b32", "b64"})
    mods.done()
    size = TYPE_SIZES[t]
    d = dst(mc, li.ops[0], "u32", li)
    g = getter(mc, li.ops[1], t, li)
    return lambda m: put(d, m, (8 * size - _bitlen(g(), size)).astype(u32))


@op("bfind")
def _bfind(mc, li):
    mods = Mods(li)
    shiftamt = mods.has("shiftamt")
    t = mods.type1({"u32", "u64", "s32", "s64"})
    mods.done()
    size = TYPE_SIZES[t]
    d = dst(mc, li.ops[0], "u32", li)
    g = getter(mc, li.ops[1], t, li)

    def f(m):
        a = np.asarray(g())
        if t[0] == "s":
            a = np.where(a < 0, ~a, a)
        bl = _bitlen(a.astype(UINT[size]) if t[0] == "s" else a, size)
        pos = bl - 1
        r = np.where(bl == 0, 0xFFFFFFFF, (8 * size - 1 - pos) if shiftamt else pos)
        put(d, m, r.astype(u64).astype(u32))
    return f


_BREV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=u8)


@op("brev")
def _brev(mc, li):
    mods = Mods(li)
    t = mods.type1({"b32", "b64"})
    mods.done()
    size = TYPE_SIZES[t]

    def fn(a):
        a = bl(np.asarray(a, UINT[size]), mc.L)
        b = _BREV8[a.view(u8).reshape(-1, size)][:, ::-1]
        return np.ascontiguousarray(b).view(UINT[size]).reshape(-1)
    return simple(mc, li, t, fn, li.ops[1:2])


@op("bfe")
def _bfe(mc, li):
    mods = Mods(li)
    t = mods.type1({"u32", "u64", "s32", "s64"})
    mods.done()
    check_nops(li, 4)
    size = TYPE_SIZES[t]
    W = 8 * size
    d = dst(mc, li.ops[0], t, li)
    ga = getter(mc, li.ops[1], t, li)
    gb = getter(mc, li.ops[2], "u32", li)
    gc = getter(mc, li.ops[3], "u32", li)
    signed = t[0] == "s"

    def f(m):
        a = np.asarray(ga()).astype(UINT[size]).astype(u64) if not signed else \
            np.asarray(ga()).astype(SINT[size]).view(UINT[size]).astype(u64)
        pos = np.asarray(gb()).astype(i64) & 0xFF
        ln = np.asarray(gc()).astype(i64) & 0xFF
        sh = np.minimum(pos, 63).astype(u64)
        t_ = np.where(pos >= W, u64(0), a >> sh)
        k = np.clip(np.minimum(ln, W - pos), 0, W)
        km = np.where(k >= 64, ~u64(0), (u64(1) << np.minimum(k, 63).astype(u64)) - u64(1))
        r = t_ & km
        if signed:
            msb_pos = np.minimum(pos + ln - 1, W - 1)
            sbit = np.where(ln == 0, u64(0), (a >> np.clip(msb_pos, 0, 63).astype(u64)) & u64(1))
            fill = np.where(sbit == 1, ~km, u64(0))
            if W < 64:
                fill &= u64((1 << W) - 1)
            r = r | fill
        put(d, m, r.astype(UINT[size]).view(NPDT[t]) if signed else r.astype(UINT[size]))
    return f


@op("bfi")
def _bfi(mc, li):
    mods = Mods(li)
    t = mods.type1({"b32", "b64"})
    mods.done()
    check_nops(li, 5)
    size = TYPE_SIZES[t]
    W = 8 * size
    d = dst(mc, li.ops[0], t, li)
    ga = getter(mc, li.ops[1], t, li)
    gb = getter(mc, li.ops[2], t, li)
    gc = getter(mc, li.ops[3], "u32", li)
    gd = getter(mc, li.ops[4], "u32", li)

    def f(m):
        a = np.asarray(ga()).astype(u64)
        b = np.asarray(gb()).astype(u64)
        pos = np.asarray(gc()).astype(i64) & 0xFF
        ln = np.asarray(gd()).astype(i64) & 0xFF
        k = np.clip(np.minimum(ln, W - pos), 0, W)
        km = np.where(k >= 64, ~u64(0), (u64(1) << np.minimum(k, 63).astype(u64)) - u64(1))
        ps = np.minimum(pos, 63).astype(u64)
        mask = np.where(pos >= W, u64(0), km << ps)
        r = (b & ~mask) | ((a << ps) & mask)
        put(d, m, r.astype(UINT[size]))
    return f


@op("prmt")
def _prmt(mc, li):
    mods = Mods(li)
    mode = mods.take("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")
    mods.type1({"b32"})
    mods.done()
    check_nops(li, 4)
    d = dst(mc, li.ops[0], "b32", li)
    ga, gb, gc = (getter(mc, o, "b32", li) for o in li.ops[1:4])

    def f(m):
        a = bl(np.asarray(ga(), u32), mc.L)
        b = bl(np.asarray(gb(), u32), mc.L)
        c = bl(np.asarray(gc(), u32), mc.L).astype(i64)
        x = (b.astype(u64) << u64(32)) | a.astype(u64)
        byts = np.ascontiguousarray(x).view(u8).reshape(-1, 8).astype(i64)
        out = np.zeros((mc.L, 4), dtype=i64)
        rows = np.arange(mc.L)
        if mode is None:
            for i in range(4):
                sel = (c >> (4 * i)) & 0xF
                v = byts[rows, sel & 7]
                out[:, i] = np.where(sel & 8, np.where(v & 0x80, 0xFF, 0), v)
        else:
            s = c & 3
            tab = {
                "f4e": [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
                "b4e": [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
                "rc8": [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]],
                "ecl": [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
                "ecr": [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
                "rc16": [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]],
            }[mode]
            T = np.array(tab, dtype=i64)
            for i in range(4):
                out[:, i] = byts[rows, T[s, i]]
        r = (out[:, 0] | (out[:, 1] << 8) | (out[:, 2] << 16) | (out[:, 3] << 24)).astype(u32)
        put(d, m, r)
    return f


@op("shl", "shr")
def _shift(mc, li):
    mods = Mods(li)
    t = mods.type1({"b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"})
    mods.done()
    check_nops(li, 3)
    if mods.base == "shl" and t[0] != "b":
        raise _err(li, "shl takes a .b type")
    size = TYPE_SIZES[t]
    W = 8 * size
    dt = NPDT[t] if mods.base == "shl" or t[0] != "b" else UINT[size]
    if mods.base == "shr" and t[0] == "b":
        dt = UINT[size]
    tt = {u8: "u8", u16: "u16", u32: "u32", u64: "u64", i16: "s16", i32: "s32", i64: "s64"}[dt]
    d = dst(mc, li.ops[0], tt, li)
    a = src(mc, li.ops[1], tt, li)
    bo = li.ops[2]
    uf = np.left_shift if mods.base == "shl" else np.right_shift
    if isinstance(bo, Imm) and a is not None:
        n = bo.value & 0xFFFFFFFF
        if n >= W:
            if mods.base == "shr" and dt in (i16, i32, i64):
                n = W - 1
            else:
                z = dt(0)
                return lambda m: put(d, m, z)
        sh = dt(n)

        def f(m):
            if m is True:
                uf(a, sh, out=d)
            else:
                np.putmask(d, m, uf(a, sh))
        return f
    ga = getter(mc, li.ops[1], tt, li)
    gb = getter(mc, bo, "u32", li)
    signed = dt in (i16, i32, i64)

    def g(m):
        av = np.asarray(ga())
        b = np.asarray(gb()).astype(i64)
        big = b >= W
        bb = np.minimum(b, W - 1).astype(dt)
        r = uf(av, bb)
        if not (signed and mods.base == "shr"):
            r = np.where(big, dt(0), r)
        put(d, m, r)
    return g


@op("shf")
def _shf(mc, li):
    mods = Mods(li)
    direction = mods.take("l", "r")
    mode = mods.take("wrap", "clamp")
    t = mods.type1({"b32"})
    mods.done()
    if direction is None or mode is None:
        raise _err(li, "shf needs .l/.r and .wrap/.clamp")
    check_nops(li, 4)
    d = dst(mc, li.ops[0], t, li)
    ga, gb, gc = (getter(mc, o, "b32", li) for o in li.ops[1:4])

    def f(m):
        a = np.asarray(ga()).astype(u64)
        b = np.asarray(gb()).astype(u64)
        c = np.asarray(gc()).astype(u64)
        n = (c & u64(31)) if mode == "wrap" else np.minimum(c, u64(32))
        x = (b << u64(32)) | a
        if direction == "l":
            r = (x << n) >> u64(32)
        else:
            r = x >> n
        put(d, m, (r & u64(0xFFFFFFFF)).astype(u32))
    return f


@op("sad")
def _sad(mc, li):
    mods = Mods(li)
    t = _itype(mods, ("u16", "u32", "u64", "s16", "s32", "s64"))
    mods.done()
    return simple(mc, li, t, lambda a, b, c: np.abs(np.asarray(a).astype(i64) - np.asarray(b).astype(i64))
                  + np.asarray(c).astype(i64), li.ops[1:4])


@op("bmsk")
def _bmsk(mc, li):
    mods = Mods(li)
    mode = mods.take("clamp", "wrap")
    mods.type1({"b32"})
    mods.done()

    def fn(a, b):
        a = np.asarray(a).astype(i64)
        b = np.asarray(b).astype(i64)
        if mode == "wrap":
            a, b = a & 31, b & 31
        else:
            a, b = np.minimum(a, 32), np.minimum(b, 32)
        hi = np.minimum(a + b, 32)
        return (((np.int64(1) << hi) - 1) & ~((np.int64(1) << a) - 1)) & 0xFFFFFFFF
    return simple(mc, li, "b32", fn, li.ops[1:3])


@op("szext")
def _szext(mc, li):
    mods = Mods(li)
    mode = mods.take("clamp", "wrap")
    t = mods.type1({"u32", "s32"})
    mods.done()

    def fn(a, b):
        a = np.asarray(a).astype(u32).astype(i64)
        b = np.asarray(b).astype(i64)
        b = (b & 31) if mode == "wrap" else np.minimum(b, 32)
        mask = (np.int64(1) << b) - 1
        v = a & mask
        if t == "s32":
            sign = (v >> np.maximum(b - 1, 0)) & 1
            v = np.where((b > 0) & (sign == 1), v | ~mask, v)
        return np.where(b == 0, 0, v) & 0xFFFFFFFF if t == "u32" else np.where(b == 0, 0, v)
    return simple(mc, li, t, fn, li.ops[1:3])


@op("dp4a", "dp2a")
def _dp(mc, li):
    mods = Mods(li)
    half = mods.take("lo", "hi")
    ts = mods.types()
    mods.done()
    if len(ts) != 2:
        raise _err(li, f"{mods.base} needs two types")
    d = dst(mc, li.ops[0], "s32" if "s32" in ts else "u32", li)
    ga, gb = getter(mc, li.ops[1], "b32", li), getter(mc, li.ops[2], "b32", li)
    gc = getter(mc, li.ops[3], "s32" if "s32" in ts else "u32", li)

    def f(m):
        a = bl(np.asarray(ga(), u32), mc.L)
        b = bl(np.asarray(gb(), u32), mc.L)
        if mods.base == "dp4a":
            av = a.view(i8 if ts[0] == "s32" else u8).reshape(-1, 4).astype(i64)
            bv = b.view(i8 if ts[1] == "s32" else u8).reshape(-1, 4).astype(i64)
        else:
            av = a.view(i16 if ts[0] == "s32" else u16).reshape(-1, 2).astype(i64)
            bb = b.view(i8 if ts[1] == "s32" else u8).reshape(-1, 4).astype(i64)
            bv = bb[:, 0:2] if half == "lo" else bb[:, 2:4]
        r = (av * bv).sum(1) + np.asarray(gc()).astype(i64)
        put(d, m, r & 0xFFFFFFFF)
    return f


# ============================================================================ comparisons


_CMP_INT = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"}
_CMP_FLT = {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}


def _compare(cmp: str, a, b, is_float: bool):
    if not is_float:
        cmp = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(cmp, cmp)
        return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}[cmp](a, b)
    if cmp == "eq":
        return np.equal(a, b)
    if cmp == "ne":
        return np.less(a, b) | np.greater(a, b)
    if cmp == "lt":
        return np.less(a, b)
    if cmp == "le":
        return np.less_equal(a, b)
    if cmp == "gt":
        return np.greater(a, b)
    if cmp == "ge":
        return np.greater_equal(a, b)
    if cmp == "equ":
        return ~(np.less(a, b) | np.greater(a, b))
    if cmp == "neu":
        return np.not_equal(a, b)
    if cmp == "ltu":
        return ~np.greater_equal(a, b)
    if cmp == "leu":
        return ~np.greater(a, b)
    if cmp == "gtu":
        return ~np.less_equal(a, b)
    if cmp == "geu":
        return ~np.less(a, b)
    if cmp == "num":
        return np.equal(a, a) & np.equal(b, b)
    if cmp == "nan":
        return np.not_equal(a, a) | np.not_equal(b, b)
    raise ValueError(cmp)


_FAST_CMP = {"eq": np.equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
             "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


def _fvals(x, t):
    """Numeric values (float32/float64/float16 arrays) of .{t} operand storage."""
    if t == "bf16":
        return fp.bf16_bits_to_f32(x)
    return x


@op("setp")
def _setp(mc, li):
    mods = Mods(li)
    t_all = [p for p in mods.parts if p in TYPE_SIZES]
    if not t_all:
        raise _err(li, "setp without a type")
    t = t_all[-1]
    is_float = t in FLOAT_TYPES
    cmp = mods.take(*(_CMP_FLT if is_float else _CMP_INT))
    if cmp is None:
        raise _err(li, f"unknown comparison in {li.opcode}")
    boolop = mods.take("and", "or", "xor")
    ftz = mods.has("ftz")
    mods.type1()
    mods.done()
    p, q = _dst_pair(mc, li, "pred", "pred")
    if t in ("f16x2", "bf16x2"):
        return _setp_x2(mc, li, t, cmp, boolop, ftz, p, q)
    nexp = 4 if boolop else 3
    check_nops(li, nexp)
    if t in ("b16", "b32", "b64") and cmp not in ("eq", "ne"):
        raise _err(li, f"setp.{cmp} is not defined for .{t}")
    a = src(mc, li.ops[1], t, li)
    b = src(mc, li.ops[2], t, li)
    if not boolop and q is None and not ftz and a is not None and b is not None and t != "bf16" \
            and (cmp in _FAST_CMP or (cmp == "ne" and not is_float)):
        uf = _FAST_CMP.get(cmp, np.not_equal)

        def f(m):
            if m is True:
                uf(a, b, out=p)
            else:
                np.putmask(p, m, uf(a, b))
        return f
    ga, gb = getter(mc, li.ops[1], t, li), getter(mc, li.ops[2], t, li)
    gc = getter(mc, li.ops[3], "pred", li) if boolop else None
    bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)

    def g(m):
        av, bv = _fvals(ga(), t), _fvals(gb(), t)
        if ftz and is_float:
            av, bv = fp.flush_subnormal(av), fp.flush_subnormal(bv)
        r = _compare(cmp, av, bv, is_float)
        r = bl(r, mc.L)
        if bop is not None:
            c = gc()
            put(p, m, bop(r, c))
            if q is not None:
                put(q, m, bop(~r, c))
        else:
            put(p, m, r)
            if q is not None:
                put(q, m, ~r)
    return g


def _setp_x2(mc, li, t, cmp, boolop, ftz, p, q):
    check_nops(li, 4 if boolop else 3)
    ga, gb = getter(mc, li.ops[1], "b32", li), getter(mc, li.ops[2], "b32", li)
    gc = getter(mc, li.ops[3], "pred", li) if boolop else None
    bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)
    fmt = "f16" if t == "f16x2" else "bf16"

    def g(m):
        a = bl(np.asarray(ga(), u32), mc.L).view(u16).reshape(-1, 2)
        b = bl(np.asarray(gb(), u32), mc.L).view(u16).reshape(-1, 2)
        av, bv = fp.decode(a, fmt), fp.decode(b, fmt)
        if ftz:
            av, bv = fp.flush_subnormal(av, fmt), fp.flush_subnormal(bv, fmt)
        r = _compare(cmp, av, bv, True)
        lo, hi = r[:, 0], r[:, 1]
        if bop is not None:
            c = gc()
            lo, hi = bop(lo, c), bop(hi, c)
        put(p, m, lo)
        if q is not None:
            put(q, m, hi)
    return g


@op("set")
def _set(mc, li):
    mods = Mods(li)
    ts = [p for p in mods.parts if p in TYPE_SIZES]
    if len(ts) != 2:
        raise _err(li, "set needs a destination and a source type")
    dt_, st = ts
    is_float = st in FLOAT_TYPES
    cmp = mods.take(*(_CMP_FLT if is_float else _CMP_INT))
    boolop = mods.take("and", "or", "xor")
    ftz = mods.has("ftz")
    mods.types()
    mods.done()
    d = dst(mc, li.ops[0], dt_, li)
    ga, gb = getter(mc, li.ops[1], st, li), getter(mc, li.ops[2], st, li)
    gc = getter(mc, li.ops[3], "pred", li) if boolop else None
    bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)
    one = np.float32(1.0) if dt_ == "f32" else NPDT[dt_](-1) if dt_[0] == "s" else \
        UINT[TYPE_SIZES[dt_]](np.iinfo(UINT[TYPE_SIZES[dt_]]).max)
    zero = NPDT[dt_](0)

    def g(m):
        av, bv = _fvals(ga(), st), _fvals(gb(), st)
        if ftz:
            av, bv = fp.flush_subnormal(av), fp.flush_subnormal(bv)
        r = _compare(cmp, av, bv, is_float)
        if bop is not None:
            r = bop(r, gc())
        put(d, m, np.where(r, one, zero))
    return g


# ============================================================================ floating point


def _vals(x, t):
    """float64 values of storage x of scalar float type t."""
    if t == "bf16":
        return fp.bf16_bits_to_f32(x).astype(f64)
    if t == "tf32":
        return np.asarray(x).astype(u32).view(f32).astype(f64)
    return np.asarray(x).astype(f64)


def _store_fmt(r, fmt, mc_canon=True):
    """Encode float64 values (representable in fmt) into storage of fmt."""
    if fmt == "f64":
        return r
    if fmt == "f32":
        out = r.astype(f32)
        return out
    if fmt == "f16":
        return fp.encode(r, "f16").view(f16)
    if fmt == "bf16":
        return fp.encode(r, "bf16")
    raise ValueError(fmt)


def _canon_nan(bits_dt, qnan):
    """A writer replacing every NaN of destination row `d` (lanes in mask `m`) by the canonical NaN."""
    def canon(d, m):
        bad = np.isnan(d)
        if m is not True:
            bad &= m
        if bad.any():
            d.view(bits_dt)[bad] = bits_dt(qnan)
    return canon


_canon_f32 = _canon_nan(u32, 0x7FFFFFFF)
_canon_f16 = _canon_nan(u16, 0x7FFF)


def _exact_op(kind, vals, fmt, mode):
    r = _exact_op_raw(kind, vals, fmt, mode)
    if mode == "rm" and kind in ("add", "sub", "fma"):
        # IEEE 754: an exact zero sum is -0 when rounding toward -inf (unless both addends are +0)
        if kind == "fma":
            x, y = vals[0] * vals[1], vals[2]
        else:
            x, y = vals[0], (vals[1] if kind == "add" else -vals[1])
        zero = r == 0
        if np.any(zero):
            pos = (x == 0) & (y == 0) & ~np.signbit(x) & ~np.signbit(y)
            r = np.where(zero & ~pos, -0.0, r)
    return r


def _exact64(kind, vals, mode):
    """Correctly rounded float64 add/sub/mul/div/rcp/sqrt/fma in any rounding mode.

    Error-free transforms give the exact residual of the rounded result; lanes where they could
    lose it (results near the overflow or underflow thresholds) are redone exactly with fractions.
    """
    vals = [np.asarray(v, dtype=f64) for v in vals]
    if kind == "fma":
        return fp.fma64(vals[0], vals[1], vals[2], mode)
    if kind in ("add", "sub"):
        a, b = vals[0], (vals[1] if kind == "add" else -vals[1])
        r, e = fp.two_sum(a, b)
        exact = lambda x, y: Fraction(x) + Fraction(y)
        ins = (a, b)
    elif kind == "mul":
        a, b = vals
        r, e = fp.two_prod(a, b)
        exact = lambda x, y: Fraction(x) * Fraction(y)
        ins = (a, b)
    elif kind in ("div", "rcp"):
        a, b = (vals[0], vals[1]) if kind == "div" else (np.ones_like(vals[0]), vals[0])
        r = a / b
        fin = np.isfinite(r) & (r != 0)
        p, pe = fp.two_prod(np.where(fin, r, 0.0), np.where(fin, b, 0.0))
        e = np.where(fin, ((np.where(fin, a, 0.0) - p) - pe) * np.sign(b), 0.0)
        exact = lambda x, y: Fraction(x) / Fraction(y) if y != 0 else None
        ins = (a, b)
    elif kind == "sqrt":
        a = vals[0]
        # scale into a range where the residual s*s - a is exact: sqrt(a 4^k) = 2^k sqrt(a)
        _, ex = np.frexp(np.where(np.isfinite(a) & (a > 0), a, 1.0))
        k = -(ex.astype(np.int64) // 2)
        asc = np.ldexp(a, (2 * k).astype(np.int32))
        s_ = np.sqrt(asc)
        fin = np.isfinite(s_) & (s_ > 0)
        p, pe = fp.two_prod(np.where(fin, s_, 0.0), np.where(fin, s_, 0.0))
        rsd = np.where(fin, (np.where(fin, asc, 0.0) - p) - pe, 0.0)
        return np.ldexp(fp.directed64(s_, rsd, mode), (-k).astype(np.int32))
    else:
        raise ValueError(kind)
    out = fp.directed64(r, np.where(np.isfinite(e), e, 0.0), mode)
    big, tiny = 2.0 ** 995, 2.0 ** -960
    finite_in = np.isfinite(ins[0]) & np.isfinite(ins[1])

    def extreme(x):
        ax = np.abs(x)
        return (ax > big) | ((ax < tiny) & (ax > 0))
    risky = finite_in & (~np.isfinite(r) | extreme(r) | ((r == 0) & (ins[0] != 0) & (ins[1] != 0)))
    if kind not in ("add", "sub"):
        risky |= finite_in & (extreme(ins[0]) | extreme(ins[1]))
    if risky.any():
        out = np.array(out, copy=True)
        for i in np.flatnonzero(risky.reshape(-1)):
            ix = np.unravel_index(i, out.shape)
            q = exact(float(ins[0][ix]), float(ins[1][ix]))
            if q is not None:
                out[ix] = fp._exact_directed_scalar(q, float(r[ix]), mode) if mode != "rn" else \
                    fp._round_rn_scalar(q, float(r[ix]))
    return out


def _exact_op_raw(kind, vals, fmt, mode):
    """Correctly rounded result (float64 values representable in fmt) of an arithmetic op."""
    if fmt == "f64":
        return _exact64(kind, vals, mode)
    if kind == "add":
        ro = fp.add_ro(vals[0], vals[1])
    elif kind == "sub":
        ro = fp.add_ro(vals[0], -vals[1])
    elif kind == "mul":
        ro = vals[0] * vals[1]
    elif kind == "fma":
        ro = fp.fma_ro_small(vals[0], vals[1], vals[2])
    elif kind == "div":
        ro = fp.div_ro(vals[0], vals[1])
    elif kind == "rcp":
        ro = fp.div_ro(np.ones_like(vals[0]), vals[0])
    elif kind == "sqrt":
        ro = fp.sqrt_ro(vals[0])
    else:
        raise ValueError(kind)
    return fp.round_fmt(ro, fmt, mode)


def _relu(r):
    """max(r, 0) with NaN passed through unchanged (cvt/min/max .relu)."""
    return np.where(np.isnan(r), r, np.maximum(r, 0.0))


def _post(r, fmt, ftz, sat, relu):
    if ftz:
        r = fp.flush_subnormal(r, fmt)
    if relu:
        r = np.where(np.isnan(r), np.nan, np.maximum(r, 0.0))
    if sat:
        r = np.where(np.isnan(r), 0.0, np.clip(r, 0.0, 1.0))
    return r


_APPROX = {"ex2", "lg2", "sin", "cos", "tanh", "rsqrt"}


def _float_arith(mc, li, mods=None):
    """add/sub/mul/fma/mad/div/rcp/sqrt/rsqrt/ex2/lg2/sin/cos/tanh on float types."""
    mods = mods or Mods(li)
    kind = mods.base
    if kind == "mad":
        kind = "fma"
    rnd = mods.take("rn", "rz", "rm", "rp")
    approx = mods.take("approx", "full")
    ftz = mods.has("ftz")
    sat = mods.has("sat")
    relu = mods.has("relu")
    oob = mods.has("oob")
    nanmod = mods.has("NaN")
    ts = mods.types()
    mods.done()
    if oob or nanmod:
        raise _err(li, f"modifier .{'oob' if oob else 'NaN'} of {kind} is not supported")
    if not ts:
        raise _err(li, f"{li.opcode}: missing type")
    t = ts[0]
    mixed = len(ts) == 2      # add.f32.f16 d, a(f16), c(f32) ; fma.f32.f16 d, a, b (f16), c (f32)
    if len(ts) > 2:
        raise _err(li, f"{li.opcode}: too many types")
    if kind in _APPROX and approx != "approx" and not (kind == "rsqrt" and approx is None and t == "f64"):
        raise _err(li, f"{kind} requires .approx")
    if kind in ("div", "rcp", "sqrt") and approx is None and rnd is None and t in ("f32", "f64"):
        raise _err(li, f"{li.opcode}: rounding modifier required")
    mode = rnd or "rn"
    nargs = {"add": 2, "sub": 2, "mul": 2, "fma": 3, "div": 2, "rcp": 1, "sqrt": 1, "rsqrt": 1,
             "ex2": 1, "lg2": 1, "sin": 1, "cos": 1, "tanh": 1}[kind]
    if mixed:
        ot, it = ts
        if ot != "f32" or it not in ("f16", "bf16"):
            raise _err(li, f"{li.opcode}: unsupported type combination")
        check_nops(li, nargs + 1)
        in_types = {"add": [it, "f32"], "sub": [it, "f32"], "fma": [it, it, "f32"], "mul": [it, it]}.get(kind)
        if in_types is None:
            raise _err(li, f"{li.opcode}: mixed types are not supported for {kind}")
        return _float_generic(mc, li, kind, "f32", in_types, mode, ftz, sat, relu, approx)
    check_nops(li, nargs + 1)
    if t in ("f16x2", "bf16x2", "f32x2"):
        return _float_x2(mc, li, kind, t, mode, ftz, sat, relu, approx, nargs)
    if t not in ("f32", "f64", "f16", "bf16"):
        raise _err(li, f"{kind}.{t} is not supported")
    # fast paths
    if approx is None and mode == "rn" and not ftz and not sat and not relu:
        uf = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}.get(kind)
        if kind == "sqrt" and t in ("f32", "f64"):
            uf1 = np.sqrt
            return _fast_float(mc, li, t, lambda a: uf1(a), 1)
        if uf is not None and t in ("f32", "f64", "f16"):
            return _fast_float(mc, li, t, uf, 2)
        if kind == "fma" and t == "f32":
            return _fast_fma32(mc, li)
        if kind == "rcp" and t in ("f32", "f64"):
            one = NPDT[t](1.0)
            return _fast_float(mc, li, t, lambda a: np.divide(one, a), 1)
    return _float_generic(mc, li, kind, t, [t] * nargs, mode, ftz, sat, relu, approx)


def _fast_float(mc, li, t, fn, n):
    d = dst(mc, li.ops[0], t, li)
    srcs = [src(mc, o, t, li) for o in li.ops[1:1 + n]]
    if any(s is None for s in srcs):
        gs = [getter(mc, o, t, li) for o in li.ops[1:1 + n]]
    else:
        gs = None
    canon = {"f32": _canon_f32, "f16": _canon_f16}.get(t) if mc.canonical_nan else None
    if d is None:
        return lambda m: None
    if gs is None and n == 2:
        a, b = srcs
        if canon is None:
            def f(m):
                if m is True:
                    fn(a, b, out=d)
                else:
                    np.putmask(d, m, fn(a, b))
        else:
            def f(m):
                if m is True:
                    fn(a, b, out=d)
                else:
                    np.putmask(d, m, fn(a, b))
                canon(d, m)
        return f

    def g(m):
        vals = srcs if gs is None else [x() for x in gs]
        put(d, m, fn(*vals))
        if canon is not None:
            canon(d, m)
    return g


def _fast_fma32(mc, li):
    d = dst(mc, li.ops[0], "f32", li)
    gs = [getter(mc, o, "f32", li) for o in li.ops[1:4]]
    canon = mc.canonical_nan

    def f(m):
        a = np.asarray(gs[0]()).astype(f64)
        b = np.asarray(gs[1]()).astype(f64)
        c = np.asarray(gs[2]()).astype(f64)
        p = a * b
        s = p + c
        # double rounding is only possible when s lies exactly on an f32 rounding midpoint
        bits = s.view(u64) if isinstance(s, np.ndarray) else np.asarray(s).view(u64)
        risky = (bits & u64(0x1FFFFFFF)) == u64(0x10000000)
        if risky.any() or (np.abs(s) < 2.0 ** -125).any():
            s = fp.make_odd(*fp.two_sum(p, c))
        r = s.astype(f32)
        put(d, m, r)
        if canon:
            _canon_f32(d, m)
    return f


def _float_generic(mc, li, kind, t, in_types, mode, ftz, sat, relu, approx):
    d = dst(mc, li.ops[0], t, li)
    gs = [getter(mc, o, it, li) for o, it in zip(li.ops[1:], in_types)]
    canon = mc.canonical_nan

    def f(m):
        vals = [_vals(g(), it) for g, it in zip(gs, in_types)]
        if ftz:
            vals = [fp.flush_subnormal(v, it if it != "tf32" else "f32") for v, it in zip(vals, in_types)]
        r = _compute(kind, vals, t, mode, approx)
        r = _post(r, t, ftz, sat, relu)
        out = _store_fmt(r, t)
        put(d, m, out)
        if canon and t == "f32":
            _canon_f32(d, m)
    return f


def _compute(kind, vals, t, mode, approx):
    if kind in _APPROX or approx == "approx" and kind in ("div", "rcp", "sqrt"):
        a = vals[0]
        if kind == "ex2":
            r = np.exp2(a)
        elif kind == "lg2":
            r = np.log2(a)
        elif kind == "sin":
            r = np.sin(a)
        elif kind == "cos":
            r = np.cos(a)
        elif kind == "tanh":
            r = np.tanh(a)
        elif kind == "rsqrt":
            r = 1.0 / np.sqrt(a)
        elif kind == "rcp":
            r = 1.0 / a
        elif kind == "sqrt":
            r = np.sqrt(a)
        else:  # div.approx: a * (1/b) in f32, zero for 2^126 < |b| < 2^128
            b = vals[1]
            r = (a.astype(f32) * (np.float32(1.0) / b.astype(f32))).astype(f64)
            if t == "f32":
                big = (np.abs(b) > 2.0 ** 126) & np.isfinite(b) & np.isfinite(a)
                r = np.where(big, 0.0 * a * np.sign(b), r)
            return r
        return fp.round_fmt(r, t, "rn") if t != "f64" else r
    return _exact_op(kind, vals, t, mode)


def _float_x2(mc, li, kind, t, mode, ftz, sat, relu, approx, nargs):
    """Packed f16x2 / bf16x2 / f32x2 arithmetic: both halves independently."""
    et, storage, regt = {"f16x2": ("f16", u16, "b32"), "bf16x2": ("bf16", u16, "b32"),
                         "f32x2": ("f32", u32, "b64")}[t]
    d = dst(mc, li.ops[0], regt, li)
    gs = [getter(mc, o, regt, li) for o in li.ops[1:1 + nargs]]
    L = mc.L

    def f(m):
        vals = []
        for g in gs:
            v = bl(np.asarray(g()), L).view(storage)
            if et == "f32":
                vals.append(v.view(f32).astype(f64))
            else:
                vals.append(fp.decode(v, et))
        if ftz:
            vals = [fp.flush_subnormal(v, et) for v in vals]
        r = _compute(kind, vals, et, mode, approx)
        r = _post(r, et, ftz, sat, relu)
        if et == "f32":
            out = r.astype(f32).view(u32)
            if mc.canonical_nan:
                out = np.where(np.isnan(r), u32(0x7FFFFFFF), out)
        else:
            out = fp.encode(r, et)
        put(d, m, out.view(d.dtype))
    return f


@op("fma")
def _fma(mc, li):
    return _float_arith(mc, li)


@op("rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh")
def _unary_float(mc, li):
    return _float_arith(mc, li)


def _float_absneg(mc, li, mods):
    ftz = mods.has("ftz")
    t = mods.type1({"f32", "f64", "f16", "bf16", "f16x2", "bf16x2"})
    mods.done()
    check_nops(li, 2)
    size = TYPE_SIZES[t]
    bt = {2: "b16", 4: "b32", 8: "b64"}[size]
    if t in ("f16x2", "bf16x2"):
        sign = u32(0x80008000)
    else:
        sign = UINT[size](1 << (8 * size - 1))
    is_abs = mods.base == "abs"
    fmt = {"f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16", "f16x2": "f16", "bf16x2": "bf16"}[t]

    def fn(a):
        a = np.asarray(a)
        if ftz:
            if t in ("f16x2", "bf16x2"):
                h = bl(a, mc.L).view(u16)
                v = fp.decode(h, fmt)
                sub = (np.abs(v) < 2.0 ** fp.FORMATS[fmt].emin) & (v != 0)
                h = np.where(sub, h & u16(0x8000), h)
                a = h.view(u32)
            else:
                v = _vals(a.view(NPDT[t]) if t not in ("bf16",) else a, t)
                sub = (np.abs(v) < 2.0 ** fp.FORMATS[fmt].emin) & (v != 0)
                a = np.where(sub, a & sign, a)
        return (a & ~sign) if is_abs else (a ^ sign)
    return simple(mc, li, bt, fn, li.ops[1:2])


def _float_minmax(mc, li, mods):
    ftz = mods.has("ftz")
    nan = mods.has("NaN")
    xorsign = mods.has("xorsign")
    absm = mods.has("abs")
    relu = mods.has("relu")
    t = mods.type1({"f32", "f64", "f16", "bf16", "f16x2", "bf16x2"})
    mods.done()
    if xorsign != absm:
        raise _err(li, ".xorsign requires .abs")
    is_max = mods.base == "max"
    n = len(li.ops) - 1
    if n not in (2, 3):
        raise _err(li, f"{li.opcode} takes 2 or 3 sources")
    if t == "f32" and n == 2 and not (ftz or nan or xorsign or relu):
        d = dst(mc, li.ops[0], t, li)
        a, b = src(mc, li.ops[1], t, li), src(mc, li.ops[2], t, li)
        if a is not None and b is not None and d is not None:
            uf = np.fmax if is_max else np.fmin
            zfix = 0.0

            def f(m):
                if m is True:
                    uf(a, b, out=d)
                    r = d
                else:
                    r = uf(a, b)
                # -0 < +0 ; two NaNs give the canonical NaN
                bad = (r == zfix) | np.isnan(r)
                if bad.any():
                    r = _minmax_fix(np.broadcast_to(a, r.shape), np.broadcast_to(b, r.shape), r, is_max)
                if m is True:
                    if r is not d:
                        np.copyto(d, r)
                else:
                    np.putmask(d, m, r)
            return f
    size = TYPE_SIZES[t]
    fmt = {"f16x2": "f16", "bf16x2": "bf16"}.get(t, t)
    regt = {2: "b16", 4: "b32", 8: "b64"}[size]
    d = dst(mc, li.ops[0], regt, li)
    gs = [getter(mc, o, regt, li) for o in li.ops[1:]]
    L = mc.L
    packed = t in ("f16x2", "bf16x2")

    def g(m):
        raws = []
        for gg in gs:
            v = bl(np.asarray(gg()), L)
            raws.append(v.view(u16) if packed else v)
        vals = [fp.decode(r_.view(UINT[2]) if fmt in ("f16", "bf16") else r_, fmt)
                if fmt in ("f16", "bf16") else r_.view(NPDT[fmt]).astype(f64) for r_ in raws]
        if ftz:
            vals = [fp.flush_subnormal(v, fmt) for v in vals]
        r = vals[0]
        for v in vals[1:]:
            r = _minmax_vals(r, v, is_max, nan, absm)
        if relu:
            r = _relu(r)
        if xorsign:
            s = np.signbit(vals[0]) ^ np.signbit(vals[1])
            r = np.where(np.isnan(r), r, np.copysign(r, np.where(s, -1.0, 1.0)))
        if fmt == "f64":
            out = r.view(u64)
        else:
            out = fp.encode(r, fmt)
        put(d, m, out.view(d.dtype) if packed else out.view(d.dtype) if out.dtype.itemsize == d.dtype.itemsize
            else out)
    return g


def _minmax_vals(a, b, is_max, nan_prop, absm):
    if absm:
        a, b = np.abs(a), np.abs(b)
    na, nb = np.isnan(a), np.isnan(b)
    if is_max:
        r = np.where(a > b, a, np.where(b > a, b, np.where(np.signbit(a), b, a)))
    else:
        r = np.where(a < b, a, np.where(b < a, b, np.where(np.signbit(a), a, b)))
    if nan_prop:
        r = np.where(na | nb, np.nan, r)
    else:
        r = np.where(na, b, np.where(nb, a, r))
    return r


def _minmax_fix(a, b, r, is_max):
    a64, b64 = a.astype(f64), b.astype(f64)
    v = _minmax_vals(a64, b64, is_max, False, False)
    out = v.astype(r.dtype)
    nanm = np.isnan(v)
    if nanm.any():
        out = out.copy()
        out.view(u32 if r.dtype == f32 else u64)[nanm] = 0x7FFFFFFF if r.dtype == f32 else 0x7FFFFFFFFFFFFFFF
    return out


@op("copysign")
def _copysign(mc, li):
    mods = Mods(li)
    t = mods.type1({"f32", "f64"})
    mods.done()
    size = TYPE_SIZES[t]
    sign = UINT[size](1 << (8 * size - 1))
    bt = "b32" if size == 4 else "b64"
    return simple(mc, li, bt, lambda a, b: (np.asarray(b) & ~sign) | (np.asarray(a) & sign), li.ops[1:3])


@op("testp")
def _testp(mc, li):
    mods = Mods(li)
    what = mods.take("finite", "infinite", "number", "notanumber", "normal", "subnormal")
    t = mods.type1({"f32", "f64"})
    mods.done()
    if what is None:
        raise _err(li, "testp needs an operation")
    d = dst(mc, li.ops[0], "pred", li)
    g = getter(mc, li.ops[1], t, li)
    tiny = np.finfo(NPDT[t]).tiny

    def f(m):
        a = np.asarray(g())
        r = {"finite": lambda: np.isfinite(a), "infinite": lambda: np.isinf(a),
             "number": lambda: ~np.isnan(a), "notanumber": lambda: np.isnan(a),
             "normal": lambda: np.isfinite(a) & ((np.abs(a) >= tiny) | (a == 0)),
             "subnormal": lambda: (np.abs(a) < tiny) & (a != 0)}[what]()
        put(d, m, r)
    return f


# ============================================================================ conversions


_INT_T = {"u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "b8", "b16", "b32", "b64"}


def _int_range(t):
    size = TYPE_SIZES[t]
    if t[0] == "s":
        return -(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1
    return 0, (1 << (8 * size)) - 1


@op("cvt")
def _cvt(mc, li):
    mods = Mods(li)
    irnd = mods.take("rni", "rzi", "rmi", "rpi")
    frnd = mods.take("rn", "rz", "rm", "rp", "rna", "rs")
    ftz = mods.has("ftz")
    sat = mods.has("sat")
    satfinite = mods.has("satfinite")
    relu = mods.has("relu")
    ts = mods.types()
    mods.done()
    if len(ts) != 2:
        raise _err(li, f"cvt needs two types, got {ts}")
    dt_, st = ts
    if frnd == "rs":
        raise _err(li, "cvt.rs (stochastic rounding) is not supported")
    packed_dst = dt_ in ("f16x2", "bf16x2", "e4m3x2", "e5m2x2")
    packed_src = st in ("f16x2", "e4m3x2", "e5m2x2")
    if packed_dst or packed_src or dt_ in ("e2m1x2", "e2m3x2", "e3m2x2") or st in ("e2m1x2",):
        return _cvt_packed(mc, li, dt_, st, frnd, relu, satfinite, ftz, sat)
    if st in _INT_T and dt_ in _INT_T:
        if irnd or frnd:
            raise _err(li, "rounding modifier on an integer-to-integer cvt")
        return _cvt_ii(mc, li, dt_, st, sat)
    if st in _INT_T:           # int -> float
        if frnd is None:
            raise _err(li, f"{li.opcode}: rounding modifier required")
        return _cvt_if(mc, li, dt_, st, frnd, sat, ftz)
    if dt_ in _INT_T:          # float -> int
        if irnd is None:
            raise _err(li, f"{li.opcode}: integer rounding modifier required")
        return _cvt_fi(mc, li, dt_, st, irnd, ftz)
    return _cvt_ff(mc, li, dt_, st, frnd, irnd, ftz, sat, satfinite, relu)


def _src_wide(mc, li, o, t):
    """Getter for a cvt source of type t; wider registers are truncated."""
    return getter(mc, o, t, li)


def _cvt_ii(mc, li, dt_, st, sat):
    d = dst(mc, li.ops[0], dt_, li)
    g = _src_wide(mc, li, li.ops[1], st)
    s = src(mc, li.ops[1], st, li)
    dsize = TYPE_SIZES[dt_]
    lo, hi = _int_range(dt_)
    out_dt = SINT[dsize] if dt_[0] == "s" else UINT[dsize]
    if not sat and s is not None and isinstance(s, np.ndarray) and d is not None:
        # plain conversion: numpy's C casts truncate/extend exactly like cvt
        def f(m):
            if m is True:
                np.copyto(d, s.astype(out_dt), casting="unsafe")
            else:
                np.putmask(d, m, s.astype(out_dt).astype(d.dtype))
        return f

    def g2(m):
        a = np.asarray(g())
        if sat:
            a = np.clip(a.astype(np.float64) if a.dtype == u64 else a.astype(i64), lo, hi)
            if a.dtype == np.float64:
                a = a.astype(u64)
        put(d, m, a.astype(out_dt))
    return g2


def _cvt_if(mc, li, dt_, st, mode, sat, ftz):
    d = dst(mc, li.ops[0], dt_, li)
    g = _src_wide(mc, li, li.ops[1], st)
    size = TYPE_SIZES[st]
    fmt = dt_
    if fmt not in ("f16", "bf16", "f32", "f64", "tf32"):
        raise _err(li, f"cvt to .{dt_} from an integer")

    def f(m):
        a = np.asarray(g())
        if size <= 4:
            v = a.astype(f64)                         # exact
            r = fp.round_fmt(v, fmt, mode) if fmt != "f64" else v
        else:
            if st[0] == "s":
                a64 = a.astype(i64)
                hi_ = (a64 >> 32).astype(f64) * 4294967296.0
                lo_ = (a64 & 0xFFFFFFFF).astype(f64)
            else:
                a64 = a.astype(u64)
                hi_ = (a64 >> u64(32)).astype(f64) * 4294967296.0
                lo_ = (a64 & u64(0xFFFFFFFF)).astype(f64)
            s_, e_ = fp.two_sum(hi_, lo_)
            if fmt == "f64":
                r = fp.directed64(s_, e_, mode)
            else:
                r = fp.round_fmt(fp.make_odd(s_, e_), fmt, mode)
        r = _post(r, fmt, ftz, sat, False)
        put(d, m, _store_fmt(r, fmt) if fmt != "tf32" else fp.encode(r, "tf32"))
    return f


def _cvt_fi(mc, li, dt_, st, irnd, ftz):
    d = dst(mc, li.ops[0], dt_, li)
    g = _src_wide(mc, li, li.ops[1], st)
    lo, hi = _int_range(dt_)
    size = TYPE_SIZES[dt_]
    out_dt = SINT[size] if dt_[0] == "s" else UINT[size]
    rf = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[irnd]
    if st not in ("f16", "bf16", "f32", "f64"):
        raise _err(li, f"cvt from .{st} to an integer")

    def f(m):
        v = _vals(g(), st)
        if ftz:
            v = fp.flush_subnormal(v, st)
        r = rf(v)
        nan = np.isnan(r)
        if size == 8:
            # float64 cannot hold 2^63-1: saturate explicitly
            big = r >= float(hi) + 1
            small = r < float(lo)
            rr = np.where(nan | big | small, 0.0, r)
            out = rr.astype(i64) if dt_[0] == "s" else rr.astype(u64)
            out = np.where(big, out_dt(hi), out)
            out = np.where(small, out_dt(lo), out)
            out = np.where(nan, out_dt(0), out).astype(out_dt)
        else:
            r = np.clip(np.where(nan, 0.0, r), lo, hi)
            out = r.astype(i64).astype(out_dt)
        put(d, m, out)
    return f


def _cvt_ff(mc, li, dt_, st, frnd, irnd, ftz, sat, satfinite, relu):
    if dt_ not in ("f16", "bf16", "f32", "f64", "tf32") or st not in ("f16", "bf16", "f32", "f64", "tf32"):
        raise _err(li, f"cvt.{dt_}.{st} is not supported")
    d = dst(mc, li.ops[0], dt_ if dt_ != "tf32" else "b32", li)
    g = _src_wide(mc, li, li.ops[1], st if st != "tf32" else "b32")
    dsz, ssz = TYPE_SIZES[dt_], TYPE_SIZES[st]
    widening = (dsz > ssz) or (dt_ == st) or (st in ("f16", "bf16") and dt_ in ("f32", "f64"))
    if dt_ == "tf32":
        widening = False
    if irnd is not None:
        if dt_ != st:
            raise _err(li, "integer rounding of a float requires equal types")
    elif not widening and frnd is None:
        raise _err(li, f"{li.opcode}: rounding modifier required for a narrowing conversion")
    if frnd == "rna" and dt_ != "tf32":
        raise _err(li, ".rna is only defined for .tf32")
    mode = frnd or "rn"
    # common fast paths
    if not (ftz or sat or satfinite or relu or irnd) and d is not None:
        if (dt_, st) in (("f32", "f16"), ("f64", "f32"), ("f64", "f16")) or \
                ((dt_, st) in (("f16", "f32"), ("f16", "f64"), ("f32", "f64")) and mode == "rn"):
            s = src(mc, li.ops[1], st, li)
            odt = NPDT[dt_]
            canon = mc.canonical_nan and dt_ in ("f32", "f16")

            def f(m):
                v = (s if s is not None else g()).astype(odt)
                if canon:
                    bad = np.isnan(v)
                    if bad.any():
                        v.view(UINT[dsz])[bad] = 0x7FFFFFFF if dsz == 4 else 0x7FFF
                put(d, m, v)
            return f
        if (dt_, st) == ("f32", "bf16"):
            return lambda m: put(d, m, fp.bf16_bits_to_f32(g()))
        if (dt_, st) == ("bf16", "f32") and mode == "rn":
            return lambda m: put(d, m, fp.f32_to_bf16_rn(np.asarray(g(), dtype=f32)))

    def f2(m):
        v = _vals(g(), st)
        if ftz:
            v = fp.flush_subnormal(v, "f32" if st in ("f32", "tf32") else st)
        if irnd is not None:
            rf = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[irnd]
            r = rf(v)
        elif dt_ == "f64" or widening:
            r = v
        else:
            r = fp.round_fmt(v, dt_, mode, satfinite=satfinite)
        if ftz:
            r = fp.flush_subnormal(r, "f32" if dt_ in ("f32", "tf32") else dt_)
        if relu:
            r = _relu(r)
        if sat:
            r = np.where(np.isnan(r), 0.0, np.clip(r, 0.0, 1.0))
        if dt_ == "tf32":
            out = fp.encode(r, "tf32")
        elif dt_ == "f64":
            out = r
        else:
            out = _store_fmt(r, dt_)
            if dt_ == "f32" and mc.canonical_nan:
                out = np.where(np.isnan(r), np.uint32(0x7FFFFFFF).view(f32), out)
        put(d, m, out)
    return f2


def _cvt_packed(mc, li, dt_, st, frnd, relu, satfinite, ftz, sat):
    """cvt with packed formats: f16x2/bf16x2 <- f32 pair, e4m3x2/e5m2x2 <- f32 pair / f16x2, and back."""
    mode = frnd or "rn"
    if dt_ in ("f16x2", "bf16x2") and st == "f32":
        check_nops(li, 3)
        d = dst(mc, li.ops[0], "b32", li)
        ga, gb = getter(mc, li.ops[1], "f32", li), getter(mc, li.ops[2], "f32", li)
        fmt = dt_[:-2]

        def f(m):
            hi = fp.round_fmt(np.asarray(ga()).astype(f64), fmt, mode, satfinite=satfinite)
            lo = fp.round_fmt(np.asarray(gb()).astype(f64), fmt, mode, satfinite=satfinite)
            if relu:
                hi, lo = _relu(hi), _relu(lo)
            r = (fp.encode(hi, fmt).astype(u32) << u32(16)) | fp.encode(lo, fmt).astype(u32)
            put(d, m, bl(r, mc.L))
        return f
    if dt_ in ("e4m3x2", "e5m2x2", "e2m1x2", "e2m3x2", "e3m2x2"):
        fmt = dt_[:-2]
        if not satfinite:
            raise _err(li, f"cvt to .{dt_} requires .satfinite")
        if mode != "rn":
            raise _err(li, f"cvt to .{dt_} supports .rn only")
        nbits = 4 if fmt == "e2m1" else 8          # fp6 values sit in byte containers, fp4 in nibbles
        out_t = "b8" if fmt == "e2m1" else "b16"
        if st == "f32":
            check_nops(li, 3)
            d = dst(mc, li.ops[0], out_t, li)
            ga, gb = getter(mc, li.ops[1], "f32", li), getter(mc, li.ops[2], "f32", li)

            def pair():
                return np.asarray(ga()).astype(f64), np.asarray(gb()).astype(f64)
        elif st in ("f16x2", "bf16x2"):
            check_nops(li, 2)
            d = dst(mc, li.ops[0], out_t, li)
            g = getter(mc, li.ops[1], "b32", li)
            hf = st[:-2]

            def pair():
                v = bl(np.asarray(g(), u32), mc.L).view(u16).reshape(-1, 2)
                return fp.decode(v[:, 1], hf), fp.decode(v[:, 0], hf)
        else:
            raise _err(li, f"cvt.{dt_}.{st} is not supported")

        def f2(m):
            a, b = pair()
            hi = fp.round_fmt(a, fmt, "rn", satfinite=True)
            lo = fp.round_fmt(b, fmt, "rn", satfinite=True)
            if relu:
                hi, lo = _relu(hi), _relu(lo)
            eh = fp.encode(hi, fmt).astype(u32)
            el = fp.encode(lo, fmt).astype(u32)
            r = (eh << u32(nbits)) | el
            put(d, m, bl(r, mc.L))
        return f2
    if st in ("e4m3x2", "e5m2x2") and dt_ in ("f16x2", "bf16x2"):
        check_nops(li, 2)
        fmt = st[:-2]
        of = dt_[:-2]
        d = dst(mc, li.ops[0], "b32", li)
        g = getter(mc, li.ops[1], "b16", li)

        def f3(m):
            v = np.asarray(g()).astype(u32)
            hi = fp.decode(v >> u32(8), fmt)
            lo = fp.decode(v & u32(0xFF), fmt)
            if relu:
                hi, lo = _relu(hi), _relu(lo)
            r = (fp.encode(hi, of).astype(u32) << u32(16)) | fp.encode(lo, of).astype(u32)
            put(d, m, bl(r, mc.L))
        return f3
    raise _err(li, f"cvt.{dt_}.{st} is not supported")


@op("cvta")
def _cvta(mc, li):
    mods = Mods(li)
    to = mods.has("to")
    space = mods.take("shared", "local", "global", "const", "param", "shared::cta", "shared::cluster")
    t = mods.type1({"u32", "u64"})
    mods.done()
    if space is None:
        raise _err(li, "cvta needs a state space")
    space = space.split("::")[0]
    win = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "global": 0, "const": 0, "param": PARAM_WINDOW}[space]
    d = dst(mc, li.ops[0], t, li)
    a = li.ops[1]
    if isinstance(a, SymRef):
        _sp, val = mc.sym_value(a)
        if to:
            raise _err(li, "cvta.to of a variable")
        c = UINT[TYPE_SIZES[t]]((val + win) & ((1 << (8 * TYPE_SIZES[t])) - 1))
        return lambda m: put(d, m, c)
    g = getter(mc, a, t, li)
    size = TYPE_SIZES[t]
    mask = (1 << (8 * size)) - 1
    w = UINT[size](win & mask) if size == 8 else UINT[size](0)

    def f(m):
        v = np.asarray(g())
        if space in ("global", "const") or size == 4:
            put(d, m, v)
        elif to:
            put(d, m, v - w)
        else:
            put(d, m, v + w)
    return f


@op("isspacep")
def _isspacep(mc, li):
    mods = Mods(li)
    space = mods.take("shared", "local", "global", "const", "param", "shared::cta", "shared::cluster")
    mods.done()
    if space is None:
        raise _err(li, "isspacep needs a state space")
    space = space.split("::")[0]
    d = dst(mc, li.ops[0], "pred", li)
    g = getter(mc, li.ops[1], "u64", li)
    want = {"global": 0, "const": 0, "shared": 1, "local": 2, "param": 3}[space]

    def f(m):
        put(d, m, (np.asarray(g()) >> u64(60)) == u64(want))
    return f


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


def _ldst_mods(li, name: str):
    """ld/st modifiers: (state space, type, vector length, element size); checks the operand count."""
    mods = Mods(li)
    space = _space(mods)
    mods.ignore(*_CACHE_MODS)
    hint = mods.has("L2::cache_hint")
    vec = mods.take("v2", "v4", "v8")
    t = mods.type1()
    mods.done()
    nvec = int(vec[1:]) if vec else 1
    esize = TYPE_SIZES[t]
    if esize > 8:
        raise _err(li, f"{name}.{t} (128-bit registers) is not supported")
    check_nops(li, 2 + (1 if hint else 0))
    return space, t, nvec, esize


@op("ld", "ldu")
def _ld(mc, li):
    space, t, nvec, esize = _ldst_mods(li, "ld")
    d, a = li.ops[0], li.ops[1]
    dsts = list(d.items) if isinstance(d, Vec) else [d]
    if len(dsts) != nvec:
        raise _err(li, f"ld.v{nvec} with {len(dsts)} destinations")
    rows = [dst(mc, x, t, li) for x in dsts]
    sym_space, afn = address_fn(mc, a, li)
    if space == "param" and sym_space == "local":
        space = "local"       # call-sequence parameters live in the thread's local memory
    elif sym_space is not None and space == "generic":
        if sym_space in ("shared", "local", "param"):
            raise _err(li, f"generic access through the name of a .{sym_space} variable")
        space = sym_space
    elif sym_space is not None and sym_space != space and not (space == "const" and sym_space == "global"):
        raise _err(li, f"ld.{space} of a .{sym_space} variable")
    dt = NPDT[t]
    storage = UINT[esize] if t in ("bf16", "f16x2", "bf16x2", "tf32") else dt

    # uniform kernel-parameter loads: a constant broadcast
    if space == "param" and isinstance(a.base, SymRef):
        off = mc.sym_value(a.base)[1] + a.offset
        raw = mc.kparam[off:off + esize * nvec]
        if len(raw) != esize * nvec or off + esize * nvec > mc.prog.kparam_size:
            raise _err(li, "parameter load past the end of the parameter space")
        vals = raw.view(dt)
        consts = [dt(v) for v in vals]

        def fparam(m):
            for r, c in zip(rows, consts):
                put(r, m, c)
        return fparam

    def f(m):
        idx, full = _lanes(mc, m)
        if len(idx) == 0:
            return
        addr = afn(idx, full)
        v = mc.load(space, addr, idx, esize, storage, nvec, li)
        if nvec == 1:
            r = rows[0]
            if r is None:
                return
            if full:
                np.copyto(r, v, casting="unsafe")
            else:
                r[idx] = v
        else:
            for k, r in enumerate(rows):
                if r is None:
                    continue
                if full:
                    np.copyto(r, v[:, k], casting="unsafe")
                else:
                    r[idx] = v[:, k]
    return f


@op("st")
def _st(mc, li):
    space, _t, nvec, esize = _ldst_mods(li, "st")
    a, s = li.ops[0], li.ops[1]
    srcs = list(s.items) if isinstance(s, Vec) else [s]
    if len(srcs) != nvec:
        raise _err(li, f"st.v{nvec} with {len(srcs)} sources")
    storage = UINT[esize]
    st_t = {1: "b8", 2: "b16", 4: "b32", 8: "b64"}[esize]
    gs = [getter(mc, x, st_t, li) for x in srcs]
    statics = [src(mc, x, st_t, li) for x in srcs]
    sym_space, afn = address_fn(mc, a, li)
    if sym_space is not None and space == "generic":
        space = sym_space
    elif sym_space is not None and sym_space != space and not (space == "param" and sym_space == "local"):
        raise _err(li, f"st.{space} of a .{sym_space} variable")
    if space == "param":
        if isinstance(a.base, SymRef) and a.base.kind == "kparam":
            raise _err(li, "store to a kernel parameter")
        space = "local"


    def f(m):
        idx, full = _lanes(mc, m)
        if len(idx) == 0:
            return
        addr = afn(idx, full)
        if nvec == 1:
            v = statics[0] if statics[0] is not None else gs[0]()
            v = np.asarray(v)
            if v.ndim == 0:
                v = np.full(len(idx), v, dtype=storage)
            elif not full:
                v = v[idx]
            mc.store(space, addr, idx, esize, storage, 1, v.astype(storage, copy=False), li)
        else:
            v = np.empty((len(idx), nvec), dtype=storage)
            for k, (g, s_) in enumerate(zip(gs, statics)):
                x = np.asarray(s_ if s_ is not None else g())
                v[:, k] = x if x.ndim == 0 else (x if full else x[idx])
            mc.store(space, addr, idx, esize, storage, nvec, v, li)
    return f


@op("prefetch", "prefetchu", "applypriority", "discard", "createpolicy")
def _prefetch(mc, li):
    mods = Mods(li)
    if mods.base == "createpolicy":
        d = dst(mc, li.ops[0], "b64", li)
        return lambda m: put(d, m, u64(0))
    return lambda m: None


# ---------------------------------------------------------------------------- atomics


_ATOM_OPS = {"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"}


@op("atom", "red")
def _atom(mc, li):
    mods = Mods(li)
    space = _space(mods)
    mods.ignore("relaxed", "acquire", "release", "acq_rel", "sys", "gpu", "cta", "cluster", "noftz",
                "L2::cache_hint", "sem", "scope")
    aop = mods.take(*_ATOM_OPS)
    vec = mods.take("v2", "v4", "v8")
    t = mods.type1({"b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2"})
    mods.done()
    if aop is None:
        raise _err(li, f"{li.opcode}: missing operation")
    if vec:
        raise _err(li, "vector atomics are not supported")
    is_red = mods.base == "red"
    nsrc = 2 if aop == "cas" else 1
    check_nops(li, (1 if is_red else 2) + nsrc)
    ops = li.ops
    d = None if is_red else dst(mc, ops[0], t if t not in ("f16x2", "bf16x2") else "b32", li)
    a = ops[0] if is_red else ops[1]
    srcs = ops[1:] if is_red else ops[2:]
    esize = TYPE_SIZES[t]
    vt = t if t not in ("bf16", "f16x2", "bf16x2") else {2: "b16", 4: "b32"}[esize]
    gs = [getter(mc, x, vt, li) for x in srcs]
    sym_space, afn = address_fn(mc, a, li)
    if sym_space is not None and space == "generic":
        space = sym_space
    storage = UINT[esize]
    dt = NPDT[vt]

    def combine(old, v, c2):
        """New memory value from the old one (arrays of storage dtype)."""
        if aop == "exch":
            return v
        if aop == "cas":
            return np.where(old == v, c2, old)
        if aop in ("and", "or", "xor"):
            return {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[aop](old, v)
        if t in ("f32", "f64"):
            o = old.view(NPDT[t])
            x = v.view(NPDT[t])
            if aop == "add":
                r = (o + x).astype(NPDT[t])
            elif aop == "min":
                r = _minmax_vals(o.astype(f64), x.astype(f64), False, False, False).astype(NPDT[t])
            else:
                r = _minmax_vals(o.astype(f64), x.astype(f64), True, False, False).astype(NPDT[t])
            return r.view(storage)
        if t in ("f16", "bf16", "f16x2", "bf16x2"):
            fmt = "f16" if t.startswith("f16") else "bf16"
            o = old.view(u16)
            x = v.view(u16)
            ov, xv = fp.decode(o, fmt), fp.decode(x, fmt)
            if aop == "add":
                r = fp.round_fmt(ov + xv, fmt, "rn")
            else:
                r = _minmax_vals(ov, xv, aop == "max", False, False)
            return fp.encode(r, fmt).view(storage)
        signed = t[0] == "s"
        o = old.view(SINT[esize]) if signed else old
        x = v.view(SINT[esize]) if signed else v
        if aop == "add":
            return (o + x).view(storage)
        if aop == "min":
            return np.minimum(o, x).view(storage)
        if aop == "max":
            return np.maximum(o, x).view(storage)
        if aop == "inc":
            return np.where(old >= v, storage(0), old + storage(1))
        if aop == "dec":
            return np.where((old == 0) | (old > v), v, old - storage(1))
        raise ValueError(aop)

    def f(m):
        idx, full = _lanes(mc, m)
        n = len(idx)
        if n == 0:
            return
        addr = afn(idx, full)
        vals = []
        for g in gs:
            x = np.asarray(g())
            x = np.full(n, x) if x.ndim == 0 else (x if full else x[idx])
            vals.append(np.ascontiguousarray(x).astype(dt, copy=False).view(storage))
        groups = mc.resolve(space, addr, idx, esize, True, li)
        old_all = np.empty(n, dtype=storage)
        for buf, off, sel in groups:
            view = buf.view(storage)
            e = off >> {1: 0, 2: 1, 4: 2, 8: 3}[esize]
            s = np.arange(n) if sel is None else sel
            v0 = vals[0][s]
            v1 = vals[1][s] if len(vals) > 1 else None
            # serialise lanes that hit the same address: apply rank by rank (lane order)
            order = np.argsort(e, kind="stable")
            es = e[order]
            start = np.r_[True, es[1:] != es[:-1]]
            grp = np.cumsum(start) - 1
            first = np.flatnonzero(start)
            rank = np.arange(len(es)) - first[grp]
            olds = np.empty(len(es), dtype=storage)
            if aop == "add" and t[0] in "us" and len(es):
                vv = v0[order].astype(u64)
                cs = np.cumsum(vv)
                base_cs = (cs - vv)[first][grp]
                excl = cs - vv - base_cs
                memv = view[es].astype(u64)
                olds = (memv + excl).astype(storage)
                tot_idx = np.r_[first[1:], len(es)] - 1
                view[es[first]] = (view[es[first]].astype(u64) + cs[tot_idx] - base_cs[first]).astype(storage)
            else:
                for r in range(int(rank.max()) + 1 if len(rank) else 0):
                    sel_r = np.flatnonzero(rank == r)
                    ee = es[sel_r]
                    cur = view[ee].copy()
                    olds[sel_r] = cur
                    lanes_r = order[sel_r]
                    view[ee] = combine(cur, v0[lanes_r], None if v1 is None else v1[lanes_r])
            res = np.empty(len(es), dtype=storage)
            res[order] = olds
            old_all[s] = res
        if d is not None:
            out = old_all.view(dt) if dt != storage else old_all
            if full:
                np.copyto(d, out, casting="unsafe")
            else:
                d[idx] = out
    return f


# ============================================================================ control / sync


def build_barrier(mc, li):
    """(id_fn, count_fn, mode, li) for bar.sync / bar.arrive / barrier.sync."""
    mods = Mods(li)
    mods.ignore("aligned", "cta")
    mode = mods.take("sync", "arrive", "red")
    if mods.base == "bar" and mode is None and not mods.parts:
        mode = "sync"
    if mode is None:
        raise _err(li, f"{li.opcode} is not supported")
    if mode == "red":
        raise _err(li, "bar.red is not supported")
    mods.done()
    if li.pred is not None:
        raise _err(li, "predicated barriers are not supported")
    ops = li.ops
    if not ops:
        if mods.base == "barrier" and mode == "sync":
            ops = [Imm(0)]
        else:
            raise _err(li, "barrier without an id")
    if len(ops) > 2:
        raise _err(li, f"{li.opcode} takes at most 2 operands")

    def val_fn(o):
        if isinstance(o, Imm):
            c = int(o.value)
            return lambda mm: c
        g = getter(mc, o, "u32", li)

        def fn(mm):
            v = np.asarray(g())
            return v.astype(np.int64) if v.ndim == 0 else v[mm].astype(np.int64)
        return fn
    idf = val_fn(ops[0])
    if isinstance(ops[0], Imm) and not 0 <= ops[0].value < 16:
        raise _err(li, "barrier id must be in 0..15")
    cntf = val_fn(ops[1]) if len(ops) == 2 else None
    if mode == "arrive" and cntf is None:
        raise _err(li, "bar.arrive requires a thread count")
    return (idf, cntf, mode, li)


@op("membar", "fence", "griddepcontrol", "setmaxnreg", "pmevent")
def _nop(mc, li):
    """Memory fences and scheduling hints: the emulator has one sequentially consistent memory."""
    return lambda m: None


@op("nanosleep")
def _nanosleep(mc, li):
    return lambda m: None


@op("trap", "brkpt")
def _trap(mc, li):
    def f(m):
        raise_trap(mc, li, m)
    return f


@op("exit", "ret", "bra")
def _control_in_body(mc, li):  # pragma: no cover - control instructions end blocks
    raise _err(li, f"{li.opcode} in straight-line code")


# ============================================================================ warp-level


_LANE_BITS = np.uint64(1) << np.arange(32, dtype=np.uint64)


def _ballot(lanes):
    """Per warp, the 32-bit mask of the lanes set in the boolean lane array `lanes` (as uint64)."""
    return (lanes.reshape(-1, 32).astype(np.uint64) * _LANE_BITS).sum(1).astype(np.uint64)


def _warp_check(mc, li, mm, membermask):
    """Every lane named in the member mask of a warp with active lanes must be active; returns warp ballots."""
    W = mm.reshape(-1, 32)
    ballot = _ballot(W)
    active_w = W.any(1)
    mask = np.asarray(membermask)
    if mask.ndim == 0:
        mw = np.full(W.shape[0], np.uint64(int(mask) & 0xFFFFFFFF))
    else:
        # each active lane carries a member mask; they must agree within a warp
        mk = mask.astype(np.uint64).reshape(-1, 32)
        first = np.argmax(W, axis=1)
        mw = mk[np.arange(W.shape[0]), first]
        bad = W & (mk != mw[:, None])
        if bad.any():
            lane = int(np.flatnonzero(bad.reshape(-1))[0])
            e = ConvergenceError(f"{li.opcode}: lanes of a warp use different member masks",
                                 line=li.line, text=li.text, kernel=mc.prog.kernel)
            e.lane = lane
            raise e
    bad = active_w & (ballot != mw)
    if bad.any():
        w = int(np.flatnonzero(bad)[0])
        lane = w * 32 + int(np.argmax(W[w]))
        missing = int(mw[w]) & ~int(ballot[w]) & 0xFFFFFFFF
        extra = int(ballot[w]) & ~int(mw[w]) & 0xFFFFFFFF
        what = []
        if missing:
            what.append(f"lanes {_lanes_str(missing)} named in the member mask {int(mw[w]):#010x} are not "
                        f"converged with it (inactive, exited or diverged)")
        if extra:
            what.append(f"lanes {_lanes_str(extra)} execute it but are not in the member mask")
        e = ConvergenceError(f"{li.opcode}: " + "; ".join(what), line=li.line, text=li.text,
                             kernel=mc.prog.kernel)
        e.lane = lane
        raise e
    return W, ballot, mw


def _lanes_str(bits: int) -> str:
    ls = [i for i in range(32) if bits >> i & 1]
    if len(ls) > 6:
        return ",".join(map(str, ls[:6])) + ",..."
    return ",".join(map(str, ls))


def _aligned_check(mc, li, mm):
    """`.aligned` warp instructions: all 32 lanes of every warp with an active lane must execute it."""
    _warp_check(mc, li, mm, np.uint64(0xFFFFFFFF))


@op("shfl")
def _shfl(mc, li):
    mods = Mods(li)
    sync = mods.has("sync")
    mode = mods.take("up", "down", "bfly", "idx")
    mods.type1({"b32"})
    mods.done()
    if not sync:
        raise _err(li, "shfl without .sync is not supported")
    if mode is None:
        raise _err(li, "shfl needs a mode")
    check_nops(li, 5)
    d, p = _dst_pair(mc, li, "b32", "pred")
    ga = getter(mc, li.ops[1], "b32", li)
    gb = getter(mc, li.ops[2], "b32", li)
    gc = getter(mc, li.ops[3], "b32", li)
    gm = getter(mc, li.ops[4], "b32", li)
    lane = mc.sp["%laneid"].astype(np.int64)
    L = mc.L
    base = (np.arange(L, dtype=np.int64) // 32) * 32

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        _warp_check(mc, li, mm, gm())
        a = bl(np.asarray(ga()), L)
        b = bl(np.asarray(gb()), L).astype(np.int64)
        c = bl(np.asarray(gc()), L).astype(np.int64)
        segmask = (c >> 8) & 0x1F
        cval = c & 0x1F
        maxlane = (lane & segmask) | (cval & ~segmask)
        minlane = lane & segmask
        if mode == "up":
            j = lane - b
            pv = j >= maxlane
        elif mode == "down":
            j = lane + b
            pv = j <= maxlane
        elif mode == "bfly":
            j = lane ^ b
            pv = j <= maxlane
        else:
            j = minlane | (b & 0x1F & ~segmask)
            pv = j <= maxlane
        j = np.where(pv, j, lane)
        srcl = base + (j & 31)
        if not mm[srcl[mm]].all():
            bad = mm & ~mm[srcl]
            k = int(np.argmax(bad))
            e = ConvergenceError(f"{li.opcode}: lane {int(lane[k])} reads lane {int(j[k] & 31)}, which does not "
                                 f"execute the shuffle", line=li.line, text=li.text, kernel=mc.prog.kernel)
            e.lane = k
            raise e
        put(d, m, a[srcl])
        if p is not None:
            put(p, m, pv)
    return f


@op("vote")
def _vote(mc, li):
    mods = Mods(li)
    sync = mods.has("sync")
    mode = mods.take("all", "any", "uni", "ballot")
    t = mods.type1({"pred", "b32"})
    mods.done()
    if not sync:
        raise _err(li, "vote without .sync is not supported")
    check_nops(li, 3)
    d = dst(mc, li.ops[0], t, li)
    gp = getter(mc, li.ops[1], "pred", li)
    gm = getter(mc, li.ops[2], "b32", li)
    L = mc.L

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        _w, ballot, _mw = _warp_check(mc, li, mm, gm())
        pv = bl(np.asarray(gp()), L) & mm
        pb = _ballot(pv)
        if mode == "ballot":
            r = np.repeat(pb.astype(u32), 32)
        elif mode == "all":
            r = np.repeat(pb == ballot, 32)
        elif mode == "any":
            r = np.repeat(pb != 0, 32)
        else:
            r = np.repeat((pb == 0) | (pb == ballot), 32)
        put(d, m, r)
    return f


@op("activemask")
def _activemask(mc, li):
    mods = Mods(li)
    mods.type1({"b32"})
    mods.done()
    d = dst(mc, li.ops[0], "b32", li)

    def f(m):
        mm = full_mask(mc, m)
        b = _ballot(mm).astype(u32)
        put(d, m, np.repeat(b, 32))
    return f


@op("match")
def _match(mc, li):
    mods = Mods(li)
    mods.has("sync")
    mode = mods.take("any", "all")
    t = mods.type1({"b32", "b64"})
    mods.done()
    d, p = _dst_pair(mc, li, "b32", "pred")
    ga = getter(mc, li.ops[1], t, li)
    gm = getter(mc, li.ops[2], "b32", li)
    L = mc.L

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        W, ballot, _mw = _warp_check(mc, li, mm, gm())
        a = bl(np.asarray(ga()), L).reshape(-1, 32)
        eq = (a[:, :, None] == a[:, None, :]) & W[:, None, :]
        same = (eq.astype(np.uint64) * _LANE_BITS[None, None, :]).sum(2).astype(np.uint64)
        if mode == "any":
            r = same.reshape(-1).astype(u32)
            put(d, m, r)
        else:
            allsame = same == ballot[:, None]
            r = np.where(allsame, ballot[:, None], 0).reshape(-1).astype(u32)
            put(d, m, r)
            if p is not None:
                put(p, m, allsame.reshape(-1))
    return f


@op("redux")
def _redux(mc, li):
    mods = Mods(li)
    mods.has("sync")
    rop = mods.take("add", "min", "max", "and", "or", "xor")
    absm = mods.has("abs")
    nan = mods.has("NaN")
    t = mods.type1({"u32", "s32", "b32", "f32"})
    mods.done()
    d = dst(mc, li.ops[0], t, li)
    ga = getter(mc, li.ops[1], t, li)
    gm = getter(mc, li.ops[2], "b32", li)
    L = mc.L

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        W, _ballot, _mw = _warp_check(mc, li, mm, gm())
        a = bl(np.asarray(ga()), L).reshape(-1, 32)
        if t == "f32":
            v = a.astype(f64)
            if absm:
                v = np.abs(v)
            first = np.argmax(W, axis=1)
            r0 = v[np.arange(v.shape[0]), first]
            r = r0
            for k in range(32):
                r = np.where(W[:, k], _minmax_vals(r, v[:, k], rop == "max", nan, False), r)
            out = r.astype(f32)
            out = np.where(np.isnan(r), np.uint32(0x7FFFFFFF).view(f32), out)
        else:
            x = a.astype(i64) if t == "s32" else a.astype(u64)
            if rop == "add":
                r = np.where(W, x, 0).sum(1)
            elif rop == "min":
                r = np.where(W, x, np.iinfo(x.dtype).max).min(1)
            elif rop == "max":
                r = np.where(W, x, np.iinfo(x.dtype).min).max(1)
            elif rop == "and":
                r = np.bitwise_and.reduce(np.where(W, x, ~np.zeros_like(x)), axis=1)
            elif rop == "or":
                r = np.bitwise_or.reduce(np.where(W, x, 0), axis=1)
            else:
                r = np.bitwise_xor.reduce(np.where(W, x, 0), axis=1)
            out = (r & 0xFFFFFFFF).astype(u32) if t != "s32" else (r & 0xFFFFFFFF).astype(u32).view(i32)
        put(d, m, np.repeat(out, 32))
    return f


@op("elect")
def _elect(mc, li):
    mods = Mods(li)
    mods.has("sync")
    mods.done()
    d, p = _dst_pair(mc, li, "b32", "pred")
    gm = getter(mc, li.ops[1], "b32", li)


    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        W, _ballot, _mw = _warp_check(mc, li, mm, gm())
        leader = np.argmax(W, axis=1)
        put(d, m, np.repeat(leader.astype(u32), 32))
        if p is not None:
            put(p, m, (mc.sp["%laneid"].reshape(-1, 32) == leader[:, None]).reshape(-1))
    return f


@op("bar")
def _bar_warp(mc, li):
    mods = Mods(li)
    if mods.take("warp"):
        mods.has("sync")
        mods.done()
        gm = getter(mc, li.ops[0], "b32", li)

        def f(m):
            mm = full_mask(mc, m)
            if mm.any():
                _warp_check(mc, li, mm, gm())
        return f
    raise _err(li, f"{li.opcode} inside straight-line code")


# ---------------------------------------------------------------------------- mma / ldmatrix


def _frag_a(shape, atype):
    """[(reg, element, row_fn(g,t), col_fn(g,t))] for operand A of mma.sync (row-major)."""
    m, n, k = shape
    if atype in ("f16", "bf16"):
        if k == 16:
            out = []
            for i in range(8):
                r, e = divmod(i, 2)
                out.append((r, e, lambda g, t, i=i: g + 8 * ((i // 2) % 2),
                            lambda g, t, i=i: 2 * t + (i % 2) + 8 * (i // 4)))
            return out, 2
        if k == 8:
            return [(i // 2, i % 2, lambda g, t, i=i: g + 8 * (i // 2), lambda g, t, i=i: 2 * t + i % 2)
                    for i in range(4)], 2
    if atype == "tf32":
        if k == 8:
            return [(i, 0, lambda g, t, i=i: g + 8 * (i % 2), lambda g, t, i=i: t + 4 * (i // 2))
                    for i in range(4)], 1
        if k == 4:
            return [(i, 0, lambda g, t, i=i: g + 8 * i, lambda g, t, i=i: t) for i in range(2)], 1
    if atype in ("s8", "u8", "e4m3", "e5m2"):
        if k == 32:
            out = []
            for i in range(16):
                r, e = divmod(i, 4)
                out.append((r, e, lambda g, t, r=r: g + 8 * (r % 2), lambda g, t, r=r, e=e: 4 * t + e + 16 * (r // 2)))
            return out, 4
        if k == 16:
            out = []
            for i in range(8):
                r, e = divmod(i, 4)
                out.append((r, e, lambda g, t, r=r: g + 8 * r, lambda g, t, e=e: 4 * t + e))
            return out, 4
    if atype == "f64" and (m, n, k) == (8, 8, 4):
        return [(0, 0, lambda g, t: g, lambda g, t: t)], 1
    return None, None


def _frag_b(shape, btype):
    m, n, k = shape
    if btype in ("f16", "bf16"):
        if k == 16:
            return [(i // 2, i % 2, lambda g, t, i=i: 2 * t + i % 2 + 8 * (i // 2), lambda g, t: g)
                    for i in range(4)], 2
        if k == 8:
            return [(0, i, lambda g, t, i=i: 2 * t + i, lambda g, t: g) for i in range(2)], 2
    if btype == "tf32":
        if k == 8:
            return [(i, 0, lambda g, t, i=i: t + 4 * i, lambda g, t: g) for i in range(2)], 1
        if k == 4:
            return [(0, 0, lambda g, t: t, lambda g, t: g)], 1
    if btype in ("s8", "u8", "e4m3", "e5m2"):
        if k == 32:
            return [(i // 4, i % 4, lambda g, t, i=i: 4 * t + i % 4 + 16 * (i // 4), lambda g, t: g)
                    for i in range(8)], 4
        if k == 16:
            return [(0, i, lambda g, t, i=i: 4 * t + i, lambda g, t: g) for i in range(4)], 4
    if btype == "f64" and (m, n, k) == (8, 8, 4):
        return [(0, 0, lambda g, t: t, lambda g, t: g)], 1
    return None, None


def _frag_c(shape, ctype):
    m, n, _k = shape
    if (m, n) == (16, 8):
        if ctype in ("f32", "s32"):
            return [(i, 0, lambda g, t, i=i: g + 8 * (i // 2), lambda g, t, i=i: 2 * t + i % 2)
                    for i in range(4)], 1
        if ctype == "f16":
            return [(i, e, lambda g, t, i=i: g + 8 * i, lambda g, t, e=e: 2 * t + e)
                    for i in range(2) for e in range(2)], 2
    if (m, n) == (8, 8) and ctype == "f64":
        return [(i, 0, lambda g, t: g, lambda g, t, i=i: 2 * t + i) for i in range(2)], 1
    return None, None


def _frag_index(frag, rows, cols):
    """Arrays (reg, elem, row, col) over the 32 lanes for each fragment element."""
    lanes = np.arange(32)
    g, t = lanes >> 2, lanes & 3
    out = []
    for (r, e, rf, cf) in frag:
        out.append((r, e, np.asarray(rf(g, t)), np.asarray(cf(g, t))))
    return out


_FLAT_CACHE: dict = {}


def _frag_flat(which, shape, ty):
    """Flat index arrays (reg, elem, lane, row, col) of every fragment element of an mma operand."""
    key = (which, shape, ty)
    v = _FLAT_CACHE.get(key)
    if v is not None:
        return v
    frag, _ = {"a": _frag_a, "b": _frag_b, "c": _frag_c}[which](shape, ty)
    lanes = np.arange(32)
    g, t = lanes >> 2, lanes & 3
    R, E, LN, RW, CL = [], [], [], [], []
    for (r, e, rf, cf) in frag:
        R.append(np.full(32, r))
        E.append(np.full(32, e))
        LN.append(lanes)
        RW.append(np.broadcast_to(np.asarray(rf(g, t)), (32,)))
        CL.append(np.broadcast_to(np.asarray(cf(g, t)), (32,)))
    v = tuple(np.concatenate(x).astype(np.intp) for x in (R, E, LN, RW, CL))
    _FLAT_CACHE[key] = v
    return v


_PERM_CACHE: dict = {}


def _frag_perm(which, shape, ty):
    """(registers, elements per register, perm): matrix element (row-major) k lives at flat position
    perm[k] of the operand's fragments laid out as [register, lane, element]."""
    key = (which, shape, ty)
    v = _PERM_CACHE.get(key)
    if v is not None:
        return v
    _frag, per = {"a": _frag_a, "b": _frag_b, "c": _frag_c}[which](shape, ty)
    R, E, LN, RW, CL = _frag_flat(which, shape, ty)
    m, n, k = shape
    rows, cols = {"a": (m, k), "b": (k, n), "c": (m, n)}[which]
    perm = np.full(rows * cols, -1, dtype=np.intp)
    perm[RW * cols + CL] = R * 32 * per + LN * per + E
    nregs = int(R.max()) + 1
    assert (perm >= 0).all() and len(np.unique(perm)) == rows * cols == nregs * 32 * per, (which, shape, ty)
    v = (nregs, per, perm)
    _PERM_CACHE[key] = v
    return v


def _decode_mat(raw, ty):
    if ty == "f16":
        return raw.view(f16).astype(f64)
    if ty == "bf16":
        return (raw.astype(u32) << u32(16)).view(f32).astype(f64)
    return _decode_elems(raw, ty)


_ELEM_DT = {"f16": u16, "bf16": u16, "tf32": u32, "f32": u32, "f64": u64, "s8": u8, "u8": u8, "s32": u32,
            "e4m3": u8, "e5m2": u8}


def _decode_elems(raw, ty):
    if ty in ("f16", "bf16", "e4m3", "e5m2"):
        return fp.decode(raw, ty)
    if ty == "tf32":
        return (raw.astype(u32) & u32(0xFFFFE000)).view(f32).astype(f64)
    if ty == "f32":
        return raw.astype(u32).view(f32).astype(f64)
    if ty == "f64":
        return raw.astype(u64).view(f64)
    if ty == "s8":
        return raw.astype(u8).view(i8).astype(i64)
    if ty == "u8":
        return raw.astype(i64)
    if ty == "s32":
        return raw.astype(u32).view(i32).astype(i64)
    raise ValueError(ty)


@op("mma")
def _mma(mc, li):
    mods = Mods(li)
    if not (mods.has("sync") and mods.has("aligned")):
        raise _err(li, "mma requires .sync.aligned")
    shape = mods.take_prefix("m")
    if shape is None:
        raise _err(li, "mma without a shape")
    import re as _re
    mm_ = _re.match(r"m(\d+)n(\d+)k(\d+)$", shape)
    if not mm_:
        raise _err(li, f"bad mma shape .{shape}")
    M, N, K = (int(x) for x in mm_.groups())
    la = mods.take("row", "col")
    lb = mods.take("row", "col")
    satf = mods.has("satfinite")
    kind = mods.take_prefix("kind::")
    ts = []
    for i, p_ in enumerate(mods.parts):
        if not mods.used[i] and p_ in ("f16", "bf16", "tf32", "f32", "f64", "s8", "u8", "s32", "e4m3", "e5m2"):
            mods.used[i] = True
            ts.append(p_)
    mods.done()
    if kind is not None:
        raise _err(li, f"mma .{kind} is not supported")
    if la != "row" or lb != "col":
        raise _err(li, f"mma .{la}.{lb} layouts are not supported (only .row.col)")
    if len(ts) == 4:
        dty, aty, bty, cty = ts
    elif len(ts) == 2 and ts[0] == ts[1] == "f64":
        dty = aty = bty = cty = "f64"
    elif len(ts) == 3 and (ts[1], ts[2]) in (("s8", "s8"),):
        raise _err(li, "mma types")
    else:
        raise _err(li, f"mma types {ts} are not supported")
    fa, pa = _frag_a((M, N, K), aty)
    fb, pb = _frag_b((M, N, K), bty)
    fc, pc = _frag_c((M, N, K), cty)
    fd, pd = _frag_c((M, N, K), dty)
    if fa is None or fb is None or fc is None or fd is None:
        raise _err(li, f"mma shape .m{M}n{N}k{K} with types {ts} is not supported")
    check_nops(li, 4)
    D, A, B, C = li.ops
    regs = {}
    for nm, o, per, ty in (("d", D, pd, dty), ("a", A, pa, aty), ("b", B, pb, bty), ("c", C, pc, cty)):
        items = list(o.items) if isinstance(o, Vec) else [o]
        regw = 8 if ty == "f64" else 4
        rt = "b64" if regw == 8 else "b32"
        if nm == "d":
            regs[nm] = [dst(mc, x, rt, li) for x in items]
        else:
            regs[nm] = [getter(mc, x, rt, li) for x in items]
    L = mc.L
    nw = L // 32
    is_int = aty in ("s8", "u8")
    perms = {}
    for nm, ty, which in (("a", aty, "a"), ("b", bty, "b"), ("c", cty, "c"), ("d", dty, "c")):
        nregs, per, perm = _frag_perm(which, (M, N, K), ty)
        if nregs != len(regs[nm]):
            raise _err(li, f"mma: operand {nm} needs {nregs} registers, got {len(regs[nm])}")
        perms[nm] = (per, perm)

    def gather(nm, ty, rows, cols):
        gs = regs[nm]
        per, perm = perms[nm]
        raws = np.stack([bl(g(), L) for g in gs])                 # [nregs, lanes]
        x = raws.view(_ELEM_DT[ty]).reshape(len(gs), nw, 32 * per).transpose(1, 0, 2).reshape(nw, -1)
        return _decode_mat(x[:, perm], ty).reshape(nw, rows, cols)

    dregs = regs["d"]
    dper, dperm = perms["d"]
    dedt = _ELEM_DT[dty] if dty != "f16" else u16
    wd = u64 if dty == "f64" else u32
    nd = len(dregs)

    def f(m):
        if m is not True:
            if not m.any():
                return
            _aligned_check(mc, li, m)
        a = gather("a", aty, M, K)
        b = gather("b", bty, K, N)
        c = gather("c", cty, M, N)
        dv = np.matmul(a, b) + c
        if is_int:
            if satf:
                dv = np.clip(dv, -2 ** 31, 2 ** 31 - 1)
            enc = (dv & 0xFFFFFFFF).astype(u32)
        elif dty == "f32":
            enc = dv.astype(f32).view(u32)
        elif dty == "f64":
            enc = dv.view(u64)
        else:
            enc = fp.encode(fp.round_fmt(dv, "f16", "rn"), "f16")
        out = np.empty((nw, nd * 32 * dper), dtype=dedt)
        out[:, dperm] = enc.reshape(nw, -1)
        out = out.reshape(nw, nd, 32 * dper).transpose(1, 0, 2)
        for r, d in enumerate(dregs):
            if d is not None:
                put(d, m, out[r].reshape(-1).view(wd).view(d.dtype))
    return f


def _matrix_mods(li, name: str, unsupported: str):
    """ldmatrix/stmatrix modifiers: (number of 8x8 matrices, .trans, state space)."""
    mods = Mods(li)
    if not (mods.has("sync") and mods.has("aligned")):
        raise _err(li, f"{name} requires .sync.aligned")
    shape = mods.take("m8n8")
    num = mods.take("x1", "x2", "x4")
    trans = mods.has("trans")
    space = _space(mods)
    mods.type1({"b16"})
    mods.done()
    if shape is None or num is None:
        raise _err(li, f"{li.opcode} is not supported{unsupported}")
    return int(num[1:]), trans, space


def _matrix_address(mc, li, space: str, operand):
    """The address function of a matrix operand and its state space (a generic access through a named
    variable uses the variable's space)."""
    sym_space, afn = address_fn(mc, operand, li)
    if space == "generic" and sym_space is not None:
        space = sym_space
    return space, afn


@op("ldmatrix")
def _ldmatrix(mc, li):
    n, trans, space = _matrix_mods(li, "ldmatrix", " (only .m8n8.x1/.x2/.x4 .b16)")
    d = li.ops[0]
    items = list(d.items) if isinstance(d, Vec) else [d]
    if len(items) != n:
        raise _err(li, f"ldmatrix .x{n} needs {n} destination registers")
    rows = [dst(mc, x, "b32", li) for x in items]
    space, afn = _matrix_address(mc, li, space, li.ops[1])
    lane = np.arange(32)

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        _aligned_check(mc, li, mm)
        widx = np.flatnonzero(mm.reshape(-1, 32).any(1))
        # lanes providing row addresses: 8*i + r for matrix i
        prov = (widx[:, None] * 32 + np.arange(8 * n)[None, :]).reshape(-1)
        addr = afn(prov, False)
        rowsdata = mc.load(space, addr, prov, 2, u16, 8, li)          # [nw*8n, 8] b16 elements
        mat = rowsdata.reshape(len(widx), n, 8, 8)                     # warp, matrix, row, col
        g, t = lane >> 2, lane & 3
        lanes_all = (widx[:, None] * 32 + lane[None, :]).reshape(-1)
        for i, r in enumerate(rows):
            if r is None:
                continue
            if not trans:
                lo = mat[:, i, g, 2 * t]
                hi = mat[:, i, g, 2 * t + 1]
            else:
                lo = mat[:, i, 2 * t, g]
                hi = mat[:, i, 2 * t + 1, g]
            v = lo.astype(u32) | (hi.astype(u32) << u32(16))
            r[lanes_all] = v.reshape(-1)
    return f


@op("stmatrix")
def _stmatrix(mc, li):
    n, trans, space = _matrix_mods(li, "stmatrix", "")
    s = li.ops[1]
    items = list(s.items) if isinstance(s, Vec) else [s]
    gs = [getter(mc, x, "b32", li) for x in items]
    space, afn = _matrix_address(mc, li, space, li.ops[0])
    lane = np.arange(32)

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        _aligned_check(mc, li, mm)
        widx = np.flatnonzero(mm.reshape(-1, 32).any(1))
        nw = len(widx)
        g, t = lane >> 2, lane & 3
        mat = np.zeros((nw, n, 8, 8), dtype=u16)
        lanes_all = (widx[:, None] * 32 + lane[None, :])
        for i, gg in enumerate(gs):
            v = bl(np.asarray(gg()), mc.L)[lanes_all]      # [nw, 32]
            lo = (v & u32(0xFFFF)).astype(u16)
            hi = (v >> u32(16)).astype(u16)
            if not trans:
                mat[:, i, g, 2 * t] = lo
                mat[:, i, g, 2 * t + 1] = hi
            else:
                mat[:, i, 2 * t, g] = lo
                mat[:, i, 2 * t + 1, g] = hi
        prov = (widx[:, None] * 32 + np.arange(8 * n)[None, :]).reshape(-1)
        addr = afn(prov, False)
        mc.store(space, addr, prov, 2, u16, 8, mat.reshape(-1, 8), li)
    return f


# ---------------------------------------------------------------------------- cp.async / mbarrier


@op("cp")
def _cp(mc, li):
    mods = Mods(li)
    if not mods.has("async"):
        raise _err(li, f"{li.opcode} is not supported")
    if mods.has("commit_group"):
        mods.done()

        def commit(m):
            mm = full_mask(mc, m)
            for k, (lanes, dsts, data, seq) in enumerate(mc.cp_records):
                sel = mm[lanes] & (seq < 0)
                if sel.any():
                    seq[sel] = mc.cp_committed[lanes[sel]]
            mc.cp_committed[mm] += 1
        return commit
    if mods.has("wait_group"):
        mods.done()
        if not isinstance(li.ops[0], Imm):
            raise _err(li, "cp.async.wait_group needs an immediate")
        nkeep = li.ops[0].value
        return lambda m: mc._finish_cp_async(full_mask(mc, m), keep_groups=nkeep)
    if mods.has("wait_all"):
        mods.done()

        def wait_all(m):
            mm = full_mask(mc, m)
            for (lanes, dsts, data, seq) in mc.cp_records:
                sel = mm[lanes] & (seq < 0)
                if sel.any():
                    seq[sel] = mc.cp_committed[lanes[sel]]
            mc.cp_committed[mm] += 1
            mc._finish_cp_async(mm, keep_groups=0)
        return wait_all
    if mods.has("mbarrier"):
        mods.has("arrive")
        noinc = mods.has("noinc")
        _space(mods)
        mods.type1({"b64"})
        mods.done()
        _sym, afn = address_fn(mc, li.ops[0], li)

        def arrive(m):
            idx, full = _lanes(mc, m)
            if not len(idx):
                return
            mm = full_mask(mc, m)
            # the arrive-on triggers when every prior cp.async of the thread completes: complete them now
            mc._finish_cp_async(mm, keep_groups=None)
            if noinc:
                _mbar_arrive(mc, li, afn(idx, full), idx, np.ones(len(idx), dtype=np.int64))
        return arrive
    # the copy itself: cp.async.ca|cg.shared{::cta}.global{.L2::...} [dst], [src], cp-size{, src-size}{, policy}
    mods.take("ca", "cg")
    mods.ignore("shared", "shared::cta", "global", "L2::128B", "L2::256B", "L2::64B", "L2::cache_hint")
    if mods.has("bulk"):
        raise _err(li, "cp.async.bulk is not supported")
    mods.done()
    if len(li.ops) < 3:
        raise _err(li, "cp.async needs destination, source and size")
    _, dfn = address_fn(mc, li.ops[0], li)
    _, sfn = address_fn(mc, li.ops[1], li)
    if not isinstance(li.ops[2], Imm):
        raise _err(li, "cp.async size must be an immediate")
    size = li.ops[2].value
    if size not in (4, 8, 16):
        raise _err(li, f"cp.async size {size}")
    gsz = None
    if len(li.ops) >= 4 and not (len(li.ops) == 4 and "L2::cache_hint" in li.opcode):
        gsz = getter(mc, li.ops[3], "u32", li)

    def f(m):
        idx, full = _lanes(mc, m)
        if not len(idx):
            return
        da = dfn(idx, full)
        sa = sfn(idx, full)
        n = len(idx)
        if gsz is not None:
            ss = bl(np.asarray(gsz()), mc.L)
            ss = ss[idx].astype(np.int64) if ss.ndim else np.full(n, int(ss), np.int64)
        else:
            ss = np.full(n, size, np.int64)
        data = np.zeros((n, size), dtype=u8)
        # source bytes (src-size may be smaller: the rest is zero-filled)
        nz = ss > 0
        if nz.any():
            sel = np.flatnonzero(nz)
            full_sz = ss[sel] >= size
            if full_sz.all():
                data[sel] = mc.load("global", sa[sel], idx[sel], 1, u8, size, li) if size else data[sel]
            else:
                for k in sel:
                    cnt = int(min(ss[k], size))
                    data[k, :cnt] = mc.load("global", sa[k:k + 1], idx[k:k + 1], 1, u8, cnt, li)[0] \
                        if cnt > 1 else mc.load("global", sa[k:k + 1], idx[k:k + 1], 1, u8, 1, li)
        groups = mc.resolve("shared", da, idx, size, True, li)
        ph = np.empty(n, np.int64)
        for buf, off, sel in groups:
            if sel is None:
                ph[:] = off
            else:
                ph[sel] = off
        mc.cp_records.append((idx.copy(), ph, data, np.full(n, -1, np.int64)))
    return f


def _mbar_key(mc, li, addr, idx):
    groups = mc.resolve("shared", addr, idx, 8, True, li)
    ph = np.empty(len(idx), np.int64)
    for buf, off, sel in groups:
        if sel is None:
            ph[:] = off
        else:
            ph[sel] = off
    return ph


def _mbar_arrive(mc, li, addr, idx, counts, tx=None):
    ph = _mbar_key(mc, li, addr, idx)
    states = np.empty(len(idx), np.uint64)
    for key in np.unique(ph):
        sel = ph == key
        st = mc.mbar.get(int(key))
        if st is None:
            e = UnsupportedInstruction("mbarrier arrive on an uninitialised mbarrier", line=li.line, text=li.text,
                                       kernel=mc.prog.kernel)
            e.lane = int(idx[np.flatnonzero(sel)[0]])
            raise e
        states[sel] = st["phase"]
        if tx is not None:
            st["tx"] += int(tx[sel].sum())
        st["pending"] -= int(counts[sel].sum())
        _mbar_maybe_complete(mc, st)
    return states


def _mbar_maybe_complete(mc, st):
    if st["pending"] <= 0 and st["tx"] <= 0:
        st["phase"] += 1
        st["pending"] += st["expected"]
        st["tx"] = 0
        mc.sync_version += 1


@op("mbarrier")
def _mbarrier(mc, li):
    mods = Mods(li)
    what = mods.take("init", "arrive", "arrive_drop", "try_wait", "test_wait", "inval", "expect_tx",
                     "complete_tx", "pending_count")
    mods.ignore("shared", "shared::cta", "shared::cluster", "release", "acquire", "relaxed", "cta", "cluster",
                "noComplete")
    parity = mods.has("parity")
    expect = mods.has("expect_tx")
    mods.type1({"b64"})
    mods.done()
    if what is None:
        raise _err(li, f"{li.opcode} is not supported")
    ops = li.ops
    if what == "init":
        _, afn = address_fn(mc, ops[0], li)
        gc = getter(mc, ops[1], "u32", li)

        def init(m):
            idx, full = _lanes(mc, m)
            if not len(idx):
                return
            ph = _mbar_key(mc, li, afn(idx, full), idx)
            cnt = bl(np.asarray(gc()), mc.L)
            cnt = cnt[idx] if cnt.ndim else np.full(len(idx), int(cnt))
            for k, key in enumerate(ph):
                mc.mbar[int(key)] = {"phase": 0, "pending": int(cnt[k]), "expected": int(cnt[k]), "tx": 0}
        return init
    if what == "inval":
        _, afn = address_fn(mc, ops[0], li)

        def inval(m):
            idx, full = _lanes(mc, m)
            if len(idx):
                for key in _mbar_key(mc, li, afn(idx, full), idx):
                    mc.mbar.pop(int(key), None)
        return inval
    if what in ("arrive", "arrive_drop", "expect_tx"):
        # mbarrier.arrive{.expect_tx}.shared.b64 state, [addr]{, count|txcount}
        d = dst(mc, ops[0], "b64", li) if not isinstance(ops[0], Addr) else None
        k0 = 0 if isinstance(ops[0], Addr) else 1
        _, afn = address_fn(mc, ops[k0], li)
        gextra = getter(mc, ops[k0 + 1], "u32", li) if len(ops) > k0 + 1 else None
        only_tx = what == "expect_tx"

        def arrive(m):
            idx, full = _lanes(mc, m)
            if not len(idx):
                return
            ex = None
            if gextra is not None:
                ex = bl(np.asarray(gextra()), mc.L)
                ex = ex[idx].astype(np.int64) if ex.ndim else np.full(len(idx), int(ex), np.int64)
            if only_tx:
                ph = _mbar_key(mc, li, afn(idx, full), idx)
                for key in np.unique(ph):
                    st = mc.mbar[int(key)]
                    st["tx"] += int(ex[ph == key].sum())
                return
            if expect:
                counts = np.ones(len(idx), np.int64)
                st = _mbar_arrive(mc, li, afn(idx, full), idx, counts, tx=ex)
            else:
                counts = ex if ex is not None else np.ones(len(idx), np.int64)
                st = _mbar_arrive(mc, li, afn(idx, full), idx, counts)
            if what == "arrive_drop":
                for key in np.unique(_mbar_key(mc, li, afn(idx, full), idx)):
                    mc.mbar[int(key)]["expected"] -= int((_mbar_key(mc, li, afn(idx, full), idx) == key).sum())
            if d is not None:
                if full:
                    d[:] = st
                else:
                    d[idx] = st
        return arrive
    if what in ("try_wait", "test_wait"):
        p = dst(mc, ops[0], "pred", li)
        _, afn = address_fn(mc, ops[1], li)
        g = getter(mc, ops[2], "u32" if parity else "b64", li) if len(ops) > 2 else None

        def wait(m):
            idx, full = _lanes(mc, m)
            if not len(idx):
                return
            ph = _mbar_key(mc, li, afn(idx, full), idx)
            cur = np.empty(len(idx), np.int64)
            for key in np.unique(ph):
                st = mc.mbar.get(int(key))
                if st is None:
                    raise UnsupportedInstruction("mbarrier wait on an uninitialised mbarrier", line=li.line,
                                                 text=li.text, kernel=mc.prog.kernel)
                cur[ph == key] = st["phase"]
            v = bl(np.asarray(g()), mc.L)
            v = v[idx].astype(np.int64) if v.ndim else np.full(len(idx), int(v), np.int64)
            if parity:
                ok = (cur & 1) != (v & 1)
            else:
                ok = cur != v
            out = np.zeros(mc.L, bool)
            out[idx] = ok
            put(p, m, out)
            if not ok.all():
                mc.wait_failed = True
        return wait
    raise _err(li, f"{li.opcode} is not supported")
