"""The pipelined loop's copies: `tilegpu.async_copy` (cp.async of one K chunk of an mma operand into a stage
buffer), `async_commit` / `async_wait` (cp.async groups) and `views_aligned` (a loop version's run-time check).
The pipeline pass decided everything (stages, chunks, which buffer, how many bytes per copy); this module
only spells it in PTX.

Copies: the chunk is spread over the threads, row-major with the innermost dimension fastest; a thread's
copies are unrolled when there are few, else a loop LLVM is told not to unroll (so their addresses are not all
kept live across the K-loop).  Out-of-bounds elements read as zero through cp.async's src-size operand (0 for
rows outside the tensor, the bytes left for a vector that crosses the end of a row): the zero padding of the
partition view.  With 8/16-bit elements one at a time, a synchronous predicated load and a shared store.
An `async_copy` with `transpose` (a wgmma buffer contiguous along another dimension than the tensor: tf32 B)
loads each vector into registers and stores its elements one by one at their places in the buffer -- or, where
a thread's copies of a 2-D B chunk fit one 16-byte piece of a K-major row, loads them at consecutive K rows
of one column block and stores each column's run of K elements with one shared vector store
(`_transposed_k_runs`: matmul_tf32_64x64x32 on sm_90 executed 206,720 -> 162,432 thread-instructions).
A wgmma operand with a conversion the tensor core does not do itself is copied as it is; `tilegpu.convert_stage`
then converts the landed chunk in place, each thread the elements it copied (the same spread over the threads),
before the publishing barrier (f32 read as tf32 needs none: tilegpu.analysis.software_pipeline.read_as_tf32).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..ir.core import Operation
from ..tilegpu.analysis.facts import view_extent_divisor
from ..tilegpu.analysis.software_pipeline import Operand
from .emitter import LOWERINGS, KernelEmitter, lowers  # noqa: F401  (LOWERINGS: tests swap a pattern)
from .lower_tensor_copy import tensor_copy
from .lower_wgmma import swizzled_offset
from .values import GLOBAL_PTR, SHARED_PTR, PartitionView, Tile, llvm_type

# a thread's copies of one operand chunk are unrolled up to this many, else a loop of one copy per iteration
UNROLLED_COPIES = 4
# ...except synchronous copies (8/16-bit elements one at a time: the view's base or strides are not 16-byte
# aligned, e.g. a K of 72 halves): a thread's loop of them goes this many per iteration, all loads before the
# first store, so that their latencies overlap.  One per iteration waits out a global load per element: on an
# H100, matmul_ragged_f16_32x32x32 4.2 -> 10.1 us, persistent_matmul_f16 8.7 -> 19.9 us, a 512x1004x1004 f16
# matmul 59 -> 194 us (bench/results/gpu_h100_ab.json).  The batch's other copies address from the first's
# (bench/results/gpu_h100_copy_addressing.json: as fast, 19-30 fewer registers than four addresses of their own)
SYNCHRONOUS_BATCH = 4
# a thread's copies of one chunk from this many on (any loop of synchronous ones): their addresses hang off one
# opaque pointer per chunk
LONG_COPY_LOOP = 4 * UNROLLED_COPIES


@lowers("tilegpu.async_copy")
def _async_copy(em: KernelEmitter, op: Operation) -> None:
    x: Operand = op.attrs["operand"]
    buf_off = unit_offset(em, op)
    if op.attrs.get("tma") is not None:     # select-tensor-copies: one thread's tensor copies
        tensor_copy(em, op, buf_off)
        return
    copy_chunk(em, x, em.get(op.operands["view"]), [em.get(v) for v in op.operands["indices"]], op.attrs["chunk"],
               op.attrs["kc"], buf_off, op.attrs["vb"], transpose=bool(op.attrs.get("transpose")))


def ring_offset(em: KernelEmitter, ring: Operation) -> int | str:
    """Where a ring of stage buffers starts, from the shared-memory scratch: its allocated offset, or (a ring
    with `align`, read by wgmma) that offset rounded up at run time so that the absolute address is a multiple
    of `align` (the ring's size leaves room for it); an entry-block value, computed once per ring."""
    off = ring.attrs["offset"]
    al = ring.attrs.get("align")
    if not al:
        return off
    memo = em.ring_offsets
    if id(ring) not in memo:
        sym = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
        up = em.b.entry_value(f"add i32 {sym}, {off + al - 1}")
        memo[id(ring)] = em.b.entry_value(f"sub i32 {em.b.entry_value(f'and i32 {up}, {-al}')}, {sym}")
    return memo[id(ring)]


def unit_offset(em: KernelEmitter, op: Operation) -> str:
    """i32: the byte offset from the scratch of the stage buffer an async_copy / mma_staged uses (ring
    offset + slot * unit bytes)."""
    ring = ring_offset(em, op.operands["buffer"].owner)
    if "slot" in op.attrs:
        const = op.attrs["slot"] * op.attrs["unit_bytes"]
        if isinstance(ring, int):
            return str(ring + const)
        return em.b.value(f"add i32 {ring}, {const}") if const else ring
    slot = em.get(op.operands["slot"]).regs[0]
    scaled = em.b.value(f"mul i32 {slot}, {op.attrs['unit_bytes']}")
    return em.b.value(f"add i32 {scaled}, {ring}")


@lowers("tilegpu.async_commit")
def _async_commit(em: KernelEmitter, op: Operation) -> None:
    em.b.asm("void", "cp.async.commit_group;", "~{memory}", [])


@lowers("tilegpu.async_wait")
def _async_wait(em: KernelEmitter, op: Operation) -> None:
    if not op.attrs.get("groupless"):
        em.b.asm("void", f"cp.async.wait_group {op.attrs['pending']};", "~{memory}", [])
    if op.attrs.get("fence_proxy_async"):   # the copies are read by wgmma (the async proxy)
        em.b.asm("void", "fence.proxy.async.shared::cta;", "~{memory}", [])


@lowers("tilegpu.views_aligned")
def _views_aligned(em: KernelEmitter, op: Operation) -> None:
    cond = None
    for x, name in zip(op.attrs["operands"], ("view_a", "view_b")):
        vb = op.attrs["vb"][x.role]
        if vb > x.eb:
            c = aligned(em, x, em.get(op.operands[name]), vb)
            cond = c if cond is None else em.b.value(f"and i1 {cond}, {c}")
    em.set(op.result, Tile(op.result.type, None, [cond or "true"]))


def aligned(em: KernelEmitter, x: Operand, pv: PartitionView, vb: int) -> str:
    """i1: the view's innermost stride is 1, its base and all other strides are multiples of vb bytes."""
    view = pv.view
    dims = pv.type.dim_map
    inner = dims[len(x.tile_shape) - 1]
    ok = em.b.value(f"icmp eq i64 {view.strides[inner]}, 1")
    addr = em.b.value(f"ptrtoint {GLOBAL_PTR} {view.base} to i64")
    mis = em.b.value(f"and i64 {addr}, {vb - 1}")
    for i in range(len(x.tile_shape) - 1):
        st = em.b.value(f"mul i64 {view.strides[dims[i]]}, {x.eb}")
        mis = em.b.value(f"or i64 {mis}, {em.b.value(f'and i64 {st}, {vb - 1}')}")
    zero = em.b.value(f"icmp eq i64 {mis}, 0")
    return em.b.value(f"and i1 {ok}, {zero}")


@lowers("tilegpu.convert_stage")
def _convert_stage(em: KernelEmitter, op: Operation) -> None:
    x: Operand = op.attrs["operand"]
    copy_chunk(em, x, None, [], op.attrs["chunk"], op.attrs["kc"], unit_offset(em, op), op.attrs["vb"],
               convert_in_place=True)
    if op.attrs.get("fence_proxy_async"):
        em.b.asm("void", "fence.proxy.async.shared::cta;", "~{memory}", [])


def convert_elements(em: KernelEmitter, x: Operand, val: str):
    """(value, element type) after the operand's ftof chain."""
    from .lower_elementwise import _ftof
    elem = x.elem
    for o in x.chain:
        if o.name == "ftof":
            val = _ftof(em, o, llvm_type(elem), [val])
            elem = o.result.type.elem
    return val, elem


def _operand_coord(x: Operand, coord: list[str]) -> tuple[str, str, str]:
    """(batch, row, k) of a tile coordinate of operand x: rows are M of A, N of B."""
    c = coord[x.lead:]
    b = c[0] if len(c) == 3 else "0"
    return (b, c[-2], c[-1]) if x.role == "a" else (b, c[-1], c[-2])


@dataclass
class _Chunk:
    """One chunk's copies while they are emitted: where they go (`buf_off`, vb bytes each), how they are spread
    over the threads, and what the copies of the chunk share (the padding constant, the synchronous copies'
    pending stores, the chunk's opaque base pointer)."""
    em: KernelEmitter
    x: Operand
    pv: PartitionView | None
    buf_off: str
    vb: int
    convert_in_place: bool
    v: int                  # elements per copy
    sub_v: list[int]        # copies per dimension
    shifts: list[int]       # per dimension: where its field starts in a copy's number (row-major)
    starts: list[str]       # per dimension: the chunk's first element (i64)
    per: int                # copies per thread
    looped: bool            # the thread's copies are a loop of synchronous copies or a long one
    transpose: bool = False     # a vector load into registers, a shared store per element (async_copy's attr)
    fill: str | None = None
    stores: list[str] = field(default_factory=list)     # synchronous copies' shared stores, after all their loads
    based: str | None = None

    @property
    def rank(self) -> int:
        return len(self.x.tile_shape)

    @property
    def view(self):
        return self.pv.view

    @property
    def dims(self):
        return self.pv.type.dim_map


def copy_chunk(em: KernelEmitter, x: Operand, pv: PartitionView | None, index: list[Tile], chunk: int, kc: int,
               buf_off: str, vb: int, convert_in_place: bool = False, transpose: bool = False) -> None:
    """Copy chunk `chunk` of operand x's tile (tile indices `index`) into the buffer at `buf_off`, vb
    bytes per copy: cp.async (zero-filling what lies outside the tensor) or, for 8/16-bit elements one
    at a time, a predicated load and a shared store.  The copies of the chunk are spread over the
    threads, row-major with the innermost dimension fastest; a thread's copies are unrolled when there
    are few, else a loop (so their addresses are not all kept live across the K-loop).
    `convert_in_place`: instead, each thread converts (x's ftof chain) the elements its copies of the
    chunk wrote, in the buffer (no view: nothing is read from global memory).  `transpose`: each copy is a
    predicated vector load into registers and a shared store per element at its own place in the buffer."""
    c = _new_chunk(em, x, pv, index, chunk, kc, buf_off, vb, convert_in_place)
    c.transpose = transpose
    nv = prod(c.sub_v)
    if transpose and _k_runs(c) > 1:
        _transposed_k_runs(c)
    elif nv <= em.num_threads:
        _one_copy_per_thread(c, nv)
    elif c.per <= UNROLLED_COPIES:
        _unrolled_copies(c)
    else:
        _copy_loop(c)


def _new_chunk(em: KernelEmitter, x: Operand, pv: PartitionView | None, index: list[Tile], chunk: int, kc: int,
                   buf_off: str, vb: int, convert_in_place: bool) -> _Chunk:
    v = vb // x.eb
    sub = list(x.tile_shape)
    sub[x.kdim] = kc
    sub_v = sub[:-1] + [sub[-1] // v]
    per = prod(sub_v) // em.num_threads
    looped = not convert_in_place and (per >= LONG_COPY_LOOP or (vb < 4 and per > UNROLLED_COPIES))
    starts = [] if convert_in_place else _chunk_starts(em, x, index, chunk, kc)
    return _Chunk(em, x, pv, buf_off, vb, convert_in_place, v, sub_v, _field_shifts(sub_v), starts, per, looped)


def _field_shifts(sub_v: list[int]) -> list[int]:
    """Per dimension: the lowest bit of its coordinate in a copy's number (counts are powers of two)."""
    shifts, acc = [], 0
    for n in reversed(sub_v):
        shifts.append(acc)
        acc += n.bit_length() - 1
    shifts.reverse()
    return shifts


def _chunk_starts(em: KernelEmitter, x: Operand, index: list[Tile], chunk: int, kc: int) -> list[str]:
    starts = []
    for d, n in enumerate(x.tile_shape):
        idx = index[d]
        i64 = idx.regs[0] if idx.llvm == "i64" else em.b.value(f"sext {idx.llvm} {idx.regs[0]} to i64")
        st = em.b.value(f"mul i64 {i64}, {n}")
        if d == x.kdim and chunk:
            st = em.b.value(f"add i64 {st}, {chunk * kc}")
        starts.append(st)
    return starts


def _flush(c: _Chunk) -> None:
    for st in c.stores:
        c.em.b.emit(st)
    c.stores.clear()


def _coords_of(c: _Chunk, q: str, entry: bool) -> list[str]:
    """The tile coordinate (i32 per dimension) of copy number q, in the entry block or where the builder is."""
    val = c.em.thread_value if entry else c.em.b.value
    out = []
    for d in range(c.rank):
        if c.sub_v[d] == 1:
            out.append("0")
            continue
        k = val(f"lshr i32 {q}, {c.shifts[d]}") if c.shifts[d] else q
        k = val(f"and i32 {k}, {c.sub_v[d] - 1}")
        if d == c.rank - 1 and c.v > 1:
            k = val(f"mul i32 {k}, {c.v}")
        out.append(k)
    return out


def _field_steps(c: _Chunk, n: int) -> list[int]:
    """Per dimension: what copy number n adds to a coordinate (n's bits are disjoint from the copy's own)."""
    return [((n >> c.shifts[d]) & (c.sub_v[d] - 1)) * (c.v if d == c.rank - 1 else 1) for d in range(c.rank)]


def _one_copy_per_thread(c: _Chunk, nv: int) -> None:
    """Threads past nv repeat copies: same data, same place."""
    em = c.em
    q = em.tid if nv == em.num_threads else em.thread_value(f"and i32 {em.tid}, {nv - 1}")
    _copy(c, _coords_of(c, q, True))
    _flush(c)


def _unrolled_copies(c: _Chunk) -> None:
    em = c.em
    base = _coords_of(c, em.tid, True)
    tbits = em.num_threads.bit_length() - 1
    for it in range(c.per):
        coord = []
        for d, k in enumerate(_field_steps(c, it * em.num_threads)):
            co = base[d] if c.shifts[d] < tbits else "0"
            if k:
                co = str(k) if co == "0" else em.b.value(f"add i32 {co}, {k}")
            coord.append(co)
        _copy(c, coord)
    _flush(c)


def _copy_loop(c: _Chunk) -> None:
    """for (i = 0; i < per; i += batch): a loop LLVM must not unroll (ptxas is told so too); synchronous copies
    go SYNCHRONOUS_BATCH at a time, their loads before their stores."""
    em, T_ = c.em, c.em.num_threads
    batch = SYNCHRONOUS_BATCH if c.vb < 4 else 1
    pre = em.b.block_label
    loop, done = em.b.reserve_block("pl.cp.loop"), em.b.reserve_block("pl.cp.done")
    em.b.br(loop)
    em.b.start_block(loop)
    i = em.b.phi("i32", "cpi")
    i.add("0", pre)
    it = em.b.value(f"mul i32 {i.name}, {T_}")
    base = _coords_of(c, em.b.value(f"add i32 {em.tid}, {it}"), False)
    state = _batch_anchor(c, _copy(c, base), batch)
    prev_k = [0] * c.rank
    for j in range(1, batch):
        # copy i + j's coordinates are copy i's plus j*T's: tid, i*T (i a multiple of batch) and j*T have
        # disjoint bits, so every coordinate's bit field adds up
        ks = _field_steps(c, j * T_)
        coord = [base[d] if not ks[d] else str(ks[d]) if base[d] == "0"
                 else em.b.value(f"add i32 {base[d]}, {ks[d]}") for d in range(c.rank)]
        state = _copy(c, coord, (state, [k - pk for k, pk in zip(ks, prev_k)]))
        prev_k = ks
    _flush(c)
    nxt = em.b.value(f"add i32 {i.name}, {batch}")
    i.add(nxt, em.b.block_label)
    more = em.b.value(f"icmp ult i32 {nxt}, {c.per}")
    em.b.emit(f"br i1 {more}, label %{loop}, label %{done}, !llvm.loop {em.module_ir.no_unroll_loop()}")
    em.b.start_block(done)


def _batch_anchor(c: _Chunk, state: dict, batch: int) -> dict:
    """Copy i's state as the batch's other copies add to it: through an opaque move of its address and of the
    positions they move, so that LLVM does not make each of their addresses an induction variable of its own
    (registers)."""
    moves = {d for j in range(1, batch) for d in range(c.rank) if _field_steps(c, j * c.em.num_threads)[d]}
    if not moves:
        return state
    b = c.em.b
    return dict(state, addr=b.asm(GLOBAL_PTR, "mov.b64 $0, $1;", "=l,l", [(GLOBAL_PTR, state["addr"])],
                                  sideeffect=False, hint="cpa"),
                pos=[b.asm("i64", "mov.b64 $0, $1;", "=l,l", [("i64", p)], sideeffect=False, hint="cpp")
                     if d in moves else p for d, p in enumerate(state["pos"])])


def _convert(c: _Chunk, coord: list[str]) -> None:
    em, x = c.em, c.x
    dst = em.b.value(f"add i32 {c.buf_off}, {swizzled_offset(em, x.smem, *_operand_coord(x, coord))}")
    p = em.b.value(f"getelementptr i8, {SHARED_PTR} {em.scratch}, i32 {dst}", "sp")
    lt = llvm_type(x.elem)
    for j in range(c.v):    # a copy's elements are consecutive in the buffer (swizzling moves 16 bytes)
        pj = p if j == 0 else em.b.value(f"getelementptr i8, {SHARED_PTR} {p}, i32 {j * x.eb}", "sp")
        val = em.b.value(f"load {lt}, {SHARED_PTR} {pj}, align {x.eb}")
        val, elem = convert_elements(em, x, val)
        em.b.emit(f"store {llvm_type(elem)} {val}, {SHARED_PTR} {pj}, align {x.eb}")


def _chunk_base(c: _Chunk, lt: str) -> str:
    """For a long loop of copies, or a loop of synchronous ones: the view's base advanced to the chunk's
    first K element, through an opaque move, so that LLVM sees each copy's address as this pointer plus
    the thread's offset instead of making every address of the copy loop an induction variable of the
    K-loop (matmul_bf16_64x64x64's synchronous-copy version carried 11 such 64-bit pointers through its
    K-loop). A short loop of cp.async copies keeps them: its few induction pointers save the address
    arithmetic of every copy."""
    if c.based is None:
        b, view, kdim = c.em.b, c.view, c.x.kdim
        k = c.starts[kdim]
        moved = b.value(f"getelementptr {lt}, {GLOBAL_PTR} {view.base}, i64 "
                        f"{b.value(f'mul i64 {k}, {view.strides[c.dims[kdim]]}')}", "ga")
        c.based = b.asm(GLOBAL_PTR, "mov.b64 $0, $1;", "=l,l", [(GLOBAL_PTR, moved)], sideeffect=False, hint="kb")
    return c.based


def _placed(c: _Chunk, dst: str, coord: list[str], d: int) -> str:
    """The shared-memory destination `dst` advanced by dimension d of `coord` (buffers with strides)."""
    if coord[d] == "0" or not c.x.strides[d]:
        return dst
    return c.em.b.value(f"add i32 {dst}, {c.em.b.value(f'mul i32 {coord[d]}, {c.x.strides[d]}')}")


def _stepped(c: _Chunk, prev: dict, ks: list[int], lt: str) -> dict:
    """The positions ("pos"), bounds ("ok") and address of the copy `ks` (per-dimension constants) past
    `prev`'s: additions of loop-invariant stride products instead of 64-bit products per copy."""
    b, view, dims = c.em.b, c.view, c.dims
    poss, oks, addr = list(prev["pos"]), list(prev["ok"]), prev["addr"]
    for d in range(c.rank):
        if ks[d]:
            poss[d] = b.value(f"add i64 {poss[d]}, {ks[d]}")
            oks[d] = b.value(f"icmp ult i64 {poss[d]}, {view.shape[dims[d]]}")
            step = b.value(f"mul i64 {view.strides[dims[d]]}, {ks[d]}")
            addr = b.value(f"getelementptr {lt}, {GLOBAL_PTR} {addr}, i64 {step}", "ga")
    return {"pos": poss, "ok": oks, "addr": addr}


def _copy(c: _Chunk, coord: list[str], near: tuple | None = None) -> dict:
    """One copy at tile coordinate `coord`; returns its positions, bounds and address.  `near`: (the result
    of a copy of this chunk, the per-dimension constants coord adds to that copy's): they follow from that
    copy's (`_stepped`)."""
    if c.convert_in_place:
        _convert(c, coord)
        return {}
    em, x = c.em, c.x
    dst = em.b.value(f"add i32 {c.buf_off}, {x.base}") if x.base else c.buf_off
    lt = llvm_type(x.elem) if llvm_type(x.elem) != "i1" else "i8"
    if near is not None:
        dst, inb, state = _stepped_copy(c, dst, coord, near, lt)
    else:
        dst, inb, state = _addressed_copy(c, dst, coord, lt)
    if c.transpose:
        _transposed_copy(c, coord, state["addr"], inb)
        return state
    if x.smem is not None:  # a wgmma operand: its swizzled place (x.strides do not apply)
        dst = em.b.value(f"add i32 {c.buf_off}, {swizzled_offset(em, x.smem, *_operand_coord(x, coord))}")
    p = em.b.value(f"getelementptr i8, {SHARED_PTR} {em.scratch}, i32 {dst}", "sp")
    if c.vb < 4:
        _synchronous_copy(c, state["addr"], inb, p)
    else:
        _cp_async(c, state, inb, p)
    return state


def _stepped_copy(c: _Chunk, dst: str, coord: list[str], near: tuple, lt: str) -> tuple[str, str, dict]:
    """(destination, in bounds, state) of a copy that follows from a nearby copy's (`_stepped`)."""
    for d in range(c.rank):
        dst = _placed(c, dst, coord, d)
    state = _stepped(c, *near, lt)
    inb = state["ok"][0]
    for ok in state["ok"][1:]:
        inb = c.em.b.value(f"and i1 {inb}, {ok}")
    return dst, inb, state


def _addressed_copy(c: _Chunk, dst: str, coord: list[str], lt: str) -> tuple[str, str, dict]:
    """(destination, in bounds, state) of a copy addressed from the chunk's start: the destination's, bounds'
    and address's instructions interleaved per dimension."""
    b, view, dims, x = c.em.b, c.view, c.dims, c.x
    offset, inb, poss, oks = "0", None, [], []
    for d in range(c.rank):
        pos = c.starts[d]
        within = "0"
        if coord[d] != "0":
            within = b.value(f"zext i32 {coord[d]} to i64")
            pos = b.value(f"add i64 {pos}, {within}")
            dst = _placed(c, dst, coord, d)
        ok = b.value(f"icmp ult i64 {pos}, {view.shape[dims[d]]}")
        poss.append(pos)
        oks.append(ok)
        inb = ok if inb is None else b.value(f"and i1 {inb}, {ok}")
        if d == x.kdim and c.looped:    # the chunk's K start is in `_chunk_base`: add the thread's part
            pos = within
            if pos == "0":
                continue
        term = b.value(f"mul i64 {pos}, {view.strides[dims[d]]}")
        offset = term if offset == "0" else b.value(f"add i64 {offset}, {term}")
    base = _chunk_base(c, lt) if c.looped else view.base
    addr = b.value(f"getelementptr {lt}, {GLOBAL_PTR} {base}, i64 {offset}", "ga")
    return dst, inb, {"pos": poss, "ok": oks, "addr": addr}


def _synchronous_copy(c: _Chunk, addr: str, inb: str, p: str) -> None:
    """An 8/16-bit element: a predicated load now, its shared store when the batch's loads are all out."""
    from .lower_memory import padding_constant, predicated_load
    x = c.x
    if c.fill is None:
        c.fill = padding_constant(x.elem, c.pv.type.padding)
    val = predicated_load(c.em, x.load, addr, inb, x.elem, c.fill)
    c.stores.append(f"store {llvm_type(x.elem)} {val}, {SHARED_PTR} {p}, align {x.eb}")


def _transposed_copy(c: _Chunk, coord: list[str], addr: str, inb: str) -> None:
    """A vector of v elements along the tensor's contiguous dimension (wholly in or out of bounds: the pass
    proved the extent a multiple of v), loaded now; each element's shared store, at its swizzled place in the
    buffer contiguous along the other dimension, when the chunk's loads are all out."""
    from .lower_memory import padding_constant, predicated_vector_load
    em, x = c.em, c.x
    if c.fill is None:
        c.fill = padding_constant(x.elem, c.pv.type.padding)
    vals = predicated_vector_load(em, addr, inb, x.elem, c.fill, c.v)
    last = coord[-1]
    for j, val in enumerate(vals):
        at = last if j == 0 else str(j) if last == "0" else em.b.value(f"add i32 {last}, {j}")
        off = swizzled_offset(em, x.smem, *_operand_coord(x, coord[:-1] + [at]))
        p = em.b.value(f"getelementptr i8, {SHARED_PTR} {em.scratch}, i32 {em.b.value(f'add i32 {c.buf_off}, {off}')}",
                       "sp")
        c.stores.append(f"store {llvm_type(x.elem)} {val}, {SHARED_PTR} {p}, align {x.eb}")


def _k_runs(c: _Chunk) -> int:
    """How many consecutive K rows each thread's copies of a transposing B chunk ([k, n], n contiguous in the
    tensor, k in the buffer) can cover -- its copies per thread, when they fit one 16-byte piece of a buffer
    row -- so that every element of its vectors lands with the next rows' as one shared vector store (1: the
    chunk is spread as other copies are)."""
    x, per = c.x, c.per
    if x.role != "b" or len(x.tile_shape) != 2 or x.kdim != 0 or c.looped or per < 2 or per * x.eb > 16:
        return 1
    vectors = c.sub_v[-1]
    if per & (per - 1) or c.em.num_threads % vectors or c.em.num_threads // vectors * per != c.sub_v[0]:
        return 1
    return per


def _transposed_k_runs(c: _Chunk) -> None:
    """A transposing B chunk whose threads each load `per` vectors at consecutive K rows of one column block
    (thread t: columns (t % vectors) * v.., rows (t // vectors) * per..): each of a vector's v columns then has
    `per` consecutive K elements in the thread -- contiguous in the K-major buffer, within one swizzled 16-byte
    piece -- stored with one st.shared.v{per}, 32-bit addressed; the next rows' loads step from the first's
    address, and share its bounds check where the launch hints make K a multiple of the run."""
    from .lower_memory import padding_constant, predicated_vector_load
    em, x, per = c.em, c.x, c.per
    vectors = c.sub_v[-1]
    col = em.thread_value(f"shl i32 {em.thread_value(f'and i32 {em.tid}, {vectors - 1}')}, {c.v.bit_length() - 1}")
    row = em.thread_value(f"shl i32 {em.thread_value(f'lshr i32 {em.tid}, {vectors.bit_length() - 1}')}, "
                          f"{per.bit_length() - 1}")
    lt = llvm_type(x.elem)
    fill = padding_constant(x.elem, c.pv.type.padding)
    # K a multiple of the run (a launch hint): the run's rows are all in or all out, as its first is
    shared_bound = view_extent_divisor(x.load.operands["view"], 0) % per == 0
    loaded, state, first = [], None, None
    for it in range(per):
        coord = [row if not it else em.b.value(f"add i32 {row}, {it}"), col]
        if state is None:
            _, inb, state = _addressed_copy(c, "0", coord, lt)
            first = inb
        else:
            _, inb, state = _stepped_copy(c, "0", coord, (state, [1, 0]), lt)
        loaded.append(predicated_vector_load(em, state["addr"], first if shared_bound else inb, x.elem, fill, c.v))
    scratch = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    base = em.b.value(f"add i32 {scratch}, {c.buf_off}")
    regs = ", ".join(f"${i + 1}" for i in range(per))
    for j in range(c.v):
        at = col if j == 0 else em.b.value(f"add i32 {col}, {j}")
        off = swizzled_offset(em, x.smem, *_operand_coord(x, [row, at]))
        words = [em.b.value(f"bitcast {lt} {vals[j]} to i32") if lt != "i32" else vals[j] for vals in loaded]
        em.b.asm("void", f"st.shared.v{per}.b32 [$0], {{{regs}}};", ",".join(["r"] * (per + 1)) + ",~{memory}",
                 [("i32", em.b.value(f"add i32 {base}, {off}"))] + [("i32", w) for w in words])


def _cp_async(c: _Chunk, state: dict, inb: str, p: str) -> None:
    """A cp.async of vb bytes, fewer (zero-filled) for a vector crossing the end of a row, none out of bounds
    (the source then the view's base, a valid address)."""
    b, view, x, v, vb = c.em.b, c.view, c.x, c.v, c.vb
    if v > 1:   # the vector may cross the end of the row: copy what is left of it
        left = b.value(f"sub i64 {view.shape[c.dims[c.rank - 1]]}, {state['pos'][-1]}")
        short = b.value(f"icmp slt i64 {left}, {v}")
        cnt = b.value(f"trunc i64 {b.value(f'select i1 {short}, i64 {left}, i64 {v}')} to i32")
        nbytes = b.value(f"mul i32 {cnt}, {x.eb}") if x.eb > 1 else cnt
        nbytes = b.value(f"select i1 {inb}, i32 {nbytes}, i32 0")
    else:
        nbytes = b.value(f"select i1 {inb}, i32 {vb}, i32 0")
    safe = b.value(f"select i1 {inb}, {GLOBAL_PTR} {state['addr']}, {GLOBAL_PTR} {view.base}")
    p32 = b.value(f"ptrtoint {SHARED_PTR} {p} to i32")
    kind = "cg" if vb == 16 else "ca"
    b.asm("void", f"cp.async.{kind}.shared.global [$0], [$1], {vb}, $2;", "r,l,r,~{memory}",
          [("i32", p32), (GLOBAL_PTR, safe), ("i32", nbytes)])


def aligned_buffer(em: KernelEmitter, alloc: Operation) -> str:
    """i32 (entry block): the shared address of a buffer with `align`, rounded up at run time."""
    sym = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    off = ring_offset(em, alloc)
    em.reserve_shared(alloc.attrs["offset"] + alloc.result.type.nbytes)
    return em.b.entry_value(f"add i32 {sym}, {off}")
