"""Gradient rules record only the cotangents a backward pass wants (Op.vjp_needs).

A ReLU's scalar 0, a first layer's input, a loss's labels and a first convolution's image
need no cotangent: rules that take `needs` skip them, so backward records less and the
gradients are the same bits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import nn
from ops import node as node_mod
from ops.base import REGISTRY


def _count_backward(monkeypatch: pytest.MonkeyPatch, run: Callable[[], lg.Array]) -> Counter:
    """Operator names of the nodes recorded while `run()`'s loss is differentiated."""
    loss = run()
    made: Counter = Counter()
    real = node_mod.Node.__init__

    def counting(self, op, *args, **kw):  # noqa: ANN001, ANN002, ANN003
        made[getattr(op, "name", str(op))] += 1
        real(self, op, *args, **kw)

    with monkeypatch.context() as m:
        m.setattr(node_mod.Node, "__init__", counting)
        loss.backward()
    return made


def _without_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    for op in REGISTRY.values():
        if op.vjp_needs:
            monkeypatch.setattr(op, "vjp_needs", False)


def _mlp_loss() -> tuple[Callable[[], lg.Array], list[lg.Array]]:
    lg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    y = rng.integers(0, 3, 5)

    def run() -> lg.Array:
        model.zero_grad()
        return nn.functional.cross_entropy(model(lg.asarray(x)), y)

    return run, list(model.parameters())


def test_backward_records_less_and_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    run, params = _mlp_loss()
    _count_backward(monkeypatch, run)  # the first pass fills the recording memos both compare with
    with_needs = _count_backward(monkeypatch, run)
    grads = [p.grad.numpy().copy() for p in params]
    with monkeypatch.context() as m:
        _without_needs(m)
        everything = _count_backward(m, run)
        grads_all = [p.grad.numpy().copy() for p in params]
    assert sum(with_needs.values()) < sum(everything.values())
    # the first layer's input gets no x-cotangent product, the labels no log_softmax
    assert with_needs["matmul"] < everything["matmul"]
    assert with_needs["log_softmax"] == 0 < everything["log_softmax"]
    for a, b in zip(grads, grads_all):
        assert a.tobytes() == b.tobytes()


def test_a_first_convolution_records_no_input_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    lg.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3, padding=1)
    x = lg.asarray(np.random.default_rng(1).standard_normal((2, 2, 5, 5)).astype(np.float32))
    made = _count_backward(monkeypatch, lambda: lg.sum(conv(x) ** 2))
    assert made["conv2d_grad_input"] == 0 and made["conv2d_grad_weight"] == 1
    xg = lg.asarray(np.ones((2, 2, 5, 5), np.float32), requires_grad=True)
    made = _count_backward(monkeypatch, lambda: lg.sum(conv(xg) ** 2))
    assert made["conv2d_grad_input"] == 1


@pytest.mark.parametrize(
    "op, fn",
    [
        ("maximum", lambda a, b: lg.maximum(a, b)),
        ("minimum", lambda a, b: lg.minimum(a, b)),
        ("multiply", lambda a, b: a * b),
        ("divide", lambda a, b: a / b),
        ("subtract", lambda a, b: a - b),
        ("matmul", lambda a, b: a @ b),
    ],
)
def test_rules_give_none_for_inputs_that_want_nothing(op: str, fn: Callable) -> None:
    rng = np.random.default_rng(2)
    a = lg.asarray(rng.standard_normal((3, 3)) + 2)
    b = lg.asarray(rng.standard_normal((3, 3)) + 2)
    out = fn(a, b)
    rule = REGISTRY[op].vjp
    g = lg.ones_like(out)
    both = rule(lg, g, [a, b], out, out.node.attrs, needs=(True, True))
    first = rule(lg, g, [a, b], out, out.node.attrs, needs=(True, False))
    second = rule(lg, g, [a, b], out, out.node.attrs, needs=(False, True))
    assert first[1] is None
    # divide's x-cotangent is a factor of y's, subtract's is g itself: given at no cost
    assert second[0] is None or op in ("divide", "subtract")
    np.testing.assert_array_equal(first[0].numpy(), both[0].numpy())
    np.testing.assert_array_equal(second[1].numpy(), both[1].numpy())
