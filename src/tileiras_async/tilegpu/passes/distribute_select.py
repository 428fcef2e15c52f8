"""distribute-add-over-select: an additive mask `x + select(c, 0.0, K)` becomes a select between two sums of x,
so the select reads x.

Contract: in/out: tile-GPU IR after select-mma, before layouts; no observable behaviour changes.  In a block,

    m = select(c, Z, K)       Z: splat +0.0, K: a splat normal number, infinity or NaN (not zero nor
                              subnormal), each a `constant` or one reshaped/broadcast; m used once
    y = addf(x, m)            (or addf(m, x); also with Z and K swapped between the select's arms)

becomes, at y's place (each addf keeping y's attributes and m on y's side),

    t = addf(x, Z)            the arm c picks Z: the original's, op for op
    u = addf(t, K)
    y = select(c, t, u)       (select(c, u, t) for select(c, K, Z))

Bit-exact: t is x + 0.0, the original where c holds.  t differs from x only in the sign of a zero (x = -0,
or a flushed subnormal), and K is no zero, so t + K = x + K wherever c does not hold: infinities, NaN, the
rounding mode and flush-to-zero (K is no subnormal, so flushing does not touch it) give the same bits.

Why: the mask (cuTile's `qk += where(keep, 0.0, -inf)`) does not depend on the scores x, so ptxas is free to
make its whole tile -- one register per element -- before x arrives, and it does: on sm_100 attention it
hoists the 128 selects above S's tcgen05.ld, mask and S both live there (fmha_causal_f16: 255 registers).
Once the select reads x, a mask element is made where its score is.  The plain distribution
`select(c, x + 0.0, x + K)` would do as well, but LLVM's instcombine folds a select of two adds of one
operand straight back into `x + select(c, 0.0, K)`; `t + K` has no operand in common with `t`, so it stays.

Where: it costs one more add per element, so only where x is the result of an mmaf of the same block
that select-mma put on tcgen05 (hence after select-mma, before assign-layouts): there the scores come out of
tensor memory late in the iteration and the hoisted mask doubles what is live (fmha_causal_f16, sm_100:
255 -> 230 registers, 0 spills; NVIDIA's 224).  With wgmma (sm_90) or mma.sync the accumulator is in
registers all along: there the rewrite was measured to leave registers and spills as they were
(fmha_causal_f16 sm_90: 168, flash_attention_causal_gqa_f16: 80) and would only add instructions.
"""
from __future__ import annotations

from ...ir import types as T
from ...ir.core import Block, Operation, Value
from ...ir.printer import FLOAT_FORMATS
from ..analysis.mma import TCGEN05_PREFIX
from ..analysis.software_pipeline import use_counts
from ..ir import KernelIR, walk_blocks
from ..types import is_splat

_SHAPE_ONLY = frozenset(["reshape", "broadcast"])   # of a splat constant: the same splat in another shape
_IEEE = frozenset(["f16", "bf16", "f32", "f64"])


def run(k: KernelIR) -> None:
    uses = None
    for block in walk_blocks(k.fn.body):
        if not any(op.name == "addf" for op in block.ops):
            continue
        if uses is None:
            uses = use_counts(k.fn.body)
        _rewrite_block(block, uses)


def _rewrite_block(block: Block, uses: dict[int, int]) -> None:
    local = {id(r) for op in block.ops for r in op.results}
    out: list[Operation] = []
    dropped: set[int] = set()
    for op in block.ops:
        found = _mask_add(op, uses, local) if op.name == "addf" else None
        if found is None:
            out.append(op)
            continue
        select, side = found
        out.extend(_distribute(op, select, side))
        dropped.add(id(select))
    block.ops[:] = [op for op in out if id(op) not in dropped]


def _mask_add(op: Operation, uses: dict[int, int], local: set[int]) -> tuple[Operation, str] | None:
    """(the select, the operand of `op` it is) where `op` is an addf the contract rewrites, else None."""
    for side, other in (("rhs", "lhs"), ("lhs", "rhs")):
        m, x = op.operands[side], op.operands[other]
        select = m.owner if isinstance(m.owner, Operation) else None
        if (select is None or select.name != "select" or uses.get(id(m)) != 1 or id(m) not in local
                or not _product(x, local)):
            continue
        kinds = {_constant_kind(select.operands[arm]) for arm in ("val_if_true", "val_if_false")}
        if kinds == {"zero", "nonzero"}:
            return select, side
    return None


def _product(x: Value, local: set[int]) -> bool:
    """Whether x is the result of an mmaf of this block that select-mma put on tcgen05."""
    owner = x.owner
    return (isinstance(owner, Operation) and owner.name == "mmaf" and id(x) in local
            and str(owner.attrs.get("instruction", "")).startswith(TCGEN05_PREFIX))


def _constant_kind(v: Value) -> str | None:
    """"zero" for a splat +0.0, "nonzero" for a splat whose exponent field is not all zero (a normal number,
    an infinity, a NaN), None for anything else."""
    owner = v.owner
    while isinstance(owner, Operation) and owner.name in _SHAPE_ONLY:
        owner = owner.operand_values()[0].owner
    if not (isinstance(owner, Operation) and owner.name == "constant"):
        return None
    elem = owner.results[0].type.elem
    raw = owner.attrs["value"].raw
    if not isinstance(elem, T.FloatType) or elem.name not in _IEEE or not is_splat(raw, elem):
        return None
    bits = int.from_bytes(raw, "little")
    fmt = FLOAT_FORMATS[elem.name]
    if bits == 0:
        return "zero"
    return "nonzero" if (bits >> fmt.mant_bits) & ((1 << fmt.exp_bits) - 1) else None


def _distribute(add: Operation, select: Operation, side: str) -> list[Operation]:
    """t, u and the select that replace `add` (its result object kept: its uses need no rewiring)."""
    other = "lhs" if side == "rhs" else "rhs"
    zero_arm = "val_if_true" if _constant_kind(select.operands["val_if_true"]) == "zero" else "val_if_false"
    const_arm = "val_if_false" if zero_arm == "val_if_true" else "val_if_true"
    t = _add_like(add, {side: select.operands[zero_arm], other: add.operands[other]})
    u = _add_like(add, {side: select.operands[const_arm], other: t.results[0]})
    arms = {zero_arm: t.results[0], const_arm: u.results[0]}
    operands = {"cond": select.operands["cond"], "val_if_true": arms["val_if_true"],
                "val_if_false": arms["val_if_false"]}
    new = Operation(select.spec, operands, dict(select.attrs), [], [], add.loc)
    result = add.results[0]
    result.owner, result.index = new, 0
    new.results = [result]
    return [t, u, new]


def _add_like(add: Operation, operands: dict[str, Value]) -> Operation:
    return Operation(add.spec, {**add.operands, **operands}, dict(add.attrs), [add.results[0].type], [], add.loc)
