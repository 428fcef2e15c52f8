"""The tile-GPU pass pipeline: an ordered list of named passes per target (Triton's `make_ttgir` list).

Every pass is a small module in this package with a module docstring stating its contract and a `run(k)`
function over a `KernelIR`.  `PIPELINES` says which run for which target, in which order; the driver only
sequences them (and prints the IR between them on request: --print-ir-before/-after/-after-all).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir import KernelIR

# (pass name, module in this package); the order of this list is the order of every pipeline
_ALL = [
    ("convert-to-tilegpu", "to_tilegpu"),
    ("dce", "dce"),
    ("split-arg-reductions", "split_arg_reductions"),
    ("choose-warps", "choose_warps"),
    ("select-mma", "select_mma"),
    ("distribute-add-over-select", "distribute_select"),
    ("assign-layouts", "assign_layouts"),
    ("remove-layout-conversions", "remove_conversions"),
    ("merge-repadded-loads", "merge_loads"),
    ("share-scan-totals", "scan_totals"),
    ("materialize-shared-memory", "materialize_smem"),
    ("select-tile-tensor-copies", "tile_tensor_copies"),
    ("choose-stage-copies", "stage_copies"),
    ("schedule-loops", "schedule_loops"),
    ("select-tensor-copies", "tensor_copies"),
    ("pipeline", "software_pipeline"),
    ("hoist-operand-staging", "hoist_staging"),
    ("keep-accumulators-in-tensor-memory", "tmem_accumulators"),
    ("issue-tile-tensor-copies", "issue_tile_copies"),
    ("vectorize-view-accesses", "vectorize_accesses"),
    ("select-tile-tensor-stores", "tile_tensor_stores"),
    ("allocate-shared-memory", "allocate_smem"),
    ("insert-barriers", "insert_barriers"),
    ("mark-uniform-branches", "uniform_branches"),
    ("select-access-forms", "select_access_forms"),
]


def pipeline_for(target: str) -> list[str]:
    """The passes that run for `target` (sm_XX), in order."""
    return [name for name, _ in _ALL]


PASS_NAMES = tuple(name for name, _ in _ALL)


def _load(name: str) -> Callable[[KernelIR], None]:
    module = dict(_ALL)[name]
    return importlib.import_module(f"{__name__}.{module}").run


@dataclass
class IRPrinting:
    """--print-ir-before=P, --print-ir-after=P, --print-ir-after-all, --print-ir-after-change: which snapshots
    to take; --print-debuginfo: with each op's source location."""
    before: frozenset[str] = frozenset()
    after: frozenset[str] = frozenset()
    after_all: bool = False
    after_change: bool = False   # after a pass only if it changed the IR (of all passes, or of `after`)
    debuginfo: bool = False

    @property
    def active(self) -> bool:
        return bool(self.before or self.after or self.after_all or self.after_change)

    def wants_after(self, name: str) -> bool:
        if self.after_change and not self.after_all and not self.after:
            return True
        return self.after_all or name in self.after


@dataclass
class IRSnapshot:
    when: str           # "before" | "after"
    pass_name: str
    text: str


@dataclass
class PassRun:
    snapshots: list[IRSnapshot] = field(default_factory=list)


def run_pipeline(k: KernelIR, printing: IRPrinting | None = None, until: str | None = None,
                 after: str | None = None) -> PassRun:
    """Run the target's passes over `k` in place (those after `after`, up to and including `until`); return
    the requested IR snapshots."""
    from ..printer import print_kernel
    out = PassRun()
    target = getattr(k.options, "target", "sm_100")
    text = None   # with after_change: the IR as the previous pass left it

    def show() -> str:
        return print_kernel(k, debuginfo=printing.debuginfo)

    if printing is not None and printing.after_change:
        text = show()
    names = pipeline_for(getattr(target, "name", target))
    if after is not None:
        names = names[names.index(after) + 1:]
    for name in names:
        if printing is not None and name in printing.before:
            out.snapshots.append(IRSnapshot("before", name, text if text is not None else show()))
        _load(name)(k)
        if printing is not None and (printing.after_change or printing.wants_after(name)):
            after = show()
            changed = after != text
            if printing.wants_after(name) and (changed or not printing.after_change):
                out.snapshots.append(IRSnapshot("after", name, after))
            text = after if printing.after_change else None
        if name == until:
            break
    return out
