"""mmaf / mmai on tensor cores (codegen/lower_mma.py).

1. The fragment layouts against the PTX ISA fragment tables (section 9.7.14.5, transcribed below as the
   ISA writes them): every lane and register maps to the right (row, col).
2. Whole tiles through the plans, simulated in numpy exactly as the emitter moves data: staging stores by
   thread offset + constant, fragment loads by thread offset + constant, each mma executed with the ISA
   tables' semantics; the result registers must hold acc + A @ B at the coordinates the result layout
   gives them (exact, small integers).  Same for the FMA chain.
3. The exact fp8 -> f16 conversion, for all 256 codes of both kinds (LLVM constant-folds the emitted IR).
4. Code generation: corpus matmuls (compile_module for sm_80/90/100/120, ELF cubin, mma.sync in the PTX
   except the documented FMA kernels, `ptxas -v` spill report) and kernels built here for every operand
   type, shape class and target.
"""
from __future__ import annotations

import itertools
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, corpus_files, requires_corpus

from tileiras_async.codegen import lower_mma as L
from tileiras_async.tilegpu.analysis import mma as P
from tileiras_async.driver import (
    CodegenUnavailable,
    compile_module,
    link_kernels_ptx,
    module_llvm_ir,
    module_ptx,
)
from tileiras_async.codegen.emitter import CodegenOptions
from tileiras_async.targets import target
from tileiras_async.ir import types as T
from tileiras_async.ir.builder import ModuleBuilder, tile
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
from tileiras_async.ir.enums import Signedness
from tileiras_async.tilegpu.layout import WARP_SIZE, blocked, mma_accumulator
from tileiras_async.toolchain.ptxas import PtxasOptions, assemble

# ---------------------------------------------------------------------------------------------------------
# 1. the PTX ISA fragment tables (groupID = laneid >> 2, threadID_in_group = laneid % 4)
# ---------------------------------------------------------------------------------------------------------


def isa_a(instr: P.Instr, lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    if instr.key.startswith(("f16", "bf16")):  # m16n8k16 .f16/.bf16, a0..a7
        row = g if (0 <= i < 2 or 4 <= i < 6) else g + 8
        col = t * 2 + (i & 1) if i < 4 else t * 2 + (i & 1) + 8
    elif instr.key.startswith("tf32"):  # m16n8k8 .tf32, a0..a3
        row = g if i in (0, 2) else g + 8
        col = t if i in (0, 1) else t + 4
    elif instr.key.startswith(("i8", "f8")):  # m16n8k32 .s8/.u8/.e4m3/.e5m2, a0..a15
        row = g if (0 <= i < 4 or 8 <= i < 12) else g + 8
        col = t * 4 + (i & 3) if i < 8 else t * 4 + (i & 3) + 16
    else:  # m8n8k4 .f64, a0
        row, col = lane >> 2, lane % 4
    return row, col


def isa_b(instr: P.Instr, lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    if instr.key.startswith(("f16", "bf16")):  # b0..b3
        row = t * 2 + (i & 1) if i < 2 else t * 2 + (i & 1) + 8
    elif instr.key.startswith("tf32"):  # b0, b1
        row = t if i == 0 else t + 4
    elif instr.key.startswith(("i8", "f8")):  # b0..b7
        row = t * 4 + (i & 3) if i < 4 else t * 4 + (i & 3) + 16
    else:  # m8n8k4 .f64, b0
        return lane % 4, lane >> 2
    return row, g


def isa_c(instr: P.Instr, lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    if instr.m == 8:  # m8n8k4 .f64: c0, c1
        return g, t * 2 + (i & 1)
    return (g if i < 2 else g + 8), t * 2 + (i & 1)


ISA = {"a": isa_a, "b": isa_b, "c": isa_c}


def _elems(instr: P.Instr, role: str) -> int:
    return {"a": instr.a_regs * instr.pack, "b": instr.b_regs * instr.pack, "c": instr.c_elems}[role]


@pytest.mark.parametrize("instr", P.INSTRS, ids=lambda i: i.key)
@pytest.mark.parametrize("role", ["a", "b", "c"])
def test_fragment_layout_is_the_isa_table(instr, role):
    lay = P.fragment_layout(instr, role)
    n = _elems(instr, role)
    assert lay.num_registers == n
    seen = set()
    for lane in range(WARP_SIZE):
        for i in range(n):
            want = ISA[role](instr, lane, i)
            assert lay.apply(i, lane, 0) == want, (instr.key, role, lane, i)
            seen.add(want)
    # the table itself: every element of the instruction's tile exactly once
    rows, cols = lay.shape
    assert len(seen) == rows * cols == WARP_SIZE * n


@pytest.mark.parametrize("instr", P.INSTRS, ids=lambda i: i.key)
def test_fragment_registers_pack_consecutive_k(instr):
    """Elements i*pack .. i*pack+pack-1 of A and B share a 32-bit register: consecutive k, same row/col, so
    one aligned 32-bit load of a row-major A / transposed B row fetches them (lowest k in the low bits)."""
    p = instr.pack
    for role, kdim in (("a", 1), ("b", 0)):
        for lane in range(WARP_SIZE):
            for w in range(_elems(instr, role) // p):
                first = ISA[role](instr, lane, w * p)
                assert first[kdim] % p == 0
                for j in range(p):
                    c = list(first)
                    c[kdim] += j
                    assert ISA[role](instr, lane, w * p + j) == tuple(c)


@pytest.mark.parametrize("m,n,nw,wm", [(16, 8, 1, 1), (16, 8, 4, 1), (64, 64, 4, 4), (64, 64, 4, 2),
                                       (64, 64, 4, 1), (128, 128, 4, 2), (32, 64, 8, 2), (16, 256, 4, 1)])
def test_plan_accumulator_is_mma_accumulator(m, n, nw, wm):
    plan = P.MmaPlan(P.F16_F32, False, 1, m, n, 16, nw, warps_m=wm)
    assert plan.c == mma_accumulator(m, n, nw, wm)


def test_choose_warps():
    assert P.choose_warps(4, 1, 8, 16, 4, 2) == (1, 2, 2)   # 128x128: 2x2 warps, 32 fragment registers
    assert P.choose_warps(4, 1, 1, 1, 4, 2) == (1, 1, 1)    # one tile: three warps replicate
    assert P.choose_warps(4, 2, 2, 4, 4, 2) == (2, 2, 1)    # batch first; ties go to M
    assert P.choose_warps(8, 1, 4, 1, 4, 2) == (1, 4, 1)


# ---------------------------------------------------------------------------------------------------------
# 2. whole tiles through the plans
# ---------------------------------------------------------------------------------------------------------


def _thread_part(layout, contrib, lane: int, warp: int) -> int:
    """What `_thread_offset` computes at run time: the sum of contrib(basis) over the set lane/warp bits."""
    off = 0
    for value, bases in ((lane, layout.bases[1]), (warp, layout.bases[2])):
        for bit, basis in enumerate(bases):
            if value >> bit & 1:
                off += contrib(basis)
    return off


def _sim_stage(mem: dict, layout, values: np.ndarray, st: P.Staging, chunk: int, num_warps: int) -> None:
    """Every thread performs `_stage`'s stores (single-bit layouts), as the emitted code does."""
    assert L._single_bit(layout)
    _, entries = L.stage_entries(layout, st, chunk, values.shape[st.kdim])
    for warp in range(num_warps):
        for lane in range(WARP_SIZE):
            thread = _thread_part(layout, st.contrib, lane, warp)
            hi = _thread_part(layout, st.hi, lane, warp)
            for r, const, need in entries:
                addr = st.base + thread + const
                if need is not None and hi != need:
                    continue  # the trash slot
                mem[addr] = values[layout.apply(r, lane, warp)]


def simulate_plan(plan: P.MmaPlan, a: np.ndarray, b: np.ndarray, c: np.ndarray, vector: int = 4,
                  a_layout=None, b_layout=None) -> None:
    """Run the tensor-core data flow of `_lower_tensor_core`; assert the result registers = c + a @ b."""
    i = plan.instr
    nw = plan.num_warps
    a_layout = a_layout or blocked(a.shape, nw, vector)
    b_layout = b_layout or blocked(b.shape, nw, vector)
    e = i.elem_bytes
    regs = {(w, lane): [c[plan.c.apply(r, lane, w)] for r in range(plan.c.num_registers)]
            for w in range(nw) for lane in range(WARP_SIZE)}
    for chunk, ksteps in enumerate(plan.chunks()):
        mem: dict[int, float] = {}
        _sim_stage(mem, a_layout, a, plan.a_stage, chunk, nw)
        _sim_stage(mem, b_layout, b, plan.b_stage, chunk, nw)
        assert max(mem) < plan.trash
        for w in range(nw):
            base_a = {lane: plan.a_stage.base + _thread_part(plan.a, plan.a_stage.contrib, lane, w)
                      for lane in range(WARP_SIZE)}
            base_b = {lane: plan.b_stage.base + _thread_part(plan.b, plan.b_stage.contrib, lane, w)
                      for lane in range(WARP_SIZE)}

            def word(base, off, lane, mem=mem):
                if off is None:
                    return [0] * i.pack
                return [mem[base[lane] + off + j * e] for j in range(i.pack)]

            for ks in ksteps:
                a_keys, b_keys, mmas = plan.kstep(ks)
                a_words = {(lane, key): word(base_a, plan.word_offset("a", r), lane)
                           for key, r in a_keys.items() for lane in range(WARP_SIZE)}
                b_words = {(lane, key): word(base_b, plan.word_offset("b", r), lane)
                           for key, r in b_keys.items() for lane in range(WARP_SIZE)}
                for ak, bk, cs in mmas:
                    # the warp-wide mma, with the ISA's fragment semantics
                    am = np.full((i.m, i.k), np.nan)
                    bm = np.full((i.k, i.n), np.nan)
                    cm = np.full((i.m, i.n), np.nan)
                    for lane in range(WARP_SIZE):
                        fa = [x for key in ak for x in a_words[lane, key]]
                        fb = [x for key in bk for x in b_words[lane, key]]
                        for j, x in enumerate(fa):
                            am[isa_a(i, lane, j)] = x
                        for j, x in enumerate(fb):
                            bm[isa_b(i, lane, j)] = x
                        for j, r in enumerate(cs):
                            cm[isa_c(i, lane, j)] = regs[w, lane][r]
                    assert not (np.isnan(am).any() or np.isnan(bm).any() or np.isnan(cm).any())
                    dm = cm + am @ bm
                    for lane in range(WARP_SIZE):
                        for j, r in enumerate(cs):
                            regs[w, lane][r] = dm[isa_c(i, lane, j)]
    want = c + a @ b
    for (w, lane), rs in regs.items():
        for r, v in enumerate(rs):
            assert v == want[plan.c.apply(r, lane, w)], (w, lane, r, plan.c.apply(r, lane, w))


def _rand(shape, seed):
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(np.float64)


PLAN_CASES = [
    # instr, B (None: 2-D), M, N, K, num_warps
    (P.F16_F32, None, 16, 8, 16, 1),
    (P.F16_F32, None, 16, 8, 16, 4),      # one tile, three replicating warps
    (P.F16_F32, None, 64, 64, 32, 4),
    (P.F16_F16, None, 32, 32, 32, 4),
    (P.BF16_F32, None, 32, 64, 32, 4),
    (P.F16_F32, None, 128, 128, 32, 4),
    (P.F16_F32, None, 16, 64, 16, 8),
    (P.F16_F32, None, 32, 32, 8, 4),      # K padding (K = instruction K / 2)
    (P.F16_F32, None, 8, 8, 16, 4),       # M < 16: wrap-around rows
    (P.F16_F32, None, 4, 2, 16, 4),       # M and N tiny
    (P.F16_F32, None, 1, 1, 16, 2),
    (P.F16_F32, 2, 16, 8, 32, 4),         # batched
    (P.F16_F32, 4, 32, 16, 16, 2),
    (P.F16_F32, 8, 16, 16, 16, 4),
    (P.TF32_F32, None, 32, 32, 16, 4),
    (P.TF32_F32, None, 16, 16, 4, 4),     # tf32 K padding
    (P.I8_I32, None, 16, 16, 32, 4),
    (P.I8_I32, 2, 8, 8, 32, 4),
    (P.I8_I32, None, 32, 16, 16, 4),      # i8 K padding
    (P.I8_I32, None, 64, 32, 64, 4),
    (P.F8_F32, None, 32, 32, 64, 4),
    (P.F64_F64, None, 16, 16, 16, 4),
    (P.F64_F64, None, 8, 8, 4, 1),
    (P.F64_F64, None, 4, 8, 4, 4),
    (P.F64_F64, 2, 16, 8, 8, 4),
]


@pytest.mark.parametrize("instr,bsz,m,n,k,nw", PLAN_CASES,
                         ids=[f"{c[0].key}-{c[1]}x{c[2]}x{c[3]}x{c[4]}-w{c[5]}" for c in PLAN_CASES])
def test_plan_computes_the_matmul(instr, bsz, m, n, k, nw):
    lead = (bsz,) if bsz else ()
    plan = P.MmaPlan(instr, bsz is not None, bsz or 1, m, n, k, nw)
    for lay in (plan.a, plan.b, plan.c):
        assert L._single_bit(lay)
    a, b, c = _rand(lead + (m, k), 1), _rand(lead + (k, n), 2), _rand(lead + (m, n), 3)
    simulate_plan(plan, a, b, c)


@pytest.mark.parametrize("vector", [1, 2, 8])
def test_plan_with_other_operand_layouts(vector):
    plan = P.MmaPlan(P.F16_F32, False, 1, 32, 32, 32, 4)
    a, b, c = _rand((32, 32), 4), _rand((32, 32), 5), _rand((32, 32), 6)
    simulate_plan(plan, a, b, c, vector=vector)
    # a transposed operand layout (what `permute` produces)
    simulate_plan(plan, a, b, c, a_layout=blocked((32, 32), 4, 4).transpose((1, 0)),
                  b_layout=blocked((32, 32), 4, 2).transpose((1, 0)))


@pytest.mark.parametrize("instr,bsz,m,n,k", [(P.F16_F32, None, 64, 32, 64), (P.I8_I32, None, 32, 32, 128),
                                             (P.F16_F32, 2, 32, 16, 64), (P.TF32_F32, None, 32, 32, 32)])
def test_plan_in_k_chunks(monkeypatch, instr, bsz, m, n, k):
    """Operands too big for the shared-memory budget are staged in K chunks (some chunk tests depend on the
    thread: those stores go to the trash slot)."""
    monkeypatch.setattr(P, "STAGE_BUDGET", 6144)
    lead = (bsz,) if bsz else ()
    plan = P.MmaPlan(instr, bsz is not None, bsz or 1, m, n, k, 4)
    assert len(plan.chunks()) > 1 and plan.smem_bytes <= 6144
    a, b, c = _rand(lead + (m, k), 7), _rand(lead + (k, n), 8), _rand(lead + (m, n), 9)
    simulate_plan(plan, a, b, c)
    if (bsz, m, k) == (None, 64, 64):  # lanes of the blocked A layout span several chunks: trash-slot stores
        assert L.stage_entries(blocked(a.shape, 4, 4), plan.a_stage, 0, k)[0]


def test_plan_too_big_for_shared_memory(monkeypatch):
    monkeypatch.setattr(P, "STAGE_BUDGET", 1024)
    with pytest.raises(L.LoweringError, match="shared memory"):
        P.MmaPlan(P.F16_F32, False, 1, 128, 128, 64, 4)


def simulate_fma(plan: P.FmaPlan, layout, a, b, c, nw, vector=4) -> None:
    """The FMA chain of `_lower_fma`: staging, then per result register acc + sum_k A[row k] * B[k col]."""
    a_layout, b_layout = blocked(a.shape, nw, vector), blocked(b.shape, nw, vector)
    regs = {(w, lane): [c[layout.apply(r, lane, w)] for r in range(layout.num_registers)]
            for w in range(nw) for lane in range(WARP_SIZE)}
    for chunk in range(plan.chunks()):
        mem: dict[int, float] = {}
        _sim_stage(mem, a_layout, a, plan.a_stage, chunk, nw)
        _sim_stage(mem, b_layout, b, plan.b_stage, chunk, nw)
        for (w, lane), rs in regs.items():
            at = _thread_part(layout, lambda bs: L._offset(bs, plan.a_row), lane, w)
            bt = _thread_part(layout, lambda bs: L._offset(bs, plan.b_col), lane, w)
            for r in range(layout.num_registers):
                coord = layout.register_coord(r)
                pa = at + plan.a_stage.base + L._offset(coord, plan.a_row)
                pb = bt + plan.b_stage.base + L._offset(coord, plan.b_col)
                for kk in range(plan.kc):
                    rs[r] = rs[r] + mem[pa + kk * plan.a_k] * mem[pb + kk * plan.b_k]
    want = c + a @ b
    for (w, lane), rs in regs.items():
        for r, v in enumerate(rs):
            assert v == want[layout.apply(r, lane, w)]


@pytest.mark.parametrize("bsz,m,n,k,ea,budget", [(None, 16, 16, 16, 4, None), (2, 16, 32, 16, 4, None),
                                                 (None, 16, 8, 4, 2, None), (None, 32, 32, 64, 4, 4096)])
def test_fma_plan_computes_the_matmul(monkeypatch, bsz, m, n, k, ea, budget):
    if budget:
        monkeypatch.setattr(P, "STAGE_BUDGET", budget)
    lead = (bsz,) if bsz else ()
    plan = P.FmaPlan(bsz is not None, bsz or 1, m, n, k, ea, ea)
    if budget:
        assert plan.chunks() > 1
    shape = lead + (m, n)
    nw = 4
    per_thread = max(1, int(np.prod(shape)) // (nw * WARP_SIZE))
    layout = blocked(shape, nw, min(4, per_thread))
    a, b, c = _rand(lead + (m, k), 10), _rand(lead + (k, n), 11), _rand(shape, 12)
    simulate_fma(plan, layout, a, b, c, nw)


def test_thread_plus_constant_offsets_are_exact():
    """The emitter adds a per-thread offset and a per-register constant: exact because every basis of the
    layouts involved is a distinct single bit (sum = xor)."""
    plan = P.MmaPlan(P.I8_I32, True, 2, 32, 16, 64, 4)
    for lay, st in ((plan.a, plan.a_stage), (plan.b, plan.b_stage)):
        for w, lane in itertools.product(range(4), range(WARP_SIZE)):
            t = _thread_part(lay, st.contrib, lane, w)
            for r in range(lay.num_registers):
                assert t + st.contrib(lay.register_coord(r)) == st.contrib(lay.apply(r, lane, w))


LDMATRIX_PLANS = [c for c in PLAN_CASES if c[0] in (P.F16_F32, P.F16_F16, P.BF16_F32)]


def _ldmatrix_rows(layout, st: P.Staging, lanes, first: int, warp: int):
    """The row address lane L of warp `warp` gives an ldmatrix of a fragment group starting `first` bytes
    into the staging: the group's start, the warp's part and `lanes` over L's bits."""
    base = st.base + first + _thread_part(layout, st.contrib, 0, warp)
    return lambda lane: base + sum(c for bit, c in enumerate(lanes) if lane >> bit & 1)


@pytest.mark.parametrize("instr,bsz,m,n,k,nw", LDMATRIX_PLANS,
                         ids=[f"{c[0].key}-{c[1]}x{c[2]}x{c[3]}x{c[4]}-w{c[5]}" for c in LDMATRIX_PLANS])
def test_ldmatrix_reads_the_fragment_words(instr, bsz, m, n, k, nw):
    """Where the plan allows ldmatrix on the synchronous staging, lane L's row address (ldmatrix_lanes over
    its id bits, the warp part, the group's first word) makes the PTX ISA's ldmatrix semantics (register j of
    lane l: bytes 4 (l % 4) .. +3 of row l / 4 of block j, whose address lane 8 j + l / 4 gives) deliver the
    very elements the fragment layout puts in each word: two neighbouring k of (row, k) for A, (k, col) for
    B.  The 32x32x32 plans of the attention kernels qualify for both operands."""
    plan = P.MmaPlan(instr, bsz is not None, bsz or 1, m, n, k, nw)
    e = instr.elem_bytes
    found = {}
    for role, pairs in (("a", False), ("b", False), ("b", True)):
        lanes = P.ldmatrix_lanes(plan, role, pairs)
        found[role, pairs] = lanes is not None
        if lanes is None:
            continue
        layout, st = (plan.a, plan.a_stage) if role == "a" else (plan.b, plan.b_stage)
        where = {}      # staging byte address -> element coordinate
        for w in range(nw):
            for lane in range(WARP_SIZE):
                for r in range(layout.num_registers):
                    coord = layout.apply(r, lane, w)
                    if coord[st.kdim] < k:
                        where[st.base + st.contrib(coord)] = coord
        for group in P._fragment_groups(plan, role, pairs):
            for w in range(nw):
                row_address = _ldmatrix_rows(layout, st, lanes, plan.word_offset(role, group[0]), w)
                for lane in range(WARP_SIZE):
                    for j, reg in enumerate(group):
                        row = row_address(8 * j + lane // 4)
                        assert row % 16 == 0        # ldmatrix rows are 16-byte aligned
                        addr = row + 4 * (lane % 4)
                        got = [where[addr + x * e] for x in range(2)]
                        assert got == [layout.apply(reg + x, lane, w) for x in range(2)], (role, lane, j)
    if (m, n, k, nw) == (32, 32, 32, 4):
        assert found == {("a", False): True, ("b", False): True, ("b", True): True}


@pytest.mark.parametrize("instr,bsz,m,n,k,nw", LDMATRIX_PLANS,
                         ids=[f"{c[0].key}-{c[1]}x{c[2]}x{c[3]}x{c[4]}-w{c[5]}" for c in LDMATRIX_PLANS])
def test_ldmatrix_trans_reads_b_in_rows_of_n(instr, bsz, m, n, k, nw):
    """B staged in rows of N (rows_of_n_stage): with the lane addressing of ldmatrix_trans_lanes, the ISA's
    ldmatrix.trans (register j of lane l: elements (2 (l % 4) + x, l / 4) of block j, whose row r lane 8 j + r
    addresses) delivers the elements the B fragment layout puts in each word. The 32x32x32 plan qualifies."""
    plan = P.MmaPlan(instr, bsz is not None, bsz or 1, m, n, k, nw)
    st = P.rows_of_n_stage(plan)
    if (m, n, k, nw) == (32, 32, 32, 4):
        assert st is not None and P.ldmatrix_trans_lanes(plan, st, True) is not None
    if st is None:
        return
    e = instr.elem_bytes
    layout = plan.b
    where = {st.base + st.contrib(layout.apply(r, lane, w)): layout.apply(r, lane, w)
             for w in range(nw) for lane in range(WARP_SIZE) for r in range(layout.num_registers)}
    for pairs in (False, True):
        lanes = P.ldmatrix_trans_lanes(plan, st, pairs)
        if lanes is None:
            continue
        for group in P._fragment_groups(plan, "b", pairs):
            for w in range(nw):
                row_address = _ldmatrix_rows(layout, st, lanes, st.contrib(layout.register_coord(group[0])), w)
                for lane in range(WARP_SIZE):
                    for j, reg in enumerate(group):
                        for x in range(2):
                            row = row_address(8 * j + 2 * (lane % 4) + x)
                            assert row % 16 == 0
                            got = where[row + (lane // 4) * e]
                            assert got == layout.apply(reg + x, lane, w), (pairs, lane, j, x)


# ---------------------------------------------------------------------------------------------------------
# 3. fp8 -> f16, all codes (the emitted IR constant-folded by LLVM)
# ---------------------------------------------------------------------------------------------------------


def _fp8_reference(kind: str, v: int) -> float:
    s = -1.0 if v & 0x80 else 1.0
    if kind == "f8E5M2":
        return float(np.array([v << 8], np.uint16).view(np.float16)[0])
    e, m = (v >> 3) & 15, v & 7
    if e == 15 and m == 7:
        return float("nan")
    if e == 0:
        return s * m * 2.0 ** -9
    return s * (1 + m / 8) * 2.0 ** (e - 7)


def test_fp8_to_half_is_exact_for_every_code():
    import llvmlite.binding as llvm

    from tileiras_async.codegen import nvptx
    from tileiras_async.codegen.llvmir import ModuleIR

    class _Em:
        pass

    funcs = []
    for kind in ("f8E4M3FN", "f8E5M2"):
        for v in range(256):
            em = _Em()
            em.b = ModuleIR().function("x", [])
            h = L.fp8_to_half(em, str(v - 256 if v >= 128 else v), kind)
            lines = [ln for _, blk in em.b.fn.blocks for ln in blk]
            funcs.append(f"define i16 @c_{kind}_{v}() {{\n" + "\n".join(lines)
                         + f"\n%r = bitcast half {h} to i16\nret i16 %r\n}}")
    nvptx._init()
    mod = llvm.parse_assembly("\n".join(funcs))
    tm = nvptx._target_machine("sm_80", "+ptx78", 3)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=2))
    pb.getModulePassManager().run(mod, pb)
    folded = dict(re.findall(r"define [^@]*@c_(\w+)\(\)[^{]*\{\s*ret i16 (-?\d+)", str(mod)))
    assert len(folded) == 512
    for key, bits in folded.items():
        kind, v = key.rsplit("_", 1)
        got = float(np.array([int(bits) & 0xFFFF], np.uint16).view(np.float16)[0])
        want = _fp8_reference(kind, int(v))
        if np.isnan(want):
            assert np.isnan(got), key
        else:
            assert got == want and np.signbit(got) == np.signbit(want), (key, got, want)


# ---------------------------------------------------------------------------------------------------------
# 4. code generation
# ---------------------------------------------------------------------------------------------------------

CORPUS_TARGETS = ["sm_80", "sm_90", "sm_100", "sm_120"]
ALL_TARGETS = ["sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120",
               "sm_121"]
# f32 x f32 mmaf is an exact fp32 FMA chain (as NVIDIA's tileiras emits for these kernels), not mma.sync
FMA_KERNELS = {"matmul_ragged_f32_16x16x16", "bmm_f32_16x32x16"}
# known spills at -O3, with the reason (see test_corpus_mma_spills)
# Kernels allowed to spill, with the reason (none since the K-loops are software-pipelined: operands go
# global -> shared with cp.async instead of through registers).
SPILL_EXCEPTIONS: dict[str, str] = {}


def _mma_corpus() -> list[Path]:
    out = []
    for p in corpus_files("*.v13.4.tileirbc"):
        disasm = p.with_name(p.name.replace(".tileirbc", ".disasm.txt"))
        if disasm.is_file() and re.search(r"\bmma[fi]\b", disasm.read_text()):
            out.append(p)
    return out


def _read(path: Path):
    from tileiras_async.frontend import parse
    return parse(path.read_bytes(), "x")


def _kernel_name(p: Path) -> str:
    return p.name.split(".v13")[0]


def _ptxas_v(ptx: str, tgt) -> str:
    from tileiras_async.toolchain.discovery import default_toolchain
    with tempfile.TemporaryDirectory() as d:
        Path(d, "k.ptx").write_text(ptx)
        proc = subprocess.run([str(default_toolchain().ptxas), "-v", "-O3", "-arch", tgt.ptx_target,
                               str(Path(d, "k.ptx")), "-o", str(Path(d, "k.cubin"))],
                              capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@requires_corpus
def test_corpus_has_mma_kernels():
    names = {_kernel_name(p) for p in _mma_corpus()}
    assert {"matmul_f16_f16out_128x128x64", "bmm_f16_32x32x32", "matmul_tf32_64x64x32"} <= names


@requires_corpus
@pytest.mark.parametrize("tgt", CORPUS_TARGETS)
@pytest.mark.parametrize("path", _mma_corpus(), ids=_kernel_name)
def test_corpus_mma_compiles(path, tgt):
    module = _read(path)
    t = target(tgt)
    cubin = compile_module(module, t, 3)
    assert cubin.startswith(b"\x7fELF")
    ptx = module_ptx(module, t, 3)
    if _kernel_name(path) in FMA_KERNELS:
        assert "mma.sync" not in ptx and "fma.rn.f32" in ptx
    elif tgt == "sm_90" and _kernel_name(path) in WGMMA_KERNELS:
        assert "wgmma.mma_async.sync.aligned.m64n" in ptx and "mma.sync" not in ptx
    elif tgt == "sm_100" and _kernel_name(path) in WGMMA_KERNELS:   # tcgen05 there (tests/test_tcgen05_lowering.py)
        assert "tcgen05.mma.cta_group::1.kind::" in ptx and "mma.sync" not in ptx
    else:
        assert re.search(r"\bmma\.sync\.aligned\.m16n8k(8|16)\.row\.col\.", ptx)


# where NVIDIA's tileiras uses HGMMA on sm_90 (the 64+ row tiles), and so do we (tests/test_wgmma_lowering.py)
WGMMA_KERNELS = {"matmul_bf16_64x64x64", "matmul_f16_f16out_128x128x64", "matmul_f16_f32acc_64x64x32",
                 "matmul_tf32_64x64x32"}


@requires_corpus
@pytest.mark.parametrize("tgt", CORPUS_TARGETS)
@pytest.mark.parametrize("path", _mma_corpus(), ids=_kernel_name)
def test_corpus_mma_spills(path, tgt):
    """`ptxas -v -O3` on our PTX: no spill stores (documented exceptions xfail with their reason)."""
    t = target(tgt)
    report = _ptxas_v(module_ptx(_read(path), t, 3), t)
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", report)]
    assert spills
    if any(spills) and _kernel_name(path) in SPILL_EXCEPTIONS:
        pytest.xfail(SPILL_EXCEPTIONS[_kernel_name(path)])
    assert not any(spills), report


def test_op_golden_mma_modules_compile():
    """tests/data/ops/mma.*: every mmaf/mmai form of every bytecode version (results unused).  They include
    fp8 forms, which need sm_89+ (sm_89 converts them to f16: its PTX ISA here is below 8.4)."""
    for path in sorted((REPO / "tests" / "data" / "ops").glob("mma.v13.*.tileirbc")):
        module = _read(path)
        for tgt in ("sm_89", "sm_120"):
            assert compile_module(module, target(tgt), 3).startswith(b"\x7fELF"), path


# -- kernels built here --------------------------------------------------------------------------------------

def build_mma(a_elem, b_elem, c_elem, shape, *, signedness=(Signedness.signed, Signedness.signed),
              fast_acc=False, name="mma_k"):
    """D = mma(load A, load B, load C), stored: A (B x) M x K, B (B x) K x N, C/D (B x) M x N."""
    from tileiras_async.ir.verifier import verify_module
    bsz, m, n, k = shape
    lead = (bsz,) if bsz else ()
    a_shape, b_shape, c_shape = lead + (m, k), lead + (k, n), lead + (m, n)
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)

    def strides(sh):
        return tuple(int(np.prod(sh[d + 1:])) for d in range(len(sh)))

    with mb.kernel(name, [tile(T.PointerType(e)) for e in (a_elem, b_elem, c_elem, c_elem)]) as kb:
        views = []
        for p, e, sh in zip(kb.args, (a_elem, b_elem, c_elem, c_elem), (a_shape, b_shape, c_shape, c_shape)):
            tv = T.TensorViewType(e, sh, strides(sh))
            v = kb.op("make_tensor_view", [tv], base=p, dynamicShape=[], dynamicStrides=[]).result
            pv_t = T.PartitionViewType(sh, tv, tuple(range(len(sh))))
            views.append((kb.op("make_partition_view", [pv_t], tensor_view=v).result, sh, e))
        zero = kb.constant(np.int32(0), i32)
        a, b, c = (kb.op("load_view_tko", [tile(e, *sh), T.TOKEN], view=pv, index=[zero] * len(sh),
                         memory_ordering_semantics=MO.weak).results[0] for pv, sh, e in views[:3])
        if isinstance(a_elem, T.IntType):
            res = kb.op("mmai", [tile(c_elem, *c_shape)], lhs=a, rhs=b, acc=c, signedness_lhs=signedness[0],
                        signedness_rhs=signedness[1]).result
        else:
            res = kb.op("mmaf", [tile(c_elem, *c_shape)], lhs=a, rhs=b, acc=c,
                        **({"fast_acc": True} if fast_acc else {})).result
        kb.op("store_view_tko", [T.TOKEN], tile=res, view=views[3][0], index=[zero] * len(c_shape),
              memory_ordering_semantics=MO.weak)
        kb.op("return")
    diags = verify_module(mb.module)
    assert not diags, [d.render() for d in diags]
    return mb.module


def build_mma_loop(a_elem, c_elem, m, n, k, steps=4):
    """for i < steps: acc = mmaf(A[:, i], B[i, :], acc) from a zero splat, then store acc."""
    from tileiras_async.ir.verifier import verify_module
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    acc_t = tile(c_elem, m, n)
    with mb.kernel("mma_loop", [tile(T.PointerType(e)) for e in (a_elem, a_elem, c_elem)]) as kb:
        shapes = ((m, k * steps), (k * steps, n), (m, n))
        tiles = ((m, k), (k, n), (m, n))
        pvs = []
        for p, e, sh, ts in zip(kb.args, (a_elem, a_elem, c_elem), shapes, tiles):
            tv = T.TensorViewType(e, sh, (sh[1], 1))
            v = kb.op("make_tensor_view", [tv], base=p, dynamicShape=[], dynamicStrides=[]).result
            pvs.append(kb.op("make_partition_view", [T.PartitionViewType(ts, tv, (0, 1))], tensor_view=v).result)
        zero = kb.constant(np.int32(0), i32)
        one = kb.constant(np.int32(1), i32)
        ub = kb.constant(np.int32(steps), i32)
        init = kb.constant(np.float32(0) if c_elem == T.F32 else np.float16(0), acc_t)
        with kb.region([i32, acc_t]) as body:
            iv, acc = body.block.args
            a = body.op("load_view_tko", [tile(a_elem, m, k), T.TOKEN], view=pvs[0], index=[zero, iv],
                        memory_ordering_semantics=MO.weak).results[0]
            b = body.op("load_view_tko", [tile(a_elem, k, n), T.TOKEN], view=pvs[1], index=[iv, zero],
                        memory_ordering_semantics=MO.weak).results[0]
            r = body.op("mmaf", [acc_t], lhs=a, rhs=b, acc=acc).result
            body.op("continue", operands=[r])
        res = kb.op("for", [acc_t], regions=[body.built_region], lowerBound=zero, upperBound=ub, step=one,
                    initValues=[init]).result
        kb.op("store_view_tko", [T.TOKEN], tile=res, view=pvs[2], index=[zero, zero],
              memory_ordering_semantics=MO.weak)
        kb.op("return")
    diags = verify_module(mb.module)
    assert not diags, [d.render() for d in diags]
    return mb.module


def targeted_ptx(module, tgt_name: str, opt_level: int = 3) -> str:
    """module_llvm_ir with the target in the options (it picks native fp8 mma where it exists) -> PTX."""
    tgt = target(tgt_name)
    irs = module_llvm_ir(module, CodegenOptions(opt_level=opt_level, target=tgt_name))
    return link_kernels_ptx(irs, [f.name.decode() for f in module.functions], tgt, opt_level)


def _assemble(ptx: str, tgt_name: str) -> bytes:
    t = target(tgt_name)
    return assemble(ptx, PtxasOptions(arch=t.ptx_target, opt_level=3))


S, U = Signedness.signed, Signedness.unsigned
F8A, F8B = T.F8E4M3FN, T.F8E5M2
KERNEL_CASES = [
    # (A, B, C elements, (batch, M, N, K), signedness, PTX expected (on sm_80; sm_89 for fp8); None: FMA chain)
    ((T.F16, T.F16, T.F32), (None, 64, 64, 32), None, "m16n8k16.row.col.f32.f16.f16.f32"),
    ((T.F16, T.F16, T.F16), (None, 32, 32, 32), None, "m16n8k16.row.col.f16.f16.f16.f16"),
    ((T.BF16, T.BF16, T.F32), (None, 32, 64, 32), None, "m16n8k16.row.col.f32.bf16.bf16.f32"),
    ((T.TF32, T.TF32, T.F32), (None, 32, 32, 16), None, "m16n8k8.row.col.f32.tf32.tf32.f32"),
    ((T.F32, T.F32, T.F32), (None, 32, 32, 16), None, None),
    ((T.F64, T.F64, T.F64), (None, 16, 16, 16), None, "m8n8k4.row.col.f64.f64.f64.f64"),
    ((T.F64, T.F64, T.F64), (None, 4, 8, 4), None, "m8n8k4.row.col.f64.f64.f64.f64"),
    ((T.I8, T.I8, T.I32), (None, 16, 16, 32), (S, S), "m16n8k32.row.col.s32.s8.s8.s32"),
    ((T.I8, T.I8, T.I32), (None, 16, 16, 32), (S, U), "m16n8k32.row.col.s32.s8.u8.s32"),
    ((T.I8, T.I8, T.I32), (None, 16, 16, 32), (U, S), "m16n8k32.row.col.s32.u8.s8.s32"),
    ((T.I8, T.I8, T.I32), (None, 32, 16, 64), (U, U), "m16n8k32.row.col.s32.u8.u8.s32"),
    ((T.I8, T.I8, T.I32), (2, 8, 8, 32), (S, U), "m16n8k32.row.col.s32.s8.u8.s32"),
    ((T.I8, T.I8, T.I32), (None, 16, 16, 16), (S, S), "m16n8k32.row.col.s32.s8.s8.s32"),   # K padded
    ((T.I8, T.I8, T.I32), (None, 16, 16, 8), (U, S), None),                                # tiny K: FMA
    ((F8A, F8A, T.F32), (None, 32, 32, 32), None, "m16n8k16.row.col.f32.f16.f16.f32"),
    ((F8B, F8B, T.F16), (None, 32, 32, 32), None, "m16n8k16.row.col.f16.f16.f16.f16"),
    ((F8A, F8A, T.F32), (None, 16, 16, 16), None, "m16n8k16.row.col.f32.f16.f16.f32"),
    ((T.F16, T.F16, T.F32), (2, 16, 8, 32), None, "m16n8k16.row.col.f32.f16.f16.f32"),     # batched
    ((T.F16, T.F16, T.F32), (4, 8, 8, 16), None, "m16n8k16.row.col.f32.f16.f16.f32"),      # M < 16
    ((T.F16, T.F16, T.F32), (None, 2, 4, 16), None, "m16n8k16.row.col.f32.f16.f16.f32"),   # M, N tiny
    ((T.F16, T.F16, T.F32), (None, 16, 16, 8), None, "m16n8k16.row.col.f32.f16.f16.f32"),  # K padded
    ((T.F16, T.F16, T.F16), (None, 16, 16, 4), None, None),                                # tiny K: FMA
    ((T.BF16, T.BF16, T.F32), (None, 16, 16, 2), None, None),
    ((T.F16, T.F16, T.F32), (None, 32, 32, 512), None, "m16n8k16.row.col.f32.f16.f16.f32"),   # K chunks
]


def _case_id(case):
    (a, _, c), (bsz, m, n, k), sg, _ = case
    s = "" if sg is None else "-" + "".join("s" if x == S else "u" for x in sg)
    return f"{a.name if hasattr(a, 'name') else a}-{c.name if hasattr(c, 'name') else c}-" \
           f"{'' if bsz is None else f'{bsz}x'}{m}x{n}x{k}{s}"


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[_case_id(c) for c in KERNEL_CASES])
def test_built_kernels_compile(case):
    (ae, be, ce), shape, sg, expect = case
    module = build_mma(ae, be, ce, shape, **({"signedness": sg} if sg else {}))
    fp8 = ae in (F8A, F8B)
    for tgt in ("sm_89" if fp8 else "sm_80", "sm_120"):   # fp8 needs sm_89+ (ir/capabilities.py)
        ptx = module_ptx(module, target(tgt), 3)
        assert _assemble(ptx, tgt).startswith(b"\x7fELF")
        if expect is None:
            assert "mma.sync" not in ptx and re.search(r"\b(fma\.rn|mad\.lo|mul\.lo)", ptx)
        elif tgt != "sm_120" or not fp8:  # (sm_120 runs fp8 natively: see the next test)
            assert f"mma.sync.aligned.{expect}" in ptx, tgt
        else:
            assert "mma.sync.aligned.m16n8k32.row.col." in ptx


@pytest.mark.parametrize("tgt", ALL_TARGETS)
def test_every_target_with_target_aware_lowering(tgt):
    """With the target known, fp8 uses the native m16n8k32 .e4m3/.e5m2 mma where the target (sm_89+) and the
    module's PTX ISA (8.4, or 8.7 for an f16 accumulator) allow it, and converts to f16 elsewhere."""
    sm = int(tgt[3:])
    cases = [((F8B, F8B, T.F32), "f32.e5m2.e5m2.f32", (8, 4)), ((F8A, F8A, T.F16), "f16.e4m3.e4m3.f16", (8, 7)),
             ((T.I8, T.I8, T.I32), None, None), ((T.F64, T.F64, T.F64), None, None),
             ((T.TF32, T.TF32, T.F32), None, None), ((T.BF16, T.BF16, T.F32), None, None)]
    from tileiras_async.codegen.nvptx import ptx_feature
    major, minor = re.fullmatch(r"\+ptx(\d)(\d+)", ptx_feature(target(tgt))).groups()
    isa = (int(major), int(minor))
    for (ae, be, ce), native, need in cases:
        if ae in (F8A, F8B) and sm < 89:  # refused, as by the real tool
            with pytest.raises(CodegenUnavailable, match=f"Incompatibility with architecture '{tgt}'"):
                targeted_ptx(build_mma(ae, be, ce, (None, 32, 32, 32)), tgt)
            continue
        ptx = targeted_ptx(build_mma(ae, be, ce, (None, 32, 32, 32)), tgt)
        assert _assemble(ptx, tgt).startswith(b"\x7fELF")
        assert "mma.sync.aligned" in ptx
        if native is not None:
            uses_native = f"m16n8k32.row.col.{native}" in ptx
            assert uses_native == (sm >= 89 and isa >= need), (tgt, native)
            if not uses_native:
                assert "m16n8k16.row.col" in ptx


def test_fast_acc_fp8_compiles():
    module = build_mma(F8A, F8A, T.F32, (None, 16, 16, 32), fast_acc=True)
    assert "mma.sync" in targeted_ptx(module, "sm_100")


@pytest.mark.parametrize("m,n,k", [(64, 64, 32), (128, 128, 32)])
def test_loop_carried_accumulator_stays_in_registers(m, n, k):
    """The `for` starts its carried accumulator in the mma layout: per iteration only the two barriers of the
    operand staging remain (a 128x128 f32 accumulator could not even be converted through shared memory).
    Checked on the synchronous loop (pipeline_stages=1); tests/test_pipelining.py covers the pipelined one."""
    module = build_mma_loop(T.F16, T.F32, m, n, k)
    irs = module_llvm_ir(module, CodegenOptions(opt_level=3, target="sm_80", pipeline_stages=1))
    ptx = link_kernels_ptx(irs, [f.name.decode() for f in module.functions], target("sm_80"), 3)
    assert _assemble(ptx, "sm_80").startswith(b"\x7fELF")
    loop = ptx[ptx.index("$L__BB0_"):]
    assert loop.count("bar.sync") == 2
    smem = int(re.search(r"\.shared \.align \d+ \.b8 \S+\[(\d+)\]", ptx).group(1))
    plan = P.MmaPlan(P.F16_F32, False, 1, m, n, k, 4)
    assert smem == plan.smem_bytes


def test_carried_layouts_finds_the_accumulator():
    module = build_mma_loop(T.F16, T.F32, 32, 32, 16)
    fn = module.functions[0]
    loop = next(op for op in fn.walk() if op.name == "for")
    mma = next(op for op in fn.walk() if op.name == "mmaf")

    options = CodegenOptions()
    with pytest.raises(L.LoweringError, match="select-mma recorded no mma_plan"):
        P.carried_layouts(options, loop)    # the layout comes from the plan select-mma records
    mma.attrs[P.MMA_PLAN] = P.plan_for(options, mma)
    assert P.carried_layouts(options, loop) == [mma.attrs[P.MMA_PLAN].c]


def test_huge_mma_is_refused_quickly():
    """128x128x1024 f64 would unroll to 16384 mma.sync per warp: refused instead of minutes in LLVM."""
    from tileiras_async.driver import CodegenUnavailable
    with pytest.raises(CodegenUnavailable, match="mma.sync per warp"):
        module_ptx(build_mma(T.F64, T.F64, T.F64, (None, 128, 128, 1024)), target("sm_80"), 3)
