"""Integer arithmetic: add/sub (.sat, .cc), addc/subc, mul/mad (.lo/.hi/.wide, .cc), mul24/mad24, div/rem,
abs/neg/min/max, bit manipulation (popc clz bfind brev bfe bfi prmt), shifts (shl shr shf), sad bmsk szext
dp4a dp2a.

Opcodes shared with floating point (add, mul, min, ...) dispatch to `floating` when a type modifier is a float
type.
"""
from __future__ import annotations

import numpy as np

from ..parser import TYPE_SIZES, Imm
from .core import (
    NPDT, SINT, UINT, Mods, _err, _has_float_type, bl, check_nops, dst, f64, getter, i16, i32, i64, i8,
    op, put, simple, src, u16, u32, u64, u8, ufunc2,
)
from .floating import _float_absneg, _float_arith, _float_minmax


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
