"""Blackwell tensor-core planning: which `tcgen05.mma` an mma becomes, its tensor-memory accumulator and the
layout `tcgen05.ld` brings it back to registers in (sm_100a, `.cta_group::1`).

Pure Python, no code emission (codegen/lower_tcgen05.py emits a `Tcgen05Plan`).  tcgen05 reads A and B from
shared memory through the same canonical swizzled layouts as Hopper's wgmma, so the plan *is* a
`tilegpu.analysis.wgmma.WgmmaPlan` (operand layouts, K chunks, staging, software-pipelined stage buffers all follow
it) with what differs overridden:

* **Issue.**  One thread issues every instruction of the CTA: D (M x N, M = 128 or 64 rows) += A (M x K) *
  B (K x N), N a multiple of 16 (M=128) or 8 (M=64) up to 256, K = 32 bytes of the operand type.  A tile of
  `rm` M tiles x `rn` N tiles x `rb` batches is rm*rn*rb instructions per K step.
* **Accumulator in tensor memory (TMEM: 128 lanes x 512 columns of 32 bits).**  Instruction (bt, mt, nt)
  writes its D at column ((bt*rm + mt)*rn + nt)*n: the tile's *column space* of `cols` columns, allocated
  as the next power of two (at least 32).  M=128: D row r in lane r; M=64: rows 16i..16i+15 in lanes
  32i..32i+15 (PTX ISA "Matrix fragments for tcgen05.mma", data-path layouts).
* **Accumulator in registers (`plan.c`).**  What `tcgen05.ld` gives each thread: warp w reads the lanes of
  its sub-partition (w % 4) and, with more than 4 warps, the (w // 4)-th part of the column space.  M=128
  (`.32x32b`): thread t holds row 32*(w%4) + t, one register per column.  M=64 (`.16x32bx2`, half-split
  S/2): thread t holds row 16*(w%4) + t%16, columns S/2 * (t // 16) + register.  `tcgen05.st` writes an
  incoming accumulator back with the same shape, so a loop-carried accumulator never changes layout.
* **Descriptors.**  The shared-memory descriptor has wgmma's start/LBO/SBO fields plus the fixed 0b001 in
  bits 46-48 and the swizzle in bits 61-63 (2: 128B, 4: 64B, 6: 32B); the 32-bit instruction descriptor
  holds the types, B's major-ness, N >> 3 and M >> 4 (`instr_descriptor`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.core import Operation
from ..layout import LinearLayout
from ..options import CodegenOptions
from .facts import read_along_k
from .wgmma import (ACC_REG_LIMIT, K_BYTES, MAX_N, SHARED_LIMIT, WG_BF16_F32, WG_F8_F32, WG_F16_F32, WG_I8_I32,
                    WG_TF32_F32, SmemDescriptor, WgmmaPlan, _instr_for, _log2)

TMEM_COLUMNS = 512
TMEM_MIN_ALLOC = 32
SUBPARTITION_WARPS = 4      # warp w reads TMEM lanes 32*(w%4) .. +31
LD_MAX_REGS = 128           # registers one tcgen05.ld/st moves per thread (.x128 of .32x32b)
SWIZZLE_MODE = {0: 0, 128: 2, 64: 4, 32: 6}     # bits 61-63 of the descriptor per swizzle width
SWIZZLE_MODE_32B_ATOMS = 1                      # ... and for the 128-byte swizzle of 32-byte atoms

# tcgen05 .kind and the instruction descriptor's type codes, per wgmma instruction (f32/s32 accumulators:
# the .f16 accumulators of kind::f16 / f8f6f4 are not used)
KINDS = {WG_F16_F32.key: "f16", WG_BF16_F32.key: "f16", WG_TF32_F32.key: "tf32", WG_I8_I32.key: "i8",
         WG_F8_F32.key: "f8f6f4"}
TYPE_CODE = {"f16": 0, "bf16": 1, "tf32": 2, "e4m3": 0, "e5m2": 1, "u8": 0, "s8": 1}
DTYPE_CODE = {"f32": 1, "s32": 2}


@dataclass(frozen=True)
class Tcgen05Descriptor(SmemDescriptor):
    """A tcgen05 shared-memory matrix descriptor: wgmma's fields, encoded the sm_100 way."""

    @property
    def mode(self) -> int:
        return SWIZZLE_MODE_32B_ATOMS if self.atom == 32 else SWIZZLE_MODE[self.swizzle]

    def encode(self) -> int:
        """bits 0-13 start >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 46-48 0b001, 49-51 base offset, 61-63 swizzle."""
        wg = SmemDescriptor(self.start, self.lbo, self.sbo, 0, self.base_offset).encode()   # checks the fields
        return wg | 1 << 46 | self.mode << 61

    def template(self) -> int:
        return Tcgen05Descriptor(0, self.lbo, self.sbo, self.swizzle, self.base_offset, self.atom).encode()

    @classmethod
    def of(cls, d: SmemDescriptor) -> "Tcgen05Descriptor":
        return cls(d.start, d.lbo, d.sbo, d.swizzle, d.base_offset, d.atom)


@dataclass(frozen=True)
class Tcgen05Issue:
    """One tcgen05.mma: A and B start offsets (bytes from the operands' buffer) and D's first TMEM column."""
    a_off: int
    b_off: int
    d_col: int


@dataclass
class Tcgen05Plan(WgmmaPlan):
    """How one mma op runs as tcgen05.mma (see the module docstring).  `c`, `smem_bytes`, `kc`, `a_smem`,
    `b_smem`, `chunked`, `align` mean what they mean for WgmmaPlan."""

    def __post_init__(self):
        self.tile_m = 128 if self.M % 128 == 0 else 64
        self.wgs = (1, 1, 1)
        self.wm = self.wb = self.wn = 1
        self.n = min(self.N, MAX_N)
        self.rm, self.rb, self.rn = self.M // self.tile_m, self.B, self.N // self.n
        self.cols = self.rb * self.rm * self.rn * self.n
        self.tmem_cols = max(TMEM_MIN_ALLOC, 1 << (self.cols - 1).bit_length())
        self.splits = max(1, self.num_warps // SUBPARTITION_WARPS)    # warps sharing a sub-partition's lanes
        self.per_warp = self.cols // self.splits                      # S: columns each warp loads
        self.c = self._accumulator()
        self._plan_operands("tcgen05")

    # -- the accumulator -------------------------------------------------------------------------------
    def column_coord(self, idx: int) -> tuple[int, ...]:
        """The accumulator coordinate of column-space index idx at D row 0 of its tile."""
        col, t = idx % self.n, idx // self.n
        nt, t = t % self.rn, t // self.rn
        mt, bt = t % self.rm, t // self.rm
        return self._embed(bt, mt * self.tile_m, nt * self.n + col)

    def _accumulator(self) -> LinearLayout:
        if self.num_warps < SUBPARTITION_WARPS or self.num_warps & (self.num_warps - 1):
            raise ValueError(f"tcgen05 accumulators need 4, 8, ... warps (got {self.num_warps})")
        s = self.per_warp
        shape = self._embed(self.B, self.M, self.N)
        split = [self.column_coord(s << j) for j in range(_log2(self.splits))]
        if self.tile_m == 128:
            reg = [self.column_coord(1 << j) for j in range(_log2(s))]
            lane = [self._embed(0, 1 << j, 0) for j in range(5)]
            warp = [self._embed(0, 32, 0), self._embed(0, 64, 0)]
        else:
            reg = [self.column_coord(1 << j) for j in range(_log2(s // 2))]
            lane = [self._embed(0, 1 << j, 0) for j in range(4)] + [self.column_coord(s // 2)]
            warp = [self._embed(0, 16, 0), self._embed(0, 32, 0)]
        return LinearLayout(shape, (tuple(reg), tuple(lane), tuple(warp + split)))

    @property
    def ld_shape(self) -> str:
        return "32x32b" if self.tile_m == 128 else "16x32bx2"

    @property
    def ld_regs(self) -> int:
        """Registers per thread (= plan.c's registers), moved in tcgen05.ld/st of at most LD_MAX_REGS."""
        return self.per_warp if self.tile_m == 128 else self.per_warp // 2

    # -- the program -----------------------------------------------------------------------------------
    def issues(self) -> list[list[Tcgen05Issue]]:
        """Per K step of a chunk, the instructions (one thread issues them all)."""
        out = []
        for ks in range(self.ksteps):
            k0 = ks * self.instr.k
            step = []
            for bt in range(self.rb):
                for mt in range(self.rm):
                    a_off = self.a_smem.base + self.a_smem.linear(bt, mt * self.tile_m, k0)
                    for nt in range(self.rn):
                        b_off = self.b_smem.base + self.b_smem.linear(bt, nt * self.n, k0)
                        step.append(Tcgen05Issue(a_off, b_off, ((bt * self.rm + mt) * self.rn + nt) * self.n))
            out.append(step)
        return out

    def descriptors(self) -> tuple[Tcgen05Descriptor, Tcgen05Descriptor]:
        da, db = super().descriptors()
        return Tcgen05Descriptor.of(da), Tcgen05Descriptor.of(db)

    def warpgroup_bits(self) -> list[tuple[int, int]]:
        return []           # one thread issues for the whole CTA

    @property
    def kind(self) -> str:
        return KINDS[self.instr.key]

    def b_transposable(self) -> bool:
        """tcgen05 reads B N-major (instruction descriptor bit 16) for .kind::tf32 too, where wgmma cannot: a
        [K, N] tile with N contiguous lands as it is (NVIDIA's sm_100 tf32 code copies it so, by TMA)."""
        return self.instr.transposable or self.kind == "tf32"

    def instr_descriptor(self) -> int:
        """The 32-bit instruction descriptor: bits 4-5 D type, 7-9 A type, 10-12 B type, 15 A MN-major (0),
        16 B MN-major, 17-22 N >> 3, 24-28 M >> 4."""
        return (DTYPE_CODE[self.instr.dtype] << 4 | TYPE_CODE[self.atype] << 7 | TYPE_CODE[self.btype] << 10
                | int(self.b_major == "mn") << 16 | (self.n >> 3) << 17 | (self.tile_m >> 4) << 24)

    @property
    def shape_name(self) -> str:
        return f"m{self.tile_m}n{self.n}k{self.instr.k}"

    @property
    def ptx(self) -> str:
        return f"tcgen05.mma.cta_group::1.kind::{self.kind}"


def tcgen05_choice(options: CodegenOptions, op: Operation) -> Tcgen05Plan | str:
    """The tcgen05 plan for an mmaf/mmai, or the reason the op keeps mma.sync (or the FMA chain)."""
    tgt = options.known_target
    if tgt is None or not tgt.has_tcgen05:
        return "tcgen05 exists on sm_100a, sm_103a and sm_110a only"
    nw = options.num_warps
    if nw < SUBPARTITION_WARPS or nw & (nw - 1):
        return f"{nw} warps do not cover tensor memory's 4 sub-partitions evenly"
    if op.attrs.get("scaled_block_product"):     # tilegpu.analysis.scaled_mma.BLOCK_PRODUCT (which imports mma, us)
        return ("the K blocks of mmaf_scaled keep mma.sync (their operands are in registers already; no "
                "block-scaled tcgen05 yet)")
    r = _instr_for(op)
    if isinstance(r, str):
        return r.replace("wgmma", "tcgen05")
    instr, at, bt = r
    if instr.key not in KINDS:
        return f"no tcgen05 with {instr.dtype} accumulators here ({instr.key})"
    lhs, rhs = op.operands["lhs"].type.shape, op.operands["rhs"].type.shape
    if len(lhs) not in (2, 3):
        return "mma operands must be 2-D or 3-D"
    batched = len(lhs) == 3
    bsz = lhs[0] if batched else 1
    m, k, n = lhs[-2], lhs[-1], rhs[-1]
    if m < 64 or m % 64:
        return f"M = {m} is not a multiple of tcgen05's 64 rows (small tiles keep mma.sync, as NVIDIA's tileiras does)"
    step = 16 if m % 128 == 0 else 8
    if n < step or (min(n, MAX_N) % step):
        return f"N = {n} is not a multiple of {step}"
    if k * instr.ebytes < K_BYTES:
        return f"K = {k} is below one tcgen05 K step ({instr.k})"
    cols = bsz * m // (128 if m % 128 == 0 else 64) * n
    if cols > TMEM_COLUMNS:
        return f"the accumulator needs {cols} tensor-memory columns (limit {TMEM_COLUMNS})"
    regs = bsz * m * n // options.num_threads
    if regs > ACC_REG_LIMIT:
        return f"the accumulator needs {regs} registers per thread (limit {ACC_REG_LIMIT})"
    from ..errors import LoweringError
    try:
        plan = Tcgen05Plan(instr, at, bt, batched, bsz, m, n, k, nw, SHARED_LIMIT)
        if plan.ld_regs < 1 or plan.per_warp % 2:
            return f"the accumulator's {plan.cols} columns do not split over {nw} warps"
        if plan.b_transposable() and plan.n * instr.ebytes >= K_BYTES and not read_along_k(op.operands["rhs"]):
            plan = Tcgen05Plan(instr, at, bt, batched, bsz, m, n, k, nw, SHARED_LIMIT, b_major="mn")
        return plan
    except LoweringError as e:
        return str(e)


def select_tcgen05(options: CodegenOptions, op: Operation) -> Tcgen05Plan | None:
    r = tcgen05_choice(options, op)
    return None if isinstance(r, str) else r
