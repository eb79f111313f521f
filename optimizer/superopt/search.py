"""TASO's cost-based backtracking search over term graphs.

A priority queue holds graphs by cost, cheapest first. Each step pops one, applies every rule
at every match (one new graph per match) and keeps a new graph when it is acyclic, has fewer
than `max_ops` operators (default: twice the input's), was not seen before (graph key: a
Merkle hash of the outputs after merging equal nodes) and costs less than `alpha` times the
best cost found so far. alpha > 1 keeps slightly worse graphs, which is what lets the search
back out of a local optimum: a rewrite that costs a little now (a weight concatenation before
the merged matmul) can enable one that pays (the split folded away by a later rule). The
search stops when the queue is empty or a budget is spent (graphs explored, seconds), and
returns the cheapest graph seen.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from optimizer.rewrite.rules import Rule
from optimizer.superopt.adapt import matcher_of
from optimizer.superopt.apply import SGraph
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import Context


@dataclass
class SearchResult:
    """The best graph, its cost against the input's, and what the search spent."""

    best: SGraph
    cost: float
    start_cost: float
    explored: int = 0
    generated: int = 0
    seconds: float = 0.0
    stopped: str = "exhausted"  # or "graphs" / "time": which budget ended it
    rules: Counter = field(default_factory=Counter)

    @property
    def speedup(self) -> float:
        """Cost-model speedup of the best graph over the input (1.0: nothing better found)."""
        return self.start_cost / self.cost if self.cost > 0 else 1.0


def search(
    sg: SGraph,
    rules: Sequence[Rule],
    model: CostModel | None = None,
    alpha: float = 1.05,
    max_graphs: int = 200,
    seconds: float = 5.0,
    max_ops: int | None = None,
    also: Sequence[SGraph] = (),
) -> SearchResult:
    """Cost-based backtracking search from `sg` with `rules` (see the module docstring).

    `also`: further graphs equivalent to sg to start from (the queue holds them too).
    """
    t0 = time.perf_counter()
    deadline = t0 + seconds
    model = model or CostModel()
    order = sg.topo()
    if order is None:
        raise ValueError("search: the input graph has a cycle")
    start = model.graph_cost(sg, order)
    # TASO's cap: fewer than twice the input's operators (or at most `max_ops`)
    cap = max_ops if max_ops is not None else 2 * sg.op_count(order) - 1
    result = SearchResult(sg, start, start)
    tie = itertools.count()
    queue: list[tuple[float, int, SGraph, list[int]]] = [(start, next(tie), sg, order)]
    seen = {sg.key()}
    for other in also:
        o_order = other.topo()
        if o_order is None or other.key() in seen:
            continue
        seen.add(other.key())
        cost = model.graph_cost(other, o_order)
        if cost < result.cost:
            result.best, result.cost = other, cost
        heapq.heappush(queue, (cost, next(tie), other, o_order))
    while queue:
        if result.explored >= max_graphs:
            result.stopped = "graphs"
            break
        if time.perf_counter() > deadline:
            result.stopped = "time"
            break
        _, _, g, g_order = heapq.heappop(queue)
        result.explored += 1
        ctx = Context(g, g_order)
        for rule in rules:
            for cand in matcher_of(rule).rewrites(ctx):
                if time.perf_counter() > deadline:
                    break
                result.generated += 1
                key = cand.key()
                if key in seen:
                    continue
                seen.add(key)
                c_order = cand.topo()
                if c_order is None or cand.op_count(c_order) > cap:
                    continue
                cost = model.graph_cost(cand, c_order)
                if cost < result.cost:
                    result.best, result.cost = cand, cost
                if cost < alpha * result.cost:
                    heapq.heappush(queue, (cost, next(tie), cand, c_order))
            if time.perf_counter() > deadline:
                break
    result.rules = Counter(result.best.applied)
    result.seconds = time.perf_counter() - t0
    if model.mode == "measured":
        model.save()
    return result


def staged_search(
    sg: SGraph,
    stages: Sequence[Sequence[Rule]],
    model: CostModel | None = None,
    alpha: float = 1.05,
    max_graphs: int = 200,
    seconds: float = 5.0,
) -> SearchResult:
    """`search` with a growing rule set: each stage starts from the previous stage's best graph.

    The structural merges converge in a few steps; the library's hundreds of rules mostly
    make neutral variants (reassociations, pools through concats) that fill the queue, so
    running them first would spend the budget before any merge. Each stage gets an equal
    share of the remaining time and starts from the input and the previous stage's best
    (the cheaper is explored first); explored and generated counts add up.
    """
    model = model or CostModel()
    t0 = time.perf_counter()
    total: SearchResult | None = None
    current = sg
    for k, rules in enumerate(stages):
        left = seconds - (time.perf_counter() - t0)
        share = left / (len(stages) - k)
        # from the previous stage's best and from the input: a stage's first choice can
        # block a better combination that the next stage's rules would find from the input
        also = [current] if current is not sg else []
        r = search(sg, rules, model, alpha, max_graphs, max(share, 0.0), also=also)
        if total is None:
            total = r
        else:
            if r.cost <= total.cost:
                total.best, total.cost = r.best, r.cost
            total.explored += r.explored
            total.generated += r.generated
            total.stopped = r.stopped
        current = r.best
    assert total is not None
    total.rules = Counter(total.best.applied)
    total.seconds = time.perf_counter() - t0
    return total


def taso_search(
    sg: SGraph,
    stages: Sequence[Sequence[Rule]],
    model: CostModel | None = None,
    seconds: float = 5.0,
    graphs: int = 200,
) -> SearchResult:
    """The pass's default search: `staged_search` in the searches' common signature."""
    return staged_search(sg, stages, model, max_graphs=graphs, seconds=seconds)


#: the searches the pass can run, by LAZYGRAPH_SUPEROPT_SEARCH (optimizer.eqsat adds the e-graph ones)
SEARCHES: dict[str, Callable[..., SearchResult]] = {"taso": taso_search}
