"""Conversions: cvt between every integer and float format (rounding modes, .sat, .satfinite, .relu, .ftz, packed
pairs, fp8/fp6/fp4), cvta and isspacep.
"""
from __future__ import annotations

import numpy as np

from .. import fp
from ..memory import LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW
from ..parser import TYPE_SIZES
from ..program import SymRef
from .core import (
    NPDT, SINT, UINT, Mods, _err, bl, check_nops, dst, f32, f64, getter, i64, op, put, src, u16, u32, u64,
)
from .floating import _post, _relu, _store_fmt, _vals


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
