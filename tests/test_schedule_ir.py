"""Schedule generation on hand-built cuda_tile IR: classification, dependence edges, constraint attributes."""
from __future__ import annotations

import pytest

from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import (
    BoolAttr,
    DictAttr,
    IntegerAttr,
    OptimizationHintsAttr,
)
from tileiras_async.ir.builder import BlockBuilder, ModuleBuilder, tile
from tileiras_async.ir.core import Block, Function, Module, Operation, Region, Value
from tileiras_async.ir.enums import (
    ComparisonOrdering,
    ComparisonPredicate,
    MemoryOrderingSemantics,
    RoundingMode,
)
from tileiras_async.schedule import (
    ScheduleOptions,
    build_loop_graph,
    classify,
    family_of,
    machine_model,
    schedule_loop,
    schedule_module,
)
from tileiras_async.schedule.constraints import (
    FORCE_SERIAL,
    GID,
    LEADER_GID,
    MAX_DEPTH,
    parse_op_constraints,
)
from tileiras_async.schedule.machine import SLOT

DYN = T.DYNAMIC
F16, F32 = T.F16, T.F32
WEAK = MemoryOrderingSemantics.weak
RN = RoundingMode.nearest_even


def op(name, results=(), regions=(), **fields) -> Operation:
    b = BlockBuilder(Block(), Module())
    return b.op(name, list(results), list(regions), **fields)


def pview(elem, shape, strides=None, padding=None):
    """make_tensor_view + make_partition_view over a fresh base pointer (a kernel argument)."""
    rank = len(shape)
    tv_t = T.TensorViewType(elem, (DYN,) * rank, strides or (DYN,) * rank)
    base = Value(tile(T.PointerType(elem)))
    tv = op("make_tensor_view", [tv_t], base=base)
    pv_t = T.PartitionViewType(tuple(shape), tv_t, tuple(range(rank)), padding)
    return op("make_partition_view", [pv_t], tensor_view=tv.result).result


def hints(**per_arch) -> OptimizationHintsAttr:
    return OptimizationHintsAttr(tuple((arch.encode(), DictAttr(tuple((k.encode(), v) for k, v in kv.items())))
                                       for arch, kv in per_arch.items()))


class Loop:
    """A `for` loop under construction: `b` builds the body; finish() closes it with continue."""

    def __init__(self, iter_types, *, kind="for"):
        self.kind = kind
        lead = [tile(T.I32)] if kind == "for" else []
        self.block = Block(lead + list(iter_types))
        self.b = BlockBuilder(self.block, Module())
        self.token = Value(T.TOKEN)
        self.iv = self.block.args[0] if kind == "for" else None
        self.args = self.block.args[1:] if kind == "for" else self.block.args

    def load(self, view, shape, elem, **attrs):
        attrs.setdefault("memory_ordering_semantics", WEAK)
        return self.b.op("load_view_tko", [tile(elem, *shape), T.TOKEN], view=view, index=[self.iv] * len(shape),
                         token=self.token, **attrs)

    def store(self, value, view, **attrs):
        attrs.setdefault("memory_ordering_semantics", WEAK)
        return self.b.op("store_view_tko", [T.TOKEN], tile=value, view=view, index=[self.iv] * len(value.type.shape),
                         token=attrs.pop("token", self.token), **attrs)

    def finish(self, *values, init=None) -> Operation:
        self.b.op("continue", operands=list(values))
        types = [a.type for a in self.args]
        init = init or [Value(t) for t in types]
        if self.kind == "for":
            i32 = Value(tile(T.I32))
            return op("for", types, [Region([self.block])], lowerBound=i32, upperBound=i32, step=i32, initValues=init)
        return op("loop", types, [Region([self.block])], initValues=init)


def matmul_loop(elem=F16, m=64, n=64, k=32):
    acc_t = tile(F32, m, n)
    lp = Loop([acc_t])
    a = lp.load(pview(elem, (m, k)), (m, k), elem)
    bb = lp.load(pview(elem, (k, n)), (k, n), elem)
    mma = lp.b.op("mmaf", [acc_t], lhs=a.results[0], rhs=bb.results[0], acc=lp.args[0])
    return lp.finish(mma.result)


def edges(g, kind=None):
    return {(e.src, e.dst, e.latency, e.distance) for e in g.edges if kind is None or e.kind == kind}


# ---------------------------------------------------------------------------
# machine models and classification
# ---------------------------------------------------------------------------

def test_families():
    assert [family_of(x) for x in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_103", "sm_110",
                                   "sm_120", "sm_121")] == \
        ["sm_80", "sm_80", "sm_80", "sm_90", "sm_90", "sm_100", "sm_100", "sm_100", "sm_120", "sm_120"]
    with pytest.raises(ValueError):
        family_of("sm_70")
    assert machine_model("sm_100").pool_caps["smem_bytes"] == 232448
    assert machine_model("sm_80").pool_caps["smem_bytes"] == 166912
    assert machine_model("sm_120").pool_caps["smem_bytes"] == 101376
    assert not machine_model("sm_80").has_tma and machine_model("sm_120").has_tma
    m = machine_model("sm_100")
    assert m.cap(SLOT["alu"]) == 3 and m.cap(SLOT["alu_or_fmaheavy"]) == 4 and m.cap(SLOT["tp_smem_wr"]) == 1


def test_view_load_classes_per_family():
    """A tile load is what the code makes of it: a cp.async copy in a pipelined loop on every family (the
    lowering has no TMA path), ld.global in a loop run as written; TMA only in the seeds' model."""
    lp = Loop([tile(F32, 64, 64)])
    ld = lp.load(pview(F16, (64, 32)), (64, 32), F16)
    for gpu in ("sm_80", "sm_90", "sm_100", "sm_120"):
        res = classify(ld, machine_model(gpu))
        assert res.rclass == "cp_async_load" and res.async_capable
        assert res.pools and res.pools[0].amount == 64 * 32 * 2
        serial = classify(ld, machine_model(gpu, copies="ld.global"))
        assert serial.rclass == "global_load" and not serial.async_capable
        assert "cp.async" in machine_model(gpu).notes[-1] and "TMA" not in " ".join(machine_model(gpu).notes[:-1])
    assert classify(ld, machine_model("sm_90", copies="tma")).rclass == "tma_load"
    with pytest.raises(ValueError, match="no TMA"):
        machine_model("sm_80", copies="tma")
    # the TMA box needs a 16-byte inner extent: 4 x f16 = 8 bytes is an ordinary load (a cp.async copy takes it)
    narrow = lp.load(pview(F16, (64, 4)), (64, 4), F16)
    assert classify(narrow, machine_model("sm_100", copies="tma")).rclass == "global_load"
    assert classify(narrow, machine_model("sm_100")).rclass == "cp_async_load"
    # non-zero padding, a static non-unit inner stride, non-weak ordering: no bulk copy
    nan_pad = lp.load(pview(F32, (16, 16), padding=2), (16, 16), F32)
    assert classify(nan_pad, machine_model("sm_90")).rclass == "global_load"
    strided = lp.load(pview(F32, (16, 16), strides=(1, 64)), (16, 16), F32)
    assert classify(strided, machine_model("sm_90", copies="tma")).rclass == "global_load"
    acq = lp.load(pview(F32, (16, 16)), (16, 16), F32, memory_ordering_semantics=MemoryOrderingSemantics.acquire)
    assert classify(acq, machine_model("sm_100")).rclass == "global_load"


def test_allow_tma_hint():
    lp = Loop([])
    off = lp.load(pview(F16, (64, 64)), (64, 64), F16, optimization_hints=hints(sm_100={"allow_tma": BoolAttr(False)}))
    assert classify(off, machine_model("sm_100", copies="tma")).rclass == "global_load"
    assert classify(off, machine_model("sm_90", copies="tma")).rclass == "tma_load"   # the entry is per target
    dflt = lp.load(pview(F16, (64, 64)), (64, 64), F16, optimization_hints=hints(default={"allow_tma": BoolAttr(False)}))
    assert classify(dflt, machine_model("sm_90", copies="tma")).rclass == "global_load"


def test_other_classes():
    m100, m90 = machine_model("sm_100"), machine_model("sm_90")
    x32 = Value(tile(F32, 64, 64))
    x16 = Value(tile(F16, 64, 64))
    add32 = op("addf", [x32.type], lhs=x32, rhs=x32, rounding_mode=RN)
    assert classify(add32, m100).uses[0].slot == SLOT["fp32x2_fp16ultra"]
    assert classify(add32, m90).uses[0].slot == SLOT["alu_or_fmaheavy"]
    assert classify(op("addf", [x16.type], lhs=x16, rhs=x16, rounding_mode=RN), m90).rclass == "fp16x2"
    assert classify(op("exp", [x32.type], source=x32, rounding_mode=RoundingMode.full), m100).rclass == "xu"
    assert classify(op("permute", [x32.type], source=x32, permutation=(1, 0)), m100).rclass == "smem_round_trip"
    assert classify(op("reshape", [tile(F32, 1, 64, 64)], source=x32), m100).rclass == "free"   # unit dim only
    assert classify(op("reshape", [tile(F32, 4096)], source=x32), m100).rclass == "smem_round_trip"
    assert classify(op("make_token", [T.TOKEN]), m100).rclass == "free"
    assert classify(op("join_tokens", [T.TOKEN], tokens=[Value(T.TOKEN)]), m100).latency == 0
    cmp = op("cmpf", [tile(T.I1, 64, 64)], lhs=x32, rhs=x32, comparison_predicate=ComparisonPredicate.less_than,
             comparison_ordering=ComparisonOrdering.ordered)
    assert classify(cmp, m100).rclass == "fmaheavy"
    i32 = Value(tile(T.I32, 64))
    assert classify(op("addi", [i32.type], lhs=i32, rhs=i32, overflow=0), m100).rclass == "int"
    mma = op("mmaf", [x32.type], lhs=x16, rhs=x16, acc=x32)
    assert classify(mma, m100).async_capable and classify(mma, m90).async_capable
    assert not classify(mma, machine_model("sm_80")).async_capable
    assert not classify(mma, machine_model("sm_120")).async_capable
    # with select-mma's choice recorded, the class is that instruction's
    for chosen, rclass, on in (("tcgen05.f16", "tcgen05", m100), ("wgmma.f16", "wgmma", m90),
                               ("m16n8k16.f16.f32", "mma_sync", m90), ("m16n8k16.f16.f32", "mma_sync", m100),
                               ("fma", "fp32", m100)):
        mma.attrs["instruction"] = chosen
        assert classify(mma, on).rclass == rclass, chosen
    assert not classify(mma, m90).async_capable    # (fma)


# ---------------------------------------------------------------------------
# dependence graph
# ---------------------------------------------------------------------------

def test_matmul_graph_edges():
    loop = matmul_loop()
    g = build_loop_graph(loop, machine_model("sm_100"))
    assert [n.name for n in g.nodes] == ["load_view_tko", "load_view_tko", "mmaf"]
    assert edges(g, "data") == {(0, 2, 8, 0), (1, 2, 8, 0)}
    assert edges(g, "carried") == {(2, 2, 8, 1)}          # the accumulator
    assert edges(g, "memory") == set()                     # two reads of different tensors
    r = schedule_loop(loop, machine_model("sm_100", copies="tma"), ScheduleOptions(strategy="modulo"))
    assert r.ii == 16 and r.mii == 16 and r.res_bottleneck == "tma"
    start = {o.index: o.start for o in r.ops}
    assert start[2] >= max(start[0], start[1]) + 8


def test_memory_and_token_edges():
    lp = Loop([])
    v = pview(F32, (64,))
    ld = lp.load(v, (64,), F32)
    y = lp.b.op("addf", [tile(F32, 64)], lhs=ld.results[0], rhs=ld.results[0], rounding_mode=RN)
    st = lp.store(y.result, v)                              # same view: read -> write (WAR)
    ld2 = lp.load(v, (64,), F32)                            # write -> read (RAW) of the same view
    other = lp.load(pview(F32, (64,)), (64,), F32)          # another tensor: unordered
    st2 = lp.store(other.results[0], pview(F32, (64,)), token=st.results[0])   # waits for st's token
    loop = lp.finish()
    m = machine_model("sm_100")
    g = build_loop_graph(loop, m)
    lat = [n.latency for n in g.nodes]
    assert (0, 2, 1, 0) in edges(g, "memory")
    assert (2, 3, lat[2], 0) in edges(g, "memory")
    assert not any(e.src == 4 or e.dst == 4 for e in g.edges if e.kind == "memory")
    assert (2, 5, lat[2], 0) in edges(g, "token")
    assert {st.name, ld2.name, st2.name} == {"store_view_tko", "load_view_tko"}


def test_ordered_chain_wraps_around():
    lp = Loop([])
    v = pview(F32, (64,))
    a = lp.load(v, (64,), F32, memory_ordering_semantics=MemoryOrderingSemantics.relaxed,
                memory_scope=1)
    lp.b.op("print_tko", [T.TOKEN], str=b"x", args=[a.results[0]], token=lp.token)
    g = build_loop_graph(lp.finish(), machine_model("sm_90"))
    # load -> print is also a data edge (latency 7), which the merge keeps; the chain closes around
    assert edges(g, "order") == {(1, 0, 1, 1)}
    assert (0, 1, g.nodes[0].latency, 0) in edges(g)


def test_passthrough_iter_args():
    t = tile(F32, 16)
    lp = Loop([t, t])
    a, b = lp.args
    x = lp.b.op("addf", [t], lhs=a, rhs=b, rounding_mode=RN)     # uses a and b
    loop = lp.finish(x.result, a)                                # a' = x, b' = a
    g = build_loop_graph(loop, machine_model("sm_100"))
    lat = g.nodes[0].latency
    # x -> (users of a) at distance 1; b receives a, i.e. x from two iterations back: distance 2
    assert edges(g, "carried") == {(0, 0, lat, 1), (0, 0, lat, 2)}


def test_loop_with_break_and_continue_units():
    i32 = tile(T.I32)
    lp = Loop([i32, i32], kind="loop")
    i, cnt = lp.args
    one = Value(i32)
    i1 = lp.b.op("addi", [i32], lhs=i, rhs=one, overflow=0).result
    c = lp.b.op("cmpi", [tile(T.I1)], lhs=i1, rhs=one, comparison_predicate=ComparisonPredicate.equal,
                signedness=1).result
    with lp.b.region() as then:
        then.op("continue", operands=[i1, cnt])
    with lp.b.region() as els:
        els.op("yield")
    lp.b.op("if", [], [then.built_region, els.built_region], condition=c)                 # node 2
    c2 = lp.b.op("addi", [i32], lhs=cnt, rhs=i1, overflow=0).result                       # node 3
    with lp.b.region() as t2:
        t2.op("break", operands=[i1, c2])
    with lp.b.region() as e2:
        e2.op("yield")
    lp.b.op("if", [], [t2.built_region, e2.built_region], condition=c)                    # node 4
    loop = lp.finish(i1, c2)
    g = build_loop_graph(loop, machine_model("sm_100"))
    assert [n.name for n in g.nodes] == ["addi", "cmpi", "if", "addi", "if"]
    ctrl = edges(g, "control")
    assert {(2, 3, 1, 0), (2, 4, 1, 0)} <= ctrl                                    # after the early continue
    assert {(4, j, 1, 1) for j in range(5)} <= ctrl                                 # break: next iteration waits
    carried = edges(g, "carried")
    assert (2, 0, g.nodes[2].latency, 1) in carried       # the if's continue feeds i (used by node 0)
    assert (0, 0, g.nodes[0].latency, 1) in carried       # and so does the body's own continue
    assert (3, 3, g.nodes[3].latency, 1) in carried       # cnt' = c2
    r = schedule_loop(loop, machine_model("sm_100"), ScheduleOptions(strategy="modulo"))
    assert r.ok and r.loop_op == "loop"


# ---------------------------------------------------------------------------
# constraint attributes
# ---------------------------------------------------------------------------

def test_constraint_attrs_inherent_then_hints():
    lp = Loop([])
    ld = lp.load(pview(F16, (64, 64)), (64, 64), F16,
                 optimization_hints=hints(sm_100={MAX_DEPTH: IntegerAttr(T.I32, 2), GID: IntegerAttr(T.I32, 3)},
                                          default={MAX_DEPTH: IntegerAttr(T.I32, 5)}))
    c = parse_op_constraints(ld, "sm_100")
    assert (c.max_depth, c.gid, c.leader_gid, c.has_gid) == (2, 3, 0, True)
    assert parse_op_constraints(ld, "sm_90").max_depth == 5
    ld.attrs[MAX_DEPTH] = 1                                     # inherent wins silently
    assert parse_op_constraints(ld, "sm_100").max_depth == 1
    ld.attrs[FORCE_SERIAL] = True
    assert parse_op_constraints(ld, "sm_100").force_serial
    ld.attrs[FORCE_SERIAL] = False                              # an absent unit attribute
    assert not parse_op_constraints(ld, "sm_100").force_serial


def big_loop():
    """A loop body the selector sends to the cost-based generator (>= 8 ops, TMA loads)."""
    t = tile(F32, 64, 64)
    lp = Loop([t])
    x = lp.args[0]
    for _ in range(3):
        ld = lp.load(pview(F32, (64, 64)), (64, 64), F32)
        x = lp.b.op("addf", [t], lhs=x, rhs=ld.results[0], rounding_mode=RN).result
        x = lp.b.op("mulf", [t], lhs=x, rhs=x, rounding_mode=RN).result
    return lp, lp.finish(x)


def test_force_serial_on_the_loop_op():
    _, loop = big_loop()
    m = machine_model("sm_100")
    assert schedule_loop(loop, m).rule == "cost-based"
    loop.attrs[FORCE_SERIAL] = True
    r = schedule_loop(loop, m)
    assert (r.strategy, r.rule, r.stage_count) == ("serial", "force_serial_execution", 1)


def test_max_depth_and_groups_are_honoured():
    lp, loop = big_loop()
    ops = lp.block.ops
    ops[-2].attrs[MAX_DEPTH] = 1                                 # the last mulf stays in depth 0
    for o in (ops[0], ops[-2]):                                  # first load and last mulf: one group
        o.attrs[GID] = 4
        o.attrs[LEADER_GID] = 4
    r = schedule_loop(loop, machine_model("sm_100"))
    by = {o.index: o for o in r.ops}
    last = len(ops) - 2
    assert by[last].stage == 0 and by[last].max_depth == 1
    assert by[0].stage == by[last].stage and by[0].group == by[last].group == 4
    assert r.dep_mii >= 1 and r.ii >= r.dep_mii


def test_nested_loops_get_their_own_reports():
    t = tile(F32, 64, 64)
    inner = matmul_loop()
    lp = Loop([t])
    lp.block.ops.append(inner)
    y = lp.b.op("addf", [t], lhs=lp.args[0], rhs=inner.results[0], rounding_mode=RN).result
    outer = lp.finish(y)
    mb = ModuleBuilder()
    with mb.kernel("k", []) as k:
        k.block.ops.append(outer)
        k.op("return")
    reports = schedule_module(mb.module, "sm_100")
    assert [(r.loop, r.depth, r.parent, r.num_ops) for r in reports] == [(0, 0, -1, 2), (1, 1, 0, 3)]
    outer_ops = reports[0].ops
    assert outer_ops[0].rclass == "region:for" and outer_ops[0].async_capable
    assert {s.name for s in outer_ops[0].slots} >= {"tp_gnic_rd", "tc_and_mma", "tp_mma"}   # cp.async, tcgen05
    assert isinstance(mb.module.functions[0], Function)


def test_every_op_of_the_op_corpus_classifies():
    from pathlib import Path

    from tileiras_async.bytecode.reader import read_module
    files = sorted((Path(__file__).parent / "data" / "ops").glob("*.tileirbc"))
    assert files
    models = [machine_model(g) for g in ("sm_80", "sm_90", "sm_100", "sm_120")]
    seen = set()
    for f in files:
        m = read_module(f.read_bytes())
        for fn in m.functions:
            for o in fn.walk():
                seen.add(o.name)
                for model in models:
                    res = classify(o, model)
                    assert not res.note.startswith("unclassified"), o.name
                    assert res.latency >= 0 and all(u.duration >= 1 for u in res.uses)
        for model in models:
            for r in schedule_module(m, model.gpu_name):
                assert r.ok, (f.name, r.message)
    assert len(seen) > 100
