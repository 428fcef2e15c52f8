"""Warp-level instructions: shfl.sync, vote.sync, activemask, match.sync, redux.sync, elect.sync, bar.warp.sync;
every named lane must be converged (`ConvergenceError`).
"""
from __future__ import annotations

import numpy as np

from ..errors import ConvergenceError
from .core import (
    Mods, _dst_pair, _err, bl, check_nops, dst, f32, f64, full_mask, getter, i32, i64, op, put, u32, u64,
)
from .floating import _minmax_vals


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
                if mc.races is not None:    # __syncwarp orders the named lanes' memory accesses
                    mc.races.warp_barrier(mm)
        return f
    raise _err(li, f"{li.opcode} inside straight-line code")
