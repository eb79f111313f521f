"""Autograd semantics: .grad accumulation, no_grad, leaves, deferred loss, one-graph steps."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import debug


def _param(values, dtype=np.float64) -> lg.Array:
    return lg.asarray(np.asarray(values, dtype=dtype), requires_grad=True)


def _reachable(node) -> int:
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.inputs)
    return len(seen)


def test_backward_accumulates_and_grad_is_lazy() -> None:
    w = _param([1.0, -2.0, 3.0])
    loss = (w * w).sum()
    loss.backward()
    assert isinstance(w.grad, lg.Array)
    assert w.grad.node.buffer is None  # recorded, not computed
    np.testing.assert_allclose(w.grad.numpy(), [2.0, -4.0, 6.0])
    loss.backward()  # the graph is not consumed: a second backward accumulates
    np.testing.assert_allclose(w.grad.numpy(), [4.0, -8.0, 12.0])
    w.grad = None
    assert w.grad is None


def test_requires_grad_flags_and_errors() -> None:
    x = lg.asarray(np.ones(3))
    assert not x.requires_grad
    x.requires_grad = True
    assert x.requires_grad and (x * 2).requires_grad
    assert not (x > 0).requires_grad  # booleans carry no gradient
    with pytest.raises(TypeError, match="floating-point"):
        lg.asarray(np.ones(3, dtype=np.int64), requires_grad=True)
    with pytest.raises(RuntimeError, match="only be set on a whole array"):
        x[1:].requires_grad = False
    assert lg.zeros((2,), requires_grad=True).requires_grad
    assert lg.ones((2,), dtype=np.float32).requires_grad_().requires_grad


def test_no_grad_context_and_decorator() -> None:
    w = _param([1.0, 2.0])
    with lg.no_grad():
        assert not lg.is_grad_enabled()
        y = w * 3
        with lg.enable_grad():
            z = w * 3
    assert lg.is_grad_enabled()
    assert not y.requires_grad and z.requires_grad

    @lg.no_grad()
    def f(a):
        return a + 1

    assert not f(w).requires_grad
    with pytest.raises(RuntimeError, match="does not depend on anything"):
        (y.sum()).backward()


def test_inplace_write_to_a_leaf() -> None:
    w = _param([1.0, 2.0])
    with pytest.raises(RuntimeError, match="no_grad"):
        w -= 1.0
    with pytest.raises(RuntimeError, match="no_grad"):
        w[0] = 5.0
    with lg.no_grad():
        w -= 1.0
        w[1] = 7.0
    assert w.requires_grad
    (g,) = lg.grad((w * w).sum(), [w])
    np.testing.assert_allclose(g.numpy(), [0.0, 14.0])


def test_grad_after_the_loss_was_evaluated() -> None:
    w = _param([0.5, -1.5])
    loss = lg.tanh(w).sum() * 2
    assert float(loss) == pytest.approx(2 * np.tanh([0.5, -1.5]).sum())
    (g,) = lg.grad(loss, [w])  # evaluation kept the history that depends on w
    np.testing.assert_allclose(g.numpy(), 2 * (1 - np.tanh([0.5, -1.5]) ** 2))


def test_grad_of_intermediates_unused_inputs_and_grad_output() -> None:
    x = _param([1.0, 2.0, 3.0])
    h = x * 2
    y = h**2
    gh, gx = lg.grad(y, [h, x], grad_output=np.array([1.0, 0.0, 1.0]))
    np.testing.assert_allclose(gh.numpy(), [4.0, 0.0, 12.0])
    np.testing.assert_allclose(gx.numpy(), [8.0, 0.0, 24.0])
    unused = _param([1.0])
    np.testing.assert_array_equal(lg.grad(y.sum(), [unused])[0].numpy(), [0.0])
    with pytest.raises(ValueError, match="single-element"):
        lg.grad(y, [x])
    with pytest.raises(ValueError, match="grad_output shape"):
        lg.grad(y, [x], grad_output=np.ones(2))


def test_detach_stops_gradients() -> None:
    x = _param([2.0])
    y = x * x.detach()
    (g,) = lg.grad(y.sum(), [x])
    np.testing.assert_allclose(g.numpy(), [2.0])


def test_second_derivative_with_create_graph() -> None:
    x = _param([0.3, -1.2])
    (g,) = lg.grad((x**3).sum(), [x], create_graph=True)
    assert g.requires_grad
    (h,) = lg.grad(g.sum(), [x])
    np.testing.assert_allclose(h.numpy(), 6 * np.array([0.3, -1.2]))
    (g2,) = lg.grad(lg.tanh(x).sum(), [x])
    assert not g2.requires_grad


def test_missing_rule_is_a_clear_error() -> None:
    m = _param(np.eye(2))
    with pytest.raises(TypeError, match="repeated subscript"):
        lg.grad(lg.einsum("ii->", m), [m])


def test_float32_gradients_stay_float32() -> None:
    w = _param(np.ones((3, 2)), np.float32)
    x = lg.asarray(np.ones((4, 3), dtype=np.float32))
    loss = lg.log_softmax(x @ w * 0.5, axis=1).mean()
    (g,) = lg.grad(loss, [w])
    assert g.dtype == np.float32


def test_backward_defers_the_loss_into_the_next_evaluation() -> None:
    rng = np.random.default_rng(0)
    w = _param(rng.standard_normal((3, 2)))
    x = lg.asarray(rng.standard_normal((5, 3)))
    loss = ((x @ w) ** 2).mean()
    loss.backward()
    before = debug.evaluation_stats().get("evaluations", 0)
    with lg.no_grad():
        w -= 0.1 * w.grad
    lg.eval(w)
    assert loss.node.buffer is not None  # computed in the same graph as the update
    float(loss)
    assert debug.evaluation_stats().get("evaluations", 0) == before + 1


def test_training_loop_graph_does_not_grow() -> None:
    rng = np.random.default_rng(1)
    w = _param(rng.standard_normal((4, 3)))
    b = _param(np.zeros(3))
    x = lg.asarray(rng.standard_normal((8, 4)))
    t = lg.asarray(rng.standard_normal((8, 3)))
    losses, sizes = [], []
    for _ in range(6):
        w.grad = b.grad = None
        pred = lg.tanh(x @ w.T.T + b)  # views of a realized parameter still carry gradients
        loss = ((pred - t) ** 2).mean()
        loss.backward()
        with lg.no_grad():
            w -= 0.2 * w.grad
            b -= 0.2 * b.grad
        lg.eval(w, b)
        losses.append(float(loss))
        sizes.append(_reachable(w.node) + _reachable(b.node))
    assert losses[-1] < losses[0]
    assert sizes == [sizes[0]] * len(sizes) and sizes[0] == 2


def test_gradient_matches_numpy_for_a_small_network() -> None:
    rng = np.random.default_rng(2)
    X, W1, W2 = rng.standard_normal((6, 4)), rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    labels = np.array([0, 2, 1, 1, 0, 2])
    w1, w2 = _param(W1), _param(W2)
    logits = lg.maximum(lg.asarray(X) @ w1, 0.0) @ w2
    loss = -(lg.log_softmax(logits, axis=1) * lg.one_hot(lg.asarray(labels), num_classes=3)).sum() / 6
    g1, g2 = lg.grad(loss, [w1, w2])
    h = np.maximum(X @ W1, 0)
    z = h @ W2
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = (p - np.eye(3)[labels]) / 6
    np.testing.assert_allclose(g2.numpy(), h.T @ dz, rtol=1e-10)
    np.testing.assert_allclose(g1.numpy(), X.T @ ((dz @ W2.T) * (h > 0)), rtol=1e-10)


def test_dropping_an_array_releases_its_node() -> None:
    y = lg.asarray(np.ones(3), requires_grad=True) * 2
    node = y.node
    assert node.users == 1
    del y
    assert node.users == 0  # so the executor frees it instead of memoizing it
