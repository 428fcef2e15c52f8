"""`tileiras-async opt`: the tile-GPU IR text in, named passes run over it, the text out (like mlir-opt)."""
from __future__ import annotations

from .errors import LoweringError
from .parser import ParseError, parse_kernel
from .passes import PASS_NAMES, _load
from .printer import print_kernel


class OptError(Exception):
    """What `opt` reports as one `error:` line (a file position first where it has one)."""


def opt_text(text: str, filename: str, passes: list[str], gpu_name: str | None = None) -> str:
    """Parse one dump section, run `passes` in the order given, print the result (the input as read when
    `passes` is empty).  `gpu_name` replaces the target the dump names."""
    unknown = [p for p in passes if p not in PASS_NAMES]
    if unknown:
        raise OptError(f"unknown pass '{unknown[0]}' (passes: {', '.join(PASS_NAMES)})")
    try:
        k = parse_kernel(text, filename)
    except ParseError as e:
        raise OptError(str(e)) from None
    if gpu_name is not None:
        k.options.target = gpu_name
    for name in passes:
        try:
            _load(name)(k)
        except LoweringError as e:
            raise OptError(f"{filename}: pass '{name}' failed: {e}") from None
    return print_kernel(k)
