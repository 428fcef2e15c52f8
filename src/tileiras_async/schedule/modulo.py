"""Schedule generation for one loop: MII, II search, the modulo reservation table and placement.

Strategy selection (wiki "Serial and Cost-Based Schedule Generators", first match wins)::

    1. a node (or the loop op) carries force_serial_execution   -> serial
    2. fewer than `serial_threshold` (8) nodes                  -> serial
    3. no async-capable node (TMA / async copy / async MMA)     -> serial
    4. otherwise                                                -> modulo ("cost-based")

Serial generator: Kahn's topological sort of the distance-0 edges with program-order ties; every node
gets stage 0 and order 0..n-1.  For the report it also list-schedules the nodes in that order on a flat
(non-modulo) table -- in-order issue, dependences and capacities honoured -- and reports the resulting
iteration length as its II (the loop is not overlapped), with a single stage.

Modulo generator, for II = MII, MII+1, ... up to ``ii_cap`` = max(MII, the serial iteration length):

* MII = max(ResMII, RecMII, FineMII, DepMII, 1): ResMII = the busiest capacity-1 slot's total occupied
  cycles; FineMII = ceil(demand / capacity) over the counted slots and pools; RecMII = the smallest II
  without a positive cycle of ``latency - II * distance`` (Bellman-Ford longest paths, binary search);
  DepMII = max over nodes with ``max_depth = N`` of ceil((ASAP start + 1) / N) (the depth limit).
* The reservation table has one Python-int row per cycle mod II (bit ``slot - 1``; a bit is set when
  the slot is at capacity, so the probe is the canonical ``rows[(t + k) % II] & F[k] == 0`` plus a
  count check for slots of capacity > 1 and for pools).  An op's footprint is folded modulo II first; a
  footprint that collides with itself makes the II infeasible for that op.
* Per II the arms run in order, the first success wins (the seeds' OR-chain, minus FUSE -- our nodes
  are indivisible cuda_tile ops):

  - ``permute``: nodes sorted by (dependence depth, -height, program order), each seated at the
    earliest cycle of its window [Estart, min(Estart + II - 1, Lstart)] whose probe is clean (gate G3
    bumps t by one); no backtracking;
  - ``retry``: iterative modulo scheduling (Rau 1994): highest height first (ties by program order),
    earliest clean cycle in [Estart, Estart + II - 1], else a forced seat that evicts the resource
    holders, the successors whose dependence it breaks and the group members at another depth; a
    budget of ``budget_ratio * n`` placements bounds it;
  - ``cost_based``: the permute order, but every clean cycle of the window is scored
    lexicographically (depth, row pressure, cycle) and the minimum wins;
  - ``retry_fresh``: the desperate retry: iterative scheduling in program order with twice the budget.

  If every arm fails the II is bumped.  At ``ii_cap`` the serial placement itself is a valid modulo
  schedule (no footprint or latency reaches past II) and is used as the last resort
  (``serial_fallback``), so the search always ends with a schedule that respects every constraint.
* stage = start // II; order = rank inside the stage by (start, program order); stage_count =
  max stage + 1 (``span_stages`` is the seeds' ``ceil_div(max(start + latency) + 1, II)``).

Constraint gates: G2 max_depth (``start <= N * II - 1``), G3 the reservation table, G4 all members of
a DSU group at the same depth.  G1 (the pending set) has no source in cuda_tile and is not modelled.
Everything iterates lists in a fixed order -- the same graph always gives the same schedule.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .constraints import build_groups
from .depgraph import DepGraph
from .machine import MachineModel, OpResources, mask_slots, slot_bit, slot_name


class ScheduleError(Exception):
    pass


@dataclass
class ScheduleOptions:
    strategy: str = "auto"          # auto | serial | modulo
    serial_threshold: int = 8
    budget_ratio: int = 8           # iterative-scheduling placements allowed per node per attempt
    max_ii_attempts: int = 64       # failed IIs before the search jumps to the cap (serial fallback)
    # software pipelining: an async copy's consumers read what was fetched this many iterations earlier
    # (its data edges get distance -prefetch_stages: the consumer sits that many stages after the copy)
    prefetch_stages: int = 0


# ---------------------------------------------------------------------------
# footprints and the reservation table
# ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FoldedRow:
    k: int                               # row offset from the start, already reduced mod II
    mask: int                            # every slot the op uses in that row
    items: tuple[tuple[int, int, int, int], ...]   # (slot, units, capacity, bit) for every slot used
    multi: tuple[tuple[int, int, int], ...]        # (slot, units, capacity) where capacity > 1 or units > 1
    pools: tuple[tuple[str, int], ...]   # (pool, amount)


@dataclass(frozen=True, slots=True)
class Folded:
    rows: tuple[FoldedRow, ...]
    self_conflict: str                   # "" or why the footprint collides with itself at this II
    pairs: tuple[tuple[int, int], ...] = ()   # (slot, k) for every slot of every row
    simple: bool = True                  # one unit per slot and no pools: the full-row test decides


def fold(res: OpResources, ii: int, model: MachineModel) -> Folded:
    """The footprint reduced modulo II: row k holds every cycle c of the footprint with c % II == k."""
    slots: dict[int, dict[int, int]] = {}
    pools: dict[int, dict[str, int]] = {}
    for u in res.uses:
        for c in range(u.offset, u.offset + u.duration):
            row = slots.setdefault(c % ii, {})
            row[u.slot] = row.get(u.slot, 0) + 1
    for p in res.pools:
        for c in range(p.offset, p.offset + p.duration):
            row = pools.setdefault(c % ii, {})
            row[p.pool] = row.get(p.pool, 0) + p.amount
    problem = ""
    out = []
    for k in sorted(set(slots) | set(pools)):
        srow = slots.get(k, {})
        prow = pools.get(k, {})
        mask = 0
        items = []
        multi = []
        for s in sorted(srow):
            bit = slot_bit(s)
            mask |= bit
            cap = model.cap(s)
            if srow[s] > cap and not problem:
                problem = f"{slot_name(s)} needs {srow[s]} units in row {k} (capacity {cap})"
            items.append((s, srow[s], cap, bit))
            if cap > 1 or srow[s] > 1:
                multi.append((s, srow[s], cap))
        for p in sorted(prow):
            cap = model.pool_caps.get(p, 0)
            if prow[p] > cap and not problem:
                problem = f"pool {p} needs {prow[p]} in row {k} (capacity {cap})"
        out.append(FoldedRow(k, mask, tuple(items), tuple(multi), tuple(sorted(prow.items()))))
    pairs = tuple((s, fr.k) for fr in out for s, _, _, _ in fr.items)
    simple = all(n == 1 for fr in out for _, n, _, _ in fr.items) and not any(fr.pools for fr in out)
    return Folded(tuple(out), problem, pairs, simple)


@dataclass(frozen=True, slots=True)
class Conflict:
    node: int
    cycle: int          # the candidate start
    row: int            # the modulo row that rejected it
    resource: str       # slot or pool name
    holders: tuple[int, ...]

    def describe(self, g: DepGraph | None = None) -> str:
        who = ", ".join(f"{h} {g.nodes[h].name}" if g else str(h) for h in self.holders) or "itself"
        return f"{self.resource} busy at row {self.row} (held by {who})"


class ReservationTable:
    """The modulo reservation table: `full[r]` is the 64-bit row of slots at capacity in cycle r
    (what the probe tests), `occupied[r]` the slots in use at all; counts and holders per slot."""

    def __init__(self, ii: int, model: MachineModel):
        self.ii = ii
        self.model = model
        self.full = [0] * ii
        self.occupied = [0] * ii
        self.used: list[dict[int, int]] = [{} for _ in range(ii)]
        self.holders: list[dict[int, list[int]]] = [{} for _ in range(ii)]
        self.pool_used: list[dict[str, int]] = [{} for _ in range(ii)]
        self.pool_holders: list[dict[str, list[int]]] = [{} for _ in range(ii)]
        self.cols: dict[int, int] = {}   # slot -> II-bit int of the rows where it is full (a cache)
        self.load = [0] * ii             # units in use per row (the cost-based arm's row pressure)
        self._all = (1 << ii) - 1

    def probe(self, f: Folded, t: int, node: int = -1) -> Conflict | None:
        """None when the footprint fits at start t, else the first rejecting (row, resource)."""
        ii = self.ii
        full = self.full
        for fr in f.rows:
            r = (t + fr.k) % ii
            hit = full[r] & fr.mask
            if hit:
                s = mask_slots(hit)[0]
                return Conflict(node, t, r, slot_name(s), tuple(sorted(set(self.holders[r].get(s, ())))))
            if fr.multi:
                used = self.used[r]
                for s, n, cap in fr.multi:
                    if used.get(s, 0) + n > cap:
                        return Conflict(node, t, r, slot_name(s), tuple(sorted(set(self.holders[r].get(s, ())))))
            if fr.pools:
                pused = self.pool_used[r]
                for p, amt in fr.pools:
                    if pused.get(p, 0) + amt > self.model.pool_caps.get(p, 0):
                        return Conflict(node, t, r, p, tuple(sorted(set(self.pool_holders[r].get(p, ())))))
        return None

    def fits(self, f: Folded, t: int) -> bool:
        """The probe without diagnostics: every row AND-clean, counts and pools within capacity."""
        ii = self.ii
        full = self.full
        for fr in f.rows:
            r = (t + fr.k) % ii
            if full[r] & fr.mask:
                return False
            if fr.multi:
                used = self.used[r]
                for s, n, cap in fr.multi:
                    if used.get(s, 0) + n > cap:
                        return False
            if fr.pools:
                pused = self.pool_used[r]
                for p, amt in fr.pools:
                    if pused.get(p, 0) + amt > self.model.pool_caps.get(p, 0):
                        return False
        return True

    def candidates(self, f: Folded, lo: int, hi: int):
        """Starts in [lo, hi] whose probe is clean, ascending.  The slots' full-row columns rule out
        most starts at once (start t clashes on slot s iff column s has row (t + k) % II set for a
        footprint row k using s); survivors that need counts or pools are probed individually.
        Starts t and t + II are equivalent, so at most II candidates are examined."""
        ii = self.ii
        full = self._all
        forbidden = 0
        cols = self.cols
        for s, k in f.pairs:
            c = cols.get(s, 0)
            if c:
                forbidden |= ((c >> k) | (c << (ii - k))) & full
        allowed = ~forbidden & full
        base = lo % ii
        rot = ((allowed >> base) | (allowed << (ii - base))) & full   # bit j <-> start lo + j
        span = min(hi - lo + 1, ii)
        if span <= 0:
            return
        rot &= (1 << span) - 1
        while rot:
            j = (rot & -rot).bit_length() - 1
            if f.simple or self.fits(f, lo + j):
                yield lo + j
            rot &= rot - 1

    def first_fit(self, f: Folded, lo: int, hi: int) -> int | None:
        return next(self.candidates(f, lo, hi), None)

    def blockers(self, f: Folded, t: int) -> list[int]:
        """Every node holding a (row, resource) the footprint would overflow at start t."""
        out: set[int] = set()
        ii = self.ii
        for fr in f.rows:
            r = (t + fr.k) % ii
            used = self.used[r]
            for s, n, cap, _ in fr.items:
                if used.get(s, 0) + n > cap:
                    out.update(self.holders[r].get(s, ()))
            for p, amt in fr.pools:
                if self.pool_used[r].get(p, 0) + amt > self.model.pool_caps.get(p, 0):
                    out.update(self.pool_holders[r].get(p, ()))
        return sorted(out)

    def commit(self, node: int, f: Folded, t: int) -> None:
        """OR the footprint into the rows (only after a clean probe, or after evicting the blockers)."""
        ii = self.ii
        for fr in f.rows:
            r = (t + fr.k) % ii
            used = self.used[r]
            holders = self.holders[r]
            for s, n, cap, bit in fr.items:
                c = used.get(s, 0) + n
                used[s] = c
                self.load[r] += n
                hl = holders.get(s)
                if hl is None:
                    holders[s] = hl = []
                hl.extend([node] * n)
                self.occupied[r] |= bit
                if c >= cap:
                    self.full[r] |= bit
                    self.cols[s] = self.cols.get(s, 0) | (1 << r)
            for p, amt in fr.pools:
                self.pool_used[r][p] = self.pool_used[r].get(p, 0) + amt
                self.pool_holders[r].setdefault(p, []).append(node)

    def release(self, node: int, f: Folded, t: int) -> None:
        ii = self.ii
        for fr in f.rows:
            r = (t + fr.k) % ii
            used = self.used[r]
            holders = self.holders[r]
            for s, n, cap, bit in fr.items:
                c = used[s] - n
                self.load[r] -= n
                hl = holders[s]
                for _ in range(n):
                    hl.remove(node)
                if c:
                    used[s] = c
                else:
                    del used[s]
                    del holders[s]
                    self.occupied[r] &= ~bit
                if c < cap:
                    self.full[r] &= ~bit
                    self.cols[s] = self.cols.get(s, 0) & ~(1 << r)
            for p, amt in fr.pools:
                self.pool_used[r][p] -= amt
                self.pool_holders[r][p].remove(node)
                if not self.pool_holders[r][p]:
                    del self.pool_used[r][p]
                    del self.pool_holders[r][p]


# ---------------------------------------------------------------------------
# bounds
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MIIParts:
    res: int
    rec: int
    fine: int
    dep: int
    mii: int
    res_bottleneck: str = ""      # the slot/pool that sets max(ResMII, FineMII)


def _positive_cycle(g: DepGraph, ii: int) -> bool:
    dist = [0] * g.n
    edges = [(e.src, e.dst, e.latency - ii * e.distance) for e in g.edges]
    for _ in range(g.n + 1):
        changed = False
        for s, d, w in edges:
            if dist[s] + w > dist[d]:
                dist[d] = dist[s] + w
                changed = True
        if not changed:
            return False
    return True


def rec_mii(g: DepGraph) -> int:
    """Smallest II with no positive cycle (0 when the body has no recurrence)."""
    carried = [e for e in g.edges if e.distance > 0]
    if not carried:
        return 0
    hi = sum(max(e.latency, 0) for e in g.edges) + 1
    if _positive_cycle(g, hi):
        raise ScheduleError("dependence cycle within one iteration")
    if not _positive_cycle(g, 1):
        return 1
    lo = 1                    # infeasible
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _positive_cycle(g, mid):
            lo = mid
        else:
            hi = mid
    return hi


def asap(g: DepGraph) -> list[int]:
    order = g.topological_order()
    if order is None:
        raise ScheduleError("dependence cycle within one iteration")
    t = [0] * g.n
    for i in order:
        for e in g.preds[i]:
            if e.distance == 0:
                t[i] = max(t[i], t[e.src] + e.latency)
    return t


def compute_mii(g: DepGraph, model: MachineModel) -> MIIParts:
    demand: dict[int, int] = {}
    pool_demand: dict[str, int] = {}
    for nd in g.nodes:
        for u in nd.res.uses:
            demand[u.slot] = demand.get(u.slot, 0) + u.duration
        for p in nd.res.pools:
            pool_demand[p.pool] = pool_demand.get(p.pool, 0) + p.amount * p.duration
    res = fine = 0
    res_name = fine_name = ""
    for s in sorted(demand):
        cap = model.cap(s)
        if cap == 1:
            if demand[s] > res:
                res, res_name = demand[s], slot_name(s)
        else:
            v = -(-demand[s] // cap)
            if v > fine:
                fine, fine_name = v, slot_name(s)
    for p in sorted(pool_demand):
        cap = model.pool_caps.get(p, 0)
        v = -(-pool_demand[p] // cap) if cap else 0
        if v > fine:
            fine, fine_name = v, p
    rec = rec_mii(g)
    dep = 0
    if any(nd.constraints.max_depth > 0 for nd in g.nodes):
        t0 = asap(g)
        for i, nd in enumerate(g.nodes):
            n = nd.constraints.max_depth
            if n > 0:
                dep = max(dep, -(-(t0[i] + 1) // n))
    mii = max(res, rec, fine, dep, 1)
    return MIIParts(res, rec, fine, dep, mii, res_name if res >= fine else fine_name)


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------

@dataclass
class ArmOutcome:
    arm: str
    ok: bool
    reason: str = ""
    steps: int = 0
    evictions: int = 0


@dataclass
class Attempt:
    ii: int
    ok: bool
    arm: str = ""
    reason: str = ""
    arms: list[ArmOutcome] = field(default_factory=list)
    conflict: Conflict | None = None


@dataclass
class ScheduleResult:
    ok: bool
    strategy: str                   # serial | modulo
    rule: str                       # which selector rule fired
    ii: int
    starts: list[int]
    stages: list[int]
    orders: list[int]
    stage_count: int
    span_stages: int
    mii: MIIParts
    ii_cap: int
    attempts: list[Attempt]
    arms: list[str]                 # which arm placed each node
    rejections: list[int]           # G3 probe failures per node (winning arm)
    evictions: list[int]            # times each node was evicted (winning arm)
    groups: list[int | None]
    table: ReservationTable | None
    folded: list[Folded]
    truncated: bool = False         # a placement budget ran out, or the II search jumped to the cap
    message: str = ""


# ---------------------------------------------------------------------------
# placement at one II
# ---------------------------------------------------------------------------

class _Placement:
    """Shared state of one arm at one II."""

    def __init__(self, g: DepGraph, model: MachineModel, ii: int, folded: list[Folded],
                 groups: list[int | None]):
        self.g, self.model, self.ii, self.folded, self.groups = g, model, ii, folded, groups
        self.table = ReservationTable(ii, model)
        self.start: list[int | None] = [None] * g.n
        self.rejections = [0] * g.n
        self.evicted = [0] * g.n
        self.steps = 0
        self.evictions = 0
        self.conflict: Conflict | None = None
        self.members: dict[int, list[int]] = {}
        for i, gr in enumerate(groups):
            if gr is not None:
                self.members.setdefault(gr, []).append(i)

    def estart(self, i: int) -> int:
        t = 0
        for e in self.g.preds[i]:
            s = self.start[e.src]
            if s is not None and e.src != i:
                t = max(t, s + e.latency - self.ii * e.distance)
        return t

    def lstart(self, i: int) -> int | None:
        t = None
        for e in self.g.succs[i]:
            s = self.start[e.dst]
            if s is not None and e.dst != i:
                v = s - e.latency + self.ii * e.distance
                t = v if t is None else min(t, v)
        return t

    def depth_limit(self, i: int) -> int | None:
        n = self.g.nodes[i].constraints.max_depth
        return n * self.ii - 1 if n > 0 else None

    def group_window(self, i: int) -> tuple[int, int] | None:
        gr = self.groups[i]
        if gr is None:
            return None
        for m in self.members[gr]:
            s = self.start[m]
            if s is not None and m != i:
                d = s // self.ii
                return d * self.ii, d * self.ii + self.ii - 1
        return None

    def window(self, i: int, with_lstart: bool) -> tuple[int, int, str]:
        lo = self.estart(i)
        hi = lo + self.ii - 1
        why = ""
        if with_lstart:
            ls = self.lstart(i)
            if ls is not None and ls < hi:
                hi, why = ls, "successor deadline"
        gw = self.group_window(i)
        if gw is not None:
            if gw[0] > lo:
                lo, why = gw[0], "group depth (G4)"
            if gw[1] < hi:
                hi, why = gw[1], "group depth (G4)"
        dl = self.depth_limit(i)
        if dl is not None and dl < hi:
            hi, why = dl, "max_depth (G2)"
        return lo, hi, why

    def place(self, i: int, t: int) -> None:
        self.table.commit(i, self.folded[i], t)
        self.start[i] = t

    def unplace(self, i: int) -> None:
        self.table.release(i, self.folded[i], self.start[i])
        self.start[i] = None
        self.evicted[i] += 1
        self.evictions += 1

    def first_clean(self, i: int, lo: int, hi: int) -> int | None:
        f = self.folded[i]
        t = self.table.first_fit(f, lo, hi) if lo <= hi else None
        rejected = (t - lo) if t is not None else max(0, hi - lo + 1)
        if rejected:
            self.rejections[i] += rejected           # G3: every earlier cycle of the window clashed
            if self.conflict is None or self.conflict.node != i:
                self.conflict = self.table.probe(f, lo, i)
        return t

    def no_seat(self, i: int, lo: int, hi: int, why: str) -> str:
        nd = self.g.nodes[i]
        if lo > hi:
            return f"op {i} ({nd.name}) has an empty window [{lo}, {hi}]: {why or 'constraints'}"
        c = self.conflict
        detail = c.describe(self.g) if c is not None and c.node == i else "no clean cycle"
        return f"op {i} ({nd.name}) has no legal cycle in [{lo}, {hi}]: {detail}"


def _heights(g: DepGraph, ii: int) -> list[int]:
    h = [0] * g.n
    for _ in range(g.n + 1):
        changed = False
        for i in range(g.n - 1, -1, -1):
            best = h[i]
            for e in g.succs[i]:
                if e.dst != i:
                    best = max(best, h[e.dst] + e.latency - ii * e.distance)
            if best != h[i]:
                h[i] = best
                changed = True
        if not changed:
            break
    return h


def _depths(g: DepGraph) -> list[int]:
    d = [0] * g.n
    for i in g.topological_order() or range(g.n):
        for e in g.preds[i]:
            if e.distance == 0 and e.src != i:
                d[i] = max(d[i], d[e.src] + 1)
    return d


def _arm_greedy(p: _Placement, order: list[int], cost_based: bool) -> str:
    for i in order:
        p.steps += 1
        if p.folded[i].self_conflict:
            return f"op {i} ({p.g.nodes[i].name}) collides with itself modulo II: {p.folded[i].self_conflict}"
        lo, hi, why = p.window(i, with_lstart=True)
        if lo > hi:
            return p.no_seat(i, lo, hi, why)
        if not cost_based:
            t = p.first_clean(i, lo, hi)
        else:
            t = None
            best = None
            f = p.folded[i]
            seats = list(p.table.candidates(f, lo, hi))
            rejected = min(hi - lo + 1, p.ii) - len(seats)
            if rejected:
                p.rejections[i] += rejected
                if p.conflict is None or p.conflict.node != i:
                    bad = next(c for c in range(lo, hi + 1) if not p.table.fits(f, c))
                    p.conflict = p.table.probe(f, bad, i)
            for c in seats:
                load = p.table.load
                pressure = max((load[(c + fr.k) % p.ii] for fr in f.rows), default=0)
                key = (c // p.ii, pressure, c)
                if best is None or key < best:
                    best, t = key, c
        if t is None:
            return p.no_seat(i, lo, hi, why)
        p.place(i, t)
    return ""


def _arm_iterative(p: _Placement, priority: list[int], budget: int) -> str:
    g, ii = p.g, p.ii
    rank = {i: r for r, i in enumerate(priority)}
    heap = [(rank[i], i) for i in range(g.n)]
    heapq.heapify(heap)
    queued = [True] * g.n
    prev: list[int | None] = [None] * g.n
    while heap:
        if p.steps >= budget:
            left = sum(1 for s in p.start if s is None)
            return f"budget exhausted after {p.steps} placements ({p.evictions} evictions, {left} ops unplaced)"
        _, i = heapq.heappop(heap)
        queued[i] = False
        p.steps += 1
        f = p.folded[i]
        if f.self_conflict:
            return f"op {i} ({g.nodes[i].name}) collides with itself modulo II: {f.self_conflict}"
        es = p.estart(i)
        lo, hi, _ = p.window(i, with_lstart=False)
        t = p.first_clean(i, lo, hi) if lo <= hi else None
        if t is None:
            t = es if (prev[i] is None or es > prev[i]) else prev[i] + 1
            t = max(t, lo) if lo <= hi else t
        dl = p.depth_limit(i)
        if dl is not None and t > dl:
            return (f"op {i} ({g.nodes[i].name}) must start at or after {t} but max_depth "
                    f"{g.nodes[i].constraints.max_depth} allows at most {dl} (G2)")
        evict = set(p.table.blockers(f, t))
        for e in g.succs[i]:
            s = p.start[e.dst]
            if s is not None and e.dst != i and s < t + e.latency - ii * e.distance:
                evict.add(e.dst)
        for e in g.preds[i]:
            s = p.start[e.src]
            if s is not None and e.src != i and t < s + e.latency - ii * e.distance:
                evict.add(e.src)
        gr = p.groups[i]
        if gr is not None:
            for m in p.members[gr]:
                s = p.start[m]
                if s is not None and m != i and s // ii != t // ii:
                    evict.add(m)
        for e_i in sorted(evict):
            if p.start[e_i] is not None:
                p.unplace(e_i)
                if not queued[e_i]:
                    heapq.heappush(heap, (rank[e_i], e_i))
                    queued[e_i] = True
        p.place(i, t)
        prev[i] = t
    return ""


def check_schedule(g: DepGraph, model: MachineModel, ii: int, starts: list[int],
                   groups: list[int | None] | None = None) -> list[str]:
    """Independent validation: dependences, reservation-table capacities and the constraint gates."""
    problems = []
    if len(starts) != g.n:
        return [f"{len(starts)} starts for {g.n} nodes"]
    for i, s in enumerate(starts):
        if s is None or s < 0:
            problems.append(f"op {i} has start {s}")
    if problems:
        return problems
    for e in g.edges:
        if starts[e.dst] < starts[e.src] + e.latency - ii * e.distance:
            problems.append(f"edge {e.src}->{e.dst} (lat {e.latency}, dist {e.distance}) violated: "
                            f"{starts[e.dst]} < {starts[e.src]} + {e.latency} - {ii}*{e.distance}")
    use: dict[tuple[int, int], int] = {}
    puse: dict[tuple[int, str], int] = {}
    for i, nd in enumerate(g.nodes):
        for u in nd.res.uses:
            for c in range(u.offset, u.offset + u.duration):
                key = ((starts[i] + c) % ii, u.slot)
                use[key] = use.get(key, 0) + 1
        for pu in nd.res.pools:
            for c in range(pu.offset, pu.offset + pu.duration):
                key = ((starts[i] + c) % ii, pu.pool)
                puse[key] = puse.get(key, 0) + pu.amount
    for (r, s), n in sorted(use.items()):
        if n > model.cap(s):
            problems.append(f"row {r}: {slot_name(s)} used {n} > capacity {model.cap(s)}")
    for (r, pl), n in sorted(puse.items()):
        if n > model.pool_caps.get(pl, 0):
            problems.append(f"row {r}: pool {pl} used {n} > capacity {model.pool_caps.get(pl, 0)}")
    for i, nd in enumerate(g.nodes):
        n = nd.constraints.max_depth
        if n > 0 and starts[i] // ii >= n:
            problems.append(f"op {i} at depth {starts[i] // ii} beyond max_depth {n}")
    if groups:
        depth_of: dict[int, int] = {}
        for i, gr in enumerate(groups):
            if gr is None:
                continue
            d = starts[i] // ii
            if depth_of.setdefault(gr, d) != d:
                problems.append(f"group {gr}: op {i} at depth {d}, another member at {depth_of[gr]}")
    return problems


# ---------------------------------------------------------------------------
# generators
# ---------------------------------------------------------------------------

def _serial(g: DepGraph, model: MachineModel) -> tuple[list[int], list[int], int, list[int]]:
    """(starts, order, iteration length, G3 rejections) of the in-order list schedule."""
    order = g.topological_order()
    if order is None:
        raise ScheduleError("dependence cycle within one iteration")
    horizon = sum(nd.res.length + max(nd.latency, 0) for nd in g.nodes) + \
        max((nd.res.length for nd in g.nodes), default=0) + 1
    table = ReservationTable(horizon, model)
    folded = [fold(nd.res, horizon, model) for nd in g.nodes]
    starts = [0] * g.n
    rejections = [0] * g.n
    prev = 0
    for i in order:
        t = prev
        for e in g.preds[i]:
            if e.distance == 0 and e.src != i:
                t = max(t, starts[e.src] + e.latency)
        if folded[i].self_conflict:
            raise ScheduleError(f"op {i} ({g.nodes[i].name}) exceeds a capacity on its own: "
                                f"{folded[i].self_conflict}")
        t2 = table.first_fit(folded[i], t, horizon - 1)
        if t2 is None:
            raise ScheduleError(f"op {i} ({g.nodes[i].name}) found no seat in {horizon} cycles")
        rejections[i] += t2 - t
        t = t2
        table.commit(i, folded[i], t)
        starts[i] = t
        prev = t
    # long enough that nothing of one iteration (footprint, result, any edge's latency) reaches the next:
    # then every loop-carried edge holds and the placement is also a valid modulo schedule at this II
    length = max([1] + [starts[i] + max(nd.latency, nd.res.length) for i, nd in enumerate(g.nodes)]
                 + [starts[e.src] + e.latency - starts[e.dst] for e in g.edges if e.distance > 0])
    return starts, order, length, rejections


def select_strategy(g: DepGraph, options: ScheduleOptions, loop_force_serial: bool = False) -> tuple[str, str]:
    if options.strategy == "serial":
        return "serial", "forced: serial"
    if options.strategy == "modulo":
        return "modulo", "forced: modulo"
    if loop_force_serial or any(nd.constraints.force_serial for nd in g.nodes):
        return "serial", "force_serial_execution"
    if g.n < options.serial_threshold:
        return "serial", f"op count {g.n} < {options.serial_threshold}"
    if not any(nd.res.async_capable for nd in g.nodes):
        return "serial", "no async-capable op (TMA, async copy, async MMA)"
    return "modulo", "cost-based"


def _finish(g: DepGraph, ii: int, starts: list[int]) -> tuple[list[int], list[int], int, int]:
    stages = [s // ii for s in starts]
    orders = [0] * g.n
    for st in sorted(set(stages)):
        members = sorted((i for i in range(g.n) if stages[i] == st), key=lambda i: (starts[i], i))
        for o, i in enumerate(members):
            orders[i] = o
    stage_count = max(stages, default=0) + 1
    end = max([0] + [starts[i] + nd.latency for i, nd in enumerate(g.nodes)])
    span = -(-(end + 1) // ii)
    return stages, orders, stage_count, span


def schedule_graph(g: DepGraph, model: MachineModel, options: ScheduleOptions | None = None,
                   loop_force_serial: bool = False) -> ScheduleResult:
    options = options or ScheduleOptions()
    _, groups = build_groups([nd.constraints for nd in g.nodes])
    mii = compute_mii(g, model)
    strategy, rule = select_strategy(g, options, loop_force_serial)
    s_starts, s_order, s_len, s_rej = _serial(g, model)

    if strategy == "serial" or g.n == 0:
        ii = max(s_len, 1)
        table = ReservationTable(ii, model)
        folded = [fold(nd.res, ii, model) for nd in g.nodes]
        for i in range(g.n):
            table.commit(i, folded[i], s_starts[i])
        orders = [0] * g.n
        for o, i in enumerate(s_order):
            orders[i] = o
        return ScheduleResult(True, "serial", rule, ii, s_starts, [0] * g.n, orders, 1, 1,
                              mii, ii, [Attempt(ii, True, "serial")],
                              ["serial"] * g.n, s_rej, [0] * g.n, groups, table, folded)

    ii_cap = max(mii.mii, s_len)
    attempts: list[Attempt] = []
    truncated = False
    depths = _depths(g)
    budget = max(options.budget_ratio * g.n, 16)
    ii = mii.mii
    while True:
        folded = [fold(nd.res, ii, model) for nd in g.nodes]
        heights = _heights(g, ii)
        permute_order = sorted(range(g.n), key=lambda i: (depths[i], -heights[i], i))
        height_order = sorted(range(g.n), key=lambda i: (-heights[i], i))
        arms = (("permute", lambda p, o=permute_order: _arm_greedy(p, o, False)),
                ("retry", lambda p, o=height_order: _arm_iterative(p, o, budget)),
                ("cost_based", lambda p, o=permute_order: _arm_greedy(p, o, True)),
                ("retry_fresh", lambda p: _arm_iterative(p, list(range(g.n)), 2 * budget)))
        attempt = Attempt(ii, False)
        winner: _Placement | None = None
        for arm, run in arms:
            p = _Placement(g, model, ii, folded, groups)
            why = run(p)
            if not why:
                problems = check_schedule(g, model, ii, p.start, groups)
                if problems:
                    why = "internal validation failed: " + problems[0]
            if why.startswith("budget exhausted"):
                truncated = True
            attempt.arms.append(ArmOutcome(arm, not why, why, p.steps, p.evictions))
            if attempt.conflict is None and p.conflict is not None and why:
                attempt.conflict = p.conflict
            if not why:
                attempt.ok, attempt.arm = True, arm
                winner = p
                break
        if winner is None and ii == ii_cap:
            p = _Placement(g, model, ii, folded, groups)
            for i in range(g.n):
                p.place(i, s_starts[i])
            problems = check_schedule(g, model, ii, p.start, groups)
            if not problems:
                attempt.arms.append(ArmOutcome("serial_fallback", True, "", g.n, 0))
                attempt.ok, attempt.arm = True, "serial_fallback"
                winner = p
            else:
                attempt.arms.append(ArmOutcome("serial_fallback", False, problems[0], g.n, 0))
        if not attempt.ok:
            attempt.reason = "; ".join(f"{a.arm}: {a.reason}" for a in attempt.arms)
        attempts.append(attempt)
        if winner is not None:
            starts = [int(s) for s in winner.start]
            stages, orders, stage_count, span = _finish(g, ii, starts)
            return ScheduleResult(True, "modulo", rule, ii, starts, stages, orders, stage_count, span, mii,
                                  ii_cap, attempts, [attempt.arm] * g.n, winner.rejections, winner.evicted,
                                  groups, winner.table, folded, truncated)
        if ii >= ii_cap:
            break
        if len(attempts) >= options.max_ii_attempts:
            truncated = True
            ii = ii_cap                 # give up the linear search: the cap always has a schedule
        else:
            ii += 1
    return ScheduleResult(False, "modulo", rule, 0, [0] * g.n, [0] * g.n, list(range(g.n)), 0, 0, mii, ii_cap,
                          attempts, [""] * g.n, [0] * g.n, [0] * g.n, groups, None, [], truncated,
                          "failed to find a schedule")
