"""The execution engine: runs a kernel's ops with numpy, one tile block after another.

Tile blocks run sequentially in grid order (x fastest, then y, then z); each
sees the memory left by the previous ones.  Races between tile blocks are not
modelled, and within a block every op completes before the next one starts
(tokens impose no extra order beyond program order).
"""
from __future__ import annotations

import numpy as np

from ..ir import types as T
from ..ir.core import Block, Function, Module, Operation
from ..ir.diagnostics import resolve_loc
from ..ir.enums import RoundingMode, Signedness
from . import numerics as N
from . import ops_arith, ops_memory, ops_tile  # noqa: F401  (register handlers)
from .errors import KernelFault, UndefinedBehavior, UnsupportedOp
from .memory import Memory
from .ops_tile import attr_value, decode_dense
from .registry import HANDLERS, Signal, elem, handler, sint_scalar, uint_scalar


class Interp:
    def __init__(self, module: Module, fn: Function, memory: Memory, grid: tuple[int, int, int],
                 emit=None):
        self.module = module
        self.fn = fn
        self.memory = memory
        self.grid = grid
        self.block: tuple[int, int, int] = (0, 0, 0)
        self.cache: dict = {}
        self.globals: dict = {}
        self.allocas: list = []
        self.output: list[str] = []
        self._emit = emit
        self.ops_executed = 0
        self.elements = 0
        self._block_stats: dict = {}
        self._locs: dict = {}

    # ------------------------------------------------------------------ helpers
    def emit(self, text: str) -> None:
        self.output.append(text)
        if self._emit is not None:
            self._emit(text)

    def loc_of(self, op: Operation) -> str | None:
        key = op.loc
        if key not in self._locs:
            loc = resolve_loc(self.module, op.loc) if op.loc else None
            self._locs[key] = str(loc) if loc is not None else None
        return self._locs[key]

    def _stats(self, block: Block) -> np.ndarray:
        st = self._block_stats.get(id(block))
        if st is None:
            elems = []
            for op in block.ops:
                n = 0
                for r in op.results:
                    if isinstance(r.type, T.TileType):
                        n += r.type.num_elements()
                elems.append(n)
            st = np.concatenate([[0], np.cumsum(elems, dtype=np.int64)])
            self._block_stats[id(block)] = st
        return st

    # ------------------------------------------------------------------ execution
    def exec_block(self, block: Block, env: dict) -> Signal | None:
        handlers = HANDLERS
        i = 0
        try:
            for op in block.ops:
                i += 1
                sig = handlers[op.spec.name](self, op, env)
                if sig is not None:
                    return sig
            return None
        except KernelFault as e:
            op = block.ops[i - 1]
            e.attach(op.spec.name, self.loc_of(op), self.block)
            raise
        finally:
            self.ops_executed += i
            self.elements += int(self._stats(block)[i])

    def run_region(self, block: Block, env: dict, args) -> Signal | None:
        for a, v in zip(block.args, args):
            env[a] = v
        return self.exec_block(block, env)

    def init_globals(self) -> None:
        for g in self.module.globals:
            t = g.type if isinstance(g.type, T.TileType) else g.value.type
            vals = decode_dense(g.value, t)
            raw = np.ascontiguousarray(N.to_storage(vals, t.elem)).view(np.uint8).reshape(-1)
            name = g.name.decode(errors="replace")
            buf = self.memory.allocate(raw.size, f"global @{name}", init=raw,
                                       readonly=bool(getattr(g, "constant", False)),
                                       elem_size=N.storage_dtype(t.elem).itemsize)
            self.globals[g.name] = buf

    def run(self, arg_values: list) -> None:
        body = self.fn.body
        gx, gy, gz = self.grid
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    self.block = (x, y, z)
                    env = dict(zip(body.args, arg_values))
                    try:
                        self.exec_block(body, env)
                    finally:
                        for buf in self.allocas:
                            self.memory.free(buf)
                        self.allocas.clear()


# ============================================================================ preflight


def _type_problem(t) -> str | None:
    """Why values of type `t` cannot be handled, or None."""
    try:
        if isinstance(t, T.TileType):
            e = t.elem
            if isinstance(e, T.PointerType):
                N.storage_dtype(e.pointee)
            else:
                N.compute_dtype(e)
        elif isinstance(t, T.TensorViewType):
            N.storage_dtype(t.elem)
        elif isinstance(t, (T.PartitionViewType, T.StridedViewType, T.GatherScatterViewType)):
            return _type_problem(t.tensor_view)
    except TypeError as e:
        return str(e)
    return None


def preflight(module: Module, fn: Function) -> None:
    """Refuse, before running anything, ops (and types) the interpreter cannot execute."""
    def where(op):
        loc = resolve_loc(module, op.loc) if op.loc else None
        return f" at {loc}" if loc else ""
    for t in fn.type.inputs:
        why = _type_problem(t)
        if why:
            raise UnsupportedOp(f"kernel parameter of type {t}: {why}")
    for op in fn.walk():
        if op.spec.name not in HANDLERS:
            raise UnsupportedOp(f"the interpreter does not support op '{op.spec.name}'{where(op)}")
        if op.spec.name == "divi" and op.attrs.get("signedness") == Signedness.unsigned \
                and op.attrs.get("rounding") == RoundingMode.negative_inf:
            raise UnsupportedOp(f"'cuda_tile.divi' op{where(op)}: rounding mode 'negative_inf' is not allowed "
                                f"with 'unsigned' flag")
        for v in list(op.results) + [a for r in op.regions for b in r.blocks for a in b.args]:
            why = _type_problem(v.type)
            if why:
                raise UnsupportedOp(f"'{op.spec.name}'{where(op)}: {why}")


# ============================================================================ control flow
@handler("yield", "continue", "break", "return")
def _terminator(it, op, env):
    """End the block: a Signal of the op's kind carrying its operands' values."""
    return Signal(op.spec.name, [env[v] for v in op.operands.get("operands") or []])


@handler("if")
def _if(it, op, env):
    cond = bool(np.asarray(env[op.operands["condition"]]).reshape(()))
    region = op.regions[0] if cond else (op.regions[1] if len(op.regions) > 1 else None)
    if region is None or not region.blocks:
        return None
    sig = it.exec_block(region.blocks[0], env)
    if sig is None:
        return None
    if sig.kind == "yield":
        for r, v in zip(op.results, sig.values):
            env[r] = v
        return None
    return sig  # continue / break / return: leave the enclosing block too


@handler("for")
def _for(it, op, env):
    lbv = op.operands["lowerBound"]
    t = elem(lbv)
    w = t.width
    unsigned = bool(op.attrs.get("unsignedCmp", False))
    read = uint_scalar if unsigned else sint_scalar
    lb = read(env[lbv], w)
    ub = read(env[op.operands["upperBound"]], w)
    step = read(env[op.operands["step"]], w)
    vals = [env[v] for v in op.operands.get("initValues") or []]
    block = op.regions[0].blocks[0]
    iv_arg, iter_args = block.args[0], block.args[1:]
    mask = (1 << w) - 1
    if lb < ub and step <= 0:
        raise UndefinedBehavior(f"for loop step {step} is not positive")
    iv = lb
    while iv < ub:
        env[iv_arg] = N.int_scalar(iv, w)
        for a, v in zip(iter_args, vals):
            env[a] = v
        sig = it.exec_block(block, env)
        if sig is None:
            pass
        elif sig.kind == "continue":
            vals = sig.values
        elif sig.kind == "break":
            vals = sig.values
            break
        elif sig.kind == "return":
            return sig
        nxt = (iv + step) & mask
        if not unsigned and nxt >= 1 << (w - 1):
            nxt -= 1 << w
        if (unsigned and nxt < iv) or (not unsigned and nxt < iv):
            break  # the induction variable wrapped around: the range is exhausted
        iv = nxt
    for r, v in zip(op.results, vals):
        env[r] = v
    return None


@handler("loop")
def _loop(it, op, env):
    vals = [env[v] for v in op.operands.get("initValues") or []]
    block = op.regions[0].blocks[0]
    while True:
        for a, v in zip(block.args, vals):
            env[a] = v
        sig = it.exec_block(block, env)
        if sig is None or sig.kind == "continue":
            vals = sig.values if sig is not None else vals
            continue
        if sig.kind == "break":
            vals = sig.values
            break
        if sig.kind == "return":
            return sig
    for r, v in zip(op.results, vals):
        env[r] = v
    return None


# ============================================================================ reduce / scan
# Ops whose handlers work on arrays of any shape: combiner regions made only of
# these run on whole slices at once (a tree reduction / a Hillis-Steele scan).
_ELEMENTWISE = frozenset(["absf", "absi", "addf", "addi", "andi", "atan2", "bitcast", "ceil", "cmpf", "cmpi", "constant", "cos", "cosh", "divf", "divi", "exp", "exp2", "exti", "floor", "fma", "fpowi", "ftof", "ftoi", "itof", "log", "log2", "maxf", "maxi", "minf", "mini", "mulf", "mulhii", "muli", "negf", "negi", "ori", "pow", "remf", "remi", "rsqrt", "select", "shli", "shri", "sin", "sinh", "sqrt", "subf", "subi", "tan", "tanh", "trunci", "xori", "yield", "assume"])


def _vectorizable(block: Block) -> bool:
    for op in block.ops:
        if op.spec.name not in _ELEMENTWISE:
            return False
        for r in op.regions:
            for b in r.blocks:
                if not _vectorizable(b):
                    return False
    return True


def _combine(it, block: Block, env: dict, firsts: list, seconds: list, what: str) -> list:
    args = []
    for a, b in zip(firsts, seconds):
        args += [a, b]
    sig = it.run_region(block, env, args)
    if sig is None or sig.kind != "yield" or len(sig.values) != len(firsts):
        raise UndefinedBehavior(f"{what} body must yield {len(firsts)} values")
    shp = np.shape(firsts[0])
    return [np.broadcast_to(v, shp) if np.shape(v) != shp else v for v in sig.values]


def _single_op_combiner(it, block: Block):
    """For a body `%r = op(%a, %b); yield %r` over its two arguments: a function (a, b) -> r that runs
    just that op's handler (the same semantics as executing the region, without its overhead)."""
    ops = block.ops
    if len(block.args) != 2 or len(ops) != 2 or ops[1].spec.name != "yield":
        return None
    op, y = ops
    if op.regions or len(op.results) != 1 or [v for v in (y.operands.get("operands") or [])] != [op.results[0]]:
        return None
    vals = op.operand_values()
    if len(vals) != 2 or set(map(id, vals)) != set(map(id, block.args)):
        return None
    h = HANDLERS[op.spec.name]
    a0, a1 = block.args
    res = op.results[0]

    def combine(a, b):
        env = {a0: a, a1: b}
        h(it, op, env)
        r = env[res]
        it.ops_executed += 2  # the op and its yield
        it.elements += np.size(r)
        return r
    return combine


def _combiner(it, op, block: Block):
    """The region as a function of (firsts, seconds) -> results, cached per op."""
    key = ("combiner", op)
    fn = it.cache.get(key)
    if fn is None:
        single = _single_op_combiner(it, block) if len(op.operands["operands"]) == 1 else None
        if single is not None:
            def fn(env, firsts, seconds, what, _f=single):
                return [np.asarray(_f(firsts[0], seconds[0]))]
        elif _vectorizable(block):
            def fn(env, firsts, seconds, what):
                return _combine(it, block, env, firsts, seconds, what)
        else:
            fn = False
        it.cache[key] = fn
    return fn


def _identities(it, op, ins) -> list:
    key = ("identities", op)
    ids = it.cache.get(key)
    if ids is None:
        ids = [attr_value(a, elem(v)) for a, v in zip(op.attrs["identities"], ins)]
        it.cache[key] = ids
    return ids


def _cut(x: np.ndarray, dim: int, start: int, stop: int) -> np.ndarray:
    sl = [slice(None)] * x.ndim
    sl[dim] = slice(start, stop)
    return x[tuple(sl)]


@handler("reduce")
def _reduce(it, op, env):
    ins = op.operands["operands"]
    xs = [np.asarray(env[v]) for v in ins]
    dim = int(op.attrs["dim"])
    block = op.regions[0].blocks[0]
    ids = _identities(it, op, ins)
    n = xs[0].shape[dim]
    comb = _combiner(it, op, block)
    if comb:
        cur = xs
        leftover = None
        while n > 1:
            half = n // 2
            if n % 2:
                last = [_cut(x, dim, n - 1, n) for x in cur]
                leftover = last if leftover is None else comb(env, last, leftover, "reduce")
            cur = comb(env, [_cut(x, dim, 0, half) for x in cur], [_cut(x, dim, half, 2 * half) for x in cur],
                       "reduce")
            n = half
        if leftover is not None:
            cur = comb(env, cur, leftover, "reduce")
        if n == 0:
            res = [np.broadcast_to(i, np.delete(np.array(x.shape), dim)) for i, x in zip(ids, xs)]
        else:
            res = [np.squeeze(x, axis=dim) for x in cur]
    else:
        res = _reduce_scalar(it, block, env, xs, ids, dim)
    for r, v in zip(op.results, res):
        env[r] = np.asarray(v, dtype=N.compute_dtype(elem(r)))


def _reduce_scalar(it, block, env, xs, ids, dim):
    moved = [np.moveaxis(x, dim, -1) for x in xs]
    out_shape = moved[0].shape[:-1]
    outs = [np.empty(out_shape, dtype=x.dtype) for x in xs]
    for pos in np.ndindex(*out_shape):
        acc = [np.asarray(i) for i in ids]
        for j in range(moved[0].shape[-1]):
            cur = [np.asarray(m[pos + (j,)]) for m in moved]
            acc = _combine(it, block, env, cur, acc, "reduce")
        for o, a in zip(outs, acc):
            o[pos] = a
    return outs


@handler("scan")
def _scan(it, op, env):
    ins = op.operands["operands"]
    xs = [np.asarray(env[v]) for v in ins]
    dim = int(op.attrs["dim"])
    reverse = bool(op.attrs.get("reverse", False))
    block = op.regions[0].blocks[0]
    ids = _identities(it, op, ins)
    if reverse:
        xs = [np.flip(x, axis=dim) for x in xs]
    n = xs[0].shape[dim]
    comb = _combiner(it, op, block)
    if comb:
        ys = xs
        off = 1
        while off < n:
            new = comb(env, [_cut(y, dim, off, n) for y in ys], [_cut(y, dim, 0, n - off) for y in ys], "scan")
            ys = [np.concatenate([_cut(y, dim, 0, off), nv.astype(y.dtype)], axis=dim) for y, nv in zip(ys, new)]
            off *= 2
    else:
        moved = [np.moveaxis(x, dim, -1) for x in xs]
        outs = [np.empty_like(m) for m in moved]
        for pos in np.ndindex(*moved[0].shape[:-1]):
            acc = [np.asarray(i) for i in ids]
            for j in range(moved[0].shape[-1]):
                cur = [np.asarray(m[pos + (j,)]) for m in moved]
                acc = _combine(it, block, env, cur, acc, "scan")
                for o, a in zip(outs, acc):
                    o[pos + (j,)] = a
        ys = [np.moveaxis(o, -1, dim) for o in outs]
    if reverse:
        ys = [np.flip(y, axis=dim) for y in ys]
    for r, v in zip(op.results, ys):
        env[r] = np.ascontiguousarray(v, dtype=N.compute_dtype(elem(r)))


# ============================================================================ mma
def _mma_operand(x, t: T.Type) -> np.ndarray:
    if isinstance(t, T.FloatType) and t.name == "tf32":
        # the tensor cores read tf32 by dropping the low 13 mantissa bits of the f32 pattern
        x = (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return x


@handler("mmaf")
def _mmaf(it, op, env):
    lv, rv, av = op.operands["lhs"], op.operands["rhs"], op.operands["acc"]
    at = elem(av)
    a = _mma_operand(env[lv], elem(lv))
    b = _mma_operand(env[rv], elem(rv))
    acc = env[av]
    if at.name == "f64":
        r = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)) + np.asarray(acc, np.float64)
    else:
        r = np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32)) + np.asarray(acc, np.float32)
    env[op.results[0]] = np.asarray(N.from_f32_rne(r, at) if at.name != "f64" else r,
                                    dtype=N.compute_dtype(at))


@handler("mmai")
def _mmai(it, op, env):
    lv, rv, av = op.operands["lhs"], op.operands["rhs"], op.operands["acc"]

    def ints(v, s):
        x = env[v]
        return (N.as_unsigned(x, 8) if s == Signedness.unsigned else np.asarray(x)).astype(np.float64)
    a = ints(lv, op.attrs["signedness_lhs"])
    b = ints(rv, op.attrs["signedness_rhs"])
    prod = np.matmul(a, b).astype(np.int64)
    r = prod + np.asarray(env[av]).astype(np.int64)
    env[op.results[0]] = N.wrap_int(r, 32)


@handler("mmaf_scaled")
def _mmaf_scaled(it, op, env):
    from .mx import scaled_mma
    o = op.operands
    env[op.results[0]] = scaled_mma(env[o["lhs"]], env[o["lhs_scale"]], env[o["rhs"]], env[o["rhs_scale"]],
                                    env[o["acc"]])
