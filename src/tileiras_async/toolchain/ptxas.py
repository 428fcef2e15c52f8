"""Turning PTX into a cubin with NVIDIA's ptxas, invoked the way the real tileiras invokes it.

Tracing the real tool (a logging fake ptxas under $CUDA_ROOT) shows, for --gpu-name=sm_90:
    ptxas -arch sm_90a <tmp>.ptx -o <tmp>.bin --opt-level 3 --enable-extended-smem=true
          --nv-host=<tmp>.o -uumn
--enable-extended-smem=true lets a kernel declare more than 48 KiB of static shared memory (up to the
per-CTA opt-in limit of its architecture); without it ptxas stops at "uses too much shared data (..., 0xc000
max)".  We pass it always (`PtxasOptions.extended_smem`): for a kernel within 48 KiB the cubin is byte-identical
with and without it.  The other two go with the host object (the x86-64 launch hooks that fill tensor maps,
codegen/host_object.py): with `PtxasOptions.host_object` set, ptxas gets that invocation exactly and embeds
the object as the cubin's `.nv.host` section.  Anything else goes in `PtxasOptions.extra`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..targets import ARCH_FOR_TARGET
from .discovery import Toolchain, default_toolchain
from .errors import ToolchainError
from .harness import StrPath, ToolResult, run_tool, run_tool_async
from .tempdirs import temporary_directory

# The exit status our CLI uses when ptxas fails; the real tileiras exits 5 in that case too.
PTXAS_FAILED_EXIT = 5

DEFAULT_TIMEOUT_S = 120.0

# The flag the real tool always passes; see the module docstring.
EXTENDED_SMEM_FLAG = "--enable-extended-smem=true"

PTXAS_ARCH_FOR_TARGET = ARCH_FOR_TARGET  # --gpu-name -> -arch (see tileiras_async.targets)

_PTX_NAME = "kernel.ptx"
_CUBIN_NAME = "kernel.cubin"
_HOST_NAME = "kernel.host.o"
HOST_OBJECT_FLAGS = ("--nv-host={}", "-uumn")   # after EXTENDED_SMEM_FLAG


class UnsupportedTarget(ToolchainError):
    """A --gpu-name the real tool does not offer."""


class PtxasError(ToolchainError):
    """ptxas rejected the PTX (or could not finish). `rc` is the exit status the CLI should use;
    `ptxas_rc` is what ptxas itself returned; `stderr` is ptxas's diagnostics, verbatim."""

    def __init__(self, message: str, *, stderr: str, ptxas_rc: int | None, rc: int = PTXAS_FAILED_EXIT):
        super().__init__(message)
        self.rc = rc
        self.ptxas_rc = ptxas_rc
        self.stderr = stderr


@dataclass(frozen=True)
class PtxasOptions:
    arch: str
    opt_level: int = 3
    extra: tuple[str, ...] = ()
    host_object: bytes | None = None    # the launch hooks' object, embedded as `.nv.host`
    extended_smem: bool = True   # EXTENDED_SMEM_FLAG, as the real tool passes it


def arch_for_target(target: str) -> str:
    """The -arch value the real tileiras gives ptxas for `--gpu-name=target`."""
    if target in PTXAS_ARCH_FOR_TARGET:
        return PTXAS_ARCH_FOR_TARGET[target]
    # Accept an already-mapped name so callers need not track which form they hold.
    if target in PTXAS_ARCH_FOR_TARGET.values():
        return target
    choices = ", ".join(PTXAS_ARCH_FOR_TARGET)
    raise UnsupportedTarget(f"unsupported target '{target}' (choose one of: {choices})")


def ptxas_argv(ptxas_path: StrPath, ptx_file: StrPath, out_file: StrPath, opts: PtxasOptions,
               host_file: StrPath | None = None) -> list[str]:
    host = [f.format(host_file) for f in HOST_OBJECT_FLAGS] if host_file is not None else []
    return [
        str(ptxas_path),
        "-arch",
        opts.arch,
        str(ptx_file),
        "-o",
        str(out_file),
        "--opt-level",
        str(opts.opt_level),
        *((EXTENDED_SMEM_FLAG,) if opts.extended_smem or host else ()),
        *host,
        *opts.extra,
    ]


def assemble(
    ptx_text: str,
    opts: PtxasOptions,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    toolchain: Toolchain | None = None,
) -> bytes:
    """Assemble PTX text into cubin bytes, or raise PtxasError carrying ptxas's stderr."""
    return assemble_with_report(ptx_text, opts, timeout=timeout, toolchain=toolchain)[0]


def assemble_with_report(
    ptx_text: str,
    opts: PtxasOptions,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    toolchain: Toolchain | None = None,
) -> tuple[bytes, str]:
    """Like assemble, also returning what ptxas printed (its resource report when opts.extra has -v)."""
    ptxas = (toolchain or default_toolchain()).ptxas
    with temporary_directory("tileiras-ptxas-") as workdir:
        ptx_file, out_file, host_file = _stage(ptx_text, opts, Path(workdir))
        result = run_tool(ptxas_argv(ptxas, ptx_file, out_file, opts, host_file), timeout=timeout, cwd=workdir)
        return _collect(result, out_file, timeout), result.stderr.decode("utf-8", "replace")


async def assemble_async(
    ptx_text: str,
    opts: PtxasOptions,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    toolchain: Toolchain | None = None,
) -> bytes:
    """The trio counterpart of assemble, for the async pipeline."""
    ptxas = (toolchain or default_toolchain()).ptxas
    with temporary_directory("tileiras-ptxas-") as workdir:
        ptx_file, out_file, host_file = _stage(ptx_text, opts, Path(workdir))
        argv = ptxas_argv(ptxas, ptx_file, out_file, opts, host_file)
        result = await run_tool_async(argv, timeout=timeout, cwd=workdir)
        return _collect(result, out_file, timeout)


def _stage(ptx_text: str, opts: PtxasOptions, workdir: Path) -> tuple[Path, Path, Path | None]:
    ptx_file = workdir / _PTX_NAME
    ptx_file.write_text(ptx_text, encoding="utf-8")
    host_file = None
    if opts.host_object is not None:
        host_file = workdir / _HOST_NAME
        host_file.write_bytes(opts.host_object)
    return ptx_file, workdir / _CUBIN_NAME, host_file


def _collect(result: ToolResult, out_file: Path, timeout: float) -> bytes:
    stderr = result.stderr.decode("utf-8", "replace")
    if result.timed_out:
        raise PtxasError(f"ptxas timed out after {timeout:g} s", stderr=stderr, ptxas_rc=None)
    if result.rc != 0:
        raise PtxasError(f"ptxas failed with exit status {result.rc}", stderr=stderr, ptxas_rc=result.rc)
    try:
        return out_file.read_bytes()
    except FileNotFoundError:
        raise PtxasError("ptxas reported success but wrote no cubin", stderr=stderr, ptxas_rc=0) from None
