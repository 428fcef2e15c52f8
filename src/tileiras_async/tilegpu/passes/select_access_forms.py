"""select-access-forms: how code generation moves an op's registers, where it has a choice.

Contract: in/out: tile-GPU IR after the other passes; behaviour unchanged, only attributes are added:

* every synchronous mma.sync (`mmaf`/`mmai`, `tilegpu.mma_prestaged`) whose k-major staging allows it gets
  `ldmatrix` too: A one `.x4` per m16k16 fragment, B one `.x4` per two n tiles (else `.x2`) instead of a
  32-bit shared load per fragment word, the words identical (tilegpu.analysis.mma.ldmatrix_lanes); and
  `b_rows_of_n` where B's registers run along N and its staging in rows of N fits the plan's bytes: B is
  stored as it arrives (vectors, not transposed element by element) and read by ldmatrix.trans
  (rows_of_n_stage, ldmatrix_trans_lanes).
* every `tilegpu.mma_staged` on mma.sync gets `ldmatrix` (`FragmentLoads`): which operands read their
  fragments from the stage buffer with `ldmatrix` (8x8 blocks of 16-bit elements, one 16-byte row per
  thread: an m16n8k16 instruction with K chunks of 16 or more, an operand staged as 16-bit elements that
  reaches the mma unconverted; B also needs 8+ columns), and whether B reads two n8 fragments per
  `ldmatrix.x4` (two or more per warp) rather than one per `.x2`.  The others load words element by element.
* every `mmaf`/`mmai` on wgmma or tcgen05 gets `store_vectors` (registers per `st.shared` of A and of B
  when code generation stages them in their swizzled layouts): the leading register bits whose elements
  are consecutive bytes of one 16-byte chunk, no wider than 16 bytes, with every other basis of the layout
  a multiple of the vector's bytes away; so does the A an attention loop's `tilegpu.mma_landed` stages
  through its scratch, or its hoisted `tilegpu.stage_operand` (one entry: A alone).
* every mma on the FMA chain (`mmaf`/`mmai` select-mma planned no tensor-core instruction for, and the
  `tilegpu.mma_staged` of one) gets `fma_unrolled`: whether its K steps are unrolled (up to
  FMA_UNROLL_LIMIT fmas per thread per K chunk: distinct accumulators x K) or a counted loop, which keeps
  LLVM's time and the code size bounded for large tiles.
* every `scan` whose dimension spans lanes gets `lane_scan`: "kogge_stone" (`shfl.up`/`down` by 1, 2, 4, ...
  positions) where the dimension's lane bits are consecutive lane-id bits of consecutive weights, so that a
  lane's position along the dimension is a field of its id and a shuffle by 2^j moves exactly 2^j
  positions; "hypercube" (`shfl.xor` rounds) otherwise.
* every `for`/`loop` outside any loop whose body holds an mma in registers (`mmaf`, `mmai`,
  `tilegpu.mma_prestaged`: not a pipelined K-loop's stage buffers) gets `recompute_thread_coords`: the
  register peak is in that loop, so thread coordinates are read afresh after it instead of kept live
  through it -- except a loop followed by another such loop (attention's K/V loop split at the first
  masked tile), whose setup the next one repeats: kept live through the first, read afresh after the last (elsewhere, e.g. matmul epilogues after pipelined K-loops, measured: more instructions, no
  fewer registers).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.core import Block, Operation
from ..ir import KernelIR
from ..layout import LinearLayout
from ..analysis.scaled_mma import result_layout as scaled_result_layout
from ..analysis.mma import (_FP8, F16_F16, F16_F32, FMA_PLAN, LDMATRIX_ROW_BYTES, MmaPlan, _name, ldmatrix_lanes,
                            ldmatrix_trans_lanes, recorded_plan, rows_of_n_stage)
from ..analysis.tcgen05 import Tcgen05Plan
from ..analysis.smem import dim_bits
from ..types import layout_of
from ..analysis.wgmma import WgmmaPlan

MAX_VECTOR_BYTES = 16   # st.shared.v4.b32 / v2.b64
FMA_UNROLL_LIMIT = 2048     # fully unrolled FMA chains up to this many fmas per thread, a loop over k beyond
_LOOPS = frozenset({"for", "loop"})
_REGISTER_MMAS = frozenset({"mmaf", "mmai", "tilegpu.mma_prestaged"})


@dataclass(frozen=True)
class FragmentLoads:
    """The `ldmatrix` attribute of a `tilegpu.mma_staged`."""
    a: bool         # A's fragments by ldmatrix.x4
    b: bool         # B's by ldmatrix .trans
    b_pairs: bool   # two n8 fragments of B per ldmatrix.x4.trans (else one per .x2)


def run(k: KernelIR) -> None:
    _walk(k, k.fn.body, in_loop=False)


def _walk(k: KernelIR, block: Block, in_loop: bool) -> None:
    for op in block.ops:
        if op.name == "tilegpu.mma_staged":
            _staged_mma(op)
        elif op.name in ("mmaf", "mmai"):
            _store_vectors(op)
            _fma_unrolled(op, layout_of(op.result.type))
            _sync_fragment_loads(op, recorded_plan(op), {})
        elif op.name == "tilegpu.mma_prestaged":
            buffer = op.operands["buffer"].owner.attrs.get("offset")
            _sync_fragment_loads(op, recorded_plan(op.attrs["mma"]), {op.attrs["role"]: buffer})
        elif (op.name == "tilegpu.stage_operand" and "mma_plan" in op.attrs
              or op.name == "tilegpu.mma_landed" and "scratch_bytes" in op.attrs):
            _landed_store_vector(op)
        elif op.name == "mmaf_scaled":
            _fma_unrolled(op, scaled_result_layout(k.options, op))
        elif op.name == "scan":
            _lane_scan(op)
        if op.name in _LOOPS and not in_loop and _holds_mma_registers(op) and not _next_loop_holds_mma(block, op):
            op.attrs["recompute_thread_coords"] = True
        for region in op.regions:
            for b in region.blocks:
                _walk(k, b, in_loop or op.name in _LOOPS)


def _next_loop_holds_mma(block: Block, loop: Operation) -> bool:
    """The next loop of `block` after `loop` holds mma registers too (attention's loop split at the first
    masked tile): it sets up the same operand addresses, which stay live through `loop` instead of being
    computed again after it; the coordinates are read afresh after the last such loop."""
    after = block.ops[block.ops.index(loop) + 1:]
    nxt = next((o for o in after if o.name in _LOOPS), None)
    return nxt is not None and _holds_mma_registers(nxt)


def _holds_mma_registers(op: Operation) -> bool:
    return any(o.name in _REGISTER_MMAS for o in op.regions[0].block.walk())


def _staged_mma(staged: Operation) -> None:
    plan = recorded_plan(staged.attrs["mma"])
    if plan is None:
        staged.attrs["fma_unrolled"] = _unrolled(layout_of(staged.result.type), staged.attrs["kc"])
    elif isinstance(plan, MmaPlan):
        staged.attrs["ldmatrix"] = _fragment_loads(staged, plan)


def _fragment_loads(staged: Operation, plan: MmaPlan) -> FragmentLoads:
    return fragment_loads(plan, staged.attrs["a"], staged.attrs["b"], staged.attrs["kc"])


def fragment_loads(plan: MmaPlan, a, b, kc: int) -> FragmentLoads:
    """Which operands of a pipelined mma.sync loop (tilegpu.analysis.software_pipeline.Operand, K chunks of kc) read
    their fragments by ldmatrix (select-tensor-copies asks too: it swizzles only what ldmatrix reads)."""
    instr = plan.instr
    to_half = instr in (F16_F32, F16_F16)
    m16 = instr.m == 16 and instr.k == 16 and instr.elem_bits == 16 and kc >= 16
    ldm_a = m16 and a.eb == 2 and not _converted(a, to_half)
    ldm_b = m16 and b.eb == 2 and not _converted(b, to_half) and plan.N >= 8
    return FragmentLoads(ldm_a, ldm_b, ldm_b and plan.rn >= 2)


def _sync_fragment_loads(op: Operation, plan, buffers: dict) -> None:
    """`ldmatrix` on a synchronous mma.sync (`mmaf`/`mmai`, or `tilegpu.mma_prestaged` whose operand
    `buffers` names is already staged at that offset): which operands read their fragments from the k-major
    staging with one ldmatrix per fragment (A: .x4; B: .x4 over two n tiles, else .x2) instead of a 32-bit
    load per word -- where every block row is 16 aligned bytes (tilegpu.analysis.mma.ldmatrix_lanes) at this
    op's scratch offset."""
    if not isinstance(plan, MmaPlan):
        return
    scratch = op.attrs.get("scratch_offset")
    bases = {role: buffers.get(role, None if scratch is None else scratch + stage.base)
             for role, stage in (("a", plan.a_stage), ("b", plan.b_stage))}

    def fits(role: str, pairs: bool = False) -> bool:
        base = bases[role]
        return (base is not None and base % LDMATRIX_ROW_BYTES == 0
                and ldmatrix_lanes(plan, role, pairs) is not None)
    b_value = None if "b" in buffers else op.operands["other"] if buffers else op.operands["rhs"]
    rows_of_n = None if b_value is None else _b_rows_of_n(b_value, plan, bases["b"])
    if rows_of_n is not None:
        op.attrs["b_rows_of_n"] = True
        pairs = rows_of_n
    else:
        pairs = fits("b", True)
    loads = FragmentLoads(fits("a"), rows_of_n is not None or pairs or fits("b"), pairs)
    if loads.a or loads.b:
        op.attrs["ldmatrix"] = loads


def _b_rows_of_n(b_value, plan: MmaPlan, base: int | None) -> bool | None:
    """Whether B (registers running along N, not K: a V tile read in rows) is staged in rows of N and read
    by ldmatrix.trans (tilegpu.analysis.mma.rows_of_n_stage), and if so whether two n tiles per .x4; None
    where it keeps the transposed staging (its stores then move one element each)."""
    layout = layout_of(b_value.type)
    if layout is None or base is None or layout.contiguous_registers(-1) < 2 or layout.contiguous_registers(-2) > 1:
        return None
    st = rows_of_n_stage(plan)
    if st is None or base % LDMATRIX_ROW_BYTES:
        return None
    if ldmatrix_trans_lanes(plan, st, True) is not None:
        return True
    return False if ldmatrix_trans_lanes(plan, st, False) is not None else None


def _converted(operand, to_half: bool) -> bool:
    """Whether the staged elements go through a conversion before the mma (an ftof of the operand's chain,
    or fp8 widened to f16 for an f16 instruction)."""
    elem = operand.elem
    for o in operand.chain:
        if o.name == "ftof":
            return True
    return to_half and _name(elem) in _FP8


def _fma_unrolled(op: Operation, layout: LinearLayout) -> None:
    """`fma_unrolled` on an mma (an mmaf_scaled: for its block products) with its result in `layout`, when it
    runs on the FMA chain (select-mma's `fma_plan`)."""
    if recorded_plan(op) is not None:
        return
    op.attrs["fma_unrolled"] = _unrolled(layout, recorded_plan(op, FMA_PLAN).kc)


def _unrolled(layout: LinearLayout, kc: int) -> bool:
    accumulators = len({layout.register_coord(r) for r in range(layout.num_registers)})
    return accumulators * kc <= FMA_UNROLL_LIMIT


def _lane_scan(op: Operation) -> None:
    lanes = sorted(dim_bits(layout_of(op.operands["operands"][0].type), op.attrs["dim"]).lanes,
                   key=lambda bw: bw[1])
    if lanes:
        consecutive = all(b == lanes[0][0] + j and w == lanes[0][1] << j for j, (b, w) in enumerate(lanes))
        op.attrs["lane_scan"] = "kogge_stone" if consecutive else "hypercube"


def _store_vectors(op: Operation) -> None:
    plan = recorded_plan(op)
    if not isinstance(plan, (WgmmaPlan, Tcgen05Plan)):
        return
    op.attrs["store_vectors"] = tuple(
        store_vector(layout_of(op.operands[name].type), plan, role, plan.operand(role).ebytes)
        for role, name in (("a", "lhs"), ("b", "rhs")))


def _landed_store_vector(op: Operation) -> None:
    """Registers per `st.shared` of the A an attention loop's wgmma stages (its scratch, or a hoisted buffer)."""
    plan = op.attrs["mma_plan"]
    value = op.operands["lhs" if op.name == "tilegpu.mma_landed" else "value"]
    op.attrs["store_vectors"] = (store_vector(layout_of(value.type), plan, "a", plan.a_smem.ebytes),)


def store_vector(layout: LinearLayout, plan, role: str, ebytes: int) -> int:
    """Registers per store of operand `role` staged in its swizzled layout (see the module docstring)."""
    regs = [(plan.stage_offset(role, b), plan.chunk_part(role, b)) for b in layout.bases[0]]
    v = 1
    while len(regs) > v.bit_length() - 1 and regs[v.bit_length() - 1] == (v * ebytes, 0) \
            and 2 * v * ebytes <= MAX_VECTOR_BYTES:
        v *= 2
    others = [o for o, _ in regs[v.bit_length() - 1:]] + [plan.stage_offset(role, b) for bs in layout.bases[1:]
                                                          for b in bs]
    while v > 1 and any(o % (v * ebytes) for o in others):
        v //= 2
    return v
