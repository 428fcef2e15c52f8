"""Verify a cuda_tile module the way NVIDIA's tool does after reading bytecode.

`verify_module(module)` returns the error diagnostics (empty = valid), in the
order NVIDIA's verifier meets them: each op's own checks before the ops nested
in it (pre-order), its region checks after them.  The real tool stops at the
first one and then prints `verification failed for deserialized
cuda_tile::ModuleOp`, so a CLI prints `diagnostics[0]` (see `first_error`).

The checks are tables of small rule functions `(ctx, op) -> message | None`:

* `verify_ods.ods_rules`: what each op's definition (ir/cuda_tile.py)
  declares: attribute, operand/result type and region constraints, predicate
  and native traits (generated-verifier part);
* `verify_ops.OP_RULES`: each op's hand-written `verify()`;
* `verify_regions.ENTRY_RULES` / `REGION_RULES`: region, block-argument and
  terminator rules.

`RULES[name]` and `EXIT_RULES[name]` are the resulting per-op lists.
"""
from __future__ import annotations

from typing import Callable, Iterable

from . import types as T
from .core import Block, Function, Module, Operation
from .cuda_tile import CUDA_TILE
from .diagnostics import Diagnostic, resolve_loc
from .verify_debug import body_debug, function_debug
from .verify_ods import ods_rules
from .verify_ops import OP_RULES, Fail, hint_problems, hints_shape
from .verify_regions import ENTRY_RULES, REGION_RULES, region_terminators
from .verify_types import type_error

Rule = Callable[["VerifyContext", Operation], "str | None"]

VERIFICATION_FAILED = "verification failed for deserialized cuda_tile::ModuleOp"


def _build_rules() -> tuple[dict[str, list[Rule]], dict[str, list[Rule]]]:
    entry: dict[str, list[Rule]] = {}
    for name, d in CUDA_TILE.ops.items():
        entry[name] = [*ods_rules(d), *ENTRY_RULES.get(name, ()), *OP_RULES.get(name, ())]
    return entry, {name: list(rules) for name, rules in REGION_RULES.items()}


RULES, EXIT_RULES = _build_rules()


class VerifyContext:
    """What rules may ask about an op's surroundings."""

    def __init__(self, module: Module, warn_hints: bool = False, error_on_hints: bool = False):
        self.module = module
        self.warn_hints = warn_hints
        self.error_on_hints = error_on_hints
        self.parents: dict[int, Operation | Function] = {}
        self.blocks: dict[int, Block] = {}
        self.warnings: list[Diagnostic] = []
        self._current: Operation | Function | None = None
        self.function: Function | None = None     # the one being verified

    # -- structure ------------------------------------------------------------

    def index(self, fn: Function) -> None:
        self.function = fn
        work = [(fn.body, fn)]   # explicit: the nesting depth is the input's
        while work:
            block, parent = work.pop()
            for op in block.ops:
                self.parents[id(op)] = parent
                self.blocks[id(op)] = block
                work.extend((b, op) for region in op.regions for b in region.blocks)

    def parent_op(self, op) -> Operation | Function | None:
        return self.parents.get(id(op))

    def block_of(self, op) -> Block | None:
        return self.blocks.get(id(op))

    @staticmethod
    def name_of(x) -> str:
        if isinstance(x, Function):
            return "entry"
        if isinstance(x, Operation):
            return x.name
        return "module"

    def parent_name(self, op) -> str:
        return self.name_of(self.parent_op(op))

    # -- hints ------------------------------------------------------------------

    def check_hints(self, op_name: str, hints) -> str | None:
        """Warn about unsupported hints (when asked to); fail only in error-on-hints mode."""
        for group in hint_problems(op_name, hints):
            if self.warn_hints:
                for w in group:
                    self.warnings.append(Diagnostic("warning", w, None, self._loc(self._current),
                                                    _debug_id(self._current)))
            if group and self.error_on_hints:
                return "Optimization hints verification failed"
        return None

    def _loc(self, x):
        if x is None:
            return None
        return resolve_loc(self.module, x.loc)


def _diag(ctx: VerifyContext, op, op_name: str, result) -> Diagnostic:
    at = op
    if isinstance(result, Fail):
        at = result.at if result.at is not None else op
        return Diagnostic(result.severity, result.message, result.op_name or op_name if result.with_op else None,
                          ctx._loc(at), _debug_id(at), result.then)
    return Diagnostic("error", result, op_name, ctx._loc(at), _debug_id(at))


def _debug_id(x) -> int:
    return getattr(x, "loc", 0) or 0


def _run(ctx: VerifyContext, rules: Iterable[Rule], op, op_name: str) -> Diagnostic | None:
    ctx._current = op
    for rule in rules:
        try:
            msg = rule(ctx, op)
        except Fail as f:
            return _diag(ctx, op, op_name, f)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError):
            # malformed IR that an earlier check of NVIDIA's tool would have rejected
            # differently; the rule cannot judge it
            continue
        if msg:
            return _diag(ctx, op, op_name, msg)
    return None


# ---------------------------------------------------------------------------
# type-level checks (the real tool runs them while reading the type table)
# ---------------------------------------------------------------------------

def _type_check(ctx: VerifyContext, op: Operation) -> Diagnostic | None:
    types = [r.type for r in op.results]
    for region in op.regions:
        for block in region.blocks:
            types += [a.type for a in block.args]
    for t in types:
        err = type_error(t)
        if err:
            return Diagnostic("error", err, None, ctx._loc(op), _debug_id(op))
    return None


# ---------------------------------------------------------------------------
# entry (the Func-section function, cuda_tile.entry)
# ---------------------------------------------------------------------------

def entry_signature(ctx, fn: Function):
    if fn.type.results:
        return "entry op must not return values"
    for t in fn.type.inputs:
        if isinstance(t, T.TileType) and t.rank != 0:
            return "entry op must have scalar types (rank 0 !cuda_tile.tile)"
    return None


def entry_hints(ctx, fn: Function):
    if fn.hints is None or not fn.hints.items:
        return None
    err = hints_shape(fn.hints, "entry")
    if err:
        return err
    return ctx.check_hints("entry", fn.hints)


def entry_visibility(ctx, fn: Function):
    if fn.flags & 0b1:   # the Func section's visibility flag: private
        return "entry op must have public symbol visibility"
    return None


ENTRY_OP_RULES: list[Rule] = [entry_visibility, entry_signature, function_debug, entry_hints]
ENTRY_REGION_RULES: list[Rule] = [region_terminators, body_debug]


# ---------------------------------------------------------------------------
# walk
# ---------------------------------------------------------------------------

NO_TERMINATOR = ("invalid block structure: block is expected to have a terminator operation, but the last "
                 "operation 'cuda_tile.{}' is not a terminator.")


def _verify_block(ctx: VerifyContext, block: Block, out: list[Diagnostic], first_only: bool,
                  top: bool = False) -> bool:
    """Verify the ops of `block` and everything nested in them; False once `first_only` has its
    diagnostic.  Each op: its own checks, then its regions' blocks, then its region checks (NVIDIA's
    order), with an explicit stack of tasks since the nesting depth is the input's:
    ("block", block, ops iterator, top) and ("exit", op, whether its own checks failed)."""
    stack: list[tuple] = [("block", block, iter(block.ops), top)]
    while stack:
        task = stack[-1]
        if task[0] == "exit":
            stack.pop()
            op = task[1]
            if not task[2]:
                d = _run(ctx, EXIT_RULES.get(op.name, ()), op, op.name)
                if d:
                    out.append(d)
                    if first_only:
                        return False
            continue
        _kind, blk, ops, is_top = task
        op = next(ops, None)
        if op is None:
            stack.pop()
            if not _check_terminator(ctx, blk, out, is_top) and first_only:
                return False
            continue
        d = _type_check(ctx, op) or _run(ctx, RULES.get(op.name, ()), op, op.name)
        if d:
            out.append(d)
            if first_only:
                return False
        stack.append(("exit", op, bool(d)))
        stack.extend(("block", b, iter(b.ops), False) for region in reversed(op.regions)
                     for b in reversed(region.blocks))
    return True


def _check_terminator(ctx: VerifyContext, block: Block, out: list[Diagnostic], top: bool) -> bool:
    if block.ops and not block.ops[-1].spec.is_terminator:
        last = block.ops[-1]
        # nested blocks: NVIDIA's reader rejects them; the entry body: MLIR's block verifier
        # (which prints the op in generic form after "has ")
        if top:
            from .generic_form import GenericNames, generic_op
            text = generic_op(last, GenericNames(ctx.function))
            # an op printed over several lines (one with regions) starts on its own line
            msg = "block with no terminator, has " + ("\n" + text if "\n" in text else text)
        else:
            msg = NO_TERMINATOR.format(last.name)
        out.append(Diagnostic("error", msg, None, ctx._loc(last), _debug_id(last)))
        return False
    return True


def _verify_global(ctx: VerifyContext, g) -> Diagnostic | None:
    err = type_error(g.type)
    if err:
        return Diagnostic("error", err, None, None)
    if isinstance(g.type, T.TileType) and g.type.rank != 1:
        return Diagnostic("error", "type must have rank 1", "global", None)
    return None


def verify_module(module: Module, *, first_only: bool = False, warn_hints: bool = False,
                  error_on_hints: bool = False, warnings: list[Diagnostic] | None = None) -> list[Diagnostic]:
    """All verification errors of `module`, in NVIDIA's order (empty = valid).

    `warn_hints` / `error_on_hints` mirror tileiras' -Wunsupported-hints / -Werr-hints;
    hint warnings are appended to `warnings` when a list is given.
    """
    ctx = VerifyContext(module, warn_hints, error_on_hints)
    out: list[Diagnostic] = []
    for g in module.globals:
        d = _verify_global(ctx, g)
        if d:
            out.append(d)
            if first_only:
                break
    for fn in module.functions:
        if first_only and out:
            break
        if not _verify_function(ctx, fn, out, first_only):
            break
    if not (first_only and out):
        d = _symbol_table(ctx)
        if d:
            out.append(d)
    if warnings is not None:
        warnings.extend(ctx.warnings)
    return out


def _verify_function(ctx: VerifyContext, fn: Function, out: list[Diagnostic], first_only: bool) -> bool:
    """Appends `fn`'s errors to `out`; False when verification stops there (first_only)."""
    ctx.index(fn)
    for t in fn.type.inputs:
        err = type_error(t)
        if err:
            out.append(Diagnostic("error", err, None, ctx._loc(fn), _debug_id(fn)))
            break
    d = _run(ctx, ENTRY_OP_RULES, fn, "entry")
    if d:
        out.append(d)
        if first_only:
            return False
    if not _verify_block(ctx, fn.body, out, first_only, top=True):
        return False
    if not d:
        d = _run(ctx, ENTRY_REGION_RULES, _EntryView(fn), "entry")
        if d:
            out.append(d)
            if first_only:
                return False
    return True


def reported_errors(module: Module, *, hint_warnings: list[Diagnostic] | None = None,
                    error_on_hints: bool = False) -> list[Diagnostic]:
    """The errors NVIDIA's tool prints (before `verification failed ...`), empty when the module verifies.

    As MLIR's verifier: the globals in order, stopping at the first bad one; then every entry function (each
    isolated from above, verified on its own) reports its first error; the symbol table only when all passed.
    `hint_warnings` (-Wunsupported-hints): collects the warnings about optimization hints; `error_on_hints`
    (-Werr-hints, which does nothing without them) makes a function's first such group an error."""
    warn = hint_warnings is not None
    ctx = VerifyContext(module, warn, warn and error_on_hints)
    if warn:
        ctx.warnings = hint_warnings     # collected straight into the caller's list, whichever return is taken
    for g in module.globals:
        d = _verify_global(ctx, g)
        if d:
            return [d]
    out: list[Diagnostic] = []
    for fn in module.functions:
        errors: list[Diagnostic] = []
        _verify_function(ctx, fn, errors, True)
        out += errors[:1]
    if out:
        return out
    d = _symbol_table(ctx)
    return [d] if d else []


FORMAT_INVARIANTS_FAILED = "deserialized module does not conform to bytecode format invariants"


def format_invariant_error(module: Module) -> str | None:
    """NVIDIA's check of a read module once it verified: every entry argument is a tile (the verifier only
    checks the rank of those that are); the first argument that is not, of the first entry that has one."""
    from .printer import mlir_type_str
    for fn in module.functions:
        for i, t in enumerate(fn.type.inputs):
            if not isinstance(t, T.TileType):
                return (f"unsupported type in bytecode for entry argument #{i}: '{mlir_type_str(t)}'; expected a "
                        f"rank-0 !cuda_tile.tile type")
    return None


def _symbol_table(ctx: VerifyContext) -> Diagnostic | None:
    """MLIR's SymbolTable check, after everything nested verified: a name defined twice (globals and
    entries share one table) is reported at the second definition."""
    seen: set[bytes] = set()
    symbols = [(g.name, None) for g in ctx.module.globals] + [(f.name, f) for f in ctx.module.functions]
    for name, fn in symbols:
        if name in seen:
            return Diagnostic("error", f"redefinition of symbol named '{name.decode(errors='replace')}'", None,
                              ctx._loc(fn), _debug_id(fn))
        seen.add(name)
    return None


class _EntryView:
    """The entry function seen as an op with one region (for region rules)."""

    def __init__(self, fn: Function):
        from .core import Region
        self.fn = fn
        self.regions = [Region([fn.body])]
        self.loc = fn.loc
        self.name = "entry"


def first_error(module: Module) -> Diagnostic | None:
    """The diagnostic NVIDIA's tool prints first (before `verification failed ...`), or None."""
    diags = reported_errors(module)
    return diags[0] if diags else None


def render_failure(diag: Diagnostic) -> list[str]:
    """The stderr lines of a failed verification, as tileiras prints them."""
    return [diag.render(), f"error: {VERIFICATION_FAILED}"]
