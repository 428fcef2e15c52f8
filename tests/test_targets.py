"""The GPU target table: each target's capabilities, and that nothing outside targets.py decides by SM number.

Which instruction a target gets (cp.async, wgmma, tcgen05, griddepcontrol, hardware fp8/tf32 conversions) is a
field of `targets.Target`.  A comparison of SM numbers or target names elsewhere would decide the same thing a
second time, so the source is scanned for them (with `ast`, so comments and strings in messages do not count).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tileiras_async.targets import GPU_NAMES, known_target, target

SRC = Path(__file__).resolve().parent.parent / "src" / "tileiras_async"
TARGETS_MODULE = SRC / "targets.py"

# ---------------------------------------------------------------------------------------------------------
# capabilities
# ---------------------------------------------------------------------------------------------------------


def _with(field: str) -> list[str]:
    return [n for n in GPU_NAMES if getattr(target(n), field)]


def test_tensor_core_instructions_per_target():
    assert _with("has_wgmma") == ["sm_90"]
    assert _with("has_tcgen05") == ["sm_100", "sm_103", "sm_110"]
    assert _with("has_tensor_memory") == ["sm_100", "sm_103", "sm_107", "sm_110"]
    assert _with("has_fp8_mma") == [n for n in GPU_NAMES if n not in ("sm_80", "sm_86", "sm_87", "sm_88")]
    # Blackwell without tensor memory: the targets where mma.sync is the best tensor-core instruction
    assert [n for n in _with("is_blackwell") if not target(n).has_tensor_memory] == ["sm_120", "sm_121"]


def test_sm90_features_start_at_hopper():
    hopper_on = [n for n in GPU_NAMES if n not in ("sm_80", "sm_86", "sm_87", "sm_88", "sm_89")]
    for field in ("has_griddepcontrol", "has_bf16_atomic_add", "has_int_to_bf16_cvt", "has_fp8_cvt"):
        assert _with(field) == hopper_on, field
    assert _with("has_cp_async") == list(GPU_NAMES)
    assert target("sm_89").tf32_cvt_roundings == {"rna"}
    assert target("sm_90").tf32_cvt_roundings == {"rna", "rn", "rz"}


def test_known_target_reads_names_architectures_and_targets():
    assert known_target("sm_90a") == target("sm_90") == known_target(target("sm_90"))
    assert known_target("sm_121") == target("sm_121")
    for unknown in ("sm_75", "sm_95", "sm_", "gfx90a", "", None, 90):
        assert known_target(unknown) is None, unknown


# ---------------------------------------------------------------------------------------------------------
# no raw SM decisions outside targets.py
# ---------------------------------------------------------------------------------------------------------

_SM_CALLS = ("sm_number", "target_sm")


def _is_target_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        v = node.value
        return v.startswith("sm_") and v[3:].rstrip("af").isdigit() and len(v) > 3
    return False


def _names_sm(node: ast.AST) -> bool:
    """An expression that holds an SM number or a target name to compare: `sm`, `x.sm`, `foo_sm`,
    `sm_number(...)`, "sm_90", ("sm_80", ...)."""
    if isinstance(node, ast.Name):
        return node.id == "sm" or node.id.endswith("_sm")
    if isinstance(node, ast.Attribute):
        return node.attr == "sm" or node.attr.endswith("_sm")
    if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return name in _SM_CALLS or name.endswith("_sm")
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_target_literal(e) for e in node.elts)
    return _is_target_literal(node)


def _none_test(node: ast.Compare) -> bool:
    """`x_sm is None`: whether a value is known (a CTAs-per-SM figure), not a decision by target."""
    return all(isinstance(c, ast.Constant) and c.value is None for c in node.comparators)


def raw_sm_decisions(source: str, filename: str = "<src>") -> list[str]:
    """`line: code` of every comparison of SM numbers or target names, and every SM-number lookup."""
    tree = ast.parse(source, filename)
    lines = source.splitlines()
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_names_sm(x) for x in (node.left, *node.comparators)) \
                and not _none_test(node):
            found.add(node.lineno)
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in _SM_CALLS:
                found.add(node.lineno)
            elif (isinstance(f, ast.Attribute) and f.attr in ("startswith", "endswith") and node.args
                  and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("sm_")):
                found.add(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "sm":
            found.add(node.lineno)
    return [f"{n}: {lines[n - 1].strip()}" for n in sorted(found)]


def test_no_raw_sm_comparisons_outside_targets():
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path == TARGETS_MODULE:
            continue
        bad += [f"{path.relative_to(SRC)}:{hit}" for hit in raw_sm_decisions(path.read_text(), str(path))]
    assert not bad, ("decisions by SM number or target name outside targets.py (add a capability field to "
                     "targets.Target and ask it instead):\n" + "\n".join(bad))


@pytest.mark.parametrize("code", [
    "if sm >= 90: pass",
    "ok = tgt.sm < 80",
    "ok = sm_number(name) != 90",
    "ok = n in (sm_number(a), 3)",
    "ok = family == 'sm_80'",
    "ok = name in ('sm_120', 'sm_121')",
    "ok = 'sm_90a' != name",
    "ok = name.startswith('sm_')",
    "ok = target_sm(em) is not None",
    "x = sm_number(name)",
    "x = tgt.sm",
])
def test_the_scan_finds_raw_sm_decisions(code):
    assert raw_sm_decisions(code) == [f"1: {code}"]


@pytest.mark.parametrize("code", [
    "ok = tgt.has_wgmma",
    "ok = sm.major == 'mn'",              # `sm` as a shared-memory operand's attribute
    "ok = name in GPU_NAMES",
    "x = f'sm_{n}'",
    "msg = 'wgmma exists on sm_90a only'",
])
def test_the_scan_leaves_capability_questions_alone(code):
    assert raw_sm_decisions(code) == []
