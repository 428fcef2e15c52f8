"""Shared- and tensor-memory race checking for the emulator (`emulate_ptx(..., check_races=True)`).

The machine runs a CTA's lanes in lock step, so a store by one thread and a load of the same bytes by another
see each other whether or not anything orders them: a missing `bar.sync` or mbarrier wait does not change the
emulated result.  This checker finds it anyway, with vector clocks (happens-before, not the emulator's order).

Agents: every thread of a CTA, the CTA's tensor core (the tcgen05.mmas, which execute in issue order) and its
asynchronous copies (bulk and tensor copies, each a unit of its own from a small pool of identities).  Each has
a clock: per agent of its CTA, the step of that agent's latest event it is ordered after.  Accesses are
stamped with a step (a counter per batch of CTAs).  Synchronisation joins clocks:

* a CTA barrier (`bar.sync` / `barrier.sync`, named and counted forms) joins its participants' clocks, and
  `bar.warp.sync` those of the lanes it names;
* an mbarrier arrival (`mbarrier.arrive`, a thread's `complete_tx`, a copy's delivery of its bytes, a
  `tcgen05.commit`'s arrival carrying the tensor core's clock) joins the arriver's clock into the barrier's
  current phase; a completed phase keeps the join of its arrivals and of the phases before it;
* a successful mbarrier wait joins the clock of the phase it waited for into the waiter's -- only that
  barrier's arrivals, so a wait on the wrong mbarrier or a missing wait is a race;
* an asynchronous unit starts from its issuing thread's clock at the issue (a tcgen05.mma, a copy).

An access races when another agent's conflicting access to the same byte (or tensor-memory cell) -- a write
before a read, a read or write before a write -- is not in the accessing agent's clock.  Per cell the checker
keeps the last write and the last two reads by different agents, so a race among more readers than that can be
missed, never invented.  cp.async copies land as writes of the thread that issued them.  A tcgen05.dealloc is a
write of every cell of the freed columns by the deallocating warp (after its lanes meet), so each load, store
or mma of them must be ordered before it (on the GPU one still in flight uses freed columns); a tcgen05.alloc
starts its columns afresh (it waits until they are free).
"""
from __future__ import annotations

import numpy as np

from .errors import EmuError

WARP = 32
COPY_UNITS = 31        # identities of asynchronous copies per CTA (reused round robin: a reuse only hides)
TMEM_LANES, TMEM_COLUMNS = 128, 512


class RaceError(EmuError):
    """Two agents of a CTA touch the same memory byte, at least one writing, with nothing ordering them."""


class _Shadow:
    """Per cell: the last writer and its step, the last two readers (different agents) since that write and
    their steps, and a writer the last write was unordered with (-1: none); agents are CTA-local indices."""

    def __init__(self, n: int):
        self.w = np.full(n, -1, np.int32)
        self.ws = np.zeros(n, np.int32)
        self.r = np.full(n, -1, np.int32)
        self.rs = np.zeros(n, np.int32)
        self.r2 = np.full(n, -1, np.int32)
        self.r2s = np.zeros(n, np.int32)
        self.torn = np.full(n, -1, np.int32)
        self.any_torn = False

    def reset(self) -> None:
        for a in (self.w, self.r, self.r2, self.torn):
            a.fill(-1)
        self.any_torn = False


class RaceChecker:
    """Vector clocks of every agent of a batch of CTAs (rows: CTA x agent; columns: the CTA's agents) and the
    shadow state of shared and tensor memory."""

    def __init__(self, nbytes: int, lanes: int, threads: int):
        self.Tp = threads                       # lanes per CTA
        self.N = threads + 1 + COPY_UNITS       # agents per CTA: threads, the tensor core, copies
        self.B = lanes // threads
        lane = np.arange(lanes, dtype=np.int64)
        self.lane_row = lane // threads * self.N + lane % threads
        self.lane_ident = (lane % threads).astype(np.int32)
        self.vc = np.zeros((self.B * self.N, self.N), np.int32)
        self.vcf = self.vc.reshape(-1)          # vc[row, agent] is vcf[row * N + agent]
        self.mem = _Shadow(nbytes)
        self.tmem = None
        self.acting = None          # the row of an asynchronous unit whose accesses the next ones are
        self.step = 0
        self._reset_units()

    def _reset_units(self) -> None:
        self.mbar = {}              # mbarrier key -> [clock of the current phase's arrivals, {phase: clock}]
        self.units = {}             # row of an asynchronous unit -> (its name, the lane that issued it)
        self.next_copy = np.zeros(self.B, np.int64)

    def reset(self) -> None:
        """A new batch of CTAs: memory starts unwritten, no agent has synchronised."""
        self.vc.fill(0)
        self.mem.reset()
        if self.tmem is not None:
            self.tmem.reset()
        self.acting = None
        self.step = 0
        self._reset_units()

    # ---------------------------------------------------------------- clocks
    def _tick(self, rows) -> None:
        """A release by `rows`: their clocks now cover everything they did so far."""
        self.step += 1
        self.vc[rows, rows % self.N] = self.step

    def barrier(self, lanes, groups=None) -> None:
        """`lanes` (a mask or indices) completed a barrier together with the lanes of the same group (by
        default their CTA): each one's clock becomes the join of its group's."""
        idx = np.flatnonzero(lanes) if np.asarray(lanes).dtype == bool else np.asarray(lanes, np.int64)
        if not len(idx):
            return
        rows = self.lane_row[idx]
        self._tick(rows)
        key = idx // self.Tp if groups is None else np.asarray(groups)
        if (key[1:] < key[:-1]).any():
            order = np.argsort(key, kind="stable")
            rows, key = rows[order], key[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        joined = np.maximum.reduceat(self.vc[rows], starts, axis=0)
        self.vc[rows] = np.repeat(joined, np.diff(np.r_[starts, len(rows)]), axis=0)

    def warp_barrier(self, lanes) -> None:
        """`bar.warp.sync`: the named lanes of each warp join."""
        idx = np.flatnonzero(lanes)
        self.barrier(idx, idx // WARP)

    def issue(self, lanes) -> np.ndarray:
        """The clocks ([n, agents]) that asynchronous units issued now by `lanes` start from."""
        rows = self.lane_row[np.asarray(lanes, np.int64)]
        self._tick(rows)
        return self.vc[rows]

    def copy_unit(self, lane: int, clock: np.ndarray, name: str) -> int:
        """The row of a new asynchronous copy issued by `lane` with `clock` (from `issue`)."""
        slot = lane // self.Tp
        row = slot * self.N + self.Tp + 1 + int(self.next_copy[slot] % COPY_UNITS)
        self.next_copy[slot] += 1
        self.vc[row] = clock
        self.units[row] = (name, lane)
        return row

    def tensor_core(self, lane: int, clock: np.ndarray) -> int:
        """The row of `lane`'s CTA's tensor core, now also ordered after an mma's issue `clock`."""
        row = int(self.tensor_core_rows(lane))
        np.maximum(self.vc[row], clock, out=self.vc[row])
        self.units[row] = ("tcgen05.mma", lane)
        return row

    def tensor_core_rows(self, lanes) -> np.ndarray:
        return np.asarray(lanes, np.int64) // self.Tp * self.N + self.Tp

    def rows(self, lanes) -> np.ndarray:
        """The clock rows of lanes' accesses: the acting asynchronous unit's, else the lanes' own."""
        if self.acting is not None:
            return np.full(len(lanes), self.acting, np.int64)
        return self.lane_row[lanes]

    def _agents(self, lanes, n: int):
        """(rows, agents) of the accesses of `lanes`, each repeated `n` times (an access's bytes)."""
        if self.acting is not None:
            k = len(lanes) * n
            return np.full(k, self.acting, np.int64), np.full(k, self.acting % self.N, np.int32)
        return np.repeat(self.lane_row[lanes], n), np.repeat(self.lane_ident[lanes], n)

    # ---------------------------------------------------------------- mbarriers
    def mbar_init(self, key: int) -> None:
        self.mbar.pop(key, None)

    def mbar_arrive(self, key: int, rows) -> None:
        """Arrivals of `rows` on the current phase of mbarrier `key`."""
        rows = np.asarray(rows, np.int64)
        self._tick(rows)
        ent = self.mbar.get(key)
        if ent is None:
            ent = self.mbar[key] = [np.zeros(self.N, np.int32), {}]
        np.maximum(ent[0], self.vc[rows].max(0), out=ent[0])

    def mbar_complete(self, key: int, phase: int) -> None:
        """Phase `phase` of mbarrier `key` completed: it keeps its arrivals' clock (and its predecessors')."""
        ent = self.mbar.get(key)
        if ent is None:
            ent = self.mbar[key] = [np.zeros(self.N, np.int32), {}]
        done = ent[1]
        prev = done.get(phase - 1)
        done[phase] = ent[0].copy() if prev is None else np.maximum(ent[0], prev)
        done.pop(phase - 4, None)
        ent[0].fill(0)

    def mbar_wait(self, keys, lanes, phases) -> None:
        """`lanes[i]` waited successfully for phase `phases[i]` of mbarrier `keys[i]`: it joins that phase's
        clock (or, once the barrier no longer keeps it, its latest phase's, which covers it)."""
        keys, phases, lanes = np.asarray(keys, np.int64), np.asarray(phases, np.int64), np.asarray(lanes, np.int64)
        ukeys, inv = np.unique(keys, return_inverse=True)
        first = np.empty(len(ukeys), np.int64)
        first[inv] = phases
        if (first[inv] != phases).any():      # lanes waiting for different phases of one barrier: one by one
            for k in range(len(lanes)):
                self.mbar_wait(keys[k:k + 1], lanes[k:k + 1], phases[k:k + 1])
            return
        clocks = np.zeros((len(ukeys), self.N), np.int32)
        for i, (key, phase) in enumerate(zip(ukeys.tolist(), first.tolist())):
            ent = self.mbar.get(key)
            if ent is not None and ent[1]:
                done = ent[1]
                clocks[i] = done.get(phase, done[max(done)])
        rows = self.lane_row[lanes]
        self.vc[rows] = np.maximum(self.vc[rows], clocks[inv])

    # ---------------------------------------------------------------- checks
    def _name(self, row: int, mc) -> tuple[str, str]:
        """(name, detail) of the agent of `row`, e.g. ("thread 3", " (warp 0)")."""
        ident = row % self.N
        if ident < self.Tp:
            return f"thread {ident}", f" (warp {ident // WARP})"
        name, lane = self.units.get(row, ("an asynchronous unit", row // self.N * self.Tp))
        return name, f" (issued by thread {lane % self.Tp}, warp {lane % self.Tp // WARP})"

    def _raise(self, message: str, row: int, li, mc) -> None:
        row = int(row)
        ident = row % self.N
        lane = row // self.N * self.Tp + ident if ident < self.Tp else self.units.get(row, ("", 0))[1]
        e = RaceError(message, line=li.line if li else None, text=li.text if li else None, kernel=mc.prog.kernel)
        e.lane = int(lane)
        raise e

    def _unordered(self, rows, me, peer, steps, c):
        """Where the access of `rows` (agents `me`) is not ordered after the access of agent `peer` at the cell's
        step in `steps` (None: wherever that is nowhere)."""
        other = peer != me
        other &= peer >= 0
        if not other.any():
            return None
        other &= self.vcf.take(rows * self.N + peer) < steps[c]
        return other if other.any() else None

    def _read(self, sh: _Shadow, c, rows, me, where, li, mc) -> None:
        w = sh.w[c]
        bad = self._unordered(rows, me, w, sh.ws, c)
        if bad is not None:
            k = int(np.argmax(bad))
            self._conflict("read", where(k), rows[k], int(w[k]), li, mc)
        if sh.any_torn:
            torn = sh.torn[c]
            if (torn >= 0).any():
                self._torn(torn, w, rows, where, li, mc)
        r = sh.r[c]
        moved = r != me
        moved &= r >= 0
        if moved.any():
            sh.r2[c] = np.where(moved, r, sh.r2[c])
            sh.r2s[c] = np.where(moved, sh.rs[c], sh.r2s[c])
        sh.r[c] = me
        sh.rs[c] = self.step

    def _torn(self, torn, w, rows, where, li, mc) -> None:
        k = int(np.argmax(torn >= 0))
        base = int(rows[k]) - int(rows[k]) % self.N
        a, b = int(torn[k]), int(w[k])
        who = (f"threads {a} and {b}" if max(a, b) < self.Tp else
               f"{self._name(base + a, mc)[0]} and {self._name(base + b, mc)[0]}")
        name, detail = self._name(int(rows[k]), mc)
        space, at = where(k)
        self._raise(f"{space} race: read at {at} by {name}{detail}, which {who} wrote with no barrier between "
                    f"(which value it holds depends on their order)", rows[k], li, mc)

    def _write(self, sh: _Shadow, c, rows, me, where, li, mc, reads: bool = False, verb: str = "write") -> None:
        """A write (`reads`: that also reads the cells first, as an accumulating mma its accumulator); `verb`
        names it in a report ("deallocation": it also needs the last write ordered before it)."""
        w = sh.w[c]
        if reads:
            bad = self._unordered(rows, me, w, sh.ws, c)
            if bad is not None:
                k = int(np.argmax(bad))
                self._conflict("read" if verb == "write" else verb, where(k), rows[k], int(w[k]), li, mc)
        # two unordered writes of different values: a race only if the cell is read before an ordered write
        # (a branch-free store of unneeded values to a dump slot is never read)
        unordered = self._unordered(rows, me, w, sh.ws, c)
        if unordered is not None:
            sh.torn[c] = np.where(unordered, w, -1)
            sh.any_torn = True
        elif sh.any_torn:
            sh.torn[c] = -1
        for r, steps in ((sh.r[c], sh.rs), (sh.r2[c], sh.r2s)):
            bad = self._unordered(rows, me, r, steps, c)
            if bad is not None:
                k = int(np.argmax(bad))
                self._conflict(f"{verb} after a read", where(k), rows[k], int(r[k]), li, mc)
        sh.w[c] = me
        sh.ws[c] = self.step
        sh.r[c] = -1
        sh.r2[c] = -1

    def _conflict(self, what: str, where, row, peer: int, li, mc) -> None:
        space, at = where
        name, detail = self._name(int(row), mc)
        pname, pdetail = self._name(int(row) - int(row) % self.N + peer, mc)
        self._raise(f"{space} race: {what} at {at} by {name}{detail} after {pname}'s{pdetail} with no barrier "
                    f"between", row, li, mc)

    # ---------------------------------------------------------------- shared memory
    @staticmethod
    def _bytes(off, nbytes: int):
        return (np.asarray(off, np.int64)[:, None] + np.arange(nbytes)).reshape(-1)

    def _shared_at(self, b, mc):
        return lambda k: ("shared-memory", f"shared address {int(b[k]) % mc.S}")

    def load(self, off, idx, nbytes: int, li, mc) -> None:
        self.step += 1
        b = self._bytes(off, nbytes)
        self._read(self.mem, b, *self._agents(idx, nbytes), self._shared_at(b, mc), li, mc)

    def store(self, off, idx, nbytes: int, li, mc, data) -> None:
        """A store of `data` ([n, nbytes] uint8).  Bytes it leaves as they are change nothing whatever the
        order (threads that write the same replicated values): only the bytes it changes are checked and
        stamped."""
        self.step += 1
        b = self._bytes(off, nbytes)
        rows, me = self._agents(idx, nbytes)
        changed = mc.shared[b] != np.asarray(data, np.uint8).reshape(-1)
        if not changed.all():
            b, rows, me = b[changed], rows[changed], me[changed]
        self._write(self.mem, b, rows, me, self._shared_at(b, mc), li, mc)

    def mbar_object(self, keys, rows, write: bool, li, mc) -> None:
        """An mbarrier's 8 bytes at shared-buffer offsets `keys` as `rows` use them: its initialisation and
        invalidation write them, every other operation reads them (arrivals and waits are atomic: they never
        conflict with one another, only with an initialisation not ordered before them)."""
        self.step += 1
        b = (np.asarray(keys, np.int64)[:, None] + np.arange(8)).reshape(-1)
        rows = np.repeat(np.asarray(rows, np.int64), 8)
        at = lambda k: ("shared-memory", f"the mbarrier at shared address {int(b[k]) // 8 * 8 % mc.S}")  # noqa: E731
        (self._write if write else self._read)(self.mem, b, rows, (rows % self.N).astype(np.int32), at, li, mc)

    # ---------------------------------------------------------------- tensor memory (tcgen05)
    def _cells(self, slots, lanes_, cols):
        if self.tmem is None:
            self.tmem = _Shadow(self.B * TMEM_LANES * TMEM_COLUMNS)
        return ((np.asarray(slots, np.int64) * TMEM_LANES + lanes_) * TMEM_COLUMNS + cols).reshape(-1)

    @staticmethod
    def _tmem_at(c):
        return lambda k: ("tensor-memory", f"tensor-memory lane {int(c[k]) // TMEM_COLUMNS % TMEM_LANES} column "
                                           f"{int(c[k]) % TMEM_COLUMNS}")

    def _thread_agents(self, lanes, lanes_, cols):
        """(rows, agents) of tcgen05.ld/st cells [warps, 32, ...] of the warps' `lanes` (in order)."""
        shape = np.broadcast_shapes(np.shape(lanes_), np.shape(cols))
        out = []
        for table in (self.lane_row, self.lane_ident):
            v = table[lanes].reshape(-1, WARP)
            out.append(np.broadcast_to(v.reshape(v.shape + (1,) * (len(shape) - 2)), shape).reshape(-1))
        return out

    def tmem_store(self, slots, lanes_, cols, lanes, li, mc) -> None:
        """tcgen05.st: the threads `lanes` (whole warps, [warps, 32, ...] cells) wrote tensor-memory cells."""
        self.step += 1
        c = self._cells(slots, lanes_, cols)
        self._write(self.tmem, c, *self._thread_agents(lanes, lanes_, cols), self._tmem_at(c), li, mc)

    def tmem_load(self, slots, lanes_, cols, lanes, li, mc) -> None:
        """tcgen05.ld by the threads `lanes`."""
        self.step += 1
        c = self._cells(slots, lanes_, cols)
        self._read(self.tmem, c, *self._thread_agents(lanes, lanes_, cols), self._tmem_at(c), li, mc)

    def tmem_unit(self, slot: int, lanes_, cols, what: str, li, mc) -> None:
        """The acting unit (the tensor core) reads, writes or updates ("read", "write", "update": reads, then
        writes) cells of CTA `slot`'s tensor memory."""
        self.step += 1
        c = self._cells(slot, lanes_, cols)
        rows = np.full(len(c), self.acting, np.int64)
        me = np.full(len(c), self.acting % self.N, np.int32)
        if what == "read":
            self._read(self.tmem, c, rows, me, self._tmem_at(c), li, mc)
        else:
            self._write(self.tmem, c, rows, me, self._tmem_at(c), li, mc, reads=what == "update")

    def tmem_free(self, slot: int, col0: int, ncols: int, lane: int, li, mc) -> None:
        """tcgen05.dealloc of columns col0.. by `lane`'s warp (the caller joins its lanes first: the warp issues
        it together, .sync.aligned): a write of every lane of those columns, so each earlier access by another
        agent (a tcgen05.ld/st, an mma) must be ordered before it -- on the GPU one still in flight (or not yet
        issued) uses freed columns."""
        self.step += 1
        c = self._cells(slot, np.arange(TMEM_LANES)[:, None], col0 + np.arange(ncols)[None, :])
        rows = np.full(len(c), self.lane_row[lane], np.int64)
        me = np.full(len(c), self.lane_ident[lane], np.int32)
        self._write(self.tmem, c, rows, me, self._tmem_at(c), li, mc, reads=True, verb="deallocation")

    def tmem_allocated(self, slot: int, col0: int, ncols: int) -> None:
        """tcgen05.alloc of columns col0..: an allocation waits until they are free, so it comes after their
        last deallocation and whatever that was ordered after; the columns start with no accesses."""
        if self.tmem is None:
            return
        c = self._cells(slot, np.arange(TMEM_LANES)[:, None], col0 + np.arange(ncols)[None, :])
        for a in (self.tmem.w, self.tmem.r, self.tmem.r2, self.tmem.torn):
            a[c] = -1
