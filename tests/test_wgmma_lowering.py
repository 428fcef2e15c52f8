"""wgmma on sm_90a (tilegpu/analysis/wgmma.py plans, codegen/lower_wgmma.py emits).

1. The plan against the PTX ISA: the accumulator layout is the wgmma D fragment table (and the emulator's
   reading of it); swizzles are the address functions NVIDIA's own sm_90 PTX stores with; descriptors
   encode as the ISA's bit fields and as NVIDIA's corpus PTX has them; the operand layout a descriptor
   describes (decoded by the emulator's independent implementation) is where staging puts each element.
2. Whole tiles through a plan in numpy, exactly as the emitted code moves data: every thread's staging
   stores (per-thread part XOR per-register constant, vector runs, K chunks and the trash slot), then each
   instruction reads its operands at the emulator's descriptor addresses; D must be acc + A @ B.
3. The choice: select_wgmma keeps mma.sync exactly where NVIDIA's tileiras does on the public corpus.
4. Code generation with `CodegenOptions(mma_instruction="auto")`: kernels built here for every operand
   type, ptxas -v (0 spills), the emulator against numpy; the corpus matmuls that get HGMMA from NVIDIA.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import PUBLIC, load_refs, requires_corpus
from test_codegen_mma import build_mma, build_mma_loop

from tileiras_async.codegen import lower_wgmma as LW
from tileiras_async.driver import emit_kernel, link_kernels_ptx, module_globals_ir
from tileiras_async.codegen.emitter import CodegenOptions
from tileiras_async.emu.isa import descriptors as EMU_DESC
from tileiras_async.emu.isa import wgmma as EMU_WGMMA
from tileiras_async.ir import types as T
from tileiras_async.ir.enums import Signedness
from tileiras_async.tilegpu.layout import WARP_SIZE, LinearLayout, blocked
from tileiras_async.targets import target
from tileiras_async.tilegpu.analysis import wgmma as W
from tileiras_async.tilegpu.analysis.mma import MmaPlan, plan_for
from tileiras_async.tilegpu.passes.select_access_forms import store_vector

S, U = Signedness.signed, Signedness.unsigned
F8A, F8B = T.F8E4M3FN, T.F8E5M2


def make_plan(instr, bsz, m, n, k, nw=4, budget=W.SHARED_LIMIT, atype="f16", btype="f16", b_major="k"):
    return W.WgmmaPlan(instr, atype, btype, bsz is not None, bsz or 1, m, n, k, nw, budget, b_major)


# ---------------------------------------------------------------------------------------------------------
# 1. the ISA tables, NVIDIA's PTX and the emulator
# ---------------------------------------------------------------------------------------------------------

def isa_d(lane: int, warp_in_wg: int, i: int) -> tuple[int, int]:
    """PTX ISA, wgmma .m64nNk* D fragment: element i of thread (warp, lane) -- groupID = lane / 4,
    threadID_in_group = lane % 4; rows 8 apart in element pairs, 8-column blocks every 4 elements."""
    g, t = lane >> 2, lane % 4
    row = warp_in_wg * 16 + g + 8 * ((i >> 1) & 1)
    col = (i >> 2) * 8 + t * 2 + (i & 1)
    return row, col


@pytest.mark.parametrize("n", [8, 16, 64, 128, 256])
def test_accumulator_is_the_isa_d_fragment(n):
    plan = make_plan(W.WG_F16_F32, None, 64, n, 16)
    assert plan.n == n and plan.rn == plan.rm == plan.rb == 1
    assert plan.frag_elems == n // 2
    for warp in range(4):
        for lane in range(WARP_SIZE):
            for i in range(plan.frag_elems):
                assert plan.c.apply(plan.c_reg(i, 0, 0, 0), lane, warp) == isa_d(lane, warp, i)


@pytest.mark.parametrize("n,dtype", [(64, "f32"), (128, "f16"), (24, "f32")])
def test_accumulator_is_the_emulators_d_layout(n, dtype):
    """emu/isa/wgmma.d_layout: flat position (register, thread, element) -> row-major D index."""
    nregs, per, perm = EMU_WGMMA.d_layout(n, dtype)
    flat = perm.reshape(nregs, 128, per)
    for r in range(nregs):
        for t in range(128):
            for e in range(per):
                i = r * per + e
                row, col = isa_d(t % 32, t // 32, i)
                assert flat[r, t, e] == row * n + col


def test_every_accumulator_element_once_across_tiles_and_warpgroups():
    for args, nw in (((None, 128, 64, 64), 4), ((None, 128, 128, 16), 8), ((2, 64, 32, 32), 8),
                     ((None, 64, 256, 32), 8), ((None, 256, 32, 32), 16), ((4, 64, 16, 32), 8)):
        bsz = args[0]
        plan = make_plan(W.WG_F16_F32, *args, nw=nw)
        c = plan.c
        assert c.is_complete() and not c.replicated() and c.num_registers * nw * 32 == c.num_elements
        # the D registers the instructions name are exactly the layout's registers
        regs = sorted(r for step in plan.issues()[:1] for iss in step for r in iss.c_regs)
        assert regs == list(range(c.num_registers)), (args, nw)
        # warpgroup w's instruction (bt, mt, nt) writes rows/cols where its descriptors point
        for wg in range(nw // 4):
            a_wg, b_wg = (sum(o[j] for bit, o in enumerate(plan.warpgroup_bits()) if wg >> bit & 1) for j in (0, 1))
            for iss in plan.issues()[0]:
                first = c.apply(iss.c_regs[0], 0, wg * 4)
                bb, row, col = first if bsz else (0,) + first
                assert iss.a_off + a_wg == plan.a_smem.base + plan.a_smem.linear(bb, row, 0)
                assert iss.b_off + b_wg == plan.b_smem.base + plan.b_smem.linear(bb, col, 0)


def test_replicating_warpgroups():
    """64 x 8 with 8 warps: N cannot be split below 8, the second warpgroup holds a copy."""
    plan = make_plan(W.WG_F16_F32, None, 64, 8, 16, nw=8)
    assert plan.wgs == (1, 1, 1) and plan.c.bases[2][2] == (0, 0)


@pytest.mark.parametrize("width,mask", [(32, 16), (64, 48), (128, 112)])
def test_swizzle_is_nvidias_store_address_function(width, mask):
    """NVIDIA's sm_90 PTX stores each staged element at `a ^ ((a >> 3) & mask)` (matmul_f16_f32acc_64x64x32:
    mask 48 for its 64-byte rows; the 128-byte-row kernels: 112): Swizzle<log2(W/16), 4, 3>."""
    for a in range(0, 1 << 14, 2):
        assert W.swizzle(a, width) == a ^ ((a >> 3) & mask)
        assert W.swizzle(a, width) == EMU_DESC.swizzle_address(a, f"{width}B")


@requires_corpus
def test_corpus_swizzle_masks_match_row_bytes():
    """The masks in NVIDIA's PTX follow the K row bytes: 64-byte rows (f16 K 32) -> 48, 128-byte rows -> 112."""
    expect = {"matmul_f16_f32acc_64x64x32": (2, 32, "48"), "matmul_bf16_64x64x64": (2, 64, "112"),
              "matmul_tf32_64x64x32": (4, 32, "112"), "matmul_f16_f16out_128x128x64": (2, 64, "112")}
    for cid, (eb, k, mask) in expect.items():
        ptx = (PUBLIC / f"{cid}.v13.4.sm_90.ptx").read_text()
        assert re.search(rf"and\.b32\s+%r\d+, %r\d+, {mask};", ptx), cid
        assert W.swizzle_width(eb * k) == {"48": 64, "112": 128}[mask]


def test_descriptor_bit_fields():
    d = W.SmemDescriptor(start=0x1230, lbo=16, sbo=1024, swizzle=128, base_offset=0)
    v = d.encode()
    assert v & 0x3FFF == 0x123 and (v >> 16) & 0x3FFF == 1 and (v >> 32) & 0x3FFF == 64
    assert (v >> 49) & 7 == 0 and v >> 62 == 1
    assert W.SmemDescriptor(0, 16, 512, 64).encode() >> 62 == 2
    assert W.SmemDescriptor(0, 16, 256, 32).encode() >> 62 == 3
    assert EMU_DESC.decode_wgmma_desc(v) == EMU_DESC.SmemDescriptor(0x1230, 16, 1024, 0, "128B")
    with pytest.raises(ValueError):
        W.SmemDescriptor(8, 16, 1024, 128).encode()


def isa_canonical(major: str, width: int, ebytes: int, lbo: int, sbo: int, mn: int, k: int) -> int:
    """Unswizzled byte offset of element (mn, k) from the descriptor's start in the PTX ISA's canonical layouts
    ("Shared Memory Matrix Layout", canonical layouts as CuTe layouts in T = 16 / ebytes element units, g =
    width / 16 chunks per swizzle row; LBO/SBO in bytes).  The hardware swizzles start + this."""
    t = 16 // ebytes
    g = width // 16
    if major == "k":                    # ((8,m),(T,2k)):((gT,SBO),(1,T)): one K step lies within the row
        return ((mn % 8) * g * t + k) * ebytes + (mn // 8) * sbo
    # ((T,g,m),(8,k)):((1,T,LBO),(gT,SBO))
    return ((mn % t) + ((mn // t) % g) * t + (k % 8) * g * t) * ebytes + (mn // (t * g)) * lbo + (k // 8) * sbo


@pytest.mark.parametrize("major,instr,rows,kc", [("k", W.WG_F16_F32, 64, 64), ("k", W.WG_F16_F32, 128, 32),
                                                 ("k", W.WG_F16_F32, 64, 16), ("k", W.WG_TF32_F32, 64, 32),
                                                 ("k", W.WG_I8_I32, 64, 128), ("mn", W.WG_F16_F32, 128, 32),
                                                 ("mn", W.WG_BF16_F32, 32, 16), ("mn", W.WG_F16_F32, 16, 64)])
def test_operand_layout_is_the_isa_canonical_layout(major, instr, rows, kc):
    """For every instruction's operand (all its rows, one K step), where staging puts an element is where
    the ISA's canonical layout, with our descriptor's start/LBO/SBO/swizzle, says the hardware reads it."""
    e = instr.ebytes
    width = min(128, rows * e) if major == "mn" else 0
    sm = W.SmemOperand(rows, kc, e, 1, 0, major, width)
    for k0 in range(0, kc, instr.k):
        d = sm.descriptor(0, 0, k0)
        assert d.swizzle == sm.width and d.sbo == 8 * d.swizzle and d.lbo == (16 if major == "k" else kc * width)
        for r in range(rows):
            for kk in range(instr.k):
                want = W.swizzle(d.start + isa_canonical(major, d.swizzle, e, d.lbo, d.sbo, r, kk), d.swizzle)
                assert sm.offset(0, r, k0 + kk) == want, (r, k0 + kk)


@requires_corpus
@pytest.mark.parametrize("cid,instr,shape", [
    ("matmul_f16_f32acc_64x64x32", W.WG_F16_F32, (64, 64, 32)),
    ("matmul_bf16_64x64x64", W.WG_BF16_F32, (64, 64, 64)),
    ("matmul_tf32_64x64x32", W.WG_TF32_F32, (64, 64, 32)),
    ("matmul_f16_f16out_128x128x64", W.WG_F16_F32, (128, 128, 64)),
])
def test_descriptors_are_nvidias(cid, instr, shape):
    """The 64-bit constants NVIDIA ORs into its descriptors (everything but the base address: LBO, SBO,
    swizzle, and the K step's start offset >> 4) are ours."""
    ptx = (PUBLIC / f"{cid}.v13.4.sm_90.ptx").read_text()
    theirs = {int(x) & (2 ** 64 - 1) for x in re.findall(r"(?:or|add)\.b64\s+%rd\d+, %rd\d+, (-?\d{12,});", ptx)}
    m, n, k = shape
    plan = make_plan(instr, None, m, n, k)
    da, db = plan.descriptors()
    assert da.template() == db.template()
    ours = {da.template() + ((iss.a_off % plan.a_smem.width) >> 4) for step in plan.issues() for iss in step}
    assert ours == theirs


@pytest.mark.parametrize("instr,m,n,k,b_major", [(W.WG_F16_F32, 64, 64, 32, "k"), (W.WG_TF32_F32, 128, 64, 64, "k"),
                                                 (W.WG_I8_I32, 64, 32, 256, "k"), (W.WG_F16_F32, 64, 8, 16, "k"),
                                                 (W.WG_BF16_F32, 128, 256, 64, "k"), (W.WG_F16_F32, 64, 64, 32, "mn"),
                                                 (W.WG_BF16_F32, 128, 512, 64, "mn")])
def test_descriptor_addresses_are_the_staged_places(instr, m, n, k, b_major):
    """For every instruction, the emulator decodes our descriptor into the address of each (row, k) it
    reads: that is where `stage_offset` put the element (A row mt*64 + r, B row nt*n + r)."""
    plan = make_plan(instr, None, m, n, k, b_major=b_major)
    da, db = plan.descriptors()
    base = 4096   # any multiple of plan.align
    assert base % plan.align == 0
    for ks, step in enumerate(plan.issues()):
        for iss in step:
            for role, off, rows, tmpl in (("a", iss.a_off, W.TILE_M, da), ("b", iss.b_off, plan.n, db)):
                addr = EMU_DESC.operand_addresses(EMU_DESC.decode_wgmma_desc(tmpl.template() + ((base + off) >> 4)),
                                                  rows, instr.k, instr.ebytes, role == "b" and b_major == "mn")
                first = plan.c.apply(iss.c_regs[0], 0, 0)
                r0 = first[0] if role == "a" else first[1]
                sm = plan.operand(role)
                for r in range(rows):
                    for kk in range(instr.k):
                        coord = (r0 + r, ks * instr.k + kk) if role == "a" else (ks * instr.k + kk, r0 + r)
                        assert addr[r, kk] == base + sm.base + plan.stage_offset(role, coord)


def test_stage_offset_is_linear_and_a_bijection():
    plan = make_plan(W.WG_F16_F32, 2, 64, 32, 256, budget=16 * 1024)
    assert plan.chunks > 1
    rng = np.random.default_rng(0)
    for role, shape in (("a", (2, 64, 256)), ("b", (2, 256, 32))):
        sm = plan.operand(role)
        for _ in range(500):
            x = tuple(int(rng.integers(0, s)) for s in shape)
            y = tuple(int(rng.integers(0, s)) for s in shape)
            xy = tuple(a ^ b for a, b in zip(x, y))
            assert plan.stage_offset(role, xy) == plan.stage_offset(role, x) ^ plan.stage_offset(role, y)
            assert plan.chunk_part(role, xy) == plan.chunk_part(role, x) ^ plan.chunk_part(role, y)
        # each chunk's elements fill the operand's bytes exactly once (element-aligned)
        places = {(plan.chunk_part(role, c), plan.stage_offset(role, c)) for c in np.ndindex(*shape)}
        assert len(places) == int(np.prod(shape))
        assert {o for _, o in places} == set(range(0, sm.nbytes, sm.ebytes))


def test_plan_sizes_and_chunks():
    p = make_plan(W.WG_F16_F32, None, 128, 128, 64)
    assert (p.kc, p.chunks, p.ksteps, p.n, p.rm, p.rn) == (64, 1, 4, 128, 2, 1)
    assert p.a_smem.width == 128 and p.align == 1024
    assert p.smem_bytes == 128 * 64 * 2 * 2 + W.TRASH_BYTES + 1024 - W.SCRATCH_ALIGN
    p = make_plan(W.WG_F16_F32, None, 64, 64, 32)
    assert p.a_smem.width == 64 and p.align == 512 and p.a_smem.descriptor(0, 0, 0).sbo == 512
    p = make_plan(W.WG_F16_F32, None, 64, 64, 1024)
    assert p.kc == 128 and p.chunks == 8 and p.smem_bytes <= W.SHARED_LIMIT
    p = make_plan(W.WG_F16_F32, None, 64, 512, 16, nw=4)
    assert (p.n, p.rn) == (256, 2)


# ---------------------------------------------------------------------------------------------------------
# 2. whole tiles in numpy, as the emitted code moves them
# ---------------------------------------------------------------------------------------------------------

def _thread_xor(layout: LinearLayout, part, lane: int, warp: int) -> int:
    x = 0
    for value, bases in ((lane, layout.bases[1]), (warp, layout.bases[2])):
        for bit, basis in enumerate(bases):
            if value >> bit & 1:
                x ^= part(basis)
    return x


def simulate_stage(mem: dict, plan: W.WgmmaPlan, role: str, layout: LinearLayout, values: np.ndarray,
                   chunk: int, base: int) -> None:
    """What stage_operand's stores do, thread by thread."""
    sm = plan.operand(role)
    vec = store_vector(layout, plan, role, sm.ebytes)
    _, entries = LW.stage_entries(layout, plan, role, chunk, vec)
    for warp in range(plan.num_warps):
        for lane in range(WARP_SIZE):
            t = _thread_xor(layout, lambda b: plan.stage_offset(role, b), lane, warp)
            hi = _thread_xor(layout, lambda b: plan.chunk_part(role, b), lane, warp)
            for r, const, need in entries:
                addr = base + sm.base + (t ^ const)
                if need is not None and hi != need:
                    addr = base + plan.trash
                for j in range(vec):
                    mem[addr + j * sm.ebytes] = values[layout.apply(r + j, lane, warp)]


def simulate_plan(plan: W.WgmmaPlan, a, b, c, a_layout=None, b_layout=None, base=2048):
    nw = plan.num_warps
    a_layout = a_layout or blocked(a.shape, nw, 4)
    b_layout = b_layout or blocked(b.shape, nw, 4)
    regs = {(w, lane): [c[plan.c.apply(r, lane, w)] for r in range(plan.c.num_registers)]
            for w in range(nw) for lane in range(WARP_SIZE)}
    da, db = plan.descriptors()
    i = plan.instr
    for chunk in range(plan.chunks):
        mem: dict[int, float] = {}
        simulate_stage(mem, plan, "a", a_layout, a, chunk, base)
        simulate_stage(mem, plan, "b", b_layout, b, chunk, base)
        for wg in range(nw // 4):
            a_wg = sum(o[0] for bit, o in enumerate(plan.warpgroup_bits()) if wg >> bit & 1)
            b_wg = sum(o[1] for bit, o in enumerate(plan.warpgroup_bits()) if wg >> bit & 1)
            for step in plan.issues():
                for iss in step:
                    am = np.array([[mem[int(x)] for x in row] for row in EMU_DESC.operand_addresses(
                        EMU_DESC.decode_wgmma_desc(da.template() + ((base + a_wg + iss.a_off) >> 4)),
                        W.TILE_M, i.k, i.ebytes, False)])
                    bm = np.array([[mem[int(x)] for x in row] for row in EMU_DESC.operand_addresses(
                        EMU_DESC.decode_wgmma_desc(db.template() + ((base + b_wg + iss.b_off) >> 4)),
                        plan.n, i.k, i.ebytes, plan.b_major == "mn")])
                    d = am @ bm.T
                    for w4 in range(4):
                        for lane in range(WARP_SIZE):
                            for e, r in enumerate(iss.c_regs):
                                regs[wg * 4 + w4, lane][r] += d[isa_d(lane, w4, e)]
    want = c + np.matmul(a, b)
    for (w, lane), rs in regs.items():
        for r, v in enumerate(rs):
            assert v == want[plan.c.apply(r, lane, w)], (w, lane, r)


def _rand(shape, seed):
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(np.float64)


PLAN_CASES = [
    # instr, B (None: 2-D), M, N, K, warps, shared-memory budget
    (W.WG_F16_F32, None, 64, 64, 32, 4, None),
    (W.WG_F16_F32, None, 128, 64, 64, 4, None),
    (W.WG_TF32_F32, None, 64, 32, 32, 4, None),
    (W.WG_I8_I32, None, 64, 16, 64, 4, None),
    (W.WG_F16_F32, None, 64, 64, 16, 8, None),       # warpgroups over N
    (W.WG_F16_F32, None, 128, 32, 32, 8, None),      # warpgroups over M
    (W.WG_F16_F32, 2, 64, 16, 32, 8, None),          # warpgroups over the batch
    (W.WG_F16_F32, None, 64, 32, 64, 4, 5 * 1024),  # K chunks, thread-dependent chunk membership
]


@pytest.mark.parametrize("instr,bsz,m,n,k,nw,budget", PLAN_CASES,
                         ids=[f"{c[0].key}-{c[1]}x{c[2]}x{c[3]}x{c[4]}-w{c[5]}" for c in PLAN_CASES])
def test_plan_computes_the_matmul(instr, bsz, m, n, k, nw, budget):
    plan = make_plan(instr, bsz, m, n, k, nw, budget or W.SHARED_LIMIT)
    lead = (bsz,) if bsz else ()
    a, b, c = _rand(lead + (m, k), 1), _rand(lead + (k, n), 2), _rand(lead + (m, n), 3)
    simulate_plan(plan, a, b, c)
    if budget:
        assert plan.chunks > 1
        assert LW.stage_entries(blocked(a.shape, nw, 4), plan, "a", 0, 4)[0]   # via the trash slot


N_MAJOR_CASES = [(W.WG_F16_F32, None, 64, 64, 32, 4), (W.WG_BF16_F32, None, 128, 32, 64, 4),
                 (W.WG_F16_F32, None, 64, 256, 16, 4), (W.WG_F16_F32, 2, 64, 32, 16, 8),
                 (W.WG_F16_F32, None, 64, 64, 32, 8)]


@pytest.mark.parametrize("instr,bsz,m,n,k,nw", N_MAJOR_CASES,
                         ids=[f"{c[0].key}-{c[1]}x{c[2]}x{c[3]}x{c[4]}-w{c[5]}" for c in N_MAJOR_CASES])
def test_plan_with_n_major_b_computes_the_matmul(instr, bsz, m, n, k, nw):
    """B stored N-major (imm-trans-b 1): the blocked layout's runs along N become vector stores."""
    plan = make_plan(instr, bsz, m, n, k, nw, b_major="mn")
    lead = (bsz,) if bsz else ()
    a, b, c = _rand(lead + (m, k), 7), _rand(lead + (k, n), 8), _rand(lead + (m, n), 9)
    assert store_vector(blocked(b.shape, nw, 4), plan, "b", 2) == 4
    simulate_plan(plan, a, b, c)


def test_n_major_b_needs_f16_and_32_bytes_of_n():
    with pytest.raises(ValueError):
        make_plan(W.WG_TF32_F32, None, 64, 64, 32, b_major="mn")
    with pytest.raises(ValueError):
        make_plan(W.WG_F16_F32, None, 64, 8, 32, b_major="mn")
    assert make_plan(W.WG_F16_F32, None, 64, 16, 32, b_major="mn").b_smem.width == 32


def test_plan_with_transposed_operand_layouts():
    plan = make_plan(W.WG_F16_F32, None, 64, 64, 64)
    a, b, c = _rand((64, 64), 4), _rand((64, 64), 5), _rand((64, 64), 6)
    lay = blocked((64, 64), 4, 4).transpose((1, 0))
    assert store_vector(lay, plan, "a", 2) == 1 and store_vector(lay, plan, "b", 2) == 4
    simulate_plan(plan, a, b, c, a_layout=lay, b_layout=lay)


# ---------------------------------------------------------------------------------------------------------
# 3. the choice
# ---------------------------------------------------------------------------------------------------------

def _mma_op(module):
    return next(op for op in module.functions[0].walk() if op.name in ("mmaf", "mmai"))


def _sm90(**kw) -> CodegenOptions:
    return CodegenOptions(**{"target": "sm_90", **kw})


@pytest.mark.parametrize("elems,shape,sg,expect", [
    ((T.F16, T.F32), (None, 64, 64, 32), None, "f16.f32 f16 f16 mn"),
    ((T.F16, T.F16), (None, 64, 64, 32), None, "f16.f16 f16 f16 mn"),
    ((T.BF16, T.F32), (None, 64, 64, 32), None, "bf16.f32 bf16 bf16 mn"),
    ((T.TF32, T.F32), (None, 64, 64, 32), None, "tf32.f32 tf32 tf32 k"),
    ((T.I8, T.I32), (None, 64, 64, 32), (U, U), "i8.i32 u8 u8 k"),
    ((T.I8, T.I32), (None, 64, 64, 32), (U, S), "PTX ISA 8.4"),
    ((F8A, T.F32), (None, 64, 64, 32), None, "f8.f32 e4m3 e4m3 k"),
    ((F8B, T.F16), (None, 64, 64, 32), None, "f8.f16 e5m2 e5m2 k"),
    ((T.F16, T.F32), (None, 32, 64, 32), None, "M = 32"),
    ((T.F16, T.F32), (None, 64, 4, 32), None, "N = 4"),
    ((T.F16, T.F32), (None, 64, 8, 32), None, "f16.f32 f16 f16 k"),     # 16 bytes of N: no N-major swizzle
    ((T.F16, T.F32), (None, 64, 64, 8), None, "K = 8"),
    ((T.F32, T.F32), (None, 64, 64, 32), None, "no wgmma for f32"),
    ((T.F64, T.F64), (None, 64, 64, 32), None, "no wgmma for f64"),
    ((T.F16, T.F32), (None, 256, 256, 32), None, "registers per thread"),
])
def test_choice(elems, shape, sg, expect):
    a, c = elems
    op = _mma_op(build_mma(a, a, c, shape, **({"signedness": sg} if sg else {})))
    r = W.wgmma_choice(_sm90(), op)
    if isinstance(r, str):
        assert expect in r
        assert W.select_wgmma(_sm90(), op) is None
        assert isinstance(plan_for(_sm90(), op), (MmaPlan, type(None)))   # mma.sync / FMA as before
    else:
        assert f"{r.instr.key} {r.atype} {r.btype} {r.b_major}" == expect
        assert plan_for(_sm90(), op) is not None


def test_choice_needs_sm90_whole_warpgroups_and_not_mma_sync():
    op = _mma_op(build_mma(T.F16, T.F16, T.F32, (None, 64, 64, 32)))
    assert "sm_90a only" in W.wgmma_choice(CodegenOptions(target="sm_100"), op)
    assert "warpgroups" in W.wgmma_choice(_sm90(num_warps=2), op)
    assert isinstance(plan_for(CodegenOptions(target="sm_90"), op), W.WgmmaPlan)    # the default on sm_90
    assert isinstance(plan_for(_sm90(mma_instruction="mma.sync"), op), MmaPlan)     # asked for mma.sync
    assert isinstance(plan_for(CodegenOptions(target="sm_120"), op), MmaPlan)     # (sm_100: tcgen05)


def test_remarks_say_which_instruction_and_why():
    for shape, want in (((None, 64, 64, 32), "lowered to wgmma.mma_async m64n64k16 (f16.f32, 1 warpgroup(s)"),
                        ((None, 32, 64, 32), "lowered to mma.sync m16n8k16 (f16.f32); not wgmma: M = 32 is below")):
        module = build_mma(T.F16, T.F16, T.F32, shape)
        em = emit_kernel(module, module.functions[0], _sm90())
        assert any(want in r.message for r in em.remarks), [r.message for r in em.remarks]


def _corpus_mma_ids() -> list[str]:
    out = []
    for p in sorted(PUBLIC.glob("*.v13.4.disasm.txt")) if PUBLIC.is_dir() else []:
        if re.search(r"\bmma[fi]\b", p.read_text()):
            out.append(p.name.split(".v13")[0])
    return out


@requires_corpus
def test_choice_is_nvidias_on_the_corpus():
    """Of the public corpus's matmuls, NVIDIA's tileiras emits wgmma on sm_90 for exactly those
    select_wgmma plans (the 64+ row tiles); the others keep mma.sync (HMMA) there too."""
    from tileiras_async.bytecode.reader import read_module
    ids = _corpus_mma_ids()
    assert len(ids) >= 8
    chosen, nvidia = set(), set()
    for cid in ids:
        module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
        if W.select_wgmma(_sm90(), _mma_op(module)) is not None:
            chosen.add(cid)
        if "wgmma.mma_async" in (PUBLIC / f"{cid}.v13.4.sm_90.ptx").read_text():
            nvidia.add(cid)
    assert chosen == nvidia and len(nvidia) == 4


# ---------------------------------------------------------------------------------------------------------
# 4. code generation: ptxas and the emulator
# ---------------------------------------------------------------------------------------------------------

def compile_wgmma(module, nw: int = 4, **kw) -> tuple[str, list]:
    opts = _sm90(opt_level=3, num_warps=nw, **kw)
    ems = [emit_kernel(module, fn, opts) for fn in module.functions]
    ptx = link_kernels_ptx([e.module_ir.render() for e in ems], [f.name.decode() for f in module.functions],
                           target("sm_90"), 3, module_globals_ir(module))
    return ptx, ems


def ptxas_report(ptx: str) -> str:
    from tileiras_async.toolchain.discovery import default_toolchain
    with tempfile.TemporaryDirectory() as d:
        Path(d, "k.ptx").write_text(ptx)
        proc = subprocess.run([str(default_toolchain().ptxas), "-v", "-O3", "-arch", "sm_90a", str(Path(d, "k.ptx")),
                               "-o", str(Path(d, "k.cubin"))], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def emulate_pointers(module, ptx: str, args: list, grid=(1, 1, 1)):
    """Run the kernel with every array passed by address (the built kernels take plain pointers)."""
    from tileiras_async.emu import emulate_ptx, load_program
    from tileiras_async.emu.memory import DeviceMemory
    kname = module.functions[0].name.decode()
    prog = load_program(ptx, kname)
    mem = DeviceMemory()
    addrs = [mem.alloc_array(np.ascontiguousarray(a)) for a in args]
    emulate_ptx(ptx, kname, grid, prog.reqntid, addrs, mem, check_races=True)
    for a, addr in zip(args, addrs):
        mem.copy_back(addr, a)


def _fp8_bits(x: np.ndarray, kind) -> np.ndarray:
    """Small integers -> e4m3 / e5m2 codes (exact)."""
    if kind == F8B:
        return (x.astype(np.float16).view(np.uint16) >> 8).astype(np.uint8)
    out = np.zeros(x.shape, np.uint8)
    for idx, v in np.ndenumerate(x):
        if v:
            e = int(np.floor(np.log2(abs(v))))
            mant = int(round((abs(v) / 2.0 ** e - 1) * 8))
            out[idx] = (0x80 if v < 0 else 0) | (e + 7) << 3 | mant
    return out


def _encode(x: np.ndarray, elem, unsigned: bool = False) -> np.ndarray:
    if elem == T.BF16:
        return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if elem in (F8A, F8B):
        return _fp8_bits(x, elem)
    if elem == T.I8:
        return x.astype(np.uint8 if unsigned else np.int8)
    return x.astype({T.F16: np.float16, T.F32: np.float32, T.TF32: np.float32, T.I32: np.int32}[elem])


def check_kernel(a_elem, c_elem, shape, nw=4, sg=None, b_elem=None, seed=0):
    """Build, compile with wgmma, ptxas (0 spills), emulate; D must be exactly C + A @ B."""
    b_elem = b_elem or a_elem
    module = build_mma(a_elem, b_elem, c_elem, shape, **({"signedness": sg} if sg else {}))
    ptx, ems = compile_wgmma(module, nw)
    plan = W.select_wgmma(_sm90(num_warps=nw), _mma_op(module))
    assert plan is not None
    assert f"{plan.ptx} {{" in ptx
    assert any("lowered to wgmma.mma_async" in r.message for r in ems[0].remarks)
    report = ptxas_report(ptx)
    assert re.search(r"\b0 bytes spill stores", report), report
    emulate_matmul(module, ptx, a_elem, b_elem, c_elem, shape, sg, seed)


def emulate_matmul(module, ptx: str, a_elem, b_elem, c_elem, shape, sg=None, seed=0) -> None:
    """Run a build_mma kernel on small random integers; D must be exactly C + A @ B."""
    bsz, m, n, k = shape
    lead = (bsz,) if bsz else ()
    rng = np.random.default_rng(seed)
    ua, ub = (sg[0] == U, sg[1] == U) if sg else (False, False)
    av = rng.integers(0 if ua else -3, 4, lead + (m, k)).astype(np.float64)
    bv = rng.integers(0 if ub else -3, 4, lead + (k, n)).astype(np.float64)
    cv = rng.integers(-3, 4, lead + (m, n)).astype(np.float64)
    C = _encode(cv, c_elem)
    D = np.zeros_like(C)
    emulate_pointers(module, ptx, [_encode(av, a_elem, ua), _encode(bv, b_elem, ub), C, D])
    got = D.astype(np.float64)
    want = cv + np.matmul(av, bv)
    assert np.array_equal(got, want), f"{int((got != want).sum())} wrong elements"


KERNEL_CASES = [
    # (A, C elements), (batch, M, N, K), warps, signedness, B element (default: A's)
    ((T.F16, T.F32), (None, 64, 64, 32), 4, None, None),
    ((T.F16, T.F16), (None, 64, 128, 64), 4, None, None),
    ((T.BF16, T.F32), (None, 64, 64, 64), 4, None, None),
    ((T.TF32, T.F32), (None, 64, 32, 32), 4, None, None),
    ((T.I8, T.I32), (None, 64, 64, 64), 4, (S, S), None),
    ((T.I8, T.I32), (None, 64, 32, 32), 4, (U, U), None),
    ((F8A, T.F32), (None, 64, 32, 64), 4, None, None),
    ((T.F16, T.F32), (None, 128, 128, 64), 8, None, None),
]
SLOW_CASES = [
    ((T.F16, T.F32), (None, 128, 128, 64), 4, None, None),
    ((T.F16, T.F32), (None, 64, 256, 16), 4, None, None),
    ((T.F16, T.F32), (2, 64, 32, 32), 4, None, None),
    ((T.F16, T.F32), (4, 64, 16, 32), 8, None, None),
    ((T.F16, T.F32), (None, 256, 64, 32), 16, None, None),
    ((T.F16, T.F32), (None, 64, 8, 16), 8, None, None),
    ((T.F16, T.F32), (None, 64, 64, 128), 4, None, None),        # K chunks (budget 12 KiB)
    ((T.I8, T.I32), (None, 64, 32, 256), 4, (S, S), None),        # K chunks, 8-bit
    ((T.TF32, T.F32), (None, 128, 64, 8), 4, None, None),
    ((F8B, T.F16), (None, 64, 64, 32), 4, None, None),
    ((T.I8, T.I32), (None, 64, 64, 32), 4, (U, U), None),
]


def _kid(case):
    (a, c), (bsz, m, n, k), nw, sg, b = case
    s = "" if sg is None else "-" + "".join("s" if x == S else "u" for x in sg)
    return f"{a}x{b or a}-{c}-{'' if bsz is None else f'{bsz}x'}{m}x{n}x{k}-w{nw}{s}"


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[_kid(c) for c in KERNEL_CASES])
def test_built_kernel_runs(case):
    (a, c), shape, nw, sg, b = case
    check_kernel(a, c, shape, nw, sg, b)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES, ids=[_kid(c) for c in SLOW_CASES])
def test_built_kernel_runs_more_shapes(case, monkeypatch):
    (a, c), shape, nw, sg, b = case
    monkeypatch.setattr(W, "SHARED_LIMIT", 12 * 1024)   # K chunks without operand tiles too big for registers
    check_kernel(a, c, shape, nw, sg, b)


def test_issue_from_a_buffer_at_a_run_time_offset(monkeypatch):
    """What a pipelined loop does: stage into a buffer `shift` bytes into the scratch (a run-time value, as
    a ring slot is) and issue with that shift."""
    from tileiras_async.codegen import lower_mma
    from tileiras_async.codegen.values import Tile
    monkeypatch.setattr(W, "TRASH_BYTES", 2048)    # room for the shifted copy

    def shifted(em, op, plan):
        lhs, rhs = em.get(op.operands["lhs"]), em.get(op.operands["rhs"])
        acc = em.expect(op.operands["acc"])
        base = LW.scratch_address(em, op, plan)
        descs = LW.descriptor_bases(em, plan, base)
        shift = em.b.asm("i32", f"mov.u32 $0, {plan.align};", "=r", [], sideeffect=False)   # opaque to LLVM
        LW.stage_chunk(em, op, plan, lhs, rhs, em.b.value(f"add i32 {base}, {shift}"), 0)
        LW.publish(em)
        words = LW.issue_chunk(em, plan, LW.pack_accumulators(em, plan, list(acc.regs)), descs, shift)
        words = LW.wait(em, plan, words, 0)
        em.set(op.result, Tile(op.result.type, plan.c, LW.unpack_accumulators(em, plan, words)))

    monkeypatch.setattr(lower_mma, "lower_wgmma", shifted)
    check_kernel(T.F16, T.F32, (None, 64, 32, 32))


@pytest.mark.parametrize("elem,k,stages", [(T.F16, 32, 4), (T.F16, 32, 2), (T.F16, 32, 1), (T.BF16, 32, 4),
                                           (F8A, 64, 4)])
def test_loop_carried_accumulator_stays_in_the_wgmma_layout(elem, k, stages):
    """A K-loop with wgmma: no layout conversion of the accumulator per iteration.  Pipelined (the default):
    per K chunk one cp.async wait + proxy fence + barrier, the copies of the chunk stages - 1 ahead, and the
    chunk's wgmma; with --num-stages 1 the loop is left unpipelined (one fence + barrier of the staging per
    iteration).  Both compute the sum.  fp8's B is K-major in shared memory (no transposed form), across the
    tensor's rows: its copies go one element at a time."""
    m, n, steps = 64, 64, 3
    module = build_mma_loop(elem, T.F32, m, n, k, steps)
    ksteps = k // (32 if elem == F8A else 16)
    ptx, ems = compile_wgmma(module, pipeline_stages=stages)
    assert len(ems[0].pipelines) == (stages > 1)
    if stages > 1:
        info = ems[0].pipelines[0]
        assert info.stages == stages and info.offset % 16 == 0
        assert f"cp.async.wait_group {stages - 2}" in ptx and "cp.async.cg.shared.global" in ptx   # A: 16 bytes
        # each unit's wait is followed by the fence (the copies are read through the async proxy), every
        # wgmma group by its wait (LLVM may peel or unroll, so the counts are relative)
        waits = re.findall(r"cp\.async\.wait_group (\d+);\s*// end inline asm\s*// begin inline asm\s*"
                           r"(fence\.proxy\.async)?", ptx)
        assert waits and all(f for w, f in waits if int(w) == stages - 2)
        assert ptx.count("fence.proxy.async") == sum(int(w) == stages - 2 for w, _ in waits)
        assert ptx.count("wgmma.mma_async") == ksteps * ptx.count("wgmma.commit_group")
        assert ptx.count("wgmma.commit_group") == ptx.count("wgmma.wait_group")
    else:
        loop = ptx[ptx.index("$L__BB0_"):]
        assert loop.count("wgmma.mma_async") == ksteps and loop.count("fence.proxy.async") == 1
    rng = np.random.default_rng(3)
    av = rng.integers(-3, 4, (m, k * steps)).astype(np.float64)
    bv = rng.integers(-3, 4, (k * steps, n)).astype(np.float64)
    D = np.zeros((m, n), np.float32)
    emulate_pointers(module, ptx, [_encode(av, elem), _encode(bv, elem), D])
    assert np.array_equal(D, av @ bv)


WGMMA_CORPUS = ["matmul_f16_f32acc_64x64x32", "matmul_bf16_64x64x64", "matmul_tf32_64x64x32",
                "matmul_f16_f16out_128x128x64"]
# spills with --num-stages 1, and why: the unpipelined K-loop holds a whole 128x64 and 64x128 f16 operand
# tile in registers (loaded element by element: run-time strides) on top of 128 f32 accumulators.  Software
# pipelining (the default: cp.async straight into the swizzled stage buffers) leaves no operand in
# registers.  NVIDIA's own PTX for this kernel spills too under plain `ptxas -arch sm_90a` (116 bytes).
SPILLS_UNPIPELINED = {"matmul_f16_f16out_128x128x64"}
# the tf32 operands are rounded (ftof) between load and mma: wgmma reads shared memory as it is, so each landed
# chunk is rounded in place (tilegpu.convert_stage) by the threads that copied it -- the copies stay cp.async
CONVERTED = {"matmul_tf32_64x64x32"}


@requires_corpus
@pytest.mark.parametrize("stages", [None, 1], ids=["pipelined", "num-stages-1"])
@pytest.mark.parametrize("cid", WGMMA_CORPUS)
def test_corpus_matmul_with_wgmma_matches_the_reference(cid, stages):
    from tileiras_async.bytecode.reader import read_module
    from test_pipelining import emulate
    refs = load_refs()
    module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
    ptx, ems = compile_wgmma(module, **({"pipeline_stages": stages} if stages else {}))
    assert "wgmma.mma_async.sync.aligned.m64n" in ptx and "mma.sync" not in ptx
    pipelined = stages is None
    assert len(ems[0].pipelines) == int(pipelined)
    assert ("cp.async.wait_group" in ptx) == pipelined
    assert ("cp.async.c" in ptx.replace("cp.async.commit", "")) == pipelined
    if pipelined and cid in CONVERTED:   # no synchronous load: A in 16-byte copies, B (K-major) 4-byte ones
        assert "ld.global" not in ptx and "cp.async.cg" in ptx and "cp.async.ca" in ptx
    spills = int(re.search(r"(\d+) bytes spill stores", ptxas_report(ptx)).group(1))
    assert (spills > 0) == (not pipelined and cid in SPILLS_UNPIPELINED)
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    emulate(module, ptx, refs.grid(cid, inputs), list(inputs.values()))
    assert not refs.check(cid, orig, inputs)
