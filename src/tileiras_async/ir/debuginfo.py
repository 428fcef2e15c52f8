"""Debug locations rendered as cuda_tile's textual syntax, for diagnostics (one model with the printer's)."""
from __future__ import annotations

from .core import Module

# Debug-section attribute tags
TAG_COMPILE_UNIT, TAG_FILE, TAG_LEXICAL_BLOCK, TAG_LOC, TAG_SUBPROGRAM, TAG_CALLSITE = 1, 2, 3, 4, 5, 6


def render_debug_attr(module: Module, debug_id: int) -> str | None:
    """`#cuda_tile.di_loc<loc("f.py":18:33) in #cuda_tile.di_subprogram<...>>`, or None if unknown."""
    from .printer import render_location
    return render_location(module, debug_id)
