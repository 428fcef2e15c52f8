"""The execution engine: a batch of CTAs executed with numpy, one array lane per thread.

Lanes: a launch runs its CTAs in batches of `B` CTAs; each CTA gets `Tp`
lanes (its thread count rounded up to whole warps; lanes past the thread count
never run).  Registers are numpy arrays of shape [num_regs, lanes] per
register file; every instruction is a pre-built closure `f(mask)` that updates
all active lanes of the batch at once (`mask` is ``True`` when every lane of
the batch is active, else a boolean lane mask).

Divergence: the scheduler keeps groups of lanes that share a program counter
(a block index; blocks are in PTX order).  It always runs the group with the
lowest PC and merges groups that reach the same PC, so threads that split at a
branch reconverge at the first block both paths reach.  A barrier
(`bar.sync`, `barrier.sync`) blocks a group until every live thread of each of
its CTAs is waiting at a barrier with the same id (or the requested thread
count has arrived); a barrier that can never complete is an error.  Yield
points (`mbarrier.try_wait`, `nanosleep`) let other groups run first, so
producer/consumer code on mbarriers makes progress.

Memory: global accesses go to `DeviceMemory` allocations and are bounds- and
alignment-checked (`memcheck="device"`: reads just past an allocation are served,
see memory.py); shared memory is one buffer per CTA of the batch, local memory one
buffer per thread; generic addresses are routed by window.
"""
from __future__ import annotations

import contextlib
import gc

import numpy as np

from . import isa
from .errors import (
    BarrierError,
    EmuError,
    LaunchError,
    MemoryFault,
    UnsupportedInstruction,
)
from .memory import (
    LOCAL_WINDOW,
    PARAM_WINDOW,
    SHARED_WINDOW,
    UNSPECIFIED_BYTE,
    WINDOW_BITS,
    DeviceMemory,
    _pad16,
    check_memcheck_mode,
    mapped_tail,
)
from .parser import FImm, Imm
from .races import RaceChecker
from .stats import class_vector, tally
from .program import (
    LOCAL_START,
    SHARED_START,
    Program,
    RegRef,
    SpecialRef,
    SymRef,
    _align,
)

WARP = 32
MEMORY_BUDGET = 256 << 20     # bytes of registers + local memory per batch of CTAs
_NP = {"16": np.uint16, "32": np.uint32, "64": np.uint64, "p": np.bool_}
_SHIFT = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4}


def _elements(off, sh: int, vec: int):
    """Element indices into a buffer viewed as the access's dtype: [n] for scalars, [n, vec] for vectors."""
    e = off >> sh
    return e if vec == 1 else e.astype(np.intp)[:, None] + np.arange(vec)


class Machine:
    """One kernel launch: builds the closures for a batch layout and runs every CTA."""

    def __init__(self, prog: Program, memory: DeviceMemory, params: list, grid, block, *,
                 dynamic_smem: int = 0, max_lanes: int = 4096, max_steps: int | None = 20_000_000,
                 canonical_nan: bool = True, check_races: bool = False, memcheck: str = "strict"):
        self.prog = prog
        self.check_races = check_races
        self.memcheck = check_memcheck_mode(memcheck)
        self.overreads: dict[int, list] = {}   # allocation index -> [furthest byte past its end, first li]
        self.mem = memory
        self.grid = tuple(int(g) for g in grid) + (1,) * (3 - len(tuple(grid)))
        self.block = tuple(int(b) for b in block) + (1,) * (3 - len(tuple(block)))
        if any(g < 1 for g in self.grid) or any(b < 1 for b in self.block):
            raise LaunchError(f"bad launch: grid {self.grid} block {self.block}")
        self.T = self.block[0] * self.block[1] * self.block[2]
        if self.T > 1024:
            raise LaunchError(f"block of {self.T} threads exceeds 1024")
        for name, lim in (("reqntid", prog.reqntid), ("maxntid", prog.maxntid)):
            if lim is not None:
                n = lim[0] * lim[1] * lim[2]
                if name == "reqntid" and tuple(self.block) != tuple(lim):
                    raise LaunchError(f"kernel requires block {lim} (.reqntid) but was launched with "
                                      f"{self.block}")
                if name == "maxntid" and self.T > n:
                    raise LaunchError(f"block {self.block} exceeds .maxntid {lim}")
        self.Tp = _align(self.T, WARP)
        self.ncta = self.grid[0] * self.grid[1] * self.grid[2]
        # lanes per batch: up to max_lanes, and few enough that registers + local memory fit a budget
        n = prog.nregs
        lane_bytes = 2 * n["16"] + 4 * n["32"] + 8 * n["64"] + n["p"] + prog.local_size + 64
        budget_lanes = max(self.Tp, MEMORY_BUDGET // max(lane_bytes, 1))
        per_batch = max(1, min(self.ncta, min(max_lanes, budget_lanes) // self.Tp))
        self.nbatches = -(-self.ncta // per_batch)
        self.B = -(-self.ncta // self.nbatches)
        self.L = self.B * self.Tp
        self.canonical_nan = canonical_nan
        self.max_steps = max_steps
        self.dynamic_smem = int(dynamic_smem)
        self.dyn_offset = _align(prog.shared_static, prog.dyn_shared_align)
        self.S = _align(self.dyn_offset + (self.dynamic_smem if prog.has_dyn_shared else 0), 16)
        self.LS = prog.local_size
        self._setup_params(params)
        self._setup_globals()
        self._alloc_state()
        self.thread_instructions = 0
        self.instructions = 0
        self.sync_version = 0
        self.wait_failed = False
        with _no_gc():
            self._build()

    # ------------------------------------------------------------------ launch setup
    def _setup_params(self, params: list) -> None:
        prog = self.prog
        if len(params) != len(prog.kparams):
            raise LaunchError(f"kernel {prog.kernel} takes {len(prog.kparams)} parameters, got {len(params)}")
        buf = np.zeros(max(prog.kparam_size, 8) + 8, dtype=np.uint8)
        for kp, v in zip(prog.kparams, params):
            buf[kp.offset:kp.offset + kp.size] = _param_bytes(kp, v)
        self.kparam = buf
        self.kparam_buf = _Buf(buf)

    def _setup_globals(self) -> None:
        cache = getattr(self.mem, "_emu_globals", None)
        if cache is None:
            cache = {}
            self.mem._emu_globals = cache
        self.gaddr = {}
        for name, v in self.prog.globals.items():
            key = (id(self.prog.module), name)
            if key not in cache:
                init = _init_bytes(v, self)
                cache[key] = self.mem.alloc(max(v.nbytes, 1), name, readonly=(v.space == "const"), init=init)
            self.gaddr[name] = cache[key]

    def _alloc_state(self) -> None:
        L = self.L
        self.R = {c: np.zeros((max(n, 1), L), dtype=_NP[c]) for c, n in self.prog.nregs.items()}
        self._rows: dict = {}
        self._views2d: dict = {}
        self.cc = np.zeros(L, dtype=np.uint32)
        self.lane = np.arange(L, dtype=np.int64)
        self.all_idx = self.lane
        self.tlin = (self.lane % self.Tp)
        self.cta_slot = self.lane // self.Tp
        self.shared = np.zeros(self.B * self.S + 16, dtype=np.uint8)
        self.shbase = (self.cta_slot * self.S).astype(np.int64)
        self.local = np.zeros(L * self.LS + 16, dtype=np.uint8)
        self.lbase = (self.lane * self.LS).astype(np.int64)
        self._bufviews = {}
        self.shared_buf = _Buf(self.shared)
        self.local_buf = _Buf(self.local)
        self.races = RaceChecker(len(self.shared), L, self.Tp) if self.check_races else None
        bx, by, _ = self.block
        tl = self.tlin
        self.sp = {
            "%tid.x": (tl % bx).astype(np.uint32),
            "%tid.y": ((tl // bx) % by).astype(np.uint32),
            "%tid.z": (tl // (bx * by)).astype(np.uint32),
            "%laneid": (tl % WARP).astype(np.uint32),
            "%warpid": (tl // WARP).astype(np.uint32),
            "%ctaid.x": np.zeros(L, np.uint32), "%ctaid.y": np.zeros(L, np.uint32),
            "%ctaid.z": np.zeros(L, np.uint32),
        }
        ln = self.sp["%laneid"].astype(np.uint64)
        one = np.uint64(1)
        self.sp["%lanemask_eq"] = (one << ln).astype(np.uint32)
        self.sp["%lanemask_lt"] = ((one << ln) - one).astype(np.uint32)
        self.sp["%lanemask_le"] = ((one << (ln + one)) - one).astype(np.uint32)
        self.sp["%lanemask_ge"] = (~((one << ln) - one) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        self.sp["%lanemask_gt"] = (~((one << (ln + one)) - one) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        for ax, k in (("x", 0), ("y", 1), ("z", 2)):
            self.sp[f"%ntid.{ax}"] = np.uint32(self.block[k])
            self.sp[f"%nctaid.{ax}"] = np.uint32(self.grid[k])
            self.sp[f"%clusterid.{ax}"] = self.sp[f"%ctaid.{ax}"]
            self.sp[f"%nclusterid.{ax}"] = np.uint32(self.grid[k])
            self.sp[f"%cluster_ctaid.{ax}"] = np.uint32(0)
            self.sp[f"%cluster_nctaid.{ax}"] = np.uint32(1)
        self.sp["%cluster_ctarank"] = np.uint32(0)
        self.sp["%cluster_nctarank"] = np.uint32(1)
        self.sp["%is_explicit_cluster"] = np.uint32(0)
        self.sp["%nwarpid"] = np.uint32(self.Tp // WARP)
        self.sp["%smid"] = np.uint32(0)
        self.sp["%nsmid"] = np.uint32(1)
        self.sp["%gridid"] = np.uint64(0)
        self.sp["%dynamic_smem_size"] = np.uint32(self.dynamic_smem)
        self.sp["%total_smem_size"] = np.uint32(self.S)
        self.sp["%aggr_smem_size"] = np.uint32(self.S)
        self.live = np.zeros(L, dtype=bool)
        self.ctas: list = []
        # per-warp helpers
        self.nwarps = L // WARP
        # cp.async bookkeeping and mbarriers (reset per batch)
        self.cp_records: list = []
        self.cp_committed = np.zeros(L, dtype=np.int64)
        self.mbar: dict = {}

    # ------------------------------------------------------------------ register access for builders
    def view2d(self, cls: str, dt) -> np.ndarray:
        """The register file of class `cls` viewed as dtype `dt` ([num_regs, lanes])."""
        dt = np.dtype(dt)
        key = (cls, dt.char)
        v = self._views2d.get(key)
        if v is None:
            arr = self.R[cls]
            v = arr if arr.dtype == dt else arr.view(dt)
            self._views2d[key] = v
        return v

    def row(self, reg: RegRef, dt) -> np.ndarray:
        """Register `reg` for all lanes, viewed as `dt` (a cached row view of the register file)."""
        dt = np.dtype(dt)
        key = (reg.cls, dt.char, reg.idx)
        v = self._rows.get(key)
        if v is None:
            v = self.view2d(reg.cls, dt)[reg.idx]
            self._rows[key] = v
        return v

    def special(self, ref: SpecialRef):
        v = self.sp.get(ref.name)
        if v is None:
            if ref.name.startswith(("%envreg", "%pm")):
                return np.uint32(0)
            if ref.name in ("%clock", "%clock_hi", "%clock64", "%globaltimer", "%globaltimer_lo",
                            "%globaltimer_hi"):
                return None  # dynamic: handled by mov
            raise UnsupportedInstruction(f"special register {ref.name}")
        return v

    def bufview(self, space: str, dt) -> np.ndarray:
        dt = np.dtype(dt)
        key = (space, dt.char)
        v = self._bufviews.get(key)
        if v is None:
            buf = self.shared if space == "shared" else self.local
            n = len(buf) // dt.itemsize * dt.itemsize
            v = buf[:n].view(dt)
            self._bufviews[key] = v
        return v

    def sym_value(self, s: SymRef) -> tuple[str, int]:
        """(space, address) a variable symbol denotes."""
        if s.kind == "shared":
            return "shared", s.value + s.offset
        if s.kind == "dynshared":
            return "shared", self.dyn_offset + s.offset
        if s.kind == "local":
            return "local", s.value + s.offset
        if s.kind == "global":
            return "global", self.gaddr[s.value] + s.offset
        if s.kind == "kparam":
            return "param", s.value + s.offset
        raise UnsupportedInstruction(f"symbol '{s.name}' ({s.kind}) cannot be used as a value")

    # ------------------------------------------------------------------ memory access
    def fault(self, li, msg: str, space: str, addr: int, size: int, lane: int) -> MemoryFault:
        e = MemoryFault(msg, space=space, address=addr, size=size, lane=lane,
                        line=li.line if li else None, text=li.text if li else None, kernel=self.prog.kernel)
        return e

    def resolve(self, space: str, addr: np.ndarray, idx: np.ndarray, nbytes: int, write: bool, li):
        """Check an access; returns [(buffer_uint8, physical_offsets, selection_or_None)]."""
        if space == "generic":
            win = addr >> np.uint64(60)
            w0 = int(win[0])
            if (win != w0).any():
                out = []
                for w in np.unique(win):
                    sel = np.flatnonzero(win == w)
                    sp = {0: "global", 1: "shared", 2: "local", 3: "param"}.get(int(w))
                    if sp is None:
                        k = int(sel[0])
                        raise self.fault(li, f"Invalid generic {'write' if write else 'read'} of size {nbytes}"
                                         f" bytes at address {int(addr[k]):#x}: not in any address window",
                                         "generic", int(addr[k]), nbytes, int(idx[k]))
                    a = addr[sel] - np.uint64(int(w) << 60) if w else addr[sel]
                    for buf, off, s2 in self.resolve(sp, a, idx[sel], nbytes, write, li):
                        out.append((buf, off, sel if s2 is None else sel[s2]))
                return out
            if w0 == 0:
                space = "global"
            elif w0 == 1:
                space, addr = "shared", addr - np.uint64(SHARED_WINDOW)
            elif w0 == 2:
                space, addr = "local", addr - np.uint64(LOCAL_WINDOW)
            elif w0 == 3:
                space, addr = "param", addr - np.uint64(PARAM_WINDOW)
            else:
                k = 0
                raise self.fault(li, f"Invalid generic {'write' if write else 'read'} of size {nbytes} bytes "
                                 f"at address {int(addr[k]):#x}: not in any address window",
                                 "generic", int(addr[k]), nbytes, int(idx[k]))
        if nbytes & (nbytes - 1) == 0:
            mis = (addr & np.uint64(nbytes - 1)) != 0
            if mis.any():
                k = int(np.argmax(mis))
                raise self.fault(li, f"Misaligned {space} {'write' if write else 'read'} of size {nbytes} "
                                 f"bytes at address {int(addr[k]):#x}", space, int(addr[k]), nbytes, int(idx[k]))
        if space in ("global", "const"):
            return self._resolve_global(addr, idx, nbytes, write, li, space)
        if space == "shared":
            lo = addr.min()
            hi = addr.max()
            if lo < SHARED_START or int(hi) + nbytes > self.S:
                bad = (addr < SHARED_START) | (addr > np.uint64(max(self.S - nbytes, 0)))
                k = int(np.argmax(bad))
                a = int(addr[k])
                where = ("in the reserved start of the shared window" if a < SHARED_START else
                         f"{a + nbytes - self.S} bytes past the end of the CTA's {self.S - SHARED_START} bytes "
                         f"of shared memory")
                raise self.fault(li, f"Invalid __shared__ {'write' if write else 'read'} of size {nbytes} "
                                 f"bytes at shared address {a:#x}: {where}", "shared", a, nbytes, int(idx[k]))
            return [(self.shared_buf, self.shbase[idx] + addr.astype(np.int64), None)]
        if space == "local":
            lo = addr.min()
            hi = addr.max()
            if lo < LOCAL_START or int(hi) + nbytes > self.LS:
                bad = (addr < LOCAL_START) | (addr > np.uint64(max(self.LS - nbytes, 0)))
                k = int(np.argmax(bad))
                a = int(addr[k])
                raise self.fault(li, f"Invalid __local__ {'write' if write else 'read'} of size {nbytes} "
                                 f"bytes at local address {a:#x} (the thread has {self.LS} bytes of local "
                                 f"memory)", "local", a, nbytes, int(idx[k]))
            return [(self.local_buf, self.lbase[idx] + addr.astype(np.int64), None)]
        if space == "param":
            if write:
                raise self.fault(li, "write to kernel parameter space", "param", int(addr[0]), nbytes,
                                 int(idx[0]))
            hi = int(addr.max())
            if hi + nbytes > self.prog.kparam_size:
                k = int(np.argmax(addr))
                raise self.fault(li, f"Invalid param read of size {nbytes} at param offset {hi}",
                                 "param", hi, nbytes, int(idx[k]))
            return [(self.kparam_buf, addr.astype(np.int64), None)]
        raise UnsupportedInstruction(f"state space .{space}", line=li.line if li else None)

    def _resolve_global(self, addr, idx, nbytes, write, li, space):
        allocs = self.mem.allocations
        hi = addr >> np.uint64(WINDOW_BITS)
        k0 = int(hi[0])
        if (hi != k0).any():
            out = []
            for k in np.unique(hi):
                sel = np.flatnonzero(hi == k)
                for buf, off, s2 in self._resolve_global(addr[sel], idx[sel], nbytes, write, li, space):
                    out.append((buf, off, sel if s2 is None else sel[s2]))
            return out
        a = allocs[k0 - 1] if 1 <= k0 <= len(allocs) else None
        rw = "write" if write else "read"
        if a is None or a.freed:
            j = 0
            ad = int(addr[j])
            raise self.fault(li, f"Invalid __global__ {rw} of size {nbytes} bytes at address {ad:#x}: "
                             f"{self.mem.describe(ad, nbytes)}", space, ad, nbytes, int(idx[j]))
        off = addr - np.uint64(a.base)
        omax = int(off.max())
        if omax + nbytes > a.nbytes:
            if not write and self.memcheck == "device" and omax + nbytes <= a.nbytes + mapped_tail(a):
                return self._overread(a, addr, off, idx, nbytes, li, space)
            j = int(np.argmax(off > np.uint64(max(a.nbytes - nbytes, 0)))) if a.nbytes >= nbytes else 0
            ad = int(addr[j])
            raise self.fault(li, f"Invalid __global__ {rw} of size {nbytes} bytes at address {ad:#x}: "
                             f"{self.mem.describe(ad, nbytes)}", space, ad, nbytes, int(idx[j]))
        if write and a.readonly:
            ad = int(addr[0])
            raise self.fault(li, f"Invalid __global__ write of size {nbytes} bytes at address {ad:#x}: "
                             f"allocation '{a.name}' is read-only", space, ad, nbytes, int(idx[0]))
        offi = off.astype(np.int64)
        if a.valid is not None:
            self._check_gaps(a, a.valid, addr, offi, idx, nbytes, rw, li, space)
        return [(a, offi, None)]

    def _check_gaps(self, a, valid, addr, offi, idx, nbytes, rw, li, space) -> None:
        """Fault on an access to the bytes between the elements of a strided array (`valid` is False there)."""
        ok = valid[offi]
        for b in range(1, nbytes):
            ok &= valid[offi + b]
        if not ok.all():
            j = int(np.argmin(ok))
            ad = int(addr[j])
            raise self.fault(li, f"Invalid __global__ {rw} of size {nbytes} bytes at address {ad:#x}: "
                             f"between the elements of strided array '{a.name}' (offset {int(offi[j])})",
                             space, ad, nbytes, int(idx[j]))

    def _overread(self, a, addr, off, idx, nbytes, li, space):
        """`memcheck="device"`: a read reaching past the end of `a` but not past its last page (memory.py) reads
        UNSPECIFIED_BYTE there, from a copy of the allocation's tail; the furthest such byte is noted for
        `memcheck_warnings`."""
        offi = off.astype(np.int64)
        end = int(offi.max()) + nbytes
        lo = int(offi.min()) // 16 * 16
        tail = np.full(_pad16(end - lo), UNSPECIFIED_BYTE, dtype=np.uint8)
        kept = max(a.nbytes - lo, 0)
        tail[:kept] = a.data[lo:lo + kept]
        if a.valid is not None:
            valid = np.ones(end, dtype=bool)
            valid[:a.nbytes] = a.valid[:a.nbytes]
            self._check_gaps(a, valid, addr, offi, idx, nbytes, "read", li, space)
        seen = self.overreads.setdefault(a.index, [0, li])
        seen[0] = max(seen[0], end - a.nbytes)
        return [(_Buf(tail), offi - lo, None)]

    def memcheck_warnings(self) -> list[str]:
        """One line per allocation read past its end under `memcheck="device"` (in allocation order)."""
        out = []
        for k, (past, li) in sorted(self.overreads.items()):
            a = self.mem.allocations[k]
            where = f"PTX line {li.line} ({li.text})" if li is not None else "a global read"
            out.append(f"kernel {self.prog.kernel} reads up to {past} bytes past the end of '{a.name}' "
                       f"({a.nbytes} bytes) at {where}: unspecified data on a GPU, read here as {UNSPECIFIED_BYTE:#x} "
                       f"bytes (--memcheck device); compute-sanitizer's memcheck would report it")
        return out

    def _fast(self, space, addr, idx, nbytes: int, write: bool):
        """(buffer, byte offsets) when the access is in bounds, aligned and in one allocation; else None.

        The common case takes a handful of vectorised operations; anything else (several
        allocations, strided arrays, read-only data, faults) goes through `resolve`.
        """
        mask = np.uint64(nbytes - 1)
        if space == "shared" or space == "local":
            start = SHARED_START if space == "shared" else LOCAL_START
            size = self.S if space == "shared" else self.LS
            lim = size - start - nbytes
            if lim < 0:
                return None
            bad = (addr - np.uint64(start)) > np.uint64(lim)
            if nbytes > 1:
                bad |= (addr & mask).astype(bool)
            if bad.any():
                return None
            base = self.shbase if space == "shared" else self.lbase
            buf = self.shared_buf if space == "shared" else self.local_buf
            return buf, (base if idx is self.all_idx else base[idx]) + addr.astype(np.int64)
        if space == "global":
            k0 = int(addr[0]) >> WINDOW_BITS
            allocs = self.mem.allocations
            if not 1 <= k0 <= len(allocs):
                return None
            a = allocs[k0 - 1]
            if a.freed or a.valid is not None or (write and a.readonly) or a.nbytes < nbytes:
                return None
            off = addr - np.uint64(a.base)
            bad = off > np.uint64(a.nbytes - nbytes)
            if nbytes > 1:
                bad |= (off & mask).astype(bool)
            if bad.any():
                return None
            return a, off
        return None

    def load(self, space, addr, idx, esize: int, dt, vec: int, li) -> np.ndarray:
        """Values (shape [n] or [n, vec]) of dtype `dt` (itemsize esize) at each address."""
        nbytes = esize * vec
        sh = _SHIFT[esize]
        fast = self._fast(space, addr, idx, nbytes, False)
        if fast is not None:
            buf, off = fast
            if self.races is not None and space == "shared":
                self.races.load(off, idx, nbytes, li, self)
            return buf.view(dt)[_elements(off, sh, vec)]
        groups = self.resolve(space, addr, idx, nbytes, False, li)
        for off, lanes, _ in self._shared_groups(groups, idx):
            self.races.load(off, lanes, nbytes, li, self)
        if len(groups) == 1 and groups[0][2] is None:
            buf, off, _ = groups[0]
            return buf.view(dt)[_elements(off, sh, vec)]
        out = np.empty((len(addr), vec) if vec > 1 else len(addr), dtype=dt)
        for buf, off, sel in groups:
            out[sel] = buf.view(dt)[_elements(off, sh, vec)]
        return out

    def store(self, space, addr, idx, esize: int, dt, vec: int, vals, li) -> None:
        nbytes = esize * vec
        sh = _SHIFT[esize]
        fast = self._fast(space, addr, idx, nbytes, True)
        if fast is not None:
            buf, off = fast
            if self.races is not None and space == "shared":
                self.races.store(off, idx, nbytes, li, self, _bytes_of(vals, len(off), nbytes))
            buf.view(dt)[_elements(off, sh, vec)] = vals
            return
        groups = self.resolve(space, addr, idx, nbytes, True, li)
        shared = self._shared_groups(groups, idx)
        data = _bytes_of(vals, len(addr), nbytes) if shared else None
        for off, lanes, sel in shared:
            self.races.store(off, lanes, nbytes, li, self, data if sel is None else data[sel])
        for buf, off, sel in groups:
            buf.view(dt)[_elements(off, sh, vec)] = vals if sel is None else vals[sel]

    def _shared_groups(self, groups, idx):
        """(offsets, lanes, selection) of the shared-memory parts of a resolved access, when races are checked
        (generic addresses into the shared window land here, not in `_fast`)."""
        if self.races is None:
            return []
        return [(off, idx if sel is None else idx[sel], sel) for buf, off, sel in groups if buf is self.shared_buf]

    # ------------------------------------------------------------------ building
    def _build(self) -> None:
        prog = self.prog
        self.blocks = []
        self.block_classes = []       # per block: its instructions per class of stats.CLASSES
        self.unsupported = []
        for bi, b in enumerate(prog.blocks):
            ops = []
            for li in b.body:
                try:
                    ops.append(isa.build(self, li))
                except UnsupportedInstruction as e:
                    # reported when (and only if) the instruction executes
                    self.unsupported.append(e)
                    ops.append(_raiser(e, self, li))
            try:
                kind, arg = self._build_term(b, bi)
            except UnsupportedInstruction as e:
                self.unsupported.append(e)
                kind, arg = "error", e
            self.blocks.append((tuple(ops), kind, arg, len(b.body) + (1 if b.term is not None else 0), b))
            self.block_classes.append(class_vector(li.opcode for li in b.body + ([b.term] if b.term else [])))
        self.block_lanes = [0] * len(self.blocks)

    def _build_term(self, b, bi):
        t = b.term
        if b.kind == "fall":
            return "fall", None
        if b.kind == "yield":
            return "yield", None
        if b.kind == "exit":
            if t is not None:
                isa.Mods(t).done_control(("uni",))
            if t is not None and t.pred is not None:
                return "cexit", (self.row(t.pred, np.bool_), t.pred_neg)
            return "exit", None
        if b.kind == "bra":
            mods = isa.Mods(t)
            mods.take("uni")
            mods.done()
            target = self.prog.label_block[t.ops[0].value]
            if t.pred is None:
                return "bra", target
            return "cbra", (self.row(t.pred, np.bool_), t.pred_neg, target)
        if b.kind == "bar":
            return "bar", isa.build_barrier(self, t)
        if b.kind == "trap":
            return "trap", t
        raise UnsupportedInstruction(f"{t.opcode} is not supported", line=t.line, text=t.text,
                                     kernel=self.prog.kernel)

    # ------------------------------------------------------------------ running
    def run(self) -> None:
        with np.errstate(all="ignore"), _no_gc():
            for bi in range(self.nbatches):
                first = bi * self.B
                ctas = list(range(first, min(first + self.B, self.ncta)))
                self._setup_batch(ctas)
                try:
                    self._run_batch()
                    self._finish_cp_async(None)
                    for fn in isa.BATCH_END:
                        fn(self)
                except EmuError as e:
                    self._annotate(e)
                    raise

    def _setup_batch(self, ctas: list) -> None:
        gx, gy, _ = self.grid
        self.ctas = ctas
        for R in self.R.values():
            R.fill(0)
        self.cc.fill(0)
        self.shared.fill(0)
        if self.races is not None:
            self.races.reset()
        self.local.fill(0)
        cx = np.zeros(self.B, np.uint32)
        cy = np.zeros(self.B, np.uint32)
        cz = np.zeros(self.B, np.uint32)
        for s, c in enumerate(ctas):
            cx[s], cy[s], cz[s] = c % gx, (c // gx) % gy, c // (gx * gy)
        slot = self.cta_slot
        self.sp["%ctaid.x"][:] = cx[slot]
        self.sp["%ctaid.y"][:] = cy[slot]
        self.sp["%ctaid.z"][:] = cz[slot]
        self.live[:] = (self.tlin < self.T) & (slot < len(ctas))
        self.cp_records = []
        self.cp_committed.fill(0)
        self.mbar = {}
        self.stall_version, self.stall_clean, self.stall_pc, self.lone_wait = -1, False, None, None
        self.bar_arrived = np.zeros((self.B, 16), dtype=np.int64)
        for fn in isa.BATCH_START:
            fn(self)

    def lane_ids(self, lane: int):
        slot, t = divmod(int(lane), self.Tp)
        bx, by, _ = self.block
        gx, gy, _ = self.grid
        c = self.ctas[slot] if slot < len(self.ctas) else -1
        return (c % gx, (c // gx) % gy, c // (gx * gy)), (t % bx, (t // bx) % by, t // (bx * by))

    def _annotate(self, e: EmuError) -> None:
        e.kernel = e.kernel or self.prog.kernel
        lane = getattr(e, "lane", None)
        if lane is not None and self.ctas:
            e.block, e.thread = self.lane_ids(lane)

    def _run_batch(self) -> None:
        blocks = self.blocks
        L = self.L
        live = self.live
        m = True if live.all() else live.copy()
        nact = L if m is True else int(np.count_nonzero(m))
        if nact == 0:
            return
        pc = 0
        pending: dict = {}
        blocked: dict = {}
        yielded: dict = {}
        BIG = 1 << 60
        limit = BIG
        ti = 0
        steps = 0
        max_steps = self.max_steps
        count_nonzero = np.count_nonzero
        pick = self._pick
        block_lanes = self.block_lanes
        while True:
            ops, kind, arg, nops, spec = blocks[pc]
            for f in ops:
                f(m)
            ti += nops * nact
            block_lanes[pc] += nact
            steps += 1
            if kind == "fall":
                npc = pc + 1
            elif kind == "bra":
                npc = arg
            elif kind == "cbra":
                prow, neg, target = arg
                if m is True:
                    t = ~prow if neg else prow.copy()
                else:
                    t = (m & ~prow) if neg else (m & prow)
                c = int(count_nonzero(t))
                if c == 0:
                    npc = pc + 1
                elif c == nact:
                    npc = target
                else:
                    nt = ~t if m is True else (m & ~t)
                    _merge(pending, target, t)
                    m, nact, npc = nt, nact - c, pc + 1
                    limit = min(limit, target)
            elif kind == "exit" or kind == "cexit":
                exit_all = True
                if kind == "cexit":
                    prow, neg = arg
                    if m is True:
                        ex = ~prow if neg else prow.copy()
                    else:
                        ex = (m & ~prow) if neg else (m & prow)
                    c = int(count_nonzero(ex))
                    if c < nact:
                        exit_all = False
                        npc = pc + 1
                        if c:
                            live &= ~ex
                            m = ~ex if m is True else (m & ~ex)
                            nact -= c
                if exit_all:
                    if m is True:
                        live[:] = False
                    else:
                        live &= ~m
                    self.stall_clean = False
                    pc, m, nact, limit = pick(pending, blocked, yielded)
                    if pc is None:
                        break
                    continue
            elif kind == "bar":
                res = self._barrier(pc, m, arg, pending, blocked)
                if res is None:
                    self.stall_clean = False
                    pc, m, nact, limit = pick(pending, blocked, yielded)
                    if pc is None:
                        break
                    continue
                m, nact = res
                npc = pc + 1
            elif kind == "yield":
                npc = pc + 1
                failed = self.wait_failed
                self.wait_failed = False
                if failed and not (pending or blocked or yielded):
                    # alone: failing again at the same wait with no mbarrier changed in between is forever
                    if self.lone_wait == (pc, self.sync_version):
                        raise self._wait_deadlock(spec, "no other thread can arrive")
                    self.lone_wait = (pc, self.sync_version)
                elif pending or blocked or yielded:
                    if failed:
                        self.stall_pc = pc
                    else:
                        self.stall_clean = False
                    _merge(yielded, npc, m if m is not True else np.ones(L, bool))
                    pc, m, nact, limit = pick(pending, blocked, yielded)
                    if pc is None:
                        break
                    continue
            elif kind == "trap":
                isa.raise_trap(self, arg, m)
            elif kind == "error":
                e = arg
                e.lane = int(np.argmax(isa.full_mask(self, m)))
                raise e
            else:  # pragma: no cover
                raise EmuError(f"internal: block kind {kind}")
            if max_steps is not None and steps > max_steps:
                raise EmuError(f"step budget of {max_steps} blocks exceeded (infinite loop?)",
                               kernel=self.prog.kernel)
            if npc < limit:
                pc = npc
                continue
            _merge(pending, npc, m if m is not True else np.ones(L, bool))
            self.stall_clean = False
            pc, m, nact, limit = pick(pending, blocked, yielded)
            if pc is None:
                break
        self.thread_instructions += ti
        self.instructions += steps

    def instruction_classes(self) -> dict[str, int]:
        """Thread-instructions executed so far per class (stats.CLASSES); they sum to `thread_instructions`."""
        return tally(self.block_classes, self.block_lanes)

    def _pick(self, pending, blocked, yielded):
        """Next group to run: the lowest PC of the runnable groups; else the groups a barrier releases; else
        the groups that yielded at an mbarrier wait or nanosleep (a new round of waiters).

        Barriers are released before waiters run again, so warps spinning on an mbarrier never starve the
        warps that are through a named barrier and will arrive on it.  A round of waiters in which every
        one failed its wait again while no mbarrier changed (`sync_version`) since the previous round can
        never end: a deadlock, reported as such.
        """
        while True:
            if not pending and blocked and not self._release_barriers(pending, blocked) and not yielded:
                self._barrier_deadlock(blocked)
            if not pending and yielded:
                if self.stall_clean and self.sync_version == self.stall_version:
                    pc = self.stall_pc if self.stall_pc is not None else min(yielded)
                    raise self._wait_deadlock(self.blocks[pc][4], "every thread that could arrive is waiting"
                                              + (" at a barrier or" if blocked else "") + " on an mbarrier")
                self.stall_version, self.stall_clean = self.sync_version, True
                for k, v in yielded.items():
                    _merge(pending, k, v)
                yielded.clear()
            if not pending:
                return None, None, 0, 0
            pc = min(pending)
            m = pending.pop(pc)
            m &= self.live
            nact = int(np.count_nonzero(m))
            if nact == 0:
                continue
            if nact == self.L:
                m = True
            limit = min(pending) if pending else (1 << 60)
            return pc, m, nact, limit

    # ------------------------------------------------------------------ barriers
    def _barrier(self, pc, m, arg, pending, blocked):
        """Arrive at the barrier ending block `pc`.  Returns (mask, count) to continue, or None to wait."""
        idf, cntf, mode, _li = arg
        if mode == "arrive":
            mm = np.ones(self.L, bool) if m is True else m
            np.add.at(self.bar_arrived, (self.cta_slot[mm], idf(mm)), 1)
            return (m, self.L if m is True else int(np.count_nonzero(m)))
        if not pending and not blocked and cntf is None:
            if m is True:
                if self.races is not None:
                    self.races.barrier(self.lane)
                return (m, self.L)
            if not (self.live & ~m).any():
                if self.races is not None:
                    self.races.barrier(m)
                return (m, int(np.count_nonzero(m)))
        _merge(blocked, pc, np.ones(self.L, bool) if m is True else m.copy())
        return None

    def _release_barriers(self, pending, blocked) -> bool:
        B, Tp, L = self.B, self.Tp, self.L
        waiting = np.zeros(L, dtype=bool)
        ids = np.full(L, -1, dtype=np.int64)
        counts = np.zeros(L, dtype=np.int64)
        for pc, mm in blocked.items():
            idf, cntf, _mode, _li = self.blocks[pc][2]
            mm = mm & self.live
            blocked[pc] = mm
            waiting |= mm
            ids[mm] = idf(mm)
            if cntf is not None:
                counts[mm] = cntf(mm)
        W = waiting.reshape(B, Tp)
        ID = ids.reshape(B, Tp)
        C = counts.reshape(B, Tp)
        LV = self.live.reshape(B, Tp)
        rel = np.zeros((B, Tp), dtype=bool)
        group = np.zeros((B, Tp), dtype=np.int64)     # the barrier id each released lane completed
        for slot in np.flatnonzero(W.any(1)):
            w = W[slot]
            for bid in np.unique(ID[slot][w]):
                sel = w & (ID[slot] == bid)
                need = int(C[slot][sel].max())
                arrived = int(sel.sum()) + (int(self.bar_arrived[slot, bid]) if 0 <= bid < 16 else 0)
                ok = arrived >= need if need > 0 else not (LV[slot] & ~sel).any()
                if ok:
                    rel[slot] |= sel
                    group[slot][sel] = bid
                    if 0 <= bid < 16:
                        self.bar_arrived[slot, bid] = 0
        if not rel.any():
            return False
        flat = rel.reshape(-1)
        if self.races is not None:     # each CTA's barriers join their own participants
            lanes = np.flatnonzero(flat)
            self.races.barrier(lanes, lanes // Tp * (1 << 32) + group.reshape(-1)[lanes])
        for pc in list(blocked):
            hit = blocked[pc] & flat
            if hit.any():
                _merge(pending, pc + 1, hit)
                rest = blocked[pc] & ~flat
                if rest.any():
                    blocked[pc] = rest
                else:
                    del blocked[pc]
        return True

    def _wait_deadlock(self, spec, why: str) -> BarrierError:
        li = spec.body[-1] if spec.body else None
        return BarrierError(f"mbarrier wait can never complete: {why}", line=li.line if li else None,
                            text=li.text if li else None, kernel=self.prog.kernel)

    def _barrier_deadlock(self, blocked) -> None:
        pc = min(blocked)
        li = self.blocks[pc][2][3]
        mm = blocked[pc]
        lane = int(np.argmax(mm))
        slot = lane // self.Tp
        live = self.live.reshape(self.B, self.Tp)[slot]
        waiting = np.zeros(self.Tp, dtype=bool)
        for w in blocked.values():
            waiting |= w.reshape(self.B, self.Tp)[slot]
        missing = np.flatnonzero(live & ~waiting)
        e = BarrierError(
            f"barrier can never complete: {int(waiting.sum())} of {int(live.sum())} live threads of the CTA "
            f"are waiting" + (f"; thread(s) {', '.join(str(int(t)) for t in missing[:8])} never arrive"
                              if len(missing) else "; the requested thread count is never reached"),
            line=li.line if li else None, text=li.text if li else None, kernel=self.prog.kernel)
        e.block, _ = self.lane_ids(lane)
        raise e

    # ------------------------------------------------------------------ cp.async
    def _finish_cp_async(self, lanes_mask, keep_groups: int | None = None) -> None:
        """Complete outstanding cp.async copies of the given lanes (all lanes when None)."""
        if not self.cp_records:
            return
        remaining = []
        for rec in self.cp_records:
            lanes, dst, data, seq = rec
            if lanes_mask is None:
                done = np.ones(len(lanes), bool)
            else:
                done = lanes_mask[lanes]
                if keep_groups is not None:
                    lim = self.cp_committed[lanes] - keep_groups
                    done &= (seq >= 0) & (seq < lim)
            if done.any():
                sel = np.flatnonzero(done)
                ph = dst[sel]
                nbytes = data.shape[1]
                if self.races is not None:     # the copy lands: a write by the thread that issued it
                    self.races.store(ph, lanes[sel], nbytes, None, self, data[sel])
                self.shared[(ph[:, None] + np.arange(nbytes)).reshape(-1)] = data[sel].reshape(-1)
                keep = ~done
                if keep.any():
                    remaining.append((lanes[keep], dst[keep], data[keep], seq[keep]))
            else:
                remaining.append(rec)
        self.cp_records = remaining


def _bytes_of(vals, n: int, nbytes: int) -> np.ndarray:
    """[n, nbytes] uint8: the bytes a store of `vals` (n values of nbytes each) writes, in address order."""
    v = np.ascontiguousarray(vals)
    return np.broadcast_to(v.view(np.uint8).reshape(-1, nbytes), (n, nbytes)) if v.size else v.view(np.uint8)


@contextlib.contextmanager
def _no_gc():
    """Pause the cyclic garbage collector: building thousands of closures otherwise triggers full
    collections over the register views (the emulator creates no reference cycles while running)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _raiser(e: EmuError, mc=None, li=None):
    """A closure raising `e` when its instruction executes for at least one lane."""
    def f(m):
        if mc is not None:
            mm = isa.full_mask(mc, m)
            if li is not None and li.pred is not None:
                prow = mc.row(li.pred, np.bool_)
                mm = mm & (~prow if li.pred_neg else prow)
            if not mm.any():
                return
            e.lane = int(np.argmax(mm))
        raise e
    return f


def _merge(d: dict, pc: int, mask) -> None:
    cur = d.get(pc)
    if cur is None:
        d[pc] = mask
    else:
        d[pc] = cur | mask


class _Buf:
    """A byte buffer with cached typed views (shared, local and parameter memory)."""

    __slots__ = ("data", "views")

    def __init__(self, data: np.ndarray):
        self.data = data
        self.views = {}

    def view(self, dt) -> np.ndarray:
        dt = np.dtype(dt)
        v = self.views.get(dt.char)
        if v is None:
            n = len(self.data) // dt.itemsize * dt.itemsize
            v = self.data[:n].view(dt)
            self.views[dt.char] = v
        return v


def _param_bytes(kp, v) -> np.ndarray:
    """The bytes of value `v` for kernel parameter `kp` (ints, floats, device addresses or raw bytes)."""
    size = kp.size
    t = kp.type
    if isinstance(v, (bytes, bytearray)):
        b = np.frombuffer(bytes(v), np.uint8)
    elif isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.size == size:
        b = v
    else:
        if t.startswith("f") and t != "f16x2":
            dt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}.get(t)
            if dt is None:
                raise LaunchError(f"parameter {kp.name}: cannot pass a value for type .{t}")
            if isinstance(v, np.generic) and v.dtype.kind in "iu" and v.dtype.itemsize == size:
                b = np.frombuffer(v.tobytes(), np.uint8)
            else:
                b = np.frombuffer(np.asarray(v, dtype=dt).tobytes(), np.uint8)
        else:
            if isinstance(v, (float, np.floating)):
                fdt = {2: np.float16, 4: np.float32, 8: np.float64}[size]
                b = np.frombuffer(np.asarray(v, dtype=fdt).tobytes(), np.uint8)
            else:
                iv = int(v) & ((1 << (8 * size)) - 1)
                b = np.frombuffer(iv.to_bytes(size, "little"), np.uint8)
    if len(b) != size:
        raise LaunchError(f"parameter {kp.name} is {size} bytes, got {len(b)}")
    return b


def _init_bytes(v, mc: Machine) -> bytes | None:
    if not v.init:
        return None
    esize = v.elem_size
    out = bytearray()
    for item in v.init:
        if isinstance(item, Imm):
            out += (item.value & ((1 << (8 * esize)) - 1)).to_bytes(esize, "little")
        elif isinstance(item, FImm):
            val = item.value
            if v.type in ("f32",):
                out += np.float32(val).tobytes()
            elif v.type == "f64":
                out += np.float64(val).tobytes()
            else:
                out += (item.bits & ((1 << (8 * esize)) - 1)).to_bytes(esize, "little")
        else:
            raise UnsupportedInstruction(f"initializer '{item}' of '{v.name}' (addresses in initializers)",
                                         line=v.line)
    return bytes(out)
