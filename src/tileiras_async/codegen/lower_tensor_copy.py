"""Tensor copies (TMA): of a pipelined loop's stage buffers, the mbarriers and the copies select-tensor-copies
chose, and the tile loads select-tile-tensor-copies chose (tilegpu.analysis.tensor_maps).  Everything was decided by
the passes; this module spells it in PTX.

* `tilegpu.tma_barriers`: one 8-byte mbarrier per stage buffer in a shared global of the kernel; thread 0
  initialises them (`count` arrivals a phase: one `arrive.expect_tx` per TMA operand; for tile loads, one
  mbarrier per `tma_issue` that every thread arrives on) and prefetches the maps it names; a barrier
  publishes the initialisation before anyone waits (with `barrier_follows` one that comes later does, before
  any other warp's wait: warp 0, whose elected lane issues the first copies, only syncs its lanes).
* the copy of one K chunk (from `tilegpu.async_copy` with `tma`): one lane of warp 0 (`elect.sync`; in a
  warp-specialised loop's producer region its one thread) expects the chunk's bytes on the slot's mbarrier, then
  issues one `cp.async.bulk.tensor.{2,3}d` per box into the stage buffer (the map's swizzle writes the layout
  wgmma reads; an mma.sync / FMA operand's one box its unpadded rows); out-of-bounds elements arrive as zeros
  and count as bytes.
* `tilegpu.tma_wait`: every thread spins on `mbarrier.try_wait.parity` for the unit's phase.
* `tilegpu.tma_release`: a barrier (every wait done), then thread 0 invalidates the mbarriers.
* `tilegpu.tma_issue` (select-tile-tensor-copies): a shared global of its own (128-byte aligned) is the
  buffer; in a loop, a barrier (`after_reads`) and thread 0's proxy fence (`fence_reads`) order the previous
  iteration's reads before the async proxy's writes; thread 0 expects the tile's bytes on its mbarrier and
  issues one `cp.async.bulk.tensor.{1d,2d}` per box; every thread arrives, the state its arrival returned
  being the result (so no phase is tracked across iterations).
* `tilegpu.tma_read`: every thread waits for that state's phase, the loop ending warp-uniformly
  (`vote.sync.all`: ptxas then needs no divergent path for the shuffles that follow), then reads its
  elements from the buffer in the result's layout, runs of consecutive ones as vectors.

* a `store_view_tko` with `tma` (select-tile-tensor-stores: a `tilegpu.analysis.tensor_maps.TileStore`): a
  shared global of its own (aligned to the 1024-byte pattern of the 128B swizzle) stages the tile; each thread
  packs its pairs of 16-bit elements and writes every four 8x8 blocks with one `stmatrix` x4, whose row
  addresses are the thread's own part (computed once) XOR a constant per group (the staging address is linear
  over GF(2) in the element's coordinates: row, column, box and swizzle are bit placements and XORs); then a
  proxy fence, and each warp, its lanes synced (`bar.warp.sync`), stores the rows it wrote: one elected lane
  issues a `cp.async.bulk.tensor` shared -> global (`bulk_group`) per slab and box and waits until they have
  read the buffer.  No CTA barrier: no warp reads what another wrote.  A tile with unit dimensions besides
  its rows and columns (attention's output as its rank-4 view) is staged as its rows and columns; its map
  has the tensor's rank, the unit dimensions' coordinates being where the tile starts.  A tile a row a thread
  (sm_100: as tensor memory's loads leave it) is written 16 bytes at a time (`st.shared.v4`), in the same
  swizzled buffer, the same way.

A warp-specialised loop (`empty` on tma_barriers) has a second ring of "empty" mbarriers after the "full"
ones, `empty` arrivals a phase (every consumer thread): `tma_arrive` releases a unit's buffer there, and the
producer's `tma_wait` with `empty` waits for the release of the unit `stages` earlier -- parity
(unit / stages + 1) & 1, which a fresh mbarrier reports complete, so the first round does not wait.

A map is a kernel parameter: its generic address is `cvta.param` of the parameter's symbol.  The PTX forms
are those of PTX ISA 8.0 (`.shared::cluster` destination), which sm_90's PTX declares.
"""
from __future__ import annotations

from ..ir.core import Operation
from ..tilegpu.analysis.tensor_maps import SWIZZLE_BYTES, plane_layout, store_plane, thread_rows, warp_slabs
from ..tilegpu.layout import LinearLayout
from ..tilegpu.types import layout_of
from .emitter import KernelEmitter, lowers
from .values import SHARED_PTR, TOKEN, Tile, llvm_type

MBAR_BYTES = 8


def _bars(em: KernelEmitter, op: Operation) -> str:
    return em.get(op.operands["barriers"]).regs[0]


def _thread0(em: KernelEmitter, lines: list[str], args: list[tuple[str, str]], regs: str = "",
             branch: bool = False) -> None:
    """PTX `lines` (operands from $1) executed by thread 0 alone: each line predicated on it, or (`branch`)
    the other threads branching around them all, which ptxas turns into one block instead of a block per
    line.  Where one thread runs the code anyway (the producer's region) the lines run as they are: a
    thread-index predicate there would make ptxas loop over the lanes for a TMA copy's operands."""
    if em.single_thread:
        text = f"{{ {regs}{' '.join(f'{line};' for line in lines)} }}"
    elif branch:
        body = " ".join(f"{line};" for line in lines)
        text = f"{{ .reg .pred p; {regs}setp.ne.u32 p, $0, 0; @p bra $$t0${{:uid}}; {body} $$t0${{:uid}}: }}"
    else:
        body = " ".join(f"@p {line};" for line in lines)
        text = f"{{ .reg .pred p; {regs}setp.eq.u32 p, $0, 0; {body} }}"
    em.b.asm("void", text, ",".join(["r"] + [("l" if t == "i64" else "r") for t, _ in args] + ["~{memory}"]),
             [("i32", em.tid)] + args)


def _elected(em: KernelEmitter, lines: list[str], args: list[tuple[str, str]], regs: str = "") -> None:
    """PTX `lines` (operands from $1) executed by one lane of warp 0, chosen by `elect.sync`: ptxas then knows a
    single thread issues them and moves their operands to uniform registers once, where a per-thread test
    (`_thread0`) makes it loop over the warp's lanes around every tensor copy in case several issue.  Where
    one thread runs the code anyway (the producer's region) there is no warp to elect from: the lines run as
    they are."""
    if em.single_thread:
        _thread0(em, lines, args, regs)
        return
    body = " ".join(f"@p {line};" for line in lines)
    em.b.asm("void", f"{{ .reg .pred p; .reg .b32 e; {regs}setp.lt.u32 p, $0, 32; @!p bra $$tce${{:uid}}; "
                     f"elect.sync e|p, -1; {body} $$tce${{:uid}}: }}",
             ",".join(["r"] + [("l" if t == "i64" else "r") for t, _ in args] + ["~{memory}"]),
             [("i32", em.tid)] + args)


def map_address(em: KernelEmitter, param: int) -> str:
    """i64: the generic address of the tensor map in entry parameter `param`."""
    return em.b.asm("i64", f"mov.b64 $0, {em.b.fn.name}_param_{param}; cvta.param.u64 $0, $0;", "=l", [],
                    sideeffect=False, hint="tmap")


@lowers("tilegpu.tma_barriers")
def _tma_barriers(em: KernelEmitter, op: Operation) -> None:
    stages, count = op.attrs["stages"], op.attrs["count"]
    empty = op.attrs.get("empty")
    name = em.unique_global("tma_bars")
    em.module_ir.add_global(f"{name} = internal addrspace(3) global [{_rings(op) * stages} x i64] undef, align 8")
    bars = em.b.entry_value(f"ptrtoint {SHARED_PTR} {name} to i32")
    maps = [(("i64", map_address(em, p))) for p in op.attrs["maps"]]
    lines = [f"mbarrier.init.shared.b64 [$1+{MBAR_BYTES * s}], {count}" for s in range(stages)]
    lines += [f"mbarrier.init.shared.b64 [$1+{MBAR_BYTES * (stages + s)}], {empty}" for s in range(stages) if empty]
    lines.append("fence.mbarrier_init.release.cluster")
    lines += [f"prefetch.tensormap [${2 + i}]" for i in range(len(maps))]
    _thread0(em, lines, [("i32", bars)] + maps, branch=bool(empty))
    if op.attrs.get("barrier_follows"):     # the elected lane issuing the first copies is one of warp 0's
        em.b.asm("void", "bar.warp.sync -1;", "~{memory}", [])
    else:
        em.barrier()
    em.set(op.result, Tile(op.result.type, None, [bars]))


def tensor_copy(em: KernelEmitter, op: Operation, buf_off: str) -> None:
    """The copy of one K chunk by TMA (an `async_copy` with `tma`) into the stage buffer at `buf_off`."""
    x, tc = op.attrs["operand"], op.attrs["tma"]
    slot = op.attrs["slot"] if "slot" in op.attrs else em.get(op.operands["slot"]).regs[0]
    bar = (em.b.value(f"add i32 {_bars(em, op)}, {slot * MBAR_BYTES}") if isinstance(slot, int)
           else em.b.value(f"add i32 {_bars(em, op)}, {em.b.value(f'mul i32 {slot}, {MBAR_BYTES}')}"))
    starts = []
    for d, start in enumerate(_tile_starts(em, op.operands["indices"], x.tile_shape)):
        if d == x.kdim and op.attrs["chunk"]:
            start = em.b.value(f"add i32 {start}, {op.attrs['chunk'] * op.attrs['kc']}")
        starts.append(start)
    if tc.order:        # the map's dimensions are the tensor's, which the view orders otherwise
        starts = [starts[d] for d in tc.order]
    scratch = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    dst = em.b.value(f"add i32 {em.b.value(f'add i32 {scratch}, {buf_off}')}, {x.base}")
    lines = [f"mbarrier.arrive.expect_tx.shared.b64 st, [$1], {tc.chunk_bytes}"]
    args = [("i32", bar), ("i64", map_address(em, tc.map.param)), ("i32", dst)] + [("i32", s) for s in starts[:-1]]
    outer = ", ".join(f"${4 + d}" for d in reversed(range(len(starts) - 1)))   # PTX lists the innermost first
    for j in range(tc.columns):
        inner = starts[-1] if j == 0 else em.b.value(f"add i32 {starts[-1]}, {j * tc.box[-1]}")
        args.append(("i32", inner))
        lines.append(f"cp.async.bulk.tensor.{len(starts)}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                     f"[$3+{j * tc.column_bytes}], [$2, {{${len(args)}, {outer}}}], [$1]")
    _elected(em, lines, args, ".reg .b64 st; ")


def _rings(bars_op: Operation) -> int:
    """How many rings of `stages` mbarriers a tma_barriers op allocates: "full", and "empty" when warp-specialised."""
    return 2 if bars_op.attrs.get("empty") else 1


def _slot_barrier(em: KernelEmitter, op: Operation, ring: int) -> tuple[str, str]:
    """(the mbarrier of unit `unit`'s slot in ring `ring` (0: full, 1: empty), the unit's round unit / stages)."""
    stages = op.attrs["stages"]
    unit = em.get(op.operands["unit"]).regs[0]
    slot = em.b.value(f"urem i32 {unit}, {stages}")
    if ring:
        slot = em.b.value(f"add i32 {slot}, {ring * stages}")
    bar = em.b.value(f"add i32 {_bars(em, op)}, {em.b.value(f'mul i32 {slot}, {MBAR_BYTES}')}")
    return bar, em.b.value(f"udiv i32 {unit}, {stages}")


@lowers("tilegpu.tma_wait")
def _tma_wait(em: KernelEmitter, op: Operation) -> None:
    empty = bool(op.attrs.get("empty"))
    bar, rnd = _slot_barrier(em, op, int(empty))
    if empty:       # the release of the unit one round earlier
        rnd = em.b.value(f"add i32 {rnd}, 1")
    parity = em.b.value(f"and i32 {rnd}, 1")
    em.b.asm("void", "{ .reg .pred w; $$tmw${:uid}: mbarrier.try_wait.parity.shared.b64 w, [$0], $1; "
                     "@!w bra $$tmw${:uid}; }", "r,r,~{memory}", [("i32", bar), ("i32", parity)])


@lowers("tilegpu.tma_arrive")
def _tma_arrive(em: KernelEmitter, op: Operation) -> None:
    bar, _ = _slot_barrier(em, op, 1)
    if op.attrs.get("commit"):      # the slot is free once thread 0's tcgen05 mmas that read it complete
        tcgen05_commit(em, bar)
        return
    # fence_reads: the generic proxy's reads of the buffer (mma.sync's) before the tensor copies that refill it
    fence = "fence.proxy.async.shared::cta; " if op.attrs.get("fence_reads") else ""
    em.b.asm("void", f"{{ .reg .b64 st; {fence}mbarrier.arrive.shared.b64 st, [$0]; }}", "r,~{memory}",
             [("i32", bar)])


TCGEN05_COMMIT = "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64"


def tcgen05_commit(em: KernelEmitter, bar: str) -> None:
    """Thread 0 commits its tcgen05 operations so far to mbarrier `bar`: one arrival once they complete.
    Predicated on the thread test LLVM hoists to the entry: one instruction per thread, not a test and it."""
    if em.single_thread:
        em.b.asm("void", f"{TCGEN05_COMMIT} [$0];", "r,~{memory}", [("i32", bar)])
        return
    em.b.asm("void", f"@$1 {TCGEN05_COMMIT} [$0];", "r,b,~{memory}", [("i32", bar), ("i1", is_thread0(em))])


def is_thread0(em: KernelEmitter, negate: bool = False) -> str:
    """i1: this thread is thread 0 (`negate`: is not); computed once per thread, LLVM hoists it to the entry."""
    return em.b.value(f"icmp {'ne' if negate else 'eq'} i32 {em.tid}, 0")


@lowers("tilegpu.tma_release")
def _tma_release(em: KernelEmitter, op: Operation) -> None:
    em.barrier()
    count = op.attrs["stages"] * _rings(op.operands["barriers"].owner)
    _thread0(em, [f"mbarrier.inval.shared.b64 [$1+{MBAR_BYTES * s}]" for s in range(count)],
             [("i32", _bars(em, op))])


TILE_COPY_ALIGN = 128       # a tensor copy's shared-memory destination


def _tile_starts(em: KernelEmitter, indices, shape: tuple[int, ...]) -> list[str]:
    """i32 per tile dimension: the element where the tile starts (its index times its extent)."""
    starts = []
    for v, extent in zip(indices, shape):
        idx = em.get(v)
        i32 = idx.regs[0] if idx.llvm == "i32" else em.b.value(f"trunc {idx.llvm} {idx.regs[0]} to i32")
        starts.append(em.b.value(f"mul i32 {i32}, {extent}"))
    return starts


def _tile_copy_lines(tc, rank: int, args: list) -> list[str]:
    """Thread 0's PTX for one tma_issue: operands $1 mbarrier, $2 map, $3 buffer, $4.. the tile's starts,
    outermost first (appended to `args`: the later boxes' innermost starts)."""
    lines = [f"mbarrier.arrive.expect_tx.shared.b64 $0, [$1], {tc.bytes}"]
    outer = "".join(f", ${4 + d}" for d in reversed(range(rank - 1)))   # PTX lists the innermost first
    for j in range(tc.copies):
        inner = f"${3 + rank}"
        if j:
            args.append(("i32", f"add i32 {args[2 + rank][1]}, {j * tc.map.box[-1]}"))
            inner = f"${len(args)}"
        lines.append(f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                     f"[$3+{j * tc.copy_bytes}], [$2, {{{inner}{outer}}}], [$1]")
    return lines


def _tile_mbarrier(em: KernelEmitter, op: Operation) -> str:
    return em.b.value(f"add i32 {_bars(em, op)}, {op.attrs['tma'].slot * MBAR_BYTES}")


@lowers("tilegpu.tma_issue")
def _tma_issue(em: KernelEmitter, op: Operation) -> None:
    """The copies and every thread's arrival; the result carries the arrival's state and, for the
    tma_read, the buffer's symbol."""
    tc = op.attrs["tma"]
    buf = em.unique_global("tma_tile")
    em.module_ir.add_global(f"{buf} = internal addrspace(3) global [{tc.bytes} x i8] undef, "
                            f"align {TILE_COPY_ALIGN}")
    dst = em.b.entry_value(f"ptrtoint {SHARED_PTR} {buf} to i32")
    starts = _tile_starts(em, op.operands["index"], tc.shape)
    rank = len(starts)
    args = [("i32", _tile_mbarrier(em, op)), ("i64", map_address(em, tc.map.param)), ("i32", dst)]
    args += [("i32", s) for s in starts]
    lines = _tile_copy_lines(tc, rank, args)
    args = [(t, em.b.value(v) if v.startswith("add ") else v) for t, v in args]
    if op.attrs.get("after_reads"):
        em.barrier()        # every thread's reads of the buffer in the previous iteration are done
    if op.attrs.get("fence_reads"):
        # ... and ordered before the async proxy's writes
        lines.insert(0, "fence.proxy.async.shared::cta")
    body = " ".join(f"@p {line};" for line in lines)
    state = em.b.asm("i64", "{ .reg .pred p; setp.eq.u32 p, $" + str(len(args) + 1) + ", 0; " + body +
                     " @!p mbarrier.arrive.shared.b64 $0, [$1]; }",
                     ",".join(["=l"] + [("l" if t == "i64" else "r") for t, _ in args] + ["r", "~{memory}"]),
                     args + [("i32", em.tid)])
    em.set(op.result, Tile(op.result.type, None, [state, buf]))


@lowers("tilegpu.tma_read")
def _tma_read(em: KernelEmitter, op: Operation) -> None:
    """Every thread waits for the phase it arrived in; the loop ends warp-uniformly (`vote.sync.all`), so
    ptxas needs no divergent path for the shuffles that follow."""
    tc = op.attrs["tma"]
    state, buf = em.get(op.operands["state"]).regs
    em.b.asm("void", "{ .reg .pred w; $$tml${:uid}: mbarrier.try_wait.shared.b64 w, [$0], $1; "
                     "vote.sync.all.pred w, w, -1; @!w bra.uni $$tml${:uid}; }", "r,l,~{memory}",
             [("i32", _tile_mbarrier(em, op)), ("i64", state)])
    em.set(op.result, _read_tile(em, op.result.type, buf, tc.elem_bytes, tc.map.box[-1]))


def _contiguous_run(layout, eb: int) -> int:
    """How many registers, from each multiple of the count, hold consecutive elements of a row of the
    buffer at an address aligned to their bytes: the leading register bases step 1, 2, 4, ... along the
    innermost dimension and every other basis moves along it by multiples of the run (at most 16 bytes)."""
    regs, rest = layout.bases[0], [b for bases in layout.bases for b in bases]
    run = 0
    while (run < len(regs) and (1 << (run + 1)) * eb <= 16
           and tuple(regs[run]) == (0,) * (len(regs[run]) - 1) + (1 << run,)):
        run += 1
    while run and any(b[-1] % (1 << run) for b in rest[run:]):
        run -= 1
    return 1 << run


def _buffer_index(em: KernelEmitter, coords: list[str], shape: tuple[int, ...], width: int) -> str:
    """i32: the element of the buffer holding tile element `coords` -- in box coords[-1] // width (the
    boxes one after another), row-major within it."""
    if width == shape[-1]:
        return em.linear_index(coords, shape)
    log = width.bit_length() - 1
    box = em.b.value(f"lshr i32 {coords[-1]}, {log}")
    within = em.linear_index(coords[:-1] + [em.b.value(f"and i32 {coords[-1]}, {width - 1}")],
                             shape[:-1] + (width,))
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return em.b.value(f"add i32 {em.b.value(f'mul i32 {box}, {rows * width}')}, {within}")


def _read_tile(em: KernelEmitter, ty, buf: str, eb: int, width: int) -> Tile:
    """The tile, in boxes `width` elements wide in shared global `buf`, read into `ty`'s layout
    (duplicated registers once; runs of consecutive elements as one vector load)."""
    layout = layout_of(ty)
    lt = llvm_type(ty.elem)
    regs: list[str] = []
    dup = layout.duplicate_register_mask()
    run = min(_contiguous_run(layout, eb), width)
    vec = f"<{run} x {lt}>"
    for r in range(0, layout.num_registers, run):
        if r & dup:
            regs += regs[r & ~dup:(r & ~dup) + run]
            continue
        off = em.b.value(f"mul i32 {_buffer_index(em, em.coords(layout, r), tuple(ty.shape), width)}, {eb}")
        ptr = em.b.value(f"getelementptr inbounds i8, {SHARED_PTR} {buf}, i32 {off}", "tp")
        if run == 1:
            regs.append(em.b.value(f"load {lt}, {SHARED_PTR} {ptr}, align {eb}", "ld"))
            continue
        v = em.b.value(f"load {vec}, {SHARED_PTR} {ptr}, align {run * eb}", "ld")
        regs += [em.b.value(f"extractelement {vec} {v}, i32 {i}") for i in range(run)]
    return Tile(ty, layout, regs)


# -- tile stores by TMA ------------------------------------------------------------------------------------

_SWIZZLE_ROW_SHIFT = 7      # the 16-byte piece of a swizzled span is XOR-ed with bits 7.. of the offset
_PATTERN_ALIGN = 1024       # the 128B swizzle's pattern: eight 128-byte rows


def _staging_offset(ts, coord: tuple[int, int]) -> int:
    """The byte of the staging buffer holding tile element `coord` (row, column): its box, its row of 128
    bytes within the box, the 16-byte piece XOR-ed with the row's low bits as the map's swizzle places it.
    Every step is a bit placement or an XOR, so the offset of a XOR of coordinates is the XOR of theirs."""
    row, col = coord
    width, span = ts.map.box[-1], SWIZZLE_BYTES[ts.map.swizzle]
    off = (col // width) * ts.copy_bytes + row * span + (col % width) * (span // width)
    return off ^ (((off >> _SWIZZLE_ROW_SHIFT) & (span // 16 - 1)) << 4)


def _thread_address_layout(layout: LinearLayout, ts, form: str) -> LinearLayout:
    """A 1-D layout whose coordinate is the staging offset of what this thread writes first: for `form`
    "stmatrix", the row it addresses in an stmatrix x4 of register group 0 (lanes 0-2 pick the row of an 8x8
    block -- the fragment's lanes 2-4 --, lanes 3-4 the block -- register bits 1 and 2), else its first pair
    or 16-byte run (the lanes as the tile's); the warps as the tile's."""
    regs, lanes, warps = layout.bases
    bases = list(lanes[2:]) + [regs[1], regs[2]] if form == "stmatrix" else list(lanes)
    return LinearLayout((ts.bytes,), ((), tuple((_staging_offset(ts, tuple(b)),) for b in bases),
                                      tuple((_staging_offset(ts, tuple(b)),) for b in warps)))


def _staging_form(layout: LinearLayout, ts) -> str:
    """How a thread writes the staging buffer: "rows" (each thread a row, as tensor memory's loads leave it:
    16 bytes of it at a time, st.shared.v4), or from an mma fragment "stmatrix" (16-bit elements: four 8x8
    blocks at a time) or "pairs" (32-bit ones: a pair of columns at a time, st.shared.v2)."""
    if thread_rows(layout):
        return "rows"
    return "stmatrix" if _elem_bytes(ts) == 2 else "pairs"


def _elem_bytes(ts) -> int:
    """The tile's element bytes: a box row is one swizzle span."""
    return SWIZZLE_BYTES[ts.map.swizzle] // ts.map.box[-1]


_GROUP = {"stmatrix": 8, "pairs": 2}
_STAGING_STORE = {"stmatrix": "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0+{}], {{$1, $2, $3, $4}};",
                  "pairs": "st.shared.v2.b32 [$0+{}], {{$1, $2}};",
                  "rows": "st.shared.v4.b32 [$0+{}], {{$1, $2, $3, $4}};"}


def _possible_bits(layout: LinearLayout) -> int:
    """The bits a thread's part of the 1-D layout's coordinate may set."""
    out = 0
    for b in layout.bases[1] + layout.bases[2]:
        out |= b[0]
    return out


def _pack_pair(em: KernelEmitter, elem, lo: str, hi: str) -> str:
    """i32 holding two 16-bit elements, `lo` in the low half (stmatrix's order)."""
    lt = llvm_type(elem)
    v = em.b.value(f"insertelement <2 x {lt}> poison, {lt} {lo}, i32 0")
    v = em.b.value(f"insertelement <2 x {lt}> {v}, {lt} {hi}, i32 1")
    return em.b.value(f"bitcast <2 x {lt}> {v} to i32")


def _word(em: KernelEmitter, elem, reg: str) -> str:
    """i32 holding a 32-bit element."""
    lt = llvm_type(elem)
    return reg if lt == "i32" else em.b.value(f"bitcast {lt} {reg} to i32")


def tensor_store(em: KernelEmitter, op: Operation) -> None:
    """A store_view_tko with `tma`: its elements into the staging buffer, then each warp's tensor stores."""
    ts = op.attrs["tma"]
    t: Tile = em.get(op.operands["tile"])
    plane = store_plane(tuple(t.layout.shape))
    layout = plane_layout(t.layout, plane)      # the registers as they are, over the rows and columns
    buf = em.unique_global("tma_out")
    em.module_ir.add_global(f"{buf} = internal addrspace(3) global [{ts.bytes} x i8] undef, align {_PATTERN_ALIGN}")
    start = em.b.entry_value(f"ptrtoint {SHARED_PTR} {buf} to i32")
    form = _staging_form(layout, ts)
    threads = _thread_address_layout(layout, ts, form)
    part = em.thread_coords(threads)[0]
    mine = em.b.value(f"add i32 {start}, {part}")
    spread = _possible_bits(threads)
    group = _GROUP.get(form) or 16 // _elem_bytes(ts)     # rows: a 16-byte run
    for g in range(0, layout.num_registers, group):
        const = _staging_offset(ts, layout.register_coord(g))
        # bits the thread's part never sets and the buffer's alignment keeps clear of carries are added as the
        # address's immediate; the rest is XOR-ed (below the alignment: the start's low bits are zero)
        high = const & ~spread & ~(_PATTERN_ALIGN - 1)
        low = const ^ high
        if low >= _PATTERN_ALIGN:
            addr, high = em.b.value(f"add i32 {start}, {em.b.value(f'xor i32 {part}, {const}')}"), 0
        else:
            addr = mine if not low else em.b.value(f"xor i32 {mine}, {low}")
        words = ([_pack_pair(em, t.elem, t.regs[i], t.regs[i + 1]) for i in range(g, g + group, 2)]
                 if _elem_bytes(ts) == 2 else [_word(em, t.elem, t.regs[i]) for i in range(g, g + group)])
        em.b.asm("void", _STAGING_STORE[form].format(high), ",".join(["r"] * (len(words) + 1)) + ",~{memory}",
                 [("i32", addr)] + [("i32", w) for w in words])
    em.b.asm("void", "fence.proxy.async.shared::cta;", "~{memory}", [])
    _store_warp_slabs(em, op, ts, layout, plane, start)
    em.set(op.results[0], TOKEN)


def _store_warp_slabs(em: KernelEmitter, op: Operation, ts, layout: LinearLayout, plane: tuple[int, int],
                      start: str) -> None:
    """Each warp, its lanes' writes fenced and synced, stores its slabs of rows: one elected lane issues a
    tensor store per slab and box, then waits until they have read the buffer (before it may exit).  The
    tile's `plane` dimensions are its rows and columns (`layout`'s), any other a unit one starting where the
    tile does; the map's coordinates follow the tensor's dimensions (`ts.order`), PTX listing the innermost
    first."""
    starts = warp_slabs(layout)[1]
    warp_rows = LinearLayout((layout.shape[0],), ((), ((0,),) * 5, tuple((b[0],) for b in layout.bases[2])))
    wrow = em.thread_coords(warp_rows)[0]
    tile = _tile_starts(em, op.operands["index"], tuple(op.operands["tile"].type.shape))
    span = SWIZZLE_BYTES[ts.map.swizzle]
    src = em.b.value(f"add i32 {start}, {em.b.value(f'mul i32 {wrow}, {span}')}")
    row_dim, col_dim = plane
    row0 = em.b.value(f"add i32 {tile[row_dim]}, {wrow}")
    args = [("i64", map_address(em, ts.map.param)), ("i32", src)]
    fixed = {}
    for d in range(len(tile)):
        if d not in plane:
            args.append(("i32", tile[d]))
            fixed[d] = len(args) - 1
    order = ts.order or tuple(range(len(tile)))
    lines = []
    for r in starts:
        args.append(("i32", row0 if not r else em.b.value(f"add i32 {row0}, {r}")))
        operand = {**fixed, row_dim: len(args) - 1}
        for j in range(ts.copies):
            args.append(("i32", tile[col_dim] if not j else
                         em.b.value(f"add i32 {tile[col_dim]}, {j * ts.map.box[-1]}")))
            operand[col_dim] = len(args) - 1
            coords = ", ".join(f"${operand[d]}" for d in reversed(order))
            lines.append(f"cp.async.bulk.tensor.{len(tile)}d.global.shared::cta.tile.bulk_group [$0, {{{coords}}}], "
                         f"[$1+{j * ts.copy_bytes + r * span}]")
    lines += ["cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 0"]
    body = " ".join(f"@p {line};" for line in lines)
    em.b.asm("void", f"{{ .reg .pred p; .reg .b32 e; bar.warp.sync -1; elect.sync e|p, -1; {body} }}",
             ",".join(("l" if t == "i64" else "r") for t, _ in args) + ",~{memory}", args)
