"""PTX emulator on NVIDIA's own PTX: the corpus holds the PTX the real tileiras handed to ptxas.

Running it is an independent check of the emulator's warp-level and async
instructions (mma.sync with f16/bf16/tf32 fragments, ldmatrix, cp.async with
commit/wait groups and mbarrier completion, shfl/redux/elect, atomics; on
sm_90 wgmma with swizzled shared-memory descriptors and A in registers; on
sm_100 tensor memory, tcgen05.mma/commit/ld/st and warp-specialised CTAs
synchronised through mbarriers) on code we did not write: the results must
match the numpy references, and the race check (emu/races.py) finds no unordered
shared- or tensor-memory access in it (a check of the checker: no false alarms on
NVIDIA's barriers and mbarrier pipelines).  Every one of the 110 files runs.

NVIDIA's PTX runs with `memcheck="device"` (emu/memory.py), as on a GPU without a sanitizer: in
`int_ops_*` NVIDIA's code loads `b` with no bounds check (`ct.load` without padding leaves out-of-bounds
elements undefined), reading past the end of the array in the last block.  On a GPU that read lands in the
allocation's page and its value is unused; the emulator serves it with 0xff bytes, the references still
match, and the run warns that compute-sanitizer's memcheck would report the read.  The default `strict` mode
faults on it (asserted too).

The launch set (out/public-launch: the bytecode as cuTile specialises it at launch, NVIDIA's PTX for it)
runs too, with the parameter ABI of the launch bytecode and NVIDIA's host object beside the PTX: in 21 of
the 55 kernels with PTX per target NVIDIA's code loads and stores through tensor maps (TMA) that the host
object's launch hook fills (emu/host_object.py runs it; x86-64 Linux only), in warp-specialised pipelines;
every file matches the references (the two `int_ops` with the same unguarded load and warning as above).
Without the host object, PTX that takes tensor maps is refused.

Every file runs through `emu.runner.run_ptx`, the path of `run --ptx` (the corpus bytecode gives the
entry, scalar types and assumed bounds).

Default run: a sample covering each instruction family; `--run-all`: every file.
"""
from __future__ import annotations

import pytest
from conftest import CORPUS, PUBLIC, corpus_case, requires_corpus

import platform

from tileiras_async.emu import MemoryFault
from tileiras_async.emu.errors import UnsupportedLaunch
from tileiras_async.emu.runner import run_ptx

LAUNCH = CORPUS / "out" / "public-launch"
FILES = sorted(PUBLIC.glob("*.v13.4.sm_*.ptx")) if PUBLIC.is_dir() else []
LAUNCH_FILES = sorted(LAUNCH.glob("*.v13.4.sm_*.ptx")) if LAUNCH.is_dir() else []
SAMPLE = {
    ("bmm_f16_32x32x32", "sm_90"),            # mma.m16n8k16 f16, ldmatrix
    ("matmul_tf32_32x32x16", "sm_90"),        # mma.m16n8k8 tf32, ldmatrix, cp.async, mbarrier
    ("matmul_bf16_f32out_32x64x32", "sm_90"),  # mma bf16 + cvt.bf16x2
    ("cumsum_carry_i32_t128", "sm_90"),       # redux.sync, shfl.sync.up
    ("histogram_f32bins_t256", "sm_90"),      # atom.global
    ("softmax_rows_f16_512", "sm_100"),       # shfl.bfly, ex2.approx.ftz, redux.max.f32
    ("where_select_f32_t128", "sm_100"),      # elect.sync
    ("layernorm_f16_128", "sm_100"),          # f32x2 arithmetic, rsqrt.approx
    ("int_ops_i32_t128", "sm_90"),            # NVIDIA's unguarded load: a fault, or a warning as on a GPU
    ("matmul_f16_f32acc_64x64x32", "sm_90"),  # wgmma m64n64k16, 64B-swizzled descriptors
    ("matmul_tf32_64x64x32", "sm_100"),       # tcgen05 with A in TMEM, warp-specialised CTA, cp.async
}
MEMCHECK = {"int_ops_i32_t128": 96, "int_ops_i64_t64": 320}   # bytes read past the end of `b` (argument 1)
LAUNCH_SAMPLE = {
    ("softmax_rows_f16_512", "sm_90"),          # no tensor maps: the same parameters as the unhinted PTX
    ("matmul_ragged_f32_16x16x16", "sm_100"),   # an mma kernel that NVIDIA's tool left without TMA
    ("matmul_f16_f16out_128x128x64", "sm_90"),  # 3 tensor maps, 128B swizzle, wgmma, TMA stores
    ("bmm_f16_32x32x32", "sm_90"),              # 3-D maps, 64B swizzle
    ("reduce1d_f32_t256", "sm_100"),            # a 1-D map on sm_100 (parameters from bank offset 0)
    ("matmul_tf32_64x64x32", "sm_100"),         # 128B swizzle of 32-byte atoms for tcgen05's tf32 operands
}
X86_64 = platform.machine().lower() in ("x86_64", "amd64")


def _case(path):
    stem = path.name[: -len(".ptx")]
    cid, _ver, gpu = stem.split(".v13.4.")[0], "13.4", stem.rsplit(".", 1)[1]
    return cid, gpu


CASES = [(p, *_case(p)) for p in FILES]


LAUNCH_CASES = [(p, *_case(p)) for p in LAUNCH_FILES]


def run_nvidia(refs, path, cid, gpu, host_object=None, memcheck="device") -> tuple:
    """NVIDIA's PTX at `path` on the corpus inputs, with the parameters of the bytecode beside it; checks the
    references and returns the run's memcheck warnings."""
    inputs, orig, grid = corpus_case(refs, cid)
    run = run_ptx(path.parent / f"{cid}.v13.4.tileirbc", path.read_text(), grid, list(inputs.values()),
                  check_races=True, host_object=host_object, memcheck=memcheck)
    problems = refs.check(cid, orig, inputs)
    assert not problems, f"NVIDIA {cid} {gpu}: " + "; ".join(problems)
    return run.report.warnings


def check_warnings(warnings: tuple, cid: str) -> None:
    """Only the int_ops kernels read past an array, and their one warning names `b`'s unguarded load."""
    if cid not in MEMCHECK:
        assert warnings == ()
        return
    (w,) = warnings
    assert f"reads up to {MEMCHECK[cid]} bytes past the end of 'argument 1'" in w, w
    assert "ld.global.b" in w and "compute-sanitizer's memcheck would report it" in w


def takes_tensor_maps(path) -> bool:
    return "cp.async.bulk.tensor" in path.read_text()


def _param(cases, sample_only, sample=SAMPLE):
    out = []
    for p, cid, gpu in cases:
        marks = [] if (cid, gpu) in sample else [pytest.mark.slow]
        if sample_only != ((cid, gpu) in sample):
            continue
        out.append(pytest.param(p, cid, gpu, id=f"{cid}-{gpu}", marks=marks))
    return out


@requires_corpus
def test_every_file_is_a_case():
    assert len(CASES) == 110
    assert {(c, g) for _p, c, g in CASES} >= SAMPLE
    assert len(LAUNCH_CASES) == 110
    assert {(c, g) for _p, c, g in LAUNCH_CASES} >= LAUNCH_SAMPLE
    # NVIDIA's tool used TMA on 21 of the 55 launch kernels with PTX, per target
    assert sum(takes_tensor_maps(p) for p, _c, _g in LAUNCH_CASES) == 42


@requires_corpus
@pytest.mark.parametrize("path,cid,gpu", _param(CASES, True) + _param(CASES, False))
def test_nvidia_ptx(refs, path, cid, gpu):
    if cid in MEMCHECK:
        with pytest.raises(MemoryFault) as ei:
            run_nvidia(refs, path, cid, gpu, memcheck="strict")
        e = ei.value
        assert "read of size" in str(e) and "after the end of allocation 'argument 1'" in str(e)
        assert e.block is not None and e.thread is not None and e.line is not None
    check_warnings(run_nvidia(refs, path, cid, gpu), cid)


@requires_corpus
@pytest.mark.parametrize("path,cid,gpu", _param(LAUNCH_CASES, True, LAUNCH_SAMPLE) +
                         _param(LAUNCH_CASES, False, LAUNCH_SAMPLE))
def test_nvidia_launch_ptx(refs, path, cid, gpu):
    """NVIDIA's launch PTX with the launch bytecode's parameters and its host object matches the references;
    without the host object, PTX that takes tensor maps is refused before anything runs."""
    host_object = str(path.with_suffix(".host.o"))
    if takes_tensor_maps(path):
        with pytest.raises(UnsupportedLaunch, match=r"takes \d tensor map\(s\).*give the host object"):
            run_nvidia(refs, path, cid, gpu)
        if not X86_64:
            pytest.skip("the host object's launch hook is x86-64 code")
    if cid in MEMCHECK:
        with pytest.raises(MemoryFault, match="after the end of allocation 'argument 1'"):
            run_nvidia(refs, path, cid, gpu, host_object, memcheck="strict")
    check_warnings(run_nvidia(refs, path, cid, gpu, host_object), cid)
