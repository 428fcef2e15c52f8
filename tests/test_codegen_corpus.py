"""Every corpus kernel the real tool compiles compiles with ours (ptxas accepts it, the cubin holds the
kernel); what the real tool rejects is rejected the same way."""
from __future__ import annotations

import struct

import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.bytecode.writer import write_module
from tileiras_async.cli import tileiras
from tileiras_async.driver import module_ptx
from tileiras_async.targets import target
from tileiras_async.ir.core import Module
from tileiras_async.stages import CompileOptions, compile_in_process

from conftest import corpus_files, manifest_entries, requires_corpus

EM_CUDA = 190
ENTRIES = {e["file"].rsplit("/", 1)[-1]: e for e in manifest_entries()}
NEWEST = [p for p in corpus_files("*.v13.4.tileirbc")]
DEFAULT_TARGETS = ("sm_80", "sm_100")      # the mma.sync family and the newest; the rest under --run-all
ALL_TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120")


def _real_rc(path, gpu: str) -> int | None:
    per_target = ENTRIES.get(path.name, {}).get("tileiras", {})
    return per_target.get(gpu, {}).get("rc")


def _check_cubin(cubin: bytes, symbol: str) -> None:
    assert cubin[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", cubin, 18)[0] == EM_CUDA
    assert symbol.encode() + b"\x00" in cubin  # the kernel is in the symbol table


def _compile(path, gpu: str):
    data = path.read_bytes()
    return compile_in_process(str(path), data, CompileOptions(gpu, 3))


def _expect_like_real_tool(path, gpu: str) -> None:
    result = _compile(path, gpu)
    expected = _real_rc(path, gpu)
    if expected not in (None, 0):
        assert not result.ok and result.exit_code == expected
        return
    assert result.ok, [d.message for d in result.diagnostics] + [result.tool_stderr]
    assert ".reqntid 128" in result.ptx and ".maxntid" not in result.ptx  # never both, like the real tool
    symbol = ENTRIES.get(path.name, {}).get("symbol") or read_module(path.read_bytes()).functions[0].name.decode()
    _check_cubin(result.cubin, symbol)


@requires_corpus
@pytest.mark.parametrize("gpu", DEFAULT_TARGETS)
@pytest.mark.parametrize("path", NEWEST, ids=lambda p: p.name.split(".")[0])
def test_corpus_compiles(path, gpu):
    _expect_like_real_tool(path, gpu)


@pytest.mark.slow
@requires_corpus
@pytest.mark.parametrize("gpu", [t for t in ALL_TARGETS if t not in DEFAULT_TARGETS])
@pytest.mark.parametrize("path", NEWEST, ids=lambda p: p.name.split(".")[0])
def test_corpus_compiles_other_targets(path, gpu):
    _expect_like_real_tool(path, gpu)


@requires_corpus
def test_rejected_kernel_gets_the_real_diagnostic(tmp_path, monkeypatch, capsys):
    path = next(p for p in NEWEST if p.name.startswith("int_ops_u32"))
    monkeypatch.chdir(tmp_path)
    rc = tileiras.main(["--gpu-name", "sm_100", "-o", "x.cubin", str(path)])
    err = capsys.readouterr().err
    assert rc == 3 and not (tmp_path / "x.cubin").exists()
    assert err.splitlines()[0] == ("error: 'cuda_tile.divi' op rounding mode 'negative_inf' is not allowed with "
                                   "'unsigned' flag")


@pytest.mark.parametrize("minor", [1, 2, 3, 4])
def test_empty_module_compiles_for_every_version(minor, tmp_path, monkeypatch):
    """cuTile probes versions with empty modules; each must produce a cubin."""
    src = tmp_path / "probe.bytecode"
    src.write_bytes(write_module(Module(version=(13, minor, 0))))
    monkeypatch.chdir(tmp_path)
    assert tileiras.main(["--gpu-name", "sm_120", str(src), "-o", "probe.cubin"]) == 0
    assert (tmp_path / "probe.cubin").read_bytes()[:4] == b"\x7fELF"


@requires_corpus
@pytest.mark.parametrize("flags,debug,opt", [(["--lineinfo"], "lineinfo", 3), (["-O0", "-g"], "full", 0)])
def test_line_information(flags, debug, opt, tmp_path, monkeypatch):
    path = next(p for p in NEWEST if p.name.startswith("layernorm"))
    ptx = module_ptx(read_module(path.read_bytes()), target("sm_100"), opt, debug)
    assert '.file\t1 "kernels_public.py"' in ptx
    assert ".loc\t1 " in ptx
    monkeypatch.chdir(tmp_path)
    assert tileiras.main(["--gpu-name", "sm_100", *flags, "-o", "x.cubin", str(path)]) == 0
    assert (tmp_path / "x.cubin").read_bytes()[:4] == b"\x7fELF"


def _tensor_core_mmas(module) -> int:
    """mma ops whose inputs are not f32 (f32 x f32 stays an exact FMA chain, as in the real tool)."""
    from tileiras_async.ir import types as T
    return sum(1 for fn in module.functions for op in fn.walk()
               if op.name in ("mmaf", "mmai") and op.operands["lhs"].type.elem != T.F32)


@requires_corpus
def test_matmul_ptx_uses_tensor_cores():
    checked = 0
    for path in NEWEST:
        module = read_module(path.read_bytes())
        if _tensor_core_mmas(module):
            assert "mma.sync" in module_ptx(module, target("sm_80")), path.name
            checked += 1
    assert checked >= 8
