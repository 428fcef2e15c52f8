"""Failures that say why: the `note:` lines that follow a code-generation or ptxas error.

NVIDIA's tool answers many failures with "failed to compile Tile IR program" and no cause.  We keep
the error line (and the exit code) and add notes that name

* where: the kernel and the op, with its source location from the debug info (file:line:col), or
  the op's index in the kernel when the bytecode has none;
* why: the reason, classified (a type or mode this target cannot do, a tile too large for the
  registers or the shared memory, a ptxas error quoted and mapped back to the PTX line and, through
  the PTX's `.loc` lines, to the source);
* what to change.

Stages call `lowering_notes` / `ptxas_notes` and append the result to their diagnostics; the
command lines print each as `note: ...` after the error.  Nothing here changes what is compiled.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .diagnostics import StageDiagnostic


@dataclass(frozen=True)
class _Rule:
    pattern: str          # searched in the reason, case-insensitive
    kind: str             # what the note calls the failure
    fix: str              # what to change ({target} is the --gpu-name)


# most specific first; the first match names the class
LOWERING_RULES = (
    _Rule(r"shared memory", "a tile too large for shared memory",
          "use smaller tiles for this op (a smaller block shape in the cuTile kernel), or fewer pipeline stages"),
    _Rule(r"per warp|registers|too large|unroll", "a tile too large for the registers of one block",
          "use smaller tiles for this op (e.g. halve the tile's K or N extent in the cuTile kernel)"),
    _Rule(r"\bsm_\d+|architecture|target", "an op this target cannot run",
          "compile for a newer architecture (--gpu-name), or avoid this op on {target}"),
    _Rule(r"element type|conversion|rounding mode|sub-byte|f8|f4|tf32|bf16|type", "a type or mode not supported here",
          "convert the operands to a supported type (f16, bf16 or f32) before this op, or use the default rounding"),
    _Rule(r"not supported|unsupported", "an op form this compiler does not support yet",
          "rewrite the op in a supported form; if it should be supported, report it with the .tileirbc file"),
)

PTXAS_RULES = (
    _Rule(r"too much shared data|shared memory", "more shared memory than {target} has",
          "use smaller tiles, or fewer pipeline stages, for the kernel's matmul/reduction loops"),
    _Rule(r"too many resources|registers", "more registers than {target} allows",
          "use smaller tiles so that each thread holds fewer values"),
    _Rule(r"not supported on \.target|requires.*sm_|\.target", "an instruction {target} does not have",
          "compile for a newer architecture (--gpu-name)"),
)
GENERIC_PTXAS_FIX = ("ptxas rejected PTX that tileiras-async generated: this is a compiler bug; please report it "
                     "with the .tileirbc file (`tileiras-async compile --keep-ptx` keeps the PTX)")

_PTXAS_LINE = re.compile(r"ptxas[^,\n]*, line (\d+); (error|fatal)\s*:\s*(.*)")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_ENTRY = re.compile(r"^\s*(?:\.visible\s+)?\.entry\s+([\w$.]+)")


def _note(message: str, location: str | None = None) -> StageDiagnostic:
    return StageDiagnostic("note", message, location)


def _classify(rules, reason: str, target: str) -> tuple[str, str] | None:
    for rule in rules:
        if re.search(rule.pattern, reason, re.IGNORECASE):
            return rule.kind.format(target=target), rule.fix.format(target=target)
    return None


def where(kernel: str, op_name: str, op_index: int | None, location: str | None) -> str:
    """`op 'cuda_tile.mmaf' in kernel K at f.py:3:4` (or `..., op #12 of the kernel: no debug info ...`)."""
    text = f"op '{op_name}' in kernel '{kernel}'" if op_name else f"kernel '{kernel}'"
    if location:
        return f"{text} at {location}"
    if op_index is not None:
        return (f"{text} (op #{op_index} of the kernel; the bytecode has no debug info: export the cuTile kernel "
                f"with line information to see the source line)")
    return text


def lowering_notes(error, target: str) -> list[StageDiagnostic]:
    """Notes for a kernel the code generator refused (driver.CodegenUnavailable)."""
    kernel = getattr(error, "kernel", "")
    reason = getattr(error, "reason", "") or str(error)
    location = getattr(error, "location", None)
    notes = [_note("in " + where(kernel, getattr(error, "op_name", ""), getattr(error, "op_index", None),
                                 location), location)]
    found = _classify(LOWERING_RULES, reason, target)
    if found:
        kind, fix = found
        notes.append(_note(f"why: {kind} ({reason})"))
        notes.append(_note(f"to fix: {fix}"))
    else:
        notes.append(_note(f"why: {reason}"))
        notes.append(_note("to fix: this op cannot be compiled by tileiras-async yet; please report it with the "
                           ".tileirbc file"))
    return notes


def ptxas_notes(stderr: str, ptx: str, target: str) -> list[StageDiagnostic]:
    """Notes for PTX that ptxas rejected: each error quoted, with the kernel and the source line it
    comes from (the PTX's last `.loc` before that line, when the PTX has line information)."""
    lines = ptx.splitlines()
    files = {m.group(1): m.group(2) for m in map(_FILE.match, lines) if m}
    notes: list[StageDiagnostic] = []
    reasons = []
    for m in _PTXAS_LINE.finditer(stderr):
        number, message = int(m.group(1)), m.group(3).strip()
        reasons.append(message)
        kernel, location = _ptx_origin(lines, number, files)
        text = f'ptxas: "{message}" at line {number} of the PTX'
        if number <= len(lines):
            text += f" (`{lines[number - 1].strip()}`)"
        if kernel:
            text += f", in kernel '{kernel}'"
        if location:
            text += f", from {location}"
        notes.append(_note(text, location))
    if notes and not any(n.location for n in notes) and not files:
        notes.append(_note("the PTX has no line information: compile with --lineinfo to map ptxas errors to "
                           "source lines"))
    if not reasons:   # no "line N" errors: ptxas's stderr (printed as it is) is all there is to quote
        reasons = [line.strip() for line in stderr.splitlines() if line.strip()][:1]
    found = _classify(PTXAS_RULES, " ".join(reasons), target)
    if found:
        kind, fix = found
        notes.append(_note(f"why: the kernel needs {kind}"))
        notes.append(_note(f"to fix: {fix}"))
    elif reasons:
        notes.append(_note(f"to fix: {GENERIC_PTXAS_FIX}"))
    return notes


def _ptx_origin(lines: list[str], number: int, files: dict[str, str]) -> tuple[str | None, str | None]:
    kernel = location = None
    for line in reversed(lines[: max(0, number)]):
        if location is None:
            m = _LOC.match(line)
            if m and m.group(2) != "0" and m.group(1) in files:
                location = f"{files[m.group(1)]}:{m.group(2)}:{m.group(3)}"
        m = _ENTRY.match(line)
        if m:
            kernel = m.group(1)
            break
    return kernel, location
