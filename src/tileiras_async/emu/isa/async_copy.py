"""Asynchronous copies: cp.async with commit/wait groups (copies land at the wait) and
cp.async.mbarrier.arrive.
"""
from __future__ import annotations

import numpy as np

from ..parser import Imm
from .core import Mods, _err, _lanes, _space, address_fn, bl, commit_groups, full_mask, getter, op, u8
from .bulk_copy import build_bulk
from .tensor_copy import build_tensor
from .mbarrier import mbar_arrive, mbar_keys


@op("cp")
def _cp(mc, li):
    mods = Mods(li)
    if mods.has("reduce"):
        raise _err(li, "cp.reduce.async.bulk is not supported")
    if not mods.has("async"):
        raise _err(li, f"{li.opcode} is not supported")
    if mods.has("bulk"):
        return build_tensor(mc, li, mods) if mods.has("tensor") else build_bulk(mc, li, mods)
    if mods.has("commit_group"):
        mods.done()

        def commit(m):
            commit_groups(full_mask(mc, m), mc.cp_committed, ((r[0], r[3]) for r in mc.cp_records))
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
            commit_groups(mm, mc.cp_committed, ((r[0], r[3]) for r in mc.cp_records))
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
                mbar_arrive(mc, li, mbar_keys(mc, li, afn(idx, full), idx), idx,
                            np.ones(len(idx), dtype=np.int64))
        return arrive
    # the copy itself: cp.async.ca|cg.shared{::cta}.global{.L2::...} [dst], [src], cp-size{, src-size}{, policy}
    mods.take("ca", "cg")
    mods.ignore("shared", "shared::cta", "global", "L2::128B", "L2::256B", "L2::64B", "L2::cache_hint")
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
