"""Machine models for the modulo scheduler: slot ids, per-family resource classes, op classification.

Slots
-----
The seeds' Blackwell pipeline model (wiki "Blackwell Pipeline 15-Slot Model") names 24 one-based slot
ids; the reservation-table bit of slot ``s`` is ``1 << (s - 1)``, so one Python int of 64 bits holds a
row.  Every family uses the same vocabulary (a family simply never uses slots it has no hardware for:
sm_80 has no ``tma``; only sm_100 has tensor memory).

Resource vectors
----------------
An op's resource vector is a tuple of :class:`ResourceUse` ``(slot, offset, duration)`` -- the op holds
``slot`` during cycles ``[start + offset, start + offset + duration)`` -- plus optional pool requests
(:class:`PoolUse`, an amount held over the same kind of window) and a latency: the cycles after the
op's start at which its results (and its output token) are available to a dependent op.  Footprint
length and latency are different things (wiki: "a long-latency value can occupy an issue slot for only
a moment, while a transport operation can hold transport resources across several cycles").

Capacities: every slot has capacity 1 (a singleton, the seeds' transports) unless the model's
``slot_caps`` says otherwise.  The seeds' hard caps "ALU 3" and "FMA-heavy 4" become capacities of the
``alu`` and ``alu_or_fmaheavy`` slots; ``dual_alu`` and ``fp32x2_fp16ultra`` get 2 (two datapaths; an
assumption).  Pools: ``smem_bytes`` (the SMEM byte budget, 232448 on sm_90/sm_100 -- the seeds' value --,
and the CUDA per-block maxima 166912 on sm_80 and 101376 on sm_120) is requested by every op that stages
a tile in shared memory, for as long as it holds its SMEM transport window.

What the generated code does
----------------------------
A schedule is only worth showing when it describes the code: every class an op is given names the
instruction the tile-GPU lowering emits for it on that target.  Tile loads of a software-pipelined
K-loop are booked as ``cp.async`` copies on every family but for an operand choose-stage-copies, before the
schedule, gave TMA stage copies (its ``stage_copy = "tma"`` attribute): ``tma_load``; loads of a loop that
runs in program order are ``ld.global`` into registers (``machine_model(..., copies="ld.global")``) but for
a load select-tile-tensor-copies made a TMA copy (its ``tma`` attribute): ``tma_load`` on any model, and
an mma is classed by the instruction select-mma recorded on it (its ``instruction`` attribute):
``mma_sync`` (mma.sync fed by ldmatrix, synchronous), ``wgmma`` (sm_90, async) or ``tcgen05`` (the
sm_100 family, async); an FMA chain is f32 arithmetic.  ``copies="tma"`` (every eligible view access TMA:
the seeds' model and its worked example) is never what the compiler asks for; the TMA classes it uses are
those of the loads the tile-TMA pass decided.

Families and their documented assumptions
-----------------------------------------
* ``sm_100`` (sm_100/103/107/110) -- the seeds' model, verbatim where the wiki gives numbers:
  latencies dual ALU 2, ALU/FMA-heavy/fp32x2 4, transports 7, TC/MMA issue 8; vectors
  wgmma/tcgen05 ``(tc_and_mma,0,8)+(tp_mma,0,8)``, smem_write ``(tp_smem_wr,0,7)``, smem_read
  ``(tp_smem_rd,0,7)``.  The TMA load is ``(tma,0,8)+(tp_smem_wr,7,1)``: the descriptor stays parked
  on ``tma`` for the whole 8-cycle round trip and the payload's SMEM write-transport beat is the
  round trip's last cycle.  This is the one reading of the wiki's ``(12,8)+(16,8)`` under which its
  own worked example (II = 8 with a 7-cycle smem_write sharing ``tp_smem_wr`` at capacity 1, the
  write pushed to stage 1 "after the TMA tail drains") is a valid modulo schedule; read literally
  (``tp_smem_wr`` held 8 cycles) the example needs 8 + 7 = 15 rows of a capacity-1 slot and no II = 8
  schedule exists.  See ``schedule/README.md``.
* ``sm_120`` (sm_120/121) -- the same Blackwell model, but consumer Blackwell has no tcgen05/TMEM: its
  MMA is mma.sync; SMEM budget 101376.
* ``sm_90`` -- the Blackwell vectors (the wiki's wgmma vector is Hopper's wgmma); f32 arithmetic issues
  on ``alu_or_fmaheavy`` (Hopper has no paired FP32x2), packed f16/bf16 on ``fp32x2_fp16ultra``.
* ``sm_80`` (sm_80/86/87/88/89) -- no TMA hardware; MMA is mma.sync; SMEM 166912.  Latencies are the
  Blackwell ones (the seeds give no other table).

On every family a cp.async copy is ``(lsu,0,1)+(tp_gnic_rd,0,7)+(tp_smem_wr,7,1)`` (async-capable:
multistage cp.async pipelines) and mma.sync fed by ldmatrix ``(tc_and_mma,0,8)+(tp_smem_rd,0,4)``,
synchronous.

Classes the seeds give no numbers for (assumptions): XU (math) ``(xu,0,2)`` latency 8, f64 XU
``(xu64,0,4)`` latency 16, f64 FMA ``(alu_or_fmaheavy,0,2)`` latency 8, integer divide
``(alu_or_fmaheavy,0,4)`` latency 16, reduce/scan ``(alu_or_fmaheavy,0,2)+(tp_smem_wr,2,1)+
(tp_smem_rd,3,1)`` latency 12 (in-register combine + shuffles, then a cross-warp SMEM exchange),
shape ops an SMEM round trip ``(tp_smem_wr,0,7)+(tp_smem_rd,7,7)`` latency 14, LSU global load/store
``(lsu,0,1)+(tp_gnic_rd|wr,0,7)`` latency 7, ordered side effects (print, assert, fences, gdc)
``(lsu,0,1)`` latency 1.  Token ops, constants, views and queries are free (no slots, latency 0).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..ir import types as T
from ..ir.attrs import BoolAttr, DictAttr, IntegerAttr, OptimizationHintsAttr

# ---------------------------------------------------------------------------
# slots
# ---------------------------------------------------------------------------

SLOT_NAMES: tuple[str, ...] = (
    "issue", "xu", "xu64", "fp32x2_fp16ultra", "alu", "alu_or_fmaheavy", "dual_alu", "lsu",
    "tmem", "mma", "tc_and_mma", "tma", "tp_gnic_rd", "tp_gnic_wr", "tp_smem_rd", "tp_smem_wr",
    "tp_tmem_rd", "tp_tmem_wr", "tp_mma", "unknown", "omitted_simt", "test_simt", "test_mma", "test_dma",
)
SLOT: dict[str, int] = {name: i + 1 for i, name in enumerate(SLOT_NAMES)}
NUM_SLOTS = len(SLOT_NAMES)
ROW_BITS = 64  # one reservation-table row is a 64-bit integer


def slot_bit(slot: int) -> int:
    """The reservation-table row bit of a one-based slot id."""
    if not 1 <= slot <= ROW_BITS:
        raise ValueError(f"slot id {slot} out of range 1..{ROW_BITS}")
    return 1 << (slot - 1)


def slot_name(slot: int) -> str:
    return SLOT_NAMES[slot - 1] if 1 <= slot <= NUM_SLOTS else f"slot{slot}"


def mask_slots(mask: int) -> list[int]:
    """The slot ids whose bits are set in a row mask, ascending."""
    out = []
    s = 1
    while mask:
        if mask & 1:
            out.append(s)
        mask >>= 1
        s += 1
    return out


# ---------------------------------------------------------------------------
# resource vectors
# ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ResourceUse:
    """The op holds `slot` (one unit of its capacity) during [start+offset, start+offset+duration)."""
    slot: int
    offset: int
    duration: int

    def __post_init__(self):
        if self.offset < 0 or self.duration < 1:
            raise ValueError(f"bad resource use {self}")


@dataclass(frozen=True, slots=True)
class PoolUse:
    """`amount` units of a counted pool held during [start+offset, start+offset+duration)."""
    pool: str
    amount: int
    offset: int
    duration: int


@dataclass(frozen=True, slots=True)
class OpResources:
    """What one scheduling node costs: its resource vector, pools and result latency."""
    rclass: str
    uses: tuple[ResourceUse, ...] = ()
    latency: int = 0
    pools: tuple[PoolUse, ...] = ()
    async_capable: bool = False
    note: str = ""

    @property
    def length(self) -> int:
        """Footprint duration: rows [0, length) relative to the start (max over the triples)."""
        ends = [u.offset + u.duration for u in self.uses] + [p.offset + p.duration for p in self.pools]
        return max(ends, default=0)

    def rows(self) -> list[int]:
        """The footprint as row masks F[0..length): the OR of the triples' bits per cycle."""
        rows = [0] * self.length
        for u in self.uses:
            b = slot_bit(u.slot)
            for k in range(u.offset, u.offset + u.duration):
                rows[k] |= b
        return rows

    def describe(self) -> str:
        parts = [f"{slot_name(u.slot)}@{u.offset}+{u.duration}" for u in self.uses]
        parts += [f"{p.pool}[{p.amount}]@{p.offset}+{p.duration}" for p in self.pools]
        return ",".join(parts) if parts else "-"


@dataclass(frozen=True, slots=True)
class ClassSpec:
    """A resource class of a family: its slot triples, latency and flags."""
    uses: tuple[tuple[str, int, int], ...]   # (slot name, offset, duration)
    latency: int
    async_capable: bool = False
    smem_tile: bool = False                  # requests the tile's bytes from the smem_bytes pool
    desc: str = ""


def _u(*triples: tuple[str, int, int]) -> tuple[tuple[str, int, int], ...]:
    return tuple(triples)


# -- the seeds' Blackwell classes -------------------------------------------------------------------
_BLACKWELL: dict[str, ClassSpec] = {
    "free": ClassSpec((), 0, desc="token ops, constants, views, queries: no issue cost"),
    "int": ClassSpec(_u(("dual_alu", 0, 1)), 2, desc="integer arithmetic/logic/compare (dual ALU)"),
    "fp32": ClassSpec(_u(("fp32x2_fp16ultra", 0, 1)), 4, desc="f32 add/sub/mul/fma (paired FP32x2)"),
    "fp16x2": ClassSpec(_u(("fp32x2_fp16ultra", 0, 1)), 4, desc="packed f16/bf16 arithmetic"),
    "fmaheavy": ClassSpec(_u(("alu_or_fmaheavy", 0, 1)), 4, desc="float min/max/abs/neg/cmp/select, IMAD"),
    "fp64": ClassSpec(_u(("alu_or_fmaheavy", 0, 2)), 8, desc="f64 arithmetic (assumption)"),
    "alu": ClassSpec(_u(("alu", 0, 1)), 4, desc="conversions, casts, iota, rounding"),
    "idiv": ClassSpec(_u(("alu_or_fmaheavy", 0, 4)), 16, desc="integer divide/remainder (assumption)"),
    "xu": ClassSpec(_u(("xu", 0, 2)), 8, desc="transcendental on the XU (assumption)"),
    "xu64": ClassSpec(_u(("xu64", 0, 4)), 16, desc="f64 transcendental (assumption)"),
    "tma_load": ClassSpec(_u(("tma", 0, 8), ("tp_smem_wr", 7, 1)), 8, async_capable=True, smem_tile=True,
                          desc="TMA tiled load: descriptor parked 8 cycles, SMEM write beat at the tail"),
    "tma_store": ClassSpec(_u(("tma", 0, 8), ("tp_smem_rd", 0, 1)), 8, async_capable=True, smem_tile=True,
                           desc="TMA tiled store: SMEM read beat at the head, descriptor parked 8 cycles"),
    "global_load": ClassSpec(_u(("lsu", 0, 1), ("tp_gnic_rd", 0, 7)), 7, desc="ld.global into registers"),
    "global_store": ClassSpec(_u(("lsu", 0, 1), ("tp_gnic_wr", 0, 7)), 7, desc="st.global from registers"),
    "atomic": ClassSpec(_u(("lsu", 0, 1), ("tp_gnic_rd", 0, 7), ("tp_gnic_wr", 0, 7)), 7, desc="global atomics"),
    "cp_async_load": ClassSpec(_u(("lsu", 0, 1), ("tp_gnic_rd", 0, 7), ("tp_smem_wr", 7, 1)), 8,
                               async_capable=True, smem_tile=True,
                               desc="cp.async global -> SMEM copy (multistage pipelines)"),
    "mma_sync": ClassSpec(_u(("tc_and_mma", 0, 8), ("tp_smem_rd", 0, 4)), 8,
                          desc="mma.sync fed by ldmatrix: synchronous"),
    "smem_write": ClassSpec(_u(("tp_smem_wr", 0, 7)), 7, smem_tile=True, desc="register -> SMEM write"),
    "smem_read": ClassSpec(_u(("tp_smem_rd", 0, 7)), 7, desc="SMEM -> register read"),
    "smem_round_trip": ClassSpec(_u(("tp_smem_wr", 0, 7), ("tp_smem_rd", 7, 7)), 14, smem_tile=True,
                                 desc="layout change through SMEM (write, then read back)"),
    "reduce": ClassSpec(_u(("alu_or_fmaheavy", 0, 2), ("tp_smem_wr", 2, 1), ("tp_smem_rd", 3, 1)), 12,
                        desc="reduce/scan: in-register combine, cross-warp exchange through SMEM (assumption)"),
    "ordered": ClassSpec(_u(("lsu", 0, 1)), 1, desc="ordered side effect: print, assert, fence, gdc"),
}


# the seeds' vector of the asynchronous tensor-core MMAs (wgmma, tcgen05)
_ASYNC_MMA = _u(("tc_and_mma", 0, 8), ("tp_mma", 0, 8))


def _sm100_classes(c: dict[str, ClassSpec]) -> None:
    c["tcgen05"] = ClassSpec(_ASYNC_MMA, 8, async_capable=True,
                             desc="tcgen05.mma: 8-cycle issue window on tc_and_mma + tp_mma")


def _sm90_classes(c: dict[str, ClassSpec]) -> None:
    c["fp32"] = ClassSpec(_u(("alu_or_fmaheavy", 0, 1)), 4, desc="f32 add/sub/mul/fma (no FP32x2 on Hopper)")
    c["wgmma"] = ClassSpec(_ASYNC_MMA, 8, async_capable=True, desc="wgmma.mma_async (the seeds' wgmma vector)")


def _sm80_classes(c: dict[str, ClassSpec]) -> None:
    c["fp32"] = ClassSpec(_u(("alu_or_fmaheavy", 0, 1)), 4, desc="f32 add/sub/mul/fma")
    del c["tma_load"], c["tma_store"]


# family -> how its classes differ from the Blackwell (sm_100) vectors
_FAMILY_CHANGES: dict[str, Callable[[dict[str, ClassSpec]], None]] = {
    "sm_100": _sm100_classes, "sm_90": _sm90_classes, "sm_80": _sm80_classes}


def _family_classes(family: str) -> dict[str, ClassSpec]:
    c = dict(_BLACKWELL)
    change = _FAMILY_CHANGES.get(family)
    if change is not None:
        change(c)
    return c


# an mma's class by the instruction select-mma recorded (its `instruction` attribute's prefix)
_MMA_CLASS_OF = (("tcgen05.", "tcgen05"), ("wgmma.", "wgmma"))
# without a recorded instruction (a module scheduled outside the compiler): the family's largest tiles' choice
_DEFAULT_MMA = {"sm_80": "mma_sync", "sm_90": "wgmma", "sm_100": "tcgen05", "sm_120": "mma_sync"}
COPY_ENGINES = ("cp.async", "ld.global", "tma")


@dataclass(frozen=True)
class MachineModel:
    family: str                    # sm_80 | sm_90 | sm_100 | sm_120
    gpu_name: str                  # what was asked for (sm_86, sm_103, ...)
    classes: Mapping[str, ClassSpec]
    slot_caps: Mapping[int, int]
    pool_caps: Mapping[str, int]
    has_tma: bool                  # the hardware has TMA
    has_tmem: bool
    notes: tuple[str, ...] = field(default=())
    copies: str = "cp.async"       # how the scheduled loop's tiled view loads move: COPY_ENGINES

    def cap(self, slot: int) -> int:
        return self.slot_caps.get(slot, 1)

    def resources(self, rclass: str, tile_bytes: int = 0, note: str = "") -> OpResources:
        """The resource vector of a class (tile_bytes feeds the smem_bytes pool of SMEM-staging classes)."""
        spec = self.classes[rclass]
        uses = tuple(ResourceUse(SLOT[s], o, d) for s, o, d in spec.uses)
        pools: tuple[PoolUse, ...] = ()
        if spec.smem_tile and tile_bytes > 0:
            cap = self.pool_caps["smem_bytes"]
            amount = min(tile_bytes, cap)
            if amount < tile_bytes:
                note = (note + "; " if note else "") + f"smem request {tile_bytes} clamped to {cap}"
            window = [u for u in uses if SLOT_NAMES[u.slot - 1].startswith("tp_smem")] or list(uses)
            off = min(u.offset for u in window)
            end = max(u.offset + u.duration for u in uses)
            pools = (PoolUse("smem_bytes", amount, off, end - off),)
        return OpResources(rclass, uses, spec.latency, pools, spec.async_capable, note)


FAMILY_OF: dict[str, str] = {
    "sm_80": "sm_80", "sm_86": "sm_80", "sm_87": "sm_80", "sm_88": "sm_80", "sm_89": "sm_80",
    "sm_90": "sm_90",
    "sm_100": "sm_100", "sm_101": "sm_100", "sm_103": "sm_100", "sm_107": "sm_100", "sm_110": "sm_100",
    "sm_120": "sm_120", "sm_121": "sm_120",
}
FAMILIES = ("sm_80", "sm_90", "sm_100", "sm_120")

_SMEM_BYTES = {"sm_80": 166912, "sm_90": 232448, "sm_100": 232448, "sm_120": 101376}
# family -> (has TMA, has tensor memory)
_UNITS = {"sm_80": (False, False), "sm_90": (True, False), "sm_100": (True, True), "sm_120": (True, False)}
_SLOT_CAPS = {SLOT["alu"]: 3, SLOT["alu_or_fmaheavy"]: 4, SLOT["dual_alu"]: 2, SLOT["fp32x2_fp16ultra"]: 2}
_NOTES = {
    "sm_100": ("Blackwell: the seeds' 24-slot model", "mma: tcgen05 (async) for 64+ row tiles, else mma.sync"),
    "sm_120": ("consumer Blackwell: no tcgen05/TMEM, mma.sync (synchronous)", "SMEM budget 101376"),
    "sm_90": ("Hopper: mma is wgmma (async) for 64+ row tiles, else mma.sync", "f32 on alu_or_fmaheavy (no FP32x2)"),
    "sm_80": ("Ampere: mma.sync + ldmatrix, synchronous", "SMEM budget 166912"),
}
_COPY_NOTES = {
    "cp.async": "tile loads: cp.async copies into shared memory",
    "ld.global": "tile loads: ld.global into registers (the loop runs in program order)",
    "tma": "tile loads/stores: TMA (the seeds' model), "
           "read as (tma,0,8)+(tp_smem_wr,7,1)",
}


def family_of(gpu_name: str) -> str:
    """sm_86 -> sm_80, sm_103a -> sm_100, ...; ValueError for an unknown target."""
    base = gpu_name.strip().lower()
    if base.endswith(("a", "f")) and base[:-1] in FAMILY_OF:
        base = base[:-1]
    if base in FAMILY_OF:
        return FAMILY_OF[base]
    raise ValueError(f"unknown GPU '{gpu_name}' (expected one of {', '.join(FAMILY_OF)})")


def machine_model(gpu_name: str, copies: str = "cp.async") -> MachineModel:
    """The model of a target; `copies` says how tiled view loads move in the loops scheduled with it
    (COPY_ENGINES: "cp.async" for a software-pipelined loop, "ld.global" for one that runs in program
    order, "tma" only on TMA hardware and never for the compiler's own loops)."""
    fam = family_of(gpu_name)
    if copies not in COPY_ENGINES:
        raise ValueError(f"unknown copy engine '{copies}' (expected one of {', '.join(COPY_ENGINES)})")
    has_tma, has_tmem = _UNITS[fam]
    if copies == "tma" and not has_tma:
        raise ValueError(f"{gpu_name} has no TMA")
    return MachineModel(
        family=fam, gpu_name=gpu_name, classes=_family_classes(fam), slot_caps=dict(_SLOT_CAPS),
        pool_caps={"smem_bytes": _SMEM_BYTES[fam]}, has_tma=has_tma, has_tmem=has_tmem,
        notes=(*_NOTES[fam], _COPY_NOTES[copies]), copies=copies)


# ---------------------------------------------------------------------------
# classification of cuda_tile ops
# ---------------------------------------------------------------------------

FREE_OPS = frozenset((
    "make_token", "join_tokens", "assume", "constant", "get_tile_block_id", "get_num_tile_blocks",
    "get_index_space_shape", "get_tensor_shape", "make_tensor_view", "make_partition_view",
    "make_gather_scatter_view", "make_strided_view", "get_global", "alloca", "memory_fence_alias_tko",
    "yield", "continue", "break", "return"))
INT_OPS = frozenset(("addi", "subi", "andi", "ori", "xori", "shli", "shri", "maxi", "mini", "negi", "absi", "cmpi"))
IMUL_OPS = frozenset(("muli", "mulhii"))
IDIV_OPS = frozenset(("divi", "remi"))
FP_ARITH_OPS = frozenset(("addf", "subf", "mulf", "fma"))
FP_OTHER_OPS = frozenset(("maxf", "minf", "absf", "negf", "cmpf", "remf", "select"))
MATH_OPS = frozenset(("exp", "exp2", "log", "log2", "sin", "cos", "tan", "sinh", "cosh", "tanh", "rsqrt", "sqrt",
                      "pow", "fpowi", "atan2", "divf"))
CONVERT_OPS = frozenset(("ftof", "itof", "ftoi", "exti", "trunci", "bitcast", "int_to_ptr", "ptr_to_int",
                         "ptr_to_ptr", "offset", "iota", "ceil", "floor", "pack", "unpack"))
SHAPE_OPS = frozenset(("reshape", "permute", "broadcast", "cat", "extract", "insert"))
MMA_OPS = frozenset(("mmaf", "mmai", "mmaf_scaled"))
ATOMIC_OPS = frozenset(("atomic_rmw_tko", "atomic_cas_tko", "atomic_red_view_tko"))
ORDERED_OPS = frozenset(("print_tko", "assert", "gdc_launch_dependents_tko", "gdc_wait_tko"))
REGION_OPS = frozenset(("if", "for", "loop"))


def _elem(t: Any) -> Any:
    return t.elem if isinstance(t, T.TileType) else t


def _bits(t: Any) -> int:
    """Storage bits of an element (tf32 occupies 32; pointers 64)."""
    e = _elem(t)
    if isinstance(e, T.PointerType):
        return 64
    w = getattr(e, "width", 32)
    return 32 if w == 19 else w


def tile_bytes(t: Any) -> int:
    if isinstance(t, T.TileType):
        return (t.num_elements() * _bits(t) + 7) // 8
    return 0


def hint_value(op, key: str, gpu_name: str):
    """An optimization hint for this target: the exact gpu key first, then `default`."""
    hints = op.attrs.get("optimization_hints")
    if not isinstance(hints, OptimizationHintsAttr):
        return None
    target = gpu_name.strip().lower()
    if target[-1:] in ("a", "f") and target[:-1] in FAMILY_OF:
        target = target[:-1]
    for arch in (target.encode(), b"default"):
        for name, entry in hints.items:
            if name == arch and isinstance(entry, DictAttr):
                v = entry.get(key)
                if v is not None:
                    return v
    return None


def _truthy(v) -> bool:
    if isinstance(v, BoolAttr):
        return v.value
    if isinstance(v, IntegerAttr):
        return v.value != 0
    return bool(v)


def _weak(op) -> bool:
    sem = op.attrs.get("memory_ordering_semantics")
    return sem is None or int(sem) == 0


def _view_tile_ok(op, view_t, tile_t, min_inner_bytes: int, multiple: int) -> tuple[bool, str]:
    """Whether a tiled view access can be a bulk copy (TMA box / cp.async chunks)."""
    if not isinstance(view_t, T.PartitionViewType):
        return False, f"{type(view_t).__name__} is not a tiled partition view"
    if not _weak(op):
        return False, "non-weak memory ordering"
    if view_t.padding not in (None, 0):
        return False, "padding other than zero"
    if not isinstance(tile_t, T.TileType) or not tile_t.shape:
        return False, "scalar tile"
    shape = view_t.tile_shape
    inner = shape[-1] * _bits(tile_t) // 8
    if inner < min_inner_bytes or inner % multiple:
        return False, f"inner box {inner} B is not a multiple of {multiple} B"
    if len(shape) > 5:
        return False, "rank > 5"
    tv = view_t.tensor_view
    if isinstance(tv, T.TensorViewType) and view_t.dim_map:
        d = view_t.dim_map[-1]
        if 0 <= d < len(tv.strides) and tv.strides[d] not in (1, T.DYNAMIC):
            return False, "innermost stride is not 1"
    return True, ""


def tma_eligible(op, model: MachineModel) -> tuple[bool, str]:
    """A view load/store is TMA-class on a TMA model (copies="tma", sm_90+) when allow_tma is not false for
    the target (the hint defaults to true on sm_90 and later), the view is a tiled partition view with
    zero/no padding, the ordering is weak, the box's inner extent is a multiple of 16 bytes, rank <= 5 and
    the innermost stride is 1 (or dynamic, assumed 1)."""
    if model.copies != "tma":
        return False, f"tile copies are {model.copies}, not TMA"
    allow = hint_value(op, "allow_tma", model.gpu_name)
    if allow is not None and not _truthy(allow):
        return False, "allow_tma = false"
    view_t = op.operands["view"].type
    tile_t = op.operands["tile"].type if op.name == "store_view_tko" else op.results[0].type
    return _view_tile_ok(op, view_t, tile_t, 16, 16)


def _composite(op, model: MachineModel, memo: dict | None = None) -> OpResources:
    """A region op treated as one unit: each region's ops composed in program order on a flat table
    (in-order issue, inner dependences honoured, no overlap of a capacity-1 slot); the unit's vector
    is the union over regions (an `if` may take either branch), its latency the longest region."""
    uses: dict[tuple[int, int], int] = {}    # (slot, cycle) -> count
    pools: dict[tuple[str, int], int] = {}
    latency = 1
    any_async = False
    memo = {} if memo is None else memo   # nested region ops' used values, computed once per composite
    for region in op.regions:
        for block in region.blocks:
            r_uses, r_pools, r_lat, r_async = _compose_block(block, model, memo)
            for k, v in r_uses.items():
                uses[k] = max(uses.get(k, 0), v)
            for k, v in r_pools.items():
                pools[k] = max(pools.get(k, 0), v)
            latency = max(latency, r_lat)
            any_async = any_async or r_async
    return OpResources(f"region:{op.name}", _runs(uses), latency, _pool_runs(pools), any_async,
                       note="nested region as one unit" + (" (one iteration)" if op.spec.is_loop else ""))


def _compose_block(block, model: MachineModel, memo: dict):
    table: dict[tuple[int, int], int] = {}
    ptable: dict[tuple[str, int], int] = {}
    ready: dict[int, int] = {}            # id(value) -> ready cycle
    prev = 0
    end = 0
    any_async = False
    for inner in block.ops:
        if inner.spec.is_terminator:
            continue
        res = classify(inner, model, memo)
        any_async = any_async or res.async_capable
        t = prev
        for v in _used_values(inner, memo):
            t = max(t, ready.get(id(v), 0))
        while not _flat_fits(table, ptable, res, t, model):
            t += 1
        for u in res.uses:
            for k in range(u.offset, u.offset + u.duration):
                table[(u.slot, t + k)] = table.get((u.slot, t + k), 0) + 1
        for p in res.pools:
            for k in range(p.offset, p.offset + p.duration):
                ptable[(p.pool, t + k)] = ptable.get((p.pool, t + k), 0) + p.amount
        for r in inner.results:
            ready[id(r)] = t + res.latency
        prev = t
        end = max(end, t + res.latency, t + res.length)
    return table, ptable, end, any_async


def _flat_fits(table, ptable, res: OpResources, t: int, model: MachineModel) -> bool:
    for u in res.uses:
        cap = model.cap(u.slot)
        for k in range(u.offset, u.offset + u.duration):
            if table.get((u.slot, t + k), 0) + 1 > cap:
                return False
    for p in res.pools:
        cap = model.pool_caps.get(p.pool, 0)
        for k in range(p.offset, p.offset + p.duration):
            if ptable.get((p.pool, t + k), 0) + p.amount > cap:
                return False
    return True


def _runs(uses: dict[tuple[int, int], int]) -> tuple[ResourceUse, ...]:
    """(slot, cycle) -> count as maximal runs of ResourceUse (counts > 1 repeat the run)."""
    out: list[ResourceUse] = []
    by_slot: dict[int, list[tuple[int, int]]] = {}
    for (slot, cyc), n in uses.items():
        by_slot.setdefault(slot, []).append((cyc, n))
    for slot in sorted(by_slot):
        cells = dict(by_slot[slot])
        top = max(cells.values())
        for level in range(1, top + 1):
            cycles = sorted(c for c, n in cells.items() if n >= level)
            start = prev = None
            for c in cycles:
                if start is None:
                    start = prev = c
                elif c == prev + 1:
                    prev = c
                else:
                    out.append(ResourceUse(slot, start, prev - start + 1))
                    start = prev = c
            if start is not None:
                out.append(ResourceUse(slot, start, prev - start + 1))
    return tuple(out)


def _pool_runs(pools: dict[tuple[str, int], int]) -> tuple[PoolUse, ...]:
    out = []
    for (pool, cyc), amount in sorted(pools.items()):
        out.append(PoolUse(pool, amount, cyc, 1))
    return tuple(out)


def _used_values(op, memo: dict) -> list:
    """Operand values of an op and of every op nested in it (nested definitions included).  A region
    op's list is kept in `memo` (by id; the ops outlive it): composing nested loops asks for each
    level's subtree again at every enclosing level, which was cubic in the nesting depth."""
    if not op.regions:
        return op.operand_values()
    vals = memo.get(id(op))
    if vals is None:
        vals = list(op.operand_values())
        for region in op.regions:
            for block in region.blocks:
                for inner in block.ops:
                    vals.extend(_used_values(inner, memo))   # the composite recursion is as deep
        memo[id(op)] = vals
    return vals


def _trivial_reshape(op) -> bool:
    """A reshape/broadcast that only adds or drops size-1 dimensions keeps the register layout."""
    src = op.operand_values()[0].type if op.operand_values() else None
    dst = op.results[0].type if op.results else None
    if not isinstance(src, T.TileType) or not isinstance(dst, T.TileType):
        return True
    if src.num_elements() == 1:
        return True
    if op.name in ("reshape", "broadcast"):
        return tuple(d for d in src.shape if d != 1) == tuple(d for d in dst.shape if d != 1)
    return False


_TILEGPU = {"tilegpu.local_store": "smem_write", "tilegpu.local_load": "smem_read",
            "tilegpu.convert_layout": "free", "tilegpu.local_alloc": "free", "tilegpu.barrier": "ordered"}


def _tilegpu(op, model: MachineModel, res_t) -> OpResources:
    """tile-GPU ops the passes made explicit (a layout change left as convert_layout moves no data)."""
    rclass = _TILEGPU.get(op.name, "alu")
    tile = op.operands["value"].type if op.name == "tilegpu.local_store" else res_t
    return model.resources(rclass, tile_bytes(tile) if rclass.startswith("smem") else 0)


def _mma(op, model: MachineModel) -> OpResources:
    """An mma as the instruction select-mma chose for it runs (the family's default when none is recorded)."""
    chosen = op.attrs.get("instruction")
    if chosen is None:
        return model.resources(_DEFAULT_MMA[model.family], note="no instruction selected: the family's default")
    if chosen == "fma":
        return model.resources("fp32", note="an FMA chain on CUDA cores (no tensor-core instruction)")
    rclass = next((c for prefix, c in _MMA_CLASS_OF if chosen.startswith(prefix)), "mma_sync")
    return model.resources(rclass)


def classify(op, model: MachineModel, _memo: dict | None = None) -> OpResources:
    """The resource vector and latency of one cuda_tile op on `model` (a region op is composed)."""
    name = op.name
    res_t = op.results[0].type if op.results else None
    if name in FREE_OPS:
        return model.resources("free")
    if name.startswith("tilegpu."):
        return _tilegpu(op, model, res_t)
    if name == "load_view_tko":
        nbytes = tile_bytes(res_t)
        if op.attrs.get("tma") is not None and "tma_load" in model.classes:
            return model.resources("tma_load", nbytes, note="a TMA copy: select-tile-tensor-copies chose it")
        if model.copies == "tma":
            ok, why = tma_eligible(op, model)
            return model.resources("tma_load", nbytes) if ok else model.resources("global_load", note=why)
        if model.copies == "ld.global":
            return model.resources("global_load", note="ld.global into registers: the loop is not pipelined")
        if op.attrs.get("stage_copy") == "tma" and "tma_load" in model.classes:   # tilegpu.decisions.STAGE_COPY
            return model.resources("tma_load", nbytes, note="a TMA stage copy: choose-stage-copies chose it")
        ok_copy, why = _view_tile_ok(op, op.operands["view"].type, res_t, 4, 4)
        if ok_copy:
            return model.resources("cp_async_load", nbytes)
        return model.resources("global_load", note=why)
    if name == "store_view_tko":
        ok, why = tma_eligible(op, model)
        if ok:
            return model.resources("tma_store", tile_bytes(op.operands["tile"].type))
        return model.resources("global_store", note=why)
    if name == "load_ptr_tko":
        return model.resources("global_load", note="pointer-tile load")
    if name == "store_ptr_tko":
        return model.resources("global_store", note="pointer-tile store")
    if name in ATOMIC_OPS:
        return model.resources("atomic")
    if name in MMA_OPS:
        return _mma(op, model)
    if name in ("reduce", "scan"):
        return model.resources("reduce")
    if name in SHAPE_OPS:
        if _trivial_reshape(op):
            return model.resources("free", note="unit-dimension reshape: no data movement")
        return model.resources("smem_round_trip", tile_bytes(res_t))
    if name in ORDERED_OPS:
        return model.resources("ordered")
    if name in REGION_OPS:
        return _composite(op, model, _memo)
    operand_t = op.operand_values()[0].type if op.operand_values() else res_t
    bits = _bits(operand_t)
    if name in MATH_OPS:
        return model.resources("xu64" if bits == 64 else "xu")
    if name in FP_ARITH_OPS:
        if bits == 64:
            return model.resources("fp64")
        return model.resources("fp16x2" if bits == 16 else "fp32")
    if name in FP_OTHER_OPS:
        if name == "select" and isinstance(_elem(res_t), T.IntType):
            return model.resources("int")
        return model.resources("fp64" if bits == 64 else "fmaheavy")
    if name in INT_OPS:
        return model.resources("int")
    if name in IMUL_OPS:
        return model.resources("fmaheavy")
    if name in IDIV_OPS:
        return model.resources("idiv")
    if name in CONVERT_OPS:
        return model.resources("alu")
    return model.resources("alu", note=f"unclassified op {name}: charged as ALU")
