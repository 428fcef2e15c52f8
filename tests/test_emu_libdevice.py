"""PTX emulator on libdevice: NVIDIA's math library compiled by our LLVM back end, executed.

libdevice's functions are long integer/float programs (range reduction with
carry chains and local arrays, polynomial evaluation with fma, bit tricks), so
results within a few ulps of numpy over ordinary, huge, tiny and special inputs
are a broad check of the emulator's instruction semantics.  At -O0 the
functions stay calls (device functions with .param passing and local depots),
which checks call inlining and local memory too.
"""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.emu import DeviceMemory, emulate_ptx

IR = """
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"
declare {t} @{fn}({t})
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
define void @k(ptr addrspace(1) %p, ptr addrspace(1) %q, i32 %n) {{
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %b = mul i32 %c, 128
  %i = add i32 %b, %t
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %done
body:
  %pi = getelementptr {t}, ptr addrspace(1) %p, i32 %i
  %x = load {t}, ptr addrspace(1) %pi
  %y = call {t} @{fn}({t} %x)
  %qi = getelementptr {t}, ptr addrspace(1) %q, i32 %i
  store {t} %y, ptr addrspace(1) %qi
  br label %done
done:
  ret void
}}
!nvvm.annotations = !{{!0}}
!0 = !{{ptr @k, !"kernel", i32 1}}
"""


def _ptx(fn: str, t: str, opt: int) -> str:
    from tileiras_async.codegen.nvptx import llvm_to_ptx
    from tileiras_async.targets import target
    return llvm_to_ptx(IR.format(fn=fn, t=t), target("sm_90"), opt, kernels=("k",))


def _run(fn: str, x: np.ndarray, opt: int = 3) -> np.ndarray:
    t = "float" if x.dtype == np.float32 else "double"
    ptx = _ptx(fn, t, opt)
    mem = DeviceMemory()
    px = mem.alloc_array(x, "x")
    y = np.zeros_like(x)
    py = mem.alloc_array(y, "y")
    emulate_ptx(ptx, "k", (-(-len(x) // 128), 1, 1), (128, 1, 1), [px, py, len(x)], mem)
    mem.copy_back(py, y)
    return y


def _ulps(got, exp, dtype):
    """Error in ulps of the expected value; non-finite results must match exactly (inf if not)."""
    tiny = np.finfo(dtype).tiny
    e = np.asarray(exp, np.float64)
    g = np.asarray(got, np.float64)
    fin = np.isfinite(e) & np.isfinite(g)
    same = (e == g) | (np.isnan(e) & np.isnan(g))
    scale = np.maximum(np.abs(e), tiny) * np.finfo(dtype).eps
    with np.errstate(all="ignore"):
        err = np.abs(g - e) / scale
    return np.where(same, 0.0, np.where(fin, err, np.inf))


def _near_zero(got, exp, tol):
    with np.errstate(all="ignore"):
        return (np.abs(exp) < tol) & (np.abs(np.asarray(got, np.float64) - exp) < tol)


X32 = np.array([0.0, -0.0, 0.5, -1.25, 1.0, 3.14159, 10.0, -87.3, 88.5, 1e-3, 1e-30, 105000.0, -3.1e5, 1e6,
                1e30, -1e38, 7.0e4, 123456.789, np.inf, -np.inf, np.nan], np.float32)

CASES32 = [
    ("__nv_sinf", np.sin, 2), ("__nv_cosf", np.cos, 2), ("__nv_expf", np.exp, 2), ("__nv_logf", np.log, 2),
    ("__nv_tanhf", np.tanh, 2), ("__nv_sqrtf", np.sqrt, 0), ("__nv_exp2f", np.exp2, 2),
    ("__nv_log2f", np.log2, 2), ("__nv_atanf", np.arctan, 2), ("__nv_rsqrtf", lambda v: 1 / np.sqrt(v), 2),
    ("__nv_expm1f", np.expm1, 2), ("__nv_log1pf", np.log1p, 2),
]


@pytest.mark.parametrize("fn,ref,ulps", CASES32, ids=[c[0] for c in CASES32])
def test_libdevice_f32(fn, ref, ulps):
    x = X32
    with np.errstate(all="ignore"):
        exp = ref(x.astype(np.float64)).astype(np.float32)
    got = _run(fn, x)
    bad = _ulps(got, exp, np.float32) > ulps + 0.5
    # relative error is meaningless near a result of 0 that is not exactly 0 (sin near pi, ...)
    bad &= ~_near_zero(got, exp, 1e-6)
    assert not bad.any(), [(float(a), float(g), float(e)) for a, g, e in zip(x[bad], got[bad], exp[bad])]


X64 = np.array([0.0, 0.5, -1.25, 3.141592653589793, 10.0, -700.0, 1e-300, 1e6, -3.3e10, 1e22, 1e300,
                np.inf, np.nan], np.float64)


@pytest.mark.parametrize("fn,ref", [("__nv_sin", np.sin), ("__nv_exp", np.exp), ("__nv_log", np.log),
                                    ("__nv_cbrt", np.cbrt)], ids=["sin", "exp", "log", "cbrt"])
def test_libdevice_f64(fn, ref):
    x = X64 if fn != "__nv_log" else np.abs(X64)
    with np.errstate(all="ignore"):
        exp = ref(x)
    got = _run(fn, x)
    bad = _ulps(got, exp, np.float64) > 2.5
    bad &= ~_near_zero(got, exp, 1e-12)
    assert not bad.any(), [(float(a), float(g), float(e)) for a, g, e in zip(x[bad], got[bad], exp[bad])]


@pytest.mark.parametrize("fn,ref", [("__nv_sinf", np.sin), ("__nv_expf", np.exp)], ids=["sinf", "expf"])
def test_libdevice_calls_at_O0(fn, ref):
    ptx = _ptx(fn, "float", 0)
    assert "call.uni" in ptx and ".func" in ptx
    got = _run(fn, X32, opt=0)
    with np.errstate(all="ignore"):
        exp = ref(X32.astype(np.float64)).astype(np.float32)
    bad = (_ulps(got, exp, np.float32) > 2.5) & ~_near_zero(got, exp, 1e-6)
    assert not bad.any()
