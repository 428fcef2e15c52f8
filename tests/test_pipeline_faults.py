"""Fault containment: a stage that raises, segfaults, hangs or allocates without bound; a ptxas
that hangs, fails to execute or is missing; Ctrl-C and SIGTERM.  Each time the fault is reported
for its module, the rest of the batch compiles, and no process is left behind."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tileiras_async.pipeline import events as ev
from tileiras_async.pipeline.messages import FaultSpec
from tileiras_async.toolchain import Toolchain, default_toolchain

from test_pipeline_batch import BIN, SAMPLE, assert_consistent, descendants, of, one_by_one, run_batch

VICTIM = SAMPLE[0]                  # the module the fault is aimed at
OTHERS = SAMPLE[1:3]
VICTIM_KEY = VICTIM.name.split(".")[0]


@pytest.fixture(scope="module")
def compilable():
    ok = [p for p in OTHERS if one_by_one(p) is not None]
    if not ok or one_by_one(VICTIM) is None:
        pytest.skip("the sample kernels do not compile in this build")
    return ok


def check_contained(tmp_path, events, finished, before, *, reason=None):
    assert descendants() <= before, "workers or tools left behind"
    assert_consistent(events)
    modules = {e.module: e for e in of(events, ev.ModuleFinished)}
    assert not modules[str(VICTIM)].ok
    for other in OTHERS:
        assert modules[str(other)].ok, of(events, ev.Diagnostic)
        assert (tmp_path / f"{other.name.removesuffix('.tileirbc')}.sm_100.cubin").read_bytes() == one_by_one(other)
    assert not (tmp_path / f"{VICTIM.name.removesuffix('.tileirbc')}.sm_100.cubin").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert finished.exit_code != 0
    diags = [d for d in of(events, ev.Diagnostic) if d.module == str(VICTIM)]
    assert len(diags) >= 1
    if reason:
        exits = of(events, ev.WorkerExited)
        assert [e.reason for e in exits] == [reason]
    return diags


def batch_with_fault(tmp_path, spec, **kw):
    before = descendants()
    finished, events = run_batch([VICTIM, *OTHERS], tmp_path, jobs=2, fault=FaultSpec.parse(spec), **kw)
    return before, finished, events


def test_stage_that_raises(tmp_path, compilable):
    before, finished, events = batch_with_fault(tmp_path, f"lower:raise:{VICTIM_KEY}")
    diags = check_contained(tmp_path, events, finished, before)
    assert diags[0].message == "internal error in stage lower: RuntimeError: injected fault in stage lower"
    assert finished.exit_code == 4
    assert of(events, ev.WorkerExited) == []  # the worker survives a Python exception


def test_stage_that_segfaults(tmp_path, compilable):
    before, finished, events = batch_with_fault(tmp_path, f"codegen:segfault:{VICTIM_KEY}")
    diags = check_contained(tmp_path, events, finished, before, reason="crashed")
    assert "died (signal SIGSEGV" in diags[0].message and "during codegen" in diags[0].message
    assert of(events, ev.WorkerExited)[0].signal == "SIGSEGV"


def test_stage_that_hangs(tmp_path, compilable):
    t0 = time.monotonic()
    before, finished, events = batch_with_fault(tmp_path, f"lower:hang:{VICTIM_KEY}", stage_timeout_s=2.0)
    assert time.monotonic() - t0 < 60
    diags = check_contained(tmp_path, events, finished, before, reason="timeout")
    assert diags[0].message.startswith("lower timed out after 2 s: worker ")


def test_stage_that_allocates_without_bound(tmp_path, compilable):
    before, finished, events = batch_with_fault(tmp_path, f"parse:oom:{VICTIM_KEY}",
                                                memory_limit_bytes=500 << 20, stage_timeout_s=60)
    diags = check_contained(tmp_path, events, finished, before, reason="memory")
    assert "exceeded the limit of 500 MiB during parse" in diags[0].message
    # the killed worker's last RSS sample is in its StageFinished
    victim = [e for e in of(events, ev.StageFinished) if e.module == str(VICTIM)]
    assert victim[0].peak_rss_bytes > 500 << 20


def test_worker_that_exits(tmp_path, compilable):
    before, finished, events = batch_with_fault(tmp_path, f"parse:exit:{VICTIM_KEY}")
    diags = check_contained(tmp_path, events, finished, before, reason="crashed")
    assert "died (exit status 3) during parse" in diags[0].message


def fake_ptxas(tmp_path: Path, victim_body: str) -> Toolchain:
    """A CUDA root whose ptxas misbehaves for the victim's PTX and runs the real ptxas otherwise."""
    real = default_toolchain().ptxas
    root = tmp_path.parent / (tmp_path.name + "-cuda")
    (root / "bin").mkdir(parents=True)
    ptxas = root / "bin" / "ptxas"
    kernel = VICTIM_KEY.rsplit("_", 1)[0]  # e.g. collatz_steps: part of the kernel's symbol
    ptxas.write_text(f"#!/bin/sh\nif grep -q '{kernel}' \"$3\"; then\n{victim_body}\nfi\nexec '{real}' \"$@\"\n")
    ptxas.chmod(0o755)
    return Toolchain(env={"CUDA_ROOT": str(root), "PATH": os.environ.get("PATH", "")}, sys_path=[])


def test_ptxas_that_hangs(tmp_path, compilable):
    pidfile = tmp_path.parent / (tmp_path.name + "-pid")
    tc = fake_ptxas(tmp_path, f"echo $$ > {pidfile}; exec sleep 300")
    t0 = time.monotonic()
    before, finished, events = batch_with_fault(tmp_path, "parse:raise:nothing-matches", toolchain=tc,
                                                stage_timeout_s=2.0)
    assert time.monotonic() - t0 < 60
    diags = check_contained(tmp_path, events, finished, before)
    assert diags[0].message == "ptxas: Child timed out after 2 s (killed)" and diags[0].stage == "assemble"
    assert finished.exit_code == 5
    assert not psutil.pid_exists(int(pidfile.read_text())) or \
        psutil.Process(int(pidfile.read_text())).status() == psutil.STATUS_ZOMBIE


def test_ptxas_that_cannot_be_executed(tmp_path, compilable):
    tc = fake_ptxas(tmp_path, "echo 'ptxas: not here' >&2; exit 127")
    before, finished, events = batch_with_fault(tmp_path, "parse:raise:nothing-matches", toolchain=tc)
    diags = check_contained(tmp_path, events, finished, before)
    assert diags[0].message == "ptxas could not be executed (exit status 127: command not found)"
    assert diags[0].tool_stderr == "ptxas: not here\n"


def test_ptxas_that_is_missing(tmp_path, compilable):
    before = descendants()
    finished, events = run_batch([VICTIM, *OTHERS], tmp_path, toolchain=Toolchain(env={"PATH": ""}, sys_path=[]))
    assert descendants() <= before
    assert_consistent(events)
    assert finished.exit_code == 2 and finished.outputs == []
    diags = of(events, ev.Diagnostic)
    assert {d.module for d in diags} == {str(p) for p in [VICTIM, *OTHERS]}
    assert all(d.message.startswith("cannot find ptxas (NVIDIA's nvidia-cuda-nvcc wheel: pip install 'tileiras-async[cuda]', or set CUDA_HOME to a CUDA 13 toolkit); searched: ") for d in diags)


# ---------------------------------------------------------------- signals


def _start_cli(tmp_path: Path, *extra, env=None):
    cmd = [str(BIN / "tileiras-async"), "compile", str(VICTIM), *map(str, OTHERS), "--gpu-name", "sm_100",
           "-j", "2", "--out-dir", str(tmp_path / "out"), "--json", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)


def _wait_for_tree(proc, *, want: int, timeout: float = 60) -> set[int]:
    """Descendant pids of the CLI once at least `want` exist (workers, tools)."""
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    while time.monotonic() < deadline:
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        seen |= {k.pid for k in kids if "resource_tracker" not in " ".join(_cmdline(k))}
        if len(seen) >= want and any("sleep" in " ".join(_cmdline(k)) for k in kids):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"the batch did not reach the expected state; saw {seen}")


def _cmdline(p) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


@pytest.mark.parametrize("how", ["SIGINT-group", "SIGTERM"])
def test_interrupt_cancels_everything(tmp_path, how, compilable):
    """Ctrl-C (SIGINT to the whole foreground group) or SIGTERM while a worker hangs in a stage and a
    ptxas hangs: exit 130/143, every worker and tool gone, no partial or temporary output files."""
    hung_ptxas_module = OTHERS[0].name.split(".")[0].rsplit("_", 1)[0]
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    real = default_toolchain().ptxas
    (root / "bin" / "ptxas").write_text(f"#!/bin/sh\nif grep -q '{hung_ptxas_module}' \"$3\"; then exec sleep 300; "
                                        f"fi\nexec '{real}' \"$@\"\n")
    (root / "bin" / "ptxas").chmod(0o755)
    env = dict(os.environ, CUDA_ROOT=str(root), TILEIRAS_ASYNC_FAULT=f"lower:hang:{VICTIM_KEY}")
    proc = _start_cli(tmp_path, env=env)
    try:
        tree = _wait_for_tree(proc, want=3)
        if how == "SIGINT-group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == (130 if how == "SIGINT-group" else 143), err
    time.sleep(0.2)
    alive = [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"left behind: {[_cmdline(psutil.Process(p)) for p in alive]}"
    events = [ev.decode_json(line) for line in out.splitlines()]
    assert events[-1].cancelled == ("SIGINT" if how == "SIGINT-group" else "SIGTERM")
    outdir = tmp_path / "out"
    for f in outdir.iterdir() if outdir.exists() else ():   # (made by the first file written, if any)
        assert not f.name.startswith("."), f"temporary file {f.name} left behind"
        assert f.read_bytes()[:4] == b"\x7fELF"
    assert b"Traceback" not in err


def test_workers_exit_when_the_supervisor_is_killed(tmp_path, compilable):
    """kill -9 of the supervisor cannot clean up; its workers notice their parent is gone and exit."""
    env = dict(os.environ, TILEIRAS_ASYNC_FAULT=f"lower:hang:{VICTIM_KEY}")
    cmd = [str(BIN / "tileiras-async"), "compile", str(VICTIM), "--gpu-name", "sm_100", "-j", "1",
           "--out-dir", str(tmp_path / "out"), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        workers: set[int] = set()
        deadline = time.monotonic() + 60
        for line in proc.stdout:  # wait until the worker has begun the hanging job
            event = ev.decode_json(line)
            if isinstance(event, ev.StageStarted) and event.stage == "lower":
                workers.add(event.worker_pid)
                break
            assert time.monotonic() < deadline
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert workers
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in workers):
        time.sleep(0.2)
    assert not any(psutil.pid_exists(p) for p in workers)
