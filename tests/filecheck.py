"""A small FileCheck: `CHECK:`, `CHECK-NEXT:`, `CHECK-SAME:`, `CHECK-NOT:` directives (LLVM's meaning) over a
text; a pattern is literal text with `{{regex}}` parts.  `check(text, directives)` returns None when the text
passes, else what failed (the directive's line in the test file and why)."""
from __future__ import annotations

import re
from dataclasses import dataclass

DIRECTIVE = re.compile(r"//\s*(CHECK(?:-NEXT|-SAME|-NOT)?):(.*)$")


@dataclass
class Directive:
    kind: str       # CHECK, CHECK-NEXT, CHECK-SAME, CHECK-NOT
    pattern: str
    line: int       # in the test file, for the message


def directives(source: str) -> list[Directive]:
    out = []
    for i, line in enumerate(source.splitlines(), 1):
        m = DIRECTIVE.search(line)
        if m:
            out.append(Directive(m.group(1), m.group(2).strip(), i))
    return out


def _regex(pattern: str) -> re.Pattern:
    parts = re.split(r"\{\{(.*?)\}\}", pattern)
    return re.compile("".join(p if i % 2 else re.escape(p) for i, p in enumerate(parts)))


def check(text: str, checks: list[Directive]) -> str | None:
    lines = text.splitlines()
    line, col = 0, 0                 # where the previous match ended
    pending_not: list[Directive] = []
    matched_any = False

    def forbidden(upto_line: int, upto_col: int) -> str | None:
        """A CHECK-NOT pattern between the previous match and this one."""
        for d in pending_not:
            rx = _regex(d.pattern)
            for n in range(line, min(upto_line, len(lines) - 1) + 1):
                start = col if n == line else 0
                end = upto_col if n == upto_line else len(lines[n])
                if rx.search(lines[n], start, end):
                    return f"line {d.line}: CHECK-NOT: '{d.pattern}' found in output line {n + 1}"
        return None

    for d in checks:
        if d.kind == "CHECK-NOT":
            pending_not.append(d)
            continue
        rx = _regex(d.pattern)
        if d.kind == "CHECK-SAME":
            if not matched_any:
                return f"line {d.line}: CHECK-SAME without a previous match"
            m = rx.search(lines[line], col) if line < len(lines) else None
            where = [(line, m)] if m else []
        elif d.kind == "CHECK-NEXT":
            if not matched_any:
                return f"line {d.line}: CHECK-NEXT without a previous match"
            nxt = line + 1
            m = rx.search(lines[nxt]) if nxt < len(lines) else None
            where = [(nxt, m)] if m else []
        else:
            where = []
            for n in range(line, len(lines)):
                m = rx.search(lines[n], col if n == line and matched_any else 0)
                if m:
                    where = [(n, m)]
                    break
        if not where:
            return f"line {d.line}: {d.kind}: '{d.pattern}' not found"
        n, m = where[0]
        problem = forbidden(n, m.start())
        if problem:
            return problem
        pending_not = []
        line, col, matched_any = n, m.end(), True
    return forbidden(len(lines) - 1, len(lines[-1]) if lines else 0) if pending_not else None
