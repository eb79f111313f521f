"""softmax_cross_entropy: one operator for the loss and its gradient, against the piecewise
form, finite differences and PyTorch; stable for huge logits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg
import lazygraph.nn.functional as F
from lazygraph.array import record
from tests.gradcheck import check_grad

cases = st.fixed_dictionaries(
    {
        "n": st.integers(1, 4),
        "c": st.integers(1, 5),
        "extra": st.sampled_from([(), (3,), (2, 2)]),
        "smoothing": st.sampled_from([0.0, 0.1]),
        "reduction": st.sampled_from(["mean", "sum", "none"]),
        "seed": st.integers(0, 2**31),
    }
)


def piecewise(x, t, reduction, smoothing):
    """The loss as recorded before the operator existed: log_softmax, one-hot, sum."""
    c = x.shape[1]
    oh = lg.one_hot(t, c, dtype=x.dtype)
    if oh.ndim > 2:
        oh = lg.moveaxis(oh, -1, 1)
    q = oh * (1.0 - smoothing) + smoothing / c if smoothing else oh
    loss = -(q * lg.log_softmax(x, axis=1)).sum(axis=1)
    return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]


@settings(max_examples=30, deadline=None)
@given(case=cases)
def test_matches_piecewise_form_and_gradient(case):
    rng = np.random.default_rng(case["seed"])
    n, c, extra = case["n"], case["c"], case["extra"]
    xn = rng.standard_normal((n, c, *extra)) * 3
    tn = rng.integers(0, c, (n, *extra))
    kw = dict(reduction=case["reduction"], label_smoothing=case["smoothing"])
    got = F.cross_entropy(lg.asarray(xn), lg.asarray(tn), **kw).numpy()
    want = piecewise(lg.asarray(xn), lg.asarray(tn), case["reduction"], case["smoothing"]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    check_grad(lambda a: F.cross_entropy(a, lg.asarray(tn), **kw), xn)


def test_soft_targets_gradient_in_both_inputs():
    rng = np.random.default_rng(4)
    xn = rng.standard_normal((3, 4))
    qn = rng.random((3, 4))
    check_grad(lambda a, q: F.cross_entropy(a, q), xn, qn)


def test_stable_for_huge_logits_float32():
    x = np.array([[1e4, 0.0, -1e4], [-3e38, 3e38, 0.0]], np.float32)
    t = np.array([1, 1])
    xs = lg.asarray(x, requires_grad=True)
    loss = F.cross_entropy(xs, lg.asarray(t), reduction="none")
    (g,) = lg.grad(loss.sum(), [xs])
    assert loss.dtype == np.float32 and g.dtype == np.float32
    np.testing.assert_allclose(loss.numpy(), [1e4, 0.0], rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), [[1, -1, 0], [0, 0, 0]], atol=1e-6)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 10)).astype(np.float32) * 5
    t = rng.integers(0, 10, 16)
    xs = lg.asarray(x, requires_grad=True)
    loss = F.cross_entropy(xs, lg.asarray(t), label_smoothing=0.1)
    (g,) = lg.grad(loss, [xs])
    xt = torch.from_numpy(x).requires_grad_()
    lt = torch.nn.functional.cross_entropy(xt, torch.from_numpy(t), label_smoothing=0.1)
    lt.backward()
    np.testing.assert_allclose(loss.numpy(), lt.item(), rtol=1e-5)
    np.testing.assert_allclose(g.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-7)


def test_record_time_errors_name_the_op():
    x = lg.asarray(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="^softmax_cross_entropy: targets"):
        record("softmax_cross_entropy", x, lg.asarray(np.zeros((2, 4), np.float32)))
    with pytest.raises(TypeError, match="^softmax_cross_entropy: "):
        record("softmax_cross_entropy", x, lg.asarray(np.zeros((2, 3), np.int64)))


def test_float16_logits_compute_wider():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((8, 30)) * 4).astype(np.float16)
    t = rng.integers(0, 30, 8)
    xs = lg.asarray(x, requires_grad=True)
    loss = F.cross_entropy(xs, lg.asarray(t), reduction="sum")
    (g,) = lg.grad(loss, [xs])
    assert loss.dtype == np.float16 and g.dtype == np.float16
    x64 = x.astype(np.float64)
    logp = x64 - x64.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    np.testing.assert_allclose(float(loss.numpy()), -logp[np.arange(8), t].sum(), rtol=2e-3)
    want = np.exp(logp)
    want[np.arange(8), t] -= 1
    np.testing.assert_allclose(g.numpy(), want, atol=2e-3)
