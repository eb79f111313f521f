"""Constant folding and memoized constants: values against the reference, recomputation
after a write to an input, literal subgraphs computed once per literal value."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
import optimizer
from cache import key as keymod
from cache.graph import Graph
from optimizer.fold import MEMO_STATS


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test starts with an empty cache in its own directory."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAZYGRAPH_CACHE", raising=False)
    monkeypatch.delenv("LAZYGRAPH_OPTIMIZE", raising=False)
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


def param(a) -> lg.Array:
    """A parameter (a leaf of differentiation): what the fold pass treats as a constant."""
    p = lg.asarray(np.asarray(a))
    p.requires_grad = True
    return p


def counts() -> tuple[int, int]:
    return MEMO_STATS["hits"], MEMO_STATS["misses"]


def test_frozen_weight_is_memoized_until_written():
    rng = np.random.default_rng(0)
    wn, xn = rng.standard_normal((3, 5)), rng.standard_normal((5, 2))
    w = param(wn)
    with lg.no_grad():
        h0, m0 = counts()
        for _ in range(3):
            y = lg.tanh(w * 2.0 + 1.0) @ lg.asarray(xn)
            np.testing.assert_allclose(y.numpy(), np.tanh(wn * 2.0 + 1.0) @ xn)
        h1, m1 = counts()
        assert (h1 - h0, m1 - m0) == (2, 1)  # computed once, reused twice
        w[0, 0] = 100.0  # a write: the next evaluation must see it
        wn = wn.copy()
        wn[0, 0] = 100.0
        y = lg.tanh(w * 2.0 + 1.0) @ lg.asarray(xn)
        np.testing.assert_allclose(y.numpy(), np.tanh(wn * 2.0 + 1.0) @ xn)
        assert counts()[1] - m1 >= 1  # recomputed after the write


def test_literal_subgraph_is_computed_once_per_value():
    xn = np.arange(12.0).reshape(3, 4)
    h0, m0 = counts()
    for scale in (2.0, 2.0, 3.0, 3.0):
        y = lg.asarray(xn) + lg.arange(4) * scale
        np.testing.assert_array_equal(y.numpy(), xn + np.arange(4) * scale)
    h1, m1 = counts()
    assert (h1 - h0, m1 - m0) == (2, 2)  # one miss per scale, one cached Q for all
    assert lg.cache.stats()["misses"] == 1


def test_fold_pass_fires_only_on_constant_subgraphs():
    x = lg.asarray(np.ones((2, 3)))  # plain data: not a constant
    g = Graph(keymod.walk([(x * 2 + 1).node]))
    optimizer.optimize(g)
    assert "fold" not in g.fired
    w = param(np.ones((2, 3)))
    g = Graph(keymod.walk([(x * (w * 2)).node]))
    optimizer.optimize(g)
    assert "fold" in g.fired
    assert [n.name for n in g.nodes if not n.leaf] == ["memo:memo", "multiply"]


def test_training_steps_keep_their_values_with_fold_on_and_off(monkeypatch):
    def run() -> list[np.ndarray]:
        rng = np.random.default_rng(1)
        w = param(rng.standard_normal((4, 3)))
        b = param(np.zeros(3))
        xn, tn = rng.standard_normal((5, 4)), rng.standard_normal((5, 3))
        out = []
        for _ in range(4):
            loss = (((lg.asarray(xn) @ (w * 1.5) + b) - lg.asarray(tn)) ** 2).mean()
            loss.backward()
            with lg.no_grad():
                w -= 0.1 * w.grad
                b -= 0.1 * b.grad
            w.grad = b.grad = None
            out.append(loss.numpy())
        out.append(w.numpy())
        return out

    with_fold = run()
    monkeypatch.setenv("LAZYGRAPH_OPTIMIZE", "0")
    reference = run()
    for a, b in zip(with_fold, reference):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_memoized_values_are_read_only():
    w = param(np.arange(4.0))
    with lg.no_grad():
        y = (w * 2).numpy()
        z = (w * 2).numpy()
    assert not y.flags.writeable and not z.flags.writeable
    np.testing.assert_array_equal(z, np.arange(4.0) * 2)
