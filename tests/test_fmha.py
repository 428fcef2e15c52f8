"""cuTile's FMHA sample (AttentionFMHA.py, as examples/suite/kernels.py `fmha`: D=64, 128x128 tiles, two blocks
per SM asked for) compiles and computes attention, with more than the 48 KiB of shared memory a kernel may declare
without opt-in.

NVIDIA's tileiras declares such a kernel's shared memory statically (one `.shared` array of the whole size) and
runs ptxas with --enable-extended-smem=true, so the cubin's `.nv.shared.<kernel>` holds more than 48 KiB; cuTile's
launcher (tile_kernel.cpp) asks for no dynamic shared memory when the compile gives it no dynamic size, so such a
cubin launches with its static size alone.  We do the same up to the target's per-CTA limit
(targets.shared_memory_limit), and these tests hold the cubins to NVIDIA's.

Default run: the causal variant through the drop-in on the four targets, both variants against numpy on the
interpreter and the emulator at sm_80 and sm_90 (and the causal one at sm_120, where its shared memory only fits
once scratch buffers share bytes), the shared-memory metadata against NVIDIA's at sm_80.  --run-all: the rest.
"""
from __future__ import annotations

import contextlib
import io
import os
import struct
import subprocess

import pytest

from tileiras_async import run_kernel
from tileiras_async.targets import shared_memory_limit, target
from tileiras_async.toolchain import cubin as C
from tileiras_async.toolchain.ptxas import PtxasError, PtxasOptions, assemble

from test_suite import SUITE, oracle_tool, refs

TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120")
CASES = ("fmha_f16", "fmha_causal_f16")
STATIC_LIMIT = 48 * 1024
_SHT_NOBITS = 8
# what the driver reads from `.nv.info.<kernel>` to launch it (block shape, registers, parameters, barriers)
EIATTR_EXTERNS, EIATTR_CBANK_PARAM_SIZE, EIATTR_CUDA_API_VERSION = 0x0F, 0x19, 0x37
LAUNCH_ATTRIBUTES = (C.EIATTR_MAX_THREADS, C.EIATTR_REQNTID, C.EIATTR_MAXREG_COUNT, C.EIATTR_NUM_BARRIERS,
                     EIATTR_EXTERNS, EIATTR_CBANK_PARAM_SIZE, EIATTR_CUDA_API_VERSION)


def _file(case: str) -> str:
    return f"{case}.v13.4.tileirbc"


def _default(*params, when: bool):
    return pytest.param(*params) if when else pytest.param(*params, marks=pytest.mark.slow)


_CUBINS: dict[tuple[str, str], bytes] = {}


def our_cubin(case: str, gpu: str, tmp_dir) -> bytes:
    """The cubin our drop-in writes for the case (compiled once per session)."""
    if (case, gpu) not in _CUBINS:
        from tileiras_async.cli.tileiras import main
        out = tmp_dir / f"{case}.{gpu}.cubin"
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["--gpu-name", gpu, str(SUITE / _file(case)), "-o", str(out), "--no-cache"])
        assert rc == 0, err.getvalue()
        _CUBINS[case, gpu] = out.read_bytes()
    return _CUBINS[case, gpu]


@pytest.fixture(scope="module")
def cubin_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fmha")


# ----------------------------------------------------------------------------- it compiles
# (sm_90 compiles in the default run too: the emulator's runs assemble what they emulate)
@pytest.mark.parametrize("case,gpu", [_default(c, g, when=c == "fmha_causal_f16" and g != "sm_90")
                                      for c in CASES for g in TARGETS])
def test_fmha_compiles_with_the_dropin(case, gpu, cubin_dir):
    data = our_cubin(case, gpu, cubin_dir)
    assert C.cubin_arch(data) == int(gpu[3:])
    [(name, code)] = C.kernel_code(data).items()
    assert name.startswith("fmha_") and code.instructions > 0
    assert 0 < code.shared_bytes <= shared_memory_limit(gpu)


def test_the_causal_kernel_needs_more_than_the_static_limit_on_sm80(cubin_dir):
    """What the rejection used to be about: the same kernel, more than 48 KiB, accepted."""
    [code] = C.kernel_code(our_cubin("fmha_causal_f16", "sm_80", cubin_dir)).values()
    assert code.shared_bytes > STATIC_LIMIT


def _allocated_bytes(gpu: str, monkeypatch=None) -> int:
    """The shared memory allocate-shared-memory laid out for the causal kernel: the end of its last buffer or
    scratch, as the offsets it wrote say (no limit with `monkeypatch`)."""
    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
    from tileiras_async.tilegpu.options import CodegenOptions
    from tileiras_async.tilegpu.passes import allocate_smem, run_pipeline
    if monkeypatch is not None:
        monkeypatch.setattr(allocate_smem, "shared_memory_limit", lambda gpu: 1 << 30)
    module = read_module((SUITE / _file("fmha_causal_f16")).read_bytes())
    k = KernelIR(module, clone_function(module.functions[0]), CodegenOptions(target=gpu))
    run_pipeline(k, until="allocate-shared-memory")
    ends = [0]
    for op in walk_ops(k.fn.body):
        if op.name == "tilegpu.local_alloc" and "offset" in op.attrs:
            ends.append(op.attrs["offset"] + op.result.type.nbytes)
        if "scratch_offset" in op.attrs:
            ends.append(op.attrs["scratch_offset"] + op.attrs["scratch_bytes"])
    return max(ends)


def test_scratch_shares_bytes_only_where_keeping_it_apart_does_not_fit(monkeypatch):
    """On sm_120 the causal kernel's two K/V loops keep each scratch buffer apart from the next one's (which
    saves barriers) only within more than the 99 KiB a CTA may have; allocate-shared-memory then lets scratch
    live just during its op."""
    fitted = _allocated_bytes("sm_120")
    assert STATIC_LIMIT < fitted <= shared_memory_limit("sm_120")
    assert _allocated_bytes("sm_120", monkeypatch) > shared_memory_limit("sm_120")


# ----------------------------------------------------------------------------- it computes attention
def _run(case: str, engine: str, gpu: str) -> None:
    inputs, pristine = refs.make_inputs(case), refs.make_inputs(case)
    args = list(inputs.values())
    run_kernel((SUITE / _file(case)).read_bytes(), refs.grid(case, inputs), args, engine=engine, gpu_name=gpu)
    problems = refs.check(case, pristine, dict(zip(inputs, args)))
    assert not problems, problems


# default: the interpreter at sm_80 and sm_90; the emulator on one variant each at sm_80 and sm_90, and on the
# causal one at sm_120, whose scratch buffers share bytes to fit (insert-barriers orders them; the emulator's
# race check would see a missing barrier)
_EMULATED = {("fmha_f16", "sm_80"), ("fmha_causal_f16", "sm_90"), ("fmha_causal_f16", "sm_120")}


@pytest.mark.parametrize("case,engine,gpu", [
    _default(c, e, g, when=(g in ("sm_80", "sm_90")) if e == "interpret" else (c, g) in _EMULATED)
    for c in CASES for e in ("interpret", "emulate") for g in TARGETS])
def test_fmha_matches_numpy(case, engine, gpu):
    _run(case, engine, gpu)


def test_the_reference_catches_a_masking_mistake():
    """The causal check fails attention computed without the mask (the non-causal reference of the same inputs)."""
    inputs = refs.make_inputs("fmha_causal_f16")
    assert refs.check("fmha_causal_f16", inputs, {**inputs, **refs.reference("fmha_causal_f16", inputs)}) == []
    unmasked = refs.reference("fmha_f16", inputs)
    assert refs.check("fmha_causal_f16", inputs, {**inputs, **unmasked})


# ----------------------------------------------------------------------------- launches like NVIDIA's
def _nvidia_cubin(case: str, gpu: str, tmp_dir) -> bytes:
    tool = oracle_tool.real_tileiras()
    if tool is None:
        pytest.skip("NVIDIA's tileiras (nvidia-cuda-tileiras) is not installed")
    out = tmp_dir / f"nvidia.{case}.{gpu}.cubin"
    r = subprocess.run([str(tool), "--gpu-name", gpu, str(SUITE / _file(case)), "-o", str(out)],
                       env=dict(os.environ, CUDA_HOME=str(tool.parent.parent)), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


def shared_memory(data: bytes) -> dict:
    """How the cubin's one kernel gets its shared memory: its `.nv.shared.*` sections (type, size) and the
    attributes the driver launches it by."""
    secs = C.sections(data)
    shared = {s.name.split(".fmha_")[0]: (s.type, s.size) for s in secs if s.name.startswith(".nv.shared.")}
    [info] = [s for s in secs if s.name.startswith(".nv.info.")]
    attrs = {}
    for attr, payload in C.nv_info(data, info):
        if attr in LAUNCH_ATTRIBUTES:
            attrs[attr] = payload
    return {"shared": shared, "attributes": attrs}


@pytest.mark.parametrize("case,gpu", [_default(c, g, when=(c, g) == ("fmha_causal_f16", "sm_80"))
                                      for c in CASES for g in TARGETS])
def test_shared_memory_is_declared_as_nvidia_declares_it(case, gpu, cubin_dir):
    ours, theirs = shared_memory(our_cubin(case, gpu, cubin_dir)), shared_memory(_nvidia_cubin(case, gpu, cubin_dir))
    # static: the kernel's own NOBITS section holds the whole size (a dynamic declaration would leave it empty),
    # within what the target grants one CTA; the driver's reserve (sm_90 on) is the same section
    reserve = C.SMEM_RESERVED_SM90 if int(gpu[3:]) >= 90 else 0
    for found in (ours, theirs):
        kind, size = found["shared"][".nv.shared"]
        assert kind == _SHT_NOBITS and 0 < size - reserve <= shared_memory_limit(gpu)
    assert {k: v for k, v in ours["shared"].items() if k != ".nv.shared"} == \
        {k: v for k, v in theirs["shared"].items() if k != ".nv.shared"}
    # above 48 KiB where ours is (NVIDIA's is on every target), so the opt-in path is the one compared
    if ours["shared"][".nv.shared"][1] - reserve > STATIC_LIMIT:
        assert theirs["shared"][".nv.shared"][1] - reserve > STATIC_LIMIT
    if gpu == "sm_100":   # NVIDIA's sm_100 kernel is warp-specialised (256 threads, 128 registers): ours is not
        return
    if gpu == "sm_90":
        # choose-warps runs S and O on two warpgroups (256 threads, as NVIDIA's launch export of this kernel,
        # warp-specialised); this unhinted export NVIDIA keeps at 128 threads, spilling
        assert _threads(ours) == 256 and _threads(theirs) == 128
        ours["attributes"].pop(C.EIATTR_REQNTID), theirs["attributes"].pop(C.EIATTR_REQNTID)
    assert ours["attributes"] == theirs["attributes"]


def _threads(found: dict) -> int:
    x, y, z = struct.unpack("<3I", found["attributes"][C.EIATTR_REQNTID])
    return x * y * z


# ----------------------------------------------------------------------------- the per-target limit is ptxas's
def _shared_ptx(arch: str, nbytes: int) -> str:
    return (f".version 8.7\n.target {arch}\n.address_size 64\n"
            f".visible .entry k(.param .u64 p)\n{{\n .shared .align 16 .b8 buf[{nbytes}];\n"
            " .reg .b64 %rd<2>; .reg .b32 %r<3>;\n ld.param.u64 %rd1, [p];\n mov.u32 %r1, buf;\n"
            f" ld.shared.u32 %r2, [%r1+{nbytes - 4}];\n st.global.u32 [%rd1], %r2;\n ret;\n}}\n")


@pytest.mark.parametrize("gpu", ["sm_80", "sm_86", "sm_90", "sm_120"])
def test_shared_memory_limit_is_what_ptxas_enforces(gpu):
    arch = target(gpu).ptx_target
    limit = shared_memory_limit(gpu)
    cubin = assemble(_shared_ptx(arch, limit), PtxasOptions(arch))
    [code] = C.kernel_code(cubin).values()
    assert code.shared_bytes == limit
    with pytest.raises(PtxasError) as e:
        assemble(_shared_ptx(arch, limit + 16), PtxasOptions(arch))
    assert f"{limit:#x} max" in e.value.stderr
    # without the flag the real tool passes, 48 KiB is the end on sm_8x (ptxas for sm_90a and later lets a
    # kernel declare more either way)
    beyond_48k = _shared_ptx(arch, STATIC_LIMIT + 16)
    if target(gpu).sm < 90:
        with pytest.raises(PtxasError) as e:
            assemble(beyond_48k, PtxasOptions(arch, extended_smem=False))
        assert "0xc000 max" in e.value.stderr
    else:
        assert assemble(beyond_48k, PtxasOptions(arch, extended_smem=False))


def test_extended_shared_memory_changes_nothing_within_48k():
    ptx = _shared_ptx("sm_80", 1024)
    assert assemble(ptx, PtxasOptions("sm_80")) == assemble(ptx, PtxasOptions("sm_80", extended_smem=False))
