"""`tileiras-async`: the batch front door (subcommands)."""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..frontend import SUPPORTED_VERSIONS
from ..inputs import EXIT_USAGE, exit_table
from .common import guarded_main

USAGE_EXIT_CODES = exit_table({EXIT_USAGE: "usage errors"})   # list-versions, and no command at all


def _cmd_disasm(args) -> int:
    from .disasm import disassemble_many
    return disassemble_many(args.files)


def _cmd_versions(_args) -> int:
    sys.stdout.write("".join(f"{v}\n" for v in SUPPORTED_VERSIONS))
    return 0


def build_parser(prog: str = "tileiras-async") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Batch front end of tileiras-async.")
    p.add_argument("--version", action="version", version=f"tileiras-async {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("disasm", help="read, verify and print bytecode files as cuda_tile text")
    d.add_argument("files", nargs="+", metavar="FILE|DIR")
    d.set_defaults(func=_cmd_disasm)
    v = sub.add_parser("list-versions", help="print the bytecode versions this build reads")
    v.set_defaults(func=_cmd_versions)
    from ..pipeline.cli_compile import add_compile_parser
    compile_parser = add_compile_parser(sub)
    _add_remark_options(compile_parser)
    _add_dashboard(sub, compile_parser)
    from .run import add_run_parser
    add_run_parser(sub)
    from .opt import add_opt_parser
    add_opt_parser(sub)
    from .serve import add_serve_parser
    add_serve_parser(sub)
    from ..cache.cli import add_cache_parser
    add_cache_parser(sub)
    return p


# the drop-in's remark options, which the batch `compile` takes as they are (remarks on stderr, one line each)
BATCH_REMARK_OPTIONS = ("remarks", "remarks-passed", "remarks-missed", "remarks-failed", "remarks-analysis")


def _add_remark_options(parser: argparse.ArgumentParser) -> None:
    """The drop-in's --remarks* options (names, values, help from its option table) on `compile`."""
    from .tileiras import OPTIONS
    for opt in OPTIONS:
        if opt.name in BATCH_REMARK_OPTIONS:
            choices = [v for v, _ in opt.values] if opt.kind == "enum" else None
            parser.add_argument(f"--{opt.name}", choices=choices, default=None, metavar=None if choices else
                                opt.meta.upper() + "[,...]", help=f"as the drop-in's: {opt.help[0].lower()}{opt.help[1:]}")


def _add_dashboard(sub, compile_parser: argparse.ArgumentParser) -> None:
    """`tui` and `compile --tui`, from the dashboard package when it is installed.  The command line
    joins the two: the pipeline never imports the dashboard, the dashboard imports the pipeline."""
    try:
        from tileiras_tui import cli as dashboard
    except ImportError:
        return
    dashboard.add_tui_parser(sub)
    compile_parser.set_defaults(run_live=dashboard.run_live)


def run(argv: list[str], prog: str = "tileiras-async") -> int:
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse reports usage errors itself
        return int(e.code or 0) and EXIT_USAGE
    return args.func(args)


def exit_tables() -> dict[str, dict[int, str]]:
    """Every command's exit statuses (besides 0), under the name README's exit-code tables give it
    (`tileiras-async`'s subcommands by their own name)."""
    from ..cache.cli import EXIT_CODES as cache
    from ..pipeline.config import EXIT_CODES as batch
    from .serve import EXIT_CODES as serve
    from . import disasm, opt, run as run_cli, tileiras
    return {"tileiras": tileiras.EXIT_CODES, "tileirdisasm-async": disasm.EXIT_CODES, "compile": batch,
            "tui": batch, "run": run_cli.EXIT_CODES, "disasm": disasm.MANY_EXIT_CODES,
            "list-versions": USAGE_EXIT_CODES, "serve": serve, "cache": cache, "opt": opt.EXIT_CODES}


def main(argv: list[str] | None = None, prog: str = "tileiras-async") -> int:
    return guarded_main(lambda a: run(a, prog), sys.argv[1:] if argv is None else argv, prog)


if __name__ == "__main__":
    sys.exit(main())
