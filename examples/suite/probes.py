"""Probe modules that measure what each GPU architecture accepts (src/tileiras_async/ir/capabilities.py).

Built in memory with the IR builder (no cuTile, no debug info), so they are deterministic and tiny:

* ``type_<E>``             a kernel that makes a tensor view over a `ptr<E>` parameter (one use of E)
* ``mmaf_<E>_<acc>``       an fp8 mmaf (16x16x32) through static views
* ``scaled_<E>_<S>_<B>``   mmaf_scaled with element type E, scale type S, block size B (fp4 operands are
                           unpacked from bytes, as cuTile does)
* ``atomic_addf_<E>``      a scalar atomic_rmw addf on E; ``red_addf_<E>`` the view-based reduction

`record_oracle.py` runs NVIDIA's tileiras on each of them for every architecture it knows and records the
exit code and first stderr line in oracle.json; tests/test_suite.py checks our compiler against that.
"""
from __future__ import annotations

from typing import Callable

from tileiras_async.bytecode.writer import write_module
from tileiras_async.ir import types as T
from tileiras_async.ir.builder import BlockBuilder, ModuleBuilder, tile
from tileiras_async.ir.enums import AtomicRMWMode, MemoryOrderingSemantics, MemoryScope

WEAK = MemoryOrderingSemantics.weak
TYPES = (T.I1, T.I4, T.I8, T.I16, T.I32, T.I64, T.F16, T.BF16, T.F32, T.TF32, T.F64, T.F8E4M3FN, T.F8E5M2,
         T.F8E8M0FNU, T.F4E2M1FN, T.FNV8E5M3FNU)


def _kernel(params: list[T.Type], body: Callable[[BlockBuilder], None]) -> bytes:
    mb = ModuleBuilder((13, 4, 0))
    with mb.kernel("probe", params) as k:
        body(k)
        k.op("return")
    return write_module(mb.module)


def _view(k: BlockBuilder, base, elem: T.Type, shape: tuple[int, ...]):
    """A static, row-major tensor view over `base` and its one-tile partition view."""
    strides = tuple(int(s) for s in _row_major(shape))
    tv_t = T.TensorViewType(elem, shape, strides)
    tv = k.op("make_tensor_view", [tv_t], base=base).result
    pv_t = T.PartitionViewType(shape, tv_t, tuple(range(len(shape))), None)
    return k.op("make_partition_view", [pv_t], tensor_view=tv).result


def _row_major(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return reversed(out)


def _load(k: BlockBuilder, pv, elem, shape, token):
    zeros = [k.constant(0, tile(T.I32)) for _ in shape]
    return k.op("load_view_tko", [tile(elem, *shape), T.TOKEN], view=pv, index=zeros, token=token,
                memory_ordering_semantics=WEAK, inbounds=(True,) * len(shape)).results[0]


def _store(k: BlockBuilder, pv, value, token) -> None:
    zeros = [k.constant(0, tile(T.I32)) for _ in value.type.shape]
    k.op("store_view_tko", [T.TOKEN], tile=value, view=pv, index=zeros, token=token,
         memory_ordering_semantics=WEAK, inbounds=(True,) * len(value.type.shape))


def type_probe(elem: T.Type) -> bytes:
    def body(k):
        tv_t = T.TensorViewType(elem, (2,), (1,))
        k.op("make_tensor_view", [tv_t], base=k.args[0])
    return _kernel([tile(T.PointerType(elem))], body)


def mmaf_probe(elem: T.Type, acc: T.Type, m=16, n=16, kk=32) -> bytes:
    def body(k):
        tok = k.op("make_token", [T.TOKEN]).result
        a = _load(k, _view(k, k.args[0], elem, (m, kk)), elem, (m, kk), tok)
        b = _load(k, _view(k, k.args[1], elem, (kk, n)), elem, (kk, n), tok)
        cv = _view(k, k.args[2], acc, (m, n))
        r = k.op("mmaf", [tile(acc, m, n)], lhs=a, rhs=b, acc=_load(k, cv, acc, (m, n), tok)).result
        _store(k, cv, r, tok)
    return _kernel([tile(T.PointerType(elem))] * 2 + [tile(T.PointerType(acc))], body)


def _operand(k, base, elem, shape, tok):
    """An operand tile: loaded directly, or (4-bit elements) loaded as bytes and unpacked."""
    if elem.width >= 8:
        return _load(k, _view(k, base, elem, shape), elem, shape, tok)
    n = shape[0] * shape[1]
    raw = _load(k, _view(k, base, T.I8, (n // 2,)), T.I8, (n // 2,), tok)
    flat = k.op("unpack", [tile(elem, n)], source=raw).result
    return k.op("reshape", [tile(elem, *shape)], source=flat).result


def scaled_probe(elem: T.Type, scale: T.Type, block: int, m=16, n=16, kk=64) -> bytes:
    def body(k):
        tok = k.op("make_token", [T.TOKEN]).result
        a = _operand(k, k.args[0], elem, (m, kk), tok)
        b = _operand(k, k.args[1], elem, (kk, n), tok)
        sa = _load(k, _view(k, k.args[2], scale, (m, kk // block)), scale, (m, kk // block), tok)
        sb = _load(k, _view(k, k.args[3], scale, (kk // block, n)), scale, (kk // block, n), tok)
        cv = _view(k, k.args[4], T.F32, (m, n))
        r = k.op("mmaf_scaled", [tile(T.F32, m, n)], lhs=a, rhs=b, acc=_load(k, cv, T.F32, (m, n), tok),
                 lhs_scale=sa, rhs_scale=sb).result
        _store(k, cv, r, tok)
    data = T.I8 if elem.width < 8 else elem
    return _kernel([tile(T.PointerType(data))] * 2 + [tile(T.PointerType(scale))] * 2 +
                   [tile(T.PointerType(T.F32))], body)


def atomic_probe(elem: T.Type, view: bool) -> bytes:
    def body(k):
        tok = k.op("make_token", [T.TOKEN]).result
        if view:
            pv = _view(k, k.args[0], elem, (16,))
            val = _load(k, _view(k, k.args[2], elem, (16,)), elem, (16,), tok)
            k.op("atomic_red_view_tko", [T.TOKEN], view=pv, index=[k.constant(0, tile(T.I32))], value=val,
                 mode=AtomicRMWMode.addf, token=tok, memory_ordering_semantics=MemoryOrderingSemantics.relaxed,
                 memory_scope=MemoryScope.device)
        else:
            k.op("atomic_rmw_tko", [tile(elem), T.TOKEN], pointers=k.args[0], arg=k.args[1], token=tok,
                 mode=AtomicRMWMode.addf, memory_ordering_semantics=MemoryOrderingSemantics.relaxed,
                 memory_scope=MemoryScope.device)
    return _kernel([tile(T.PointerType(elem)), tile(elem), tile(T.PointerType(elem))], body)


def probes() -> dict[str, Callable[[], bytes]]:
    """name -> builder of the probe module's bytecode."""
    out: dict[str, Callable[[], bytes]] = {f"type_{e}": (lambda e=e: type_probe(e)) for e in TYPES}
    for e in (T.F8E4M3FN, T.F8E5M2):
        for acc in (T.F32, T.F16):
            out[f"mmaf_{e}_{acc}"] = lambda e=e, acc=acc: mmaf_probe(e, acc)
    for e, s, blk in ((T.F8E4M3FN, T.F8E8M0FNU, 32), (T.F8E5M2, T.F8E8M0FNU, 32), (T.F4E2M1FN, T.F8E8M0FNU, 32),
                      (T.F4E2M1FN, T.F8E8M0FNU, 16), (T.F4E2M1FN, T.F8E4M3FN, 16)):
        out[f"scaled_{e}_{s}_{blk}"] = lambda e=e, s=s, blk=blk: scaled_probe(e, s, blk)
    for e in (T.F16, T.BF16, T.F32, T.F64):
        out[f"atomic_addf_{e}"] = lambda e=e: atomic_probe(e, False)
        out[f"red_addf_{e}"] = lambda e=e: atomic_probe(e, True)
    return out
