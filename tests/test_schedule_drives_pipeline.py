"""The schedule drives pipelining: after the pipeline pass every op of a scheduled loop sits where the stage and
order schedule-loops gave it say -- a pipelined matmul (its copies D units ahead of the mma, the first D units in
the prologue, the copies of a unit in their order before its mma) and a prefetched serial loop (its loads D
iterations ahead, the first D before the loop, the rest of the body in its stage's order).  A schedule forged in
the IR text (other stages, other orders) changes the expansion accordingly: the pipeliner reads it."""
from __future__ import annotations

import re

import pytest
from conftest import PUBLIC, requires_corpus

from tileiras_async.bytecode.reader import read_module
from tileiras_async.ir.core import Operation, Value
from tileiras_async.tilegpu.decisions import PIPELINED, SCHEDULE_REPORT
from tileiras_async.tilegpu.errors import LoweringError
from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.parser import parse_kernel
from tileiras_async.tilegpu.passes import _load, run_pipeline
from tileiras_async.tilegpu.printer import print_kernel
from tileiras_async.tilegpu.analysis.smem import constant_index

MATMUL = "matmul_f16_f32acc_64x64x32"
SCAN = "cumsum_carry_i32_t128"      # one i32 load per thread per iteration: prefetched


def _scheduled(name: str, gpu: str) -> KernelIR:
    """The kernel as schedule-loops leaves it."""
    m = read_module((PUBLIC / f"{name}.v13.4.tileirbc").read_bytes())
    k = KernelIR(m, clone_function(m.functions[0]), CodegenOptions(target=gpu))
    run_pipeline(k, until="schedule-loops")
    return k


def _pipeline(k: KernelIR) -> None:
    run_pipeline(k, after="schedule-loops", until="pipeline")


def _schedule(loop: Operation) -> dict[int, tuple[str, int, int]]:
    """id of each body op the loop's report places -> (name, stage, order), as the report gives them."""
    body = loop.regions[0].block.ops
    return {id(body[r.index]): (r.name, r.stage, r.order) for r in loop.attrs[SCHEDULE_REPORT].ops}


def _placed(loop: Operation) -> dict[int, tuple[str, int, int]]:
    """The same from the ops' own `stage`/`order` attributes (what a forged text changes)."""
    return {id(o): (o.name, o.attrs["stage"], o.attrs["order"]) for o in loop.regions[0].block.ops
            if "stage" in o.attrs}


def _offset(v: Value, base: Value, step: Value) -> int | None:
    """d where v = base + d * step in the IR (scalars.iteration's form), None where it is not."""
    if v is base:
        return 0
    o = v.owner
    if not (isinstance(o, Operation) and o.name == "addi" and o.operands["lhs"] is base):
        return None
    mul = o.operands["rhs"].owner
    if not (isinstance(mul, Operation) and mul.name == "muli" and mul.operands["lhs"] is step):
        return None
    return constant_index(mul.operands["rhs"])


def _const(v: Value) -> int:
    value = constant_index(v)
    assert value is not None
    return value


# -- the K-loop ------------------------------------------------------------------------------------------------

def _k_loop_expectation(loop: Operation, placed: dict) -> tuple[int, list[str]]:
    """(units ahead, copy roles in order) the schedule asks for."""
    cand = loop.attrs["pipeline_plan"].cand
    a, b, mma = (placed[id(o)] for o in (cand.a.load, cand.b.load, cand.mma))
    assert a[1] == b[1]
    ahead = mma[1] - a[1]
    roles = [r for r, _ in sorted((("a", a[2]), ("b", b[2])), key=lambda t: t[1])]
    return ahead, roles


def _units(ops: list[Operation]) -> list[list[Operation]]:
    """The body's ops cut at each `async_wait`: one list per K unit."""
    out: list[list[Operation]] = []
    for o in ops:
        if o.name == "tilegpu.async_wait":
            out.append([])
        if out:
            out[-1].append(o)
    return out


def _prologue_units(ops: list[Operation]) -> int:
    """Commit groups issued by `ops` (a prologue loop's times its trip count)."""
    n = 0
    for o in ops:
        if o.name == "tilegpu.async_commit":
            n += 1
        elif o.name == "for":
            trips = _const(o.operands["upperBound"]) - _const(o.operands["lowerBound"])
            n += trips * _prologue_units(o.regions[0].block.ops)
    return n


def _check_k_loop(k: KernelIR, ahead: int, roles: list[str]) -> None:
    loops = [o for o in walk_ops(k.fn.body) if o.name == "for" and o.attrs.get(PIPELINED)]
    assert loops, "the K-loop was pipelined"
    for loop in loops:          # every copy-width version
        geom = loop.attrs[PIPELINED].geom
        block = next(b for o in walk_ops(k.fn.body) for r in o.regions for b in r.blocks if loop in b.ops) \
            if loop not in k.fn.body.ops else k.fn.body
        before = block.ops[:block.ops.index(loop)]
        assert _prologue_units(before) == ahead, "the prologue issues the units of the stages before the mma's"
        body = loop.regions[0].block
        iv, step = body.args[0], loop.operands["step"]
        units = _units(body.ops)
        assert len(units) == geom.chunks
        for u, ops in enumerate(units):
            assert ops[0].attrs["pending"] == ahead - 1
            [mma] = [o for o in ops if o.name == "tilegpu.mma_staged"]
            guards = [o for o in ops if o.name == "if" and any(x.name == "tilegpu.async_copy"
                                                                for x in o.regions[0].block.ops)]
            copies = [x for o in ops for x in ([o] if not o.regions else o.regions[0].block.ops)
                      if x.name == "tilegpu.async_copy"]
            assert [c.attrs["role"] for c in copies] == roles, "the copies in the schedule's order"
            assert all(ops.index(o) < ops.index(mma) for o in ops if o is not mma and (o in guards or o in copies)), \
                "a unit's copies (earlier stage) before its mma (later stage)"
            d, chunk = divmod(u + ahead, geom.chunks)
            # a copy of a later iteration is guarded by whether it runs: its target iteration is the guard's
            offset = _offset(guards[0].operands["condition"].owner.operands["lhs"], iv, step) if guards else 0
            assert offset == d and all(c.attrs["chunk"] == chunk for c in copies), \
                "each copy serves the unit `ahead` units on"


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
def test_a_pipelined_matmul_follows_its_schedule_report(gpu):
    k = _scheduled(MATMUL, gpu)
    [loop] = [o for o in walk_ops(k.fn.body) if "pipeline_plan" in o.attrs]
    report, placed = _schedule(loop), _placed(loop)
    assert all(placed[i] == report[i] for i in placed), "the ops carry the report's stages and orders"
    ahead, roles = _k_loop_expectation(loop, report)
    assert ahead == loop.attrs["pipeline_plan"].geom.stages - 1 >= 1
    _pipeline(k)
    _check_k_loop(k, ahead, roles)


def _forged(k: KernelIR, op_name: str, edit) -> KernelIR:
    """The kernel printed, the `stage`/`order` of the `op_name` lines of its loop body edited, parsed back."""
    lines = print_kernel(k).splitlines()
    for i, line in enumerate(lines):
        if f'"cuda_tile.{op_name}"' in line and "stage = " in line:
            lines[i] = edit(line)
    return parse_kernel("\n".join(lines) + "\n", "forged.tir")


def _set(line: str, field: str, value: int) -> str:
    return re.sub(rf"\b{field} = \d+", f"{field} = {value}", line, count=1)


@requires_corpus
def test_a_forged_k_loop_schedule_changes_the_expansion():
    """The mma one stage earlier (two units ahead in a ring of four) and the loads' orders swapped: the prologue
    issues two units, the waits leave one group pending, the copies serve the unit two on, B's copy first."""
    k = _scheduled(MATMUL, "sm_80")
    count = iter(range(2))
    forged = _forged(k, "mmaf", lambda line: _set(line, "stage", 2))
    forged = _forged(forged, "load_view_tko", lambda line: _set(line, "order", 1 - next(count)))
    [loop] = [o for o in walk_ops(forged.fn.body) if "pipeline_plan" in o.attrs]
    ahead, roles = _k_loop_expectation(loop, _placed(loop))
    assert (ahead, roles) == (2, ["b", "a"]) and loop.attrs["pipeline_plan"].geom.stages == 4
    _load("pipeline")(forged)
    _check_k_loop(forged, ahead, roles)


@requires_corpus
def test_a_schedule_the_ring_cannot_hold_is_refused():
    k = _forged(_scheduled(MATMUL, "sm_80"), "mmaf", lambda line: _set(line, "stage", 4))
    with pytest.raises(LoweringError, match="ring of 4 buffers"):
        _load("pipeline")(k)


# -- the prefetched serial loop --------------------------------------------------------------------------------

def _check_prefetched(k: KernelIR, loop: Operation, placed: dict) -> None:
    """`loop` (as it was scheduled, `placed` its schedule) expanded as the schedule says."""
    body_before = {id(o): o for o in loop.regions[0].block.ops}
    carried = len(loop.regions[0].block.args)
    last = max(s for _, s, _ in placed.values())
    loads = sorted((i for i, (_, s, _) in placed.items() if s < last), key=lambda i: placed[i][2])
    distance = last - placed[loads[0]][1]
    rest = [placed[i][0] for i in sorted((i for i in placed if i not in loads), key=lambda i: placed[i][2])]
    _pipeline(k)
    block = next(b for o in walk_ops(k.fn.body) for r in o.regions for b in r.blocks if loop in b.ops) \
        if loop not in k.fn.body.ops else k.fn.body
    view = body_before[loads[0]].operands["view"]
    lb, step = loop.operands["lowerBound"], loop.operands["step"]
    ahead = [o for o in block.ops[:block.ops.index(loop)] if o.name == "load_view_tko"
             and o.operands["view"] is view]
    assert [_offset(o.operands["index"][0], lb, step) for o in ahead] == list(range(distance)), \
        "the prologue loads the iterations of the stages before the users'"
    body = loop.regions[0].block
    new_loads = [o for o in body.ops if o.name == "load_view_tko" and id(o) not in body_before]
    assert len(new_loads) == len(loads)
    assert all(_offset(o.operands["index"][0], body.args[0], step) == distance for o in new_loads), \
        "the body loads the iteration `distance` on"
    first_user = max(body.ops.index(o) for o in new_loads) + 1
    kept = [o.name for o in body.ops[first_user:-1] if id(o) in placed]
    assert kept == rest, "the rest of the body in its stage's order"
    assert len(body.args) - carried == distance * len(loads), "each load's tiles carried `distance` times"


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
def test_a_prefetched_serial_loop_follows_its_schedule_report(gpu):
    k = _scheduled(SCAN, gpu)
    [loop] = [o for o in walk_ops(k.fn.body) if o.name == "for"]
    report = loop.attrs[SCHEDULE_REPORT]
    assert report.rule.startswith("prefetched 2 iterations ahead") and report.stage_count == 3
    schedule = _schedule(loop)
    assert _placed(loop) == schedule, "every op of the body carries the report's stage and order"
    assert sorted({s for _, s, _ in schedule.values()}) == [0, 2]
    _check_prefetched(k, loop, schedule)


@requires_corpus
def test_a_forged_prefetch_schedule_changes_the_expansion():
    """The users three stages after the loads, and the scan and the carry's reshape (independent) in swapped
    orders: three loads before the loop, the body's for iteration i + 3, the reshape before the scan."""
    def edit(line: str) -> str:
        line = line.replace("stage = 2", "stage = 3")
        if "identities = " in line:             # the scan's attributes close its region
            return _set(line, "order", 1)
        return _set(line, "order", 0) if '"cuda_tile.reshape"' in line else line
    text = "\n".join(edit(line) if "stage = " in line else line
                     for line in print_kernel(_scheduled(SCAN, "sm_80")).splitlines())
    forged = parse_kernel(text + "\n", "forged.tir")
    [loop] = [o for o in walk_ops(forged.fn.body) if o.name == "for"]
    placed = _placed(loop)
    assert sorted({s for _, s, _ in placed.values()}) == [0, 3]
    _check_prefetched(forged, loop, placed)
    names = [o.name for o in loop.regions[0].block.ops]
    assert names.count("load_view_tko") == 1 and names.index("reshape") < names.index("scan")
