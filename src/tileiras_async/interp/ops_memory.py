"""Views, pointer arithmetic, loads, stores and atomics.

Memory ordering and scopes are accepted and ignored: tile blocks run one after
another and every op completes before the next one starts (program order), so
every ordering is trivially satisfied.  Races between tile blocks are not
modelled (the result is the one of that serial order).
"""
from __future__ import annotations

import numpy as np

from ..ir import types as T
from ..ir.enums import AtomicRMWMode as M
from . import numerics as N
from .errors import MemoryFault, UnsupportedOp
from .ops_arith import float_binary
from .registry import TOKEN, elem, handler, uint_scalar
from .views import TensorView, access, make_tile_view, padding_value

_M64 = (1 << 64) - 1


# ============================================================================ views
def _view_dims(static, dynamic, env) -> tuple[int, ...]:
    """A view type's sizes or strides: the static ones, and the dynamic operands (in order) for `?`."""
    dyn = iter(dynamic or [])
    out = []
    for s in static:
        if s == T.DYNAMIC:
            v = next(dyn)
            out.append(uint_scalar(env[v], elem(v).width))
        else:
            out.append(int(s))
    return tuple(out)


@handler("make_tensor_view")
def _make_tensor_view(it, op, env):
    vt = op.results[0].type
    base = int(np.asarray(env[op.operands["base"]]).reshape(()))
    shape = _view_dims(vt.shape, op.operands.get("dynamicShape"), env)
    strides = _view_dims(vt.strides, op.operands.get("dynamicStrides"), env)
    env[op.results[0]] = TensorView(base, vt.elem, shape, strides)


@handler("make_partition_view", "make_strided_view", "make_gather_scatter_view")
def _make_tile_view(it, op, env):
    env[op.results[0]] = make_tile_view(op.results[0].type, env[op.operands["tensor_view"]])


@handler("get_index_space_shape")
def _index_space(it, op, env):
    space = env[op.operands["src"]].index_space()
    for r, v in zip(op.results, space):
        env[r] = N.int_scalar(v, elem(r).width)


@handler("get_tensor_shape")
def _tensor_shape(it, op, env):
    shape = env[op.operands["src"]].shape
    for r, v in zip(op.results, shape):
        env[r] = N.int_scalar(v, elem(r).width)


def _indices(env, op, view) -> list:
    out = []
    for i, v in enumerate(op.operands.get("index") or []):
        val = env[v]
        if view.sparse_dim == i:
            out.append(N.as_unsigned(val, elem(v).width).astype(np.uint64).view(np.int64))
        else:
            out.append(uint_scalar(val, elem(v).width))
    return out


def _inbounds(op):
    ib = op.attrs.get("inbounds")
    return tuple(bool(x) for x in ib) if ib else None


@handler("load_view_tko")
def _load_view(it, op, env):
    view = env[op.operands["view"]]
    e = view.tv.elem
    addrs, mask = access(view, _indices(env, op, view), _inbounds(op))
    pad = padding_value(view.padding, e) if mask is not None else None
    val = it.memory.load(addrs, mask, e, pad, "load")
    rt = op.results[0].type
    env[op.results[0]] = val.reshape(rt.shape) if val.shape != rt.shape else val
    env[op.results[1]] = TOKEN


@handler("store_view_tko")
def _store_view(it, op, env):
    view = env[op.operands["view"]]
    e = view.tv.elem
    addrs, mask = access(view, _indices(env, op, view), _inbounds(op))
    tile = env[op.operands["tile"]]
    it.memory.store(addrs, mask, e, np.reshape(tile, addrs.shape), "store")
    env[op.results[0]] = TOKEN


@handler("atomic_red_view_tko")
def _atomic_red_view(it, op, env):
    view = env[op.operands["view"]]
    e = view.tv.elem
    addrs, mask = access(view, _indices(env, op, view), None)
    value = np.reshape(env[op.operands["value"]], addrs.shape)
    combine = _rmw_combine(op.attrs["mode"], e)
    it.memory.atomic(addrs, mask, e, combine, (value,), np.zeros((), N.compute_dtype(e)), "atomic reduction")
    env[op.results[0]] = TOKEN


# ============================================================================ pointers
@handler("offset")
def _offset(it, op, env):
    p = np.asarray(env[op.operands["ptr"]], dtype=np.uint64)
    ov = op.operands["offset"]
    o = N.as_signed(env[ov], elem(ov).width).astype(np.int64).view(np.uint64)
    pointee = elem(op.results[0]).pointee
    try:
        size = N.storage_dtype(pointee).itemsize  # i1 and fp8 take a byte, tf32 four
    except TypeError as e:
        raise UnsupportedOp(f"pointer arithmetic on {pointee}: {e}") from None
    env[op.results[0]] = np.asarray(p + o * np.uint64(size), dtype=np.uint64)


def _mask(env, op, name="mask"):
    v = op.operands.get(name)
    return None if v is None else np.asarray(env[v], dtype=np.bool_)


@handler("load_ptr_tko")
def _load_ptr(it, op, env):
    ptrs = np.asarray(env[op.operands["source"]], dtype=np.uint64)
    e = elem(op.results[0])
    mask = _mask(env, op)
    pv = op.operands.get("paddingValue")
    pad = env[pv] if pv is not None else None
    env[op.results[0]] = it.memory.load(ptrs, mask, e, pad, "load")
    env[op.results[1]] = TOKEN


@handler("store_ptr_tko")
def _store_ptr(it, op, env):
    ptrs = np.asarray(env[op.operands["destination"]], dtype=np.uint64)
    vv = op.operands["value"]
    it.memory.store(ptrs, _mask(env, op), elem(vv), env[vv], "store")
    env[op.results[0]] = TOKEN


def _int_pair(old, arg, e, unsigned):
    w = e.width
    if unsigned:
        return N.as_unsigned(old, w), N.as_unsigned(arg, w)
    return old, arg


def _rmw_combine(mode, e: T.Type):
    if mode == M.addf:
        return lambda old, arg: float_binary("addf", old, np.asarray(arg, old.dtype), e,
                                             N.RNE, False)
    if mode == M.xchg:
        return lambda old, arg: np.asarray(arg, old.dtype)
    if not isinstance(e, T.IntType):
        raise UnsupportedOp(f"atomic mode '{mode.spelling}' on element type {e}")
    w = e.width

    def cmpsel(pick_old):
        def f(old, arg):
            return np.where(pick_old(old, arg), old, arg).astype(old.dtype)
        return f
    if mode == M.add:
        return lambda old, arg: N.wrap_int(np.add(old, arg), w)
    if mode == M.and_:
        return lambda old, arg: np.bitwise_and(old, arg)
    if mode == M.or_:
        return lambda old, arg: np.bitwise_or(old, arg)
    if mode == M.xor:
        return lambda old, arg: np.bitwise_xor(old, arg)
    if mode == M.max:
        return cmpsel(lambda o, a: o >= a)
    if mode == M.min:
        return cmpsel(lambda o, a: o <= a)
    if mode == M.umax:
        return cmpsel(lambda o, a: N.as_unsigned(o, w) >= N.as_unsigned(a, w))
    if mode == M.umin:
        return cmpsel(lambda o, a: N.as_unsigned(o, w) <= N.as_unsigned(a, w))
    raise UnsupportedOp(f"atomic mode {mode!r}")


@handler("atomic_rmw_tko")
def _atomic_rmw(it, op, env):
    ptrs = np.asarray(env[op.operands["pointers"]], dtype=np.uint64)
    av = op.operands["arg"]
    e = elem(av)
    combine = _rmw_combine(op.attrs["mode"], e)
    res = it.memory.atomic(ptrs, _mask(env, op), e, combine, (env[av],),
                           np.zeros((), N.compute_dtype(e)), "atomic_rmw")
    env[op.results[0]] = res
    env[op.results[1]] = TOKEN


@handler("atomic_cas_tko")
def _atomic_cas(it, op, env):
    ptrs = np.asarray(env[op.operands["pointers"]], dtype=np.uint64)
    cv = op.operands["cmp"]
    e = elem(cv)
    cmp = env[cv]

    def combine(old, c, v):
        same = N.compute_to_bits(old, e) == N.compute_to_bits(np.asarray(c, old.dtype), e)
        return np.where(same, np.asarray(v, old.dtype), old).astype(old.dtype)
    res = it.memory.atomic(ptrs, _mask(env, op), e, combine, (cmp, env[op.operands["val"]]),
                           cmp, "atomic_cas")
    env[op.results[0]] = res
    env[op.results[1]] = TOKEN


# ============================================================================ globals / allocas
@handler("get_global")
def _get_global(it, op, env):
    name = op.attrs["name"]
    key = name.encode() if isinstance(name, str) else name
    buf = it.globals.get(key)
    if buf is None:
        raise MemoryFault(f"no global named @{key.decode(errors='replace')}")
    env[op.results[0]] = np.asarray(buf.base, dtype=np.uint64)


@handler("alloca")
def _alloca(it, op, env):
    e = elem(op.results[0]).pointee
    n = int(op.attrs["num_elem"])
    size = n * N.storage_dtype(e).itemsize
    align = int(op.attrs.get("alignment", 0) or 0)
    buf = it.memory.allocate(size, f"alloca of {n} x {e}", align=0)
    if align and buf.base % align:
        raise MemoryFault(f"cannot honour alloca alignment {align}")
    it.allocas.append(buf)
    env[op.results[0]] = np.asarray(buf.base, dtype=np.uint64)
