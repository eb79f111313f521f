"""The cost model decides pool-as-conv from the kernels it calibrated: with lazygraph's pools
priced as measured against its depthwise convolutions, the search keeps a fast pool and
rewrites a slow one (optimizer/superopt/cost.py's depth_flops and pool_scale)."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from optimizer.superopt.apply import SGraph
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import builtin_rules
from optimizer.superopt.pool_conv import pool_rules
from optimizer.superopt.search import search


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """A private, empty cache: no stored calibration reaches the cost model."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


def two_pools() -> tuple[SGraph, int]:
    sg = SGraph()
    x = sg.leaf("input", (1, 64, 16, 16), np.float32)
    attrs = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "count_include_pad": True}
    a = sg.add("avg_pool2d", [x], attrs)
    b = sg.add("avg_pool2d", [sg.add("maximum", [x, sg.leaf("const", (), np.float32, value=0)])], attrs)
    sg.outputs = [sg.add("add", [a, b])]
    return sg, x


def model(pool_scale: float, depth_flops: float) -> CostModel:
    cm = CostModel()
    cm.flops = cm.conv_flops = cm.group_flops = 1e11
    cm.bandwidth = 4e10
    cm.pool_scale, cm.depth_flops = pool_scale, depth_flops
    return cm


def test_depthwise_convolutions_are_priced_at_their_own_rate() -> None:
    sg = SGraph()
    x = sg.leaf("input", (1, 64, 16, 16), np.float32)
    dw = sg.add("conv2d", [x, sg.leaf("weight", (64, 1, 3, 3), np.float32)], {"groups": 64})
    gr = sg.add("conv2d", [x, sg.leaf("weight", (64, 2, 3, 3), np.float32)], {"groups": 32})
    slow, fast = model(1.0, 1e9), model(1.0, 1e11)
    assert slow.op_time(sg, dw) > fast.op_time(sg, dw) + 2e-4  # 1.2e6 flops at 1 GFLOP/s
    assert slow.op_time(sg, gr) == fast.op_time(sg, gr)  # 2 channels a group: the group rate


@pytest.mark.parametrize("slow_pool", [True, False])
def test_pool_as_conv_follows_the_calibrated_kernels(slow_pool: bool) -> None:
    sg, x = two_pools()
    # measured here: the window-reduction pool 40x its memory passes, the offset-add pool
    # about 2x; a depthwise convolution 3 GFLOP/s
    cm = model(40.0 if slow_pool else 2.0, 3e9)
    result = search(sg, builtin_rules() + pool_rules(), cm)
    ops = [n.op for n in result.best.nodes.values()]
    assert ("avg_pool2d" in ops) is not slow_pool
    assert ops.count("conv2d") == (2 if slow_pool else 0)
    xv = np.random.default_rng(1).standard_normal((1, 64, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(
        result.best.evaluate({x: xv})[0], sg.evaluate({x: xv})[0], rtol=1e-5, atol=1e-6
    )


def test_calibration_measures_a_depthwise_rate_and_stores_it(tmp_path) -> None:
    cm = CostModel(path=tmp_path / "costs.json")
    cm.calibrate()
    assert 0 < cm.depth_flops and cm.pool_scale >= 1.0
    cm.save()
    again = CostModel(path=tmp_path / "costs.json")
    assert again.calibrated and again.depth_flops == cm.depth_flops


def test_the_built_in_model_keeps_the_fast_average_pool() -> None:
    """With nothing calibrated (every user's default), pool-as-conv is not chosen: the built-in
    depthwise rate and pool price (cost.DEPTH_FLOPS, cost.POOL_SCALE) are this machine's
    measurements of today's kernels, against which the rewrite measured 0.93-0.97x."""
    sg, _ = two_pools()
    ops = [n.op for n in search(sg, builtin_rules() + pool_rules(), CostModel()).best.nodes.values()]
    assert ops.count("avg_pool2d") == 2 and "conv2d" not in ops
