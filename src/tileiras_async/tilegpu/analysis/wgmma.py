"""Hopper warpgroup MMA planning: which `wgmma.mma_async` an mma becomes and where its data lives.

Pure Python, no code emission (codegen/lower_wgmma.py emits a `WgmmaPlan`).  The counterpart of
tilegpu/analysis/mma.py's `MmaPlan` for `wgmma.mma_async.sync.aligned` (sm_90a only):

| A x B                      | accumulator | instruction                          |
|----------------------------|-------------|--------------------------------------|
| f16                        | f32 / f16   | m64nNk16 .f32/.f16 .f16.f16          |
| bf16                       | f32         | m64nNk16 .f32 .bf16.bf16             |
| tf32                       | f32         | m64nNk8 .f32 .tf32.tf32              |
| i8 (s8/u8 per signedness)  | i32         | m64nNk32 .s32 .s8/.u8 (mixed allowed)|
| f8E4M3FN / f8E5M2 (mixed)  | f32 / f16   | m64nNk32 .f32/.f16 .e4m3/.e5m2       |

One warpgroup (4 consecutive warps, 128 threads) runs each instruction: D (64 x N) += A (64 x K) * B (K x N),
N a multiple of 8 up to 256, K = 32 bytes of the operand type.  A plan splits the CTA's warpgroups over the
M tiles (64 rows each) first, then the batch, then N; inside a warpgroup the remaining M tiles, N tiles and
batches are more instructions (more accumulator registers).  N per instruction is the warpgroup's whole N
(at most 256): the fewest instructions for the tile; the accumulator registers are the same whatever N is.

**Accumulator (`plan.c`).**  Register i of thread t of a warpgroup holds D row 16*(t//32) + (t%32)//4 +
8*((i//2)%2), column 2*(t%4) + i%2 + 8*(i//4) (PTX ISA "wgmma D matrix fragment"; .f16 accumulators pack
elements 2j, 2j+1 into one .f16x2 register).  As a LinearLayout: register bits col+1, row+8, col+8, col+16,
..., then the warpgroup's N tiles, M tiles and batches; lane bits col+2, col+4, row+1, row+2, row+4; warp bits
row+16, row+32, then the warpgroup split.

**Operands in shared memory.**  A ([B x] M x K) and B, stored transposed ([B x] N x K), are K-major: rows
of K elements, 8-row groups of `W`-byte rows with the 16-byte chunks of row r XORed with r's phase
(Swizzle<log2(W/16), 4, 3>: address bits 7.. into bits 4..), W = 128, 64 or 32 bytes chosen from the
row's bytes (K x element bytes, capped at 128; rows longer than 128 bytes are split into 128-byte atom
columns stored one after another).  The byte offset of an element is therefore a GF(2)-linear function of
its coordinate bits (`SmemOperand.offset`), which is what lets the emitter compute a per-thread part once
and XOR a constant per register.  The scratch base is aligned to the swizzle's repeat (8 rows x W bytes),
so the XOR phase of an offset is that of the absolute address, as the hardware computes it.  One
instruction reads 64 (A) or N (B) rows of 32 bytes of K starting at its *start address*; its matrix
descriptor (`SmemDescriptor`) holds start >> 4, LBO (unused for swizzled K-major layouts: 16), SBO = the
8-row group stride (8 x W) and the swizzle mode; the base offset is 0 because every start is 8-row aligned.

Operands that do not fit the shared-memory budget are staged in K chunks (each a power of two of at least
one instruction's K): stage chunk c, issue its instructions, wait, stage the next.  `stage`/`issue` are
separate steps so a software-pipelined loop can run them on buffers it manages.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...ir import types as T
from ...ir.core import Operation
from ...ir.enums import Signedness
from ..layout import LinearLayout
from ..options import CodegenOptions
from .facts import read_along_k

Coord = tuple[int, ...]

WARPGROUP_WARPS = 4
WARPGROUP_THREADS = 128
TILE_M = 64                 # rows of A and D per instruction
MAX_N = 256                 # columns of B and D per instruction
K_BYTES = 32                # bytes of K per instruction (k16 f16, k8 tf32, k32 8-bit)
SHARED_LIMIT = 48 * 1024    # static shared memory (tilegpu.analysis.mma.SHARED_LIMIT; not imported: mma imports us)
SCRATCH_ALIGN = 16          # what allocate-shared-memory guarantees for an op's scratch offset
TRASH_BYTES = 16            # a slot for stores whose K chunk is not the one being staged
ACC_REG_LIMIT = 128         # 32-bit accumulator registers per thread beyond which wgmma is not chosen
SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}   # descriptor bits 62-63 per swizzle width (0: none)
MIXED_INT_PTX_ISA = (8, 4)  # .s8.u8 / .u8.s8 wgmma (ptxas: "WGMMA with mixed integer types")


@dataclass(frozen=True)
class WgmmaInstr:
    """One wgmma type combination.  `dtype`: PTX type of D; `acc`: LLVM type of one accumulator element;
    `k`: K per instruction; `ebytes`: operand element bytes in shared memory."""
    key: str
    k: int
    ebytes: int
    dtype: str
    acc: str
    scaled: bool = True         # takes imm-scale-a/b (not the integer forms)
    transposable: bool = False  # takes imm-trans-a/b (f16/bf16 only)

    @property
    def acc_per_reg(self) -> int:
        """Accumulator elements per 32-bit D register (.f16 packs two)."""
        return 2 if self.acc == "half" else 1


WG_F16_F32 = WgmmaInstr("f16.f32", 16, 2, "f32", "float", transposable=True)
WG_F16_F16 = WgmmaInstr("f16.f16", 16, 2, "f16", "half", transposable=True)
WG_BF16_F32 = WgmmaInstr("bf16.f32", 16, 2, "f32", "float", transposable=True)
WG_TF32_F32 = WgmmaInstr("tf32.f32", 8, 4, "f32", "float")
WG_I8_I32 = WgmmaInstr("i8.i32", 32, 1, "s32", "i32", scaled=False)
WG_F8_F32 = WgmmaInstr("f8.f32", 32, 1, "f32", "float")
WG_F8_F16 = WgmmaInstr("f8.f16", 32, 1, "f16", "half")
WG_INSTRS = (WG_F16_F32, WG_F16_F16, WG_BF16_F32, WG_TF32_F32, WG_I8_I32, WG_F8_F32, WG_F8_F16)

_FP8_PTX = {"f8E4M3FN": "e4m3", "f8E5M2": "e5m2"}


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


# ---------------------------------------------------------------------------------------------------------
# shared-memory matrix descriptors and swizzled K-major operands
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SmemDescriptor:
    """The fields of a wgmma shared-memory matrix descriptor (bytes, not the >> 4 encodings)."""
    start: int
    lbo: int
    sbo: int
    swizzle: int        # 128, 64, 32 bytes (0: none)
    base_offset: int = 0
    atom: int = 16      # bytes the swizzle moves as one piece (32: tcgen05's 128-byte swizzle of 32-byte atoms)

    @property
    def mode(self) -> int:
        return SWIZZLE_MODE.get(self.swizzle, 0)

    def encode(self) -> int:
        """The 64-bit value: bits 0-13 start >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset,
        62-63 swizzle mode."""
        for name, v in (("start", self.start), ("lbo", self.lbo), ("sbo", self.sbo)):
            if v % 16 or not 0 <= v >> 4 < 1 << 14:
                raise ValueError(f"descriptor {name} {v} is not a 16-byte multiple below 256 KiB")
        return ((self.start >> 4) | (self.lbo >> 4) << 16 | (self.sbo >> 4) << 32 | (self.base_offset & 7) << 49
                | self.mode << 62)

    def template(self) -> int:
        """The encoding without the start address: OR (or add) `start >> 4` to it at run time."""
        return SmemDescriptor(0, self.lbo, self.sbo, self.swizzle, self.base_offset, self.atom).encode()


def swizzle(offset: int, width: int, atom: int = 16) -> int:
    """Swizzle<log2(width/atom), log2(atom), 7 - log2(atom)>: the atom index within a 128-byte row (bits
    log2(atom)..) XOR the 128-byte row phase (bits 7..).  16-byte atoms: wgmma's and TMA's 32/64/128-byte
    swizzles; 32-byte atoms of a 128-byte row: tcgen05's mode 1 (TMA's 128B_base32B)."""
    if width <= atom:
        return offset
    mask = width // atom - 1
    return offset ^ (((offset >> 7) & mask) * atom)


def swizzle_width(row_bytes: int) -> int:
    """The widest swizzle whose row fits the operand's row (K bytes): 128, 64 or 32."""
    if row_bytes < K_BYTES:
        raise ValueError(f"{row_bytes}-byte rows are shorter than one wgmma K step")
    return min(128, row_bytes)


@dataclass(frozen=True)
class SmemOperand:
    """An operand tile in shared memory: `batches` x `rows` (M of A, N of B) x `kc` (K) elements of `ebytes`
    bytes at byte `base` of the (aligned) scratch, swizzled in `width`-byte rows.

    K-major (`major="k"`, what NVIDIA's tileiras stages): a `width`-byte row of K elements per M/N row (rows
    longer than 128 bytes are split into 128-byte atom columns stored one after another); descriptor LBO
    unused (16), SBO = 8 x width between 8-row groups.
    MN-major (`major="mn"`, B only: f16/bf16 with imm-trans-b = 1; tcgen05 also tf32, whose 128-byte rows
    swizzle 32-byte atoms, `atom`): a `width`-byte row holds width/ebytes
    consecutive N elements of one k; the kc rows of k follow each other (SBO = 8 x width between 8-row
    groups), then the next `width` bytes of N (LBO = kc x width): the PTX ISA's canonical MN-major layout
    ((T,W/16,m),(8,k)):((1,T,LBO),(W/16 T,SBO)).  `mn_width`: the swizzle width, at most one instruction's N."""
    rows: int
    kc: int
    ebytes: int
    batches: int = 1
    base: int = 0
    major: str = "k"
    mn_width: int = 0

    @property
    def width(self) -> int:
        return self.mn_width if self.major == "mn" else swizzle_width(self.kc * self.ebytes)

    @property
    def atom(self) -> int:
        """The bytes the swizzle moves as one piece: 16, but 32 for an N-major 32-bit operand in 128-byte rows
        -- only tcgen05 reads those (wgmma transposes 16-bit types only), and NVIDIA's sm_100 code swizzles its
        N-major tf32 B so (descriptor mode 1, map swizzle 128B_base32B)."""
        return 32 if self.major == "mn" and self.ebytes == 4 and self.width == 128 else 16

    @property
    def batch_bytes(self) -> int:
        return self.rows * self.kc * self.ebytes

    @property
    def nbytes(self) -> int:
        return self.batches * self.batch_bytes

    @property
    def align(self) -> int:
        """The swizzle pattern's repeat: the base (absolute address) must be a multiple of it."""
        return 8 * self.width

    def linear(self, b: int, row: int, k: int) -> int:
        """Unswizzled byte offset from `base` (k within the chunk)."""
        w, e = self.width, self.ebytes
        if self.major == "mn":
            per = w // e
            return b * self.batch_bytes + (row // per) * (self.kc * w) + k * w + (row % per) * e
        kb = k * e
        return b * self.batch_bytes + (kb // w) * (self.rows * w) + row * w + kb % w

    def offset(self, b: int, row: int, k: int) -> int:
        """Byte offset from the scratch base of element (b, row, k): what a staging store writes and what the
        hardware reads through `descriptor`.  GF(2)-linear in the bits of b, row and k (minus `base`)."""
        return self.base + swizzle(self.linear(b, row, k), self.width, self.atom)

    def descriptor(self, b: int, row0: int, k0: int, scratch_address: int = 0) -> SmemDescriptor:
        """The descriptor of one instruction's operand: rows row0.. and one K step from k0.  Every start is
        on a pattern boundary (an 8-row group / a width-byte run of N and 8 rows of k), so its swizzle phase
        is 0 and the base offset field too."""
        w = self.width
        if self.major == "mn":
            if row0 % (w // self.ebytes) or k0 % 8:
                raise ValueError("an MN-major wgmma operand starts on a swizzle row of N and 8 rows of K")
            lbo, sbo = self.kc * w, 8 * w
        else:
            if row0 % 8 or (k0 * self.ebytes) % K_BYTES:
                raise ValueError("a K-major wgmma operand starts on an 8-row group and a 32-byte K step")
            lbo, sbo = 16, 8 * w
        return SmemDescriptor(scratch_address + self.base + self.linear(b, row0, k0), lbo, sbo, w, atom=self.atom)


# ---------------------------------------------------------------------------------------------------------
# the plan of one op
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Issue:
    """One wgmma.mma_async: its A and B start offsets (bytes from the scratch base) and the accumulator
    registers (indices into plan.c) its D fragment holds, in D-register element order."""
    a_off: int
    b_off: int
    c_regs: tuple[int, ...]


@dataclass
class WgmmaPlan:
    """How one mma op runs as wgmma: warpgroup split, instruction N, accumulator layout, shared-memory operands,
    and per K chunk the instructions to issue.  The attribute names the passes read (c, smem_bytes, tk, rb,
    rm, rn) mean what they mean for tilegpu.analysis.mma.MmaPlan."""
    instr: WgmmaInstr
    atype: str          # PTX operand types (.f16, .bf16, .tf32, .e4m3, .e5m2, .s8, .u8)
    btype: str
    batched: bool
    B: int
    M: int
    N: int
    K: int
    num_warps: int
    budget: int = SHARED_LIMIT
    b_major: str = "k"      # "mn": B stored N-major (f16/bf16, imm-trans-b = 1; see SmemOperand)
    chunk: int = 0          # K per chunk when the caller decides it (a pipelined loop's unit); 0: the budget does
    wgs: tuple[int, int, int] = field(init=False)

    def __post_init__(self):
        nwg = self.num_warps // WARPGROUP_WARPS
        self.wgs = _split_warpgroups(nwg, self.M // TILE_M, self.B, self.N)
        self.wm, self.wb, self.wn = self.wgs
        self.n = min(self.N // self.wn, MAX_N)            # N per instruction
        self.rm = self.M // self.wm // TILE_M               # per warpgroup: M tiles, batches, N tiles
        self.rb = self.B // self.wb
        self.rn = self.N // self.wn // self.n
        self.c = self._accumulator()
        self._plan_operands("wgmma")

    def _plan_operands(self, what: str) -> None:
        """K chunks: the largest power of two (>= one instruction) whose A and B fit the budget; the swizzled
        operands of one chunk (shared with tilegpu.analysis.tcgen05)."""
        i = self.instr
        e = i.ebytes
        kc = self.chunk or self.K
        while not self.chunk and kc > i.k and self._bytes(kc) > self.budget:
            kc //= 2
        self.kc = kc
        self.a_smem = SmemOperand(self.M, kc, e, self.B, 0)
        self.b_smem = SmemOperand(self.N, kc, e, self.B, self.a_smem.nbytes, self.b_major, self._mn_width())
        self.align = max(self.a_smem.align, self.b_smem.align)
        self.trash = self.a_smem.nbytes + self.b_smem.nbytes
        self.smem_bytes = self._bytes(kc)
        if self.smem_bytes > self.budget:
            from ..errors import LoweringError
            raise LoweringError(f"{what} operands need {self.smem_bytes} bytes of shared memory per K chunk "
                                f"(limit {self.budget})")
        self.tk = self.K // i.k                             # k steps in all (MmaPlan's meaning)

    def b_transposable(self) -> bool:
        """Whether the instruction reads B N-major (wgmma: imm-trans-b, f16/bf16 only)."""
        return self.instr.transposable

    def _mn_width(self) -> int:
        if self.b_major == "k":
            return 0
        if not self.b_transposable() or self.n * self.instr.ebytes < K_BYTES:
            raise ValueError(f"no N-major B for {self.instr.key} with N = {self.n} per instruction")
        return min(128, self.n * self.instr.ebytes)

    def _bytes(self, kc: int) -> int:
        """Scratch bytes: A and B, the trash slot, and the slack that aligns the base to the swizzle repeat."""
        stage = self.B * (self.M + self.N) * kc * self.instr.ebytes
        align = 8 * max(swizzle_width(kc * self.instr.ebytes), self._mn_width())
        return stage + TRASH_BYTES + align - SCRATCH_ALIGN

    def chunked(self, kc: int) -> "WgmmaPlan":
        """The same op in K chunks of kc (a power of two, at least one instruction's K): what one unit of a
        software-pipelined loop stages and issues.  Operands stay where `operand` says, A at 0, B after it."""
        return replace(self, chunk=kc, budget=max(self.budget, self._bytes(kc)))

    # -- the accumulator -----------------------------------------------------------------------------
    def _embed(self, b: int, row: int, col: int) -> Coord:
        return (b, row, col) if self.batched else (row, col)

    def _accumulator(self) -> LinearLayout:
        shape = self._embed(self.B, self.M, self.N)
        reg = [self._embed(0, 0, 1), self._embed(0, 8, 0)]
        reg += [self._embed(0, 0, 8 << j) for j in range(_log2(self.n // 8))]
        reg += [self._embed(0, 0, self.n << j) for j in range(_log2(self.rn))]
        reg += [self._embed(0, TILE_M << j, 0) for j in range(_log2(self.rm))]
        reg += [self._embed(1 << j, 0, 0) for j in range(_log2(self.rb))]
        lane = [self._embed(0, 0, 2), self._embed(0, 0, 4), self._embed(0, 1, 0), self._embed(0, 2, 0),
                self._embed(0, 4, 0)]
        warp = [self._embed(0, 16, 0), self._embed(0, 32, 0)]
        warp += [self._embed(0, (self.M // self.wm) << j, 0) for j in range(_log2(self.wm))]
        warp += [self._embed((self.B // self.wb) << j, 0, 0) for j in range(_log2(self.wb))]
        warp += [self._embed(0, 0, (self.N // self.wn) << j) for j in range(_log2(self.wn))]
        while len(warp) < _log2(self.num_warps):
            warp.append(self._embed(0, 0, 0))             # warpgroups left over replicate
        return LinearLayout(shape, (tuple(reg), tuple(lane), tuple(warp)))

    @property
    def frag_elems(self) -> int:
        """Accumulator elements one instruction's D fragment gives each thread."""
        return TILE_M * self.n // WARPGROUP_THREADS

    def c_reg(self, elem: int, mt: int, nt: int, bt: int) -> int:
        """Register of `c` holding element `elem` of the D fragment of this warpgroup's tile (bt, mt, nt)."""
        return elem + self.frag_elems * (nt + self.rn * (mt + self.rm * bt))

    # -- the program -------------------------------------------------------------------------------------
    @property
    def chunks(self) -> int:
        return self.K // self.kc

    @property
    def ksteps(self) -> int:
        """Instructions along K per chunk."""
        return self.kc // self.instr.k

    # -- where the operand tiles' elements go --------------------------------------------------------------
    def operand(self, role: str) -> SmemOperand:
        return self.a_smem if role == "a" else self.b_smem

    def split(self, role: str, coord: Coord) -> tuple[int, int, int]:
        """(batch, row, k) of an element of the lhs ([B,] M, K) or rhs ([B,] K, N) tile."""
        c = tuple(coord) if self.batched else (0,) + tuple(coord)
        return (c[0], c[1], c[2]) if role == "a" else (c[0], c[2], c[1])

    def stage_offset(self, role: str, coord: Coord) -> int:
        """Byte offset from the operand's base of the element at `coord` of the lhs/rhs tile, k taken in its
        chunk: GF(2)-linear in the coordinate bits (offset(x ^ y) = offset(x) ^ offset(y))."""
        b, row, k = self.split(role, coord)
        sm = self.operand(role)
        return swizzle(sm.linear(b, row, k & (self.kc - 1)), sm.width, sm.atom)

    def chunk_part(self, role: str, coord: Coord) -> int:
        """The k of `coord` rounded down to its chunk (chunk index x kc; linear as well)."""
        return self.split(role, coord)[2] & ~(self.kc - 1)

    def warpgroup_bits(self) -> list[tuple[int, int]]:
        """Per warpgroup bit (warp id bit 2, 3, ...), how far that warpgroup's A and B rows start from
        warpgroup 0's, in bytes (0, 0 for a replicating bit).  Offsets of distinct bits never overlap, so a
        warpgroup's start offset is their sum."""
        out = []
        for basis in self.c.bases[2][2:]:
            b, row, col = basis if self.batched else (0,) + basis
            out.append((self.a_smem.linear(b, row, 0), self.b_smem.linear(b, col, 0)))
        return out

    def issues(self) -> list[list[Issue]]:
        """Per K step of a chunk, warpgroup 0's instructions: A and B start offsets (bytes from the scratch
        base; other warpgroups add `warpgroup_bits`) and D registers."""
        out = []
        for ks in range(self.ksteps):
            k0 = ks * self.instr.k
            step = []
            for bt in range(self.rb):
                for mt in range(self.rm):
                    a_off = self.a_smem.base + self.a_smem.linear(bt, mt * TILE_M, k0)
                    for nt in range(self.rn):
                        b_off = self.b_smem.base + self.b_smem.linear(bt, nt * self.n, k0)
                        regs = tuple(self.c_reg(e, mt, nt, bt) for e in range(self.frag_elems))
                        step.append(Issue(a_off, b_off, regs))
            out.append(step)
        return out

    def descriptors(self) -> tuple[SmemDescriptor, SmemDescriptor]:
        """Descriptor templates of A and B (start 0: the emitter adds the run-time address >> 4)."""
        return self.a_smem.descriptor(0, 0, 0), self.b_smem.descriptor(0, 0, 0)

    @property
    def shape_name(self) -> str:
        return f"m{TILE_M}n{self.n}k{self.instr.k}"

    @property
    def ptx(self) -> str:
        """`wgmma.mma_async.sync.aligned.m64nNkK.dtype.atype.btype`."""
        return f"wgmma.mma_async.sync.aligned.{self.shape_name}.{self.instr.dtype}.{self.atype}.{self.btype}"


def _split_warpgroups(nwg: int, tiles_m: int, batch: int, n: int) -> tuple[int, int, int]:
    """(warpgroups over M tiles, over batches, over N): M first, then the batch, then N (halving N while
    each half stays at least 8 wide); what is left replicates."""
    wm = 1
    while wm * 2 <= min(nwg, tiles_m):
        wm *= 2
    wb = 1
    while wm * wb * 2 <= nwg and wb * 2 <= batch:
        wb *= 2
    wn = 1
    while wm * wb * wn * 2 <= nwg and n // (wn * 2) >= 8:
        wn *= 2
    return wm, wb, wn


# ---------------------------------------------------------------------------------------------------------
# choosing wgmma
# ---------------------------------------------------------------------------------------------------------

def _elem_name(t: T.Type) -> str:
    return getattr(t, "name", "") or str(t)


def _instr_for(op: Operation) -> tuple[WgmmaInstr, str, str] | str:
    """(instruction, A type, B type) for the op's element types, or why there is none."""
    a, b = op.operands["lhs"].type.elem, op.operands["rhs"].type.elem
    c = op.operands["acc"].type.elem
    an, bn, cn = _elem_name(a), _elem_name(b), _elem_name(c)
    if op.name == "mmai":
        if not (a == b == T.I8 and c == T.I32):
            return f"no wgmma for {an} x {bn} -> {cn}"
        sa = op.attrs.get("signedness_lhs", Signedness.signed) == Signedness.signed
        sb = op.attrs.get("signedness_rhs", Signedness.signed) == Signedness.signed
        return WG_I8_I32, "s8" if sa else "u8", "s8" if sb else "u8"
    if an in _FP8_PTX and bn in _FP8_PTX and cn in ("f32", "f16"):
        return (WG_F8_F16 if cn == "f16" else WG_F8_F32), _FP8_PTX[an], _FP8_PTX[bn]
    table = {("f16", "f32"): WG_F16_F32, ("f16", "f16"): WG_F16_F16, ("bf16", "f32"): WG_BF16_F32,
             ("tf32", "f32"): WG_TF32_F32}
    instr = table.get((an, cn)) if an == bn else None
    if instr is None:
        return f"no wgmma for {an} x {bn} -> {cn}"
    return instr, an, bn


def wgmma_choice(options: CodegenOptions, op: Operation) -> WgmmaPlan | str:
    """The wgmma plan for an mmaf/mmai, or the reason the op keeps mma.sync (or the FMA chain)."""
    tgt = options.known_target
    if tgt is None or not tgt.has_wgmma:
        return "wgmma exists on sm_90a only"
    if options.num_warps % WARPGROUP_WARPS:
        return f"{options.num_warps} warps are not whole warpgroups"
    r = _instr_for(op)
    if isinstance(r, str):
        return r
    instr, at, bt = r
    isa = tgt.emitted_ptx_isa
    if instr is WG_I8_I32 and at != bt and isa < MIXED_INT_PTX_ISA:
        return (f"wgmma .{at}.{bt} needs PTX ISA {'.'.join(map(str, MIXED_INT_PTX_ISA))} (the module declares "
                f"{'.'.join(map(str, isa))})")
    lhs, rhs = op.operands["lhs"].type.shape, op.operands["rhs"].type.shape
    if len(lhs) not in (2, 3):
        return "mma operands must be 2-D or 3-D"
    batched = len(lhs) == 3
    bsz = lhs[0] if batched else 1
    m, k = lhs[-2], lhs[-1]
    n = rhs[-1]
    if m < TILE_M:
        return f"M = {m} is below the 64 rows of a warpgroup (small tiles keep mma.sync, as NVIDIA's tileiras does)"
    if n < 8:
        return f"N = {n} is below wgmma's smallest N (8)"
    if k * instr.ebytes < K_BYTES:
        return f"K = {k} is below one wgmma K step ({instr.k})"
    regs = bsz * m * n // options.num_threads // instr.acc_per_reg
    if regs > ACC_REG_LIMIT:
        return f"the accumulator needs {regs} registers per thread (limit {ACC_REG_LIMIT})"
    from ..errors import LoweringError
    try:
        plan = WgmmaPlan(instr, at, bt, batched, bsz, m, n, k, options.num_warps, SHARED_LIMIT)
        if plan.b_transposable() and plan.n * instr.ebytes >= K_BYTES and not read_along_k(op.operands["rhs"]):
            # B N-major: its tile arrives in rows of N (loads, cp.async), stored with vector stores; a B read
            # through a transposing view arrives in rows of K and stays K-major, stored with vector stores too
            plan = replace(plan, b_major="mn")
        return plan
    except LoweringError as e:
        return str(e)


def select_wgmma(options: CodegenOptions, op: Operation) -> WgmmaPlan | None:
    """The wgmma plan for an mmaf/mmai, or None where it keeps mma.sync: a target other than sm_90, types
    wgmma does not take, tiles below 64 rows (what NVIDIA's tileiras keeps on mma.sync: of the public
    corpus's matmuls, exactly the 64+ row ones get HGMMA on sm_90), accumulators too big for registers."""
    r = wgmma_choice(options, op)
    return None if isinstance(r, str) else r


# ---------------------------------------------------------------------------------------------------------
# A from registers
# ---------------------------------------------------------------------------------------------------------

# the lanes of wgmma's register-A fragment (m64 x k16 per warpgroup, like its accumulator's D fragment): lane
# bits 0-1 step two columns, bits 2-4 a row; the first two warp bits 16 and 32 rows
_FRAGMENT_LANES = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
_FRAGMENT_WARPS = ((16, 0), (32, 0))


def register_a_fragments(plan: WgmmaPlan, layout: LinearLayout) -> list[list[tuple[int, int]]] | None:
    """Where an lhs tile in `layout` holds wgmma's register-A fragments, so that the mma reads A from
    registers with no staging: per issue of `plan.issues()` (K step, then M tile; N tiles share it), the lhs
    registers of A's four 32-bit registers, two 16-bit elements each (rows r, r + 8 x columns c, c + 8 of the
    step, each pair of consecutive columns).  None where the layout does not hold them so: other lanes or
    warps, a warpgroup split other than over M, elements not 16-bit, a batch."""
    if plan.instr.ebytes != 2 or plan.batched or plan.wn != 1 or plan.wb != 1 or not plan.instr.transposable:
        return None
    lane, warp = layout.bases[1], layout.bases[2]
    if tuple(map(tuple, lane)) != _FRAGMENT_LANES or tuple(map(tuple, warp[:2])) != _FRAGMENT_WARPS:
        return None
    if tuple(map(tuple, warp[2:])) != tuple(map(tuple, plan.c.bases[2][2:])):
        return None
    where: dict[tuple, int] = {}
    for r in range(layout.num_registers):
        where.setdefault(tuple(layout.register_coord(r)), r)
    out = []
    for ks in range(plan.K // plan.instr.k):
        for mt in range(plan.rm):
            row, col = mt * TILE_M, ks * plan.instr.k
            regs = []
            for dr, dc in ((0, 0), (8, 0), (0, 8), (8, 8)):
                pair = tuple(where.get((row + dr, col + dc + j)) for j in (0, 1))
                if None in pair:
                    return None
                regs.append(pair)
            out.append(regs)
    return out
