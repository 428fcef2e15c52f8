"""remove-layout-conversions: drop layout changes that move nothing.

Contract: in/out: tile-GPU IR after assign-layouts. A `tilegpu.convert_layout` whose source already has the
result's layout is removed and its uses read the source. (Conversions of the same value to the same layout
in one block are merged: the first one's result serves the later uses.)
"""
from __future__ import annotations

from ..ir import KernelIR, replace_values, walk_blocks
from ..ops import CONVERT_LAYOUT
from ..types import layout_of


def run(k: KernelIR) -> None:
    body = k.fn.body
    mapping: dict[int, object] = {}
    for block in list(walk_blocks(body)):
        seen: dict[tuple[int, object], object] = {}
        keep = []
        for op in block.ops:
            if op.name != CONVERT_LAYOUT.full_name:
                keep.append(op)
                continue
            src = op.operands["source"]
            src = mapping.get(id(src), src)
            target = layout_of(op.result.type)
            key = (id(src), target)
            if layout_of(src.type) == target:
                mapping[id(op.result)] = src
            elif key in seen:
                mapping[id(op.result)] = seen[key]
            else:
                seen[key] = op.result
                keep.append(op)
        block.ops = keep
    replace_values(body, mapping)
