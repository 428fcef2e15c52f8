"""Instruction semantics: one builder per PTX opcode family, in one module per family.

A builder gets the machine and a linked instruction, checks every modifier
(anything it does not know is an `UnsupportedInstruction` naming the modifier
and the PTX line -- never a guess) and returns a closure ``f(mask)`` that
executes the instruction for all active lanes at once.  ``mask`` is ``True``
when every lane of the batch is active, else a boolean lane mask; a guard
predicate is folded into the mask by `build`.

Register operands are pre-resolved to row views of the register files, so the
common instructions are one or two numpy calls.

Every family module registers its builders in the one registry `core.OPS`
(with the `core.op` decorator) when it is imported; importing this package
imports them all.

    core        registry, modifiers, operands, addresses, `build`
    data        mov, logic, selp, slct
    integer     integer arithmetic and bit manipulation
    compare     setp, set
    floating    floating-point arithmetic and special functions
    convert     cvt, cvta, isspacep
    memory      ld/st, atom/red, prefetch
    control     barriers, fences, nanosleep, trap
    warp        shfl, vote, match, redux, elect, activemask
    mma         mma.sync, ldmatrix, stmatrix
    wgmma       Hopper warpgroup MMA (fence, commit/wait groups, mma_async)
    tcgen05     Blackwell tensor memory and MMA (alloc, ld/st, mma, commit, fences)
    async_copy  cp.async groups
    bulk_copy   cp.async.bulk (non-tensor TMA) copies, bulk groups
    tensor_copy cp.async.bulk.tensor (TMA through tensor maps), tensor-map decoding
    mbarrier    mbarrier phases, arrivals and transaction counts
    descriptors shared-memory matrix and tcgen05 instruction descriptors
"""
from __future__ import annotations

from . import (  # noqa: F401 - importing a family registers its builders
    async_copy, compare, control, convert, data, floating, integer, mbarrier, memory, mma, tcgen05, warp, wgmma,
)
from .control import build_barrier
from .core import BATCH_END, BATCH_START, OPS, Mods, build, full_mask, raise_trap

__all__ = ["BATCH_END", "BATCH_START", "OPS", "Mods", "build", "build_barrier", "full_mask", "raise_trap"]
