"""lg.fft against numpy.fft (values, dtypes, n/axis/s/axes/norm), windows, and adjoint gradients."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg

F = lg.fft
NORMS = [None, "backward", "ortho", "forward"]


def close(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    tol = 1e-4 if want.dtype in (np.complex64, np.float32) else 1e-9
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]),
    st.sampled_from([np.float32, np.float64, np.complex64, np.complex128, np.int64, np.bool_]),
    st.lists(st.integers(0, 5), min_size=1, max_size=3),
    st.one_of(st.none(), st.integers(1, 9)),
    st.sampled_from(NORMS),
    st.booleans(),
    st.data(),
)
def test_one_axis_transforms(name, dtype, shape, n, norm, view, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = (np.random.default_rng(len(shape)).normal(size=shape) * 3).astype(dtype)
    x = lg.asarray(np.ascontiguousarray(a[..., ::-1]))[..., ::-1] if view else lg.asarray(a)
    try:
        want = getattr(np.fft, name)(a, n=n, axis=axis, norm=norm)
    except (ValueError, TypeError) as e:
        with pytest.raises(type(e)):
            getattr(F, name)(x, n=n, axis=axis, norm=norm)  # refused at record time
        return
    close(getattr(F, name)(x, n=n, axis=axis, norm=norm), want)


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2"])
@pytest.mark.parametrize("s, axes", [(None, None), ((4, 6), (0, 2)), ((3, 5), None), (None, (1,))])
def test_n_dimensional_transforms(name, s, axes):
    a = np.random.default_rng(1).normal(size=(3, 4, 5))
    src = a if name.startswith("rfft") else a + 1j * a[::-1]
    if name.endswith("2") and axes is not None and len(axes) != 2:
        return
    kw = {"s": s} if axes is None and s is None else {"s": s, "axes": axes if axes is not None else (-2, -1)}
    close(getattr(F, name)(lg.asarray(src), **kw), getattr(np.fft, name)(src, **kw))


def test_special_values_and_errors():
    a = np.array([1.0, np.nan, np.inf, 0.0])
    close(F.fft(lg.asarray(a)), np.fft.fft(a))
    with pytest.raises(ValueError, match="Invalid number of FFT data points"):
        F.fft(lg.ones(3), n=0)
    with pytest.raises(ValueError, match="Invalid norm value"):
        F.fft(lg.ones(3), norm="bad")
    with pytest.raises(TypeError, match="rfft"):
        F.rfft(lg.asarray(np.ones(3, np.complex128)))
    with pytest.raises(ValueError, match="0-d"):
        F.fft(lg.asarray(1.0))


def test_frequencies_shifts_and_windows():
    for n in (1, 8, 9):
        close(F.fftfreq(n, d=0.1), np.fft.fftfreq(n, d=0.1))
        close(F.rfftfreq(n, 2.0), np.fft.rfftfreq(n, 2.0))
    close(F.fftfreq(6, dtype=lg.float32), np.fft.fftfreq(6).astype(np.float32))
    a = np.arange(24.0).reshape(4, 6)
    close(F.fftshift(lg.asarray(a)), np.fft.fftshift(a))
    close(F.ifftshift(lg.asarray(a), axes=1), np.fft.ifftshift(a, axes=1))
    for w in ("hanning", "hamming", "blackman", "bartlett"):
        for m in (-1, 0, 1, 8):
            close(getattr(lg, w)(m), getattr(np, w)(m))
    close(lg.kaiser(9, 4.5), np.kaiser(9, 4.5))


X = np.random.default_rng(2).normal(size=(3, 8))


@pytest.mark.parametrize("n", [None, 6, 11])
@pytest.mark.parametrize("norm", NORMS)
def test_gradients_are_adjoints(n, norm):
    check_grad(lambda a: F.irfft(F.rfft(a, n=n, norm=norm), n=7, norm=norm), X)
    check_grad(lambda a: F.irfft(F.fft(a, n=n, norm=norm), n=9), X)
    check_grad(lambda a: F.irfft(F.ifft(a, n=n, axis=0, norm=norm), n=9), X)
    check_grad(lambda a: F.irfft(F.fftn(a, s=(2, n or 8), axes=(0, 1), norm=norm)), X)
