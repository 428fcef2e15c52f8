"""What this compiler can generate code for, checked before code generation starts.

Code generation keeps a tile in registers, each thread holding elements / threads of it, fully
unrolled.  That is linear in the tile size, but past a few hundred elements per thread ptxas's
time explodes (2^15 f32 elements: 3.8 s for the whole compile; 2^16: 28 s, almost all of it
ptxas), where NVIDIA's tileiras compiles 2^20 in under a second.  So a kernel with a larger tile
than 2^16 elements (the largest we still compile, slowly) is refused at once, with the op that
makes it, instead of after minutes and gigabytes.  The check runs on the kernel as code generation
sees it, after dead-code elimination (a dead 256x256 f64 accumulator of the invalid-input corpus
never reaches registers).  The largest live tile of the corpus has 2^14 elements.
"""
from __future__ import annotations

from .ir import types as T
from .ir.core import Function, Module
from .ir.diagnostics import resolve_loc

MAX_TILE_ELEMENTS = 1 << 16


def tile_limit_problem(module: Module, fn: Function) -> str | None:
    """The diagnostic for the first op whose result (or region argument) is a tile larger than
    MAX_TILE_ELEMENTS, or None."""
    for op in fn.walk():
        types = [r.type for r in op.results] + [a.type for region in op.regions for b in region.blocks
                                                 for a in b.args]
        for t in types:
            if isinstance(t, T.TileType) and t.num_elements() > MAX_TILE_ELEMENTS:
                from .ir.printer import type_str
                loc = resolve_loc(module, op.loc)
                where = f" at {loc}" if loc else ""
                return (f"{fn.name.decode(errors='replace')}: {type_str(t)} has {t.num_elements()} elements; "
                        f"code generation supports at most {MAX_TILE_ELEMENTS} per tile "
                        f"(op 'cuda_tile.{op.name}'{where})")
    return None
