"""Pass tests from text: every `tests/passes/<pass>/*.tir` holds a `// RUN: opt --passes P [--gpu-name G]` line,
the input IR (a --print-ir-before section, trimmed) and FileCheck-style CHECK lines (tests/filecheck.py) on what
`tileiras-async opt` prints.  The runner is tested too: a CHECK that does not hold fails."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tileiras_async.tilegpu.opt import opt_text
from tileiras_async.tilegpu.passes import PASS_NAMES

from filecheck import check, directives

CASES = sorted((Path(__file__).parent / "passes").glob("*/*.tir"))


def run_case(path: Path, text: str | None = None) -> str | None:
    """What failed in the case (None: it passes)."""
    source = path.read_text() if text is None else text
    run = re.search(r"^// RUN: (.*)$", source, re.M)
    assert run, f"{path}: no '// RUN:' line"
    argv = shlex.split(run.group(1))
    assert argv[0] == "opt" and "--passes" in argv, f"{path}: RUN must be 'opt --passes ...'"
    passes = argv[argv.index("--passes") + 1].split(",")
    gpu = argv[argv.index("--gpu-name") + 1] if "--gpu-name" in argv else None
    checks = directives(source)
    assert checks, f"{path}: no CHECK lines"
    return check(opt_text(source, str(path), passes, gpu), checks)


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_pass_case(path):
    assert path.parent.name in PASS_NAMES, f"{path.parent.name} is not a pass"
    run = next(line for line in path.read_text().splitlines() if line.startswith("// RUN:"))
    assert path.parent.name in run.split("--passes", 1)[1].split()[0].split(","), \
        "a case runs the pass its folder names"
    problem = run_case(path)
    assert problem is None, f"{path}: {problem}"


def test_every_pass_has_three_cases():
    """Every pass of the pipeline, convert-to-tilegpu too (its input: cuda_tile text)."""
    by_pass = {name: 0 for name in PASS_NAMES}
    for p in CASES:
        by_pass[p.parent.name] = by_pass.get(p.parent.name, 0) + 1
    assert all(n >= 3 for n in by_pass.values()), {k: n for k, n in by_pass.items() if n < 3}


def test_a_check_that_does_not_hold_fails():
    path = CASES[0]
    source = path.read_text()
    assert run_case(path, source + "// CHECK: this text is in no output\n") is not None
    first = next(d for d in directives(source) if d.kind == "CHECK")
    assert run_case(path, source + "// CHECK-NOT: this text is in no output\n") is None
    # the first CHECK turned into a CHECK-NOT: its text does come before the next CHECK's
    assert run_case(path, source.replace(f"// CHECK: {first.pattern}", f"// CHECK-NOT: {first.pattern}", 1)) is not None


@pytest.mark.parametrize("text, checks, ok", [
    ("a b\nc d\ne", "// CHECK: a\n// CHECK-SAME: b\n// CHECK-NEXT: c\n// CHECK-NOT: z\n// CHECK: e", True),
    ("a b\nc d\ne", "// CHECK: b\n// CHECK-SAME: a", False),          # SAME: after the previous match
    ("a\nx\nc", "// CHECK: a\n// CHECK-NEXT: c", False),               # NEXT: the very next line
    ("a\nx\nc", "// CHECK: a\n// CHECK-NOT: x\n// CHECK: c", False),   # NOT: between the two matches
    ("a\nx\nc", "// CHECK: c\n// CHECK-NOT: x", True),                 # NOT after the last: up to the end
    ("v = 16", "// CHECK: v = {{[0-9]+}}", True),
    ("v = x", "// CHECK: v = {{[0-9]+}}", False),
    ("a\nb", "// CHECK: b\n// CHECK: a", False),                       # in order
])
def test_filecheck_directives(text, checks, ok):
    assert (check(text, directives(checks)) is None) == ok
