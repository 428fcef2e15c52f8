"""Tensor maps (TMA, sm_90+): which pipelined mma operands are copied by `cp.async.bulk.tensor` through a map.

A tensor map is a 128-byte kernel parameter (aligned to 64) that NVIDIA's tools append after the user's
parameters and the launch hook of the host object fills from them (codegen/host_object.py writes that
hook; emu/README.md "NVIDIA's launch-time hook" has the map's words).  This module holds the description of
a map (which parameters hold the array's base, extents and strides; box; swizzle) and decides, for one
operand of a K-loop the pipeliner stages for wgmma, whether its per-thread cp.async copies can be one elected
thread's tensor copies: `plan_tensor_copy` (for mma.sync and FMA K-loops: `plan_staged_tensor_copy`, whose
stage rows are one box, 2-D or 3-D, without their padding).

What the copies must reproduce is the stage buffer's swizzled layout (tilegpu.analysis.wgmma.SmemOperand): per
column of `width` bytes of the operand's contiguous dimension, the chunk's rows one after another, 16-byte
pieces XOR-swizzled by the row -- what a TMA box of (rows, width / element bytes) with the matching swizzle
writes, each column one box.  So an operand qualifies when its buffer is contiguous along the tensor's
contiguous dimension (no transposing copies), the launch hints promise a unit inner stride and 16-byte
aligned base and strides (what a map requires; nothing checks them at run time), and the view and its
tensor view are 2-D, made from the kernel's arguments.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

import msgspec

from ...ir import types as T
from ...ir.core import Operation, Value
from ...ir.enums import PaddingValue
from ..types import layout_of
from .facts import view_rows_aligned, view_strides_and_base
from .software_pipeline import read_as_tf32, staged_conversions

MAP_BYTES, MAP_ALIGN = 128, 64
_MAX_BOX = 256
_SWIZZLE_NAMES = {16: "none", 32: "32B", 64: "64B", 128: "128B"}
SWIZZLE_BYTES = {name: n for n, name in _SWIZZLE_NAMES.items()}   # the span whose 16-byte chunks a swizzle permutes
_ELEMENT_NAMES = {T.F16: "f16", T.BF16: "bf16", T.F32: "f32", T.I32: "i32"}


class HookValue(msgspec.Struct, frozen=True):
    """A value the hook reads from the parameter buffer (`param`: an entry parameter's index) or a literal."""
    param: int = -1
    value: int = 0


class TensorMapSpec(msgspec.Struct, frozen=True):
    """One tensor map: entry parameter `param` (128 bytes, align 64) describes the array at pointer
    parameter `base`; `shape`, `strides` (in elements, the innermost a literal 1) and `box` outermost first,
    as the view's dimensions."""
    param: int
    base: int
    shape: tuple[HookValue, ...]
    strides: tuple[HookValue, ...]
    element: str
    box: tuple[int, ...]
    swizzle: str = "none"


class KernelHooks(msgspec.Struct, frozen=True):
    """A kernel's entry name, the (bytes, alignment) of each of its entry parameters, and its tensor maps."""
    name: str
    params: tuple[tuple[int, int], ...]
    maps: tuple[TensorMapSpec, ...] = ()


# A kernel's launch hooks travel with its code as one comment line (LLVM IR ";", PTX "//"), so that every
# path from code generation to ptxas (stages, the batch pipeline, caches) carries them without a field of
# its own; whoever runs ptxas builds the host object from them (codegen/host_object.host_object_for_ptx).
_COMMENT = "tileiras-async tensor maps: "
_COMMENT_LINE = re.compile(r"^(?:;|//) " + re.escape(_COMMENT) + r"(\{.*\})$", re.M)


def tensor_maps_comment(hooks: KernelHooks, prefix: str) -> str:
    return f"{prefix} {_COMMENT}{msgspec.json.encode(hooks).decode()}"


def tensor_maps_in(text: str) -> list[KernelHooks]:
    """The launch hooks of the kernels of LLVM IR or PTX text (tensor_maps_comment), in text order."""
    return [msgspec.json.decode(m.group(1).encode(), type=KernelHooks) for m in _COMMENT_LINE.finditer(text)]


@dataclass(frozen=True)
class TensorCopy:
    """How one K chunk of an operand lands by TMA: `columns` boxes of `box` (elements per tile dimension,
    outermost first; the wgmma layouts' are 2-D: rows, inner elements), box j at byte `j * column_bytes` of
    the operand's buffer and `j * box[-1]` elements along the tensor's inner dimension; `map` is the map's
    spec (its `param` the hidden entry parameter)."""
    map: TensorMapSpec
    columns: int
    column_bytes: int
    box: tuple[int, ...]
    elem_bytes: int
    order: tuple[int, ...] = ()     # the tile dimension of each map dimension, outermost first (): the same

    @property
    def chunk_bytes(self) -> int:
        """The bytes one chunk's boxes deliver to the mbarrier (out-of-bounds elements count too)."""
        return self.columns * prod(self.box) * self.elem_bytes

    @property
    def repeat(self) -> int:
        """What the copies' shared destination must be a multiple of: the map's swizzle pattern (eight of its
        spans; 128 bytes, TMA's own alignment, for none) -- so that the pattern starts with the buffer."""
        return 8 * SWIZZLE_BYTES[self.map.swizzle]


def param_layout(types) -> tuple[tuple[int, int], ...]:
    """(bytes, alignment) of the entry parameters of these argument types, as the PTX declares them."""
    out = []
    for t in types:
        elem = t.elem if isinstance(t, T.TileType) else t
        size = 8 if isinstance(elem, T.PointerType) else max(1, elem.width // 8)
        out.append((size, size))
    return tuple(out)


def _argument(v: Value, args: list[Value]) -> int | None:
    """The kernel argument `v` is, through `assume`s (None: a value computed in the kernel)."""
    while isinstance(v.owner, Operation) and v.owner.name == "assume":
        v = v.owner.operands["value"]
    return next((i for i, a in enumerate(args) if a is v), None)


def _view_operands(tview: Operation, args: list[Value]):
    """(base argument, [shape HookValue], [stride HookValue]) of a tensor view made from kernel arguments."""
    vt = tview.result.type
    base = _argument(tview.operands["base"], args)
    values = {"dynamicShape": iter(tview.operands["dynamicShape"]),
              "dynamicStrides": iter(tview.operands["dynamicStrides"])}
    out = {}
    for name, static in (("dynamicShape", vt.shape), ("dynamicStrides", vt.strides)):
        ops = []
        for s in static:
            if s != T.DYNAMIC:
                ops.append(HookValue(value=s))
                continue
            arg = _argument(next(values[name]), args)
            if arg is None:
                return None
            ops.append(HookValue(param=arg))
        out[name] = tuple(ops)
    return None if base is None else (base, out["dynamicShape"], out["dynamicStrides"])


def _mapped_view(view: Value, rank: int, eb: int, args: list[Value], unpadded: bool = True,
                 any_order: bool = False):
    """(base argument, [shape HookValue], [stride HookValue]) of the tensor view a `rank`-D tile of `eb`-byte
    elements is loaded from through partition view `view`, when a map can describe it: made from kernel
    arguments, of the tile's rank in its own dimension order (`any_order`: in any), zero padded (or, with
    `unpadded`, not padded), its rows promised 16-byte aligned with a unit inner stride; else why not."""
    pv = view.type
    part = view.owner if isinstance(view.owner, Operation) else None
    tview = part.operands["tensor_view"].owner if part is not None and part.name == "make_partition_view" else None
    if tview is None or not isinstance(tview, Operation) or tview.name != "make_tensor_view":
        return "the view's tensor view is not in sight"
    if len(tview.result.type.shape) != rank or (tuple(pv.dim_map) != tuple(range(rank)) and not any_order):
        return f"not a {rank}-D tensor view in its own dimension order"
    if pv.padding not in ((None, PaddingValue.zero) if unpadded else (PaddingValue.zero,)):
        return "the view pads with a non-zero value" if unpadded else "the view does not pad with zeros"
    if not (tensor_rows_aligned(view, rank, eb) if any_order else view_rows_aligned(view, rank, eb, 16)):
        return "the launch hints do not promise a unit inner stride and 16-byte aligned base and strides"
    operands = _view_operands(tview, args)
    if operands is None:
        return "the tensor view's base, extents or strides are not kernel arguments"
    return operands


def tensor_rows_aligned(view: Value, rank: int, eb: int) -> bool:
    """Whether the launch hints promise the tensor's own rows (its innermost dimension, whatever the view's
    order) a unit stride and a 16-byte aligned base and outer strides: what a map of it requires."""
    facts = view_strides_and_base(view)
    if facts is None:
        return False
    base, strides = facts
    return strides[rank - 1][0] == 1 and base % 16 == 0 and all((strides[d][1] * eb) % 16 == 0
                                                                 for d in range(rank - 1))


def plan_landed_copy(x, args: list[Value], param: int) -> TensorCopy | str:
    """A TensorCopy for the B operand `x` of an mma that reads its whole K from one slot of a ring (an
    attention-shaped loop's K or V tile: tilegpu.analysis.attention_pipeline; `x.smem` the mma's B layout), or
    for its loop-invariant A (Q, landed once before the loop: `x.role` "a", `x.smem` the A layout), or
    why its tile cannot land by TMA.  Unlike a K-loop operand the tile may have leading unit dimensions and
    its view may order the tensor's dimensions otherwise (K loaded transposed), as long as the buffer is
    contiguous along the tensor's innermost dimension; the map has the tensor's rank, a box of 1 along the
    unit dimensions, and its dimensions follow the tensor's (`TensorCopy.order`)."""
    staged = x.smem
    if staged is None or any(o.name == "ftof" for o in x.chain):
        return "not an mma operand landed as it is"
    element = _ELEMENT_NAMES.get(x.elem)
    if element is None:
        return f"{x.elem} elements"
    rank = len(x.tile_shape)
    view = x.load.operands["view"]
    dim_map = tuple(view.type.dim_map)
    operands = _mapped_view(view, rank, x.eb, args, any_order=True)
    if isinstance(operands, str):
        return operands
    base, shape, strides = operands
    # B: ([unit dims,] K, N), its rows N; A: ([unit dims,] M, K), its rows M
    k_dim, n_dim = (x.lead, x.lead + 1) if x.role == "b" else (x.lead + 1, x.lead)
    contiguous, other = (k_dim, n_dim) if staged.major == "k" else (n_dim, k_dim)
    if dim_map[contiguous] != rank - 1:
        return "the stage buffer is contiguous along another dimension than the tensor"
    if (staged.rows, staged.kc) != (x.tile_shape[n_dim], x.tile_shape[k_dim]) or staged.batches != 1:
        return "the stage buffer's rows are not the tile's"
    width = staged.width
    per = width // x.eb
    outer, inner = x.tile_shape[other], x.tile_shape[contiguous]
    if width not in _SWIZZLE_NAMES or inner % per or outer > _MAX_BOX or per > _MAX_BOX:
        return f"a box of {outer} x {per} does not fit the stage layout"
    order = tuple(dim_map.index(t) for t in range(rank))
    box = tuple(outer if i == other else per if i == contiguous else 1 for i in order)
    swizzle = "128B_base32B" if staged.atom == 32 else _SWIZZLE_NAMES[width]
    spec = TensorMapSpec(param, base, shape, strides, element, box, swizzle)
    return TensorCopy(spec, inner // per, outer * width, box, x.eb, order)


def plan_tensor_copy(x, kc: int, args: list[Value], param: int) -> TensorCopy | str:
    """A TensorCopy for operand `x` (tilegpu.analysis.software_pipeline.Operand, staged for wgmma in K chunks of kc)
    through the map in entry parameter `param`, or why its copies stay cp.async."""
    staged = x.smem
    if staged is None or staged_conversions(x):
        return "not a wgmma operand copied as it is"
    if len(x.tile_shape) != 2 or x.lead or staged.batches != 1:
        return "not a 2-D tile"
    element = _ELEMENT_NAMES.get(x.elem)
    if element is None:
        return f"{x.elem} elements"
    inner_is_k = x.kdim == 1
    if (staged.major == "k") != inner_is_k:
        return "the stage buffer is contiguous along another dimension than the tensor"
    operands = _mapped_view(x.load.operands["view"], len(x.tile_shape), x.eb, args)
    if isinstance(operands, str):
        return operands
    base, shape, strides = operands
    if (staged.rows, staged.kc) != ((x.tile_shape[0], kc) if inner_is_k else (x.tile_shape[1], kc)):
        return "the stage buffer's rows are not the tile's"
    width = staged.width
    per = width // x.eb
    outer = x.tile_shape[0] if inner_is_k else kc
    inner = kc if inner_is_k else x.tile_shape[1]
    if width not in _SWIZZLE_NAMES or inner % per or outer > _MAX_BOX or per > _MAX_BOX:
        return f"a box of {outer} x {per} does not fit the stage layout"
    swizzle = "128B_base32B" if staged.atom == 32 else _SWIZZLE_NAMES[width]
    spec = TensorMapSpec(param, base, shape, strides, _map_element(x, element), (outer, per), swizzle)
    return TensorCopy(spec, inner // per, outer * width, (outer, per), x.eb)


def _map_element(x, element: str) -> str:
    """The map's element type: "tf32" for an f32 array the tensor core reads as tf32 (what NVIDIA's maps say of
    such operands; the copy moves the 32 bits as they are), else the array's own."""
    return "tf32" if element == "f32" and any(read_as_tf32(o) for o in x.chain) else element


def plan_staged_tensor_copy(x, kc: int, args: list[Value], param: int, swizzled: bool) -> TensorCopy | str:
    """A TensorCopy for operand `x` of an mma.sync or FMA K-loop (tilegpu.analysis.software_pipeline.Operand, staged in
    K chunks of kc) through the map in entry parameter `param`, or why its copies stay cp.async.  Such a stage
    buffer is row-major in the tile's dimension order (A: [b,] m, k; B: [b,] k, n); without its row padding
    (tilegpu.analysis.software_pipeline.unpadded_stage_layout) it is exactly one box of the chunk, which the fragment
    reads address as before (conversions such as tf32 rounding stay where they read).  `swizzled` (each
    fragment read within one 16-byte piece, its address XOR-ed as the map's swizzle does:
    codegen/lower_mma.py): rows of 32, 64 or 128 bytes are swizzled over their span, so that the rows a
    warp reads at once fall in distinct banks as the padding made them; otherwise, and for other rows, no
    swizzle."""
    if x.smem is not None:
        return "a wgmma operand"
    rank = len(x.tile_shape)
    if rank not in (2, 3):
        return f"a {rank}-D tile"
    element = _ELEMENT_NAMES.get(x.elem)
    if element is None:
        return f"{x.elem} elements"
    operands = _mapped_view(x.load.operands["view"], len(x.tile_shape), x.eb, args)
    if isinstance(operands, str):
        return operands
    box = tuple(kc if d == x.kdim else n for d, n in enumerate(x.tile_shape))
    if (box[-1] * x.eb) % 16 or max(box) > _MAX_BOX:
        return f"a box of {' x '.join(map(str, box))} is not a tensor map's"
    base, shape, strides = operands
    swizzle = _SWIZZLE_NAMES.get(box[-1] * x.eb, "none") if swizzled else "none"
    return TensorCopy(TensorMapSpec(param, base, shape, strides, element, box, swizzle), 1, 0, box, x.eb)


def kernel_hooks(k) -> KernelHooks | None:
    """The launch hooks of a kernel the passes have run on, as its IR records them: every entry parameter,
    then one hidden tensor map per operand select-tensor-copies gave TMA copies, per tile load
    select-tile-tensor-copies made a `tilegpu.tma_issue`, per tile an attention-shaped loop lands and per tile
    store select-tile-tensor-stores gave `tma` (in parameter order: the passes number them in that order, loads
    before stores); None without maps."""
    from ..decisions import pipelined_loops
    maps = [x.tma.map for rec in pipelined_loops(k.fn.body) for x in (rec.cand.a, rec.cand.b)
            if getattr(x, "tma", None) is not None] + tile_copy_maps(k.fn.body) + landed_copy_maps(k.fn.body) \
        + tile_store_maps(k.fn.body)
    maps = sorted({m.param: m for m in maps}.values(), key=lambda m: m.param)
    if not maps:
        return None
    layout = param_layout(k.fn.type.inputs)
    return KernelHooks(k.name, layout + ((MAP_BYTES, MAP_ALIGN),) * len(maps), tuple(maps))


# -- tile loads by TMA (select-tile-tensor-copies) -------------------------------------------------------

_TILE_COPY_BYTES = 16384        # the largest tile one load stages through shared memory
_ROW_BYTES = 128                # a box row of a several-row box


@dataclass(frozen=True)
class _BoxRun:
    """A tile moved by TMA as `copies` boxes of `map`'s box side by side in a shared buffer, box j at byte
    `j * copy_bytes`."""
    map: TensorMapSpec
    copies: int
    copy_bytes: int

    @property
    def bytes(self) -> int:
        """The buffer's bytes: what the copies of a load deliver to its mbarrier (out-of-bounds elements count
        too), what a store stages."""
        return self.copies * self.copy_bytes


@dataclass(frozen=True)
class TileCopy(_BoxRun):
    """How a tile load lands by TMA: `copies` boxes of the map's `box` side by side along the innermost
    dimension (box j, row-major, at byte `j * copy_bytes` of the buffer, `j * box[-1]` elements further
    along the tensor; one box or a single row: the tile row-major); completion on mbarrier `slot` of the
    kernel's tile barriers."""
    elem_bytes: int
    slot: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The tile's shape."""
        return tuple(self.map.box[:-1]) + (self.map.box[-1] * self.copies,)


def _tile_boxes(shape: tuple[int, ...], eb: int) -> tuple[tuple[int, ...], int] | str:
    """(box, copies) for a tile of `shape`: boxes side by side along the innermost dimension, each the
    tile's outer extents by at most 256 elements (a 1 x ... x 1 x N row) or 128 bytes (several rows), as
    NVIDIA's maps have them."""
    inner, rows = shape[-1], 1
    for d in shape[:-1]:
        rows *= d
    if any(d > _MAX_BOX for d in shape[:-1]):
        return f"a dimension of {max(shape[:-1])} elements exceeds a box ({_MAX_BOX})"
    width = min(inner, _MAX_BOX if rows == 1 else max(1, _ROW_BYTES // eb))
    if inner % width or width * eb % 16:
        return f"rows of {inner} elements do not split into boxes of {width} x {eb} bytes, 16-byte multiples"
    return tuple(shape[:-1]) + (width,), inner // width


def plan_tile_copy(load: Operation, args: list[Value], param: int, slot: int) -> TileCopy | str:
    """A TileCopy for a `load_view_tko` of a 1-D or 2-D tile through the map in entry parameter `param`
    (completing on mbarrier `slot`), or why the load stays per-thread ld.global.  TMA writes zeros where
    the box leaves the tensor: the view must pad with zeros, as the views NVIDIA's tool loads by TMA do (a
    view without padding keeps its bounds-checked, vectorised ld.global, as there); the launch hints must
    promise what the map needs (unit inner stride, 16-byte aligned base and outer strides)."""
    ty = load.results[0].type
    rank = len(ty.shape)
    if rank not in (1, 2):
        return f"a {rank}-D tile"
    element = _ELEMENT_NAMES.get(ty.elem)
    if element is None:
        return f"{ty.elem} elements"
    eb = ty.elem.width // 8
    operands = _mapped_view(load.operands["view"], rank, eb, args, unpadded=False)
    if isinstance(operands, str):
        return operands
    nbytes = eb
    for d in ty.shape:
        nbytes *= d
    if nbytes > _TILE_COPY_BYTES:
        return f"a tile of {nbytes} bytes"
    boxes = _tile_boxes(tuple(ty.shape), eb)
    if isinstance(boxes, str):
        return boxes
    base, shape, strides = operands
    box, copies = boxes
    spec = TensorMapSpec(param, base, shape, strides, element, box)
    per = eb
    for d in box:
        per *= d
    return TileCopy(spec, copies, per, eb, slot)


def landed_copy_maps(body) -> list[TensorMapSpec]:
    """The maps of the tiles an attention-shaped loop lands by TMA (their `async_copy`s carry `landed`)."""
    from ..ir import walk_ops
    return [op.attrs["tma"].map for op in walk_ops(body)
            if op.name == "tilegpu.async_copy" and op.attrs.get("landed") and op.attrs.get("tma") is not None]


def tile_copy_maps(body) -> list[TensorMapSpec]:
    """The maps of the `tilegpu.tma_issue`s under `body`, once each (loads may share one)."""
    from ..ir import walk_ops
    maps = {op.attrs["tma"].map.param: op.attrs["tma"].map for op in walk_ops(body) if op.name == "tilegpu.tma_issue"}
    return list(maps.values())


# -- tile stores by TMA (select-tile-tensor-stores) ------------------------------------------------------

_STORE_SWIZZLE = 128            # the staging rows: one 128-byte swizzle span each (stmatrix rows spread over banks)
_STORE_ELEMENTS = {T.F16: "f16", T.BF16: "bf16", T.F32: "f32"}
_FRAGMENT_LANES = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))   # an mma fragment's lanes: 8 rows of 4 column pairs


@dataclass(frozen=True)
class TileStore(_BoxRun):
    """How a 2-D tile of 16- or 32-bit elements in an mma fragment layout leaves by TMA: every thread writes
    its elements into a shared staging buffer -- 16-bit ones a thread's four 8x8 blocks at a time with
    `stmatrix` (x4), 32-bit ones a pair of columns at a time with `st.shared.v2` -- in `copies` boxes of 128
    bytes a row (one swizzle span) side by side along the inner dimension, box j at byte `j * copy_bytes`,
    16-byte pieces XOR-swizzled by the row as the map's 128B swizzle reads them; then each warp, once its
    lanes' writes are fenced to the async proxy, stores the rows it wrote (whole rows: `warp_slabs`) with one
    lane's `cp.async.bulk.tensor`, in boxes of the map's `box` (a slab's rows by 128 bytes; the tensor's
    bounds clip them, as the bounds-checked stores did).  No warp waits for another: no CTA barrier.

    The tile may have unit dimensions besides its two (rows, columns: `store_plane`), as attention's output
    reshaped to the tensor's rank has; the map then has the tensor's rank, a box of 1 along them, and
    `order` is the tile dimension of each map dimension, outermost first (): the same)."""
    order: tuple[int, ...] = ()

    @property
    def align(self) -> int:
        """The staging buffer's alignment: the swizzle's pattern (eight of its spans) starts with it."""
        return 8 * SWIZZLE_BYTES[self.map.swizzle]


def stmatrix_layout(layout, eb: int) -> str | None:
    """None when each warp of `layout` (a 2-D tile's of `eb`-byte elements) holds whole rows of an mma
    fragment layout -- register bit 0 the next column, the lanes 8 rows of 4 column pairs, every other register
    bit moving along one dimension, the warps along the rows, no bit broadcasting -- and, for 16-bit elements,
    every 8x8 block is one thread's part of an `stmatrix` x4 (register bits 1 and 2 and the rest move by whole
    blocks); else why not."""
    regs, lanes, warps = layout.bases
    if layout.rank != 2 or len(regs) < 3:
        return "not a 2-D tile of at least eight registers a thread"
    if tuple(regs[0]) != (0, 1) or tuple(map(tuple, lanes)) != _FRAGMENT_LANES:
        return "not an mma fragment layout"
    if any((b[0] and b[1]) or not any(b) for b in regs[1:]):
        return "register bits that do not move along one dimension"
    if eb == 2 and any(b[0] % 8 or b[1] % 8 for b in regs[1:]):
        return "register bits that do not move by whole 8x8 blocks"
    if any(b[1] or not b[0] for b in warps):
        return "warps that do not hold whole rows"
    return None


_ROW_LANES = ((1, 0), (2, 0), (4, 0), (8, 0))     # tensor memory's loads (tcgen05.ld 32x32b, 16x32bx2): a lane a row


def thread_rows(layout) -> bool:
    """Whether `layout`'s lanes are rows first -- each thread a row, as tensor memory's loads leave an
    accumulator on sm_100 -- rather than an mma fragment's column pairs (stmatrix_layout's)."""
    return layout.rank == 2 and tuple(map(tuple, layout.bases[1][:4])) == _ROW_LANES


def rows_layout(layout, eb: int) -> str | None:
    """None when each thread of `layout` (a 2-D tile's of `eb`-byte elements) holds segments of one row in
    16-byte runs, as tcgen05.ld 32x32b and 16x32bx2 leave an accumulator: the lanes' first four bits the rows
    1, 2, 4, 8 (thread_rows), register bits 0.. consecutive columns making a 16-byte run, every other register
    bit and the lanes' fifth moving along the row by whole runs (the fifth may be row 16 instead), the warps
    along the rows -- so each thread writes its row 16 bytes at a time (st.shared.v4) and each warp holds
    whole rows; else why not."""
    regs, lanes, warps = layout.bases
    run = 16 // eb
    n = run.bit_length() - 1
    if not thread_rows(layout) or len(lanes) != 5:
        return "not rows in threads"
    if tuple(map(tuple, regs[:n])) != tuple((0, 1 << i) for i in range(n)):
        return "register bits that do not begin with a 16-byte run of a row"
    if any(b[0] or not b[1] or b[1] % run for b in regs[n:]):
        return "register bits that do not move along the row by whole 16-byte runs"
    if tuple(lanes[4]) != (16, 0) and (lanes[4][0] or not lanes[4][1] or lanes[4][1] % run):
        return "a lane bit that is neither the next row nor whole 16-byte runs along it"
    if any(b[1] or not b[0] for b in warps):
        return "warps that do not hold whole rows"
    return None


# A thread's row segment below which rows in threads keep their per-thread stores.  Those are 16-byte vector
# stores already, each with one bounds check, where staging costs a swizzle XOR a run: what TMA saves a run is
# small against what it adds once (the proxy fence, the warp's sync, the elected lane's branches, the map's
# address and coordinates, the commit and the wait: some twenty SASS instructions).  At sm_100 (launch set,
# static instructions before -> after): 256 bytes a thread, matmul_f16_f16out_128x128x64 538 -> 516; 128
# bytes, matmul_f16_f32acc_64x64x32 309 -> 320, matmul_tf32_64x64x32 387 -> 398, fmha_f16's O 1180 -> 1184
# (and two more registers), fmha_causal_f16 2553 -> 2565; 64 bytes, matmul_bf16_64x64x64 484 -> 491.
_LEAST_ROW_BYTES = 256


def staging_layout(layout, eb: int) -> str | None:
    """None when a tile of `layout` can be staged for a tensor store: rows in threads (rows_layout) at least
    _LEAST_ROW_BYTES a thread, or an mma fragment's (stmatrix_layout); else why not."""
    if not thread_rows(layout):
        return stmatrix_layout(layout, eb)
    why = rows_layout(layout, eb)
    mine = layout.num_registers * eb
    if why is None and mine < _LEAST_ROW_BYTES:
        why = f"rows of {mine} bytes a thread, already stored in 16-byte vectors (fewer than {_LEAST_ROW_BYTES})"
    return why


def warp_slabs(layout) -> tuple[int, list[int]]:
    """(rows, starts): the rows a warp of `layout` (staging_layout's) writes, as slabs of `rows` consecutive
    rows -- the lanes' (an mma fragment's eight, or each lane a row) and the register bits that continue
    them -- starting at its warp bits' row plus each of `starts` (the other register row bits')."""
    row_bits = sorted(b[0] for b in layout.bases[0] + layout.bases[1] if b[0])
    rows = 1
    while rows in row_bits:
        row_bits.remove(rows)
        rows *= 2
    starts = [0]
    for b in row_bits:
        starts += [s + b for s in starts]
    return rows, starts


def store_plane(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The (row, column) dimensions of a tile store's tile: its two dimensions of more than one element, the
    others unit ones; None for any other tile."""
    dims = [d for d, n in enumerate(shape) if n != 1]
    return (dims[0], dims[1]) if len(dims) == 2 else None


def plane_layout(layout, plane: tuple[int, int]):
    """The 2-D layout of `layout` over its `plane` dimensions (store_plane's): the unit dimensions dropped,
    whose coordinate every basis leaves at 0."""
    from ..layout import LinearLayout
    r, c = plane
    return LinearLayout((layout.shape[r], layout.shape[c]),
                        tuple(tuple((b[r], b[c]) for b in bases) for bases in layout.bases))


def plan_tile_store(store: Operation, args: list[Value], param: int) -> TileStore | str:
    """A TileStore for a `store_view_tko` of a tile with two dimensions of more than one element (any others
    unit ones: store_plane) through the map in entry parameter `param`, or why the store stays per-thread
    st.global.  The tile's layout over those two must be an mma fragment's with whole rows a warp
    (stmatrix_layout), a whole number of 128-byte boxes wide, its warps' slabs at most a box's 256 rows; the
    view may order the tensor's dimensions otherwise as long as the tile's columns are the tensor's rows (no
    transposing store); the launch hints must promise what the map needs (unit inner stride, 16-byte
    aligned base and outer strides)."""
    ty = store.operands["tile"].type
    element = _STORE_ELEMENTS.get(ty.elem)
    if element is None:
        return f"{ty.elem} elements"
    layout = layout_of(ty)
    if layout is None:
        return "a tile without a layout"
    plane = store_plane(tuple(ty.shape))
    if plane is None:
        return "not a tile of two dimensions of more than one element, the others unit ones"
    rank, (r, c) = len(ty.shape), plane
    if not isinstance(store.operands["view"].type, T.PartitionViewType):
        return "not a partition view"
    dim_map = tuple(store.operands["view"].type.dim_map)
    if dim_map[c] != rank - 1:
        return "the tile's columns are not the tensor's rows"
    eb = ty.elem.width // 8
    layout = plane_layout(layout, plane)
    why = staging_layout(layout, eb)
    if why is not None:
        return why
    rows, cols = layout.shape
    width = _STORE_SWIZZLE // eb
    slab = warp_slabs(layout)[0]
    if cols % width or slab > _MAX_BOX:
        return f"a {rows} x {cols} tile is not boxes of at most {_MAX_BOX} rows by {width} elements"
    same = dim_map == tuple(range(rank))
    operands = _mapped_view(store.operands["view"], rank, eb, args, any_order=not same)
    if isinstance(operands, str):
        return operands
    base, shape, strides = operands
    order = tuple(dim_map.index(t) for t in range(rank))
    box = tuple(slab if d == r else width if d == c else 1 for d in order)
    spec = TensorMapSpec(param, base, shape, strides, element, box, _SWIZZLE_NAMES[_STORE_SWIZZLE])
    return TileStore(spec, cols // width, rows * _STORE_SWIZZLE, () if same else order)


def tile_store_bytes(body) -> int:
    """The shared memory the staging buffers of the tile stores under `body` that select-tile-tensor-stores gave
    `tma` take beside the kernel's other buffers: each buffer and the padding its alignment may need."""
    from ..ir import walk_ops
    return sum(op.attrs["tma"].bytes + op.attrs["tma"].align for op in walk_ops(body)
               if op.name == "store_view_tko" and isinstance(op.attrs.get("tma"), TileStore))


def tile_store_maps(body) -> list[TensorMapSpec]:
    """The maps of the tile stores under `body` that select-tile-tensor-stores gave `tma`."""
    from ..ir import walk_ops
    return [op.attrs["tma"].map for op in walk_ops(body)
            if op.name == "store_view_tko" and isinstance(op.attrs.get("tma"), TileStore)]
