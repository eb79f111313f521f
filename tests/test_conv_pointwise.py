"""Pointwise (1x1, unpadded) convolutions run as one GEMM per image (ops/conv.py), checked
against an einsum written from the definition, through the reference kernels, the window
kernels and autograd."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from jit import conv
from ops.base import REGISTRY
from ops.conv import pointwise

# (batch, in channels, height, width, out channels, stride)
CASES = [(3, 5, 4, 6, 7, (1, 1)), (2, 8, 5, 5, 16, (2, 2)), (1, 64, 1, 1, 10, (1, 1)), (0, 3, 2, 2, 4, (1, 1)),
         (2, 4, 7, 3, 3, (3, 1))]  # fmt: skip


def _ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: tuple) -> np.ndarray:
    xs = x[:, :, :: s[0], :: s[1]]
    y = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], xs)
    return y if b is None else y + b[:, None, None]


def _attrs(s: tuple) -> dict:
    return {"stride": s, "padding": (0, 0), "dilation": (1, 1), "groups": 1}


def test_pointwise_is_only_unpadded_1x1() -> None:
    assert pointwise((1, 1), (0, 0))
    assert not pointwise((1, 1), (1, 0))
    assert not pointwise((3, 1), (0, 0))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
def test_forward_and_gradients_match_the_definition(dtype: str, case: tuple) -> None:
    n, c, h, wd, o, s = case
    rng = np.random.default_rng(n + c + o)
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    w = rng.standard_normal((o, c, 1, 1)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == "float32" else {"rtol": 1e-12, "atol": 1e-12}
    want = _ref(x, w, b, s)
    g = rng.standard_normal(want.shape).astype(dtype)
    gw_want = np.einsum("nohw,nchw->oc", g, x[:, :, :: s[0], :: s[1]])[:, :, None, None]
    gi_want = np.zeros_like(x)
    gi_want[:, :, :: s[0], :: s[1]][:, :, : want.shape[2], : want.shape[3]] = np.einsum(
        "oc,nohw->nchw", w[:, :, 0, 0], g
    )
    a = _attrs(s)
    for got in (REGISTRY["conv2d"].kernel(x, w, b, **a), conv.KERNELS["conv2d"](x, w, b, **a)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **tol)
    buf = np.full(want.shape, 7, dtype=dtype)
    assert conv.KERNELS["conv2d"](x, w, b, out=buf, **a) is buf
    np.testing.assert_allclose(buf, want, **tol)
    for got in (
        REGISTRY["conv2d_grad_weight"].kernel(g, x, w, **a),
        conv.KERNELS["conv2d_grad_weight"](g, x, w, **a),
    ):
        assert got.shape == w.shape
        np.testing.assert_allclose(got, gw_want, **tol)
    np.testing.assert_allclose(REGISTRY["conv2d_grad_input"].kernel(g, w, x, **a), gi_want, **tol)


def test_autograd_through_a_pointwise_layer_matches_the_definition() -> None:
    rng = np.random.default_rng(3)
    xn = rng.standard_normal((2, 6, 5, 4)).astype(np.float64)
    wn = rng.standard_normal((4, 6, 1, 1))
    x, w = lg.asarray(xn), lg.asarray(wn)
    x.requires_grad = True
    w.requires_grad = True
    y = lg.conv2d(x, w, stride=2)
    (y * y).sum().backward()
    yn = _ref(xn, wn, None, (2, 2))
    np.testing.assert_allclose(np.array(y), yn, rtol=1e-12)
    gw = np.einsum("nohw,nchw->oc", 2 * yn, xn[:, :, ::2, ::2])[:, :, None, None]
    np.testing.assert_allclose(np.array(w.grad), gw, rtol=1e-10)
    # finite differences on one input element that the stride reads
    eps, i = 1e-6, (1, 2, 2, 0)
    xp = xn.copy()
    xp[i] += eps
    fd = ((_ref(xp, wn, None, (2, 2)) ** 2).sum() - (yn**2).sum()) / eps
    np.testing.assert_allclose(np.array(x.grad)[i], fd, rtol=1e-4)
    assert np.array(x.grad)[1, 2, 1, 0] == 0  # a pixel the stride skips
