"""`lg.fft`: numpy.fft and the Array API fft extension, recorded lazily.

Each transform is an operator of ops/fft.py (numpy.fft is the reference; float32 stays
complex64 as in NumPy 2); the 2-d forms are the n-d ones over the last two axes. `fftfreq`,
`rfftfreq`, `fftshift` and `ifftshift` are compositions (arange, roll). Gradients: fft, ifft,
rfft, irfft, fftn, ifftn. Differences from NumPy: the n-d transforms refuse repeated axes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ops.fft  # noqa: F401  (registers the operators)
from lazygraph import api, numlib
from lazygraph.array import Array, check_device, record
from lazygraph.creation import arange
from lazygraph.shape import _arr, concat

__all__ = [
    "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
    "fft2", "ifft2", "rfft2", "irfft2", "fftfreq", "rfftfreq", "fftshift", "ifftshift",
]  # fmt: skip


def _one(name: str, x: Any, n: Any, axis: int, norm: Any) -> Array:
    return record(name, _arr(x), n=n, axis=axis, norm=norm)


def _many(name: str, x: Any, s: Any, axes: Any, norm: Any) -> Array:
    return record(
        name,
        _arr(x),
        s=None if s is None else tuple(s),
        axes=None if axes is None else tuple(axes),
        norm=norm,
    )


def fft(x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Array:
    """One-dimensional discrete Fourier transform along an axis."""
    return _one("fft", x, n, axis, norm)


def ifft(x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Array:
    """Inverse of fft."""
    return _one("ifft", x, n, axis, norm)


def rfft(x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Array:
    """Transform of real input: the n//2 + 1 non-negative frequencies."""
    return _one("rfft", x, n, axis, norm)


def irfft(x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Array:
    """Inverse of rfft: real output of length n (default 2*(m-1))."""
    return _one("irfft", x, n, axis, norm)


def hfft(x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Array:
    """Transform of a Hermitian-symmetric signal given by its first half: real output."""
    return _one("hfft", x, n, axis, norm)


def ihfft(x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Array:
    """Inverse of hfft."""
    return _one("ihfft", x, n, axis, norm)


def fftn(x: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Array:
    """n-dimensional discrete Fourier transform."""
    return _many("fftn", x, s, axes, norm)


def ifftn(x: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Array:
    """Inverse of fftn."""
    return _many("ifftn", x, s, axes, norm)


def rfftn(x: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Array:
    """n-dimensional transform of real input (the last axis halved)."""
    return _many("rfftn", x, s, axes, norm)


def irfftn(x: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Array:
    """Inverse of rfftn."""
    return _many("irfftn", x, s, axes, norm)


def fft2(x: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Array:
    """Two-dimensional transform (fftn over the last two axes)."""
    return _many("fftn", x, s, axes, norm)


def ifft2(x: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Array:
    """Inverse of fft2."""
    return _many("ifftn", x, s, axes, norm)


def rfft2(x: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Array:
    """Two-dimensional transform of real input."""
    return _many("rfftn", x, s, axes, norm)


def irfft2(x: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Array:
    """Inverse of rfft2."""
    return _many("irfftn", x, s, axes, norm)


def _freq(values: Array, n: int, d: float, dtype: Any, device: Any) -> Array:
    check_device(device)
    out = api.multiply(values, 1.0 / (n * d))
    return out if dtype is None else api.astype(out, dtype)


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Array:
    """Sample frequencies of an n-point fft with spacing d: [0, 1, ..., -n//2, ..., -1] / (n*d)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise ValueError(f"fftfreq: n should be an integer, got {n!r}")
    half = (n - 1) // 2 + 1
    return _freq(concat([arange(0, half), arange(-(n // 2), 0)]), n, d, dtype, device)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Array:
    """Sample frequencies of an n-point rfft: [0, 1, ..., n//2] / (n*d)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise ValueError(f"rfftfreq: n should be an integer, got {n!r}")
    return _freq(arange(0, n // 2 + 1), n, d, dtype, device)


def _shift(x: Any, axes: Any, sign: int) -> Array:
    x = _arr(x)
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = (axes,)
    shift = [sign * (x.shape[a] // 2) for a in axes]
    return numlib.roll(x, shift, tuple(axes)) if axes else api.astype(x, x.dtype, copy=True)


def fftshift(x: Any, axes: Any = None) -> Array:
    """Move the zero frequency to the centre of the spectrum."""
    return _shift(x, axes, 1)


def ifftshift(x: Any, axes: Any = None) -> Array:
    """Inverse of fftshift."""
    return _shift(x, axes, -1)
