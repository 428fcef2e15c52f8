"""The drop-in with the compile cache: hits replay exactly what a compile prints, returns and writes;
deterministic failures are cached and transient ones are not; a corrupt entry is recompiled; the hit
path and --help import none of the compiler."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileiras_async.cache.store import CacheStore
from tileiras_async.cli import tileiras

from conftest import INVALID, PUBLIC, requires_corpus

SAXPY = PUBLIC / "saxpy_f32_t128.v13.4.tileirbc"
MATMUL = PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc"


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    """The cache on, in a fresh directory; returns its store."""
    monkeypatch.delenv("TILEIRAS_ASYNC_NO_CACHE", raising=False)
    monkeypatch.setenv("TILEIRAS_ASYNC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return CacheStore(str(tmp_path / "cache"))


def _run(argv, capsys):
    rc = tileiras.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _outcome(argv, capsys, files):
    """(rc, stdout, stderr, {file: bytes or None}) of one drop-in call."""
    rc, out, err = _run(argv, capsys)
    return rc, out, err, {f: Path(f).read_bytes() if Path(f).exists() else None for f in files}


def test_gpu_names_match_the_code_generator():
    from tileiras_async.targets import GPU_NAMES
    assert tileiras.GPU_NAMES == GPU_NAMES


@requires_corpus
@pytest.mark.parametrize("flags, files", [
    ([], ["out.cubin"]),
    (["--lineinfo", "-O2"], ["out.cubin"]),
    (["--remarks=all"], ["out.cubin"]),                                            # remarks on stderr
    (["--remarks=all", "--remarks-output-file=r.yaml"], ["out.cubin", "r.yaml"]),
    (["--schedule-trace-file", "t.json"], ["out.cubin", "t.json"]),
], ids=["plain", "lineinfo-O2", "remarks-stderr", "remarks-file", "schedule-trace"])
def test_a_hit_replays_the_compile(cache_on, capsys, flags, files):
    src = MATMUL if "--schedule-trace-file" in flags or "--remarks=all" in flags else SAXPY
    argv = ["--gpu-name", "sm_90", *flags, "-o", "out.cubin", str(src)]
    miss = _outcome(argv, capsys, files)
    assert miss[0] == 0 and miss[3]["out.cubin"][:4] == b"\x7fELF"
    for f in files:
        os.unlink(f)
    hit = _outcome(argv, capsys, files)
    assert hit == miss
    s = cache_on.stats()
    assert (s["misses"], s["hits"], s["stores"], s["entries"]) == (1, 1, 1, 1)
    # and both are what the compiler gives without the cache
    for f in files:
        os.unlink(f)
    assert _outcome(["--no-cache", *argv], capsys, files) == miss


@requires_corpus
def test_the_key_has_every_output_affecting_option_and_no_output_path(cache_on, capsys):
    base = ["--gpu-name", "sm_90", str(SAXPY)]
    assert _run(base + ["-o", "a.cubin"], capsys)[0] == 0
    assert _run(base + ["-o", "b.cubin"], capsys)[0] == 0            # another output path: a hit
    assert Path("a.cubin").read_bytes() == Path("b.cubin").read_bytes()
    assert cache_on.stats()["hits"] == 1
    for variant in (["-O2"], ["--lineinfo"], ["--gpu-name", "sm_100"], ["--remarks=memory"],
                    ["--remarks=memory", "--remark-format=yaml"], ["--host-os=windows"], ["--num-stages", "2"]):
        assert _run(base + variant + ["-o", "c.cubin"], capsys)[0] == 0
    s = cache_on.stats()
    assert (s["hits"], s["entries"]) == (1, 8)
    # an option added to the table is in the key without further code
    assert set(tileiras.NOT_IN_KEY) <= set(tileiras.PARSER.options)
    parsed = tileiras.PARSER.parse(["--gpu-name", "sm_90", "--host-arch=aarch64", "-o", "x", "--cache-dir=d", "f"])
    assert tileiras.compile_options("f", parsed) == {"gpu-name": "sm_90", "host-arch": "aarch64"}


@requires_corpus
@pytest.mark.parametrize("name", ["gen_magic_bad_byte1.tileirbc", "gen_version_13_9.tileirbc",
                                  "gen_truncated_at_200.tileirbc"])
def test_deterministic_failures_are_cached(cache_on, capsys, name):
    path = INVALID / name
    if not path.exists():
        pytest.skip(f"{name} not in the corpus")
    argv = ["--gpu-name", "sm_100", "-o", "x.cubin", str(path)]
    first = _outcome(argv, capsys, ["x.cubin"])
    second = _outcome(argv, capsys, ["x.cubin"])
    assert first == second and first[0] == 3 and first[3]["x.cubin"] is None
    assert cache_on.stats()["hits"] == 1


@requires_corpus
def test_missing_gpu_name_is_cached_with_its_message(cache_on, capsys):
    argv = ["-o", "x.cubin", str(SAXPY)]
    first = _outcome(argv, capsys, ["x.cubin"])
    assert first[0] == 2 and "bytecode in file is version 13.4" in first[2]
    assert _outcome(argv, capsys, ["x.cubin"]) == first and cache_on.stats()["hits"] == 1


def _fake_cuda(root: Path, script: str) -> Path:
    """A CUDA root whose ptxas runs `script` (libdevice copied from the real one when there is one)."""
    from tileiras_async.toolchain import find_libdevice
    (root / "bin").mkdir(parents=True)
    ptxas = root / "bin" / "ptxas"
    ptxas.write_text("#!/bin/sh\n" + script)
    ptxas.chmod(0o755)
    lib = root / "nvvm" / "libdevice"
    lib.mkdir(parents=True)
    (lib / "libdevice.10.bc").write_bytes(find_libdevice().read_bytes())
    return root


@requires_corpus
def test_ptxas_rejections_are_cached_but_crashes_are_not(cache_on, capsys, monkeypatch, tmp_path):
    argv = ["--gpu-name", "sm_90", "-o", "x.cubin", str(SAXPY)]
    rejecting = _fake_cuda(tmp_path / "rejecting", "echo 'ptxas fatal   : Unresolved extern function' >&2\nexit 1\n")
    monkeypatch.setenv("CUDA_ROOT", str(rejecting))
    from tileiras_async.toolchain import default_toolchain
    default_toolchain.cache_clear()
    try:
        first = _outcome(argv, capsys, ["x.cubin"])
        assert first[0] == 5 and "Unresolved extern function" in first[2] and first[3]["x.cubin"] is None
        assert _outcome(argv, capsys, ["x.cubin"]) == first
        assert cache_on.stats()["hits"] == 1
        crashing = _fake_cuda(tmp_path / "crashing", "kill -9 $$\n")
        monkeypatch.setenv("CUDA_ROOT", str(crashing))
        default_toolchain.cache_clear()
        assert _run(argv, capsys)[0] == 5
        assert _run(argv, capsys)[0] == 5
        s = cache_on.stats()
        assert (s["hits"], s["stores"]) == (1, 1)   # the killed ptxas was never cached
    finally:
        monkeypatch.delenv("CUDA_ROOT")
        default_toolchain.cache_clear()
    assert _run(argv, capsys)[0] == 0  # the real ptxas: another fingerprint, a fresh compile


@requires_corpus
def test_ir_snapshots_compile_here_uncached(cache_on, capsys):
    argv = ["--gpu-name", "sm_90", "--print-ir-after-all", "-o", "x.cubin", str(MATMUL)]
    first = _outcome(argv, capsys, ["x.cubin"])
    assert first[0] == 0 and "// -----// IR Dump After" in first[2]
    assert _outcome(argv, capsys, ["x.cubin"]) == first
    assert cache_on.stats()["entries"] == 0
    rc, _, err = _run(["--gpu-name", "sm_90", "--print-ir-after=nope", "-o", "y.cubin", str(MATMUL)], capsys)
    assert rc == 2 and err.startswith("error: unknown pass 'nope'") and not Path("y.cubin").exists()


@requires_corpus
def test_a_corrupt_entry_is_recompiled(cache_on, capsys):
    argv = ["--gpu-name", "sm_90", "-o", "x.cubin", str(SAXPY)]
    assert _run(argv, capsys)[0] == 0
    good = Path("x.cubin").read_bytes()
    [entry] = [p for p in (Path(cache_on.entries_dir)).rglob("*") if p.is_file()]
    blob = bytearray(entry.read_bytes())
    blob[len(blob) // 2] ^= 0x55
    entry.write_bytes(bytes(blob))
    os.unlink("x.cubin")
    assert _run(argv, capsys) == (0, "", "")
    assert Path("x.cubin").read_bytes() == good
    s = cache_on.stats()
    assert (s["corrupt"], s["stores"]) == (1, 2)
    assert _run(argv, capsys)[0] == 0 and cache_on.stats()["hits"] == 1


@requires_corpus
def test_cache_off_by_option_or_environment(cache_on, capsys, monkeypatch):
    argv = ["--gpu-name", "sm_90", "-o", "x.cubin", str(SAXPY)]
    assert _run(["--no-cache", *argv], capsys)[0] == 0
    monkeypatch.setenv("TILEIRAS_ASYNC_NO_CACHE", "1")
    assert _run(argv, capsys)[0] == 0
    assert cache_on.stats()["entries"] == 0
    monkeypatch.delenv("TILEIRAS_ASYNC_NO_CACHE")
    assert _run(["--cache-dir", "elsewhere", *argv], capsys)[0] == 0
    assert CacheStore("elsewhere").stats()["entries"] == 1 and cache_on.stats()["entries"] == 0


@requires_corpus
def test_unwritable_output_after_a_hit(cache_on, capsys):
    argv = ["--gpu-name", "sm_90", str(SAXPY)]
    assert _run(argv + ["-o", "x.cubin"], capsys)[0] == 0
    assert _run(argv + ["-o", "no/such/dir/x.cubin"], capsys) == \
        (2, "", "error: cannot write no/such/dir/x.cubin: No such file or directory\n")
    rc, _, err = _run(argv + ["-o", "y.cubin", "--schedule-trace-file", "no/such/t.json"], capsys)
    assert rc == 2 and err.startswith("error: cannot write schedule trace 'no/such/t.json': ")
    assert "error: error:" not in err and not Path("y.cubin").exists()


# ---------------------------------------------------------------------------- what a hit imports

_PROBE = r"""
import sys, json
before = set(sys.modules)
from tileiras_async.cli import tileiras
rc = tileiras.main(sys.argv[1:])
print(json.dumps({"rc": rc, "new": sorted(set(sys.modules) - before)}), file=sys.stderr)
"""

# all the drop-in may load for a hit or --help, beyond what Python has loaded at start-up: its own lean
# modules and a few small standard ones (`from __future__ import annotations` loads __future__; typing, re and
# pathlib must stay out: they cost as much as the rest of a hit)
_LEAN = {"__future__", "tileiras_async", "tileiras_async.cli", "tileiras_async.cli.tileiras",
         "tileiras_async.cli.common", "tileiras_async.cli.options", "tileiras_async.cli.dropin_result",
         "tileiras_async.inputs", "tileiras_async.cache", "tileiras_async.cache.config", "tileiras_async.cache.key",
         "tileiras_async.cache.entry", "tileiras_async.cache.store", "tileiras_async.cache.files",
         "tileiras_async.cache.fingerprint", "_blake2", "itertools", "time", "errno"}


def _probe(argv, env) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env,
                          timeout=300)
    return json.loads(proc.stderr.strip().splitlines()[-1])


@requires_corpus
def test_a_hit_and_help_import_none_of_the_compiler(tmp_path):
    env = {**os.environ, "TILEIRAS_ASYNC_CACHE_DIR": str(tmp_path / "cache"), "TILEIRAS_ASYNC_SERVER": "use",
           "TILEIRAS_ASYNC_SOCKET": str(tmp_path / "no-server.sock")}
    env.pop("TILEIRAS_ASYNC_NO_CACHE", None)
    argv = ["--gpu-name", "sm_90", "-o", str(tmp_path / "x.cubin"), str(SAXPY)]
    miss = _probe(argv, env)
    assert miss["rc"] == 0 and "llvmlite" in miss["new"]
    for probe in (_probe(argv, env), _probe(["--help"], env)):
        assert probe["rc"] == 0
        heavy = [m for m in probe["new"] if m not in _LEAN]
        assert heavy == [], f"the lean path imported {heavy}"


def test_the_empty_module_probe_hits(cache_on, capsys):
    """cuTile's version probe: an empty module per version, compiled again at every start."""
    from tileiras_async.bytecode.writer import write_module
    from tileiras_async.ir.core import Module
    first = []
    for minor in (1, 2, 3, 4):
        Path(f"probe{minor}.bytecode").write_bytes(write_module(Module(version=(13, minor, 0))))
        argv = ["--gpu-name", "sm_100", "-O3", "--lineinfo", f"probe{minor}.bytecode", "-o", "probe.cubin"]
        first.append(_outcome(argv, capsys, ["probe.cubin"]))
        assert first[-1][0] == 0
    for minor in (1, 2, 3, 4):
        argv = ["--gpu-name", "sm_100", "-O3", "--lineinfo", f"probe{minor}.bytecode", "-o", "probe.cubin"]
        assert _outcome(argv, capsys, ["probe.cubin"]) == first[minor - 1]
    assert cache_on.stats()["hits"] == 4
