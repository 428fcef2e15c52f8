"""Errors raised by the PTX emulator.

Every failure is an `EmuError` whose `str()` is one line.  Errors found while a
kernel runs carry where it happened: the kernel, the PTX line and text of the
instruction, and (for faults) the block and thread ids, so a message reads like
compute-sanitizer's memcheck report.
"""
from __future__ import annotations


class EmuError(Exception):
    """Base class: anything that stops `emulate_ptx`."""

    exit_code = 6

    def __init__(self, message: str, *, line: int | None = None, text: str | None = None,
                 kernel: str | None = None):
        super().__init__(message)
        self.message = message
        self.line = line
        self.text = text
        self.kernel = kernel
        self.block: tuple[int, int, int] | None = None
        self.thread: tuple[int, int, int] | None = None

    def where(self) -> str:
        parts = []
        if self.kernel:
            parts.append(f"kernel {self.kernel}")
        if self.line is not None:
            parts.append(f"PTX line {self.line}" + (f" ({self.text})" if self.text else ""))
        if self.block is not None:
            parts.append(f"block {self.block}")
        if self.thread is not None:
            parts.append(f"thread {self.thread}")
        return ", ".join(parts)

    def __str__(self) -> str:
        w = self.where()
        return f"{self.message} [{w}]" if w else self.message


class PtxSyntaxError(EmuError):
    """The PTX text could not be parsed (or names something undeclared)."""

    exit_code = 4


class UnsupportedInstruction(EmuError):
    """An instruction, modifier or operand form the emulator does not implement."""

    exit_code = 4


class UnsupportedLaunch(UnsupportedInstruction):
    """A launch the emulator cannot set up (tensor maps without the host object that fills them, or on a
    host that cannot run that object's code)."""


class LaunchError(EmuError, ValueError):
    """Bad launch: unknown kernel, wrong parameter count, bad grid/block."""

    exit_code = 2


class MemoryFault(EmuError):
    """An out-of-bounds, misaligned or otherwise invalid memory access (memcheck)."""

    def __init__(self, message: str, *, space: str = "global", address: int | None = None,
                 size: int | None = None, lane: int | None = None, **kw):
        super().__init__(message, **kw)
        self.space = space
        self.address = address
        self.size = size
        self.lane = lane


class ConvergenceError(EmuError):
    """A warp-collective instruction executed by a set of lanes other than the one it names."""


class BarrierError(EmuError):
    """A barrier that can never complete (divergent or mismatched barriers, deadlock)."""


class TrapError(EmuError):
    """The kernel executed `trap` / `brkpt`."""
