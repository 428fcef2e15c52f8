"""`tileirdisasm`-compatible disassembler: bytecode in, cuda_tile text out (byte-identical to NVIDIA's).

One file behaves as NVIDIA's tool; several files or a directory (its *.tileirbc, as `compile` takes
them) print each file's text after a `// PATH` line."""
from __future__ import annotations

import os
import sys

from .. import __version__
from ..frontend import InputError, load, read_input_file
from ..inputs import EXIT_USAGE
from .common import exit_table, guarded_main, print_lines
from .options import Option, OptionError, OptionParser, generic_options, help_asked, preview_option

PROG = "tileirdisasm"
TRAILER = "failed to read provided Tile IR bytecode"
EXIT_FAILED = 2      # the real disassembler's exit code for usage and file errors
EXIT_BAD_INPUT = 3
EXIT_CODES = exit_table({   # `tileirdisasm-async` (README's table lists them: tests/test_exit_codes.py)
    EXIT_USAGE: "option errors; with several files: a file that cannot be read",
    EXIT_FAILED: "no input file, or it cannot be read (NVIDIA's status for both)",
    EXIT_BAD_INPUT: "bytecode that does not parse or verify",
})
# `tileiras-async disasm FILES|DIRS...`: the several-files form only
MANY_EXIT_CODES = exit_table({EXIT_USAGE: "a file that cannot be read, a directory without .tileirbc files, "
                                          "usage errors",
                              EXIT_BAD_INPUT: "bytecode that does not parse or verify"})

OPTIONS = [
    Option("g", "Alias for --print-debug-info", alias_of="print-debug-info"),
    *generic_options(),
    preview_option(),
    Option("print-debug-info", "Annotate disassembly with debugging information, if present."),
    Option("version", "Display the version of this program"),
]
PARSER = OptionParser(PROG, "tileirdisasm: Cuda Tile IR disassembler (tileiras-async)",
                      "tileirdisasm [options] <tile bytecode file>", OPTIONS)


def disassemble(data: bytes, debug_info: bool = False) -> str:
    """Bytes -> text, or InputError with the real disassembler's diagnostics.

    `debug_info` (-g) appends each op's `loc(#alias)` and the alias definitions.
    """
    from ..ir.printer import print_module
    module = load(data, TRAILER, with_debug_locations=True)
    return print_module(module, debug_info=debug_info)


def disassemble_many(paths: list[str], debug_info: bool = False) -> int:
    """Files or directories (their *.tileirbc): with more than one file, each one's text comes
    under a `// PATH` line and its errors are prefixed with its path; the exit status is the worst."""
    from ..pipeline.config import expand_inputs
    files, errors = expand_inputs(paths)
    print_lines(errors)
    rc = EXIT_USAGE if errors else 0
    many = len(files) > 1 or any(os.path.isdir(p) for p in paths)
    for path in files:
        try:
            text = disassemble(read_input_file(path), debug_info=debug_info)
        except InputError as e:
            print_lines([f"{path}: {line}" for line in e.lines] if many else e.lines)
            rc = max(rc, e.rc)
            continue
        if many:
            sys.stdout.write(f"// {path}\n")
        sys.stdout.write(text)
    return rc


def run(argv: list[str]) -> int:
    try:
        opts = PARSER.parse(argv)
    except OptionError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    hidden = help_asked(opts)
    if hidden is not None:
        sys.stdout.write(PARSER.help_text(hidden))
        return 0
    if opts.get("version"):
        sys.stdout.write(f"tileirdisasm: Cuda Tile IR disassembler (tileiras-async {__version__})\n")
        return 0
    if not opts.positionals:
        sys.stdout.write(PARSER.help_text())
        print("error: no input file provided\n", file=sys.stderr)
        return EXIT_FAILED
    if len(opts.positionals) > 1 or os.path.isdir(opts.positionals[0]):
        return disassemble_many(opts.positionals, debug_info=bool(opts.get("print-debug-info")))
    try:
        data = read_input_file(opts.positionals[0])
    except InputError as e:
        # the real disassembler prefixes the reader's "error: ..." once more
        print_lines([f"error: {line}" for line in e.lines])
        return EXIT_FAILED
    try:
        text = disassemble(data, debug_info=bool(opts.get("print-debug-info")))
    except InputError as e:
        print_lines(e.lines)
        return EXIT_BAD_INPUT
    sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return guarded_main(run, sys.argv[1:] if argv is None else argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
