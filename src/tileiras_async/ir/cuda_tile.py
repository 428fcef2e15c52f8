"""The cuda_tile dialect: one declaration per op (the mechanism and how to declare an op: ``ir/opdef.py``).

Each declaration carries the op's bytecode record (opcode, the 13.N version that introduced it and its
operands and attributes, flag bits, how operands and results are counted), its operands and results with
their ODS type constraints, its attributes, regions, traits and assembly format.  The reader and the
writer (``bytecode/``), the printer, the verifier, DCE, the scheduler's dependence graphs and the
lowerings all read these declarations.

Wire facts in the keys: ``name?B`` is an optional operand or attribute present iff flag bit B is set,
``name!B`` a unit attribute (the flag bit only), ``name*`` a variadic operand (its own count, unless the
op has ``counted_operands``: one total count, the single operands first, the variadic one takes the
rest), ``@N`` the version 13.N that introduced it.  ``flags=N`` means the flags varint exists from 13.N
on (``True``: since the op exists).  ``counted_results``: a result count precedes the result types (the
ODS results then say what the verifier expects).  Attribute kinds are enum classes or one of ATTR_KINDS.
The FORMAT mini-language is documented in ``ir/printer.py``, the only code that interprets it.
"""
from __future__ import annotations

from . import types as T
from .enums import (AtomicRMWMode, ComparisonOrdering, ComparisonPredicate, ENUMS, IntegerOverflow,
                    MemoryOrderingSemantics, MemoryScope, RoundingMode, Signedness, SymbolVisibility)
from .opdef import (ANY_REGION, UNIT, AllElementTypesMatch, AllRanksMatch, AllShapesMatch, AllTypesMatch,
                    Alloc, Attr, AttrConstraint, DefinesMemoryObject, Dialect, Elementwise, HasParent, LoopLike,
                    MaxSizedRegion, MemoryEffects, NoMemoryEffect, NoRegionArguments, OUTPUT, Pure, Read,
                    RecursiveMemoryEffects, SameOperandsAndResultElementType, SameOperandsAndResultShape,
                    SameOperandsShape, SingleBlockImplicitTerminator, SizedRegion, Terminator, TypesMatchWith,
                    ViewLike, Write)
from .verify_types import (ANY, ANY_TILE, BASE_FLOAT_TILE, FLOAT_TILE, GATHER_SCATTER_VIEW, I1_TILE, I64_TILE,
                           I8_TILE, INT4_TILE, INT_TILE, MMAF_OPERAND, MMAF_RESULT, MMAI_ACC, MMAI_OPERAND,
                           MMAI_RESULT, NUMBER4_TILE, NUMBER_TILE, PARTITION_VIEW, PTR_TILE, SCALAR_I1, SCALAR_I32,
                           SCALAR_INT, SCALAR_PTR, STRIDED_VIEW, TENSOR_VIEW, TILE_VIEW, TOKEN, tile_of)

BASE_MINOR = 1  # 13.1 is the oldest version
MAX_MINOR = 4   # newest version this reader accepts

# attribute kinds besides enums, as the bytecode encodes them (bytecode/attrs_codec.py)
ATTR_KINDS = frozenset("int bool str type dense i32arr boolarr array hints pred".split())

CUDA_TILE = Dialect("cuda_tile", qualified_names=False, since=BASE_MINOR,
                    attr_kinds=lambda kind: kind in ATTR_KINDS or kind in ENUMS)


def op(opcode: int, mnemonic: str, cls: str, **declaration):
    """One cuda_tile op: its opcode and C++ class name first, then what `Dialect.op` takes."""
    return CUDA_TILE.op(mnemonic, opcode=opcode, cls=cls, **declaration)


# -- what the declarations refer to --------------------------------------------------------------------------

I32_NON_NEGATIVE = AttrConstraint("32-bit signless integer attribute whose value is non-negative",
                                  lambda v: isinstance(v, int) and 0 <= v < (1 << 31))
I64_MIN_0 = AttrConstraint("64-bit signless integer attribute whose minimum value is 0",
                           lambda v: isinstance(v, int) and v >= 0)

MMAF_SCALED_OPERAND = tile_of(("f8E4M3FN", "f8E5M2", "f4E2M1FN"), summary="mmaf_scaled operand tile type")
MMAF_SCALED_RESULT = tile_of(("f32",), summary="mmaf_scaled result tile type")
MMAF_SCALED_SCALE = tile_of(("f8E4M3FN", "f8E8M0FNU"), summary="mmaf_scaled scale tile type")


def non_weak(op) -> bool:
    """Loads and stores keep program order with other ordered effects unless their ordering is weak."""
    return op.attrs.get("memory_ordering_semantics", MemoryOrderingSemantics.weak) != MemoryOrderingSemantics.weak


# TypesMatchWith comparators and their summaries

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


def _cmp_result(operand: str = "lhs") -> TypesMatchWith:
    return TypesMatchWith("Result type has i1 element type and same shape as operands", operand, "result",
                          _i1_same_shape)


_LOAD_TYPE = TypesMatchWith("`source` type is expected a pointer type of `result` type", "result", "source",
                            _load_store_type)
_LOAD_MASK = TypesMatchWith("shape of 'mask' must match the shape of 'source'", "source", "mask", _same_shape,
                            optional=True)
_LOAD_PADDING = TypesMatchWith("type of 'paddingValue' must match the type of 'result'", "result", "paddingValue",
                               _load_padding, optional=True)
_STORE_TYPE = TypesMatchWith("`destination` type is expected a pointer type of `value` type", "value",
                             "destination", _load_store_type)
_STORE_MASK = TypesMatchWith("shape of 'destination' must match the shape of 'mask'", "mask", "destination",
                             _same_shape, optional=True)


def _same_type(tc, *operands: str, traits=()) -> dict:
    """Operands and one result of one type constrained by `tc` (the arithmetic ops): the declaration's
    operands, result and traits (Pure, AllTypesMatch, then `traits`)."""
    return {"operands": {n: tc for n in operands}, "results": {"result": tc},
            "traits": [Pure(), AllTypesMatch(*operands, "result"), *traits]}


def _conversion(source, result, frm: str = "from", to: str = "to", traits=()) -> dict:
    """One operand converted elementwise to a result of the same shape."""
    return {"operands": {frm: source}, "results": {to: result},
            "traits": [Pure(), AllShapesMatch(frm, to), *traits]}


# ============================================================================================================
# the ops, by opcode (opcodes 25-36 and 52-57 are not used)
# ============================================================================================================

op(0, "absf", "AbsFOp",
   **_same_type(BASE_FLOAT_TILE, "source", traits=[SameOperandsAndResultShape()]),
   format="$source attrs : type($result)")

op(1, "absi", "AbsIOp",
   **_same_type(INT_TILE, "source", traits=[SameOperandsAndResultShape()]),
   format="$source attrs : type($result)")

op(2, "addf", "AddFOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "lhs", "rhs"),
   attrs={"flush_to_zero!0": UNIT, "rounding_mode": RoundingMode},
   format=("$lhs , $rhs rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : "
           "type($result)"))

op(3, "addi", "AddIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   attrs={"overflow": IntegerOverflow},
   format="$lhs , $rhs [[ overflow ~ $overflow=none^ ]] attrs : type($result)")

op(4, "andi", "AndIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   format="$lhs , $rhs attrs : type($result)")

op(5, "assert", "AssertOp",
   operands={"condition": I1_TILE},
   attrs={"message": "str"},
   traits=[MemoryEffects(Write(resource=OUTPUT), ordered=True)],
   format="$condition , $message attrs : type($condition)")

op(6, "assume", "AssumeOp",
   operands={"value": ANY},
   results={"result": ANY},
   attrs={"predicate": "pred"},
   traits=[AllTypesMatch("value", "result")],
   format="%@assume pred($predicate) , $value attrs : type($value)")

op(7, "atomic_cas_tko", "AtomicCASTkoOp", flags=True,
   operands={"pointers": PTR_TILE, "cmp": ANY_TILE, "val": ANY_TILE, "mask?0": I1_TILE, "token?1": TOKEN},
   results={"result": ANY_TILE, "result_token": TOKEN},
   attrs={"memory_ordering_semantics": MemoryOrderingSemantics, "memory_scope": MemoryScope},
   traits=[MemoryEffects(Read("pointers"), Write("pointers"), ordered=True),
           AllShapesMatch("pointers", "cmp", "val", "result"), AllTypesMatch("cmp", "val", "result")],
   format=("%result,result_token $memory_ordering_semantics $memory_scope $pointers , $cmp , $val [[ , $mask^ ]] [[ "
           "token ~ = ~ $token^ ]] attrs : type($pointers) , type($val) [[ , type($mask)^ ]] -> type($result) , "
           "type($result_token)"))

op(8, "atomic_rmw_tko", "AtomicRMWTkoOp", flags=True,
   operands={"pointers": PTR_TILE, "arg": ANY_TILE, "mask?0": I1_TILE, "token?1": TOKEN},
   results={"result": ANY_TILE, "result_token": TOKEN},
   attrs={"memory_ordering_semantics": MemoryOrderingSemantics, "memory_scope": MemoryScope, "mode": AtomicRMWMode},
   traits=[MemoryEffects(Read("pointers"), Write("pointers"), ordered=True),
           AllShapesMatch("pointers", "arg", "result"), AllTypesMatch("arg", "result")],
   format=("%result,result_token $memory_ordering_semantics $memory_scope $pointers , $mode , $arg [[ , $mask^ ]] [[ "
           "token ~ = ~ $token^ ]] attrs : type($pointers) , type($arg) [[ , type($mask)^ ]] -> type($result) , "
           "type($result_token)"))

op(9, "bitcast", "BitcastOp",
   **_conversion(NUMBER_TILE, NUMBER_TILE, "source", "result"),
   format="$source attrs : type($source) -> type($result)")

op(10, "break", "BreakOp", counted_operands=True, counted_results=True,
   operands={"operands*": ANY},
   traits=[Terminator("loop_exit"), HasParent("if", "loop")],
   format="attrs [[ $operands^ : type($operands) ]]")

op(11, "broadcast", "BroadcastOp",
   operands={"source": ANY_TILE},
   results={"result": ANY_TILE},
   traits=[Pure(), AllRanksMatch("source", "result"), SameOperandsAndResultElementType(), ViewLike("source")],
   format="%bcast $source attrs : type($source) -> type($result)")

op(12, "cat", "CatOp",
   operands={"lhs": ANY_TILE, "rhs": ANY_TILE},
   results={"result": ANY_TILE},
   attrs={"dim": "int"},
   traits=[Pure(), AllRanksMatch("lhs", "rhs", "result"), AllElementTypesMatch("lhs", "rhs", "result")],
   format="$lhs , $rhs dim = $dim attrs : type($lhs) , type($rhs) -> type($result)")

op(13, "ceil", "CeilOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(14, "cmpf", "CmpFOp",
   operands={"lhs": BASE_FLOAT_TILE, "rhs": BASE_FLOAT_TILE},
   results={"result": I1_TILE},
   attrs={"comparison_predicate": ComparisonPredicate, "comparison_ordering": ComparisonOrdering},
   traits=[Pure(), AllTypesMatch("lhs", "rhs"), _cmp_result()],
   format="kw($comparison_predicate) kw($comparison_ordering) $lhs , $rhs attrs : type($lhs) -> type($result)")

op(15, "cmpi", "CmpIOp",
   operands={"lhs": INT_TILE, "rhs": INT_TILE},
   results={"result": I1_TILE},
   attrs={"comparison_predicate": ComparisonPredicate, "signedness": Signedness},
   traits=[Pure(), AllTypesMatch("lhs", "rhs"), _cmp_result()],
   format="kw($comparison_predicate) $lhs , $rhs , kw($signedness) attrs : type($lhs) -> type($result)")

op(16, "constant", "ConstantOp",
   results={"result": NUMBER_TILE},
   attrs={"value": "dense"},
   traits=[Pure()],
   format="%@constant dense($value) attrs")

op(17, "continue", "ContinueOp", counted_operands=True, counted_results=True,
   operands={"operands*": ANY},
   traits=[Terminator("next_iteration"), HasParent("for", "if", "loop")],
   format="attrs [[ $operands^ : type($operands) ]]")

op(18, "cos", "CosOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(19, "cosh", "CosHOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(20, "divf", "DivFOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "lhs", "rhs"),
   attrs={"flush_to_zero!0": UNIT, "rounding_mode": RoundingMode},
   format=("$lhs , $rhs rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : "
           "type($result)"))

op(21, "divi", "DivIOp",
   operands={"lhs": INT_TILE, "rhs": INT_TILE},
   results={"result": INT_TILE},
   attrs={"signedness": Signedness, "rounding": RoundingMode},
   traits=[NoMemoryEffect(), AllTypesMatch("lhs", "rhs", "result")],
   format="$lhs , $rhs kw($signedness) [[ rounding ~ $rounding=zero^ ]] attrs : type($result)")

op(22, "entry", "EntryOp", flags=True,
   attrs={"sym_name": "str", "function_type": "type", "res_attrs?0": "array", "optimization_hints?1": "hints"},
   regions={"body": ANY_REGION},
   traits=[SingleBlockImplicitTerminator("return")],
   format="%- sym($sym_name) ~ signature(0) [[ optimization_hints ~ = ~ $optimization_hints^ ]] region(0)")

op(23, "exp", "ExpOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   attrs={"rounding_mode@3": RoundingMode},
   format="$source rounding($rounding_mode=full) attrs : type($result)")

op(24, "exp2", "Exp2Op", flags=True,
   **_same_type(BASE_FLOAT_TILE, "source"),
   attrs={"flush_to_zero!0": UNIT},
   format="$source [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)")

op(37, "exti", "ExtIOp",
   **_conversion(INT4_TILE, INT4_TILE),
   attrs={"signedness": Signedness},
   format="$from kw($signedness) attrs : type($from) -> type($to)")

op(38, "extract", "ExtractOp", counted_operands=True, counted_results=True,
   operands={"source": ANY_TILE, "indices*": SCALAR_I32},
   results={"result": ANY_TILE},
   traits=[Pure(), AllRanksMatch("source", "result")],
   format="$source [ $indices ] attrs : type($source) -> type($results)")

op(39, "floor", "FloorOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(40, "fma", "FmaOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "lhs", "rhs", "acc"),
   attrs={"flush_to_zero!0": UNIT, "rounding_mode": RoundingMode},
   format=("$lhs , $rhs , $acc rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : "
           "type($result)"))

op(41, "for", "ForOp", flags=2, counted_operands=True, counted_results=True,
   operands={"lowerBound": SCALAR_INT, "upperBound": SCALAR_INT, "step": SCALAR_INT, "initValues*": ANY},
   results={"resultValues*": ANY},
   attrs={"unsignedCmp!0": UNIT},
   regions={"region": SizedRegion(1)},
   traits=[RecursiveMemoryEffects(), AllTypesMatch("lowerBound", "upperBound", "step"),
           AllTypesMatch("initValues", "resultValues"), LoopLike(induction_vars=1),
           SingleBlockImplicitTerminator("continue")],
   format=("%for ^for [[ unsigned $unsignedCmp^ ]] ivar(0) in _ ( $lowerBound to $upperBound , step $step ) : "
           "type($lowerBound) [[ iter_values ~ ( iterinit(0,$initValues)^ ) -> ( type($initValues) ) ]] "
           "cfregion(0,continue) attrs"))

op(42, "ftof", "FToFOp",
   **_conversion(FLOAT_TILE, FLOAT_TILE),
   attrs={"rounding_mode": RoundingMode},
   format="$from rounding($rounding_mode=nearest_even) attrs : type($from) -> type($to)")

op(43, "ftoi", "FToIOp", flags=4,
   **_conversion(FLOAT_TILE, INT_TILE),
   attrs={"saturating!0": UNIT, "signedness": Signedness, "rounding_mode": RoundingMode},
   format=("$from kw($signedness) rounding($rounding_mode=nearest_int_to_zero) [[ saturating $saturating^ ]] attrs : "
           "type($from) -> type($to)"))

op(44, "get_global", "GetGlobalOp",
   results={"result": SCALAR_PTR},
   attrs={"name": "str"},
   traits=[Pure(), DefinesMemoryObject()],
   format="sym($name) attrs : type($result)")

op(45, "get_index_space_shape", "GetIndexSpaceShapeOp", counted_results=True,
   operands={"src": TILE_VIEW},
   results={"result*": SCALAR_INT},
   traits=[NoMemoryEffect()],
   format="$src : type($src) -> firsttype($results)")

op(46, "get_num_tile_blocks", "GetNumTileBlocksOp",
   results={"gridSize_x": SCALAR_I32, "gridSize_y": SCALAR_I32, "gridSize_z": SCALAR_I32},
   traits=[Pure()],
   format="%gridSize_x,gridSize_y,gridSize_z attrs : type($gridSize_x)")

op(47, "get_tensor_shape", "GetTensorShapeOp", counted_results=True,
   operands={"src": TENSOR_VIEW},
   results={"result*": SCALAR_INT},
   traits=[NoMemoryEffect()],
   format="$src : type($src) -> firsttype($results)")

op(48, "get_tile_block_id", "GetTileBlockIdOp",
   results={"blockId_x": SCALAR_I32, "blockId_y": SCALAR_I32, "blockId_z": SCALAR_I32},
   traits=[Pure()],
   format="%blockId_x,blockId_y,blockId_z attrs : type($blockId_x)")

op(49, "global", "GlobalOp", flags=3,
   attrs={"constant!0": UNIT, "sym_name": "str", "value": "dense", "alignment": "int",
          "symbol_visibility@3": SymbolVisibility},
   format=("vis($symbol_visibility) [[ constant $constant^ ]] sym($sym_name) [[ alignment = $alignment=0^ ]] attrs "
           "dense($value)"))

op(50, "if", "IfOp", counted_results=True,
   operands={"condition": SCALAR_I1},
   results={"results*": ANY},
   regions={"thenRegion": SizedRegion(1), "elseRegion": MaxSizedRegion(1)},
   traits=[RecursiveMemoryEffects(), NoRegionArguments(),
           SingleBlockImplicitTerminator("yield", "break", "continue", "return")],
   format="%- $condition [[ -> ( type($results)^ ) ]] cfregion(0,yield) [[ else cfregion(1,yield)^ ]] attrs")

op(51, "int_to_ptr", "IntToPtrOp",
   **_conversion(I64_TILE, PTR_TILE, "source", "result"),
   format="$source attrs : type($source) -> type($result)")

op(58, "iota", "IotaOp",
   results={"result": INT_TILE},
   traits=[Pure()],
   format="attrs : type($result)")

op(59, "itof", "IToFOp",
   **_conversion(INT_TILE, FLOAT_TILE),
   attrs={"signedness": Signedness, "rounding_mode": RoundingMode},
   format="$from kw($signedness) rounding($rounding_mode=nearest_even) attrs : type($from) -> type($to)")

op(60, "join_tokens", "JoinTokensOp", counted_operands=True, counted_results=True,
   operands={"tokens*": TOKEN},
   results={"result": TOKEN},
   traits=[Pure()],
   format="$tokens attrs : type($results)")

op(61, "load_ptr_tko", "LoadPtrTkoOp", flags=True,
   operands={"source": PTR_TILE, "mask?2": I1_TILE, "paddingValue?3": NUMBER_TILE, "token?4": TOKEN},
   results={"result": ANY_TILE, "result_token": TOKEN},
   attrs={"memory_ordering_semantics": MemoryOrderingSemantics, "memory_scope?0": MemoryScope,
          "optimization_hints?1": "hints"},
   traits=[MemoryEffects(Read("source"), ordered=non_weak), _LOAD_TYPE, _LOAD_MASK, _LOAD_PADDING],
   format=("%result,result_token $memory_ordering_semantics [[ $memory_scope^ ]] $source [[ , $mask^ ]] [[ , "
           "$paddingValue^ ]] [[ token ~ = ~ $token^ ]] [[ optimization_hints = $optimization_hints^ ]] attrs : "
           "type($source) [[ , type($mask)^ ]] [[ , type($paddingValue)^ ]] -> type($result) , type($result_token)"))

op(62, "load_view_tko", "LoadViewTkoOp", flags=True, counted_results=True,
   operands={"view": TILE_VIEW, "index*": INT_TILE, "token?2": TOKEN},
   results={"tile": ANY_TILE, "result_token": TOKEN},
   attrs={"memory_ordering_semantics": MemoryOrderingSemantics, "memory_scope?0": MemoryScope,
          "optimization_hints?1": "hints", "inbounds@4": "boolarr"},
   traits=[MemoryEffects(Read("view"), ordered=non_weak)],
   format=("%tile,result_token $memory_ordering_semantics [[ $memory_scope^ ]] $view [ $index ] [[ token = $token^ "
           "]] [[ optimization_hints = $optimization_hints^ ]] [[ inbounds = $inbounds^ ]] attrs : type($view) ~ "
           "idxtypes($index) -> type($results)"))

op(63, "log", "LogOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(64, "log2", "Log2Op",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(65, "loop", "LoopOp", counted_operands=True, counted_results=True,
   operands={"initValues*": ANY},
   results={"resultValues*": ANY},
   regions={"region": SizedRegion(1)},
   traits=[RecursiveMemoryEffects(), LoopLike(), SingleBlockImplicitTerminator("continue", "break", "return")],
   format="%- !loop")

op(66, "make_partition_view", "MakePartitionViewOp",
   operands={"tensor_view": TENSOR_VIEW},
   results={"result": PARTITION_VIEW},
   traits=[Pure(), ViewLike("tensor_view")],
   format="%pview $tensor_view attrs : type($result)")

op(67, "make_tensor_view", "MakeTensorViewOp", counted_results=True,
   operands={"base": SCALAR_PTR, "dynamicShape*": SCALAR_INT, "dynamicStrides*": SCALAR_INT},
   results={"result": TENSOR_VIEW},
   traits=[NoMemoryEffect(), ViewLike("base")],
   format=("%tview $base , shape = [ mixed($dynamicShape,shape) ] , strides = [ mixed($dynamicStrides,strides) ] "
           "attrs : [[ viewsrc($base,$dynamicShape,$dynamicStrides)^ -> ]] type($results)"))

op(68, "make_token", "MakeTokenOp",
   results={"result": TOKEN},
   traits=[Pure()],
   format="attrs : type($result)")

op(69, "maxf", "MaxFOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "lhs", "rhs"),
   attrs={"propagate_nan!0": UNIT, "flush_to_zero!1": UNIT},
   format=("$lhs , $rhs [[ flush_to_zero $flush_to_zero^ ]] [[ propagate_nan $propagate_nan^ ]] attrs : "
           "type($result)"))

op(70, "maxi", "MaxIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   attrs={"signedness": Signedness},
   format="$lhs , $rhs kw($signedness) attrs : type($result)")

op(71, "minf", "MinFOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "lhs", "rhs"),
   attrs={"propagate_nan!0": UNIT, "flush_to_zero!1": UNIT},
   format=("$lhs , $rhs [[ flush_to_zero $flush_to_zero^ ]] [[ propagate_nan $propagate_nan^ ]] attrs : "
           "type($result)"))

op(72, "mini", "MinIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   attrs={"signedness": Signedness},
   format="$lhs , $rhs kw($signedness) attrs : type($result)")

op(73, "mmaf", "MmaFOp", flags=3,
   operands={"lhs": MMAF_OPERAND, "rhs": MMAF_OPERAND, "acc": MMAF_RESULT},
   results={"result": MMAF_RESULT},
   attrs={"fast_acc!0": UNIT},
   traits=[Pure(), AllTypesMatch("acc", "result"), AllElementTypesMatch("lhs", "rhs"),
           AllRanksMatch("lhs", "rhs", "acc")],
   format="$lhs , $rhs , $acc [[ fast_acc $fast_acc^ ]] attrs : type($lhs) , type($rhs) , type($acc)")

op(74, "mmai", "MmaIOp",
   operands={"lhs": MMAI_OPERAND, "rhs": MMAI_OPERAND, "acc": MMAI_ACC},
   results={"result": MMAI_RESULT},
   attrs={"signedness_lhs": Signedness, "signedness_rhs": Signedness},
   traits=[Pure(), AllTypesMatch("acc", "result"), AllElementTypesMatch("lhs", "rhs"),
           AllRanksMatch("lhs", "rhs", "acc")],
   format="$lhs , $rhs , $acc kw($signedness_lhs) kw($signedness_rhs) attrs : type($lhs) , type($rhs) , type($acc)")

op(75, "module", "ModuleOp", flags=3,
   attrs={"sym_name": "str", "producer?0@3": "str"},
   regions={"body": ANY_REGION},
   format="%- sym($sym_name) attrs region(0)")

op(76, "mulf", "MulFOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "lhs", "rhs"),
   attrs={"flush_to_zero!0": UNIT, "rounding_mode": RoundingMode},
   format=("$lhs , $rhs rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : "
           "type($result)"))

op(77, "mulhii", "MulhiIOp",
   **_same_type(INT_TILE, "x", "y"),
   format="$x , $y attrs : type($result)")

op(78, "muli", "MulIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   attrs={"overflow": IntegerOverflow},
   format="$lhs , $rhs [[ overflow ~ $overflow=none^ ]] attrs : type($result)")

op(79, "negf", "NegFOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(80, "negi", "NegIOp",
   **_same_type(INT_TILE, "source"),
   attrs={"overflow@2": IntegerOverflow},
   format="$source [[ overflow ~ $overflow=none^ ]] attrs : type($result)")

op(81, "offset", "OffsetOp",
   operands={"ptr": PTR_TILE, "offset": INT_TILE},
   results={"result": PTR_TILE},
   traits=[Pure(), AllTypesMatch("result", "ptr"), Elementwise(), SameOperandsAndResultShape(), ViewLike("ptr")],
   format="$ptr , $offset attrs : type($ptr) , type($offset) -> type($result)")

op(82, "ori", "OrIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   format="$lhs , $rhs attrs : type($result)")

op(83, "permute", "PermuteOp",
   operands={"source": ANY_TILE},
   results={"result": ANY_TILE},
   attrs={"permutation": "i32arr"},
   traits=[Pure(), AllElementTypesMatch("source", "result"), AllRanksMatch("source", "result"), ViewLike("source")],
   format="$source $permutation attrs : type($source) -> type($result)")

op(84, "pow", "FPowFOp",
   operands={"source": BASE_FLOAT_TILE, "exponent": BASE_FLOAT_TILE},
   results={"result": BASE_FLOAT_TILE},
   traits=[Pure(), AllTypesMatch("result", "source", "exponent"), AllRanksMatch("source", "exponent", "result")],
   format="=fpowf $source , $exponent attrs : type($result)")

op(85, "print_tko", "PrintTkoOp", flags=2, counted_results=True,
   operands={"args*": ANY_TILE, "token?0@2": TOKEN},
   results={"result_token?": TOKEN},     # 13.1 prints returned no token
   attrs={"str": "str"},
   traits=[MemoryEffects(Write(resource=OUTPUT), ordered=True)],
   format="+token $str [[ , $args^ ]] [[ token ~ = ~ $token^ ]] attrs [[ : type($args)^ ]] -> type($results)")

op(86, "ptr_to_int", "PtrToIntOp",
   **_conversion(PTR_TILE, I64_TILE, "source", "result"),
   format="$source attrs : type($source) -> type($result)")

op(87, "ptr_to_ptr", "PtrToPtrOp",
   **_conversion(PTR_TILE, PTR_TILE, "source", "result", traits=[ViewLike("source")]),
   format="$source attrs : type($source) -> type($result)")

op(88, "reduce", "ReduceOp", counted_operands=True, counted_results=True,
   operands={"operands*": ANY_TILE},
   results={"results*": ANY_TILE},
   attrs={"dim": Attr("int", I32_NON_NEGATIVE), "identities": "array"},
   regions={"body": SizedRegion(1)},
   traits=[RecursiveMemoryEffects(), SameOperandsShape(), SingleBlockImplicitTerminator("yield")],
   format=("%reduce ^reduce $operands attrs _ dim ~ = ~ $dim identities ~ = ~ $identities : type($operands) -> "
           "type($results) argregion(0)"))

op(89, "remf", "RemFOp",
   **_same_type(BASE_FLOAT_TILE, "lhs", "rhs"),
   format="$lhs , $rhs attrs : type($result)")

op(90, "remi", "RemIOp",
   operands={"lhs": INT_TILE, "rhs": INT_TILE},
   results={"result": INT_TILE},
   attrs={"signedness": Signedness},
   traits=[Pure(), AllTypesMatch("result", "lhs", "rhs"), AllShapesMatch("result", "lhs", "rhs")],
   format="$lhs , $rhs kw($signedness) attrs : type($result)")

op(91, "reshape", "ReshapeOp",
   operands={"source": ANY_TILE},
   results={"result": ANY_TILE},
   traits=[Pure(), SameOperandsAndResultElementType(), ViewLike("source")],
   format="%reshape $source attrs : type($source) -> type($result)")

op(92, "return", "ReturnOp", counted_operands=True, counted_results=True,
   operands={"operands*": ANY},
   traits=[HasParent("entry", "preview$func", "if", "loop"), Terminator("function")],
   format="attrs [[ $operands^ : type($operands) ]]")

op(93, "rsqrt", "RsqrtOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "source"),
   attrs={"flush_to_zero!0": UNIT},
   format="$source [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)")

op(94, "scan", "ScanOp", counted_operands=True, counted_results=True,
   operands={"operands*": ANY_TILE},
   results={"results*": ANY_TILE},
   attrs={"dim": Attr("int", I32_NON_NEGATIVE), "reverse": "bool", "identities": "array"},
   regions={"body": SizedRegion(1)},
   traits=[RecursiveMemoryEffects(), SameOperandsShape(), SingleBlockImplicitTerminator("yield")],
   format=("%- $operands attrs _ dim ~ = ~ $dim reverse ~ = ~ $reverse identities ~ = ~ $identities : "
           "type($operands) -> type($results) argregion(0)"))

op(95, "select", "SelectOp",
   operands={"cond": I1_TILE, "val_if_true": ANY_TILE, "val_if_false": ANY_TILE},
   results={"result": ANY_TILE},
   traits=[Pure(), AllTypesMatch("val_if_true", "val_if_false", "result"),
           AllShapesMatch("cond", "val_if_true", "val_if_false", "result")],
   format="$cond , $val_if_true , $val_if_false attrs : type($cond) , type($result)")

op(96, "shli", "ShLIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   attrs={"overflow": IntegerOverflow},
   format="$lhs , $rhs [[ overflow ~ $overflow=none^ ]] attrs : type($result)")

op(97, "shri", "ShRIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   attrs={"signedness": Signedness},
   format="$lhs , $rhs kw($signedness) attrs : type($result)")

op(98, "sin", "SinOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(99, "sinh", "SinHOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(100, "sqrt", "SqrtOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "source"),
   attrs={"flush_to_zero!0": UNIT, "rounding_mode": RoundingMode},
   format="$source rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)")

op(101, "store_ptr_tko", "StorePtrTkoOp", flags=True,
   operands={"destination": PTR_TILE, "value": ANY_TILE, "mask?2": I1_TILE, "token?3": TOKEN},
   results={"result_token": TOKEN},
   attrs={"memory_ordering_semantics": MemoryOrderingSemantics, "memory_scope?0": MemoryScope,
          "optimization_hints?1": "hints"},
   traits=[MemoryEffects(Write("destination"), ordered=non_weak), _STORE_TYPE, _STORE_MASK],
   format=("$memory_ordering_semantics [[ $memory_scope^ ]] $destination , $value [[ , $mask^ ]] [[ token ~ = ~ "
           "$token^ ]] [[ optimization_hints = $optimization_hints^ ]] attrs : type($destination) , type($value) [[ "
           ", type($mask)^ ]] -> type($result_token)"))

op(102, "store_view_tko", "StoreViewTkoOp", flags=True, counted_results=True,
   operands={"tile": ANY_TILE, "view": TILE_VIEW, "index*": INT_TILE, "token?2": TOKEN},
   results={"result_token": TOKEN},
   attrs={"memory_ordering_semantics": MemoryOrderingSemantics, "memory_scope?0": MemoryScope,
          "optimization_hints?1": "hints", "inbounds@4": "boolarr"},
   traits=[MemoryEffects(Write("view"), ordered=non_weak)],
   format=("$memory_ordering_semantics [[ $memory_scope^ ]] $tile , $view [ $index ] [[ token = $token^ ]] [[ "
           "optimization_hints = $optimization_hints^ ]] [[ inbounds = $inbounds^ ]] attrs : type($tile) , "
           "type($view) ~ idxtypes($index) -> type($results)"))

op(103, "subf", "SubFOp", flags=True,
   **_same_type(BASE_FLOAT_TILE, "lhs", "rhs"),
   attrs={"flush_to_zero!0": UNIT, "rounding_mode": RoundingMode},
   format=("$lhs , $rhs rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : "
           "type($result)"))

op(104, "subi", "SubIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   attrs={"overflow": IntegerOverflow},
   format="$lhs , $rhs [[ overflow ~ $overflow=none^ ]] attrs : type($result)")

op(105, "tan", "TanOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   format="$source attrs : type($result)")

op(106, "tanh", "TanHOp",
   **_same_type(BASE_FLOAT_TILE, "source"),
   attrs={"rounding_mode@2": RoundingMode},
   format="$source rounding($rounding_mode=full) attrs : type($result)")

op(107, "trunci", "TruncIOp",
   **_conversion(INT4_TILE, INT4_TILE),
   attrs={"overflow": IntegerOverflow},
   format="$from [[ overflow ~ $overflow=none^ ]] attrs : type($from) -> type($to)")

op(108, "xori", "XOrIOp",
   **_same_type(INT_TILE, "lhs", "rhs"),
   format="$lhs , $rhs attrs : type($result)")

op(109, "yield", "YieldOp", counted_operands=True, counted_results=True,
   operands={"operands*": ANY},
   traits=[Pure(), Terminator("parent"), HasParent("if", "reduce", "scan")],
   format="attrs [[ $operands^ : type($operands) ]]")

op(110, "atan2", "Atan2Op", since=2,
   **_same_type(BASE_FLOAT_TILE, "x", "y"),
   format="$x , $y attrs : type($result)")

op(111, "pack", "PackOp", since=3,
   operands={"source": NUMBER4_TILE},
   results={"result": I8_TILE},
   traits=[Pure(), AllRanksMatch("source", "result")],
   format="$source attrs : type($source) -> type($result)")

op(112, "unpack", "UnpackOp", since=3,
   operands={"source": I8_TILE},
   results={"result": NUMBER4_TILE},
   traits=[Pure(), AllRanksMatch("source", "result")],
   format="$source attrs : type($source) -> type($result)")

op(113, "alloca", "AllocaOp", since=3, flags=True,
   results={"result": SCALAR_PTR},
   attrs={"global!0": UNIT, "num_elem": Attr("int", I64_MIN_0), "alignment": Attr("int", I64_MIN_0)},
   traits=[MemoryEffects(Alloc("result")), DefinesMemoryObject()],
   format="num_elem = $num_elem , alignment = $alignment [[ global $global^ ]] attrs : type($result)")

op(114, "mmaf_scaled", "MmaFScaledOp", since=3,
   operands={"lhs": MMAF_SCALED_OPERAND, "rhs": MMAF_SCALED_OPERAND, "acc": MMAF_SCALED_RESULT,
             "lhs_scale": MMAF_SCALED_SCALE, "rhs_scale": MMAF_SCALED_SCALE},
   results={"result": MMAF_SCALED_RESULT},
   traits=[Pure(), AllTypesMatch("acc", "result"), AllElementTypesMatch("lhs", "rhs"),
           AllElementTypesMatch("lhs_scale", "rhs_scale"),
           AllRanksMatch("lhs", "rhs", "acc", "lhs_scale", "rhs_scale")],
   format=("$lhs , $rhs , $acc , $lhs_scale , $rhs_scale attrs : type($lhs) , type($rhs) , type($acc) , "
           "type($lhs_scale) , type($rhs_scale)"))

op(115, "make_gather_scatter_view", "MakeGatherScatterViewOp", since=3,
   operands={"tensor_view": TENSOR_VIEW},
   results={"result": GATHER_SCATTER_VIEW},
   traits=[Pure(), ViewLike("tensor_view")],
   format="%gsview $tensor_view attrs : type($result)")

op(116, "make_strided_view", "MakeStridedViewOp", since=3,
   operands={"tensor_view": TENSOR_VIEW},
   results={"result": STRIDED_VIEW},
   traits=[Pure(), ViewLike("tensor_view")],
   format="%sview $tensor_view attrs : type($result)")

op(117, "atomic_red_view_tko", "AtomicRedViewTkoOp", since=3, flags=True, counted_results=True,
   operands={"view": TILE_VIEW, "index*": INT_TILE, "value": ANY_TILE, "token?0": TOKEN},
   results={"result_token": TOKEN},
   attrs={"memory_ordering_semantics": MemoryOrderingSemantics, "memory_scope": MemoryScope, "mode": AtomicRMWMode},
   traits=[MemoryEffects(Read("view"), Write("view"), ordered=True)],
   format=("$memory_ordering_semantics $memory_scope $view [ $index ] , $mode , $value [[ token = $token^ ]] attrs : "
           "type($value) , type($view) ~ idxtypes($index) -> type($results)"))

op(118, "insert", "InsertOp", since=4, counted_operands=True, counted_results=True,
   operands={"source": ANY_TILE, "destination": ANY_TILE, "indices*": SCALAR_I32},
   results={"result": ANY_TILE},
   traits=[Pure(), AllTypesMatch("destination", "result")],
   format="$source , $destination [ $indices ] attrs : type($source) , type($destination)")

op(119, "gdc_launch_dependents_tko", "GdcLaunchDependentsTkoOp", since=4, counted_operands=True,
   operands={"token?": TOKEN},
   results={"result_token": TOKEN},
   traits=[MemoryEffects(Write(), ordered=True)],
   format="[[ token = $token^ ]] attrs -> type($result_token)")

op(120, "gdc_wait_tko", "GdcWaitTkoOp", since=4, counted_operands=True,
   operands={"token?": TOKEN},
   results={"result_token": TOKEN},
   traits=[MemoryEffects(Write(), ordered=True)],
   format="[[ token = $token^ ]] attrs -> type($result_token)")

op(121, "fpowi", "FPowIOp", since=4,
   operands={"source": BASE_FLOAT_TILE, "exponent": INT_TILE},
   results={"result": BASE_FLOAT_TILE},
   traits=[Pure(), AllTypesMatch("source", "result")],
   format="$source , $exponent attrs : type($source) , type($exponent)")

op(122, "memory_fence_alias_tko", "MemoryFenceAliasTkoOp", since=4,
   operands={"token": TOKEN},
   results={"result_token": TOKEN},
   traits=[MemoryEffects(Write())],
   format="$token attrs")

