"""share-scan-totals: a reduction of a tile that the same block also scans, with the same combiner, reads the
scan's total instead of reducing again.

Contract: in: tile-GPU IR with final layouts. out: a one-operand `reduce` whose combiner is a single op of its
two arguments, preceded in its block by a one-operand `scan` of the same value along the same dimension with
the same op (same attributes), becomes `tilegpu.scan_total` of that scan when its result layout is the scan
layout sliced along the dimension (every thread that held part of a row holds the row's total); the scan gets
`with_total`, so its lowering keeps the total of every row in every such thread (the lanes' total from the
last lane, the warps' totals folded). cuTile's scan-with-carry loops (`cumsum`, then `sum` of the same tile
for the next iteration's carry) reduced every tile twice: a second butterfly and a second cross-warp round.

Only the order of a floating-point sum changes (a scan's total adds in scan order, a reduction in a tree):
the reduce op promises no order.
"""
from __future__ import annotations

from ...ir.core import Block, Operation, Value
from ..ir import KernelIR, replace_values, single_op_combiner, walk_blocks
from ..ops import SCAN_TOTAL
from ..types import layout_of

# combiners whose scan total is the reduction (associative and commutative: any order gives the set's value)
_ORDER_FREE = frozenset(["addf", "addi", "mulf", "muli", "maxf", "minf", "maxi", "mini", "andi", "ori", "xori"])


def run(k: KernelIR) -> None:
    mapping: dict[int, Value] = {}
    for block in walk_blocks(k.fn.body):
        _share_block(block, mapping)
    replace_values(k.fn.body, mapping)


def _share_block(block: Block, mapping: dict[int, Value]) -> None:
    scans: dict[tuple, Operation] = {}
    ops: list[Operation] = []
    for op in block.ops:
        key = _key(op) if op.name in ("scan", "reduce") else None
        if key is not None and op.name == "scan":
            scans.setdefault(key, op)
        scan = scans.get(key) if key is not None and op.name == "reduce" else None
        if scan is not None and _sliced(op, scan):
            total = Operation(SCAN_TOTAL, {"scan": scan.results[0]}, {}, [op.results[0].type], loc=op.loc)
            scan.attrs["with_total"] = True
            mapping[id(op.results[0])] = total.results[0]
            ops.append(total)
            continue
        ops.append(op)
    block.ops[:] = ops


def _key(op: Operation) -> tuple | None:
    """(operand, dim, combiner op, its attributes) of a one-operand reduce/scan whose combiner is one
    order-free op of its two arguments."""
    inner = single_op_combiner(op)
    if inner is None or inner.name not in _ORDER_FREE:
        return None
    attrs = tuple(sorted((k, repr(v)) for k, v in inner.attrs.items()))
    return (id(op.operands["operands"][0]), int(op.attrs["dim"]), inner.name, attrs)


def _sliced(reduce: Operation, scan: Operation) -> bool:
    layout = layout_of(scan.results[0].type)
    want = None if not reduce.results[0].type.shape else layout.slice(int(reduce.attrs["dim"]))
    return layout is not None and layout_of(reduce.results[0].type) == want
