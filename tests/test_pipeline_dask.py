"""The batch pipeline on Dask (`compile --cluster`): real `dask scheduler` / `dask worker` processes on
127.0.0.1, a worker killed mid-batch, limits enforced on the workers, and a LocalCluster.

Every cubin must be byte-identical to a -j1 run of the local pipeline.  The default run uses a
handful of corpus files and the main cases (a worker killed mid-batch, limits, a LocalCluster, bad
options); `--run-all` adds the whole public corpus, Ctrl-C, a job that keeps killing its workers and
a worker without the toolchain.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("distributed", reason="the [dask] extra (distributed) is not installed")

from tileiras_async.pipeline.config import output_stem  # noqa: E402
from tileiras_async.pipeline.dask_pool import parse_cluster  # noqa: E402

from conftest import corpus_files, requires_corpus  # noqa: E402
from test_pipeline_batch import BIN, EXAMPLES, run_batch  # noqa: E402

TARGET = "sm_100"
ALL = corpus_files("*.tileirbc")
SAMPLE = ALL[::45]           # 5 modules of different kinds
DASK = BIN / "dask"
ENV = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "20s"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args} exited with {proc.returncode}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def stop(proc: subprocess.Popen) -> None:
    """Kill a process we started and every process below it (a worker's sandboxes)."""
    try:
        family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        family = [proc.pid]
    for pid in family:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(10)


class Cluster:
    """A scheduler and named workers, each a separate process listening on 127.0.0.1."""

    def __init__(self, tmp: Path, scheduler_env: dict | None = None):
        self.tmp = tmp
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.workers: dict[str, subprocess.Popen] = {}   # address -> process
        self.scheduler = self._spawn("scheduler", [str(DASK), "scheduler", "--host", "127.0.0.1", "--port",
                                                   str(self.port), "--no-dashboard"], {**ENV, **(scheduler_env or {})})
        wait_port(self.port, self.scheduler)

    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env or ENV, cwd=self.tmp)
        self.procs.append(proc)
        return proc

    def add_worker(self, name: str, nanny: bool = False) -> str:
        """A worker process (with `nanny`, under a nanny that restarts it when it dies)."""
        port = free_port()
        if nanny:
            proc = self._spawn(name, [str(DASK), "worker", self.address, "--host", "127.0.0.1", "--nanny-port",
                                      str(port), "--nthreads", "1", "--nanny", "--no-dashboard", "--name", name])
            wait_port(port, proc)
            return name
        proc = self._spawn(name, [str(DASK), "worker", self.address, "--host", "127.0.0.1", "--worker-port",
                                  str(port), "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", name])
        wait_port(port, proc)
        address = f"tcp://127.0.0.1:{port}"
        self.workers[address] = proc
        return address

    def close(self) -> None:
        for proc in reversed(self.procs):
            stop(proc)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def compile_cli(files, out_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "tileiras-async"), "compile", *map(str, files), "--gpu-name", TARGET,
                             "--out-dir", str(out_dir), "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)


def reference(files, out_dir: Path) -> dict[str, bytes | None]:
    run_batch(files, out_dir, targets=(TARGET,), jobs=1)
    return cubins(files, out_dir)


def cubins(files, out_dir: Path) -> dict[str, bytes | None]:
    out = {}
    for f in files:
        p = out_dir / f"{output_stem(str(f))}.{TARGET}.cubin"
        out[f.name] = p.read_bytes() if p.exists() else None
    return out


def finish(proc: subprocess.Popen, events: list[dict], timeout: float = 300) -> tuple[int, list[dict], str]:
    out, err = proc.communicate(timeout=timeout)
    events += [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    return proc.returncode, events, err.decode()


# ---------------------------------------------------------------------------------------------- tests

@requires_corpus
def test_worker_killed_mid_batch_gives_identical_cubins(cluster, tmp_path):
    """Two `dask worker` processes; the one running a (slowed) lower job is SIGKILLed while it runs.
    Dask re-runs the job on the other worker; the stream says so; every cubin equals -j1's."""
    files = SAMPLE
    victim_module = str(files[1])
    cluster.add_worker("w1")
    cluster.add_worker("w2")
    want = reference(files, tmp_path / "j1")
    proc = compile_cli(files, tmp_path / "dask", "--cluster", cluster.address,
                       "--inject-fault", f"lower:slow:{files[1].name}")
    events: list[dict] = []
    killed = None
    for line in proc.stdout:
        e = json.loads(line)
        events.append(e)
        if (killed is None and e["event"] == "stage_started" and e["stage"] == "lower"
                and e["module"] == victim_module and e.get("worker")):
            killed = e["worker"]
            cluster.workers[killed].kill()   # SIGKILL, mid-job (the job sleeps 3 s first)
        if e["event"] == "run_finished":
            break
    rc, events, err = finish(proc, events)
    assert killed is not None, "the slowed job never started"
    assert rc == 0, err
    assert cubins(files, tmp_path / "dask") == want
    assert all(v is not None for v in want.values())
    retried = [e for e in events if e["event"] == "stage_retried"]
    assert [(e["module"], e["stage"], e["previous_worker"]) for e in retried] == [(victim_module, "lower", killed)]
    assert retried[0]["worker"] != killed
    lost = [e for e in events if e["event"] == "worker_exited"]
    assert [(e["reason"], e["worker"]) for e in lost] == [("lost", killed)]
    started = next(e for e in events if e["event"] == "run_started")
    assert started["cluster"] == cluster.address
    states = [e for e in events if e["event"] == "cluster_state"]
    assert states and {w["address"] for w in states[0]["workers"]} == set(cluster.workers)
    assert {e["stage"] for e in events if e["event"] == "stage_finished"} >= {"parse", "lower", "codegen", "assemble"}
    assert all(e.get("worker") for e in events if e["event"] == "stage_finished")


@requires_corpus
def test_limits_hold_on_cluster_workers(cluster, tmp_path):
    """A hanging stage times out, a stage that allocates without bound is killed at --memory-limit,
    a segfault is reported as a crash (not retried forever); the other modules compile and the
    cluster's workers survive all three (only their sandboxes are killed)."""
    cluster.add_worker("w1")
    files = SAMPLE[:2]
    ok_file = files[1]
    cases = {"hang": ("timed out after 3 s", ["--timeout", "3"]),
             "oom": ("exceeded the limit of 300 MiB", ["--memory-limit", "300"]),
             "segfault": ("died (signal SIGSEGV)", [])}
    for mode, (message, extra) in cases.items():
        out = tmp_path / mode
        proc = compile_cli(files, out, "--cluster", cluster.address, "--inject-fault",
                           f"lower:{mode}:{files[0].name}", *extra)
        rc, events, err = finish(proc, [], timeout=120)
        assert rc == 4, (mode, err)
        diags = [e["message"] for e in events if e["event"] == "diagnostic" and e["module"] == str(files[0])]
        assert any(message in d for d in diags), (mode, diags)
        assert cubins([ok_file], out)[ok_file.name] is not None, mode
        assert not [e for e in events if e["event"] == "stage_retried"], mode
    assert all(p.poll() is None for p in cluster.workers.values())


@pytest.mark.slow
@requires_corpus
def test_a_module_that_kills_workers_fails_instead_of_being_retried_forever(tmp_path):
    """Its job kills the Dask worker running it, every time: after the scheduler's allowed-failures
    (1 here) Dask gives up (KilledWorker), the module fails with a diagnostic, the others compile."""
    cluster = Cluster(tmp_path, {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"})
    try:
        cluster.add_worker("n1", nanny=True)
        cluster.add_worker("n2", nanny=True)
        files = SAMPLE[:3]
        want = reference(files[1:], tmp_path / "j1")
        proc = compile_cli(files, tmp_path / "dask", "--cluster", cluster.address, "--inject-fault",
                           f"lower:kill-host:{files[0].name}")
        rc, events, err = finish(proc, [], timeout=300)
    finally:
        cluster.close()
    assert rc == 4, err
    diags = [e["message"] for e in events if e["event"] == "diagnostic" and e["module"] == str(files[0])]
    assert len(diags) == 1 and diags[0].startswith("lower killed the Dask worker running it 2 times") \
        and diags[0].endswith("Dask gave up on it (the scheduler's allowed-failures)"), diags
    assert cubins(files[1:], tmp_path / "dask") == want
    assert cubins(files[:1], tmp_path / "dask") == {files[0].name: None}


@pytest.mark.slow
@requires_corpus
def test_ctrl_c_cancels_the_cluster_jobs_and_leaves_no_outputs(cluster, tmp_path):
    cluster.add_worker("w1")
    files = SAMPLE[:2]
    proc = compile_cli(files, tmp_path / "out", "--cluster", cluster.address, "--inject-fault",
                       f"lower:slow:{files[0].name}")
    for line in proc.stdout:
        e = json.loads(line)
        if e["event"] == "stage_started" and e["stage"] == "lower" and e["module"] == str(files[0]):
            proc.send_signal(signal.SIGINT)
            break
    t0 = time.monotonic()
    rc, events, err = finish(proc, [], timeout=60)
    assert rc == 130 and time.monotonic() - t0 < 30, err
    assert [e["cancelled"] for e in events if e["event"] == "run_finished"] == ["SIGINT"]
    out = tmp_path / "out"
    assert not out.exists() or not list(out.iterdir())       # no partial (or any) outputs
    assert all(p.poll() is None for p in cluster.workers.values())   # the cluster is still there


@pytest.mark.slow
def test_a_worker_without_the_toolchain_says_what_to_install(tmp_path):
    """A Dask worker whose environment has no NVIDIA wheels and no ptxas on PATH: its assemble jobs fail
    with the usual discovery's message (what to install), not an internal error."""
    from test_packaging import BARE_PATH, venv_without_nvidia
    python = venv_without_nvidia(tmp_path / "venv")
    cluster = Cluster(tmp_path)
    try:
        port = free_port()
        env = {k: v for k, v in ENV.items() if k not in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")}
        proc = cluster._spawn("bare", [str(python), "-m", "dask", "worker", cluster.address, "--host", "127.0.0.1",
                                       "--worker-port", str(port), "--nthreads", "1", "--no-nanny",
                                       "--no-dashboard"], {**env, "PATH": BARE_PATH})
        wait_port(port, proc)
        example = EXAMPLES / "collatz_steps_i32.v13.4.tileirbc"
        rc, events, err = finish(compile_cli([example], tmp_path / "out", "--cluster", cluster.address), [],
                                 timeout=300)
    finally:
        cluster.close()
    assert rc == 2, err
    diags = [(e["stage"], e["message"]) for e in events if e["event"] == "diagnostic"]
    assert diags == [("assemble", "cannot find ptxas (NVIDIA's nvidia-cuda-nvcc wheel: pip install "
                      "'tileiras-async[cuda]', or set CUDA_HOME to a CUDA 13 toolkit); searched: $CUDA_ROOT (unset), "
                      "$CUDA_HOME (unset), $CUDA_PATH (unset), nvidia wheels (none on sys.path), PATH")] or \
        (len(diags) == 1 and diags[0][1].startswith("cannot find ptxas (NVIDIA's nvidia-cuda-nvcc wheel")), diags


def test_local_cluster_matches_j1(tmp_path):
    files = [EXAMPLES / "collatz_steps_i32.v13.4.tileirbc", EXAMPLES / "batched_transpose_f32.v13.4.tileirbc"]
    want = reference(files, tmp_path / "j1")
    finished, events = run_batch(files, tmp_path / "local", targets=(TARGET,), cluster="local:1")
    assert finished.exit_code == 0
    assert cubins(files, tmp_path / "local") == want


def test_cluster_option_errors(tmp_path):
    example = EXAMPLES / "collatz_steps_i32.v13.4.tileirbc"
    for spec, message in [("local:0", "local:N needs a positive number"),
                          ("127.0.0.1:8786", "expected tcp://HOST:PORT")]:
        r = subprocess.run([str(BIN / "tileiras-async"), "compile", str(example), "--gpu-name", TARGET,
                            "--cluster", spec], capture_output=True, text=True, timeout=120)
        assert (r.returncode, r.stderr.splitlines()) == (2, [f"error: invalid --cluster '{spec}': " + r.stderr.split(
            "': ", 1)[1].strip()]) and message in r.stderr
    port = free_port()   # nothing listens there
    env = {**ENV, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}
    r = subprocess.run([str(BIN / "tileiras-async"), "compile", str(example), "--gpu-name", TARGET, "--out-dir",
                        str(tmp_path), "--cluster", f"tcp://127.0.0.1:{port}"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}"), r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.glob("*.cubin"))


def test_parse_cluster():
    assert parse_cluster("local:3") == ("local", 3)
    assert parse_cluster("tcp://10.0.0.1:8786") == ("address", "tcp://10.0.0.1:8786")
    with pytest.raises(ValueError):
        parse_cluster("local:x")


@pytest.mark.slow
@requires_corpus
def test_whole_corpus_on_a_cluster(cluster, tmp_path):
    cluster.add_worker("w1")
    cluster.add_worker("w2")
    want = reference(ALL, tmp_path / "j1")
    rc, events, err = finish(compile_cli(ALL, tmp_path / "dask", "--cluster", cluster.address), [], timeout=3000)
    assert cubins(ALL, tmp_path / "dask") == want, err
