"""NumPy functions built on lg.linalg and the window operator: polyfit, roots, diagflat, window functions."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

import ops.fft  # noqa: F401  (registers the window operator)
from lazygraph import api, linalg, numlib
from lazygraph.array import Array, record
from lazygraph.creation import eye, zeros
from lazygraph.shape import _arr, concat, ravel, reshape

__all__ = ["bartlett", "blackman", "diagflat", "hamming", "hanning", "kaiser", "polyfit", "roots"]


def hanning(M: int) -> Array:
    """The Hann window of M points (lazy creation)."""
    return record("window", kind="hanning", M=M)


def hamming(M: int) -> Array:
    """The Hamming window of M points (lazy creation)."""
    return record("window", kind="hamming", M=M)


def blackman(M: int) -> Array:
    """The Blackman window of M points (lazy creation)."""
    return record("window", kind="blackman", M=M)


def bartlett(M: int) -> Array:
    """The Bartlett (triangular) window of M points (lazy creation)."""
    return record("window", kind="bartlett", M=M)


def kaiser(M: int, beta: float) -> Array:
    """The Kaiser window of M points with shape parameter beta (lazy creation)."""
    return record("window", kind="kaiser", M=M, beta=beta)


def diagflat(v: Any, k: int = 0) -> Array:
    """A 2-d array with the flattened input on its k-th diagonal."""
    return numlib.diag(ravel(_arr(v)), operator.index(k))


def polyfit(
    x: Any, y: Any, deg: int, rcond: float | None = None, full: bool = False, w: Any = None, cov: bool = False
) -> Any:
    """Least-squares polynomial coefficients, highest power first, as NumPy (scaled Vandermonde lstsq).

    Stays lazy: NumPy's RankWarning for a rank-deficient fit would need the rank's value, so it
    is not issued. full=True returns lstsq's residuals too, an evaluation point (see lg.linalg.lstsq).
    """
    order = operator.index(deg) + 1
    x, y = api.add(_arr(x), 0.0), api.add(_arr(y), 0.0)
    if deg < 0:
        raise ValueError("polyfit: expected deg >= 0")
    if x.ndim != 1:
        raise TypeError("polyfit: expected 1D vector for x")
    if x.size == 0:
        raise TypeError("polyfit: expected non-empty vector for x")
    if y.ndim < 1 or y.ndim > 2:
        raise TypeError("polyfit: expected 1D or 2D array for y")
    if x.shape[0] != y.shape[0]:
        raise TypeError("polyfit: expected x and y to have same length")
    if cov:
        raise TypeError("polyfit: cov=True is not supported by lazygraph (compute it from lstsq's outputs)")
    if rcond is None:
        rcond = len(x) * np.finfo(x.dtype).eps
    lhs, rhs = numlib.vander(x, order), y
    if w is not None:
        w = api.add(_arr(w), 0.0)
        if w.ndim != 1 or w.shape[0] != y.shape[0]:
            raise TypeError("polyfit: expected a 1-d w of the same length as y")
        lhs = api.multiply(lhs, w[:, None])
        rhs = api.multiply(rhs, w if rhs.ndim == 1 else w[:, None])
    scale = api.sqrt(api.sum(api.multiply(lhs, lhs), axis=0))
    lhs = api.divide(lhs, scale)
    result = linalg.lstsq(lhs, rhs, rcond)
    c = result[0]
    c = api.divide(c, scale) if c.ndim == 1 else api.divide(c, reshape(scale, (-1, 1)))
    if full:
        return c, result.residuals, result.rank, result.s, rcond
    return c


def roots(p: Any) -> Array:
    """Roots of a polynomial (coefficients highest power first): eigenvalues of its companion matrix.

    Which coefficients are zero decides the result's length (NumPy strips leading zeros and
    returns trailing ones as zero roots), so that is an evaluation point; the companion matrix
    and its eigenvalues are recorded. The roots are always complex (lazygraph's `eigvals`:
    NumPy returns a real array when every root is real).
    """
    p = _arr(p)
    if p.ndim == 0:
        p = reshape(p, (1,))
    if p.ndim != 1:
        raise ValueError(f"roots: input must be a rank-1 array, got shape {p.shape}")
    if p.dtype.kind not in "fc":
        p = api.astype(p, np.float64)
    nz = np.flatnonzero(api.not_equal(p, 0).numpy())  # the evaluation point
    ct = np.result_type(p.dtype, np.complex64)
    if nz.size == 0:
        return zeros((0,), np.float64)
    trailing = p.shape[0] - int(nz[-1]) - 1
    p = p[int(nz[0]) : int(nz[-1]) + 1]
    n = p.shape[0]
    found = zeros((0,), ct)
    if n > 1:
        lead = reshape(-p[1:] / p[0], (1, n - 1))
        if n > 2:  # the subdiagonal of ones under the first row
            shift = concat([eye(n - 2, dtype=lead.dtype), zeros((n - 2, 1), lead.dtype)], axis=1)
            lead = concat([lead, shift], axis=0)
        found = linalg.eigvals(lead)
    if trailing:
        found = concat([found, zeros((trailing,), found.dtype)])
    return found
