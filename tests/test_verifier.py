"""Tests for the cuda_tile verifier (tileiras_async.ir.verifier).

Expected messages are the first stderr line of NVIDIA's tileiras 13.5 on the same
module (captured by writing each mutated module with our writer and running the
real tool); the ops goldens under tests/data/ops/invalid carry their own.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import INVALID, PUBLIC, corpus_files, manifest, manifest_entries, requires_corpus
from tileiras_async.bytecode.errors import BytecodeError
from tileiras_async.bytecode.reader import read_module
from tileiras_async.bytecode.writer import write_module
from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import (BoolAttr, BoundedAttr, DenseElements, DictAttr, DivByAttr, FloatAttr,
                                     IntegerAttr, OptimizationHintsAttr, SameElementsAttr)
from tileiras_async.ir.core import Block, Function, Module, Operation, Region
from tileiras_async.ir.diagnostics import SourceLoc
from tileiras_async.ir.enums import (AtomicRMWMode, ComparisonOrdering, ComparisonPredicate, IntegerOverflow,
                                     MemoryOrderingSemantics, MemoryScope, RoundingMode, Signedness)
from tileiras_async.ir.verifier import EXIT_RULES, RULES, first_error, render_failure, verify_module
from tileiras_async.ir.verify_types import tile_shape_error, type_str

OPS_DATA = Path(__file__).resolve().parent / "data" / "ops"
DIVI_UNSIGNED = "error: 'cuda_tile.divi' op rounding mode 'negative_inf' is not allowed with 'unsigned' flag"


def _manifest_rejected() -> set[str]:
    return {Path(e["file"]).name for e in manifest_entries() if e.get("disasm", {}).get("rc", 0) != 0}


def _first_line(diags) -> str:
    return diags[0].render() if diags else "<valid>"


# ---------------------------------------------------------------------------
# corpus: every valid file verifies clean; the rejected ones give the real message
# ---------------------------------------------------------------------------

@requires_corpus
@pytest.mark.parametrize("path", corpus_files("*.tileirbc"), ids=lambda p: p.name)
def test_corpus(path):
    diags = verify_module(read_module(path.read_bytes()))
    if path.name in _manifest_rejected():
        assert path.name.startswith("int_ops_u32_t256.")
        assert _first_line(diags) == DIVI_UNSIGNED
    else:
        assert diags == [], [d.render() for d in diags]


@requires_corpus
def test_manifest_rejects_only_int_ops_u32():
    assert {n.split(".")[0] for n in _manifest_rejected()} == {"int_ops_u32_t256"}


@requires_corpus
def test_frontend_unsigned_floordiv():
    path = INVALID / "frontend_unsigned_floordiv.tileirbc"
    expected = manifest(INVALID)
    entry = next(e for e in expected["entries"] if e["file"].endswith(path.name))
    module = read_module(path.read_bytes())
    diags = verify_module(module)
    assert len(diags) == 1
    d = diags[0]
    assert d.op == "divi" and d.severity == "error"
    assert render_failure(d) == entry["tileiras"]["stderr"].splitlines()[:2]
    assert d.loc == SourceLoc("kernels_invalid.py", 18, 33)
    assert first_error(module) == d


# ---------------------------------------------------------------------------
# per-op goldens generated with the real tools (tests/data/ops)
# ---------------------------------------------------------------------------

def _ops_valid():
    return sorted(OPS_DATA.glob("*.tileirbc")) if OPS_DATA.is_dir() else []


def _ops_invalid():
    d = OPS_DATA / "invalid"
    return sorted(d.glob("*.tileirbc")) if d.is_dir() else []


@pytest.mark.parametrize("path", _ops_valid(), ids=lambda p: p.name)
def test_ops_valid(path):
    diags = verify_module(read_module(path.read_bytes()))
    assert diags == [], [d.render() for d in diags]


@pytest.mark.parametrize("path", _ops_invalid(), ids=lambda p: p.stem)
def test_ops_invalid(path):
    exp = json.loads(path.with_name(path.stem + ".expected.json").read_text())
    stderr = exp.get("tileiras_stderr") or exp["stderr"]
    first = stderr.splitlines()[0]
    try:
        module = read_module(path.read_bytes())
    except BytecodeError:
        assert "error at offset" in first  # a reader-level rejection; not the verifier's
        return
    diags = verify_module(module)
    assert _first_line(diags) == first
    assert "error: verification failed for deserialized cuda_tile::ModuleOp" in stderr


# ---------------------------------------------------------------------------
# rule families on modules built in code (read-modify vec_add_f32_t128 v13.4)
# ---------------------------------------------------------------------------

def base(name="vec_add_f32_t128"):
    return read_module((PUBLIC / f"{name}.v13.4.tileirbc").read_bytes())


def ops(m, name):
    return [o for f in m.functions for o in f.walk() if o.name == name]


def blk(m):
    return m.functions[0].body


def tok(m):
    return ops(m, "make_token")[0].results[0]


def i32(m):
    return ops(m, "get_tile_block_id")[0].results[0]


def tv(m):
    return ops(m, "make_tensor_view")[0].results[0]


def pv(m):
    return ops(m, "make_partition_view")[0].results[0]


def addf(m):
    return ops(m, "addf")[0]


def f32t(m):
    return addf(m).operands["lhs"]


def ins(m, *new):
    """Insert ops right before the kernel's addf."""
    b = blk(m)
    i = b.ops.index(addf(m))
    for k, o in enumerate(new):
        b.ops.insert(i + k, o)
    return new[-1]


def tile(shape, e):
    return T.TileType(tuple(shape), e)


def const(shape, e, raw=None):
    t = tile(shape, e)
    return Operation("constant", {}, {"value": DenseElements(t, raw or b"\0" * max(1, (e.width + 7) // 8))}, [t])


def op(name, operands=None, attrs=None, res=(), regions=None):
    return Operation(name, operands or {}, attrs or {}, list(res), regions)


CASES: dict = {}


def case(expected):
    def deco(fn):
        CASES[fn.__name__] = (fn, expected)
        return fn
    return deco


R = RoundingMode

@case("error: 'cuda_tile.sqrt' op approx modifier only supported for f32 data type, but got: 'f16'")
def sqrt_approx_f16(m):
    c = const((4,), T.F16); ins(m, c, op('sqrt', {'source': c.results[0]}, {'rounding_mode': R.approx, 'flush_to_zero': False}, [tile((4,), T.F16)]))
@case("error: 'cuda_tile.rsqrt' op flush_to_zero modifier only supported for f32 data type, but got: 'f64'")
def rsqrt_ftz_f64(m):
    c = const((4,), T.F64); ins(m, c, op('rsqrt', {'source': c.results[0]}, {'flush_to_zero': True}, [tile((4,), T.F64)]))
@case("error: 'cuda_tile.maxf' op flush_to_zero modifier only supported for f32 data type, but got: 'bf16'")
def maxf_ftz_bf16(m):
    c = const((4,), T.BF16); ins(m, c, op('maxf', {'lhs': c.results[0], 'rhs': c.results[0]}, {'flush_to_zero': True, 'propagate_nan': False}, [tile((4,), T.BF16)]))
@case("error: 'cuda_tile.exp2' op flush_to_zero modifier only supported for f32 data type, but got: 'f16'")
def exp2_ftz_f16(m):
    c = const((4,), T.F16); ins(m, c, op('exp2', {'source': c.results[0]}, {'flush_to_zero': True}, [tile((4,), T.F16)]))
@case("error: 'cuda_tile.itof' op integer to f8E8M0FNU conversion is not supported, please first convert to another float type")
def itof_to_e8m0(m):
    c = const((4,), T.I32); ins(m, c, op('itof', {'from': c.results[0]}, {'signedness': Signedness.signed, 'rounding_mode': R.nearest_even}, [tile((4,), T.F8E8M0FNU)]))
@case("error: 'cuda_tile.cat' op invalid concat at position 0, expected: 8 but got: 4")
def cat_result_mismatch(m):
    c = const((4, 2), T.F32); ins(m, c, op('cat', {'lhs': c.results[0], 'rhs': c.results[0]}, {'dim': 0}, [tile((4, 2), T.F32)]))
@case("error: 'cuda_tile.cat' op expect lhs and rhs shapes to match at non-concat position 1, expected: 2 but got: 4")
def cat_nonconcat_mismatch(m):
    a = const((4, 2), T.F32); b = const((4, 4), T.F32); ins(m, a, b, op('cat', {'lhs': a.results[0], 'rhs': b.results[0]}, {'dim': 0}, [tile((8, 2), T.F32)]))
@case("error: 'cuda_tile.cat' op failed to verify that all of {lhs, rhs, result} have the same element type")
def cat_elem_mismatch(m):
    a = const((4,), T.F32); b = const((4,), T.I32); ins(m, a, b, op('cat', {'lhs': a.results[0], 'rhs': b.results[0]}, {'dim': 0}, [tile((8,), T.F32)]))
@case("error: 'cuda_tile.permute' op permutation element at index 1 (2) is out of bound [0, 2)")
def permute_out_of_bound(m):
    a = const((4, 2), T.F32); ins(m, a, op('permute', {'source': a.results[0]}, {'permutation': (0, 2)}, [tile((2, 4), T.F32)]))
@case("error: 'cuda_tile.permute' op result shape invalid at index 0, expected: 2, but got: 4")
def permute_result_shape(m):
    a = const((4, 2), T.F32); ins(m, a, op('permute', {'source': a.results[0]}, {'permutation': (1, 0)}, [tile((4, 2), T.F32)]))
@case("error: 'cuda_tile.permute' op expect permutation size (3) to equal the rank of the source (2)")
def permute_size(m):
    a = const((4, 2), T.F32); ins(m, a, op('permute', {'source': a.results[0]}, {'permutation': (1, 0, 2)}, [tile((2, 4), T.F32)]))
@case("error: 'cuda_tile.extract' op expected 1 indices, but got 2")
def extract_index_count(m):
    a = const((8,), T.F32); z = const((), T.I32); ins(m, a, z, op('extract', {'source': a.results[0], 'indices': [z.results[0], z.results[0]]}, {}, [tile((4,), T.F32)]))
@case("error: 'cuda_tile.extract' op source and result element type do not match")
def extract_elem(m):
    a = const((8,), T.F32); z = const((), T.I32); ins(m, a, z, op('extract', {'source': a.results[0], 'indices': [z.results[0]]}, {}, [tile((4,), T.F16)]))
@case("error: 'cuda_tile.extract' op operand #1 must be variadic of 0D tile of i32 values, but got '!cuda_tile.tile<i64>'")
def extract_index_i64(m):
    a = const((8,), T.F32); z = const((), T.I64); ins(m, a, z, op('extract', {'source': a.results[0], 'indices': [z.results[0]]}, {}, [tile((4,), T.F32)]))
@case("error: 'cuda_tile.broadcast' op failed to verify that all of {source, result} have same rank")
def broadcast_rank(m):
    a = const((4,), T.F32); ins(m, a, op('broadcast', {'source': a.results[0]}, {}, [tile((4, 4), T.F32)]))
@case("error: 'cuda_tile.broadcast' op requires the same element type for all operands and results")
def broadcast_elem(m):
    a = const((1, 4), T.F32); ins(m, a, op('broadcast', {'source': a.results[0]}, {}, [tile((4, 4), T.F16)]))
@case("error: 'cuda_tile.reshape' op requires the same element type for all operands and results")
def reshape_elem(m):
    a = const((4,), T.F32); ins(m, a, op('reshape', {'source': a.results[0]}, {}, [tile((2, 2), T.I32)]))
@case("error: 'cuda_tile.mmaf' op shape error: dim 0 of lhs (2) and dim 0 of rhs (4) must match, but got lhs shape (2, 16, 8) and rhs shape (4, 8, 16)")
def mmaf_batch_mismatch(m):
    a = const((2, 16, 8), T.F16); b = const((4, 8, 16), T.F16); c = const((2, 16, 16), T.F32)
    ins(m, a, b, c, op('mmaf', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'fast_acc': False}, [tile((2, 16, 16), T.F32)]))
@case("error: 'cuda_tile.mmaf' op  shape error: dim 0 of lhs (16) and dim 0 of acc (32) must match, but got lhs shape (16, 8) and acc shape (32, 16)")
def mmaf_acc_rows(m):
    a = const((16, 8), T.F16); b = const((8, 16), T.F16); c = const((32, 16), T.F32)
    ins(m, a, b, c, op('mmaf', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'fast_acc': False}, [tile((32, 16), T.F32)]))
@case("error: 'cuda_tile.mmaf' op  shape error: dim 1 of rhs (16) and dim 1 of acc (32) must match, but got rhs shape (8, 16) and acc shape (16, 32)")
def mmaf_acc_cols(m):
    a = const((16, 8), T.F16); b = const((8, 16), T.F16); c = const((16, 32), T.F32)
    ins(m, a, b, c, op('mmaf', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'fast_acc': False}, [tile((16, 32), T.F32)]))
@case("error: 'cuda_tile.mmaf' op unsupported combination of element types. Input type 'f64' expects accumulator/result type to be one of {'f64'}, but got 'f32'")
def mmaf_f64_f32acc(m):
    a = const((16, 8), T.F64); b = const((8, 16), T.F64); c = const((16, 16), T.F32)
    ins(m, a, b, c, op('mmaf', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'fast_acc': False}, [tile((16, 16), T.F32)]))
@case("error: 'cuda_tile.mmaf' op failed to verify that all of {lhs, rhs} have the same element type")
def mmaf_lhs_rhs_elem(m):
    a = const((16, 8), T.F16); b = const((8, 16), T.BF16); c = const((16, 16), T.F32)
    ins(m, a, b, c, op('mmaf', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'fast_acc': False}, [tile((16, 16), T.F32)]))
@case("error: 'cuda_tile.mmai' op operand #0 must be mmai operand tile type of i8 values, but got '!cuda_tile.tile<16x8xi16>'")
def mmai_i16(m):
    a = const((16, 8), T.I16); b = const((8, 16), T.I16); c = const((16, 16), T.I32)
    ins(m, a, b, c, op('mmai', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'signedness_lhs': Signedness.signed, 'signedness_rhs': Signedness.signed}, [tile((16, 16), T.I32)]))
@case("error: 'cuda_tile.mmai' op operand #2 must be mmai acc tile type of i32 values, but got '!cuda_tile.tile<16x16xi16>'")
def mmai_acc_i16(m):
    a = const((16, 8), T.I8); b = const((8, 16), T.I8); c = const((16, 16), T.I16)
    ins(m, a, b, c, op('mmai', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'signedness_lhs': Signedness.signed, 'signedness_rhs': Signedness.signed}, [tile((16, 16), T.I16)]))
@case("error: 'cuda_tile.mmaf' op failed to verify that all of {lhs, rhs, acc} have same rank")
def mmaf_rank_mismatch(m):
    a = const((16, 8), T.F16); b = const((2, 8, 16), T.F16); c = const((16, 16), T.F32)
    ins(m, a, b, c, op('mmaf', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'fast_acc': False}, [tile((16, 16), T.F32)]))
@case("error: 'cuda_tile.cmpi' op failed to verify that Result type has i1 element type and same shape as operands")
def cmpi_result_shape(m):
    a = const((4,), T.I32); ins(m, a, op('cmpi', {'lhs': a.results[0], 'rhs': a.results[0]}, {'comparison_predicate': ComparisonPredicate.equal, 'signedness': Signedness.signed}, [tile((8,), T.I1)]))
@case("error: 'cuda_tile.cmpf' op result #0 must be tile of i1 values, but got '!cuda_tile.tile<4xf32>'")
def cmpf_result_f32(m):
    a = const((4,), T.F32); ins(m, a, op('cmpf', {'lhs': a.results[0], 'rhs': a.results[0]}, {'comparison_predicate': ComparisonPredicate.equal, 'comparison_ordering': ComparisonOrdering.ordered}, [tile((4,), T.F32)]))
@case("error: 'cuda_tile.select' op failed to verify that all of {cond, val_if_true, val_if_false, result} have same shape")
def select_cond_shape(m):
    a = const((4,), T.F32); c = const((8,), T.I1); ins(m, a, c, op('select', {'cond': c.results[0], 'val_if_true': a.results[0], 'val_if_false': a.results[0]}, {}, [tile((4,), T.F32)]))
@case("error: 'cuda_tile.select' op operand #0 must be tile of i1 values, but got '!cuda_tile.tile<4xi32>'")
def select_cond_i32(m):
    a = const((4,), T.F32); c = const((4,), T.I32); ins(m, a, c, op('select', {'cond': c.results[0], 'val_if_true': a.results[0], 'val_if_false': a.results[0]}, {}, [tile((4,), T.F32)]))
@case("error: 'cuda_tile.addi' op failed to verify that all of {lhs, rhs, result} have same type")
def addi_type_mismatch(m):
    a = const((4,), T.I32); b = const((4,), T.I64); ins(m, a, b, op('addi', {'lhs': a.results[0], 'rhs': b.results[0]}, {'overflow': IntegerOverflow.none}, [tile((4,), T.I32)]))
@case("error: 'cuda_tile.absf' op failed to verify that all of {source, result} have same type")
def absf_shape(m):
    a = const((4,), T.F32); ins(m, a, op('absf', {'source': a.results[0]}, {}, [tile((8,), T.F32)]))
@case("error: 'cuda_tile.trunci' op truncating to larger or identical integer")
def trunci_same(m):
    a = const((4,), T.I32); ins(m, a, op('trunci', {'from': a.results[0]}, {'overflow': IntegerOverflow.none}, [tile((4,), T.I32)]))
@case("error: 'cuda_tile.exti' op failed to verify that all of {from, to} have same shape")
def exti_shape(m):
    a = const((4,), T.I16); ins(m, a, op('exti', {'from': a.results[0]}, {'signedness': Signedness.signed}, [tile((8,), T.I32)]))
@case("error: 'cuda_tile.ftoi' op result #0 must be tile of i1 or i8 or i16 or i32 or i64 values, but got '!cuda_tile.tile<4xf32>'")
def ftoi_to_f32(m):
    a = const((4,), T.F32); ins(m, a, op('ftoi', {'from': a.results[0]}, {'signedness': Signedness.signed, 'rounding_mode': R.nearest_int_to_zero}, [tile((4,), T.F32)]))
@case("error: 'cuda_tile.int_to_ptr' op operand #0 must be tile of i64 values, but got '!cuda_tile.tile<4xi32>'")
def int_to_ptr_i32(m):
    a = const((4,), T.I32); ins(m, a, op('int_to_ptr', {'source': a.results[0]}, {}, [tile((4,), T.PointerType(T.F32))]))
@case("error: 'cuda_tile.offset' op failed to verify that all of {result, ptr} have same type")
def offset_result(m):
    p = m.functions[0].body.args[0]; ins(m, op('offset', {'ptr': p, 'offset': i32(m)}, {}, [tile((), T.PointerType(T.F16))]))
@case("error: 'cuda_tile.offset' op requires the same shape for all operands and results")
def offset_shape(m):
    p = m.functions[0].body.args[0]; a = const((4,), T.I32); ins(m, a, op('offset', {'ptr': p, 'offset': a.results[0]}, {}, [tile((), T.PointerType(T.F32))]))
@case("error: 'cuda_tile.print_tko' op found unterminated format expression")
def print_unterminated(m):
    ins(m, op('print_tko', {'args': [], 'token': None}, {'str': b'value %'}, [T.TOKEN]))
@case("error: 'cuda_tile.print_tko' op incorrect number of operands: expected 2, found 1")
def print_escaped_ok_then_count(m):
    ins(m, op('print_tko', {'args': [i32(m)], 'token': None}, {'str': b'100%% %d %d'}, [T.TOKEN]))
@case("error: 'cuda_tile.assume' op 'cuda_tile.div_by' is valid only for tile of integer/pointer or tensor_view values")
def assume_div_by_float(m):
    ins(m, op('assume', {'value': f32t(m)}, {'predicate': DivByAttr(4)}, [f32t(m).type]))
@case("error: 'cuda_tile.assume' op 'cuda_tile.div_by' every_dim (1) must be >= 0 and < tile rank (1)")
def assume_div_by_along_range(m):
    a = const((8,), T.I32); ins(m, a, op('assume', {'value': a.results[0]}, {'predicate': DivByAttr(4, 2, 1)}, [tile((8,), T.I32)]))
@case("error: 'cuda_tile.assume' op expected 'cuda_tile.div_by' every_dim to be within 0 and the size of the respective dimension (8)")
def assume_div_by_every_big(m):
    a = const((8,), T.I32); ins(m, a, op('assume', {'value': a.results[0]}, {'predicate': DivByAttr(4, 16, 0)}, [tile((8,), T.I32)]))
@case("error: 'cuda_tile.assume' op 'cuda_tile.div_by' 'every'/'along' cannot be used if the constrained value is a 0D tile")
def assume_div_by_0d_every(m):
    ins(m, op('assume', {'value': i32(m)}, {'predicate': DivByAttr(4, 1, 0)}, [tile((), T.I32)]))
@case("error: 'cuda_tile.assume' op 'cuda_tile.div_by' 'every'/'along' cannot be used if the constrained value is a tensor_view")
def assume_div_by_tv_every(m):
    ins(m, op('assume', {'value': tv(m)}, {'predicate': DivByAttr(4, 1, 0)}, [tv(m).type]))
@case("error: 'cuda_tile.assume' op expected number of values in 'cuda_tile.same_elements' (2) to match rank of constrained tile (1)")
def assume_same_elements_rank(m):
    a = const((8,), T.I32); ins(m, a, op('assume', {'value': a.results[0]}, {'predicate': SameElementsAttr((1, 2))}, [tile((8,), T.I32)]))
@case("error: 'cuda_tile.assume' op expected 'cuda_tile.same_elements' value 0 to be within 0 and the size of the respective dimension (8)")
def assume_same_elements_value(m):
    a = const((8,), T.I32); ins(m, a, op('assume', {'value': a.results[0]}, {'predicate': SameElementsAttr((16,))}, [tile((8,), T.I32)]))
@case("error: 'cuda_tile.assume' op 'cuda_tile.same_elements' is valid only for tile of integer/pointer values")
def assume_same_elements_float(m):
    ins(m, op('assume', {'value': f32t(m)}, {'predicate': SameElementsAttr((1,))}, [f32t(m).type]))
@case("error: 'cuda_tile.assume' op 'cuda_tile.bounded' expects upper bound to be within [-128, 127]")
def assume_bounded_range(m):
    a = const((8,), T.I8); ins(m, a, op('assume', {'value': a.results[0]}, {'predicate': BoundedAttr(0, 300)}, [tile((8,), T.I8)]))
@case("error: 'cuda_tile.assume' op 'cuda_tile.bounded' expects lower bound to be within [-128, 127]")
def assume_bounded_lb_range(m):
    a = const((8,), T.I8); ins(m, a, op('assume', {'value': a.results[0]}, {'predicate': BoundedAttr(-200, None)}, [tile((8,), T.I8)]))
@case("error: 'cuda_tile.assume' op failed to verify that all of {value, result} have same type")
def assume_type_mismatch(m):
    ins(m, op('assume', {'value': i32(m)}, {'predicate': BoundedAttr(0, None)}, [tile((), T.I64)]))
@case("error: 'cuda_tile.alloca' op 'alignment' (2) must be at least the natural size (4 bytes) for element type 'f32'")
def alloca_natural(m):
    ins(m, op('alloca', {}, {'global': False, 'num_elem': 4, 'alignment': 2}, [tile((), T.PointerType(T.F32))]))
@case("error: 'cuda_tile.atomic_rmw_tko' op expected pointee type ('f32') to match element type of 'arg' ('i32')")
def atomic_rmw_pointee(m):
    p = const((4,), T.I64); ip = op('int_to_ptr', {'source': p.results[0]}, {}, [tile((4,), T.PointerType(T.F32))])
    a = const((4,), T.I32)
    ins(m, p, ip, a, op('atomic_rmw_tko', {'pointers': ip.results[0], 'arg': a.results[0], 'mask': None, 'token': None}, {'memory_ordering_semantics': MemoryOrderingSemantics.relaxed, 'memory_scope': MemoryScope.device, 'mode': AtomicRMWMode.add}, [tile((4,), T.I32), T.TOKEN]))
@case("error: 'cuda_tile.atomic_rmw_tko' op 'xchg' works only with integers or float of 32 or 64 bitwidth")
def atomic_rmw_xchg_i16(m):
    p = const((4,), T.I64); ip = op('int_to_ptr', {'source': p.results[0]}, {}, [tile((4,), T.PointerType(T.I16))])
    a = const((4,), T.I16)
    ins(m, p, ip, a, op('atomic_rmw_tko', {'pointers': ip.results[0], 'arg': a.results[0], 'mask': None, 'token': None}, {'memory_ordering_semantics': MemoryOrderingSemantics.relaxed, 'memory_scope': MemoryScope.device, 'mode': AtomicRMWMode.xchg}, [tile((4,), T.I16), T.TOKEN]))
@case("error: 'cuda_tile.atomic_rmw_tko' op failed to verify that all of {pointers, arg, mask} have same shape")
def atomic_rmw_mask_shape(m):
    p = const((4,), T.I64); ip = op('int_to_ptr', {'source': p.results[0]}, {}, [tile((4,), T.PointerType(T.I32))])
    a = const((4,), T.I32); k = const((8,), T.I1)
    ins(m, p, ip, a, k, op('atomic_rmw_tko', {'pointers': ip.results[0], 'arg': a.results[0], 'mask': k.results[0], 'token': None}, {'memory_ordering_semantics': MemoryOrderingSemantics.relaxed, 'memory_scope': MemoryScope.device, 'mode': AtomicRMWMode.add}, [tile((4,), T.I32), T.TOKEN]))
@case("error: 'cuda_tile.atomic_cas_tko' op expected pointee type ('f32') to match element type of 'val' ('i32')")
def atomic_cas_pointee(m):
    p = const((4,), T.I64); ip = op('int_to_ptr', {'source': p.results[0]}, {}, [tile((4,), T.PointerType(T.F32))])
    a = const((4,), T.I32)
    ins(m, p, ip, a, op('atomic_cas_tko', {'pointers': ip.results[0], 'cmp': a.results[0], 'val': a.results[0], 'mask': None, 'token': None}, {'memory_ordering_semantics': MemoryOrderingSemantics.acq_rel, 'memory_scope': MemoryScope.sys}, [tile((4,), T.I32), T.TOKEN]))
@case("error: 'cuda_tile.store_view_tko' op expected tile type to be '!cuda_tile.tile<128xf32>' (based on view type), got '!cuda_tile.tile<64xf32>'")
def store_view_wrong_tile(m):
    s = ops(m, 'store_view_tko')[0]; c = const((64,), T.F32); b = blk(m); b.ops.insert(b.ops.index(s), c); s.operands['tile'] = c.results[0]
@case(None)
def store_view_index_types(m):
    s = ops(m, 'store_view_tko')[0]; c = const((), T.I64); b = blk(m); b.ops.insert(b.ops.index(s), c); s.operands['index'] = [c.results[0]]
    s.operands['view'] = s.operands['view']
@case("error: 'cuda_tile.load_view_tko' op expected index type to be a scalar tile, got '!cuda_tile.tile<2xi32>'")
def load_view_index_nonscalar(m):
    s = ops(m, 'load_view_tko')[0]; c = const((2,), T.I32); b = blk(m); b.ops.insert(b.ops.index(s), c); s.operands['index'] = [c.results[0]]
@case("error: 'cuda_tile.store_view_tko' op memory scope is required for release store")
def store_view_release_noscope(m):
    ops(m, 'store_view_tko')[0].attrs['memory_ordering_semantics'] = MemoryOrderingSemantics.release
@case("error: 'cuda_tile.make_partition_view' op expected the type of the provided tensor_view value ('!cuda_tile.tensor_view<?xf32, strides=[?]>') to be the same as the view's tensor_view type ('!cuda_tile.tensor_view<?xf32, strides=[1]>')")
def mpv_type_mismatch(m):
    mp = ops(m, 'make_partition_view')[0]; t = mp.results[0].type
    mp.results[0].type = T.PartitionViewType(t.tile_shape, T.TensorViewType(T.F32, (T.DYNAMIC,), (1,)), t.dim_map, t.padding)
@case("error: 'cuda_tile.make_tensor_view' op expected 1 dynamic stride operands, got 0")
def mtv_stride_count(m):
    mt = ops(m, 'make_tensor_view')[0]; mt.operands['dynamicStrides'] = []
@case("error: 'cuda_tile.make_tensor_view' op expected dynamic stride index 0 to be of the same type as the other dynamic values ('!cuda_tile.tile<i32>'), got '!cuda_tile.tile<i64>'")
def mtv_dyn_type_mismatch(m):
    mt = ops(m, 'make_tensor_view')[0]; c = const((), T.I64); b = blk(m); b.ops.insert(b.ops.index(mt), c); mt.operands['dynamicStrides'] = [c.results[0]]
@case("error: 'cuda_tile.make_tensor_view' op tensor_view must preserve ptr_attr from base pointer (#cuda_tile.ptr_attr<none>)")
def mtv_ptr_attr_dropped(m):
    base = ops(m, 'make_tensor_view')[0].operands['base']; t = base.type; fn = m.functions[0]
    base.type = T.TileType(t.shape, T.PointerType(t.elem.pointee, 0))
    fn.type = T.FunctionType(tuple(a.type for a in fn.body.args), fn.type.results)   # the signature too
@case("error: 'cuda_tile.make_tensor_view' op pointer base without ptr_attr cannot produce tensor_view with ptr_attr")
def mtv_ptr_attr_invented(m):
    r = ops(m, 'make_tensor_view')[0].results[0]; t = r.type
    r.type = T.TensorViewType(t.elem, t.shape, t.strides, 0)
@case("error: 'cuda_tile.get_index_space_shape' op expected 1 results due to view index space rank, but got 2")
def get_index_space_count(m):
    ins(m, op('get_index_space_shape', {'src': pv(m)}, {}, [tile((), T.I32), tile((), T.I32)]))
@case("error: 'cuda_tile.get_tensor_shape' op expected 1 results due to tensor rank, but got 2")
def get_tensor_shape_count(m):
    ins(m, op('get_tensor_shape', {'src': tv(m)}, {}, [tile((), T.I32), tile((), T.I32)]))
@case("error: 'cuda_tile.mmai' op result #0 must be mmai result tile type of i32 values, but got '!cuda_tile.tile<16x16xi16>'")
def mmai_result_i16(m):
    a = const((16, 8), T.I8); b = const((8, 16), T.I8); c = const((16, 16), T.I32)
    ins(m, a, b, c, op('mmai', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'signedness_lhs': Signedness.signed, 'signedness_rhs': Signedness.signed}, [tile((16, 16), T.I16)]))
@case("error: 'cuda_tile.mmaf' op operand #0 must be mmaf operand tile type of f16 or bf16 or f32 or f64 or tf32 or f8E4M3FN or f8E5M2 values, but got '!cuda_tile.tile<16x8xi32>'")
def mmaf_i32(m):
    a = const((16, 8), T.I32); b = const((8, 16), T.F16); c = const((16, 16), T.F32)
    ins(m, a, b, c, op('mmaf', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'fast_acc': False}, [tile((16, 16), T.F32)]))
@case("error: 'cuda_tile.mmaf' op operand #2 must be mmaf acc/result tile type of f16 or f32 or f64 values, but got '!cuda_tile.tile<16x16xbf16>'")
def mmaf_acc_bf16(m):
    a = const((16, 8), T.F16); b = const((8, 16), T.F16); c = const((16, 16), T.BF16)
    ins(m, a, b, c, op('mmaf', {'lhs': a.results[0], 'rhs': b.results[0], 'acc': c.results[0]}, {'fast_acc': False}, [tile((16, 16), T.BF16)]))
@case("error: 'cuda_tile.divf' op invalid rounding mode specified, expect one of [nearest_even, zero, negative_inf, positive_inf, approx, full]")
def divf_nearest_int(m):
    a = const((4,), T.F32); ins(m, a, op('divf', {'lhs': a.results[0], 'rhs': a.results[0]}, {'rounding_mode': R.nearest_int_to_zero, 'flush_to_zero': False}, [tile((4,), T.F32)]))
@case(None)
def divf_full_ftz_ok_f32_approx_ftz(m):
    a = const((4,), T.F32); ins(m, a, op('divf', {'lhs': a.results[0], 'rhs': a.results[0]}, {'rounding_mode': R.approx, 'flush_to_zero': True}, [tile((4,), T.F32)]))
@case("error: 'cuda_tile.fma' op invalid rounding mode specified, expect one of [nearest_even, zero, negative_inf, positive_inf]")
def fma_full(m):
    a = const((4,), T.F32); ins(m, a, op('fma', {'lhs': a.results[0], 'rhs': a.results[0], 'acc': a.results[0]}, {'rounding_mode': R.full, 'flush_to_zero': False}, [tile((4,), T.F32)]))
@case("error: 'cuda_tile.tanh' op invalid rounding mode specified, expect one of [approx, full]")
def tanh_nearest(m):
    a = const((4,), T.F32); ins(m, a, op('tanh', {'source': a.results[0]}, {'rounding_mode': R.zero}, [tile((4,), T.F32)]))
def cond(m):
    c = const((), T.I1); return c
def Y(*vals): return op('yield', {'operands': list(vals)})
def region(*ops_, args=()): return Region([Block(list(args), list(ops_))]) if ops_ or args else Region([])
@case("error: 'cuda_tile.if' op type does not match yield type, else branch yields '!cuda_tile.tile<i64>' but op result type is '!cuda_tile.tile<i32>'")
def if_yield_type(m):
    c = cond(m); a = const((), T.I32); b = const((), T.I64)
    ins(m, c, a, b, op('if', {'condition': c.results[0]}, {}, [tile((), T.I32)], [region(Y(a.results[0])), region(Y(b.results[0]))]))
@case("error: 'cuda_tile.if' op has return type of '!cuda_tile.tile<i32>' but then branch does not yield anything")
def if_then_no_yield_values(m):
    c = cond(m); a = const((), T.I32)
    ins(m, c, a, op('if', {'condition': c.results[0]}, {}, [tile((), T.I32)], [region(Y()), region(Y(a.results[0]))]))
@case("error: 'cuda_tile.if' op does not return a value, but then branch yields '!cuda_tile.tile<i32>'")
def if_no_results_but_yield(m):
    c = cond(m); a = const((), T.I32)
    ins(m, c, a, op('if', {'condition': c.results[0]}, {}, [], [region(Y(a.results[0])), region()]))
@case("error: 'cuda_tile.if' op result type 0 is a tile view, which is not supported")
def if_view_result(m):
    c = cond(m)
    ins(m, c, op('if', {'condition': c.results[0]}, {}, [pv(m).type], [region(Y(pv(m))), region(Y(pv(m)))]))
@case("error: 'cuda_tile.if' op result type 0 is a tensor_view, which is not supported")
def if_tv_result(m):
    c = cond(m)
    ins(m, c, op('if', {'condition': c.results[0]}, {}, [tv(m).type], [region(Y(tv(m))), region(Y(tv(m)))]))
@case("error: 'cuda_tile.if' op region #0 should have no arguments")
def if_region_args(m):
    c = cond(m)
    ins(m, c, op('if', {'condition': c.results[0]}, {}, [], [region(Y(), args=[tile((), T.I32)]), region()]))
@case("error: 'cuda_tile.continue' op can only be nested within a ancestor chain of 'cuda_tile.for', 'cuda_tile.loop', 'cuda_tile.if' operations")
def if_then_ends_with_continue_outside_loop(m):
    c = cond(m)
    ins(m, c, op('if', {'condition': c.results[0]}, {}, [], [region(op('continue', {'operands': []})), region()]))
def FOR(lb, ub, st, inits, res, body_args, body):
    return op('for', {'lowerBound': lb, 'upperBound': ub, 'step': st, 'initValues': inits}, {'unsignedCmp': False}, res, [region(*body, args=body_args)])
def C(*vals): return op('continue', {'operands': list(vals)})
@case("error: 'cuda_tile.for' op expected induction variable to be same type as bounds and step: '!cuda_tile.tile<i64>' vs '!cuda_tile.tile<i32>'")
def for_iv_type(m):
    z = const((), T.I32)
    ins(m, z, FOR(z.results[0], z.results[0], z.results[0], [], [], [tile((), T.I64)], [C()]))
@case("error: 'cuda_tile.for' op expected at least one block argument for induction variable")
def for_no_iv(m):
    z = const((), T.I32)
    ins(m, z, FOR(z.results[0], z.results[0], z.results[0], [], [], [], [C()]))
@case("error: `for` is missing a valid terminator. `continue` op should have operand types that match the parent loop return types: ('!cuda_tile.tile<4xf32>'), but found: ()")
def for_iter_count(m):
    z = const((), T.I32); a = const((4,), T.F32)
    ins(m, z, a, FOR(z.results[0], z.results[0], z.results[0], [a.results[0]], [tile((4,), T.F32)], [tile((), T.I32)], [C()]))
@case("error: 'cuda_tile.for' op init value 0 and region iter_value 0 have different type: '!cuda_tile.tile<4xf32>' != '!cuda_tile.tile<4xf16>'")
def for_iter_type(m):
    z = const((), T.I32); a = const((4,), T.F32)
    ins(m, z, a, FOR(z.results[0], z.results[0], z.results[0], [a.results[0]], [tile((4,), T.F32)], [tile((), T.I32), tile((4,), T.F16)], [C(a.results[0])]))
@case("error: 'cuda_tile.for' op failed to verify that all of {initValues, resultValues} have same type")
def for_result_type(m):
    z = const((), T.I32); a = const((4,), T.F32)
    ins(m, z, a, FOR(z.results[0], z.results[0], z.results[0], [a.results[0]], [tile((4,), T.F16)], [tile((), T.I32), tile((4,), T.F32)], [C(a.results[0])]))
@case("error: 'cuda_tile.yield' op expects parent op to be one of 'cuda_tile.if, cuda_tile.reduce, cuda_tile.scan'")
def for_ends_with_yield(m):
    z = const((), T.I32)
    ins(m, z, FOR(z.results[0], z.results[0], z.results[0], [], [], [tile((), T.I32)], [Y()]))
@case("error: 'cuda_tile.for' op loop-carried value 0 is a tensor_view, which is not supported")
def for_tv_iter(m):
    z = const((), T.I32)
    ins(m, z, FOR(z.results[0], z.results[0], z.results[0], [tv(m)], [tv(m).type], [tile((), T.I32), tv(m).type], [C(tv(m))]))
@case("error: 'cuda_tile.break' op expects parent op to be one of 'cuda_tile.if, cuda_tile.loop'")
def for_break(m):
    z = const((), T.I32)
    ins(m, z, FOR(z.results[0], z.results[0], z.results[0], [], [], [tile((), T.I32)], [op('break', {'operands': []})]))
def LOOP(inits, res, args, body): return op('loop', {'initValues': inits}, {}, res, [region(*body, args=args)])
@case("error: `loop` is missing a valid terminator. `continue` op should have operand types that match the parent loop iter_values: ('!cuda_tile.tile<4xf32>'), but found: ()")
def loop_continue_types(m):
    a = const((4,), T.F32)
    ins(m, a, LOOP([a.results[0]], [], [tile((4,), T.F32)], [C()]))
@case("error: 'cuda_tile.break' op operand types must correspond to the parent loop result types: () vs ('!cuda_tile.tile<4xf32>')")
def loop_break_types(m):
    a = const((4,), T.F32)
    ins(m, a, LOOP([], [tile((4,), T.F32)], [], [op('break', {'operands': []})]))
@case("error: `loop` is missing a valid terminator. `continue` op should have operand types that match the parent loop iter_values: ('!cuda_tile.tile<4xf32>'), but found: ()")
def loop_iter_count(m):
    a = const((4,), T.F32)
    ins(m, a, LOOP([a.results[0]], [], [], [C()]))
@case("error: 'cuda_tile.yield' op expects parent op to be one of 'cuda_tile.if, cuda_tile.reduce, cuda_tile.scan'")
def loop_ends_with_yield(m):
    ins(m, LOOP([], [], [], [Y()]))
@case("error: 'cuda_tile.break' op operand types must correspond to the parent loop result types: ('!cuda_tile.tile<4xf32>') vs ()")
def loop_nested_if_break_ok_then_bad(m):
    c = cond(m); a = const((4,), T.F32)
    inner = op('if', {'condition': c.results[0]}, {}, [], [region(op('break', {'operands': [a.results[0]]})), region()])
    ins(m, c, a, LOOP([], [], [], [inner, C()]))
@case("error: 'cuda_tile.return' op expects parent op to be one of 'cuda_tile.entry, cuda_tile.preview$func, cuda_tile.if, cuda_tile.loop'")
def return_in_for(m):
    z = const((), T.I32)
    ins(m, z, FOR(z.results[0], z.results[0], z.results[0], [], [], [tile((), T.I32)], [op('return', {'operands': []})]))
@case("error: 'cuda_tile.yield' op expects parent op to be one of 'cuda_tile.if, cuda_tile.reduce, cuda_tile.scan'")
def yield_in_loop(m):
    ins(m, LOOP([], [], [], [Y()]))
def RED(name, operands, res, args, body, dim=0, ids=None, reverse=False):
    attrs = {'dim': dim, 'identities': tuple(ids if ids is not None else [IntegerAttr(T.I32, 0)] * len(operands))}
    if name == 'scan': attrs['reverse'] = reverse
    return op(name, {'operands': operands}, attrs, res, [region(*body, args=args)])
S = lambda e: tile((), e)
@case("error: 'cuda_tile.reduce' op expect 0-rank tile type at index: 0 but got: '!cuda_tile.tile<1xi32>'")
def reduce_arg_rank(m):
    a = const((8,), T.I32)
    ins(m, a, RED('reduce', [a.results[0]], [S(T.I32)], [tile((1,), T.I32), S(T.I32)], [Y(a.results[0])]))
@case("error: 'cuda_tile.reduce' op expect same element type for block argument at index: 0 and 1 but got: 'i32' and 'i64'")
def reduce_arg_pair_elem(m):
    a = const((8,), T.I32)
    b = RED('reduce', [a.results[0]], [S(T.I32)], [S(T.I32), S(T.I64)], [Y()])
    b.regions[0].blocks[0].ops.pop(); b.regions[0].blocks[0].ops.append(Y(b.regions[0].blocks[0].args[0]))
    ins(m, a, b)
@case("error: 'cuda_tile.reduce' op expect same type for operand at index: 0 and block argument at index: 0 but got: 'i32' and 'i64'")
def reduce_operand_arg_elem(m):
    a = const((8,), T.I32)
    b = RED('reduce', [a.results[0]], [S(T.I32)], [S(T.I64), S(T.I64)], [Y()])
    b.regions[0].blocks[0].ops.pop(); b.regions[0].blocks[0].ops.append(Y(b.regions[0].blocks[0].args[0]))
    ins(m, a, b)
@case("error: 'cuda_tile.reduce' op expect number of terminators operands (0) to match number of operands (1)")
def reduce_yield_count(m):
    a = const((8,), T.I32)
    ins(m, a, RED('reduce', [a.results[0]], [S(T.I32)], [S(T.I32), S(T.I32)], [Y()]))
@case("error: 'cuda_tile.reduce' op expect same type for operand at index: 0 and terminator argument at index: 0 but got: 'i32' and 'f32'")
def reduce_yield_elem(m):
    a = const((8,), T.I32); f = const((), T.F32)
    ins(m, a, f, RED('reduce', [a.results[0]], [S(T.I32)], [S(T.I32), S(T.I32)], [Y(f.results[0])]))
@case("error: 'cuda_tile.reduce' op inferred type(s) '!cuda_tile.tile<i32>' are incompatible with return type(s) of operation '!cuda_tile.tile<8xi32>'")
def reduce_result_shape(m):
    a = const((8,), T.I32)
    b = RED('reduce', [a.results[0]], [tile((8,), T.I32)], [S(T.I32), S(T.I32)], [Y()])
    b.regions[0].blocks[0].ops.pop(); b.regions[0].blocks[0].ops.append(Y(b.regions[0].blocks[0].args[0])); ins(m, a, b)
@case("error: 'cuda_tile.reduce' op dimension (1) is out of bound [0, 1)")
def reduce_dim_oob(m):
    a = const((8,), T.I32)
    b = RED('reduce', [a.results[0]], [tile((8,), T.I32)], [S(T.I32), S(T.I32)], [Y()], dim=1)
    b.regions[0].blocks[0].ops.pop(); b.regions[0].blocks[0].ops.append(Y(b.regions[0].blocks[0].args[0])); ins(m, a, b)
@case("error: 'cuda_tile.reduce' op expect identities to match the number of operands but got: 1 operands and 2 identities")
def reduce_identity_count(m):
    a = const((8,), T.I32)
    b = RED('reduce', [a.results[0]], [S(T.I32)], [S(T.I32), S(T.I32)], [Y()], ids=[IntegerAttr(T.I32, 0)] * 2)
    b.regions[0].blocks[0].ops.pop(); b.regions[0].blocks[0].ops.append(Y(b.regions[0].blocks[0].args[0])); ins(m, a, b)
@case("error: 'cuda_tile.reduce' op requires the same shape for all operands")
def reduce_operand_shapes(m):
    a = const((8,), T.I32); c = const((4,), T.I32)
    b = RED('reduce', [a.results[0], c.results[0]], [S(T.I32), S(T.I32)], [S(T.I32)] * 4, [Y()])
    bb = b.regions[0].blocks[0]; bb.ops.pop(); bb.ops.append(Y(bb.args[0], bb.args[2])); ins(m, a, c, b)
@case("error: 'cuda_tile.assert' op only memory-effect-free operations are allowed inside 'cuda_tile.reduce'")
def reduce_impure_divi_ok_assert_bad(m):
    a = const((8,), T.I32)
    b = RED('reduce', [a.results[0]], [S(T.I32)], [S(T.I32), S(T.I32)], [Y()])
    bb = b.regions[0].blocks[0]; bb.ops.pop()
    d = op('divi', {'lhs': bb.args[0], 'rhs': bb.args[1]}, {'signedness': Signedness.signed, 'rounding': R.zero}, [S(T.I32)])
    t = const((), T.I1)
    bb.ops += [d, t, op('assert', {'condition': t.results[0]}, {'message': b'x'}), Y(d.results[0])]
    ins(m, a, b)
@case("error: 'cuda_tile.scan' op expect same type for operand at index: 0 and result at index: 0")
def scan_result_type(m):
    a = const((8,), T.I32)
    b = RED('scan', [a.results[0]], [tile((8,), T.I64)], [S(T.I32), S(T.I32)], [Y()])
    b.regions[0].blocks[0].ops.pop(); b.regions[0].blocks[0].ops.append(Y(b.regions[0].blocks[0].args[0])); ins(m, a, b)
@case("error: 'cuda_tile.scan' op dimension (3) is out of bound [0, 1)")
def scan_dim_oob(m):
    a = const((8,), T.I32)
    b = RED('scan', [a.results[0]], [tile((8,), T.I32)], [S(T.I32), S(T.I32)], [Y()], dim=3)
    b.regions[0].blocks[0].ops.pop(); b.regions[0].blocks[0].ops.append(Y(b.regions[0].blocks[0].args[0])); ins(m, a, b)
@case("error: 'cuda_tile.return' op expects parent op to be one of 'cuda_tile.entry, cuda_tile.preview$func, cuda_tile.if, cuda_tile.loop'")
def reduce_identity_bf16_f16_ok_then_bad(m):
    a = const((8,), T.BF16)
    b = RED('reduce', [a.results[0]], [S(T.BF16)], [S(T.BF16), S(T.BF16)], [Y()], ids=[FloatAttr(T.F16, 0)])
    bb = b.regions[0].blocks[0]; bb.ops.pop(); bb.ops.append(op('return', {'operands': []})); ins(m, a, b)
@case(None)
def return_in_loop(m):
    ins(m, LOOP([], [], [], [op('return', {'operands': []})]))
@case(None)
def return_in_loop_if(m):
    c = cond(m)
    inner = op('if', {'condition': c.results[0]}, {}, [], [region(op('return', {'operands': []})), region()])
    ins(m, c, LOOP([], [], [], [inner, C()]))
@case("error: 'cuda_tile.return' op has 1 operands, but enclosing function (@vec_add_Kt1_A1f32_1l0_A1f32_1l0_A1f32_1l0_I128) returns 0")
def return_in_loop_values(m):
    ins(m, LOOP([], [], [], [op('return', {'operands': [i32(m)]})]))
@case("error: 'cuda_tile.return' op must be used within a cuda_tile.entry, cuda_tile.if, or cuda_tile.loop operation")
def return_in_if_in_for(m):
    z = const((), T.I32); c = cond(m)
    inner = op('if', {'condition': c.results[0]}, {}, [], [region(op('return', {'operands': []})), region()])
    ins(m, z, c, FOR(z.results[0], z.results[0], z.results[0], [], [], [tile((), T.I32)], [inner, C()]))
@case("error: 'cuda_tile.break' op can only be nested within a ancestor chain of 'cuda_tile.loop', 'cuda_tile.if' operations")
def break_in_for_if(m):
    z = const((), T.I32); c = cond(m)
    inner = op('if', {'condition': c.results[0]}, {}, [], [region(op('break', {'operands': []})), region()])
    ins(m, z, c, FOR(z.results[0], z.results[0], z.results[0], [], [], [tile((), T.I32)], [inner, C()]))
@case("error: 'cuda_tile.continue' op can only be nested within a ancestor chain of 'cuda_tile.for', 'cuda_tile.loop', 'cuda_tile.if' operations")
def continue_in_if_top(m):
    c = cond(m)
    ins(m, c, op('if', {'condition': c.results[0]}, {}, [], [region(C()), region()]))



@requires_corpus
@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_case(name):
    fn, expected = CASES[name]
    m = base()
    fn(m)
    diags = verify_module(m)
    assert _first_line(diags) == (expected or "<valid>")
    # the same module after a bytecode round trip gives the same answer
    assert _first_line(verify_module(read_module(write_module(m)))) == (expected or "<valid>")


# ---------------------------------------------------------------------------
# modules built from scratch
# ---------------------------------------------------------------------------

PTR_F32 = tile((), T.PointerType(T.F32))
S_I32 = tile((), T.I32)


def kernel(*body_ops, inputs=(PTR_F32, S_I32), name=b"k") -> tuple[Module, Block]:
    sig = T.FunctionType(tuple(inputs), ())
    body = Block(sig.inputs)
    body.ops.extend(body_ops)
    body.ops.append(op("return", {"operands": []}))
    return Module(version=(13, 4, 0), functions=[Function(name, sig, body)]), body


def _loop_sum():
    """for i in [0, n): acc += reduce(x) -- valid."""
    zero = const((), T.I32)
    x = const((8,), T.I32)
    red = op("reduce", {"operands": [x.results[0]]}, {"dim": 0, "identities": (IntegerAttr(T.I32, 0),)}, [S_I32],
             [Region([Block([S_I32, S_I32])])])
    rb = red.regions[0].blocks[0]
    add = op("addi", {"lhs": rb.args[0], "rhs": rb.args[1]}, {"overflow": IntegerOverflow.none}, [S_I32])
    rb.ops += [add, op("yield", {"operands": [add.results[0]]})]
    loop = op("for", {"lowerBound": zero.results[0], "upperBound": zero.results[0], "step": zero.results[0],
                      "initValues": [zero.results[0]]}, {"unsignedCmp": False}, [S_I32],
              [Region([Block([S_I32, S_I32])])])
    lb = loop.regions[0].blocks[0]
    acc = op("addi", {"lhs": lb.args[1], "rhs": red.results[0]}, {"overflow": IntegerOverflow.none}, [S_I32])
    lb.ops += [x, red, acc, op("continue", {"operands": [acc.results[0]]})]
    return zero, loop


def test_scratch_valid_module():
    m, _ = kernel(*_loop_sum())
    assert verify_module(m) == []


def test_scratch_divi_unsigned_floor():
    c = const((4,), T.I32)
    d = op("divi", {"lhs": c.results[0], "rhs": c.results[0]},
           {"signedness": Signedness.unsigned, "rounding": RoundingMode.negative_inf}, [tile((4,), T.I32)])
    m, _ = kernel(c, d)
    (diag,) = verify_module(m)
    assert diag.render() == DIVI_UNSIGNED
    assert diag.op == "divi" and diag.loc is None
    d.attrs["signedness"] = Signedness.signed
    assert verify_module(m) == []


def test_scratch_order_is_pre_order_with_region_checks_after_children():
    """The loop's own checks come before its body's; its region checks after them."""
    zero, loop = _loop_sum()
    lb = loop.regions[0].blocks[0]
    bad = const((4,), T.I32)
    neg = op("negi", {"source": bad.results[0]}, {"overflow": IntegerOverflow.no_unsigned_wrap}, [tile((4,), T.I32)])
    lb.ops[0:0] = [bad, neg]
    loop.regions[0].blocks[0].args[0].type = tile((), T.I64)   # induction variable type (region check)
    loop.operands["step"] = const((), T.I64).results[0]        # bound types (the op's own check)
    m, _ = kernel(zero, loop)
    msgs = [d.render() for d in verify_module(m)]
    assert msgs == [
        "error: 'cuda_tile.for' op failed to verify that all of {lowerBound, upperBound, step} have same type",
        "error: 'cuda_tile.negi' op 'no_unsigned_wrap' overflow flag is not supported",
    ]
    loop.operands["step"] = zero.results[0]
    msgs = [d.render() for d in verify_module(m)]
    assert msgs == [
        "error: 'cuda_tile.negi' op 'no_unsigned_wrap' overflow flag is not supported",
        "error: 'cuda_tile.for' op expected induction variable to be same type as bounds and step: "
        "'!cuda_tile.tile<i64>' vs '!cuda_tile.tile<i32>'",
    ]
    assert first_error(m).op == "negi"


def test_scratch_entry_rules():
    m, _ = kernel(inputs=(tile((4,), T.I32),))
    assert first_error(m).render() == \
        "error: 'cuda_tile.entry' op entry op must have scalar types (rank 0 !cuda_tile.tile)"
    m, body = kernel()
    body.ops.pop()
    assert first_error(m).render() == "error: 'cuda_tile.entry' op expects a non-empty block"
    body.ops.append(const((), T.I32))
    # the op in MLIR's generic form, as the real tool prints it
    assert first_error(m).render() == ('error: block with no terminator, has %0 = "cuda_tile.constant"() '
                                       '<{value = dense<0> : !cuda_tile.tile<i32>}> : () -> !cuda_tile.tile<i32>')


def test_scratch_nested_block_without_terminator():
    c = const((), T.I1)
    k = const((), T.I32)
    iff = op("if", {"condition": c.results[0]}, {}, [], [Region([Block([], [k])]), Region([])])
    m, _ = kernel(c, iff)
    assert first_error(m).render() == (
        "error: invalid block structure: block is expected to have a terminator operation, but the last "
        "operation 'cuda_tile.constant' is not a terminator.")


# ---------------------------------------------------------------------------
# type rules (NVIDIA's tool checks them while reading the type table)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape,msg", [
    ((3,), "all dimensions must be powers of two, got 3"),
    ((1, 0, 2), "all dimensions must be positive constants, got 1, 0, 2"),
    ((4096, 8192), "tile would exceed the maximum of 16777216 elements"),
    ((4096, 4096), None),
    ((), None),
])
def test_tile_shape_rule(shape, msg):
    assert tile_shape_error(shape) == msg


def test_type_rule_on_result():
    c = const((4,), T.F32)
    c.results[0].type = tile((6,), T.F32)
    m, _ = kernel(c)
    assert first_error(m).render() == "error: all dimensions must be powers of two, got 6"
    c.results[0].type = tile((3,), T.F4E2M1FN)
    assert first_error(m).render() == "error: F4E2M1FN tiles must have an even number of elements"


def test_type_printing():
    tv_ = T.TensorViewType(T.F32, (T.DYNAMIC, 64), (64, 1))
    assert type_str(tv_) == "!cuda_tile.tensor_view<?x64xf32, strides=[64,1]>"
    assert type_str(T.PartitionViewType((8, 4), tv_, (1, 0), 2)) == \
        "!cuda_tile.partition_view<tile=(8x4), padding_value = nan, tensor_view<?x64xf32, strides=[64,1]>, " \
        "dim_map=[1, 0]>"
    assert type_str(tile((2, 2), T.PointerType(T.F16))) == "!cuda_tile.tile<2x2xptr<f16>>"
    assert type_str(T.TOKEN) == "!cuda_tile.token"


# ---------------------------------------------------------------------------
# optimization hints: never errors by default; -Wunsupported-hints / -Werr-hints behaviour
# ---------------------------------------------------------------------------

def _hints(d):
    return OptimizationHintsAttr(tuple((k.encode(), DictAttr(tuple((kk.encode(), vv) for kk, vv in v.items())))
                                       for k, v in d.items()))


def _i32a(v):
    return IntegerAttr(T.I32, v & 0xFFFFFFFF)


def _hinted_module():
    m = base()
    m.functions[0].hints = _hints({"sm_99": {"num_cta_in_cga": _i32a(3)},
                                   "sm_100": {"num_cta_in_cga": _i32a(3), "latency": _i32a(2), "foo": _i32a(1)},
                                   "sm_80": {"num_cta_in_cga": _i32a(2)}})
    ops(m, "load_view_tko")[0].attrs["optimization_hints"] = _hints(
        {"sm_100": {"num_cta_in_cga": _i32a(2), "latency": _i32a(20), "allow_tma": _i32a(1)}})
    return m


@requires_corpus
def test_hints_are_not_errors():
    assert verify_module(_hinted_module()) == []


@requires_corpus
def test_hints_warnings_match_wunsupported_hints():
    warnings = []
    assert verify_module(_hinted_module(), warn_hints=True, warnings=warnings) == []
    assert [w.render() for w in warnings] == [
        "warning: foo is not known hint for current Operation",
        "warning: latency is not known hint for current Operation",
        "warning: power-of-2 expected for sm_100.num_cta_in_cga",
        "warning: value 2 clamped to 1 for sm_80.num_cta_in_cga",
        "warning: unknown hint key sm_99",
        "warning: boolean value expected for sm_100.allow_tma",
        "warning: value 20 clamped to 10 for sm_100.latency",
        "warning: num_cta_in_cga is not known hint for current Operation",
    ]


@requires_corpus
def test_hints_error_mode_matches_werr_hints():
    warnings = []
    diags = verify_module(_hinted_module(), warn_hints=True, error_on_hints=True, warnings=warnings, first_only=True)
    assert [w.render() for w in warnings] == [
        "warning: foo is not known hint for current Operation",
        "warning: latency is not known hint for current Operation",
        "warning: power-of-2 expected for sm_100.num_cta_in_cga",
    ]
    assert [d.render() for d in diags] == ["error: 'cuda_tile.entry' op Optimization hints verification failed"]


HINT_WARNINGS = ["warning: foo is not known hint for current Operation",
                 "warning: latency is not known hint for current Operation",
                 "warning: power-of-2 expected for sm_100.num_cta_in_cga"]


@requires_corpus
@pytest.mark.parametrize("flags,rc,lines", [
    ([], 0, []),
    (["-Werr-hints"], 0, []),                     # nothing without -Wunsupported-hints, as NVIDIA's tool
    (["-Wunsupported-hints"], 0, HINT_WARNINGS + [
        "warning: value 2 clamped to 1 for sm_80.num_cta_in_cga", "warning: unknown hint key sm_99",
        "warning: boolean value expected for sm_100.allow_tma", "warning: value 20 clamped to 10 for sm_100.latency",
        "warning: num_cta_in_cga is not known hint for current Operation"]),
    (["--Wunsupported-hints", "-Werr-hints"], 3, HINT_WARNINGS + [
        "error: 'cuda_tile.entry' op Optimization hints verification failed",
        "error: verification failed for deserialized cuda_tile::ModuleOp",
        "error: input does not correspond to Tile IR bytecode"]),
], ids=["none", "werr_alone", "warn", "warn_werr"])
def test_dropin_hint_options(flags, rc, lines, tmp_path, capsys):
    """The drop-in takes NVIDIA's hidden -Wunsupported-hints / -Werr-hints (it refused them before)."""
    import subprocess
    from conftest import nvidia_bin, nvidia_env
    from tileiras_async.cli import tileiras
    path = tmp_path / "hinted.tileirbc"
    path.write_bytes(write_module(_hinted_module()))
    argv = [*flags, str(path), "--gpu-name", "sm_90", "-o", str(tmp_path / "x.cubin")]
    assert tileiras.main([*argv, "--no-cache"]) == rc
    err = capsys.readouterr().err
    assert err.splitlines() == lines
    tool = nvidia_bin("tileiras")
    if tool is not None:
        real = subprocess.run([str(tool), *argv], capture_output=True, text=True, env=nvidia_env(), timeout=120)
        assert (real.returncode, real.stderr) == (rc, err)


@requires_corpus
def test_hint_value_rules():
    m = base()
    m.functions[0].hints = _hints({
        "sm_100": {"num_cta_in_cga": _i32a(32)}, "sm_103": {"num_cta_in_cga": _i32a(0)},
        "sm_110": {"occupancy": _i32a(40)}, "sm_120": {"occupancy": _i32a(0)},
        "sm_121": {"num_worker_warps_per_cta": _i32a(3)}, "sm_90": {"num_cta_in_cga": BoolAttr(True)},
        "default": {"occupancy": BoolAttr(True), "num_cta_in_cga": IntegerAttr(T.I64, 4)}})
    warnings = []
    assert verify_module(m, warn_hints=True, warnings=warnings) == []
    assert [w.message for w in warnings] == [
        "value -1 clamped to 1 for default.occupancy",
        "value 32 clamped to 16 for sm_100.num_cta_in_cga",
        "power-of-2 expected for sm_103.num_cta_in_cga",
        "value 40 clamped to 32 for sm_110.occupancy",
        "value 0 clamped to 1 for sm_120.occupancy",
        "power-of-2 expected for sm_121.num_worker_warps_per_cta",
        "power-of-2 expected for sm_90.num_cta_in_cga",
    ]


# ---------------------------------------------------------------------------
# the rule tables
# ---------------------------------------------------------------------------

def test_every_op_has_a_rule_list():
    from tileiras_async.ir.cuda_tile import CUDA_TILE
    assert set(CUDA_TILE.ops) <= set(RULES)
    for name in ("if", "for", "loop", "reduce", "scan"):
        assert EXIT_RULES[name]
    names = [r.__name__ for r in RULES["addf"]]
    assert names[-2:] == ["rounding_mode_allowed", "ftz_only_f32"]
