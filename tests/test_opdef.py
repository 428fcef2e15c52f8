"""Op definitions (ir/opdef.py, ir/cuda_tile.py): one declaration per op, which every consumer asks.

The declarations are checked for consistency (every name a format, trait or effect mentions is declared),
the trait queries against what the ops are, and the mechanism on a second, bytecode-less dialect declared
here: the builder, printer, verifier rules, DCE and copies of the IR work for its ops unchanged.
"""
from __future__ import annotations

import copy
import pickle
import re
import subprocess
import sys

import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.bytecode.writer import write_module
from tileiras_async.ir import types as T
from tileiras_async.ir.builder import ModuleBuilder, tile
from tileiras_async.ir.cuda_tile import BASE_MINOR, CUDA_TILE, MAX_MINOR
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
from tileiras_async.ir.opdef import (OUTPUT, VARIADIC, Dialect, HasParent, LoopLike, MemoryEffects,
                                     Pure, Read, SameOperandsAndResultType, SingleBlockImplicitTerminator,
                                     TypesMatchWith, ViewLike, Write, effects_of, is_ordered,
                                     memory_effect_free, opdef, writes_memory)
from tileiras_async.ir.printer import print_module
from tileiras_async.ir.verify_ods import ods_rules
from tileiras_async.ir.verify_types import ANY_TILE
from tileiras_async.tilegpu.cuda_tile_dce import eliminate_dead_code_in_module

# ---------------------------------------------------------------------------------------------------------
# the cuda_tile declarations are consistent
# ---------------------------------------------------------------------------------------------------------


def _declared_names(d) -> set[str]:
    return {a.name for a in (*d.operands, *d.results, *d.attrs)}


@pytest.mark.parametrize("d", list(CUDA_TILE), ids=lambda d: d.name)
def test_every_name_a_declaration_mentions_is_declared(d):
    names = _declared_names(d)
    for ref in re.findall(r"\$(\w+)", d.format):
        assert ref in names or ref == "results", f"{d.name}: format refers to undeclared ${ref}"
    for t in d.traits:
        if hasattr(t, "names"):                       # AllTypesMatch and the other predicates
            assert set(t.names) <= names, t
        if isinstance(t, TypesMatchWith):
            assert {t.frm, t.to} <= names, t
        if isinstance(t, MemoryEffects):
            assert all(e.on is None or e.on in names for e in t.effects), t
        if isinstance(t, ViewLike):
            assert d.operand(t.source) is not None, t
        if isinstance(t, LoopLike):
            assert d.operand(t.inits).form == VARIADIC and d.regions, t
        if isinstance(t, SingleBlockImplicitTerminator):
            assert all(opdef(n).is_terminator for n in t.terminators), t
        if isinstance(t, HasParent):
            assert all(p in CUDA_TILE.ops or p.startswith("preview$") for p in t.parents), t


def test_the_wire_facts():
    assert CUDA_TILE.by_opcode[41] is opdef("for") and opdef("for").opcode == 41
    assert all(BASE_MINOR <= d.since <= MAX_MINOR for d in CUDA_TILE)
    assert all(a.since >= d.since for d in CUDA_TILE for a in (*d.attrs, *d.operands))
    assert opdef("atan2").since == 2 and opdef("ftoi").flags_since == 4 and not opdef("ftoi").has_flags(3)
    assert opdef("load_view_tko").counted_results and [r.name for r in opdef("load_view_tko").results] == [
        "tile", "result_token"]
    token = opdef("print_tko").operand("token")
    assert (token.form, token.bit, token.since) == ("optional", 0, 2)


def test_trait_queries():
    assert {d.name for d in CUDA_TILE if d.is_terminator} == {"yield", "continue", "break", "return"}
    assert {d.name: d.terminator.branch for d in CUDA_TILE if d.is_terminator} == {
        "yield": "parent", "continue": "next_iteration", "break": "loop_exit", "return": "function"}
    assert {d.name for d in CUDA_TILE if d.is_loop} == {"for", "loop"}
    assert opdef("for").loop.induction_vars == 1 and opdef("loop").loop.induction_vars == 0
    assert {d.name for d in CUDA_TILE if d.has_recursive_effects} == {"if", "for", "loop", "reduce", "scan"}
    writers = {d.name for d in CUDA_TILE
               if d.effects and any(e.kind == "write" and e.resource != OUTPUT for e in d.effects.effects)}
    assert writers == {"store_ptr_tko", "store_view_tko", "atomic_cas_tko", "atomic_rmw_tko", "atomic_red_view_tko",
                       "gdc_launch_dependents_tko", "gdc_wait_tko", "memory_fence_alias_tko"}
    assert opdef("addf").is_pure and opdef("addf").has_no_memory_effect
    assert not opdef("divi").is_pure and opdef("divi").has_no_memory_effect     # may trap: not speculatable
    # no effect trait at all: unknown effects (NVIDIA's ODS declares none for them)
    unknown = {d.name for d in CUDA_TILE if not d.has_no_memory_effect and not d.effects
               and not d.has_recursive_effects}
    assert unknown == {"assume", "break", "continue", "return", "entry", "global", "module"}


def _load_store_kernel(ordering):
    mb = ModuleBuilder()
    ptr = tile(T.PointerType(T.F32), 4)
    with mb.kernel("k", [tile(T.PointerType(T.F32))]) as k:
        base = k.args[0]
        ptrs = k.op("broadcast", [ptr], source=k.op("reshape", [tile(T.PointerType(T.F32), 1)], source=base).result)
        load = k.op("load_ptr_tko", [tile(T.F32, 4), T.TOKEN], source=ptrs.result, memory_ordering_semantics=ordering)
        store = k.op("store_ptr_tko", [T.TOKEN], destination=ptrs.result, value=load.result,
                     memory_ordering_semantics=MO.weak)
        k.op("return")
    return mb.module, load, store


def test_effects_of_an_operation():
    _, load, store = _load_store_kernel(MO.weak)
    (eff, value), = effects_of(load)
    assert (eff.kind, eff.on, value) == ("read", "source", load.operands["source"])
    assert not is_ordered(load) and not writes_memory(load)
    assert writes_memory(store) and not is_ordered(store)
    _, acquire, _ = _load_store_kernel(MO.acquire)
    assert is_ordered(acquire)                    # a non-weak load keeps program order
    assert memory_effect_free(load.operands["source"].owner)   # broadcast is pure


# ---------------------------------------------------------------------------------------------------------
# a second dialect, declared with the same mechanism
# ---------------------------------------------------------------------------------------------------------

TOY = Dialect("odstest")
RELABEL = TOY.op("relabel", operands={"source": ANY_TILE}, results={"result": ANY_TILE},
                 traits=[Pure(), SameOperandsAndResultType()],
                 format="$source attrs : type($source) -> type($result)")
STASH = TOY.op("stash", operands={"value": ANY_TILE, "buffer": ANY_TILE, "mask?": ANY_TILE},
               attrs={"tag?": "str", "sync!": "unit"},
               traits=[MemoryEffects(Write("buffer"), Read("mask"), ordered=True), HasParent("for")],
               format="$value , $buffer [[ , $mask^ ]] [[ sync $sync^ ]] attrs : type($value)")


def test_a_second_dialect_is_named_and_found():
    assert RELABEL.name == "odstest.relabel" and RELABEL.qualified_name == "odstest.relabel"
    assert opdef("odstest.relabel") is RELABEL and TOY["odstest.stash"] is STASH
    assert opdef("addf").qualified_name == "cuda_tile.addf"
    assert RELABEL.opcode is None and not RELABEL.has_flags(MAX_MINOR) and not TOY.by_opcode
    assert [(o.name, o.form, o.bit) for o in STASH.operands] == [
        ("value", "one", None), ("buffer", "one", None), ("mask", "optional", None)]
    assert [(a.name, a.kind, a.optional) for a in STASH.attrs] == [("tag", "str", True), ("sync", "unit", True)]
    with pytest.raises(ValueError, match="declared twice"):
        TOY.op("relabel")
    with pytest.raises(ValueError, match="unknown attribute kind"):
        CUDA_TILE.op("no_such_op", attrs={"x": "float"})


def _toy_kernel():
    mb = ModuleBuilder()
    with mb.kernel("k", [tile(T.PointerType(T.F32)), tile(T.F32)]) as k:
        p, x = k.args
        y = k.op("odstest.relabel", [tile(T.F32)], source=x).result
        k.op("odstest.relabel", [tile(T.F32)], source=x)          # unused and pure: DCE removes it
        k.op("odstest.stash", value=y, buffer=p, sync=True)       # writes: DCE keeps it and what it uses
        k.op("return")
    return mb.module


def test_a_second_dialect_prints_and_survives_dce_and_copies():
    module = _toy_kernel()
    assert print_module(module).splitlines()[1:4] == [
        "  %0 = odstest.relabel %arg1 : tile<f32> -> tile<f32>",
        "  %1 = odstest.relabel %arg1 : tile<f32> -> tile<f32>",
        "  odstest.stash %0, %arg0 sync : tile<f32>",
    ]
    ops = module.functions[0].body.ops
    assert pickle.loads(pickle.dumps(ops[0])).spec is RELABEL
    assert copy.deepcopy(module).functions[0].body.ops[2].spec is STASH
    eliminate_dead_code_in_module(module)
    assert [op.name for op in module.functions[0].body.ops] == ["odstest.relabel", "odstest.stash", "return"]
    with pytest.raises(ValueError, match="'odstest.relabel' has no bytecode encoding"):
        write_module(module)


class _Ctx:
    """What trait checks ask about an op's surroundings."""

    def __init__(self, parent: str):
        self.parent = parent

    def parent_name(self, op):
        return self.parent

    def block_of(self, op):
        return None


def _messages(d, op, parent="for"):
    return [m for m in (rule(_Ctx(parent), op) for rule in ods_rules(d)) if m]


def test_a_second_dialect_is_verified_by_its_declaration():
    module = _toy_kernel()
    relabel, _, stash = module.functions[0].body.ops[:3]
    assert _messages(RELABEL, relabel) == [] and _messages(STASH, stash) == []
    relabel.results[0].type = tile(T.F16)
    assert _messages(RELABEL, relabel) == ["requires the same type for all operands and results"]
    assert _messages(STASH, stash, parent="if") == ["expects parent op to be one of 'cuda_tile.for'"]


def test_a_pickled_op_finds_its_dialect_in_a_fresh_process():
    """Ops cross process boundaries pickled; their definitions travel by name and the receiving process
    imports the module that declares the dialect (here tilegpu, which nothing else imports there)."""
    from tileiras_async.tilegpu.ops import CONVERT_LAYOUT as spec
    assert pickle.loads(pickle.dumps(spec)) is spec and pickle.loads(pickle.dumps(STASH)) is STASH
    mb = ModuleBuilder()
    with mb.kernel("k", [tile(T.F32)]) as k:
        k.op(spec.name, [tile(T.F32)], source=k.args[0])
        k.op("return")
    code = ("import pickle, sys; fn = pickle.loads(sys.stdin.buffer.read()); "
            "print([op.spec.qualified_name for op in fn.walk()])")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(mb.module.functions[0]),
                         capture_output=True, check=True)
    assert out.stdout.decode().strip() == "['tilegpu.convert_layout', 'cuda_tile.return']"


def test_cuda_tile_still_round_trips_through_the_declarations():
    module, _, _ = _load_store_kernel(MO.weak)
    data = write_module(module)
    again = read_module(data)
    assert write_module(again) == data
    assert [op.spec for op in again.functions[0].walk()] == [op.spec for op in module.functions[0].walk()]
