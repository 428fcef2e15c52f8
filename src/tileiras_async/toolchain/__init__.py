"""NVIDIA's external tools: finding them, running them safely, and assembling PTX with ptxas."""
from .discovery import (
    ENV_ROOT_VARS,
    Toolchain,
    default_toolchain,
    find_libdevice,
    find_tool,
    tool_version,
    wheel_roots,
)
from .errors import OutputWriteError, ToolchainError, ToolNotFound, ToolRunError
from .harness import ToolResult, atomic_output, run_tool, run_tool_async, write_atomic
from .ptxas import (
    EXTENDED_SMEM_FLAG,
    PTXAS_ARCH_FOR_TARGET,
    PTXAS_FAILED_EXIT,
    PtxasError,
    PtxasOptions,
    UnsupportedTarget,
    arch_for_target,
    assemble,
    assemble_async,
    ptxas_argv,
)

__all__ = [
    "ENV_ROOT_VARS",
    "EXTENDED_SMEM_FLAG",
    "OutputWriteError",
    "PTXAS_ARCH_FOR_TARGET",
    "PTXAS_FAILED_EXIT",
    "PtxasError",
    "PtxasOptions",
    "ToolNotFound",
    "ToolResult",
    "ToolRunError",
    "Toolchain",
    "ToolchainError",
    "UnsupportedTarget",
    "arch_for_target",
    "assemble",
    "assemble_async",
    "atomic_output",
    "default_toolchain",
    "find_libdevice",
    "find_tool",
    "ptxas_argv",
    "run_tool",
    "run_tool_async",
    "tool_version",
    "wheel_roots",
    "write_atomic",
]
