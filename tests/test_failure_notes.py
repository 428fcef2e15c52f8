"""Failures that say why: after the error line, `note:` lines name the op and kernel, the source
location (or the op's index when the bytecode has no debug info), the reason and what to change.
One test per failure class, through the real command lines where the class can be produced.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileiras_async.bytecode.writer import write_module
from tileiras_async.driver import CodegenUnavailable
from tileiras_async.failures import lowering_notes, ptxas_notes
from tileiras_async.ir import types as T
from tileiras_async.stages import CompileOptions, LowerRequest, ParseRequest, lower, parse
from tileiras_async.tilegpu.analysis import mma as P

from test_codegen_mma import build_mma

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "axpby_f32.v13.4.tileirbc"


def mma_bytes(*args) -> bytes:
    """test_codegen_mma's mma kernel as bytecode (13.4 spells the accesses' `inbounds` flags)."""
    module = build_mma(*args)
    for op in module.functions[0].walk():
        if op.name in ("load_view_tko", "store_view_tko"):
            op.attrs.setdefault("inbounds", (False,) * len(op.operands["index"]))
    return write_module(module)


def drop_in(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "tileiras"), *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)


def test_tile_too_large_for_registers(tmp_path):
    """128x128x1024 f64 would need 16384 mma.sync per warp: exit 5, the error, then where / why / fix."""
    path = tmp_path / "huge.tileirbc"
    path.write_bytes(mma_bytes(T.F64, T.F64, T.F64, (None, 128, 128, 1024)))
    r = drop_in("--gpu-name", "sm_80", str(path), "-o", str(tmp_path / "huge.cubin"))
    assert r.returncode == 5
    lines = r.stderr.splitlines()
    assert lines[0].startswith("error: mma_k: ") and "mma.sync per warp" in lines[0]
    assert lines[1] == ("note: in op 'cuda_tile.mmaf' in kernel 'mma_k' (op #17 of the kernel; the bytecode has no "
                        "debug info: export the cuTile kernel with line information to see the source line)") \
        or lines[1].startswith("note: in op 'cuda_tile.mmaf' in kernel 'mma_k' (op #")
    assert lines[2].startswith("note: why: a tile too large for the registers of one block (")
    assert lines[3].startswith("note: to fix: use smaller tiles for this op")
    assert not (tmp_path / "huge.cubin").exists()


def test_tile_too_large_for_shared_memory(monkeypatch):
    """The mma operands' staging buffer over the shared-memory budget (lowered to 1 KiB here)."""
    monkeypatch.setattr(P, "STAGE_BUDGET", 1024)
    data = mma_bytes(T.F16, T.F16, T.F32, (None, 128, 128, 64))
    parsed = parse(ParseRequest("m.tileirbc", data))
    result = lower(LowerRequest("m.tileirbc", parsed.kernel_ir[parsed.kernels.index("mma_k")], CompileOptions("sm_80")))
    assert not result.ok
    severities = [d.severity for d in result.diagnostics]
    assert severities == ["error", "note", "note", "note"]
    assert "shared memory" in result.diagnostics[0].message
    assert result.diagnostics[1].message.startswith("in op 'cuda_tile.mmaf' in kernel 'mma_k'")
    assert result.diagnostics[2].message.startswith("why: a tile too large for shared memory (")
    assert result.diagnostics[3].message.startswith("to fix: use smaller tiles for this op")


def test_batch_prints_the_notes_after_the_error(tmp_path):
    path = tmp_path / "huge.tileirbc"
    path.write_bytes(mma_bytes(T.F64, T.F64, T.F64, (None, 128, 128, 1024)))
    r = subprocess.run([str(BIN / "tileiras-async"), "compile", str(path), "--gpu-name", "sm_80", "-j", "1",
                        "--out-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 5
    lines = [line for line in r.stderr.splitlines() if line.startswith(str(path))]
    assert "error: " in lines[0] and "mma.sync per warp" in lines[0]
    assert [line.split(": ")[3] for line in lines[1:4]] == ["note", "note", "note"]
    assert "why: a tile too large for the registers" in lines[2]


@pytest.mark.parametrize("reason,kind,fix", [
    ("conversion f32 -> f8E5M2 is not supported", "a type or mode not supported here", "convert the operands"),
    ("ftof to f16 does not support rounding mode 'nearest_away'", "a type or mode not supported here",
     "use the default rounding"),
    ("wgmma needs sm_90 or newer", "an op this target cannot run", "compile for a newer architecture"),
    ("loads through this view kind are not supported yet", "an op form this compiler does not support yet",
     "rewrite the op"),
])
def test_unsupported_type_or_op_classes(reason, kind, fix):
    error = CodegenUnavailable(f"k: {reason}", kernel="k", op_name="cuda_tile.ftof", op_index=3,
                               location="kernels.py:12:7", reason=reason)
    notes = lowering_notes(error, "sm_80")
    assert [n.severity for n in notes] == ["note"] * 3
    assert notes[0].message == "in op 'cuda_tile.ftof' in kernel 'k' at kernels.py:12:7"
    assert notes[0].location == "kernels.py:12:7"
    assert notes[1].message == f"why: {kind} ({reason})"
    assert notes[2].message.startswith("to fix: ") and fix in notes[2].message


def fake_ptxas(tmp_path: Path, message: str) -> dict:
    """A CUDA root whose ptxas rejects the line after the PTX's first `.loc` (or line 20) with `message`."""
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    script = root / "bin" / "ptxas"
    script.write_text("#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in *.ptx) ptx=\"$a\";; esac; done\n"
                      "n=$(grep -n '^[[:space:]]*\\.loc[[:space:]]*[0-9]* [1-9]' \"$ptx\" | head -1 | cut -d: -f1)\n"
                      "n=$(( ${n:-19} + 1 ))\n"
                      f"echo \"ptxas $ptx, line $n; error   : {message}\" >&2\n"
                      "echo 'ptxas fatal   : Ptx assembly aborted due to errors' >&2\nexit 255\n")
    script.chmod(0o755)
    return {**os.environ, "CUDA_ROOT": str(root)}


def test_ptxas_error_quoted_and_mapped_to_the_source(tmp_path):
    env = fake_ptxas(tmp_path, "Arguments mismatch for instruction 'mov'")
    r = drop_in("--gpu-name", "sm_90", "--lineinfo", str(EXAMPLE), "-o", str(tmp_path / "k.cubin"), env=env)
    assert r.returncode == 5
    lines = r.stderr.splitlines()
    assert "error: failed to compile Tile IR program" in lines
    notes = [line for line in lines if line.startswith("note: ")]
    assert notes[0].startswith("note: ptxas: \"Arguments mismatch for instruction 'mov'\" at line ")
    assert "in kernel 'axpby" in notes[0] and ", from kernels.py:" in notes[0]
    assert notes[-1].startswith("note: to fix: ptxas rejected PTX that tileiras-async generated")


def test_ptxas_error_without_line_information(tmp_path):
    env = fake_ptxas(tmp_path, "Entry function 'k' uses too much shared data (0x20000 bytes, 0xc000 max)")
    r = drop_in("--gpu-name", "sm_90", str(EXAMPLE), "-o", str(tmp_path / "k.cubin"), env=env)
    assert r.returncode == 5
    notes = [line for line in r.stderr.splitlines() if line.startswith("note: ")]
    assert notes[0].startswith('note: ptxas: "Entry function \'k\' uses too much shared data') \
        and "in kernel 'axpby" in notes[0] and "from" not in notes[0]
    assert notes[1] == ("note: the PTX has no line information: compile with --lineinfo to map ptxas errors to "
                        "source lines")
    assert notes[2] == "note: why: the kernel needs more shared memory than sm_90 has"
    assert notes[3].startswith("note: to fix: use smaller tiles")


def test_ptxas_notes_map_lines():
    ptx = "\n".join([".version 8.0", ".file 1 \"k.py\"", ".visible .entry kern(", ")", "{",
                     ".loc 1 5 3", "mov.u32 %r1, 1;", "}"])
    notes = ptxas_notes("ptxas /t/kernel.ptx, line 7; error   : bad\n", ptx, "sm_80")
    assert notes[0].message == "ptxas: \"bad\" at line 7 of the PTX (`mov.u32 %r1, 1;`), in kernel 'kern', from k.py:5:3"
    assert notes[0].location == "k.py:5:3"
