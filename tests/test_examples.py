"""The bundled examples (examples/*.tileirbc): read, re-write, print, and re-export.

* every file reads with our bytecode reader and writes back byte-identically;
* our printer's text equals the real `tileirdisasm` stdout (when both are available);
* the files are exactly what examples/export_all.py produces with the real cuTile frontend
  (determinism, and a guard against kernels.py edits without a re-export).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.bytecode.writer import write_module

REPO = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO / "examples"
EXAMPLE_FILES = sorted(EXAMPLES_DIR.glob("*.tileirbc"))
IDS = [p.name for p in EXAMPLE_FILES]


def _load_export_all():
    name = "tileiras_async_examples_export_all"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES_DIR / "export_all.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def real_disasm() -> tuple[Path, dict[str, str]]:
    """(tileirdisasm path, environment to run it with), or skip when the tool is absent."""
    from tileiras_async.toolchain.discovery import find_tool
    from tileiras_async.toolchain.errors import ToolNotFound

    try:
        tool = find_tool("tileirdisasm")
    except ToolNotFound as exc:
        pytest.skip(f"real tileirdisasm not found: {exc}")
    env = dict(os.environ)
    env["CUDA_HOME"] = str(tool.parent.parent)
    return tool, env


def test_examples_present():
    assert len(EXAMPLE_FILES) >= 6 * 4, "run `make examples`"


def test_example_files_match_export_list():
    """One file per (example, version), no strays: the set export_all.py writes."""
    ea = _load_export_all()
    expected = {ea.out_path(EXAMPLES_DIR, ex.name, v).name
                for ex in ea.load_kernels().EXAMPLES for v in ea.VERSIONS}
    assert set(IDS) == expected


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=IDS)
def test_read_write_roundtrip(path: Path):
    data = path.read_bytes()
    module = read_module(data)
    assert write_module(module) == data


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=IDS)
def test_printer_matches_tileirdisasm(path: Path, real_disasm):
    printer = pytest.importorskip("tileiras_async.ir.printer")
    tool, env = real_disasm
    real = subprocess.run([str(tool), str(path)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert real.returncode == 0, real.stderr
    ours = printer.print_module(read_module(path.read_bytes()))
    assert ours == real.stdout


@pytest.mark.parametrize("name, version", [("collatz_steps_i32", "13.1"),
                                           ("online_softmax_f16", "13.4")])
def test_reexport_is_identical(tmp_path: Path, name: str, version: str):
    """Re-exporting with cuda-tile gives the committed bytes (export is deterministic and
    independent of where the checkout lives)."""
    ea = _load_export_all()
    rc = ea.main(["--out", str(tmp_path), "--only", name, "--versions", version])
    assert rc == 0
    fresh = ea.out_path(tmp_path, name, version).read_bytes()
    committed = ea.out_path(EXAMPLES_DIR, name, version).read_bytes()
    assert fresh == committed


def test_examples_carry_no_machine_paths():
    """Debug info names files relative to the checkout, never this machine's venv or directories."""
    for path in sorted(EXAMPLES_DIR.glob("*.tileirbc")):
        data = path.read_bytes()
        assert b"site-packages" not in data and str(EXAMPLES_DIR).encode() not in data, path.name
