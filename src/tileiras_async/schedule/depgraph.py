"""Dependence graph of one loop body.

Nodes are the ops of the loop body block in program order, minus the terminator; an op with regions
(``if``, a nested ``for``/``loop``, ``reduce``/``scan``) is one node -- its nested ops are part of the
unit, and every value they use from outside the unit is a use of the node.

Edges ``src -> dst`` carry ``latency`` and ``distance`` (iterations); a schedule must satisfy
``start[dst] >= start[src] + latency - II * distance``.  Kinds:

* ``data``    an SSA use of a result (latency = the producer's latency), distance 0;
* ``token``   the same for a token operand (cuda_tile's memory-ordering chains);
* ``carried`` a ``continue`` operand feeding the body's block argument: the producer -> every user of
  that argument, distance 1 (or more when a value is passed through several arguments unchanged).
  A carried *token* gives ``token`` edges instead: the memory op that produced it in iteration i
  precedes the accesses ordered by it in iteration i + 1 (a store's data must land first);
  For ``for`` the block arguments are (induction variable, iter values...), so ``continue`` operand
  ``j`` feeds argument ``j + 1``; for ``loop`` it feeds argument ``j``.  A ``continue`` nested in an
  ``if`` unit makes that unit the producer;
* ``memory``  conservative program-order edges between accesses of the same memory object (the same
  tensor view / base pointer SSA value, traced back through view and pointer ops; an unknown base
  aliases everything) when at least one writes: write->read latency = the writer's latency (the data
  must land), read->write and write->write latency 1 (issue order).  Weak view/pointer accesses are
  otherwise ordered only by their tokens -- cuda_tile's token-ordered memory model -- so no
  loop-carried edge is added for them;
* ``order``   ops with ordered side effects (atomics, non-weak loads/stores, print, assert, fences,
  gdc) form a program-order chain, latency 1, closed by a loop-carried edge (distance 1) from the
  last to the first;
* ``control`` a unit containing an early exit of this loop (a nested ``continue``/``break``) or a
  ``return`` precedes every later node (latency 1: the branch is resolved at issue); a ``break`` or
  ``return`` also precedes every node of the next iteration (distance 1).

Duplicate edges between the same pair at the same distance are merged keeping the largest latency.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from ..ir import types as T
from ..ir.core import Block, Operation, Value
from ..ir.opdef import DefinesMemoryObject, ViewLike, effects_of, is_ordered
from .constraints import NO_CONSTRAINTS, OpConstraints, parse_op_constraints
from .machine import MachineModel, OpResources, classify

@dataclass
class Node:
    index: int
    name: str
    res: OpResources
    op: Operation | None = None
    constraints: OpConstraints = NO_CONSTRAINTS
    loc: int = 0

    @property
    def latency(self) -> int:
        return self.res.latency


@dataclass(frozen=True, slots=True)
class Edge:
    src: int
    dst: int
    latency: int
    distance: int
    kind: str


@dataclass
class DepGraph:
    nodes: list[Node]
    edges: list[Edge]
    preds: list[list[Edge]] = field(default_factory=list)
    succs: list[list[Edge]] = field(default_factory=list)

    def __post_init__(self):
        merged: dict[tuple[int, int, int], Edge] = {}
        for e in self.edges:
            if not (0 <= e.src < len(self.nodes) and 0 <= e.dst < len(self.nodes)):
                raise ValueError(f"edge {e} refers to a missing node")
            if e.distance < 0 and e.kind != "prefetch":
                raise ValueError(f"edge {e} has a negative distance")
            key = (e.src, e.dst, e.distance)
            old = merged.get(key)
            if old is None or e.latency > old.latency:
                merged[key] = e
        self.edges = [merged[k] for k in sorted(merged)]
        self.preds = [[] for _ in self.nodes]
        self.succs = [[] for _ in self.nodes]
        for e in self.edges:
            self.succs[e.src].append(e)
            self.preds[e.dst].append(e)

    @property
    def n(self) -> int:
        return len(self.nodes)

    def topological_order(self) -> list[int] | None:
        """Kahn's algorithm over the distance-0 edges, ties by program order; None on a cycle."""
        indeg = [0] * self.n
        for e in self.edges:
            if e.distance == 0 and e.src != e.dst:
                indeg[e.dst] += 1
            elif e.distance == 0:
                return None
        ready = [i for i in range(self.n) if indeg[i] == 0]
        heapq.heapify(ready)
        out: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            out.append(i)
            for e in self.succs[i]:
                if e.distance == 0:
                    indeg[e.dst] -= 1
                    if indeg[e.dst] == 0:
                        heapq.heappush(ready, e.dst)
        return out if len(out) == self.n else None


# ---------------------------------------------------------------------------
# building the graph of a loop op
# ---------------------------------------------------------------------------

def _nested_ops(op: Operation):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                yield from inner.walk()


def _defined_inside(op: Operation) -> set[int]:
    ids: set[int] = set()
    for region in op.regions:
        for block in region.blocks:
            ids.update(id(a) for a in block.args)
            for inner in block.walk():
                ids.update(id(r) for r in inner.results)
    return ids


def _external_uses(op: Operation) -> list[Value]:
    inside = _defined_inside(op)
    out = list(op.operand_values())
    for inner in _nested_ops(op):
        out.extend(v for v in inner.operand_values() if id(v) not in inside)
    return out


def _own_exits(op: Operation) -> list[tuple[Operation, bool]]:
    """The continue/break/return ops nested in `op` that leave *this* loop's body (or the kernel):
    (op, is_nested) -- nested loops own the continue/break inside them, but a return exits all."""
    out = []

    def visit(o: Operation, inside_loop: bool):
        for region in o.regions:
            for block in region.blocks:
                for inner in block.ops:
                    t = inner.spec.terminator
                    if t is not None and (t.branch == "function" or (t.targets_loop and not inside_loop)):
                        out.append(inner)
                    visit(inner, inside_loop or inner.spec.is_loop)

    visit(op, op.spec.is_loop)
    return out


def _root(v: Value) -> int:
    """Identity of the memory object behind a view or pointer value: followed through view-like ops
    (views, offsets, pointer-tile reshapes) to an op that defines a memory object (a global, an alloca)."""
    seen = 0
    while isinstance(v, Value) and isinstance(v.owner, Operation) and seen < 64:
        o = v.owner
        seen += 1
        view = o.spec.trait(ViewLike)
        if view is not None:
            v = o.operands.get(view.source)
        elif o.spec.has_trait(DefinesMemoryObject):
            return id(v)
        else:
            return _UNKNOWN                   # computed address: may alias anything
    return id(v)


_UNKNOWN = -1


def _effects(op: Operation) -> tuple[list[tuple[str, int]], bool]:
    """Memory effects of a node, from the declarations of its ops: ([(r|w, object)], ordered).  Reads and
    writes of a value touch the object behind it; effects on no particular value (print's output, a
    grid-dependency wait, a fence) are ordered by the order chain or by their tokens only."""
    eff: list[tuple[str, int]] = []
    ordered = False
    for o in op.walk():
        for e, value in effects_of(o):
            if value is not None and e.kind in ("read", "write"):
                eff.append(("r" if e.kind == "read" else "w", _root(value)))
        ordered = ordered or is_ordered(o)
    return eff, ordered


def build_loop_graph(loop_op: Operation, model: MachineModel) -> DepGraph:
    """The dependence graph of the body of a `for` or `loop` op."""
    if not loop_op.spec.is_loop:
        raise ValueError(f"not a loop op: {loop_op.name}")
    body: Block = loop_op.spec.loop.body(loop_op)
    ops = list(body.ops)
    term = ops.pop() if ops and ops[-1].spec.is_terminator else None
    nodes = [Node(i, o.name, classify(o, model), o, parse_op_constraints(o, model.gpu_name), o.loc)
             for i, o in enumerate(ops)]
    edges: list[Edge] = []
    lat = [nd.latency for nd in nodes]

    owner: dict[int, int] = {}
    for i, o in enumerate(ops):
        for r in o.results:
            owner[id(r)] = i
    first_iter = loop_op.spec.loop.induction_vars
    arg_index = {id(a): k for k, a in enumerate(body.args)}
    users_of_arg: dict[int, list[int]] = {}

    for i, o in enumerate(ops):
        for v in _external_uses(o):
            j = owner.get(id(v))
            if j is not None and j != i:
                kind = "token" if isinstance(v.type, T.TokenType) else "data"
                edges.append(Edge(j, i, lat[j], 0, kind))
            elif id(v) in arg_index and arg_index[id(v)] >= first_iter:
                lst = users_of_arg.setdefault(arg_index[id(v)], [])
                if not lst or lst[-1] != i:
                    lst.append(i)

    # loop-carried sources of each block argument: direct producers and pass-through arguments
    direct: dict[int, dict[int, int]] = {}      # arg -> {src node: distance}
    passthrough: dict[int, list[int]] = {}      # arg -> [arg whose value it receives]

    def feed(cont: Operation, unit: int | None):
        for j, v in enumerate(cont.operands.get("operands") or []):
            k = j + first_iter
            if unit is not None:
                direct.setdefault(k, {})[unit] = 1
            elif id(v) in owner:
                direct.setdefault(k, {})[owner[id(v)]] = 1
            elif id(v) in arg_index and arg_index[id(v)] >= first_iter and arg_index[id(v)] != k:
                passthrough.setdefault(k, []).append(arg_index[id(v)])

    if term is not None and term.spec.terminator.branch == "next_iteration":
        feed(term, None)
    exits_of: dict[int, list[Operation]] = {}
    for i, o in enumerate(ops):
        ex = _own_exits(o)
        if ex:
            exits_of[i] = ex
        for e in ex:
            if e.spec.terminator.branch == "next_iteration":
                feed(e, i)

    sources: dict[int, dict[int, int]] = {k: dict(v) for k, v in direct.items()}
    for _ in range(len(body.args)):           # close over pass-through chains (distance + 1 per hop)
        changed = False
        for k in sorted(passthrough):
            for k2 in passthrough[k]:
                for s, d in sorted(sources.get(k2, {}).items()):
                    cur = sources.setdefault(k, {})
                    if s not in cur or d + 1 < cur[s]:
                        cur[s] = d + 1
                        changed = True
        if not changed:
            break
    for k in sorted(users_of_arg):
        kind = "token" if isinstance(body.args[k].type, T.TokenType) else "carried"
        for s, d in sorted(sources.get(k, {}).items()):
            for u in users_of_arg[k]:
                edges.append(Edge(s, u, lat[s], d, kind))

    # memory order
    effects = [_effects(o) for o in ops]
    for b in range(len(ops)):
        eb, _ = effects[b]
        if not eb:
            continue
        for a in range(b):
            ea, _ = effects[a]
            lat_ab = None
            for ka, oa in ea:
                for kb, ob in eb:
                    if "w" not in (ka, kb):
                        continue
                    if oa != ob and _UNKNOWN not in (oa, ob):
                        continue
                    l = lat[a] if (ka == "w" and kb == "r") else 1
                    lat_ab = l if lat_ab is None else max(lat_ab, l)
            if lat_ab is not None:
                edges.append(Edge(a, b, lat_ab, 0, "memory"))
    chain = [i for i, (_, ordered) in enumerate(effects) if ordered]
    for a, b in itertools.pairwise(chain):
        edges.append(Edge(a, b, 1, 0, "order"))
    if chain:
        edges.append(Edge(chain[-1], chain[0], 1, 1, "order"))

    # control
    for i in sorted(exits_of):
        for j in range(i + 1, len(ops)):
            edges.append(Edge(i, j, 1, 0, "control"))
        if any(e.spec.terminator.ends_loop for e in exits_of[i]):
            for j in range(len(ops)):
                edges.append(Edge(i, j, 1, 1, "control"))
    return DepGraph(nodes, edges)
