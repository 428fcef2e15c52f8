"""remove-layout-conversions: drop layout changes that move nothing or that the producers can make unneeded.

Contract: in/out: tile-GPU IR after assign-layouts; every value keeps its meaning, fewer
`tilegpu.convert_layout` ops remain. Three rewrites, in order:

- a conversion whose source already has the result's layout goes (its uses read the source);
- backward retyping: when the converted value is computed by a chain of ops that can produce any layout
  (elementwise ops, reshape, broadcast, permute, loads through views, constants, iota) and nothing else
  uses the chain's values, the chain is retyped to produce the wanted layout directly and the conversion
  goes (Triton's backward rematerialization, without duplicating anything);
- conversions of the same value to the same layout in one block are merged into the first.
"""
from __future__ import annotations

from ...ir import types as T
from ...ir.core import Operation, Value
from ..layout import LinearLayout
from ..ir import KernelIR, replace_values, walk_blocks, walk_ops
from ..ops import CONVERT_LAYOUT
from ..types import layout_of, with_layout, bare

# ops whose result layout follows from (and determines) their operands' layouts one to one
_ELEMENTWISE_EXCLUDED = frozenset({"reduce", "scan", "mmaf", "mmai", "load_ptr_tko", "store_ptr_tko", "extract",
                                   "cat", "insert", "pack", "unpack", "atomic_rmw_tko", "atomic_cas_tko",
                                   "assume", "for", "loop", "if"})
_LEAVES = frozenset({"load_view_tko", "constant", "iota"})   # any layout, nothing to propagate
MAX_CHAIN = 64


def run(k: KernelIR) -> None:
    body = k.fn.body
    uses: dict[int, int] = {}
    for op in walk_ops(body):
        for v in op.operand_values():
            uses[id(v)] = uses.get(id(v), 0) + 1
    mapping: dict[int, Value] = {}
    for block in list(walk_blocks(body)):
        seen: dict[tuple[int, object], Value] = {}
        keep = []
        for op in block.ops:
            if op.name != CONVERT_LAYOUT.name:
                keep.append(op)
                continue
            src = op.operands["source"]
            src = mapping.get(id(src), src)
            target = layout_of(op.result.type)
            if layout_of(src.type) != target and uses.get(id(src), 0) == 1 and _retype(src, target, uses):
                pass   # the chain now produces `target`: the conversion is an identity
            if layout_of(src.type) == target:
                mapping[id(op.result)] = src
                continue
            key = (id(src), target)
            if key in seen:
                mapping[id(op.result)] = seen[key]
                continue
            seen[key] = op.result
            op.operands["source"] = src
            keep.append(op)
        block.ops = keep
    replace_values(body, mapping)


def _retype(v: Value, target: LinearLayout, uses: dict[int, int]) -> bool:
    """Make the single-use chain computing `v` produce `target`; False (nothing changed) when it cannot."""
    plan: list[tuple[Value, LinearLayout | None]] = []
    if not _plan(v, target, uses, plan, 0):
        return False
    for value, layout in plan:
        value.type = with_layout(bare(value.type), layout)
    return True


def _plan(v: Value, target: LinearLayout | None, uses: dict[int, int], plan: list, depth: int) -> bool:
    """Collect (value, new layout) pairs so that `v` gets `target`; only single-use values are retyped."""
    if layout_of(v.type) == target:
        return True
    if not v.type.shape or target is None:
        return not v.type.shape and target is None
    op = v.owner
    if not isinstance(op, Operation) or depth > MAX_CHAIN or uses.get(id(v), 0) != 1 or len(op.results) > 2:
        return False
    name = op.name
    plan.append((v, target))
    if name in _LEAVES:
        return True
    if name == "reshape":
        src = op.operands["source"]
        return not src.type.shape or _plan(src, target.reshape(src.type.shape), uses, plan, depth + 1)
    if name == "broadcast":
        src = op.operands["source"]
        return not src.type.shape or _plan(src, target.collapse(src.type.shape), uses, plan, depth + 1)
    if name == "permute":
        perm = tuple(op.attrs["permutation"])
        inverse = tuple(perm.index(i) for i in range(len(perm)))
        return _plan(op.operands["source"], target.transpose(inverse), uses, plan, depth + 1)
    if name in _ELEMENTWISE_EXCLUDED or op.regions or len(op.results) != 1 or op.name.startswith("tilegpu."):
        return False
    for x in op.operand_values():
        if isinstance(x.type, T.TileType) and x.type.shape and not _plan(x, target, uses, plan, depth + 1):
            return False
    return True
