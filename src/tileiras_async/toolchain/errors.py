"""Errors raised while finding or running NVIDIA's tools.

Every error renders as a single `error: ...` line so the CLI can print `str(exc)` as is and
never needs to show a traceback.
"""
from __future__ import annotations


class ToolchainError(Exception):
    """Something about the external toolchain went wrong; `message` is the text without prefix."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"error: {self.message}"


# what provides each tool, for the "how to get it" part of ToolNotFound
PROVIDERS = {"ptxas": "nvidia-cuda-nvcc", "nvdisasm": "nvidia-cuda-nvdisasm", "libdevice": "nvidia-nvvm"}


class ToolNotFound(ToolchainError):
    """A tool or data file was not found; `searched` lists every place looked at, in order.

    The message says how to get it before where we looked: the package's [cuda] extra (NVIDIA's
    wheel for that tool) or a CUDA 13 toolkit named by CUDA_HOME."""

    def __init__(self, name: str, searched: tuple[str, ...]):
        self.name = name
        self.searched = searched
        key = "libdevice" if name.startswith("libdevice") else name
        wheel = PROVIDERS.get(key)
        how = (f" (NVIDIA's {wheel} wheel: pip install 'tileiras-async[cuda]', or set CUDA_HOME to a CUDA 13 "
               f"toolkit)" if wheel else "")
        super().__init__(f"cannot find {name}{how}; searched: {', '.join(searched)}")


class ToolRunError(ToolchainError):
    """A tool could not be started at all (not executable, vanished, bad interpreter)."""


class OutputWriteError(ToolchainError):
    """An output file could not be written; the previous file, if any, is left as it was."""

    def __init__(self, path: object, cause: OSError):
        self.path = path
        self.cause = cause
        super().__init__(f"cannot write {path}: {cause.strerror or cause}")
