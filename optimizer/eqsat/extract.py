"""Extraction from the e-graph: per-e-node costs, a greedy with history, an exact ILP (HiGHS).

A graph's cost counts each node once however many readers it has. Tree-cost greedy
extraction (egg's default: an e-node costs itself plus its children's costs) counts a shared
subgraph once per path to it, so it can prefer a graph that recomputes less-shared pieces and
is slower than the input (Tensat's -124%). The greedy here is the paper's fix: a class's cost
is the summed cost of the *set* of e-nodes below its choice, and an e-node's cost is its own
plus the cost of the union of its children's sets. The ILP selects e-nodes with binary
variables (a used class has exactly one chosen e-node, a chosen e-node's children are used)
over the classes reachable from the roots, less the constant classes (folded, free: each keeps
the acyclic choice that made it constant); cycles are cut lazily (every two-class cycle up
front, a longer one when a solution shows it), or with order variables (t_c >= t_d + 1 within
each cyclic component) when `lazy=False`.

Costs are linear: each e-node costs what the search's cost model charges for that operator
alone at its shapes (`CostModel.graph_cost` of a one-operator graph), zero when all its
inputs are weights (folded once). The model's fusion effects (bias and ReLU epilogues,
elementwise regions) are not linear: `fused_costs` credits them optimistically (when a class
holds the neighbour that allows them) as a second cost function, and `Saturation.extract`
re-costs every selection with the full model and keeps the input when the input is cheaper,
so an extraction never makes the graph costlier.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ops.base import REGISTRY
from optimizer.eqsat.egraph import EGraph
from optimizer.superopt.apply import SGraph, SNode
from optimizer.superopt.cost import CostModel

INF = float("inf")


@dataclass
class Choice:
    """A selection: class -> chosen e-node index, and its linear cost."""

    pick: dict[int, int]
    cost: float
    method: str


def constant_classes(eg: EGraph) -> set[int]:
    """Classes computable from weights, scalars and constants alone (folded: free)."""
    return set(constant_picks(eg))


def constant_picks(eg: EGraph) -> dict[int, int]:
    """An acyclic choice for every constant class: the e-node that first made it constant."""
    pick: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for c, idxs in eg.members.items():
            if c in pick:
                continue
            for idx in idxs:
                n = eg.enodes[idx].node
                if n.op in ("weight", "scalar", "const") or (
                    not n.leaf and all(ch in pick for ch in eg.children(idx))
                ):
                    pick[c] = idx
                    changed = True
                    break
    return pick


def node_costs(eg: EGraph, model: CostModel, const: set[int], memo: dict | None = None) -> list[float]:
    """The linear cost of every e-node (memoized on operator, shapes and constness)."""
    memo = {} if memo is None else memo
    out: list[float] = []
    for idx, e in enumerate(eg.enodes):
        n = e.node
        ch = eg.children(idx)
        if n.leaf or all(c in const for c in ch):
            out.append(0.0)
            continue
        kids = [eg.enodes[eg.nodes_of(c)[0]].node for c in ch]
        key = (n.sig, tuple((k.shape, k.dtype.str, c in const) for k, c in zip(kids, ch)))
        if key not in memo:
            g = SGraph()
            ins = [
                g.leaf("scalar", (), k.dtype, value=k.value)
                if k.op == "scalar"
                else g.leaf("weight" if c in const else "input", k.shape, k.dtype)
                for k, c in zip(kids, ch)
            ]
            g.outputs = [g._put(SNode(n.op, tuple(ins), n.attrs, n.shape, n.dtype))]
            memo[key] = model.graph_cost(g)
        out.append(memo[key])
    return out


def fused_costs(eg: EGraph, model: CostModel, const: set[int], costs: list[float]) -> list[float]:
    """The linear costs adjusted for the fusion the full model credits, assuming the neighbour
    that makes it possible is chosen too: a bias add or ReLU reading a class that holds a
    matmul or convolution is its epilogue (free); a float elementwise op reading a class that
    holds a same-shape elementwise op is in its region (no launch, no pass over that input).

    Optimistic (the neighbour may not be chosen), so a selection by these costs is re-costed
    with the full model like every other (`Saturation.extract`)."""
    from ops.settings import SETTINGS

    if model.mode == "unit":
        return costs
    heavy: set[int] = set()
    ew: set[int] = set()
    for c, idxs in eg.members.items():
        if c in const:
            continue
        for idx in idxs:
            n = eg.enodes[idx].node
            if n.op in ("matmul", "conv2d"):
                heavy.add(c)
            opdef = REGISTRY.get(n.op)
            if opdef is not None and opdef.kind == "elementwise" and n.dtype.kind == "f":
                if math.prod(n.shape) >= SETTINGS.jit_min_size:
                    ew.add(c)
    out = list(costs)
    for idx, e in enumerate(eg.enodes):
        n = e.node
        if n.leaf or costs[idx] == 0.0:
            continue
        ch = eg.children(idx)
        scalar = [eg.rep(c).op == "scalar" for c in ch]
        if n.op == "add" and len(ch) == 2 and not any(scalar):
            if any(c in heavy and eg.rep(c).shape == n.shape for c in ch):
                out[idx] = 0.0
                continue
        if n.op == "maximum" and len(ch) == 2 and any(scalar) and any(c in heavy for c in ch):
            out[idx] = 0.0
            continue
        opdef = REGISTRY.get(n.op)
        if opdef is None or opdef.kind != "elementwise" or eg.find(eg.class_of[idx]) not in ew:
            continue
        fused = [c in ew and eg.rep(c).shape == n.shape for c in ch]
        if not any(fused):
            continue
        moved = _nbytes(n) + sum(
            _nbytes(eg.rep(c)) for c, f, sc in zip(ch, fused, scalar) if not f and not sc
        )
        out[idx] = moved / model.bandwidth
    return out


def _nbytes(n: SNode) -> float:
    return float(math.prod(n.shape) * n.dtype.itemsize)


def greedy(eg: EGraph, costs: list[float], history: bool = True) -> Choice:
    """Bottom-up greedy to a fixpoint; `history` counts shared e-nodes once (the paper's cost)."""
    # class -> (cost, e-node, e-nodes below, classes below, how many e-nodes below): the sets
    # are the history, kept as bitsets (Python ints: e-node and class ids are the bit
    # positions) because a union is then one OR instead of copying a set of up to every
    # e-node (on BERT's e-graph the frozensets made each greedy 50-75 ms)
    best: dict[int, tuple[float, int, int, int, int]] = {}
    readers: dict[int, list[tuple[int, int]]] = {}
    todo: list[tuple[int, int]] = []
    for c, idxs in eg.members.items():
        for idx in idxs:
            ch = eg.children(idx)
            todo.append((c, idx))
            for d in set(ch):
                readers.setdefault(d, []).append((c, idx))
    # a worklist by rounds: an e-node is looked at again only when a child's choice improved
    for _ in range(len(eg.members) + 1):
        improved: dict[int, None] = {}
        for c, idx in todo:
            ch = eg.children(idx)
            if c in ch or any(d not in best for d in ch):
                continue
            kids = [best[d] for d in dict.fromkeys(ch)]
            if any(k[3] >> c & 1 for k in kids):
                continue  # a child's choice reads this class: choosing idx makes a cycle
            seen = 1 << idx
            for k in kids:
                seen |= k[2]
            if history:
                # the union's cost: the largest child set plus what the others add
                base = max(kids, key=lambda k: k[4]) if kids else None
                extra = seen & ~base[2] if base is not None else seen
                cost = base[0] if base is not None else 0.0
                while extra:
                    low = extra & -extra
                    cost += costs[low.bit_length() - 1]
                    extra ^= low
            else:
                cost = costs[idx] + sum(k[0] for k in kids)
            if c not in best or cost < best[c][0] - 1e-15:
                below = 0
                for d in ch:
                    below |= 1 << d
                for k in kids:
                    below |= k[3]
                if not history:
                    seen = 0
                best[c] = (cost, idx, seen, below, seen.bit_count())
                improved[c] = None
        if not improved:
            break
        todo = list(dict.fromkeys(r for c in improved for r in readers.get(c, ())))
    missing = [r for r in eg.roots if eg.find(r) not in best]
    if missing:
        raise ValueError(f"extraction: no acyclic term for output classes {missing}")
    pick = {c: v[1] for c, v in best.items()}
    return Choice(pick, linear_cost(eg, pick, costs), "greedy" if history else "tree-greedy")


def reachable(eg: EGraph, pick: dict[int, int]) -> list[int] | None:
    """Classes the selection uses, children first; None when it has a cycle."""
    state: dict[int, int] = {}
    order: list[int] = []
    for r in eg.roots:
        stack = [(eg.find(r), False)]
        while stack:
            c, done = stack.pop()
            if done:
                state[c] = 2
                order.append(c)
                continue
            s = state.get(c)
            if s == 2:
                continue
            if s == 1:
                return None
            state[c] = 1
            stack.append((c, True))
            for d in eg.children(pick[c]):
                if state.get(d) == 1:
                    return None
                if state.get(d) is None:
                    stack.append((d, False))
    return order


def find_cycle(eg: EGraph, pick: dict[int, int]) -> list[int] | None:
    """Classes on a cycle of the selection reachable from the roots (None: acyclic)."""
    state: dict[int, int] = {}
    for r in eg.roots:
        r = eg.find(r)
        if r in state:
            continue
        path: list[int] = [r]
        stack = [iter(eg.children(pick[r]))]
        state[r] = 1
        while stack:
            for d in stack[-1]:
                s = state.get(d)
                if s == 1:
                    return path[path.index(d) :]
                if s is None:
                    state[d] = 1
                    path.append(d)
                    stack.append(iter(eg.children(pick[d])))
                    break
            else:
                stack.pop()
                state[path.pop()] = 2
    return None


def linear_cost(eg: EGraph, pick: dict[int, int], costs: list[float]) -> float:
    """The selection's linear cost, each used class once (inf when cyclic)."""
    order = reachable(eg, pick)
    return INF if order is None else sum(costs[pick[c]] for c in order)


def ilp(
    eg: EGraph, costs: list[float], seconds: float = 5.0, start: Choice | None = None, lazy: bool = True
) -> Choice | None:
    """The exact DAG-cost extraction with HiGHS; None when no solution was found in time.

    Acyclicity: `lazy` (the default) solves without it, and while the selection has a cycle
    adds the cut "not all of these e-nodes" and solves again (each solve is a small set
    problem; the order formulation's big-M rows make the relaxation weak: on BERT's saturated
    e-graph 14 s to optimal where the cuts take under a second); `lazy=False` keeps the
    order variables t_c >= t_d + 1 within each cyclic component."""
    deadline = time.perf_counter() + max(0.1, float(seconds))
    try:
        import highspy
    except ImportError:  # the optional `search` extra: the greedy's choice stands
        return None

    # constant classes are folded once (free): they leave the program, each with the acyclic
    # choice that made it constant, so the ILP decides the computed classes only
    fixed = constant_picks(eg)
    classes = _live_classes(eg, fixed)
    cidx = {c: k for k, c in enumerate(classes)}
    enodes = [(idx, c) for c in classes for idx in eg.members[c] if c not in eg.children(idx)]
    # a cycle of a selection lies within one strongly connected component of the class graph:
    # order variables and constraints only there (most e-graphs here are mostly acyclic)
    comp = _components(eg, classes)
    multi = _multi(comp)
    tidx = {} if lazy else {c: k for k, c in enumerate(c for c in classes if comp[c] in multi)}
    nx, ny, nt = len(enodes), len(classes), len(tidx)
    big = float(nt + 1)
    h = _highs(highspy)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", max(0.1, float(seconds)))
    h.setOptionValue("threads", 1)
    inf = highspy.kHighsInf
    # columns: x (e-nodes), y (classes used), t (topological order)
    for idx, _ in enodes:
        h.addCol(costs[idx], 0.0, 1.0, 0, [], [])
    roots = {eg.find(r) for r in eg.roots}
    for c in classes:
        h.addCol(0.0, 1.0 if c in roots else 0.0, 1.0, 0, [], [])
    for _ in range(nt):
        h.addCol(0.0, 0.0, big, 0, [], [])
    ints = np.arange(nx + ny, dtype=np.int32)
    h.changeColsIntegrality(len(ints), ints, np.full(len(ints), highspy.HighsVarType.kInteger))
    by_class: dict[int, list[int]] = {}
    for k, (idx, c) in enumerate(enodes):
        by_class.setdefault(c, []).append(k)
        for d in set(eg.children(idx)):
            if d not in cidx:
                continue  # a constant class: always available
            # x_k <= y_d: a chosen e-node's children are used
            h.addRow(-inf, 0.0, 2, np.array([k, nx + cidx[d]], np.int32), np.array([1.0, -1.0]))
            if c in tidx and d in tidx and comp[c] == comp[d]:
                # t_c - t_d - big * x_k >= 1 - big: the order forbids cycles
                cols = np.array([nx + ny + tidx[c], nx + ny + tidx[d], k], np.int32)
                h.addRow(1.0 - big, inf, 3, cols, np.array([1.0, -1.0, -big]))
    for c in classes:  # a used class has exactly one chosen e-node, an unused one none
        ks = by_class.get(c, [])
        cols = np.array([*ks, nx + cidx[c]], np.int32)
        h.addRow(0.0, 0.0, len(cols), cols, np.array([1.0] * len(ks) + [-1.0]))
    if start is not None:
        order = reachable(eg, start.pick) or []
        pos = {c: k for k, c in enumerate(order)}
        sol = np.zeros(nx + ny + nt)
        chosen = {start.pick[c] for c in order}
        for k, (idx, c) in enumerate(enodes):
            sol[k] = 1.0 if idx in chosen and c in pos else 0.0
        for c in order:
            if c in cidx:
                sol[nx + cidx[c]] = 1.0
            if c in tidx:
                sol[nx + ny + tidx[c]] = float(pos[c] + 1)
    col = {idx: k for k, (idx, _c) in enumerate(enodes)}
    if lazy:
        # the two-class cycles (a slice of a concat of that slice, ...) are most of them:
        # cut them all up front, the longer ones as the solutions show them
        reads: dict[tuple[int, int], list[int]] = {}
        for k, (idx, c) in enumerate(enodes):
            for d in set(eg.children(idx)):
                if d in cidx and d != c:
                    reads.setdefault((c, d), []).append(k)
        for (c, d), ks in reads.items():
            if c < d:
                for k in ks:
                    for k2 in reads.get((d, c), ()):
                        h.addRow(-inf, 1.0, 2, np.array([k, k2], np.int32), np.ones(2))
    while True:
        if start is not None:
            h.setSolution(_solution(highspy, sol))  # acyclic: feasible under every cut
        h.setOptionValue("time_limit", max(0.05, deadline - time.perf_counter()))
        h.run()
        values = h.getSolution().col_value
        if h.getInfo().primal_solution_status != 2 or not values:
            return None
        pick: dict[int, int] = dict(fixed)
        for k, (idx, c) in enumerate(enodes):
            if values[k] > 0.5:
                pick.setdefault(c, idx)
        if any(eg.find(r) not in pick for r in eg.roots):
            return None
        cycle = find_cycle(eg, pick)
        if cycle is None:
            break
        if not lazy or time.perf_counter() > deadline or any(pick[c] not in col for c in cycle):
            return None
        cols = np.array([col[pick[c]] for c in cycle], np.int32)
        h.addRow(-inf, float(len(cols) - 1), len(cols), cols, np.ones(len(cols)))
    status = h.getModelStatus()
    method = "ilp" if status == highspy.HighsModelStatus.kOptimal else "ilp-timeout"
    return Choice(pick, linear_cost(eg, pick, costs), method)


def _live_classes(eg: EGraph, fixed: dict[int, int]) -> list[int]:
    """Classes some selection could use (reachable from the roots through any e-node), less
    the `fixed` ones."""
    seen: dict[int, None] = {}
    stack = [eg.find(r) for r in eg.roots]
    while stack:
        c = stack.pop()
        if c in seen or c in fixed:
            continue
        seen[c] = None
        for idx in eg.members[c]:
            stack.extend(d for d in eg.children(idx) if d not in seen)
    return list(seen)


def _components(eg: EGraph, classes: list[int]) -> dict[int, int]:
    """Strongly connected components of the class graph (c -> d when an e-node of c reads d)."""
    live = set(classes)
    succ = {c: {d for idx in eg.members[c] for d in eg.children(idx) if d in live} for c in classes}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    comp: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    for root in classes:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            c, it = work[-1]
            for d in it:
                if d not in index:
                    index[d] = low[d] = len(index)
                    stack.append(d)
                    on.add(d)
                    work.append((d, iter(succ[d])))
                    break
                if d in on:
                    low[c] = min(low[c], index[d])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[c])
                if low[c] == index[c]:
                    while True:
                        d = stack.pop()
                        on.discard(d)
                        comp[d] = c
                        if d == c:
                            break
    return comp


def _multi(comp: dict[int, int]) -> set[int]:
    """Components with more than one class."""
    seen: set[int] = set()
    multi: set[int] = set()
    for r in comp.values():
        if r in seen:
            multi.add(r)
        seen.add(r)
    return multi


_BANNER_SHOWN = False


def _highs(highspy: Any) -> Any:
    """A HiGHS instance; the first one prints a banner from C++ to fd 1, which is sent to
    /dev/null so that a user's program output does not gain two lines mid-evaluation."""
    global _BANNER_SHOWN
    if _BANNER_SHOWN:
        return highspy.Highs()
    _BANNER_SHOWN = True
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solution(highspy: object, sol: np.ndarray) -> object:
    s = highspy.HighsSolution()
    s.col_value = list(sol)
    s.value_valid = True
    return s
