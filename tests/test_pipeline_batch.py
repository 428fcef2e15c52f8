"""The batch pipeline (`tileiras-async compile`): outputs, determinism, events, summary, CLI."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import psutil
import pytest

from tileiras_async.pipeline import events as ev
from tileiras_async.pipeline.config import BatchConfig, expand_inputs, output_stem
from tileiras_async.pipeline.summary import DiagnosticPrinter, Summary
from tileiras_async.pipeline.supervisor import compile_batch
from tileiras_async.stages import CompileOptions, compile_in_process

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
BIN = Path(sys.executable).parent
# a few small examples (one kernel each) keep the default run fast
SAMPLE = [EXAMPLES / f"{name}.v13.4.tileirbc" for name in
          ("collatz_steps_i32", "clamp_count_i32", "batched_transpose_f32", "exclusive_scan_max_i32")]


# ---------------------------------------------------------------- helpers (shared by the other pipeline tests)


def run_batch(inputs, out_dir, *, targets=("sm_100",), jobs=2, **kw):
    """(RunFinished, events) of one in-process batch run."""
    events: list = []
    config = BatchConfig([str(p) for p in inputs], list(targets), jobs=jobs, out_dir=str(out_dir), **kw)
    finished = compile_batch(config, [events.append])
    return finished, events


def one_by_one(path, target="sm_100"):
    """What the drop-in produces for one file: cubin bytes, or None when it fails."""
    try:
        result = compile_in_process(str(path), Path(path).read_bytes(), CompileOptions(target))
    except Exception:  # noqa: BLE001 - a stage bug: the batch reports it as an internal error
        return None
    return result.cubin if result.ok else None


def descendants() -> set[int]:
    """Live (non-zombie) descendants of this process, but multiprocessing's resource tracker (one per
    parent process, started with the first spawned worker; it exits with its parent)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline()):
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def assert_consistent(events):
    """Every stage/kernel/target/module that started also finished, once."""
    pairs = [(ev.StageStarted, ev.StageFinished, lambda e: e.job),
             (ev.KernelStarted, ev.KernelFinished, lambda e: (e.module, e.target, e.kernel)),
             (ev.TargetStarted, ev.TargetFinished, lambda e: (e.module, e.target)),
             (ev.ModuleStarted, ev.ModuleFinished, lambda e: e.module)]
    for start, finish, key in pairs:
        started = [key(e) for e in of(events, start)]
        finished = [key(e) for e in of(events, finish)]
        assert sorted(started, key=repr) == sorted(finished, key=repr), start.__name__
        assert len(set(started)) == len(started)
    assert isinstance(events[0], ev.RunStarted) and isinstance(events[-1], ev.RunFinished)
    assert all(a.t <= b.t + 1e-9 for a, b in zip(events, events[1:]))


@pytest.fixture(scope="module")
def expected():
    return {p: {t: one_by_one(p, t) for t in ("sm_100", "sm_90")} for p in SAMPLE}


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("jobs", [1, 2])
def test_batch_matches_one_by_one(tmp_path, expected, jobs):
    before = descendants()
    finished, events = run_batch(SAMPLE, tmp_path, targets=("sm_100", "sm_90"), jobs=jobs)
    assert descendants() <= before, "workers or tools left behind"
    assert_consistent(events)
    for path in SAMPLE:
        for target in ("sm_100", "sm_90"):
            out = tmp_path / f"{output_stem(str(path))}.{target}.cubin"
            want = expected[path][target]
            if want is None:
                assert not out.exists()
            else:
                assert out.read_bytes() == want, out.name
    ok = all(want is not None for per in expected.values() for want in per.values())
    assert finished.ok == ok and (finished.exit_code == 0) == ok
    assert finished.outputs == [str(tmp_path / f"{output_stem(str(p))}.{t}.cubin")
                                for p in SAMPLE for t in ("sm_100", "sm_90") if expected[p][t] is not None]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary files left behind"
    # one lower job per kernel and target, one codegen per module and target, all in workers
    lower = [e for e in of(events, ev.StageFinished) if e.stage == "lower"]
    assert len(lower) == finished.kernels == 2 * len(SAMPLE)
    pids = {e.worker_pid for e in of(events, ev.StageFinished) if e.stage in ("parse", "lower", "codegen")}
    assert None not in pids and os.getpid() not in pids and len(pids) <= jobs
    assert {e.pid for e in of(events, ev.WorkerStarted)} == pids
    assert all(e.rss_bytes > 0 for e in of(events, ev.StageFinished) if e.worker_pid)


def test_outputs_identical_for_any_jobs_and_keep_ptx(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run_batch(SAMPLE[:3], a, jobs=1, keep_ptx=True)
    run_batch(list(reversed(SAMPLE[:3])), b, jobs=2, keep_ptx=True)
    files_a = sorted(p.name for p in a.iterdir())
    assert files_a == sorted(p.name for p in b.iterdir())
    assert any(n.endswith(".ptx") for n in files_a)
    for name in files_a:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_failures_are_per_module_and_the_batch_goes_on(tmp_path):
    bad = tmp_path / "garbage.tileirbc"
    bad.write_bytes(b"this is not bytecode")
    missing = tmp_path / "missing.tileirbc"
    out = tmp_path / "out"
    out.mkdir()
    finished, events = run_batch([bad, SAMPLE[0], missing], out)
    assert_consistent(events)
    by_module = {e.module: e for e in of(events, ev.ModuleFinished)}
    assert by_module[str(bad)].exit_code == 3
    assert by_module[str(missing)].exit_code == 1
    diags = {e.module: e for e in of(events, ev.Diagnostic)}
    assert "not correspond" in diags[str(bad)].message or "bytecode" in diags[str(bad)].message
    assert diags[str(missing)].message.startswith(f"unable to read input file '{missing}'")
    assert finished.exit_code == 3 and not finished.ok
    if one_by_one(SAMPLE[0]) is not None:
        assert (out / f"{output_stem(str(SAMPLE[0]))}.sm_100.cubin").is_file()


def test_codegen_diagnostics_carry_source_locations(tmp_path):
    """A kernel that cannot be lowered is reported with the op's location in the kernel source."""
    finished, events = run_batch(sorted(EXAMPLES.glob("*.v13.4.tileirbc")), tmp_path)
    lowering = [d for d in of(events, ev.Diagnostic) if d.stage in ("lower", "codegen")]
    for d in lowering:
        assert d.kernel or d.stage == "codegen"
        if "(op 'cuda_tile." in d.message and " at " in d.message:
            assert d.location and d.location.split(":")[0].endswith(".py"), d
    if lowering:
        assert finished.exit_code != 0


def test_empty_module_compiles(tmp_path):
    """cuTile's version probe: a module without kernels still gives a cubin."""
    path = tmp_path / "probe.tileirbc"
    path.write_bytes(empty_module())
    finished, events = run_batch([path], tmp_path, targets=("sm_120",))
    assert finished.ok, of(events, ev.Diagnostic)
    assert (tmp_path / "probe.sm_120.cubin").read_bytes()[:4] == b"\x7fELF"
    assert finished.kernels == 0


def empty_module(version: str = "13.4") -> bytes:
    from cuda.tile._bytecode import BytecodeVersion, write_bytecode
    buf = bytearray()
    with write_bytecode(num_functions=0, buf=buf, version=getattr(BytecodeVersion, "V_" + version.replace(".", "_"))):
        pass
    return bytes(buf)


def test_summary_and_diagnostic_printer(tmp_path):
    bad = tmp_path / "garbage.tileirbc"
    bad.write_bytes(b"nope")
    summary, err = Summary(), io.StringIO()
    printer = DiagnosticPrinter(err)
    events: list = []
    config = BatchConfig([str(SAMPLE[0]), str(bad)], ["sm_100", "sm_90"], jobs=2, out_dir=str(tmp_path))
    compile_batch(config, [summary, printer, events.append])
    table = summary.render()
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["module", "kernels", "sm_100", "sm_90"]
    assert "parse" in lines[0]
    row = next(line for line in lines if line.startswith("garbage "))
    assert row.split()[1:4] == ["-", "FAIL(3)", "FAIL(3)"]
    assert any(line.startswith("parse ") for line in lines)
    assert "2 modules:" in lines[-1] and "1 failed" in lines[-1]
    assert err.getvalue().startswith(f"{bad}: error: ")


def test_expand_inputs(tmp_path):
    (tmp_path / "d").mkdir()
    for n in ("b.tileirbc", "a.tileirbc", "skip.txt"):
        (tmp_path / "d" / n).write_bytes(b"")
    paths, errors = expand_inputs([str(tmp_path / "d"), str(tmp_path / "d" / "a.tileirbc")])
    assert [Path(p).name for p in paths] == ["a.tileirbc", "b.tileirbc"] and errors == []
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "a.tileirbc").write_bytes(b"")
    _, errors = expand_inputs([str(tmp_path / "d"), str(tmp_path / "e")])
    assert len(errors) == 1 and "same output files" in errors[0]
    (tmp_path / "empty").mkdir()
    assert expand_inputs([str(tmp_path / "empty")])[1] == [f"error: no .tileirbc files in directory "
                                                           f"'{tmp_path / 'empty'}'"]


# ---------------------------------------------------------------- the command line


def cli(*args, **kw):
    return subprocess.run([str(BIN / "tileiras-async"), "compile", *map(str, args)], capture_output=True,
                          text=True, timeout=300, **kw)


def test_cli_json_events_and_summary(tmp_path):
    bad = tmp_path / "garbage.tileirbc"
    bad.write_bytes(b"nope")
    r = cli(SAMPLE[0], bad, "--gpu-name", "sm_100,sm_90", "-j", "2", "-O", "3", "--out-dir", tmp_path / "o", "--json")
    assert r.returncode == 3, r.stderr
    decoded = [ev.decode_json(line) for line in r.stdout.splitlines()]
    assert_consistent(decoded)
    assert decoded[0].targets == ["sm_100", "sm_90"] and decoded[0].jobs == 2
    assert decoded[-1].exit_code == 3
    assert any(isinstance(e, ev.Diagnostic) and e.module == str(bad) for e in decoded)
    # the summary goes to stderr when stdout carries events
    assert "module" in r.stderr and "2 modules:" in r.stderr
    for line in r.stdout.splitlines():
        assert json.loads(line)["event"]


def test_cli_plain_output(tmp_path):
    r = cli(SAMPLE[0], "--gpu-name", "sm_100", "--out-dir", tmp_path, "-j1")
    assert r.stdout.splitlines()[0].startswith("module")
    assert r.returncode == (0 if one_by_one(SAMPLE[0]) is not None else r.returncode)


def test_cli_keep_sass(tmp_path):
    if one_by_one(SAMPLE[0]) is None:
        pytest.skip("sample kernel does not compile in this build")
    r = cli(SAMPLE[0], "--gpu-name", "sm_100", "--out-dir", tmp_path, "--keep-sass", "--keep-ptx")
    assert r.returncode == 0, r.stderr
    stem = output_stem(str(SAMPLE[0]))
    assert {p.name for p in tmp_path.iterdir()} == {f"{stem}.sm_100.{x}" for x in ("cubin", "ptx", "sass")}
    assert ".text." in (tmp_path / f"{stem}.sm_100.sass").read_text()


@pytest.mark.parametrize("args,message", [
    (["--tui", "--json"], "error: --tui and --json cannot be combined"),
    ([], "error: no --gpu-name given"),
    (["--gpu-name", "sm_75"], "error: unsupported --gpu-name 'sm_75'"),
    (["--gpu-name", "sm_100", "-O", "4"], "error: invalid optimization level: 4"),
    (["--gpu-name", "sm_100", "-j", "0"], "error: -j must be at least 1"),
    (["--gpu-name", "sm_100", "--inject-fault", "bogus"], "error: invalid fault spec 'bogus'"),
])
def test_cli_usage_errors(tmp_path, args, message):
    r = cli(SAMPLE[0], *args, "--out-dir", tmp_path)
    assert r.returncode != 0
    assert r.stderr.startswith(message) and len(r.stderr.splitlines()) == 1, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_events_round_trip_through_json():
    samples = [ev.RunStarted(version="0", modules=["a"], targets=["sm_100"], jobs=2, opt_level=3, out_dir=".",
                             supervisor_pid=1, stage_timeout_s=1.0, memory_limit_bytes=1),
               ev.StageFinished(t=1.5, job=3, stage="lower", module="a", ok=True, elapsed_s=0.1, kernel="k",
                                worker_pid=9, rss_bytes=10),
               ev.Diagnostic(module="a", severity="error", message="m", location="k.py:1:2")]
    for e in samples:
        assert ev.decode_json(ev.encode_json(e)) == e
    assert json.loads(ev.encode_json(samples[1]))["event"] == "stage_finished"
    with pytest.raises(msgspec.ValidationError):
        ev.decode_json(b'{"event": "module_started"}')


def test_format_diagnostic():
    d = ev.Diagnostic(module="m.tileirbc", severity="error", message="cannot lower 'x' yet (op 'cuda_tile.x' at "
                      "k.py:3:4)", stage="lower", target="sm_100", kernel="kern", location="k.py:3:4")
    assert ev.format_diagnostic(d) == "m.tileirbc: sm_100: kern: error: cannot lower 'x' yet (op 'cuda_tile.x' " \
                                      "at k.py:3:4)"
    d = ev.Diagnostic(module="m.tileirbc", severity="error", message="k.py:1:2: error: bad op")
    assert ev.format_diagnostic(d) == "m.tileirbc: k.py:1:2: error: bad op"
    d = ev.Diagnostic(module="m.tileirbc", severity="error", message="'cuda_tile.divi' op bad", location="k.py:1:2")
    assert ev.format_diagnostic(d) == "m.tileirbc: k.py:1:2: error: 'cuda_tile.divi' op bad"


def test_verifier_locations_are_extracted():
    from tileiras_async.pipeline.supervisor import split_location
    text = ('#cuda_tile.di_loc<loc("kernels_invalid.py":18:33) in #cuda_tile.di_subprogram<file = <"k.py" in "">, '
            'line = 14>>: error: \'cuda_tile.divi\' op rounding mode is not allowed')
    assert split_location(text) == ("kernels_invalid.py:18:33", "'cuda_tile.divi' op rounding mode is not allowed")
    assert split_location("k: cannot lower 'x' yet (op 'cuda_tile.x' at a.py:3:4)")[0] == "a.py:3:4"
    assert split_location("error at offset 13: bad") == (None, "error at offset 13: bad")


OP_MODULES = sorted((REPO / "tests" / "data" / "ops").glob("*.v13.4.tileirbc"))


def test_op_family_modules_match_one_by_one(tmp_path):
    """The per-op golden modules (globals, atomics, print, ...) exercise every field a stage message
    carries from parse to codegen: the batch must hand them on exactly as the drop-in does."""
    if not OP_MODULES:
        pytest.skip("no per-op modules")
    finished, events = run_batch(OP_MODULES, tmp_path, jobs=2)
    assert_consistent(events)
    for path in OP_MODULES:
        out = tmp_path / f"{output_stem(str(path))}.sm_100.cubin"
        assert (out.read_bytes() if out.exists() else None) == one_by_one(path), path.name


def test_schedules_match_the_drop_in_trace(tmp_path):
    """--schedules: the schedule stage runs per kernel beside lowering; its events carry the reports, and
    <name>.<gpu>.schedule.json is the drop-in's --schedule-trace-file for the same module."""
    from tileiras_async.schedule.report import schedule_trace_json
    paths = [EXAMPLES / "online_softmax_f16.v13.4.tileirbc", EXAMPLES / "matmul_bias_relu_f16.v13.4.tileirbc"]
    finished, events = run_batch(paths, tmp_path, jobs=2, schedules=True)
    assert_consistent(events)
    scheduled = of(events, ev.KernelScheduled)
    assert {e.module for e in scheduled} == {str(p) for p in paths}
    assert any(e.reports for e in scheduled), "examples with loops give at least one loop schedule"
    for path in paths:
        result = compile_in_process(str(path), path.read_bytes(), CompileOptions("sm_100"), with_schedules=True)
        trace = tmp_path / f"{output_stem(str(path))}.sm_100.schedule.json"
        if result.ok:
            assert trace.read_text() == schedule_trace_json(result.schedules) + "\n"
    decoded = [ev.decode_json(ev.encode_json(e)) for e in scheduled]
    assert decoded == scheduled
