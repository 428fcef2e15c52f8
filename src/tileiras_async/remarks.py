"""Optimization remarks: what the compiler decided, in LLVM's remark formats.

Lowerings record remarks (which MMA instruction an mmaf became, how wide a load is, whether a loop
was pipelined); assembly adds each kernel's resources as its cubin records them (stages.resource_remarks).
`--remarks*` options pick which are shown, `--remark-format` how: LLVM's YAML stream or one line per
remark on stderr.
"""
from __future__ import annotations

import msgspec

KINDS = ("passed", "missed", "failed", "analysis")
CATEGORIES = ("memory", "tensorcore", "pipelining", "resources")
_YAML_TAG = {"passed": "Passed", "missed": "Missed", "failed": "Failure", "analysis": "Analysis"}


class Remark(msgspec.Struct, frozen=True):
    kind: str                 # passed | missed | failed | analysis
    category: str             # memory | tensorcore | pipelining | resources
    name: str                 # a stable identifier, e.g. "MmaInstruction"
    function: str
    message: str
    file: str = ""
    line: int = 0
    column: int = 0


class RemarkFilter(msgspec.Struct, frozen=True):
    """Which (kind, category) pairs are wanted; built from the --remarks* options."""
    enabled: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def from_options(cls, remarks: str | None = None, **per_kind: str | None) -> "RemarkFilter":
        """`remarks` enables every kind for a category set (all | memory | tensorcore | none);
        `passed=`/`missed=`/`failed=`/`analysis=` enable one kind for comma-separated categories."""
        pairs: set[tuple[str, str]] = set()
        if remarks and remarks != "none":
            cats = CATEGORIES if remarks == "all" else (remarks,)
            pairs |= {(k, c) for k in KINDS for c in cats}
        for kind, value in per_kind.items():
            if value:
                cats = CATEGORIES if value == "all" else tuple(c for c in value.split(",") if c)
                pairs |= {(kind, c) for c in cats}
        return cls(frozenset(pairs))

    def __bool__(self) -> bool:
        return bool(self.enabled)

    def wants(self, r: Remark) -> bool:
        return (r.kind, r.category) in self.enabled


def _yaml_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def to_yaml(remarks: list[Remark]) -> str:
    """LLVM's remark YAML stream (`--remark-format=yaml`)."""
    out = []
    for r in remarks:
        out.append(f"--- !{_YAML_TAG[r.kind]}")
        out.append(f"Pass:            tileiras-{r.category}")
        out.append(f"Name:            {r.name}")
        if r.file:
            out.append(f"DebugLoc:        {{ File: {_yaml_str(r.file)}, Line: {r.line}, Column: {r.column} }}")
        out.append(f"Function:        {_yaml_str(r.function)}")
        out.append("Args:")
        out.append(f"  - String:          {_yaml_str(r.message)}")
        out.append("...")
    return "\n".join(out) + ("\n" if out else "")


def to_command_line(remarks: list[Remark]) -> str:
    """One `file:line:col: remark: message [-Rpass=category]` line per remark."""
    flag = {"passed": "-Rpass", "missed": "-Rpass-missed", "failed": "-Rpass-failed", "analysis": "-Rpass-analysis"}
    lines = []
    for r in remarks:
        where = f"{r.file}:{r.line}:{r.column}: " if r.file else ""
        lines.append(f"{where}remark: {r.function}: {r.message} [{flag[r.kind]}={r.category}]")
    return "\n".join(lines) + ("\n" if lines else "")
