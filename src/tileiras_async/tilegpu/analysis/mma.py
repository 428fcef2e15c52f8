"""Tensor-core planning: which instruction an mma becomes and how its tiles map to warps and registers.

Pure Python, no code emission: assign-layouts decides with it, code generation (codegen/lower_mma.py)
follows the plan.  What runs where:

| operands                  | accumulator | instruction                                   | notes                        |
|---------------------------|-------------|-----------------------------------------------|------------------------------|
| f16                       | f32 / f16   | mma.sync m16n8k16 .f16                        |                              |
| bf16                      | f32         | mma.sync m16n8k16 .bf16                       |                              |
| tf32                      | f32         | mma.sync m16n8k8 .tf32                        |                              |
| i8 (s8/u8 per signedness) | i32         | mma.sync m16n8k32 .s8/.u8                     |                              |
| f64                       | f64         | mma.sync m8n8k4 .f64                          |                              |
| f8E4M3FN / f8E5M2         | f32 / f16   | mma.sync m16n8k32 .e4m3/.e5m2                 | sm_89+ and PTX ISA >= 8.4 (f32) / 8.7 (f16 acc) |
| f8E4M3FN / f8E5M2         | f32 / f16   | otherwise: exact conversion to f16, then m16n8k16 .f16 |                     |
| f32                       | f32         | FMA chain (fma.rn.f32, k ascending)           | what NVIDIA's tileiras emits for f32 x f32: exact fp32 products, not TF32 |

Shapes too small for the instruction in K (K below half the instruction's K) also use the FMA chain.  M and N
smaller than the instruction tile wrap (replicated rows/columns: zero bases of the layout); K smaller than the
instruction K is padded with zero fragment registers.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from ...ir import types as T
from ...ir.core import Block, Operation, Value
from ..ir import own_ops
from ..layout import WARP_SIZE, LinearLayout
from ..errors import LoweringError
from ..options import CodegenOptions
from ..types import elem_bytes
from .tcgen05 import Tcgen05Plan, select_tcgen05
from .wgmma import WgmmaPlan, select_wgmma

Coord = tuple[int, ...]

SHARED_LIMIT = 48 * 1024    # static shared memory a kernel may declare without opt-in
ROW_PAD_BYTES = 16          # per staged row: keeps the 8 rows a fragment load touches in distinct banks
STAGE_BUDGET = SHARED_LIMIT  # the scratch buffer may grow up to the static shared-memory limit
MMA_UNROLL_LIMIT = 4096     # mma instructions per warp the fully unrolled lowering accepts (LLVM time)

# ---------------------------------------------------------------------------------------------------------
# instructions and their fragments (pure Python)
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Instr:
    """One mma.sync shape/type.  `elem_bits`: A/B element size as staged; `word`: LLVM type of one A/B
    fragment register; `acc`: LLVM type of an accumulator element."""
    key: str
    m: int
    n: int
    k: int
    elem_bits: int
    word: str
    acc: str

    @property
    def pack(self) -> int:
        """A/B elements per fragment register."""
        return max(1, 32 // self.elem_bits)

    @property
    def elem_bytes(self) -> int:
        return self.elem_bits // 8

    @property
    def word_bytes(self) -> int:
        return self.pack * self.elem_bytes

    @property
    def a_regs(self) -> int:
        return self.m * self.k // WARP_SIZE // self.pack

    @property
    def b_regs(self) -> int:
        return self.k * self.n // WARP_SIZE // self.pack

    @property
    def c_elems(self) -> int:
        return self.m * self.n // WARP_SIZE


F16_F32 = Instr("f16.f32", 16, 8, 16, 16, "<2 x half>", "float")
F16_F16 = Instr("f16.f16", 16, 8, 16, 16, "<2 x half>", "half")
BF16_F32 = Instr("bf16.f32", 16, 8, 16, 16, "i32", "float")
TF32_F32 = Instr("tf32.f32", 16, 8, 8, 32, "i32", "float")
I8_I32 = Instr("i8.i32", 16, 8, 32, 8, "i32", "i32")
F8_F32 = Instr("f8.f32", 16, 8, 32, 8, "i32", "float")
F8_F16 = Instr("f8.f16", 16, 8, 32, 8, "i32", "half")
F64_F64 = Instr("f64.f64", 8, 8, 4, 64, "double", "double")
INSTRS = (F16_F32, F16_F16, BF16_F32, TF32_F32, I8_I32, F8_F32, F8_F16, F64_F64)
INSTRS_BY_KEY = {i.key: i for i in INSTRS}


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


def fragment_bases(instr: Instr, role: str) -> tuple[tuple[Coord, ...], tuple[Coord, ...]]:
    """(register bases, lane bases) of one instruction's fragment, as in the PTX ISA tables.

    role "a": coordinates (row, k) of the M x K operand; register bits: the elements packed in one 32-bit
    register (k + 1, 2, ...), then the register index (row + 8, k + K/2).  role "b": (k, col) of the K x N
    operand; element bits (k), then register bits (k + K/2).  role "c": (row, col) of the accumulator; element
    bits col + 1, row + 8.  Lanes: groupID = lane >> 2 (rows of A and C, columns of B),
    threadID_in_group = lane % 4 (k of A and B in units of `pack`, columns of C in pairs).
    """
    p = instr.pack
    pack_k = [1 << i for i in range(_log2(p))]
    if instr.m == 16:
        if role == "a":
            return (tuple((0, k) for k in pack_k) + ((8, 0), (0, instr.k // 2)),
                    ((0, p), (0, 2 * p), (1, 0), (2, 0), (4, 0)))
        if role == "b":
            return (tuple((k, 0) for k in pack_k) + ((instr.k // 2, 0),),
                    ((p, 0), (2 * p, 0), (0, 1), (0, 2), (0, 4)))
        if role == "c":
            return ((0, 1), (8, 0)), ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
    elif instr.m == 8:  # m8n8k4 .f64: one element per register for A and B, two for C
        if role == "a":
            return (), ((0, 1), (0, 2), (1, 0), (2, 0), (4, 0))
        if role == "b":
            return (), ((1, 0), (2, 0), (0, 1), (0, 2), (0, 4))
        if role == "c":
            return ((0, 1),), ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
    raise ValueError(f"no fragment {role!r} for {instr.key}")


def fragment_layout(instr: Instr, role: str) -> LinearLayout:
    """One warp's fragment of one instruction as a LinearLayout (0 warp bits)."""
    shape = {"a": (instr.m, instr.k), "b": (instr.k, instr.n), "c": (instr.m, instr.n)}[role]
    reg, lane = fragment_bases(instr, role)
    return LinearLayout(shape, (reg, lane, ()))


# ---------------------------------------------------------------------------------------------------------
# the plan of one op: layouts of A, B and C over the CTA, and which registers feed which instruction
# ---------------------------------------------------------------------------------------------------------

def _fit(coord: Coord, shape: tuple[int, ...]) -> Coord:
    """A single-bit basis outside the tile becomes zero: that bit wraps around (replicates)."""
    return coord if all(c < s for c, s in zip(coord, shape)) else (0,) * len(shape)


def choose_warps(num_warps: int, batch: int, tiles_m: int, tiles_n: int,
                 a_regs: int, b_regs: int) -> tuple[int, int, int]:
    """(warps over batch, over m tiles, over n tiles); leftover warps replicate.  Batch first; then the M x N
    split with the least replication and, among those, the fewest fragment registers per warp and k step."""
    wb = min(num_warps, batch)
    rest = num_warps // wb
    best = None
    wm = 1
    while wm <= rest:
        wn = min(rest // wm, tiles_n)
        if wm <= tiles_m:
            used = wm * wn
            load = (tiles_m // wm) * a_regs + (tiles_n // wn) * b_regs
            key = (-used, load, -wm)
            if best is None or key < best[0]:
                best = (key, wm, wn)
        wm *= 2
    return wb, best[1], best[2]


@dataclass(frozen=True)
class Staging:
    """Where an operand tile lives in shared memory: the element at `coord` is at
    base + sum(coord[d] * strides[d]) bytes, with k (dimension `kdim`) taken modulo the chunk size kc;
    `hi(coord)` (k rounded down to a chunk) says which chunk holds it."""
    base: int
    strides: tuple[int, ...]
    kdim: int
    kc: int

    def contrib(self, coord: Coord) -> int:
        """Byte offset of a coordinate (or of one basis vector) relative to `base`."""
        c = list(coord)
        c[self.kdim] &= self.kc - 1
        return sum(x * s for x, s in zip(c, self.strides))

    def hi(self, coord: Coord) -> int:
        return coord[self.kdim] & ~(self.kc - 1)


def _chunk_k(row_bytes_per_k: int, k: int, pad_bytes: int, min_kc: int) -> tuple[int, int]:
    """(k per chunk, staging bytes): the largest power-of-two chunk whose staging fits the budget.
    `row_bytes_per_k`: bytes per unit of k summed over all staged rows; `pad_bytes`: fixed padding."""
    kc = k
    while row_bytes_per_k * kc + pad_bytes + 16 > STAGE_BUDGET and kc > min_kc:
        kc //= 2
    need = row_bytes_per_k * kc + pad_bytes + 16  # + a 16-byte trash slot for thread-dependent chunking
    if need > STAGE_BUDGET:
        raise LoweringError(f"mma operands need {need} bytes of shared memory per K chunk (limit {STAGE_BUDGET})")
    return kc, need


@dataclass
class MmaPlan:
    """How one mma op runs on the tensor cores: the A, B and C layouts over the CTA, the shared-memory
    staging of A (row-major, B x M x K) and B (transposed, B x N x K), and which registers feed which mma."""
    instr: Instr
    batched: bool
    B: int
    M: int
    N: int
    K: int
    num_warps: int
    warps_m: int | None = None   # force the M x N warp split (defaults to `choose_warps`)

    def __post_init__(self):
        i = self.instr
        self.Kp = max(self.K, i.k)
        self.tk = self.Kp // i.k
        self.tiles_m = max(1, self.M // i.m)
        self.tiles_n = max(1, self.N // i.n)
        if self.warps_m is None:
            self.wb, self.wm, self.wn = choose_warps(self.num_warps, self.B, self.tiles_m, self.tiles_n,
                                                     i.a_regs, i.b_regs)
        else:
            self.wb = min(self.num_warps, self.B)
            self.wm = self.warps_m
            self.wn = self.num_warps // self.wb // self.wm
        # tiles each warp does in registers
        self.rb = max(1, self.B // self.wb)
        self.rm = max(1, self.tiles_m // self.wm)
        self.rn = max(1, self.tiles_n // self.wn)
        self.a = self._layout("a")
        self.b = self._layout("b")
        self.c = self._layout("c")
        # shared memory: rows of kc elements plus ROW_PAD_BYTES; A rows first, then B rows, then a trash slot
        e = i.elem_bytes
        rows_a, rows_b = self.B * self.M, self.B * self.N
        self.kc, self.smem_bytes = _chunk_k((rows_a + rows_b) * e, self.K, (rows_a + rows_b) * ROW_PAD_BYTES,
                                            min(self.K, i.k))
        self.row_bytes = self.kc * e + ROW_PAD_BYTES
        rb = self.row_bytes
        lead_a = (self.M * rb,) if self.batched else ()
        lead_b = (self.N * rb,) if self.batched else ()
        self.a_stage = Staging(0, lead_a + (rb, e), self.a.rank - 1, self.kc)          # (b, m, k)
        self.b_stage = Staging(rows_a * rb, lead_b + (e, rb), self.b.rank - 2, self.kc)  # (b, k, n)
        self.trash = (rows_a + rows_b) * rb

    # -- layouts ----------------------------------------------------------------------------------
    def _shape(self, role: str) -> tuple[int, ...]:
        rc = {"a": (self.M, self.Kp), "b": (self.Kp, self.N), "c": (self.M, self.N)}[role]
        return ((self.B,) + rc) if self.batched else rc

    def _embed(self, rc: Coord, b: int = 0) -> Coord:
        return ((b,) + tuple(rc)) if self.batched else tuple(rc)

    def _layout(self, role: str) -> LinearLayout:
        i = self.instr
        shape = self._shape(role)
        frag_reg, frag_lane = fragment_bases(i, role)

        def rowcol(row=0, col=0, k=0):
            return {"a": (row, k), "b": (k, col), "c": (row, col)}[role]

        uses_m, uses_n = role in ("a", "c"), role in ("b", "c")
        # warp bits: batch, then m tiles, then n tiles (zero where the operand does not depend on them)
        warp = []
        for j in range(_log2(self.wb)):
            warp.append(self._embed(rowcol(), 1 << j))
        for j in range(_log2(self.wm)):
            warp.append(self._embed(rowcol(row=i.m << j) if uses_m else rowcol()))
        for j in range(_log2(self.wn)):
            warp.append(self._embed(rowcol(col=i.n << j) if uses_n else rowcol()))
        while len(warp) < _log2(self.num_warps):
            warp.append(self._embed(rowcol()))
        # register bits: the fragment, then (a, b) k steps, then n tiles (c, b), m tiles (c, a), batch
        reg = [self._embed(r) for r in frag_reg]
        if role in ("a", "b"):
            reg += [self._embed(rowcol(k=i.k << j)) for j in range(_log2(self.tk))]
        if role in ("b", "c"):
            reg += [self._embed(rowcol(col=(i.n * self.wn) << j)) for j in range(_log2(self.rn))]
        if role in ("a", "c"):
            reg += [self._embed(rowcol(row=(i.m * self.wm) << j)) for j in range(_log2(self.rm))]
        reg += [self._embed(rowcol(), self.wb << j) for j in range(_log2(self.rb))]
        lane = [self._embed(r) for r in frag_lane]
        return LinearLayout(shape, tuple(tuple(_fit(c, shape) for c in bases) for bases in (reg, lane, warp)))

    # -- register indices -------------------------------------------------------------------------------
    def a_reg(self, word: int, ks: int, mt: int, bt: int) -> int:
        """Register (of layout `a`) holding the first element of A fragment register `word` of k step ks,
        m tile mt and batch tile bt (tile indices count this warp's tiles)."""
        p = self.instr.pack
        return p * (word + self.instr.a_regs * (ks + self.tk * (mt + self.rm * bt)))

    def b_reg(self, word: int, ks: int, nt: int, bt: int) -> int:
        p = self.instr.pack
        return p * (word + self.instr.b_regs * (ks + self.tk * (nt + self.rn * bt)))

    def c_reg(self, elem: int, mt: int, nt: int, bt: int) -> int:
        return elem + self.instr.c_elems * (nt + self.rn * (mt + self.rm * bt))

    # -- the program -------------------------------------------------------------------------------------
    def chunks(self) -> list[range]:
        """Per K chunk staged in shared memory, the k steps it feeds."""
        per = max(1, self.kc // self.instr.k)
        return [range(c * per, min(self.tk, (c + 1) * per)) for c in range(max(1, self.K // self.kc))]

    def word_offset(self, role: str, reg: int) -> int | None:
        """Constant part (relative to the staging base) of the address of the fragment register that starts
        at register `reg` of layout a/b; None when it lies in the K padding (the register is zero)."""
        layout, st = (self.a, self.a_stage) if role == "a" else (self.b, self.b_stage)
        coord = layout.register_coord(reg)
        if coord[st.kdim] >= self.K:
            return None
        return st.contrib(coord)

    def kstep(self, ks: int):
        """A and B fragment registers to load for k step ks, keyed (bt, mt|nt, word) -> register index, and
        the mmas: (A keys, B keys, C register indices)."""
        i = self.instr
        a_words = {(bt, mt, w): self.a_reg(w, ks, mt, bt)
                   for bt in range(self.rb) for mt in range(self.rm) for w in range(i.a_regs)}
        b_words = {(bt, nt, w): self.b_reg(w, ks, nt, bt)
                   for bt in range(self.rb) for nt in range(self.rn) for w in range(i.b_regs)}
        mmas = [([(bt, mt, w) for w in range(i.a_regs)], [(bt, nt, w) for w in range(i.b_regs)],
                 [self.c_reg(j, mt, nt, bt) for j in range(i.c_elems)])
                for bt in range(self.rb) for mt in range(self.rm) for nt in range(self.rn)]
        return a_words, b_words, mmas


LDMATRIX_ROW_BYTES = 16     # one row of an 8x8 block of 16-bit elements


def _fragment_groups(plan: "MmaPlan", role: str, pairs: bool) -> list[list[int]]:
    """The registers (of layout a/b) one ldmatrix reads, per group, in its result order: A's four words of one
    m16k16 fragment; B's two of one n8k16 fragment, or (`pairs`) those of n tiles nt and nt + 1."""
    i = plan.instr
    groups = []
    for ks in range(plan.tk):
        for bt in range(plan.rb):
            if role == "a":
                groups += [[plan.a_reg(w, ks, mt, bt) for w in range(i.a_regs)] for mt in range(plan.rm)]
            else:
                tiles = [(nt, nt + 1) for nt in range(0, plan.rn, 2)] if pairs else [(nt,) for nt in range(plan.rn)]
                groups += [[plan.b_reg(w, ks, nt, bt) for nt in ts for w in range(i.b_regs)] for ts in tiles]
    return groups


def ldmatrix_lanes(plan: "MmaPlan", role: str, pairs: bool = False) -> tuple[int, ...] | None:
    """What each lane-id bit adds to the shared-memory row address a lane gives `ldmatrix` (bits 0-2: the row
    of an 8x8 block, bits 3-4: the block, the group's registers in order) so that it loads exactly the
    fragment words of a synchronous mma's operand `role` that `word_offset` addresses one by one -- relative
    to the group's first word, the warp part unchanged; None where it would not (an instruction other than
    m16n8k16 on 16-bit elements, K padding or chunks under 16, block rows that are not 16 contiguous bytes at
    16-byte boundaries, groups whose blocks lie differently)."""
    i = plan.instr
    if (i.m, i.k, i.elem_bits) != (16, 16, 16) or plan.K < 16 or plan.kc < 16 or plan.M < 16 or plan.N < 8:
        return None
    if role == "b" and pairs and plan.rn < 2:
        return None
    layout, st = (plan.a, plan.a_stage) if role == "a" else (plan.b, plan.b_stage)

    def lane_part(lane: int) -> int:
        return sum(st.contrib(b) for bit, b in enumerate(layout.bases[1]) if lane >> bit & 1)

    groups = _fragment_groups(plan, role, pairs)
    offsets = [[plan.word_offset(role, r) for r in g] for g in groups]
    if any(o is None for g in offsets for o in g):
        return None
    deltas = [o - offsets[0][0] for o in offsets[0]]
    if any([o - g[0] for o in g] != deltas for g in offsets):
        return None
    # lane L gives row L & 7 of block L >> 3: the row a lane 4 * (L & 7) holds the first word of
    blocks = deltas + [0] * (4 - len(deltas))     # .x2: lanes 16-31 give no address
    if len(deltas) == 4 and blocks[3] != blocks[1] + blocks[2]:
        return None
    lanes = (lane_part(4), lane_part(8), lane_part(16), blocks[1], blocks[2])
    for r in (reg for g in groups for reg in g):   # a word is two neighbouring elements
        if st.contrib(layout.register_coord(r + 1)) != st.contrib(layout.register_coord(r)) + 2:
            return None
    for lane in range(32):
        for j, d in enumerate(deltas):
            source = sum(c for bit, c in enumerate(lanes) if (8 * j + (lane >> 2)) >> bit & 1)
            if source + 4 * (lane & 3) != lane_part(lane) + d:
                return None
    aligned = list(lanes) + [g[0] for g in offsets] + [st.contrib(b) for b in layout.bases[2]]
    return lanes if all(x % LDMATRIX_ROW_BYTES == 0 for x in aligned) else None


def rows_of_n_stage(plan: "MmaPlan") -> Staging | None:
    """B staged in rows of N (k-major rows of N elements plus ROW_PAD_BYTES) instead of transposed, in the
    same bytes: what a B whose registers run along N (a V tile, rows of N contiguous in memory) is stored
    into with vectors, its fragments then read by ldmatrix.trans. None where it does not fit the plan's
    staging (batched, K in several chunks, an instruction other than m16n8k16 on 16-bit elements, rows that
    are not whole 16-byte units, more bytes than the transposed rows)."""
    i = plan.instr
    if plan.batched or plan.kc != plan.K or (i.m, i.k, i.elem_bits) != (16, 16, 16) or plan.K < 16:
        return None
    row = plan.N * i.elem_bytes + ROW_PAD_BYTES
    if (plan.N * i.elem_bytes) % LDMATRIX_ROW_BYTES or plan.b_stage.base + plan.K * row > plan.trash:
        return None
    return Staging(plan.b_stage.base, (row, i.elem_bytes), plan.b.rank - 2, plan.kc)


def ldmatrix_trans_lanes(plan: "MmaPlan", st: Staging, pairs: bool = False) -> tuple[int, ...] | None:
    """As `ldmatrix_lanes`, for B staged in rows of N (`rows_of_n_stage`) and read by ldmatrix.trans: block j
    of a group holds fragment word j's 8 k rows of 8 n; lane L gives row L & 7 of block L >> 3 (bits 0-2: one
    row of N further each, bits 3-4: the blocks). Relative to the staging base plus the group's first
    element; None where the blocks do not lie alike in every group or a row is not 16 aligned bytes."""
    i = plan.instr
    if (i.m, i.k, i.elem_bits) != (16, 16, 16) or (pairs and plan.rn < 2):
        return None
    layout = plan.b
    groups = _fragment_groups(plan, "b", pairs)
    firsts = [[st.contrib(layout.register_coord(r)) for r in g] for g in groups]
    deltas = [o - firsts[0][0] for o in firsts[0]]
    if any([o - g[0] for o in g] != deltas for g in firsts):
        return None
    blocks = deltas + [0] * (4 - len(deltas))
    if len(deltas) == 4 and blocks[3] != blocks[1] + blocks[2]:
        return None
    k_row = st.strides[st.kdim]
    lanes = (k_row, 2 * k_row, 4 * k_row, blocks[1], blocks[2])
    e = i.elem_bytes
    for lane in range(32):
        for j, reg in enumerate(groups[0]):
            row = 2 * (lane % 4)         # .trans: lane l takes rows 2 (l % 4) and +1 of column l / 4
            block = sum(c for bit, c in enumerate(lanes) if (8 * j) >> bit & 1) + firsts[0][0]
            for x in range(2):
                if block + (row + x) * k_row + (lane // 4) * e != st.contrib(layout.apply(reg + x, lane, 0)):
                    return None
    warp = [st.contrib(b) for b in layout.bases[2]]
    aligned = list(lanes) + [g[0] for g in firsts] + warp + [st.base]
    return lanes if all(x % LDMATRIX_ROW_BYTES == 0 for x in aligned) else None


@dataclass
class FmaPlan:
    """The FMA chain: A (B x M x K) and B (B x K x N) row-major in shared memory (in K chunks); result
    register at (b, m, n) = acc + sum_k A[b, m, k] * B[b, k, n], k ascending."""
    batched: bool
    B: int
    M: int
    N: int
    K: int
    ea: int   # staged element bytes of A and B
    eb: int

    def __post_init__(self):
        self.kc, self.smem_bytes = _chunk_k(self.B * (self.M * self.ea + self.N * self.eb), self.K, 0, 1)
        kc, lead = self.kc, self.batched
        self.a_stage = Staging(0, ((self.M * kc * self.ea,) if lead else ()) + (kc * self.ea, self.ea),
                               2 if lead else 1, kc)
        b_base = self.B * self.M * kc * self.ea
        self.b_stage = Staging(b_base, ((kc * self.N * self.eb,) if lead else ()) + (self.N * self.eb, self.eb),
                               1 if lead else 0, kc)
        self.trash = self.smem_bytes - 16
        # per result coordinate (b, m, n): where its A row and B column start; then k strides
        self.a_row = ((self.M * kc * self.ea,) if lead else ()) + (kc * self.ea, 0)
        self.b_col = ((kc * self.N * self.eb,) if lead else ()) + (0, self.eb)
        self.a_k, self.b_k = self.ea, self.N * self.eb

    def chunks(self) -> int:
        return max(1, self.K // self.kc)


# ---------------------------------------------------------------------------------------------------------
# choosing the lowering
# ---------------------------------------------------------------------------------------------------------

_FP8 = ("f8E4M3FN", "f8E5M2")
_ACC_LLVM = {"f32": "float", "f16": "half", "f64": "double", "i32": "i32"}  # Instr.acc per element

def native_fp8(options: CodegenOptions, acc_elem: T.Type) -> bool:
    """mma.sync with .e4m3/.e5m2 needs sm_89+ and PTX ISA 8.4 (8.7 with an f16 accumulator)."""
    tgt = options.known_target
    if tgt is None or not tgt.has_fp8_mma:
        return False
    return tgt.emitted_ptx_isa >= ((8, 7) if acc_elem == T.F16 else (8, 4))


def _dims(ty: T.TileType) -> tuple[bool, int, int, int]:
    if len(ty.shape) == 3:
        return True, ty.shape[0], ty.shape[1], ty.shape[2]
    if len(ty.shape) == 2:
        return False, 1, ty.shape[0], ty.shape[1]
    raise LoweringError(f"mma operands must be 2-D or 3-D, got {ty}")


def _name(t: T.Type) -> str:
    return getattr(t, "name", "") or ""


def select_instr(options: CodegenOptions, op: Operation) -> Instr | None:
    """The tensor-core instruction for this op, or None for the FMA chain (what select-mma chose, once it ran)."""
    chosen = op.attrs.get("instruction")
    if chosen is not None and not chosen.startswith((WGMMA_PREFIX, TCGEN05_PREFIX)):
        return None if chosen == "fma" else INSTRS_BY_KEY[chosen]
    lhs: T.TileType = op.operands["lhs"].type
    acc: T.TileType = op.operands["acc"].type
    a, c = lhs.elem, acc.elem
    _, _, _, k = _dims(lhs)
    if op.name == "mmai":
        instr = I8_I32
    elif a == T.F16 or _name(a) in _FP8:
        if _name(a) in _FP8 and native_fp8(options, c):
            instr = F8_F16 if c == T.F16 else F8_F32
        else:
            instr = F16_F16 if c == T.F16 else F16_F32
    elif a == T.BF16:
        instr = BF16_F32
    elif a == T.TF32:
        instr = TF32_F32
    elif a == T.F64:
        instr = F64_F64
    else:
        return None  # f32 x f32: exact FMA chain, as NVIDIA's tileiras does
    if instr.acc != _ACC_LLVM.get(getattr(c, 'name', None) or str(c)):
        raise LoweringError(f"no mma for {a} x {a} -> {c}")
    if k < max(4, instr.k // 2):  # below this the thread's k range of a fragment register leaves the tile
        return None
    return instr


WGMMA_PREFIX = "wgmma."     # `instruction` attribute of an mma that runs on wgmma: "wgmma." + WgmmaInstr key
TCGEN05_PREFIX = "tcgen05."  # ... on Blackwell's tcgen05.mma: "tcgen05." + WgmmaInstr key (tilegpu.analysis.tcgen05)
TCGEN05_DEFAULT = True      # "auto" picks tcgen05 on sm_100 (else only mma_instruction="tcgen05" does)


def tcgen05_wanted(options: CodegenOptions) -> bool:
    """Whether the options let select-mma consider tcgen05 (sm_100: where NVIDIA's tileiras uses UTCHMMA)."""
    want = getattr(options, "mma_instruction", "auto")
    return want == "tcgen05" or (want == "auto" and TCGEN05_DEFAULT)


def choose_instruction(options: CodegenOptions, op: Operation) -> str:
    """What select-mma records for an mmaf/mmai: "wgmma.<key>" where Hopper's warpgroup MMA applies (sm_90,
    tiles of 64+ rows: where NVIDIA's tileiras uses HGMMA; `mma_instruction="mma.sync"` turns it off), else
    the mma.sync instruction's key, or "fma"."""
    if tcgen05_wanted(options):
        tplan = select_tcgen05(options, op)
        if tplan is not None:
            return TCGEN05_PREFIX + tplan.instr.key
    if getattr(options, "mma_instruction", "auto") != "mma.sync":
        wplan = select_wgmma(options, op)
        if wplan is not None:
            return WGMMA_PREFIX + wplan.instr.key
    instr = select_instr(options, op)
    return instr.key if instr is not None else "fma"


def plan_for(options: CodegenOptions, op: Operation) -> MmaPlan | WgmmaPlan | Tcgen05Plan | None:
    """The tensor-core plan of an mmaf/mmai (None: the FMA chain), for the instruction select-mma recorded
    (chosen here the same way when it has not run)."""
    chosen = op.attrs.get("instruction") or choose_instruction(options, op)
    if chosen.startswith(TCGEN05_PREFIX):
        tplan = select_tcgen05(options, op)
        if tplan is None or TCGEN05_PREFIX + tplan.instr.key != chosen:
            raise LoweringError(f"select-mma chose {chosen}, which the options no longer allow", op)
        return tplan
    if chosen.startswith(WGMMA_PREFIX):
        wplan = select_wgmma(options, op)
        if wplan is None or WGMMA_PREFIX + wplan.instr.key != chosen:
            raise LoweringError(f"select-mma chose {chosen}, which the options no longer allow", op)
        return wplan
    instr = select_instr(options, op)
    if instr is None:
        return None
    batched, bsz, m, k = _dims(op.operands["lhs"].type)
    _, _, _, n = _dims(op.operands["rhs"].type)
    try:
        return MmaPlan(instr, batched, bsz, m, n, k, options.num_warps)
    except LoweringError as e:
        e.op = e.op or op   # so the failure's notes name this mmaf and its source line
        raise


MMA_PLAN = "mma_plan"   # select-mma: the plan of an mmaf/mmai (of an mmaf_scaled: of its block products)
FMA_PLAN = "fma_plan"   # select-mma, where mma_plan is None: the FMA chain's staging
MMA_PLAN_ERROR = "mma_plan_error"   # select-mma, where no plan can be made: why (raised where a plan is read)


def recorded_plan(op: Operation, attr: str = MMA_PLAN):
    """The plan select-mma recorded on `op` (`attr`: its mma_plan, None for the FMA chain, or its fma_plan):
    a private copy, which code generation may move to the op's scratch or K chunk.  The passes after
    select-mma read plans only through here; where select-mma could make none, the first of them to need it
    reports why."""
    if attr not in op.attrs:
        if MMA_PLAN_ERROR in op.attrs:
            raise LoweringError(op.attrs[MMA_PLAN_ERROR], op)
        raise LoweringError(f"select-mma recorded no {attr} for this {op.name} (select-mma must run before the "
                            f"passes that read it)", op)
    return copy.copy(op.attrs[attr])


def check_size(plan: MmaPlan, op: Operation) -> None:
    """Refuse tiles whose fully unrolled mma would take LLVM minutes, before anything is converted for it."""
    count = plan.tk * plan.rb * plan.rm * plan.rn
    if count > MMA_UNROLL_LIMIT:
        raise LoweringError(f"mma of {plan.B}x{plan.M}x{plan.N}x{plan.K} needs {count} mma.sync per warp and "
                            f"{plan.c.num_registers} accumulator registers per thread; tiles this large are "
                            f"not supported (limit {MMA_UNROLL_LIMIT} per warp)", op)


def result_layout(options: CodegenOptions, op: Operation) -> LinearLayout:
    """The layout of an mma's result (of an mmaf_scaled's: of its block products'), from its recorded plan."""
    plan = recorded_plan(op)
    return plan.c if plan is not None else options.default_layout(op.result.type.shape)


def fma_plan_for(op: Operation, lhs_elem: T.Type, rhs_elem: T.Type) -> FmaPlan:
    batched, bsz, m, k = _dims(op.operands["lhs"].type)
    n = op.operands["rhs"].type.shape[-1]
    return FmaPlan(batched, bsz, m, n, k, elem_bytes(lhs_elem), elem_bytes(rhs_elem))


# -- loop-carried accumulators ------------------------------------------------------------------------------
#
# A carried value keeps the layout of its initial value -- usually a splat constant in the default blocked
# layout.  An accumulator would then go through shared memory twice per iteration (and a 128x128 f32 one does
# not fit at all).  `carried_layouts` finds carried values that feed an mma accumulator (or that the body
# computes from an mma result); assign-layouts starts them in the mma layout.


def _defining_mma(v: Value, body: Block, shape) -> Operation | None:
    """The mma op whose result `v` is computed from by same-shape single-result ops inside the loop body."""
    seen = 0
    frontier = [v]
    while frontier and seen < 64:
        x = frontier.pop()
        seen += 1
        owner = x.owner
        if not isinstance(owner, Operation) or len(owner.results) != 1:
            continue
        if owner.name in ("mmaf", "mmai"):
            return owner
        if getattr(owner.results[0].type, "shape", None) != shape or owner.regions:
            continue
        for operand in owner.operands.values():
            if isinstance(operand, Value) and getattr(operand.type, "shape", None) == shape:
                frontier.append(operand)
    return None


def carried_layouts(options: CodegenOptions, op: Operation) -> list[LinearLayout | None]:
    """Per carried value of a `for` or `loop`, the mma accumulator layout it should be carried in
    (None: no opinion)."""
    block = op.regions[0].block
    args = block.args[1:] if op.name == "for" else block.args  # a `for` block starts with its induction variable
    out: list[LinearLayout | None] = [None] * len(args)
    index = {id(a): i for i, a in enumerate(args)}
    for inner in block.walk():
        if inner.name in ("mmaf", "mmai"):
            acc = inner.operands["acc"]
            i = index.get(id(acc))
            if i is not None and out[i] is None:
                out[i] = result_layout(options, inner)
    for term in own_ops(block):
        if term.name != "continue":
            continue
        for i, v in enumerate(term.operands.get("operands") or []):
            if i < len(args) and out[i] is None:
                mma = _defining_mma(v, block, getattr(args[i].type, "shape", None))
                if mma is not None:
                    out[i] = result_layout(options, mma)
    return out
