"""Library substitution: GEMM/convolution with bias and ReLU epilogues as one step, against
the reference executor (optimizer off), and where it must not apply."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg
import lazygraph.nn.functional as F
import optimizer
from cache import key as keymod
from cache.graph import Graph


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test starts with an empty cache in its own directory, JIT off."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAZYGRAPH_CACHE", raising=False)
    monkeypatch.delenv("LAZYGRAPH_OPTIMIZE", raising=False)
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")  # compiling kernels per structure is the JIT's tests' job
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


def fused(y: lg.Array) -> dict[str, int]:
    """What the library pass fused in y's graph."""
    g = Graph(keymod.walk([y.node]))
    optimizer.optimize(g)
    return dict(g.artifacts.get("library", {}))


def both(make) -> tuple[np.ndarray, np.ndarray]:
    """make()'s value with every pass on, and with none (the reference)."""
    on = make().numpy()
    os.environ["LAZYGRAPH_OPTIMIZE"] = "0"
    try:
        off = make().numpy()
    finally:
        del os.environ["LAZYGRAPH_OPTIMIZE"]
    return on, off


def data(rng, shape, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


@given(
    n=st.sampled_from([0, 1, 3, 17]),
    k=st.sampled_from([1, 5, 8]),
    m=st.sampled_from([1, 2, 7]),
    relu=st.booleans(),
    transposed=st.booleans(),
    seed=st.integers(0, 2**31),
)
@settings(max_examples=25, deadline=None)
def test_linear_bias_relu_matches_reference(n, k, m, relu, transposed, seed):
    rng = np.random.default_rng(seed)
    xn, wn, bn = data(rng, (n, k)), data(rng, (m, k)), data(rng, (m,))

    def make():
        x = lg.positive(lg.asarray(xn))
        w = lg.asarray(wn)
        y = F.linear(x, w, lg.asarray(bn)) if transposed else x @ lg.asarray(np.ascontiguousarray(wn.T)) + bn
        return F.relu(y) if relu else y

    on, off = both(make)
    np.testing.assert_array_equal(on, off)
    assert on.dtype == off.dtype and on.shape == (n, m)
    want = "matmul+bias+relu" if relu else "matmul+bias"
    assert fused(make()) == {want: 1}


@given(
    n=st.sampled_from([0, 1, 2]),
    c=st.sampled_from([1, 3]),
    hw=st.sampled_from([(5, 5), (7, 6)]),
    kk=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]),
    padding=st.sampled_from([0, 1]),
    dilation=st.sampled_from([1, 2]),
    bias=st.booleans(),
    seed=st.integers(0, 2**31),
)
@settings(max_examples=25, deadline=None)
def test_conv2d_relu_matches_reference(n, c, hw, kk, stride, padding, dilation, bias, seed):
    rng = np.random.default_rng(seed)
    xn, wn, bn = data(rng, (n, c, *hw)), data(rng, (4, c, kk, kk)), data(rng, (4,))

    def make():
        x = lg.positive(lg.asarray(xn))
        b = lg.asarray(bn) if bias else None
        y = lg.conv2d(x, lg.asarray(wn), b, stride=stride, padding=padding, dilation=dilation)
        pool = 2 if min(y.shape[2:]) >= 2 else 1
        return F.relu(F.max_pool2d(F.relu(y), pool, 1) if n else y)

    on, off = both(make)
    np.testing.assert_array_equal(on, off)
    if n:
        assert fused(make()) == {"conv2d+relu": 1}


def test_no_fusion_when_the_product_is_read_elsewhere():
    rng = np.random.default_rng(0)
    x, w, b = (lg.positive(lg.asarray(data(rng, s))) for s in ((4, 3), (3, 2), (2,)))
    p = x @ w
    y = (p + b) * p  # the product has a second reader
    assert fused(y) == {}
    on, off = both(lambda: (x @ w + b) * (x @ w))
    np.testing.assert_array_equal(on, off)


@pytest.mark.parametrize(
    "make",
    [
        lambda x, w, b: lg.maximum(x @ w, 0.5),  # not a ReLU: no epilogue
        lambda x, w, b: x @ w + b[:, None][:1],  # a (1, 1) bias: fine
        lambda x, w, b: (x @ w)[:, :1] + b,  # a bias that grows the product: not fused
    ],
)
def test_epilogue_conditions(make):
    rng = np.random.default_rng(1)
    xn, wn, bn = data(rng, (4, 3)), data(rng, (3, 2)), data(rng, (2,))
    on, off = both(lambda: make(lg.positive(lg.asarray(xn)), lg.asarray(wn), lg.asarray(bn)))
    np.testing.assert_array_equal(on, off)


def test_integer_matmul_is_left_alone():
    x = lg.positive(lg.asarray(np.arange(6).reshape(2, 3)))
    y = F.relu(x @ lg.asarray(np.ones((3, 2), dtype=np.int64)) + 1)
    assert fused(y) == {}


def init(*layers: lg.nn.Module) -> None:
    """Deterministic weights (the same for the run with passes and the run without)."""
    for i, layer in enumerate(layers):
        for p in layer.parameters():
            p[...] = data(np.random.default_rng(i), p.shape)


def test_training_step_with_fusion_matches_reference():
    rng = np.random.default_rng(2)
    xn, tn = data(rng, (8, 5)), rng.integers(0, 3, 8)

    def run() -> list[np.ndarray]:
        lin1, lin2 = lg.nn.Linear(5, 6), lg.nn.Linear(6, 3)
        with lg.no_grad():
            init(lin1, lin2)
        out = []
        for _ in range(2):
            loss = F.cross_entropy(lin2(F.relu(lin1(lg.asarray(xn)))), lg.asarray(tn))
            loss.backward()
            out.append(loss.numpy())
            out.extend(p.grad.numpy() for p in [*lin1.parameters(), *lin2.parameters()])
            for p in [*lin1.parameters(), *lin2.parameters()]:
                p.grad = None
        return out

    on = run()
    assert any(k.startswith("library:matmul+bias") for k in lg.cache.passes()["rules"])
    os.environ["LAZYGRAPH_OPTIMIZE"] = "0"
    try:
        off = run()
    finally:
        del os.environ["LAZYGRAPH_OPTIMIZE"]
    for a, b in zip(on, off):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def conv_grads(xn, wn, bn, groups=1, **attrs) -> list[np.ndarray]:
    """Output and the gradients of a conv2d layer under a fixed cotangent."""
    s, w, b = lg.asarray(np.ones((1, xn.shape[1], 1, 1), xn.dtype)), lg.asarray(wn), lg.asarray(bn)
    for t in (s, w, b):
        t.requires_grad = True
    # x depends on data, not only on parameters (else the fold pass memoizes the whole layer);
    # the scale's gradient is the input gradient summed.
    x = lg.asarray(xn) * s
    y = lg.conv2d(x, w, b, groups=groups, **attrs)
    gn = np.cos(np.arange(y.size, dtype=np.float32)).reshape(y.shape)
    (y * lg.asarray(gn)).sum().backward()
    lg.eval(y, s.grad, w.grad, b.grad)  # one graph: the forward and the backward together
    return [y.numpy(), s.grad.numpy(), w.grad.numpy(), b.grad.numpy()]


@given(
    n=st.sampled_from([0, 1, 3]),
    c=st.sampled_from([2, 5]),
    o=st.sampled_from([1, 4]),
    kk=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]),
    padding=st.sampled_from([0, 1]),
    dilation=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**31),
)
@settings(max_examples=20, deadline=None)
def test_conv2d_and_weight_gradient_share_columns(n, c, o, kk, stride, padding, dilation, seed):
    rng = np.random.default_rng(seed)
    xn, wn, bn = data(rng, (n, c, 7, 6)), data(rng, (o, c, kk, kk)), data(rng, (o,))
    attrs = dict(stride=stride, padding=padding, dilation=dilation)
    on = conv_grads(xn, wn, bn, **attrs)
    assert lg.cache.passes()["rules"].get("library:conv2d+shared_im2col", 0) >= 1
    os.environ["LAZYGRAPH_OPTIMIZE"] = "0"
    try:
        off = conv_grads(xn, wn, bn, **attrs)
    finally:
        del os.environ["LAZYGRAPH_OPTIMIZE"]
    for a, b in zip(on, off):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["one_channel", "groups", "float64_weight"])
def test_shared_columns_conditions(case):
    rng = np.random.default_rng(3)
    c, groups, wdt = {"one_channel": (1, 1, np.float32), "groups": (4, 2, np.float32)}.get(
        case, (3, 1, np.float64)
    )
    xn, wn, bn = data(rng, (2, c, 5, 5)), data(rng, (4, c // groups, 3, 3), wdt), data(rng, (4,), wdt)
    lg.cache.reset_stats()
    on = conv_grads(xn, wn, bn, groups=groups, padding=1)
    assert "library:conv2d+shared_im2col" not in lg.cache.passes()["rules"]
    os.environ["LAZYGRAPH_OPTIMIZE"] = "0"
    try:
        off = conv_grads(xn, wn, bn, groups=groups, padding=1)
    finally:
        del os.environ["LAZYGRAPH_OPTIMIZE"]
    for a, b in zip(on, off):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
