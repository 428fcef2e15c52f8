"""What the dashboard shows around a diagnostic or a kernel, read from the files of the run.

* the IR around an op: the module printed exactly as `tileiras-async disasm` prints it, with
  the lines whose debug location is the diagnostic's `file:line:col` marked (the locations come
  from printing with debug info, `tileirdisasm -g`, whose op lines are the same lines plus a
  ` loc(#alias)` suffix);
* the source line of a location, when the file is readable (looked up as given, next to the
  module and in its parent directories);
* a kernel's IR (its `entry` in the disassembly) and its PTX (a kept `.ptx` output); its resources come
  with its kernel_finished event.

The bytecode is read without verifying it, so an input that fails verification still shows
its IR.  Nothing here compiles anything.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache


_LOC_SUFFIX = re.compile(r" loc\((#[\w$.-]+)\)$")
_ALIAS_DEF = re.compile(r"^(#[\w$.-]+) = (.*)$")
_ALIAS_REF = re.compile(r"#[\w$.-]+")


@dataclass(frozen=True)
class IRView:
    lines: list[str]          # the disassembly, as `disasm` prints it
    marked: list[int]         # indices of the lines at the location
    error: str = ""


@lru_cache(maxsize=16)
def _disasm(path: str, mtime: float) -> tuple[list[str], list[str | None], dict[str, str]]:
    """(plain lines, each line's loc alias, alias -> definition) of a bytecode file."""
    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.ir.printer import print_module
    with open(path, "rb") as f:
        module = read_module(f.read())
    text = print_module(module, debug_info=True)
    lines, locs, defs = [], [], {}
    for line in text.splitlines():
        m = _ALIAS_DEF.match(line)
        if m:
            defs[m.group(1)] = m.group(2)
            continue
        s = _LOC_SUFFIX.search(line)
        locs.append(s.group(1) if s else None)
        lines.append(line[:s.start()] if s else line)
    return lines, locs, defs


def disasm_lines(path: str) -> tuple[list[str], list[str | None], dict[str, str]]:
    return _disasm(path, os.path.getmtime(path))


def _aliases_at(defs: dict[str, str], location: str) -> set[str]:
    """Every alias whose location is `file:line:col` (directly, or through di_loc / call sites)."""
    file, line, col = _split(location)
    direct = set()
    for alias, body in defs.items():
        m = re.fullmatch(r'loc\("([^"]*)":(\d+):(\d+)\)', body)
        if m and int(m.group(2)) == line and int(m.group(3)) == col and (
                m.group(1) == file or os.path.basename(m.group(1)) == os.path.basename(file)):
            direct.add(alias)
    found = set(direct)
    changed = True
    while changed:
        changed = False
        for alias, body in defs.items():
            if alias in found:
                continue
            refs = [r for r in _ALIAS_REF.findall(body) if r in defs]
            # a di_loc names its location first; a callsite's callee is its first reference
            if refs and refs[0] in found:
                found.add(alias)
                changed = True
    return found


def _split(location: str) -> tuple[str, int, int]:
    file, line, col = location.rsplit(":", 2)
    return file, int(line), int(col)


def ir_around(path: str, location: str | None, kernel: str | None = None) -> IRView:
    """The disassembly of `path` with the ops at `location` marked (all of it when none is)."""
    try:
        lines, locs, defs = disasm_lines(path)
    except OSError as e:
        return IRView([], [], f"cannot read {path}: {e.strerror or e}")
    except Exception as e:  # noqa: BLE001 - bytecode that does not even parse
        lines_of = getattr(e, "lines", None)
        why = "; ".join(lines_of) if lines_of else str(e)
        return IRView([], [], f"cannot read the IR of {path}: {why}")
    marked: list[int] = []
    if location:
        try:
            aliases = _aliases_at(defs, location)
        except ValueError:
            aliases = set()
        marked = [i for i, a in enumerate(locs) if a in aliases and not lines[i].lstrip().startswith("}")]
    if kernel and not marked:
        start = kernel_range(lines, kernel)
        if start:
            marked = [start[0]]
    return IRView(lines, marked)


def window(view: IRView, context: int = 6) -> list[tuple[int, str, bool]]:
    """(line number, text, marked) around the first marked line (or the top)."""
    if not view.lines:
        return []
    if view.marked:
        lo = max(0, view.marked[0] - context)
        hi = min(len(view.lines), view.marked[-1] + context + 1)
        if hi - lo > 4 * context + 1:
            hi = lo + 4 * context + 1
    else:
        lo, hi = 0, min(len(view.lines), 2 * context + 1)
    marked = set(view.marked)
    return [(i + 1, view.lines[i], i in marked) for i in range(lo, hi)]


def kernel_range(lines: list[str], kernel: str) -> tuple[int, int] | None:
    head = f"entry @{kernel}("
    for i, line in enumerate(lines):
        if line.startswith(head):
            for j in range(i + 1, len(lines)):
                if lines[j].startswith("}"):
                    return i, j
            return i, len(lines) - 1
    return None


def kernel_ir(path: str, kernel: str) -> str:
    """A kernel's entry as `disasm` prints it (the whole module if the kernel is not found)."""
    try:
        lines, _locs, _defs = disasm_lines(path)
    except OSError as e:
        return f"cannot read {path}: {e.strerror or e}"
    except Exception as e:  # noqa: BLE001
        return f"cannot read the IR of {path}: {e}"
    span = kernel_range(lines, kernel) if kernel else None
    if span is None:
        return "\n".join(lines)
    return "\n".join(lines[span[0]:span[1] + 1])


def source_line(location: str | None, module_path: str | None = None, context: int = 2
                ) -> tuple[str, list[tuple[int, str, bool]]] | None:
    """(file found, [(line number, text, is the line)]) for a `file:line:col`, if readable."""
    if not location:
        return None
    try:
        file, line, _col = _split(location)
    except ValueError:
        return None
    candidates = [file]
    if not os.path.isabs(file) and module_path:
        d = os.path.dirname(os.path.abspath(module_path))
        for _ in range(4):
            candidates.append(os.path.join(d, file))
            d = os.path.dirname(d)
    for c in candidates:
        try:
            with open(c, encoding="utf-8", errors="replace") as f:
                text = f.read().splitlines()
        except OSError:
            continue
        if 1 <= line <= len(text):
            lo, hi = max(1, line - context), min(len(text), line + context)
            return _display_path(c), [(n, text[n - 1], n == line) for n in range(lo, hi + 1)]
    return None


def _display_path(path: str) -> str:
    """Relative to the working directory when under it (what the user typed), else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return os.path.abspath(path)
    return rel if not rel.startswith("..") else os.path.abspath(path)


# --------------------------------------------------------------------------- outputs


def read_text(path: str, limit: int = 2 << 20) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def kernel_ptx(ptx: str, kernel: str) -> str:
    """A kernel's `.entry` with the module header (the whole PTX when there is one kernel or the
    kernel is not found)."""
    lines = ptx.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"\s*(\.visible\s+|\.weak\s+)?\.entry\s", line)]
    mine = [i for i in starts if re.search(rf"\.entry\s+{re.escape(kernel)}\b", lines[i])]
    if len(starts) <= 1 or not mine:
        return ptx
    first = starts[0]
    while first > 0 and lines[first - 1].lstrip().startswith("//"):
        first -= 1
    at = mine[0]
    nxt = next((i for i in starts if i > at), len(lines))
    while nxt < len(lines) and nxt > at and lines[nxt - 1].lstrip().startswith("//"):
        nxt -= 1
    return "\n".join(lines[:first] + lines[at:nxt]).rstrip() + "\n"
