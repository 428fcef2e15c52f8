"""Running a kernel on the CPU: the interpreter, the emulator of our own PTX, or both compared.

    run_kernel(module, grid, args, *, kernel=None, engine="interpret", gpu_name="sm_100", opt_level=3)

engine="interpret" runs the tile-IR reference interpreter; "emulate" compiles the module through the
normal pipeline (ptxas included) and executes the PTX; "both" runs the two on separate copies of the
arguments, leaves the emulator's results in the caller's arrays and reports, per output, the first
element where they differ.  `ptx=` (emulate, both) runs that PTX text instead of compiling the module (e.g.
NVIDIA's for the same module; the module still gives the parameter ABI: emu.runner.run_ptx).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .interp.errors import EXIT_ENGINES_DISAGREE, ArgumentError
from .interp.runner import ENGINES, RunReport, check_grid
from .interp.runner import run_kernel as _interpret


@dataclass
class Mismatch:
    argument: int
    index: tuple[int, ...]
    interpreted: object
    emulated: object

    def __str__(self) -> str:
        return (f"argument {self.argument}: first mismatch at {list(self.index)}: interpreter "
                f"{self.interpreted!r}, emulator {self.emulated!r}")


@dataclass
class BothReport(RunReport):
    mismatches: list[Mismatch] = field(default_factory=list)
    max_abs_diff: dict[int, float] = field(default_factory=dict)   # per array argument, NaNs that agree count 0
    interpreter: RunReport | None = None
    emulator: RunReport | None = None


class EnginesDisagree(Exception):
    exit_code = EXIT_ENGINES_DISAGREE

    def __init__(self, report: BothReport):
        self.report = report
        super().__init__("; ".join(str(m) for m in report.mismatches))


def run_kernel(module: Any, grid: Sequence[int], args: list[Any], *, kernel: str | None = None,
               engine: str = "interpret", gpu_name: str = "sm_100", opt_level: int = 3,
               stdout: Callable[[str], None] | None = None, ptx: str | None = None,
               host_object: str | None = None, memcheck: str = "strict") -> RunReport:
    """See `tileiras_async.run_kernel` (module: a bytecode path, its bytes or a read Module); `ptx`,
    `host_object`, `memcheck` (the emulator's): see emu.runner.run_ptx."""
    if engine not in ENGINES:
        raise ArgumentError(f"unknown engine '{engine}' (expected one of {', '.join(ENGINES)})")
    given = _GivenPtx(ptx, host_object, memcheck)
    if engine == "interpret":
        if ptx is not None:
            raise ArgumentError("given PTX runs in the emulator: choose the engine emulate or both")
        if memcheck != "strict":
            raise ArgumentError(f"memcheck '{memcheck}' is the emulator's: choose the engine emulate or both")
        return _interpret(module, grid, args, kernel=kernel, gpu_name=gpu_name, opt_level=opt_level,
                          stdout=stdout)
    if engine == "emulate":
        return _emulate(module, grid, args, kernel, gpu_name, opt_level, given)
    return _both(module, grid, args, kernel, gpu_name, opt_level, stdout, given)


@dataclass(frozen=True)
class _GivenPtx:
    """PTX to emulate instead of compiling the module (None: compile), the host object beside it, and the
    emulator's memory-check mode."""
    ptx: str | None = None
    host_object: str | None = None
    memcheck: str = "strict"


def _emulate(module, grid, args, kernel, gpu_name, opt_level, given: _GivenPtx = _GivenPtx()) -> RunReport:
    from .emu.runner import run_compiled, run_ptx
    dims = check_grid(grid)
    t0 = time.perf_counter()
    if given.ptx is not None:
        run = run_ptx(module, given.ptx, dims, args, kernel=kernel, host_object=given.host_object,
                      check_races=True, memcheck=given.memcheck)
    else:
        run = run_compiled(module, dims, args, kernel=kernel, gpu_name=gpu_name, opt_level=opt_level,
                           check_races=True, memcheck=given.memcheck)
    counters = {k: v for k, v in run.report.as_dict().items() if isinstance(v, int)}
    return RunReport("emulate", run.kernel, dims, time.perf_counter() - t0, counters, "", tuple(run.arrays),
                     run.report.warnings)


def _copy(a):
    return np.array(a, copy=True) if isinstance(a, np.ndarray) else a


# Engines may sum in different orders (tensor cores, tree reductions), so floats compare within a few
# ulps of the output's scale rather than bit for bit; integers must be equal.
_FLOAT_TOL = {2: 2e-3, 4: 1e-4, 8: 1e-9}


def _first_mismatch(i: int, got: np.ndarray, want: np.ndarray) -> Mismatch | None:
    if got.dtype.kind in "fc":
        tol = _FLOAT_TOL.get(got.dtype.itemsize, 1e-4)
        finite = np.abs(want[np.isfinite(want)])
        scale = float(finite.max()) if finite.size else 0.0
        same = np.isclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)
    else:
        same = got == want
    if same.all():
        return None
    idx = tuple(int(x) for x in np.argwhere(~same)[0])
    return Mismatch(i, idx, want[idx].item(), got[idx].item())


def _max_abs_diff(got: np.ndarray, want: np.ndarray) -> float:
    """The largest |emulated - interpreted| of one output (inf where only one side is NaN or infinite)."""
    if got.size == 0:
        return 0.0
    a, b = got.astype(np.float64), want.astype(np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(a - b))
    return float(np.nan_to_num(diff, nan=np.inf).max())


def _both(module, grid, args, kernel, gpu_name, opt_level, stdout, given: _GivenPtx) -> BothReport:
    copies = [_copy(a) for a in args]
    interpreted = _interpret(module, grid, copies, kernel=kernel, gpu_name=gpu_name, opt_level=opt_level,
                             stdout=stdout)
    emulated = _emulate(module, grid, args, kernel, gpu_name, opt_level, given)
    mismatches = []
    diffs = {}
    for i in emulated.array_args:
        got, want = np.asarray(args[i]), np.asarray(copies[i])
        diffs[i] = _max_abs_diff(got, want)
        m = _first_mismatch(i, got, want)
        if m is not None:
            mismatches.append(m)
    counters = {f"interpret.{k}": v for k, v in interpreted.counters.items()}
    counters.update({f"emulate.{k}": v for k, v in emulated.counters.items()})
    report = BothReport("both", emulated.kernel, emulated.grid, interpreted.time_s + emulated.time_s, counters,
                        interpreted.stdout, emulated.array_args, emulated.warnings, mismatches=mismatches,
                        max_abs_diff=diffs, interpreter=interpreted, emulator=emulated)
    if mismatches:
        raise EnginesDisagree(report)
    return report
