"""Shared-memory race checking for the emulator (`emulate_ptx(..., check_races=True)`).

The machine runs a CTA's lanes in lock step, so a store by one thread and a load of the same bytes by another
see each other whether or not a barrier separates them: a missing `bar.sync` does not change the emulated
result.  This checker finds it anyway.  Every shared-memory load and store is stamped with a step count; a
thread's last synchronisation is the step at which a barrier it waited on completed (`bar.sync` /
`barrier.sync`, the named and counted forms included, and `bar.warp.sync` for the lanes it names) or an
mbarrier wait of it succeeded.  An access races when another thread's conflicting access to the same byte (a
write before a read, a read before a write) came after the accessing thread's last synchronisation -- lanes of
one warp too: with independent thread scheduling they need `bar.warp.sync` (`__syncwarp`) like any others.

A copy that lands asynchronously (cp.async, bulk and tensor copies) is a write by the thread that issued it,
checked when it lands.  An mbarrier wait counts as synchronising with every earlier access (it cannot tell
which arrivals it waited for): that only leaves races out, never reports one that is not there.
"""
from __future__ import annotations

import numpy as np

from .errors import EmuError

WARP = 32


class RaceError(EmuError):
    """Two threads of a CTA touch the same memory byte, at least one writing, with no barrier between."""


class RaceChecker:
    """Per shared byte of a batch: its last writer and when, the thread that read it last and when, and the
    latest read by any other thread since the write (so a write conflicts with every unsynchronised read of
    another thread, not only the last one)."""

    def __init__(self, nbytes: int, lanes: int):
        self.w_lane = np.full(nbytes, -1, np.int32)     # last writer (batch lane), -1: none
        self.w_step = np.zeros(nbytes, np.int32)      # steps restart with each batch (< max_steps)
        self.r_lane = np.full(nbytes, -1, np.int32)     # the thread that read it last since the write, -1: none
        self.r_step = np.zeros(nbytes, np.int32)
        self.r_other = np.zeros(nbytes, np.int32)       # the latest read by another thread than r_lane
        self.synced = np.zeros(lanes, np.int32)         # per lane: step of its last synchronisation
        self.torn = np.full(nbytes, -1, np.int32)       # a thread whose write the last one did not follow in order
        self.step = 0
        self.tm_warp = self.tm_step = None              # tensor memory: writer warp and step per cell

    def reset(self) -> None:
        """A new batch of CTAs: their shared memory starts unwritten."""
        self.w_lane.fill(-1)
        self.r_lane.fill(-1)
        self.r_other.fill(0)
        self.synced.fill(0)
        self.torn.fill(-1)
        self.step = 0
        self.reset_tmem()

    def sync(self, lanes) -> None:
        """`lanes` (a mask or indices) completed a barrier or an mbarrier wait: ordered after all before."""
        self.step += 1
        self.synced[lanes] = self.step

    @staticmethod
    def _bytes(off, idx, nbytes: int):
        b = (np.asarray(off, np.int64)[:, None] + np.arange(nbytes)).reshape(-1)
        return b, np.repeat(np.asarray(idx, np.int64), nbytes)

    @staticmethod
    def _raise(message: str, lane: int, li, mc) -> None:
        e = RaceError(message, line=li.line if li else None, text=li.text if li else None, kernel=mc.prog.kernel)
        e.lane = lane
        raise e

    def _report(self, bad, b, lanes, other, what: str, li, mc) -> None:
        k = int(np.argmax(bad))
        lane, peer = int(lanes[k]), int(other[k])
        self._raise(f"shared-memory race: {what} at shared address {int(b[k] - mc.shbase[lane])} by thread "
                    f"{lane % mc.Tp} (warp {lane % mc.Tp // WARP}) after thread {peer % mc.Tp}'s (warp "
                    f"{peer % mc.Tp // WARP}) with no barrier between", lane, li, mc)

    def _after_writes(self, b, lanes, what: str, li, mc) -> None:
        """Fail when another thread's unordered write precedes this access to bytes `b` by `lanes`."""
        w = self.w_lane[b]
        bad = (w >= 0) & (w != lanes) & (self.w_step[b] > self.synced[lanes])
        if bad.any():
            self._report(bad, b, lanes, w, what, li, mc)

    def load(self, off, idx, nbytes: int, li, mc) -> None:
        self.step += 1
        b, lanes = self._bytes(off, idx, nbytes)
        self._after_writes(b, lanes, "read", li, mc)
        torn = self.torn[b]
        if (torn >= 0).any():
            k = int(np.argmax(torn >= 0))
            self._raise(f"shared-memory race: read at shared address {int(b[k] - mc.shbase[int(lanes[k])])} by "
                        f"thread {int(lanes[k]) % mc.Tp}, which threads {int(torn[k]) % mc.Tp} and "
                        f"{int(self.w_lane[b[k]]) % mc.Tp} wrote with no barrier between (which value it "
                        f"holds depends on their order)", int(lanes[k]), li, mc)
        who = lanes.astype(np.int32)
        r = self.r_lane[b]
        moved = (r >= 0) & (r != who)
        self.r_other[b] = np.where(moved, np.maximum(self.r_other[b], self.r_step[b]), self.r_other[b])
        self.r_lane[b] = who
        self.r_step[b] = self.step

    def store(self, off, idx, nbytes: int, li, mc, data) -> None:
        """A store of `data` ([n, nbytes] uint8).  Bytes it leaves as they are change nothing whatever the
        order (threads that write the same replicated values): only the bytes it changes are checked and
        stamped."""
        self.step += 1
        b, lanes = self._bytes(off, idx, nbytes)
        changed = mc.shared[b] != np.asarray(data, np.uint8).reshape(-1)
        if not changed.all():
            b, lanes = b[changed], lanes[changed]
        # two unordered writes of different values: a race only if the byte is read before an ordered write
        # (a branch-free store of unneeded values to a dump slot is never read)
        w = self.w_lane[b]
        unordered = (w >= 0) & (w != lanes) & (self.w_step[b] > self.synced[lanes])
        self.torn[b] = np.where(unordered, w, -1)
        r = self.r_lane[b]
        synced = self.synced[lanes]
        bad = ((r >= 0) & (r != lanes) & (self.r_step[b] > synced)) | (self.r_other[b] > synced)
        if bad.any():
            self._report(bad, b, lanes, np.where(r >= 0, r, lanes), "write after a read", li, mc)
        self.w_lane[b] = lanes
        self.w_step[b] = self.step
        self.r_lane[b] = -1
        self.r_other[b] = 0

    # ---------------------------------------------------------------- tensor memory (tcgen05)
    def tmem_store(self, shape, slots, lanes_, cols, warps) -> None:
        """tcgen05.st: warp `warps[i]` (batch warp index) wrote tensor-memory cells [slots, lanes_, cols]."""
        if self.tm_warp is None or self.tm_warp.shape != shape:
            self.tm_warp = np.full(shape, -1, np.int32)
            self.tm_step = np.zeros(shape, np.int32)
        self.step += 1
        w = np.broadcast_to(np.asarray(warps).reshape((-1,) + (1,) * (lanes_.ndim - 1)), lanes_.shape)
        self.tm_warp[slots, lanes_, cols] = w
        self.tm_step[slots, lanes_, cols] = self.step

    def issue_state(self, lane: int) -> tuple[int, int]:
        """What an asynchronous tcgen05.mma issued by `lane` now is ordered after: (step, lane's last sync)."""
        return self.step, int(self.synced[lane])

    def tmem_access(self, slot: int, lanes_, cols, lane: int, issued: tuple[int, int], li, mc) -> None:
        """The accumulator an MMA issued by `lane` reads or writes: a cell another warp stored after `lane`'s
        last synchronisation before the issue is a race (the issue needs a barrier after those stores, and
        none may come between the issue and the wait)."""
        if self.tm_warp is None:
            return
        synced = issued[1]
        w, s = self.tm_warp[slot, lanes_, cols], self.tm_step[slot, lanes_, cols]
        bad = (w >= 0) & (w != lane // WARP) & (s > synced)
        if bad.any():
            peer = int(w.reshape(-1)[int(np.argmax(bad.reshape(-1)))])
            self._raise(f"tensor-memory race: tcgen05.mma issued by thread {lane % mc.Tp} (warp "
                        f"{lane % mc.Tp // WARP}) uses an accumulator that warp {peer * WARP % mc.Tp // WARP} "
                        f"stored with no barrier between", lane, li, mc)

    def reset_tmem(self) -> None:
        if self.tm_warp is not None:
            self.tm_warp.fill(-1)
