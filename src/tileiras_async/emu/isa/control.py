"""Control and synchronisation: bar/barrier (the block terminators' operands), fences (checked no-ops: one
consistent memory), setmaxnreg, scheduling hints, nanosleep, trap.
"""
from __future__ import annotations

import numpy as np

from ..parser import Imm
from .core import Mods, _err, check_nops, full_mask, getter, op, raise_trap
from .warp import _aligned_check


def build_barrier(mc, li):
    """(id_fn, count_fn, mode, li) for bar.sync / bar.arrive / barrier.sync."""
    mods = Mods(li)
    mods.ignore("aligned", "cta")
    mode = mods.take("sync", "arrive", "red")
    if mods.base == "bar" and mode is None and not mods.parts:
        mode = "sync"
    if mode is None:
        raise _err(li, f"{li.opcode} is not supported")
    if mode == "red":
        raise _err(li, "bar.red is not supported")
    mods.done()
    if li.pred is not None:
        raise _err(li, "predicated barriers are not supported")
    ops = li.ops
    if not ops:
        if mods.base == "barrier" and mode == "sync":
            ops = [Imm(0)]
        else:
            raise _err(li, "barrier without an id")
    if len(ops) > 2:
        raise _err(li, f"{li.opcode} takes at most 2 operands")

    def val_fn(o):
        if isinstance(o, Imm):
            c = int(o.value)
            return lambda mm: c
        g = getter(mc, o, "u32", li)

        def fn(mm):
            v = np.asarray(g())
            return v.astype(np.int64) if v.ndim == 0 else v[mm].astype(np.int64)
        return fn
    idf = val_fn(ops[0])
    if isinstance(ops[0], Imm) and not 0 <= ops[0].value < 16:
        raise _err(li, "barrier id must be in 0..15")
    cntf = val_fn(ops[1]) if len(ops) == 2 else None
    if mode == "arrive" and cntf is None:
        raise _err(li, "bar.arrive requires a thread count")
    return (idf, cntf, mode, li)


@op("griddepcontrol", "pmevent")
def _nop(mc, li):
    """Scheduling hints and performance events: nothing to do."""
    return lambda m: None


_FENCE_MODS = {"sc", "acq_rel", "acquire", "release", "cta", "cluster", "gpu", "sys", "gl", "proxy", "alias",
               "async", "global", "shared::cta", "shared::cluster", "mbarrier_init", "tensormap::generic",
               "op_restrict"}


@op("membar", "fence")
def _fence(mc, li):
    """Memory fences (thread, proxy, mbarrier-init): the emulator has one sequentially consistent memory
    shared by the generic and async proxies, so every fence is satisfied; the modifiers are checked."""
    mods = Mods(li)
    mods.ignore(*_FENCE_MODS)
    mods.done()
    return lambda m: None


@op("setmaxnreg")
def _setmaxnreg(mc, li):
    """setmaxnreg.inc|dec.sync.aligned.u32 n: a register-allocation hint for the warpgroup (n in 24..256,
    a multiple of 8); the emulator has no register budget, it checks the form and warp convergence."""
    mods = Mods(li)
    if not mods.take("inc", "dec") or not (mods.has("sync") and mods.has("aligned")):
        raise _err(li, "setmaxnreg needs .inc or .dec and .sync.aligned")
    mods.type1({"u32"})
    mods.done()
    check_nops(li, 1)
    n = li.ops[0]
    if not isinstance(n, Imm) or not 24 <= n.value <= 256 or n.value % 8:
        raise _err(li, f"setmaxnreg register count {n} must be an immediate multiple of 8 in 24..256")

    def f(m):
        mm = full_mask(mc, m)
        if mm.any():
            _aligned_check(mc, li, mm)
    return f


@op("nanosleep")
def _nanosleep(mc, li):
    return lambda m: None


@op("trap", "brkpt")
def _trap(mc, li):
    def f(m):
        raise_trap(mc, li, m)
    return f


@op("exit", "ret", "bra")
def _control_in_body(mc, li):  # pragma: no cover - control instructions end blocks
    raise _err(li, f"{li.opcode} in straight-line code")
