"""The declarative ("ODS") part of cuda_tile verification, as a table.

For every op: the type constraint of each operand and result (checked in ODS
order, flattened operand numbering, `operand #N must be <summary>, but got
'<type>'`), the predicate traits (AllTypesMatch, AllShapesMatch, ...,
`failed to verify that ...`), then the native traits (SameOperandsShape,
ParentOneOf, Terminator, ...), in the order MLIR's generated verifier runs
them.  `ods_rules(spec)` turns one table entry into a list of rule functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import types as T
from . import verify_types as VT
from .verify_types import (ANY, ANY_TILE, BASE_FLOAT_TILE, FLOAT_TILE, I1_TILE, I64_TILE, I8_TILE,
                           INT4_TILE, INT_TILE, MMAF_OPERAND, MMAF_RESULT, MMAI_OPERAND, MMAI_RESULT,
                           NUMBER4_TILE, NUMBER_TILE, PARTITION_VIEW, PTR_TILE, SCALAR_I1, SCALAR_I32,
                           SCALAR_INT, SCALAR_PTR, STRIDED_VIEW, GATHER_SCATTER_VIEW, TENSOR_VIEW,
                           TILE_VIEW, TOKEN, TypeConstraint, q, tile_of, variadic)

# operand/result forms
ONE, OPT, VAR = "one", "optional", "variadic"


@dataclass(frozen=True)
class Arg:
    name: str
    tc: TypeConstraint
    form: str = ONE


@dataclass(frozen=True)
class Pred:
    """A PredOpTrait over named operands/results: kind in types/shapes/ranks/elems/with."""
    kind: str
    names: tuple[str, ...]
    summary: str = ""          # for `with`: the TypesMatchWith summary
    check: Callable | None = None  # for `with`: (from_type, to_type) -> bool


@dataclass(frozen=True)
class OdsSpec:
    operands: tuple[Arg, ...] = ()
    results: tuple[Arg, ...] = ()
    preds: tuple[Pred, ...] = ()
    traits: tuple[str, ...] = ()           # native traits, in trait-list order
    parents: tuple[str, ...] = ()          # ParentOneOf
    attr_checks: tuple[tuple[str, str], ...] = ()  # (attr, constraint kind)
    pure: bool = False


def _a(spec: str, tc: TypeConstraint) -> Arg:
    if spec.endswith("?"):
        return Arg(spec[:-1], tc, OPT)
    if spec.endswith("*"):
        if not tc.summary.startswith("variadic of "):
            tc = variadic(tc)
        return Arg(spec[:-1], tc, VAR)
    return Arg(spec, tc)


def types(*n):
    return Pred("types", n)


def shapes(*n):
    return Pred("shapes", n)


def ranks(*n):
    return Pred("ranks", n)


def elems(*n):
    return Pred("elems", n)


def with_(summary, frm, to, check):
    return Pred("with", (frm, to), summary, check)


def opt_with(summary, frm, to, check):
    return Pred("optwith", (frm, to), summary, check)


def od(ops=(), res=(), preds=(), traits=(), parents=(), attrs=(), pure=True) -> OdsSpec:
    return OdsSpec(tuple(_a(n, c) for n, c in ops), tuple(_a(n, c) for n, c in res),
                   tuple(preds), tuple(traits), tuple(parents), tuple(attrs), pure)


# -- TypesMatchWith comparators ---------------------------------------------------

def _i1_same_shape(lhs, result) -> bool:
    return isinstance(lhs, T.TileType) and result == T.TileType(lhs.shape, T.I1)


def _load_store_type(dst, src) -> bool:
    """verifyLoadStoreType(dst, src): src is a pointer tile of dst's shape pointing to dst's element."""
    if not (isinstance(src, T.TileType) and isinstance(src.elem, T.PointerType)):
        return False
    if not isinstance(dst, T.TileType):
        return False
    return src.shape == dst.shape and src.elem.pointee == dst.elem


def _same_shape(a, b) -> bool:
    return isinstance(a, T.TileType) and isinstance(b, T.TileType) and a.shape == b.shape


def _load_padding(result, pad) -> bool:
    return isinstance(result, T.TileType) and isinstance(pad, T.TileType) and result.shape == pad.shape \
        and result.elem == pad.elem


# -- the table ----------------------------------------------------------------------

def _unary(tc, *, same_shape=False, attrs=()):
    traits = ("SameOperandsAndResultShape",) if same_shape else ()
    return od([("source", tc)], [("result", tc)], [types("source", "result")], traits, attrs=attrs)


def _binary(tc, a="lhs", b="rhs"):
    return od([(a, tc), (b, tc)], [("result", tc)], [types(a, b, "result")])


def _conv(src, dst, frm="from", to="to"):
    return od([(frm, src)], [(to, dst)], [shapes(frm, to)])


_STORE_TYPE = "`destination` type is expected a pointer type of `value` type"

ODS: dict[str, OdsSpec] = {
    # unary float math
    **{n: _unary(BASE_FLOAT_TILE) for n in
       ("ceil", "cos", "cosh", "exp", "exp2", "floor", "log", "log2", "negf", "rsqrt", "sin", "sinh",
        "sqrt", "tan", "tanh")},
    "absf": _unary(BASE_FLOAT_TILE, same_shape=True),
    "absi": _unary(INT_TILE, same_shape=True),
    "negi": _unary(INT_TILE),
    # binary
    **{n: _binary(BASE_FLOAT_TILE) for n in ("addf", "subf", "mulf", "divf", "maxf", "minf", "remf")},
    **{n: _binary(INT_TILE) for n in ("addi", "subi", "muli", "andi", "ori", "xori", "maxi", "mini",
                                      "shli", "shri")},
    "divi": od([("lhs", INT_TILE), ("rhs", INT_TILE)], [("result", INT_TILE)],
               [types("lhs", "rhs", "result")], pure=False),
    "remi": od([("lhs", INT_TILE), ("rhs", INT_TILE)], [("result", INT_TILE)],
               [types("result", "lhs", "rhs"), shapes("result", "lhs", "rhs")]),
    "mulhii": _binary(INT_TILE, "x", "y"),
    "atan2": _binary(BASE_FLOAT_TILE, "x", "y"),
    "pow": od([("source", BASE_FLOAT_TILE), ("exponent", BASE_FLOAT_TILE)], [("result", BASE_FLOAT_TILE)],
              [types("result", "source", "exponent"), ranks("source", "exponent", "result")]),
    "fma": od([("lhs", BASE_FLOAT_TILE), ("rhs", BASE_FLOAT_TILE), ("acc", BASE_FLOAT_TILE)],
              [("result", BASE_FLOAT_TILE)], [types("lhs", "rhs", "acc", "result")]),
    "cmpf": od([("lhs", BASE_FLOAT_TILE), ("rhs", BASE_FLOAT_TILE)], [("result", I1_TILE)],
               [types("lhs", "rhs"),
                with_("Result type has i1 element type and same shape as operands", "lhs", "result",
                      _i1_same_shape)]),
    "cmpi": od([("lhs", INT_TILE), ("rhs", INT_TILE)], [("result", I1_TILE)],
               [types("lhs", "rhs"),
                with_("Result type has i1 element type and same shape as operands", "lhs", "result",
                      _i1_same_shape)]),
    "select": od([("cond", I1_TILE), ("val_if_true", ANY_TILE), ("val_if_false", ANY_TILE)],
                 [("result", ANY_TILE)],
                 [types("val_if_true", "val_if_false", "result"),
                  shapes("cond", "val_if_true", "val_if_false", "result")]),
    # conversions
    "bitcast": _conv(NUMBER_TILE, NUMBER_TILE, "source", "result"),
    "exti": _conv(INT4_TILE, INT4_TILE),
    "trunci": _conv(INT4_TILE, INT4_TILE),
    "ftof": _conv(FLOAT_TILE, FLOAT_TILE),
    "ftoi": _conv(FLOAT_TILE, INT_TILE),
    "itof": _conv(INT_TILE, FLOAT_TILE),
    "int_to_ptr": _conv(I64_TILE, PTR_TILE, "source", "result"),
    "ptr_to_int": _conv(PTR_TILE, I64_TILE, "source", "result"),
    "ptr_to_ptr": _conv(PTR_TILE, PTR_TILE, "source", "result"),
    "pack": od([("source", NUMBER4_TILE)], [("result", I8_TILE)], [ranks("source", "result")]),
    "unpack": od([("source", I8_TILE)], [("result", NUMBER4_TILE)], [ranks("source", "result")]),
    # shape ops
    "broadcast": od([("source", ANY_TILE)], [("result", ANY_TILE)], [ranks("source", "result")],
                    ("SameOperandsAndResultElementType",)),
    "reshape": od([("source", ANY_TILE)], [("result", ANY_TILE)], (), ("SameOperandsAndResultElementType",)),
    "cat": od([("lhs", ANY_TILE), ("rhs", ANY_TILE)], [("result", ANY_TILE)],
              [ranks("lhs", "rhs", "result"), elems("lhs", "rhs", "result")]),
    "permute": od([("source", ANY_TILE)], [("result", ANY_TILE)],
                  [elems("source", "result"), ranks("source", "result")]),
    "extract": od([("source", ANY_TILE), ("indices*", SCALAR_I32)], [("result", ANY_TILE)],
                  [ranks("source", "result")]),
    "iota": od((), [("result", INT_TILE)]),
    "constant": od((), [("result", NUMBER_TILE)]),
    "offset": od([("ptr", PTR_TILE), ("offset", INT_TILE)], [("result", PTR_TILE)], [types("result", "ptr")],
                 ("Elementwise", "SameOperandsAndResultShape")),
    # mma
    "mmaf": od([("lhs", MMAF_OPERAND), ("rhs", MMAF_OPERAND), ("acc", MMAF_RESULT)], [("result", MMAF_RESULT)],
               [types("acc", "result"), elems("lhs", "rhs"), ranks("lhs", "rhs", "acc")]),
    "mmai": od([("lhs", MMAI_OPERAND), ("rhs", MMAI_OPERAND), ("acc", VT.MMAI_ACC)], [("result", MMAI_RESULT)],
               [types("acc", "result"), elems("lhs", "rhs"), ranks("lhs", "rhs", "acc")]),
    "mmaf_scaled": od(
        [("lhs", tile_of(("f8E4M3FN", "f8E5M2", "f4E2M1FN"), summary="mmaf_scaled operand tile type")),
         ("rhs", tile_of(("f8E4M3FN", "f8E5M2", "f4E2M1FN"), summary="mmaf_scaled operand tile type")),
         ("acc", tile_of(("f32",), summary="mmaf_scaled result tile type")),
         ("lhs_scale", tile_of(("f8E4M3FN", "f8E8M0FNU"), summary="mmaf_scaled scale tile type")),
         ("rhs_scale", tile_of(("f8E4M3FN", "f8E8M0FNU"), summary="mmaf_scaled scale tile type"))],
        [("result", tile_of(("f32",), summary="mmaf_scaled result tile type"))],
        [types("acc", "result"), elems("lhs", "rhs"), elems("lhs_scale", "rhs_scale"),
         ranks("lhs", "rhs", "acc", "lhs_scale", "rhs_scale")]),
    # grid / misc
    "get_tile_block_id": od((), [("blockId_x", SCALAR_I32), ("blockId_y", SCALAR_I32), ("blockId_z", SCALAR_I32)]),
    "get_num_tile_blocks": od((), [("gridSize_x", SCALAR_I32), ("gridSize_y", SCALAR_I32),
                                   ("gridSize_z", SCALAR_I32)]),
    "get_global": od((), [("result", SCALAR_PTR)]),
    "assume": od([("value", ANY)], [("result", ANY)], [types("value", "result")], pure=False),
    "assert": od([("condition", I1_TILE)], (), pure=False),
    "print_tko": od([("args*", ANY_TILE), ("token?", TOKEN)], [("result_token", TOKEN)], pure=False),
    "alloca": od((), [("result", SCALAR_PTR)], pure=False,
                 attrs=(("num_elem", "i64min0"), ("alignment", "i64min0"))),
    # tokens
    "make_token": od((), [("result", TOKEN)]),
    "join_tokens": od([("tokens*", TOKEN)], [("result", TOKEN)]),
    # views
    "make_tensor_view": od([("base", SCALAR_PTR), ("dynamicShape*", SCALAR_INT), ("dynamicStrides*", SCALAR_INT)],
                           [("result", TENSOR_VIEW)], pure=False),
    "make_partition_view": od([("tensor_view", TENSOR_VIEW)], [("result", PARTITION_VIEW)]),
    "make_strided_view": od([("tensor_view", TENSOR_VIEW)], [("result", STRIDED_VIEW)]),
    "make_gather_scatter_view": od([("tensor_view", TENSOR_VIEW)], [("result", GATHER_SCATTER_VIEW)]),
    "get_tensor_shape": od([("src", TENSOR_VIEW)], [("result*", variadic(SCALAR_INT))], pure=False),
    "get_index_space_shape": od([("src", TILE_VIEW)], [("result*", variadic(SCALAR_INT))], pure=False),
    # memory
    "load_ptr_tko": od([("source", PTR_TILE), ("mask?", I1_TILE), ("paddingValue?", NUMBER_TILE), ("token?", TOKEN)],
                       [("result", ANY_TILE), ("result_token", TOKEN)],
                       [with_("`source` type is expected a pointer type of `result` type", "result", "source",
                              _load_store_type),
                        opt_with("shape of 'mask' must match the shape of 'source'", "source", "mask", _same_shape),
                        opt_with("type of 'paddingValue' must match the type of 'result'", "result",
                                 "paddingValue", _load_padding)], pure=False),
    "store_ptr_tko": od([("destination", PTR_TILE), ("value", ANY_TILE), ("mask?", I1_TILE), ("token?", TOKEN)],
                        [("result_token", TOKEN)],
                        [with_(_STORE_TYPE, "value", "destination", _load_store_type),
                         opt_with("shape of 'destination' must match the shape of 'mask'", "mask", "destination",
                                  _same_shape)], pure=False),
    "load_view_tko": od([("view", TILE_VIEW), ("index*", variadic(INT_TILE)), ("token?", TOKEN)],
                        [("tile", ANY_TILE), ("result_token", TOKEN)], pure=False),
    "store_view_tko": od([("tile", ANY_TILE), ("view", TILE_VIEW), ("index*", variadic(INT_TILE)),
                          ("token?", TOKEN)], [("result_token", TOKEN)], pure=False),
    "atomic_cas_tko": od([("pointers", PTR_TILE), ("cmp", ANY_TILE), ("val", ANY_TILE), ("mask?", I1_TILE),
                          ("token?", TOKEN)], [("result", ANY_TILE), ("result_token", TOKEN)],
                         [shapes("pointers", "cmp", "val", "result"), types("cmp", "val", "result")], pure=False),
    "atomic_rmw_tko": od([("pointers", PTR_TILE), ("arg", ANY_TILE), ("mask?", I1_TILE), ("token?", TOKEN)],
                         [("result", ANY_TILE), ("result_token", TOKEN)],
                         [shapes("pointers", "arg", "result"), types("arg", "result")], pure=False),
    "atomic_red_view_tko": od([("view", TILE_VIEW), ("index*", variadic(INT_TILE)), ("value", ANY_TILE),
                               ("token?", TOKEN)], [("result_token", TOKEN)], pure=False),
    # 13.4 additions (not in the open-source 13.3 definitions; kept to the obvious constraints)
    "gdc_launch_dependents_tko": od([("token?", TOKEN)], [("result_token", TOKEN)], pure=False),
    "gdc_wait_tko": od([("token?", TOKEN)], [("result_token", TOKEN)], pure=False),
    "memory_fence_alias_tko": od([("token", TOKEN)], [("result_token", TOKEN)], pure=False),
    "fpowi": od([("source", BASE_FLOAT_TILE), ("exponent", INT_TILE)], [("result", BASE_FLOAT_TILE)],
                [types("source", "result")]),
    "insert": od([("source", ANY_TILE), ("destination", ANY_TILE), ("indices*", SCALAR_I32)],
                 [("result", ANY_TILE)], [types("destination", "result")]),
    # control flow
    "if": od([("condition", SCALAR_I1)], [("results*", ANY)], (), ("NoRegionArguments",), pure=False),
    "for": od([("lowerBound", SCALAR_INT), ("upperBound", SCALAR_INT), ("step", SCALAR_INT),
               ("initValues*", ANY)], [("resultValues*", ANY)],
              [types("lowerBound", "upperBound", "step"), types("initValues", "resultValues")], pure=False),
    "loop": od([("initValues*", ANY)], [("resultValues*", ANY)], pure=False),
    "reduce": od([("operands*", variadic(ANY_TILE))], [("results*", variadic(ANY_TILE))], (),
                 ("SameOperandsShape",), attrs=(("dim", "i32nonneg"),), pure=False),
    "scan": od([("operands*", variadic(ANY_TILE))], [("results*", variadic(ANY_TILE))], (),
               ("SameOperandsShape",), attrs=(("dim", "i32nonneg"),), pure=False),
    "yield": od([("operands*", ANY)], (), (), ("Terminator", "ParentOneOf"), ("if", "reduce", "scan")),
    "break": od([("operands*", ANY)], (), (), ("Terminator", "ParentOneOf"), ("if", "loop"), pure=False),
    "continue": od([("operands*", ANY)], (), (), ("Terminator", "ParentOneOf"), ("for", "if", "loop"), pure=False),
    "return": od([("operands*", ANY)], (), (), ("ParentOneOf", "Terminator"), ("entry", "preview$func", "if", "loop"),
                 pure=False),
}

PURE_OPS = frozenset(n for n, s in ODS.items() if s.pure)
# NoMemoryEffect without being Pure (not speculatable)
EFFECT_FREE_OPS = PURE_OPS | {"divi", "get_index_space_shape", "get_tensor_shape", "make_tensor_view"}
# RecursiveMemoryEffects: effect-free when everything nested is
RECURSIVE_EFFECT_OPS = frozenset({"if", "for", "loop", "reduce", "scan"})

ATTR_CONSTRAINTS = {
    "i32nonneg": (lambda v: isinstance(v, int) and 0 <= v < (1 << 31),
                  "32-bit signless integer attribute whose value is non-negative"),
    "i64min0": (lambda v: isinstance(v, int) and v >= 0,
                "64-bit signless integer attribute whose minimum value is 0"),
}


# -- evaluation -------------------------------------------------------------------

def _values(op, name):
    v = op.operands.get(name)
    if v is None:
        return []
    return list(v) if isinstance(v, list) else [v]


def _named_types(op, spec: OdsSpec) -> dict[str, list]:
    """ODS name -> list of types (operands by name; results matched by position)."""
    out = {a.name: [v.type for v in _values(op, a.name)] for a in spec.operands}
    results = list(op.results)
    fixed = [a for a in spec.results if a.form != VAR]
    nvar = max(0, len(results) - len(fixed))
    i = 0
    for a in spec.results:
        n = nvar if a.form == VAR else 1
        out[a.name] = [r.type for r in results[i:i + n]]
        i += n
    return out


def _join_names(names) -> str:
    return "{" + ", ".join(names) + "}"


def _pred_ok(kind, tys) -> bool:
    if len(tys) < 2:
        return True
    if kind == "types":
        return all(t == tys[0] for t in tys)
    if kind == "shapes":
        shapes_ = [t.shape if isinstance(t, T.TileType) else None for t in tys]
        return all(s == shapes_[0] for s in shapes_)
    if kind == "ranks":
        r = [t.rank if isinstance(t, T.TileType) else None for t in tys]
        return all(x == r[0] for x in r)
    if kind == "elems":
        e = [VT_elem(t) for t in tys]
        return all(x == e[0] for x in e)
    return True


def VT_elem(t):
    return t.elem if isinstance(t, T.TileType) else t


_PRED_TEXT = {"types": "have same type", "shapes": "have same shape", "ranks": "have same rank",
              "elems": "have the same element type"}


def ods_rules(name: str) -> list[Callable]:
    """Rule functions (ctx, op) -> message|None for the declarative part of `name`'s verifier."""
    spec = ODS.get(name)
    if spec is None:
        return []
    rules: list[Callable] = []

    def attributes(ctx, op):
        for attr, kind in spec.attr_checks:
            ok, text = ATTR_CONSTRAINTS[kind]
            if attr in op.attrs and not ok(op.attrs[attr]):
                return f"attribute '{attr}' failed to satisfy constraint: {text}"
        return None

    def operand_types(ctx, op):
        idx = 0
        for a in spec.operands:
            for v in _values(op, a.name):
                if not a.tc(v.type):
                    return f"operand #{idx} must be {a.tc.summary}, but got {q(v.type)}"
                idx += 1
        return None

    def result_types(ctx, op):
        named = _named_types(op, spec)
        idx = 0
        for a in spec.results:
            for t in named.get(a.name, []):
                if not a.tc(t):
                    return f"result #{idx} must be {a.tc.summary}, but got {q(t)}"
                idx += 1
        return None

    def predicates(ctx, op):
        named = _named_types(op, spec)
        for p in spec.preds:
            if p.kind in ("with", "optwith"):
                frm, to = (named.get(n, []) for n in p.names)
                if p.kind == "optwith" and (not frm or not to):
                    continue
                if not frm or not to or not p.check(frm[0], to[0]):
                    return f"failed to verify that {p.summary}"
                continue
            if len(p.names) == 2 and all(n in named for n in p.names) and \
                    any(a.form == VAR for a in (*spec.operands, *spec.results) if a.name in p.names):
                # AllTypesMatch over two variadic ranges compares the ranges
                if named[p.names[0]] != named[p.names[1]]:
                    return f"failed to verify that all of {_join_names(p.names)} {_PRED_TEXT[p.kind]}"
                continue
            tys = [named[n][0] for n in p.names if named.get(n)]
            if not _pred_ok(p.kind, tys):
                return f"failed to verify that all of {_join_names(p.names)} {_PRED_TEXT[p.kind]}"
        return None

    rules += [attributes, operand_types, result_types, predicates]
    for trait in spec.traits:
        rules.append(_TRAITS[trait](spec))
    return rules


# -- native traits ------------------------------------------------------------------

def _shape_of(t):
    return t.shape if isinstance(t, T.TileType) else None


def _same_operands_and_result_shape(spec):
    def same_operands_and_result_shape(ctx, op):
        tys = [v.type for v in op.operand_values()] + [r.type for r in op.results]
        shapes_ = [_shape_of(t) for t in tys]
        if any(s != shapes_[0] for s in shapes_):
            return "requires the same shape for all operands and results"
        return None
    return same_operands_and_result_shape


def _same_operands_shape(spec):
    def same_operands_shape(ctx, op):
        shapes_ = [_shape_of(v.type) for v in op.operand_values()]
        if any(s != shapes_[0] for s in shapes_):
            return "requires the same shape for all operands"
        return None
    return same_operands_shape


def _same_elem(spec):
    def same_operands_and_result_element_type(ctx, op):
        tys = [VT_elem(v.type) for v in op.operand_values()] + [VT_elem(r.type) for r in op.results]
        if any(t != tys[0] for t in tys):
            return "requires the same element type for all operands and results"
        return None
    return same_operands_and_result_element_type


def _elementwise(spec):
    def elementwise(ctx, op):
        return None  # subsumed by SameOperandsAndResultShape for the only user (offset)
    return elementwise


def _no_region_args(spec):
    def no_region_arguments(ctx, op):
        for i, region in enumerate(op.regions):
            if region.blocks and region.blocks[0].args:
                return f"region #{i} should have no arguments"
        return None
    return no_region_arguments


def _parent_one_of(spec):
    names = ", ".join(f"cuda_tile.{p}" for p in spec.parents)

    def parent_one_of(ctx, op):
        if ctx.parent_name(op) not in spec.parents:
            return f"expects parent op to be one of '{names}'"
        return None
    return parent_one_of


def _terminator(spec):
    def is_terminator(ctx, op):
        block = ctx.block_of(op)
        if block is not None and block.ops and block.ops[-1] is not op:
            return "must be the last operation in the parent block"
        return None
    return is_terminator


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
        return (f"inferred type(s) {VT.qlist(inferred)} are incompatible with return type(s) of "
                f"operation {VT.qlist(actual)}")
    return None


_TRAITS = {
    "SameOperandsAndResultShape": _same_operands_and_result_shape,
    "SameOperandsShape": _same_operands_shape,
    "SameOperandsAndResultElementType": _same_elem,
    "Elementwise": _elementwise,
    "NoRegionArguments": _no_region_args,
    "ParentOneOf": _parent_one_of,
    "Terminator": _terminator,
}
