"""The e-graph stages stop anywhere inside a round and keep what they did (work budgets, no timing).

A round of the structural merges on a loaded machine can take longer than the stage's share;
these tests stop it after a set number of candidates (`Saturation.work_limit`, which counts
the same on a loaded machine as on a quiet one) and check what a stopped round leaves: a
valid e-graph, a best-so-far graph with the input's values and no higher cost, a resumption
that redoes nothing, and an MCTS search whose answer is never worse than its stages'.
"""

from __future__ import annotations

import os
import sys

from optimizer.eqsat.mcts import MCTS
from optimizer.eqsat.saturate import Saturation
from optimizer.eqsat.search import mcts_search
from optimizer.superopt import pass_
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import builtin_rules
from optimizer.superopt.search import search

sys.path.insert(0, os.path.dirname(__file__))
from test_eqsat import qkv, same_values  # noqa: E402

#: a deadline that never ends a test's stage: the work limits do
NEVER = 3600.0


def whole_round() -> Saturation:
    """The merges' first round on the Q/K/V graph, run to its end (the reference)."""
    sat = Saturation(qkv(), builtin_rules(), CostModel(), node_limit=400)
    sat.run(NEVER, max_steps=1)
    assert sat.rounds == 1 and not sat.cut
    return sat


def test_a_round_stopped_by_the_work_limit_keeps_a_valid_egraph_and_a_best_so_far() -> None:
    """Stopped after three candidates: not saturated, an extractable e-graph whose graph and
    best-so-far keep the input's values and cost no more than the input."""
    sg = qkv()
    sat = Saturation(sg, builtin_rules(), CostModel(), node_limit=400, work_limit=3)
    assert sat.run(NEVER) == "work"  # never "saturated": the round did not end
    assert sat.cut and sat.rounds == 0 and sat.generated == 3
    start = sat.model.graph_cost(sg)
    assert sat.seen_best is not None  # a made candidate was costed as it came
    cost, made = sat.seen_best
    assert cost == sat.model.graph_cost(made) <= start
    same_values(sg, made)
    got, _ = sat.extract("ilp", NEVER)
    assert sat.model.graph_cost(got) <= min(start, cost)
    same_values(sg, got)


def test_a_stopped_round_resumes_where_it_stopped() -> None:
    """Raising the limit resumes the round: it ends with the same candidates tried and the
    same e-graph as a round that was never stopped (nothing redone, nothing skipped)."""
    ref = whole_round()
    sat = Saturation(qkv(), builtin_rules(), CostModel(), node_limit=400, work_limit=2)
    for limit in range(2, ref.generated + 1, 2):
        sat.work_limit = limit
        sat.run(NEVER, max_steps=1)
        assert sat.generated == limit and sat.cut and sat.rounds == 0
    sat.work_limit = None
    sat.run(NEVER, max_steps=1)
    assert sat.rounds == 1 and not sat.cut
    assert sat.generated == ref.generated
    assert sat.eg.size == ref.eg.size
    assert sat.seen_best is not None and ref.seen_best is not None
    assert sat.seen_best[0] == ref.seen_best[0]


def test_an_exhausted_work_limit_stops_mcts_before_any_action() -> None:
    """MCTS checks the same limit: with none left it stops at once, changing nothing."""
    sat = whole_round()
    sat.set_rules(pass_.stages()[-1])
    size, generated = sat.eg.size, sat.generated
    sat.work_limit = generated
    tree = MCTS(sat, budget=2, depth=1)
    assert tree.run(NEVER) == "work"
    assert sat.eg.size == size and sat.generated == generated and not tree.actions_applied


def test_mcts_search_under_a_work_budget_too_small_for_a_round_of_the_merges() -> None:
    """The merges' round is stopped inside (at half the work, then resumed to 60%): the search
    spends exactly that, returns a graph with the input's values, no costlier than the input,
    than the stopped round's best-so-far, or the TASO search's library stage from the input
    with the same graph budget (which it runs from its best and the input)."""
    sg = qkv()
    stages = pass_.stages()
    ref = whole_round()
    work = ref.generated // 2  # less than one round's candidates, even after resuming
    r = mcts_search(sg, stages, CostModel(), seconds=NEVER, graphs=3, work=work)
    assert r.stopped == "work"
    assert r.explored == 1  # one round started (and stopped inside: the generated count)
    assert r.generated == int(work * 0.6)
    assert r.cost <= r.start_cost
    same_values(sg, r.best)
    stopped = Saturation(sg, stages[0], CostModel(), node_limit=400, work_limit=int(work * 0.6))
    stopped.run(NEVER)
    assert stopped.seen_best is not None and r.cost <= stopped.seen_best[0]
    library = search(sg, stages[-1], CostModel(), max_graphs=3, seconds=NEVER)
    assert r.cost <= library.cost


def test_mcts_search_under_a_work_budget_is_deterministic_and_at_least_the_taso_searchs() -> None:
    """A work budget large enough for the merges and an MCTS step: the same answer twice (no
    clock decides anything), and no costlier than the TASO search with the same graph budget."""
    from optimizer.superopt.search import taso_search

    sg = qkv()
    stages = pass_.stages()
    work = 4 * whole_round().generated + 200
    a = mcts_search(sg, stages, CostModel(), seconds=NEVER, graphs=4, work=work)
    b = mcts_search(sg, stages, CostModel(), seconds=NEVER, graphs=4, work=work)
    assert a.cost == b.cost and a.best.key() == b.best.key()
    assert a.generated <= work
    taso = taso_search(sg, stages, CostModel(), seconds=NEVER, graphs=4)
    assert a.cost <= taso.cost * (1 + 1e-9) and a.cost < a.start_cost
    same_values(sg, a.best)


def test_a_round_applies_the_pool_rewrite_after_the_merges() -> None:
    """Pool-as-conv pays only combined with merges: a round stopped early holds merges first
    (the order the rules first change the e-graph in, one candidate at a time)."""
    from _support import mixed

    sat = Saturation(mixed(), pass_.stages()[0], CostModel(), node_limit=400, work_limit=0)
    order: list[str] = []
    while sat.rounds == 0:
        sat.work_limit = (sat.work_limit or 0) + 1
        sat.run(NEVER, max_steps=1)
        order += [name for name in sat.applied if name not in order]
    assert "pool-as-conv" in order and len(order) > 1
    assert order[-1] == "pool-as-conv"


def test_an_extraction_of_an_unchanged_egraph_reuses_its_optimal_ilp(monkeypatch) -> None:
    """An ILP optimal on this e-graph version is not solved again (MCTS that changed nothing
    leaves the final extraction its time); a changed e-graph is solved again."""
    import optimizer.eqsat.saturate as saturate

    sat = whole_round()
    calls: list[float] = []
    real = saturate.ilp

    def counting(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(saturate, "ilp", counting)
    first, _ = sat.extract("ilp", NEVER)
    solved = len(calls)
    assert solved >= 1
    again, _ = sat.extract("ilp", NEVER)
    assert len(calls) == solved  # every run was optimal: nothing solved again
    assert sat.model.graph_cost(again) == sat.model.graph_cost(first)
    sat.eg = sat.eg.copy()  # another e-graph (MCTS's next root): solved afresh
    sat.extract("ilp", NEVER)
    assert len(calls) == 2 * solved
