"""What a batch run is asked to do, and how inputs become modules and output names.

Kept free of trio and the worker machinery so the CLI can build its parser cheaply.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..inputs import EXIT_BAD_INPUT, EXIT_CODEGEN, EXIT_CONFIG, EXIT_INTERNAL, exit_table
from ..inputs import EXIT_USAGE as EXIT_UNREADABLE

if TYPE_CHECKING:
    from ..remarks import RemarkFilter
    from ..stages import PrintIR
    from ..toolchain import Toolchain
    from .messages import FaultSpec

INPUT_SUFFIX = ".tileirbc"
DEFAULT_STAGE_TIMEOUT_S = 600.0
DEFAULT_MEMORY_LIMIT = 4 << 30
# A batch writes many files; the working directory is no place to scatter them unasked.
DEFAULT_OUT_DIR = os.path.join("build", "tileiras-async")

SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}   # 128 + the signal, as a shell reports it
EXIT_CANCELLED = SIGNAL_EXIT["SIGINT"]   # a module cancelled through BatchControl (the dashboard's cancel key)
# `compile` (and the dashboard's `tui`): the batch exits with the largest of its modules' statuses.  README's
# batch table lists them (tests/test_exit_codes.py)
EXIT_CODES = exit_table({
    EXIT_UNREADABLE: "unreadable input; usage errors",
    EXIT_CONFIG: "invalid option values, an output that cannot be written, a missing ptxas/nvdisasm, no terminal "
                 "for the dashboard",
    EXIT_BAD_INPUT: "bytecode that does not parse or verify",
    EXIT_INTERNAL: "a worker that crashed, was killed, ran out of memory or time; an internal error",
    EXIT_CODEGEN: "code that cannot be lowered; ptxas failing, timing out or out of memory",
    SIGNAL_EXIT["SIGHUP"]: "SIGHUP",
    SIGNAL_EXIT["SIGINT"]: "SIGINT (Ctrl-C), or a module cancelled from the dashboard",
    SIGNAL_EXIT["SIGTERM"]: "SIGTERM",
})


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass
class BatchConfig:
    inputs: list[str]
    targets: list[str]
    jobs: int = field(default_factory=default_jobs)
    opt_level: int = 3
    out_dir: str = DEFAULT_OUT_DIR        # made by the first file written: a batch that writes none leaves none
    stage_timeout_s: float = DEFAULT_STAGE_TIMEOUT_S
    memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT
    keep_ptx: bool = False
    keep_sass: bool = False
    schedules: bool = False                # run the schedule stage; events + <name>.<gpu>.schedule.json
    num_stages: int = 0                    # software-pipeline stages of K-loops (0: the compiler's default)
    register_caps: bool = False            # --register-caps (stages.trims_registers)
    print_ir: "PrintIR | None" = None      # tile-GPU IR snapshots to take (KernelIRDumped events)
    remarks: "RemarkFilter | None" = None  # --remarks*: the remarks KernelFinished carries
    fault: "FaultSpec | None" = None
    toolchain: "Toolchain | None" = None   # None: the default search (tests point it at fake tools)
    handle_signals: bool = True            # SIGINT/SIGTERM/SIGHUP cancel the run (main thread only)
    cluster: str | None = None             # run the stages on Dask: "tcp://HOST:PORT" or "local:N" (dask_pool.py)
    cache_dir: str | None = None           # the compile cache (cache/); None: compile everything
    read_special: bool = False             # read FIFOs and devices named as inputs (else: refused)
    max_input_bytes: int = 256 << 20       # a larger input is refused before it is read (frontend.MAX_INPUT_BYTES)


def out_dir_problem(path: str) -> str | None:
    """Why `path` cannot be (or become) the output directory, or None.  Nothing is created: the
    directory is made when the first output is written."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return os.strerror(errno.ENOTDIR)
    if not os.access(probe, os.W_OK | os.X_OK):
        return os.strerror(errno.EACCES)
    return None


def ensure_dir_of(path: str) -> None:
    """Create the directory a file is about to be written into (OSError when it cannot be)."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)


def output_stem(path: str) -> str:
    name = os.path.basename(path)
    return name[: -len(INPUT_SUFFIX)] if name.endswith(INPUT_SUFFIX) else name


def expand_inputs(args: list[str]) -> tuple[list[str], list[str]]:
    """FILES|DIRS -> (module paths in order, error lines).  A directory contributes its
    *.tileirbc files (not recursively), sorted; a path named twice is compiled once."""
    paths: list[str] = []
    errors: list[str] = []
    seen: set[str] = set()
    for arg in args:
        if os.path.isdir(arg):
            found = sorted(str(Path(arg) / p.name) for p in Path(arg).iterdir()
                           if p.name.endswith(INPUT_SUFFIX) and p.is_file())
            if not found:
                errors.append(f"error: no {INPUT_SUFFIX} files in directory '{arg}'")
        else:
            found = [arg]
        for p in found:
            key = os.path.realpath(p)
            if key not in seen:
                seen.add(key)
                paths.append(p)
    stems: dict[str, str] = {}
    for p in paths:
        stem = output_stem(p)
        if stem in stems:
            errors.append(f"error: '{p}' and '{stems[stem]}' would write the same output files "
                          f"({stem}.<gpu-name>.cubin)")
        stems.setdefault(stem, p)
    return paths, errors
