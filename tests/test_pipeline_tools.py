"""The pipeline's harness for ptxas / nvdisasm: the real tool's timeout, exec-failure and
signal semantics, stderr verbatim; and the priority slot limiter."""
from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest
import trio

from tileiras_async.pipeline import tools
from tileiras_async.pipeline.pool import PrioritySlots
from tileiras_async.stages import AssembleRequest, CompileOptions
from tileiras_async.toolchain import Toolchain


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def run(coro_fn, *args, **kw):
    return trio.run(lambda: coro_fn(*args, **kw))


def test_success_passes_stdout_and_stderr(tmp_path):
    tool = script(tmp_path / "t", "echo out; echo 'warn: x' >&2\n")
    out = run(tools.run_external, "ptxas", [str(tool)], timeout=10)
    assert out.ok and out.stdout == b"out\n" and out.stderr == "warn: x\n" and out.rc == 0


def test_nonzero_exit_keeps_stderr_verbatim(tmp_path):
    text = "ptxas /tmp/x.ptx, line 7; error   : Unknown symbol 'foo'\nptxas fatal   : Ptx assembly aborted\n"
    tool = script(tmp_path / "t", f"printf '%s' \"{text}\" >&2; exit 255\n")
    out = run(tools.run_external, "ptxas", [str(tool)], timeout=10)
    assert not out.ok
    assert out.message == "ptxas failed with exit code 255"
    assert out.stderr == text


def test_timeout_kills_the_child_and_its_group(tmp_path):
    pidfile = tmp_path / "pids"
    tool = script(tmp_path / "t", f"sleep 300 & echo $! > {pidfile}; echo $$ >> {pidfile}; wait\n")
    t0 = time.monotonic()
    out = run(tools.run_external, "ptxas", [str(tool)], timeout=3)  # (time for a loaded machine to start sh)
    assert time.monotonic() - t0 < 15
    assert not out.ok and out.timed_out
    assert out.message == "ptxas: Child timed out after 3 s (killed)"
    pids = list(map(int, pidfile.read_text().split()))
    assert len(pids) == 2
    for pid in pids:
        assert not _alive(pid), f"process {pid} survived the timeout"


@pytest.mark.parametrize("rc,expected", [
    (127, "ptxas could not be executed (exit status 127: command not found)"),
    (126, "ptxas could not be executed (exit status 126: Program could not be executed)"),
])
def test_126_127_could_not_be_executed(tmp_path, rc, expected):
    tool = script(tmp_path / "t", f"exit {rc}\n")
    assert run(tools.run_external, "ptxas", [str(tool)], timeout=10).message == expected


def test_exec_failure_could_not_be_executed(tmp_path):
    missing = tmp_path / "no-such-ptxas"
    out = run(tools.run_external, "ptxas", [str(missing)], timeout=10)
    assert out.message == "ptxas could not be executed: No such file or directory"
    bad_interp = tmp_path / "t"
    bad_interp.write_text("#!/nonexistent/interpreter\n")
    bad_interp.chmod(0o755)
    out = run(tools.run_external, "ptxas", [str(bad_interp)], timeout=10)
    assert out.message.startswith("ptxas could not be executed: ")
    not_exec = tmp_path / "plain"
    not_exec.write_text("x")
    out = run(tools.run_external, "ptxas", [str(not_exec)], timeout=10)
    assert out.message == "ptxas could not be executed: Permission denied"


def test_signals_are_named(tmp_path):
    tool = script(tmp_path / "t", "kill -SEGV $$\n")
    out = run(tools.run_external, "ptxas", [str(tool)], timeout=10)
    assert out.rc == -signal.SIGSEGV
    assert out.message == "ptxas was terminated by signal SIGSEGV (Segmentation fault)"


def test_cancellation_kills_the_tool(tmp_path):
    pidfile = tmp_path / "pid"
    tool = script(tmp_path / "t", f"echo $$ > {pidfile}; exec sleep 300\n")

    async def main():
        with trio.move_on_after(1):
            await tools.run_external("ptxas", [str(tool)], timeout=100)

    run(main)
    assert not _alive(int(pidfile.read_text()))


def _fake_root(tmp_path: Path, body: str) -> Toolchain:
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    script(root / "bin" / "ptxas", body)
    script(root / "bin" / "nvdisasm", body)
    return Toolchain(env={"CUDA_ROOT": str(root), "PATH": ""}, sys_path=[])


def test_assemble_reports_ptxas_failure_with_exit_5(tmp_path):
    tc = _fake_root(tmp_path, "echo 'ptxas fatal   : boom' >&2; exit 1\n")
    req = AssembleRequest(".version 8.6\n", CompileOptions("sm_100"), timeout_s=10)
    res = run(tools.assemble, req, tc)
    assert not res.ok and res.exit_code == 5
    assert [d.message for d in res.diagnostics if d.severity == "error"] == ["ptxas failed with exit code 1"]
    assert [d.message for d in res.diagnostics if d.severity == "note"] == [
        "to fix: ptxas rejected PTX that tileiras-async generated: this is a compiler bug; please report it with "
        "the .tileirbc file (`tileiras-async compile --keep-ptx` keeps the PTX)"]
    assert res.tool_stderr == "ptxas fatal   : boom\n"


def test_assemble_passes_the_real_tools_arguments(tmp_path):
    log = tmp_path / "argv"
    tc = _fake_root(tmp_path, f'echo "$@" > {log}; while [ $# -gt 0 ]; do [ "$1" = -o ] && printf CUBIN > "$2"; '
                              f'shift; done\n')
    res = run(tools.assemble, AssembleRequest("ptx", CompileOptions("sm_90", opt_level=2), timeout_s=10), tc)
    assert res.ok and res.cubin == b"CUBIN"
    argv = log.read_text().split()
    assert argv[:2] == ["-arch", "sm_90a"] and argv[2].endswith("kernel.ptx")
    assert argv[3:] == ["-o", argv[4], "--opt-level", "2", "--enable-extended-smem=true"]
    assert argv[4].endswith("kernel.cubin")


def test_assemble_without_ptxas_names_the_search(tmp_path):
    tc = Toolchain(env={"PATH": ""}, sys_path=[])
    res = run(tools.assemble, AssembleRequest("ptx", CompileOptions("sm_100")), tc)
    assert not res.ok and res.exit_code == 2
    assert res.diagnostics[0].message.startswith("cannot find ptxas (NVIDIA's nvidia-cuda-nvcc wheel: pip install 'tileiras-async[cuda]', or set CUDA_HOME to a CUDA 13 toolkit); searched: $CUDA_ROOT (unset)")


def test_disassemble_runs_nvdisasm_c(tmp_path):
    log = tmp_path / "argv"
    tc = _fake_root(tmp_path, f'echo "$@" > {log}; echo SASS\n')
    out = run(tools.disassemble, b"\x7fELF", timeout=10, toolchain=tc)
    assert out.ok and out.stdout == b"SASS\n"
    assert log.read_text().split()[0] == "-c"


def test_priority_slots_serve_lowest_first():
    order = []

    async def main():
        slots = PrioritySlots(1)
        async with trio.open_nursery() as n:
            async def take(prio, tag, hold):
                async with slots.acquire(prio):
                    order.append(tag)
                    await trio.sleep(hold)
            n.start_soon(take, (9,), "first", 0.2)
            await trio.sleep(0.05)
            for prio, tag in [((3, 1), "parse"), ((0, 5), "assemble"), ((2, 0), "lower"), ((0, 1), "assemble-early")]:
                n.start_soon(take, prio, tag, 0)
            await trio.sleep(0.05)
            # a cancelled waiter must not hold a slot
            with trio.move_on_after(0.01):
                async with slots.acquire((0, 0)):
                    order.append("never")
        assert slots.busy == 0

    trio.run(main)
    assert order == ["first", "assemble-early", "assemble", "lower", "parse"]


def _alive(pid: int, grace_s: float = 5.0) -> bool:
    """Whether `pid` is still running after `grace_s`: SIGKILL is delivered asynchronously, so a
    process killed a moment ago may not have exited yet on a loaded machine."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.05)
