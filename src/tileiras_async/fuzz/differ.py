"""Differential runs: one input through our drop-ins and through an oracle's tools, and the verdict.

Ours run in a forked child per case (the parent has imported and warmed the compiler once, so a
case costs a fork, not a Python start-up), in its own process group with a deadline; the oracle's
tools run as subprocesses.  Both `tileiras` (full compile: exit code, and no output file on
failure) and `tileirdisasm` (exit code, and the text where both accept) are compared.

Verdict kinds, worst first:
    internal       ours exited 4, died by a signal or printed a traceback
    timeout        ours ran past the deadline
    partial_output ours failed but left an output file
    accept_reject  one side accepted, the other rejected
    exit_code      both rejected, with different exit codes
    disasm_text    both disassembled, to different text
    oracle_crash   the oracle died by a signal (no exit code to match; ours must not crash)
    version        the header names a version the oracle reads and this build does not (13.5)
    message        same decision and exit code, different diagnostics (informational)
    same
"""
from __future__ import annotations

import hashlib
import io
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..bytecode.opspec import MAX_MINOR

ORDER = ("internal", "timeout", "partial_output", "accept_reject", "exit_code", "disasm_text", "oracle_crash",
         "version", "message", "same")
MISMATCHES = frozenset({"internal", "timeout", "partial_output", "accept_reject", "exit_code", "disasm_text"})
INTERNAL_EXIT = 4


@dataclass
class Run:
    rc: int | None                 # None: killed at the deadline; negative: died by that signal
    stdout: bytes = b""
    stderr: str = ""
    output: bool = False           # whether the output file exists afterwards
    elapsed_s: float = 0.0


@dataclass
class Verdict:
    kind: str
    tool: str                      # tileiras | tileirdisasm | "" (both same)
    ours: dict = field(default_factory=dict)
    theirs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Oracle:
    tileiras: Path
    tileirdisasm: Path
    env: dict


def _summary(run: Run) -> dict:
    return {"rc": run.rc, "stderr": run.stderr[-2000:], "output": run.output,
            "stdout_sha256": hashlib.sha256(run.stdout).hexdigest()}


class Differ:
    def __init__(self, oracle: Oracle, *, gpu_name: str = "sm_90", timeout_s: float = 60.0,
                 oracle_timeout_s: float = 120.0, compile_rejected: bool = True):
        self.oracle = oracle
        # False: when both disassemblers reject an input with exit 3, the compilers (which read it with
        # the same readers first) are not run, and the input counts as agreed for them too
        self.compile_rejected = compile_rejected
        self.gpu_name = gpu_name
        self.timeout_s = timeout_s
        self.oracle_timeout_s = oracle_timeout_s
        self.workdir = Path(tempfile.mkdtemp(prefix="tileiras-fuzz-"))
        _warm(gpu_name)

    def close(self) -> None:
        import shutil
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- one case
    def compare(self, data: bytes) -> list[Verdict]:
        """One verdict per tool (the worst first when sorted by ORDER)."""
        path = self.workdir / "case.tileirbc"
        path.write_bytes(data)
        verdicts = []
        for tool in ("tileirdisasm", "tileiras"):
            out = self.workdir / f"{tool}.out"
            if tool == "tileiras" and not self.compile_rejected and \
                    verdicts[0].ours.get("rc") == verdicts[0].theirs.get("rc") == 3:
                verdicts.append(Verdict("same", tool, {"rc": 3, "inferred": True}, {"rc": 3, "inferred": True}))
                continue
            theirs = self._theirs(tool, path, out)
            ours = self._ours(tool, path, out)
            verdicts.append(self._judge(tool, data, ours, theirs))
        return verdicts

    def _argv(self, tool: str, path: Path, out: Path) -> list[str]:
        if tool == "tileiras":
            return ["--gpu-name", self.gpu_name, "-o", str(out), str(path)]
        return [str(path)]

    def _theirs(self, tool: str, path: Path, out: Path) -> Run:
        out.unlink(missing_ok=True)
        exe = self.oracle.tileiras if tool == "tileiras" else self.oracle.tileirdisasm
        t0 = time.monotonic()
        try:
            proc = subprocess.run([str(exe), *self._argv(tool, path, out)], capture_output=True,
                                  env=self.oracle.env, timeout=self.oracle_timeout_s, cwd=self.workdir)
        except subprocess.TimeoutExpired as e:
            return Run(None, e.stdout or b"", (e.stderr or b"").decode("utf-8", "replace"), out.exists(),
                       time.monotonic() - t0)
        return Run(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"), out.exists(),
                   time.monotonic() - t0)

    def _ours(self, tool: str, path: Path, out: Path) -> Run:
        out.unlink(missing_ok=True)
        return run_forked(tool, self._argv(tool, path, out), self.timeout_s, self.workdir, out)

    def _judge(self, tool: str, data: bytes, ours: Run, theirs: Run) -> Verdict:
        def verdict(kind: str) -> Verdict:
            return Verdict(kind, tool, _summary(ours), _summary(theirs))

        if ours.rc is None:
            return verdict("timeout")
        if ours.rc == INTERNAL_EXIT or ours.rc < 0 or "Traceback (most recent call last)" in ours.stderr:
            return verdict("internal")
        if ours.rc != 0 and ours.output:
            return verdict("partial_output")
        if theirs.rc is None or theirs.rc < 0 or theirs.rc > 128:
            return verdict("oracle_crash")
        if _oracle_only_version(data) and theirs.rc == 0 and ours.rc != 0:
            return verdict("version")
        if (ours.rc == 0) != (theirs.rc == 0):
            return verdict("accept_reject")
        if ours.rc != theirs.rc:
            return verdict("exit_code")
        if tool == "tileirdisasm" and ours.rc == 0 and ours.stdout != theirs.stdout:
            return verdict("disasm_text")
        if ours.stderr != theirs.stderr and (tool == "tileirdisasm" or ours.rc != 0):
            return verdict("message")   # a compile that both reject: its diagnostics too
        return verdict("same")


def _oracle_only_version(data: bytes) -> bool:
    """A header version newer than this build reads (the oracle's 13.5)."""
    return len(data) > 9 and data[8] == 13 and data[9] > MAX_MINOR


def _warm(gpu_name: str) -> None:
    """Import and initialise the compiler in the parent, so forked cases start warm."""
    from ..cli import disasm, tileiras  # noqa: F401
    from .. import driver  # noqa: F401
    from ..codegen.nvptx import warm_up
    warm_up((gpu_name,), 3)


def run_forked(tool: str, argv: list[str], timeout_s: float, cwd: Path, out: Path | None = None) -> Run:
    """Our drop-in `tool` on argv, in a forked child with its own process group, killed (with
    whatever it started) at the deadline."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
        pid = os.fork()
        if pid == 0:   # the child: never returns
            rc = INTERNAL_EXIT
            try:
                os.setpgid(0, 0)
                os.chdir(cwd)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(so.fileno(), 1)
                os.dup2(se.fileno(), 2)
                # a fresh interpreter's streams on the new descriptors (a test runner may have
                # replaced sys.stdout with a capture object that writes nowhere near fd 1)
                for fd, name in ((1, "stdout"), (2, "stderr")):
                    like = getattr(sys, f"__{name}__") or sys.__stderr__
                    setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), line_buffering=True,
                                                        encoding=like.encoding, errors=like.errors))
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                # the compiler itself on every case: no cache hits (nor thousands of mutants filed in
                # the user's cache) and no compile server
                os.environ.update(TILEIRAS_ASYNC_NO_CACHE="1", TILEIRAS_ASYNC_SERVER="off")
                from ..cli import disasm, tileiras
                main = tileiras.main if tool == "tileiras" else disasm.main
                rc = main(argv)
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001 - a traceback is the finding
                import traceback
                traceback.print_exc()
                sys.stderr.flush()
            os._exit(rc if isinstance(rc, int) else INTERNAL_EXIT)
        rc = _wait(pid, timeout_s)
        so.seek(0)
        se.seek(0)
        return Run(rc, so.read(), se.read().decode("utf-8", "replace"),
                   out is not None and out.exists(), time.monotonic() - t0)


def _wait(pid: int, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None
        select.select([], [], [], delay)
        delay = min(delay * 2, 0.05)
