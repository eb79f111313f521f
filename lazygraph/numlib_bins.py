"""Bin indices of equal-width histogram bins, computed as NumPy's `histogram` computes them.

`histogram(a, bins=int, range=(lo, hi))` has equal bins, and NumPy does not search the edges
for them: it scales each value, `((v - lo) / (hi - lo)) * bins`, truncates, moves a value
equal to `hi` into the last bin, then corrects by one bin where rounding put a value on the
wrong side of an edge (`v < edges[i]`: one down; `v >= edges[i + 1]` outside the last bin: one
up). `uniform_index` records exactly those steps, elementwise (the edges next to a value by
linspace's formula where that gives every edge, else gathered), so the JIT fuses them; a
binary search over the edges for each value costs several
times that (on 2 million values, 32 bins: NumPy's `searchsorted` alone takes 5x its
`histogram`). The indices are NumPy's, so the counts are too (the weighted sums keep the
caller's order of additions). Values outside `[lo, hi]` and NaN get index `bins` (the
caller's overflow bin, sliced off), as NumPy drops them.

Only where every step is plainly NumPy's: int bins with a finite static range, values of bool,
integers up to 32 bits (exact in float64) or float32/float64 (float16 and 64-bit integers
take the edge search, which gives the same bins up to the rounding NumPy corrects).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array
from lazygraph.shape import asarray

_KINDS = frozenset("?bBhHiIfd")  # bool, (u)int8..32, float32, float64 (np.dtype.char)


def _unsigned_subtract(a: Any, b: Any) -> Any:
    """NumPy's `hi - lo` for the scale (signed integers subtract as unsigned: no overflow)."""
    dt = np.result_type(a, b)
    if dt.kind == "i":
        udt = np.dtype(f"u{dt.itemsize}")
        return np.subtract(np.asarray(a, dtype=dt), np.asarray(b, dtype=dt), casting="unsafe", dtype=udt)
    return np.subtract(a, b, dtype=dt)


def uniform_index(a: Array, bins: Any, rng: Any, edges: np.ndarray) -> Array | None:
    """Each value's bin (0..bins-1, `bins` when outside the range) as NumPy finds it; None: search."""
    if isinstance(bins, (str, Array)) or np.ndim(bins) != 0 or rng is None or isinstance(rng, Array):
        return None
    if a.dtype.char not in _KINDS or edges.dtype.char not in "fd" or a.ndim != 1:
        return None
    try:
        lo, hi = rng
        nb = int(bins)
    except (TypeError, ValueError):
        return None
    if isinstance(lo, Array) or isinstance(hi, Array) or nb < 1 or len(edges) != nb + 1:
        return None
    if type(lo) not in (int, float) or type(hi) not in (int, float):
        return None  # NumPy scalars promote by their own dtype: the edge search handles them
    if not (abs(lo) < 2**53 and abs(hi) < 2**53):
        return None  # a range beyond float64's exact integers is finite but rounds
    if lo == hi:  # NumPy widens an empty range by half a unit each way
        lo, hi = lo - 0.5, hi + 0.5
    denom = _unsigned_subtract(hi, lo)
    bt = edges.dtype
    tmp = a.astype(bt) if a.dtype != bt else a
    # NumPy keeps lo <= v <= hi (NaN fails both); the rest is scaled from lo, never read
    keep = api.logical_and(api.greater_equal(tmp, lo), api.less_equal(tmp, hi))
    safe = api.where(keep, tmp, edges[0].item())
    f = api.multiply(api.divide(api.subtract(safe, lo), denom), nb)
    idx = f.astype(np.intp)
    idx = api.where(api.equal(idx, nb), nb - 1, idx)
    edge = _edge_formula(lo, hi, nb, edges)
    if edge is None:  # edges[k] by gathering from the edges themselves
        e = asarray(edges)
        edge = lambda k: e[k]  # noqa: E731
    idx = api.where(api.less(safe, edge(idx)), api.subtract(idx, 1), idx)
    up = api.logical_and(api.greater_equal(safe, edge(api.add(idx, 1))), api.not_equal(idx, nb - 1))
    idx = api.where(up, api.add(idx, 1), idx)
    return api.where(keep, idx, nb)


def _edge_formula(lo: Any, hi: Any, nb: int, edges: np.ndarray) -> Any:
    """edges[k] as linspace computes it (k * step + lo, the last one hi), when that gives every edge.

    Elementwise, so the index computation stays one fused region (no gathers); checked here
    on all nb + 1 edges with the same float64 operations, so the lazy values are the edges.
    """
    start = float(np.asarray(lo, dtype=np.float64))
    last = float(np.asarray(hi, dtype=np.float64))
    step = float(np.subtract(hi, lo, dtype=np.float64)) / nb
    if step == 0:
        return None  # linspace scales differently then
    cand = np.arange(nb + 1, dtype=np.float64) * step + start
    cand[-1] = last
    bt = edges.dtype
    if not np.array_equal(cand.astype(bt), edges):
        return None

    def edge(k: Array) -> Array:
        v = api.where(api.equal(k, nb), last, api.add(api.multiply(k.astype(np.float64), step), start))
        return v.astype(bt) if bt != np.float64 else v

    return edge
