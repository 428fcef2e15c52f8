"""Hostile inputs and faults (issue 16): inputs that are FIFOs or devices, a ptxas past the memory
limit, kill -9 of either entry point while ptxas runs, kill -9 of a busy worker, Ctrl-C twice in
a long batch.  Each time: every input accounted for, no process left behind, no temporary
directory leaked, no partial output, and the documented exit codes."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tileiras_async.pipeline import events as ev
from tileiras_async.toolchain import Toolchain, default_toolchain

from test_pipeline_batch import BIN, SAMPLE, assert_consistent, descendants, of, run_batch
from test_pipeline_faults import OTHERS, VICTIM, VICTIM_KEY, compilable  # noqa: F401  (fixture)

SLOW_PTXAS = "echo $$ > {pidfile}; exec sleep 300"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def cuda_root(tmp_path: Path, script: str) -> Path:
    """A CUDA root whose ptxas runs `script` (sh) for every PTX."""
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    ptxas = root / "bin" / "ptxas"
    ptxas.write_text(f"#!/bin/sh\n{script}\n")
    ptxas.chmod(0o755)
    return root


def private_env(tmp_path: Path, **extra) -> dict:
    """The environment of a CLI under test: its own TMPDIR, so its temporary directories are ours to count,
    and no compile cache (a hit never reaches the stages these faults hit, and 200 equal modules would be
    one compile and 199 hits)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return dict(os.environ, TMPDIR=str(tmp), TILEIRAS_ASYNC_NO_CACHE="1", **extra)


def leaked_dirs(tmp_path: Path) -> list[Path]:
    root = tmp_path / "tmp" / f"tileiras-async-{os.getuid()}"
    return sorted(root.iterdir()) if root.is_dir() else []


# ---------------------------------------------------------------- inputs


def test_fifo_and_device_inputs_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.tileirbc"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    finished, events = run_batch([fifo, Path("/dev/zero"), SAMPLE[0]], tmp_path / "out", jobs=1)
    assert time.monotonic() - t0 < 60
    assert_consistent(events)
    modules = {e.module: e for e in of(events, ev.ModuleFinished)}
    assert modules[str(fifo)].exit_code == 1 and modules["/dev/zero"].exit_code == 1
    assert modules[str(SAMPLE[0])].ok
    diags = {d.module: d.message for d in of(events, ev.Diagnostic)}
    assert "a FIFO, not a regular file" in diags[str(fifo)]
    assert "a character device, not a regular file" in diags["/dev/zero"]


def test_special_inputs_when_asked_are_read_within_the_deadline_and_the_size_limit(tmp_path):
    fifo = tmp_path / "pipe.tileirbc"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    finished, events = run_batch([fifo, Path("/dev/zero")], tmp_path / "out", jobs=1, read_special=True,
                                 stage_timeout_s=2.0, max_input_bytes=1 << 20)
    assert time.monotonic() - t0 < 60
    diags = {d.module: d.message for d in of(events, ev.Diagnostic)}
    assert diags[str(fifo)].endswith("reading it took longer than 2 s")
    assert diags["/dev/zero"].endswith("larger than the input limit of 1 MiB")
    assert finished.exit_code == 1


def test_drop_in_refuses_an_endless_input(tmp_path):
    proc = subprocess.run([str(BIN / "tileirdisasm-async"), "/dev/zero"], capture_output=True, text=True,
                          timeout=120, env=private_env(tmp_path))
    assert proc.returncode == 2   # tileirdisasm's exit status for unreadable input
    assert "larger than the input limit of 256 MiB" in proc.stderr


# ---------------------------------------------------------------- memory


def test_ptxas_over_the_memory_limit_is_killed(tmp_path, compilable):
    real = default_toolchain().ptxas
    kernel = VICTIM_KEY.rsplit("_", 1)[0]
    hog = f"{sys.executable} -c 'import time; x = bytearray(700 << 20); time.sleep(60)'"
    root = cuda_root(tmp_path, f"if grep -q '{kernel}' \"$3\"; then {hog}; fi\nexec '{real}' \"$@\"")
    before = descendants()
    finished, events = run_batch([VICTIM, *OTHERS], tmp_path / "out", jobs=2, memory_limit_bytes=300 << 20,
                                 toolchain=Toolchain(env={"CUDA_ROOT": str(root), "PATH": os.environ["PATH"]},
                                                     sys_path=[]))
    assert descendants() <= before
    assert_consistent(events)
    modules = {e.module: e for e in of(events, ev.ModuleFinished)}
    assert not modules[str(VICTIM)].ok and all(modules[str(p)].ok for p in OTHERS)
    diag = next(d for d in of(events, ev.Diagnostic) if d.module == str(VICTIM))
    assert re.fullmatch(r"ptxas killed: resident memory \d+ MiB exceeded the limit of 300 MiB", diag.message)
    assert diag.stage == "assemble"


# ---------------------------------------------------------------- kill -9


def _ptxas_pid(pidfile: Path) -> int:
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="ptxas to start")
    return int(pidfile.read_text())


def test_kill_9_of_the_drop_in_during_ptxas(tmp_path):
    pidfile = tmp_path / "ptxas.pid"
    env = private_env(tmp_path, CUDA_ROOT=str(cuda_root(tmp_path, SLOW_PTXAS.format(pidfile=pidfile))))
    out = tmp_path / "k.cubin"
    proc = subprocess.Popen([str(BIN / "tileiras"), "--gpu-name", "sm_90", "-o", str(out), str(SAMPLE[0])],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ptxas = _ptxas_pid(pidfile)
        assert leaked_dirs(tmp_path), "the drop-in keeps its ptxas directory under the per-process root"
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until(lambda: not alive(ptxas), 10, "ptxas to die with the drop-in")
    assert not out.exists()
    # the next start of anything that needs a temporary directory sweeps the dead one's
    subprocess.run([sys.executable, "-c", "from tileiras_async.toolchain import tempdirs; tempdirs.process_dir()"],
                   env=env, check=True)
    assert leaked_dirs(tmp_path) == []


def test_kill_9_of_the_supervisor_during_ptxas(tmp_path):
    pidfile = tmp_path / "ptxas.pid"
    env = private_env(tmp_path, CUDA_ROOT=str(cuda_root(tmp_path, SLOW_PTXAS.format(pidfile=pidfile))))
    cmd = [str(BIN / "tileiras-async"), "compile", str(SAMPLE[0]), "--gpu-name", "sm_90", "-j", "1",
           "--out-dir", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ptxas = _ptxas_pid(pidfile)
        tree = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)} | {ptxas}
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until(lambda: not any(alive(p) for p in tree), 15, "workers, tracker and ptxas to exit")
    # an orphaned worker removes the dead supervisor's temporary directory on its way out
    wait_until(lambda: leaked_dirs(tmp_path) == [], 10, "the supervisor's temporary directory to go")
    assert not [p for p in (tmp_path / "out").iterdir()] if (tmp_path / "out").exists() else True


def test_kill_9_of_a_busy_worker(tmp_path, compilable):
    env = private_env(tmp_path, TILEIRAS_ASYNC_FAULT=f"lower:hang:{VICTIM_KEY}")
    cmd = [str(BIN / "tileiras-async"), "compile", str(VICTIM), *map(str, OTHERS), "--gpu-name", "sm_100",
           "-j", "2", "--out-dir", str(tmp_path / "out"), "--json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    events = []
    for line in proc.stdout:
        event = ev.decode_json(line)
        events.append(event)
        if isinstance(event, ev.StageStarted) and event.stage == "lower" and event.module == str(VICTIM):
            os.kill(event.worker_pid, signal.SIGKILL)
    proc.wait(timeout=120)
    assert_consistent(events)
    modules = {e.module: e for e in of(events, ev.ModuleFinished)}
    assert modules[str(VICTIM)].exit_code == 4 and all(modules[str(p)].ok for p in OTHERS)
    assert any("died (signal SIGKILL" in d.message for d in of(events, ev.Diagnostic) if d.module == str(VICTIM))
    assert proc.returncode == 4
    assert leaked_dirs(tmp_path) == []


# ---------------------------------------------------------------- Ctrl-C


def test_ctrl_c_twice_in_a_long_batch(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(200):
        (inputs / f"m{i:03}.tileirbc").write_bytes(SAMPLE[0].read_bytes())
    out = tmp_path / "out"
    cmd = [str(BIN / "tileiras-async"), "compile", str(inputs), "--gpu-name", "sm_90", "-j", "2", "--out-dir", str(out)]
    proc = subprocess.Popen(cmd, env=private_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True)
    try:
        wait_until(lambda: out.is_dir() and any(out.iterdir()), 120, "the first output")
        tree = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    total = re.search(r"^200 modules: (\d+) ok, (\d+) failed(?:, (\d+) not finished)?", stdout, re.M)
    assert total, (stdout, stderr)
    assert sum(int(n or 0) for n in total.groups()) == 200
    rows = [line.split()[0] for line in stdout.splitlines() if re.match(r"m\d{3}\s", line)]
    assert len(rows) == 200
    wait_until(lambda: not any(alive(p) for p in tree), 15, "workers to exit")
    for f in out.iterdir():
        assert not f.name.startswith(".") and f.read_bytes()[:4] == b"\x7fELF"
    assert leaked_dirs(tmp_path) == []
