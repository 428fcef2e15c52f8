"""Data movement and bitwise logic: mov (pack/unpack, special registers, symbols), and/or/xor/not/cnot, lop3,
selp, slct.
"""
from __future__ import annotations

import numpy as np

from .. import fp
from ..parser import TYPE_SIZES, Imm, Sink, Vec
from ..program import SymRef
from .core import NPDT, UINT, Mods, _err, bl, check_nops, dst, getter, op, put, simple, src, u32, ufunc2


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
