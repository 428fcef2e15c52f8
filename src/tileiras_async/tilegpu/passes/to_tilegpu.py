"""convert-to-tilegpu: the kernel's cuda_tile IR becomes tile-GPU IR.

Contract: in: a verified cuda_tile function (a private copy). out: the same ops; every rank-0 tile value
(kernel parameters, block ids, loop bounds, scalars computed from them) is typed *uniform* (`LayoutTile`
with no layout: one register, the same value in every thread). Ranked tiles are left for assign-layouts.
"""
from __future__ import annotations

from ...ir import types as T
from ...ir.core import Block
from ..ir import KernelIR, walk_blocks
from ..types import LayoutTile


def run(k: KernelIR) -> None:
    type_uniform(k.fn.body)


def type_uniform(body: Block) -> None:
    """Type every rank-0 tile value under `body` uniform (for ops that later passes create, too)."""
    for block in walk_blocks(body):
        for v in block.args:
            _uniform(v)
        for op in block.ops:
            for r in op.results:
                _uniform(r)


def _uniform(v) -> None:
    t = v.type
    if type(t) is T.TileType and not t.shape:
        v.type = LayoutTile((), t.elem, None)
