"""The tile-GPU dialect's declarations (tilegpu/ops.py): they hold on the IR the passes make, and DCE, the
scheduler's dependence graphs and insert-barriers decide from them (memory effects on shared memory)."""
from __future__ import annotations

import pytest
from conftest import PUBLIC, requires_corpus

from tileiras_async.ir import types as T
from tileiras_async.ir.core import Block, Function, Module, Operation, Region
from tileiras_async.ir.opdef import effects_of, is_ordered, memory_effect_free
from tileiras_async.ir.types import FunctionType
from tileiras_async.ir.verify_ods import ods_rules
from tileiras_async.tilegpu.cuda_tile_dce import eliminate_dead_code
from tileiras_async.tilegpu import ops as G
from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.passes import run_pipeline
from tileiras_async.tilegpu.passes.insert_barriers import accesses
from tileiras_async.tilegpu.printer import print_kernel
from tileiras_async.tilegpu.types import LayoutTile, SmemType

F32 = LayoutTile((), T.F32, None)


class _Ctx:
    """No tilegpu op has a trait that asks about its surroundings (parents, terminators)."""

    def parent_name(self, op):
        return None

    def block_of(self, op):
        return None


def _violations(k: KernelIR) -> list[str]:
    out = []
    for op in walk_ops(k.fn.body):
        if op.spec.dialect is G.TILEGPU:
            out += [f"{op.name}: {m}" for m in (rule(_Ctx(), op) for rule in ods_rules(op.spec)) if m]
            missing = [a.name for a in op.spec.attrs if not a.optional and a.name not in op.attrs]
            undeclared = [n for n in op.attrs if op.spec.attr(n) is None]
            out += [f"{op.name}: attribute {n} is missing" for n in missing]
            out += [f"{op.name}: attribute {n} is not declared" for n in undeclared]
    return out


def _compiled(module, **opts) -> KernelIR:
    k = KernelIR(module, clone_function(module.functions[0]), CodegenOptions(**opts))
    run_pipeline(k)
    return k


def test_every_tilegpu_op_is_declared_once_with_effects_it_can_be_asked_about():
    names = [d.name for d in G.TILEGPU]
    assert len(names) == len(set(names)) and all(n.startswith("tilegpu.") for n in names)
    for d in G.TILEGPU:
        # every op says what it does: pure, or its memory effects (nothing is "unknown")
        assert d.is_pure or d.effects is not None, d.name
        for e in (d.effects.effects if d.effects else ()):
            assert e.on is None or e.on in {a.name for a in (*d.operands, *d.results)}, (d.name, e)
    assert G.CONVERT_LAYOUT.is_pure and G.VIEWS_ALIGNED.is_pure
    assert all(d.effects.is_ordered(None) for d in (G.BARRIER, G.ASYNC_COPY, G.ASYNC_COMMIT, G.ASYNC_WAIT))


def test_pipelined_matmul_ir_satisfies_the_declarations():
    """After every pass (pipelined K-loop on sm_80, layout conversions through shared memory), each tilegpu
    op has the operands, results, types and attributes its declaration names."""
    from test_codegen_mma import build_mma_loop
    from test_tilegpu_passes import transpose_add_module
    k = _compiled(build_mma_loop(T.F16, T.F32, 32, 32, 16), target="sm_80", pipeline_stages=3)
    seen = {op.name for op in walk_ops(k.fn.body)}
    assert {"tilegpu.async_copy", "tilegpu.mma_staged", "tilegpu.async_wait", "tilegpu.barrier"} <= seen
    assert _violations(k) == []
    k = _compiled(transpose_add_module(), num_warps=4)
    assert {"tilegpu.local_alloc", "tilegpu.local_store", "tilegpu.local_load"} <= {o.name for o in walk_ops(k.fn.body)}
    assert _violations(k) == []


@requires_corpus
@pytest.mark.parametrize("cid,gpu", [("matmul_f16_f32acc_64x64x32", "sm_90"), ("softmax_rows_f16_512", "sm_80"),
                                     ("cumsum_rows_f32_128", "sm_80")])
def test_corpus_kernels_satisfy_the_declarations(cid, gpu):
    from tileiras_async.bytecode.reader import read_module
    k = _compiled(read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes()), target=gpu)
    assert _violations(k) == []


def _kernel(ops_of) -> KernelIR:
    """A one-block kernel whose ops `ops_of(block)` appends (a `return` ends it)."""
    body = Block([F32])
    ops_of(body)
    body.ops.append(Operation("return", {"operands": []}))
    fn = Function(b"k", FunctionType((F32,), ()), body)
    return KernelIR(Module((13, 4, 0), [fn]), fn, CodegenOptions())


def _smem_traffic(body: Block, x) -> dict:
    """Scalar `x` broadcast, stored to one buffer and loaded back; a load of another buffer; a barrier."""
    tile = LayoutTile((4,), T.F32, CodegenOptions().default_layout((4,)))
    buf = Operation(G.LOCAL_ALLOC, {}, {}, [SmemType(16)])
    other = Operation(G.LOCAL_ALLOC, {}, {}, [SmemType(16)])
    conv = Operation(G.CONVERT_LAYOUT, {"source": x}, {}, [F32])
    splat = Operation("broadcast", {"source": conv.result}, {}, [tile])
    store = Operation(G.LOCAL_STORE, {"value": splat.result, "buffer": buf.result, "offsets": []}, {"shape": (4,)})
    load = Operation(G.LOCAL_LOAD, {"buffer": buf.result, "offsets": []}, {"shape": (4,)}, [tile])
    dead = Operation(G.LOCAL_LOAD, {"buffer": other.result, "offsets": []}, {"shape": (4,)}, [tile])
    bar = Operation(G.BARRIER)
    ops = dict(buf=buf, other=other, conv=conv, splat=splat, store=store, load=load, dead=dead, bar=bar)
    body.ops.extend(ops.values())
    return ops


def test_dce_keeps_shared_memory_writes_and_barriers_and_drops_unused_reads():
    """tilegpu/cuda_tile_dce.py decides from the declarations: a local_store writes (kept, with what it reads), a barrier
    is ordered (kept); a local_load nobody uses, its buffer and an unused conversion go."""
    made = {}
    k = _kernel(lambda b: made.update(_smem_traffic(b, b.args[0])))
    eliminate_dead_code(k.fn)
    kept = {name for name, op in made.items() if any(o is op for o in k.fn.body.ops)}
    assert kept == {"buf", "conv", "splat", "store", "bar"}
    assert memory_effect_free(made["conv"]) and not memory_effect_free(made["store"])
    assert is_ordered(made["bar"]) and not is_ordered(made["load"])
    assert [(e.kind, e.resource) for e, v in effects_of(made["load"])] == [("read", G.SHARED)]
    assert effects_of(made["load"])[0][1] is made["buf"].result


def test_dependence_graph_orders_a_store_before_the_load_of_the_same_buffer():
    """schedule/depgraph.py reads the same effects: a local_load after a local_store of the same buffer is a
    memory dependence (the load's buffer operand comes from the alloc, not from the store); a load of
    another buffer is not ordered after the store."""
    from tileiras_async.schedule.depgraph import build_loop_graph
    from tileiras_async.schedule.machine import machine_model
    made = {}

    def body_ops(body: Block):
        made.update(_smem_traffic(body, body.args[1]))
        body.ops.remove(made["bar"])           # no ordered op: only memory edges order the accesses
        body.ops.append(Operation("continue", {"operands": [body.args[1]]}))

    loop_body = Block([LayoutTile((), T.I32, None), F32])
    body_ops(loop_body)
    i32 = LayoutTile((), T.I32, None)
    bounds = [Operation("constant", {}, {"value": None}, [i32]) for _ in range(3)]
    init = Operation("constant", {}, {"value": None}, [F32])
    loop = Operation("for", {"lowerBound": bounds[0].result, "upperBound": bounds[1].result,
                             "step": bounds[2].result, "initValues": [init.result]}, {}, [F32],
                     [Region([loop_body])])
    graph = build_loop_graph(loop, machine_model("sm_80"))
    index = {id(n.op): n.index for n in graph.nodes}
    memory = {(e.src, e.dst) for e in graph.edges if e.kind == "memory"}
    assert (index[id(made["store"])], index[id(made["load"])]) in memory
    assert (index[id(made["store"])], index[id(made["dead"])]) not in memory


def test_insert_barriers_reads_accesses_from_the_effects():
    made = {}
    k = _kernel(lambda b: made.update(_smem_traffic(b, b.args[0])))
    made["buf"].attrs["offset"], made["other"].attrs["offset"] = 0, 16
    assert accesses(made["store"]) == ([(0, 16, "w", 0)],) * 2
    assert accesses(made["dead"]) == ([(16, 32, "r", 0)],) * 2
    assert accesses(made["bar"]) == ([], []) and accesses(made["conv"]) == ([], [])
    # the ring's accesses carry the ring's identity (its own protocol orders them)
    acc = Operation("constant", {}, {"value": None}, [LayoutTile((16, 8), T.F32, None)])
    mma = Operation(G.MMA_STAGED, {"acc": acc.result, "buffer": made["buf"].result, "slot": None}, {"slot": 0},
                    [acc.result.type])
    assert accesses(mma)[0] == [(0, 16, "r", id(made["buf"].result))]
    assert "tilegpu.local_store" in print_kernel(k)




_TILE = LayoutTile((4,), T.F32, CodegenOptions().default_layout((4,)))


def _loop_kernel(make_inner, depth: int = 1) -> KernelIR:
    """`make_inner(store, load)` ops (store(k)/load(k): buffer k of two 16-byte buffers) as the body of
    `depth` nested `for` loops."""
    i32 = LayoutTile((), T.I32, None)
    bounds = [Operation("constant", {}, {"value": None}, [i32]) for _ in range(3)]
    value = Operation("constant", {}, {"value": None}, [_TILE])
    bufs = [Operation(G.LOCAL_ALLOC, {}, {"offset": 16 * j}, [SmemType(16)]) for j in range(2)]

    def store(j):
        return Operation(G.LOCAL_STORE, {"value": value.result, "buffer": bufs[j].result, "offsets": []},
                         {"shape": (4,)})

    def load(j):
        return Operation(G.LOCAL_LOAD, {"buffer": bufs[j].result, "offsets": []}, {"shape": (4,)}, [_TILE])
    body = Block([i32], make_inner(store, load) + [Operation("continue", {"operands": []})])
    for _ in range(depth):
        loop = Operation("for", {"lowerBound": bounds[0].result, "upperBound": bounds[1].result,
                                 "step": bounds[2].result, "initValues": []}, {}, [], [Region([body])])
        body = Block([i32], [loop, Operation("continue", {"operands": []})])
    return _kernel(lambda b: b.ops.extend(bounds + [value] + bufs + body.ops[:1]))


def _innermost_loop(k: KernelIR) -> Operation:
    return [o for o in walk_ops(k.fn.body) if o.name == "for"][-1]


def test_insert_barriers_walks_nested_loops_once_each():
    """60 nested loops (re-running each body to a fixed point would take exponential time): the innermost
    iteration's store waits for the previous iteration's load (WAR), its load for the store (RAW)."""
    from tileiras_async.tilegpu.passes import insert_barriers
    k = _loop_kernel(lambda store, load: [store(0), load(0)], depth=60)
    insert_barriers.run(k)
    assert [o.name for o in _innermost_loop(k).regions[0].block.ops] == [
        G.BARRIER.name, G.LOCAL_STORE.name, G.BARRIER.name, G.LOCAL_LOAD.name, "continue"]


@pytest.mark.parametrize("early_exit", [False, True])
def test_an_iteration_meets_what_the_previous_one_left(early_exit):
    """store A; [if: continue]; barrier; load B.  An iteration that runs to its end leaves only the read of B
    pending, so the next store to A needs no barrier; one that may end after the store leaves the write of A
    pending, so the next store to A waits (WAW across threads)."""
    from tileiras_async.tilegpu.passes import insert_barriers

    def inner(store, load):
        ops = [store(0)]
        if early_exit:
            cond = Operation("constant", {}, {"value": None}, [LayoutTile((), T.I1, None)])
            leave = Block([], [Operation("continue", {"operands": []})])
            ops += [cond, Operation("if", {"condition": cond.result}, {}, [], [Region([leave]), Region([])])]
        return ops + [Operation(G.BARRIER), load(1)]
    k = _loop_kernel(inner)
    insert_barriers.run(k)
    first = _innermost_loop(k).regions[0].block.ops[0].name
    assert first == (G.BARRIER.name if early_exit else G.LOCAL_STORE.name)
