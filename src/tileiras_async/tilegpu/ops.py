"""The tile-GPU dialect's ops: what the passes make explicit that cuda_tile leaves implicit.

Each op is declared once here with ``ir/opdef.py``'s mechanism, like the cuda_tile ops in ``ir/cuda_tile.py``:
operands and results with type constraints, attributes, traits (memory effects included).  Passes create the
ops with ``Operation(LOCAL_LOAD, operands, attrs, result_types, loc=...)``; the printer, DCE
(``tilegpu/cuda_tile_dce.py``), the scheduler's dependence graphs (``schedule/depgraph.py``) and insert-barriers ask the
declarations (``op.spec.effects``, ``effects_of(op)``) instead of lists of op names; codegen has exactly one
pattern per op.  cuda_tile ops stay in the tile-GPU IR unchanged except for their types (tiles gain a
layout); these ops are added around them.  The IR is printed in MLIR's generic op syntax
(``tilegpu/printer.py``), so the ops declare no assembly format.

| op                         | what it is                                                                 |
|----------------------------|----------------------------------------------------------------------------|
| `tilegpu.convert_layout`   | the same tile in another layout, moving nothing between threads            |
| `tilegpu.local_alloc`      | a shared-memory buffer (`offset`: where allocate-shared-memory put it; `align`: a base aligned at run time) |
| `tilegpu.local_store`      | a tile into a buffer, row-major over `shape`, shifted by `shift` + offsets x `scale` |
| `tilegpu.local_load`       | a tile out of a buffer (the same addressing), in the result type's layout  |
| `tilegpu.barrier`          | `bar.sync 0`: every thread of the CTA arrives before any goes on           |
| `tilegpu.async_copy`       | a K chunk of a loop's mma operand, global -> a stage buffer (cp.async; with `tma`: one thread's tensor copies completing on the slot's mbarrier of `barriers`: an elected lane of warp 0; in a warp-specialised producer's region, its one thread; with `transpose`: vector loads into registers and a shared store per element, into a buffer contiguous along another dimension) |
| `tilegpu.async_commit` / `async_wait` | cp.async groups: commit, wait until `pending` remain (`fence_proxy_async`: for wgmma; `groupless`: no cp.async copies, only the fence) |
| `tilegpu.convert_stage`    | a landed K chunk of a converted operand (a conversion the tensor core does not do) converted in place, by the threads that copied it |
| `tilegpu.tma_barriers`     | a pipelined loop's mbarriers, one per stage buffer, or the kernel's, one per `tma_issue` (`count` arrivals per phase), initialised by thread 0; the tensor maps (`maps`: their entry parameters) prefetched (`barrier_follows`: a CTA barrier comes before any other warp's wait, so warp 0 only syncs its lanes) |
| `tilegpu.tma_wait`         | every thread waits for the tensor copies of pipeline unit `unit` (its stage's mbarrier, phase unit / stages) |
| `tilegpu.tma_release`      | after the loop (a pipelined K-loop's only where it runs again, inside another loop): a barrier, then thread 0 invalidates the mbarriers (the next execution initialises them again) |
| `tilegpu.tma_arrive`       | a warp-specialised loop's consumer releases the stage buffer of unit `unit`: every consumer thread arrives on the slot's "empty" mbarrier; `commit` (tcgen05): thread 0 commits its mmas to it instead, the arrival coming when they complete; `fence_reads` (a one-warpgroup ring that mma.sync reads): each thread first fences its reads for the async proxy that refills the buffer |
| `tilegpu.materialize`      | the same tile, written into its registers here (one move per register) where LLVM cannot fold it: a warp-specialised consumer's accumulator init, which the loop's zero-trip path then reuses instead of copying constants into the epilogue's registers |
| `tilegpu.warp_specialize`  | the producer warpgroup (threads `producer_warpgroup` x 128 ..) lowers its registers (`setmaxnreg.dec` to `producer_regs`), its first thread runs the region (one thread's code), and it exits; the rest of the kernel runs in the consumer warpgroup (its barriers count its 128 threads) with the kernel's `consumer_regs` registers per thread (`.maxnreg`) |
| `tilegpu.tma_issue`        | a tile load by TMA, issued: into a shared buffer of its own, thread 0 expects the bytes on mbarrier `slot` of `barriers` and issues the tensor copies (`tma`: map, boxes; in a loop, `fence_reads`: the previous iteration's reads of the buffer fenced from the async proxy first, `after_reads`: and waited for at a barrier); every thread arrives (the result: the state its arrival returned) |
| `tilegpu.tma_read`         | the tile of a `tma_issue` (`state`): every thread waits for that phase, then reads its elements from the buffer in the result's layout |
| `tilegpu.views_aligned`    | a pipelined loop version's run-time condition                              |
| `tilegpu.mma_staged`       | the pipelined mma: A and B of one K chunk read from a stage buffer         |
| `tilegpu.mma_landed`       | an mma (wgmma) whose B operand landed by TMA in slot `slot` of a ring (an attention-shaped loop's: `operand` says where in the slot, `mma_plan` its layout, whole K); A read from `a_buffer` (filled before the loop by a `stage_operand` or a tensor copy; no `lhs` then), from its registers (`a_registers`: they hold wgmma's register-A fragments) or else staged through the op's scratch; `acc_zero`: the accumulator is a zero constant (the first K step ignores D: wgmma's scale-d 0, tcgen05's enable-input-d off; tcgen05 stores no accumulator into tensor memory); `tmem_column` (tcgen05): its accumulator's columns start there in the kernel's `tmem_alloc`, whose mbarriers order its stores, issue and loads (no CTA barrier); `stores_ordered`: no wait on the stores' mbarrier (nothing stored or staged, a later op's wait orders the previous loads of its columns) |
| `tilegpu.stage_operand`    | a loop-invariant mma operand written once, as the mma's staging lays it out (`mma_plan`: a wgmma's swizzled layout, into a buffer aligned at run time, fenced for the async proxy) |
| `tilegpu.mma_prestaged`    | an mma whose `role` operand (a or b) is read from a `stage_operand` buffer |
| `tilegpu.repad`            | a loaded tile read again through a view with other padding: `source` where in bounds, the view's padding elsewhere |
| `tilegpu.scan_total`       | a `scan`'s total along its dimension (its last element in scan order), in the sliced layout: the scan computed it on the way |
| `tilegpu.tmem_acquire`     | a tcgen05 accumulator moved into tensor memory for a whole loop: its columns (the result: their address) and the mma's mbarrier (`barrier_follows`: a `tilegpu.barrier` comes before the first issue, so the op ends without its own; `acc_zero`: the accumulator is a zero constant, nothing is stored, and the op's barrier, which publishes the columns, is the last one before the first issue) |
| `tilegpu.tmem_mma_staged`  | `mma_staged` on an accumulator in tensor memory: issue, commit and wait for mbarrier phase `phase`; the result is the next phase.  `committed` (a warp-specialised consumer's): issue only, no commit or wait (a `tma_arrive` with `commit` follows), the phase passed on.  `acc_zero`: the first K step ignores D (enable-input-d off: nothing was stored) |
| `tilegpu.tmem_release`     | the accumulator back from tensor memory into registers (the result's layout); frees the columns and the mbarrier.  `committed`: the mmas were committed elsewhere: first one more commit to the op's mbarrier and a wait for it.  `allocated`: the columns stay (a `tmem_free` frees them) and mbarriers, not CTA barriers, order the loads (below); with `allocated` alone (the columns of a `per_unit` tmem_alloc) it only loads D |
| `tilegpu.tmem_alloc`       | a warp-specialised kernel's tensor memory, allocated once at its entry before the CTA barrier that publishes the TMA mbarriers (which publishes the columns' address and this op's two mbarriers too): warp 0 allocates, thread 0 initialises the mmas' mbarrier (every consumer thread's arrival and the commit's) and the stores' (every consumer thread's).  Its `allocated` acquires then order their `tcgen05.st`s before the issue by the stores' mbarrier (thread 0 waits), its releases wait for the mmas on the mmas' one.  `columns` (no `mma`): an attention loop's, every `tmem_column` mma_landed's.  `per_unit` (no warp specialisation, every acquire a per-iteration chain's from zero): the mmas' mbarrier counts the units' commits, and the first unit's barrier publishes it |
| `tilegpu.tmem_free`        | at the end of the consumer's code: every consumer thread arrives on the stores' mbarrier after its last `tcgen05.ld`, warp 0 waits and deallocates the columns.  `per_unit`: after a CTA barrier, warp 0 frees the columns and thread 0 invalidates the mbarrier |

Memory effects name two resources besides global memory: `SHARED` (the CTA's shared memory; reads and
writes of a buffer are effects on the `local_alloc` result behind it) and `ASYNC_GROUPS` (the thread's
cp.async groups: copies join the open group, commit closes it, wait retires groups and so makes their
copies' shared-memory writes visible).  Barriers and the cp.async ops are *ordered*: nothing with a memory
effect moves across them.

cuda_tile ops that stage through shared memory themselves (mma operands, cross-warp reductions and scans,
atomics whose results are broadcast, prints, allocas) carry `scratch_bytes` / `scratch_offset` attributes:
they write the scratch first and read it last, with their own barrier in between.
"""
from __future__ import annotations

from ..ir.opdef import (Alloc, DefinesMemoryObject, SizedRegion, Dialect, MemoryEffects, Pure, Read,
                        SameOperandsAndResultElementType, SameOperandsAndResultShape, Trait, TypeConstraint, Write)
from ..ir.verify_types import ANY_TILE, SCALAR_I1, SCALAR_I32, SCALAR_INT, TILE_VIEW
from .types import SmemType

TILEGPU = Dialect("tilegpu")

SHARED = "shared"               # the CTA's shared memory
ASYNC_GROUPS = "async_groups"   # the thread's cp.async groups
TENSOR_MEMORY = "tensor_memory"  # the CTA's tcgen05 tensor memory and the mbarrier its mmas commit to

SMEM = TypeConstraint("shared-memory buffer", lambda t: isinstance(t, SmemType))


class RingAccess(Trait):
    """The op reads or writes its `buffer` (a pipelined loop's ring of stage buffers) under the ring's own
    protocol: the cp.async waits and the pipeline's barriers order these accesses among themselves, so
    insert-barriers separates them only from other accesses to the same bytes."""


CONVERT_LAYOUT = TILEGPU.op(
    "convert_layout", operands={"source": ANY_TILE}, results={"result": ANY_TILE},
    traits=[Pure(), SameOperandsAndResultShape(), SameOperandsAndResultElementType()],
    cls="ConvertLayoutOp")
LOCAL_ALLOC = TILEGPU.op(
    "local_alloc", results={"buffer": SMEM}, attrs={"offset?": "int", "align?": "int"},
    traits=[MemoryEffects(Alloc("buffer", SHARED)), DefinesMemoryObject()], cls="LocalAllocOp")
LOCAL_STORE = TILEGPU.op(
    "local_store", operands={"value": ANY_TILE, "buffer": SMEM, "offsets*": SCALAR_INT},
    attrs={"shape": "shape", "shift?": "shape", "scale?": "shape"},
    traits=[MemoryEffects(Write("buffer", SHARED))], cls="LocalStoreOp")
LOCAL_LOAD = TILEGPU.op(
    "local_load", operands={"buffer": SMEM, "offsets*": SCALAR_INT}, results={"result": ANY_TILE},
    attrs={"shape": "shape", "scale?": "shape"},
    traits=[MemoryEffects(Read("buffer", SHARED))], cls="LocalLoadOp")
BARRIER = TILEGPU.op(
    "barrier", traits=[MemoryEffects(Read(resource=SHARED), Write(resource=SHARED), ordered=True)],
    cls="BarrierOp")
ASYNC_COPY = TILEGPU.op(
    "async_copy", operands={"view": TILE_VIEW, "buffer": SMEM, "indices*": SCALAR_INT, "slot?": SCALAR_I32,
                            "barriers?": SCALAR_I32},
    attrs={"role": "str", "operand": "operand", "chunk": "int", "kc": "int", "vb": "int", "unit_bytes": "int",
           "stages": "int", "slot?": "int", "tma?": "tensor_copy", "transpose!": "unit", "landed!": "unit"},
    traits=[MemoryEffects(Read("view"), Write("buffer", SHARED), Write(resource=ASYNC_GROUPS), ordered=True),
            RingAccess()],
    cls="AsyncCopyOp")
ASYNC_COMMIT = TILEGPU.op(
    "async_commit", traits=[MemoryEffects(Write(resource=ASYNC_GROUPS), ordered=True)], cls="AsyncCommitOp")
ASYNC_WAIT = TILEGPU.op(
    "async_wait", attrs={"pending": "int", "fence_proxy_async!": "unit", "groupless!": "unit"},
    traits=[MemoryEffects(Read(resource=ASYNC_GROUPS), Write(resource=SHARED), ordered=True)], cls="AsyncWaitOp")
CONVERT_STAGE = TILEGPU.op(
    "convert_stage", operands={"buffer": SMEM, "slot?": SCALAR_I32},
    attrs={"role": "str", "operand": "operand", "chunk": "int", "kc": "int", "vb": "int", "unit_bytes": "int",
           "stages": "int", "slot?": "int", "fence_proxy_async!": "unit"},
    traits=[MemoryEffects(Read("buffer", SHARED), Write("buffer", SHARED), ordered=True), RingAccess()],
    cls="ConvertStageOp")
VIEWS_ALIGNED = TILEGPU.op(
    "views_aligned", operands={"view_a": TILE_VIEW, "view_b": TILE_VIEW}, results={"result": SCALAR_I1},
    attrs={"vb": "widths", "operands": "operands", "kc": "int"}, traits=[Pure()], cls="ViewsAlignedOp")
MMA_STAGED = TILEGPU.op(
    "mma_staged", operands={"acc": ANY_TILE, "buffer": SMEM, "slot?": SCALAR_I32}, results={"result": ANY_TILE},
    attrs={"mma": "op", "a": "operand", "b": "operand", "unit": "int", "kc": "int", "unit_bytes": "int",
           "slot?": "int", "ldmatrix?": "fragment_loads", "committed!": "unit"},
    traits=[MemoryEffects(Read("buffer", SHARED)), RingAccess()], cls="MmaStagedOp")
TMA_BARRIERS = TILEGPU.op(
    "tma_barriers", results={"barriers": SCALAR_I32},
    attrs={"stages": "int", "count": "int", "maps": "ints", "empty?": "int", "barrier_follows!": "unit"},
    traits=[MemoryEffects(Write(resource=SHARED), ordered=True)], cls="TmaBarriersOp")
TMA_ISSUE = TILEGPU.op(
    "tma_issue", operands={"view": TILE_VIEW, "barriers": SCALAR_I32, "index*": SCALAR_INT},
    results={"state": SCALAR_INT}, attrs={"tma": "tile_copy", "fence_reads!": "unit", "after_reads!": "unit"},
    traits=[MemoryEffects(Read("view"), Write(resource=SHARED))], cls="TmaIssueOp")
TMA_READ = TILEGPU.op(
    "tma_read", operands={"barriers": SCALAR_I32, "state": SCALAR_INT}, results={"result": ANY_TILE},
    attrs={"tma": "tile_copy"}, traits=[MemoryEffects(Read(resource=SHARED), Write(resource=SHARED))],
    cls="TmaReadOp")
TMA_WAIT = TILEGPU.op(
    "tma_wait", operands={"barriers": SCALAR_I32, "unit": SCALAR_I32}, attrs={"stages": "int", "empty!": "unit"},
    traits=[MemoryEffects(Read(resource=SHARED), Write(resource=SHARED), ordered=True)], cls="TmaWaitOp")
TMA_RELEASE = TILEGPU.op(
    "tma_release", operands={"barriers": SCALAR_I32}, attrs={"stages": "int"},
    traits=[MemoryEffects(Write(resource=SHARED), ordered=True)], cls="TmaReleaseOp")
TMA_ARRIVE = TILEGPU.op(
    "tma_arrive", operands={"barriers": SCALAR_I32, "unit": SCALAR_I32},
    attrs={"stages": "int", "commit!": "unit", "fence_reads!": "unit"},
    traits=[MemoryEffects(Read(resource=SHARED), Write(resource=SHARED), ordered=True)], cls="TmaArriveOp")
MATERIALIZE = TILEGPU.op(
    "materialize", operands={"source": ANY_TILE}, results={"result": ANY_TILE},
    traits=[Pure(), SameOperandsAndResultShape(), SameOperandsAndResultElementType()], cls="MaterializeOp")
WARP_SPECIALIZE = TILEGPU.op(
    "warp_specialize", attrs={"producer_warpgroup": "int", "producer_regs": "int", "consumer_regs": "int"},
    regions={"producer": SizedRegion(1)},
    traits=[MemoryEffects(Read(resource=SHARED), Write(resource=SHARED), Write(resource=ASYNC_GROUPS),
                          ordered=True)],
    cls="WarpSpecializeOp")
MMA_LANDED = TILEGPU.op(
    "mma_landed", operands={"lhs?": ANY_TILE, "acc": ANY_TILE, "buffer": SMEM, "slot": SCALAR_I32,
                            "a_buffer?": SMEM},
    results={"result": ANY_TILE},
    attrs={"mma": "op", "mma_plan": "wgmma_plan", "operand": "operand", "unit_bytes": "int",
           "a_registers!": "unit", "acc_zero!": "unit", "scratch_bytes?": "int", "scratch_offset?": "int", "store_vectors?": "ints",
           "tmem_column?": "int", "stores_ordered!": "unit"},
    traits=[MemoryEffects(Read("buffer", SHARED), Read("a_buffer", SHARED)), RingAccess()], cls="MmaLandedOp")
STAGE_OPERAND = TILEGPU.op(
    "stage_operand", operands={"value": ANY_TILE, "buffer": SMEM},
    attrs={"mma": "op", "role": "str", "mma_plan?": "wgmma_plan", "store_vectors?": "ints"},
    traits=[MemoryEffects(Write("buffer", SHARED))], cls="StageOperandOp")
MMA_PRESTAGED = TILEGPU.op(
    "mma_prestaged", operands={"other": ANY_TILE, "acc": ANY_TILE, "buffer": SMEM}, results={"result": ANY_TILE},
    attrs={"mma": "op", "role": "str", "scratch_bytes?": "int", "scratch_offset?": "int"},
    traits=[MemoryEffects(Read("buffer", SHARED))], cls="MmaPrestagedOp")
REPAD = TILEGPU.op(
    "repad", operands={"source": ANY_TILE, "view": TILE_VIEW, "index*": SCALAR_INT}, results={"result": ANY_TILE},
    traits=[Pure()], cls="RepadOp")
TMEM_ALLOC = TILEGPU.op(
    "tmem_alloc", attrs={"mma?": "op", "kc?": "int", "columns?": "int", "per_unit!": "unit"},
    traits=[MemoryEffects(Write(resource=TENSOR_MEMORY), Write(resource=SHARED), ordered=True)], cls="TmemAllocOp")
TMEM_FREE = TILEGPU.op(
    "tmem_free", attrs={"mma?": "op", "kc?": "int", "columns?": "int", "per_unit!": "unit"},
    traits=[MemoryEffects(Write(resource=TENSOR_MEMORY), ordered=True)], cls="TmemFreeOp")
TMEM_ACQUIRE = TILEGPU.op(
    "tmem_acquire", operands={"acc": ANY_TILE}, results={"tmem": SCALAR_I32},
    attrs={"mma": "op", "kc": "int", "barrier_follows!": "unit", "allocated!": "unit", "acc_zero!": "unit"},
    traits=[MemoryEffects(Write(resource=TENSOR_MEMORY), Read(resource=SHARED), ordered=True)],
    cls="TmemAcquireOp")
TMEM_MMA_STAGED = TILEGPU.op(
    "tmem_mma_staged", operands={"tmem": SCALAR_I32, "phase": SCALAR_I32, "buffer": SMEM, "slot?": SCALAR_I32},
    results={"next_phase": SCALAR_I32},
    attrs={"mma": "op", "a": "operand", "b": "operand", "unit": "int", "kc": "int", "unit_bytes": "int",
           "slot?": "int", "committed!": "unit", "acc_zero!": "unit"},
    traits=[MemoryEffects(Read("buffer", SHARED), Write(resource=TENSOR_MEMORY), ordered=True), RingAccess()],
    cls="TmemMmaStagedOp")
TMEM_RELEASE = TILEGPU.op(
    "tmem_release", operands={"tmem": SCALAR_I32}, results={"result": ANY_TILE},
    attrs={"mma": "op", "kc": "int", "committed!": "unit", "allocated!": "unit"},
    traits=[MemoryEffects(Write(resource=TENSOR_MEMORY), ordered=True)], cls="TmemReleaseOp")
SCAN_TOTAL = TILEGPU.op(
    "scan_total", operands={"scan": ANY_TILE}, results={"result": ANY_TILE}, traits=[Pure()], cls="ScanTotalOp")
