"""Rules of the code generator's shape, read from the source with `ast` (nothing is imported):

* codegen translates, it does not decide: the passes record their decisions as attributes on the IR
  (tilegpu/decisions.py, select-mma's `mma_plan`/`fma_plan`, select-access-forms), so nothing but select-mma
  calls the planners (`plan_for`, `fma_plan_for`: not the later passes, not codegen) and the kernel carries no
  side table of pass records (`KernelIR.notes`);
* small named functions: none in codegen/ longer than 80 lines.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "tileiras_async"
CODEGEN = PACKAGE / "codegen"
MAX_LINES = 80


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_codegen_function_is_longer_than_80_lines():
    long = [f"{p.name}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1} lines)"
            for p in sorted(CODEGEN.glob("*.py")) for f in _functions(p)
            if f.end_lineno - f.lineno + 1 > MAX_LINES]
    assert long == []


def test_kernel_ir_has_no_notes():
    tree = ast.parse((PACKAGE / "tilegpu" / "ir.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KernelIR"]
    fields = {t.target.id for t in cls.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
    assert {"module", "fn", "remarks"} <= fields and "notes" not in fields
    uses = [f"{p.relative_to(PACKAGE)}:{n.lineno}" for p in sorted(PACKAGE.rglob("*.py"))
            for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Attribute) and n.attr == "notes"
            and isinstance(n.value, ast.Name) and n.value.id == "k"]
    assert uses == []


PLANNERS = {"plan_for", "fma_plan_for"}


PLANNING = {PACKAGE / "tilegpu" / "mma.py", PACKAGE / "tilegpu" / "passes" / "select_mma.py"}


def test_only_select_mma_plans_mmas():
    """select-mma records every mma's plan (`mma_plan`, `fma_plan`); the passes after it and codegen read it
    (tilegpu.mma.recorded_plan), none plans again."""
    calls = [f"{p.relative_to(PACKAGE)}:{n.lineno}" for p in sorted(PACKAGE.rglob("*.py")) if p not in PLANNING
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Name) and n.id in PLANNERS
             or isinstance(n, ast.Attribute) and n.attr in PLANNERS
             or isinstance(n, ast.alias) and n.name in PLANNERS]
    assert calls == []


def test_the_planners_are_where_the_rule_says():
    assert all(any(isinstance(n, ast.FunctionDef) and n.name in PLANNERS or isinstance(n, ast.Name) and n.id in PLANNERS
                   for n in ast.walk(ast.parse(p.read_text()))) for p in PLANNING)


def test_codegen_keeps_no_state_in_the_emitters_dict():
    uses = [f"{p.name}:{n.lineno}" for p in sorted(CODEGEN.glob("*.py")) for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.Attribute) and n.attr == "__dict__"]
    assert uses == []
