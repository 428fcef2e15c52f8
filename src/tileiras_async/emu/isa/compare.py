"""Comparisons: setp (integer and float comparisons, .and/.or/.xor combining, p|q destinations, f16x2/bf16x2) and
set.
"""
from __future__ import annotations

import numpy as np

from .. import fp
from ..parser import TYPE_SIZES
from .core import (
    FLOAT_TYPES, NPDT, UINT, Mods, _dst_pair, _err, bl, check_nops, dst, getter, op, put, src, u16, u32,
)


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
