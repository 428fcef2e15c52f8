"""reduce and scan over the layout the operands arrive in: registers first, then lanes, then warps.

A tile's layout says which bits of the reduced dimension's coordinate are register bits (the thread holds
both elements), lane bits (a shuffle partner in the warp) or warp bits (another warp: one shared-memory
round).  assign-layouts gave the result the operand layout with that dimension sliced away, so every thread
that held part of a row ends up holding the row's result: nothing is broadcast afterwards.

reduce:  fold the registers along the dimension; a butterfly of `shfl.sync.bfly` over the lane bits (or one
         `redux.sync` when the whole warp reduces one 32-bit integer with add/min/max/and/or/xor); when warps
         share the dimension, each warp writes its partial to shared memory and every thread folds the warps'
         partials in order.
scan:    inclusive, forward or reverse.  The low register bits are scanned serially in each thread; then each
         higher bit of the dimension (registers, then lanes with `shfl.sync.bfly`) combines block totals as on
         a hypercube, carrying each element's exclusive prefix; warps exchange their totals through shared
         memory once.  The combiner gets (later element, earlier prefix), as the interpreter calls it.
"""
from __future__ import annotations

from ..ir import types as T
from ..ir.attrs import FloatAttr, IntegerAttr
from ..ir.core import Operation
from ..ir.enums import Signedness
from ..tilegpu.layout import LinearLayout, deposit
from ..tilegpu.ir import single_op_combiner
from ..tilegpu.analysis.smem import DimBits, dim_bits
from ..tilegpu.types import layout_of
from .emitter import KernelEmitter, LoweringError, lowers
from .llvmir import bits_literal
from .values import SHARED_PTR, Tile, elem_bytes, llvm_type

FULL_MASK = "-1"


def identity_literal(attr, elem: T.Type) -> str:
    lt = llvm_type(elem)
    if isinstance(attr, IntegerAttr):
        width = elem.width if isinstance(elem, T.IntType) else 64
        v = attr.value & ((1 << width) - 1)
        if width == 1:
            return "true" if v else "false"
        return str(v - (1 << width) if v >> (width - 1) else v)
    if isinstance(attr, FloatAttr):
        if lt == "i8":
            return str(attr.bits)
        return bits_literal(attr.bits, lt)
    raise LoweringError(f"unsupported identity attribute {attr!r}")


# -- where the reduced dimension lives ------------------------------------------------------------------

# -- moving values between lanes ---------------------------------------------------------------------------

def shuffle_xor(em: KernelEmitter, value: str, lt: str, lane_mask: int) -> str:
    """`shfl.sync.bfly` of one element of any type (split into 32-bit words, widened when narrower)."""
    return shuffle(em, value, lt, "bfly", str(lane_mask))


# shfl.sync modes -> the c operand (clamp): `up` clamps at lane 0, the others at lane 31
_SHFL_CLAMP = {"bfly": "31", "up": "0", "down": "31", "idx": "31"}


def shuffle(em: KernelEmitter, value: str, lt: str, mode: str, b: str) -> str:
    """`shfl.sync.<mode>` (bfly, up, down, idx) with lane operand `b`, of one element of any type (split into
    32-bit words, widened when narrower)."""
    def shfl(word: str) -> str:
        return em.b.call("i32", f"llvm.nvvm.shfl.sync.{mode}.i32",
                         [("i32", FULL_MASK), ("i32", word), ("i32", b), ("i32", _SHFL_CLAMP[mode])], hint="shfl")
    if lt in ("i32", "float"):
        w = value if lt == "i32" else em.b.value(f"bitcast float {value} to i32")
        r = shfl(w)
        return r if lt == "i32" else em.b.value(f"bitcast i32 {r} to float")
    if lt in ("i64", "double") or "ptr" in lt:
        w = (em.b.value(f"ptrtoint {lt} {value} to i64") if "ptr" in lt else
             value if lt == "i64" else em.b.value(f"bitcast double {value} to i64"))
        lo = shfl(em.b.value(f"trunc i64 {w} to i32"))
        hi = shfl(em.b.value(f"trunc i64 {em.b.value(f'lshr i64 {w}, 32')} to i32"))
        lo64 = em.b.value(f"zext i32 {lo} to i64")
        hi64 = em.b.value(f"shl i64 {em.b.value(f'zext i32 {hi} to i64')}, 32")
        r = em.b.value(f"or i64 {lo64}, {hi64}")
        if "ptr" in lt:
            return em.b.value(f"inttoptr i64 {r} to {lt}")
        return r if lt == "i64" else em.b.value(f"bitcast i64 {r} to double")
    bits = {"half": 16, "bfloat": 16, "i16": 16, "i8": 8, "i1": 1}.get(lt)
    if bits is None:
        raise LoweringError(f"cannot shuffle values of type {lt}")
    ity = f"i{bits}"
    w = value if lt == ity else em.b.value(f"bitcast {lt} {value} to {ity}")
    r = em.b.value(f"trunc i32 {shfl(em.b.value(f'zext {ity} {w} to i32'))} to {ity}")
    return r if lt == ity else em.b.value(f"bitcast {ity} {r} to {lt}")


# `redux.sync` reductions: the combiner's single op -> the PTX operation (32-bit integers, sm_80+)
_REDUX = {"addi": "add", "andi": "and", "ori": "or", "xori": "xor", "maxi": "max", "mini": "min"}


def redux_kind(op: Operation, elem: T.Type) -> str | None:
    """'add.s32' etc. when the combiner is one 32-bit integer op of its two arguments that redux.sync does."""
    inner = single_op_combiner(op) if elem == T.I32 else None
    if inner is None or inner.name not in _REDUX:
        return None
    kind = _REDUX[inner.name]
    if kind in ("max", "min"):
        signed = inner.attrs.get("signedness", Signedness.signed) == Signedness.signed
        return f"{kind}.{'s32' if signed else 'u32'}"
    return f"{kind}.{'s32' if kind == 'add' else 'b32'}"


def redux(em: KernelEmitter, kind: str, value: str) -> str:
    return em.b.asm("i32", f"redux.sync.{kind} $0, $1, $2;", "=r,r,r", [("i32", value), ("i32", FULL_MASK)],
                    sideeffect=False, hint="redux")


# -- the combiner ----------------------------------------------------------------------------------------

def combine(em: KernelEmitter, op: Operation, later: list[str], earlier: list[str]) -> list[str]:
    """The op's region on one element per operand: (later element, earlier one) interleaved per operand."""
    block = op.regions[0].block
    args = []
    for v, a, b in zip(op.operands["operands"], later, earlier):
        s = T.TileType((), v.type.elem)
        args += [Tile(s, None, [a]), Tile(s, None, [b])]
    return [t.regs[0] for t in em.inline_region(block, args)]


def _warp_dim_index(em: KernelEmitter, bits: DimBits) -> str:
    """This thread's position among the warps that share the dimension (the dim's warp bits of the warp id,
    packed in order of weight)."""
    acc = "0"
    for j, (bit, _) in enumerate(sorted(bits.warps, key=lambda bw: bw[1])):
        one = em.thread_value(f"and i32 {em.thread_value(f'lshr i32 {em.warp}, {bit}')}, 1")
        term = em.thread_value(f"shl i32 {one}, {j}") if j else one
        acc = term if acc == "0" else em.thread_value(f"or i32 {acc}, {term}")
    return acc


def _slot(em: KernelEmitter, base: int, index: str, elem: T.Type) -> str:
    return em.shared_slot(index, elem, base)


# -- reduce ----------------------------------------------------------------------------------------------

@lowers("reduce")
def _reduce(em: KernelEmitter, op: Operation) -> None:
    tiles = [em.expect(v) for v in op.operands["operands"]]
    layout = tiles[0].layout
    dim = op.attrs["dim"]
    out_layout = layout_of(op.results[0].type)
    bits = dim_bits(layout, dim)
    lts = [t.llvm for t in tiles]
    dup = layout.duplicate_register_mask()
    # 1. registers: fold the registers along the dimension into the one with those bits clear
    reps = [r for r in range(layout.num_registers) if not r & (bits.reg_mask | dup)]
    order = sorted(bits.regs, key=lambda bw: bw[1])
    vals: dict[int, list[str]] = {}
    for r in reps:
        acc = [t.regs[r] for t in tiles]
        for k in range(1, 1 << len(order)):
            other = deposit(k, [bit for bit, _ in order], r)
            acc = combine(em, op, [t.regs[other] for t in tiles], acc)
        vals[r] = acc
    # 2. lanes: where the result layout spreads rows over the reducing lanes, each such lane bit first
    #    halves the thread's rows (send one half, keep the other); then one redux.sync for a whole-warp
    #    32-bit integer reduction, else a shuffle butterfly over the remaining lane bits
    scattered = _scatter_pairs(layout, dim, out_layout)
    for lane, reg in scattered:
        upper = em.thread_value(f"icmp ne i32 {em.thread_value(f'and i32 {em.lane}, {1 << lane}')}, 0", "upper")
        for r in [r for r in reps if not r >> reg & 1]:
            low, high = vals.pop(r), vals.pop(r | 1 << reg)
            send = [em.b.value(f"select i1 {upper}, {lt} {a}, {lt} {b}") for a, b, lt in zip(low, high, lts)]
            keep = [em.b.value(f"select i1 {upper}, {lt} {b}, {lt} {a}") for a, b, lt in zip(low, high, lts)]
            partner = [shuffle_xor(em, v, lt, 1 << lane) for v, lt in zip(send, lts)]
            vals[r] = combine(em, op, partner, keep)
        reps = [r for r in reps if not r >> reg & 1]
    done = {lane for lane, _ in scattered}
    kind = redux_kind(op, tiles[0].elem) if len(bits.lanes) == 5 and not done else None
    for r in reps:
        if kind is not None:
            vals[r] = [redux(em, kind, vals[r][0])]
            continue
        for bit, _ in sorted(bits.lanes, key=lambda bw: bw[1]):
            if bit in done:
                continue
            partner = [shuffle_xor(em, v, lt, 1 << bit) for v, lt in zip(vals[r], lts)]
            vals[r] = combine(em, op, partner, vals[r])
    # 3. warps: partials through shared memory, folded in warp order by every thread
    if bits.warps:
        _across_warps(em, op, tiles, out_layout, bits, reps, vals)
    out = [[None] * layout.num_registers for _ in tiles]
    spread = sum(1 << reg for _, reg in scattered)
    for r in range(layout.num_registers):
        rep = r & ~(bits.reg_mask | dup | spread)
        for i in range(len(tiles)):
            out[i][r] = vals[rep][i]
    for res, regs in zip(op.results, out):
        n = 1 if out_layout is None else out_layout.num_registers
        em.set(res, Tile(res.type, out_layout, regs[:n] if out_layout is None else regs))


def _scatter_pairs(layout: LinearLayout, dim: int, out_layout: LinearLayout | None) -> list[tuple[int, int]]:
    """(lane bit, register bit) pairs where the result layout gives a reducing lane the rows that register
    bit moves through in the plain slice (`LinearLayout.slice_scattered`)."""
    if out_layout is None:
        return []
    sliced = layout.slice(dim)
    pairs = []
    for lane, (mine, plain) in enumerate(zip(out_layout.bases[1], sliced.bases[1])):
        if mine != plain:
            reg = sliced.bases[0].index(mine)
            if any(out_layout.bases[0][reg]) or any(plain) or not layout.bases[1][lane][dim]:
                raise LoweringError("reduce: a result layout that is no spread of the operand's rows")
            pairs.append((lane, reg))
    return pairs


def _across_warps(em: KernelEmitter, op: Operation, tiles: list[Tile], out_layout: LinearLayout | None,
                  bits: DimBits, reps: list[int], vals: dict[int, list[str]]) -> None:
    nw = 1 << len(bits.warps)
    count = 1 if out_layout is None else out_layout.num_elements
    bases, offset = [], em.scratch_base(op)
    for t in tiles:
        offset = (offset + 15) // 16 * 16
        bases.append(offset)
        offset += count * nw * elem_bytes(t.elem)
    me = _warp_dim_index(em, bits)
    index_of = {}
    for r in reps:
        idx = "0" if out_layout is None else em.linear_index(em.coords(out_layout, r), out_layout.shape)
        index_of[r] = idx
        slot = em.b.value(f"add i32 {em.b.value(f'mul i32 {idx}, {nw}')}, {me}")
        for t, base, v in zip(tiles, bases, vals[r]):
            em.b.emit(f"store {t.llvm} {v}, {SHARED_PTR} {_slot(em, base, slot, t.elem)}")
    em.barrier()
    for r in reps:
        first = em.b.value(f"mul i32 {index_of[r]}, {nw}")
        acc = None
        for j in range(nw):
            slot = em.b.value(f"add i32 {first}, {j}") if j else first
            x = [em.b.value(f"load {t.llvm}, {SHARED_PTR} {_slot(em, base, slot, t.elem)}", "rv")
                 for t, base in zip(tiles, bases)]
            acc = x if acc is None else combine(em, op, x, acc)
        vals[r] = acc


# -- scan ------------------------------------------------------------------------------------------------

@lowers("scan")
def _scan(em: KernelEmitter, op: Operation) -> None:
    tiles = [em.expect(v) for v in op.operands["operands"]]
    layout = tiles[0].layout
    reverse = bool(op.attrs.get("reverse", False))
    ids = [identity_literal(a, t.elem) for a, t in zip(op.attrs["identities"], tiles)]
    bits = dim_bits(layout, op.attrs["dim"])
    lts = [t.llvm for t in tiles]
    dup = layout.duplicate_register_mask()
    serial = _serial_bits(bits)
    serial_mask = sum(1 << b for b in serial)
    rest_regs = [(b, wt) for b, wt in bits.regs if b not in serial]
    p, totals = _serial_prefixes(em, op, tiles, serial, dup, reverse)
    # higher bits, in order of weight: (exclusive carry, block total) per group. Register bits below the
    # lanes' and warps' weights combine the thread's group totals; register bits above them (a blocked
    # layout's registers wrapping around the CTA) combine whole-CTA block totals, after the warps' round
    groups = sorted(totals)
    carry = {g: list(ids) for g in groups}
    spread = [w for _, w in bits.lanes] + [w for _, w in bits.warps]
    low = [(b, w) for b, w in rest_regs if w < min(spread, default=w + 1)]
    high = [(b, w) for b, w in rest_regs if (b, w) not in low]
    if any(w < max(spread) for _, w in high):
        raise LoweringError("scan: register bits of the dimension between its lane and warp bits")
    totals = _register_hypercube(em, op, low, groups, totals, carry, reverse)
    with_total = bool(op.attrs.get("with_total"))     # a tilegpu.scan_total reads the rows' totals
    lane_bits = [bit for bit, _ in sorted(bits.lanes, key=lambda bw: bw[1])]
    if lane_bits and op.attrs["lane_scan"] == "kogge_stone":   # select-access-forms decided
        one_each = not serial and not rest_regs        # a thread holds one element per group
        _lane_scan(em, op, lane_bits, groups, totals, carry, p if one_each else None, reverse, lts,
                   need_total=bool(bits.warps or with_total or high))
    elif lane_bits:
        _lane_hypercube(em, op, lane_bits, groups, totals, carry, reverse, lts)
    grand = dict(totals) if with_total or high else None
    if bits.warps:
        _scan_across_warps(em, op, tiles, layout, bits, groups, totals, carry, reverse, grand)
    if high:
        grand = _register_hypercube(em, op, high, groups, grand, carry, reverse)
    if with_total:
        em.scan_totals[id(op.results[0])] = (grand, serial_mask | dup)
    _set_scan_results(em, op, tiles, layout, p, carry, serial_mask, dup)


def _serial_bits(bits) -> list[int]:
    """The dimension's low register bits (weights 1, 2, 4, ...): scanned serially inside the thread."""
    serial, w = [], 1
    for bit, weight in sorted(bits.regs, key=lambda bw: bw[1]):
        if weight != w:
            break
        serial.append(bit)
        w <<= 1
    return serial


def _serial_prefixes(em: KernelEmitter, op: Operation, tiles: list, serial: list[int], dup: int,
                     reverse: bool) -> tuple[dict, dict]:
    """(inclusive prefix per register within its serial group, each group's total keyed by its register with
    the serial bits clear)."""
    serial_mask = sum(1 << b for b in serial)
    p: dict[int, list[str]] = {}
    totals: dict[int, list[str]] = {}
    for g in range(tiles[0].layout.num_registers):
        if g & (serial_mask | dup):
            continue
        members = [deposit(k, serial, g) for k in range(1 << len(serial))]
        if reverse:
            members.reverse()
        acc = None
        for r in members:
            x = [t.regs[r] for t in tiles]
            acc = x if acc is None else combine(em, op, x, acc)
            p[r] = acc
        totals[g] = acc
    return p, totals


def _register_hypercube(em: KernelEmitter, op: Operation, regs: list, groups: list[int], totals: dict,
                        carry: dict, reverse: bool) -> dict:
    """Combine the groups' totals across register bits `regs` (lowest weight first): each group's exclusive
    carry takes in its partner's total where the partner comes earlier in scan order; returns the totals of
    the merged blocks."""
    for bit, _ in sorted(regs, key=lambda bw: bw[1]):
        new_t = {}
        for g in groups:
            partner = g ^ (1 << bit)
            mine, theirs = totals[g], totals[partner]
            if bool(g >> bit & 1) != reverse:   # this group comes later in scan order than its partner
                carry[g] = combine(em, op, carry[g], theirs)
                new_t[g] = combine(em, op, mine, theirs)
            else:
                new_t[g] = combine(em, op, theirs, mine)
        totals = new_t
    return totals


def _set_scan_results(em: KernelEmitter, op: Operation, tiles: list, layout, p: dict, carry: dict,
                      serial_mask: int, dup: int) -> None:
    """Each register's result: its serial prefix combined with its group's carry (duplicates read their
    original's)."""
    n = layout.num_registers
    out = [[None] * n for _ in tiles]
    for r in range(n):
        base = r & ~dup
        vals = combine(em, op, p[base], carry[base & ~serial_mask])
        for i in range(len(tiles)):
            out[i][r] = vals[i]
    for res, regs in zip(op.results, out):
        em.set(res, Tile(res.type, layout, regs))


@lowers("tilegpu.scan_total")
def _scan_total(em: KernelEmitter, op: Operation) -> None:
    """The totals the scan's lowering kept (`with_total`): register r of the sliced layout holds its row's."""
    totals, folded = em.scan_totals[id(op.operands["scan"])]
    layout = layout_of(op.result.type)
    n = 1 if layout is None else layout.num_registers
    regs = [totals[r & ~folded][0] for r in range(n)]
    em.set(op.result, Tile(op.result.type, layout, regs))


def _lane_scan(em: KernelEmitter, op: Operation, lane_bits: list[int], groups: list[int], totals: dict,
               carry: dict, single: dict | None, reverse: bool, lts: list[str], need_total: bool) -> None:
    """Kogge-Stone over the lanes that share the dimension: `shfl.up` (`down` for a reverse scan) by 1, 2, 4,
    ... positions, each lane combining what comes from an earlier position when there is one. Afterwards a
    group's carry holds the exclusive prefix over the earlier lanes too -- or, when a thread holds one
    element per group (`single`: its inclusive prefixes), that element's inclusive prefix replaces it -- and
    its total the lanes' total (every lane gets it from the last position, for the warps' round)."""
    b0, n = lane_bits[0], len(lane_bits)
    pos = em.thread_value(f"and i32 {em.thread_value(f'lshr i32 {em.lane}, {b0}')}, {(1 << n) - 1}")
    mode = "down" if reverse else "up"

    # per step j: whether this lane's position has one 2^j earlier (computed once, in the entry block)
    earlier = [em.thread_value(f"icmp ult i32 {pos}, {(1 << n) - (1 << j)}") if reverse else
               em.thread_value(f"icmp uge i32 {pos}, {1 << j}") for j in range(n)]
    last = None
    if need_total:      # the lane at the last position (in scan order) of this lane's group
        mask = ((1 << n) - 1) << b0
        last = em.thread_value(f"and i32 {em.lane}, {~mask & 31}")
        if not reverse:
            last = em.thread_value(f"or i32 {last}, {mask}")
    for g in groups:
        inc = totals[g]
        for j in range(n):
            theirs = [shuffle(em, v, lt, mode, str(1 << (b0 + j))) for v, lt in zip(inc, lts)]
            inc = _select(em, earlier[j], combine(em, op, inc, theirs), inc, lts)
        if single is not None:
            single[g] = inc
        else:
            before = [shuffle(em, v, lt, mode, str(1 << b0)) for v, lt in zip(inc, lts)]
            carry[g] = _select(em, earlier[0], combine(em, op, carry[g], before), carry[g], lts)
        if last is not None:
            totals[g] = [shuffle(em, v, lt, "idx", last) for v, lt in zip(inc, lts)]


def _lane_hypercube(em: KernelEmitter, op: Operation, lane_bits: list[int], groups: list[int], totals: dict,
                    carry: dict, reverse: bool, lts: list[str]) -> None:
    """Lane bits that are not one field of the lane id: per bit, partners exchange block totals
    (`shfl.sync.bfly`); the later one folds the earlier's total into its carry."""
    for bit in lane_bits:
        upper = em.b.value(f"icmp ne i32 {em.b.value(f'and i32 {em.lane}, {1 << bit}')}, 0")
        later = em.b.value(f"xor i1 {upper}, true") if reverse else upper
        for g in groups:
            theirs = [shuffle_xor(em, v, lt, 1 << bit) for v, lt in zip(totals[g], lts)]
            mine = totals[g]
            with_theirs = combine(em, op, carry[g], theirs)
            carry[g] = _select(em, later, with_theirs, carry[g], lts)
            totals[g] = combine(em, op, _select(em, later, mine, theirs, lts), _select(em, later, theirs, mine, lts))


def _select(em: KernelEmitter, cond: str, a: list[str], b: list[str], lts: list[str]) -> list[str]:
    return [x if x == y else em.b.value(f"select i1 {cond}, {lt} {x}, {lt} {y}") for x, y, lt in zip(a, b, lts)]


def _scan_across_warps(em, op, tiles, layout, bits, groups, totals, carry, reverse, grand=None) -> None:
    """Each warp's block totals to shared memory, at the slot of the thread's own element; every thread then
    folds the totals of the warps before its own (in scan order, nearest first) into its carry, and (`grand`)
    all of them into the row's total."""
    dim = op.attrs["dim"]
    nw = 1 << len(bits.warps)
    weights = [w for _, w in sorted(bits.warps, key=lambda bw: bw[1])]
    bases, offset = [], em.scratch_base(op)
    for t in tiles:
        offset = (offset + 15) // 16 * 16
        bases.append(offset)
        offset += layout.num_elements * elem_bytes(t.elem)
    me = _warp_dim_index(em, bits)
    lts = [t.llvm for t in tiles]
    for g in groups:
        idx = em.linear_index(em.coords(layout, g), layout.shape)
        for t, base, v in zip(tiles, bases, totals[g]):
            em.b.emit(f"store {t.llvm} {v}, {SHARED_PTR} {em.shared_slot(idx, t.elem, base)}")
    em.barrier()
    positions = range(nw) if reverse else range(nw - 1, -1, -1)
    for g in groups:
        coords = em.coords(layout, g)
        own = em.b.value(f"and i32 {coords[dim]}, {~sum(weights)}")
        for j in positions:
            shift = sum(w for k, w in enumerate(weights) if j >> k & 1)
            cc = list(coords)
            cc[dim] = em.b.value(f"or i32 {own}, {shift}") if shift else own
            idx = em.linear_index(cc, layout.shape)
            x = [em.b.value(f"load {t.llvm}, {SHARED_PTR} {em.shared_slot(idx, t.elem, base)}", "sv")
                 for t, base in zip(tiles, bases)]
            before = em.b.value(f"icmp {'ugt' if reverse else 'ult'} i32 {j}, {me}")
            carry[g] = _select(em, before, combine(em, op, carry[g], x), carry[g], lts)
            if grand is not None:
                grand[g] = x if j == positions[0] else combine(em, op, grand[g], x)
