"""Blackwell tensor cores: tensor memory and the tcgen05 family (sm_100a, .cta_group::1).

Tensor memory (TMEM) is per CTA: 128 lanes x 512 columns of 32 bits, addressed as
``lane << 16 | column``.  A warp may only touch the 32 lanes of its sub-partition (warp % 4).

* `tcgen05.alloc [dst], nCols` (a warp together): the lowest free block of nCols columns (a power of
  two in 32..512, aligned to its size) is allocated and its address (lane 0) stored at shared [dst];
  `dealloc taddr, nCols` frees exactly such a block (for the race check a write of all its cells by the
  warp, so every other access to them must be ordered before it); `relinquish_alloc_permit` forbids further
  allocations.  A CTA that exits with columns still allocated is reported (every exit path must
  deallocate); an allocation that cannot be satisfied would block forever and is reported too.
* `tcgen05.ld/st.sync.aligned.<shape>.<num>{.pack::16b|.unpack::16b}.b32` move data between the
  warp's registers and TMEM; shapes 32x32b, 16x64b, 16x128b, 16x256b, 16x32bx2 (with its half-split
  column offset), .x1 .. .x128 repeat the shape along the columns (CUTLASS's SM100_TMEM_LOAD_*
  layouts).  .pack::16b reads two adjacent columns' low halves into one register (.unpack the
  inverse).  Loads are complete when they return; `tcgen05.wait::ld/st` check warp convergence.
* `tcgen05.mma{.ws}.cta_group::1.kind::{f16,tf32,f8f6f4,i8} [d], a-desc, b-desc, idesc,
  {disable-output-lane}, enable-input-d{, scale-input-d}` is issued by one thread: A (M x K) and B
  (N x K) from shared-memory descriptors, the instruction descriptor from `descriptors.decode_idesc`,
  D (32-bit accumulators) in TMEM in the data-path layout of the M (M=128: row m in lane m; M=64:
  rows 16i..16i+15 in lanes 32i..32i+15; .ws M=64/32: the columns split over 2/4 lane groups),
  column = d column + n.  The MMA is asynchronous: it is queued in issue order per CTA and executed
  (operands read, D written) when a `tcgen05.commit` makes an mbarrier track its completion -- so
  reading D before waiting on that mbarrier sees the old values, and overwriting the operands'
  shared memory before it does changes the result, as either can on the GPU.
* `tcgen05.commit.cta_group::1.mbarrier::arrive::one{.shared::cluster}{.multicast::cluster}.b64
  [mbar]{, ctaMask}` completes the CTA's queued MMAs, then arrives once on the mbarrier.
* `tcgen05.fence::before_thread_sync / after_thread_sync` order TMEM accesses around thread
  synchronisation: no-ops in this sequentially consistent model.

A may come from tensor memory instead (`[a-tmem]`): row i in the lane of D's row i, K packed densely
into 32-bit columns (one .tf32 per column, as NVIDIA's sm_100 code stores it).

Not modelled (an `UnsupportedInstruction` when executed): .cta_group::2, tcgen05.cp/shift, A in TMEM
with .ws, .f16 accumulators, block-scaled and sparse kinds.
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import ConvergenceError, MemoryFault
from ..parser import Addr, Imm, Vec
from .core import (
    Mods, _err, _lanes, address_fn, bl, check_nops, dst, f32, full_mask, getter, i64, on_batch_end,
    on_batch_start, op,
)
from .descriptors import DescriptorError, decode_idesc, decode_tcgen05_desc, load_operand
from .mbarrier import mbar_arrive, mbar_keys
from .mma import _decode_elems, encode_accumulator
from .warp import _aligned_check

LANES, COLUMNS = 128, 512


@on_batch_start
def _reset(mc) -> None:
    mc.tmem_used = any(o.startswith("tcgen05.") for o in mc.prog.opcodes)   # tensor memory only when used
    if not mc.tmem_used:
        return
    if getattr(mc, "tmem", None) is None:
        mc.tmem = np.zeros((mc.B, LANES, COLUMNS), np.uint32)
    else:
        mc.tmem.fill(0)
    mc.tmem_owner = np.zeros((mc.B, COLUMNS), bool)       # allocated columns
    mc.tmem_blocks = [dict() for _ in range(mc.B)]        # first column -> nCols
    mc.tmem_relinquished = np.zeros(mc.B, bool)
    mc.tc_queue = [[] for _ in range(mc.B)]               # issued, uncommitted MMAs per CTA


@on_batch_end
def _check_leaks(mc) -> None:
    if not getattr(mc, "tmem_used", False):
        return
    for slot, blocks in enumerate(mc.tmem_blocks):
        if blocks and slot < len(mc.ctas):
            cols = sum(blocks.values())
            e = MemoryFault(f"the CTA exited with {cols} tensor-memory columns still allocated "
                            f"(tcgen05.dealloc missing on an exit path)", space="tensor", kernel=mc.prog.kernel)
            e.block, _ = mc.lane_ids(slot * mc.Tp)
            raise e


def _fault(mc, li, msg, lane):
    e = MemoryFault(msg, space="tensor", lane=int(lane), line=li.line, text=li.text, kernel=mc.prog.kernel)
    return e


def _warp_uniform(mc, li, vals, mm, what):
    """One value per active warp of a per-thread operand that must be the same across the warp."""
    W = mm.reshape(-1, 32)
    warps = np.flatnonzero(W.any(1))
    v = vals.reshape(-1, 32)[warps]
    if (v != v[:, :1]).any():
        e = ConvergenceError(f"{li.opcode}: the {what} differs between the threads of a warp", line=li.line,
                             text=li.text, kernel=mc.prog.kernel)
        e.lane = int(warps[np.flatnonzero((v != v[:, :1]).any(1))[0]] * 32)
        raise e
    return warps, v[:, 0]


def _check_columns(mc, li, slot, col0, ncols, lane):
    if col0 < 0 or col0 + ncols > COLUMNS or not mc.tmem_owner[slot, col0:col0 + ncols].all():
        raise _fault(mc, li, f"tensor-memory access to columns {col0}..{col0 + ncols - 1}, which are not "
                             f"allocated", lane)


# ---------------------------------------------------------------------------- allocation


def _alloc(mc, li, mods, what: str):
    mods.take("cta_group::1")
    if mods.take("cta_group::2"):
        raise _err(li, ".cta_group::2 (CTA pairs) is not supported")
    if not (mods.has("sync") and mods.has("aligned")):
        raise _err(li, f"{li.opcode} requires .sync.aligned")
    if what == "relinquish_alloc_permit":
        mods.done()
        check_nops(li, 0)

        def relinquish(m):
            mm = full_mask(mc, m)
            if mm.any():
                _aligned_check(mc, li, mm)
                mc.tmem_relinquished[np.unique(mc.cta_slot[mm])] = True
        return relinquish
    mods.take("shared::cta")
    mods.type1({"b32"})
    mods.done()
    check_nops(li, 2)
    gn = getter(mc, li.ops[1], "u32", li)
    if what == "dealloc":
        gaddr = getter(mc, li.ops[0], "b32", li)

        def dealloc(m):
            mm = full_mask(mc, m)
            if not mm.any():
                return
            _aligned_check(mc, li, mm)
            warps, addr = _warp_uniform(mc, li, bl(np.asarray(gaddr()), mc.L), mm, "tensor-memory address")
            _, n = _warp_uniform(mc, li, bl(np.asarray(gn()), mc.L), mm, "column count")
            if mc.races is not None:
                mc.races.warp_barrier(mm)
            for w, a, c in zip(warps, addr, n):
                slot, col, lane = int(w * 32) // mc.Tp, int(a) & 0xFFFF, int(w * 32)
                if mc.tmem_blocks[slot].get(col) != int(c) or int(a) >> 16:
                    raise _fault(mc, li, f"tcgen05.dealloc of {int(c)} columns at {int(a):#x}, which is not an "
                                         f"allocation", lane)
                if mc.races is not None:
                    mc.races.tmem_free(slot, col, int(c), lane, li, mc)
                del mc.tmem_blocks[slot][col]
                mc.tmem_owner[slot, col:col + int(c)] = False
        return dealloc
    _, afn = address_fn(mc, li.ops[0], li)

    def alloc(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        _aligned_check(mc, li, mm)
        warps, n = _warp_uniform(mc, li, bl(np.asarray(gn()), mc.L), mm, "column count")
        first = (warps * 32).astype(np.int64)
        where = afn(first, False)
        out = np.empty(len(warps), np.uint32)
        for i, (w, c) in enumerate(zip(warps, n)):
            c, slot, lane = int(c), int(w * 32) // mc.Tp, int(w * 32)
            if c < 32 or c > COLUMNS or c & (c - 1):
                raise _err(li, f"tcgen05.alloc of {c} columns (must be a power of two in 32..512)")
            if mc.tmem_relinquished[slot]:
                raise _fault(mc, li, "tcgen05.alloc after the CTA relinquished its allocation permit", lane)
            free = np.flatnonzero(~mc.tmem_owner[slot].reshape(-1, c).any(1)) * c
            if not len(free):
                raise _fault(mc, li, f"tcgen05.alloc of {c} columns can never complete: "
                                     f"{int(mc.tmem_owner[slot].sum())} of {COLUMNS} columns are allocated", lane)
            col = int(free[0])
            if mc.races is not None:
                mc.races.tmem_allocated(slot, col, c)
            mc.tmem_owner[slot, col:col + c] = True
            mc.tmem_blocks[slot][col] = c
            out[i] = col
        mc.store("shared", where, first, 4, np.uint32, 1, out, li)
    return alloc


# ---------------------------------------------------------------------------- ld / st

_SHAPES = {  # shape -> (lanes, registers per repetition, columns per repetition)
    "32x32b": (32, 1, 1), "16x64b": (16, 1, 2), "16x128b": (16, 2, 4), "16x256b": (16, 4, 8), "16x32bx2": (16, 1, 1),
}


def ldst_layout(shape: str, num: int):
    """(lane offset [32, regs], column offset [32, regs]) of every register of every thread of the warp
    for tcgen05.ld/st of `shape` repeated `num` times (32-bit columns; the second half of .16x32bx2 at
    column offset 0 -- its half-split offset is added by the caller)."""
    _lanes_, per, _cols = _SHAPES[shape]
    t = np.arange(32)[:, None]
    lane = np.empty((32, per * num), np.int64)
    col = np.empty((32, per * num), np.int64)
    for k in range(num):
        for j in range(per):
            r = k * per + j
            if shape == "32x32b":
                lane[:, r:r + 1], col[:, r:r + 1] = t, k
            elif shape == "16x64b":
                lane[:, r:r + 1], col[:, r:r + 1] = (t >> 2) + 8 * (t & 1), 2 * k + ((t >> 1) & 1)
            elif shape == "16x128b":
                lane[:, r:r + 1], col[:, r:r + 1] = (t >> 2) + 8 * j, 4 * k + (t & 3)
            elif shape == "16x256b":
                lane[:, r:r + 1], col[:, r:r + 1] = (t >> 2) + 8 * (j >> 1), 8 * k + 2 * (t & 3) + (j & 1)
            else:  # 16x32bx2: 16 lanes, read twice (threads 16-31 at the half-split column offset)
                lane[:, r:r + 1], col[:, r:r + 1] = t & 15, k
    return lane, col


def tmem_layout(shape: str, num: int, pack: bool, half_split: int = 0):
    """(lane offset, column offset) [32, regs, 2 if pack else 1] of the TMEM cells of each register: with
    .pack::16b/.unpack::16b a register's two 16-bit halves live in two adjacent columns (low half first),
    so the shape's columns count 16-bit elements."""
    lane, col = ldst_layout(shape, num)
    if pack:
        lane = np.stack([lane, lane], axis=2)
        col = np.stack([2 * col, 2 * col + 1], axis=2)
    else:
        lane, col = lane[:, :, None], col[:, :, None]
    if shape == "16x32bx2":
        col = col + half_split * (np.arange(32) >= 16)[:, None, None]
    return lane, col


def _ldst(mc, li, mods, is_ld: bool):
    if not (mods.has("sync") and mods.has("aligned")):
        raise _err(li, f"{li.opcode} requires .sync.aligned")
    shape = mods.take(*_SHAPES)
    num = mods.take_prefix("x")
    pack = mods.has("pack::16b") if is_ld else mods.has("unpack::16b")
    mods.type1({"b32"})
    mods.done()
    if shape is None or num is None or not re.fullmatch(r"x(1|2|4|8|16|32|64|128)", num):
        raise _err(li, f"{li.opcode}: expected a shape and .x1 .. .x128")
    num = int(num[1:])
    ops = li.ops
    regs_op = ops[0] if is_ld else ops[-1]
    addr_op = ops[1] if is_ld else ops[0]
    half = 0
    if shape == "16x32bx2":
        hs = ops[2] if is_ld else ops[1]
        check_nops(li, 3)
        if not isinstance(hs, Imm):
            raise _err(li, "the half-split offset of .16x32bx2 must be an immediate")
        half = int(hs.value)
    else:
        check_nops(li, 2)
    if not isinstance(addr_op, Addr) or addr_op.offset or addr_op.base is None:
        raise _err(li, f"{li.opcode}: expected [taddr]")
    lane_off, col_off = tmem_layout(shape, num, pack, half)
    nregs = lane_off.shape[1]
    items = list(regs_op.items) if isinstance(regs_op, Vec) else [regs_op]
    if len(items) != nregs:
        raise _err(li, f"{li.opcode} moves {nregs} registers per thread, got {len(items)}")
    span = int(col_off.max()) + 1
    sub_lanes = _SHAPES[shape][0]
    gaddr = getter(mc, addr_op.base, "b32", li)
    rows = [dst(mc, x, "b32", li) for x in items] if is_ld else [getter(mc, x, "b32", li) for x in items]

    def locate(mm):
        _aligned_check(mc, li, mm)
        warps, taddr = _warp_uniform(mc, li, bl(np.asarray(gaddr()), mc.L), mm, "tensor-memory address")
        slots = (warps * 32) // mc.Tp
        lane0 = taddr.astype(np.int64) >> 16
        col0 = taddr.astype(np.int64) & 0xFFFF
        part = ((warps * 32) % mc.Tp) // 32 % 4
        for w, s, l0, c0, p in zip(warps, slots, lane0, col0, part):
            if not (32 * p <= l0 and l0 + sub_lanes <= 32 * p + 32):
                raise _fault(mc, li, f"warp {int(w * 32 % mc.Tp) // 32} (sub-partition {int(p)}) accesses "
                                     f"tensor-memory lanes {int(l0)}..{int(l0) + sub_lanes - 1} outside its lanes "
                                     f"{32 * int(p)}..{32 * int(p) + 31}", w * 32)
            _check_columns(mc, li, int(s), int(c0), span, w * 32)
        L_ = lane0[:, None, None, None] + lane_off[None]
        C_ = col0[:, None, None, None] + col_off[None]
        lanes = (warps[:, None] * 32 + np.arange(32)[None, :]).reshape(-1)
        return slots[:, None, None, None], L_, C_, lanes

    if is_ld:
        def ld(m):
            mm = full_mask(mc, m)
            if not mm.any():
                return
            slots, L_, C_, lanes = locate(mm)
            if mc.races is not None:
                mc.races.tmem_load(slots, L_, C_, lanes, li, mc)
            v = mc.tmem[slots, L_, C_]                              # [warps, 32, regs, 1|2]
            v = (v[..., 0] & 0xFFFF) | ((v[..., 1] & 0xFFFF) << 16) if pack else v[..., 0]
            v = v.reshape(-1, nregs)
            for r, row in enumerate(rows):
                if row is not None:
                    row[lanes] = v[:, r]
        return ld

    def st(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        slots, L_, C_, lanes = locate(mm)
        v = np.stack([bl(np.asarray(g()), mc.L)[lanes] for g in rows], axis=1).astype(np.uint32)   # [n, regs]
        v = np.stack([v & 0xFFFF, v >> 16], axis=2) if pack else v[:, :, None]
        mc.tmem[slots, L_, C_] = v.reshape(L_.shape)
        if mc.races is not None:
            mc.races.tmem_store(slots, L_, C_, lanes, li, mc)
    return st


# ---------------------------------------------------------------------------- mma / commit


def d_lanes_columns(m: int, n: int, ws: bool):
    """(lane [m, n], column [m, n]) of every accumulator element relative to the D address."""
    r = np.arange(m)[:, None]
    c = np.arange(n)[None, :]
    if m == 128 or (ws and m == 128):
        return np.broadcast_to(r, (m, n)), np.broadcast_to(c, (m, n))
    if not ws:                                      # M=64: 16 rows in each sub-partition
        return np.broadcast_to(r % 16 + 32 * (r // 16), (m, n)), np.broadcast_to(c, (m, n))
    groups = 128 // m                               # .ws M=64 / M=32: the N columns split over lane groups
    w = n // groups
    return np.broadcast_to(r, (m, n)) + m * (c // w), np.broadcast_to(c % w, (m, n))


class _Mma:
    __slots__ = ("lane", "slot", "d", "adesc", "a_tmem", "bdesc", "idesc", "enable", "scale", "disabled", "kind", "ws",
                 "li", "issued")


def _mma(mc, li, mods):
    ws = mods.has("ws")
    mods.take("cta_group::1")
    if mods.take("cta_group::2"):
        raise _err(li, ".cta_group::2 (CTA pairs) is not supported")
    kind = mods.take_prefix("kind::")
    if mods.has("block_scale") or mods.take_prefix("scale_vec::") or mods.has("sp"):
        raise _err(li, "block-scaled and sparse tcgen05.mma are not supported")
    for p in ("collector::a::fill", "collector::a::use", "collector::a::lastuse", "collector::a::discard",
              "collector::b0::fill", "collector::b0::use", "collector::b0::lastuse", "collector::b0::discard",
              "collector::b1::fill", "collector::b1::use", "collector::b1::lastuse", "collector::b1::discard",
              "collector::b2::fill", "collector::b2::use", "collector::b2::lastuse", "collector::b2::discard",
              "collector::b3::fill", "collector::b3::use", "collector::b3::lastuse", "collector::b3::discard"):
        mods.ignore(p)     # operand-reuse caches: a correct program reads the same data either way
    mods.done()
    kind = kind[len("kind::"):] if kind else None
    if kind not in ("f16", "tf32", "f8f6f4", "i8"):
        raise _err(li, f"tcgen05.mma .kind::{kind} is not supported")
    ops = list(li.ops)
    if not isinstance(ops[0], Addr):
        raise _err(li, "tcgen05.mma: expected [d-tmem] first")
    a_tmem = isinstance(ops[1], Addr)
    if a_tmem and (ws or ops[1].base is None):
        raise _err(li, "tcgen05.mma.ws with A in tensor memory is not supported" if ws else "expected [a-tmem]")
    disabled = None
    if len(ops) >= 5 and isinstance(ops[4], Vec):
        if ws:
            raise _err(li, "tcgen05.mma.ws has no disable-output-lane operand")
        disabled = [getter(mc, x, "b32", li) for x in ops[4].items]
        if len(disabled) != 4:
            raise _err(li, "disable-output-lane of .cta_group::1 is 4 registers")
        ops.pop(4)
    if len(ops) not in (5, 6):
        raise _err(li, f"{li.opcode}: unexpected operands")
    scale = 0
    if len(ops) == 6:
        if ws:
            raise _err(li, "tcgen05.mma.ws zero-column masks are not supported")
        if not isinstance(ops[5], Imm) or not 0 <= ops[5].value <= 15 or kind not in ("f16", "tf32"):
            raise _err(li, "scale-input-d must be an immediate 0..15 (kinds f16 and tf32)")
        scale = int(ops[5].value)
    gd = getter(mc, ops[0].base, "b32", li)
    d_off = ops[0].offset
    ga = getter(mc, ops[1].base, "b32", li) if a_tmem else getter(mc, ops[1], "b64", li)
    a_off = ops[1].offset if a_tmem else 0
    gb = getter(mc, ops[2], "b64", li)
    gi = getter(mc, ops[3], "b32", li)
    en = ops[4]
    gen = (lambda: np.bool_(en.value != 0)) if isinstance(en, Imm) else getter(mc, en, "pred", li)

    def issue(m):
        idx, _full = _lanes(mc, m)
        if not len(idx):
            return
        vals = {nm: bl(np.asarray(g()), mc.L)[idx] for nm, g in (("d", gd), ("a", ga), ("b", gb), ("i", gi),
                                                                  ("e", gen))}
        dis = np.stack([bl(np.asarray(g()), mc.L)[idx] for g in disabled], 1) if disabled else None
        for j, lane in enumerate(idx):
            op_ = _Mma()
            op_.lane, op_.slot, op_.li, op_.kind, op_.ws, op_.scale = int(lane), int(lane) // mc.Tp, li, kind, ws, scale
            op_.d = (int(vals["d"][j]) + d_off) & 0xFFFFFFFF
            op_.adesc, op_.bdesc, op_.idesc = int(vals["a"][j]), int(vals["b"][j]), int(vals["i"][j])
            op_.a_tmem = (op_.adesc + a_off) & 0xFFFFFFFF if a_tmem else None
            op_.enable = bool(vals["e"][j])
            op_.disabled = None if dis is None else dis[j].astype(np.uint32)
            op_.issued = mc.races.issue([lane])[0] if mc.races is not None else None
            mc.tc_queue[op_.slot].append(op_)
    return issue


_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "s8": 8, "u8": 8}


def _tmem_operand(mc, op_, m: int, k: int, ty: str) -> np.ndarray:
    """A (m x k) read from tensor memory: row i in the lane the accumulator's row i uses, its K elements
    packed densely into the 32-bit columns from the A address on, lowest bits first (for .tf32 one
    element per column, as NVIDIA's sm_100 code stores it)."""
    bits = _BITS[ty]
    per = 32 // bits
    lane0, col0 = op_.a_tmem >> 16, op_.a_tmem & 0xFFFF
    lanes = d_lanes_columns(m, 1, False)[0][:, 0] + lane0
    ncols = -(-k // per)
    if lanes.max() >= LANES or col0 + ncols > COLUMNS or not mc.tmem_owner[op_.slot, col0:col0 + ncols].all():
        raise _fault(mc, op_.li, f"tcgen05.mma reads A from tensor-memory columns {col0}..{col0 + ncols - 1}, "
                                 f"which are not all allocated", op_.lane)
    cols = col0 + np.arange(ncols)[None, :]
    if mc.races is not None:
        mc.races.tmem_unit(op_.slot, lanes[:, None], cols, "read", op_.li, mc)
    words = mc.tmem[op_.slot][lanes[:, None], cols]        # [m, ncols] u32
    if per == 1:
        raw = words
    else:
        dt = {2: np.uint16, 4: np.uint8}[per]
        raw = np.ascontiguousarray(words).view(dt).reshape(m, ncols * per)[:, :k]
    return _decode_elems(raw, ty).reshape(m, k)


def execute_mma(mc, op_: _Mma) -> None:
    """Run a queued mma; with the race check on, as the CTA's tensor core, ordered after its issue."""
    if mc.races is None:
        _execute_mma(mc, op_)
        return
    mc.races.acting = mc.races.tensor_core(op_.lane, op_.issued)
    try:
        _execute_mma(mc, op_)
    finally:
        mc.races.acting = None


def _execute_mma(mc, op_: _Mma) -> None:
    li = op_.li
    try:
        idesc = decode_idesc(op_.kind, op_.idesc, ws=op_.ws)
        if idesc.dtype == "f16":
            raise DescriptorError("tcgen05.mma with .f16 accumulators: the tensor-memory layout of 16-bit D is "
                                  "not modelled")
    except DescriptorError as e:
        e.line, e.text, e.kernel, e.lane = li.line, li.text, mc.prog.kernel, op_.lane
        raise
    m, n, k = idesc.m, idesc.n, idesc.k
    idx = np.array([op_.lane])
    if op_.a_tmem is not None:
        a = _tmem_operand(mc, op_, m, k, idesc.atype)
    else:
        a = load_operand(mc, li, decode_tcgen05_desc, np.array([op_.adesc], np.uint64), idx, m, k, idesc.atype,
                         idesc.transpose_a)[0]
    b = load_operand(mc, li, decode_tcgen05_desc, np.array([op_.bdesc], np.uint64), idx, n, k, idesc.btype,
                     idesc.transpose_b)[0]
    prod = a @ b.T
    if idesc.negate_a != idesc.negate_b:
        prod = -prod
    lane0, col0 = op_.d >> 16, op_.d & 0xFFFF
    dl, dc = d_lanes_columns(m, n, op_.ws)
    dl, dc = dl + lane0, dc + col0
    if dl.max() >= LANES or not mc.tmem_owner[op_.slot, int(dc.min()):int(dc.max()) + 1].all():
        raise _fault(mc, li, f"tcgen05.mma writes tensor-memory lanes {lane0}..{int(dl.max())} and columns "
                             f"{int(dc.min())}..{int(dc.max())}, which are not all allocated", op_.lane)
    if mc.races is not None:
        mc.races.tmem_unit(op_.slot, dl, dc, "update" if op_.enable else "write", li, mc)
    tm = mc.tmem[op_.slot]
    old = tm[dl, dc]
    is_int = idesc.dtype == "s32"
    if op_.enable:
        c = old.view(np.int32).astype(i64) if is_int else old.view(f32).astype(np.float64)
        if op_.scale:
            c = c * 2.0 ** -op_.scale
        r = prod + c
    else:
        r = prod
    new = encode_accumulator(r, idesc.dtype, idesc.saturate)
    if op_.disabled is not None:
        bits = (op_.disabled[(dl // 32)] >> (dl % 32).astype(np.uint32)) & 1
        new = np.where(bits.astype(bool), old, new)
    tm[dl, dc] = new


def _commit(mc, li, mods):
    mods.take("cta_group::1")
    if mods.take("cta_group::2"):
        raise _err(li, ".cta_group::2 (CTA pairs) is not supported")
    if not mods.has("mbarrier::arrive::one"):
        raise _err(li, "tcgen05.commit needs .mbarrier::arrive::one")
    mods.take("shared::cluster")
    multicast = mods.has("multicast::cluster")
    mods.type1({"b64"})
    mods.done()
    _, afn = address_fn(mc, li.ops[0], li)
    gmask = getter(mc, li.ops[1], "b16", li) if multicast else None
    if multicast:
        check_nops(li, 2)
    else:
        check_nops(li, 1)

    def commit(m):
        idx, full = _lanes(mc, m)
        if not len(idx):
            return
        for slot in np.unique(idx // mc.Tp):
            q = mc.tc_queue[int(slot)]
            mc.tc_queue[int(slot)] = []
            for op_ in q:
                execute_mma(mc, op_)
        if gmask is not None:   # a cluster of one CTA: only bit 0 names a CTA
            idx = idx[(bl(np.asarray(gmask()), mc.L)[idx] & 1).astype(bool)]
            full = False
            if not len(idx):
                return
        addr = afn(idx, full)
        # the arrival is the tensor core's, once its mmas and the commit (issued after all the thread did) are done
        rows = None
        if mc.races is not None:
            rows = np.array([mc.races.tensor_core(int(lane), mc.races.issue([lane])[0]) for lane in idx])
        mbar_arrive(mc, li, mbar_keys(mc, li, addr, idx), idx, np.ones(len(idx), np.int64), rows=rows)
    return commit


# ---------------------------------------------------------------------------- dispatch


@op("tcgen05")
def _tcgen05(mc, li):
    mods = Mods(li)
    what = mods.parts[0] if mods.parts else ""
    mods.used[0] = True
    if what in ("alloc", "dealloc", "relinquish_alloc_permit"):
        return _alloc(mc, li, mods, what)
    if what in ("ld", "st"):
        return _ldst(mc, li, mods, what == "ld")
    if what == "mma":
        return _mma(mc, li, mods)
    if what == "commit":
        return _commit(mc, li, mods)
    if what in ("wait::ld", "wait::st"):
        if not (mods.has("sync") and mods.has("aligned")):
            raise _err(li, f"{li.opcode} requires .sync.aligned")
        mods.done()

        def wait(m):
            mm = full_mask(mc, m)
            if mm.any():
                _aligned_check(mc, li, mm)
                # each thread's tcgen05.ld/st are complete, and .sync has the warp's threads meet: ordered
                if mc.races is not None:
                    mc.races.warp_barrier(mm)
        return wait
    if what in ("fence::before_thread_sync", "fence::after_thread_sync"):
        mods.done()
        return lambda m: None
    raise _err(li, f"tcgen05.{what} is not supported")
