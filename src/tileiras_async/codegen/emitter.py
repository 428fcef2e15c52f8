"""Walks a tile-GPU kernel and emits LLVM IR through per-op patterns.

Each op's pattern is registered once in `LOWERINGS` (see the lower_*.py modules); this file holds only what
every pattern shares: the value map, thread coordinates of layouts, shared-memory access and structured
control flow.  Layouts are not chosen here: every tile's layout is in its type (tilegpu assign-layouts).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir import types as T
from ..ir.core import Block, Function, Operation, Value
from ..targets import known_target
from ..tilegpu.layout import WARP_SIZE, LinearLayout
from ..tilegpu.errors import LoweringError
from ..targets import shared_memory_limit
from ..tilegpu.options import CodegenOptions
from ..tilegpu.analysis.tensor_maps import MAP_ALIGN, MAP_BYTES, tensor_maps_comment
from ..tilegpu.types import layout_of
from .llvmir import IRBuilder, ModuleIR
from .values import SHARED_PTR, Tile, elem_bytes, llvm_type

__all__ = ["CodegenOptions", "KernelEmitter", "LoweringError", "LOWERINGS", "lowers"]

LOWERINGS: dict[str, Callable[["KernelEmitter", Operation], None]] = {}


def lowers(*names: str):
    def register(fn):
        for n in names:
            if n in LOWERINGS:
                raise ValueError(f"two lowerings for {n}")
            LOWERINGS[n] = fn
        return fn
    return register


@dataclass
class _Loop:
    """Where `continue` and `break` inside a loop body go, and the phis they feed."""
    continue_label: str
    continue_phis: list[list]     # per carried value, per register: Phi
    carried_layouts: list
    break_label: str
    break_phis: list[list]
    result_layouts: list


class KernelEmitter:
    def __init__(self, module_ir: ModuleIR, fn: Function, options: CodegenOptions, module=None, tensor_maps=None):
        self.module_ir = module_ir
        self.fn = fn
        self.module = module  # the cuda_tile module (source locations of remarks), when the caller gives it
        self.options = options
        self.env: dict[int, object] = {}
        self.loops: list[_Loop] = []
        self.if_merges: list = []
        self.inline_yields: list[list] = []  # combiner regions being inlined (yield returns to them)
        self.inline_depth_marks: list[int] = []  # how many ifs were open when each inlining began
        self.block_exit_hooks: dict[int, list] = {}
        self._thread_coords: dict[LinearLayout, list[str]] = {}
        self.shared_bytes = 0
        self._globals = 0
        self.remarks: list[str] = []  # optimization remarks (e.g. "Failed to pipeline loop") for the CLI
        self.pipelines: list = []     # tilegpu.analysis.software_pipeline.PipelineInfo of every software-pipelined loop
        self.schedules: list = []     # the ScheduleReport of every loop (schedule-loops)
        # translation state shared between lowerings: LLVM values computed once and read by later ops
        self.tcgen05_bars: tuple[str, str] | None = None   # (mbarrier, TMEM address slot), entry-block values
        self.ring_offsets: dict[int, str] = {}             # id(ring local_alloc) -> its run-time aligned offset
        self.scan_totals: dict[int, tuple] = {}            # id(scan result) -> (its totals, folded register bits)
        self.print_mutex: str | None = None                # the kernel's print_tko lock, a global
        self.declared_globals: set[str] = set()             # the external globals get_global declared
        self.scratch = f"@scratch.{len(module_ir.functions)}"
        params = []
        for i, t in enumerate(fn.type.inputs):
            params.append((llvm_type(t), f"%arg{i}"))
        # the tensor maps select-tensor-copies and select-tile-tensor-copies chose: 128-byte parameters after
        # the kernel's own, which the host object's launch hook fills (tilegpu.analysis.tensor_maps)
        self.tensor_maps = tensor_maps
        for spec in tensor_maps.maps if tensor_maps is not None else ():
            params.append((f"ptr byval([{MAP_BYTES} x i8]) align {MAP_ALIGN}", f"%arg{spec.param}"))
        # a warp-specialised kernel adds a producer warpgroup to the threads its layouts spread work over
        split = _warp_specialized(fn)
        self.cta_threads = self.num_threads * (2 if split is not None else 1)
        self.consumer_barrier: tuple[int, int] | None = None  # (id, threads) once the producer has left
        self.single_thread = False    # one thread runs the code (the producer's region): no thread-0 tests
        attrs = f'"nvvm.reqntid"="{self.cta_threads}" "nvvm.minctasm"="1"'
        if split is not None:   # setmaxnreg needs the registers at entry: ptxas would assume 255 (one CTA per SM)
            attrs += f' "nvvm.maxnreg"="{split.attrs["consumer_regs"]}"'
        group = len(module_ir.functions)  # one attribute group per kernel of this LLVM module
        self.b: IRBuilder = module_ir.function(fn.name.decode(), params, attrs=f"#{group}")
        module_ir.add_global(f"attributes #{group} = {{ {attrs} }}")
        if tensor_maps is not None:
            module_ir.add_global(tensor_maps_comment(tensor_maps, ";"))
        for i, (arg, t) in enumerate(zip(fn.body.args, fn.type.inputs)):
            self.set(arg, Tile(t, None, [f"%arg{i}"]))
        self.lines = None
        if options.debug != "none" and module is not None:
            from .debug_lines import FULL, LINE_TABLES, LineInfo
            kind = FULL if options.debug == "full" else LINE_TABLES
            self.lines = LineInfo(module_ir, module, fn, kind, optimized=options.opt_level > 0)
            self.lines.attach(self.b)
        self.tid = self._entry_tid = self.b.entry_value("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()", "tid")
        self.module_ir.declare("i32", "llvm.nvvm.read.ptx.sreg.tid.x", [])
        self.lane = self.b.entry_value(f"and i32 {self.tid}, {WARP_SIZE - 1}", "lane")
        self.warp = self.b.entry_value(f"lshr i32 {self.tid}, 5", "warp")
        self.b.new_block("body")

    def remark(self, kind: str, category: str, name: str, message: str, op: Operation | None = None) -> None:
        """Record an optimization remark (kind: passed | missed | failed | analysis) at `op`'s source location."""
        from ..ir.diagnostics import resolve_loc
        from ..remarks import Remark
        loc = resolve_loc(self.module, op.loc) if op is not None and self.module is not None else None
        self.remarks.append(Remark(kind, category, name, self.fn.name.decode(errors="replace"), message,
                                   loc.file if loc else "", loc.line if loc else 0, loc.col if loc else 0))

    def unique_global(self, hint: str) -> str:
        """A module-unique, deterministic global name (never derived from object ids)."""
        self._globals += 1
        return f"@{hint}.{self.b.fn.name}.{self._globals}"

    @property
    def num_threads(self) -> int:
        return self.options.num_warps * WARP_SIZE

    # -- values -----------------------------------------------------------
    def get(self, v: Value):
        try:
            return self.env[id(v)]
        except KeyError:
            raise LoweringError("value used before it was lowered") from None

    def set(self, v: Value, cg) -> None:
        self.env[id(v)] = cg

    def tile(self, v: Value | None) -> Tile | None:
        return None if v is None else self.get(v)

    # -- layouts ------------------------------------------------------------
    def expect(self, v: Value) -> Tile:
        """The lowered operand `v`, checked to be in the layout its type says (a pass bug otherwise)."""
        t = self.get(v)
        want = layout_of(v.type)
        if isinstance(t, Tile) and want is not None and t.layout != want:
            raise LoweringError("internal: an operand is not in the layout its type says")
        return t

    def thread_coords(self, layout: LinearLayout) -> list[str]:
        """Per dimension, this thread's coordinate part (i32), computed once in the entry block (after a
        top-level loop: once more, see `recompute_thread_coords`)."""
        cached = self._thread_coords.get(layout)
        if cached is not None:
            return cached
        coords = []
        for d in range(layout.rank):
            acc = "0"
            for t in self._thread_terms(layout, d):
                acc = t if acc == "0" else self.thread_value(f"xor i32 {acc}, {t}")
            coords.append(acc)
        self._thread_coords[layout] = coords
        return coords

    def _thread_terms(self, layout: LinearLayout, d: int) -> list[str]:
        """The thread id's contributions to coordinate `d`, xor-ed together. Thread-id bits (lanes, then
        warps: bit b of %tid.x) whose bases are consecutive powers of two along `d` form one run, taken as
        `(tid >> b0 & mask) << p0` -- a blocked layout's coordinate is a shift and a mask of the thread id, not
        one term per bit (which LLVM and ptxas do not fold back: reduce1d's 2 * tid took 8 instructions). A
        run reaching the top bit needs no mask: %tid.x < the CTA's threads (.reqntid)."""
        bits = [(b, basis[d]) for b, basis in enumerate(layout.bases[1] + layout.bases[2]) if basis[d]]
        top = len(layout.bases[1]) + len(layout.bases[2])
        terms, run = [], []
        for b, v in bits + [(None, 0)]:
            single = v > 0 and v & (v - 1) == 0
            if run and single and b == run[-1][0] + 1 and v == 2 * run[-1][1]:
                run.append((b, v))
                continue
            if run:
                terms.append(self._run_term(run, top))
            run = [(b, v)] if single else []
            if b is not None and not single:      # not a power of two: its own term, as the basis says
                one = self.thread_value(f"and i32 {self.thread_value(f'lshr i32 {self.tid}, {b}')}, 1")
                terms.append(self.thread_value(f"mul i32 {one}, {v}"))
        return terms

    def _run_term(self, run: list[tuple[int, int]], top: int) -> str:
        b0, v0 = run[0]
        x = self.tid if b0 == 0 else self.thread_value(f"lshr i32 {self.tid}, {b0}")
        if run[-1][0] + 1 < top or 1 << top != self.cta_threads:
            x = self.thread_value(f"and i32 {x}, {(1 << len(run)) - 1}")
        return x if v0 == 1 else self.thread_value(f"shl i32 {x}, {v0.bit_length() - 1}")

    def thread_value(self, expr: str, hint: str = "v") -> str:
        """A value computed from this thread's id: in the entry block, or after a top-level loop where
        `recompute_thread_coords` gave the thread id a fresh read."""
        return self.b.entry_value(expr, hint) if self.tid == self._entry_tid else self.b.value(expr, hint)

    def recompute_thread_coords(self) -> None:
        """What is computed from the thread id after a top-level loop is computed again, from a fresh read
        of %tid.x (one the back end may not merge with the entry block's): otherwise the epilogue's
        coordinates, the masks made from them and the next loop's thread offsets stay live in registers
        through the whole loop (an attention kernel held 14 such registers at its peak)."""
        self.tid = self.b.value('call i32 asm sideeffect "mov.u32 $0, %tid.x;", "=r"()', "tid")
        self.lane = self.b.value(f"and i32 {self.tid}, {WARP_SIZE - 1}", "lane")
        self.warp = self.b.value(f"lshr i32 {self.tid}, 5", "warp")
        self._thread_coords = {}

    def coords(self, layout: LinearLayout, reg: int) -> list[str]:
        """Runtime coordinate (i32 per dim) of register `reg` in this thread."""
        base = self.thread_coords(layout)
        const = layout.register_coord(reg)
        return [c if k == 0 else self.b.value(f"xor i32 {c}, {k}") for c, k in zip(base, const)]

    def linear_index(self, coords: list[str], shape: tuple[int, ...]) -> str:
        acc = "0"
        for c, s in zip(coords, shape):
            acc = self.b.value(f"mul i32 {acc}, {s}") if acc != "0" else "0"
            acc = self.b.value(f"add i32 {acc}, {c}")
        return acc

    def is_primary(self, layout: LinearLayout) -> str | None:
        """i1 that is true in exactly one thread per held element (None: no replication)."""
        conds = []
        for src, bases in ((self.lane, layout.bases[1]), (self.warp, layout.bases[2])):
            mask = sum(1 << bit for bit, b in enumerate(bases) if not any(b))
            if mask:
                m = self.b.value(f"and i32 {src}, {mask}")
                conds.append(self.b.value(f"icmp eq i32 {m}, 0"))
        acc = None
        for c in conds:
            acc = c if acc is None else self.b.value(f"and i1 {acc}, {c}")
        return acc

    # -- shared memory --------------------------------------------------------
    def barrier(self) -> None:
        if self.consumer_barrier is not None:     # the producer warpgroup has exited: count the consumers
            self.b.call("void", "llvm.nvvm.barrier.sync.cnt", [("i32", str(n)) for n in self.consumer_barrier],
                        attrs="convergent")
            return
        self.b.call("void", "llvm.nvvm.barrier0", [])

    def shared_slot(self, index: str, elem: T.Type, byte_base: int = 0) -> str:
        """Address of element `index` (i32) of a scratch array of `elem` starting at byte_base."""
        size = elem_bytes(elem)
        off = self.b.value(f"mul i32 {index}, {size}")
        if byte_base:
            off = self.b.value(f"add i32 {off}, {byte_base}")
        return self.b.value(f"getelementptr i8, {SHARED_PTR} {self.scratch}, i32 {off}", "sp")

    def scratch_base(self, op: Operation) -> int:
        """The byte offset of `op`'s scratch (allocate-shared-memory placed it); reserves it for the kernel."""
        base = op.attrs.get("scratch_offset")
        if base is None:
            raise LoweringError(f"internal: '{op.name}' stages through shared memory that was not allocated")
        self.reserve_shared(base + op.attrs["scratch_bytes"])
        return base

    def reserve_shared(self, nbytes: int) -> None:
        self.shared_bytes = max(self.shared_bytes, nbytes)
        limit = shared_memory_limit(self.options.target)
        if self.shared_bytes > limit:
            raise LoweringError(f"tile needs {nbytes} bytes of shared memory for a layout change "
                                f"(limit {limit})")

    def store_to_shared(self, t: Tile, byte_base: int = 0,
                        dst_index: Callable[[list[str]], str] | None = None, capacity: int | None = None) -> None:
        """Write a tile into shared memory at byte_base, row-major unless `dst_index(coords)` says where each
        element goes (a register holding a copy of another's element is not stored again)."""
        shape = t.type.shape
        count = capacity if capacity is not None else t.type.num_elements()
        self.reserve_shared(byte_base + count * elem_bytes(t.elem))
        ty = t.llvm
        index = dst_index or (lambda c: self.linear_index(c, shape))
        dup = 0 if t.is_scalar else t.layout.duplicate_register_mask()
        for r, reg in enumerate(t.regs):
            if r & dup:
                continue
            idx = index(["0"] * len(shape)) if t.is_scalar else index(self.coords(t.layout, r))
            p = self.shared_slot(idx, t.elem, byte_base)
            self.b.emit(f"store {ty} {reg}, {SHARED_PTR} {p}")

    def load_from_shared(self, ty: T.TileType, layout: LinearLayout | None,
                         src_index: Callable[[list[str]], str], byte_base: int = 0) -> Tile:
        """Read a tile whose register r comes from scratch element src_index(coords of r)."""
        lt = llvm_type(ty.elem)
        n = 1 if layout is None else layout.num_registers
        dup = 0 if layout is None else layout.duplicate_register_mask()
        regs = []
        for r in range(n):
            if r & dup:  # a copy of a register already loaded
                regs.append(regs[r & ~dup])
                continue
            coords = [] if layout is None else self.coords(layout, r)
            p = self.shared_slot(src_index(coords), ty.elem, byte_base)
            regs.append(self.b.value(f"load {lt}, {SHARED_PTR} {p}", "ld"))
        return Tile(ty, layout, regs)

    def convert(self, t: Tile, layout: LinearLayout | None, uniform: bool = False) -> Tile:
        """The same tile in another layout (through shared memory unless nothing moves).  `uniform`: the IR
        shows every element is one value (tilegpu.analysis.smem.is_uniform), which every thread holds."""
        if uniform and layout is not None:
            return Tile(t.type, layout, [t.regs[0]] * layout.num_registers)
        if t.layout == layout or t.is_scalar:
            return t if t.layout == layout else self.broadcast_scalar(t, layout)
        moved = layout.register_map_from(t.layout) if layout is not None else None
        if moved is not None:  # every thread already holds what it needs: registers are relabelled
            return Tile(t.type, layout, [t.regs[r] for r in moved])
        if layout is not None and _is_splat_literal(t):  # a constant: every register is the same literal
            return Tile(t.type, layout, [t.regs[0]] * layout.num_registers)
        raise LoweringError("internal: a layout conversion that moves data between threads was not lowered "
                            "through shared memory")

    def broadcast_scalar(self, t: Tile, layout: LinearLayout | None) -> Tile:
        n = 1 if layout is None else layout.num_registers
        return Tile(t.type, layout, [t.regs[0]] * n)

    def like(self, ty: T.TileType, layout: LinearLayout | None, regs: list[str]) -> Tile:
        return Tile(ty, None if not ty.shape else layout, regs)

    # -- loops and inline regions ---------------------------------------------------
    def counted_loop(self, start: str, stop: str, carried: list[tuple[str, str]],
                     body: Callable[[str, list[str]], list[str]], step: int = 1) -> list[str]:
        """for (k = start; k != stop; k += step) over i32 k, carrying (llvm type, initial) values."""
        pre = self.b.block_label
        head, loop, done = (self.b.reserve_block(h) for h in ("cl.head", "cl.body", "cl.done"))
        self.b.br(head)
        self.b.start_block(head)
        k = self.b.phi("i32", "k")
        k.add(start, pre)
        phis = []
        for ty, init in carried:
            p = self.b.phi(ty)
            p.add(init, pre)
            phis.append(p)
        more = self.b.value(f"icmp ne i32 {k.name}, {stop}")
        self.b.cond_br(more, loop, done)
        self.b.start_block(loop)
        new = body(k.name, [p.name for p in phis])
        nk = self.b.value(f"add i32 {k.name}, {step}")
        end = self.b.block_label
        k.add(nk, end)
        for p, v in zip(phis, new):
            p.add(v, end)
        self.b.br(head)
        self.b.start_block(done)
        return [p.name for p in phis]

    def inline_region(self, block: Block, args: list[Tile]) -> list[Tile]:
        """Emit a region body in place (a combiner) and return what its `yield` passes."""
        for a, t in zip(block.args, args):
            self.set(a, t)
        frame: list = []
        self.inline_yields.append(frame)
        self.inline_depth_marks.append(len(self.if_merges))
        try:
            self.emit_block(block)
        finally:
            self.inline_yields.pop()
            self.inline_depth_marks.pop()
        if not frame:
            raise LoweringError("region did not yield")
        return frame[0]

    # -- regions ----------------------------------------------------------------
    def emit_block(self, block: Block) -> None:
        # coordinates computed in this block after a recompute_thread_coords do not dominate what follows
        # the region it belongs to: they are forgotten at its end
        scope = (self._thread_coords, self.tid, self.lane, self.warp)
        if self.tid != self._entry_tid:
            self._thread_coords = dict(self._thread_coords)
        for op in block.ops[:-1]:
            self.emit_op(op)
        if block.ops:
            # work registered for the end of this block (e.g. freeing an alloca) runs before its terminator
            for hook in self.block_exit_hooks.pop(id(block), []):
                hook()
            self.emit_op(block.ops[-1])
        if block is not self.fn.body:
            self._thread_coords, self.tid, self.lane, self.warp = scope

    def emit_op(self, op: Operation) -> None:
        lowering = LOWERINGS.get(op.name)
        if lowering is None:
            raise LoweringError(f"cannot lower '{op.name}' yet", op)
        saved = self.b.dbg
        if self.lines is not None:
            self.b.dbg = self.lines.location(op.loc) or saved
        try:
            lowering(self, op)
        except LoweringError as e:
            if e.op is None:
                e.op = op
            raise
        finally:
            self.b.dbg = saved

    def finish(self) -> None:
        self.b.fn.blocks[0][1].append(f"br label %{self.b.fn.blocks[1][0]}{self.b.entry_dbg}")
        if self.shared_bytes:
            self.module_ir.add_global(f"{self.scratch} = internal addrspace(3) global "
                                      f"[{self.shared_bytes} x i8] undef, align 16")
        else:
            self.module_ir.add_global(f"{self.scratch} = internal addrspace(3) global [16 x i8] undef, align 16")


def _is_splat_literal(t: Tile) -> bool:
    return bool(t.regs) and all(r == t.regs[0] for r in t.regs) and not t.regs[0].startswith("%")


def target_has(em, capability: str) -> bool:
    """Whether the emitter's target has a capability (a boolean field of targets.Target); an unknown target
    has none.  A function of `em.options.target` so that helpers run on a bare emitter (tests) too."""
    tgt = known_target(em.options.target)
    return tgt is not None and getattr(tgt, capability)


def _warp_specialized(fn: Function) -> Operation | None:
    """The kernel's `tilegpu.warp_specialize` (it splits the CTA into a producer and a consumer warpgroup)."""
    return next((op for op in fn.body.walk() if op.name == "tilegpu.warp_specialize"), None)
