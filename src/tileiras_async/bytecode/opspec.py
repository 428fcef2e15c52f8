"""The op-spec table: one line per cuda_tile op describing its bytecode record.

The reader, the writer and the printer are loops over these specs; no op is
hand-coded in any of them.  Line grammar::

    OPCODE MNEMONIC/ClassName [since=13.N] [flags[@N]] : RESULTS : ATTRS : OPERANDS [: regions=N] | FORMAT

RESULTS   ``-`` none, ``*`` variadic (count-prefixed), else fixed result names.
ATTRS     in wire order: ``name=Kind`` (Kind is an enum class name, or one of
          int bool str type dense i32arr boolarr array hints pred); ``?B``
          marks an optional attribute present iff flag bit B is set; ``name!B``
          is a unit attribute (flag bit only, no payload); ``@N`` = since 13.N.
OPERANDS  ``name`` one value, ``name?B`` optional (flag bit B), ``name*``
          variadic (own count); a leading ``#`` means the operands share one
          total count instead (singles first, the variadic takes the rest).
``flags@N`` means the flags varint exists only from 13.N on.
FORMAT    the textual assembly syntax (result names and a template modeled on
          MLIR's assemblyFormat); its mini-language is documented in
          ``tileiras_async.ir.printer``, the only code that interprets it.
"""
from __future__ import annotations

from dataclasses import dataclass

TABLE = """
  0 absf/AbsFOp : result : - : source | $source attrs : type($result)
  1 absi/AbsIOp : result : - : source | $source attrs : type($result)
  2 addf/AddFOp flags : result : flush_to_zero!0 rounding_mode=RoundingMode : lhs rhs | $lhs , $rhs rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)
  3 addi/AddIOp : result : overflow=IntegerOverflow : lhs rhs | $lhs , $rhs [[ overflow ~ $overflow=none^ ]] attrs : type($result)
  4 andi/AndIOp : result : - : lhs rhs | $lhs , $rhs attrs : type($result)
  5 assert/AssertOp : - : message=str : condition | $condition , $message attrs : type($condition)
  6 assume/AssumeOp : result : predicate=pred : value | %@assume pred($predicate) , $value attrs : type($value)
  7 atomic_cas_tko/AtomicCASTkoOp flags : result result_token : memory_ordering_semantics=MemoryOrderingSemantics memory_scope=MemoryScope : pointers cmp val mask?0 token?1 | %result,result_token $memory_ordering_semantics $memory_scope $pointers , $cmp , $val [[ , $mask^ ]] [[ token ~ = ~ $token^ ]] attrs : type($pointers) , type($val) [[ , type($mask)^ ]] -> type($result) , type($result_token)
  8 atomic_rmw_tko/AtomicRMWTkoOp flags : result result_token : memory_ordering_semantics=MemoryOrderingSemantics memory_scope=MemoryScope mode=AtomicRMWMode : pointers arg mask?0 token?1 | %result,result_token $memory_ordering_semantics $memory_scope $pointers , $mode , $arg [[ , $mask^ ]] [[ token ~ = ~ $token^ ]] attrs : type($pointers) , type($arg) [[ , type($mask)^ ]] -> type($result) , type($result_token)
  9 bitcast/BitcastOp : result : - : source | $source attrs : type($source) -> type($result)
 10 break/BreakOp : * : - : # operands* | attrs [[ $operands^ : type($operands) ]]
 11 broadcast/BroadcastOp : result : - : source | %bcast $source attrs : type($source) -> type($result)
 12 cat/CatOp : result : dim=int : lhs rhs | $lhs , $rhs dim = $dim attrs : type($lhs) , type($rhs) -> type($result)
 13 ceil/CeilOp : result : - : source | $source attrs : type($result)
 14 cmpf/CmpFOp : result : comparison_predicate=ComparisonPredicate comparison_ordering=ComparisonOrdering : lhs rhs | kw($comparison_predicate) kw($comparison_ordering) $lhs , $rhs attrs : type($lhs) -> type($result)
 15 cmpi/CmpIOp : result : comparison_predicate=ComparisonPredicate signedness=Signedness : lhs rhs | kw($comparison_predicate) $lhs , $rhs , kw($signedness) attrs : type($lhs) -> type($result)
 16 constant/ConstantOp : result : value=dense : - | %@constant dense($value) attrs
 17 continue/ContinueOp : * : - : # operands* | attrs [[ $operands^ : type($operands) ]]
 18 cos/CosOp : result : - : source | $source attrs : type($result)
 19 cosh/CosHOp : result : - : source | $source attrs : type($result)
 20 divf/DivFOp flags : result : flush_to_zero!0 rounding_mode=RoundingMode : lhs rhs | $lhs , $rhs rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)
 21 divi/DivIOp : result : signedness=Signedness rounding=RoundingMode : lhs rhs | $lhs , $rhs kw($signedness) [[ rounding ~ $rounding=zero^ ]] attrs : type($result)
 22 entry/EntryOp flags : - : sym_name=str function_type=type res_attrs=array?0 optimization_hints=hints?1 : - : regions=1 | %- sym($sym_name) ~ signature(0) [[ optimization_hints ~ = ~ $optimization_hints^ ]] region(0)
 23 exp/ExpOp : result : rounding_mode=RoundingMode@3 : source | $source rounding($rounding_mode=full) attrs : type($result)
 24 exp2/Exp2Op flags : result : flush_to_zero!0 : source | $source [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)
 37 exti/ExtIOp : result : signedness=Signedness : from | $from kw($signedness) attrs : type($from) -> type($result)
 38 extract/ExtractOp : * : - : # source indices* | $source [ $indices ] attrs : type($source) -> type($results)
 39 floor/FloorOp : result : - : source | $source attrs : type($result)
 40 fma/FmaOp flags : result : flush_to_zero!0 rounding_mode=RoundingMode : lhs rhs acc | $lhs , $rhs , $acc rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)
 41 for/ForOp flags@2 : * : unsignedCmp!0 : # lowerBound upperBound step initValues* : regions=1 | %for ^for [[ unsigned $unsignedCmp^ ]] ivar(0) in _ ( $lowerBound to $upperBound , step $step ) : type($lowerBound) [[ iter_values ~ ( iterinit(0,$initValues)^ ) -> ( type($initValues) ) ]] cfregion(0,continue) attrs
 42 ftof/FToFOp : result : rounding_mode=RoundingMode : from | $from rounding($rounding_mode=nearest_even) attrs : type($from) -> type($result)
 43 ftoi/FToIOp flags@4 : result : saturating!0 signedness=Signedness rounding_mode=RoundingMode : from | $from kw($signedness) rounding($rounding_mode=nearest_int_to_zero) [[ saturating $saturating^ ]] attrs : type($from) -> type($result)
 44 get_global/GetGlobalOp : result : name=str : - | sym($name) attrs : type($result)
 45 get_index_space_shape/GetIndexSpaceShapeOp : * : - : src | $src : type($src) -> firsttype($results)
 46 get_num_tile_blocks/GetNumTileBlocksOp : gridSize_x gridSize_y gridSize_z : - : - | %gridSize_x,gridSize_y,gridSize_z attrs : type($gridSize_x)
 47 get_tensor_shape/GetTensorShapeOp : * : - : src | $src : type($src) -> firsttype($results)
 48 get_tile_block_id/GetTileBlockIdOp : blockId_x blockId_y blockId_z : - : - | %blockId_x,blockId_y,blockId_z attrs : type($blockId_x)
 49 global/GlobalOp flags@3 : - : constant!0 sym_name=str value=dense alignment=int symbol_visibility=SymbolVisibility@3 : - | vis($symbol_visibility) [[ constant $constant^ ]] sym($sym_name) [[ alignment = $alignment=0^ ]] attrs dense($value)
 50 if/IfOp : * : - : condition : regions=2 | %- $condition [[ -> ( type($results)^ ) ]] cfregion(0,yield) [[ else cfregion(1,yield)^ ]] attrs
 51 int_to_ptr/IntToPtrOp : result : - : source | $source attrs : type($source) -> type($result)
 58 iota/IotaOp : result : - : - | attrs : type($result)
 59 itof/IToFOp : result : signedness=Signedness rounding_mode=RoundingMode : from | $from kw($signedness) rounding($rounding_mode=nearest_even) attrs : type($from) -> type($result)
 60 join_tokens/JoinTokensOp : * : - : # tokens* | $tokens attrs : type($results)
 61 load_ptr_tko/LoadPtrTkoOp flags : result result_token : memory_ordering_semantics=MemoryOrderingSemantics memory_scope=MemoryScope?0 optimization_hints=hints?1 : source mask?2 paddingValue?3 token?4 | %result,result_token $memory_ordering_semantics [[ $memory_scope^ ]] $source [[ , $mask^ ]] [[ , $paddingValue^ ]] [[ token ~ = ~ $token^ ]] [[ optimization_hints = $optimization_hints^ ]] attrs : type($source) [[ , type($mask)^ ]] [[ , type($paddingValue)^ ]] -> type($result) , type($result_token)
 62 load_view_tko/LoadViewTkoOp flags : * : memory_ordering_semantics=MemoryOrderingSemantics memory_scope=MemoryScope?0 optimization_hints=hints?1 inbounds=boolarr@4 : view index* token?2 | %tile,result_token $memory_ordering_semantics [[ $memory_scope^ ]] $view [ $index ] [[ token = $token^ ]] [[ optimization_hints = $optimization_hints^ ]] [[ inbounds = $inbounds^ ]] attrs : type($view) ~ idxtypes($index) -> type($results)
 63 log/LogOp : result : - : source | $source attrs : type($result)
 64 log2/Log2Op : result : - : source | $source attrs : type($result)
 65 loop/LoopOp : * : - : # initValues* : regions=1 | %- !loop
 66 make_partition_view/MakePartitionViewOp : result : - : tensor_view | %pview $tensor_view attrs : type($result)
 67 make_tensor_view/MakeTensorViewOp : * : - : base dynamicShape* dynamicStrides* | %tview $base , shape = [ mixed($dynamicShape,shape) ] , strides = [ mixed($dynamicStrides,strides) ] attrs : [[ viewsrc($base,$dynamicShape,$dynamicStrides)^ -> ]] type($results)
 68 make_token/MakeTokenOp : result : - : - | attrs : type($result)
 69 maxf/MaxFOp flags : result : propagate_nan!0 flush_to_zero!1 : lhs rhs | $lhs , $rhs [[ flush_to_zero $flush_to_zero^ ]] [[ propagate_nan $propagate_nan^ ]] attrs : type($result)
 70 maxi/MaxIOp : result : signedness=Signedness : lhs rhs | $lhs , $rhs kw($signedness) attrs : type($result)
 71 minf/MinFOp flags : result : propagate_nan!0 flush_to_zero!1 : lhs rhs | $lhs , $rhs [[ flush_to_zero $flush_to_zero^ ]] [[ propagate_nan $propagate_nan^ ]] attrs : type($result)
 72 mini/MinIOp : result : signedness=Signedness : lhs rhs | $lhs , $rhs kw($signedness) attrs : type($result)
 73 mmaf/MmaFOp flags@3 : result : fast_acc!0 : lhs rhs acc | $lhs , $rhs , $acc [[ fast_acc $fast_acc^ ]] attrs : type($lhs) , type($rhs) , type($acc)
 74 mmai/MmaIOp : result : signedness_lhs=Signedness signedness_rhs=Signedness : lhs rhs acc | $lhs , $rhs , $acc kw($signedness_lhs) kw($signedness_rhs) attrs : type($lhs) , type($rhs) , type($acc)
 75 module/ModuleOp flags@3 : - : sym_name=str producer=str?0@3 : - : regions=1 | %- sym($sym_name) attrs region(0)
 76 mulf/MulFOp flags : result : flush_to_zero!0 rounding_mode=RoundingMode : lhs rhs | $lhs , $rhs rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)
 77 mulhii/MulhiIOp : result : - : x y | $x , $y attrs : type($result)
 78 muli/MulIOp : result : overflow=IntegerOverflow : lhs rhs | $lhs , $rhs [[ overflow ~ $overflow=none^ ]] attrs : type($result)
 79 negf/NegFOp : result : - : source | $source attrs : type($result)
 80 negi/NegIOp : result : overflow=IntegerOverflow@2 : source | $source [[ overflow ~ $overflow=none^ ]] attrs : type($result)
 81 offset/OffsetOp : result : - : ptr offset | $ptr , $offset attrs : type($ptr) , type($offset) -> type($result)
 82 ori/OrIOp : result : - : lhs rhs | $lhs , $rhs attrs : type($result)
 83 permute/PermuteOp : result : permutation=i32arr : source | $source $permutation attrs : type($source) -> type($result)
 84 pow/FPowFOp : result : - : source exponent | =fpowf $source , $exponent attrs : type($result)
 85 print_tko/PrintTkoOp flags@2 : * : str=str : args* token?0@2 | +token $str [[ , $args^ ]] [[ token ~ = ~ $token^ ]] attrs [[ : type($args)^ ]] -> type($results)
 86 ptr_to_int/PtrToIntOp : result : - : source | $source attrs : type($source) -> type($result)
 87 ptr_to_ptr/PtrToPtrOp : result : - : source | $source attrs : type($source) -> type($result)
 88 reduce/ReduceOp : * : dim=int identities=array : # operands* : regions=1 | %reduce ^reduce $operands attrs _ dim ~ = ~ $dim identities ~ = ~ $identities : type($operands) -> type($results) argregion(0)
 89 remf/RemFOp : result : - : lhs rhs | $lhs , $rhs attrs : type($result)
 90 remi/RemIOp : result : signedness=Signedness : lhs rhs | $lhs , $rhs kw($signedness) attrs : type($result)
 91 reshape/ReshapeOp : result : - : source | %reshape $source attrs : type($source) -> type($result)
 92 return/ReturnOp : * : - : # operands* | attrs [[ $operands^ : type($operands) ]]
 93 rsqrt/RsqrtOp flags : result : flush_to_zero!0 : source | $source [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)
 94 scan/ScanOp : * : dim=int reverse=bool identities=array : # operands* : regions=1 | %- $operands attrs _ dim ~ = ~ $dim reverse ~ = ~ $reverse identities ~ = ~ $identities : type($operands) -> type($results) argregion(0)
 95 select/SelectOp : result : - : cond val_if_true val_if_false | $cond , $val_if_true , $val_if_false attrs : type($cond) , type($result)
 96 shli/ShLIOp : result : overflow=IntegerOverflow : lhs rhs | $lhs , $rhs [[ overflow ~ $overflow=none^ ]] attrs : type($result)
 97 shri/ShRIOp : result : signedness=Signedness : lhs rhs | $lhs , $rhs kw($signedness) attrs : type($result)
 98 sin/SinOp : result : - : source | $source attrs : type($result)
 99 sinh/SinHOp : result : - : source | $source attrs : type($result)
100 sqrt/SqrtOp flags : result : flush_to_zero!0 rounding_mode=RoundingMode : source | $source rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)
101 store_ptr_tko/StorePtrTkoOp flags : result_token : memory_ordering_semantics=MemoryOrderingSemantics memory_scope=MemoryScope?0 optimization_hints=hints?1 : destination value mask?2 token?3 | $memory_ordering_semantics [[ $memory_scope^ ]] $destination , $value [[ , $mask^ ]] [[ token ~ = ~ $token^ ]] [[ optimization_hints = $optimization_hints^ ]] attrs : type($destination) , type($value) [[ , type($mask)^ ]] -> type($result_token)
102 store_view_tko/StoreViewTkoOp flags : * : memory_ordering_semantics=MemoryOrderingSemantics memory_scope=MemoryScope?0 optimization_hints=hints?1 inbounds=boolarr@4 : tile view index* token?2 | $memory_ordering_semantics [[ $memory_scope^ ]] $tile , $view [ $index ] [[ token = $token^ ]] [[ optimization_hints = $optimization_hints^ ]] [[ inbounds = $inbounds^ ]] attrs : type($tile) , type($view) ~ idxtypes($index) -> type($results)
103 subf/SubFOp flags : result : flush_to_zero!0 rounding_mode=RoundingMode : lhs rhs | $lhs , $rhs rounding($rounding_mode=nearest_even) [[ flush_to_zero $flush_to_zero^ ]] attrs : type($result)
104 subi/SubIOp : result : overflow=IntegerOverflow : lhs rhs | $lhs , $rhs [[ overflow ~ $overflow=none^ ]] attrs : type($result)
105 tan/TanOp : result : - : source | $source attrs : type($result)
106 tanh/TanHOp : result : rounding_mode=RoundingMode@2 : source | $source rounding($rounding_mode=full) attrs : type($result)
107 trunci/TruncIOp : result : overflow=IntegerOverflow : from | $from [[ overflow ~ $overflow=none^ ]] attrs : type($from) -> type($result)
108 xori/XOrIOp : result : - : lhs rhs | $lhs , $rhs attrs : type($result)
109 yield/YieldOp : * : - : # operands* | attrs [[ $operands^ : type($operands) ]]
110 atan2/Atan2Op since=13.2 : result : - : x y | $x , $y attrs : type($result)
111 pack/PackOp since=13.3 : result : - : source | $source attrs : type($source) -> type($result)
112 unpack/UnpackOp since=13.3 : result : - : source | $source attrs : type($source) -> type($result)
113 alloca/AllocaOp since=13.3 flags : result : global!0 num_elem=int alignment=int : - | num_elem = $num_elem , alignment = $alignment [[ global $global^ ]] attrs : type($result)
114 mmaf_scaled/MmaFScaledOp since=13.3 : result : - : lhs rhs acc lhs_scale rhs_scale | $lhs , $rhs , $acc , $lhs_scale , $rhs_scale attrs : type($lhs) , type($rhs) , type($acc) , type($lhs_scale) , type($rhs_scale)
115 make_gather_scatter_view/MakeGatherScatterViewOp since=13.3 : result : - : tensor_view | %gsview $tensor_view attrs : type($result)
116 make_strided_view/MakeStridedViewOp since=13.3 : result : - : tensor_view | %sview $tensor_view attrs : type($result)
117 atomic_red_view_tko/AtomicRedViewTkoOp since=13.3 flags : * : memory_ordering_semantics=MemoryOrderingSemantics memory_scope=MemoryScope mode=AtomicRMWMode : view index* value token?0 | $memory_ordering_semantics $memory_scope $view [ $index ] , $mode , $value [[ token = $token^ ]] attrs : type($value) , type($view) ~ idxtypes($index) -> type($results)
118 insert/InsertOp since=13.4 : * : - : # source destination indices* | $source , $destination [ $indices ] attrs : type($source) , type($destination)
119 gdc_launch_dependents_tko/GdcLaunchDependentsTkoOp since=13.4 : result_token : - : # token? | [[ token = $token^ ]] attrs -> type($result_token)
120 gdc_wait_tko/GdcWaitTkoOp since=13.4 : result_token : - : # token? | [[ token = $token^ ]] attrs -> type($result_token)
121 fpowi/FPowIOp since=13.4 : result : - : source exponent | $source , $exponent attrs : type($source) , type($exponent)
122 memory_fence_alias_tko/MemoryFenceAliasTkoOp since=13.4 : result_token : - : token | $token attrs
"""

BASE_MINOR = 1  # 13.1 is the oldest version
MAX_MINOR = 4   # newest version this reader accepts

ATTR_KINDS = frozenset("int bool str type dense i32arr boolarr array hints pred".split())


@dataclass(frozen=True, slots=True)
class AttrSpec:
    name: str
    kind: str             # enum class name, a key of ATTR_KINDS, or "unit"
    bit: int | None       # flag bit for optional and unit attributes
    since: int            # minor version


@dataclass(frozen=True, slots=True)
class OperandSpec:
    name: str
    form: str             # "one", "optional", "variadic"
    bit: int | None
    since: int


@dataclass(frozen=True, slots=True)
class OpSpec:
    opcode: int
    name: str
    cls: str                         # C++ class name, used in diagnostics
    since: int
    flags_since: int | None          # None: the op has no flags varint
    results: tuple[str, ...] | None  # None: variadic
    attrs: tuple[AttrSpec, ...]
    operands: tuple[OperandSpec, ...]
    counted_operands: bool           # one total count for all operands
    regions: int
    format: str = ""                 # assembly template, see ir/printer.py

    def has_flags(self, minor: int) -> bool:
        return self.flags_since is not None and minor >= self.flags_since

    def attr(self, name: str) -> AttrSpec | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None


def _split_mods(tok: str) -> tuple[str, int | None, int]:
    """name?B@N / name!B@N → (name, bit, since)."""
    since = BASE_MINOR
    if "@" in tok:
        tok, s = tok.split("@")
        since = int(s)
    bit = None
    for mark in "?!":
        if mark in tok:
            tok, b = tok.split(mark)
            bit = int(b) if b else None
    return tok, bit, since


def _parse_attr(tok: str, op_since: int) -> AttrSpec:
    unit = "!" in tok
    body, bit, since = _split_mods(tok)
    since = max(since, op_since)
    if unit:
        return AttrSpec(body, "unit", bit, since)
    name, kind = body.split("=")
    if kind not in ATTR_KINDS and not kind[:1].isupper():
        raise ValueError(f"unknown attribute kind {kind!r}")
    return AttrSpec(name, kind, bit, since)


def _parse_operand(tok: str, op_since: int) -> OperandSpec:
    form = "optional" if "?" in tok else "one"
    if tok.split("@")[0].endswith("*"):
        form = "variadic"
        tok = tok.replace("*", "", 1)
    name, bit, since = _split_mods(tok)
    return OperandSpec(name, form, bit, max(since, op_since))


def _parse_line(line: str) -> OpSpec:
    line, _, fmt = line.partition(" | ")  # the format column may itself contain " : "
    head, results, attrs, operands, *rest = (p.strip() for p in line.split(" : "))
    words = head.split()
    opcode = int(words[0])
    name, cls = words[1].split("/")
    since, flags_since = BASE_MINOR, None
    for w in words[2:]:
        if w.startswith("since=13."):
            since = int(w.rsplit(".", 1)[1])
        elif w.startswith("flags"):
            flags_since = int(w.split("@")[1]) if "@" in w else since
    counted = operands.startswith("#")
    operands = operands.lstrip("# ")
    regions = int(rest[0].split("=")[1]) if rest else 0
    return OpSpec(
        opcode=opcode, name=name, cls=cls, since=since, flags_since=flags_since,
        results=None if results == "*" else (() if results == "-" else tuple(results.split())),
        attrs=tuple(_parse_attr(t, since) for t in attrs.split() if t != "-"),
        operands=tuple(_parse_operand(t, since) for t in operands.split() if t != "-"),
        counted_operands=counted, regions=regions, format=fmt.strip())


def _load() -> tuple[dict[int, OpSpec], dict[str, OpSpec]]:
    by_code: dict[int, OpSpec] = {}
    for line in TABLE.strip().splitlines():
        spec = _parse_line(line)
        by_code[spec.opcode] = spec
    return by_code, {s.name: s for s in by_code.values()}


OPS_BY_CODE, OPS_BY_NAME = _load()
