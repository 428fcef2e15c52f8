"""Debug-info rules of cuda_tile (DebugInfoVerifier) over the module's Debug table.

1. a function location must not be a call site;
2. a function's DILoc scope must be a DISubprogram whose linkage name is the function's name;
3. ops may carry a subprogram scope only if their function has one;
4. an op's subprogram must be its function's.

Debug attributes are compared structurally (MLIR uniques them) and printed as
NVIDIA's tool prints them in these diagnostics.
"""
from __future__ import annotations

from .core import Function, Module
from .diagnostics import DEBUG_CALLSITE, DEBUG_DILOC

from .debuginfo import TAG_LEXICAL_BLOCK as DEBUG_LEXICAL_BLOCK, TAG_SUBPROGRAM as DEBUG_SUBPROGRAM


def _entry(module: Module, debug_id: int):
    if 0 < debug_id <= len(module.debug):
        return module.debug[debug_id - 1]
    return None


def _string(module: Module, i: int) -> str:
    raw = module.strings[i] if 0 <= i < len(module.strings) else b"?"
    out = []
    for b in raw:
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:02X}")
    return '"' + "".join(out) + '"'


def attr_str(module: Module, debug_id: int, nested: bool = False) -> str:
    """MLIR spelling of a debug scope attribute (nested struct params drop the `#cuda_tile.x` prefix)."""
    from .printer import render_attribute
    return render_attribute(module, debug_id, stripped=nested)


def _key(module: Module, debug_id: int):
    """Structural identity of a debug attribute (ids with equal content are the same attribute)."""
    from .printer import debug_attribute_key
    return debug_attribute_key(module, debug_id)


def _di_loc(module: Module, debug_id: int, _depth: int = 0):
    """getDILoc: the DILoc entry behind a location (call sites use their caller)."""
    e = _entry(module, debug_id)
    if e is None or _depth > 32:
        return None
    if e.tag == DEBUG_DILOC and len(e.fields) >= 4:   # the reader ignores extra fields
        return e
    if e.tag == DEBUG_CALLSITE and len(e.fields) >= 2:
        return _di_loc(module, e.fields[1], _depth + 1)
    return None


def _subprogram(module: Module, scope_id: int, _depth: int = 0):
    """The DISubprogram id of a local scope (through lexical blocks), or None."""
    e = _entry(module, scope_id)
    if e is None or _depth > 32:
        return None
    if e.tag == DEBUG_SUBPROGRAM:
        return scope_id
    if e.tag == DEBUG_LEXICAL_BLOCK and e.fields:
        return _subprogram(module, e.fields[0], _depth + 1)
    return None


def function_debug(ctx, fn: Function):
    """verifyFuncDebugInfo (rules 1 and 2)."""
    m = ctx.module
    e = _entry(m, fn.loc)
    if e is not None and e.tag == DEBUG_CALLSITE:
        return "invalid function debug info location: <callsite>. Function location must not be a CallSiteLoc."
    loc = _di_loc(m, fn.loc)
    if loc is None:
        return None
    scope = loc.fields[0]
    sp = _entry(m, scope)
    if sp is None or sp.tag != DEBUG_SUBPROGRAM:
        return (f"invalid function debug info scope: {attr_str(m, scope)}. Function location must have "
                f"cuda_tile.di_subprogram debug info scope.")
    linkage = m.strings[sp.fields[3]] if sp.fields[3] < len(m.strings) else b""
    if linkage != fn.name:
        return (f"invalid function debug info scope: {attr_str(m, scope)}. Function name "
                f"\"{fn.name.decode(errors='replace')}\" does not match subprogram scope linkage name "
                f"{_string(m, sp.fields[3])}.")
    return None


def _post_order(block):
    """Ops nested in `block`, each after everything nested in it (an explicit stack: the nesting
    depth is the input's)."""
    stack = [(iter(block.ops), None)]   # (ops still to visit, the op to yield once they are done)
    while stack:
        ops, owner = stack[-1]
        op = next(ops, None)
        if op is None:
            stack.pop()
            if owner is not None:
                yield owner
            continue
        stack.append((iter([o for region in op.regions for b in region.blocks for o in b.ops]), op))


def body_debug(ctx, entry_view):
    """verifyFuncBodyDebugInfo (rules 3 and 4), ops in post-order."""
    from .verify_ops import Fail
    m = ctx.module
    fn = entry_view.fn
    fn_loc = _di_loc(m, fn.loc)
    fn_sp = _subprogram(m, fn_loc.fields[0]) if fn_loc is not None else None
    fn_key = _key(m, fn_sp) if fn_sp is not None else None
    for op in _post_order(fn.body):
        loc = _di_loc(m, op.loc)
        if loc is None:
            continue
        sp = _subprogram(m, loc.fields[0])
        if sp is None:
            continue
        if fn_sp is None:
            raise Fail(f"invalid operation debug info scope: {attr_str(m, sp)}. Operation has debug info scope, "
                       f"but function debug info scope is undefined.", op_name=op.name, at=op)
        if _key(m, sp) != fn_key:
            raise Fail(f"invalid operation debug info scope: {attr_str(m, sp)}. Operation debug info scope does "
                       f"not match function debug info scope: {attr_str(m, fn_sp)}.", with_op=False, at=op)
    return None
