"""A training step through nn.Linear runs each weight gradient's GEMM once, in the weight's layout."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import nn, optim
from lazygraph.engine.evaluate import explain_lines


def _products(monkeypatch: pytest.MonkeyPatch, opt: optim.Optimizer) -> list[list[str]]:
    """Spy on the optimizer's evaluation point: the GEMM steps (matmul or library) of each step's Q."""
    seen: list[list[str]] = []
    real = optim.Optimizer._materialize

    def spy(self: optim.Optimizer) -> None:
        arrays = [p for g in self.param_groups for p in g["params"]]
        arrays += [v for st in self.state.values() for v in st.values() if isinstance(v, lg.Array)]
        lines = explain_lines([a.node for a in arrays])
        seen.append([ln for ln in lines if " = matmul(" in ln or " = library(" in ln])
        real(self)

    monkeypatch.setattr(optim.Optimizer, "_materialize", spy)
    return seen


@pytest.mark.parametrize(
    "make",
    [lambda ps: lg.optim.Adam(ps, lr=1e-3), lambda ps: lg.optim.SGD(ps, lr=0.1, momentum=0.9)],
)
def test_each_weight_gradient_is_one_gemm(make, monkeypatch):
    lg.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = make(model.parameters())
    seen = _products(monkeypatch, opt)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((8, 12)).astype(np.float32)
        y = rng.integers(0, 3, 8)
        loss = nn.functional.cross_entropy(model(lg.asarray(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # 3 forward products, 2 data gradients (none for the input), 3 weight gradients: the
        # weight gradients used to be computed twice (for the kept w.grad and for the update)
        assert len(seen[-1]) == 8, seen[-1]
        grads = [p.grad for p in model.parameters()]
        assert all(g.node.buffer is not None and not g.node.inputs for g in grads)  # evaluated once
        assert all(g._view is None or g._view.strides[-1] == 1 for g in grads[::2])  # row-major


def test_weight_gradient_matches_numpy():
    lg.manual_seed(0)
    lin = nn.Linear(6, 4)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    g = rng.standard_normal((5, 4)).astype(np.float32)
    (lin(lg.asarray(x)) * lg.asarray(g)).sum().backward()
    np.testing.assert_allclose(np.array(lin.weight.grad), g.T @ x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(lin.bias.grad), g.sum(0), rtol=1e-5, atol=1e-6)
    assert lin.weight.grad._view is None  # the product itself, in the weight's layout


def test_transposed_left_operand_gradient_matches_numpy():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((7, 3)).astype(np.float32)  # used as a.T: (3, 7)
    b = rng.standard_normal((7, 5)).astype(np.float32)
    g = rng.standard_normal((3, 5)).astype(np.float32)
    ta, tb = lg.asarray(a), lg.asarray(b)
    ta.requires_grad = tb.requires_grad = True
    ((ta.T @ tb) * lg.asarray(g)).sum().backward()
    np.testing.assert_allclose(np.array(ta.grad), (g @ b.T).T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(tb.grad), a @ g, rtol=1e-5, atol=1e-6)
