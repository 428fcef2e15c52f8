"""Software pipelining of K-loops: which loops qualify, what is copied, and the stage buffers' geometry.

Pure analysis (no IR is changed here): the schedule-loops pass asks `analyze` whether a loop is a K-loop it
can pipeline (and why not), the pipeline pass asks `plan_geometry` how to cut each iteration into units that
fit the stage buffers.

What is pipelined: a `for` loop whose body runs one `mmaf`/`mmai` (at the top level of the body) whose two
operands are tiles loaded in the same iteration by `load_view_tko` -- directly, or through `reshape`s that
only drop leading unit dimensions and elementwise `ftof`s (the tf32 matmuls) -- where the loaded tiles have no
other users.  The loads' indices may depend on the induction variable through pure scalar integer ops of the
body.  The body must not write memory and must not leave an iteration early; the partition views must be
defined outside the loop with no or zero padding (out-of-bounds elements read as zero through cp.async's
src-size).

Geometry: the unit of the pipeline is a *K chunk* of one iteration: the A rows x kc and kc x N of B, staged in
one of S shared-memory buffers.  An iteration has C = K / kc chunks; C is the smallest power of two for which S
buffers fit the budget, and S is lowered (down to 2) when no C fits.  Stage layout: A ([b,] m, k) row-major
with k contiguous, rows of align16(kc * e) + 16 bytes; B ([b,] k, n) row-major with n contiguous, rows of
align16(N * e) + 16 bytes (the 16 bytes keep the fragment reads of a warp in different banks).  An mma on
wgmma (sm_90; `Candidate.wgmma`) reads its operands from the stage buffers through descriptors instead: each
operand in its swizzled layout (`Operand.smem`, tilegpu.analysis.wgmma.SmemOperand, chunk kc), units aligned to the
swizzle repeat, and the ring `align - 16` bytes longer so codegen can align its base at run time.  wgmma
cannot convert what it reads: an f32 operand of a tf32 mma is staged as it is (the tensor core reads the bits as
tf32: `read_as_tf32`); any other conversion is done in place once its chunk has landed (`tilegpu.convert_stage`,
by the threads that copied it), before the barrier that publishes it.

Prefetched loops (`movable_loads`): in a loop without an mma, each load that may move -- a weak
`load_view_tko` at the top level of the body (not one select-tile-tensor-copies made a TMA copy: that one lands in
shared memory, its issue hoisted, and is not carried in registers too), through a view made outside the loop, whose token comes from
outside the loop and whose result token is unused, at tile indices computed from the induction variable and loop
invariants alone (`index_slice`) -- may be issued DISTANCE iterations ahead, into registers the loop carries.  Its
token says no in-loop memory operation is ordered before it, so moving it earlier keeps the program's meaning; a
prefetch past the last iteration reads nothing (every element is out of bounds: the bounds check masks it).
schedule-loops does so only where the loads hold at most PREFETCH_REGS registers per thread for all iterations
in flight -- one to three elements per thread per iteration, the latency-bound case: on an H200 the
one-load-per-thread scan_carry_i64 went from 7.3 to 4.9 us, as NVIDIA's tileiras keeps such loads in flight
too.  Loops with more loads per thread are left alone: those loads already overlap one another, and holding
two more iterations of them costs registers and a prologue (reduce2d_rows_f16_16x128, 32 registers of loads
per iteration, ran 5% slower prefetched on an H200; reduce2d_rows_f32_8x64, 8 registers, took 64 registers
instead of 48 and 282 static instructions instead of 165, and cumsum_carry_f32_t512, 4 registers, 63
instead of 55).  Loops that run an mma are left alone too: accumulators and operand staging already hold
most registers (prefetching K and V cost the 1024-token flash attention 8% on an H200: 146 -> 178
registers, 3 -> 2 CTAs per SM).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ...ir import types as T
from ...ir.core import Block, Operation, Value
from ...ir.enums import MemoryOrderingSemantics as MO
from ...ir.enums import PaddingValue
from .facts import view_extent_divisor, view_rows_aligned
from ..errors import LoweringError
from ..ir import own_ops
from ..options import CodegenOptions
from ..types import align, elem_bytes, layout_of
from .mma import SHARED_LIMIT, _dims, recorded_plan
from .wgmma import SmemOperand, WgmmaPlan

FAILED = "Failed to pipeline loop"


@dataclass(frozen=True)
class PipelineInfo:
    """What was built for one pipelined loop (the benchmark and the tests read it)."""
    kernel: str
    loc: int
    stages: int             # S: stage buffers
    chunks: int             # C: K chunks (pipeline units) per iteration
    kc: int                 # K per chunk
    unit_bytes: int         # shared memory per stage buffer (A + B, aligned)
    a_bytes: int
    b_bytes: int
    offset: int             # where buffer 0 starts in shared memory
    versions: tuple         # the loop versions emitted ("a16+b16", "a4+b4", ...)
    ii: int = 0             # the schedule's initiation interval


def pipeline_info(kernel: str, cand, report, geom, ring) -> "PipelineInfo":
    versions = tuple("+".join(f"{r}{vb}" for r, vb in sorted(v.items())) for v in copy_versions(cand, geom))
    return PipelineInfo(kernel, cand.loop.loc, geom.stages, geom.chunks, geom.kc, geom.unit_bytes, cand.a.nbytes,
                        cand.b.nbytes, ring.attrs.get("offset", 0), versions, report.ii)
ROW_PAD = 16
UNIT_ALIGN = 128
TMA_ALIGN = 128         # a tensor copy's shared-memory destination
MIN_STAGES = 2
PREFETCH_REGS = 6       # registers per thread the loads of a prefetched loop's iterations ahead may hold
DISTANCE = 2            # iterations a prefetched loop's loads are issued ahead

_WRITE_PREFIXES = ("store_", "atomic_", "memory_fence", "gdc_")
_EARLY_EXITS = ("continue", "break", "return")
# scalar ops that may sit between the induction variable and a load index (they cannot trap)
_SLICE_OPS = frozenset(("constant", "assume", "addi", "subi", "muli", "andi", "ori", "xori", "shli", "shri",
                        "select", "cmpi", "exti", "trunci", "maxi", "mini", "negi", "absi"))


@dataclass
class Operand:
    """One pipelined mma operand: the load that produces it, the ops between, and its stage geometry."""
    role: str                       # "a" (lhs: [B,] M, K) or "b" (rhs: [B,] K, N)
    load: Operation
    chain: list[Operation]          # reshape / ftof from the load to the mma, in program order
    tile_shape: tuple[int, ...]     # the load's tile
    lead: int                       # leading unit dims of the tile the operand does not have
    elem: T.Type                    # the loaded (staged) element type
    # geometry (Pipeline.layout)
    kdim: int = 0                   # tile dimension of K
    strides: tuple[int, ...] = ()   # bytes per unit of each tile coordinate inside a stage buffer
    base: int = 0                   # byte offset of this operand inside a stage buffer
    row: int = 0                    # bytes per staged row
    nbytes: int = 0
    vb: int = 0                     # bytes per copy in the loop version being emitted
    smem: SmemOperand | None = None  # a wgmma operand: its swizzled layout (strides unused), base included
    tma: object = None              # tilegpu.analysis.tensor_maps.TensorCopy: copied by TMA (select-tensor-copies)

    @property
    def eb(self) -> int:
        return elem_bytes(self.elem)

    @property
    def operand_shape(self) -> tuple[int, ...]:
        return self.tile_shape[self.lead:]


@dataclass
class Candidate:
    loop: Operation
    mma: Operation
    a: Operand
    b: Operand
    slice_ops: list[Operation]      # in-body scalar ops computing load indices, program order
    wgmma: WgmmaPlan | None = None  # the mma runs on wgmma: stage buffers in its swizzled operand layouts


def is_k_loop(op: Operation) -> bool:
    """A loop whose own body (not a nested loop's) runs an mma: what pipelining is about."""
    if op.name not in ("for", "loop") or not op.regions or not op.regions[0].blocks:
        return False
    return any(o.name in ("mmaf", "mmai") for o in own_ops(op.regions[0].block))


def use_counts(block: Block) -> dict[int, int]:
    count: dict[int, int] = {}
    for o in block.walk():
        for v in o.operand_values():
            count[id(v)] = count.get(id(v), 0) + 1
    return count


def _squeeze_leading(tile_shape: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    """How many leading unit dims `tile_shape` has over `shape` (None: not that relation)."""
    lead = len(tile_shape) - len(shape)
    if lead < 0 or tuple(tile_shape[lead:]) != tuple(shape) or any(d != 1 for d in tile_shape[:lead]):
        return None
    return lead


def _trace_operand(role: str, v: Value, top: set[int], uses: dict[int, int]) -> Operand | str:
    chain: list[Operation] = []
    shape = v.type.shape
    while True:
        owner = v.owner
        if not isinstance(owner, Operation) or id(owner) not in top:
            return f"the mma's {role} operand is not loaded in the loop body"
        if uses.get(id(v), 0) != 1:
            return f"the loaded {role} tile has other users than the mma"
        if owner.name == "load_view_tko":
            break
        if owner.name == "reshape":
            src = owner.operands["source"]
            if _squeeze_leading(src.type.shape, owner.result.type.shape) is None and \
                    _squeeze_leading(owner.result.type.shape, src.type.shape) is None:
                return f"a reshape of the {role} tile moves data"
            chain.append(owner)
            v = src
        elif owner.name == "ftof":
            chain.append(owner)
            v = owner.operands["from"]
        else:
            return f"the {role} operand is computed by '{owner.name}' from the loaded tile"
    load = owner
    if load.results[1] is not None and uses.get(id(load.results[1]), 0):
        return f"the {role} load's token orders other memory operations"
    lead = _squeeze_leading(load.results[0].type.shape, shape)
    if lead is None:
        return f"the {role} tile's shape differs from the mma operand beyond leading unit dimensions"
    chain.reverse()
    return Operand(role, load, chain, tuple(load.results[0].type.shape), lead, load.results[0].type.elem)


def index_slice(v: Value, block: Block, top: set[int], out: dict[int, Operation]) -> bool:
    """Collect the in-body ops computing scalar `v` from the induction variable and loop invariants."""
    if v is block.args[0]:
        return True
    owner = v.owner
    if isinstance(owner, Block):
        return owner is not block and not _inside(owner, block)
    if not isinstance(owner, Operation):
        return False
    if id(owner) not in top:
        return not defined_in(owner, block)
    if owner.name not in _SLICE_OPS or getattr(v.type, "shape", ()) != () or owner.regions:
        return False
    if id(owner) in out:
        return True
    for x in owner.operand_values():
        if not index_slice(x, block, top, out):
            return False
    out[id(owner)] = owner
    return True


def defined_in(op: Operation, block: Block) -> bool:
    return any(o is op for o in block.walk())


def _inside(inner: Block, block: Block) -> bool:
    for o in block.walk():
        for r in o.regions:
            if any(b is inner for b in r.blocks):
                return True
    return False


def analyze(options: CodegenOptions, op: Operation) -> Candidate | str | None:
    """A Candidate, a reason why this K-loop cannot be pipelined, or None (not a K-loop)."""
    if not is_k_loop(op):
        return None
    if op.name != "for":
        return "only counted `for` loops are pipelined"
    tgt = options.known_target
    if tgt is None or not tgt.has_cp_async:
        return "cp.async needs sm_80 or later"
    body = op.regions[0].block
    if options.num_threads & (options.num_threads - 1):
        return "the thread count is not a power of two"
    mmas = [o for o in body.ops if o.name in ("mmaf", "mmai")]
    if len(mmas) != 1 or sum(o.name in ("mmaf", "mmai") for o in body.walk()) != 1:
        return "the loop body does not run exactly one mma"
    why = unmovable_body(body)
    if why:
        return why
    mma = mmas[0]
    top = {id(o) for o in body.ops}
    uses = use_counts(body)
    operands = []
    for role, name in (("a", "lhs"), ("b", "rhs")):
        r = _trace_operand(role, mma.operands[name], top, uses)
        if isinstance(r, str):
            return r
        operands.append(r)
    a, b = operands
    slices: dict[int, Operation] = {}
    for x in operands:
        ld = x.load
        view = ld.operands["view"]
        if not isinstance(view.type, T.PartitionViewType):
            return f"the {x.role} load is not through a partition view"
        if isinstance(view.owner, Operation) and defined_in(view.owner, body):
            return f"the {x.role} load's view is made inside the loop"
        if view.type.padding not in (None, PaddingValue.zero):
            return f"the {x.role} view pads with a non-zero value"
        if ld.attrs.get("memory_ordering_semantics", MO.weak) != MO.weak:
            return f"the {x.role} load is not weak"
        if x.eb not in (1, 2, 4, 8):
            return f"the {x.role} element type cannot be copied asynchronously"
        for idx in ld.operands["index"]:
            if not index_slice(idx, body, top, slices):
                return f"the {x.role} tile index depends on values the loop computes"
    slice_ops = [o for o in body.ops if id(o) in slices]
    return Candidate(op, mma, a, b, slice_ops)


def unmovable_body(body: Block) -> str:
    """Why iterations of a loop with this body cannot overlap ('' where they can): an iteration may end
    early, or the body writes memory (a later iteration's loads could not run before it)."""
    for o in own_ops(body):
        if o.name in _EARLY_EXITS and o is not body.ops[-1]:
            return "an iteration may end early"
    for o in body.walk():
        if o.name.startswith(_WRITE_PREFIXES):
            return f"the loop body writes memory ('{o.name}')"
    return ""


def read_as_tf32(o: Operation) -> bool:
    """An f32 -> tf32 `ftof` whose result only a tensor core reads from shared memory needs no instruction:
    wgmma and tcgen05 read a .tf32 operand's 32 bits and use the sign, exponent and top 10 mantissa bits,
    ignoring the 13 below (the emulator does the same).  NVIDIA's tileiras stages such operands unconverted
    (its sm_90 and sm_100 PTX has no cvt.rna.tf32 and copies them by TMA); the result then differs from
    round-to-nearest by at most one tf32 ulp per element."""
    return o.name == "ftof" and o.operands["from"].type.elem == T.F32 and o.result.type.elem == T.TF32


def staged_conversions(x: "Operand") -> list[Operation]:
    """The `ftof`s of a pipelined operand's chain that code must do: all of them for mma.sync (it reads
    registers), none that the tensor core does itself (`read_as_tf32`) for an operand it reads from its stage
    buffer (`x.smem`)."""
    return [o for o in x.chain if o.name == "ftof" and not (x.smem is not None and read_as_tf32(o))]


def wgmma_unpipelinable(cand: Candidate) -> str | None:
    """Why a K-loop whose mma runs on wgmma cannot be pipelined (None: it can).  wgmma reads its operands from
    shared memory as the copies left them: a conversion between load and mma (a tf32 operand's rounding) is
    done in place in the stage buffer, if it keeps the element's size."""
    for x in (cand.a, cand.b):
        for o in x.chain:
            if o.name == "ftof" and elem_bytes(o.result.type.elem) != elem_bytes(o.operands["from"].type.elem):
                return (f"wgmma reads the {x.role} operand from shared memory as copied, and its conversion "
                        f"changes the element size")
    return None


def _pow2(n: int) -> bool:
    return n > 0 and not n & (n - 1)


@dataclass
class Geometry:
    stages: int
    chunks: int         # C: units per iteration
    kc: int             # K per unit
    unit_bytes: int
    align: int = 0      # the ring's base must be a multiple of this at run time (wgmma's swizzle repeat) ...
    slack: int = 0      # ... which these extra bytes of the ring leave room for

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.unit_bytes + self.slack


def _operand_layout(x: Operand, kc: int, pad: int = ROW_PAD) -> None:
    """Stage layout of one operand for K chunks of kc, rows `pad` bytes apart (sets kdim, strides, row,
    nbytes)."""
    shape = x.operand_shape
    e = x.eb
    rank = len(shape)
    if x.role == "a":   # ([B,] M, K): rows of kc elements
        x.row = align(kc * e, 16) + pad
        lead = (shape[-2] * x.row,) if rank == 3 else ()
        ostrides = lead + (x.row, e)
        rows = prod(shape[:-1])
        x.kdim = x.lead + rank - 1
    else:               # ([B,] K, N): kc rows of N elements
        x.row = align(shape[-1] * e, 16) + pad
        lead = (kc * x.row,) if rank == 3 else ()
        ostrides = lead + (x.row, e)
        rows = prod(shape[:-2]) * kc
        x.kdim = x.lead + rank - 2
    x.strides = (0,) * x.lead + ostrides
    x.nbytes = rows * x.row


def _wgmma_layout(cand: Candidate, kc: int) -> tuple[int, int]:
    """(unit bytes, alignment) of a wgmma K-loop's stage buffers: A and B where the plan's descriptors read
    them, in K chunks of kc (swizzled; tilegpu.analysis.wgmma.SmemOperand); each unit starts on the swizzle repeat."""
    plan = cand.wgmma.chunked(kc)
    for x, sm in ((cand.a, plan.a_smem), (cand.b, plan.b_smem)):
        _operand_layout(x, kc)      # kdim (and row) as for mma.sync; the bytes are the swizzled layout's
        x.smem, x.base, x.nbytes = sm, sm.base, sm.nbytes
    return align(plan.a_smem.nbytes + plan.b_smem.nbytes, plan.align), plan.align


def _place_operands(cand: Candidate, unit_align: int = UNIT_ALIGN) -> int:
    """A at the start of a stage buffer, B after it, each on a multiple of `unit_align`: the buffer's bytes."""
    cand.a.base = 0
    cand.b.base = align(cand.a.nbytes, unit_align)
    return align(cand.b.base + cand.b.nbytes, unit_align)


def unpadded_stage_layout(cand: Candidate, geom: Geometry) -> bool:
    """Re-lay an mma.sync / FMA loop's stage buffers for its operands with `tma` (select-tensor-copies): their
    rows without the padding, as one box of a tensor copy writes them, and the ring's base aligned at run
    time to what the copies' destinations need (TensorCopy.repeat, at least TMA_ALIGN; buffers and operands
    are that far apart).  False, changing nothing, when that ring is larger than the padded one (it must
    fit what was planned)."""
    before = [(x.row, x.strides, x.nbytes, x.base) for x in (cand.a, cand.b)]
    for x in (cand.a, cand.b):
        _operand_layout(x, geom.kc, 0 if x.tma is not None else ROW_PAD)
    al = max([TMA_ALIGN] + [x.tma.repeat for x in (cand.a, cand.b) if x.tma is not None])
    unit = _place_operands(cand, al)
    if geom.stages * unit + al - 16 > geom.ring_bytes:
        for x, (row, strides, nbytes, base) in zip((cand.a, cand.b), before):
            x.row, x.strides, x.nbytes, x.base = row, strides, nbytes, base
        return False
    geom.unit_bytes, geom.align, geom.slack = unit, al, al - 16
    return True


def k_chunks(k: int, min_kc: int):
    """The K chunks an iteration of K `k` may be cut into, largest first: k / C for C = 1, 2, 4, ... while the
    chunk is a power of two and at least `min_kc` (one instruction's K)."""
    c = 1
    while k // c >= max(1, min_kc) and _pow2(k // c):
        yield k // c
        c *= 2


def chunk_bounds(cand: Candidate) -> tuple[int, int] | str:
    """(K of the mma, its smallest K chunk) of K-loop `cand`, `cand.wgmma` set where its mma runs on wgmma or
    tcgen05 (select-mma's plan); or why the loop cannot be pipelined."""
    try:
        mplan = recorded_plan(cand.mma)
    except LoweringError as e:
        return str(e)
    if isinstance(mplan, WgmmaPlan):
        why = wgmma_unpipelinable(cand)
        if why:
            return why
        cand.wgmma = mplan
    kdim = _dims(cand.mma.operands["lhs"].type)[3]
    return kdim, min(mplan.instr.k, kdim) if mplan is not None else 1


def chunk_geometry(cand: Candidate, k: int, kc: int, stages: int) -> Geometry:
    """`stages` stage buffers of one K chunk of kc (of an iteration's K `k`), the operands laid out for it."""
    if cand.wgmma is not None:
        unit, al = _wgmma_layout(cand, kc)
        return Geometry(stages, k // kc, kc, unit, al, al - 16)   # slack: the ring's base is aligned at run time
    _operand_layout(cand.a, kc)
    _operand_layout(cand.b, kc)
    return Geometry(stages, k // kc, kc, _place_operands(cand))


def stage_budget(cand: Candidate) -> int:
    """The shared memory the stage buffers of K-loop `cand` may take: what the body's own buffers leave."""
    return SHARED_LIMIT - -(-body_scratch_bytes(cand) // UNIT_ALIGN) * UNIT_ALIGN


def plan_geometry(cand: Candidate, k: int, min_kc: int, stages: int, budget: int) -> Geometry | None:
    """The fewest chunks per iteration (then the most stages) whose buffers fit `budget` bytes."""
    for s in range(stages, MIN_STAGES - 1, -1):
        for kc in k_chunks(k, min_kc):
            geom = chunk_geometry(cand, k, kc, s)
            if geom.ring_bytes <= budget:
                return geom
    return None


def copy_versions(cand: Candidate, geom: Geometry) -> list[dict[str, int]]:
    """Bytes per copy for each operand, per loop version, widest first; every version but the last runs only
    when the views are aligned to its copy widths (a run-time check).  Empty: the rows are too short for any
    copy.  Versions: the widest copy (up to 16 bytes) the tile rows allow, then one element at a time (a
    4/8-byte cp.async, or a synchronous copy for 8/16-bit elements).  No 4-byte version for 16-bit elements
    between them: each version is a whole pipelined loop of code, and views aligned to 4 but not 16 bytes
    are rare (NVIDIA's tileiras copies such K-loops one element at a time throughout).  Views the launch hints
    promise aligned get the widest version alone."""
    xs = (cand.a, cand.b)
    wide = {}
    for x in xs:
        inner = geom.kc * x.eb if x.kdim == len(x.tile_shape) - 1 else x.tile_shape[-1] * x.eb
        wide[x.role] = min(16, inner)
        if transposes(x):
            wide[x.role] = transposed_width(x, inner)
        if inner < max(x.eb, 4):
            return []
    element = {x.role: x.eb for x in xs}
    if wide == element:
        return [element]
    if all(wide[x.role] == x.eb or promised_aligned(x, wide[x.role]) for x in xs):
        return [wide]   # the launch hints promise what the run-time check would test: no fallback version
    return [wide, element]


def transposes(x: Operand) -> bool:
    """A wgmma buffer contiguous along another dimension than the tensor (B K-major: fp8, int8, tf32): its
    copies cannot be cp.async of more than one element."""
    return x.smem is not None and (x.smem.major == "k") != (x.kdim == len(x.tile_shape) - 1)


def transposed_width(x: Operand, inner: int) -> int:
    """Bytes per copy of a transposing operand (`transposes`): 16 -- a 16-byte global load along the tensor's
    contiguous dimension into registers, then a shared store per element (`async_copy` with `transpose`) --
    where the launch hints promise the load aligned and the extent along it a multiple of its elements (a
    vector is wholly in or out of bounds); else one element at a time.  NVIDIA's sm_90 tf32 matmul copies B
    N-major and transposes it in shared memory; element copies executed 2.09x its thread-instructions."""
    v = 16 // x.eb
    if x.eb != 4 or inner < 16 or not promised_aligned(x, 16):
        return x.eb
    if view_extent_divisor(x.load.operands["view"], len(x.tile_shape) - 1) % v:
        return x.eb
    return 16


def transposed_copy(x: Operand, vb: int) -> bool:
    """Whether copies of vb bytes of x go through registers (`transposed_width`)."""
    return transposes(x) and vb > x.eb


def promised_aligned(x: Operand, width: int) -> bool:
    """The caller's hints (`assume div_by`, literal unit strides) make the operand's view rows `width`-byte
    aligned: the wide copies need no run-time check."""
    return view_rows_aligned(x.load.operands["view"], len(x.tile_shape), x.eb, width)


def body_scratch_bytes(cand: Candidate) -> int:
    """An upper bound of the shared memory the loop body needs besides the stage buffers (its buffers and
    staging scratch, the pipelined mma's excepted: it reads the stage buffers)."""
    from ..ir import walk_ops
    total = 0
    for op in walk_ops(cand.loop.regions[0].block):
        if op is cand.mma:
            continue
        n = op.result.type.nbytes if op.name == "tilegpu.local_alloc" else op.attrs.get("scratch_bytes", 0)
        total += -(-n // 16) * 16
    return total


_MMAS = frozenset({"mmaf", "mmai", "mmaf_scaled", "tilegpu.mma_staged"})


def movable_loads(loop: Operation) -> list[Operation]:
    """The loads of a loop without an mma that may be issued iterations earlier (module docstring)."""
    body = loop.regions[0].block
    if any(o.name in _EARLY_EXITS and o is not body.ops[-1] for o in own_ops(body)):
        return []
    if any(o.name in _MMAS for o in body.walk()):
        return []
    top = {id(o) for o in body.ops}
    inside = {id(o) for o in body.walk()}
    uses = use_counts(body)
    loads = []
    for op in body.ops:
        if op.name != "load_view_tko" or op.attrs.get("memory_ordering_semantics", MO.weak) != MO.weak:
            continue
        view, token = op.operands["view"], op.operands.get("token")
        if any(isinstance(v, Value) and (id(v.owner) in inside or v.owner is body) for v in (view, token)):
            continue    # made in the loop (or carried by it): not the same in every iteration
        if len(op.results) > 1 and uses.get(id(op.results[1]), 0):
            continue
        if layout_of(op.results[0].type) is None:
            continue
        if any(op.attrs.get("inbounds") or ()):   # promised in bounds: a prefetch past the end must stay masked
            continue
        if "tma" in op.attrs:   # select-tile-tensor-copies made it a TMA copy: it flies in shared memory already
            continue
        if all(index_slice(i, body, top, {}) for i in op.operands["index"]):
            loads.append(op)
    return loads


def load_registers(load: Operation) -> int:
    """The 32-bit registers per thread one iteration of `load` holds."""
    ty = load.results[0].type
    return layout_of(ty).num_registers * max(1, elem_bytes(ty.elem) // 4)
