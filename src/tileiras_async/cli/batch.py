"""`tileiras-async`: the batch front door (subcommands)."""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..frontend import SUPPORTED_VERSIONS, InputError, read_input_file
from .common import guarded_main, print_lines


def _cmd_disasm(args) -> int:
    from .disasm import disassemble
    rc = 0
    for path in args.files:
        try:
            text = disassemble(read_input_file(path))
        except InputError as e:
            print_lines([f"{path}: {line}" for line in e.lines] if len(args.files) > 1 else e.lines)
            rc = max(rc, e.rc)
            continue
        if len(args.files) > 1:
            sys.stdout.write(f"// {path}\n")
        sys.stdout.write(text)
    return rc


def _cmd_versions(_args) -> int:
    sys.stdout.write("".join(f"{v}\n" for v in SUPPORTED_VERSIONS))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tileiras-async", description="Batch front end of tileiras-async.")
    p.add_argument("--version", action="version", version=f"tileiras-async {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("disasm", help="read, verify and print bytecode files as cuda_tile text")
    d.add_argument("files", nargs="+")
    d.set_defaults(func=_cmd_disasm)
    v = sub.add_parser("list-versions", help="print the bytecode versions this build reads")
    v.set_defaults(func=_cmd_versions)
    from ..pipeline.cli_compile import add_compile_parser
    compile_parser = add_compile_parser(sub)
    _add_dashboard(sub, compile_parser)
    from ..interp.cli import add_run_parser
    add_run_parser(sub)
    return p


def _add_dashboard(sub, compile_parser: argparse.ArgumentParser) -> None:
    """`tui` and `compile --tui`, from the dashboard package when it is installed.  The command line
    joins the two: the pipeline never imports the dashboard, the dashboard imports the pipeline."""
    try:
        from tileiras_tui import cli as dashboard
    except ImportError:
        return
    dashboard.add_tui_parser(sub)
    compile_parser.set_defaults(run_live=dashboard.run_live)


def run(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse reports usage errors itself
        return int(e.code or 0) and 1
    return args.func(args)


def main(argv: list[str] | None = None) -> int:
    return guarded_main(run, sys.argv[1:] if argv is None else argv, "tileiras-async")


if __name__ == "__main__":
    sys.exit(main())
