"""`tileiras-async run`: run a kernel from the command line (arguments in, results out as .npz).

    tileiras-async run MODULE.tileirbc --grid X[,Y[,Z]] --args IN.npz --out OUT.npz
                       [--kernel SYMBOL] [--engine interpret|emulate|both] [--gpu-name G] [-O N]
                       [--stats FILE.json] [--ptx KERNEL.ptx [--host-object KERNEL.o]]
                       [--memcheck strict|device]

IN.npz holds the arguments in cuTile parameter order under the names "0", "1",
...: arrays for array parameters, 0-d arrays for scalars.  OUT.npz receives the
final contents of every array argument under the same names; it is written
atomically and only when the run succeeds.  Device output (print_tko) goes to
stdout, then one line per array written (its name, shape and dtype; with
``--engine both`` also that the engines agree and their largest absolute
difference).  Failures print one ``error: ...`` line on stderr.  With the emulator,
--stats writes the executed thread-instructions by class (emu/stats.py) and
--ptx runs the given PTX (e.g. NVIDIA's) with the module's parameter ABI
instead of compiling the module (emu.runner.run_ptx).  --memcheck device runs the
emulator as a GPU without a sanitizer: a read just past an allocation (within its
2 MiB page, emu/memory.py) returns 0xff bytes and prints one ``warning: ...`` line
on stderr per kernel and argument instead of faulting.

Exit codes: 0 ok, else one of EXIT_CODES (below; README's table lists them).
"""
from __future__ import annotations

import io
import sys
import zipfile

import numpy as np

from ..inputs import EXIT_BAD_INPUT, EXIT_CODEGEN, EXIT_CONFIG as EXIT_ARGS, EXIT_INTERNAL, EXIT_USAGE
from ..inputs import output_dir_problem
from ..interp.errors import EXIT_ENGINES_DISAGREE, ArgumentError, InterpError, KernelFault
from ..emu.memory import MEMCHECK_MODES
from .common import exit_table

EXIT_FAULT = KernelFault.exit_code   # the emulator's faults (emu.errors.EmuError) exit the same
EXIT_CODES = exit_table({   # README's `run` table lists them (tests/test_exit_codes.py)
    EXIT_USAGE: "unreadable module file, usage error",
    EXIT_ARGS: "bad arguments, grid, kernel choice or .npz, an unwritable OUT.npz, no ptxas / libdevice for the "
               "emulator",
    EXIT_BAD_INPUT: "bytecode that does not parse or verify",
    EXIT_INTERNAL: "an op or engine this build cannot run; internal error",
    EXIT_CODEGEN: "code that cannot be lowered or that ptxas rejects (emulate, both)",
    EXIT_FAULT: "a fault while the kernel ran: out-of-bounds access (--memcheck device: a write, or a read beyond "
                "the allocation's page), failed assert, undefined behaviour",
    EXIT_ENGINES_DISAGREE: "--engine both: the interpreter and the emulator disagree",
})


def add_run_parser(sub) -> None:
    r = sub.add_parser("run", help="run a kernel on the CPU (reference interpreter)",
                       description="Run one kernel of a Tile IR bytecode module on the CPU.")
    r.add_argument("module", metavar="MODULE", help="Tile IR bytecode file (.tileirbc)")
    r.add_argument("--grid", required=True, metavar="X[,Y[,Z]]", help="number of tile blocks per axis")
    r.add_argument("--args", required=True, metavar="IN.npz", dest="args_npz",
                   help='kernel arguments named "0", "1", ... in cuTile parameter order')
    r.add_argument("--out", "-o", required=True, metavar="OUT.npz",
                   help="where to write the array arguments after the run")
    r.add_argument("--kernel", metavar="SYMBOL", help="the entry to run when the module has several")
    r.add_argument("--engine", default="interpret", choices=["interpret", "emulate", "both"],
                   help="interpret (tile-IR reference), emulate (compile and run our PTX), or both compared")
    r.add_argument("--gpu-name", "--arch", default="sm_100", metavar="G",
                   help="the target the emulated code is compiled for (default sm_100)")
    r.add_argument("-O", "--opt-level", type=int, default=3, choices=range(4), metavar="N",
                   help="optimization level 0-3 of the emulated code (default 3)")
    r.add_argument("--stats", metavar="FILE.json",
                   help="emulate/both: write the executed thread-instructions by class (memory, tensor core, "
                        "barrier, shuffle, other) as JSON")
    r.add_argument("--ptx", metavar="KERNEL.ptx",
                   help="emulate/both: run this PTX (e.g. NVIDIA's) with the module's parameters instead of "
                        "compiling the module")
    r.add_argument("--host-object", metavar="KERNEL.o",
                   help="with --ptx: NVIDIA's host object beside the PTX; its launch hook fills the PTX's tensor "
                        "maps (TMA; runs x86-64 code, as the CUDA driver does)")
    r.add_argument("--memcheck", choices=MEMCHECK_MODES, metavar="{strict,device}",
                   help="emulate/both: strict (default): any access outside an allocation is a fault (exit 6), as "
                        "under compute-sanitizer; device: as a GPU without a sanitizer, a read past the end of an "
                        "allocation but within the rest of its 2 MiB page returns 0xff bytes and prints one "
                        "'warning: ...' line per kernel and argument; writes outside, and reads further away, "
                        "still fault")
    r.set_defaults(func=run_command)

    def one_line_error(message: str):
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    r.error = one_line_error  # type: ignore[method-assign]


def _error(msg: str, rc: int) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return rc


def parse_grid(text: str) -> tuple[int, ...]:
    parts = text.split(",")
    try:
        dims = tuple(int(p.strip()) for p in parts)
    except ValueError:
        raise ArgumentError(f"invalid --grid '{text}': expected X[,Y[,Z]] with positive integers") from None
    if not 1 <= len(dims) <= 3:
        raise ArgumentError(f"invalid --grid '{text}': expected 1 to 3 extents")
    return dims


def load_args(path: str) -> list[np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise ArgumentError(f"cannot read arguments '{path}': no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ArgumentError(f"cannot read arguments '{path}': {e}") from None
    names = list(arrays)
    if sorted(names, key=lambda s: (len(s), s)) != [str(i) for i in range(len(names))]:
        bad = [n for n in names if not (n.isdigit() and int(n) < len(names) and str(int(n)) == n)]
        raise ArgumentError(f"arguments in '{path}' must be named 0, 1, ..., {len(names) - 1} "
                            f"(cuTile parameter order); unexpected name(s): {', '.join(bad) or '(gap)'}")
    out = []
    for i in range(len(names)):
        a = arrays[str(i)]
        if a.dtype.kind not in "biuf":
            raise ArgumentError(f"argument {i} in '{path}' has unsupported dtype {a.dtype}")
        out.append(np.array(a, copy=True))
    return out


def run_command(args) -> int:
    from ..frontend import InputError, read_input_file
    from ..toolchain import write_atomic
    from ..toolchain.errors import ToolchainError
    from ..driver import CodegenUnavailable
    from ..emu.errors import EmuError
    from ..engines import EnginesDisagree, run_kernel
    from ..frontend import EXIT_PTXAS
    from ..toolchain import PtxasError
    from ..interp.runner import load_module
    from ..emu.runner import read_ptx_file
    from ..emu.stats import write_stats

    from ..targets import GPU_NAMES

    try:
        data = read_input_file(args.module)
    except InputError as e:
        return _error(e.lines[0].removeprefix("error: "), e.rc)
    if args.gpu_name not in GPU_NAMES:
        return _error(f"unsupported --gpu-name '{args.gpu_name}' (choose from: {', '.join(GPU_NAMES)})", EXIT_ARGS)
    problem = output_dir_problem(args.out)
    if problem:   # said before the kernel runs, not after
        return _error(f"cannot write {args.out}: {problem}", EXIT_ARGS)
    emulator_only = next((f for f, given in (("--stats", args.stats), ("--ptx", args.ptx),
                                             ("--memcheck", args.memcheck)) if given), None)
    if args.engine == "interpret" and emulator_only:
        return _error(f"{emulator_only} needs the emulator: --engine emulate or both", EXIT_USAGE)
    if args.host_object and not args.ptx:
        return _error("--host-object goes with --ptx", EXIT_USAGE)
    try:
        grid = parse_grid(args.grid)
        module = load_module(data)
        kernel_args = load_args(args.args_npz)
        ptx = read_ptx_file(args.ptx) if args.ptx else None

        def emit(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()
        report = run_kernel(module, grid, kernel_args, kernel=args.kernel, engine=args.engine, stdout=emit,
                            gpu_name=args.gpu_name, opt_level=args.opt_level, ptx=ptx,
                            host_object=args.host_object, memcheck=args.memcheck or "strict")
    except KernelFault as e:
        return _error(str(e), e.exit_code)
    except InterpError as e:
        return _error(str(e), e.exit_code)
    except EmuError as e:
        return _error(str(e), e.exit_code)
    except EnginesDisagree as e:
        print_warnings(e.report.warnings)
        for m in e.report.mismatches:
            print(f"mismatch: {m}; largest abs difference {_number(e.report.max_abs_diff[m.argument])}",
                  file=sys.stderr)
        return _error("the interpreter and the emulator disagree", e.exit_code)
    except CodegenUnavailable as e:
        from ..failures import lowering_notes
        rc = _error(str(e), EXIT_CODEGEN)
        for note in lowering_notes(e, args.gpu_name):
            print(f"note: {note.message}", file=sys.stderr)
        return rc
    except PtxasError as e:
        return _error(f"ptxas failed: {e.stderr.strip()}", EXIT_PTXAS)
    except ToolchainError as e:  # no ptxas / libdevice: the message says what to install
        return _error(e.message, EXIT_ARGS)
    except InputError as e:
        return _error(e.lines[0].removeprefix("error: "), e.rc)
    print_warnings(report.warnings)
    outputs = {str(i): kernel_args[i] for i in report.array_args}
    buf = io.BytesIO()
    np.savez(buf, **outputs)
    try:
        write_atomic(args.out, buf.getvalue())
        if args.stats:
            write_stats(args.stats, report.kernel, report.grid, report.counters)
    except ToolchainError as e:
        return _error(e.message, EXIT_ARGS)
    sys.stdout.write("".join(f"{line}\n" for line in summary_lines(outputs, report)))
    return 0


def print_warnings(warnings) -> None:
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)


def summary_lines(outputs: dict[str, np.ndarray], report) -> list[str]:
    """One line per array written to OUT.npz: its name there, shape and dtype; after `--engine both`,
    that the engines agree and the largest |emulated - interpreted| of that output."""
    diffs = getattr(report, "max_abs_diff", None)
    lines = []
    for name, array in outputs.items():
        line = f"output {name}: shape {tuple(array.shape)} {array.dtype}"
        if diffs is not None:
            line += f", engines agree (largest abs difference {_number(diffs[int(name)])})"
        lines.append(line)
    return lines


def _number(x: float) -> str:
    return f"{x:.6g}"
