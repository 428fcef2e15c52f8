"""choose-warps: more warps for a loop whose mma accumulators would not fit one thread's registers.

Contract: in: tile-GPU IR before select-mma (no plans, no layouts yet). out: the same IR; `k.options.num_warps`
is doubled (up to MAX_WARPS) while a loop body keeps the accumulators of two or more mmas live at once (an
attention kernel's S = Q K^T and O += P V) and those accumulators alone need more than ACC_REGISTER_BUDGET
32-bit registers per thread, on a target with warpgroup or tcgen05 MMA. Every later pass plans for the new
count (mma plans, layouts, .reqntid).
Why: cuTile's FMHA sample at 128x128 tiles, D=64, holds 128x128 + 128x64 f32 accumulators: 192 registers a
thread at 4 warps, so with Q, K and V fragments ptxas capped at 255 registers and spilled (sm_90: 516 local
instructions). NVIDIA's tileiras launches this kernel with 256 threads; at 8 warps the accumulators take 96
registers and nothing spills. A loop with one mma (a matmul's K-loop) is left alone: its tile is what the
kernel's author sized for 4 warps, and more warps would only shrink each warp's share of the same work.
Before sm_90 NVIDIA's tool keeps such a kernel at 128 threads (and spills): so is ours, the launch the same.
On tcgen05 (sm_100) the accumulators live in tensor memory while the mmas run, and a `tcgen05.ld` 32x32b gives
warp w the lanes 32*(w%4)..+31 only: at 8 warps each row of S is split between warps w and w+4, whose row
max and row sum then cross through shared memory behind a CTA barrier each (twice an iteration).  At 4 warps
each thread holds whole rows of every 128-row accumulator (S's 128 columns, O's 64: 192 registers), its
reductions thread-local, as NVIDIA's softmax warpgroup of 128 threads runs it.  So such a loop stays at 4
warps where its B tiles (K, V) land by TMA -- the launch hints promise the tensor maps' unit stride and
16-byte alignment (`tensor_rows_aligned`) -- so that no thread also holds K and V fragments to stage them
(unhinted, fmha_f16 at 4 warps spilled 1148 local instructions, against 122 at 8).
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from ...ir.core import Operation
from ..analysis.mma import TCGEN05_PREFIX, choose_instruction
from ..analysis.tcgen05 import SUBPARTITION_WARPS, TMEM_COLUMNS
from ..analysis.tensor_maps import tensor_rows_aligned
from ..ir import KernelIR, own_ops, walk_ops
from ..layout import WARP_SIZE
from ..types import elem_bytes

_MMA = ("mmaf", "mmai")
_LOOPS = ("for", "loop")
ACC_REGISTER_BUDGET = 128   # half of a thread's 255: the rest holds operands, softmax state and addresses
MAX_WARPS = 8               # two warpgroups: what NVIDIA's tool uses for attention
MMA_ROWS_PER_WARP = 16      # an mma accumulator's rows are split over warps in 16-row fragments
TMEM_LANES = 128            # tensor memory's lanes: a 128-row tcgen05 accumulator keeps row r in lane r


def accumulator_registers(mmas, num_warps: int) -> int:
    """32-bit registers one thread needs for the accumulators of `mmas` at `num_warps` warps."""
    words = sum(prod(op.result.type.shape) * elem_bytes(op.result.type) // 4 for op in mmas)
    return -(-words // (num_warps * WARP_SIZE))


def _splits_rows(mmas, num_warps: int) -> bool:
    """Every mma's rows still give each warp whole 16-row fragments at `num_warps`."""
    return all(op.result.type.shape[-2] % (MMA_ROWS_PER_WARP * num_warps) == 0 for op in mmas)


def _landed_by_tma(mma: Operation) -> bool:
    """The mma's B operand is a tile loaded (through reshapes) from a view whose tensor a map can describe:
    what the attention pipeline lands by TMA."""
    rhs = mma.operands["rhs"]
    while isinstance(rhs.owner, Operation) and rhs.owner.name == "reshape":
        rhs = rhs.owner.operands["source"]
    load = rhs.owner
    if not isinstance(load, Operation) or load.name != "load_view_tko":
        return False
    return tensor_rows_aligned(load.operands["view"], len(rhs.type.shape), elem_bytes(rhs.type))


def rows_in_threads(mmas, options) -> bool:
    """At the options' warp count (4: one warp per tensor-memory sub-partition) every mma of `mmas` runs on
    tcgen05 (select-mma's choice: its accumulator within tcgen05's per-thread limit), each thread holds
    whole rows of every accumulator (128-row tiles; their columns fit tensor memory together), and their B
    tiles land by TMA: the loop needs no more warps (module docstring)."""
    if options.num_warps != SUBPARTITION_WARPS:
        return False
    shapes = [op.result.type.shape for op in mmas]
    if any(len(s) != 2 or s[0] % TMEM_LANES for s in shapes):
        return False
    if sum(s[0] // TMEM_LANES * s[1] for s in shapes) > TMEM_COLUMNS:
        return False
    return all(choose_instruction(options, op).startswith(TCGEN05_PREFIX) and _landed_by_tma(op) for op in mmas)


def warps_for(loops_mmas: list[list], num_warps: int, options=None) -> int:
    """The warp count the heaviest multi-mma loop needs to keep its accumulators within the budget (given a
    tcgen05 target's `options`, none more for a loop whose rows stay in threads)."""
    for mmas in loops_mmas:
        if len(mmas) < 2 or (options is not None and rows_in_threads(mmas, options)):
            continue
        while (accumulator_registers(mmas, num_warps) > ACC_REGISTER_BUDGET and num_warps * 2 <= MAX_WARPS
               and _splits_rows(mmas, num_warps * 2)):
            num_warps *= 2
    return num_warps


def _widens_attention(k: KernelIR) -> bool:
    """Where NVIDIA's tool runs attention on 256 threads: the targets with warpgroup or tcgen05 MMA."""
    tgt = k.options.known_target
    return tgt is not None and (tgt.has_wgmma or tgt.has_tcgen05)


def run(k: KernelIR) -> None:
    if not _widens_attention(k):
        return
    loops = [[o for o in own_ops(b) if o.name in _MMA]
             for op in walk_ops(k.fn.body) if op.name in _LOOPS for r in op.regions for b in r.blocks]
    before = k.options.num_warps
    tcgen05 = k.options if k.options.known_target.has_tcgen05 else None
    after = warps_for(loops, before, tcgen05)
    if after == before:
        if tcgen05 and any(len(m) > 1 and rows_in_threads(m, tcgen05) for m in loops):
            k.remark("passed", "mma", "AccumulatorRowsInThreads",
                     f"{before} warps: each thread holds whole rows of the attention loop's tensor-memory "
                     "accumulators, its row reductions thread-local")
        return
    k.options = replace(k.options, num_warps=after)
    k.remark("passed", "mma", "MoreWarpsForAccumulators",
             f"{after} warps instead of {before}: a loop's mma accumulators need "
             f"{max(accumulator_registers(m, before) for m in loops if len(m) > 1)} registers a thread at "
             f"{before} warps")
