"""MCTS against the TASO search on the small benchmark models: the same graph and cost model, each bounded by work."""

from __future__ import annotations

import os
import sys

import pytest

from ops.settings import SETTINGS
from optimizer.eqsat.search import mcts_search
from optimizer.superopt import pass_
from optimizer.superopt.cost import CostModel
from optimizer.superopt.search import taso_search

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_superopt import QUICK_SCALE, capture_graph  # noqa: E402

#: each search is bounded by work, not time, so the outcome does not depend on the machine's
#: load (with a 2 s budget each, a loaded CI run once stopped MCTS short of TASO on BERT):
#: TASO explores GRAPHS graphs per stage, MCTS tries at most WORK candidates and e-matches
#: (its TASO fallback stage GRAPHS graphs); CEILING seconds is a guard never reached here
#: (both searches take 0.5-7 s a model on 2 cores)
GRAPHS, WORK, CEILING = 5, 300, 600.0


@pytest.mark.parametrize("name", ["bert", "nasrnn", "nasnet_a"])
def test_mcts_is_at_least_as_good_as_the_taso_search(name: str) -> None:
    """The graph the pass would search, given to both searches: MCTS's cost is at most TASO's.

    (How long each search ran is not asserted: tests make no timed assertions; the benchmark
    reports search times.)"""
    with SETTINGS.override(superopt=True, superopt_search="taso"):
        sg = capture_graph(name, QUICK_SCALE[name])
    assert sg is not None  # the pass's condition holds for these models
    stages = pass_.stages()
    taso = taso_search(sg, stages, CostModel(), seconds=CEILING, graphs=GRAPHS)
    mcts = mcts_search(sg, stages, CostModel(), seconds=CEILING, graphs=GRAPHS, work=WORK)
    assert taso.start_cost == mcts.start_cost
    assert mcts.cost <= taso.cost * (1 + 1e-9), (name, taso.speedup, mcts.speedup)
    assert mcts.cost < mcts.start_cost  # each of these graphs has a merge that pays
