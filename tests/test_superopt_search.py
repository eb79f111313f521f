"""The superoptimizer's search: values never change, the benchmark graphs' small cases, the pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg
from cache import key as keymod
from cache.graph import Graph
from optimizer.superopt import pass_
from optimizer.superopt.apply import SGraph
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import builtin_rules, pattern_rule
from optimizer.superopt.search import search


def close32(got: np.ndarray, want: np.ndarray) -> None:
    """float32 results of re-associated matmuls: relative error, and absolute error on the scale of
    the largest value (an element that cancels keeps only the rounding of its terms)."""
    scale = float(np.abs(want).max(initial=0.0))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=max(1e-5, 2e-6 * scale))


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test starts with an empty cache in its own directory and the pass on."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAZYGRAPH_CACHE", raising=False)
    monkeypatch.delenv("LAZYGRAPH_OPTIMIZE", raising=False)
    monkeypatch.delenv("LAZYGRAPH_SUPEROPT", raising=False)
    lg.cache.clear(disk=False)
    errors = pass_.COUNTS["errors"]
    yield
    lg.cache.clear(disk=False)
    assert pass_.COUNTS["errors"] == errors, pass_.LAST.get("error")  # the pass hides its failures


def feeds_for(sg: SGraph, seed: int = 0) -> dict[int, np.ndarray]:
    """Random values for every input and weight of a search graph."""
    rng = np.random.default_rng(seed)
    return {
        i: rng.standard_normal(n.shape).astype(n.dtype)
        for i, n in sg.nodes.items()
        if n.op in ("input", "weight")
    }


def same_values(a: SGraph, b: SGraph, rtol: float = 1e-9) -> None:
    """b computes what a computes (float tolerance: rewrites reassociate)."""
    feeds = feeds_for(a)
    for x, y in zip(a.evaluate(feeds), b.evaluate(feeds)):
        assert x.shape == y.shape and x.dtype == y.dtype
        # an element that cancels keeps the rounding of its terms: absolute error on their scale
        scale = float(np.abs(x).max(initial=1.0)) if x.dtype.kind == "f" else 1.0
        np.testing.assert_allclose(y, x, rtol=rtol, atol=rtol * max(1.0, scale))


# -- random graphs: the search never changes values ------------------------------------------------


@st.composite
def merge_graphs(draw) -> SGraph:
    """Small float64 graphs where merges, hoists and sums of matmuls apply (and sometimes not)."""
    sg = SGraph()
    zero = sg.leaf("scalar", (), np.float64, value=0.0)
    outs: list[int] = []
    if draw(st.booleans()):  # matmuls sharing an input
        m, k = draw(st.integers(1, 4)), draw(st.integers(1, 5))
        x = sg.leaf(draw(st.sampled_from(["input", "weight"])), (m, k), np.float64)
        ys = []
        for _ in range(draw(st.integers(1, 4))):
            w = sg.leaf(draw(st.sampled_from(["weight", "input"])), (k, draw(st.integers(1, 4))), np.float64)
            y = sg.add("matmul", [x, w])
            act = draw(st.sampled_from(["none", "relu", "tanh"]))
            y = sg.add("maximum", [y, zero]) if act == "relu" else sg.add("tanh", [y]) if act == "tanh" else y
            ys.append(y)
        outs.append(sg.add("concat", ys, {"axis": 1}) if len(ys) > 1 and draw(st.booleans()) else ys[0])
        outs.extend(ys[1:])
    if draw(st.booleans()):  # convolutions sharing an input
        c, hw = draw(st.integers(1, 3)), draw(st.integers(3, 6))
        x = sg.leaf("input", (1, c, hw, hw), np.float64)
        ys = []
        for _ in range(draw(st.integers(1, 3))):
            k = draw(st.sampled_from([1, 3]))
            ins = [x, sg.leaf("weight", (draw(st.integers(1, 3)), c, k, k), np.float64)]
            y = sg.add("conv2d", ins, {"padding": k // 2})
            ys.append(sg.add("maximum", [y, zero]) if draw(st.booleans()) else y)
        outs.append(sg.add("concat", ys, {"axis": 1}) if len(ys) > 1 else ys[0])
    if not outs or draw(st.booleans()):  # a sum of two matmuls
        m, n = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        a = sg.add("matmul", [sg.leaf("input", (m, 2), np.float64), sg.leaf("weight", (2, n), np.float64)])
        b = sg.add("matmul", [sg.leaf("input", (m, 3), np.float64), sg.leaf("weight", (3, n), np.float64)])
        outs.append(sg.add("add", [a, b]))
    sg.outputs = outs
    return sg


@settings(deadline=None)
@given(merge_graphs(), st.sampled_from(["analytic", "unit"]))
def test_search_never_changes_values(sg: SGraph, mode: str) -> None:
    result = search(sg, builtin_rules(), CostModel(mode), max_graphs=30, seconds=5)
    assert result.cost <= result.start_cost
    assert result.best.topo() is not None
    same_values(sg, result.best)


# -- the small cases of benchmark_models.md --------------------------------------------------------


def test_phase_ordering_a_times_2_over_2_with_a_tight_node_limit() -> None:
    sg = SGraph()
    a = sg.leaf("input", (3, 4), np.float64)
    two, two_again = (sg.leaf("scalar", (), np.float64, value=2) for _ in range(2))
    sg.outputs = [sg.add("divide", [sg.add("multiply", [a, two]), two_again])]
    rules = [
        pattern_rule("grow", "(multiply ?x ?c)", "(multiply (multiply ?x ?c) 1)"),  # a distraction
        pattern_rule("div-to-mul", "(divide ?x 2)", "(multiply ?x 0.5)"),
        pattern_rule("mul-assoc", "(multiply (multiply ?x ?a) ?b)", "(multiply ?x (multiply ?a ?b))"),
        pattern_rule("mul-one", "(multiply ?x 1)", "?x", ["(kind ?x f)"]),
    ]
    result = search(sg, rules, CostModel("unit"), max_ops=2, max_graphs=100)
    # the limit leaves no room for growing first; the search still finds `a`
    assert result.best.op_count() == 0 and result.best.outputs == [a]
    assert result.rules == {"div-to-mul": 1, "mul-assoc": 1, "mul-one": 1}
    same_values(sg, result.best)


def test_residual_block_counts_the_shared_conv_once() -> None:
    sg = SGraph()
    x = sg.leaf("input", (1, 2, 5, 5), np.float64)
    zero = sg.leaf("scalar", (), np.float64, value=0.0)
    c = sg.add("conv2d", [x, sg.leaf("weight", (2, 2, 3, 3), np.float64)], {"padding": 1})
    sg.outputs = [sg.add("add", [sg.add("maximum", [c, zero]), c])]
    unit = CostModel("unit")
    assert unit.graph_cost(sg) == 3  # conv, relu, add: the conv is one step though read twice
    result = search(sg, builtin_rules(), unit)
    assert result.cost <= 3
    same_values(sg, result.best)


def naive_tree_cost(sg: SGraph, i: int) -> int:
    """What a greedy extractor that costs each use separately says (shared subgraphs again)."""
    n = sg.nodes[i]
    return 0 if n.leaf else 1 + sum(naive_tree_cost(sg, c) for c in n.inputs)


def test_nested_concatenations_as_in_nasnet_cost_7_not_15() -> None:
    sg = SGraph()
    x = sg.leaf("input", (2, 3), np.float64)

    def op(name: str, ins: list[int]) -> int:  # as recorded (no normalization)
        shape = (2, sum(sg.nodes[i].shape[1] for i in ins)) if name == "concat" else (2, 3)
        return sg.raw(name, ins, {"axis": 1} if name == "concat" else {}, shape, np.float64, -1)

    a = op("tanh", [x])
    b = op("sigmoid", [a])
    c = op("concat", [x, b])
    d = op("concat", [c, b])
    e = op("concat", [b, c])
    f = op("concat", [a, e])
    sg.outputs = [op("concat", [f, d])]
    assert CostModel("unit").graph_cost(sg) == 7
    assert naive_tree_cost(sg, sg.outputs[0]) == 15
    result = search(sg, builtin_rules(), CostModel("unit"))
    assert result.cost <= 7
    same_values(sg, result.best)


def qkv(weights: str) -> SGraph:
    """x @ Wq, x @ Wk, x @ Wv with the W as weights (foldable) or as inputs."""
    sg = SGraph()
    x = sg.leaf("input", (64, 256), np.float32)
    sg.outputs = [sg.add("matmul", [x, sg.leaf(weights, (256, 256), np.float32)]) for _ in range(3)]
    return sg


def test_qkv_matmuls_merge_when_the_weight_concat_folds() -> None:
    sg = qkv("weight")
    result = search(sg, builtin_rules(), CostModel())
    ops = sorted(n.op for n in result.best.nodes.values() if not n.leaf)
    assert ops == ["concat", "matmul", "slice_axis", "slice_axis", "slice_axis"]
    assert result.cost < result.start_cost
    same_values(sg, result.best, rtol=1e-5)


def test_qkv_merge_does_not_pay_when_the_weights_are_not_constant() -> None:
    sg = qkv("input")
    result = search(sg, builtin_rules(), CostModel())
    assert result.best is sg and result.cost == result.start_cost


def conv_pair(side: int) -> SGraph:
    """A 1x1 and a 3x3 convolution (with bias and ReLU) of one input, concatenated."""
    sg = SGraph()
    x = sg.leaf("input", (1, 8, side, side), np.float32)
    zero = sg.leaf("scalar", (), np.float32, value=0.0)
    outs = []
    for k in (1, 3):
        w, b = sg.leaf("weight", (8, 8, k, k), np.float32), sg.leaf("weight", (8,), np.float32)
        outs.append(sg.add("maximum", [sg.add("conv2d", [x, w, b], {"padding": k // 2}), zero]))
    sg.outputs = [sg.add("concat", outs, {"axis": 1})]
    return sg


def test_1x1_and_3x3_convolutions_merge_into_one_with_the_1x1_enlarged() -> None:
    sg = conv_pair(6)
    result = search(sg, builtin_rules(), CostModel())
    ops = sorted(n.op for n in result.best.nodes.values() if not n.leaf)
    # pad (enlarge) and the kernel/bias concats are weight-only: folded, free at steady state
    assert ops == ["concat", "concat", "conv2d", "maximum", "pad"]
    conv = next(n for n in result.best.nodes.values() if n.op == "conv2d")
    assert result.best.nodes[conv.inputs[1]].shape == (16, 8, 3, 3)
    assert result.cost < result.start_cost
    same_values(sg, result.best, rtol=1e-5)


def test_enlarging_a_1x1_kernel_does_not_pay_on_large_images_here() -> None:
    # the merged convolution does 9x the work of the 1x1 on a CPU that has no launches to save
    sg = conv_pair(64)
    assert search(sg, builtin_rules(), CostModel()).best is sg


# -- the pass ---------------------------------------------------------------------------------------


def param(rng: np.random.Generator, *shape: int) -> lg.Array:
    """A parameter (a constant for the fold pass)."""
    return lg.nn.Parameter(lg.asarray(rng.standard_normal(shape).astype(np.float32)))


def attention_inputs(seed: int) -> tuple[lg.Array, list[lg.Array]]:
    rng = np.random.default_rng(seed)
    x = lg.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    return x, [param(rng, 32, 32) for _ in range(3)]


def attention(x: lg.Array, ws: list[lg.Array]) -> lg.Array:
    with lg.no_grad():
        q, k, v = (x @ w for w in ws)
        return (q @ k.T) @ v


def test_pass_rewrites_once_per_structure_and_keeps_values() -> None:
    before = dict(pass_.COUNTS)
    x, ws = attention_inputs(0)
    got = attention(x, ws).numpy()
    xn, wn = x.numpy(), [w.numpy() for w in ws]
    want = ((xn @ wn[0]) @ (xn @ wn[1]).T) @ (xn @ wn[2])
    close32(got, want)
    assert pass_.COUNTS["searches"] == before["searches"] + 1
    assert pass_.COUNTS["rewrites"] == before["rewrites"] + 1
    assert pass_.LAST["rules"].get("merge-matmul", 0) >= 1
    # same structure and sizes, new values: a cache hit, no search
    x2, ws2 = attention_inputs(1)
    got2 = attention(x2, ws2).numpy()
    xn, wn = x2.numpy(), [w.numpy() for w in ws2]
    close32(got2, ((xn @ wn[0]) @ (xn @ wn[1]).T) @ (xn @ wn[2]))
    assert pass_.COUNTS["searches"] == before["searches"] + 1
    assert lg.cache.stats()["hits"] >= 1


def test_frozen_and_marked_weights_merge_like_parameters() -> None:
    """Weights are told from inputs by the key's static flag, not by requires_grad."""
    rng = np.random.default_rng(7)
    for n, make in ((256, lambda: param(rng, 256, 256).requires_grad_(False)), (192, None)):
        x = lg.asarray(rng.standard_normal((16, n)).astype(np.float32))
        if make is None:
            ws = [
                lg.mark_static(lg.asarray(rng.standard_normal((n, n)).astype(np.float32))) for _ in range(3)
            ]
        else:
            ws = [make() for _ in range(3)]
        searches = pass_.COUNTS["searches"]
        got = attention(x, ws).numpy()
        xn, wn = x.numpy(), [w.numpy() for w in ws]
        want = ((xn @ wn[0]) @ (xn @ wn[1]).T) @ (xn @ wn[2])
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())
        assert pass_.COUNTS["searches"] == searches + 1
        assert pass_.LAST["rules"].get("merge-matmul", 0) >= 1


def test_pass_result_survives_the_disk_cache() -> None:
    x, ws = attention_inputs(2)
    first = attention(x, ws).numpy()
    lg.cache.clear(disk=False)  # the entry is read back from disk, recipes and all
    searches = pass_.COUNTS["searches"]
    again = attention(x, ws).numpy()
    assert pass_.COUNTS["searches"] == searches
    np.testing.assert_array_equal(again, first)


def test_pass_is_off_with_the_environment_variable(monkeypatch) -> None:
    monkeypatch.setenv("LAZYGRAPH_SUPEROPT", "0")
    x, ws = attention_inputs(3)
    searches = pass_.COUNTS["searches"]
    attention(x, ws).numpy()
    assert pass_.COUNTS["searches"] == searches


def test_pass_leaves_training_graphs_alone() -> None:
    x, ws = attention_inputs(4)
    loss = ((x @ ws[0]) * (x @ ws[1])).sum()
    w = keymod.walk([n.node for n in lg.grad(loss, ws[:2])])
    assert not pass_.worth_searching(Graph(w))


# -- rules in the library's format ------------------------------------------------------------------


def library_rule(name: str, source: list[str], target: list[str], status: str = "proven", **kw) -> object:
    from optimizer.superopt.rulefile import rule_from_json

    inputs = kw.pop("inputs", {"?x": {"kind": "tensor", "rank": 2}, "?y": {"kind": "tensor", "rank": 2}})
    d = {"name": name, "inputs": inputs, "source": source, "target": target, "conditions": kw.pop("when", [])}
    return rule_from_json({**d, "shapes": kw.pop("shapes", []), "status": status, "proof": {}})


def test_library_rules_match_lazygraph_operators() -> None:
    from optimizer.superopt.adapt import SKIPPED, from_library

    three = {
        "?x": {"kind": "tensor", "rank": 2},
        "?y": {"kind": "tensor", "rank": 2},
        "?z": {"kind": "tensor", "rank": 2},
    }
    rules = from_library(
        [
            library_rule(
                "matmul-concat-weights",
                ["(matmul ?x ?y)", "(matmul ?x ?z)"],
                ["(split0 1 (matmul ?x (concat 1 ?y ?z)))", "(split1 1 (matmul ?x (concat 1 ?y ?z)))"],
                inputs=three,
            ),
            library_rule("relu-concat", ["(concat 1 (relu ?x) (relu ?y))"], ["(relu (concat 1 ?x ?y))"]),
            library_rule("never-proven", ["(relu ?x)"], ["?x"], status="unknown"),
            library_rule("wrong", ["(relu ?x)"], ["?x"], status="refuted"),
        ]
    )
    assert [r.name for r in rules] == ["lib:matmul-concat-weights", "lib:relu-concat"]
    assert SKIPPED["never-proven"] == "status unknown" and SKIPPED["wrong"] == "status refuted"
    sg = SGraph()
    x = sg.leaf("input", (4, 8), np.float64)
    zero = sg.leaf("scalar", (), np.float64, value=0.0)
    a = sg.add("matmul", [x, sg.leaf("weight", (8, 3), np.float64)])
    b = sg.add("matmul", [x, sg.leaf("weight", (8, 5), np.float64)])
    sg.outputs = [sg.add("concat", [sg.add("maximum", [a, zero]), sg.add("maximum", [b, zero])], {"axis": 1})]
    result = search(sg, rules, CostModel("unit"))
    assert result.rules == {"lib:matmul-concat-weights": 1, "lib:relu-concat": 1}
    assert result.cost == 2  # one matmul on folded weights, one ReLU
    same_values(sg, result.best)


def test_library_rules_respect_split_positions() -> None:
    from optimizer.superopt.adapt import from_library

    # split0 of concat(x, y) is x: only where the slice ends at x's width
    (rule,) = from_library([library_rule("split-concat", ["(split0 1 (concat 1 ?x ?y))"], ["?x"])])
    for stop, applies in ((3, True), (2, False)):
        sg = SGraph()
        x, y = sg.leaf("input", (2, 3), np.float64), sg.leaf("input", (2, 4), np.float64)
        c = sg.raw("concat", [x, y], {"axis": 1}, (2, 7), np.float64, -1)
        sg.outputs = [
            sg.raw("slice_axis", [c], {"axis": 1, "start": 0, "stop": stop}, (2, stop), np.float64, -1)
        ]
        result = search(sg, [rule], CostModel("unit"))
        assert (result.best.outputs == [x]) is applies
        same_values(sg, result.best)


@settings(deadline=None, max_examples=20)
@given(merge_graphs())
def test_search_with_the_whole_library_never_changes_values(sg: SGraph) -> None:
    result = search(sg, pass_.rules(), CostModel(), max_graphs=10, seconds=5)
    assert result.cost <= result.start_cost
    same_values(sg, result.best)


def test_pass_applies_library_rules_to_weight_products() -> None:
    # (x @ A) @ B -> x @ (A @ B): the library's matmul reassociation, A @ B folded once
    rng = np.random.default_rng(5)
    x = lg.asarray(rng.standard_normal((8, 64)).astype(np.float32))
    a, b, c = param(rng, 64, 64), param(rng, 64, 64), param(rng, 64, 64)
    with lg.no_grad():
        y = ((x @ a) @ b) + x @ c
    got = y.numpy()
    xn, an, bn, cn = x.numpy(), a.numpy(), b.numpy(), c.numpy()
    close32(got, (xn @ an) @ bn + xn @ cn)
    assert any(k.startswith("lib:") for k in pass_.LAST["rules"])


# -- search-graph normalizations ---------------------------------------------------------------------


@settings(deadline=None)
@given(st.data())
def test_a_view_of_a_slice_is_one_view_of_the_whole(data) -> None:
    from ops.views import contiguous, materialize, permute_view, reshape_view, slice_view
    from optimizer.superopt.apply import view_of_slice

    whole = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    axis = data.draw(st.integers(0, len(whole) - 1))
    start = data.draw(st.integers(0, whole[axis] - 1))
    stop = data.draw(st.integers(start + 1, whole[axis]))
    piece = whole[:axis] + (stop - start,) + whole[axis + 1 :]
    view = contiguous(piece)
    kind = data.draw(st.sampled_from(["permute", "reshape", "slice"]))
    if kind == "permute":
        view = permute_view(view, tuple(data.draw(st.permutations(range(len(piece))))))
    elif kind == "reshape":
        view = reshape_view(view, (int(np.prod(piece)),)) or view
    else:
        view = slice_view(view, tuple(slice(0, None, data.draw(st.integers(1, 2))) for _ in piece))
    base = np.arange(int(np.prod(whole)), dtype=np.float64).reshape(whole)
    cut = {"axis": axis, "start": start, "stop": stop}
    expect = materialize(np.take(base, range(start, stop), axis=axis), view)
    composed = view_of_slice(view, piece, whole, cut)
    if composed is not None:
        np.testing.assert_array_equal(materialize(base, composed), expect)


def test_a_rewrite_that_read_a_scalar_is_not_replayed_for_another_value() -> None:
    rng = np.random.default_rng(6)
    x = lg.asarray(rng.standard_normal((8, 16)).astype(np.float32))
    a, b = param(rng, 16, 16), param(rng, 16, 16)
    for s in (0.0, 1.0):  # maximum(., 0) is a ReLU the rules move; maximum(., 1) is not
        with lg.no_grad():
            y = lg.concat([lg.maximum(x @ a, s), lg.maximum(x @ b, s)], axis=1)
        want = np.concatenate([np.maximum(x.numpy() @ a.numpy(), s), np.maximum(x.numpy() @ b.numpy(), s)], 1)
        close32(y.numpy(), want)


def test_views_that_change_rank_are_read_safely() -> None:
    rng = np.random.default_rng(7)
    x = lg.positive(lg.asarray(rng.standard_normal(6).astype(np.float32)))
    w1, w2 = param(rng, 3, 4), param(rng, 3, 4)
    with lg.no_grad():
        y = x.reshape(2, 3)  # a view whose base has another rank
        out = lg.concat([y @ w1, y @ w2], axis=1)
    yn = x.numpy().reshape(2, 3)
    np.testing.assert_allclose(out.numpy(), np.concatenate([yn @ w1.numpy(), yn @ w2.numpy()], 1), rtol=1e-5)
