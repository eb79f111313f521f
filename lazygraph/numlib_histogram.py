"""Multi-dimensional histograms on lazy arrays: `histogramdd` and `histogram2d`, as NumPy counts them.

Each sample falls in the bin whose edges bracket it along every dimension (the last bin of a
dimension also holds its right edge; samples outside any dimension's edges are not counted).
The bin of a sample is a flat index recorded per dimension with `searchsorted`, and the counts
are one recorded scatter-add, so the function is lazy whenever the edges are: array bins, or
integer bins with an explicit range. Integer bins without a range read each dimension's
minimum and maximum (an evaluation point, as `histogram`).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array, record
from lazygraph.creation import zeros
from lazygraph.numlib_sort import searchsorted
from lazygraph.shape import _arr, asarray, reshape

__all__ = ["histogramdd", "histogram2d"]


def _columns(sample: Any) -> list[Array]:
    """The D coordinate arrays of a sample: an (N, D) array, or a sequence of D 1-d arrays."""
    if isinstance(sample, (list, tuple)) and sample and not np.isscalar(sample[0]):
        cols = [_arr(c) for c in sample]
        n = cols[0].shape
        if any(c.ndim != 1 or c.shape != n for c in cols):
            raise ValueError(
                "histogramdd: the sample's coordinate arrays must be 1-d and of one length, got shapes "
                + ", ".join(str(c.shape) for c in cols)
            )
        common = np.result_type(*[c.dtype for c in cols])  # NumPy stacks them into one array
        return [c if c.dtype == common else c.astype(common) for c in cols]
    s = _arr(sample)
    if s.ndim == 1:
        s = reshape(s, (s.shape[0], 1))
    if s.ndim != 2:
        raise ValueError(f"histogramdd: sample must be (N, D) or D arrays of length N, got shape {s.shape}")
    return [s[:, i] for i in range(s.shape[1])]


def _per_dim(name: str, value: Any, d: int, what: str) -> list:
    """`bins` or `range` given once for all dimensions or once per dimension."""
    if (
        value is None
        or isinstance(value, (str, int, np.integer))
        or (isinstance(value, (Array, np.ndarray)) and value.ndim == 0)
    ):
        return [value] * d
    if isinstance(value, Array) and value.ndim == 1:
        return [value] * d if what == "bins" and d == 1 else list(value)
    items = list(value)
    if len(items) != d:
        raise ValueError(f"{name}: the dimension of {what} must be equal to the dimension of the sample x.")
    return items


def _dd_edges(c: Array, b: Any, r: Any) -> Array:
    """One dimension's edges as NumPy's histogramdd makes them (linspace of the range, or the bins)."""
    if isinstance(b, Array):
        if b.ndim != 1:
            raise ValueError("histogramdd: `bins[i]` must be 1d, when an array")
        return b  # lazy edges: NumPy's monotonicity check would need their values
    if np.ndim(b):
        e = np.asarray(b)
        if e.ndim != 1 or np.any(e[:-1] > e[1:]):
            raise ValueError("histogramdd: `bins[i]` must be monotonically increasing, when an array")
        return asarray(e)
    if r is not None:
        lo, hi = r
        if lo > hi:
            raise ValueError("histogramdd: max must be larger than min in range parameter.")
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"histogramdd: supplied range of [{lo}, {hi}] is not finite")
    elif c.shape[0] == 0:
        lo, hi = 0, 1
    else:
        lo, hi = api.eval(api.min(c), api.max(c))  # data-dependent range: evaluation point
        lo, hi = lo[()], hi[()]
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"histogramdd: autodetected range of [{lo}, {hi}] is not finite")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return asarray(np.linspace(lo, hi, operator.index(b) + 1))


def histogramdd(
    sample: Any,
    bins: Any = 10,
    range: Any = None,  # noqa: A002 - NumPy's name
    density: bool | None = None,
    weights: Any = None,
) -> tuple[Array, list[Array]]:
    """Counts (float64, as NumPy) of the samples per D-dimensional bin, and each dimension's edges."""
    cols = _columns(sample)
    d = len(cols)
    bins_d = _per_dim("histogramdd", bins, d, "bins")
    range_d = _per_dim("histogramdd", range, d, "range")
    for b in bins_d:
        if np.ndim(b) == 0 and not isinstance(b, Array) and operator.index(b) < 1:
            raise ValueError(f"histogramdd: `bins[i]` must be positive, when an integer (got {b})")
    edges = [_dd_edges(c, b, r) for c, b, r in zip(cols, bins_d, range_d, strict=True)]
    nb = [e.shape[0] - 1 for e in edges]
    # bin 0 and bin nb+1 of each dimension collect what lies outside (dropped at the end)
    flat = None
    for c, e, n in zip(cols, edges, nb, strict=True):
        i = searchsorted(e, c, side="right")
        i = api.where(api.equal(c, e[-1]), n, i)  # the right edge belongs to the last bin
        flat = i if flat is None else api.add(api.multiply(flat, n + 2), i)
    total = int(np.prod([n + 2 for n in nb]))
    if weights is None:
        counts = record("scatter_add", zeros((total,), np.float64), 1.0, flat, index=(("a", 0),))
    else:
        w = _arr(weights)
        if w.shape != cols[0].shape:
            raise ValueError(
                f"histogramdd: weights of shape {w.shape} do not match {cols[0].shape[0]} samples"
            )
        acc = np.complex128 if w.dtype.kind == "c" else np.float64
        counts = record("scatter_add", zeros((total,), acc), w.astype(acc), flat, index=(("a", 0),))
    hist = reshape(counts, tuple(n + 2 for n in nb))[tuple(slice(1, -1) for _ in nb)]
    if density:
        s = hist.sum()
        for k, e in enumerate(edges):
            shape = [1] * d
            shape[k] = nb[k]
            hist = hist / reshape((e[1:] - e[:-1]).astype(np.float64), tuple(shape))
        hist = hist / s
    return hist, edges


def histogram2d(
    x: Any,
    y: Any,
    bins: Any = 10,
    range: Any = None,  # noqa: A002 - NumPy's name
    density: bool | None = None,
    weights: Any = None,
) -> tuple[Array, Array, Array]:
    """Counts of the points (x, y) per 2-D bin and the two edge arrays (x along the first axis)."""
    x, y = _arr(x), _arr(y)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(
            f"histogram2d: x and y must be 1-d of one length, got shapes {x.shape} and {y.shape}"
        )
    n = (
        len(bins)
        if isinstance(bins, (list, tuple, np.ndarray)) or (isinstance(bins, Array) and bins.ndim)
        else 1
    )
    if n not in (1, 2):  # one array of edges for both dimensions
        bins = [bins, bins]
    hist, (xe, ye) = histogramdd([x, y], bins, range, density, weights)
    return hist, xe, ye
