"""Layouts: how a tile's elements map to the registers, lanes and warps of a CTA.

Every cuda_tile dimension is a power of two, so a layout is *linear* over GF(2):
each bit of the register index, the lane id and the warp id contributes one
basis vector (a coordinate in the tile), and an element's coordinate is the
XOR of the bases of the bits that are set.  A zero basis means the bit does
not move the element: that hardware resource holds a replica (broadcast).

Blocked layouts (for elementwise work and memory), MMA fragment layouts,
slices (reductions) and transposes are all of this form, so one class, with
`apply`, `inverse` and composition, covers every layout the code generator
uses.  Codegen splits `apply` into a per-thread part (lane and warp bits,
computed once at run time) and a per-register part (compile-time constants).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import prod

Coord = tuple[int, ...]

WARP_SIZE = 32
IN_DIMS = ("register", "lane", "warp")


def deposit(value: int, positions: list[int], base: int = 0) -> int:
    """`base` with bit positions[j] set for every set bit j of `value` (a parallel bit deposit)."""
    for j, bit in enumerate(positions):
        if value >> j & 1:
            base |= 1 << bit
    return base


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


def _xor(a: Coord, b: Coord) -> Coord:
    return tuple(x ^ y for x, y in zip(a, b))


@dataclass(frozen=True)
class LinearLayout:
    """shape: the tile's shape; bases[dim][bit] = the coordinate that bit contributes."""

    shape: tuple[int, ...]
    bases: tuple[tuple[Coord, ...], tuple[Coord, ...], tuple[Coord, ...]]  # register, lane, warp

    def __post_init__(self):
        for d in self.shape:
            _log2(d)
        if len(self.bases[1]) != _log2(WARP_SIZE):
            raise ValueError("a layout needs exactly 5 lane bits")
        for bases in self.bases:
            for b in bases:
                if len(b) != len(self.shape) or any(not 0 <= c < s for c, s in zip(b, self.shape)):
                    raise ValueError(f"basis {b} outside shape {self.shape}")

    # -- sizes ----------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_registers(self) -> int:
        return 1 << len(self.bases[0])

    @property
    def num_warps(self) -> int:
        return 1 << len(self.bases[2])

    @property
    def num_elements(self) -> int:
        return prod(self.shape)

    # -- mapping --------------------------------------------------------
    def apply(self, register: int, lane: int, warp: int) -> Coord:
        c = (0,) * self.rank
        for value, bases in zip((register, lane, warp), self.bases):
            for bit, basis in enumerate(bases):
                if value >> bit & 1:
                    c = _xor(c, basis)
        return c

    def register_coord(self, register: int) -> Coord:
        """Compile-time part of `apply` (lane = warp = 0)."""
        return self.apply(register, 0, 0)

    def thread_coord(self, lane: int, warp: int) -> Coord:
        """Run-time part of `apply` (register = 0)."""
        return self.apply(0, lane, warp)

    @cached_property
    def _owners(self) -> dict[Coord, list[tuple[int, int, int]]]:
        owners: dict[Coord, list[tuple[int, int, int]]] = {}
        for w in range(self.num_warps):
            for lane in range(WARP_SIZE):
                for r in range(self.num_registers):
                    owners.setdefault(self.apply(r, lane, w), []).append((r, lane, w))
        return owners

    def owners(self, coord: Coord) -> list[tuple[int, int, int]]:
        """Every (register, lane, warp) holding the element at `coord`."""
        return self._owners.get(tuple(coord), [])

    def is_complete(self) -> bool:
        """Every element of the tile is held by some thread."""
        return len(self._owners) == self.num_elements

    def is_injective_in_registers(self) -> bool:
        """No thread holds the same element in two registers (register bases independent)."""
        return _rank_gf2(self.bases[0]) == len([b for b in self.bases[0]])

    def linear_index(self, coord: Coord) -> int:
        """Row-major offset of a coordinate in the tile."""
        idx = 0
        for c, s in zip(coord, self.shape):
            idx = idx * s + c
        return idx

    def contiguous_registers(self, dim: int = -1) -> int:
        """How many consecutive registers hold consecutive elements of dimension `dim` (default the last):
        the vector width along it."""
        dim %= self.rank
        n = 1
        for bit, basis in enumerate(self.bases[0]):
            expected = tuple(1 << bit if d == dim else 0 for d in range(self.rank))
            if basis != expected:
                break
            n <<= 1
        return n

    # -- transformations ------------------------------------------------
    def transpose(self, perm: tuple[int, ...]) -> "LinearLayout":
        """The layout of permute(tile, perm): result dim i is source dim perm[i]."""
        shape = tuple(self.shape[p] for p in perm)
        bases = tuple(tuple(tuple(b[p] for p in perm) for b in dim) for dim in self.bases)
        return LinearLayout(shape, bases)

    def slice(self, dim: int) -> "LinearLayout":
        """The layout of a reduction's result along `dim`: that dimension is dropped (its bits replicate)."""
        shape = self.shape[:dim] + self.shape[dim + 1:]
        bases = tuple(tuple(b[:dim] + b[dim + 1:] for b in dims) for dims in self.bases)
        return LinearLayout(shape, bases)

    def slice_scattered(self, dim: int) -> "LinearLayout":
        """A reduction's result along `dim` spread over the lanes that reduce it: `slice`, except that each
        lane bit that only moves along `dim` (highest first) takes over the element of one register bit of
        the result that moves it (lowest first), and that register bit becomes a copy. A thread then ends
        with a share of the rows instead of all of them: each halving of its rows saves a shuffle per row
        and step (codegen sends one half, keeps the other). Equal to `slice` when no such pair exists."""
        sliced = self.slice(dim)
        regs, lanes = list(sliced.bases[0]), list(sliced.bases[1])
        free = [bit for bit in reversed(range(len(lanes)))
                if self.bases[1][bit][dim] and not any(lanes[bit])]
        rows = [bit for bit, b in enumerate(regs) if any(b) and not self.bases[0][bit][dim]]
        for lane, reg in zip(free, rows):
            lanes[lane], regs[reg] = regs[reg], (0,) * sliced.rank
        return LinearLayout(sliced.shape, (tuple(regs), tuple(lanes), sliced.bases[2]))

    def reshape(self, shape: tuple[int, ...]) -> "LinearLayout":
        """The same placement of elements (by row-major position) over another shape of the same size.
        Every dimension is a power of two, so a row-major position's bits are the coordinates' bits
        concatenated: each basis maps to exactly one basis of the new shape, and nothing moves."""
        if prod(shape) != self.num_elements:
            raise ValueError(f"cannot reshape {self.shape} to {shape}")
        bases = tuple(tuple(_unflatten(self.linear_index(b), shape) for b in dims) for dims in self.bases)
        return LinearLayout(tuple(shape), bases)

    def collapse(self, shape: tuple[int, ...]) -> "LinearLayout":
        """The layout a broadcast's source must have for the broadcast to move nothing: `shape` is this
        layout's shape with some dimensions 1; each thread's register r holds the source element that
        register r of this layout is a copy of."""
        bases = tuple(tuple(tuple(c if n != 1 else 0 for c, n in zip(b, shape)) for b in dims)
                      for dims in self.bases)
        return LinearLayout(tuple(shape), bases)

    def sub_box(self, shape: tuple[int, ...], offset: tuple[int, ...]) -> tuple["LinearLayout", list[int]] | None:
        """The box of `shape` at `offset` (a multiple of `shape` in every dimension) when every thread already
        holds its part of it: only register bits address coordinates outside the box.  (Its layout, and per
        register of it the register of this layout holding that element); None when lanes or warps (or a
        register bit that mixes dimensions) reach outside the box."""
        keep, fixed = [], 0
        for bit, b in enumerate(self.bases[0]):
            outside = [d for d, (c, n) in enumerate(zip(b, shape)) if c >= n]
            if not outside:
                keep.append(bit)
                continue
            nonzero = [d for d, c in enumerate(b) if c]
            if len(nonzero) != 1 or b[nonzero[0]] & (b[nonzero[0]] - 1):
                return None
            d = nonzero[0]
            if offset[d] & b[d]:
                fixed |= 1 << bit
        if any(c >= n for bases in self.bases[1:] for b in bases for c, n in zip(b, shape)):
            return None
        layout = LinearLayout(tuple(shape), (tuple(self.bases[0][i] for i in keep), self.bases[1], self.bases[2]))
        return layout, [deposit(r, keep, fixed) for r in range(1 << len(keep))]

    def duplicate_register_mask(self) -> int:
        """Register bits that do not move the element: a thread holds copies of one element in the
        registers that differ only in these bits (each is computed, loaded and stored once)."""
        return sum(1 << bit for bit, b in enumerate(self.bases[0]) if not any(b))

    def replicated(self) -> bool:
        """Some lane or warp bit does not move the element: several threads hold each element."""
        return any(not any(b) for bases in self.bases[1:] for b in bases)

    def register_map_from(self, src: "LinearLayout") -> list[int] | None:
        """For a conversion src -> self that moves nothing between threads: per register r of this layout,
        the register of `src` that holds the same element in every thread; None when data would have to move
        (the lane and warp bases differ, or a register's element is not among the thread's src registers)."""
        if src.shape != self.shape or src.bases[1] != self.bases[1] or src.bases[2] != self.bases[2]:
            return None
        solve = _Gf2Solver([self.linear_index(b) for b in src.bases[0]])
        per_bit = []
        for b in self.bases[0]:
            combo = solve(self.linear_index(b))
            if combo is None:
                return None
            per_bit.append(combo)
        out = []
        for r in range(self.num_registers):
            x = 0
            for bit, combo in enumerate(per_bit):
                if r >> bit & 1:
                    x ^= combo
            out.append(x)
        return out


def _unflatten(index: int, shape: tuple[int, ...]) -> Coord:
    out = []
    for s in reversed(shape):
        out.append(index % s)
        index //= s
    return tuple(reversed(out))


class _Gf2Solver:
    """Solve x . basis = target over GF(2) for bit-vector bases (x as a bit mask of basis indices)."""

    def __init__(self, basis: list[int]):
        self.rows: list[tuple[int, int]] = []   # (reduced vector, combination of original bases), pivots distinct
        for i, v in enumerate(basis):
            combo = 1 << i
            for r, c in self.rows:
                if v ^ r < v:
                    v, combo = v ^ r, combo ^ c
            if v:
                self.rows.append((v, combo))
                self.rows.sort(reverse=True)

    def __call__(self, target: int) -> int | None:
        combo = 0
        for r, c in self.rows:
            if target ^ r < target:
                target, combo = target ^ r, combo ^ c
        return combo if target == 0 else None


def _rank_gf2(vectors) -> int:
    """Rank over GF(2) of coordinate vectors, each flattened to an integer bit pattern."""
    rows = []
    for v in vectors:
        x = 0
        for c in v:
            x = (x << 32) | c
        rows.append(x)
    rank = 0
    while rows:
        pivot = max(rows)
        if pivot == 0:
            break
        rows.remove(pivot)
        top = pivot.bit_length() - 1
        rows = [r ^ pivot if r >> top & 1 else r for r in rows]
        rank += 1
    return rank


def blocked(shape: tuple[int, ...], num_warps: int, vector: int = 4, fastest: int = -1) -> LinearLayout:
    """A row-major blocked layout: `vector` consecutive elements of the last dim per thread,
    then lanes, then warps along the fastest dims first; bits left over go to registers
    (a thread holds several chunks) or, when the tile is small, replicate.  `fastest`: the dimension
    that takes the vector and the first lanes instead of the last (the others keep their order): a tile
    read through a transposing view runs along memory there."""
    rank = len(shape)
    dim_bits = [_log2(s) for s in shape]
    order = list(range(rank - 1, -1, -1))  # last dimension fastest
    if rank:
        first = fastest % rank
        order.remove(first)
        order.insert(0, first)
    used = [0] * rank                      # bits of each dim assigned so far

    def take(count: int) -> list[Coord]:
        out = []
        for _ in range(count):
            for d in order:
                if used[d] < dim_bits[d]:
                    c = [0] * rank
                    c[d] = 1 << used[d]
                    used[d] += 1
                    out.append(tuple(c))
                    break
            else:
                out.append((0,) * rank)    # tile exhausted: replicate
        return out

    vec_bits = min(_log2(max(1, vector)), dim_bits[order[0]] if rank else 0)
    reg = take(vec_bits)
    lane = take(_log2(WARP_SIZE))
    warp = take(_log2(num_warps))
    reg += take(sum(dim_bits) - sum(used))  # the rest of the tile wraps into registers
    return LinearLayout(tuple(shape), (tuple(reg), tuple(lane), tuple(warp)))


def mma_accumulator(m: int, n: int, num_warps: int, warps_m: int | None = None) -> LinearLayout:
    """The m16n8 accumulator fragment of `mma.sync` (C/D), tiled over an m x n tile.

    Per PTX ISA: in one m16n8 fragment, lane l holds rows (l//4) and (l//4 + 8), columns 2*(l%4) + {0,1};
    register bit 0 -> column +1, register bit 1 -> row +8.  Warps split M first, then N; the remaining
    m16n8 tiles become more register bits (N first, then M).
    """
    if m < 16 or n < 8:
        raise ValueError("mma tiles are at least 16x8")
    warps_m = warps_m or min(num_warps, m // 16)
    warps_n = num_warps // warps_m
    if warps_m * warps_n != num_warps:
        raise ValueError("num_warps must split into warps_m x warps_n")
    reg = [(0, 1), (8, 0)]
    lane = [(0, 2), (0, 4), (1, 0), (2, 0), (4, 0)]
    warp: list[Coord] = []
    row_bit, col_bit = 16, 8
    for _ in range(_log2(warps_m)):
        warp.append((row_bit, 0) if row_bit < m else (0, 0))
        row_bit <<= 1
    for _ in range(_log2(warps_n)):
        warp.append((0, col_bit) if col_bit < n else (0, 0))
        col_bit <<= 1
    while col_bit < n:
        reg.append((0, col_bit))
        col_bit <<= 1
    while row_bit < m:
        reg.append((row_bit, 0))
        row_bit <<= 1
    return LinearLayout((m, n), (tuple(reg), tuple(lane), tuple(warp)))
