"""Memory: ld/ldu/st in every state space (vectors, cache qualifiers), prefetch-style hints, and atom/red (lanes
hitting one address are serialised in lane order).
"""
from __future__ import annotations

import numpy as np

from .. import fp
from ..parser import TYPE_SIZES, Vec
from ..program import SymRef
from .core import (
    NPDT, SINT, UINT, _CACHE_MODS, Mods, _err, _lanes, _space, address_fn, check_nops, dst, f64, getter,
    op, put, src, u16, u64,
)
from .floating import _minmax_vals


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
