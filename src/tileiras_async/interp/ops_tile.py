"""Constants, iota, shape ops, block ids, tokens, assume, print and assert."""
from __future__ import annotations

import numpy as np

from ..ir import types as T
from ..ir.attrs import BoundedAttr, DenseElements, DivByAttr, FloatAttr, IntegerAttr
from . import numerics as N
from .errors import AssertionFault, UndefinedBehavior
from .printf import format_print
from .registry import TOKEN, elem, handler, shape, uint_scalar


# ============================================================================ constants
def decode_dense(d: DenseElements, t: T.TileType | None = None) -> np.ndarray:
    """A dense constant (raw little-endian buffer; one element if splat) -> compute array."""
    t = t or d.type
    e = t.elem
    shp = tuple(t.shape)
    n = int(np.prod(shp, dtype=np.int64)) if shp else 1
    raw = bytes(d.raw)
    if isinstance(e, T.IntType) and e.width == 1:
        if len(raw) == 1 and raw[0] in (0, 0xFF):
            return np.full(shp, raw[0] != 0, dtype=np.bool_)
        bits = np.unpackbits(np.frombuffer(raw, np.uint8), bitorder="little")[:n]
        return bits.astype(np.bool_).reshape(shp)
    sb = T.storage_bytes(e)
    count = len(raw) // sb
    b = np.frombuffer(raw[:count * sb], np.uint8).reshape(count, sb).astype(np.uint64)
    bits = np.zeros(count, np.uint64)
    for k in range(sb):
        bits |= b[:, k] << np.uint64(8 * k)
    vals = N.bits_to_compute(bits, e)
    if count == 1 and n != 1:
        return np.full(shp, vals[0], dtype=vals.dtype)
    if count != n:
        raise UndefinedBehavior(f"dense constant has {count} elements, its type {t} needs {n}")
    # (np.ascontiguousarray would turn a 0-d constant into shape (1,))
    return np.array(vals.reshape(shp), order="C")


def attr_value(a, t: T.Type) -> np.ndarray:
    """An IntegerAttr / FloatAttr (reduce/scan identities) -> 0-d compute value of type `t`."""
    if isinstance(a, FloatAttr):
        w = a.type.width if isinstance(a.type, T.FloatType) else N.elem_bits(t)
        bits = np.array(a.bits & ((1 << max(w, 1)) - 1), dtype=np.uint64)
        return np.asarray(N.bits_to_compute(bits, a.type if isinstance(a.type, T.FloatType) else t),
                          dtype=N.compute_dtype(t))
    if isinstance(a, IntegerAttr):
        return N.int_scalar(a.value, t.width if isinstance(t, T.IntType) else 64)
    if isinstance(a, DenseElements):
        return decode_dense(a).reshape(())
    raise UndefinedBehavior(f"unsupported identity attribute {a!r}")


@handler("constant")
def _constant(it, op, env):
    v = it.cache.get(op)
    if v is None:
        v = decode_dense(op.attrs["value"], op.results[0].type)
        v.setflags(write=False)
        it.cache[op] = v
    env[op.results[0]] = v


@handler("iota")
def _iota(it, op, env):
    t = op.results[0].type
    env[op.results[0]] = N.wrap_int(np.arange(t.shape[0], dtype=np.int64), t.elem.width)


# ============================================================================ shape ops
@handler("broadcast")
def _broadcast(it, op, env):
    env[op.results[0]] = np.broadcast_to(env[op.operands["source"]], shape(op.results[0]))


@handler("reshape")
def _reshape(it, op, env):
    env[op.results[0]] = np.reshape(env[op.operands["source"]], shape(op.results[0]))


@handler("permute")
def _permute(it, op, env):
    env[op.results[0]] = np.transpose(env[op.operands["source"]], tuple(op.attrs["permutation"]))


@handler("cat")
def _cat(it, op, env):
    env[op.results[0]] = np.concatenate([env[op.operands["lhs"]], env[op.operands["rhs"]]],
                                        axis=int(op.attrs["dim"]))


def _slices(env, idx_values, src_shape, sub_shape, what):
    out = []
    for d, v in enumerate(idx_values):
        i = uint_scalar(env[v], elem(v).width)
        n = sub_shape[d]
        if (i + 1) * n > src_shape[d]:
            raise UndefinedBehavior(f"{what} slice index {i} along dimension {d} is out of range "
                                    f"({src_shape[d] // n} slices of {n})")
        out.append(slice(i * n, (i + 1) * n))
    return tuple(out)


@handler("extract")
def _extract(it, op, env):
    src = env[op.operands["source"]]
    sl = _slices(env, op.operands["indices"], np.shape(src), shape(op.results[0]), "extract")
    env[op.results[0]] = np.asarray(src)[sl]


@handler("insert")
def _insert(it, op, env):
    src = env[op.operands["source"]]
    dst = np.array(env[op.operands["destination"]], copy=True)
    sl = _slices(env, op.operands["indices"], dst.shape, np.shape(src), "insert")
    dst[sl] = src
    env[op.results[0]] = dst


def _to_bytes(values, e: T.Type) -> np.ndarray:
    bits = np.asarray(N.compute_to_bits(values, e)).astype(np.uint64).reshape(-1)
    w = N.elem_bits(e)
    if w == 4:
        lo, hi = bits[0::2] & 0xF, bits[1::2] & 0xF
        return (lo | (hi << np.uint64(4))).astype(np.uint8)
    nb = (w + 7) // 8
    out = np.zeros((bits.size, nb), np.uint8)
    for k in range(nb):
        out[:, k] = (bits >> np.uint64(8 * k)) & np.uint64(0xFF)
    return out.reshape(-1)


def _from_bytes(raw: np.ndarray, e: T.Type, n: int) -> np.ndarray:
    w = N.elem_bits(e)
    raw = np.asarray(raw).astype(np.uint64)
    if w == 4:
        bits = np.empty(raw.size * 2, np.uint64)
        bits[0::2] = raw & 0xF
        bits[1::2] = raw >> np.uint64(4)
    else:
        nb = (w + 7) // 8
        r = raw.reshape(-1, nb)
        bits = np.zeros(r.shape[0], np.uint64)
        for k in range(nb):
            bits |= r[:, k] << np.uint64(8 * k)
    return N.bits_to_compute(bits[:n], e)


@handler("pack")
def _pack(it, op, env):
    sv = op.operands["source"]
    env[op.results[0]] = _to_bytes(env[sv], elem(sv)).view(np.int8)


@handler("unpack")
def _unpack(it, op, env):
    t = op.results[0].type
    raw = np.asarray(env[op.operands["source"]]).view(np.uint8)
    env[op.results[0]] = np.asarray(_from_bytes(raw, t.elem, t.shape[0]), dtype=N.compute_dtype(t.elem))


# ============================================================================ grid, tokens
@handler("get_tile_block_id")
def _block_id(it, op, env):
    for r, v in zip(op.results, it.block):
        env[r] = np.asarray(v, dtype=np.int32)


@handler("get_num_tile_blocks")
def _num_blocks(it, op, env):
    for r, v in zip(op.results, it.grid):
        env[r] = np.asarray(v, dtype=np.int32)


@handler("make_token", "join_tokens", "gdc_launch_dependents_tko", "gdc_wait_tko", "memory_fence_alias_tko")
def _token(it, op, env):
    for r in op.results:
        env[r] = TOKEN


# ============================================================================ assume
def _first(bad: np.ndarray) -> tuple:
    if bad.ndim == 0:
        return ()
    return tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape))


@handler("assume")
def _assume(it, op, env):
    vv = op.operands["value"]
    val = env[vv]
    env[op.results[0]] = val
    key = ("assumed", op)
    if it.cache.get(key) is val:  # the same (immutable) value was checked before, e.g. a kernel argument
        return
    it.cache[key] = val
    pred = op.attrs.get("predicate")
    t = elem(vv) if isinstance(vv.type, T.TileType) else None
    if not isinstance(t, T.IntType):
        return
    if isinstance(pred, BoundedAttr):
        x = N.as_signed(val, t.width)
        bad = np.zeros(np.shape(x), bool)
        if pred.lb is not None:
            bad |= x < pred.lb
        if pred.ub is not None:
            bad |= x > pred.ub
        if bad.any():
            where = _first(bad)
            lb = "?" if pred.lb is None else pred.lb
            ub = "?" if pred.ub is None else pred.ub
            raise UndefinedBehavior(f"assumption bounded<{lb}, {ub}> does not hold: value "
                                    f"{int(np.asarray(x)[where])} at tile element {where}")
    elif isinstance(pred, DivByAttr) and pred.divisor > 0:
        x = N.as_signed(val, t.width).astype(np.int64)
        if pred.every and pred.along is not None and x.ndim > pred.along:
            x = np.take(x, np.arange(0, x.shape[pred.along], pred.every), axis=pred.along)
        bad = (x % pred.divisor) != 0
        if bad.any():
            where = _first(bad)
            raise UndefinedBehavior(f"assumption div_by<{pred.divisor}> does not hold: value "
                                    f"{int(np.asarray(x)[where])}")


# ============================================================================ print, assert
@handler("print_tko")
def _print(it, op, env):
    fmt = op.attrs["str"]
    fmt = fmt.decode(errors="replace") if isinstance(fmt, (bytes, bytearray)) else str(fmt)
    args = [(env[v], elem(v)) for v in (op.operands.get("args") or [])]
    it.emit(format_print(fmt, args))
    for r in op.results:
        env[r] = TOKEN


@handler("assert")
def _assert(it, op, env):
    c = np.asarray(env[op.operands["condition"]], dtype=np.bool_)
    if c.all():
        return
    msg = op.attrs.get("message", b"")
    msg = msg.decode(errors="replace") if isinstance(msg, (bytes, bytearray)) else str(msg)
    bad = ~c
    where = _first(bad)
    detail = f" (tile element {where} is false" + \
        (f"; {int(bad.sum())} of {bad.size} elements false)" if bad.size > 1 else ")")
    raise AssertionFault(f"assertion failed: {msg}{detail if c.ndim else ''}")
