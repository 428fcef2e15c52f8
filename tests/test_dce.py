"""Dead-code elimination before code generation keeps every observable effect and drops the rest."""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.bytecode.writer import write_module
from tileiras_async.interp.runner import run_kernel
from tileiras_async.tilegpu.cuda_tile_dce import eliminate_dead_code_in_module

from conftest import INVALID, corpus_case, corpus_files, requires_corpus


def _names(module):
    return [op.name for fn in module.functions for op in fn.walk()]


@requires_corpus
def test_self_feeding_accumulator_is_dropped_but_the_print_stays():
    module = read_module((INVALID / "oss_versioning_print-op-13.1.tileirbc").read_bytes())
    eliminate_dead_code_in_module(module)
    names = _names(module)
    assert names == ["loop", "print_tko", "continue", "return"]
    read_module(write_module(module))  # still a well-formed module


@requires_corpus
@pytest.mark.parametrize("path", corpus_files("*.v13.4.tileirbc")[::2], ids=lambda p: p.name.split(".")[0])
def test_corpus_kernels_compute_the_same_after_dce(refs, path):
    cid = path.name.split(".")[0]
    if cid.startswith("int_ops_u32"):
        pytest.skip("rejected by the verifier (as by the real tool)")
    original = read_module(path.read_bytes())
    reduced = read_module(path.read_bytes())
    eliminate_dead_code_in_module(reduced)
    stores = [n for n in _names(original) if n.startswith(("store", "atomic"))]
    assert [n for n in _names(reduced) if n.startswith(("store", "atomic"))] == stores
    inputs, _, grid = corpus_case(refs, cid)
    a = [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in inputs.values()]
    b = [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in inputs.values()]
    run_kernel(original, grid, a)
    run_kernel(reduced, grid, b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y, equal_nan=True)


def test_unused_load_and_dead_if_result_are_removed():
    from tileiras_async.ir import types as T
    from tileiras_async.ir.builder import ModuleBuilder, tile
    from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
    mb = ModuleBuilder()
    ptr = tile(T.PointerType(T.F32))
    with mb.kernel("k", [ptr, tile(T.I1)]) as k:
        p, cond = k.args
        k.op("load_ptr_tko", [tile(T.F32), T.TOKEN], source=p, memory_ordering_semantics=MO.weak)
        one = k.constant(np.float32(1.0), tile(T.F32))
        two = k.constant(np.float32(2.0), tile(T.F32))
        with k.region() as then_:
            then_.op("yield", operands=[one, two])
        with k.region() as else_:
            else_.op("yield", operands=[two, one])
        r = k.op("if", [tile(T.F32), tile(T.F32)], [then_.built_region, else_.built_region], condition=cond)
        k.op("store_ptr_tko", [T.TOKEN], destination=p, value=r.results[1], memory_ordering_semantics=MO.weak)
        k.op("return")
    eliminate_dead_code_in_module(mb.module)
    names = _names(mb.module)
    assert "load_ptr_tko" not in names
    if_op = next(op for op in mb.module.functions[0].walk() if op.name == "if")
    assert len(if_op.results) == 1
    assert all(len(b.block.ops[-1].operands["operands"]) == 1 for b in if_op.regions)
    read_module(write_module(mb.module))
