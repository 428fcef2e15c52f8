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


def _whole_library_ptx(text: str, opt_level: int) -> str:
    """The PTX of linking all of libdevice into the kernel's module, as the back end did before it kept
    per-process subsets (the reference the subsets must reproduce)."""
    import llvmlite.binding as llvm

    from tileiras_async.codegen import nvptx
    tgt = target("sm_90")
    module = llvm.parse_assembly(text)
    tm = nvptx._target_machine(tgt.ptx_target, nvptx.ptx_feature(tgt), opt_level)
    lib = llvm.parse_bitcode(nvptx._libdevice_bytes())
    lib.triple, lib.data_layout = module.triple, module.data_layout
    module.link_in(lib)
    for f in module.functions:
        if not f.is_declaration and f.name != "k":
            f.linkage = "internal"
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=opt_level))
    pb.getModulePassManager().run(module, pb)
    return tm.emit_assembly(module)


def test_the_libdevice_subset_links_what_the_whole_library_does():
    from tileiras_async.codegen import nvptx
    try:
        reference = _whole_library_ptx(KERNEL, 3)
    except Exception as e:  # noqa: BLE001 - only a missing libdevice is a reason to skip
        if "libdevice" in str(e).lower():
            pytest.skip(str(e))
        raise
    first = llvm_to_ptx(KERNEL, target("sm_90"), 3, kernels=("k",))
    subsets = dict(nvptx._SUBSETS)
    again = llvm_to_ptx(KERNEL, target("sm_90"), 3, kernels=("k",))
    assert first == again == reference
    assert nvptx._SUBSETS == subsets  # the second compile reused the first one's subset
    assert frozenset({"__nv_expf", "__nv_sinf"}) in {names for names, _, _ in subsets}
