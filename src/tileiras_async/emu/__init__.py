"""PTX emulator: execute the PTX our compiler emits on the CPU, vectorised with numpy.

    >>> from tileiras_async.emu import DeviceMemory, emulate_ptx
    >>> mem = DeviceMemory()
    >>> x = mem.alloc_array(np.arange(128, dtype=np.float32))
    >>> rep = emulate_ptx(ptx, "kernel", grid=(1, 1, 1), block=(128, 1, 1), params=[x, 128], memory=mem)

`emulate_ptx` parses the PTX (cached), links the kernel (registers, variables,
inlined calls, basic blocks), then runs every CTA of the grid (several CTAs per
numpy batch) and returns an `EmuReport`.  Global memory is a `DeviceMemory`;
every global access is bounds-checked against its allocations (`MemoryFault`
names the kernel, the PTX line, the block and thread and the address).

`tileiras_async.emu.runner.run_compiled` compiles a cuda_tile module with our
compiler (ptxas included) and runs it on numpy arrays with cuTile's calling
convention.
"""
from __future__ import annotations

from .emulate import EmuReport, emulate_ptx, load_program
from .errors import (
    BarrierError,
    ConvergenceError,
    EmuError,
    LaunchError,
    MemoryFault,
    PtxSyntaxError,
    TrapError,
    UnsupportedInstruction,
)
from .memory import DeviceMemory

__all__ = [
    "BarrierError", "ConvergenceError", "DeviceMemory", "EmuError", "EmuReport", "LaunchError", "MemoryFault",
    "PtxSyntaxError", "TrapError", "UnsupportedInstruction", "emulate_ptx", "load_program", "run_compiled",
]


def run_compiled(*args, **kwargs):
    """See `tileiras_async.emu.runner.run_compiled`."""
    from .runner import run_compiled as _rc
    return _rc(*args, **kwargs)
