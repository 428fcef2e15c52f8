"""The back end links libdevice and keeps only what the kernels call, at every optimization level."""
from __future__ import annotations

import re

import pytest

from tileiras_async.codegen.nvptx import llvm_to_ptx
from tileiras_async.targets import target

KERNEL = """
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare float @__nv_expf(float)
declare float @__nv_sinf(float)

define void @k(ptr addrspace(1) %p) {
  %v = load float, ptr addrspace(1) %p
  %e = call float @__nv_expf(float %v)
  %s = call float @__nv_sinf(float %e)
  store float %s, ptr addrspace(1) %p
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{ptr @k, !"kernel", i32 1}
"""


@pytest.mark.parametrize("opt_level", [0, 3])
def test_only_called_libdevice_functions_are_emitted(opt_level):
    try:
        ptx = llvm_to_ptx(KERNEL, target("sm_90"), opt_level, kernels=("k",))
    except Exception as e:  # noqa: BLE001 - only a missing libdevice is a reason to skip
        if "libdevice" in str(e).lower():
            pytest.skip(str(e))
        raise
    assert re.search(r"\.entry\s+k\b", ptx)
    defined = re.findall(r"^\.func\s+(?:\([^)]*\)\s*)?(\w+)", ptx, re.M)
    called = set(re.findall(r"\bcall(?:\.uni)?\s[^;]*?\b(\w+),", ptx)) | set(
        re.findall(r"\bcall(?:\.uni)?\s*(?:\([^)]*\),\s*)?(\w+)", ptx))
    # -O0 used to emit all of libdevice (~360 functions, 1 MB of PTX for one expf)
    assert len(ptx) < 60_000 and len(defined) <= 8, defined[:20]
    assert set(defined) <= called, set(defined) - called
    if opt_level:
        assert defined == []  # inlined
