"""mmaf and mmai on the tensor cores with `mma.sync` (and the FMA chain), following a `tilegpu.analysis.mma.MmaPlan`.

The plan (tilegpu/analysis/mma.py: instruction, warp split, fragment layouts, staging offsets) was decided by the
passes; this module only emits it:

1. The accumulator arrives in the plan's C layout (assign-layouts converted it; a loop-carried accumulator
   starts there, so it never leaves the registers).
2. barrier; A (B x M x K) is written to shared memory row-major and B transposed (B x N x K), rows padded by 16
   bytes so the fragment loads of a warp hit 32 different banks; barrier.  Tiles larger than the 48 KB budget are
   staged in K-chunks.
3. For each K step each warp loads its A and B fragment registers (32-bit words, 64-bit for f64) at
   thread offset + constant offset (the plan's fragment layouts), and issues one mma per (m tile, n tile),
   accumulating in the accumulator type.  `fast_acc` has no mma.sync counterpart and is ignored (the result is
   the fully accurate one).
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from ..ir import types as T
from ..ir.core import Operation
from ..ir.enums import Signedness
from ..tilegpu.layout import LinearLayout
from ..tilegpu.analysis.mma import (_FP8, F16_F16, BF16_F32, F16_F32, F8_F16, F8_F32, F64_F64,
                           FMA_PLAN, I8_I32, TF32_F32, Coord, Instr, MmaPlan, Staging, _name, ldmatrix_lanes,
                           ldmatrix_trans_lanes, recorded_plan, rows_of_n_stage)
from ..tilegpu.types import layout_of
from ..tilegpu.analysis.tcgen05 import Tcgen05Plan
from ..tilegpu.analysis.tensor_maps import SWIZZLE_BYTES
from ..tilegpu.analysis.wgmma import WgmmaPlan
from .emitter import KernelEmitter, LoweringError, lowers
from .lower_software_pipeline import aligned_buffer, unit_offset
from .lower_tcgen05 import lower_tcgen05, lower_tcgen05_landed, lower_tcgen05_staged
from .lower_wgmma import (combine_bits, lower_wgmma, lower_wgmma_landed, lower_wgmma_staged, over_thread_bits,
                          stage_hoisted)
from .values import SHARED_PTR, Tile, llvm_type

# ---------------------------------------------------------------------------------------------------------
# emission helpers
# ---------------------------------------------------------------------------------------------------------

def _single_bit(layout: LinearLayout) -> bool:
    """Every nonzero basis is one bit of one dimension and no bit repeats: coordinates are sums of bases, so
    a linear address splits into a per-thread part and a per-register constant."""
    seen = set()
    for bases in layout.bases:
        for b in bases:
            nz = [(d, c) for d, c in enumerate(b) if c]
            if not nz:
                continue
            if len(nz) != 1 or nz[0][1] & (nz[0][1] - 1) or nz[0] in seen:
                return False
            seen.add(nz[0])
    return True


def _offset(coord: Coord, strides: tuple[int, ...]) -> int:
    return sum(c * s for c, s in zip(coord, strides))


def _thread_offset(em: KernelEmitter, layout: LinearLayout, contrib) -> str:
    """i32 from the thread id: the sum over this thread's set lane and warp bits of contrib(basis)."""
    return over_thread_bits(em, layout, contrib)[0]


def _smem_ptr(em: KernelEmitter, byte_off: str | int) -> str:
    return em.b.value(f"getelementptr i8, {SHARED_PTR} {em.scratch}, i32 {byte_off}", "sp")


def _add(em: KernelEmitter, a: str, k: int) -> str:
    if k == 0:
        return a
    if a == "0":
        return str(k)
    return em.b.value(f"add i32 {a}, {k}")


def _map_regs(em: KernelEmitter, t: Tile, ty: T.TileType, fn) -> Tile:
    cache: dict[str, str] = {}
    regs = []
    for r in t.regs:
        if r not in cache:
            cache[r] = fn(r)
        regs.append(cache[r])
    return Tile(ty, t.layout, regs)


def fp8_to_half(em: KernelEmitter, x: str, kind: str) -> str:
    """Exact f8E4M3FN / f8E5M2 (raw i8 bits) -> half, in integer and f16 arithmetic (any sm_80+ target)."""
    w = em.b.value(f"zext i8 {x} to i16")
    if kind == "f8E5M2":  # e5m2 is the upper byte of an f16
        bits = em.b.value(f"shl i16 {w}, 8")
        return em.b.value(f"bitcast i16 {bits} to half")
    mag = em.b.value(f"and i16 {w}, 127")
    # |x| with its exponent and mantissa bits placed in an f16 is |x| * 2^-8 (subnormals included): scale back
    h = em.b.value(f"bitcast i16 {em.b.value(f'shl i16 {mag}, 7')} to half")
    v = em.b.value(f"fmul half {h}, 0xH5C00")
    nan = em.b.value(f"icmp eq i16 {mag}, 127")  # e4m3fn has no infinities; S.1111.111 is NaN
    v = em.b.value(f"select i1 {nan}, half 0xH7E00, half {v}")
    sign = em.b.value(f"and i16 {w}, 128")
    sign = em.b.value(f"shl i16 {sign}, 8")
    vb = em.b.value(f"bitcast half {v} to i16")
    return em.b.value(f"bitcast i16 {em.b.value(f'or i16 {vb}, {sign}')} to half")


def _fp8_tile_to_f16(em: KernelEmitter, t: Tile) -> Tile:
    ty = T.TileType(t.type.shape, T.F16)
    return _map_regs(em, t, ty, lambda r: fp8_to_half(em, r, _name(t.elem)))


def stage_entries(layout: LinearLayout, st: Staging, chunk: int, extent: int):
    """What `_stage` stores for chunk `chunk` of a tile in a single-bit layout: (whether chunk membership
    depends on the thread, [(register, constant offset, thread k-chunk part required or None)]).  A thread
    stores register r at st.base + thread offset + constant offset; with a requirement, only when its own
    k-chunk part (the sum of st.hi over its lane and warp bases) equals it (else it writes the trash slot)."""
    single_chunk = st.kc >= extent
    dynamic = not single_chunk and any(st.hi(b) for bases in layout.bases[1:] for b in bases)
    out, done = [], set()
    for r in range(layout.num_registers):
        coord = layout.register_coord(r)
        if coord in done:
            continue
        done.add(coord)
        if dynamic:
            out.append((r, st.contrib(coord), chunk * st.kc - st.hi(coord)))
        elif single_chunk or st.hi(coord) == chunk * st.kc:
            out.append((r, st.contrib(coord), None))
    return dynamic, out


def _stage(em: KernelEmitter, t: Tile, st: Staging, chunk: int, trash: int) -> None:
    """Store the elements of tile t whose k lies in chunk `chunk` at their `st` places; others are skipped
    (when the chunk is a compile-time fact) or sent to the trash slot (when it depends on the thread)."""
    if t.is_scalar:
        raise LoweringError("mma operands must be tiles")
    shape = t.type.shape
    lt = t.llvm
    align = max(1, min(16, st.strides[st.kdim]))
    single_chunk = st.kc >= shape[st.kdim]
    layout = t.layout
    if _single_bit(layout):
        dynamic, entries = stage_entries(layout, st, chunk, shape[st.kdim])
        thread = _thread_offset(em, layout, st.contrib)
        thread_hi = _thread_offset(em, layout, st.hi) if dynamic else None
        for r, const, need in entries:
            off = _add(em, thread, st.base + const)
            if need is not None:
                here = em.b.value(f"icmp eq i32 {thread_hi}, {need}")
                off = em.b.value(f"select i1 {here}, i32 {off}, i32 {trash}")
            em.b.emit(f"store {lt} {t.regs[r]}, {SHARED_PTR} {_smem_ptr(em, off)}, align {align}")
        return
    # other layouts: coordinates at run time
    for r, reg in enumerate(t.regs):
        coords = em.coords(layout, r)
        off = str(st.base)
        for d, (c, stride) in enumerate(zip(coords, st.strides)):
            if d == st.kdim and not single_chunk:
                c = em.b.value(f"and i32 {c}, {st.kc - 1}")
            off = em.b.value(f"add i32 {off}, {em.b.value(f'mul i32 {c}, {stride}')}")
        if not single_chunk:
            k_hi = em.b.value(f"and i32 {coords[st.kdim]}, {-st.kc}")
            here = em.b.value(f"icmp eq i32 {k_hi}, {chunk * st.kc}")
            off = em.b.value(f"select i1 {here}, i32 {off}, i32 {trash}")
        em.b.emit(f"store {lt} {reg}, {SHARED_PTR} {_smem_ptr(em, off)}, align {align}")


# ---------------------------------------------------------------------------------------------------------
# the tensor-core path
# ---------------------------------------------------------------------------------------------------------

def _at_scratch(plan, base: int) -> None:
    """Move a plan's staging (planned from offset 0) to the op's scratch at `base`."""
    plan.a_stage = replace(plan.a_stage, base=plan.a_stage.base + base)
    plan.b_stage = replace(plan.b_stage, base=plan.b_stage.base + base)
    plan.trash += base


def _mma_call(em: KernelEmitter, op: Operation, instr: Instr, a: list[str], b: list[str],
              c: list[str]) -> list[str]:
    """Issue one mma.sync; returns the D registers (c_elems accumulator elements)."""
    bld = em.b
    if instr is F16_F16:
        cw = []
        for j in range(0, 4, 2):
            v = bld.value(f"insertelement <2 x half> poison, half {c[j]}, i32 0")
            cw.append(bld.value(f"insertelement <2 x half> {v}, half {c[j + 1]}, i32 1"))
        args = [("<2 x half>", x) for x in a + b + cw]
        res = bld.call("{ <2 x half>, <2 x half> }", "llvm.nvvm.mma.m16n8k16.row.col.f16.f16", args, hint="mma")
        out = []
        for j in range(2):
            w = bld.value(f"extractvalue {{ <2 x half>, <2 x half> }} {res}, {j}")
            out += [bld.value(f"extractelement <2 x half> {w}, i32 {e}") for e in range(2)]
        return out
    if instr in (F8_F32, F8_F16):
        ka = "e4m3" if _name(op.operands["lhs"].type.elem) == "f8E4M3FN" else "e5m2"
        kb = "e4m3" if _name(op.operands["rhs"].type.elem) == "f8E4M3FN" else "e5m2"
        if instr is F8_F32:
            text = (f"mma.sync.aligned.m16n8k32.row.col.f32.{ka}.{kb}.f32 {{$0,$1,$2,$3}}, {{$4,$5,$6,$7}}, "
                    f"{{$8,$9}}, {{$10,$11,$12,$13}};")
            rt = "{ float, float, float, float }"
            res = bld.asm(rt, text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
                          [("i32", x) for x in a + b] + [("float", x) for x in c], sideeffect=False, hint="mma")
            return [bld.value(f"extractvalue {rt} {res}, {j}") for j in range(4)]
        cw = []
        for j in range(0, 4, 2):
            v = bld.value(f"insertelement <2 x half> poison, half {c[j]}, i32 0")
            v = bld.value(f"insertelement <2 x half> {v}, half {c[j + 1]}, i32 1")
            cw.append(bld.value(f"bitcast <2 x half> {v} to i32"))
        text = (f"mma.sync.aligned.m16n8k32.row.col.f16.{ka}.{kb}.f16 {{$0,$1}}, {{$2,$3,$4,$5}}, {{$6,$7}}, "
                f"{{$8,$9}};")
        rt = "{ i32, i32 }"
        res = bld.asm(rt, text, "=r,=r,r,r,r,r,r,r,r,r", [("i32", x) for x in a + b + cw], sideeffect=False,
                      hint="mma")
        out = []
        for j in range(2):
            w = bld.value(f"extractvalue {rt} {res}, {j}")
            w = bld.value(f"bitcast i32 {w} to <2 x half>")
            out += [bld.value(f"extractelement <2 x half> {w}, i32 {e}") for e in range(2)]
        return out
    if instr is I8_I32:
        sa = op.attrs.get("signedness_lhs", Signedness.signed) == Signedness.signed
        sb = op.attrs.get("signedness_rhs", Signedness.signed) == Signedness.signed
        ta, tb = ("s8" if sa else "u8"), ("s8" if sb else "u8")
        name = f"llvm.nvvm.mma.m16n8k32.row.col.{ta}" if ta == tb else f"llvm.nvvm.mma.m16n8k32.row.col.{ta}.{tb}"
        rt = "{ i32, i32, i32, i32 }"
        res = bld.call(rt, name, [("i32", x) for x in a + b + c], hint="mma")
        return [bld.value(f"extractvalue {rt} {res}, {j}") for j in range(4)]
    if instr is F64_F64:
        rt = "{ double, double }"
        res = bld.call(rt, "llvm.nvvm.mma.m8n8k4.row.col.f64", [("double", x) for x in a + b + c], hint="mma")
        return [bld.value(f"extractvalue {rt} {res}, {j}") for j in range(2)]
    name = {F16_F32: "llvm.nvvm.mma.m16n8k16.row.col.f32.f32", BF16_F32: "llvm.nvvm.mma.m16n8k16.row.col.bf16",
            TF32_F32: "llvm.nvvm.mma.m16n8k8.row.col.tf32"}[instr]
    rt = "{ float, float, float, float }"
    res = bld.call(rt, name, [(instr.word, x) for x in a + b] + [("float", x) for x in c], hint="mma")
    return [bld.value(f"extractvalue {rt} {res}, {j}") for j in range(4)]


def _zero_word(instr: Instr) -> str:
    return {"i32": "0", "<2 x half>": "zeroinitializer", "double": "0.0"}[instr.word]


def _load_word(em: KernelEmitter, instr: Instr, base_ptr: str, off: int | None) -> str:
    if off is None:  # K padding
        return _zero_word(instr)
    p = base_ptr if off == 0 else em.b.value(f"getelementptr i8, {SHARED_PTR} {base_ptr}, i32 {off}", "sp")
    align = 8 if instr.word == "double" else 4
    return em.b.value(f"load {instr.word}, {SHARED_PTR} {p}, align {align}", "frag")


def _operand_tile(em: KernelEmitter, v, instr: Instr) -> Tile:
    """An mma operand as staged: fp8 widened to f16 for the f16 instructions."""
    t = em.get(v)
    return _fp8_tile_to_f16(em, t) if instr in (F16_F32, F16_F16) and _name(t.elem) in _FP8 else t


def _lower_tensor_core(em: KernelEmitter, op: Operation, plan: MmaPlan, node: Operation | None = None,
                       prestaged: tuple[str, int] | None = None) -> None:
    """mma.sync over the staged operands of mmaf/mmai `op`. `node`: the IR op lowered (default `op`: its acc,
    result and scratch); `prestaged` (role, buffer offset): that operand is already in a stage_operand
    buffer, only the other one (node's `other`) is staged here."""
    node = node or op
    instr = plan.instr
    role = prestaged[0] if prestaged else None
    lhs = None if role == "a" else _operand_tile(em, node.operands["other"] if role else op.operands["lhs"], instr)
    rhs = None if role == "b" else _operand_tile(em, node.operands["other"] if role else op.operands["rhs"], instr)
    acc = em.expect(node.operands["acc"])
    rows_of_n = bool(node.attrs.get("b_rows_of_n"))     # select-access-forms decided
    if rows_of_n:
        plan.b_stage = rows_of_n_stage(plan)
    _at_scratch(plan, em.scratch_base(node))
    if role == "a":
        plan.a_stage = replace(plan.a_stage, base=prestaged[1])
    elif role == "b":
        plan.b_stage = replace(plan.b_stage, base=prestaged[1])
    # fragment addresses: a per-thread part (computed once) plus a constant per fragment register
    loads = node.attrs.get("ldmatrix")      # select-access-forms decided
    ldm_a, ldm_b, b_pairs = (loads.a, loads.b, loads.b_pairs) if loads is not None else (False, False, False)
    a_thread = (_ldmatrix_rows(em, plan, "a", False) if ldm_a else
                _thread_offset(em, plan.a, plan.a_stage.contrib))
    b_thread = (_ldmatrix_rows(em, plan, "b", b_pairs, rows_of_n) if ldm_b else
                _thread_offset(em, plan.b, plan.b_stage.contrib))
    a_ptr = b_ptr = None
    c_regs = list(acc.regs)
    for chunk, ksteps in enumerate(plan.chunks()):
        if chunk:   # every warp is done with the previous chunk (the first: insert-barriers decided)
            em.barrier()
        if lhs is not None:
            _stage(em, lhs, plan.a_stage, chunk, plan.trash)
        if rhs is not None:
            _stage(em, rhs, plan.b_stage, chunk, plan.trash)
        em.barrier()
        if a_ptr is None:
            a_ptr = (_ldmatrix_base if ldm_a else _smem_ptr)(em, _add(em, a_thread, plan.a_stage.base))
            b_ptr = (_ldmatrix_base if ldm_b else _smem_ptr)(em, _add(em, b_thread, plan.b_stage.base))
        for ks in ksteps:
            a_keys, b_keys, mmas = plan.kstep(ks)
            if ldm_a:
                a_words = {}
                for bt in range(plan.rb):
                    for mt in range(plan.rm):
                        ws = _ldmatrix(em, instr, a_ptr, plan.word_offset("a", plan.a_reg(0, ks, mt, bt)), 4, False,
                                       in_address=True)
                        a_words.update({(bt, mt, w): ws[w] for w in range(4)})
            else:
                a_words = {key: _load_word(em, instr, a_ptr, plan.word_offset("a", r)) for key, r in a_keys.items()}
            if ldm_b:
                b_words = {}
                for bt in range(plan.rb):
                    for nt in range(0, plan.rn, 2 if b_pairs else 1):
                        ws = _ldmatrix(em, instr, b_ptr, plan.word_offset("b", plan.b_reg(0, ks, nt, bt)),
                                       4 if b_pairs else 2, rows_of_n, in_address=True)
                        b_words.update({(bt, nt + j // 2, j % 2): w for j, w in enumerate(ws)})
            else:
                b_words = {key: _load_word(em, instr, b_ptr, plan.word_offset("b", r)) for key, r in b_keys.items()}
            for ak, bk, cs in mmas:
                d = _mma_call(em, op, instr, [a_words[x] for x in ak], [b_words[x] for x in bk],
                              [c_regs[j] for j in cs])
                for j, v in zip(cs, d):
                    c_regs[j] = v
    em.set(node.result, Tile(op.result.type, plan.c, c_regs))


def _ldmatrix_base(em: KernelEmitter, byte_off: str | int) -> str:
    """The pointer ldmatrix reads at, from a 32-bit shared address: its arithmetic stays in 32 bits (a
    getelementptr of the scratch array is split into 64-bit adds, one per term)."""
    start = em.b.value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    return em.b.value(f"inttoptr i32 {em.b.value(f'add i32 {start}, {byte_off}')} to {SHARED_PTR}", "sp")


def _ldmatrix_rows(em: KernelEmitter, plan: MmaPlan, role: str, pairs: bool, rows_of_n: bool = False) -> str:
    """i32 from the thread id: the row address (relative to the staging base and a fragment group's first
    word) this lane gives ldmatrix (tilegpu.analysis.mma.ldmatrix_lanes; for B in rows of N read by
    ldmatrix.trans, ldmatrix_trans_lanes), plus the warp's part."""
    lanes = (ldmatrix_trans_lanes(plan, plan.b_stage, pairs) if rows_of_n else ldmatrix_lanes(plan, role, pairs))
    if lanes is None:
        raise LoweringError("internal: select-access-forms chose ldmatrix for fragments it cannot read")
    layout, st = (plan.a, plan.a_stage) if role == "a" else (plan.b, plan.b_stage)
    return combine_bits(em, em.lane, list(lanes), _warp_offset(em, layout, st.contrib))[0]


@lowers("tilegpu.mma_landed")
def _mma_landed(em: KernelEmitter, op: Operation) -> None:
    a = op.operands.get("a_buffer")
    plan = op.attrs["mma_plan"]
    lower = lower_tcgen05_landed if isinstance(plan, Tcgen05Plan) else lower_wgmma_landed
    lower(em, op, plan, unit_offset(em, op), None if a is None else aligned_buffer(em, a.owner))


@lowers("tilegpu.stage_operand")
def _stage_operand(em: KernelEmitter, op: Operation) -> None:
    if isinstance(op.attrs.get("mma_plan"), WgmmaPlan):     # an attention loop's hoisted A, for wgmma
        stage_hoisted(em, op, op.attrs["mma_plan"], aligned_buffer(em, op.operands["buffer"].owner))
        return
    mma, role = op.attrs["mma"], op.attrs["role"]
    plan = recorded_plan(mma)
    st = replace(plan.a_stage if role == "a" else plan.b_stage, base=_buffer_offset(em, op))
    _stage(em, _operand_tile(em, op.operands["value"], plan.instr), st, 0, plan.trash)


@lowers("tilegpu.mma_prestaged")
def _mma_prestaged(em: KernelEmitter, op: Operation) -> None:
    mma = op.attrs["mma"]
    _lower_tensor_core(em, mma, recorded_plan(mma), op, (op.attrs["role"], _buffer_offset(em, op)))


def _buffer_offset(em: KernelEmitter, op: Operation) -> int:
    alloc = op.operands["buffer"].owner
    em.reserve_shared(alloc.attrs["offset"] + alloc.result.type.nbytes)
    return alloc.attrs["offset"]


# ---------------------------------------------------------------------------------------------------------
# the FMA path
# ---------------------------------------------------------------------------------------------------------

def _widen(em: KernelEmitter, x: str, elem: T.Type, to: str, signed: bool) -> str:
    lt = llvm_type(elem)
    if lt == to:
        return x
    if to == "i32":
        return em.b.value(f"{'sext' if signed else 'zext'} {lt} {x} to i32")
    if lt in ("half", "bfloat", "float") and to in ("float", "double"):
        return em.b.value(f"fpext {lt} {x} to {to}")
    raise LoweringError(f"cannot widen {elem} to {to}")


def _fma(em: KernelEmitter, lt: str, a: str, b: str, c: str) -> str:
    if lt == "i32":
        return em.b.value(f"add i32 {c}, {em.b.value(f'mul i32 {a}, {b}')}")
    suffix = {"half": "f16", "float": "f32", "double": "f64"}[lt]
    return em.b.call(lt, f"llvm.fma.{suffix}", [(lt, a), (lt, b), (lt, c)], hint="fma")


def _load_shared(em: KernelEmitter, llvm: str, align: int, fns: tuple, elem: T.Type, lt: str, signed: bool,
                 ptr: str, offset) -> str:
    """One operand element from its shared-memory staging, converted and widened to the accumulator type."""
    p = em.b.value(f"getelementptr i8, {SHARED_PTR} {ptr}, i32 {offset}", "sp")
    x = em.b.value(f"load {llvm}, {SHARED_PTR} {p}, align {align}")
    for f in fns:
        x = f(x)
    return _widen(em, x, elem, lt, signed)


def _fma_step(em: KernelEmitter, lt: str, ptrs, a_k: int, b_k: int, load_a, load_b, kk,
              current: list[str]) -> list[str]:
    """One k of an FMA matmul: current[i] += A[i's row, kk] * B[kk, i's column] (kk an int or an i32 value)."""
    if isinstance(kk, int):
        ao, bo = kk * a_k, kk * b_k
    else:
        ao = em.b.value(f"mul i32 {kk}, {a_k}")
        bo = em.b.value(f"mul i32 {kk}, {b_k}")
    out = []
    a_vals: dict[str, str] = {}
    for (pa, pb), cur in zip(ptrs, current):
        if pa not in a_vals:  # one A element serves every accumulator of its row
            a_vals[pa] = load_a(pa, ao)
        out.append(_fma(em, lt, a_vals[pa], load_b(pb, bo), cur))
    return out


def _lower_fma(em: KernelEmitter, op: Operation) -> None:
    res_ty: T.TileType = op.result.type
    layout = layout_of(res_ty)
    acc = em.expect(op.operands["acc"])
    lhs, rhs = em.get(op.operands["lhs"]), em.get(op.operands["rhs"])
    if _name(lhs.elem) in _FP8:
        lhs = _fp8_tile_to_f16(em, lhs)
    if _name(rhs.elem) in _FP8:
        rhs = _fp8_tile_to_f16(em, rhs)
    lt = llvm_type(res_ty.elem)
    sa = op.attrs.get("signedness_lhs", Signedness.signed) == Signedness.signed
    sb = op.attrs.get("signedness_rhs", Signedness.signed) == Signedness.signed
    plan = recorded_plan(op, FMA_PLAN)
    _at_scratch(plan, em.scratch_base(op))
    regs = list(acc.regs)
    single = _single_bit(layout)
    if single:
        a_t = _thread_offset(em, layout, lambda bs: _offset(bs, plan.a_row))
        b_t = _thread_offset(em, layout, lambda bs: _offset(bs, plan.b_col))
    uniq: dict[Coord, list[int]] = {}
    for r in range(layout.num_registers):
        uniq.setdefault(layout.register_coord(r), []).append(r)
    reps = [rs[0] for rs in uniq.values()]
    for chunk in range(plan.chunks()):
        if chunk:
            em.barrier()
        _stage(em, lhs, plan.a_stage, chunk, plan.trash)
        _stage(em, rhs, plan.b_stage, chunk, plan.trash)
        em.barrier()
        a_ptrs: dict[object, str] = {}
        ptrs = []
        for r in reps:
            if single:
                coord = layout.register_coord(r)
                a_key = _offset(coord, plan.a_row)
                if a_key not in a_ptrs:
                    a_ptrs[a_key] = _smem_ptr(em, _add(em, a_t, plan.a_stage.base + a_key))
                b_off = _add(em, b_t, plan.b_stage.base + _offset(coord, plan.b_col))
            else:
                cs = em.coords(layout, r)
                a_off, b_off = str(plan.a_stage.base), str(plan.b_stage.base)
                for c, sa_, sb_ in zip(cs, plan.a_row, plan.b_col):
                    if sa_:
                        a_off = em.b.value(f"add i32 {a_off}, {em.b.value(f'mul i32 {c}, {sa_}')}")
                    if sb_:
                        b_off = em.b.value(f"add i32 {b_off}, {em.b.value(f'mul i32 {c}, {sb_}')}")
                a_key = r
                a_ptrs[a_key] = _smem_ptr(em, a_off)
            ptrs.append((a_ptrs[a_key], _smem_ptr(em, b_off)))

        load_a = partial(_load_shared, em, lhs.llvm, plan.ea, (), lhs.elem, lt, sa)
        load_b = partial(_load_shared, em, rhs.llvm, plan.eb, (), rhs.elem, lt, sb)
        step = partial(_fma_step, em, lt, ptrs, plan.a_k, plan.b_k, load_a, load_b)

        cur = [regs[r] for r in reps]
        if op.attrs["fma_unrolled"]:   # select-access-forms decided
            for kk in range(plan.kc):
                cur = step(kk, cur)
        else:
            cur = em.counted_loop("0", str(plan.kc), [(lt, v) for v in cur], step)
        for r, v in zip(reps, cur):
            regs[r] = v
    for rs in uniq.values():
        for r in rs[1:]:
            regs[r] = regs[rs[0]]
    em.set(op.result, Tile(res_ty, layout, regs))


# ---------------------------------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------------------------------

@lowers("mmaf", "mmai")
def _mma(em: KernelEmitter, op: Operation) -> None:
    plan = recorded_plan(op)
    if plan is None:
        _lower_fma(em, op)
    elif isinstance(plan, Tcgen05Plan):     # before WgmmaPlan: a Tcgen05Plan is one
        lower_tcgen05(em, op, plan)
    elif isinstance(plan, WgmmaPlan):
        lower_wgmma(em, op, plan)
    else:
        _lower_tensor_core(em, op, plan)


# -- software-pipelined K-loops ------------------------------------------------------------------------------
#
# In a loop the pipeline pass expanded, the operands are not in registers: cp.async copied them into one of
# the stage buffers (A row-major ([b,] m, k) with k contiguous, B row-major ([b,] k, n)), in K chunks; each
# chunk's `tilegpu.mma_staged` reads its fragments straight from its buffer.

def _operand_element_fns(em: KernelEmitter, x, mma_elem: T.Type, to_half: bool) -> tuple[list, str, T.Type]:
    """Per-element functions from the staged element to the value the mma consumes (the reshape/ftof chain
    of the operand, then fp8 -> f16 where the instruction is f16), the LLVM type and element after them."""
    fns = []
    elem = x.elem
    for o in x.chain:
        if o.name == "ftof":
            fns.append(partial(_apply_ftof, em, o, llvm_type(elem)))
            elem = o.result.type.elem
    if to_half and _name(elem) in _FP8:
        fns.append(partial(_apply_fp8_to_half, em, _name(elem)))
        elem = T.F16
    return fns, llvm_type(elem), elem


def _apply_ftof(em: KernelEmitter, op: Operation, lt: str, v: str) -> str:
    from .lower_elementwise import _ftof
    return _ftof(em, op, lt, [v])


def _apply_fp8_to_half(em: KernelEmitter, kind: str, v: str) -> str:
    return fp8_to_half(em, v, kind)


def _pack_word(em: KernelEmitter, instr: Instr, elems: list[str], lt: str) -> str:
    """A fragment register from its `pack` elements (element 0 in the low bits)."""
    if instr.word == "<2 x half>":
        v = em.b.value(f"insertelement <2 x half> poison, half {elems[0]}, i32 0")
        return em.b.value(f"insertelement <2 x half> {v}, half {elems[1]}, i32 1")
    if instr.word == "double":
        return elems[0]
    bits = 32 // instr.pack
    word = None
    for j, x in enumerate(elems):
        if lt not in (f"i{bits}",):
            x = em.b.value(f"bitcast {lt} {x} to i{bits}")
        if bits < 32:
            x = em.b.value(f"zext i{bits} {x} to i32")
            if j:
                x = em.b.value(f"shl i32 {x}, {j * bits}")
        word = x if word is None else em.b.value(f"or i32 {word}, {x}")
    return word


def _staged_word(em: KernelEmitter, instr: Instr, ptr: str, off: int | None, step: int, x, fns, lt: str) -> str:
    """Fragment register at byte `off` of the operand's buffer (its elements `step` bytes apart)."""
    if off is None:  # K padding
        return _zero_word(instr)
    if not fns and x.eb == instr.elem_bytes and (instr.pack == 1 or step == x.eb):
        return _load_word(em, instr, ptr, off)
    elems = []
    for j in range(instr.pack):
        o = off + j * step
        p = ptr if o == 0 else em.b.value(f"getelementptr i8, {SHARED_PTR} {ptr}, i32 {o}", "sp")
        v = em.b.value(f"load {llvm_type(x.elem)}, {SHARED_PTR} {p}, align {x.eb}", "frag")
        for f in fns:
            v = f(v)
        elems.append(v)
    return _pack_word(em, instr, elems, lt)


def _unit_ptr(em: KernelEmitter, unit_off: str, thread: str, const: int) -> str:
    off = unit_off if thread == "0" else em.b.value(f"add i32 {unit_off}, {thread}")
    return _smem_ptr(em, _add(em, off, const))


def _warp_offset(em: KernelEmitter, layout: LinearLayout, contrib) -> str:
    """i32 from the thread id: the sum over this thread's set warp bits of contrib(basis)."""
    return over_thread_bits(em, layout, contrib, lanes=False)[0]


def _ldmatrix_thread(em: KernelEmitter, warp_part: str, rows_mask: int, row_bytes: int, hi_bytes: int) -> str:
    """Per-thread address offset of an ldmatrix: lanes 0-15 give rows 0-15 (masked: small tiles wrap, as
    their layouts do), lanes 16-31 the same rows `hi_bytes` further on."""
    row = em.thread_value(f"and i32 {em.lane}, {rows_mask}")
    off = em.thread_value(f"mul i32 {row}, {row_bytes}")
    if hi_bytes:
        hi = em.thread_value(f"lshr i32 {em.lane}, 4")
        off = em.thread_value(f"add i32 {off}, {em.thread_value(f'mul i32 {hi}, {hi_bytes}')}")
    return off if warp_part == "0" else em.thread_value(f"add i32 {off}, {warp_part}")


def _ldmatrix(em: KernelEmitter, instr: Instr, ptr: str, off: int, count: int, trans: bool,
              in_address: bool = False) -> list[str]:
    """`ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16` at ptr + off: `count` fragment registers.
    `in_address`: the constant offset goes into the instruction's address (`[r+off]`), so that the loads of
    one base share its register instead of an add each."""
    p = ptr if off == 0 or in_address else em.b.value(f"getelementptr i8, {SHARED_PTR} {ptr}, i32 {off}", "sp")
    p32 = em.b.value(f"ptrtoint {SHARED_PTR} {p} to i32")
    outs = ",".join(f"${j}" for j in range(count))
    rt = "{ " + ", ".join(["i32"] * count) + " }"
    addr = f"[${count}+{off}]" if in_address and off else f"[${count}]"
    res = em.b.asm(rt, f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 {{{outs}}}, "
                       f"{addr};", ",".join(["=r"] * count) + ",r,~{memory}", [("i32", p32)], hint="ldm")
    words = [em.b.value(f"extractvalue {rt} {res}, {j}") for j in range(count)]
    if instr.word != "i32":
        words = [em.b.value(f"bitcast i32 {w} to {instr.word}") for w in words]
    return words


def _swizzle_mask(x) -> int:
    """The address bits that move the 16-byte pieces of operand x's stage buffer: those of the swizzle its
    tensor copies wrote it with (0: none; tilegpu.analysis.tensor_maps.plan_staged_tensor_copy)."""
    return SWIZZLE_BYTES[x.tma.map.swizzle] - 16 if x.tma is not None else 0


def _fragment_rows(em: KernelEmitter, unit_off: str, thread: str, x, ptr: str):
    """A function of a constant byte offset within operand x's unswizzled layout (None: K padding): (pointer,
    offset) of what a read at the thread's address (`thread`: an ldmatrix row's, or an A word's, either
    within one 16-byte piece) plus that offset reads.  In a buffer a tensor copy swizzled, the 16-byte piece
    of an address is XOR-ed by its bits 7 and up, as TMA does on the absolute address; the buffer starts on
    the swizzle's repeat (tensor_maps.TensorCopy.repeat), so the address within it decides, and with the
    thread's part loop-invariant only the add of the buffer's start is left in the loop."""
    mask = _swizzle_mask(x)
    if not mask:
        return lambda off: (ptr, off)
    start = _add(em, unit_off, x.base)

    def at(off: int | None) -> tuple[str, int | None]:
        if off is None:
            return ptr, None
        row = em.b.value(f"add i32 {thread}, {off}") if off else thread
        moved = em.b.value(f"and i32 {em.b.value(f'lshr i32 {row}, 3')}, {mask}")
        return _smem_ptr(em, em.b.value(f"add i32 {start}, {em.b.value(f'xor i32 {row}, {moved}')}")), 0
    return at


@lowers("tilegpu.mma_staged")
def _mma_staged(em: KernelEmitter, staged: Operation) -> None:
    """One K chunk (`unit`) of a pipelined loop's mma, its A and B read from the stage buffer the copies
    filled.  16-bit operands read their fragments with ldmatrix (A: .x4, one m16 x k16 fragment; B:
    .x4.trans, two n8 x k16 ones).  The k steps, and so the accumulation order, are the synchronous
    lowering's: the results are bit-identical."""
    op = staged.attrs["mma"]
    plan = recorded_plan(op)
    unit_off = unit_offset(em, staged)
    if isinstance(plan, Tcgen05Plan):
        lower_tcgen05_staged(em, staged, plan, unit_off)
        return
    if isinstance(plan, WgmmaPlan):
        lower_wgmma_staged(em, staged, plan, unit_off)
        return
    if plan is None:
        _lower_fma_staged(em, staged, op, unit_off)
        return
    instr = plan.instr
    a, b = staged.attrs["a"], staged.attrs["b"]
    kc = staged.attrs["kc"]
    plan.kc = kc
    plan.a_stage = Staging(a.base, a.strides[a.lead:], plan.a.rank - 1, kc)
    plan.b_stage = Staging(b.base, b.strides[b.lead:], plan.b.rank - 2, kc)
    to_half = instr in (F16_F32, F16_F16)
    fa, lta, _ = _operand_element_fns(em, a, op.operands["lhs"].type.elem, to_half)
    fb, ltb, _ = _operand_element_fns(em, b, op.operands["rhs"].type.elem, to_half)
    acc = em.expect(staged.operands["acc"])
    loads = staged.attrs["ldmatrix"]   # select-access-forms decided
    ldm_a, ldm_b, b_pairs = loads.a, loads.b, loads.b_pairs
    if ldm_a:
        a_thread = _ldmatrix_thread(em, _warp_offset(em, plan.a, plan.a_stage.contrib), min(plan.M, 16) - 1,
                                    a.row, 8 * a.eb)
    else:
        a_thread = _thread_offset(em, plan.a, plan.a_stage.contrib)
    if ldm_b:
        b_thread = _ldmatrix_thread(em, _warp_offset(em, plan.b, plan.b_stage.contrib), 15, b.row,
                                    8 * plan.wn * b.eb if b_pairs else 0)
    else:
        b_thread = _thread_offset(em, plan.b, plan.b_stage.contrib)
    if _swizzle_mask(b) and not ldm_b:     # B's words gather elements of several rows
        raise LoweringError("a tensor copy swizzled B's stage buffer, whose fragments are not read by ldmatrix")
    c_regs = list(acc.regs)
    for ksteps in plan.chunks()[staged.attrs["unit"]:staged.attrs["unit"] + 1]:
        a_ptr = _unit_ptr(em, unit_off, a_thread, a.base)
        b_ptr = _unit_ptr(em, unit_off, b_thread, b.base)
        a_rows = _fragment_rows(em, unit_off, a_thread, a, a_ptr)
        b_rows = _fragment_rows(em, unit_off, b_thread, b, b_ptr)
        for ks in ksteps:
            a_keys, b_keys, mmas = plan.kstep(ks)
            if ldm_a:
                a_words = {}
                for bt in range(plan.rb):
                    for mt in range(plan.rm):
                        ws = _ldmatrix(em, instr, *a_rows(plan.word_offset("a", plan.a_reg(0, ks, mt, bt))), 4, False)
                        a_words.update({(bt, mt, w): ws[w] for w in range(4)})
            else:
                a_words = {key: _staged_word(em, instr, *a_rows(plan.word_offset("a", r)), a.eb, a, fa, lta)
                           for key, r in a_keys.items()}
            if ldm_b:
                b_words = {}
                for bt in range(plan.rb):
                    for nt in range(0, plan.rn, 2 if b_pairs else 1):
                        ws = _ldmatrix(em, instr, *b_rows(plan.word_offset("b", plan.b_reg(0, ks, nt, bt))),
                                       4 if b_pairs else 2, True)
                        for j, w in enumerate(ws):
                            b_words[(bt, nt + j // 2, j % 2)] = w
            else:
                b_words = {key: _staged_word(em, instr, b_ptr, plan.word_offset("b", r), b.row, b, fb, ltb)
                           for key, r in b_keys.items()}
            for ak, bk, cs in mmas:
                d = _mma_call(em, op, instr, [a_words[x] for x in ak], [b_words[x] for x in bk],
                              [c_regs[j] for j in cs])
                for j, v in zip(cs, d):
                    c_regs[j] = v
    em.set(staged.result, Tile(staged.result.type, plan.c, c_regs))


def _lower_fma_staged(em: KernelEmitter, staged: Operation, op: Operation, unit_off: str) -> None:
    """One K chunk of the FMA chain of a pipelined loop: as `_lower_fma`, reading A and B from a stage buffer."""
    res_ty: T.TileType = staged.result.type
    layout = layout_of(res_ty)
    acc = em.expect(staged.operands["acc"])
    a, b = staged.attrs["a"], staged.attrs["b"]
    fa, _, elem_a = _operand_element_fns(em, a, op.operands["lhs"].type.elem, True)
    fb, _, elem_b = _operand_element_fns(em, b, op.operands["rhs"].type.elem, True)
    lt = llvm_type(res_ty.elem)
    sa = op.attrs.get("signedness_lhs", Signedness.signed) == Signedness.signed
    sb = op.attrs.get("signedness_rhs", Signedness.signed) == Signedness.signed
    kc = staged.attrs["kc"]
    batched = len(res_ty.shape) == 3
    sta, stb = a.strides[a.lead:], b.strides[b.lead:]
    # result coordinate ([b,] m, n) -> byte offset of its A row / B column start; then per-k strides
    a_row = ((sta[0],) if batched else ()) + (sta[-2], 0)
    b_col = ((stb[0],) if batched else ()) + (0, stb[-1])
    a_k, b_k = sta[-1], stb[-2]
    regs = list(acc.regs)
    single = _single_bit(layout)
    if single:
        a_t = _thread_offset(em, layout, lambda bs: _offset(bs, a_row))
        b_t = _thread_offset(em, layout, lambda bs: _offset(bs, b_col))
    uniq: dict[Coord, list[int]] = {}
    for r in range(layout.num_registers):
        uniq.setdefault(layout.register_coord(r), []).append(r)
    reps = [rs[0] for rs in uniq.values()]
    a_ptrs: dict[object, str] = {}
    ptrs = []
    for r in reps:
        if single:
            coord = layout.register_coord(r)
            a_key = _offset(coord, a_row)
            if a_key not in a_ptrs:
                a_ptrs[a_key] = _unit_ptr(em, unit_off, a_t, a.base + a_key)
            b_ptr = _unit_ptr(em, unit_off, b_t, b.base + _offset(coord, b_col))
        else:
            cs = em.coords(layout, r)
            a_off, b_off = str(a.base), str(b.base)
            for c, sa_, sb_ in zip(cs, a_row, b_col):
                if sa_:
                    a_off = em.b.value(f"add i32 {a_off}, {em.b.value(f'mul i32 {c}, {sa_}')}")
                if sb_:
                    b_off = em.b.value(f"add i32 {b_off}, {em.b.value(f'mul i32 {c}, {sb_}')}")
            a_key = r
            a_ptrs[a_key] = _smem_ptr(em, em.b.value(f"add i32 {unit_off}, {a_off}"))
            b_ptr = _smem_ptr(em, em.b.value(f"add i32 {unit_off}, {b_off}"))
        ptrs.append((a_ptrs[a_key], b_ptr))

    load_a = partial(_load_shared, em, llvm_type(a.elem), a.eb, tuple(fa), elem_a, lt, sa)
    load_b = partial(_load_shared, em, llvm_type(b.elem), b.eb, tuple(fb), elem_b, lt, sb)
    step = partial(_fma_step, em, lt, ptrs, a_k, b_k, load_a, load_b)

    cur = [regs[r] for r in reps]
    if staged.attrs["fma_unrolled"]:   # select-access-forms decided
        for kk in range(kc):
            cur = step(kk, cur)
    else:
        cur = em.counted_loop("0", str(kc), [(lt, v) for v in cur], step)
    for r, v in zip(reps, cur):
        regs[r] = v
    for rs in uniq.values():
        for r in rs[1:]:
            regs[r] = regs[rs[0]]
    em.set(staged.result, Tile(res_ty, layout, regs))
