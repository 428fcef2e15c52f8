"""split-arg-reductions: an argmax/argmin whose value result is unused becomes a max (min) and an index min.

Contract: in: tile-GPU IR before layouts. out: a `reduce` of a float tile `v` and an integer tile `i` whose
combiner keeps the better of two (value, index) pairs -- the larger (smaller) value, NaN either losing to
every number or beating it, equal values (both NaN included) broken by the smaller (larger) index, signed
or unsigned --, with its value result unused, becomes

    m   = reduce(v) by maxf/minf             (NaN losing: the non-propagating form, identity NaN;
                                              NaN winning: propagate_nan, identity -inf / +inf)
    c   = v == m  or  (v is NaN and m is NaN) (broadcast m back along the reduced dimension)
    idx = reduce(select(c, i, S)) by mini/maxi with the index order's identity S

which is the same index: m is one of the elements, c marks exactly the elements that tie with the best one,
and the index order picks among them as the combiner does.  The value reduce is one cuTile often writes
anyway (`max` next to `argmax` of one tile): an equal one in the same block (same operand, dimension and
single-op combiner, no flush to zero) is reused instead, with its identity set to the one above (identities
only fill lanes that hold no element, so the reduction's value does not change).

The pair combiner costs about 14 instructions per butterfly step and two shuffles; a float max is one
instruction and one shuffle, and an i32 min over a warp one `redux.sync`.  argmax_rows_f32_128 (sm_80):
132 -> 57 static instructions (NVIDIA: 157).

Which combiner a region is: one made only of cmpf/cmpi, andi/ori/xori of their i1 results and select over
its four arguments (no constants, no other values: every value is an argument or a truth value) depends on
its arguments only through the outcomes of those comparisons, so running it (with the interpreter's handlers)
on one pair of each order class -- less, equal, greater, NaN on either or both sides; for the indices also
signed and unsigned orders disagreeing -- decides it completely.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...ir import types as T
from ...ir.attrs import DenseElements, FloatAttr, IntegerAttr
from ...ir.core import Block, Operation, Value
from ...ir.enums import ComparisonOrdering as CO
from ...ir.enums import ComparisonPredicate as CP
from ...ir.enums import Signedness
from ...ir.printer import FLOAT_FORMATS
from ..ir import KernelIR, replace_values, single_op_combiner, walk_blocks
from ..analysis.software_pipeline import use_counts
from .to_tilegpu import type_uniform

if TYPE_CHECKING:
    from ...ir.builder import BlockBuilder

# numpy, the interpreter's handlers and the IR builder are imported only for a kernel that has a candidate
# reduce: the compile path of every other kernel stays free of them (a drop-in run starts faster)

_LOGIC_OPS = frozenset(["andi", "ori", "xori"])
_COMBINER_OPS = frozenset(["cmpf", "cmpi", "select"]) | _LOGIC_OPS
# the value types: IEEE formats with NaN and both infinities (the identities need them)
_ARG_FLOATS = frozenset(["f16", "bf16", "f32", "f64"])


@dataclass(frozen=True)
class ArgOrder:
    """What an arg-reduction's combiner keeps: the larger value (`largest`) or the smaller; whether NaN
    beats every number; on equal values the smaller index (`smallest_index`) or the larger, compared
    signed or not."""
    largest: bool
    nan_wins: bool
    smallest_index: bool
    signed: bool


ORDERS = tuple(ArgOrder(*flags) for flags in itertools.product((True, False), repeat=4))


def run(k: KernelIR) -> None:
    blocks = [b for b in walk_blocks(k.fn.body)
              if any(op.name == "reduce" and len(op.operands["operands"]) == 2 for op in b.ops)]
    if not blocks:      # no pair reduction: nothing to count uses for
        return
    uses = use_counts(k.fn.body)
    mapping: dict[int, Value] = {}
    for block in blocks:
        _split_block(k, block, uses, mapping)
    replace_values(k.fn.body, mapping)


def _split_block(k: KernelIR, block: Block, uses: dict[int, int], mapping: dict[int, Value]) -> None:
    value_reduces = {key: op for op in block.ops if (key := _value_reduce_key(op))}
    out: list[Operation] = []
    placed: set[int] = set()
    for op in block.ops:
        if id(op) in placed:
            continue
        found = _arg_reduction(op, uses) if op.name == "reduce" else None
        if found is None:
            out.append(op)
            placed.add(id(op))
            continue
        order, vpos = found
        b = _builder(k, op)
        value = op.operands["operands"][vpos]
        dim = int(op.attrs["dim"])
        reuse = value_reduces.get((id(value), dim, _value_op(order), order.nan_wins))
        if reuse is None:
            best = _build_value_reduce(b, op, vpos, order)
        else:
            reuse.attrs["identities"] = [_value_identity(order, value.type.elem)]
            if id(reuse) not in placed:        # later in the block: its operand is defined here already
                out.append(reuse)
                placed.add(id(reuse))
            best = reuse.results[0]
        mapping[id(op.results[1 - vpos])] = _build_index_reduce(b, op, vpos, order, best)
        type_uniform(b.block)
        out.extend(b.block.ops)
        placed.add(id(op))
    block.ops[:] = out


def _builder(k: KernelIR, op: Operation) -> BlockBuilder:
    from ...ir.builder import BlockBuilder
    b = BlockBuilder(Block([]), k.module)
    b.loc = op.loc
    return b


# -- recognising the combiner -------------------------------------------------------------------------------

def _arg_reduction(op: Operation, uses: dict[int, int]) -> tuple[ArgOrder, int] | None:
    """(the order the combiner keeps, the value operand's position) for an arg-reduction whose value
    result is unused, else None."""
    vals = op.operands["operands"]
    if len(vals) != 2 or len(op.results) != 2:
        return None
    kinds = [type(v.type.elem) for v in vals]
    if kinds == [T.FloatType, T.IntType]:
        vpos = 0
    elif kinds == [T.IntType, T.FloatType]:
        vpos = 1
    else:
        return None
    felem, ielem = vals[vpos].type.elem, vals[1 - vpos].type.elem
    if felem.name not in _ARG_FLOATS or ielem.width not in (8, 16, 32, 64) or uses.get(id(op.results[vpos])):
        return None
    block = op.regions[0].blocks[0]
    if not _closed_comparison_region(block):
        return None
    picks = _picks(block, vpos, felem, ielem)
    if picks is None:
        return None
    for order in ORDERS:
        if all(got in _expected(order, case, ielem.width) for case, got in picks):
            return order, vpos
    return None


def _closed_comparison_region(block: Block) -> bool:
    known = {id(a) for a in block.args}
    if len(block.args) != 4:
        return False
    for o in block.ops[:-1]:
        if o.name not in _COMBINER_OPS or o.regions or any(id(v) not in known for v in o.operand_values()):
            return False
        if o.name in _LOGIC_OPS and o.results[0].type.elem != T.I1:   # bitwise on values: not an order
            return False
        known.update(id(r) for r in o.results)
    last = block.ops[-1] if block.ops else None
    return (last is not None and last.name == "yield" and len(last.operand_values()) == 2
            and all(id(v) in known for v in last.operand_values()))


def _value_cases(dtype) -> list[tuple]:
    nan = dtype.type(float("nan"))
    one, two, zero = dtype.type(1), dtype.type(2), dtype.type(0)
    return [(one, two), (two, one), (one, one), (-zero, zero), (nan, one), (one, nan), (nan, nan)]


def _index_cases(dtype) -> list[tuple]:
    one, two, minus = dtype.type(1), dtype.type(2), dtype.type(-1)
    return [(one, two), (two, one), (one, one), (minus, one), (one, minus)]


def _picks(block: Block, vpos: int, felem: T.Type, ielem: T.Type) -> list[tuple[tuple, str]] | None:
    """For each pair of (value, index) cases: which side the region keeps ('l', 'r', or '=' when both are
    the same pair), or None when it keeps a mix of the two."""
    import numpy as np

    from ...interp import numerics as N
    from ...interp import ops_arith  # noqa: F401  (registers the comparison and select handlers)
    from ...interp.registry import HANDLERS
    fd, idt = N.compute_dtype(felem), N.compute_dtype(ielem)
    out = []
    for (lv, rv), (li, ri) in itertools.product(_value_cases(fd), _index_cases(idt)):
        args = [lv, rv, li, ri] if vpos == 0 else [li, ri, lv, rv]
        env = {a: np.asarray(x) for a, x in zip(block.args, args)}
        for o in block.ops[:-1]:
            HANDLERS[o.spec.name](None, o, env)
        got = [env[v] for v in block.ops[-1].operand_values()]
        gv, gi = (got[0], got[1]) if vpos == 0 else (got[1], got[0])
        left = _same(gv, lv) and gi == li
        right = _same(gv, rv) and gi == ri
        if not (left or right):
            return None
        out.append((((lv, rv), (li, ri)), "=" if left and right else ("l" if left else "r")))
    return out


def _same(a, b) -> bool:
    import numpy as np
    return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))


def _expected(order: ArgOrder, case: tuple, width: int) -> set[str]:
    """The sides the order allows keeping for one case ('=' always: both sides alike)."""
    (lv, rv), (li, ri) = case
    lnan, rnan = math.isnan(lv), math.isnan(rv)
    if lnan != rnan:
        winner = "l" if lnan == order.nan_wins else "r"
    elif lnan or lv == rv:
        a, b = (int(li), int(ri)) if order.signed else (int(li) % (1 << width), int(ri) % (1 << width))
        if a == b:
            return {"l", "r", "="}
        winner = "l" if (a < b) == order.smallest_index else "r"
    else:
        winner = "l" if (lv > rv) == order.largest else "r"
    return {winner, "="}


# -- the rewrite ---------------------------------------------------------------------------------------------

def _value_op(order: ArgOrder) -> str:
    return "maxf" if order.largest else "minf"


def _value_reduce_key(op: Operation) -> tuple | None:
    """(operand, dim, op, propagates NaN) of a one-operand reduce whose combiner is one maxf/minf of its
    two arguments without flush to zero."""
    inner = single_op_combiner(op) if op.name == "reduce" else None
    if inner is None or inner.name not in ("maxf", "minf") or inner.attrs.get("flush_to_zero"):
        return None
    return (id(op.operands["operands"][0]), int(op.attrs["dim"]), inner.name,
            bool(inner.attrs.get("propagate_nan")))


def _float_bits(elem: T.Type, what: str) -> int:
    fmt = FLOAT_FORMATS[elem.name]
    inf = ((1 << fmt.exp_bits) - 1) << fmt.mant_bits
    return {"nan": inf | (1 << (fmt.mant_bits - 1)), "+inf": inf, "-inf": inf | (1 << (fmt.width - 1))}[what]


def _value_identity(order: ArgOrder, elem: T.Type) -> FloatAttr:
    if not order.nan_wins:
        return FloatAttr(elem, _float_bits(elem, "nan"))     # fmax/fmin drop NaN: the true identity
    return FloatAttr(elem, _float_bits(elem, "-inf" if order.largest else "+inf"))


def _index_sentinel(order: ArgOrder, width: int) -> int:
    """The raw bits of the index order's identity (never better than any index)."""
    if order.signed:
        return ((1 << (width - 1)) - 1) if order.smallest_index else (1 << (width - 1))
    return ((1 << width) - 1) if order.smallest_index else 0


def _scalar(t: T.Type) -> T.TileType:
    return T.TileType((), t)


def _build_value_reduce(b: BlockBuilder, op: Operation, vpos: int, order: ArgOrder) -> Value:
    value = op.operands["operands"][vpos]
    elem = value.type.elem
    with b.region([_scalar(elem), _scalar(elem)]) as r:
        best = r.op(_value_op(order), [_scalar(elem)], lhs=r.args[0], rhs=r.args[1], propagate_nan=order.nan_wins,
                    flush_to_zero=False).result
        r.op("yield", operands=[best])
    red = b.op("reduce", [op.results[vpos].type], [r.built_region], operands=[value], dim=op.attrs["dim"],
               identities=[_value_identity(order, elem)])
    return red.results[0]


def _build_index_reduce(b: BlockBuilder, op: Operation, vpos: int, order: ArgOrder, best: Value) -> Value:
    value, index = op.operands["operands"][vpos], op.operands["operands"][1 - vpos]
    shape, dim = value.type.shape, int(op.attrs["dim"])
    felem, ielem = value.type.elem, index.type.elem
    kept = list(shape)
    kept[dim] = 1
    wide = b.op("reshape", [T.TileType(tuple(kept), felem)], source=best).result
    wide = b.op("broadcast", [T.TileType(shape, felem)], source=wide).result
    i1 = T.TileType(shape, T.I1)
    tie = b.op("cmpf", [i1], lhs=value, rhs=wide, comparison_predicate=CP.equal,
               comparison_ordering=CO.ordered).result
    v_nan = b.op("cmpf", [i1], lhs=value, rhs=value, comparison_predicate=CP.not_equal,
                 comparison_ordering=CO.unordered).result
    best_nan = b.op("cmpf", [i1], lhs=wide, rhs=wide, comparison_predicate=CP.not_equal,
                    comparison_ordering=CO.unordered).result
    both_nan = b.op("andi", [i1], lhs=v_nan, rhs=best_nan).result
    tie = b.op("ori", [i1], lhs=tie, rhs=both_nan).result
    sentinel = _index_sentinel(order, ielem.width)
    itile = T.TileType(shape, ielem)
    raw = sentinel.to_bytes((ielem.width + 7) // 8, "little")
    fill = b.op("constant", [itile], value=DenseElements(itile, raw)).result
    keys = b.op("select", [itile], cond=tie, val_if_true=index, val_if_false=fill).result
    sign = Signedness.signed if order.signed else Signedness.unsigned
    with b.region([_scalar(ielem), _scalar(ielem)]) as r:
        pick = r.op("mini" if order.smallest_index else "maxi", [_scalar(ielem)], lhs=r.args[0], rhs=r.args[1],
                    signedness=sign).result
        r.op("yield", operands=[pick])
    red = b.op("reduce", [op.results[1 - vpos].type], [r.built_region], operands=[keys], dim=op.attrs["dim"],
               identities=[IntegerAttr(ielem, sentinel)])
    return red.results[0]
