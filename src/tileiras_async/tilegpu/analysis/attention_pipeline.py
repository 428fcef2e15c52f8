"""Pipelining of attention-shaped loops: which loops qualify, which tiles land by TMA, and the ring's geometry.

Pure analysis (no IR is changed here): schedule-loops asks `analyze_attention` whether a loop that runs more
than one mma (what `software_pipeline.analyze` refuses) is attention-shaped, the pipeline pass expands what it
accepted.

An attention-shaped loop (flash attention's: S = Q K^T, the softmax, O += P V) is a counted `for` loop at the
top of whose body two or more mmas run on wgmma (sm_90) or tcgen05 (sm_100), each with a B operand the body loads itself -- a weak `load_view_tko` whose token orders nothing,
through a view made outside the loop, at tile indices computed from the induction variable and loop
invariants (`software_pipeline.index_slice`), directly or through reshapes that drop leading unit dimensions --
and that tile lands by TMA (`tensor_maps.plan_landed_copy`: the mma's B layout in shared memory is what a box
writes, K loaded through a transposed view included).  The body must not write memory nor end an iteration
early.  Each mma reads A where it is cheapest (`Landed.a_source`): a loop-invariant A (Q) is put once
before the loop into a buffer of its own (shared by the loops that read the same value the same way) -- by
TMA where it is a tile load whose registers only mmas read (`Landed.a_tma`: the load goes), else staged by
the threads from its registers --, one
the loop computes in the layout of wgmma's register-A fragments (P, the softmax of S's accumulator converted
to f16) from its registers (wgmma only: tcgen05 reads A from shared or tensor memory), any other is staged
by its mma each iteration.

What the pipeline builds from it: a ring of `stages` slots (--num-stages, at most MAX_SLOTS), each holding every landed tile of one iteration
(each tile where its mma's descriptors read it, on its swizzle repeat), one mbarrier per slot on which each
tile's copy expects its bytes; the tiles of iteration i + stages - 1 are issued in iteration i, after the
barrier that follows every thread's reads of iteration i - 1 (that slot's previous tiles).  Each mma's B
layout follows the tensor: K-major where the tensor's rows run along K (K^T), N-major where they run along N
(V); the mma reads its whole K from the slot (one chunk).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import msgspec

from ...ir.core import Operation
from ...ir.enums import MemoryOrderingSemantics as MO
from ..types import align, layout_of
from .mma import recorded_plan
from .software_pipeline import (MIN_STAGES, TMA_ALIGN, Operand, _inside, _trace_operand, defined_in, index_slice,
                                unmovable_body, use_counts)
from .tcgen05 import Tcgen05Plan
from .tensor_maps import TensorCopy, plan_landed_copy
from .wgmma import SCRATCH_ALIGN, WgmmaPlan, register_a_fragments

_MMAS = ("mmaf", "mmai")
# at most this many slots (iterations in flight), whatever --num-stages asks above it: an attention iteration
# runs two mmas and the softmax, and each iteration ahead keeps its copies' addresses live through the loop.
# Measured on the FMHA sample as launched (bench/codegen_quality.py, bench/dynamic_instructions.py;
# sm_90 / sm_100), 4 -> 3 slots: static SASS fmha_f16 1020 -> 989 / 1228 -> 1197, causal 1936 -> 1875 /
# 2346 -> 2283; registers 220 -> 216 / 218 -> 190, causal 252 -> 222 / 222 -> 220 (NVIDIA's consumer
# warpgroup: 224 after setmaxnreg); executed instructions within 0.3%; shared memory 149.5 -> 116.8 KB.  2 slots
# measure alike (NVIDIA's tool keeps about that much in flight: 64-80 KB of shared memory); 3 leave one
# more iteration of latency to hide until a device timing says otherwise.
MAX_SLOTS = 3


@dataclass
class Landed:
    """One mma whose B operand lands by TMA: the operand (its `smem` the plan's B layout, `base` its offset in
    a slot, `tma` its copy) and the mma's plan with the B layout the tensor allows, in one K chunk."""
    mma: Operation
    x: Operand
    plan: WgmmaPlan
    a_source: str = "scratch"   # where the mma reads A: "registers", "hoisted" (staged once before the loop) or
                                # "scratch" (staged from registers by the mma, every iteration)
    a_tma: Operand | None = None    # a hoisted A that lands by TMA instead (its load, chain and copy)


@dataclass
class AttentionPlan:
    loop: Operation
    landed: list[Landed]
    slice_ops: list[Operation]      # in-body scalar ops computing the landed loads' indices, program order
    stages: int = 0
    unit_bytes: int = 0
    align: int = 0                  # the ring's base is aligned to this at run time ...

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.unit_bytes + self.align - SCRATCH_ALIGN   # ... which the slack leaves room for

    @property
    def ahead(self) -> int:
        """Iterations the copies run ahead of the mmas that read them."""
        return self.stages - 1


def landed_scratch_bytes(plan: WgmmaPlan) -> int:
    """The scratch an mma whose B landed needs: its A for the whole K, aligned at run time to the swizzle."""
    return plan.a_smem.nbytes + plan.align - SCRATCH_ALIGN


def analyze_attention(k, op: Operation, stages: int, budget: int) -> AttentionPlan | str | None:
    """An AttentionPlan with at most `stages` slots in `budget` bytes of shared memory (besides the loop
    body's scratch), why this loop is not pipelined as one, or None (not a loop running several mmas)."""
    if op.name not in ("for", "loop") or not op.regions or not op.regions[0].blocks:
        return None
    body = op.regions[0].block
    mmas = [o for o in body.ops if o.name in _MMAS]
    if len(mmas) < 2:
        return None
    if op.name != "for":
        return "only counted `for` loops are pipelined"
    tgt = k.options.known_target
    if tgt is None or not (tgt.has_tma and tgt.has_tensor_map_hooks):
        return "the target has no tensor copies whose launch hooks are known"
    if sum(o.name in _MMAS for o in body.walk()) != len(mmas):
        return "an mma runs in a nested region of the body"
    why = unmovable_body(body)
    if why:
        return why
    top = {id(o) for o in body.ops}
    uses = use_counts(body)
    slices: dict[int, Operation] = {}
    landed = []
    for mma in mmas:
        r = _landed_operand(k, mma, body, top, uses, slices)
        if isinstance(r, str):
            return r
        landed.append(r)
    plan = AttentionPlan(op, landed, [o for o in body.ops if id(o) in slices])
    return _geometry(plan, stages, budget - _body_scratch(body))


def _landed_operand(k, mma: Operation, body, top: set[int], uses: dict, slices: dict) -> Landed | str:
    plan = recorded_plan(mma)
    if not isinstance(plan, WgmmaPlan):     # (a Tcgen05Plan is one)
        return "an mma of the body does not run on wgmma or tcgen05 (mma.sync loops are not pipelined so)"
    x = _trace_operand("b", mma.operands["rhs"], top, uses)
    if isinstance(x, str):
        return x
    ld = x.load
    view = ld.operands["view"]
    if isinstance(view.owner, Operation) and defined_in(view.owner, body):
        return "the B load's view is made inside the loop"
    if ld.attrs.get("memory_ordering_semantics", MO.weak) != MO.weak:
        return "the B load is not weak"
    if not all(index_slice(i, body, top, slices) for i in ld.operands["index"]):
        return "the B tile index depends on values the loop computes"
    rank = len(x.tile_shape)
    inner = tuple(view.type.dim_map).index(rank - 1)      # the tile dimension the tensor's rows run along
    major = {x.lead: "k", x.lead + 1: "mn"}.get(inner)
    if major is None or (major == "mn" and not plan.b_transposable()):
        return "the B tile's rows run along neither K nor an N wgmma reads"
    whole = dataclasses.replace(plan, b_major=major, chunk=plan.K, budget=max(plan.budget, 1 << 20))
    x.smem, x.kdim = whole.b_smem, x.lead
    tma = plan_landed_copy(x, k.fn.body.args, 0)     # its map's parameter: the pipeline pass numbers them
    if isinstance(tma, str):
        return f"the B tile cannot land by TMA: {tma}"
    x.tma = tma
    source = _a_source(mma, whole, body)
    return Landed(mma, x, whole, source, _landed_a(k, mma, whole) if source == "hoisted" else None)


def _landed_a(k, mma: Operation, plan: WgmmaPlan) -> Operand | None:
    """A hoisted A that is a tile load's (through reshapes dropping unit dimensions) and lands by TMA in its
    buffer, the load's registers left to no one but mmas (Q: NVIDIA's tool loads it so too); else None."""
    value = mma.operands["lhs"]
    chain = []
    while isinstance(value.owner, Operation) and value.owner.name == "reshape":
        chain.append(value.owner)
        value = value.owner.operands["source"]
    load = value.owner
    if not isinstance(load, Operation) or load.name != "load_view_tko" or \
            load.attrs.get("memory_ordering_semantics", MO.weak) != MO.weak:
        return None
    users = use_sites(k.fn.body)
    if any(o.name not in _MMAS and o not in chain for v in (load.results[0], *(c.result for c in chain))
           for o in users.get(id(v), ())) or users.get(id(load.results[1])):
        return None
    tile = tuple(load.results[0].type.shape)
    lead = len(tile) - len(mma.operands["lhs"].type.shape)
    if lead < 0 or any(d != 1 for d in tile[:lead]):
        return None
    x = Operand("a", load, list(reversed(chain)), tile, lead, load.results[0].type.elem)
    x.smem, x.kdim = plan.a_smem, lead + 1
    tma = plan_landed_copy(x, k.fn.body.args, 0)
    if isinstance(tma, str):
        return None
    x.tma = tma
    return x


def use_sites(body) -> dict[int, list[Operation]]:
    """id(value) -> the ops that use it, anywhere under `body`."""
    sites: dict[int, list[Operation]] = {}
    for o in body.walk():
        for v in o.operand_values():
            sites.setdefault(id(v), []).append(o)
    return sites


def _a_source(mma: Operation, plan: WgmmaPlan, body) -> str:
    """Where the mma reads A: an lhs the loop does not change is staged once before it ("hoisted"); one the
    loop computes in the register-A fragments' layout is read from its registers ("registers"); any other is
    staged by the mma each iteration ("scratch")."""
    lhs = mma.operands["lhs"]
    owner = lhs.owner
    invariant = not defined_in(owner, body) if isinstance(owner, Operation) else \
        owner is not body and not _inside(owner, body)
    if invariant:
        return "hoisted"
    layout = layout_of(lhs.type)
    if not isinstance(plan, Tcgen05Plan) and layout is not None and register_a_fragments(plan, layout) is not None:
        return "registers"      # (tcgen05 reads A from shared or tensor memory only)
    return "scratch"


def _body_scratch(body) -> int:
    """The scratch the body's ops stage through and the buffers of the A operands staged before the loop (an
    upper bound: each mma's A at its landed size, staged in the loop or before it)."""
    total, hoisted = 0, 0
    for o in body.walk():
        n = o.attrs.get("scratch_bytes", 0)
        if o.name in _MMAS:
            n = landed_scratch_bytes(dataclasses.replace(recorded_plan(o), chunk=recorded_plan(o).K,
                                                         budget=1 << 20))
            hoisted += align(n, 16)
        total = max(total, align(n, 16))    # allocate-shared-memory lets scratches of one body share bytes
    return total + hoisted


def _geometry(plan: AttentionPlan, stages: int, budget: int) -> AttentionPlan | str:
    """Each landed tile at its swizzle repeat in a slot, the most slots (at most `stages`) that fit."""
    at, al = 0, TMA_ALIGN
    for ld in plan.landed:
        rep = max(TMA_ALIGN, ld.x.tma.repeat, ld.plan.align)
        ld.x.base = align(at, rep)
        at = ld.x.base + ld.x.smem.nbytes
        al = max(al, rep)
    plan.unit_bytes, plan.align = align(at, al), al
    for s in range(min(stages, MAX_SLOTS), MIN_STAGES - 1, -1):
        plan.stages = s
        if plan.ring_bytes <= budget:
            return plan
    return f"{MIN_STAGES} slots of {plan.unit_bytes} bytes do not fit in {budget} bytes of shared memory"


def numbered(tc: TensorCopy, param: int) -> TensorCopy:
    """The copy with its map in entry parameter `param`."""
    return dataclasses.replace(tc, map=msgspec.structs.replace(tc.map, param=param))
