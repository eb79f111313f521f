"""ops/window.py's avg_pool2d_forward (one contiguous add per kernel offset): values against
PyTorch, a plain loop over windows and the window-reduction kernel it is meant to replace."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from ops.window import avg_pool2d_forward


def window_reduction(x: np.ndarray, k, s, p, include_pad: bool) -> np.ndarray:
    """The previous reference: np.sum over a sliding-window view, divided."""
    out = np.mean(np.zeros(1, dtype=x.dtype)).dtype
    acc = np.float32 if out == np.float16 else out
    xa = np.pad(x.astype(acc), ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    win = sliding_window_view(xa, k, axis=(2, 3))[:, :, :: s[0], :: s[1]]
    total = win.sum(axis=(-2, -1))
    if include_pad:
        count = k[0] * k[1]
    else:
        real = np.pad(np.ones(x.shape[2:], dtype=acc), ((p[0], p[0]), (p[1], p[1])))
        count = sliding_window_view(real, k)[:: s[0], :: s[1]].sum(axis=(-2, -1))
    return (total / count).astype(out)


def loop_pool(x: np.ndarray, k, s, p, include_pad: bool) -> np.ndarray:
    """One window at a time in float64: the definition."""
    n, c, h, w = x.shape
    ho, wo = (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
    y = np.zeros((n, c, ho, wo))
    for i, j in itertools.product(range(ho), range(wo)):
        r0, c0 = i * s[0] - p[0], j * s[1] - p[1]
        r, q = slice(max(r0, 0), min(r0 + k[0], h)), slice(max(c0, 0), min(c0 + k[1], w))
        part = x[:, :, r, q].astype(np.float64)
        div = k[0] * k[1] if include_pad else part.shape[2] * part.shape[3]
        y[:, :, i, j] = part.sum(axis=(2, 3)) / div
    return y


CASES = [  # (shape, kernel, stride, padding)
    ((1, 64, 16, 16), (3, 3), (1, 1), (1, 1)),  # NASNet-A's cells
    ((1, 10, 6, 6), (3, 3), (1, 1), (1, 1)),  # SqueezeNet's last pool, smaller
    ((2, 3, 7, 5), (3, 3), (2, 2), (1, 1)),
    ((2, 3, 7, 5), (2, 3), (1, 2), (0, 1)),
    ((1, 4, 8, 8), (2, 2), (2, 2), (0, 0)),  # windows tile the image
    ((1, 2, 9, 7), (2, 2), (2, 2), (0, 0)),  # tiles with a ragged border
    ((3, 2, 5, 5), (5, 5), (1, 1), (2, 2)),  # one window row per padded image
    ((1, 1, 1, 1), (1, 1), (1, 1), (0, 0)),
    ((2, 3, 4, 6), (1, 3), (1, 1), (0, 1)),
]


@pytest.mark.parametrize("shape,k,s,p", CASES)
@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool_against_torch_and_the_window_loop(shape, k, s, p, include_pad) -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(shape)
    y = avg_pool2d_forward(x, k, s, p, include_pad)
    assert y.dtype == np.float64 and y.flags.c_contiguous
    ref = torch.nn.functional.avg_pool2d(torch.from_numpy(x), k, s, p, count_include_pad=include_pad)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y, loop_pool(x, k, s, p, include_pad), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.bool_, np.complex64])
def test_avg_pool_dtypes_match_the_window_reduction(dtype) -> None:
    rng = np.random.default_rng(1)
    raw = rng.standard_normal((2, 5, 9, 8)) * 4
    x = (raw + 1j * raw[::-1]).astype(dtype) if np.dtype(dtype).kind == "c" else raw.astype(dtype)
    tol = {np.float16: 2e-3, np.float32: 1e-6, np.complex64: 1e-6}.get(dtype, 1e-12)
    for (k, s, p), inc in itertools.product(
        [((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 0))], [True, False]
    ):
        y = avg_pool2d_forward(x, k, s, p, inc)
        ref = window_reduction(x, k, s, p, inc)
        assert y.dtype == ref.dtype and y.shape == ref.shape
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol)


def test_avg_pool_odd_inputs() -> None:
    # no planes at all, a transposed (non-contiguous) input, a read-only input
    assert avg_pool2d_forward(np.zeros((0, 3, 5, 5), np.float32), (3, 3), (1, 1), (1, 1), True).shape == (
        0,
        3,
        5,
        5,
    )
    x = np.random.default_rng(2).standard_normal((6, 7, 3, 2)).transpose(2, 3, 1, 0)
    np.testing.assert_allclose(
        avg_pool2d_forward(x, (3, 3), (1, 1), (1, 1), False),
        window_reduction(x, (3, 3), (1, 1), (1, 1), False),
    )
    x = np.ascontiguousarray(x)
    x.flags.writeable = False
    before = x.copy()
    avg_pool2d_forward(x, (3, 3), (2, 2), (1, 1), True)
    np.testing.assert_array_equal(x, before)


def test_nan_and_inf_stay_in_their_windows() -> None:
    x = np.zeros((1, 2, 6, 6))
    x[0, 0, 0, 0] = np.nan
    x[0, 1, 5, 5] = np.inf
    y = avg_pool2d_forward(x, (3, 3), (1, 1), (1, 1), True)
    np.testing.assert_array_equal(
        np.isnan(y[0, 0]), np.isnan(window_reduction(x, (3, 3), (1, 1), (1, 1), True)[0, 0])
    )
    assert (
        np.isnan(y[0, 0, :2, :2]).all() and not np.isnan(y[0, 0, 2:, :]).any() and not np.isnan(y[0, 1]).any()
    )
    assert (
        np.isinf(y[0, 1, 4:, 4:]).all()
        and np.isfinite(y[0, 1, :4, :]).all()
        and np.isfinite(y[0, 0, 2:]).all()
    )
