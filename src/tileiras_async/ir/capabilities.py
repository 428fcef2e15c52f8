"""What each GPU architecture accepts: element types and ops per target, as NVIDIA's tileiras 13.5 checks
them before it generates code (measured with probe modules; `examples/suite/probes.py` rebuilds the probes and
`examples/record_oracle.py` records what the real tool says about each one on every target).

Measured behaviour (probes × sm_80 .. sm_121):

* A type is checked wherever an op uses it: every operand and result type of every op of the kernel, in
  program order (pre-order through regions), looking through pointers and views (`tile<4xptr<f8E4M3FN>>` and
  `tensor_view<?xf8E4M3FN>` count; the kernel's own parameters do not until an op uses them).  The check runs
  before any simplification: an unused view of an fp8 array is rejected too.
* fp8 (`f8E4M3FN`, `f8E5M2`): sm_89 and newer.  `f8E8M0FNU` scales and `f4E2M1FN`: the sm_100 family and
  sm_120/121.  `fnv8E5M3FNU`: sm_107 only.  Everything else: every target.
* `mmaf_scaled` and fp8 `mmaf` have no rule of their own: wherever their element types are accepted, they are.
* `atomic_rmw_tko` / `atomic_red_view_tko` with mode `addf` on bf16: sm_89 and newer.

The first violation is reported at the op's location, as the real tool does:

    <location>: error: Incompatibility with architecture 'sm_80': unsupported type 'f8E4M3FN'
    error: failed to compile Tile IR program

(exit code 5; without debug information the first line starts with `error:`).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import types as T
from .core import Function, Module, Operation
from .enums import AtomicRMWMode

FAILED = "failed to compile Tile IR program"

# Every --gpu-name the real tool knows, oldest first.
ARCHS = ("sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_107", "sm_110",
         "sm_120", "sm_121")
_FP8 = frozenset(ARCHS[ARCHS.index("sm_89"):])
_BLOCK_SCALED = frozenset(("sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121"))

# element type (MLIR spelling) -> the targets that accept it; a type not listed is accepted everywhere
TYPE_TARGETS: dict[str, frozenset[str]] = {
    "f8E4M3FN": _FP8,
    "f8E5M2": _FP8,
    "f8E8M0FNU": _BLOCK_SCALED,
    "f4E2M1FN": _BLOCK_SCALED,
    "fnv8E5M3FNU": frozenset(("sm_107",)),
}

BF16_ATOMIC_ADD_TARGETS = _FP8
_ATOMIC_OPS = ("atomic_rmw_tko", "atomic_red_view_tko")


@dataclass(frozen=True)
class Incompatibility:
    """One op the target cannot run; `lines()` gives the real tool's stderr lines."""
    target: str
    reason: str        # "unsupported type 'f8E4M3FN'" ...
    op: Operation
    location: str | None = None   # the op's rendered debug location, when it has one

    @property
    def message(self) -> str:
        return f"Incompatibility with architecture '{self.target}': {self.reason}"

    def lines(self) -> list[str]:
        first = f"{self.location}: error: {self.message}" if self.location else f"error: {self.message}"
        return [first, f"error: {FAILED}"]


def type_supported(elem: T.Type, target: str) -> bool:
    allowed = TYPE_TARGETS.get(str(elem))
    return allowed is None or target in allowed or target not in ARCHS


def _element_types(t: T.Type):
    """The element types a type mentions: a tile's element, a pointer's pointee, a view's tensor element."""
    while True:
        if isinstance(t, T.TileType):
            t = t.elem
        elif isinstance(t, T.PointerType):
            t = t.pointee
        elif isinstance(t, T.TensorViewType):
            t = t.elem
        elif isinstance(t, (T.PartitionViewType, T.GatherScatterViewType, T.StridedViewType)):
            t = t.tensor_view
        else:
            yield t
            return


def _op_types(op: Operation):
    for v in op.operands.values():
        for x in (v if isinstance(v, list) else [v]):
            if x is not None:
                yield x.type
    for r in op.results:
        yield r.type


def _op_problem(op: Operation, target: str) -> str | None:
    for t in _op_types(op):
        for elem in _element_types(t):
            if not type_supported(elem, target):
                return f"unsupported type '{elem}'"
    if (op.name in _ATOMIC_OPS and op.attrs.get("mode") == AtomicRMWMode.addf
            and target in ARCHS and target not in BF16_ATOMIC_ADD_TARGETS):
        value = op.operands.get("arg") or op.operands.get("value")
        if value is not None and T.elem_of(value.type) == T.BF16:
            return "atomicRMW ADDF with bf16 is not supported"
    return None


def check_kernel(module: Module | None, fn: Function, target: str) -> Incompatibility | None:
    """The first op of `fn` that `target` cannot run (None: the kernel is fine for it)."""
    for op in fn.walk():
        reason = _op_problem(op, target)
        if reason is not None:
            where = None
            if module is not None and op.loc:
                from .printer import render_location
                where = render_location(module, op.loc)
            return Incompatibility(target, reason, op, where)
    return None
