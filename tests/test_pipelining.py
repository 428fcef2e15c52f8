"""Software pipelining of K-loops (codegen/pipelining.py): cp.async stage buffers, prologue/steady state/drain.

* every corpus matmul/bmm (an mma inside a `for`) compiles pipelined for sm_80/90/100/120 and ptxas accepts it,
  with no register spills;
* the emulator -- where a cp.async lands only at its wait, so reading a buffer too early sees old data --
  gives results bit-identical to the synchronous build (`pipeline_stages=1`) that also pass `refs.check`
  (sm_80 and sm_100; sm_90 and sm_120 under `slow`);
* each loop version (16-byte, 4-byte, one element at a time) on its own, and the run-time choice between them
  on strided, misaligned and ragged inputs;
* trip counts 0, 1, 2 and fewer than the stage count, non-zero lower bounds, steps > 1, indices computed in
  the body; a body that needs scratch of its own (the buffers go above it, or the plan shrinks);
* loops that cannot be pipelined stay synchronous with the "Failed to pipeline loop" remark;
* a deliberately wrong wait count is caught by the emulator (the harness can see pipelining bugs).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import LAUNCH, PUBLIC, corpus_files, requires_corpus

from tileiras_async.tilegpu.analysis import software_pipeline as P
from tileiras_async.tilegpu.passes import software_pipeline as pipeline_pass
from tileiras_async.driver import emit_kernel, link_kernels_ptx, module_globals_ir
from tileiras_async.codegen.emitter import CodegenOptions
from tileiras_async.targets import target
from tileiras_async.ir import types as T
from tileiras_async.ir.builder import ModuleBuilder, tile
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
from tileiras_async.ir.enums import PaddingValue, Signedness
from tileiras_async.toolchain.ptxas import PtxasOptions, assemble

TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120")
DYN = T.DYNAMIC


def _kloop_corpus() -> list[Path]:
    out = []
    for p in corpus_files("*.v13.4.tileirbc"):
        d = p.with_name(p.name.replace(".tileirbc", ".disasm.txt"))
        if not d.is_file():
            continue
        text = d.read_text()
        i = text.find(" for ")
        if i >= 0 and re.search(r"\bmma[fi]\b", text[i:]):
            out.append(p)
    return out


KLOOPS = _kloop_corpus()


def _kid(p: Path) -> str:
    return p.name.split(".v13")[0]


def _read(path: Path):
    from tileiras_async.bytecode.reader import read_module
    return read_module(path.read_bytes())


def compile_ptx(module, gpu: str, stages: int | None = None, opt_level: int = 3):
    """(PTX, [emitters]) with `pipeline_stages=stages` (None: the default)."""
    opts = CodegenOptions(opt_level=opt_level, target=gpu)
    if stages is not None:
        opts.pipeline_stages = stages
    irs, names, ems = [], [], []
    for fn in module.functions:
        em = emit_kernel(module, fn, opts)
        irs.append(em.module_ir.render())
        names.append(fn.name.decode())
        ems.append(em)
    return link_kernels_ptx(irs, names, target(gpu), opt_level, module_globals_ir(module)), ems


def emulate(module, ptx: str, grid, args, check_races: bool = True) -> None:
    from tileiras_async.emu import emulate_ptx, load_program
    from tileiras_async.emu.memory import DeviceMemory
    from tileiras_async.emu.runner import map_arguments, scalar_elem_types
    kname = module.functions[0].name.decode()
    prog = load_program(ptx, kname)
    mem = DeviceMemory()
    params, arrays = map_arguments(prog, args, mem, scalar_elem_types(module, kname))
    g = tuple(grid) + (1,) * (3 - len(tuple(grid)))
    emulate_ptx(ptx, kname, g, prog.reqntid, params, mem, check_races=check_races)
    for i, addr in arrays:
        mem.copy_back(addr, args[i])


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


# ---------------------------------------------------------------------------------------------------------
# options and analysis
# ---------------------------------------------------------------------------------------------------------

def test_default_stage_count_is_the_real_tools():
    # the driver's `unspecialized-pipeline-num-stages=4` (the pass's own default, 2, is overridden by it)
    assert CodegenOptions().pipeline_stages == 4


@requires_corpus
def test_corpus_has_the_matmuls():
    assert {"matmul_f16_f16out_128x128x64", "bmm_f16_32x32x32", "matmul_tf32_64x64x32",
            "matmul_ragged_f32_16x16x16", "bmm_f32_16x32x16"} <= {_kid(p) for p in KLOOPS}


@requires_corpus
@pytest.mark.parametrize("path", KLOOPS, ids=_kid)
def test_corpus_loops_are_candidates(path):
    module = _read(path)
    _, ems = compile_ptx(module, "sm_80")
    loop = next(op for op in module.functions[0].walk() if op.name == "for")
    cand = P.analyze(CodegenOptions(target="sm_80"), loop)
    assert isinstance(cand, P.Candidate), cand
    assert ems[0].pipelines and ems[0].pipelines[0].stages == 4


# ---------------------------------------------------------------------------------------------------------
# the corpus: compiles pipelined everywhere, ptxas accepts it, no spills
# ---------------------------------------------------------------------------------------------------------

WGMMA_TF32 = {("matmul_tf32_64x64x32", "sm_90"), ("matmul_tf32_64x64x32", "sm_100")}   # sm_100: tcgen05


def _ptxas_v(ptx: str, gpu: str) -> str:
    from tileiras_async.toolchain.discovery import default_toolchain
    with tempfile.TemporaryDirectory() as d:
        Path(d, "k.ptx").write_text(ptx)
        proc = subprocess.run([str(default_toolchain().ptxas), "-v", "-O3", "-arch", target(gpu).ptx_target,
                               str(Path(d, "k.ptx")), "-o", str(Path(d, "k.cubin"))],
                              capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@requires_corpus
@pytest.mark.parametrize("gpu", TARGETS)
@pytest.mark.parametrize("path", KLOOPS, ids=_kid)
def test_corpus_compiles_pipelined(path, gpu):
    module = _read(path)
    ptx, ems = compile_ptx(module, gpu)
    assert not _failures(ems[0]), ems[0].remarks
    assert len(ems[0].pipelines) == 1
    info = ems[0].pipelines[0]
    assert info.stages == 4 and info.stages * info.unit_bytes + info.offset <= 48 * 1024
    # every copy is a cp.async; tf32 on wgmma/tcgen05 stays as copied: the tensor core reads the f32 bits as
    # tf32 (no rounding pass over the stage buffers, as in NVIDIA's code)
    assert re.search(r"cp\.async\.c[ag]\.shared\.global", ptx)
    if (_kid(path), gpu) in WGMMA_TF32:
        assert "ld.global" not in ptx and "cvt.rna.tf32" not in ptx
    # three units in flight, the oldest waited for -- but on tcgen05 two units share a wait (the oldest two)
    paired = "tcgen05.mma" in ptx and info.chunks % 2 == 0
    assert f"cp.async.wait_group {1 if paired else 2}" in ptx and f"cp.async.wait_group {2 if paired else 1}" not in ptx
    assert "cp.async.commit_group" in ptx and "cp.async.wait_group 0" in ptx
    assert assemble(ptx, PtxasOptions(arch=target(gpu).ptx_target, opt_level=3)).startswith(b"\x7fELF")


@requires_corpus
@pytest.mark.parametrize("gpu", TARGETS)
@pytest.mark.parametrize("path", KLOOPS, ids=_kid)
def test_corpus_pipelined_does_not_spill(path, gpu):
    """ptxas -v on the pipelined PTX: no spill stores (matmul_f16_f16out_128x128x64 spilled 1188 bytes on
    sm_80 before pipelining: 128 loaded values per thread in registers on top of 128 accumulators)."""
    ptx, _ = compile_ptx(_read(path), gpu)
    report = _ptxas_v(ptx, gpu)
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", report)]
    assert spills and not any(spills), report


@requires_corpus
def test_128x128x64_reads_fragments_with_ldmatrix():
    ptx, ems = compile_ptx(_read(next(p for p in KLOOPS if _kid(p) == "matmul_f16_f16out_128x128x64")), "sm_80")
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    info = ems[0].pipelines[0]
    assert (info.stages, info.chunks, info.kc) == (4, 4, 16)   # K 64 in chunks of 16 so 4 buffers fit 48 KB


# ---------------------------------------------------------------------------------------------------------
# emulated: bit-identical to the synchronous build and correct
# ---------------------------------------------------------------------------------------------------------

def _run_corpus(refs, path: Path, gpu: str, stages: int | None, check_races: bool = True):
    cid = _kid(path)
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    module = _read(path)
    ptx, _ = compile_ptx(module, gpu, stages)
    emulate(module, ptx, refs.grid(cid, inputs), list(inputs.values()), check_races)
    return inputs, orig


def _corpus_identical(refs, path, gpu):
    sync, _ = _run_corpus(refs, path, gpu, 1)
    piped, orig = _run_corpus(refs, path, gpu, None)
    for name in sync:
        assert _bits(sync[name]) == _bits(piped[name]), f"{name} differs from the synchronous build"
    problems = refs.check(_kid(path), orig, piped)
    assert not problems, problems


@requires_corpus
@pytest.mark.parametrize("gpu", ("sm_80", "sm_100"))
@pytest.mark.parametrize("path", KLOOPS, ids=_kid)
def test_corpus_emulated_identical(refs, path, gpu):
    _corpus_identical(refs, path, gpu)


@requires_corpus
@pytest.mark.parametrize("cid", ["matmul_f16_f32acc_64x64x32", "matmul_tf32_32x32x16"])
def test_num_stages_changes_the_loop_and_both_compute_the_reference(refs, cid):
    """--num-stages 2 and 4: different pipelined loops (buffers in flight, wait depth), the same values."""
    from tileiras_async import stages
    path = PUBLIC / f"{cid}.v13.4.tileirbc"
    data = path.read_bytes()
    out = {}
    for n in (2, 4):
        opts = stages.CompileOptions("sm_80", num_stages=n)
        parsed = stages.parse(stages.ParseRequest(str(path), data))
        lowered = [stages.lower(stages.LowerRequest(str(path), k, opts)) for k in parsed.kernel_ir]
        ptx = stages.codegen(stages.CodegenRequest(str(path), lowered, opts, parsed.globals_ir)).ptx
        inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
        emulate(_read(path), ptx, refs.grid(cid, inputs), list(inputs.values()))
        assert not refs.check(cid, orig, inputs), f"--num-stages {n}"
        out[n] = ptx
    assert out[2] != out[4]
    assert "cp.async.wait_group 0;" in out[2] and "cp.async.wait_group 2;" in out[4]
    assert "cp.async.wait_group 2;" not in out[2]


@requires_corpus
@pytest.mark.slow
@pytest.mark.parametrize("gpu", ("sm_90", "sm_120"))
@pytest.mark.parametrize("path", KLOOPS, ids=_kid)
def test_corpus_emulated_identical_other_targets(refs, path, gpu):
    _corpus_identical(refs, path, gpu)


# the same K-loop kernels as cuTile launches them (alignment hints: one wide-copy loop, vector epilogues)
LAUNCH_KLOOPS = [LAUNCH / p.name for p in KLOOPS if (LAUNCH / p.name).is_file()]
LAUNCH_SAMPLE = ("matmul_f16_f32acc_64x64x32", "bmm_f16_32x32x32")


def _every_stage_count(refs, path: Path, gpu: str) -> None:
    """Compiled, assembled (with the launch hooks' host object where the copies are TMA) and run race-checked
    as the `emulate` engine runs a kernel, at each stage count."""
    from tileiras_async.emu.runner import run_compiled
    cid = _kid(path)
    ptx = {}
    for n in (2, 3, 4, None):
        inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
        run = run_compiled(path, refs.grid(cid, inputs), list(inputs.values()), gpu_name=gpu, check_races=True,
                           pipeline_stages=n)
        assert not refs.check(cid, orig, inputs), f"{cid} {gpu} --num-stages {n}"
        ptx[n] = run.ptx
    assert ptx[2] != ptx[4]


@requires_corpus
@pytest.mark.parametrize("gpu", ("sm_90", "sm_100"))
@pytest.mark.parametrize("cid", LAUNCH_SAMPLE)
def test_launch_k_loops_at_every_stage_count(refs, cid, gpu):
    _every_stage_count(refs, LAUNCH / f"{cid}.v13.4.tileirbc", gpu)


@requires_corpus
@pytest.mark.slow
@pytest.mark.parametrize("gpu", ("sm_90", "sm_100"))
@pytest.mark.parametrize("path", LAUNCH_KLOOPS, ids=_kid)
def test_every_launch_k_loop_at_every_stage_count(refs, path, gpu):
    _every_stage_count(refs, path, gpu)


# the unhinted bytecode of the same K-loops (NVIDIA's fallback path: no alignment facts, cp.async rings), every stage
# count on the targets whose loops are warp-specialised or wgmma/tcgen05 when launched
UNHINTED_SAMPLE = ("matmul_f16_f32acc_64x64x32", "bmm_f32_16x32x16")


@requires_corpus
@pytest.mark.parametrize("gpu", ("sm_90", "sm_100"))
@pytest.mark.parametrize("cid", UNHINTED_SAMPLE)
def test_unhinted_k_loops_at_every_stage_count(refs, cid, gpu):
    [path] = [p for p in KLOOPS if _kid(p) == cid]
    _every_stage_count(refs, path, gpu)


@requires_corpus
@pytest.mark.slow
@pytest.mark.parametrize("gpu", ("sm_90", "sm_100"))
@pytest.mark.parametrize("path", KLOOPS, ids=_kid)
def test_every_unhinted_k_loop_at_every_stage_count(refs, path, gpu):
    _every_stage_count(refs, path, gpu)


def _force_version(monkeypatch, which: int):
    """Only the `which`-th loop version (0 wide, 1 narrow, 2 one element at a time), unconditionally."""
    orig = pipeline_pass.copy_versions

    def only(cand, geom):
        vs = orig(cand, geom)
        return [vs[min(which, len(vs) - 1)]]

    monkeypatch.setattr(pipeline_pass, "copy_versions", only)


@requires_corpus
@pytest.mark.parametrize("gpu", ("sm_80", "sm_90", "sm_100"))
@pytest.mark.parametrize("kid", ("matmul_f16_f16out_128x128x64", "matmul_bf16_64x64x64"))
def test_element_version_at_every_stage_count(refs, monkeypatch, kid, gpu):
    """The one-element-at-a-time version alone (synchronous 16-bit copies: from 4 stages on, stored two units
    after one barrier off tcgen05, published two units per barrier on it), race checked against the reference
    at 2, 3 and 4 stages."""
    _force_version(monkeypatch, 1)
    _every_stage_count(refs, next(p for p in KLOOPS if _kid(p) == kid), gpu)


@requires_corpus
@pytest.mark.parametrize("which", (0, 1, 2))
@pytest.mark.parametrize("kid", ("matmul_ragged_f16_32x32x32", "matmul_tf32_32x32x16", "bmm_f16_32x32x32",
                                 "matmul_ragged_f32_16x16x16", "matmul_bf16_f32out_32x64x32",
                                 "matmul_bf16_64x64x64"))
def test_each_loop_version(refs, monkeypatch, kid, which):
    path = next(p for p in KLOOPS if _kid(p) == kid)
    arrays = [a for a in refs.make_inputs(kid).values() if isinstance(a, np.ndarray) and a.ndim >= 2]
    if which == 0 and any(a.strides[-2] % 16 for a in arrays):
        pytest.skip("rows not 16-byte aligned: the run-time check keeps this input off the 16-byte version")
    sync, _ = _run_corpus(refs, path, "sm_80", 1)
    _force_version(monkeypatch, which)
    piped, _ = _run_corpus(refs, path, "sm_80", None)
    for name in sync:
        assert _bits(sync[name]) == _bits(piped[name]), name


@requires_corpus
@pytest.mark.parametrize("order", ["C", "F"])
def test_long_copy_loops_on_strided_views(refs, order):
    """matmul_bf16_64x64x64 copies 16 elements per thread and chunk in its one-element version: a long copy
    loop whose addresses hang off one pointer per chunk (`LONG_COPY_LOOP`). With A and B column-major
    (innermost stride != 1: the run-time check picks that version) it computes what the unpipelined
    build does."""
    from tileiras_async.codegen.lower_software_pipeline import LONG_COPY_LOOP
    path = next(p for p in KLOOPS if _kid(p) == "matmul_bf16_64x64x64")
    outs = []
    for stages in (1, None):
        inputs = refs.make_inputs("matmul_bf16_64x64x64")
        args = [np.asarray(a, order=order) if isinstance(a, np.ndarray) and a.ndim == 2 and n != "C" else a
                for n, a in inputs.items()]
        module = _read(path)
        ptx, _ = compile_ptx(module, "sm_80", stages)
        if stages is None:
            assert ptx.count("ld.global.u16") >= 2 and 64 * 32 // 128 >= LONG_COPY_LOOP
        emulate(module, ptx, refs.grid("matmul_bf16_64x64x64", inputs), args)
        outs.append(args[list(inputs).index("C")])
    assert _bits(outs[0]) == _bits(outs[1])


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
def test_synchronous_copy_loops_overlap_their_loads(gpu):
    """A loop of synchronous copies (the one-element version of 16-bit operands) issues SYNCHRONOUS_BATCH
    predicated loads before its first shared store in every iteration: one at a time, each waited out a
    global load (2.4x the time of matmul_ragged_f16_32x32x32 on an H100).  The batch's later copies address
    from the first's through one opaque move, not from addresses of their own."""
    from tileiras_async.codegen.lower_software_pipeline import SYNCHRONOUS_BATCH
    path = next(p for p in KLOOPS if _kid(p) == "matmul_bf16_64x64x64")
    ptx, _ = compile_ptx(_read(path), gpu)
    loops = [body for body in re.split(r"\n\$L__BB\d+_\d+:", ptx) if ".pragma \"nounroll\"" in body
             and "ld.global.u16" in body]
    assert loops
    for body in loops:
        lines = [ln for ln in body.splitlines() if "ld.global.u16" in ln or "st.shared" in ln]
        first_store = next(k for k, ln in enumerate(lines) if "st.shared" in ln)
        assert first_store == body.count("ld.global.u16") == SYNCHRONOUS_BATCH >= 4
        assert body.count("mov.b64") >= 1


def test_a_wrong_wait_is_caught(refs, monkeypatch):
    """Waiting for one group too few lets the mma read a buffer whose copies have not landed: the emulator
    (copies land at the wait) shows it -- so the identical results above mean something.  With the race
    check on, the late copies landing over what other warps read are reported first; without it the
    values differ."""
    from tileiras_async.emu.races import RaceError
    path = next(p for p in KLOOPS if _kid(p) == "matmul_f16_f32acc_64x64x32")
    sync, _ = _run_corpus(refs, path, "sm_80", 1)
    from tileiras_async.codegen import lower_software_pipeline
    orig_wait = lower_software_pipeline.LOWERINGS["tilegpu.async_wait"]

    def one_too_few(em, op):
        if op.attrs["pending"]:
            em.b.asm("void", f"cp.async.wait_group {op.attrs['pending'] + 1};", "~{memory}", [])
        else:
            orig_wait(em, op)
    monkeypatch.setitem(lower_software_pipeline.LOWERINGS, "tilegpu.async_wait", one_too_few)
    with pytest.raises(RaceError):
        _run_corpus(refs, path, "sm_80", None)
    piped, _ = _run_corpus(refs, path, "sm_80", None, check_races=False)
    assert _bits(sync["C"]) != _bits(piped["C"])


# the barriers the pipeline keeps are needed: dropping one, or pairing units where the mma's reads are not
# waited for by every thread, makes the race checker fail on the unhinted 128x128x64 f16 matmul


def _without_barriers(monkeypatch, pick):
    """After the pipeline pass, the `tilegpu.barrier`s `pick` chooses from each pipelined loop body's removed."""
    from tileiras_async.tilegpu.ir import walk_ops
    expand = pipeline_pass._expand_k_loops

    def expand_then_drop(k, plans):
        expand(k, plans)
        for loop in [o for o in walk_ops(k.fn.body) if o.name == "for" and o.attrs.get("pipelined")]:
            body = loop.regions[0].blocks[0]
            for bar in pick([o for o in body.ops if o.name == "tilegpu.barrier"]):
                body.ops.remove(bar)
    monkeypatch.setattr(pipeline_pass, "_expand_k_loops", expand_then_drop)


@requires_corpus
@pytest.mark.parametrize("gpu, dropped", [
    ("sm_100", 1),      # units 2 and 3 published by unit 0's barrier alone: their copies never waited for
    ("sm_80", 1),       # unit 1's: its copies refill the buffer other warps' mma.sync of unit 0 still read
    ("sm_80", 0),       # unit 0's
])
def test_a_kept_barrier_is_required(refs, monkeypatch, gpu, dropped):
    from tileiras_async.emu.races import RaceError
    path = next(p for p in KLOOPS if _kid(p) == "matmul_f16_f16out_128x128x64")
    _without_barriers(monkeypatch, lambda bars: bars[dropped:dropped + 1])
    with pytest.raises(RaceError):
        _run_corpus(refs, path, gpu, None)


@requires_corpus
def test_wgmma_units_are_not_paired(refs, monkeypatch):
    """On wgmma the odd unit's copies would refill the buffer the even unit's wgmma read with no barrier after
    those reads (each thread's wgmma.wait_group orders its warpgroup's reads, which the race checker does not
    take for an order between threads): at 3 stages it reports the race, so the pipeline pairs units on
    tcgen05 only."""
    from tileiras_async.emu.races import RaceError
    path = next(p for p in KLOOPS if _kid(p) == "matmul_f16_f16out_128x128x64")
    monkeypatch.setattr(pipeline_pass._Expander, "pairs_units",
                        property(lambda self: self.ahead >= 2 and self.geom.chunks % 2 == 0))
    with pytest.raises(RaceError):
        _run_corpus(refs, path, "sm_90", 3)


# -- ragged, strided and misaligned inputs through a corpus kernel (the run-time copy path choice) -----------

@requires_corpus
@pytest.mark.parametrize("K,layout", [(0, "c"), (16, "c"), (32, "c"), (48, "c"), (64, "c"), (90, "c"), (130, "c"),
                                      (90, "fortran"), (64, "offset1"), (64, "offset2"), (64, "offset8"),
                                      (40, "bstride")])
def test_ragged_kernel_inputs(K, layout):
    """matmul_ragged_f16 (tiles 32x32x32, zero padding): K-loop trip counts 0..5 (fewer than the 4 stages
    included), K not a multiple of the tile, and views that pick each loop version at run time."""
    path = next(p for p in KLOOPS if _kid(p) == "matmul_ragged_f16_32x32x32")
    module = _read(path)
    rng = np.random.default_rng(K)
    M, N = 40, 36
    if layout == "fortran":      # innermost stride != 1: one element at a time
        A = np.asfortranarray(rng.standard_normal((M, K)).astype(np.float16))
    elif layout.startswith("offset"):   # base misaligned for 16 (offset 1, 2) or 4 (offset 1) bytes
        A = rng.standard_normal((M, K + 8)).astype(np.float16)[:, int(layout[6:]):][:, :K]
    else:
        A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    if layout == "bstride":
        B = rng.standard_normal((K, 2 * N)).astype(np.float16)[:, ::2]
    outs = []
    for stages in (1, None):
        C = np.zeros((M, N), np.float32)
        ptx, _ = compile_ptx(module, "sm_80", stages)
        emulate(module, ptx, ((-(-M // 32)) * (-(-N // 32)),), [A, B, C])
        outs.append(C)
    assert _bits(outs[0]) == _bits(outs[1])
    ref = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(outs[1], ref, rtol=1e-3, atol=1e-3)


@requires_corpus
@pytest.mark.parametrize("kid", ("matmul_f16_f16out_128x128x64", "matmul_bf16_64x64x64"))
def test_tcgen05_element_version(refs, kid):
    """On sm_100 an A whose rows are not 16-byte aligned runs the element-at-a-time version of the loop (the
    one that shares the wide version's acquire and release, or whose acquire publishes its first unit): race
    checked, and the same bits as the synchronous build on the aligned A."""
    path = next(p for p in KLOOPS if _kid(p) == kid)
    module = _read(path)
    inputs = refs.make_inputs(kid)
    grid = refs.grid(kid, inputs)
    A, B = inputs["A"], inputs["B"]
    shifted = np.zeros((A.shape[0], A.shape[1] + 8), A.dtype)[:, 1:A.shape[1] + 1]
    shifted[...] = A
    outs = []
    for a, stages in ((A, 1), (shifted, None)):
        C = np.zeros_like(inputs["C"])
        ptx, _ = compile_ptx(module, "sm_100", stages)
        emulate(module, ptx, grid, [a, B, C])
        outs.append(C)
    assert _bits(outs[0]) == _bits(outs[1])
    assert np.any(outs[1])


# ---------------------------------------------------------------------------------------------------------
# built kernels: bounds, steps, indices computed in the body, scratch in the body, remarks
# ---------------------------------------------------------------------------------------------------------

def build_kloop(tm=32, tn=32, tk=32, *, elem=T.F16, padding=None, index_offset=0, store_in_body=False,
                add_loaded=False, acc_elem=T.F32):
    """C[0,0 tile] = sum over k in range(lb, ub, step) of A[0, k + index_offset] @ B[k + index_offset, 0]
    (f32 accumulator), arguments in cuTile order: A, B, C (and X when `add_loaded`: C += X + X^T (X the [0, 0] tile) per
    iteration, a tile the body converts through shared memory), then lb, ub, step."""
    from tileiras_async.ir.verifier import verify_module
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    acc_t = tile(acc_elem, tm, tn)
    arrays = [("A", elem, (tm, tk)), ("B", elem, (tk, tn)), ("C", acc_elem, (tm, tn))]
    if add_loaded:
        arrays.append(("X", T.F32, (tm, tn)))
    args = []
    for _, e, _ in arrays:
        args += [tile(T.PointerType(e))] + [i32] * 4
    args += [i32] * 3
    with mb.kernel("kloop", args) as kb:
        pvs = []
        for j, (name, e, ts) in enumerate(arrays):
            base, s0, s1, st0, st1 = kb.args[5 * j:5 * j + 5]
            tv_t = T.TensorViewType(e, (DYN, DYN), (DYN, DYN))
            tv = kb.op("make_tensor_view", [tv_t], base=base, dynamicShape=[s0, s1],
                       dynamicStrides=[st0, st1]).result
            pad = padding if name in ("A", "B") else None
            pv_t = T.PartitionViewType(ts, tv_t, (0, 1), pad)
            pvs.append(kb.op("make_partition_view", [pv_t], tensor_view=tv).result)
        lb, ub, step = kb.args[-3:]
        zero = kb.constant(np.int32(0), i32)
        init = kb.constant({T.F32: np.float32, T.F64: np.float64, T.I32: np.int32, T.F16: np.float16}[acc_elem](0),
                           acc_t)
        with kb.region([i32, acc_t]) as body:
            iv, acc = body.block.args
            k = iv
            if index_offset:
                off = body.constant(np.int32(index_offset), i32)
                k = body.op("addi", [i32], lhs=iv, rhs=off).result
            a = body.op("load_view_tko", [tile(elem, tm, tk), T.TOKEN], view=pvs[0], index=[zero, k],
                        memory_ordering_semantics=MO.weak).results[0]
            b = body.op("load_view_tko", [tile(elem, tk, tn), T.TOKEN], view=pvs[1], index=[k, zero],
                        memory_ordering_semantics=MO.weak).results[0]
            if isinstance(elem, T.IntType):
                r = body.op("mmai", [acc_t], lhs=a, rhs=b, acc=acc, signedness_lhs=Signedness.signed,
                            signedness_rhs=Signedness.unsigned).result
            else:
                r = body.op("mmaf", [acc_t], lhs=a, rhs=b, acc=acc).result
            if add_loaded:  # r + X + X^T: X is needed in two layouts, so both go through shared memory
                x = body.op("load_view_tko", [acc_t, T.TOKEN], view=pvs[3], index=[zero, zero],
                            memory_ordering_semantics=MO.weak).results[0]
                xt = body.op("permute", [acc_t], source=x, permutation=[1, 0]).result
                r = body.op("addf", [acc_t], lhs=r, rhs=x).result
                r = body.op("addf", [acc_t], lhs=r, rhs=xt).result
            if store_in_body:
                body.op("store_view_tko", [T.TOKEN], tile=r, view=pvs[2], index=[zero, zero],
                        memory_ordering_semantics=MO.weak)
            body.op("continue", operands=[r])
        res = kb.op("for", [acc_t], regions=[body.built_region], lowerBound=lb, upperBound=ub, step=step,
                    initValues=[init]).result
        kb.op("store_view_tko", [T.TOKEN], tile=res, view=pvs[2], index=[zero, zero],
              memory_ordering_semantics=MO.weak)
        kb.op("return")
    diags = verify_module(mb.module)
    assert not diags, [d.render() for d in diags]
    return mb.module


def _run_kloop(module, stages, A, B, lb, ub, step, X=None, gpu="sm_80", cdtype=np.float32):
    C = np.zeros((module_tile(module)), cdtype)
    ptx, ems = compile_ptx(module, gpu, stages)
    args = [A, B, C] + ([X] if X is not None else []) + [np.int32(lb), np.int32(ub), np.int32(step)]
    emulate(module, ptx, (1,), args)
    return C, ptx, ems[0]


def module_tile(module):
    fn = module.functions[0]
    return next(op for op in fn.walk() if op.name in ("mmaf", "mmai")).result.type.shape


def _kloop_ref(A, B, tk, lb, ub, step, off=0, X=None):
    tm, tn = A.shape[0], B.shape[1]
    acc = np.zeros((tm, tn))
    for k in range(lb, ub, step):
        kk = k + off
        a = np.zeros((tm, tk))
        b = np.zeros((tk, tn))
        if 0 <= kk:
            sa = A[:, kk * tk:(kk + 1) * tk].astype(np.float64)
            sb = B[kk * tk:(kk + 1) * tk, :].astype(np.float64)
            a[:, :sa.shape[1]] = sa
            b[:sb.shape[0], :] = sb
        acc = acc + a @ b
        if X is not None:
            acc = acc + X + X.T
    return acc


@pytest.mark.parametrize("lb,ub,step", [(0, 0, 1), (0, 1, 1), (0, 2, 1), (0, 3, 1), (0, 5, 1), (1, 4, 1),
                                        (0, 7, 2), (3, 2, 1), (-2, 3, 3)])
def test_trip_counts_bounds_and_steps(lb, ub, step):
    module = build_kloop(index_offset=2)
    rng = np.random.default_rng(abs(lb * 100 + ub * 10 + step))
    K = 32 * 8
    A = rng.standard_normal((32, K)).astype(np.float16)
    B = rng.standard_normal((K, 32)).astype(np.float16)
    sync, _, _ = _run_kloop(module, 1, A, B, lb, ub, step)
    piped, ptx, em = _run_kloop(module, None, A, B, lb, ub, step)
    assert em.pipelines and "cp.async.cg.shared.global" in ptx
    assert _bits(sync) == _bits(piped)
    np.testing.assert_allclose(piped, _kloop_ref(A, B, 32, lb, ub, step, 2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stages", (2, 3, 4, 5, 8))
def test_stage_counts(stages):
    module = build_kloop(tm=16, tn=16, tk=16)
    rng = np.random.default_rng(stages)
    A = rng.standard_normal((16, 16 * 6)).astype(np.float16)
    B = rng.standard_normal((16 * 6, 16)).astype(np.float16)
    sync, _, _ = _run_kloop(module, 1, A, B, 0, 6, 1)
    piped, ptx, em = _run_kloop(module, stages, A, B, 0, 6, 1)
    assert em.pipelines[0].stages == stages
    assert f"cp.async.wait_group {stages - 2};" in ptx
    assert _bits(sync) == _bits(piped)


def test_body_scratch_and_the_buffers_never_share_bytes():
    """The body converts a loaded tile through shared memory every iteration: the stage buffers live
    through the whole loop, so allocate-shared-memory keeps that scratch apart from them and the conversion
    never overwrites copies in flight."""
    module = build_kloop(add_loaded=True)
    rng = np.random.default_rng(7)
    A = rng.standard_normal((32, 32 * 5)).astype(np.float16)
    B = rng.standard_normal((32 * 5, 32)).astype(np.float16)
    X = rng.standard_normal((32, 32)).astype(np.float32)
    sync, _, _ = _run_kloop(module, 1, A, B, 0, 5, 1, X)
    piped, _, em = _run_kloop(module, None, A, B, 0, 5, 1, X)
    info = em.pipelines[0]
    assert em.shared_bytes >= info.stages * info.unit_bytes + 32 * 32 * 4
    assert _bits(sync) == _bits(piped)
    np.testing.assert_allclose(piped, _kloop_ref(A, B, 32, 0, 5, 1, X=X), rtol=1e-4, atol=1e-4)


def test_large_body_scratch_shrinks_the_plan():
    """64x64 f32 of body scratch (16 KB) leaves no room for 4 whole-K buffers of a 64x64x32 f16 matmul: the
    plan is made again with the scratch reserved (smaller K chunks)."""
    module = build_kloop(tm=64, tn=64, tk=32, add_loaded=True)
    rng = np.random.default_rng(8)
    A = rng.standard_normal((64, 32 * 3)).astype(np.float16)
    B = rng.standard_normal((32 * 3, 64)).astype(np.float16)
    X = rng.standard_normal((64, 64)).astype(np.float32)
    sync, _, _ = _run_kloop(module, 1, A, B, 0, 3, 1, X)
    piped, _, em = _run_kloop(module, None, A, B, 0, 3, 1, X)
    info = em.pipelines[0]
    assert (info.stages, info.chunks) != (4, 1)     # 4 whole-K buffers would not fit beside the scratch
    assert info.stages * info.unit_bytes + 64 * 64 * 4 <= em.shared_bytes <= 48 * 1024
    assert _bits(sync) == _bits(piped)


ELEMS = [  # (A/B element, accumulator, tile M N K, numpy dtype of the A/B data, of C, targets)
    (T.F32, T.F32, (32, 32, 16), np.float32, np.float32, ("sm_80",)),          # the FMA chain
    (T.BF16, T.F32, (32, 32, 16), np.uint16, np.float32, ("sm_80",)),
    (T.F16, T.F16, (32, 32, 32), np.float16, np.float16, ("sm_80",)),
    (T.I8, T.I32, (32, 32, 64), np.int8, np.int32, ("sm_80",)),               # 8-bit B words from bytes
    (T.F8E4M3FN, T.F32, (32, 32, 32), np.uint8, np.float32, ("sm_89", "sm_100")),  # via f16 / native (fp8: sm_89+)
    (T.F8E5M2, T.F16, (32, 32, 32), np.uint8, np.float16, ("sm_89", "sm_100")),
    (T.F64, T.F64, (16, 16, 16), np.float64, np.float64, ("sm_80",)),         # m8n8k4, 16-byte = 2 elements
    (T.TF32, T.F32, (32, 32, 16), np.float32, np.float32, ("sm_80",)),
]


@pytest.mark.parametrize("case", ELEMS, ids=lambda c: f"{c[0]}-{c[1]}")
def test_element_types(case):
    elem, acc, (tm, tn, tk), dt, cdt, gpus = case
    module = build_kloop(tm, tn, tk, elem=elem, acc_elem=acc)
    rng = np.random.default_rng(5)
    steps = 3

    def data(shape):
        if dt in (np.uint8, np.int8):
            x = rng.integers(-100, 100, shape) if dt == np.int8 else rng.integers(0, 0x7E, shape)
            if dt == np.uint8:   # finite fp8 codes with either sign
                x = x | (rng.integers(0, 2, shape) << 7)
            return x.astype(dt)
        if dt == np.uint16:
            return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return rng.standard_normal(shape).astype(dt)

    A = data((tm, tk * steps))
    B = data((tk * steps, tn))
    for gpu in gpus:
        sync, _, _ = _run_kloop(module, 1, A, B, 0, steps, 1, gpu=gpu, cdtype=cdt)
        piped, ptx, em = _run_kloop(module, None, A, B, 0, steps, 1, gpu=gpu, cdtype=cdt)
        assert em.pipelines, em.remarks
        assert "cp.async" in ptx
        assert _bits(sync) == _bits(piped), gpu
        assert np.any(sync != 0)


# -- what is not pipelined ------------------------------------------------------------------------------------

def _failures(em) -> list[str]:
    """The "Failed to pipeline loop" remarks, as the user reads them (other remarks report other decisions)."""
    return [f"{r.function}: remark: {r.message}" for r in em.remarks
            if r.category == "pipelining" and r.kind == "missed"]


def _remarks(module, gpu="sm_80", stages=None):
    ptx, ems = compile_ptx(module, gpu, stages)
    return ptx, _failures(ems[0])


@pytest.mark.parametrize("kind", ("padding", "store", "ordering"))
def test_unpipelinable_loops_get_the_remark(kind):
    if kind == "padding":
        module = build_kloop(padding=PaddingValue.neg_zero)
    elif kind == "store":
        module = build_kloop(store_in_body=True)
    else:
        module = _relaxed_kloop()
    ptx, remarks = _remarks(module)
    assert len(remarks) == 1 and P.FAILED in remarks[0], remarks
    assert "cp.async" not in ptx
    # and it still computes the right thing
    rng = np.random.default_rng(1)
    A = rng.standard_normal((32, 64)).astype(np.float16)
    B = rng.standard_normal((64, 32)).astype(np.float16)
    C, _, _ = _run_kloop(module, None, A, B, 0, 2, 1)
    np.testing.assert_allclose(C, _kloop_ref(A, B, 32, 0, 2, 1), rtol=1e-4, atol=1e-4)


def _relaxed_kloop():
    """The A load relaxed (device scope): ordered, so not a weak load the pipeline may move."""
    from tileiras_async.ir.enums import MemoryScope
    module = build_kloop()
    for op in module.functions[0].walk():
        if op.name == "load_view_tko" and op.results[0].type.shape == (32, 32):
            op.attrs["memory_ordering_semantics"] = MO.relaxed
            op.attrs["memory_scope"] = MemoryScope.device
            break
    return module


def test_disabled_pipelining_has_no_remark():
    ptx, remarks = _remarks(build_kloop(), stages=1)
    assert not remarks and "cp.async" not in ptx


def test_loop_without_mma_has_no_remark():
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    with mb.kernel("plain", [i32]) as kb:
        zero = kb.constant(np.int32(0), i32)
        one = kb.constant(np.int32(1), i32)
        with kb.region([i32, i32]) as body:
            iv, s = body.block.args
            body.op("continue", operands=[body.op("addi", [i32], lhs=s, rhs=iv).result])
        kb.op("for", [i32], regions=[body.built_region], lowerBound=zero, upperBound=kb.args[0], step=one,
              initValues=[zero])
        kb.op("return")
    _, remarks = _remarks(mb.module)
    assert not remarks


def test_remark_names_the_kernel():
    _, remarks = _remarks(build_kloop(store_in_body=True))
    assert remarks[0].startswith("kloop: remark: Failed to pipeline loop: ")
    assert "writes memory" in remarks[0]


MMA_SYNC_TMA = ("bmm_f16_32x32x32", "matmul_bf16_f32out_32x64x32")   # every operand by TMA, read by mma.sync


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("stages", [2, 3, None])
@pytest.mark.parametrize("cid", MMA_SYNC_TMA)
def test_mma_sync_tma_rings_are_released_by_mbarriers(refs, cid, gpu, stages):
    """A one-warpgroup ring that mma.sync reads, every operand by TMA: each thread fences its reads of a unit for
    the async proxy and arrives on the buffer's "empty" mbarrier (a phase: every thread's arrival), and the
    copies that refill a buffer wait for its previous unit's release, so the K-loop has no CTA barrier (the
    kernel's one publishes the mbarriers' initialisation: NVIDIA's count) and no cp.async group.  Computed
    with the race detector on."""
    from tileiras_async.emu.runner import run_compiled
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    run = run_compiled(LAUNCH / f"{cid}.v13.4.tileirbc", refs.grid(cid, inputs), list(inputs.values()),
                       gpu_name=gpu, check_races=True, pipeline_stages=stages)
    assert not refs.check(cid, orig, inputs)
    ptx = run.ptx
    assert re.findall(r"\bbar(?:rier)?\.sync\s+([^;]*);", ptx) == ["0"]
    assert "cp.async.commit_group" not in ptx and "cp.async.wait_group" not in ptx and "mma.sync" in ptx
    threads = int(re.search(r"\.reqntid (\d+)", ptx).group(1))
    assert len(re.findall(rf"mbarrier\.init\.shared\.b64 \[%r\d+\+\d+\], {threads};", ptx)) == (stages or 4)
    assert ptx.count("fence.proxy.async.shared::cta; mbarrier.arrive.shared.b64") >= 1


@requires_corpus
@pytest.mark.parametrize("cid", MMA_SYNC_TMA)
def test_without_the_release_the_refill_waits_forever(refs, monkeypatch, cid):
    """The releases are needed: without a thread's arrival on the empty mbarrier the copies that refill the
    buffer wait for a phase that never completes, which the emulator reports.  (The refill's wait for the
    release is needed as much: test_without_the_wait_for_the_release_the_refill_races.)"""
    import tileiras_async.driver as driver
    from tileiras_async.emu.errors import BarrierError
    from tileiras_async.emu.runner import run_compiled
    release = r"fence\.proxy\.async\.shared::cta; mbarrier\.arrive\.shared\.b64 st, \[%r\d+\];"
    compile_ptx = driver.module_ptx

    def without_first_release(*a, **kw):
        ptx = compile_ptx(*a, **kw)
        m = re.search(release, ptx)
        assert m, "no release in the PTX"
        return ptx[:m.start()] + ptx[m.end():]
    monkeypatch.setattr(driver, "module_ptx", without_first_release)
    inputs = refs.make_inputs(cid)
    with pytest.raises(BarrierError, match="can never complete"):
        run_compiled(LAUNCH / f"{cid}.v13.4.tileirbc", refs.grid(cid, inputs), list(inputs.values()),
                     gpu_name="sm_90", check_races=True, pipeline_stages=2)


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_without_the_wait_for_the_release_the_refill_races(refs, monkeypatch, gpu):
    """The copies that refill a buffer wait for the release of its previous unit: without that wait they may
    land while other warps still read the unit with ldmatrix.  The emulator runs the warps in lock step, so the
    values are right either way; the race detector (happens-before through the mbarriers) reports the copy's
    write after the reads.  K = 256: eight units, so the ring of 2 or 3 buffers is refilled."""
    import tileiras_async.codegen.lower_tensor_copy  # noqa: F401  (registers the lowering patched here)
    from tileiras_async.codegen.emitter import LOWERINGS
    from tileiras_async.emu.races import RaceError
    from tileiras_async.emu.runner import run_compiled
    cid = "bmm_f16_32x32x32"
    rng = np.random.default_rng(3)

    def inputs():   # small integers: every sum is exact in f16
        return {"A": rng.integers(-2, 3, (4, 64, 256)).astype(np.float16),
                "B": rng.integers(-2, 3, (4, 256, 64)).astype(np.float16), "C": np.zeros((4, 64, 64), np.float16)}
    path = LAUNCH / f"{cid}.v13.4.tileirbc"
    for stages in (2, 3):
        args = inputs()
        orig = {k: v.copy() for k, v in args.items()}
        run_compiled(path, refs.grid(cid, args), list(args.values()), gpu_name=gpu, check_races=True,
                     pipeline_stages=stages)
        assert not refs.check(cid, orig, args)
    wait = LOWERINGS["tilegpu.tma_wait"]
    monkeypatch.setitem(LOWERINGS, "tilegpu.tma_wait", lambda em, op: None if op.attrs.get("empty") else wait(em, op))
    for stages in (2, 3):
        args = inputs()
        with pytest.raises(RaceError, match=r"write after a read at shared address \d+ by a tensor copy \(issued by "
                                            r"thread 0, warp 0\) after thread \d+'s"):
            run_compiled(path, refs.grid(cid, args), list(args.values()), gpu_name=gpu, check_races=True,
                         pipeline_stages=stages)


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_tma_only_rings_have_no_cp_async_groups(refs, monkeypatch, gpu):
    """Every operand by TMA: no cp.async group is committed or waited for, the copies are issued by one
    elected lane, and on sm_100 no CTA barrier orders the K-loop's units (every thread waits for each unit's
    tcgen05.mma to complete, the issuing one too, before the buffer is refilled); on sm_90 one per unit stays
    (cheaper than mbarrier releases within one warpgroup).  The results are the reference's.  On sm_100 this
    kernel's loop is warp-specialised (tests/test_warp_specialization.py); the one-warpgroup form it is
    checked in here stays for the loops the split refuses (one inside another loop), so the policy is off."""
    from tileiras_async.emu.runner import run_compiled
    from tileiras_async.tilegpu.passes import schedule_loops
    monkeypatch.setattr(schedule_loops, "WARP_SPECIALIZE", False)
    cid = "matmul_f16_f16out_128x128x64"
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    run = run_compiled(LAUNCH / f"{cid}.v13.4.tileirbc", refs.grid(cid, inputs), list(inputs.values()),
                       gpu_name=gpu, check_races=True)
    assert not refs.check(cid, orig, inputs)
    ptx = run.ptx
    assert "cp.async.commit_group" not in ptx and "cp.async.wait_group" not in ptx and "elect.sync" in ptx
    first, last = (ptx.index(mma), ptx.rindex(mma)) if (mma := "tcgen05.mma.cta_group") in ptx else \
        (ptx.index("wgmma.fence"), ptx.rindex("wgmma.fence"))
    assert (ptx[first:last].count("bar.sync") == 0) == (gpu == "sm_100")
    # sm_100: the mbarriers' initialisation is published by the accumulator's acquire (its barrier comes before
    # any other warp waits on them): warp 0 only syncs its own lanes for the first copies (sm_90's epilogue
    # syncs each warp's lanes before its elected lane's tensor store: after the loop, not counted here)
    assert ("bar.warp.sync" in ptx[:first]) == (gpu == "sm_100")
    assert ptx.count("bar.sync") == (3 if gpu == "sm_100" else 5)
    # the epilogue leaves by TMA (select-tile-tensor-stores: sm_90's mma fragments by stmatrix, sm_100's rows of
    # 256 bytes a thread by st.shared.v4), no bounds-checked st.global
    assert "st.global" not in ptx and "cp.async.bulk.tensor.2d.global.shared" in ptx


@requires_corpus
@pytest.mark.parametrize("stages", [2, 3, None])
def test_a_ring_of_tensor_copies_and_register_loads_has_no_cp_async_groups(refs, stages):
    """sm_90's tf32 matmul as cuTile launches it: A lands by TMA, wgmma's B (tf32, transposed) through
    registers -- loads, then shared stores, nothing by cp.async.  No group is committed or waited for in the
    loop (the drain's one wait after it aside); each unit keeps the fence that orders the shared stores before
    wgmma's async-proxy reads, and the barrier after it.  Race-checked, the results are the reference's."""
    from tileiras_async.emu.runner import run_compiled
    cid = "matmul_tf32_64x64x32"
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    run = run_compiled(LAUNCH / f"{cid}.v13.4.tileirbc", refs.grid(cid, inputs), list(inputs.values()),
                       gpu_name="sm_90", check_races=True, pipeline_stages=stages)
    assert not refs.check(cid, orig, inputs)
    ptx = run.ptx
    assert "cp.async.commit_group" not in ptx and ptx.count("cp.async.wait_group") == 1
    assert "cp.async.bulk.tensor" in ptx and "ld.global.v4" in ptx and "cp.async.ca" not in ptx
    # a unit's fence, then the barrier, before the next wgmma reads the buffers
    assert re.search(r"fence\.proxy\.async\.shared::cta;(?:(?!wgmma\.fence).)*?bar\.sync", ptx, re.S)
