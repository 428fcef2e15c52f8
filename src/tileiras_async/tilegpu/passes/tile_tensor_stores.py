"""select-tile-tensor-stores: which tile stores leave by TMA (staged in shared memory, each warp's tensor stores)
instead of per-thread bounds-checked st.global.

Contract: in: IR with final layouts and vector widths (after vectorize-view-accesses; the K-loop passes have
run and numbered their maps).  out: the IR is unchanged but for attributes: a weak `store_view_tko` at the
kernel's top level (not in a loop or a branch: the staging buffer is written once, and every thread of the
CTA -- of the consumer warpgroup after a warp-specialised loop -- reaches it) whose token orders nothing, and
that `tilegpu.analysis.tensor_maps.plan_tile_store` accepts -- a tile of f16/bf16/f32 with two dimensions of
more than one element (any others unit ones), over them in an mma fragment layout whose warps hold whole
rows or a row a thread as tensor memory's loads leave it (at least 256 bytes a thread), rows of whole
128-byte boxes, through a view whose launch hints promise a unit inner stride and
16-byte aligned base and outer strides and whose tensor's rows are the tile's -- gets `tma`, its
`tilegpu.analysis.tensor_maps.TileStore` (its map in the hidden entry parameter after the maps the loads took),
and loses `vector_width` (no thread stores to global memory any more).  Code generation stages the tile in a
shared buffer of its own (stmatrix for 16-bit elements, st.shared.v2 for 32-bit ones; a row a thread: 16 bytes
at a time, st.shared.v4), fences it to the async
proxy, and each warp's elected lane stores the rows its warp wrote (cp.async.bulk.tensor shared -> global,
waiting for the reads of the buffer before it exits): no CTA barrier.

Why (bench/dynamic_instructions.py, launch set, sm_90, executed thread-instructions, ours / NVIDIA's): the
per-thread epilogue stored each pair of elements with its own bounds check and 64-bit address -- three or
four instructions a pair -- where NVIDIA's tool stages through shared memory and stores the tile by TMA; this
form writes a pair in one or two (a conversion, a quarter of an stmatrix or a st.shared.v2, a share of the
address XOR).  matmul_f16_f16out_128x128x64 162,020 -> 108,260 (1.10 -> 0.73), matmul_f16_f32acc_64x64x32
205,530 -> 174,042 (0.50 -> 0.42), matmul_tf32_64x64x32's epilogue 89 -> 52 instructions a thread.

Nothing here asks where the value comes from: an attention kernel's output (its loop's mma accumulator
divided by the row sums, cast to f16, reshaped to the output tensor's rank-4 view: 1 x 1 x rows x columns)
is in the same wgmma fragment layout as a matmul's result and leaves the same way, through a rank-4 map
whose box is 1 along the unit dimensions -- as NVIDIA's tool stores it (its fourth map: stmatrix, then
cp.async.bulk.tensor.4d): fmha_f16 (sm_90, as cuTile launches it) 348,754 -> 312,914 (1.01 -> 0.91),
fmha_causal_f16 696,804 -> 663,524 (0.98 -> 0.94).  Flash attention's output is not taken: its two warps
share each row (the mma.sync accumulator of a 32-row tile), and a warp's TMA store would read the other's.

The staging buffer is shared memory of its own beside the kernel's buffers (an attention loop's ring may
have taken most of the target's limit): a store whose buffer (and its alignment's padding) does not fit
beside the fewest bytes allocate-shared-memory can place them in stays per-thread; that pass then keeps
them within what the staging buffers leave.

Nothing changes without launch hints (a map needs their promises), on targets without TMA or whose hooks'
parameter layout is not known (targets.HOOK_PARAM_BANK_BASE: sm_90, sm_100).

On sm_100 an accumulator leaves tensor memory a row a thread (tcgen05.ld 32x32b: lanes the rows, each warp 32
of them; 16x32bx2 for 64-row tiles: 16 rows a warp, the upper lanes the row's second half), as NVIDIA's sm_100
epilogues have it before their st.shared.v4 and TMA store (128B swizzle, as here): each thread writes its row
in 16-byte runs, each warp stores its rows.  Taken only where a thread holds at least 256 bytes
(tensor_maps._LEAST_ROW_BYTES): shorter rows are already 16-byte vector stores, one bounds check each, and
staging them costs more static instructions than it saves (figures there).  matmul_f16_f16out_128x128x64
(sm_100, launch set): static 538 -> 516, executed 76,522 -> 65,258 (0.57 -> 0.49).  Where warps share rows
(8 warps: w and w + 4 split the columns) the store stays per-thread, as flash attention's.
"""
from __future__ import annotations

from ...ir.core import Operation
from ...ir.enums import MemoryOrderingSemantics as MO
from ...targets import shared_memory_limit
from ..analysis.tensor_maps import kernel_hooks, param_layout, plan_tile_store, plane_layout, store_plane, thread_rows
from ..types import layout_of
from ..ir import KernelIR, walk_ops
from .allocate_smem import least_shared_bytes


def run(k: KernelIR) -> None:
    tgt = k.options.known_target
    if tgt is None or not (tgt.has_tma and tgt.has_tensor_map_hooks):
        return
    stores = [op for op in k.fn.body.ops if op.name == "store_view_tko"]
    if not stores:
        return
    used = {id(v) for op in walk_ops(k.fn.body) for v in op.operand_values()}
    hooks = kernel_hooks(k)
    param = len(param_layout(k.fn.type.inputs)) + (len(hooks.maps) if hooks is not None else 0)
    room = shared_memory_limit(k.options.target) - least_shared_bytes(k)
    for op in stores:
        if not _eligible(op, used):
            continue
        plan = plan_tile_store(op, k.fn.body.args, param)
        if isinstance(plan, str) or plan.bytes + plan.align > room:
            continue
        room -= plan.bytes + plan.align
        op.attrs["tma"] = plan
        op.attrs.pop("vector_width", None)
        param += 1
        k.remark("passed", "memory", "TileTensorStores",
                 f"the {'x'.join(map(str, op.operands['tile'].type.shape))} tile store is "
                 f"TMA: {_staging(op)} into shared memory, then {plan.copies} box(es) of "
                 f"{'x'.join(map(str, plan.map.box))} through the map in parameter {plan.map.param}", op)


def _staging(op: Operation) -> str:
    """How the tile is written to its staging buffer, for the remark."""
    ty = op.operands["tile"].type
    return "st.shared.v4" if thread_rows(plane_layout(layout_of(ty), store_plane(tuple(ty.shape)))) else "stmatrix"


def _eligible(op: Operation, used: set[int]) -> bool:
    """A weak tile store whose token orders nothing."""
    return op.attrs.get("memory_ordering_semantics", MO.weak) == MO.weak and id(op.results[0]) not in used

