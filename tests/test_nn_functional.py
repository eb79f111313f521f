"""lg.nn.functional: losses and activations against NumPy references and PyTorch."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazygraph as lg
from lazygraph.nn import functional as F


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def ce_reference(logits, target, weight=None, reduction="mean", smoothing=0.0):
    """Cross-entropy written out in float64 (class axis 1, integer targets)."""
    logp = _log_softmax(logits.astype(np.float64), 1)
    c = logits.shape[1]
    w = np.ones(c) if weight is None else weight
    lp = np.moveaxis(logp, 1, -1)  # (..., C)
    picked = np.take_along_axis(lp, target[..., None], -1)[..., 0]
    wt = w[target]
    loss = -(1 - smoothing) * wt * picked - smoothing / c * (lp * w).sum(-1)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / wt.sum()


@given(
    n=st.integers(1, 6),
    c=st.integers(2, 7),
    extra=st.sampled_from([(), (3,), (2, 2)]),
    scale=st.sampled_from([1.0, 30.0, 1e4]),
    reduction=st.sampled_from(["mean", "sum", "none"]),
    smoothing=st.sampled_from([0.0, 0.1, 0.5]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_cross_entropy_matches_reference(n, c, extra, scale, reduction, smoothing, weighted, seed):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((n, c, *extra)) * scale
    target = rng.integers(0, c, (n, *extra))
    weight = rng.uniform(0.5, 2.0, c) if weighted else None
    got = F.cross_entropy(logits, target, weight, reduction, smoothing).numpy()
    want = ce_reference(logits, target, weight, reduction, smoothing)
    assert np.all(np.isfinite(got))  # stable for large logits
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_cross_entropy_gradient_is_softmax_minus_onehot():
    logits = np.random.default_rng(0).standard_normal((4, 5))
    y = np.array([0, 4, 2, 2])
    x = lg.asarray(logits, requires_grad=True)
    (g,) = lg.grad(F.cross_entropy(x, y), [x])
    p = np.exp(_log_softmax(logits, 1))
    np.testing.assert_allclose(g.numpy(), (p - np.eye(5)[y]) / 4, rtol=1e-10, atol=1e-12)
    big = lg.asarray(logits * 1e5, requires_grad=True)
    (g,) = lg.grad(F.cross_entropy(big, y), [big])
    assert np.all(np.isfinite(g.numpy()))


def test_cross_entropy_float32_and_probability_targets():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((3, 4)).astype(np.float32)
    loss = F.cross_entropy(logits, np.array([1, 2, 3]))
    assert loss.dtype == np.float32 and loss.shape == ()
    q = rng.dirichlet(np.ones(4), 3)
    got = F.cross_entropy(logits.astype(np.float64), q, label_smoothing=0.2).numpy()
    qs = q * 0.8 + 0.2 / 4
    np.testing.assert_allclose(
        got, -(qs * _log_softmax(logits.astype(np.float64), 1)).sum(1).mean(), rtol=1e-7
    )
    one = F.cross_entropy(logits[0], np.array(1), reduction="none")  # unbatched (C,) input
    assert one.shape == ()
    np.testing.assert_allclose(float(one), -_log_softmax(logits[:1].astype(np.float64), 1)[0, 1], rtol=1e-5)


def test_nll_and_mse_and_l1():
    rng = np.random.default_rng(2)
    logp = _log_softmax(rng.standard_normal((5, 3)), 1)
    y = rng.integers(0, 3, 5)
    np.testing.assert_allclose(float(F.nll_loss(logp, y)), -logp[np.arange(5), y].mean())
    np.testing.assert_allclose(F.nll_loss(logp, y, reduction="none").numpy(), -logp[np.arange(5), y])
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    np.testing.assert_allclose(float(F.mse_loss(a, b)), ((a - b) ** 2).mean())
    np.testing.assert_allclose(float(F.mse_loss(a, b, reduction="sum")), ((a - b) ** 2).sum())
    np.testing.assert_allclose(float(F.l1_loss(a, b)), np.abs(a - b).mean())


def test_activations_reference_values():
    x = np.linspace(-4, 4, 17)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(F.gelu(x).numpy(), 0.5 * x * (1 + erf(x / math.sqrt(2))), rtol=1e-12)
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(F.gelu(x, approximate="tanh").numpy(), tanh_form, rtol=1e-12)
    np.testing.assert_allclose(F.relu(x).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(F.leaky_relu(x, 0.1).numpy(), np.where(x > 0, x, 0.1 * x))
    np.testing.assert_allclose(F.silu(x).numpy(), x / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(F.softmax(x[None], dim=1).numpy().sum(), 1.0)
    assert F.relu(x.astype(np.float32)).dtype == np.float32


def test_losses_match_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((6, 5, 2)).astype(np.float32)
    y = rng.integers(0, 5, (6, 2))
    w = rng.uniform(0.5, 2, 5).astype(np.float32)
    for kw in (dict(), dict(reduction="sum"), dict(label_smoothing=0.1), dict(weight=w, label_smoothing=0.2)):
        x = lg.asarray(logits, requires_grad=True)
        loss = F.cross_entropy(x, y, **kw)
        (g,) = lg.grad(loss, [x])
        xt = torch.from_numpy(logits).requires_grad_(True)
        tkw = dict(kw, weight=torch.from_numpy(w)) if "weight" in kw else kw
        lt = tf.cross_entropy(xt, torch.from_numpy(y), **tkw)
        lt.backward()
        np.testing.assert_allclose(float(loss), lt.item(), rtol=1e-5, err_msg=str(kw))
        np.testing.assert_allclose(g.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=str(kw))
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(
        float(F.mse_loss(a, b)), tf.mse_loss(torch.from_numpy(a), torch.from_numpy(b)).item(), rtol=1e-6
    )


def test_loss_errors_at_record_time():
    x = lg.zeros((4, 3))
    with pytest.raises(ValueError, match=r"cross_entropy: target of shape \(3,\).*input of shape \(4,3\)"):
        F.cross_entropy(x, np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="cross_entropy: class targets must be integers"):
        F.cross_entropy(x, np.array([True, False, True, False]))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, np.zeros(4, int), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, np.zeros(4, int), label_smoothing=2.0)
    with pytest.raises(ValueError, match=r"nll_loss: weight of shape \(2,\)"):
        F.nll_loss(x, np.zeros(4, int), weight=np.ones(2))
    with pytest.raises(ValueError, match=r"mse_loss: input \(4,3\) and target \(3,\)"):
        F.mse_loss(x, np.zeros(3))
    with pytest.raises(ValueError, match="gelu: approximate"):
        F.gelu(x, approximate="fast")
