"""assign-layouts: give every ranked tile value a layout, and make every layout change an explicit op.

Contract: in: tile-GPU IR whose ranked tiles have no layout yet. out: every ranked tile value (op results,
block arguments) is a `LayoutTile` with a layout; wherever an op needs an operand in another layout than the
operand's, a `tilegpu.convert_layout` sits right before the op and feeds it. Code generation then never
chooses a layout: it reads them from the types.

The rules, per op (first match):
- elementwise ops (one tile result, operands of the result's shape or uniform): the layout of the first
  operand that has one and is data rather than index-like (computed from iota, constants and broadcasts
  alone), else of the first that has one, else the default blocked layout of the result; every operand is
  converted to it (a uniform operand converts for free: it is broadcast in registers);
- loads, constants, iota, shape changes through shared memory (extract, cat, insert, pack/unpack): the
  default blocked layout (`CodegenOptions.default_layout`); an extract at constant indices of a box every
  thread holds in registers takes the source layout restricted to the box (`smem.register_extract`);
- permute: the operand's layout with its dimensions permuted; reshape: the operand's layout over the new
  shape (nothing moves in either); a reshape to a scalar needs every thread to hold the element;
- broadcast: the layout of the tile the result is combined with (an elementwise user's other operand, looking
  through up to CONSUMER_DEPTH elementwise steps), else the default; the source converts to that layout collapsed along the broadcast dimensions, so the
  broadcast itself moves nothing;
- reduce: the operand layout with the reduced dimension sliced away (every thread that held part of a row
  holds its result); a float reduce whose results are only stored spreads its rows over the lanes that
  reduced them (`LinearLayout.slice_scattered`); scan: the operand layout; further operands convert to the first's;
- `load_ptr_tko` / `store_ptr_tko`: the pointer tile's layout, to which mask, padding and value convert;
- atomics: the pointer (or value) tile's layout, unless it replicates elements and the tile has at least as
  many elements as the CTA has threads (then the default layout, so every thread does its share);
- `mmaf` / `mmai`: the plan's accumulator layout (tilegpu.analysis.mma), the accumulator converts to it; `mmaf_scaled`:
  the layout of its per-K-block fp8 products (tilegpu.analysis.scaled_mma), likewise;
- `for` / `loop`: a carried value keeps its initial value's layout, except a value that feeds an mma
  accumulator (or is computed from an mma result), which starts in the mma layout; `continue` and `break`
  convert to the loop's layouts; a `loop`'s results take the layouts of its first `break`;
- `if`: the results take the layouts of the first `yield` reached in program order; the other converts.

These forward rules run twice: first on a private copy, whose conversions show (1) loop-carried values the
body converts into the carried layout on every iteration (they are then carried in the layout the body
produces them in: one conversion before the loop) and (2) index-like values converted to another layout
(their whole chain then computes in that layout, so a mask moves as its small 1-D sources, if at all).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod

from ...ir import types as T
from ...ir.core import Block, Operation, Value
from ..layout import LinearLayout, blocked
from ..errors import LoweringError
from ..ir import KernelIR, clone_function, constant_bytes, walk_ops
from ..analysis import scaled_mma
from ..analysis.mma import SHARED_LIMIT, carried_layouts, check_size, recorded_plan, result_layout
from ..ops import CONVERT_LAYOUT
from ..analysis.smem import register_extract
from ..types import LayoutTile, bare, elem_bytes, is_splat, layout_of, with_layout
from ..analysis.facts import unit_stride_dim
from .vectorize_accesses import vector_width

INDEX_SOURCES = frozenset({"iota", "constant", "broadcast"})
CONSUMER_DEPTH = 4     # elementwise steps a broadcast looks through for the tile its result is combined with
DEFAULT_RESULT = frozenset({"constant", "iota", "load_view_tko", "extract", "cat", "insert", "pack", "unpack"})
ATOMICS = {"atomic_rmw_tko": ("pointers", ("arg", "mask")), "atomic_cas_tko": ("pointers", ("cmp", "val", "mask")),
           "atomic_red_view_tko": ("value", ())}
SPECIAL = frozenset({"reduce", "scan", "mmaf", "mmai", "mmaf_scaled", "reshape", "broadcast", "permute",
                     "load_ptr_tko", "store_ptr_tko"}) | DEFAULT_RESULT
NO_LAYOUT_RULE = frozenset({"store_view_tko", "print_tko", "assert", "return", "make_token", "join_tokens",
                            "make_tensor_view", "make_partition_view", "make_gather_scatter_view",
                            "get_index_space_shape",
                            "get_tensor_shape", "get_tile_block_id", "get_num_tile_blocks", "global",
                            "gdc_wait_tko", "gdc_launch_dependents_tko", "memory_fence_alias_tko"})


def run(k: KernelIR) -> None:
    _Assign(k, *_hints(k)).run()
    _check_complete(k)


LOOPS = ("for", "loop")
HINTABLE = frozenset({"iota", "constant", "broadcast"})     # besides elementwise ops


def _hints(k: KernelIR) -> tuple[dict, dict]:
    """What a first assignment (of a private copy) shows the forward rules get wrong, as hints for the real
    one: (per loop index, per carried value: the layout the body computes its next value in, when the body
    converts into the carried layout instead -- carrying it in the produced layout moves it once, before the
    loop), and (per op index: the layout an index-like value -- a mask or index tile from iota, constants
    and broadcasts -- is converted to, for every op of its chain: it is recomputed there instead of moved).
    Indices are positions in walk order before the pass, the same in the copy and in `k`."""
    trial = replace(k, fn=clone_function(k.fn), remarks=[])
    order = {id(op): i for i, op in enumerate(walk_ops(trial.fn.body))}
    first = _Assign(trial, {}, {})
    try:
        first.run()
    except LoweringError:
        return {}, {}      # the real assignment reports it, naming the user's op
    loop_hints: dict[int, dict[int, LinearLayout]] = {}
    loops = [op for op in walk_ops(trial.fn.body) if op.name in LOOPS]
    for index, loop in enumerate(loops):
        block = loop.regions[0].block
        args = block.args[1:] if loop.name == "for" else block.args
        for term in block.ops:
            if term.name != "continue":
                continue
            for i, v in enumerate(term.operands.get("operands") or []):
                produced = _produced_layout(v, layout_of(args[i].type))
                if produced is not None:
                    loop_hints.setdefault(index, {})[i] = produced
    op_hints: dict[int, LinearLayout] = {}
    # last conversion first: a later one is nearer the final consumer, and its chain re-lays the broadcasts
    # an earlier conversion only existed for (e.g. a mask converted for a broadcast that itself converts)
    for op in reversed(list(walk_ops(trial.fn.body))):
        if op.name == CONVERT_LAYOUT.name and first.index_like(op.operands["source"]):
            _recompute_in(op.operands["source"], layout_of(op.result.type), first, order, op_hints)
    return loop_hints, op_hints


def _recompute_in(v: Value, layout: LinearLayout | None, a: "_Assign", order: dict, hints: dict) -> None:
    """Hint every op of v's index-like chain to compute in `layout` (its broadcasts' sources in the
    collapsed layout)."""
    work = [(v, layout)]
    while work:
        v, layout = work.pop()
        owner = v.owner
        if layout is None or not isinstance(owner, Operation):
            continue
        if owner.name == CONVERT_LAYOUT.name:      # a conversion the copy's pass inserted: look through
            work.append((owner.operands["source"], layout))
            continue
        index = order.get(id(owner))
        if index is None or index in hints or not v.type.shape or not a.index_like(v):
            continue
        if owner.name == "broadcast":
            hints[index] = layout
            src = owner.operands["source"]
            if src.type.shape and not all(d == 1 for d in src.type.shape):
                work.append((src, layout.collapse(src.type.shape)))
        elif owner.name in HINTABLE:
            hints[index] = layout
        elif _elementwise(owner):
            hints[index] = layout
            work.extend((o, layout) for o in owner.operand_values()
                        if isinstance(o.type, T.TileType) and o.type.shape == v.type.shape)


def _elementwise(op: Operation) -> bool:
    return (not op.regions and len(op.results) == 1 and op.name not in SPECIAL and op.name not in NO_LAYOUT_RULE
            and op.name not in ATOMICS and op.name not in ("reshape", "permute"))


def _produced_layout(v: Value, carried: LinearLayout | None) -> LinearLayout | None:
    """The layout the next value of a carried tile is computed in, when the body converts to the carried
    layout on the way to `v`: the source layout of the nearest conversion into `carried` among `v` and the
    elementwise ops that compute it (breadth first)."""
    if carried is None:
        return None
    frontier, seen = [v], {id(v)}
    for _ in range(CONSUMER_DEPTH):
        nxt = []
        for x in frontier:
            owner = x.owner
            if not isinstance(owner, Operation):
                continue
            if owner.name == CONVERT_LAYOUT.name:
                src = layout_of(owner.operands["source"].type)
                if layout_of(x.type) == carried and src is not None and src != carried:
                    return src
                continue
            if owner.regions or len(owner.results) != 1 or owner.name in SPECIAL:
                continue
            for o in owner.operand_values():
                if id(o) not in seen and isinstance(o.type, T.TileType) and o.type.shape == v.type.shape:
                    seen.add(id(o))
                    nxt.append(o)
        frontier = nxt
    return None


@dataclass
class _LoopCtx:
    op: Operation
    carried: list           # layout per carried value
    exit: list | None       # layouts of the results (None: not known yet -- a `loop` before its first break)


@dataclass
class _IfCtx:
    op: Operation
    join: list | None = None


@dataclass
class _Frame:
    block: Block
    index: int = 0
    on_done: list = field(default_factory=list)   # callbacks when the block is finished


class _Assign:
    def __init__(self, k: KernelIR, hints: dict[int, dict[int, LinearLayout]], op_hints: dict[int, LinearLayout]):
        self.k = k
        self.hints = hints
        self.op_hints = {id(op): op_hints[i] for i, op in enumerate(walk_ops(k.fn.body)) if i in op_hints}
        self.index_memo: dict[int, bool] = {}
        self.loop_index = {id(op): i for i, op in enumerate(o for o in walk_ops(k.fn.body) if o.name in LOOPS)}
        self.options = k.options
        self.regions: list = []      # innermost last: _LoopCtx | _IfCtx | None (a combiner region)
        self.users: dict[int, list[Operation]] = {}
        for op in walk_ops(k.fn.body):
            for v in op.operand_values():
                self.users.setdefault(id(v), []).append(op)

    # -- the walk (iterative: nesting depth is unbounded) -------------------------------------------------
    def run(self) -> None:
        frames = [_Frame(self.k.fn.body)]
        while frames:
            f = frames[-1]
            if f.index >= len(f.block.ops):
                frames.pop()
                for cb in f.on_done:
                    cb()
                continue
            op = f.block.ops[f.index]
            inserted = self.visit(f.block, op)
            f.index += inserted + 1
            children = self.enter(op) if op.regions else []
            frames.extend(reversed(children))

    # -- helpers -----------------------------------------------------------------------------------------
    def default(self, ty: T.Type) -> LinearLayout | None:
        return self.options.default_layout(ty.shape) if getattr(ty, "shape", None) else None

    def set_layout(self, v: Value, layout: LinearLayout | None) -> None:
        if isinstance(v.type, T.TileType):
            v.type = with_layout(bare(v.type), layout)

    def convert(self, v: Value, layout: LinearLayout | None, new: list[Operation], loc: int) -> Value:
        """`v` in `layout` (a convert_layout op appended to `new` when it is not already).  A uniform value
        stays as it is: every thread holds it, whatever layout the op works in."""
        if not isinstance(v.type, T.TileType) or not v.type.shape or layout_of(v.type) == layout or layout is None:
            return v
        op = Operation(CONVERT_LAYOUT, {"source": v}, {}, [with_layout(bare(v.type), layout)], loc=loc)
        new.append(op)
        return op.result

    def require(self, op: Operation, names, layout, new: list[Operation]) -> None:
        for name in names:
            v = op.operands.get(name)
            if isinstance(v, Value):
                op.operands[name] = self.convert(v, layout, new, op.loc)

    def require_list(self, op: Operation, name: str, layouts: list, new: list[Operation]) -> None:
        vals = op.operands.get(name) or []
        op.operands[name] = [self.convert(v, lay, new, op.loc) for v, lay in zip(vals, layouts)] + vals[len(layouts):]

    # -- one op ------------------------------------------------------------------------------------------
    def visit(self, block: Block, op: Operation) -> int:
        """Set the op's result layouts, insert the conversions it needs before it; returns how many."""
        new: list[Operation] = []
        self.rule(op, new)
        if new:
            i = next(j for j, o in enumerate(block.ops) if o is op)
            block.ops[i:i] = new
        return len(new)

    def rule(self, op: Operation, new: list[Operation]) -> None:
        name = op.name
        if name in ("for", "loop", "if", "reduce", "scan") and op.regions:
            self.region_op(op, new)
            return
        if name in ("yield", "continue", "break"):
            self.terminator(op, new)
            return
        if name in NO_LAYOUT_RULE:
            return
        if name == "extract" and (sub := register_extract(op)) is not None:
            self.set_layout(op.result, sub[0])      # the box each thread holds: a register selection
            return
        if name in DEFAULT_RESULT:
            hint = self.op_hints.get(id(op))
            for r in op.results:
                self.set_layout(r, hint if hint is not None and r.type.shape == hint.shape else self.default(r.type))
            if name == "load_view_tko" and hint is None:
                self.set_layout(op.results[0], self.transposed_load_layout(op) or layout_of(op.results[0].type))
            return
        if name == "permute":
            src = layout_of(op.operands["source"].type)
            self.set_layout(op.result, src.transpose(tuple(op.attrs["permutation"])) if src else None)
            return
        if name == "reshape":
            self.reshape(op, new)
            return
        if name == "broadcast":
            self.broadcast(op, new)
            return
        if name in ("load_ptr_tko", "store_ptr_tko"):
            ptrs = op.operands["source" if name == "load_ptr_tko" else "destination"]
            layout = layout_of(ptrs.type)
            self.require(op, ("mask", "paddingValue", "value"), layout, new)
            if name == "load_ptr_tko":
                self.set_layout(op.results[0], layout)
            return
        if name in ATOMICS:
            self.atomic(op, new)
            return
        if name in ("mmaf", "mmai"):
            plan = recorded_plan(op)
            if plan is not None:
                check_size(plan, op)
            layout = result_layout(self.options, op)
            self.require(op, ("acc",), layout, new)
            self.set_layout(op.result, layout)
            return
        if name == "mmaf_scaled":   # the layout of its per-block products (tilegpu/analysis/scaled_mma.py)
            layout = scaled_mma.result_layout(self.options, op)
            self.require(op, ("acc",), layout, new)
            self.set_layout(op.result, layout)
            return
        self.elementwise(op, new)

    def elementwise(self, op: Operation, new: list[Operation]) -> None:
        tiles = [r for r in op.results if isinstance(r.type, T.TileType)]
        if len(op.results) != 1 or not tiles:
            raise LoweringError(f"assign-layouts has no rule for '{op.name}'", op)
        res = op.result
        laid = [v for v in op.operand_values() if layout_of(v.type) is not None]
        # a value computed from indices and constants alone converts by recomputing it
        # (remove-layout-conversions retypes its chain): follow the data operand
        lead = next((v for v in laid if not self.index_like(v)), laid[0] if laid else None)
        layout = self.op_hints.get(id(op)) or (None if lead is None else layout_of(lead.type))
        if layout is None and res.type.shape:
            layout = self.default(res.type)
        if layout is not None:
            for name, v in list(op.operands.items()):
                if isinstance(v, Value):
                    op.operands[name] = self.convert(v, layout, new, op.loc)
        self.set_layout(res, layout if res.type.shape else None)

    def transposed_load_layout(self, op: Operation) -> LinearLayout | None:
        """For a tile read through a view that transposes it (the tensor's unit-stride dimension is not the
        tile's last) and used only as an mma operand: the blocked layout whose vectors run along the tile
        dimension over the unit stride, when the launch hints let that one be read in vectors and the default
        not. The operand is staged in shared memory whatever its layout, so nothing converts; the default's
        vectors run across memory rows and read element by element."""
        ty = op.results[0].type
        view = op.operands["view"]
        run_dim = unit_stride_dim(view, len(ty.shape))
        if run_dim is None or run_dim == len(ty.shape) - 1 or not self.only_mma_operand(op.results[0]):
            return None
        default = self.default(ty)
        vector = max(1, prod(ty.shape) // self.options.num_threads)
        layout = blocked(ty.shape, self.options.num_warps, min(self.options.vector_width, vector), run_dim)
        return layout if vector_width(view, ty, layout) > vector_width(view, ty, default) else None

    def only_mma_operand(self, v: Value) -> bool:
        """Every use of `v` (through reshapes and permutes) is as an mma's lhs or rhs."""
        work = [v]
        while work:
            x = work.pop()
            users = self.users.get(id(x), ())
            if not users:
                return False
            for user in users:
                if user.name in ("reshape", "permute"):
                    work.append(user.result)
                elif user.name not in ("mmaf", "mmai") or x is user.operands.get("acc"):
                    return False
        return True

    def index_like(self, v: Value) -> bool:
        """`v` is computed only from iota, constants and broadcasts (elementwise, reshaped): a mask or an
        index tile, cheap to compute in any layout."""
        key = id(v)
        if key not in self.index_memo:
            self.index_memo[key] = False          # cycles (loop-carried values) are not index-like
            owner = v.owner
            result = False
            if isinstance(owner, Operation):
                if owner.name in INDEX_SOURCES:
                    result = True
                elif owner.name in ("reshape", CONVERT_LAYOUT.name):
                    result = self.index_like(owner.operands["source"])
                elif _elementwise(owner):
                    tiles = [o for o in owner.operand_values() if isinstance(o.type, T.TileType) and o.type.shape]
                    result = bool(tiles) and all(self.index_like(o) for o in tiles)
            self.index_memo[key] = result
        return self.index_memo[key]

    def atomic(self, op: Operation, new: list[Operation]) -> None:
        lead, others = ATOMICS[op.name]
        v = op.operands[lead]
        layout = layout_of(v.type)
        if layout is not None and _replicated(layout) and v.type.num_elements() >= self.options.num_threads:
            layout = self.default(v.type)
        self.require(op, (lead,) + others, layout, new)
        if op.results and isinstance(op.results[0].type, T.TileType):
            self.set_layout(op.results[0], layout)

    # -- regions -------------------------------------------------------------------------------------------
    def reshape(self, op: Operation, new: list[Operation]) -> None:
        src = op.operands["source"]
        ty = op.result.type
        layout = layout_of(src.type)
        if not ty.shape:   # to a scalar: every thread must hold the (single) element
            everywhere = replicated(layout.shape, self.options.num_warps) if layout is not None else None
            if layout is not None and everywhere.register_map_from(layout) is None:
                self.require(op, ("source",), everywhere, new)
            self.set_layout(op.result, None)
            return
        self.set_layout(op.result, replicated(ty.shape, self.options.num_warps) if layout is None
                        else layout.reshape(ty.shape))

    def broadcast(self, op: Operation, new: list[Operation]) -> None:
        src = op.operands["source"]
        ty = op.result.type
        if not src.type.shape:
            self.set_layout(op.result, self.default(ty))
            return
        layout = self.op_hints.get(id(op)) or self.consumer_layout(op.result) or self.default(ty)
        self.require(op, ("source",), layout.collapse(src.type.shape), new)
        self.set_layout(op.result, layout)

    def consumer_layout(self, v: Value) -> LinearLayout | None:
        """The layout of another operand, of v's shape, of an elementwise op that uses v or a value computed
        from it elementwise (already assigned: it is defined earlier), so that combining them needs no
        conversion.  Breadth first: the nearest combination decides."""
        frontier, seen = [v], {id(v)}
        for _ in range(CONSUMER_DEPTH):
            nxt = []
            for x in frontier:
                for user in self.users.get(id(x), ()):
                    if user.regions or len(user.results) != 1 or user.name in SPECIAL:
                        continue
                    for other in user.operand_values():
                        lay = layout_of(other.type)
                        if other is not x and lay is not None and other.type.shape == v.type.shape:
                            return lay
                    r = user.result
                    if isinstance(r.type, T.TileType) and r.type.shape == v.type.shape and id(r) not in seen:
                        seen.add(id(r))
                        nxt.append(r)
            frontier = nxt
        return None

    def region_op(self, op: Operation, new: list[Operation]) -> None:
        if op.name in ("reduce", "scan"):
            layout = layout_of(op.operands["operands"][0].type)
            self.require_list(op, "operands", [layout] * len(op.operands["operands"]), new)
            for r in op.results:
                if op.name == "scan":
                    self.set_layout(r, layout)
                else:
                    self.set_layout(r, self.reduced_layout(op, layout) if r.type.shape else None)
            return
        if op.name == "if":
            return
        inits = list(op.operands["initValues"])
        wanted = carried_layouts(self.options, op)
        for i, lay in self.hints.get(self.loop_index.get(id(op), -1), {}).items():
            if i < len(wanted) and wanted[i] is None:
                wanted[i] = lay
        layouts = []
        for v, lay in zip(inits, wanted):
            cur = layout_of(v.type)
            if lay is None or cur is None or cur == lay or v.type.shape != lay.shape:
                layouts.append(cur)
            elif not _splat_constant(v) and v.type.num_elements() * elem_bytes(v.type.elem) > SHARED_LIMIT:
                layouts.append(cur)   # too big to convert through shared memory: let the mma op report it
            else:
                layouts.append(lay)
        self.require_list(op, "initValues", layouts, new)
        block = op.regions[0].block
        args = block.args[1:] if op.name == "for" else block.args
        for a, lay in zip(args, layouts):
            self.set_layout(a, lay)

    def reduced_layout(self, op: Operation, layout: LinearLayout) -> LinearLayout:
        """A float reduction whose results only go to memory ends spread over its lanes (each thread holding
        a share of the rows: fewer shuffles, fewer stores); any other keeps every row in every thread that
        held part of it (what elementwise users and broadcasts back need)."""
        dim = op.attrs["dim"]
        stored = all(isinstance(r.type.elem, T.FloatType)
                     and all(u.name == "store_view_tko" for u in self.users.get(id(r), ())) for r in op.results)
        return layout.slice_scattered(dim) if stored else layout.slice(dim)

    def enter(self, op: Operation) -> list[_Frame]:
        """Frames for the op's region blocks (first region first), with what to do when they are done."""
        if op.name in ("for", "loop"):
            block = op.regions[0].block
            args = block.args[1:] if op.name == "for" else block.args
            carried = [layout_of(a.type) for a in args]
            ctx = _LoopCtx(op, carried, list(carried) if op.name == "for" else None)
            self.regions.append(ctx)

            def done():
                self.regions.pop()
                exits = ctx.exit if ctx.exit is not None else carried
                for r, lay in zip(op.results, exits):
                    self.set_layout(r, lay)
            return [_Frame(block, on_done=[done])]
        if op.name == "if":
            ctx = _IfCtx(op)
            self.regions.append(ctx)
            blocks = [b for r in op.regions for b in r.blocks]

            def done():
                self.regions.pop()
                for r, lay in zip(op.results, ctx.join or []):
                    self.set_layout(r, lay)
            frames = [_Frame(b) for b in blocks]
            frames[-1].on_done.append(done)
            return frames
        # combiner regions of reduce/scan: uniform scalars only
        self.regions.append(None)
        blocks = [b for r in op.regions for b in r.blocks]
        frames = [_Frame(b) for b in blocks]
        frames[-1].on_done.append(self.regions.pop)
        return frames

    def terminator(self, op: Operation, new: list[Operation]) -> None:
        vals = op.operands.get("operands") or []
        if op.name == "yield":
            ctx = self.regions[-1] if self.regions else None
            if not isinstance(ctx, _IfCtx):
                return      # a combiner's yield
            if ctx.join is None:
                ctx.join = [layout_of(v.type) for v in vals]
            self.require_list(op, "operands", ctx.join, new)
            return
        loop = next((c for c in reversed(self.regions) if isinstance(c, _LoopCtx)), None)
        if loop is None:
            raise LoweringError(f"'{op.name}' outside of a loop", op)
        if op.name == "continue":
            self.require_list(op, "operands", loop.carried, new)
            return
        if loop.exit is None:
            loop.exit = [layout_of(v.type) for v in vals]
        self.require_list(op, "operands", loop.exit, new)


def _replicated(layout: LinearLayout) -> bool:
    """Some lane or warp bit does not move the element: several threads hold each element."""
    return layout.replicated()


def replicated(shape: tuple[int, ...], num_warps: int) -> LinearLayout:
    """A one-element tile held by every thread in one register."""
    zero = (0,) * len(shape)
    return LinearLayout(tuple(shape), ((), (zero,) * 5, (zero,) * (num_warps.bit_length() - 1)))


def _splat_constant(v: Value) -> bool:
    """A constant whose dense value is one element repeated (held in registers as a literal: converting it
    to any layout is free)."""
    raw = constant_bytes(v)
    return raw is not None and is_splat(raw, v.type.elem)


def _check_complete(k: KernelIR) -> None:
    from ..ir import walk_blocks
    for block in walk_blocks(k.fn.body):
        for v in block.args:
            _check_value(v, None)
        for op in block.ops:
            for r in op.results:
                _check_value(r, op)


def _check_value(v: Value, op: Operation | None) -> None:
    t = v.type
    if isinstance(t, T.TileType) and t.shape and not (isinstance(t, LayoutTile) and t.layout is not None):
        raise LoweringError("assign-layouts left a tile without a layout", op)
