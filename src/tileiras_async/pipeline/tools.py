"""ptxas and nvdisasm, run by the supervisor with the real tileiras's harness semantics.

NVIDIA's tileiras runs ptxas through LLVM's `sys::ExecuteAndWait`: a SIGALRM deadline, and on
expiry the child is killed and reaped with wait4 ("Child timed out"); exit status 127/126 mean
the program "could not be executed"; a child killed by a signal is reported by the signal's
name; the tool's own stderr is passed through verbatim.  We run tools in the supervisor, not
in the workers, through the toolchain's async harness: each child has its own process group,
which a timeout or a cancellation (Ctrl-C, SIGTERM) kills as a whole, so a hung ptxas can
neither outlive the batch nor tie up a worker.
"""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ..codegen.host_object import ptxas_options
from ..stages import AssembleRequest, CubinModule, StageDiagnostic, assembled, trims_registers
from ..toolchain import Toolchain, ToolchainError, default_toolchain, ptxas_argv, run_tool_async
from ..toolchain.errors import ToolRunError
from ..toolchain.occupancy import OccupancyTrim
from ..toolchain.tempdirs import temporary_directory
from .config import EXIT_CODEGEN, EXIT_CONFIG

EXIT_TOOL_FAILED = EXIT_CODEGEN    # as the real tool: ptxas failures exit 5
EXIT_TOOL_MISSING = EXIT_CONFIG    # no ptxas/nvdisasm to be found (the toolchain's "cannot find" message)

PTX_NAME = "kernel.ptx"   # the same names stages.assemble uses, so cubins are byte-identical
HOST_NAME = "kernel.host.o"
CUBIN_NAME = "kernel.cubin"


@dataclass(frozen=True)
class ToolOutcome:
    ok: bool
    message: str = ""          # one line, "" when ok
    stdout: bytes = b""
    stderr: str = ""           # verbatim
    rc: int | None = None      # exit status; negative: killed by that signal; None: never ran
    timed_out: bool = False
    elapsed_s: float = 0.0


def describe_status(tool: str, rc: int, timed_out: bool, timeout: float) -> str:
    """The one-line verdict on a finished tool run that did not succeed."""
    if timed_out:
        return f"{tool}: Child timed out after {timeout:g} s (killed)"
    if rc == 127:
        return f"{tool} could not be executed (exit status 127: command not found)"
    if rc == 126:
        return f"{tool} could not be executed (exit status 126: Program could not be executed)"
    if rc < 0:
        return f"{tool} was terminated by signal {signal_name(-rc)}"
    return f"{tool} failed with exit code {rc}"


def signal_name(signum: int) -> str:
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"{signum}"
    text = signal.strsignal(sig)
    return f"{sig.name} ({text})" if text else sig.name


async def run_external(tool: str, argv: list[str], *, timeout: float, cwd: str | None = None,
                       memory_limit: int = 0) -> ToolOutcome:
    t0 = time.monotonic()
    try:
        result = await run_tool_async(argv, timeout=timeout, cwd=cwd, memory_limit=memory_limit)
    except ToolRunError as e:  # execve failed: missing file, not executable, bad interpreter
        reason = e.message.split(": ", 1)[-1]
        return ToolOutcome(False, f"{tool} could not be executed: {reason}", elapsed_s=time.monotonic() - t0)
    stderr = result.stderr.decode("utf-8", "replace")
    if result.ok:
        return ToolOutcome(True, stdout=result.stdout, stderr=stderr, rc=0, elapsed_s=result.elapsed_s)
    if result.memory_exceeded:
        message = (f"{tool} killed: resident memory {result.peak_rss / (1 << 20):.0f} MiB exceeded the limit of "
                   f"{memory_limit / (1 << 20):.0f} MiB")
    else:
        message = describe_status(tool, result.rc, result.timed_out, timeout)
    return ToolOutcome(False, message, result.stdout, stderr, result.rc, result.timed_out, result.elapsed_s)


def _error(message: str) -> StageDiagnostic:
    return StageDiagnostic("error", message)


async def assemble(req: AssembleRequest, toolchain: Toolchain | None = None, memory_limit: int = 0) -> CubinModule:
    """The assemble stage (AssembleRequest -> CubinModule), run with the async harness."""
    from ..targets import target
    t0 = time.monotonic()
    try:
        tgt = target(req.options.gpu_name)
        ptxas = (toolchain or default_toolchain()).ptxas
    except ToolchainError as e:
        return CubinModule(False, diagnostics=[_error(e.message)], exit_code=EXIT_TOOL_MISSING,
                           elapsed_s=time.monotonic() - t0)
    opts = ptxas_options(req.ptx, tgt, req.options.opt_level)
    with temporary_directory("tileiras-ptxas-") as workdir:
        ptx_file, out_file = Path(workdir, PTX_NAME), Path(workdir, CUBIN_NAME)
        host_file = Path(workdir, HOST_NAME) if opts.host_object is not None else None
        if host_file is not None:
            host_file.write_bytes(opts.host_object)

        async def run(ptx: str) -> tuple[ToolOutcome, bytes | None]:
            ptx_file.write_text(ptx, encoding="utf-8")
            out_file.unlink(missing_ok=True)
            argv = ptxas_argv(ptxas, ptx_file, out_file, opts, host_file)
            outcome = await run_external("ptxas", argv, timeout=req.timeout_s, cwd=workdir, memory_limit=memory_limit)
            return outcome, (out_file.read_bytes() if outcome.ok and out_file.exists() else None)

        outcome, cubin = await run(req.ptx)
        if not outcome.ok:
            from ..failures import ptxas_notes
            notes = ptxas_notes(outcome.stderr, req.ptx, req.options.gpu_name) if outcome.rc and outcome.rc > 0 else []
            return CubinModule(False, diagnostics=[_error(outcome.message), *notes], tool_stderr=outcome.stderr,
                               exit_code=EXIT_TOOL_FAILED, elapsed_s=time.monotonic() - t0)
        if cubin is None:
            return CubinModule(False, diagnostics=[_error("ptxas reported success but wrote no cubin")],
                               tool_stderr=outcome.stderr, exit_code=EXIT_TOOL_FAILED,
                               elapsed_s=time.monotonic() - t0)
        ptx, caps = req.ptx, []
        if trims_registers(req.options):
            trim = OccupancyTrim(req.options.gpu_name, req.ptx, cubin)
            while (text := trim.next_ptx()) is not None:
                capped = (await run(text))[1]
                if capped is None:
                    break       # a capped run that fails leaves the code as first assembled
                trim.feed(capped)
            ptx, cubin, caps = trim.result()
    return assembled(req, cubin, ptx, caps, time.monotonic() - t0, outcome.stderr)


async def disassemble(cubin: bytes, *, timeout: float, toolchain: Toolchain | None = None) -> ToolOutcome:
    """`nvdisasm -c` on a cubin (for --keep-sass): the SASS text is the outcome's stdout."""
    try:
        nvdisasm = (toolchain or default_toolchain()).nvdisasm
    except ToolchainError as e:
        return ToolOutcome(False, e.message)
    with temporary_directory("tileiras-nvdisasm-") as workdir:
        path = Path(workdir, CUBIN_NAME)
        path.write_bytes(cubin)
        return await run_external("nvdisasm", [str(nvdisasm), "-c", str(path)], timeout=timeout, cwd=workdir)
