"""tileiras-async: a Python reimplementation of NVIDIA's tileiras (CUDA TileIR optimizing assembler).

The public API:

    compile_module(source, gpu_name, ...)  -> CompileResult   bytecode -> cubin, in this process
    run_kernel(module, grid, args, ...)    -> RunReport       a kernel on the CPU (interpreter / emulator)

The batch pipeline (`tileiras_async.pipeline`) and the stage messages (`tileiras_async.stages`) are
typed msgspec structs; the package ships `py.typed`.
"""
from __future__ import annotations

import os

# `typing` costs the drop-in's cache hit more than the rest of its imports: only type checkers (and the
# docs, which read this block) import it here; `Engine` is made on first use at run time
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Callable, Literal

    from .interp.runner import RunReport
    from .ir.core import Module
    from .stages import CompileResult

    Engine = Literal["interpret", "emulate", "both"]

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "Engine":
        from typing import Literal
        globals()["Engine"] = engine = Literal["interpret", "emulate", "both"]
        return engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compile_module(source: str | os.PathLike[str] | bytes, gpu_name: str, *, opt_level: int = 3,
                   lineinfo: bool = False, device_debug: bool = False, schedules: bool = False,
                   remarks: bool = False) -> CompileResult:
    """Compile a Tile IR bytecode module (a path or its bytes) for one GPU, in this process.

    Returns a `tileiras_async.stages.CompileResult`: `ok`, `cubin`, `ptx`, the loop schedules and
    optimization remarks when asked for, and on failure the `diagnostics` (an error, then `note`s
    that say where and why), ptxas's stderr and the exit code NVIDIA's tool would give.
    ptxas comes from the usual search (`CUDA_HOME`, ..., NVIDIA's wheels: `pip install
    'tileiras-async[cuda]'`); a missing one raises `toolchain.ToolNotFound` naming what to install.
    """
    from .stages import CompileOptions, compile_in_process
    if isinstance(source, bytes):
        path, data = "<bytes>", source
    else:
        path = os.fspath(source)
        with open(path, "rb") as f:
            data = f.read()
    options = CompileOptions(gpu_name, opt_level, lineinfo=lineinfo, device_debug=device_debug)
    return compile_in_process(path, data, options, with_schedules=schedules, with_remarks=remarks)


def run_kernel(module: str | os.PathLike[str] | bytes | Module, grid: Sequence[int], args: list[Any], *,
               kernel: str | None = None, engine: Engine = "interpret", gpu_name: str = "sm_100",
               opt_level: int = 3, stdout: Callable[[str], None] | None = None) -> RunReport:
    """Run one kernel of a cuda_tile module on the CPU; arrays in `args` are updated in place.

    `module` is a bytecode path, its bytes or a read `Module`; `grid` the tile blocks per axis (1 to 3
    extents); `args` the kernel's arguments in cuTile parameter order (numpy arrays of any strides,
    numpy/Python scalars).  `engine`: "interpret" (the tile-IR reference interpreter), "emulate"
    (compile through the normal pipeline, ptxas included, and run our PTX on the emulator with
    memory and race checking: emu/races.py) or "both" (raises `engines.EnginesDisagree` with the first mismatch per output).
    `stdout` receives the kernel's printed output (print_tko).
    """
    from .engines import run_kernel as _run
    return _run(module, grid, args, kernel=kernel, engine=engine, gpu_name=gpu_name, opt_level=opt_level,
                stdout=stdout)


__all__ = ["__version__", "Engine", "compile_module", "run_kernel"]
