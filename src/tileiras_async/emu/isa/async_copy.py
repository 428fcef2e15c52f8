"""Asynchronous copies and mbarriers: cp.async with commit/wait groups (copies land at the wait),
cp.async.mbarrier.arrive, mbarrier init/arrive/expect_tx/try_wait/test_wait/inval.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedInstruction
from ..parser import Addr, Imm
from .core import Mods, _err, _lanes, _space, address_fn, bl, dst, full_mask, getter, op, put, u8


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
