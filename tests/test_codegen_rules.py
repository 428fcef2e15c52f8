"""Rules of the code generator's shape, read from the source with `ast` (nothing is imported):

* codegen translates, it does not decide: the passes record their decisions as attributes on the IR
  (tilegpu/decisions.py, select-mma's `mma_plan`/`fma_plan`, select-access-forms), so nothing but select-mma
  calls the planners (`plan_for`, `fma_plan_for`: not the later passes, not codegen) and the kernel carries no
  side table of pass records (`KernelIR.notes`);
* small named functions: none in codegen/ longer than 80 lines;
* no memos on the emitter: the lowerings share only the translation state KernelEmitter declares.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

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


PLANNING = {PACKAGE / "tilegpu" / "analysis" / "mma.py", PACKAGE / "tilegpu" / "passes" / "select_mma.py"}


def test_only_select_mma_plans_mmas():
    """select-mma records every mma's plan (`mma_plan`, `fma_plan`); the passes after it and codegen read it
    (tilegpu.analysis.mma.recorded_plan), none plans again."""
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


def _declared_emitter_names() -> set[str]:
    """What KernelEmitter declares: the attributes its methods assign on self, and its methods."""
    tree = ast.parse((CODEGEN / "emitter.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KernelEmitter"]
    return {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name) and n.value.id == "self"} \
        | {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


def _undeclared_emitter_uses(source: str, declared: set[str]) -> list[int]:
    """Lines where a lowering reaches into the emitter (`em`) past what it declares: an attribute it does not
    declare, or one named by a string (getattr/setattr/hasattr/vars)."""
    lines = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "em" \
                and n.attr not in declared:
            lines.append(n.lineno)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id in ("getattr", "setattr", "hasattr", "delattr", "vars") \
                and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == "em":
            lines.append(n.lineno)
    return lines


def test_lowerings_keep_state_only_where_the_emitter_declares_it():
    """Translation state shared between lowerings (LLVM values made once: rings' offsets, the print lock, ...)
    is declared in KernelEmitter.__init__; no memo is hung on the emitter on the fly, where a later lowering
    (or a pass) could read a decision nobody recorded in the IR."""
    declared = _declared_emitter_names()
    uses = [f"{p.name}:{line}" for p in sorted(CODEGEN.glob("*.py"))
            for line in _undeclared_emitter_uses(p.read_text(), declared)]
    assert uses == []


@pytest.mark.parametrize("code", ["x = getattr(em, '_memo', None)", "em._memo = 1", "setattr(em, 'memo', 1)"])
def test_the_emitter_scan_finds_memos(code):
    assert _undeclared_emitter_uses(code, _declared_emitter_names()) == [1]
