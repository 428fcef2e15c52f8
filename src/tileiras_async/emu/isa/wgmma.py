"""Hopper warpgroup MMA: wgmma.fence / commit_group / wait_group / mma_async (sm_90a).

`wgmma.mma_async.sync.aligned.m64nNkK.dtype.atype.btype d, a-desc|{a}, b-desc, scale-d{, imm-scale-a,
imm-scale-b{, imm-trans-a}, imm-trans-b}` is executed by the 128 threads of a warpgroup (four
consecutive warps of the CTA) together: D (64 x N) = A (64 x K) * B (K x N) + (scale-d ? D : 0).
A comes from shared memory through a matrix descriptor or from four registers per thread in the
m16nXk layout of `mma.sync` (warp w of the warpgroup holds rows 16w..16w+15); B always comes from
shared memory.  Descriptors follow `descriptors` (every swizzle mode, K- or MN-major through
imm-trans-a/b); imm-scale-a/b = -1 negate A/B.  D is distributed as CUTLASS's CLayout_64xN: register
i of thread t holds row 16*(t//32) + (t%32)//4 + 8*((i//2)%2), column 2*(t%4) + i%2 + 8*(i//4)
(.f16 accumulators: two consecutive elements per .f16x2 register).

Types: .f16/.bf16 (k16, .f16/.f32 accumulators), .tf32 (k8), .e4m3/.e5m2 (k32, .f16/.f32), .s8/.u8
(k32, .s32, .satfinite).  Products are exact in float64 and the sum is rounded once to the
accumulator format (the hardware's accumulation order is unspecified).

Asynchrony: the operands (shared memory and A registers) are read when the instruction issues; the
D registers are written when a `wgmma.wait_group` retires the instruction's group, so code that
reads the accumulators without waiting sees the old values, as it could on the GPU.  A later
wgmma that accumulates into the same registers chains onto the pending result (allowed by the ISA).
Groups are per thread: `commit_group` closes the thread's uncommitted wgmmas into a group;
`wait_group N` retires all but the N most recent groups.
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import ConvergenceError
from ..parser import FImm, Imm, Vec
from .core import (
    Mods, _err, bl, check_nops, commit_groups, dst, f16, f32, full_mask, getter, i64, on_batch_start, op,
    retired, u16, u32,
)
from .descriptors import DescriptorError, decode_wgmma_desc, load_operand
from .mma import _decode_elems, _frag_a, encode_accumulator

WARPGROUP = 128
ELEM_DT = {1: np.uint8, 2: np.uint16, 4: np.uint32}
K_OF = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}
DTYPES = {"f16": ("f16", "f32"), "bf16": ("f32",), "tf32": ("f32",), "e4m3": ("f16", "f32"), "e5m2": ("f16", "f32"),
          "s8": ("s32",), "u8": ("s32",)}
INT_N = {8, 16, 24} | set(range(32, 257, 16))


@on_batch_start
def _reset(mc) -> None:
    mc.wgmma_pending = []                          # issued, not yet retired (oldest first)
    mc.wgmma_shadow = {}                           # id(row) -> (values [L] u32, lanes with a pending value)
    mc.wgmma_committed = np.zeros(mc.L, np.int64)  # groups each thread has committed


# ---------------------------------------------------------------------------- layouts


def d_layout(n: int, dtype: str):
    """(registers, elements per register, perm): matrix element (row-major 64 x n) perm[p] is flat position
    p of the D fragments laid out as [register, thread of the warpgroup, element]."""
    per = 2 if dtype == "f16" else 1
    nregs = n * 64 // (WARPGROUP * per)
    t = np.arange(WARPGROUP)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    perm = np.empty((nregs, WARPGROUP, per), np.intp)
    for r in range(nregs):
        for e in range(per):
            i = r * per + e
            row = 16 * w + g + 8 * ((i // 2) % 2)
            col = 2 * q + i % 2 + 8 * (i // 4)
            perm[r, :, e] = row * n + col
    return nregs, per, perm.reshape(-1)


def a_layout(atype: str):
    """(registers, elements per register, perm) of A (64 x K, row-major) held in registers: the m16nXk
    A fragment of mma.sync, warp w of the warpgroup holding rows 16w..16w+15."""
    k = K_OF[atype]
    frag, per = _frag_a((16, 8, k), atype)
    nregs = max(r for r, *_ in frag) + 1
    t = np.arange(WARPGROUP)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    perm = np.empty((nregs, WARPGROUP, per), np.intp)
    for r, e, rf, cf in frag:
        perm[r, :, e] = (16 * w + rf(g, q)) * k + cf(g, q)
    return nregs, per, perm.reshape(-1)


def warpgroups(mc, li, mm) -> np.ndarray:
    """First lanes of the warpgroups with an active lane in `mm`; every thread of them must be active."""
    starts = np.unique((mc.lane[mm] // mc.Tp) * mc.Tp + ((mc.lane[mm] % mc.Tp) // WARPGROUP) * WARPGROUP)
    for s in starts:
        lanes = slice(int(s), int(s) + WARPGROUP)
        t0 = int(s) % mc.Tp
        if t0 + WARPGROUP > mc.Tp or not mm[lanes].all():
            e = ConvergenceError(f"{li.opcode}: all 128 threads of a warpgroup must execute it together "
                                 f"({int(mm[lanes].sum()) if t0 + WARPGROUP <= mc.Tp else 'the CTA has fewer'} "
                                 f"of them do)", line=li.line, text=li.text, kernel=mc.prog.kernel)
            e.lane = int(s)
            raise e
    return starts


def _uniform(mc, li, vals: np.ndarray, starts: np.ndarray, what: str) -> np.ndarray:
    """One value per warpgroup of a per-thread operand that must be the same in all its threads."""
    v = vals.reshape(len(starts), WARPGROUP)
    bad = (v != v[:, :1]).any(1)
    if bad.any():
        raise DescriptorError(f"{li.opcode}: the {what} differs between the threads of a warpgroup",
                              line=li.line, text=li.text, kernel=mc.prog.kernel)
    return v[:, 0]


# ---------------------------------------------------------------------------- pending results


def _current(mc, row) -> np.ndarray:
    """The value a wgmma reads from an accumulator register: its pending result where one exists."""
    sh = mc.wgmma_shadow.get(id(row))
    if sh is None:
        return row.view(u32)
    vals, has = sh
    return np.where(has, vals, row.view(u32))


def _record(mc, lanes, rows, vals) -> None:
    mc.wgmma_pending.append([lanes, rows, vals, np.full(len(lanes), -1, np.int64)])
    for r, row in enumerate(rows):
        sh = mc.wgmma_shadow.get(id(row))
        if sh is None:
            sh = (row.view(u32).copy(), np.zeros(mc.L, bool))
            mc.wgmma_shadow[id(row)] = sh
        sh[0][lanes] = vals[r]
        sh[1][lanes] = True


def _retire(mc, mm, keep: int) -> None:
    """Write the results of the groups the threads in `mm` wait for (all but the `keep` most recent)."""
    if not mc.wgmma_pending:
        return
    remaining = []
    for rec in mc.wgmma_pending:
        lanes, rows, vals, seq = rec
        done = retired(mm, mc.wgmma_committed, lanes, seq, keep)
        if done.any():
            for r, row in enumerate(rows):
                row.view(u32)[lanes[done]] = vals[r][done]
            if not done.all():
                rec[0], rec[2], rec[3] = lanes[~done], vals[:, ~done], seq[~done]
                remaining.append(rec)
        else:
            remaining.append(rec)
    mc.wgmma_pending = remaining
    mc.wgmma_shadow = {}
    for lanes, rows, vals, _seq in remaining:
        for r, row in enumerate(rows):
            sh = mc.wgmma_shadow.setdefault(id(row), (row.view(u32).copy(), np.zeros(mc.L, bool)))
            sh[0][lanes] = vals[r]
            sh[1][lanes] = True


# ---------------------------------------------------------------------------- instructions


@op("wgmma")
def _wgmma(mc, li):
    mods = Mods(li)
    what = mods.take("fence", "commit_group", "wait_group", "mma_async")
    if not (mods.has("sync") and mods.has("aligned")):
        raise _err(li, f"{li.opcode} requires .sync.aligned")
    if what == "mma_async":
        return _mma_async(mc, li, mods)
    mods.done()
    if what is None:
        raise _err(li, f"{li.opcode} is not supported")
    if what == "fence":
        check_nops(li, 0)

        def fence(m):
            mm = full_mask(mc, m)
            if mm.any():
                warpgroups(mc, li, mm)
        return fence
    if what == "commit_group":
        check_nops(li, 0)

        def commit(m):
            mm = full_mask(mc, m)
            if mm.any():
                warpgroups(mc, li, mm)
                commit_groups(mm, mc.wgmma_committed, ((r[0], r[3]) for r in mc.wgmma_pending))
        return commit
    check_nops(li, 1)
    if not isinstance(li.ops[0], Imm):
        raise _err(li, "wgmma.wait_group needs an immediate group count")
    keep = int(li.ops[0].value)

    def wait(m):
        mm = full_mask(mc, m)
        if mm.any():
            warpgroups(mc, li, mm)
            _retire(mc, mm, keep)
    return wait


def _imm(li, o, allowed, what):
    v = o.value if isinstance(o, (Imm, FImm)) else None
    if v not in allowed:
        raise _err(li, f"{li.opcode}: {what} must be an immediate in {sorted(allowed)}, got {o}")
    return int(v)


def _mma_async(mc, li, mods):
    if mods.has("sp"):
        raise _err(li, "sparse wgmma (.sp) is not supported")
    shape = mods.take_prefix("m64n")
    satf = mods.has("satfinite")
    ts = [p for i, p in enumerate(mods.parts) if not mods.used[i]]
    mods.ignore(*ts)
    mm_ = re.match(r"m64n(\d+)k(\d+)$", shape or "")
    if not mm_ or len(ts) != 3:
        raise _err(li, f"{li.opcode}: expected .m64nNkK.dtype.atype.btype")
    n, k = int(mm_.group(1)), int(mm_.group(2))
    dty, aty, bty = ts
    if aty not in K_OF or bty not in K_OF:
        raise _err(li, f"wgmma .{aty}.{bty} is not supported")
    is_int = aty in ("s8", "u8")
    if (bty in ("s8", "u8")) != is_int or (not is_int and aty[0] != "e" and aty != bty) \
            or (aty[0] == "e") != (bty[0] == "e"):
        raise _err(li, f"wgmma with .{aty} A and .{bty} B is not valid")
    if k != K_OF[aty] or dty not in DTYPES[aty]:
        raise _err(li, f"wgmma .m64n{n}k{k}.{dty}.{aty}.{bty} is not a valid shape/type combination")
    if n % 8 or not 8 <= n <= 256 or (is_int and n not in INT_N):
        raise _err(li, f"wgmma N={n} is not valid for .{aty}")
    if satf and not is_int:
        raise _err(li, ".satfinite is for the integer wgmma")
    a_in_regs = isinstance(li.ops[1], Vec)
    trans_ok = aty in ("f16", "bf16")
    nops = 4 if is_int else 6 + (trans_ok and not a_in_regs) + trans_ok
    check_nops(li, nops)
    ops = li.ops
    scale_a = scale_b = 1
    trans_a = trans_b = 0
    if not is_int:
        scale_a = _imm(li, ops[4], {1, -1}, "imm-scale-a")
        scale_b = _imm(li, ops[5], {1, -1}, "imm-scale-b")
        if trans_ok:
            trans_b = _imm(li, ops[-1], {0, 1}, "imm-trans-b")
            if not a_in_regs:
                trans_a = _imm(li, ops[6], {0, 1}, "imm-trans-a")
    nregs, per, dperm = d_layout(n, dty)
    d_items = list(ops[0].items) if isinstance(ops[0], Vec) else [ops[0]]
    if len(d_items) != nregs:
        raise _err(li, f"wgmma .m64n{n}.{dty} needs {nregs} D registers, got {len(d_items)}")
    drows = [dst(mc, x, "b32", li) for x in d_items]
    if any(r is None for r in drows):
        raise _err(li, "wgmma D registers cannot be sinks")
    if a_in_regs:
        anregs, aper, aperm = a_layout(aty)
        if len(ops[1].items) != anregs:
            raise _err(li, f"wgmma A in registers needs {anregs} registers, got {len(ops[1].items)}")
        ga = [getter(mc, x, "b32", li) for x in ops[1].items]
    else:
        ga = getter(mc, ops[1], "b64", li)
    gb = getter(mc, ops[2], "b64", li)
    sd = ops[3]
    gscale = (lambda: np.bool_(sd.value != 0)) if isinstance(sd, Imm) else getter(mc, sd, "pred", li)
    L = mc.L
    lane128 = np.arange(WARPGROUP)

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        starts = warpgroups(mc, li, mm)
        nwg = len(starts)
        lanes = (starts[:, None] + lane128[None, :]).reshape(-1)
        bdesc = _uniform(mc, li, bl(np.asarray(gb()), L)[lanes], starts, "B descriptor")
        b = load_operand(mc, li, decode_wgmma_desc, bdesc, starts, n, k, bty, bool(trans_b))  # [nwg,n,k]
        if a_in_regs:
            raws = np.stack([bl(np.asarray(g()), L)[lanes] for g in ga])           # [nregs, nwg*128]
            x = raws.view(ELEM_DT[4 // aper]).reshape(anregs, nwg, WARPGROUP * aper).transpose(1, 0, 2)
            a = np.empty((nwg, 64 * k), x.dtype)
            a[:, aperm] = x.reshape(nwg, -1)
            a = _decode_elems(a, aty).reshape(nwg, 64, k)
        else:
            adesc = _uniform(mc, li, bl(np.asarray(ga()), L)[lanes], starts, "A descriptor")
            a = load_operand(mc, li, decode_wgmma_desc, adesc, starts, 64, k, aty, bool(trans_a))
        scale_d = _uniform(mc, li, bl(np.asarray(gscale()), L)[lanes], starts, "scale-d predicate")
        prod = np.matmul(a, np.swapaxes(b, 1, 2))                                    # [nwg, 64, n]
        if scale_a * scale_b < 0:
            prod = -prod
        cur = np.stack([_current(mc, r)[lanes] for r in drows])                     # [nregs, nwg*128] u32
        cur = cur.reshape(nregs, nwg, WARPGROUP).transpose(1, 0, 2)
        c = np.empty((nwg, 64 * n), np.int64 if is_int else np.float64)
        if dty == "f16":
            c[:, dperm] = cur.copy().view(u16).reshape(nwg, -1).view(f16).astype(np.float64)
        elif is_int:
            c[:, dperm] = cur.reshape(nwg, -1).view(np.int32).astype(i64)
        else:
            c[:, dperm] = cur.reshape(nwg, -1).view(f32).astype(np.float64)
        c = c.reshape(nwg, 64, n) * scale_d[:, None, None]
        enc = encode_accumulator((prod + c).reshape(nwg, -1), dty, satf)
        vals = enc[:, dperm].reshape(nwg, nregs, WARPGROUP * per).transpose(1, 0, 2)
        vals = np.ascontiguousarray(vals).view(u32).reshape(nregs, nwg * WARPGROUP)
        _record(mc, lanes, drows, vals)
    return f
