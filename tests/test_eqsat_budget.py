"""The e-graph searches under small budgets: extraction on the way, MCTS's skipped no-op actions."""

from __future__ import annotations

import os
import sys
import time

from optimizer.eqsat.mcts import MCTS
from optimizer.eqsat.saturate import Saturation
from optimizer.eqsat.search import _grow
from optimizer.superopt import pass_
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import builtin_rules

sys.path.insert(0, os.path.dirname(__file__))
from test_eqsat import qkv, same_values  # noqa: E402


def test_a_stage_returns_no_costlier_than_the_greedy_or_the_exact_extraction_of_its_egraph() -> None:
    """The stage keeps the cheapest of its extractions on the way and at the end (full model)."""
    sg = qkv()
    sat = Saturation(sg, pass_.stages()[-1], CostModel(), node_limit=400)
    got, stopped = _grow(sat, "ilp", 2.0, 20, time.perf_counter() + 2.0)
    assert stopped in ("saturated", "nodes", "time", "steps")
    cost = sat.model.graph_cost(got)
    assert cost <= sat.model.graph_cost(sat.extract("greedy")[0])
    assert cost <= sat.model.graph_cost(sat.extract("ilp", 2.0)[0])
    assert cost < sat.model.graph_cost(sg)  # the merge on folded weights pays
    same_values(sg, got)


def test_mcts_does_not_redo_the_saturated_merges_on_the_input() -> None:
    """After the merges saturate, their rewrites of the input are in the e-graph: MCTS matches
    structural rules on the e-graph's extraction only, and an action that would change nothing
    is refused before it copies the e-graph."""
    sg = qkv()
    sat = Saturation(sg, builtin_rules(), CostModel(), node_limit=400)
    assert sat.run(5.0) == "saturated"
    size = sat.eg.size
    tree = MCTS(sat, budget=2, depth=1, seed=0)
    tree.input_done = True
    graphs = tree.structural_graphs(sat.eg)
    assert all(g is not sg for g, _ in graphs)
    deadline = time.perf_counter() + 5.0
    for k in range(len(sat.rules)):
        assert tree.act(sat.eg, k, deadline) is None  # saturated: nothing new anywhere
    assert sat.eg.size == size
    tree.input_done = False
    assert any(g is sg for g, _ in tree.structural_graphs(sat.eg))


def test_mcts_keeps_the_cheapest_extraction_any_tree_node_reached() -> None:
    """A graph a rollout reached is a candidate of the result even when the chosen actions
    never lead the main e-graph there: it is an extraction (values unchanged, proven rules)."""
    sg = qkv()
    sat = Saturation(sg, pass_.stages()[-1], CostModel(), node_limit=300)
    tree = MCTS(sat, budget=4, depth=2, seed=0)
    tree.run(2.0)
    assert tree.best_seen is not None
    cost, g = tree.best_seen
    # the greedy's linear costs miss the merge's fused epilogue here, so it may be the input
    assert cost == sat.model.graph_cost(g) <= sat.model.graph_cost(sg)
    assert g.topo() is not None
    same_values(sg, g)
