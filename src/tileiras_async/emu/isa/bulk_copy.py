"""Bulk asynchronous copies (the non-tensor TMA forms, sm_90+).

* `cp.async.bulk.shared::cta|shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size,
  [mbar]` and the shared::cta -> shared::cluster form: `size` bytes (a multiple of 16, 16-byte
  aligned addresses) are read when the copy issues and land in shared memory -- delivering `size`
  transaction bytes to the mbarrier -- when a thread next waits on that mbarrier (or the CTA ends).
  Reading the destination before waiting sees the old bytes, as it may on the GPU.
* `cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size` with `cp.async.bulk.commit_group`
  and `cp.async.bulk.wait_group{.read} N`: the shared-memory source is read, and global memory
  written, when a wait retires the copy's group (or the CTA ends), so overwriting the source before
  `wait_group.read` changes what is written.
* `cp.async.bulk.prefetch.L2.global [src], size`: a hint (bounds-checked).

Multicast and byte masks are not modelled; `cp.async.bulk.tensor` is tensor_copy.py (its stores retire with
these bulk groups).
"""
from __future__ import annotations

import numpy as np

from ..parser import Imm
from .core import (
    _err, _lanes, _space, address_fn, bl, check_nops, commit_groups, full_mask, getter, on_batch_end,
    on_batch_start, retired, u8,
)
from .mbarrier import before_wait, mbar_keys, mbar_tx

_HINTS = ("L2::cache_hint", "level::cache_hint")


@on_batch_start
def _reset(mc) -> None:
    mc.bulk_in = []        # [mbarrier key, lanes, shared destinations, bytes, li] not yet delivered
    mc.bulk_out = []       # [lanes, global destinations, shared sources, size, group seq, li] not yet written
    mc.bulk_committed = np.zeros(mc.L, np.int64)


@on_batch_end
def _drain(mc) -> None:
    deliver_bulk(mc, None)
    _retire_out(mc, None, 0)


@before_wait
def deliver_bulk(mc, keys) -> None:
    """Land the pending bulk copies into shared memory whose mbarrier is in `keys` (all when None); with the
    race check on, each copy is a unit of its own, ordered after what its issuing thread did before the issue:
    its landing is a write (so bytes read since, unordered with it, race with it), and the bytes it delivers to
    the mbarrier are that unit's arrival."""
    if not mc.bulk_in:
        return
    keys = None if keys is None else set(np.asarray(keys).tolist())
    rest = []
    for rec in mc.bulk_in:
        key, lanes, dsts, data, li, clocks = rec
        if keys is not None and key not in keys:
            rest.append(rec)
            continue
        rows = None if mc.races is None else _landing_writes(mc, li, lanes, dsts, data, clocks)
        mc.shared[(dsts[:, None] + np.arange(data.shape[1])).reshape(-1)] = data.reshape(-1)
        mbar_tx(mc, li, np.full(len(lanes), key), lanes, np.full(len(lanes), data.shape[1]), complete=True,
                rows=rows)
    mc.bulk_in = rest


def issue_clocks(mc, lanes):
    """What the race check needs of copies issued now by `lanes`: the clocks they start from."""
    return None if mc.races is None else mc.races.issue(lanes)


def _landing_writes(mc, li, lanes, dsts, data, clocks) -> np.ndarray:
    """Race check: each lane's copy writes its bytes as a unit of its own; returns the units' clock rows."""
    races = mc.races
    name = "a tensor copy" if ".tensor" in li.opcode else "a bulk copy"
    rows = np.empty(len(lanes), np.int64)
    for j, lane in enumerate(lanes.tolist()):
        rows[j] = races.acting = races.copy_unit(lane, clocks[j], name)
        try:
            races.store(dsts[j:j + 1], lanes[j:j + 1], data.shape[1], li, mc, data[j:j + 1])
        finally:
            races.acting = None
    return rows


def _retire_out(mc, mm, keep: int) -> None:
    if not mc.bulk_out:
        return
    rest = []
    for rec in mc.bulk_out:
        lanes, gdst, ssrc, size, seq, li = rec
        done = np.ones(len(lanes), bool) if mm is None else retired(mm, mc.bulk_committed, lanes, seq, keep)
        if done.any() and hasattr(gdst, "write"):      # a tensor store (tensor_copy.py), one lane per record
            gdst.write(mc, int(lanes[0]), li)
        elif done.any():
            sel = np.flatnonzero(done)
            data = bulk_load(mc, "shared", ssrc[sel], lanes[sel], size, li)
            bulk_store(mc, "global", gdst[sel], lanes[sel], size, data, li)
            if not done.all():
                keep_ = ~done
                rest.append([lanes[keep_], gdst[keep_], ssrc[keep_], size, seq[keep_], li])
        else:
            rest.append(rec)
    mc.bulk_out = rest


def _chunks(addr, idx, n):
    """The 16-byte pieces of n-byte transfers (bulk copies need 16-byte alignment, not n-byte)."""
    k = n // 16
    return (addr[:, None] + np.arange(0, n, 16, dtype=np.uint64)[None, :]).reshape(-1), np.repeat(idx, k)


def bulk_load(mc, space, addr, idx, n, li) -> np.ndarray:
    a, i = _chunks(addr, idx, n)
    return mc.load(space, a, i, 1, u8, 16, li).reshape(len(idx), n)


def bulk_store(mc, space, addr, idx, n, data, li) -> None:
    a, i = _chunks(addr, idx, n)
    mc.store(space, a, i, 1, u8, 16, np.ascontiguousarray(data).reshape(-1, 16), li)


def _size(mc, li, g, idx):
    n = bl(np.asarray(g()), mc.L)[idx].astype(np.int64)
    bad = (n % 16 != 0) | (n <= 0)
    if bad.any():
        raise _err(li, f"bulk copy size {int(n[np.argmax(bad)])} is not a positive multiple of 16")
    if (n != n[0]).any():
        raise _err(li, "bulk copies of different sizes in one instruction are not supported")
    return int(n[0])


def build_bulk(mc, li, mods):
    """`cp.async.bulk...` (dispatched from the `cp` builder; `.tensor`: tensor_copy.py)."""
    if mods.has("commit_group"):
        mods.done()

        def commit(m):
            commit_groups(full_mask(mc, m), mc.bulk_committed, ((r[0], r[4]) for r in mc.bulk_out))
        return commit
    if mods.has("wait_group"):
        mods.has("read")
        mods.done()
        check_nops(li, 1)
        if not isinstance(li.ops[0], Imm):
            raise _err(li, "cp.async.bulk.wait_group needs an immediate")
        keep = int(li.ops[0].value)
        return lambda m: _retire_out(mc, full_mask(mc, m), keep)
    if mods.has("prefetch"):
        mods.take("L2")
        mods.take("global")
        mods.ignore(*_HINTS)
        mods.done()
        _, sfn = address_fn(mc, li.ops[0], li)
        gn = getter(mc, li.ops[1], "u32", li)

        def prefetch(m):
            idx, full = _lanes(mc, m)
            if len(idx):
                bulk_load(mc, "global", sfn(idx, full), idx, _size(mc, li, gn, idx), li)
        return prefetch
    dst_space = _space(mods, None)
    src_space = _space(mods, None)
    mods.ignore(*_HINTS)
    if mods.has("multicast::cluster") or mods.has("cp_mask"):
        raise _err(li, "multicast and byte-masked bulk copies are not supported")
    to_shared = mods.has("mbarrier::complete_tx::bytes")
    to_global = mods.has("bulk_group")
    mods.done()
    ops = li.ops
    if to_shared and dst_space == "shared" and src_space in ("global", "shared"):
        check_nops(li, 4, 5)
        _, dfn = address_fn(mc, ops[0], li)
        _, sfn = address_fn(mc, ops[1], li)
        gn = getter(mc, ops[2], "u32", li)
        _, bfn = address_fn(mc, ops[3], li)

        def copy_in(m):
            idx, full = _lanes(mc, m)
            if not len(idx):
                return
            n = _size(mc, li, gn, idx)
            data = bulk_load(mc, src_space, sfn(idx, full), idx, n, li)
            daddr = dfn(idx, full)
            mc.resolve("shared", *_chunks(daddr, idx, n), 16, True, li)     # bounds and alignment, now
            dsts = mc.shbase[idx] + daddr.astype(np.int64)
            keys = mbar_keys(mc, li, bfn(idx, full), idx)
            for key in np.unique(keys):
                sel = keys == key
                mc.bulk_in.append([int(key), idx[sel], dsts[sel], data[sel], li, issue_clocks(mc, idx[sel])])
        return copy_in
    if to_global and dst_space == "global" and src_space == "shared":
        check_nops(li, 3, 4)
        _, dfn = address_fn(mc, ops[0], li)
        _, sfn = address_fn(mc, ops[1], li)
        gn = getter(mc, ops[2], "u32", li)

        def copy_out(m):
            idx, full = _lanes(mc, m)
            if not len(idx):
                return
            n = _size(mc, li, gn, idx)
            gdst, ssrc = dfn(idx, full).copy(), sfn(idx, full).copy()
            mc.resolve("shared", *_chunks(ssrc, idx, n), 16, False, li)     # check both ends now
            mc.resolve("global", *_chunks(gdst, idx, n), 16, True, li)
            mc.bulk_out.append([idx.copy(), gdst, ssrc, n, np.full(len(idx), -1, np.int64), li])
        return copy_out
    raise _err(li, f"{li.opcode} is not supported")
