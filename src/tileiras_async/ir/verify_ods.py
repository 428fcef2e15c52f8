"""The declarative ("ODS") part of verification, evaluated from the op definitions (ir/opdef.py).

For every op, in the order MLIR's generated verifier runs them: its attribute constraints, the type
constraint of each operand and result (declaration order, flattened operand numbering: `operand #N must
be <summary>, but got '<type>'`), the predicate traits (AllTypesMatch, AllShapesMatch, ...: `failed to
verify that ...`), the native traits in declaration order (SameOperandsShape, HasParent, Terminator,
...), then the region constraints (`region with 1 blocks`).  `ods_rules(d)` turns one definition into a
list of rule functions `(ctx, op) -> message | None`.
"""
from __future__ import annotations

from typing import Callable

from .opdef import VARIADIC, NegativeSegment, OpDef
from .verify_types import q


def _values(op, name):
    v = op.operands.get(name)
    if v is None:
        return []
    return list(v) if isinstance(v, list) else [v]


def named_types(op, d: OpDef) -> dict[str, list]:
    """Declared name -> list of types (operands by name; results matched by position, a variadic result
    taking what the fixed ones leave)."""
    out = {a.name: [v.type for v in _values(op, a.name)] for a in d.operands}
    results = list(op.results)
    fixed = [a for a in d.results if a.form != VARIADIC]
    nvar = max(0, len(results) - len(fixed))
    i = 0
    for a in d.results:
        n = nvar if a.form == VARIADIC else 1
        out[a.name] = [r.type for r in results[i:i + n]]
        i += n
    return out


def ods_rules(d: OpDef) -> list[Callable]:
    """Rule functions for the declarative part of `d`'s verifier."""
    checked_attrs = [a for a in d.attrs if a.constraint is not None]
    predicates = [t for t in d.traits if t.phase == "predicate"]
    variadic_names = {a.name for a in (*d.operands, *d.results) if a.form == VARIADIC}

    def attributes(ctx, op):
        for a in checked_attrs:
            if a.name in op.attrs and not a.constraint(op.attrs[a.name]):
                return f"attribute '{a.name}' failed to satisfy constraint: {a.constraint.summary}"
        return None

    def operand_types(ctx, op):
        idx = 0
        for a in d.operands:
            for v in _values(op, a.name):
                if a.constraint is not None and not a.constraint(v.type):
                    return f"operand #{idx} must be {a.constraint.summary}, but got {q(v.type)}"
                idx += 1
        return None

    def result_types(ctx, op):
        named = named_types(op, d)
        idx = 0
        for a in d.results:
            for t in named.get(a.name, []):
                if a.constraint is not None and not a.constraint(t):
                    return f"result #{idx} must be {a.constraint.summary}, but got {q(t)}"
                idx += 1
        return None

    def predicate_traits(ctx, op):
        named = named_types(op, d)
        for p in predicates:
            msg = p.check_types(named, variadic_names)
            if msg:
                return msg
        return None

    singles = [a for a in d.operands if a.form == "one"]
    at_least = len(singles) < len(d.operands)     # MLIR's AtLeastNOperands, else NOperands

    def operand_count(ctx, op):
        found = sum(len(_values(op, a.name)) for a in d.operands)
        if any(op.operands.get(a.name) is None for a in singles):   # a read module with too few operands
            return f"expected {len(singles)}{' or more' if at_least else ''} operands, but found {found}"
        return None

    fixed_results = [a for a in d.results if a.form == "one"]
    more_results = len(fixed_results) < len(d.results)

    def result_count(ctx, op):
        """MLIR's ZeroResults / OneResult / NResults / AtLeastNResults (a read module's count may be off)."""
        n, k = len(op.results), len(fixed_results)
        if more_results:
            return f"expected {k} or more results" if n < k else None
        if n != k:
            return "requires zero results" if k == 0 else "requires one result" if k == 1 else f"expected {k} results"
        return None

    def segment_sizes(ctx, op):
        """MLIR's AttrSizedOperandSegments: a read module's segment size may be negative."""
        if any(isinstance(op.operands.get(a.name), NegativeSegment) for a in d.operands):
            return "'operandSegmentSizes' attribute cannot have negative elements"
        return None

    # the count traits come first in MLIR's generated verifier: results, then operands, then segment sizes
    rules: list[Callable] = [result_count, operand_count, segment_sizes, attributes, operand_types, result_types,
                             predicate_traits]
    rules += [t.verify for t in d.traits if t.phase == "native"]
    if any(r.constraint.max_blocks is not None or r.constraint.min_blocks for r in d.regions):
        rules.append(_region_constraints(d))
    return rules


def _region_constraints(d: OpDef):
    def region_constraints(ctx, op):
        for i, region in enumerate(op.regions):
            r = d.regions[i]
            if not r.constraint(region):
                return f"region #{i} ('{r.name}') failed to verify constraint: {r.constraint.summary}"
        return None
    return region_constraints
