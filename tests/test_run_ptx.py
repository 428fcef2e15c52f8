"""`tileiras-async run --engine emulate --ptx KERNEL.ptx [--host-object KERNEL.o]`: NVIDIA's PTX from the
corpus run with the module's parameter ABI reproduces the numpy references -- TMA kernels of the launch
set too, with the host object that fills their tensor maps; without it such PTX is refused with one
`error:` line and exit 4 (a launch this run cannot set up); bad files are exit 2."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest
from conftest import CORPUS, PUBLIC, corpus_case, requires_corpus

LAUNCH = CORPUS / "out" / "public-launch"
TMA_KERNEL = "matmul_f16_f16out_128x128x64"


def _run(refs, tmp_path, folder, cid, ptx, *extra, engine="emulate"):
    """`run` on the corpus inputs of `cid`; (exit code, inputs updated from OUT.npz, untouched inputs)."""
    from tileiras_async.cli import batch
    inputs, orig, grid = corpus_case(refs, cid)
    np.savez(tmp_path / "in.npz", **{str(i): np.asarray(v) for i, v in enumerate(inputs.values())})
    out = tmp_path / "out.npz"
    rc = batch.main(["run", str(folder / f"{cid}.v13.4.tileirbc"), "--grid", ",".join(map(str, grid)),
                     "--args", str(tmp_path / "in.npz"), "--out", str(out), "--engine", engine,
                     "--ptx", str(ptx), *extra])
    if rc == 0:
        with np.load(out) as z:
            for i, name in enumerate(inputs):
                if str(i) in z.files:          # OUT.npz holds the array arguments
                    inputs[name] = z[str(i)]
    return rc, inputs, orig


@requires_corpus
@pytest.mark.parametrize("cid", ["softmax_rows_f32_128", "cumsum_carry_i32_t128", "matmul_f16_f32acc_64x64x32"])
def test_nvidia_unhinted_ptx_matches_the_references(refs, tmp_path, cid):
    rc, got, orig = _run(refs, tmp_path, PUBLIC, cid, PUBLIC / f"{cid}.v13.4.sm_90.ptx")
    assert rc == 0
    assert refs.check(cid, orig, got) == []


@requires_corpus
def test_given_ptx_is_what_runs(refs, tmp_path):
    """Compared with the interpreter (engine both), NVIDIA's PTX agrees; the results are the PTX's own: a
    copy of it that scales the output differs."""
    cid = "vec_add_f32_t128"
    nv = PUBLIC / f"{cid}.v13.4.sm_90.ptx"
    rc, got, orig = _run(refs, tmp_path, PUBLIC, cid, nv, engine="both")
    assert rc == 0 and refs.check(cid, orig, got) == []
    text = nv.read_text()
    assert text.count("add.rn.f32") == 1
    changed = tmp_path / "changed.ptx"
    changed.write_text(text.replace("add.rn.f32", "sub.rn.f32"))
    rc, got, orig = _run(refs, tmp_path, PUBLIC, cid, changed)
    assert rc == 0 and refs.check(cid, orig, got) != []


@requires_corpus
def test_launch_ptx_without_tensor_maps(refs, tmp_path):
    cid = "softmax_rows_f16_512"
    rc, got, orig = _run(refs, tmp_path, LAUNCH, cid, LAUNCH / f"{cid}.v13.4.sm_90.ptx")
    assert rc == 0 and refs.check(cid, orig, got) == []


@requires_corpus
def test_tensor_map_ptx_needs_the_host_object(refs, tmp_path, capsys):
    ptx = LAUNCH / f"{TMA_KERNEL}.v13.4.sm_90.ptx"
    rc, _, _ = _run(refs, tmp_path, LAUNCH, TMA_KERNEL, ptx)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 4 and len(err) == 1 and not (tmp_path / "out.npz").exists()
    assert err[0].startswith("error: the PTX takes 3 tensor map(s) (TMA; entry parameter(s) 15, 16, 17)")
    assert err[0].endswith("give the host object (run --host-object)")


@requires_corpus
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the hook is x86-64 code")
@pytest.mark.parametrize("cid,gpu", [(TMA_KERNEL, "sm_90"), ("layernorm_f32_64", "sm_100")])
def test_tensor_map_ptx_with_its_host_object(refs, tmp_path, cid, gpu):
    """NVIDIA's TMA pipeline (tensor maps filled by the host object's hook, warp-specialised loads through
    them, TMA stores) reproduces the references."""
    ptx = LAUNCH / f"{cid}.v13.4.{gpu}.ptx"
    rc, got, orig = _run(refs, tmp_path, LAUNCH, cid, ptx, "--host-object", str(ptx.with_suffix(".host.o")))
    assert rc == 0 and refs.check(cid, orig, got) == []


@requires_corpus
def test_host_object_symbols():
    from tileiras_async.emu.host_object import read_host_object
    from tileiras_async.emu.runner import _ptx_entry
    for cid in (TMA_KERNEL, "vec_add_f32_t128"):     # a kernel without tensor maps has a hook too (a no-op)
        ptx = (LAUNCH / f"{cid}.v13.4.sm_90.ptx").read_text()
        entry = next(name for name in re.findall(r"\.entry\s+(\w+)", ptx))
        assert _ptx_entry(ptx, entry)[1].name == entry
        host = read_host_object(str(LAUNCH / f"{cid}.v13.4.sm_90.host.o"))
        assert host.hooks == {entry: "__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_0"}
    assert len(host.code[entry]) == 196         # the vec_add hook (readelf -s), no relocation inside it


@requires_corpus
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the hook is x86-64 code")
def test_a_hook_that_relocations_patch_is_not_run():
    """__CUDA_TILEIR_ON_PRE_LOAD has relocations (GOT addresses): code like it is refused, never run."""
    from tileiras_async.emu.errors import UnsupportedLaunch
    from tileiras_async.emu.host_object import _symbols, fill_tensor_maps, read_host_object
    path = LAUNCH / f"{TMA_KERNEL}.v13.4.sm_90.host.o"
    symbols, _sections, relocated = _symbols(path.read_bytes())
    shndx, value, size = symbols["__CUDA_TILEIR_ON_PRE_LOAD"]
    assert sum(value <= off < value + size for off in relocated[shndx]) == 5
    host = read_host_object(str(path))
    kernel = next(iter(host.hooks))
    patched = type(host)(host.path, host.hooks, {kernel: None})
    with pytest.raises(UnsupportedLaunch, match="needs relocations"):
        fill_tensor_maps(patched, kernel, "sm_90a", [], [])


@requires_corpus
@pytest.mark.parametrize("case,rc,message", [
    ("no-ptx", 2, "cannot read PTX"),
    ("other-kernel", 2, "no entry function 'vec_add_"),
    ("bad-host-object", 2, "is not an ELF object file"),
    ("other-host-object", 2, "has no launch hook for 'vec_add_Kt1_"),
    ("interpret", 1, "--ptx needs the emulator"),
    ("host-object-alone", 1, "--host-object goes with --ptx"),
])
def test_bad_ptx_arguments(refs, tmp_path, capsys, case, rc, message):
    from tileiras_async.cli import batch
    cid = "vec_add_f32_t128"
    ptx = PUBLIC / f"{cid}.v13.4.sm_90.ptx"
    (tmp_path / "junk.o").write_text("not an object")
    argv = {"no-ptx": ["--ptx", str(tmp_path / "missing.ptx")],
            "other-kernel": ["--ptx", str(PUBLIC / "saxpy_f32_t128.v13.4.sm_90.ptx")],
            "bad-host-object": ["--ptx", str(ptx), "--host-object", str(tmp_path / "junk.o")],
            "other-host-object": ["--ptx", str(ptx), "--host-object",
                                  str(LAUNCH / f"{TMA_KERNEL}.v13.4.sm_90.host.o")],
            "interpret": ["--ptx", str(ptx), "--engine", "interpret"],
            "host-object-alone": ["--host-object", str(tmp_path / "junk.o")]}[case]
    inputs, _, _ = corpus_case(refs, cid)
    np.savez(tmp_path / "in.npz", **{str(i): np.asarray(v) for i, v in enumerate(inputs.values())})
    got = batch.main(["run", str(PUBLIC / f"{cid}.v13.4.tileirbc"), "--grid", "8", "--args",
                      str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz"),
                      *(["--engine", "emulate"] if case != "interpret" else []), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert got == rc and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("content,message", [
    (b"\x7fELF\x01\x01" + bytes(58), "is not a 64-bit little-endian x86-64 relocatable object"),
    (b"\x7fELF\x02\x01" + bytes(10) + b"\x01\x00\x3e\x00", "is truncated or malformed"),
])
def test_host_object_that_is_not_one(tmp_path, content, message):
    from tileiras_async.emu.errors import LaunchError
    from tileiras_async.emu.host_object import read_host_object
    bad = tmp_path / "bad.o"
    bad.write_bytes(content)
    with pytest.raises(LaunchError, match=message) as ei:
        read_host_object(str(bad))
    assert ei.value.exit_code == 2
