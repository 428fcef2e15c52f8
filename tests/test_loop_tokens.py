"""Memory tokens carried by `for`, `loop` and `if` (any store, scatter or atomic inside a loop body threads
one): the kernels compile, the interpreter and the emulator run them and match numpy, and the scheduler's
dependence graph orders a store of iteration i before the load of iteration i + 1 that its token orders."""
from __future__ import annotations

import numpy as np
import pytest
from test_interp_helpers import TK

from tileiras_async import run_kernel
from tileiras_async.ir import types as T
from tileiras_async.ir.builder import tile
from tileiras_async.ir.enums import ComparisonPredicate, IntegerOverflow
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
from tileiras_async.ir.enums import RoundingMode
from tileiras_async.schedule import build_loop_graph, machine_model

N = 64      # elements per tile
STEPS = 5   # loop trips


def _rmw(r, pv, zero, token, one):
    """x[tile 0] += 1 in region builder `r`, ordered by `token`; returns the store's token."""
    ld = r.op("load_view_tko", [tile(T.F32, N), T.TOKEN], view=pv, index=[zero], token=token,
              memory_ordering_semantics=MO.weak, inbounds=(False,))
    v = r.op("addf", [tile(T.F32, N)], lhs=ld.results[0], rhs=one, rounding_mode=RoundingMode.nearest_even)
    return r.op("store_view_tko", [T.TOKEN], tile=v.result, view=pv, index=[zero], token=ld.results[1],
                memory_ordering_semantics=MO.weak, inbounds=(False,)).result


def _token_kernel(kind: str) -> tuple[bytes, object]:
    """x += STEPS through a loop whose only carried value is the memory token (`for`), a `loop` that
    breaks out after STEPS trips (counter and token carried), or a `for` whose body stores in one branch
    of an `if` that yields the token."""
    tk = TK()
    x = tk.array(T.F32, 1)
    with tk.body() as b:
        pv = b.op("make_partition_view", [b.pview_type(x, (N,))], tensor_view=b.tv(x)).result
        zero, one = b.i32(0), b.const(np.float32(1.0), T.F32, (N,))
        lb, ub, step = b.i32(0), b.i32(STEPS), b.i32(1)
        if kind == "for":
            with b.region([tile(T.I32), T.TOKEN]) as r:
                r.op("continue", operands=[_rmw(r, pv, zero, r.args[1], one)])
            loop = b.op("for", [T.TOKEN], [r.built_region], lowerBound=lb, upperBound=ub, step=step,
                        initValues=[b.token])
        elif kind == "loop":
            with b.region([tile(T.I32), T.TOKEN]) as r:
                n, tok = r.args
                done = r.op("cmpi", [tile(T.I1)], lhs=n, rhs=ub, comparison_predicate=ComparisonPredicate.equal,
                            signedness=0).result
                with r.region() as then:
                    then.op("break", operands=[n, tok])
                with r.region() as els:
                    els.op("yield", operands=[])
                r.op("if", [], [then.built_region, els.built_region], condition=done)
                nxt = r.op("addi", [tile(T.I32)], lhs=n, rhs=step, overflow=IntegerOverflow.none).result
                r.op("continue", operands=[nxt, _rmw(r, pv, zero, tok, one)])
            loop = b.op("loop", [tile(T.I32), T.TOKEN], [r.built_region], initValues=[lb, b.token])
        else:  # an if inside the loop yields the token of the branch that stored
            with b.region([tile(T.I32), T.TOKEN]) as r:
                i, tok = r.args
                even = r.op("cmpi", [tile(T.I1)], lhs=r.op("andi", [tile(T.I32)], lhs=i, rhs=step).result,
                            rhs=zero, comparison_predicate=ComparisonPredicate.equal, signedness=0).result
                with r.region() as then:
                    then.op("yield", operands=[_rmw(then, pv, zero, tok, one)])
                with r.region() as els:
                    els.op("yield", operands=[_rmw(els, pv, zero, tok, one)])
                joined = r.op("if", [T.TOKEN], [then.built_region, els.built_region], condition=even).result
                r.op("continue", operands=[joined])
            loop = b.op("for", [T.TOKEN], [r.built_region], lowerBound=lb, upperBound=ub, step=step,
                        initValues=[b.token])
    return tk.bytes(), loop


@pytest.mark.parametrize("engine,gpu", [("interpret", "sm_100"), ("emulate", "sm_80"), ("emulate", "sm_100")])
@pytest.mark.parametrize("kind", ["for", "loop", "if"])
def test_loop_carried_token_compiles_and_runs(kind, engine, gpu):
    data, _ = _token_kernel(kind)
    xs = np.arange(N, dtype=np.float32)
    run_kernel(data, (1,), [xs], engine=engine, gpu_name=gpu)
    assert (xs == np.arange(N, dtype=np.float32) + STEPS).all()


def test_carried_token_orders_the_store_before_the_next_iterations_load():
    _, loop = _token_kernel("for")
    g = build_loop_graph(loop, machine_model("sm_100"))
    names = [n.name for n in g.nodes]
    load, store = names.index("load_view_tko"), names.index("store_view_tko")
    token = {(e.src, e.dst, e.distance): e.latency for e in g.edges if e.kind == "token"}
    assert token[(load, store, 0)] == g.nodes[load].latency          # within an iteration: load -> store
    assert token[(store, load, 1)] == g.nodes[store].latency         # across: the store lands first
