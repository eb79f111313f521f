"""The JIT in the evaluation path: the fusion pass, region steps in cached plans, replay on hits."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import kernel
from lazygraph.engine import ENGINE, lower_fusion


@pytest.fixture
def jit_pass(monkeypatch):  # noqa: ANN001, ANN201
    """The pass installed, every size compiled, caches cleared before and after."""
    monkeypatch.setenv("LAZYGRAPH_JIT", "1")  # another test may have left it off
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "0")
    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    lg.cache.clear()
    was = ENGINE.installed("jit_fusion")
    ENGINE.install(lower_fusion.PASS)
    yield
    if not was:
        ENGINE.uninstall("jit_fusion")
    lg.cache.clear()


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_regions_become_plan_steps_and_hits_reuse_the_kernel(jit_pass, capsys) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    x = rng.standard_normal((33, 70)).astype(np.float32)
    y = lg.softmax(lg.asarray(x), axis=1)
    lg.explain(y)
    assert "jit_region" in capsys.readouterr().out
    np.testing.assert_allclose(y.numpy(), _np_softmax(x), rtol=1e-5, atol=1e-7)
    count = kernel.kernel_count()
    x2 = rng.standard_normal((33, 70)).astype(np.float32)
    y2 = lg.softmax(lg.asarray(x2), axis=1)
    np.testing.assert_allclose(y2.numpy(), _np_softmax(x2), rtol=1e-5, atol=1e-7)
    assert lg.cache.stats()["hits"] >= 1
    assert kernel.kernel_count() == count  # a hit: no new kernel structure


def test_multi_output_region_runs_once_and_matches_numpy(jit_pass) -> None:  # noqa: ANN001
    rng = np.random.default_rng(1)
    p0, g0 = rng.standard_normal((2, 40, 50)).astype(np.float32)
    p, g = lg.asarray(p0), lg.asarray(g0)
    m, v = lg.zeros((40, 50), dtype=np.float32), lg.zeros((40, 50), dtype=np.float32)
    em, ev, ep = np.zeros_like(p0), np.zeros_like(p0), p0.copy()
    for t in range(1, 4):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        p = p - (0.01 / (1 - 0.9**t)) * m / (lg.sqrt(v) / math.sqrt(1 - 0.999**t) + 1e-8)
        got = lg.eval(m, v, p)
        em = 0.9 * em + 0.1 * g0
        ev = 0.999 * ev + 0.001 * g0 * g0
        ep = ep - (0.01 / (1 - 0.9**t)) * em / (np.sqrt(ev) / math.sqrt(1 - 0.999**t) + 1e-8)
        for a, b in zip(got, (em, ev, ep)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_layernorm_and_cross_entropy_through_the_executor(jit_pass) -> None:  # noqa: ANN001
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 24)).astype(np.float32)
    w = rng.standard_normal(24).astype(np.float32)
    labels = rng.integers(0, 24, 16)
    X = lg.asarray(x)
    ln = F.layer_norm(X, 24, lg.asarray(w), lg.asarray(w)).numpy()
    d = x - x.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(
        ln, d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * w + w, rtol=1e-4, atol=1e-5
    )
    loss = float(F.cross_entropy(X, lg.asarray(labels)))
    logp = np.log(_np_softmax(x.astype(np.float64)))
    assert loss == pytest.approx(-logp[np.arange(16), labels].mean(), rel=1e-5)


def test_small_arrays_and_lazygraph_jit_0_run_on_numpy(jit_pass, monkeypatch) -> None:  # noqa: ANN001
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "1000000")
    a = (lg.exp(lg.asarray(x)) * 2 + 1).numpy()
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    b = (lg.exp(lg.asarray(x)) * 2 + 1).numpy()
    np.testing.assert_allclose(a, np.exp(x) * 2 + 1)
    np.testing.assert_allclose(b, np.exp(x) * 2 + 1)


def test_region_recipes_round_trip_through_json() -> None:
    x = lg.asarray(np.ones((4, 5), np.float32))
    y = lg.sum(lg.exp(x) * 2, axis=1, dtype=np.float64)
    from jit.fusion import find_regions
    from lazygraph.engine.evaluate import schedule

    (region,) = find_regions(schedule([y.node]), [y.node])
    desc = lower_fusion.describe(region)
    again = lower_fusion.rebuild(desc)
    assert kernel.signature(again) == kernel.signature(lower_fusion.rebuild(lower_fusion.describe(again)))
    assert [n.op.name for n in again.nodes] == ["exp", "multiply", "sum"]
    with pytest.raises(Exception, match="bad JIT region recipe"):
        lower_fusion.rebuild({"inputs": [{"kind": "array"}], "members": [], "outputs": []})


def test_regions_that_would_wait_on_each_other_are_not_both_fused(jit_pass) -> None:  # noqa: ANN001
    # a's region reads cumsum(b) (not fusable), which reads b's region, which reads a: both
    # as kernels would wait on each other, so the smaller one runs op by op.
    from jit.fusion import find_regions
    from lazygraph.engine.evaluate import schedule

    rng = np.random.default_rng(4)
    x0, x1 = rng.standard_normal((2, 4, 4))
    a, b = +lg.asarray(x0), +lg.asarray(x1)
    u = lg.cumsum(b, axis=1) + a
    n = (lg.tanh(b) * 2 + 1) * a
    roots = [a.node, u.node, n.node]
    regions = find_regions(schedule(roots), roots)
    assert [[m.op.name for m in r.nodes] for r in regions] == [
        ["positive", "tanh", "multiply", "add", "multiply"]
    ]
    got = lg.eval(a, u, n)
    want = [x0, np.cumsum(x1, axis=1) + x0, (np.tanh(x1) * 2 + 1) * x0]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
