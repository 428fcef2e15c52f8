"""tcgen05 on sm_100a: the plan (tilegpu/analysis/tcgen05.py) against the emulator's tensor-memory and descriptor
models (which run NVIDIA's own sm_100 PTX), the choice against NVIDIA's on the corpus, and built kernels and
the corpus matmuls through ptxas (0 spills) and the emulator, pipelined (the default, --num-stages 2) and not.

1. the plan vs the emulator's models
2. the choice and the remarks
3. code generation: ptxas and the emulator
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import LAUNCH, PUBLIC, corpus_case, load_refs, requires_corpus
from test_codegen_mma import build_mma, build_mma_loop
from test_wgmma_lowering import F8A, F8B, S, U, _corpus_mma_ids, _mma_op, emulate_matmul, emulate_pointers

from tileiras_async.driver import emit_kernel, link_kernels_ptx, module_globals_ir
from tileiras_async.codegen.emitter import CodegenOptions
from tileiras_async.emu.isa import descriptors as EMU_DESC
from tileiras_async.emu.isa import tcgen05 as EMU_TC
from tileiras_async.emu.runner import run_compiled
from tileiras_async.ir import types as T
from tileiras_async.targets import target
from tileiras_async.tilegpu.analysis import tcgen05 as TC
from tileiras_async.tilegpu.analysis import wgmma as W
from tileiras_async.tilegpu.analysis.mma import MmaPlan, plan_for


def make_plan(instr, bsz, m, n, k, nw=4, atype="f16", btype="f16", b_major="k") -> TC.Tcgen05Plan:
    return TC.Tcgen05Plan(instr, atype, btype, bsz is not None, bsz or 1, m, n, k, nw, W.SHARED_LIMIT, b_major)


def _sm100(**kw) -> CodegenOptions:
    return CodegenOptions(**{"target": "sm_100", **kw})


# ---------------------------------------------------------------------------------------------------------
# 1. the plan vs the emulator's models
# ---------------------------------------------------------------------------------------------------------

PLAN_SHAPES = [(None, 64, 64, 32, 4), (None, 128, 64, 32, 4), (None, 128, 128, 64, 8), (None, 64, 256, 16, 4),
               (2, 64, 32, 32, 4), (None, 256, 64, 16, 4), (2, 128, 16, 16, 8), (None, 64, 16, 16, 8)]


@pytest.mark.parametrize("bsz,m,n,k,nw", PLAN_SHAPES)
def test_accumulator_is_what_tcgen05_ld_reads(bsz, m, n, k, nw):
    """Every register of every thread of plan.c is the D element the emulator's tcgen05.ld (the plan's shape,
    at the warp's address) reads from where the emulator's tcgen05.mma wrote it; each element once."""
    p = make_plan(W.WG_F16_F32, bsz, m, n, k, nw)
    lane_rel, col_rel = EMU_TC.tmem_layout(p.ld_shape, p.ld_regs, False,
                                           p.ld_regs if p.ld_shape == "16x32bx2" else 0)
    # where each element of each instruction's D lives: (lane, column) -> coordinate
    d_lane, d_col = EMU_TC.d_lanes_columns(p.tile_m, p.n, False)
    cell = {}
    for bt in range(p.rb):
        for mt in range(p.rm):
            for nt in range(p.rn):
                col0 = ((bt * p.rm + mt) * p.rn + nt) * p.n
                for r in range(p.tile_m):
                    for c in range(p.n):
                        coord = (bt, mt * p.tile_m + r, nt * p.n + c)
                        cell[(int(d_lane[r, c]), col0 + int(d_col[r, c]))] = coord if bsz else coord[1:]
    seen = set()
    for w in range(nw):
        lane0, colw = 32 * (w % 4), (w // 4) * p.per_warp
        for t in range(32):
            for reg in range(p.c.num_registers):
                got = p.c.apply(reg, t, w)
                want = cell[(lane0 + int(lane_rel[t, reg, 0]), colw + int(col_rel[t, reg, 0]))]
                assert tuple(got) == want, (w, t, reg)
                seen.add(tuple(got))
    assert len(seen) == (bsz or 1) * m * n


@pytest.mark.parametrize("instr,at,bt,b_major", [(W.WG_F16_F32, "f16", "f16", "mn"), (W.WG_BF16_F32, "bf16", "bf16", "k"),
                                                 (W.WG_TF32_F32, "tf32", "tf32", "k"), (W.WG_TF32_F32, "tf32", "tf32", "mn"),
                                                 (W.WG_I8_I32, "s8", "u8", "k"),
                                                 (W.WG_F8_F32, "e5m2", "e4m3", "k")])
@pytest.mark.parametrize("m,n", [(64, 64), (128, 32), (128, 256), (64, 8)])
def test_descriptors_decode_as_planned(instr, at, bt, b_major, m, n):
    """The emulator (which runs NVIDIA's sm_100 PTX) decodes our instruction and shared-memory descriptors to
    the plan's kind, types, shape and majorness, and the descriptors' addresses to the staged places."""
    if b_major == "mn" and n * instr.ebytes < W.K_BYTES:
        b_major = "k"
    p = make_plan(instr, None, m, n, 2 * instr.k, 4, at, bt, b_major)
    d = EMU_DESC.decode_idesc(p.kind, p.instr_descriptor())
    assert (d.m, d.n, d.k, d.atype, d.btype, d.dtype) == (p.tile_m, p.n, instr.k, at, bt, instr.dtype)
    assert not d.transpose_a and d.transpose_b == (b_major == "mn")
    base = 4096
    for role, desc, rows in (("a", p.descriptors()[0], p.tile_m), ("b", p.descriptors()[1], p.n)):
        sm = p.operand(role)
        for iss in p.issues()[1][:1]:
            off = iss.a_off if role == "a" else iss.b_off
            value = desc.template() | (base + off) >> 4
            addr = EMU_DESC.operand_addresses(EMU_DESC.decode_tcgen05_desc(value), rows, instr.k, instr.ebytes,
                                              sm.major == "mn")
            for r in range(rows):
                for kk in range(instr.k):
                    assert addr[r, kk] == base + sm.offset(0, r, instr.k + kk), (role, r, kk)
            # an N-major tf32 B is swizzled in 32-byte atoms, as NVIDIA's sm_100 code lays it out
            want = "128B_base32B" if (role, sm.major, instr.ebytes) == ("b", "mn", 4) and sm.width == 128 else None
            assert want is None or EMU_DESC.decode_tcgen05_desc(value).swizzle == want


# ---------------------------------------------------------------------------------------------------------
# 2. the choice and the remarks
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("elems,shape,sg,expect", [
    ((T.F16, T.F32), (None, 64, 64, 32), None, "f16.f32 f16 f16 mn m64n64k16"),
    ((T.BF16, T.F32), (None, 128, 128, 64), None, "bf16.f32 bf16 bf16 mn m128n128k16"),
    ((T.TF32, T.F32), (None, 64, 64, 32), None, "tf32.f32 tf32 tf32 mn m64n64k8"),
    ((T.I8, T.I32), (None, 64, 64, 32), (U, S), "i8.i32 u8 s8 k m64n64k32"),
    ((F8A, T.F32), (None, 128, 32, 32), None, "f8.f32 e4m3 e4m3 k m128n32k32"),
    ((T.F16, T.F16), (None, 64, 64, 32), None, "f16 accumulators"),
    ((T.F16, T.F32), (None, 32, 64, 32), None, "M = 32"),
    ((T.F16, T.F32), (None, 128, 8, 32), None, "N = 8 is not a multiple of 16"),
    ((T.F16, T.F32), (None, 64, 64, 8), None, "K = 8"),
    ((T.F32, T.F32), (None, 64, 64, 32), None, "no tcgen05 for f32"),
    ((T.F16, T.F32), (None, 256, 256, 32), None, "registers per thread"),
    ((T.F16, T.F32), (None, 512, 256, 16), None, "1024 tensor-memory columns"),
])
def test_choice(elems, shape, sg, expect):
    a, c = elems
    op = _mma_op(build_mma(a, a, c, shape, **({"signedness": sg} if sg else {})))
    r = TC.tcgen05_choice(_sm100(), op)
    if isinstance(r, str):
        assert expect in r
        assert isinstance(plan_for(_sm100(), op), (MmaPlan, type(None)))
    else:
        assert f"{r.instr.key} {r.atype} {r.btype} {r.b_major} {r.shape_name}" == expect
        assert plan_for(_sm100(), op) == r


def test_choice_needs_sm100_and_not_mma_sync():
    op = _mma_op(build_mma(T.F16, T.F16, T.F32, (None, 64, 64, 32)))
    for gpu in ("sm_90", "sm_120", "sm_80"):
        assert "sm_110a only" in TC.tcgen05_choice(CodegenOptions(target=gpu), op)
        assert not isinstance(plan_for(CodegenOptions(target=gpu), op), TC.Tcgen05Plan)
    assert isinstance(plan_for(_sm100(mma_instruction="mma.sync"), op), MmaPlan)
    assert isinstance(plan_for(_sm100(mma_instruction="tcgen05"), op), TC.Tcgen05Plan)
    assert "warps" in TC.tcgen05_choice(_sm100(num_warps=2), op)


def test_remarks_say_which_instruction_and_why():
    for shape, want in (((None, 64, 64, 32), "lowered to tcgen05.mma.cta_group::1.kind::f16 m64n64k16 (f16.f32, 1 "
                                             "instruction(s) per K step, 64 tensor-memory columns)"),
                        ((None, 32, 64, 32), "lowered to mma.sync m16n8k16 (f16.f32); not tcgen05: M = 32")):
        module = build_mma(T.F16, T.F16, T.F32, shape)
        em = emit_kernel(module, module.functions[0], _sm100())
        assert any(want in r.message for r in em.remarks), [r.message for r in em.remarks]


@requires_corpus
def test_choice_is_nvidias_on_the_corpus():
    """Of the public corpus's matmuls, NVIDIA's tileiras emits tcgen05.mma on sm_100 for exactly those our
    choice takes (the 64+ row tiles); the others are mma.sync (HMMA) for both."""
    from tileiras_async.bytecode.reader import read_module
    chosen, nvidia = set(), set()
    for cid in _corpus_mma_ids():
        module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
        if TC.select_tcgen05(_sm100(), _mma_op(module)) is not None:
            chosen.add(cid)
        if "tcgen05.mma" in (PUBLIC / f"{cid}.v13.4.sm_100.ptx").read_text():
            nvidia.add(cid)
    assert chosen == nvidia and len(nvidia) == 4


# ---------------------------------------------------------------------------------------------------------
# 3. code generation: ptxas and the emulator
# ---------------------------------------------------------------------------------------------------------

def compile_sm100(module, nw: int = 4, gpu: str = "sm_100", **kw) -> tuple[str, list]:
    opts = CodegenOptions(target=gpu, opt_level=3, num_warps=nw, **kw)
    ems = [emit_kernel(module, fn, opts) for fn in module.functions]
    ptx = link_kernels_ptx([e.module_ir.render() for e in ems], [f.name.decode() for f in module.functions],
                           target(gpu), 3, module_globals_ir(module))
    return ptx, ems


def ptxas_report(ptx: str, arch: str = "sm_100a") -> str:
    from tileiras_async.toolchain.discovery import default_toolchain
    with tempfile.TemporaryDirectory() as d:
        Path(d, "k.ptx").write_text(ptx)
        proc = subprocess.run([str(default_toolchain().ptxas), "-v", "-O3", "-arch", arch, str(Path(d, "k.ptx")),
                               "-o", str(Path(d, "k.cubin"))], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def check_kernel(a_elem, c_elem, shape, nw=4, sg=None, seed=0):
    """Build, compile with tcgen05, ptxas (0 spills), emulate; D must be exactly C + A @ B."""
    module = build_mma(a_elem, a_elem, c_elem, shape, **({"signedness": sg} if sg else {}))
    ptx, ems = compile_sm100(module, nw)
    plan = TC.tcgen05_choice(_sm100(num_warps=nw), _mma_op(module))
    assert isinstance(plan, TC.Tcgen05Plan), plan
    assert f"{plan.ptx} [" in ptx and "mma.sync" not in ptx
    for step in ("tcgen05.alloc", "tcgen05.st", "tcgen05.commit", "tcgen05.ld", "tcgen05.dealloc"):
        assert step in ptx
    report = ptxas_report(ptx)
    assert re.search(r"\b0 bytes spill stores", report), report
    emulate_matmul(module, ptx, a_elem, a_elem, c_elem, shape, sg, seed)


KERNEL_CASES = [
    # (A, C elements), (batch, M, N, K), warps, signedness
    ((T.F16, T.F32), (None, 64, 64, 32), 4, None),
    ((T.F16, T.F32), (None, 128, 64, 32), 8, None),
    ((T.BF16, T.F32), (None, 64, 32, 64), 4, None),
    ((T.TF32, T.F32), (None, 64, 32, 32), 4, None),
    ((T.I8, T.I32), (None, 64, 32, 64), 4, (U, S)),
    ((F8A, T.F32), (None, 128, 32, 32), 4, None),
]
SLOW_CASES = [
    ((T.F16, T.F32), (None, 128, 128, 64), 4, None),
    ((T.F16, T.F32), (2, 64, 32, 32), 4, None),
    ((T.F16, T.F32), (2, 128, 16, 16), 8, None),
    ((T.F16, T.F32), (None, 256, 64, 32), 4, None),
    ((T.F16, T.F32), (None, 64, 64, 128), 4, None),       # K chunks (budget 12 KiB)
    ((T.I8, T.I32), (None, 64, 32, 256), 4, (S, S)),      # K chunks, 8-bit
    ((F8B, T.F32), (None, 64, 64, 32), 4, None),
    ((T.TF32, T.F32), (None, 128, 64, 8), 4, None),
]


def _kid(case):
    (a, c), (bsz, m, n, k), nw, sg = case
    s = "" if sg is None else "-" + "".join("s" if x == S else "u" for x in sg)
    return f"{a}-{c}-{'' if bsz is None else f'{bsz}x'}{m}x{n}x{k}-w{nw}{s}"


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[_kid(c) for c in KERNEL_CASES])
def test_built_kernel_runs(case):
    (a, c), shape, nw, sg = case
    check_kernel(a, c, shape, nw, sg)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES, ids=[_kid(c) for c in SLOW_CASES])
def test_built_kernel_runs_more_shapes(case, monkeypatch):
    (a, c), shape, nw, sg = case
    monkeypatch.setattr(TC, "SHARED_LIMIT", 12 * 1024)   # K chunks without operand tiles too big for registers
    check_kernel(a, c, shape, nw, sg)


@pytest.mark.parametrize("stages", [4, 2, 1])
def test_k_loop_with_tcgen05(stages):
    """A K-loop: pipelined (cp.async into the swizzled stage buffers, one tcgen05 issue + commit + wait per
    unit) or not; the accumulator stays in its tcgen05.ld layout across iterations; both compute the sum."""
    m, n, k, steps = 64, 64, 32, 3
    module = build_mma_loop(T.F16, T.F32, m, n, k, steps)
    ptx, ems = compile_sm100(module, pipeline_stages=stages)
    assert len(ems[0].pipelines) == (stages > 1)
    assert ("cp.async.wait_group" in ptx) == (stages > 1)
    assert ptx.count("tcgen05.commit") == ptx.count("mbarrier.try_wait.parity")
    assert ptx.count("tcgen05.alloc") == ptx.count("tcgen05.dealloc")
    rng = np.random.default_rng(3)
    av = rng.integers(-3, 4, (m, k * steps)).astype(np.float64)
    bv = rng.integers(-3, 4, (k * steps, n)).astype(np.float64)
    D = np.zeros((m, n), np.float32)
    emulate_pointers(module, ptx, [av.astype(np.float16), bv.astype(np.float16), D])
    assert np.array_equal(D, av @ bv)


TCGEN05_CORPUS = ["matmul_f16_f32acc_64x64x32", "matmul_bf16_64x64x64", "matmul_tf32_64x64x32",
                  "matmul_f16_f16out_128x128x64"]


# the default run: each kernel at the default stage count, two of them at --num-stages 2 (all: make test-all)
CORPUS_CASES = [pytest.param(cid, stages, id=f"{cid}-{'default' if stages is None else 'num-stages-2'}",
                             marks=[pytest.mark.slow] if stages and cid in TCGEN05_CORPUS[1::2] else [])
                for cid in TCGEN05_CORPUS for stages in (None, 2)]


@requires_corpus
@pytest.mark.parametrize("cid,stages", CORPUS_CASES)
def test_corpus_matmul_with_tcgen05_matches_the_reference(cid, stages):
    from tileiras_async.bytecode.reader import read_module
    from test_pipelining import emulate
    refs = load_refs()
    module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
    ptx, ems = compile_sm100(module, **({"pipeline_stages": stages} if stages else {}))
    assert "tcgen05.mma.cta_group::1.kind::" in ptx and "mma.sync" not in ptx
    assert len(ems[0].pipelines) == 1      # tf32 too: tcgen05 reads its copies' f32 bits as tf32
    assert re.search(r"\b0 bytes spill stores", ptxas_report(ptx))
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    emulate(module, ptx, refs.grid(cid, inputs), list(inputs.values()))
    assert not refs.check(cid, orig, inputs)


def record_mma_issuers(monkeypatch) -> list[int]:
    """The thread (within its CTA) that issued each tcgen05.mma the emulator executes, as they execute."""
    issuers = []
    execute = EMU_TC.execute_mma

    def recorded(mc, op_):
        issuers.append(op_.lane % mc.Tp)
        execute(mc, op_)
    monkeypatch.setattr(EMU_TC, "execute_mma", recorded)
    return issuers


# an op's group of mmas as the unpipelined form issues it (then its commit, then every thread's wait), the
# warp-specialised consumer's (keep-accumulators-in-tensor-memory: warp 0's K-loop, commits to the ring)
ONE_ISSUER_CASES = [pytest.param(PUBLIC, "matmul_f16_f32acc_64x64x32", id="unhinted"),
                    pytest.param(LAUNCH, "matmul_f16_f32acc_64x64x32", id="launch")]


@requires_corpus
@pytest.mark.parametrize("folder,cid", ONE_ISSUER_CASES)
def test_thread_0_alone_issues_each_group_of_mmas(refs, monkeypatch, folder, cid):
    """The other threads branch past an op's group of tcgen05.mma (and its commit): every mma executes on
    thread 0 of its CTA alone -- as many tensor-core thread-instructions as mmas issued, each by thread 0,
    where a predicate made all of a CTA's threads execute each one -- and with the race detector on the
    result is the reference."""
    issuers = record_mma_issuers(monkeypatch)
    inputs, orig, grid = corpus_case(refs, cid)
    run = run_compiled(folder / f"{cid}.v13.4.tileirbc", grid, list(inputs.values()), gpu_name="sm_100",
                       check_races=True)
    assert not refs.check(cid, orig, inputs)
    assert issuers and set(issuers) == {0}
    assert run.report.instruction_classes["tensor_core"] == len(issuers)


@requires_corpus
def test_without_the_commit_in_the_issuing_branch_the_wait_never_ends(refs, monkeypatch):
    """The commit inside the issuing branch is the only arrival the group's mbarrier phase gets (the mmas
    complete when it is made): without it every thread waits forever, which the emulator reports."""
    import tileiras_async.driver as driver
    from tileiras_async.emu.errors import EmuError
    commit = r" tcgen05\.commit\.cta_group::1\.mbarrier::arrive::one\.shared::cluster\.b64 \[%r\d+\]; (\$tci\d+: \})"
    compile_ptx = driver.module_ptx

    def uncommitted(*a, **kw):
        ptx, n = re.subn(commit, r" \1", compile_ptx(*a, **kw))
        assert n, commit
        return ptx
    monkeypatch.setattr(driver, "module_ptx", uncommitted)
    cid = "matmul_f16_f32acc_64x64x32"
    inputs, _, grid = corpus_case(refs, cid)
    with pytest.raises(EmuError, match="mbarrier wait can never complete"):
        run_compiled(PUBLIC / f"{cid}.v13.4.tileirbc", grid, list(inputs.values()), gpu_name="sm_100",
                     check_races=True)


@requires_corpus
@pytest.mark.parametrize("cid", ["matmul_f16_f32acc_64x64x32",     # the release's free after its loads
                                 "matmul_bf16_64x64x64"])          # tmem_free per_unit, after the loop
def test_without_the_barrier_before_the_free_the_columns_are_freed_under_the_loads(refs, monkeypatch, cid):
    """The unpipelined kernels load D, pass a CTA barrier, then warp 0 deallocates: without the barrier warp 0
    frees the columns while the other warps' tcgen05.ld may still be in flight, which the race detector
    reports (its deallocation is a write of every freed cell).  With the barrier the kernels run race-free
    (test_thread_0_alone_issues_each_group_of_mmas, the corpus tests)."""
    import tileiras_async.driver as driver
    from tileiras_async.emu.races import RaceError
    compile_ptx = driver.module_ptx

    def unsynchronised(*a, **kw):
        ptx = compile_ptx(*a, **kw)
        free = ptx.index("tcgen05.dealloc")
        barrier = ptx.rindex("bar.sync \t0;", 0, free)
        assert "tcgen05.ld" not in ptx[barrier:free]
        return ptx[:barrier] + ptx[barrier + len("bar.sync \t0;"):]
    monkeypatch.setattr(driver, "module_ptx", unsynchronised)
    inputs, _, grid = corpus_case(refs, cid)
    with pytest.raises(RaceError, match=r"tensor-memory race: deallocation after a read at tensor-memory lane \d+ "
                                        r"column \d+ by thread 0 \(warp 0\) after thread \d+'s \(warp [123]\)"):
        run_compiled(PUBLIC / f"{cid}.v13.4.tileirbc", grid, list(inputs.values()), gpu_name="sm_100",
                     check_races=True)


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_103", "sm_110"])
def test_other_tcgen05_targets(gpu):
    """NVIDIA's tileiras emits UTCHMMA for sm_103 and sm_110 too (checked with nvdisasm on its cubins of
    matmul_f16_f32acc_64x64x32): so do we, for the `a` target, and the result is the reference."""
    from tileiras_async.bytecode.reader import read_module
    from test_pipelining import emulate
    refs = load_refs()
    cid = TCGEN05_CORPUS[0]
    module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
    ptx, _ = compile_sm100(module, gpu=gpu)
    assert f".target {gpu}a" in ptx and "tcgen05.mma.cta_group::1.kind::f16" in ptx
    assert re.search(r"\b0 bytes spill stores", ptxas_report(ptx, gpu + "a"))
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    emulate(module, ptx, refs.grid(cid, inputs), list(inputs.values()))
    assert not refs.check(cid, orig, inputs)


@requires_corpus
@pytest.mark.parametrize("cid", TCGEN05_CORPUS[:1])
def test_sm120_keeps_mma_sync(cid):
    """Consumer Blackwell has no tcgen05: the same kernel stays on mma.sync there, passes ptxas and computes
    the reference."""
    from tileiras_async.bytecode.reader import read_module
    from test_pipelining import emulate
    refs = load_refs()
    module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
    ptx, ems = compile_sm100(module, gpu="sm_120")
    assert "tcgen05" not in ptx and "mma.sync" in ptx
    assert any("lowered to mma.sync" in r.message and "no wgmma or tcgen05 there" in r.message
               for r in ems[0].remarks), [r.message for r in ems[0].remarks]
    ptxas_report(ptx, "sm_120a")
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    emulate(module, ptx, refs.grid(cid, inputs), list(inputs.values()))
    assert not refs.check(cid, orig, inputs)


@requires_corpus
@pytest.mark.slow
@pytest.mark.parametrize("cid", [c for c in _corpus_mma_ids() if c not in TCGEN05_CORPUS] or ["none"])
def test_other_corpus_matmuls_num_stages_2_on_sm100(cid):
    """The corpus kernels with an mma that stay on mma.sync (or FMA) on sm_100 compute the references with
    --num-stages 2 as well (the stage count changes nothing else: only mma K-loops are pipelined)."""
    from tileiras_async.bytecode.reader import read_module
    from test_pipelining import emulate
    refs = load_refs()
    module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
    ptx, _ = compile_sm100(module, pipeline_stages=2)
    assert "tcgen05" not in ptx
    ptxas_report(ptx)
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    emulate(module, ptx, refs.grid(cid, inputs), list(inputs.values()))
    assert not refs.check(cid, orig, inputs)


def test_scaled_mma_blocks_keep_mma_sync():
    """mmaf_scaled runs one mmaf per K block with its operands already in registers: those stay on mma.sync
    on sm_100 (a tensor-memory round trip per block spilled), with the reason in the choice."""
    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.tilegpu.analysis import scaled_mma
    path = Path(__file__).resolve().parents[1] / "examples" / "suite" / "mx_matmul_e4m3.v13.4.tileirbc"
    module = read_module(path.read_bytes())
    op = next(o for o in module.functions[0].walk() if o.name == "mmaf_scaled")
    block = scaled_mma.block_product(op)
    assert "K blocks of mmaf_scaled" in TC.tcgen05_choice(_sm100(), block)
    assert isinstance(plan_for(_sm100(), block), MmaPlan)
    ptx, _ = compile_sm100(module)
    assert "tcgen05" not in ptx and "mma.sync" in ptx


@pytest.mark.parametrize("gpu", ["sm_100", "sm_90"])
def test_fp8_k_loop_pipelined(gpu):
    """An fp8 K-loop on tcgen05 (sm_100) and wgmma (sm_90): B is K-major in the stage buffers but arrives in
    rows of N, so its copies go one element at a time (16-byte copies along N wrote misaligned, wrong
    places); pipelined, it computes the sum."""
    from test_wgmma_lowering import _encode
    m, n, k, steps = 64, 64, 64, 3
    module = build_mma_loop(F8A, T.F32, m, n, k, steps)
    ptx, ems = compile_sm100(module, gpu=gpu)
    assert len(ems[0].pipelines) == 1
    rng = np.random.default_rng(5)
    av = rng.integers(-3, 4, (m, k * steps)).astype(np.float64)
    bv = rng.integers(-3, 4, (k * steps, n)).astype(np.float64)
    D = np.zeros((m, n), np.float32)
    emulate_pointers(module, ptx, [_encode(av, F8A), _encode(bv, F8A), D])
    assert np.array_equal(D, av @ bv)
