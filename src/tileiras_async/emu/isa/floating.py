"""Floating-point arithmetic: add sub mul fma mad div rcp sqrt (every rounding mode, .ftz, .sat, .relu), the
.approx functions, abs/neg/min/max, copysign, testp, on f32/f64/f16/bf16 and packed x2 formats; single
rounding through float64 (`fp`).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import fp
from ..parser import TYPE_SIZES
from .core import (
    NPDT, UINT, Mods, _err, bl, check_nops, dst, f16, f32, f64, getter, op, put, simple, src, u16, u32,
    u64,
)


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
