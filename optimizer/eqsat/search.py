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
from typing import NamedTuple

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
#: how far into the budget mcts_search's first round of the merges may run when it does not
#: end in its half (then its extraction, and the TASO search's library stage for the rest)
EXTEND_SHARE = 0.6


class Extension(NamedTuple):
    """A later end for a first round a stage's limits stopped (`_grow`): the round resumes
    until `grow_end` under the work limit `work`; the extraction ends at `end`, or at `cut_end`
    when the round still has not ended."""

    grow_end: float
    end: float
    cut_end: float
    work: int | None


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


def _grow(
    sat: Saturation,
    extract: str,
    share: float,
    graphs: int,
    end: float,
    whole: bool = False,
    extend: Extension | None = None,
) -> tuple[SGraph, str]:
    """One stage: saturation steps, extracted whenever the e-graph has grown by half since the
    last extraction, then once more at the end; the cheapest extraction (full model).

    A step stopped by the time or work limit keeps what it absorbed (the stage's e-graph is
    extracted as it is). `whole`: after the first round, another starts only when it fits in
    the stage as the first round's time per drawn graph predicts (a later round draws from the
    whole frontier: BERT's second took three times its first and changed nothing); the time
    goes to the next stage instead (mcts_search's merges, whose later rounds MCTS's structural
    actions also make). `extend`: a first round the stage's limits stopped resumes until its
    later end before anything is extracted, and the extraction then gets until `end`, or
    `cut_end` when even the extension did not end the round.

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
        if extend is not None and sat.cut and sat.rounds == 0:
            grow_end, end, sat.work_limit = extend.grow_end, extend.end, extend.work
            stopped = sat.run(max(0.0, grow_end - time.perf_counter()), max_steps=1)
            if sat.rounds == 0:
                end = extend.cut_end
            extend = None
        if stopped != "steps" or sat.over(grow_end):
            break
        if whole and sat.graph_seconds is not None:
            need = sat.graph_seconds * (len(sat.frontier) + 1)  # (+1: the greedy extraction)
            if time.perf_counter() + need > grow_end:
                break  # (the extraction below takes this round's e-graph)
        if sat.eg.size >= 1.5 * extracted:
            # at most half of what is left of the stage: the final extraction keeps its share
            got, _ = sat.extract(extract, max(0.05, (end - time.perf_counter()) / 2))
            extracted = sat.eg.size
            cost = sat.model.graph_cost(got)
            if cost < best_cost:
                best, best_cost = got, cost
    if stopped == "steps" and sat.over(grow_end):
        stopped = sat.stop_reason()
    if sum(sat.applied.values()) < 2:
        # at most one rewrite absorbed (a round stopped early on a loaded machine): there is
        # nothing to combine, the one made graph was costed as it came
        got = sat.seen_best[1] if sat.seen_best is not None else sat.sg
        if sat.model.graph_cost(got) < best_cost:
            best = got
        return best, stopped
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


class _Best:
    """The cheapest graph any stage reached (full model), starting from the input: whichever
    stage the budget ends in, the search returns this, never costlier than the input."""

    def __init__(self, model: CostModel, sg: SGraph) -> None:
        self.model, self.graph, self.cost = model, sg, model.graph_cost(sg)

    def offer(self, g: SGraph) -> None:
        """Keep g when it is cheaper than the best so far."""
        cost = self.model.graph_cost(g)
        if cost < self.cost:
            self.graph, self.cost = g, cost


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
    work: int | None = None,
) -> SearchResult:
    """The merges saturated, then MCTS-guided construction under the e-node budget, then ILP;
    when the merges' first round does not fit in half the budget, the TASO search's library
    stage from the merges' best instead of MCTS.

    `work`: candidates and e-matches the e-graph stages try at most (`Saturation.work_limit`;
    half of it for the merges), a budget that ends at the same point however loaded the
    machine is; the TASO search's stages are bounded by `graphs` as in `taso_search`."""
    t0 = time.perf_counter()
    sat = Saturation(sg, stages[0], model or CostModel(), node_limit=node_limit, ematch=ematch)
    best = _Best(sat.model, sg)
    if len(stages) > 1:
        # the structural merges first, by plain rounds (they converge in a few), in the half
        # of the budget the TASO search gives its merges stage. A round stopped by the budget
        # keeps what it absorbed, its candidates were costed as they came (the best so far),
        # and the e-graph is extracted: the merges' combination, which the TASO search reaches
        # only one rewrite per explored graph (NASNet-A: 1.002-1.014 against 1.002-1.005)
        share = seconds * 0.5
        sat.work_limit = None if work is None else work // 2
        # a first round that does not end in the share (a loaded machine: NASNet-A's round
        # takes 0.15 s quiet, 1-2 s at a load of 7-8 on 2 cores) resumes where it stopped, for
        # up to 60% of the budget, before the extraction: the merges are the gain there and the
        # e-graph combines what the round absorbed, which the TASO search reaches one merge per
        # explored graph. The extraction then gets until three quarters of the budget (NasRNN's
        # merged gates need the ILP's optimum on the round's e-graph, 1.073 against 1.03 for
        # the greedy's), and all the rest when even the extension did not end the round: on
        # that partial e-graph the ILP is the gain and needs its time (NASNet-A after 28
        # candidates: the ILP's 1.016, the greedy's and the best candidate's 1.002; at a load of
        # 7, with a quarter of 0.5 s, it stopped at 1.001-1.002 and left the TASO search's
        # library stage, which gets what it leaves, 0.02 s that found nothing)
        extend = Extension(
            t0 + seconds * EXTEND_SHARE,
            t0 + seconds * (1 - ILP_SHARE),
            t0 + seconds,
            None if work is None else int(work * EXTEND_SHARE),
        )
        got, merged = _grow(sat, "ilp", share, graphs, t0 + share, whole=True, extend=extend)
        best.offer(got)
        sat.work_limit = work
        if sat.rounds == 0:
            # still not one whole round: no MCTS step would end in the rest, which goes to the
            # TASO search's library stage from the best so far (it costs each candidate as it
            # comes, so whatever it reaches in the time left counts)
            return _library_stage(sat, sg, stages, best, graphs, t0, seconds, merged)
        sat.set_rules(stages[-1])
    mcts_time = seconds * (1 - ILP_SHARE) - (time.perf_counter() - t0)
    # the merges' rewrites of the input are all in the e-graph after a whole round: MCTS does
    # not redo them (each such action rebuilds every candidate graph only to change nothing)
    tree = MCTS(sat, budget=budget, depth=depth, seed=seed)
    tree.input_done = sat.input_done
    stopped = tree.run(mcts_time)
    if tree.best_seen is not None:
        best.offer(tree.best_seen[1])
    left = max(0.05, seconds - (time.perf_counter() - t0))
    took = time.perf_counter()
    best.offer(sat.extract("ilp", left)[0])
    took = time.perf_counter() - took
    left = seconds - (time.perf_counter() - t0)
    other = tree.best_seen_eg
    if other is not None and other is not sat.eg and left > 2 * took + POLISH_LEAST:
        # the e-graph of the tree node that reached the best graph, when the chosen actions
        # left it: its extraction combines that graph's rewrite with the merges (BERT at 2 s:
        # the root's reassociation reached 1.226, the main e-graph went on by other rules to
        # an ILP of 1.015 and the polish from 1.226 reached 1.232, in 1 of 4 runs; the
        # reassociation's e-graph holds 1.249). Only when an extraction like the one just made
        # fits with time to spare: on a loaded machine its fixed costs (the greedy extractions,
        # the ILP's least limit, the graphs built) ran 1 s searches to 1.2-1.5 s
        main_eg, sat.eg = sat.eg, other
        best.offer(sat.extract("ilp", left / 2)[0])
        sat.eg = main_eg
        left = seconds - (time.perf_counter() - t0)
    if left > POLISH_LEAST:
        # what the final ILP left of the budget (it returns when optimal, often in a tenth of
        # its share): the TASO search's backtracking from MCTS's graph and the input. A chosen
        # action can lead the main e-graph to a local optimum (BERT: one of two
        # reassociations, 1.015 instead of 1.249, in about one run of four at 1 s); the
        # search from there is cheap, costs each candidate with the full model as it comes
        graphs_left = max(1, graphs - sat.steps)
        polish = search(sg, stages[-1], sat.model, max_graphs=graphs_left, seconds=left, also=[best.graph])
        best.offer(polish.best)
    r = _result(sat, sg, best.graph, t0, stopped)
    r.egraph_peak = tree.max_size  # type: ignore[attr-defined]
    return r


def _library_stage(
    sat: Saturation,
    sg: SGraph,
    stages: Sequence[Sequence[Rule]],
    best: _Best,
    graphs: int,
    t0: float,
    seconds: float,
    stopped: str,
) -> SearchResult:
    """The rest of the budget on the TASO search's last stage from the best so far and the
    input (as `staged_search`'s second stage, which starts from its merges' best)."""
    left = max(0.0, seconds - (time.perf_counter() - t0))
    got = search(sg, stages[-1], sat.model, max_graphs=graphs, seconds=left, also=[best.graph])
    best.offer(got.best)
    r = _result(sat, sg, best.graph, t0, stopped)
    r.egraph_peak = sat.eg.size  # type: ignore[attr-defined]
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
