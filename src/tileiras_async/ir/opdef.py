"""Op definitions: every op of every dialect is declared once, here in `ir/` (models: MLIR's ODS, xDSL's irdl).

A declaration names the op's operands and results with their type constraints, its attributes, regions,
traits and assembly format; the bytecode reader and writer, the printer, the verifier, DCE, the
scheduler's dependence graphs and the lowerings all ask it (``opdef("for").is_loop``,
``op.spec.is_terminator``, ``op.spec.effects``) instead of keeping their own lists of op names.
Declaring an op of a new dialect::

    from tileiras_async.ir.core import Operation
    from tileiras_async.ir.opdef import (Dialect, MemoryEffects, Pure, Read, SameOperandsAndResultShape,
                                         Write, opdef)
    from tileiras_async.ir.verify_types import ANY_TILE

    TOY = Dialect("toy")                             # op.name is "toy.<mnemonic>"
    SHARED = "shared"                                # a resource of its own besides MEMORY

    TOY.op("relabel",
           operands={"source": ANY_TILE}, results={"result": ANY_TILE},
           attrs={"layout": "layout"},               # attribute kind: free text for dialects without bytecode
           traits=[Pure(), SameOperandsAndResultShape()],
           format="$source attrs : type($source) -> type($result)")
    TOY.op("stage",
           operands={"value": ANY_TILE, "buffer": ANY_TILE, "offsets*": ANY_TILE},
           traits=[MemoryEffects(Write("buffer", SHARED))])

    opdef("toy.relabel").is_pure                                     # True
    Operation("toy.stage", {"value": v, "buffer": b, "offsets": []})

The tile-GPU dialect (``tilegpu/ops.py``) is declared this way, with effects on shared memory.

Keys of ``operands`` / ``results`` / ``attrs`` carry the form: ``name`` (exactly one), ``name?`` (optional),
``name*`` (variadic); attributes also ``name!`` (a unit attribute: present or not).  A dialect with a
bytecode adds the wire facts to the same keys and arguments: ``?B`` / ``!B`` is the flag bit that says the
operand or attribute is present, ``@N`` the dialect version that introduced it, and ``op(...)`` takes
``opcode``, ``cls``, ``since``, ``flags``, ``counted_operands`` and ``counted_results`` (see
`Dialect.op`).  Type constraints are `TypeConstraint` values; the cuda_tile ones are in
``ir/verify_types.py``.  The cuda_tile dialect itself is declared in ``ir/cuda_tile.py``.

Traits are instances of the classes below.  Effects follow MLIR: `Pure` (no effect, speculatable),
`NoMemoryEffect`, `RecursiveMemoryEffects` (the effects of the ops nested in it) or `MemoryEffects` with
`Read` / `Write` / `Alloc` on a named operand or result (or on a whole resource); an op with none of them
has unknown effects.  Structural traits: `Terminator`, `HasParent`, `SingleBlockImplicitTerminator`,
`LoopLike`, `ViewLike`, `DefinesMemoryObject`.  Verifier traits: the predicate traits (`AllTypesMatch`,
`AllShapesMatch`, `AllRanksMatch`, `AllElementTypesMatch`, `TypesMatchWith`) and the native ones
(`SameOperandsShape`, `SameOperandsAndResultShape`, `SameOperandsAndResultElementType`,
`SameOperandsAndResultType`, `Elementwise`, `NoRegionArguments`, and `Terminator` / `HasParent`), checked
in that order by ``ir/verify_ods.py``.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from . import types as T

# operand / result / attribute forms
ONE, OPTIONAL, VARIADIC, UNIT = "one", "optional", "variadic", "unit"


class NegativeSegment(list):
    """A variadic operand group that a read module declared with a negative size (a varint that wraps to
    a negative 32-bit count NVIDIA's reader lets through): no values, the size kept for the verifier,
    which rejects it as MLIR's AttrSizedOperandSegments does."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size


# =========================================================================================================
# constraints
# =========================================================================================================

@dataclass(frozen=True)
class TypeConstraint:
    """An ODS type constraint: `pred` decides, `summary` is what diagnostics call it."""
    summary: str
    pred: Callable[[T.Type], bool]

    def __call__(self, t: T.Type) -> bool:
        return self.pred(t)


def variadic(c: TypeConstraint) -> TypeConstraint:
    """The constraint of a variadic operand or result (ODS's `Variadic<...>` summary)."""
    if c.summary.startswith("variadic of "):
        return c
    return TypeConstraint(f"variadic of {c.summary}", c.pred)


@dataclass(frozen=True)
class AttrConstraint:
    """An ODS attribute constraint, checked on attributes that are present."""
    summary: str
    pred: Callable[[Any], bool]

    def __call__(self, value) -> bool:
        return self.pred(value)


@dataclass(frozen=True)
class Attr:
    """An attribute declaration with a constraint: ``attrs={"dim": Attr("int", I32_NON_NEGATIVE)}``."""
    kind: Any
    constraint: AttrConstraint | None = None


@dataclass(frozen=True)
class RegionConstraint:
    """How many blocks a region may have (None: any number); `summary` is ODS's wording."""
    summary: str
    min_blocks: int = 0
    max_blocks: int | None = None

    def __call__(self, region) -> bool:
        n = len(region.blocks)
        return n >= self.min_blocks and (self.max_blocks is None or n <= self.max_blocks)


def SizedRegion(n: int) -> RegionConstraint:
    return RegionConstraint(f"region with {n} blocks", n, n)


def MaxSizedRegion(n: int) -> RegionConstraint:
    return RegionConstraint(f"region with at most {n} blocks", 0, n)


ANY_REGION = RegionConstraint("any region")


# =========================================================================================================
# operands, results, attributes, regions
# =========================================================================================================

@dataclass(frozen=True, slots=True)
class OperandDef:
    name: str
    constraint: TypeConstraint | None
    form: str = ONE            # ONE, OPTIONAL, VARIADIC
    bit: int | None = None     # bytecode flag bit saying an optional operand is present
    since: int = 0             # dialect version that introduced it


@dataclass(frozen=True, slots=True)
class ResultDef:
    name: str
    constraint: TypeConstraint | None
    form: str = ONE            # ONE, VARIADIC


@dataclass(frozen=True, slots=True)
class AttrDef:
    name: str
    kind: str                  # the value's kind: an enum class name, a dialect's kind word, or UNIT
    bit: int | None = None     # bytecode flag bit of an optional or unit attribute
    since: int = 0
    optional: bool = False
    constraint: AttrConstraint | None = None


@dataclass(frozen=True, slots=True)
class RegionDef:
    name: str
    constraint: RegionConstraint = ANY_REGION


# =========================================================================================================
# traits
# =========================================================================================================

class Trait:
    """Base of all traits.  `phase` says when the verifier checks it: "predicate" traits see the op's
    named operand and result types (`check_types`), "native" ones the op in its context (`verify`);
    None: the trait only informs (effects, structure)."""
    phase: str | None = None

    def __repr__(self) -> str:
        args = ", ".join(repr(v) for v in vars(self).values()) if hasattr(self, "__dict__") else ""
        return f"{type(self).__name__}({args})"


# -- memory effects ---------------------------------------------------------------------------------------

MEMORY = "memory"      # the default resource: the memory that loads and stores reach
OUTPUT = "output"      # what the program prints or reports (print, assert)


@dataclass(frozen=True, slots=True)
class Effect:
    """One memory effect: `kind` on the value `on` (an operand or result name; None: the whole resource)."""
    kind: str          # "read", "write", "alloc"
    on: str | None = None
    resource: str = MEMORY


def Read(on: str | None = None, resource: str = MEMORY) -> Effect:
    return Effect("read", on, resource)


def Write(on: str | None = None, resource: str = MEMORY) -> Effect:
    return Effect("write", on, resource)


def Alloc(on: str | None = None, resource: str = MEMORY) -> Effect:
    return Effect("alloc", on, resource)


class Pure(Trait):
    """No memory effect and always speculatable."""


class NoMemoryEffect(Trait):
    """No memory effect, but not speculatable (it may trap: divi, for instance)."""


class RecursiveMemoryEffects(Trait):
    """The op's effects are those of the ops nested in its regions."""


class MemoryEffects(Trait):
    """The op's own effects.  `ordered` says whether they keep program order with every other ordered
    effect (atomics, print, ...) beyond what the op's tokens and memory objects imply: a bool, or a
    function of the op (cuda_tile's loads and stores are ordered unless their ordering is `weak`)."""

    def __init__(self, *effects: Effect, ordered: bool | Callable[[Any], bool] = False):
        self.effects = tuple(effects)
        self.ordered = ordered

    def is_ordered(self, op) -> bool:
        return self.ordered(op) if callable(self.ordered) else bool(self.ordered)


# -- structure --------------------------------------------------------------------------------------------

class Terminator(Trait):
    """Ends its block.  `branch` says where control goes: "parent" (back to the op owning the region, with
    the operands as its results), "next_iteration" / "loop_exit" (of the enclosing loop), "function"."""
    phase = "native"
    BRANCHES = ("parent", "next_iteration", "loop_exit", "function")

    def __init__(self, branch: str = "parent"):
        if branch not in self.BRANCHES:
            raise ValueError(f"unknown terminator branch {branch!r}")
        self.branch = branch

    @property
    def ends_iteration(self) -> bool:
        """Leaves a loop body before its end (continue, break, return)."""
        return self.branch != "parent"

    @property
    def targets_loop(self) -> bool:
        """Passes control to the enclosing loop (continue, break)."""
        return self.branch in ("next_iteration", "loop_exit")

    @property
    def ends_loop(self) -> bool:
        """No further iteration of the enclosing loop runs (break, return)."""
        return self.branch in ("loop_exit", "function")

    def verify(self, ctx, op):
        block = ctx.block_of(op)
        if block is not None and block.ops and block.ops[-1] is not op:
            return "must be the last operation in the parent block"
        return None


class HasParent(Trait):
    """MLIR's ParentOneOf: the op must be nested directly in one of `parents` (op names as `op.name`
    spells them; a name no dialect declares is taken to be of the op's own dialect)."""
    phase = "native"

    def __init__(self, *parents: str):
        self.parents = parents

    def verify(self, ctx, op):
        if ctx.parent_name(op) not in self.parents:
            names = ", ".join(_REGISTRY[p].qualified_name if p in _REGISTRY else f"{op.spec.dialect.name}.{p}"
                              for p in self.parents)
            return f"expects parent op to be one of '{names}'"
        return None


class SingleBlockImplicitTerminator(Trait):
    """Each non-empty region is one block ending in one of `terminators` (the first one is named in
    diagnostics); checked with the op's regions (``verify_regions.region_terminators``)."""

    def __init__(self, *terminators: str):
        self.terminators = terminators


class LoopLike(Trait):
    """A loop: its first region is the body, run once per iteration.  The body block's arguments are
    `induction_vars` induction variables, then the iteration arguments, initialised from the variadic
    operand `inits`; the op's results are the iteration arguments' final values."""

    def __init__(self, induction_vars: int = 0, inits: str = "initValues"):
        self.induction_vars = induction_vars
        self.inits = inits

    def body(self, op):
        return op.regions[0].blocks[0]

    def iter_args(self, op) -> list:
        return list(self.body(op).args[self.induction_vars:])

    def init_values(self, op) -> list:
        return list(op.operands.get(self.inits) or [])


class ViewLike(Trait):
    """The result addresses the same memory object as operand `source` (views, pointer offsets)."""

    def __init__(self, source: str):
        self.source = source


class DefinesMemoryObject(Trait):
    """The result is the address of a memory object of its own (a global, an allocation)."""


# -- verifier traits: predicates over named operand/result types -------------------------------------------

def shape_of(t):
    return t.shape if isinstance(t, T.TileType) else None


def rank_of(t):
    return t.rank if isinstance(t, T.TileType) else None


def element_type(t):
    return t.elem if isinstance(t, T.TileType) else t


def _braced(names) -> str:
    return "{" + ", ".join(names) + "}"


class _AllMatch(Trait):
    """PredOpTrait "all of {a, b, ...} <what>": the named operands/results agree on `key`.  Two variadic
    ranges are compared as ranges."""
    phase = "predicate"
    what = ""

    def __init__(self, *names: str):
        self.names = names

    @staticmethod
    def key(t):
        return t

    def check_types(self, named: dict[str, list], variadic_names: set[str]) -> str | None:
        failed = f"failed to verify that all of {_braced(self.names)} {self.what}"
        if len(self.names) == 2 and all(n in named for n in self.names) and \
                any(n in variadic_names for n in self.names):
            return failed if named[self.names[0]] != named[self.names[1]] else None
        keys = [self.key(named[n][0]) for n in self.names if named.get(n)]
        if any(k != keys[0] for k in keys[1:]):
            return failed
        return None


class AllTypesMatch(_AllMatch):
    what = "have same type"


class AllShapesMatch(_AllMatch):
    what = "have same shape"
    key = staticmethod(shape_of)


class AllRanksMatch(_AllMatch):
    what = "have same rank"
    key = staticmethod(rank_of)


class AllElementTypesMatch(_AllMatch):
    what = "have the same element type"
    key = staticmethod(element_type)


class TypesMatchWith(Trait):
    """`check(type of frm, type of to)` must hold; `optional`: only when both are present."""
    phase = "predicate"

    def __init__(self, summary: str, frm: str, to: str, check: Callable[[Any, Any], bool],
                 optional: bool = False):
        self.summary, self.frm, self.to, self.check, self.optional = summary, frm, to, check, optional

    def check_types(self, named: dict[str, list], variadic_names: set[str]) -> str | None:
        frm, to = named.get(self.frm, []), named.get(self.to, [])
        if self.optional and (not frm or not to):
            return None
        if not frm or not to or not self.check(frm[0], to[0]):
            return f"failed to verify that {self.summary}"
        return None


# -- verifier traits: native ------------------------------------------------------------------------------

class _SameForAll(Trait):
    """Native: `key` is the same for every operand type (and result type, with `with_results`)."""
    phase = "native"
    with_results = True
    message = ""

    @staticmethod
    def key(t):
        return t

    def verify(self, ctx, op):
        types = [v.type for v in op.operand_values()]
        if self.with_results:
            types += [r.type for r in op.results]
        keys = [self.key(t) for t in types]
        return self.message if any(k != keys[0] for k in keys[1:]) else None


class SameOperandsShape(_SameForAll):
    with_results = False
    message = "requires the same shape for all operands"
    key = staticmethod(shape_of)


class SameOperandsAndResultShape(_SameForAll):
    message = "requires the same shape for all operands and results"
    key = staticmethod(shape_of)


class SameOperandsAndResultElementType(_SameForAll):
    message = "requires the same element type for all operands and results"
    key = staticmethod(element_type)


class SameOperandsAndResultType(_SameForAll):
    message = "requires the same type for all operands and results"


class Elementwise(Trait):
    """Declared for fidelity with the op's ODS; what it checks is subsumed by SameOperandsAndResultShape
    for the only cuda_tile op that has it (offset)."""
    phase = "native"

    def verify(self, ctx, op):
        return None


class NoRegionArguments(Trait):
    phase = "native"

    def verify(self, ctx, op):
        for i, region in enumerate(op.regions):
            if region.blocks and region.blocks[0].args:
                return f"region #{i} should have no arguments"
        return None


_EFFECT_TRAITS = (Pure, NoMemoryEffect, RecursiveMemoryEffects, MemoryEffects)


# =========================================================================================================
# op definitions and dialects
# =========================================================================================================

@dataclass(eq=False)
class OpDef:
    """One op's definition.  The wire fields (opcode ... counted_results) matter only to dialects with a
    bytecode; the trait queries below are what the rest of the compiler asks."""
    dialect: "Dialect"
    name: str                         # what `Operation.name` returns: see Dialect
    mnemonic: str
    operands: tuple[OperandDef, ...] = ()
    results: tuple[ResultDef, ...] = ()
    attrs: tuple[AttrDef, ...] = ()
    regions: tuple[RegionDef, ...] = ()
    traits: tuple[Trait, ...] = ()
    format: str = ""                  # assembly template, interpreted by ir/printer.py
    # bytecode
    opcode: int | None = None
    cls: str = ""                     # C++ class name, used in the reader's diagnostics
    since: int = 0                    # dialect version that introduced the op
    flags_since: int | None = None    # None: the op has no flags varint
    counted_operands: bool = False    # all operands share one count (else a count per variadic)
    counted_results: bool = False     # the result count precedes the result types
    # derived (see __post_init__)
    terminator: Terminator | None = field(init=False, default=None)
    loop: LoopLike | None = field(init=False, default=None)
    effects: MemoryEffects | None = field(init=False, default=None)
    is_pure: bool = field(init=False, default=False)

    def __post_init__(self):
        self.terminator = self.trait(Terminator)
        self.loop = self.trait(LoopLike)
        self.effects = self.trait(MemoryEffects)
        self.is_pure = self.has_trait(Pure)
        if sum(isinstance(t, _EFFECT_TRAITS) for t in self.traits) > 1:
            raise ValueError(f"{self.name}: more than one memory-effect trait")

    # -- traits -------------------------------------------------------------------------------------------

    def trait(self, cls: type) -> Any:
        """The op's trait of class `cls`, or None."""
        for t in self.traits:
            if isinstance(t, cls):
                return t
        return None

    def has_trait(self, cls: type) -> bool:
        return self.trait(cls) is not None

    @property
    def is_terminator(self) -> bool:
        return self.terminator is not None

    @property
    def is_loop(self) -> bool:
        return self.loop is not None

    @property
    def has_recursive_effects(self) -> bool:
        return self.has_trait(RecursiveMemoryEffects)

    @property
    def has_no_memory_effect(self) -> bool:
        """The op itself has no effect (Pure, NoMemoryEffect or an empty MemoryEffects)."""
        if self.effects is not None:
            return not self.effects.effects
        return self.is_pure or self.has_trait(NoMemoryEffect)

    @property
    def qualified_name(self) -> str:
        return f"{self.dialect.name}.{self.mnemonic}"

    # -- lookup -------------------------------------------------------------------------------------------

    @property
    def result_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.results)

    def attr(self, name: str) -> AttrDef | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None

    def operand(self, name: str) -> OperandDef | None:
        for o in self.operands:
            if o.name == name:
                return o
        return None

    def has_flags(self, version: int) -> bool:
        return self.flags_since is not None and version >= self.flags_since

    # Definitions are singletons: copies of an IR (deepcopy, pickling to a worker) share them.
    def __reduce__(self):
        return _unpickle_opdef, (self.dialect.module, self.name)

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        return f"<OpDef {self.qualified_name}>"


_REGISTRY: dict[str, OpDef] = {}


def _unpickle_opdef(module: str, name: str) -> OpDef:
    """A pickled definition is its name; a process that has not declared the dialect yet imports the
    module that declares it."""
    if name not in _REGISTRY and module:
        importlib.import_module(module)
    return opdef(name)


def opdef(op_or_name) -> OpDef:
    """The definition of an Operation, or of an op name (as `Operation.name` spells it).  A name resolves
    once its dialect's module is imported (``ir.core`` imports the cuda_tile dialect)."""
    if isinstance(op_or_name, str):
        try:
            return _REGISTRY[op_or_name]
        except KeyError:
            raise KeyError(f"unknown op {op_or_name!r}") from None
    return op_or_name.spec


class Dialect:
    """A named set of ops.  `op.name` is "<dialect>.<mnemonic>", except in a dialect declared with
    `qualified_names=False` (cuda_tile, the input dialect: the whole code base matches its ops by bare
    mnemonic, `op.name == "for"`).  Names are unique across dialects."""

    def __init__(self, name: str, *, qualified_names: bool = True, since: int = 0,
                 attr_kinds: Callable[[str], bool] | None = None):
        self.name = name
        self.qualified_names = qualified_names
        self.since = since                  # default `since` of its ops
        self.attr_kinds = attr_kinds        # validates attribute kinds when given
        self.ops: dict[str, OpDef] = {}
        self.by_opcode: dict[int, OpDef] = {}
        # the module declaring the dialect (as enum's functional API finds it): unpickling imports it
        self.module: str = sys._getframe(1).f_globals.get("__name__", "")

    def __getitem__(self, name: str) -> OpDef:
        return self.ops[name]

    def __iter__(self) -> Iterator[OpDef]:
        return iter(self.ops.values())

    def op(self, mnemonic: str, *, operands: dict | None = None, results: dict | None = None,
           attrs: dict | None = None, regions: dict | None = None, traits=(), format: str = "",
           opcode: int | None = None, cls: str = "", since: int | None = None, flags: bool | int = False,
           counted_operands: bool = False, counted_results: bool = False) -> OpDef:
        """Declare and register one op.

        `operands` / `results` map keys (``name``, ``name?``, ``name*``; wire: ``?B``, ``@N``) to type
        constraints; `attrs` map keys (also ``name!`` for unit attributes) to a kind (a string, an enum
        class) or an `Attr` with a constraint; `regions` map names to a `RegionConstraint`.
        Bytecode: `opcode`, `cls` (the C++ class name), `since` (version of the op), `flags` (True: a
        flags varint since the op exists; N: since version N), `counted_operands` (one operand count for
        all operands), `counted_results` (a result count before the result types)."""
        since = self.since if since is None else since
        name = mnemonic if not self.qualified_names else f"{self.name}.{mnemonic}"
        if name in _REGISTRY:
            raise ValueError(f"op {name!r} is declared twice")
        if flags is True:
            flags_since = since
        elif flags is False:
            flags_since = None
        else:
            flags_since = int(flags)
        d = OpDef(
            dialect=self, name=name, mnemonic=mnemonic,
            operands=tuple(_operand(k, c, since) for k, c in (operands or {}).items()),
            results=tuple(_result(k, c) for k, c in (results or {}).items()),
            attrs=tuple(self._attr(k, v, since) for k, v in (attrs or {}).items()),
            regions=tuple(RegionDef(k, c) for k, c in (regions or {}).items()),
            traits=tuple(traits), format=format.strip(), opcode=opcode, cls=cls, since=since,
            flags_since=flags_since, counted_operands=counted_operands, counted_results=counted_results)
        self.ops[name] = d
        if opcode is not None:
            if opcode in self.by_opcode:
                raise ValueError(f"{name}: opcode {opcode} is taken by {self.by_opcode[opcode].name}")
            self.by_opcode[opcode] = d
        _REGISTRY[name] = d
        return d

    def _attr(self, key: str, value, op_since: int) -> AttrDef:
        name, mark, bit, since = _parse_key(key, op_since)
        spec = value if isinstance(value, Attr) else Attr(value)
        kind = spec.kind if isinstance(spec.kind, str) else spec.kind.__name__
        if mark == "!":
            kind = UNIT
        elif self.attr_kinds is not None and not self.attr_kinds(kind):
            raise ValueError(f"unknown attribute kind {kind!r}")
        return AttrDef(name, kind, bit, since, optional=mark in ("?", "!"), constraint=spec.constraint)


def _parse_key(key: str, op_since: int) -> tuple[str, str, int | None, int]:
    """``name?B@N`` -> (name, mark, bit, since): mark is "" (one), "?", "!" or "*"."""
    since = op_since
    if "@" in key:
        key, version = key.split("@")
        since = max(int(version), op_since)
    for mark in "?!*":
        if mark in key:
            name, bit = key.split(mark)
            return name, mark, (int(bit) if bit else None), since
    return key, "", None, since


def _operand(key: str, constraint: TypeConstraint | None, op_since: int) -> OperandDef:
    name, mark, bit, since = _parse_key(key, op_since)
    form = {"": ONE, "?": OPTIONAL, "*": VARIADIC}[mark]
    if form == VARIADIC and constraint is not None:
        constraint = variadic(constraint)
    return OperandDef(name, constraint, form, bit, since)


def _result(key: str, constraint: TypeConstraint | None) -> ResultDef:
    name, mark, _, _ = _parse_key(key, 0)
    form = {"": ONE, "?": OPTIONAL, "*": VARIADIC}[mark]
    if form == VARIADIC and constraint is not None:
        constraint = variadic(constraint)
    return ResultDef(name, constraint, form)


# =========================================================================================================
# queries on operations
# =========================================================================================================

def memory_effect_free(op) -> bool:
    """MLIR's isMemoryEffectFree: no effect of its own and, for RecursiveMemoryEffects ops, none nested."""
    stack = [op]   # explicit: the nesting depth is the input's
    while stack:
        o = stack.pop()
        d = o.spec
        if d.has_recursive_effects:
            stack.extend(x for r in o.regions for b in r.blocks for x in b.ops)
        elif not d.has_no_memory_effect:
            return False
    return True


def effects_of(op) -> list[tuple[Effect, Any]]:
    """The op's own declared effects with the value each touches (None: the whole resource); effects on
    an absent optional operand are left out."""
    eff = op.spec.effects
    if eff is None:
        return []
    out = []
    for e in eff.effects:
        if e.on is None:
            out.append((e, None))
            continue
        value = _named_value(op, e.on)
        if value is not None:
            out.append((e, value))
    return out


def _named_value(op, name: str):
    if name in op.operands:
        return op.operands[name]
    for i, r in enumerate(op.spec.results):
        if r.name == name:
            return op.results[i] if i < len(op.results) else None
    return None


def is_ordered(op) -> bool:
    """The op's effects keep program order with the other ordered effects (see MemoryEffects)."""
    eff = op.spec.effects
    return eff is not None and eff.is_ordered(op)


def writes_memory(op) -> bool:
    """The op itself declares a write to memory (not to an output resource such as print's)."""
    eff = op.spec.effects
    return eff is not None and any(e.kind == "write" and e.resource == MEMORY for e in eff.effects)
