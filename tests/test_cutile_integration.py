"""The drop-in `tileiras` as a real executable: cuTile compiles through it unmodified, and its
command line behaves as NVIDIA's tool did in the recorded matrix (tests/test_invalid_corpus.py
checks the same cases in-process; here the installed console script runs as a subprocess)."""
from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import INVALID, manifest, requires_corpus
from test_invalid_corpus import READS_PAST_END, _cli_argv, _ours

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
OUR_TILEIRAS = BIN / "tileiras"
KERNEL = "collatz_steps_i32"     # an example kernel this build compiles

pytest.importorskip("cuda.tile")

# Runs in a fresh interpreter, so cuTile's cached compiler lookup starts empty.  cuTile prefers
# the tileiras of NVIDIA's pip wheel when that is installed (it is, in this environment, as a
# test oracle); hiding it is the only change: the lookup then falls through to PATH, where ours is.
DRIVER = textwrap.dedent("""
    import io, sys
    import cuda.tile._compile as cc
    cc._find_pip_tileiras = lambda: None
    sys.path.insert(0, sys.argv[1])
    from export_all import load_kernels
    from cuda.tile.compilation import export_kernel
    ex = next(e for e in load_kernels().EXAMPLES if e.name == sys.argv[2])
    export_kernel(ex.kernel, [ex.signature()], sys.argv[3], gpu_code=ex.gpu_code, output_format="cubin")
    print(cc._find_compiler_bin().path)
    print(cc._get_compiler_version_string().splitlines()[0])
""")


@pytest.fixture
def shim(tmp_path):
    """A `tileiras` first on PATH that logs its argv and execs ours (so the test sees every call)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    tool = bindir / "tileiras"
    tool.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{OUR_TILEIRAS}" "$@"\n')
    tool.chmod(0o755)
    return bindir, log


@pytest.mark.parametrize("cache", ["fresh", "off"])
def test_cutile_export_kernel_cubin_through_our_tileiras(tmp_path, shim, cache):
    bindir, log = shim
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["CUDA_TILE_TEMP_DIR"] = str(tmp_path)
    env["CUDA_TILE_CACHE_DIR"] = str(tmp_path / "cache") if cache == "fresh" else "off"
    cubin = tmp_path / "k.cubin"
    r = subprocess.run([sys.executable, "-c", DRIVER, str(REPO / "examples"), KERNEL, str(cubin)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    found, version = r.stdout.splitlines()[-2:]
    assert found == str(bindir / "tileiras")
    assert "tileiras-async" in version
    calls = log.read_text().splitlines()
    # cuTile's version probe: empty modules, newest version first, until one is accepted
    probes = [c for c in calls if "--gpu-name sm_120" in c and ".bytecode" in c and "probe" in c]
    assert probes, calls
    compiles = [c for c in calls if "--gpu-name sm_100" in c]
    assert len(compiles) == 1 and "-O3" in compiles[0] and "--lineinfo" in compiles[0]
    if cache == "fresh":  # with a cache, cuTile also asks for remarks; the drop-in accepts those options
        assert "--remarks=all" in compiles[0]
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF"
    # the bytecode cuTile handed over (it keeps the file) through the drop-in directly: the same cubin
    bytecode = compiles[0].split()[0]
    assert bytecode.endswith(".bytecode") and Path(bytecode).is_file()
    again = tmp_path / "again.cubin"
    subprocess.run([str(OUR_TILEIRAS), "--gpu-name", "sm_100", "-O3", "--lineinfo", "-o", str(again),
                    str(bytecode)], check=True, timeout=300)
    assert again.read_bytes() == data


# ---------------------------------------------------------------- the recorded CLI matrix, as a subprocess

MANIFEST = manifest(INVALID)
CLI_CASES = MANIFEST.get("cli", [])
ALL_ENTRIES = MANIFEST.get("entries", [])
# every CLI case always; a quarter of the invalid-input entries by default, all with --run-all
ENTRIES = [pytest.param(e, marks=() if i % 4 == 0 else pytest.mark.slow) for i, e in enumerate(ALL_ENTRIES)]


def _run_binary(argv, cwd):
    r = subprocess.run([str(OUR_TILEIRAS), *argv], cwd=cwd, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, request):
    """The selected cases run once, concurrently (each is mostly a process start-up)."""
    jobs = {}
    for case in CLI_CASES:
        jobs[("cli", case["name"])] = (_cli_argv(case), tmp_path_factory.mktemp("cli"))
    run_all = request.config.getoption("--run-all")
    for entry in (e for i, e in enumerate(ALL_ENTRIES) if run_all or i % 4 == 0):
        path = INVALID.parent.parent / entry["file"]
        jobs[("entry", path.name)] = (["--gpu-name", "sm_100", "-o", "x.cubin", str(path)],
                                      tmp_path_factory.mktemp("entry"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        futures = {key: pool.submit(_run_binary, argv, cwd) for key, (argv, cwd) in jobs.items()}
        return {key: (*f.result(), jobs[key][1]) for key, f in futures.items()}


@requires_corpus
@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c["name"])
def test_binary_cli_matrix(case, matrix):
    rc, out, err, cwd = matrix[("cli", case["name"])]
    assert rc == case["rc"], err
    assert "Traceback" not in err
    outputs = [p.name for p in cwd.rglob("*") if p.is_file()]
    if case["rc"] != 0:
        assert outputs == []
        expected = case["stderr"].splitlines()
        if case["name"] == "unknown_option":
            assert err.splitlines()[0] == expected[0]
        elif case["name"] == "output_dir_missing":   # NVIDIA's exits 2 silently; ours names the path and OS error
            assert expected == [] and err.splitlines() == [
                "error: cannot write no_such_dir/x.cubin: No such file or directory"]
        elif case["name"] != "no_input":  # the usage text that follows is our own
            assert err.splitlines() == [_ours(line) for line in expected]
        else:
            assert err.splitlines()[0] == expected[0]
    elif case["argv"][-1].endswith(".tileirbc"):
        assert outputs == ["x.cubin" if "-o" in case["argv"] else "elf.o"]
        assert (cwd / outputs[0]).read_bytes()[:4] == b"\x7fELF"
    elif case["name"] == "list_versions":
        assert out.splitlines() == [v for v in case["stdout"].splitlines() if v <= _ours("13.4")]


@requires_corpus
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"].rsplit("/", 1)[-1])
def test_binary_invalid_inputs(entry, matrix):
    path = INVALID.parent.parent / entry["file"]
    rc, _out, err, cwd = matrix[("entry", path.name)]
    expected = entry["tileiras"]
    assert rc == expected["rc"], err
    assert (cwd / "x.cubin").exists() == expected["output_produced"]
    if rc != 0 and path.name not in READS_PAST_END:
        assert err.splitlines() == _ours(expected["stderr"]).splitlines()
