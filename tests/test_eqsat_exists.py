"""MCTS's pruning question, "has this rule a fresh match here?" (EMatcher.possible / exists,
Saturation.ematch_exists), against the full e-matcher; and the memo of view_of_slice."""

from __future__ import annotations

import time

import numpy as np
from _support import mixed

from ops.views import View
from optimizer.eqsat.ematch import index_of
from optimizer.eqsat.saturate import Saturation, _done_key
from optimizer.superopt import apply as apply_mod
from optimizer.superopt import pass_
from optimizer.superopt.cost import CostModel


def fresh_matches(sat: Saturation, rule) -> int:
    em = sat.ematchers[rule.name]
    return sum(
        1 for m in em.matches(sat.eg, limit=10_000) if _done_key(sat.eg, rule.name, m) not in sat.eg.done
    )


def test_exists_agrees_with_the_full_matcher_before_and_after_a_step() -> None:
    sat = Saturation(mixed(), pass_.stages()[-1], CostModel())
    for stage in range(2):
        ix = index_of(sat.eg)
        some = 0
        for rule in sat.rules:
            em = sat.ematchers.get(rule.name)
            if em is None:
                continue
            n = fresh_matches(sat, rule)
            # `possible` is a necessary condition: an operator the source reads is missing
            assert em.possible(ix) or n == 0, rule.name
            # 32 candidates tried: on this small e-graph that is all of them
            assert sat.ematch_exists(sat.eg, rule) == (n > 0), (stage, rule.name)
            some += n > 0
        assert some >= 5
        sat.step(time.perf_counter() + 30)


def test_a_rule_whose_matches_are_all_instantiated_is_not_offered() -> None:
    sat = Saturation(mixed(), pass_.stages()[-1], CostModel())
    rule = next(r for r in sat.rules if r.name in sat.ematchers and fresh_matches(sat, r))
    ms = sat.ematch_matches(sat.eg, rule, limit=10_000)
    sat.instantiate(sat.eg, rule, ms, time.perf_counter() + 30, limit=10_000)
    if sat.eg.dirty:
        sat.eg.rebuild()
    assert sat.ematch_exists(sat.eg, rule) == (fresh_matches(sat, rule) > 0)


def test_view_of_slice_is_remembered_and_unchanged() -> None:
    apply_mod._COMPOSED.clear()
    view = View((2, 3), (3, 1), 0)
    cut = {"axis": 1, "start": 2}
    first = apply_mod.view_of_slice(view, (2, 3), (2, 6), cut)
    assert first == apply_mod._compose(view, (2, 3), (2, 6), cut)
    assert len(apply_mod._COMPOSED) == 1
    assert apply_mod.view_of_slice(view, (2, 3), (2, 6), cut) is first
    # the composed view reads the same elements as the view of the copied slice
    whole = np.arange(12).reshape(2, 6)
    piece = np.ascontiguousarray(whole[:, 2:5]).reshape(-1)
    want = np.lib.stride_tricks.as_strided(piece, view.shape, [s * 8 for s in view.strides])
    got = np.lib.stride_tricks.as_strided(
        whole.reshape(-1)[first.offset :], first.shape, [s * 8 for s in first.strides]
    )
    np.testing.assert_array_equal(got, want)
