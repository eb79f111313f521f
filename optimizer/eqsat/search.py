"""The e-graph searches as the superopt pass calls them: eqsat, mcts and auto.

Each takes the pass's arguments (graph, rule sets by stage, cost model, seconds, graphs) and
returns the TASO search's `SearchResult`, so the pass emits, guards and caches the result the
same way whichever search produced it. `register()` adds them to `superopt.search.SEARCHES`,
where the pass looks up `LAZYGRAPH_SUPEROPT_SEARCH`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from optimizer.eqsat.mcts import MCTS
from optimizer.eqsat.saturate import Saturation
from optimizer.rewrite.rules import Rule
from optimizer.superopt.apply import SGraph
from optimizer.superopt.cost import CostModel
from optimizer.superopt.search import SEARCHES, SearchResult, search, staged_search

#: e-node budget (the paper's 2,000) and the share of the time kept for the final ILP
NODE_LIMIT = 2000
ILP_SHARE = 0.25
#: the least time left after MCTS's final extraction that is spent on the TASO search's polish
POLISH_LEAST = 0.05


def _result(sat: Saturation, sg: SGraph, best: SGraph, t0: float, stopped: str) -> SearchResult:
    model = sat.model
    start = model.graph_cost(sg)
    cost = model.graph_cost(best)
    if cost >= start:
        best, cost = sg, start
    r = SearchResult(best, cost, start, explored=sat.steps, generated=sat.generated, stopped=stopped)
    r.rules = Counter(best.applied)
    r.seconds = time.perf_counter() - t0
    r.egraph_nodes = sat.eg.size  # type: ignore[attr-defined]
    return r


def _grow(sat: Saturation, extract: str, share: float, graphs: int, end: float) -> tuple[SGraph, str]:
    """One stage: saturation steps, extracted whenever the e-graph has grown by half since the
    last extraction, then once more at the end; the cheapest extraction (full model).

    The exact ILP's time grows fast with the e-graph (BERT's library stage: optimal in 0.24 s
    at 800 e-nodes, 3.4 s at 1,900): extracting the smaller e-graphs on the way keeps the
    optimum of each, so a budget that ends before the ILP on the full e-graph is optimal
    still returns what a smaller budget would have found."""
    stopped = "steps"
    best, best_cost = sat.sg, sat.model.graph_cost(sat.sg)
    grow_end = time.perf_counter() + share * (1 - ILP_SHARE)
    extracted = sat.eg.size
    for _ in range(max(1, graphs)):
        stopped = sat.run(max(0.0, grow_end - time.perf_counter()), max_steps=1)
        if stopped != "steps" or time.perf_counter() >= grow_end:
            break
        if sat.eg.size >= 1.5 * extracted:
            # at most half of what is left of the stage: the final extraction keeps its share
            got, _ = sat.extract(extract, max(0.05, (end - time.perf_counter()) / 2))
            extracted = sat.eg.size
            cost = sat.model.graph_cost(got)
            if cost < best_cost:
                best, best_cost = got, cost
    if stopped == "steps" and time.perf_counter() >= grow_end:
        stopped = "time"
    # the extraction gets the rest of the stage: all of it when the run stopped early
    # (saturated, or at the node limit); the ILP returns as soon as it is optimal
    got, _ = sat.extract(extract, max(0.05, end - time.perf_counter()))
    if sat.model.graph_cost(got) < best_cost:
        best = got
    return best, stopped


def eqsat_search(
    sg: SGraph,
    stages: Sequence[Sequence[Rule]],
    model: CostModel | None = None,
    seconds: float = 5.0,
    graphs: int = 100,
    extract: str = "ilp",
    node_limit: int = NODE_LIMIT,
    ematch: bool = True,
) -> SearchResult:
    """Saturate with the last stage's rules under the limits, then extract (ILP or greedy).

    `ematch=False`: the library's rules match only on graphs drawn from the e-graph (the
    first version; kept to measure what e-matching brings)."""
    t0 = time.perf_counter()
    sat = Saturation(sg, stages[0], model or CostModel(), node_limit=node_limit, ematch=ematch)
    stopped = "saturated"
    best = sg
    # stages as in the TASO search: the structural merges saturate in a few steps, the
    # library's neutral variants would fill the node budget before any merge; each stage
    # is extracted (its e-graph is smallest then), and the next starts from that and the input
    for k, rules in enumerate(stages):
        sat.set_rules(rules)
        if k:
            sat.frontier = [(sat.sg, sat.base)]
            if best is not sg:
                sat.frontier.append((best, sat.eg.add_graph(best)))
        share = (seconds - (time.perf_counter() - t0)) / (len(stages) - k)
        end = time.perf_counter() + share
        got, stopped = _grow(sat, extract, share, graphs, end)
        if sat.model.graph_cost(got) < sat.model.graph_cost(best):
            best = got
    return _result(sat, sg, best, t0, stopped)


def mcts_search(
    sg: SGraph,
    stages: Sequence[Sequence[Rule]],
    model: CostModel | None = None,
    seconds: float = 5.0,
    graphs: int = 100,
    node_limit: int = NODE_LIMIT,
    budget: int = 6,
    depth: int = 2,
    seed: int = 0,
    ematch: bool = True,
) -> SearchResult:
    """The merges saturated, then MCTS-guided construction under the e-node budget, then ILP."""
    t0 = time.perf_counter()
    sat = Saturation(sg, stages[0], model or CostModel(), node_limit=node_limit, ematch=ematch)
    first = sg
    if len(stages) > 1:
        # the structural merges first, saturated by plain steps (they converge in a few
        # rounds) and extracted while the e-graph is small (the final ILP, on the larger
        # e-graph, may not reach that optimum in its time); MCTS then chooses among all
        # rules, where the phase ordering matters. The merges get up to half the budget, as
        # in eqsat_search: on NASNet-A one round of them takes 0.3-0.7 s and is all the gain,
        # while BERT's and NasRNN's saturate in a fraction of that and leave the rest to MCTS
        share = seconds * 0.5
        first, merged = _grow(sat, "ilp", share, graphs, time.perf_counter() + share)
        more = seconds * (1 - ILP_SHARE) - (time.perf_counter() - t0)
        if merged in ("time", "steps") and sat.steps <= 1 and more > 0.05:
            # when not even a second round of the merges fit in half the budget (NASNet-A at
            # 0.25 s: 0.3-0.5 s a round) they are the whole gain within it, and MCTS's actions,
            # each a rewrite of whole graphs, would reach fewer of them than more rounds do (the
            # TASO search, costing each candidate as it comes, spends its time on them too).
            # Not after two or more rounds: BERT's merges at 1 s, nearly saturated, then left
            # MCTS 0.06 s and missed the reassociation (1.137 instead of 1.249)
            got, merged = _grow(sat, "ilp", more, graphs, time.perf_counter() + more)
            if sat.model.graph_cost(got) < sat.model.graph_cost(first):
                first = got
        sat.set_rules(stages[-1])
    # saturated, the merges' rewrites of the input are all in the e-graph: MCTS does not redo
    # them (each such action rebuilds every candidate graph only to change nothing: 0.1 s on BERT)
    tree = MCTS(sat, budget=budget, depth=depth, seed=seed)
    tree.input_done = len(stages) > 1 and merged == "saturated"
    stopped = tree.run(seconds * (1 - ILP_SHARE) - (time.perf_counter() - t0))
    left = max(0.1, seconds - (time.perf_counter() - t0))
    best, _ = sat.extract("ilp", left)
    for cand in (first, tree.best_seen[1] if tree.best_seen else first):
        if sat.model.graph_cost(cand) < sat.model.graph_cost(best):
            best = cand
    left = seconds - (time.perf_counter() - t0)
    if left > POLISH_LEAST:
        # what the final ILP left of the budget (it returns when optimal, often in a tenth of
        # its share): the TASO search's backtracking from MCTS's graph and the input. A chosen
        # action can lead the main e-graph to a local optimum (BERT: one of two
        # reassociations, 1.015 instead of 1.249, in about one run of four at 1 s); the
        # search from there is cheap, costs each candidate with the full model as it comes
        graphs_left = max(1, graphs - sat.steps)
        polish = search(sg, stages[-1], sat.model, max_graphs=graphs_left, seconds=left, also=[best])
        if polish.cost < sat.model.graph_cost(best):
            best = polish.best
    r = _result(sat, sg, best, t0, stopped)
    r.egraph_peak = tree.max_size  # type: ignore[attr-defined]
    return r


def auto_search(
    sg: SGraph,
    stages: Sequence[Sequence[Rule]],
    model: CostModel | None = None,
    seconds: float = 5.0,
    graphs: int = 100,
) -> SearchResult:
    """TASO's staged search for half the time, then saturation from its best and the input."""
    t0 = time.perf_counter()
    model = model or CostModel()
    taso = staged_search(sg, stages, model, max_graphs=graphs, seconds=seconds / 2)
    sat = Saturation(sg, stages[-1], model, node_limit=NODE_LIMIT)
    if taso.best is not sg:
        mapping = sat.eg.add_graph(taso.best)
        for old, new in taso.best.replaced.items():
            while new not in mapping and new in taso.best.replaced:
                new = taso.best.replaced[new]
            if old in sat.base and new in mapping:
                sat.eg.union(sat.base[old], mapping[new])
        sat.eg.rebuild()
        sat.frontier.append((taso.best, sat.eg.add_graph(taso.best)))
    left = seconds - (time.perf_counter() - t0)
    stopped = sat.run(left * (1 - ILP_SHARE), max_steps=max(1, graphs))
    best, _ = sat.extract("ilp", max(0.1, seconds - (time.perf_counter() - t0)))
    r = _result(sat, sg, best, t0, stopped)
    if taso.cost < r.cost:
        taso.seconds = r.seconds
        return taso
    return r


def register() -> None:
    """Make the searches selectable by LAZYGRAPH_SUPEROPT_SEARCH."""
    SEARCHES["eqsat"] = eqsat_search
    SEARCHES["mcts"] = mcts_search
    SEARCHES["auto"] = auto_search
