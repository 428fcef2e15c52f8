"""Region, block-argument and terminator rules of cuda_tile.

`ENTRY_RULES` run with the op's own verifier (before its nested ops are
verified); `REGION_RULES` run after the nested ops, as MLIR's
`verifyRegions` and region traits do.
"""
from __future__ import annotations

from . import types as T
from .opdef import SingleBlockImplicitTerminator, memory_effect_free, opdef
from .verify_ops import Fail
from .verify_types import is_view, q, qlist


def _types(values):
    return [v.type for v in values]


def _paren_types(types) -> str:
    return qlist(types)


# ---------------------------------------------------------------------------
# if
# ---------------------------------------------------------------------------

def if_regions(ctx, op):
    """IfOp::verify: result types are not views; yields of both branches match the results."""
    if not op.regions:
        return "must define then branch"
    ret = [r.type for r in op.results]
    for i, t in enumerate(ret):
        if isinstance(t, T.TensorViewType):
            return f"result type {i} is a tensor_view, which is not supported"
        if is_view(t):
            return f"result type {i} is a tile view, which is not supported"
    then = op.regions[0]
    if not then.blocks:
        return "must define then branch"
    err = _check_if_yield(op, then, "then", ret)
    if err:
        return err
    els = op.regions[1] if len(op.regions) > 1 else None
    if els is None or not els.blocks:
        if ret:
            return "has non-empty return type, must define else branch"
        return None
    return _check_if_yield(op, els, "else", ret)


def _check_if_yield(op, region, name, ret):
    block = region.blocks[0]
    if not block.ops or block.ops[-1].name != "yield":
        return None
    yt = _types(block.ops[-1].operand_values())
    if ret and not yt:
        return f"has return type of {qlist(ret)} but {name} branch does not yield anything"
    if not ret and yt:
        return f"does not return a value, but {name} branch yields {qlist(yt)}"
    if yt != ret:
        return f"type does not match yield type, {name} branch yields {qlist(yt)} but op result type is {qlist(ret)}"
    return None


# ---------------------------------------------------------------------------
# early exits and return
# ---------------------------------------------------------------------------

def _loop_ancestor(ctx, op, allowed):
    """Walk up through `if`s; the first other ancestor (name, op)."""
    parent = ctx.parent_op(op)
    while True:
        name = ctx.name_of(parent)
        if name in allowed:
            return name, parent
        if name != "if":
            return name, parent
        parent = ctx.parent_op(parent)


def _early_exit_nesting(ctx, op, allowed):
    name, _ = _loop_ancestor(ctx, op, allowed)
    if name not in allowed:
        names = "', '".join([f"cuda_tile.{a}" for a in allowed] + ["cuda_tile.if"])
        return f"can only be nested within a ancestor chain of '{names}' operations"
    return None


def break_types(ctx, op):
    err = _early_exit_nesting(ctx, op, ("loop",))
    if err:
        return err
    _, loop = _loop_ancestor(ctx, op, ("loop",))
    got, want = _types(op.operand_values()), [r.type for r in loop.results]
    if got != want:
        return (f"operand types must correspond to the parent loop result types: ({qlist(got)}) vs "
                f"({qlist(want)})")
    return None


def continue_types(ctx, op):
    err = _early_exit_nesting(ctx, op, ("for", "loop"))
    if err:
        return err
    name, loop = _loop_ancestor(ctx, op, ("for", "loop"))
    got = _types(op.operand_values())
    if name == "loop":
        want = _types(loop.operand_values())
        if got != want:
            raise Fail("`loop` is missing a valid terminator. `continue` op should have operand types that "
                       f"match the parent loop iter_values: ({qlist(want)}), but found: ({qlist(got)})",
                       with_op=False)
    else:
        want = [r.type for r in loop.results]
        if got != want:
            raise Fail("`for` is missing a valid terminator. `continue` op should have operand types that "
                       f"match the parent loop return types: ({qlist(want)}), but found: ({qlist(got)})",
                       with_op=False)
    return None


def return_in_entry(ctx, op):
    parent = ctx.parent_op(op)
    while ctx.name_of(parent) in ("if", "loop"):
        parent = ctx.parent_op(parent)
    if ctx.name_of(parent) != "entry":
        return "must be used within a cuda_tile.entry, cuda_tile.if, or cuda_tile.loop operation"
    n = len(op.operand_values())
    results = parent.type.results
    if n != len(results):
        return (f"has {n} operands, but enclosing function (@{parent.name.decode(errors='replace')}) "
                f"returns {len(results)}")
    if n:
        return f"has {n} operands, but entry function must return 0 operands"
    return None


# ---------------------------------------------------------------------------
# for / loop (verifyRegions)
# ---------------------------------------------------------------------------

def _loop_iter_values(op, inits, iters, results):
    if len(iters) != len(inits):
        return (f"mismatch in number of region iterator values and loop iterator inits: "
                f"{len(iters)} vs {len(inits)}")
    for i, (init, it) in enumerate(zip(inits, iters)):
        if isinstance(it.type, T.TensorViewType):
            return f"loop-carried value {i} is a tensor_view, which is not supported"
        if is_view(it.type):
            return f"loop-carried value {i} is a tile view, which is not supported"
        if init.type != it.type:
            return (f"init value {i} and region iter_value {i} have different type: {q(init.type)} != "
                    f"{q(it.type)}")
    for i, r in enumerate(results):
        if isinstance(r.type, T.TensorViewType):
            return f"result type {i} is a tensor_view, which is not supported"
        if is_view(r.type):
            return f"result type {i} is a tile view, which is not supported"
    return None


def for_regions(ctx, op):
    block = op.regions[0].blocks[0]
    if not block.args:
        return "expected at least one block argument for induction variable"
    iv, lb = block.args[0], op.operands["lowerBound"]
    if iv.type != lb.type:
        return (f"expected induction variable to be same type as bounds and step: {q(iv.type)} vs "
                f"{q(lb.type)}")
    return _loop_iter_values(op, op.operands.get("initValues") or [], block.args[1:], op.results)


def loop_regions(ctx, op):
    block = op.regions[0].blocks[0]
    return _loop_iter_values(op, op.operands.get("initValues") or [], block.args, op.results)


# ---------------------------------------------------------------------------
# reduce / scan
# ---------------------------------------------------------------------------

def aggregate_op(matching_return_shape: bool):
    def aggregate_operands(ctx, op):
        operands = op.operand_values()
        results = [r.type for r in op.results]
        n = len(operands)
        if n == 0:
            return "expect at least 1 operand"
        if n != len(results):
            return "expect same number of operands and results"
        ids = op.attrs.get("identities")
        items = getattr(ids, "items", ids)
        if items is not None:
            if len(items) != n:
                return (f"expect identities to match the number of operands but got: {n} operands and "
                        f"{len(items)} identities")
            for i, v in enumerate(operands):
                if not isinstance(v.type, T.TileType):
                    return f"expected TileType for operand at index {i} but got: {q(v.type)}"
                it = getattr(items[i], "type", None)
                el = v.type.elem
                if {str(el), str(it)} == {"bf16", "f16"}:
                    continue
                if el != it:
                    return (f"expect same type for operand at index: {i} and identity at index: {i} but got: "
                            f"{q(el)} and {q(it)}")
        first = operands[0].type
        if not isinstance(first, T.TileType):
            return f"expected TileType for first operand but got: {q(first)}"
        dim = op.attrs.get("dim", 0)
        if dim < 0 or dim >= first.rank:
            return f"dimension ({dim}) is out of bound [0, {first.rank})"
        if matching_return_shape:
            for i, (v, r) in enumerate(zip(operands, results)):
                if v.type != r:
                    return f"expect same type for operand at index: {i} and result at index: {i}"
        return None
    return aggregate_operands


def aggregate_regions(ctx, op):
    """verifyAggregateOpRegions: 2N rank-0 block args pairwise typed like the operands; pure body."""
    operands = op.operand_values()
    n = len(operands)
    block = op.regions[0].blocks[0]
    if not block.ops:
        return "expect non-empty block"
    args = [a.type for a in block.args]
    if len(args) != 2 * n:
        return f"expect {2 * n} block arguments but got: {len(args)}"
    for i, t in enumerate(args):
        if not (isinstance(t, T.TileType) and t.rank == 0):
            return f"expect 0-rank tile type at index: {i} but got: {q(t)}"
    for i in range(0, 2 * n - 1, 2):
        if args[i].elem != args[i + 1].elem:
            return (f"expect same element type for block argument at index: {i} and {i + 1} but got: "
                    f"{q(args[i].elem)} and {q(args[i + 1].elem)}")
    for i, v in enumerate(operands):
        if not isinstance(v.type, T.TileType):
            return f"expected TileType for operand and block argument but got types: {q(v.type)} and {q(args[2 * i])}"
        if v.type.elem != args[2 * i].elem:
            return (f"expect same type for operand at index: {i} and block argument at index: {2 * i} but got: "
                    f"{q(v.type.elem)} and {q(args[2 * i].elem)}")
    term = block.ops[-1]
    tt = _types(term.operand_values())
    if len(tt) != n:
        return f"expect number of terminators operands ({len(tt)}) to match number of operands ({n})"
    for i, v in enumerate(operands):
        if not isinstance(tt[i], T.TileType):
            return f"expected TileType for operand and terminator types but got: {q(v.type)} and {q(tt[i])}"
        if v.type.elem != tt[i].elem:
            return (f"expect same type for operand at index: {i} and terminator argument at index: {i} but got: "
                    f"{q(v.type.elem)} and {q(tt[i].elem)}")
    for inner in block.ops[:-1]:
        if not memory_effect_free(inner):
            raise Fail(f"only memory-effect-free operations are allowed inside 'cuda_tile.{op.name}'",
                       op_name=inner.name, at=inner)
    return None


def infer_result_types(ctx, op):
    """InferTypeOpInterface (reduce/scan; checked with the regions): results as inferred from operands."""
    operands = op.operand_values()
    if not operands:
        return "failed to infer returned types"
    if op.name == "reduce":
        dim = op.attrs.get("dim", 0)
        inferred = [T.TileType(tuple(d for i, d in enumerate(v.type.shape) if i != dim), v.type.elem)
                    if isinstance(v.type, T.TileType) else v.type for v in operands]
    else:
        inferred = [v.type for v in operands]
    actual = [r.type for r in op.results]
    if inferred != actual:
        raise Fail(f"inferred type(s) {qlist(inferred)} are incompatible with return type(s) of operation "
                   f"{qlist(actual)}", then=("failed to infer returned types",))
    return None


# ---------------------------------------------------------------------------
# single-block regions ending in the right terminator (region traits)
# ---------------------------------------------------------------------------

def region_terminators(ctx, op):
    """SingleBlockImplicitTerminator: every non-empty region ends with one of the op's declared
    terminators (the first is named)."""
    allowed = opdef(op.name).trait(SingleBlockImplicitTerminator).terminators
    for i, region in enumerate(op.regions):
        if not region.blocks:
            continue
        if len(region.blocks) != 1:
            return f"expects region #{i} to have 0 or 1 blocks"
        block = region.blocks[0]
        if not block.ops:
            return "expects a non-empty block"
        last = block.ops[-1]
        if last.name not in allowed:
            return f"expects regions to end with 'cuda_tile.{allowed[0]}', found 'cuda_tile.{last.name}'"
    return None


# The ops' region constraints (SizedRegion) run with their declarative checks (verify_ods).
ENTRY_RULES = {
    "if": [if_regions],
    "reduce": [aggregate_op(False)],
    "scan": [aggregate_op(True)],
    "break": [break_types],
    "continue": [continue_types],
    "return": [return_in_entry],
}

REGION_RULES = {
    "if": [region_terminators],
    "for": [region_terminators, for_regions],
    "loop": [region_terminators, loop_regions],
    "reduce": [infer_result_types, region_terminators, aggregate_regions],
    "scan": [infer_result_types, region_terminators, aggregate_regions],
}
