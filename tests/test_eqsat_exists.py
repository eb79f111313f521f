"""MCTS's pruning question, "has this rule a fresh match here?" (EMatcher.possible / exists,
Saturation.ematch_exists), against the full e-matcher; and the memo of view_of_slice."""

from __future__ import annotations

import time

import numpy as np

from ops.views import View
from optimizer.eqsat.ematch import index_of
from optimizer.eqsat.saturate import Saturation, _done_key
from optimizer.superopt import apply as apply_mod
from optimizer.superopt import pass_
from optimizer.superopt.apply import SGraph
from optimizer.superopt.cost import CostModel


def mixed(n: int = 6) -> SGraph:
    """Matmuls of one input (one under a ReLU), a product chain, pooled convolutions."""
    f64 = np.float64
    sg = SGraph()
    x = sg.leaf("input", (4, n), f64)
    zero = sg.leaf("scalar", (), f64, value=0.0)
    ws = [sg.leaf("weight", (n, n), f64) for _ in range(3)]
    ys = [sg.add("matmul", [x, w]) for w in ws]
    ys[0] = sg.add("maximum", [ys[0], zero])
    chain = sg.add("matmul", [sg.add("matmul", [ys[1], ws[2]]), ws[0]])
    img = sg.leaf("input", (1, 2, 5, 5), f64)
    convs = [sg.add("conv2d", [img, sg.leaf("weight", (2, 2, 3, 3), f64)], {"padding": 1}) for _ in range(2)]
    pools = [sg.add("avg_pool2d", [c], {"kernel_size": 3, "stride": 1, "padding": 1}) for c in convs]
    sg.outputs = [sg.add("add", [sg.add("add", [ys[0], ys[2]]), chain]), sg.add("add", pools)]
    return sg


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
