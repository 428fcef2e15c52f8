"""Software pipelining of K-loops: multi-stage shared-memory buffers filled with `cp.async` (sm_80+).

What is pipelined
-----------------
A `for` loop whose body runs one `mmaf`/`mmai` (at the top level of the body) whose two operands are tiles
loaded in the same iteration by `load_view_tko` -- directly, or through `reshape`s that only drop leading
unit dimensions and elementwise `ftof`s (the tf32 matmuls) -- where the loaded tiles have no other users.
The loads' indices may depend on the induction variable through pure scalar integer ops of the body.  The
body must not write memory (stores, atomics, fences) and must not leave an iteration early (a nested
`continue`/`break`); the partition views must be defined outside the loop with no or zero padding, and
the scheduler's analysis (`schedule.analyze.schedule_loop`) is the legality oracle: a loop it reports as
unschedulable or `force_serial_execution`, a load it does not classify as an async copy (cp.async / TMA
class), or a load ordered after a memory access of the body (memory/order edges) is not pipelined.  Every
other K-loop (a loop whose body runs an mma) stays synchronous and gets the remark
``Failed to pipeline loop`` (`KernelEmitter.remarks`), as the real tool's `tileas-unspecialized-pipeline`
reports it; the loop is then lowered exactly as without pipelining.

Stages
------
`CodegenOptions.pipeline_stages` (S, default 4: the real driver's `unspecialized-pipeline-num-stages=4`,
which overrides the pass's own default of 2; 1 or 0 disables pipelining).  The unit of the pipeline is a
*K chunk* of one iteration: the A rows x kc and kc x N of B, staged in one of S shared-memory buffers.  An
iteration has C = K / kc chunks; C is the smallest power of two for which S buffers fit the 48 KB of static
shared memory (with the scratch the rest of the loop body needs below them), and S is lowered (down to 2)
when no C fits.  Copies are issued S-1 units ahead:

    barrier                                   (no warp still reads scratch the buffers overlap)
    prologue: for u in 0..S-2: issue unit u (if its iteration exists); cp.async.commit_group
    loop over iterations, per unit t of the iteration:
        cp.async.wait_group S-2; barrier      unit t has landed; every warp is done with unit t-1
        issue unit t+S-1 into buffer (t-1)%S  (if its iteration exists); cp.async.commit_group
        mma k steps of unit t, fragments read from buffer t%S
    drain: cp.async.wait_group 0; barrier

A group is committed even when nothing is issued (past the end of the loop), so the group arithmetic holds
for trip counts 0, 1 and fewer than S.  The stage count is the same as the peeled prologue/steady
state/epilogue form of the seeds (prologue S-1 units); the drain needs no peeled iterations because the
tail iterations issue nothing.

Copies
------
The stage layout: A (b, m, k) row-major with k contiguous, rows of align16(kc * e) + 16 bytes; B (b, k, n)
row-major with n contiguous, rows of align16(N * e) + 16 bytes (the 16 bytes keep the fragment reads of a
warp in different banks), so a row of the tile is contiguous in both global and shared memory.  Strides are
run-time values, so the loop is emitted in up to three versions, the first whose (loop-invariant) condition
holds runs -- one copy path per version keeps the K-loop's registers down (a run-time choice per copy inside
one loop kept every path's addresses live and spilled):

* 16-byte `cp.async.cg` vectors (8 for shorter rows) when the innermost strides are 1 and the bases and all
  other strides are multiples of the vector;
* else 4-byte `cp.async.ca` (pairs of 16-bit / quads of 8-bit elements), or one 32/64-bit element per copy
  (no condition for those);
* else, for 8/16-bit elements only, one element at a time: a synchronous predicated `ld.global` +
  `st.shared` into the same buffers under the same barriers.

A thread's copies of a chunk are unrolled when there are at most UNROLLED_COPIES, else a loop LLVM is told
not to unroll.  Out-of-bounds elements read as zero through cp.async's src-size operand (0 for rows outside
the tensor, the bytes left for a vector that crosses the end of a row) -- the zero padding of the partition
view; other padding values are not pipelined.

The mma (lower_mma.lower_pipelined_mma; the FMA chain of f32 x f32 likewise) reads its fragments straight
from the buffer: 16-bit operands with `ldmatrix` (A `.x4`, B `.x4.trans`), others element by element through
the reshape/ftof chain (tf32 rounding, fp8 -> f16) -- the k steps, and so the accumulation order, are the
synchronous lowering's, so results are bit-identical to `pipeline_stages=1`.

Remarks and records
-------------------
`KernelEmitter.remarks` gets ``"<file:line:col | kernel>: remark: Failed to pipeline loop: <reason>"`` per
K-loop left synchronous; `KernelEmitter.pipelines` gets a `PipelineInfo` per pipelined loop (stages, chunks,
bytes per stage buffer, the versions emitted).

The scheduler's `ScheduleReport` is used as the legality oracle (above).  Its stage assignment is not used
to place ops: for every corpus K-loop the selector picks the serial generator (fewer than 8 ops), and the
materialization here has exactly two roles anyway -- the copies (producer, S-1 units ahead) and everything
else (consumer).

Shared memory
-------------
The buffers live in the kernel's scratch array at an offset above everything the loop body itself uses
(measured while the body is emitted; the offset is patched in afterwards), so layout changes inside the
body never touch them, while code before and after the loop may reuse the bytes (the barriers before the
prologue and after the drain separate them).  When the buffers do not fit after all, or anything in the
pipelined lowering fails, the loop is emitted again without pipelining (`snapshot`/`rollback`).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..ir import types as T
from ..ir.core import Block, Operation, Value
from ..ir.enums import MemoryOrderingSemantics as MO
from ..ir.enums import PaddingValue
from .emitter import SHARED_LIMIT, KernelEmitter, LoweringError
from .values import GLOBAL_PTR, SHARED_PTR, PartitionView, Tile, elem_bytes, llvm_type

FAILED = "Failed to pipeline loop"
ROW_PAD = 16
UNIT_ALIGN = 128
MIN_SM = 80
MIN_STAGES = 2

_WRITE_PREFIXES = ("store_", "atomic_", "memory_fence", "gdc_")
_EARLY_EXITS = ("continue", "break", "return")
# scalar ops that may sit between the induction variable and a load index (they cannot trap)
_SLICE_OPS = frozenset(("constant", "assume", "addi", "subi", "muli", "andi", "ori", "xori", "shli", "shri",
                        "select", "cmpi", "exti", "trunci", "maxi", "mini", "negi", "absi"))
_PLACEHOLDER = "@@PIPEBASE{}@@"
UNROLLED_COPIES = 4     # a thread's copies of one operand chunk are unrolled up to this many, else a loop


@dataclass(frozen=True)
class PipelineInfo:
    """What was built for one pipelined loop (KernelEmitter.pipelines; the benchmark prints it)."""
    kernel: str
    loc: int
    stages: int             # S: stage buffers
    chunks: int             # C: K chunks (pipeline units) per iteration
    kc: int                 # K per chunk
    unit_bytes: int         # shared memory per stage buffer (A + B, aligned)
    a_bytes: int
    b_bytes: int
    offset: int             # where buffer 0 starts in the scratch array
    versions: tuple         # the loop versions emitted ("wide16", "narrow4", "element", ...)


class PipelineAbort(Exception):
    """The pipelined emission of a loop cannot finish; the loop is emitted again synchronously."""


# ---------------------------------------------------------------------------------------------------------
# analysis
# ---------------------------------------------------------------------------------------------------------

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

    @property
    def eb(self) -> int:
        return elem_bytes(self.elem)

    @property
    def llvm(self) -> str:
        return llvm_type(self.elem)

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


def own_ops(block: Block):
    """The ops of a loop body, including those nested in `if`s, but not those of nested loops."""
    for op in block.ops:
        yield op
        if op.name not in ("for", "loop"):
            for region in op.regions:
                for b in region.blocks:
                    yield from own_ops(b)


def is_k_loop(op: Operation) -> bool:
    """A loop whose own body (not a nested loop's) runs an mma: what pipelining is about."""
    if op.name not in ("for", "loop") or not op.regions or not op.regions[0].blocks:
        return False
    return any(o.name in ("mmaf", "mmai") for o in own_ops(op.regions[0].block))


def _target_sm(em: KernelEmitter) -> int | None:
    from .lower_atomic import target_sm
    return target_sm(em)


def _gpu_name(em: KernelEmitter) -> str:
    tgt = em.options.target
    return getattr(tgt, "name", tgt)


def _uses(block: Block) -> dict[int, int]:
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


def _slice(v: Value, block: Block, top: set[int], out: dict[int, Operation]) -> bool:
    """Collect the in-body ops computing scalar `v` from the induction variable and loop invariants."""
    if v is block.args[0]:
        return True
    owner = v.owner
    if isinstance(owner, Block):
        return owner is not block and not _inside(owner, block)
    if not isinstance(owner, Operation):
        return False
    if id(owner) not in top:
        return not _defined_in(owner, block)
    if owner.name not in _SLICE_OPS or getattr(v.type, "shape", ()) != () or owner.regions:
        return False
    if id(owner) in out:
        return True
    for x in owner.operand_values():
        if not _slice(x, block, top, out):
            return False
    out[id(owner)] = owner
    return True


def _defined_in(op: Operation, block: Block) -> bool:
    return any(o is op for o in block.walk())


def _inside(inner: Block, block: Block) -> bool:
    for o in block.walk():
        for r in o.regions:
            if any(b is inner for b in r.blocks):
                return True
    return False


def analyze(em: KernelEmitter, op: Operation) -> Candidate | str | None:
    """A Candidate, a reason why this K-loop cannot be pipelined, or None (not a K-loop)."""
    if not is_k_loop(op):
        return None
    if op.name != "for":
        return "only counted `for` loops are pipelined"
    sm = _target_sm(em)
    if sm is None or sm < MIN_SM:
        return "cp.async needs sm_80 or later"
    body = op.regions[0].block
    if em.num_threads & (em.num_threads - 1):
        return "the thread count is not a power of two"
    mmas = [o for o in body.ops if o.name in ("mmaf", "mmai")]
    if len(mmas) != 1 or sum(o.name in ("mmaf", "mmai") for o in body.walk()) != 1:
        return "the loop body does not run exactly one mma"
    for o in own_ops(body):
        if o.name in _EARLY_EXITS and o is not body.ops[-1]:
            return "an iteration may end early"
    for o in body.walk():
        if o.name.startswith(_WRITE_PREFIXES):
            return f"the loop body writes memory ('{o.name}')"
    mma = mmas[0]
    top = {id(o) for o in body.ops}
    uses = _uses(body)
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
        if isinstance(view.owner, Operation) and _defined_in(view.owner, body):
            return f"the {x.role} load's view is made inside the loop"
        if view.type.padding not in (None, PaddingValue.zero):
            return f"the {x.role} view pads with a non-zero value"
        if ld.attrs.get("memory_ordering_semantics", MO.weak) != MO.weak:
            return f"the {x.role} load is not weak"
        if x.eb not in (1, 2, 4, 8):
            return f"the {x.role} element type cannot be copied asynchronously"
        for idx in ld.operands["index"]:
            if not _slice(idx, body, top, slices):
                return f"the {x.role} tile index depends on values the loop computes"
    slice_ops = [o for o in body.ops if id(o) in slices]
    return Candidate(op, mma, a, b, slice_ops)


def schedule_veto(em: KernelEmitter, cand: Candidate) -> str | None:
    """The scheduler's analysis as the legality oracle (None: no objection)."""
    try:
        from ..schedule.analyze import schedule_loop
        from ..schedule.machine import machine_model
        report = schedule_loop(cand.loop, machine_model(_gpu_name(em)))
    except Exception:  # noqa: BLE001 -- no model for this target: no objection
        return None
    if not report.ok:
        return f"the scheduler found no schedule ({report.message})"
    if report.rule == "force_serial_execution":
        return "the loop is marked force_serial_execution"
    body = cand.loop.regions[0].block
    index = {id(o): i for i, o in enumerate(body.ops[:-1])}
    loads = {index[id(cand.a.load)], index[id(cand.b.load)]}
    for o in report.ops:
        if o.index in loads and not o.async_capable:
            return f"the scheduler does not classify the loads as asynchronous copies ({o.rclass})"
    for e in report.edges:
        if e.dst in loads and e.kind in ("memory", "order") and e.src not in loads:
            return "a load is ordered after another memory access of the loop"
    return None


def remark(em: KernelEmitter, op: Operation, reason: str) -> None:
    em.remark("missed", "pipelining", "LoopNotPipelined", f"{FAILED}: {reason}", op)


# ---------------------------------------------------------------------------------------------------------
# geometry
# ---------------------------------------------------------------------------------------------------------

def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def _pow2(n: int) -> bool:
    return n > 0 and not n & (n - 1)


@dataclass
class Geometry:
    stages: int
    chunks: int         # C: units per iteration
    kc: int             # K per unit
    unit_bytes: int


def _operand_layout(x: Operand, kc: int) -> None:
    """Stage layout of one operand for K chunks of kc (sets kdim, strides, row, nbytes)."""
    shape = x.operand_shape
    e = x.eb
    rank = len(shape)
    if x.role == "a":   # ([B,] M, K): rows of kc elements
        x.row = _align(kc * e, 16) + ROW_PAD
        lead = (shape[-2] * x.row,) if rank == 3 else ()
        ostrides = lead + (x.row, e)
        rows = prod(shape[:-1])
        x.kdim = x.lead + rank - 1
    else:               # ([B,] K, N): kc rows of N elements
        x.row = _align(shape[-1] * e, 16) + ROW_PAD
        lead = (kc * x.row,) if rank == 3 else ()
        ostrides = lead + (x.row, e)
        rows = prod(shape[:-2]) * kc
        x.kdim = x.lead + rank - 2
    x.strides = (0,) * x.lead + ostrides
    x.nbytes = rows * x.row


def plan_geometry(cand: Candidate, k: int, min_kc: int, stages: int, budget: int) -> Geometry | None:
    """The fewest chunks per iteration (then the most stages) whose buffers fit `budget` bytes."""
    for s in range(stages, MIN_STAGES - 1, -1):
        c = 1
        while k // c >= max(1, min_kc) and _pow2(k // c):
            kc = k // c
            _operand_layout(cand.a, kc)
            _operand_layout(cand.b, kc)
            cand.a.base = 0
            cand.b.base = _align(cand.a.nbytes, UNIT_ALIGN)
            unit = _align(cand.b.base + cand.b.nbytes, UNIT_ALIGN)
            if s * unit <= budget:
                return Geometry(s, c, kc, unit)
            c *= 2
    return None


# ---------------------------------------------------------------------------------------------------------
# the pipeline of one loop
# ---------------------------------------------------------------------------------------------------------

@dataclass
class StagedTile:
    """What a pipelined load (and a reshape / ftof of it) is while the body is emitted: no registers, the
    tile lives in the stage buffers; the mma reads it from there."""
    operand: Operand
    type: T.TileType


class Pipeline:
    _counter = 0

    def __init__(self, em: KernelEmitter, cand: Candidate, geom: Geometry, instr):
        self.em = em
        self.cand = cand
        self.geom = geom
        self.instr = instr                      # lower_mma.Instr, or None for the FMA chain
        Pipeline._counter += 1
        self.token = _PLACEHOLDER.format(Pipeline._counter)
        self.base = None                        # i32 entry value: byte offset of buffer 0 in the scratch
        self.bufj = None                        # i32: buffer of the iteration's first unit (None: always 0)
        self.iv = None
        self.units_done = 0

    # -- overrides ------------------------------------------------------------------------------------
    def install(self) -> None:
        em = self.em
        for x in (self.cand.a, self.cand.b):
            em.op_overrides[id(x.load)] = self._lower_load
            for o in x.chain:
                em.op_overrides[id(o)] = self._lower_chain
        em.op_overrides[id(self.cand.mma)] = self._lower_mma

    def uninstall(self) -> None:
        for x in (self.cand.a, self.cand.b):
            self.em.op_overrides.pop(id(x.load), None)
            for o in x.chain:
                self.em.op_overrides.pop(id(o), None)
        self.em.op_overrides.pop(id(self.cand.mma), None)

    def _lower_load(self, em: KernelEmitter, op: Operation) -> None:
        x = self.cand.a if op is self.cand.a.load else self.cand.b
        em.set(op.results[0], StagedTile(x, op.results[0].type))
        em.set(op.results[1], None)

    def _lower_chain(self, em: KernelEmitter, op: Operation) -> None:
        src = em.get(op.operands["source" if op.name == "reshape" else "from"])
        em.set(op.result, StagedTile(src.operand, op.result.type))

    def _lower_mma(self, em: KernelEmitter, op: Operation) -> None:
        from .lower_mma import lower_pipelined_mma
        self.units_done = 0
        lower_pipelined_mma(em, op, self)
        if self.units_done != self.geom.chunks:
            raise PipelineAbort(f"the mma consumed {self.units_done} of {self.geom.chunks} units")

    # -- the loop -----------------------------------------------------------------------------------------
    def prologue(self, lb: Tile, ub: Tile, step: Tile, unsigned: bool) -> None:
        """Before the loop: a barrier, the copy paths of each operand, the first S-1 units."""
        em = self.em
        self.it = lb.llvm
        self.ub = ub.regs[0]
        self.step = step.regs[0]
        self.cmp = "ult" if unsigned else "slt"
        if self.base is None:
            self.base = em.b.entry_value(f"add i32 0, {self.token}", "pipebase")
        em.barrier()
        for u in range(self.geom.stages - 1):
            d, chunk = divmod(u, self.geom.chunks)
            self._issue(lb.regs[0], d, chunk, str(self._buffer_offset_const(u % self.geom.stages)))
            self._commit()

    def header(self, pre: str) -> None:
        """In the loop header (with the other phis): the buffer index of the iteration's first unit."""
        if self.geom.chunks % self.geom.stages:
            self._bufj_phi = self.em.b.phi("i32", "pbuf")
            self._bufj_phi.add("0", pre)
            self.bufj = self._bufj_phi.name

    def enter_body(self, iv: str) -> None:
        """At the start of the body: from here on, scratch the body uses is measured (`inner`)."""
        self.iv = iv
        self._outer = self.em.shared_bytes
        self.em.shared_bytes = 0

    def leave_body(self) -> None:
        self.inner = self.em.shared_bytes
        self.em.shared_bytes = max(self._outer, self.inner)

    def latch(self, label: str) -> None:
        if self.bufj is not None:
            nxt = self._mod(self.em.b.value(f"add i32 {self.bufj}, {self.geom.chunks}"))
            self._bufj_phi.add(nxt, label)

    def drain(self) -> None:
        self._wait(0)
        self.em.barrier()

    def finish(self, inner_scratch: int) -> None:
        """After the loop: place the buffers above the scratch the body used, check the budget."""
        em = self.em
        p = _align(inner_scratch, UNIT_ALIGN) if inner_scratch else 0
        total = p + self.geom.stages * self.geom.unit_bytes
        if total > SHARED_LIMIT:
            raise PipelineAbort(f"stage buffers need {total} bytes above {p} bytes of scratch")
        for _, lines in em.b.fn.blocks:
            for i, ln in enumerate(lines):
                if isinstance(ln, str) and self.token in ln:
                    lines[i] = ln.replace(self.token, str(p))
        em.reserve_shared(total)
        g = self.geom
        em.remark("passed", "pipelining", "LoopPipelined",
                   f"K-loop software-pipelined: {self.geom.stages} stages of cp.async copies into shared memory "
                   f"({self.geom.chunks} K-chunk(s) of {self.geom.kc} per iteration; versions: "
                   f"{', '.join(self.version_names)})", self.cand.loop)
        em.pipelines.append(PipelineInfo(
            kernel=em.fn.name.decode(errors="replace"), loc=self.cand.loop.loc, stages=g.stages, chunks=g.chunks,
            kc=g.kc, unit_bytes=g.unit_bytes, a_bytes=self.cand.a.nbytes, b_bytes=self.cand.b.nbytes,
            offset=p, versions=self.version_names))

    # -- units -------------------------------------------------------------------------------------------
    def unit(self, u: int) -> str:
        """Called by the mma before it reads unit u of this iteration: wait for it, issue the unit S-1
        ahead, and return the i32 scratch offset of the buffer holding unit u."""
        em = self.em
        if u != self.units_done:
            raise PipelineAbort("units consumed out of order")
        self.units_done += 1
        s, c = self.geom.stages, self.geom.chunks
        self._wait(s - 2)
        em.barrier()
        ahead = u + s - 1
        d, chunk = divmod(ahead, c)
        self._issue(self.iv, d, chunk, self._buffer_offset(ahead), guard=d > 0)
        self._commit()
        return self._buffer_offset(u)

    def _mod(self, x: str) -> str:
        s = self.geom.stages
        if _pow2(s):
            return self.em.b.value(f"and i32 {x}, {s - 1}")
        return self.em.b.value(f"urem i32 {x}, {s}")

    def _buffer_offset_const(self, buf: int) -> str:
        off = buf * self.geom.unit_bytes
        return self.base if off == 0 else self.em.b.value(f"add i32 {self.base}, {off}")

    def _buffer_offset(self, u: int) -> str:
        """Offset of the buffer of unit u of the current iteration (u may run past the iteration)."""
        if self.bufj is None:
            return self._buffer_offset_const(u % self.geom.stages)
        em = self.em
        b = self._mod(em.b.value(f"add i32 {self.bufj}, {u}")) if u else self.bufj
        off = em.b.value(f"mul i32 {b}, {self.geom.unit_bytes}")
        return em.b.value(f"add i32 {self.base}, {off}")

    def _wait(self, n: int) -> None:
        self.em.b.asm("void", f"cp.async.wait_group {n};", "~{memory}", [])

    def _commit(self) -> None:
        self.em.b.asm("void", "cp.async.commit_group;", "~{memory}", [])

    # -- copies --------------------------------------------------------------------------------------------
    def _issue(self, iv: str, d: int, chunk: int, buf_off: str, guard: bool = True) -> None:
        """Copy chunk `chunk` of both operands of iteration (iv + d*step) into the buffer at buf_off;
        when `guard`, only if that iteration runs."""
        em = self.em
        target_iv = iv
        if d:
            dd = em.b.value(f"mul {self.it} {self.step}, {d}")
            target_iv = em.b.value(f"add {self.it} {iv}, {dd}")
        join = None
        if guard:
            runs = em.b.value(f"icmp {self.cmp} {self.it} {target_iv}, {self.ub}")
            go, join = em.b.reserve_block("pl.issue"), em.b.reserve_block("pl.issued")
            em.b.cond_br(runs, go, join)
            em.b.start_block(go)
        index = self._indices(target_iv)
        for x in (self.cand.a, self.cand.b):
            self._copy_path(x, index[x.role], chunk, buf_off, x.vb)
        if join is not None:
            em.b.br(join)
            em.b.start_block(join)

    def _indices(self, iv: str) -> dict[str, list[Tile]]:
        """The loads' index tiles for the iteration whose induction variable is `iv` (the slice of the
        body that computes them re-emitted with that value)."""
        em = self.em
        block = self.cand.loop.regions[0].block
        arg = block.args[0]
        saved = {id(arg): em.env.get(id(arg))}
        for o in self.cand.slice_ops:
            for r in o.results:
                saved[id(r)] = em.env.get(id(r))
        em.set(arg, Tile(arg.type, None, [iv]))
        try:
            for o in self.cand.slice_ops:
                em.emit_op(o)
            return {x.role: [em.get(v) for v in x.load.operands["index"]] for x in (self.cand.a, self.cand.b)}
        finally:
            for k, v in saved.items():
                if v is None:
                    em.env.pop(k, None)
                else:
                    em.env[k] = v

    def versions(self) -> list[tuple[dict | None, str | None]]:
        """The loop versions, in order: ({role: bytes per copy} or None for the synchronous loop, the i1
        condition under which it runs or None: always).  Emitted in the current block (loop invariant).

        * wide: the widest copy (up to 16 bytes) the tile rows allow, when the views are aligned to it;
        * narrow: 4-byte copies (pairs/quads of 16/8-bit elements), or one 32/64-bit element per copy,
          which needs no alignment beyond the element's;
        * one element at a time (a synchronous load and shared store for 8/16-bit elements, in the same
          buffers and barriers), when 16/8-bit rows are not even 4-byte aligned."""
        xs = (self.cand.a, self.cand.b)
        wide, narrow = {}, {}
        for x in xs:
            inner = self.geom.kc * x.eb if x.kdim == len(x.tile_shape) - 1 else x.tile_shape[-1] * x.eb
            wide[x.role] = min(16, inner)
            narrow[x.role] = max(x.eb, 4)
            if inner < narrow[x.role]:
                return []       # rows too short for any copy
        out = []
        if any(wide[x.role] > narrow[x.role] for x in xs):
            out.append((wide, self._all_aligned(wide)))
        needs = {x.role: 4 for x in xs if x.eb < 4}
        ncond = self._all_aligned(needs) if needs else None
        out.append((narrow, ncond))
        if ncond is not None:   # one element at a time: synchronous for 8/16-bit elements
            out.append(({x.role: x.eb for x in xs}, None))
        return out

    def _all_aligned(self, vbs: dict) -> str:
        em = self.em
        cond = None
        for x in (self.cand.a, self.cand.b):
            if x.role in vbs and vbs[x.role] > x.eb:
                c = self._aligned(x, em.get(x.load.operands["view"]), vbs[x.role])
                cond = c if cond is None else em.b.value(f"and i1 {cond}, {c}")
        return cond if cond is not None else "true"

    def _aligned(self, x: Operand, pv: PartitionView, vb: int) -> str:
        """i1: the view's innermost stride is 1, its base and all other strides are multiples of vb bytes."""
        em = self.em
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

    def _copy_path(self, x: Operand, index: list[Tile], chunk: int, buf_off: str, vb: int) -> None:
        """Copy chunk `chunk` of operand x's tile (tile indices `index`) into the buffer at `buf_off`, vb
        bytes per copy: cp.async (zero-filling what lies outside the tensor) or, for 8/16-bit elements one
        at a time, a predicated load and a shared store.  The copies of the chunk are spread over the
        threads, row-major with the innermost dimension fastest; a thread's copies are unrolled when there
        are few, else a loop (so their addresses are not all kept live across the K-loop)."""
        em = self.em
        pv: PartitionView = em.get(x.load.operands["view"])
        view = pv.view
        dims = pv.type.dim_map
        ts = x.tile_shape
        rank = len(ts)
        v = vb // x.eb                      # elements per copy
        sub = list(ts)
        sub[x.kdim] = self.geom.kc
        sub_v = sub[:-1] + [sub[-1] // v]   # copies per dimension
        nv = prod(sub_v)
        T_ = em.num_threads
        shifts, acc = [], 0
        for n in reversed(sub_v):
            shifts.append(acc)
            acc += n.bit_length() - 1
        shifts.reverse()
        starts = []                         # per dimension: the chunk's first element (i64)
        for d in range(rank):
            idx = index[d]
            i64 = idx.regs[0] if idx.llvm == "i64" else em.b.value(f"sext {idx.llvm} {idx.regs[0]} to i64")
            st = em.b.value(f"mul i64 {i64}, {ts[d]}")
            if d == x.kdim and chunk:
                st = em.b.value(f"add i64 {st}, {chunk * self.geom.kc}")
            starts.append(st)
        fill = [None]

        def coords_of(q: str, entry: bool) -> list[str]:
            val = em.b.entry_value if entry else em.b.value
            out = []
            for d in range(rank):
                if sub_v[d] == 1:
                    out.append("0")
                    continue
                c = val(f"lshr i32 {q}, {shifts[d]}") if shifts[d] else q
                c = val(f"and i32 {c}, {sub_v[d] - 1}")
                if d == rank - 1 and v > 1:
                    c = val(f"mul i32 {c}, {v}")
                out.append(c)
            return out

        def copy(coord: list[str]) -> None:
            offset, inb, last = "0", None, None
            dst = em.b.value(f"add i32 {buf_off}, {x.base}") if x.base else buf_off
            for d in range(rank):
                pos = starts[d]
                if coord[d] != "0":
                    c64 = em.b.value(f"zext i32 {coord[d]} to i64")
                    pos = em.b.value(f"add i64 {pos}, {c64}")
                    if x.strides[d]:
                        dst = em.b.value(f"add i32 {dst}, {em.b.value(f'mul i32 {coord[d]}, {x.strides[d]}')}")
                last = pos
                ok = em.b.value(f"icmp ult i64 {pos}, {view.shape[dims[d]]}")
                inb = ok if inb is None else em.b.value(f"and i1 {inb}, {ok}")
                term = em.b.value(f"mul i64 {pos}, {view.strides[dims[d]]}")
                offset = term if offset == "0" else em.b.value(f"add i64 {offset}, {term}")
            lt = x.llvm if x.llvm != "i1" else "i8"
            addr = em.b.value(f"getelementptr {lt}, {GLOBAL_PTR} {view.base}, i64 {offset}", "ga")
            p = em.b.value(f"getelementptr i8, {SHARED_PTR} {em.scratch}, i32 {dst}", "sp")
            if vb < 4:  # an 8/16-bit element: a synchronous predicated load and a shared store
                from .lower_memory import padding_constant, predicated_load
                if fill[0] is None:
                    fill[0] = padding_constant(x.elem, pv.type.padding)
                val = predicated_load(em, x.load, addr, inb, x.elem, fill[0])
                em.b.emit(f"store {x.llvm} {val}, {SHARED_PTR} {p}, align {x.eb}")
                return
            if v > 1:   # the vector may cross the end of the row: copy what is left of it
                left = em.b.value(f"sub i64 {view.shape[dims[rank - 1]]}, {last}")
                short = em.b.value(f"icmp slt i64 {left}, {v}")
                cnt = em.b.value(f"trunc i64 {em.b.value(f'select i1 {short}, i64 {left}, i64 {v}')} to i32")
                nbytes = em.b.value(f"mul i32 {cnt}, {x.eb}") if x.eb > 1 else cnt
                nbytes = em.b.value(f"select i1 {inb}, i32 {nbytes}, i32 0")
            else:
                nbytes = em.b.value(f"select i1 {inb}, i32 {vb}, i32 0")
            safe = em.b.value(f"select i1 {inb}, {GLOBAL_PTR} {addr}, {GLOBAL_PTR} {view.base}")
            p32 = em.b.value(f"ptrtoint {SHARED_PTR} {p} to i32")
            kind = "cg" if vb == 16 else "ca"
            em.b.asm("void", f"cp.async.{kind}.shared.global [$0], [$1], {vb}, $2;", "r,l,r,~{memory}",
                     [("i32", p32), (GLOBAL_PTR, safe), ("i32", nbytes)])

        if nv <= T_:        # one copy per thread (threads past nv repeat copies: same data, same place)
            q = em.tid if nv == T_ else em.b.entry_value(f"and i32 {em.tid}, {nv - 1}")
            copy(coords_of(q, True))
            return
        per = nv // T_
        if per <= UNROLLED_COPIES:
            base = coords_of(em.tid, True)
            tbits = T_.bit_length() - 1
            for it in range(per):
                rem = it * T_
                coord = []
                for d in range(rank):
                    k = ((rem >> shifts[d]) & (sub_v[d] - 1)) * (v if d == rank - 1 else 1)
                    c = base[d] if shifts[d] < tbits else "0"
                    if k:
                        c = str(k) if c == "0" else em.b.value(f"add i32 {c}, {k}")
                    coord.append(c)
                copy(coord)
            return

        # for (i = 0; i < per; i++): a loop LLVM must not unroll
        pre = em.b.block_label
        loop, done = em.b.reserve_block("pl.cp.loop"), em.b.reserve_block("pl.cp.done")
        em.b.br(loop)
        em.b.start_block(loop)
        i = em.b.phi("i32", "cpi")
        i.add("0", pre)
        q = em.b.value(f"add i32 {em.tid}, {em.b.value(f'mul i32 {i.name}, {T_}')}")
        copy(coords_of(q, False))
        nxt = em.b.value(f"add i32 {i.name}, 1")
        i.add(nxt, em.b.block_label)
        more = em.b.value(f"icmp ult i32 {nxt}, {per}")
        em.b.emit(f"br i1 {more}, label %{loop}, label %{done}, !llvm.loop {_no_unroll(em)}")
        em.b.start_block(done)


def _no_unroll(em: KernelEmitter) -> str:
    """A fresh `!llvm.loop` node that disables unrolling."""
    mir = em.module_ir
    off = mir.md('!{!"llvm.loop.unroll.disable"}')
    ref = f"!{len(mir.metadata)}"
    got = mir.md(f"!{{{ref}, {off}}}", distinct=True)
    assert got == ref
    return ref


# ---------------------------------------------------------------------------------------------------------
# driving it from the `for` lowering
# ---------------------------------------------------------------------------------------------------------

def plan(em: KernelEmitter, op: Operation, reserve: int = 0) -> Pipeline | None:
    """The Pipeline for a `for` op, or None (with a remark when it is a K-loop that cannot be pipelined)."""
    stages = int(getattr(em.options, "pipeline_stages", 1) or 1)
    if stages < MIN_STAGES or op.name != "for":
        return None
    r = analyze(em, op)
    if r is None:
        return None
    if isinstance(r, str):
        remark(em, op, r)
        return None
    veto = schedule_veto(em, r)
    if veto:
        remark(em, op, veto)
        return None
    from ..tilegpu.mma import _dims, plan_for
    try:
        mplan = plan_for(em.options, r.mma)
    except LoweringError as e:
        remark(em, op, str(e))
        return None
    _, _, _, k = _dims(r.mma.operands["lhs"].type)
    instr = mplan.instr if mplan is not None else None
    min_kc = min(instr.k, k) if instr is not None else 1
    geom = plan_geometry(r, k, min_kc, stages, SHARED_LIMIT - _align(reserve, UNIT_ALIGN))
    if geom is None:
        remark(em, op, f"{MIN_STAGES} stage buffers do not fit in {SHARED_LIMIT} bytes of shared memory")
        return None
    return Pipeline(em, r, geom, instr)


@dataclass
class Snapshot:
    nblocks: int
    lens: list[int]
    label: str
    env: dict
    thread_coords: dict
    shared: int
    stacks: tuple
    hooks: dict
    overrides: dict
    globals: int
    records: tuple


def snapshot(em: KernelEmitter) -> Snapshot:
    return Snapshot(len(em.b.fn.blocks), [len(lines) for _, lines in em.b.fn.blocks], em.b.block_label,
                    dict(em.env), dict(em._thread_coords), em.shared_bytes,
                    (len(em.loops), len(em.if_merges), len(em.inline_yields), len(em.inline_depth_marks)),
                    {k: list(v) for k, v in em.block_exit_hooks.items()}, dict(em.op_overrides),
                    len(em.module_ir.globals), (len(em.remarks), len(em.pipelines)))


def rollback(em: KernelEmitter, s: Snapshot) -> None:
    blocks = em.b.fn.blocks
    del blocks[s.nblocks:]
    for (_, lines), n in zip(blocks, s.lens):
        del lines[n:]
    em.b.block_label = s.label
    em.env.clear()
    em.env.update(s.env)
    em._thread_coords.clear()
    em._thread_coords.update(s.thread_coords)
    em.shared_bytes = s.shared
    del em.loops[s.stacks[0]:]
    del em.if_merges[s.stacks[1]:]
    del em.inline_yields[s.stacks[2]:]
    del em.inline_depth_marks[s.stacks[3]:]
    em.block_exit_hooks.clear()
    em.block_exit_hooks.update(s.hooks)
    em.op_overrides.clear()
    em.op_overrides.update(s.overrides)
    del em.module_ir.globals[s.globals:]
    del em.remarks[s.records[0]:]
    del em.pipelines[s.records[1]:]


def _emit_versions(em: KernelEmitter, op: Operation, pipe: Pipeline, emit_loop) -> int:
    """The loop once per version (`Pipeline.versions`), the first whose condition holds runs; the
    results meet in a join block.  Returns the most scratch a pipelined version's body used."""
    from .lower_control import _Edges
    versions = pipe.versions()
    if not versions:
        raise PipelineAbort("the tile rows are shorter than a 4-byte copy")
    inner = 0
    pipe.version_names = tuple(_version_name(v) for v, _ in versions)
    merge = _Edges(None) if len(versions) > 1 else None
    done = em.b.reserve_block("pl.join") if merge is not None else None
    for vbs, cond in versions:
        nxt = None
        if cond is not None:
            yes, nxt = em.b.reserve_block("pl.version"), em.b.reserve_block("pl.next")
            em.b.cond_br(cond, yes, nxt)
            em.b.start_block(yes)
        if vbs is None:
            emit_loop(None)
        else:
            for x in (pipe.cand.a, pipe.cand.b):
                x.vb = vbs[x.role]
            pipe.install()
            emit_loop(pipe)
            pipe.uninstall()
            inner = max(inner, pipe.inner)
        if merge is not None:
            merge.add(em, [em.get(r) for r in op.results])
            em.b.br(done)
        if nxt is not None:
            em.b.start_block(nxt)
    if merge is not None:
        em.b.start_block(done)
        for r, t in zip(op.results, merge.join(em, [r.type for r in op.results])):
            em.set(r, t)
    return inner


def _version_name(vbs: dict | None) -> str:
    if vbs is None:
        return "synchronous"
    return "+".join(f"{role}{vb}" for role, vb in sorted(vbs.items()))


def lower_pipelined(em: KernelEmitter, op: Operation, emit_loop) -> bool:
    """Emit `op` pipelined if possible: `emit_loop(pipeline)` emits one version of the loop,
    `emit_loop(None)` the synchronous one.  False when the caller must emit it plainly (everything the
    attempt emitted is rolled back, and a remark says why)."""
    reserve = 0
    for _attempt in range(2):
        pipe = plan(em, op, reserve)
        if pipe is None:
            return False
        snap = snapshot(em)
        pipe.inner = 0
        try:
            inner = _emit_versions(em, op, pipe, emit_loop)
            pipe.finish(inner)
            return True
        except (LoweringError, PipelineAbort) as e:
            inner = pipe.inner
            rollback(em, snap)
            if isinstance(e, PipelineAbort) and reserve == 0 and inner:
                reserve = inner     # the body needs scratch below the buffers: plan again with less room
                continue
            remark(em, op, str(e) or type(e).__name__)
            return False
    remark(em, op, "the stage buffers do not fit above the loop body's scratch")
    return False
