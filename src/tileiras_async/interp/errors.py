"""Errors raised by the reference interpreter.

Every failure is an `InterpError`; its `str()` is one line (the CLI prints it
after ``error: ``).  Faults found while a kernel runs (`KernelFault`) carry the
op, its source location and the tile block once the interpreter has attached
them, so the message says where the kernel went wrong.
"""
from __future__ import annotations

EXIT_ENGINES_DISAGREE = 7   # run_kernel(engine="both"): the engines' outputs differ (engines.EnginesDisagree)


class InterpError(Exception):
    """Base class: anything that stops `run_kernel`."""

    exit_code = 6


class ArgumentError(InterpError, ValueError):
    """Wrong number/kind/dtype/rank of kernel arguments, a bad grid or a bad kernel choice."""

    exit_code = 2


class EngineNotImplemented(InterpError, NotImplementedError):
    """An engine that exists in the interface but not yet in this build."""

    exit_code = 4


class UnsupportedOp(InterpError):
    """The module uses an op (or an op form) the interpreter cannot execute."""

    exit_code = 4


class KernelFault(InterpError):
    """A fault while a kernel runs (memory error, failed assert, undefined access, ...)."""

    def __init__(self, message: str, *, op: str | None = None, loc: str | None = None,
                 block: tuple[int, int, int] | None = None):
        super().__init__(message)
        self.message = message
        self.op = op
        self.loc = loc
        self.block = block
        self.stdout = ""  # device output printed before the fault

    def attach(self, op: str, loc: str | None, block: tuple[int, int, int] | None) -> None:
        if self.op is None:
            self.op = op
            self.loc = loc
            self.block = block

    def __str__(self) -> str:
        where = []
        if self.op is not None:
            where.append(f"'{self.op}'")
        if self.loc:
            where.append(f"at {self.loc}")
        if self.block is not None:
            where.append("in tile block ({}, {}, {})".format(*self.block))
        prefix = " ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


class MemoryFault(KernelFault):
    """An access outside every argument array / global / allocation, or into a gap or read-only array."""


class AssertionFault(KernelFault):
    """A `cuda_tile.assert` whose condition had a false element."""


class UndefinedBehavior(KernelFault):
    """A violated precondition the hardware would not diagnose (bad view index, violated assume, ...)."""
