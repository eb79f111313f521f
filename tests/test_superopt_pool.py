"""Average pooling as a depthwise convolution (optimizer/superopt/pool_conv.py) and the grouped
convolution kernel (ops/conv.py's conv_grouped): values against the reference kernels."""

from __future__ import annotations

import time

import numpy as np
import pytest

import lazygraph as lg
from ops.base import REGISTRY
from ops.conv import conv_grouped
from ops.window import conv2d_forward
from optimizer.superopt import cost as cost_module
from optimizer.superopt import pass_
from optimizer.superopt.apply import SGraph
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import Context, builtin_rules
from optimizer.superopt.pool_conv import PoolAsConv, pool_rules
from optimizer.superopt.search import search
from optimizer.superopt.verify import verify_rule

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend


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
    assert pass_.COUNTS["errors"] == errors, pass_.LAST.get("error")


@pytest.fixture(autouse=True)
def _rewrite_priced_to_pay(monkeypatch) -> None:  # noqa: ANN001
    """Depthwise convolutions at the GEMM rate, pools at their memory passes: the built-in model
    then takes pool-as-conv, whose machinery and values these tests check (at the measured
    rates, cost.DEPTH_FLOPS and cost.POOL_SCALE, the fast average pool is kept)."""
    monkeypatch.setattr(cost_module, "DEPTH_FLOPS", 2.0e10)
    monkeypatch.setattr(cost_module, "POOL_SCALE", 1.0)


def test_the_pool_rule_states_a_proven_instance() -> None:
    (rule,) = pool_rules()
    assert rule.matcher is not None and rule.origin == "builtin"
    assert verify_rule(rule, timeout_ms=5000).status == "proven"


POOLS = [  # (channels, side, kernel, stride, padding, count_include_pad)
    (3, 7, 3, 1, 1, True),
    (5, 8, 3, 2, 1, True),
    (4, 9, 5, 1, 2, True),
    (2, 6, 2, 2, 0, False),  # no padding: every window is whole, the divisor is fixed
]


def pools_graph(c: int, side: int, k: int, s: int, p: int, inc: bool) -> SGraph:
    sg = SGraph()
    x = sg.leaf("input", (1, c, side, side), np.float32)
    attrs = {"kernel_size": (k, k), "stride": (s, s), "padding": (p, p), "count_include_pad": inc}
    y = sg.add("avg_pool2d", [x], attrs)
    sg.outputs = [sg.add("add", [y, y])]
    return sg


@pytest.mark.parametrize("case", POOLS)
def test_a_pool_rewritten_as_a_convolution_keeps_its_values(case) -> None:
    sg = pools_graph(*case)
    (g,) = PoolAsConv().rewrites(Context(sg, sg.topo()))
    conv = next(n for n in g.nodes.values() if n.op == "conv2d")
    assert conv.attrs["groups"] == case[0] and not any(n.op == "avg_pool2d" for n in g.nodes.values())
    x = np.random.default_rng(0).standard_normal((1, case[0], case[1], case[1])).astype(np.float32)
    feeds = {i: x for i, n in sg.nodes.items() if n.op == "input"}
    np.testing.assert_allclose(g.evaluate(feeds)[0], sg.evaluate(feeds)[0], rtol=1e-5, atol=1e-6)


def test_a_pool_dividing_by_its_real_elements_is_not_rewritten() -> None:
    sg = pools_graph(3, 7, 3, 1, 1, False)
    assert list(PoolAsConv().rewrites(Context(sg, sg.topo()))) == []


def test_the_search_turns_every_pool_into_a_convolution_when_pools_cost_more() -> None:
    sg = SGraph()
    x = sg.leaf("input", (1, 16, 12, 12), np.float32)
    attrs = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "count_include_pad": True}
    a = sg.add("avg_pool2d", [x], attrs)
    b = sg.add("avg_pool2d", [sg.add("maximum", [x, sg.leaf("const", (), np.float32, value=0)])], attrs)
    sg.outputs = [sg.add("add", [a, b])]
    cm = CostModel()
    cm.pool_scale = 40.0  # lazygraph's pools measure about 40x their memory passes here
    result = search(sg, builtin_rules() + pool_rules(), cm)
    ops = [n.op for n in result.best.nodes.values()]
    assert "avg_pool2d" not in ops and ops.count("conv2d") == 2 and result.cost < result.start_cost
    xv = np.random.default_rng(1).standard_normal((1, 16, 12, 12)).astype(np.float32)
    feeds = {x: xv}
    np.testing.assert_allclose(result.best.evaluate(feeds)[0], sg.evaluate(feeds)[0], rtol=1e-5, atol=1e-6)


def test_the_pass_rewrites_pools_of_a_model_and_keeps_its_values(monkeypatch) -> None:
    rng = np.random.default_rng(2)
    xn = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    wn = (0.2 * rng.standard_normal((8, 8, 1, 1))).astype(np.float32)
    F = lg.nn.functional

    def model(x: lg.Array, w: lg.Array) -> lg.Array:
        with lg.no_grad():
            y = F.relu(F.conv2d(x, w))
            return F.avg_pool2d(y, 3, stride=1, padding=1) + F.avg_pool2d(x, 3, stride=2, padding=1).sum()

    # the environment, as test_eqsat does (a settings override would outlive the test)
    monkeypatch.setenv("LAZYGRAPH_SUPEROPT", "0")
    want = model(lg.asarray(xn), lg.nn.Parameter(lg.asarray(wn))).numpy()
    monkeypatch.setenv("LAZYGRAPH_SUPEROPT", "1")
    lg.cache.clear()  # the plan without the pass is on disk too
    before = pass_.COUNTS["searches"]
    got = model(lg.asarray(xn), lg.nn.Parameter(lg.asarray(wn))).numpy()
    assert pass_.COUNTS["searches"] == before + 1  # a graph with pools is searched
    assert pass_.LAST["rules"].get("pool-as-conv", 0) >= 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_plan_with_the_pool_kernel_survives_the_disk_cache() -> None:
    """The folded `full` kernel the pass emits is read back from disk with the plan."""
    rng = np.random.default_rng(6)
    xn = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    wn = (0.2 * rng.standard_normal((8, 8, 1, 1))).astype(np.float32)
    F = lg.nn.functional

    def model() -> np.ndarray:
        with lg.no_grad():
            y = F.relu(F.conv2d(lg.asarray(xn), lg.nn.Parameter(lg.asarray(wn))))
            return F.avg_pool2d(y, 3, stride=1, padding=1).numpy()

    first = model()
    assert pass_.LAST["rules"].get("pool-as-conv", 0) >= 1
    lg.cache.clear(disk=False)  # the entry is read back from disk, recipes and all
    searches = pass_.COUNTS["searches"]
    again = model()
    assert pass_.COUNTS["searches"] == searches
    np.testing.assert_array_equal(again, first)
    want = REGISTRY["avg_pool2d"].kernel(
        np.maximum(np.einsum("oc,nchw->nohw", wn[:, :, 0, 0], xn), 0),
        kernel_size=(3, 3),
        stride=(1, 1),
        padding=(1, 1),
        count_include_pad=True,
    )
    np.testing.assert_allclose(again, want, rtol=1e-5, atol=1e-5)


GROUPED = [  # (x shape, w shape, groups, stride, padding, dilation)
    ((2, 6, 7, 7), (6, 1, 3, 3), 6, 1, 1, 1),  # depthwise
    ((1, 8, 9, 9), (8, 1, 5, 5), 8, 2, 2, 1),  # depthwise, strided
    ((1, 4, 8, 8), (4, 1, 3, 3), 4, 1, 2, 2),  # depthwise, dilated
    ((2, 8, 6, 6), (12, 2, 3, 3), 4, 1, 1, 1),  # grouped, 3 outputs per group
    ((1, 16, 5, 5), (16, 4, 3, 3), 4, 2, 1, 1),  # grouped, strided
    ((1, 6, 4, 4), (12, 1, 1, 1), 6, 1, 0, 1),  # channel multiplier 2, 1x1
]


@pytest.mark.parametrize("case", GROUPED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_grouped_convolution_kernel_against_the_reference(case, dtype) -> None:
    xs, ws, g, s, p, d = case
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    for bias in (None, b):
        want = conv2d_forward(x, w, bias, (s, s), (p, p), (d, d), g)
        got = conv_grouped(x, w, bias, (s, s), (p, p), (d, d), g)
        assert got.shape == want.shape and got.dtype == want.dtype and got.flags.c_contiguous
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_a_depthwise_pool_kernel_convolution_is_the_average_pool() -> None:
    x = np.random.default_rng(4).standard_normal((1, 5, 6, 6)).astype(np.float32)
    w = np.full((5, 1, 3, 3), 1 / 9, np.float32)
    pool = REGISTRY["avg_pool2d"].kernel(
        x, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), count_include_pad=True
    )
    np.testing.assert_allclose(
        conv_grouped(x, w, None, (1, 1), (1, 1), (1, 1), 5), pool, rtol=1e-5, atol=1e-6
    )


def pools_and_merges() -> SGraph:
    """Two 1x1 convolutions with ReLU of one input (a merge that pays) beside average pools."""
    sg = SGraph()
    x = sg.leaf("input", (1, 512, 8, 8), np.float32)
    zero = sg.leaf("const", (), np.float32, value=0)
    ys = []
    for _ in range(2):
        w = sg.leaf("weight", (192, 512, 1, 1), np.float32)
        ys.append(sg.add("maximum", [sg.add("conv2d", [x, w]), zero]))
    attrs = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "count_include_pad": True}
    pooled = sg.add("avg_pool2d", [ys[0]], attrs)
    sg.outputs = [sg.add("add", [sg.add("add", [ys[0], ys[1]]), pooled]), sg.add("avg_pool2d", [x], attrs)]
    return sg


def cost_model() -> CostModel:
    cm = CostModel()
    cm.pool_scale = 40.0  # lazygraph's pools measure about 40x their memory passes here
    return cm


def test_one_e_graph_step_applies_the_merges_to_the_graph_with_the_pools_rewritten() -> None:
    """pool-as-conv's graph leads for the merges in the same step (a step of NASNet-A takes
    0.7-2 s: under a short budget there is no second step)."""
    from optimizer.eqsat.saturate import Saturation

    sat = Saturation(pools_and_merges(), pool_rules() + builtin_rules(), cost_model())
    sat.step(time.perf_counter() + 30)
    applied = set(sat.seen_best[1].applied)
    assert {"pool-as-conv", "merge-conv"} <= applied


@pytest.mark.parametrize("which", ["eqsat", "mcts"])
def test_the_e_graph_searches_combine_the_pools_with_the_merges(which) -> None:
    """The e-graph searches find the combination the TASO search does, values unchanged."""
    from optimizer.eqsat.search import eqsat_search, mcts_search
    from optimizer.superopt.search import taso_search

    sg = pools_and_merges()
    stages = [pool_rules() + builtin_rules()] * 2
    taso = taso_search(sg, stages, cost_model(), seconds=5, graphs=100)
    assert {"pool-as-conv", "merge-conv"} <= set(taso.rules)
    run = eqsat_search if which == "eqsat" else mcts_search
    got = run(sg, stages, cost_model(), seconds=5, graphs=100)
    assert "avg_pool2d" not in [n.op for n in got.best.nodes.values()]
    assert got.cost <= taso.cost * (1 + 1e-9) and got.cost < got.start_cost
    rng = np.random.default_rng(5)
    feeds = {
        i: (0.05 * rng.standard_normal(n.shape)).astype(np.float32)
        for i, n in sg.nodes.items()
        if n.op in ("input", "weight")
    }
    for have, want in zip(
        got.best.evaluate({i: v for i, v in feeds.items() if i in got.best.nodes}), sg.evaluate(feeds)
    ):
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,scale,which", [("squeezenet", 0.15, "mcts"), ("nasnet_a", 0.1, "taso")])
def test_benchmark_models_with_pools_keep_their_values(
    name: str, scale: float, which: str, monkeypatch
) -> None:
    """Search off vs on: the pools become convolutions and the outputs stay the same."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from models import MODELS

    values, last = [], {}
    for setting in ("1", "0"):
        monkeypatch.setenv("LAZYGRAPH_SUPEROPT", setting)
        monkeypatch.setenv("LAZYGRAPH_SUPEROPT_SEARCH", which)
        monkeypatch.setenv("LAZYGRAPH_SUPEROPT_SECONDS", "2.0")
        pass_.LAST.clear()
        lg.cache.clear()  # the cached plan of the other setting would be a hit
        with lg.no_grad():
            values.append(MODELS[name](scale, seed=1).outputs[0].numpy())
        last = last or dict(pass_.LAST)
    assert last.get("search") == which and not pass_.LAST
    assert last["rules"].get("pool-as-conv", 0) >= 1
    optimized, plain = values
    np.testing.assert_allclose(optimized, plain, rtol=1e-4, atol=1e-4 * (float(np.abs(plain).max()) or 1.0))
