"""mbarrier: the 64-bit shared-memory barrier objects of sm_80+ async pipelines.

State of one barrier (`MBarrier`): the current phase, the arrivals still pending in it, the expected
arrival count that every new phase starts with, and the transaction count (bytes announced by
`expect_tx` and not yet delivered by `complete_tx` -- bulk copies and TMA deliver theirs when they
land).  A phase completes when its pending arrivals reach zero and its transaction count is zero;
the next phase then starts with the expected count.  The transaction count may go negative for a
while (bytes delivered before they are announced), as on the hardware.

Barriers are keyed by their physical byte offset in the batch's shared-memory buffer, so every CTA
has its own.  A thread's arrival returns an opaque state (phase << 32 | pending count after the
arrival); waits on a state complete once that phase has, waits on a parity once the phase of that
parity has.  `try_wait` and `test_wait` end their basic block (a yield point of the scheduler), so
the threads that will arrive get to run.
"""
from __future__ import annotations

import numpy as np

from ..errors import BarrierError
from ..parser import Addr
from .core import Mods, _err, _lanes, address_fn, bl, dst, getter, op, put

MAX_COUNT = (1 << 20) - 1
BEFORE_WAIT: list = []      # fn(machine, barrier keys): asynchronous units completing onto the waited barriers


def before_wait(fn):
    BEFORE_WAIT.append(fn)
    return fn


class MBarrier:
    __slots__ = ("phase", "pending", "expected", "tx")

    def __init__(self, count: int):
        self.phase = 0
        self.pending = count
        self.expected = count
        self.tx = 0

    def state(self) -> int:
        return ((self.phase & 0xFFFFFFFF) << 32) | (self.pending & 0xFFFFFFFF)

    def complete_if_done(self) -> bool:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.expected
            return True
        return False


def mbar_keys(mc, li, addr, idx) -> np.ndarray:
    """Physical shared-buffer offsets of the 8-byte barriers at shared addresses `addr` (checked)."""
    ph = np.empty(len(idx), np.int64)
    for _buf, off, sel in mc.resolve("shared", addr, idx, 8, True, li):
        if sel is None:
            ph[:] = off
        else:
            ph[sel] = off
    return ph


def _barrier(mc, li, key: int, lane: int, what: str) -> MBarrier:
    st = mc.mbar.get(key)
    if st is None:
        e = BarrierError(f"{what} on an uninitialised mbarrier (shared offset {key % mc.S:#x})", line=li.line,
                         text=li.text, kernel=mc.prog.kernel)
        e.lane = int(lane)
        raise e
    return st


def _over_arrival(mc, li, lane, st):
    e = BarrierError(f"mbarrier over-arrival: more arrivals than its expected count of {st.expected} in phase "
                     f"{st.phase}", line=li.line, text=li.text, kernel=mc.prog.kernel)
    e.lane = int(lane)
    return e


def _use(mc, li, keys, idx, rows=None, *, write: bool = False) -> None:
    """Race check: lanes `idx` (or the units of `rows`) use the barriers at `keys` (see RaceChecker.mbar_object)."""
    if mc.races is not None:
        mc.races.mbar_object(keys, mc.races.rows(idx) if rows is None else rows, write, li, mc)


def _arrivals(mc, key: int, rows) -> None:
    """Race check: the arrivers' clocks (rows of the checker) join the barrier's current phase."""
    if mc.races is not None:
        mc.races.mbar_arrive(key, rows)


def _completed(mc, key: int, st: MBarrier) -> None:
    """A phase completed: the race check keeps its arrivals' clock for the waits on it."""
    phase = st.phase
    if st.complete_if_done() and mc.races is not None:
        mc.races.mbar_complete(key, phase)


def mbar_arrive(mc, li, keys, idx, counts, tx=None, *, no_complete: bool = False, rows=None) -> np.ndarray:
    """Arrive `counts[i]` times on barrier keys[i] for lane idx[i] (after adding tx[i] to its transaction
    count, for `arrive.expect_tx`), in lane order; returns each lane's state before its arrival.  `rows`: the
    race checker's clock rows of the arrivals when they are not the lanes' (a tcgen05.commit's tensor core)."""
    states = np.empty(len(idx), np.uint64)
    if mc.races is not None and rows is None:
        rows = mc.races.rows(idx)
    _use(mc, li, keys, idx, rows)
    for key in np.unique(keys):
        sel = np.flatnonzero(keys == key)
        st = _barrier(mc, li, int(key), idx[sel[0]], "mbarrier arrive")
        c = counts[sel]
        total = int(c.sum())
        if tx is None and not no_complete and total <= st.pending:     # the common case, vectorised
            after = st.pending - np.cumsum(c)
            states[sel] = (np.uint64((st.phase & 0xFFFFFFFF) << 32)
                           | (after.astype(np.uint64) & np.uint64(0xFFFFFFFF)))
            st.pending -= total
            if rows is not None:
                _arrivals(mc, int(key), rows[sel])
            _completed(mc, int(key), st)
            mc.sync_version += 1
            continue
        for j in sel:
            if tx is not None:
                st.tx += int(tx[j])
            c = int(counts[j])
            if c > st.pending:
                raise _over_arrival(mc, li, idx[j], st)
            st.pending -= c
            states[j] = st.state()
            if no_complete and st.pending == 0 and st.tx == 0:
                e = BarrierError("mbarrier.arrive.noComplete completed the phase", line=li.line, text=li.text,
                                 kernel=mc.prog.kernel)
                e.lane = int(idx[j])
                raise e
            if rows is not None:
                _arrivals(mc, int(key), rows[j:j + 1])
            _completed(mc, int(key), st)
        mc.sync_version += 1        # any change of a barrier is progress for the scheduler's deadlock check
    return states


def mbar_tx(mc, li, keys, idx, nbytes, *, complete: bool, rows=None) -> None:
    """Announce (`expect_tx`) or deliver (`complete_tx`) transaction bytes on barriers; a delivery is an
    arrival of `rows` (the race checker's clock rows of the delivering units; default: the lanes')."""
    if mc.races is not None and rows is None:   # a thread's complete_tx uses the barrier (a copy's delivery:
        rows = mc.races.rows(idx)                 # its issue named it)
        _use(mc, li, keys, idx, rows)
    for key in np.unique(keys):
        sel = keys == key
        st = _barrier(mc, li, int(key), idx[np.flatnonzero(sel)[0]], "mbarrier transaction")
        n = int(np.asarray(nbytes)[sel].sum())
        st.tx += -n if complete else n
        if complete:
            if rows is not None:
                _arrivals(mc, int(key), rows[sel])
            _completed(mc, int(key), st)
        mc.sync_version += 1


def _lane_values(g, mc, idx):
    v = bl(np.asarray(g()), mc.L)
    return v[idx].astype(np.int64)


@op("mbarrier")
def _mbarrier(mc, li):
    mods = Mods(li)
    what = mods.take("init", "arrive", "arrive_drop", "try_wait", "test_wait", "inval", "expect_tx",
                     "complete_tx", "pending_count")
    mods.ignore("shared", "shared::cta", "shared::cluster", "release", "acquire", "relaxed", "cta", "cluster")
    parity = mods.has("parity")
    expect = mods.has("expect_tx")
    no_complete = mods.has("noComplete")
    mods.type1({"b64"})
    mods.done()
    if what is None:
        raise _err(li, f"{li.opcode} is not supported")
    ops = li.ops
    if what == "pending_count":
        d = dst(mc, ops[0], "b32", li)
        g = getter(mc, ops[1], "b64", li)
        return lambda m: put(d, m, (np.asarray(g()) & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    if what == "init":
        _, afn = address_fn(mc, ops[0], li)
        gc = getter(mc, ops[1], "u32", li)

        def init(m):
            idx, full = _lanes(mc, m)
            if not len(idx):
                return
            keys = mbar_keys(mc, li, afn(idx, full), idx)
            cnt = _lane_values(gc, mc, idx)
            for k, key in enumerate(keys):
                if not 1 <= cnt[k] <= MAX_COUNT:
                    raise _err(li, f"mbarrier.init count {int(cnt[k])} is outside 1..{MAX_COUNT}")
                mc.mbar[int(key)] = MBarrier(int(cnt[k]))
                if mc.races is not None:
                    mc.races.mbar_init(int(key))
            _use(mc, li, keys, idx, write=True)
            mc.sync_version += 1
        return init
    if what == "inval":
        _, afn = address_fn(mc, ops[0], li)

        def inval(m):
            idx, full = _lanes(mc, m)
            if len(idx):
                keys = mbar_keys(mc, li, afn(idx, full), idx)
                _use(mc, li, keys, idx, write=True)
                for key in keys:
                    mc.mbar.pop(int(key), None)
                mc.sync_version += 1
        return inval
    if what in ("expect_tx", "complete_tx"):
        # mbarrier.expect_tx|complete_tx.b64 [addr], txCount
        _, afn = address_fn(mc, ops[0], li)
        gtx = getter(mc, ops[1], "u32", li)
        complete = what == "complete_tx"

        def tx(m):
            idx, full = _lanes(mc, m)
            if len(idx):
                mbar_tx(mc, li, mbar_keys(mc, li, afn(idx, full), idx), idx, _lane_values(gtx, mc, idx),
                        complete=complete)
        return tx
    if what in ("arrive", "arrive_drop"):
        # mbarrier.arrive{.expect_tx}.b64 state, [addr]{, count|txCount}
        d = dst(mc, ops[0], "b64", li) if not isinstance(ops[0], Addr) else None
        k0 = 0 if isinstance(ops[0], Addr) else 1
        _, afn = address_fn(mc, ops[k0], li)
        gextra = getter(mc, ops[k0 + 1], "u32", li) if len(ops) > k0 + 1 else None
        if expect and gextra is None:
            raise _err(li, "mbarrier.arrive.expect_tx needs a transaction count")
        drop = what == "arrive_drop"

        def arrive(m):
            idx, full = _lanes(mc, m)
            if not len(idx):
                return
            keys = mbar_keys(mc, li, afn(idx, full), idx)
            extra = _lane_values(gextra, mc, idx) if gextra is not None else None
            counts = extra if (extra is not None and not expect) else np.ones(len(idx), np.int64)
            if drop:
                # the dropped arrivals leave the expected count of this and every later phase
                for key in np.unique(keys):
                    st = _barrier(mc, li, int(key), idx[0], "mbarrier.arrive_drop")
                    st.expected -= int(counts[keys == key].sum())
            st = mbar_arrive(mc, li, keys, idx, counts, tx=extra if expect else None, no_complete=no_complete)
            if d is not None:
                if full:
                    d[:] = st
                else:
                    d[idx] = st
        return arrive
    # try_wait / test_wait{.parity}.b64 waitComplete, [addr], state|phaseParity{, suspendTimeHint}
    p = dst(mc, ops[0], "pred", li)
    _, afn = address_fn(mc, ops[1], li)
    if len(ops) < 3:
        raise _err(li, f"{li.opcode} needs a state or phase parity operand")
    g = getter(mc, ops[2], "u32" if parity else "b64", li)

    def wait(m):
        idx, full = _lanes(mc, m)
        if not len(idx):
            return
        keys = mbar_keys(mc, li, afn(idx, full), idx)
        for fn in BEFORE_WAIT:
            fn(mc, keys)
        _use(mc, li, keys, idx)
        cur = np.empty(len(idx), np.int64)
        for key in np.unique(keys):
            sel = keys == key
            cur[sel] = _barrier(mc, li, int(key), idx[np.flatnonzero(sel)[0]], "mbarrier wait").phase
        v = bl(np.asarray(g()), mc.L)[idx]
        if parity:
            ok = (cur & 1) != (v.astype(np.int64) & 1)
            waited = cur - 1        # the phase of that parity that completed last
        else:
            state_phase = (v.astype(np.uint64) >> np.uint64(32)).astype(np.int64)
            ok = (cur & 0xFFFFFFFF) != state_phase
            waited = cur - ((cur - state_phase) & 0xFFFFFFFF)
        out = np.zeros(mc.L, bool)
        out[idx] = ok
        put(p, m, out)
        if mc.races is not None and ok.any():
            mc.races.mbar_wait(keys[ok], idx[ok], waited[ok])
        if not ok.any():
            mc.wait_failed = True       # no lane got through: the scheduler lets the arriving threads run
    return wait
