"""`tileiras-async opt FILE [--passes P1,P2,...] [--gpu-name G]`: IR text (tile-GPU, or cuda_tile as our
disassembler prints it) through named passes."""
from __future__ import annotations

import sys

from ..inputs import EXIT_USAGE, exit_table

EXIT_CODES = exit_table({EXIT_USAGE: "input that cannot be read or does not parse, an unknown pass, a pass that "
                                     "fails on the input, usage errors"})


def add_opt_parser(sub) -> None:
    from ..tilegpu.passes import PASS_NAMES
    p = sub.add_parser("opt", help="read IR text (a --print-ir-* section, or a cuda_tile kernel as tileirdisasm "
                                       "prints it), run passes, print the tile-GPU IR")
    p.add_argument("file", metavar="FILE", help="one IR dump section or one cuda_tile kernel ('-': standard input)")
    p.add_argument("--passes", default="", metavar="P1,P2,...",
                   help="passes to run, in this order (none: print what was read); one of: " + ", ".join(PASS_NAMES))
    p.add_argument("--gpu-name", default=None, metavar="G", help="the target (default: the one the input names)")
    p.set_defaults(func=run_opt)


def run_opt(args) -> int:
    from ..tilegpu.opt import OptError, opt_text
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"error: cannot read {args.file}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
        return EXIT_USAGE
    passes = [p for p in args.passes.split(",") if p]
    try:
        out = opt_text(text, "<stdin>" if args.file == "-" else args.file, passes, args.gpu_name)
    except OptError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(out)
    return 0
