"""merge-repadded-loads: a second load of the same elements that differs only in its padding reuses the first.

Contract: in: tile-GPU IR with final layouts. out: where a block holds two weak `load_view_tko` ops of one
tensor view -- through partition views of the same tensor view, tile shape and dimension map, differing at most
in their padding value --, at the same index values, with the same token and the later one's result token
unused, and both results of one type (layout included), the later load becomes `tilegpu.repad` of the
earlier one's tile: its elements where they are in bounds, the later view's padding elsewhere (the bounds
depend on the view's shape and the index alone, so both loads mask the same elements). With the same
padding the later result is the earlier one. Both loads carry the same token, so no memory operation is
ordered between them: reading once is what the program allows. cuTile writes such pairs for a sum and a max
of one tile (`padding_mode=ZERO` and `NEG_INF`): reduce1d_f16_t1024 issued 16 global loads per thread where
8 do. Tiles of more than MAX_REGISTERS elements per thread are left alone: each element's bounds predicate
then lives until its load returns, and ptxas, with 7 predicate registers, keeps the rest in general ones
(reduce2d_rows_f16_16x128, 16 elements per thread: 118 -> 125 registers merged).
"""
from __future__ import annotations

from dataclasses import replace

from ...ir.core import Block, Operation, Value
from ...ir.enums import MemoryOrderingSemantics as MO
from ..ir import KernelIR, replace_values, walk_blocks
from ..ops import REPAD
from ..analysis.software_pipeline import use_counts
from ..types import layout_of

MAX_REGISTERS = 8


def run(k: KernelIR) -> None:
    uses = use_counts(k.fn.body)
    mapping: dict[int, Value] = {}
    for block in walk_blocks(k.fn.body):
        _merge_block(block, uses, mapping)
    replace_values(k.fn.body, mapping)


def _merge_block(block: Block, uses: dict[int, int], mapping: dict[int, Value]) -> None:
    earlier: dict[tuple, Operation] = {}
    ops: list[Operation] = []
    for op in block.ops:
        key = _key(op)
        first = None if key is None else earlier.get(key)
        if first is None or uses.get(id(op.results[1]), 0):
            if key is not None:
                earlier.setdefault(key, op)
            ops.append(op)
            continue
        if op.operands["view"].type == first.operands["view"].type:
            mapping[id(op.results[0])] = first.results[0]    # the same elements, the same padding
            continue
        repad = Operation(REPAD, {"source": first.results[0], "view": op.operands["view"],
                                  "index": list(op.operands["index"])}, {}, [op.results[0].type], loc=op.loc)
        mapping[id(op.results[0])] = repad.results[0]
        ops.append(repad)
    block.ops[:] = ops


def _key(op: Operation) -> tuple | None:
    """What two loads must share to read the same elements: the tensor view, the partition's shape and
    dimension map, the index and token values and the result type."""
    if op.name != "load_view_tko" or op.attrs.get("memory_ordering_semantics", MO.weak) != MO.weak:
        return None
    layout = layout_of(op.results[0].type)
    if layout is not None and layout.num_registers > MAX_REGISTERS:
        return None
    view = op.operands["view"]
    maker = getattr(view, "owner", None)
    if not isinstance(maker, Operation) or maker.name != "make_partition_view":
        return None
    token = op.operands.get("token")
    return (id(maker.operands["tensor_view"]), replace(view.type, padding=None), tuple(map(id, op.operands["index"])),
            id(token) if isinstance(token, Value) else None, op.results[0].type, tuple(sorted(
                (k, repr(v)) for k, v in op.attrs.items())))
