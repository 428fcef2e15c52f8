"""The emulator's memory-check modes (emu/memory.py): `strict` faults on any access outside an allocation;
`device` serves a read just past an allocation's end (the rest of its 2 MiB page) with 0xff bytes and one
warning per kernel and allocation, as a GPU without a sanitizer would run it; writes outside an allocation
and reads further away fault in both.  `run --memcheck` selects the mode."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import LAUNCH, PUBLIC, corpus_case, requires_corpus
from test_emu_machine import OOB, PRO, kernel, run

from tileiras_async.emu import DeviceMemory, LaunchError, MemoryFault
from tileiras_async.emu.memory import DEVICE_PAGE, mapped_tail

PARAMS = ".param .u64 out, .param .u64 inp"

# thread gid reads inp[gid + skew] (u32 elements, `skew` a .u64 parameter) and stores it to out[gid]
SKEWED = PRO + """
    ld.param.u64 %rd5, [inp];
    ld.param.u64 %rd8, [skew];
    cvt.u64.u32 %rd9, %r4;
    add.s64 %rd9, %rd9, %rd8;
    shl.b64 %rd6, %rd9, 2;
    add.s64 %rd7, %rd5, %rd6;
    ld.global.u32 %r5, [%rd7];
    st.global.u32 [%rd3], %r5;
    ret;
"""

# the same addresses written: thread gid stores gid to inp[gid + skew]
SKEWED_STORE = SKEWED.replace("ld.global.u32 %r5, [%rd7];\n    st.global.u32 [%rd3], %r5;",
                              "st.global.u32 [%rd7], %r4;")


def _oob(mode: str, n: int = 100, threads: int = 128):
    """OOB (thread gid reads inp[gid]) over `threads` threads with `n` input elements; (report, out values)."""
    mem = DeviceMemory()
    out = mem.alloc(4 * threads, "out")
    inp = mem.alloc_array(np.arange(n, dtype=np.uint32), "inp")
    rep, _ = run(kernel(OOB, params=PARAMS, name="oob_kernel"), (threads // 64, 1, 1), (64, 1, 1), [out, inp],
                 mem, memcheck=mode)
    return rep, mem.read_array(out, np.uint32, threads)


def _skewed(mode: str, skew: int, n: int = 100, body: str = SKEWED):
    mem = DeviceMemory()
    out = mem.alloc(4 * 32, "out")
    inp = mem.alloc_array(np.arange(n, dtype=np.uint32), "inp")
    ptx = kernel(body, params=PARAMS + ", .param .u64 skew")
    return run(ptx, (1, 1, 1), (32, 1, 1), [out, inp, skew], mem, memcheck=mode)


def test_strict_faults_where_device_reads_unspecified_bytes():
    with pytest.raises(MemoryFault, match="0 bytes after the end of allocation 'inp'"):
        _oob("strict")
    rep, got = _oob("device")
    assert got[:100].tolist() == list(range(100))
    assert got[100:].tolist() == [0xFFFFFFFF] * 28       # used, so a reference check would catch it
    (warning,) = rep.warnings                             # once, though two CTAs' 28 lanes read past the end
    assert "oob_kernel" in warning and "'inp'" in warning and "112 bytes past the end" in warning
    assert "(400 bytes)" in warning and "ld.global.u32" in warning and "compute-sanitizer" in warning


def test_in_bounds_runs_warn_nothing_and_the_output_is_deterministic():
    assert _oob("device", n=128)[0].warnings == ()
    first, again = _oob("device"), _oob("device")
    assert first[0].warnings == again[0].warnings and (first[1] == again[1]).all()


def test_the_mapped_tail_is_the_rest_of_the_2_mib_page():
    assert DEVICE_PAGE == 2 << 20
    mem = DeviceMemory()
    small, whole = mem.alloc(400), mem.alloc(DEVICE_PAGE)
    assert mapped_tail(mem.find(small)) == DEVICE_PAGE - 400 and mapped_tail(mem.find(whole)) == 0
    last = DEVICE_PAGE // 4 - 32            # inp[skew + 31] is the page's last word
    rep, mem = _skewed("device", last)
    assert "past the end of 'inp'" in rep.warnings[0] and f"{DEVICE_PAGE - 400} bytes past" in rep.warnings[0]
    with pytest.raises(MemoryFault, match="after the end of allocation 'inp'"):
        _skewed("device", last + 1)         # one word into the next page
    with pytest.raises(MemoryFault, match="4 bytes before allocation 'inp'"):
        _skewed("device", -1)               # before the allocation's base


def test_an_allocation_that_fills_its_pages_has_no_tail():
    with pytest.raises(MemoryFault, match="after the end of allocation 'inp'"):
        _skewed("device", DEVICE_PAGE // 4 - 31, n=DEVICE_PAGE // 4)


def test_writes_and_strided_gaps_still_fault_in_device_mode():
    assert "st.global.u32 [%rd7]" in SKEWED_STORE and "ld.global" not in SKEWED_STORE
    _skewed("device", 100 - 32, body=SKEWED_STORE)           # the array's last 32 words: in bounds
    with pytest.raises(MemoryFault, match="write of size 4 .* 0 bytes after the end of allocation 'inp'"):
        _skewed("device", 100 - 31, body=SKEWED_STORE)       # where a read would be served
    mem = DeviceMemory()
    inp = mem.alloc_array(np.arange(20, dtype=np.uint32)[::2], "strided")
    out = mem.alloc(4 * 32)
    with pytest.raises(MemoryFault, match="between the elements"):
        run(kernel(OOB, params=PARAMS), (1, 1, 1), (32, 1, 1), [out, inp], mem, memcheck="device")


def test_an_unknown_mode_is_refused():
    with pytest.raises(LaunchError, match="unknown memory-check mode 'lenient'"):
        _oob("lenient")


CID = "int_ops_i32_t128"       # NVIDIA's PTX loads `b` (argument 1) with no bounds check


def _run_cli(refs, tmp_path, *extra, folder=PUBLIC):
    from tileiras_async.cli import batch
    inputs, orig, grid = corpus_case(refs, CID)
    np.savez(tmp_path / "in.npz", **{str(i): np.asarray(v) for i, v in enumerate(inputs.values())})
    out = tmp_path / "out.npz"
    rc = batch.main(["run", str(folder / f"{CID}.v13.4.tileirbc"), "--grid", ",".join(map(str, grid)),
                     "--args", str(tmp_path / "in.npz"), "--out", str(out), *extra])
    if rc == 0:
        with np.load(out) as z:
            inputs = {name: z[str(i)] for i, name in enumerate(inputs)}
    return rc, inputs, orig


@requires_corpus
@pytest.mark.parametrize("folder", [PUBLIC, LAUNCH], ids=["unhinted", "launch"])
def test_run_memcheck_modes_on_nvidia_ptx(refs, tmp_path, capsys, folder):
    """Issue 29's command: `run --ptx NVIDIA.ptx --host-object NVIDIA.o --engine emulate` (the launch set's host
    object beside the PTX) computes the references with `--memcheck device` and faults under the default."""
    nv = folder / f"{CID}.v13.4.sm_90.ptx"
    host = nv.with_suffix(".host.o")
    ptx = ["--engine", "emulate", "--ptx", str(nv), *(["--host-object", str(host)] if host.is_file() else [])]
    assert host.is_file() == (folder == LAUNCH)
    rc, _got, _orig = _run_cli(refs, tmp_path, *ptx, folder=folder)
    err = capsys.readouterr().err
    assert rc == 6 and err.startswith("error: Invalid __global__ read") and "'argument 1'" in err
    rc, got, orig = _run_cli(refs, tmp_path, *ptx, "--memcheck", "device", folder=folder)
    err = capsys.readouterr().err.splitlines()
    assert rc == 0 and refs.check(CID, orig, got) == []
    assert len(err) == 1 and err[0].startswith("warning: kernel int_ops_")
    assert "96 bytes past the end of 'argument 1' (4000 bytes)" in err[0] and "compute-sanitizer" in err[0]


@requires_corpus
def test_run_memcheck_needs_the_emulator(refs, tmp_path, capsys):
    rc, _got, _orig = _run_cli(refs, tmp_path, "--memcheck", "device")
    assert rc == 1 and capsys.readouterr().err == "error: --memcheck needs the emulator: --engine emulate or both\n"


def test_a_vector_read_straddling_the_end_keeps_the_bytes_before_it():
    body = PRO + """
    ld.param.u64 %rd5, [inp];
    mul.wide.u32 %rd6, %r4, 16;
    add.s64 %rd7, %rd5, %rd6;
    ld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd7];
    mul.wide.u32 %rd8, %r4, 16;
    add.s64 %rd9, %rd1, %rd8;
    st.global.v4.u32 [%rd9], {%r5, %r6, %r7, %r8};
    ret;
"""
    mem = DeviceMemory()
    out = mem.alloc(16 * 32, "out")
    inp = mem.alloc_array(np.arange(102, dtype=np.uint32), "inp")     # words 100, 101 share the last vector
    rep, _ = run(kernel(body, params=PARAMS), (1, 1, 1), (26, 1, 1), [out, inp], mem, memcheck="device")
    got = mem.read_array(out, np.uint32, 4 * 26)
    assert got[:102].tolist() == list(range(102)) and got[102:].tolist() == [0xFFFFFFFF] * 2
    assert "reads up to 8 bytes past the end of 'inp' (408 bytes)" in rep.warnings[0]
