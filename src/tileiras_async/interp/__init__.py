"""A reference interpreter for cuda_tile kernels: runs any kernel on the CPU with numpy.

    from tileiras_async import run_kernel
    report = run_kernel("k.tileirbc", (8,), [a, b, c])   # arrays updated in place

See README.md beside this file for the model and the documented deviations from
the hardware, and runner.run_kernel for the interface.
"""
from .errors import (
                     ArgumentError,
                     AssertionFault,
                     EngineNotImplemented,
                     InterpError,
                     KernelFault,
                     MemoryFault,
                     UndefinedBehavior,
                     UnsupportedOp,
)
from .runner import InvalidModule, RunReport, run_kernel

__all__ = [
    "ArgumentError", "AssertionFault", "EngineNotImplemented", "InterpError", "InvalidModule",
    "KernelFault", "MemoryFault", "RunReport", "UndefinedBehavior", "UnsupportedOp", "run_kernel",
]
