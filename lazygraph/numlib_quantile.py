"""Order statistics on lazy arrays: median, percentile, quantile and their NaN-ignoring versions.

Each is a composition recorded lazily: a stable sort along the reduced axes (merged into one),
gathers at the positions the quantile needs, and NumPy's own interpolation arithmetic
(``a + (b - a) * t``, or ``b - (b - a) * (1 - t)`` for ``t >= 0.5``), so values are NumPy's bits.
Gradients flow through the gathered elements (ties: the element the stable sort placed there).
``median`` of slices of 128 values or more, without a gradient wanted, selects instead of
sorting (the ``partition`` operator, NumPy's introselect, as NumPy's median does): the same
order statistics, O(n) a slice.
``q`` must be static (Python or NumPy values); a lazy ``q`` is evaluated first (an evaluation
point). Methods: ``linear`` (the default), ``lower``, ``higher``, ``nearest``, ``midpoint``.
``out=`` records a write into a lazy array; ``overwrite_input`` is accepted and changes nothing
(inputs are never modified, the sort works on a copy).
NaN propagates as in NumPy; the NaN-ignoring versions count the valid elements of each slice
lazily and gather at positions computed from that count.

Known differences: where NumPy's result dtype depends on values (a 0-d float64 quantile of a
float32 slice holding NaN is float32 in NumPy; ``nanquantile`` of a float32 array whose first
slice is all NaN), the dtype here is the one of the NaN-free case.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array, record
from lazygraph.gradmode import GRAD_STATE
from lazygraph.numlib_math import nanmean
from lazygraph.shape import _arr, moveaxis, ravel, reshape, stack
from ops.base import normalize_axes

__all__ = ["median", "percentile", "quantile", "nanmedian", "nanpercentile", "nanquantile"]

_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")
#: slice length from which median selects rather than sorts (measured: NumPy's argpartition
#: costs more than the stable sort on many short slices, 9 values 2x, 64 values 1.4x; from
#: 128 values on it is cheaper, 32769 values 4x)
_SELECT_MIN = 128


def _merge(name: str, a: Array, axis: Any) -> tuple[Array, tuple[int, ...], tuple[int, ...]]:
    """a with the reduced axes moved last and merged into one; the kept shape; the reduced axes."""
    if axis is None:
        return ravel(a), (), tuple(range(a.ndim))
    axes = normalize_axes(name, axis, a.ndim)
    kept = [d for d in range(a.ndim) if d not in axes]
    x = moveaxis(a, list(axes), list(range(len(kept), a.ndim))) if axes else a
    kept_shape = tuple(a.shape[d] for d in kept)
    size = int(np.prod([a.shape[d] for d in axes], dtype=np.int64))
    return reshape(x, kept_shape + (size,)), kept_shape, axes


def _keep(r: Array, a: Array, axes: tuple[int, ...], lead: tuple[int, ...], keepdims: bool) -> Array:
    """NumPy's keepdims: the reduced axes back as size 1, after q's leading dimensions."""
    if not keepdims:
        return r
    shape = lead + tuple(1 if d in axes else n for d, n in enumerate(a.shape))
    return r.reshape(shape)


def _q(name: str, q: Any, percent: bool, dtype: np.dtype) -> tuple[np.ndarray, bool]:
    """q as NumPy prepares it (percent / 100, validity), and whether it is a weak Python scalar."""
    if isinstance(q, Array):
        q = q.numpy()  # a lazy q is evaluated: the gather positions depend on it
    weak = type(q) in (int, float)
    q = np.true_divide(q, 100) if percent else np.asanyarray(q)
    q = np.asanyarray(q)
    if q.size and not (np.min(q) >= 0 and np.max(q) <= 1):
        raise ValueError(
            f"{name}: "
            + (
                "Percentiles must be in the range [0, 100]"
                if percent
                else "Quantiles must be in the range [0, 1]"
            )
        )
    if q.ndim > 2:
        raise ValueError(f"{name}: q must be a scalar or 1d")
    return q, weak


def _check(name: str, a: Array, method: str, overwrite_input: bool, out: Any) -> None:
    if a.dtype.kind == "c":
        raise TypeError(f"{name}: a must be an array of real numbers")
    if method not in _METHODS:
        raise ValueError(f"{name}: {method!r} is not a valid method. Use one of: {', '.join(_METHODS)}")
    if out is not None and not isinstance(out, Array):
        raise TypeError(f"{name}: out must be a lazygraph Array, got {type(out).__name__}")


def _out(name: str, r: Array, out: Any) -> Array:
    """Write into `out` (recorded, NumPy's casting of an assignment) when given."""
    if out is None:
        return r
    if not isinstance(out, Array):
        raise TypeError(f"{name}: out must be a lazygraph Array, got {type(out).__name__}")
    if out.shape != r.shape:
        raise ValueError(f"{name}: out has shape {out.shape}, the result {r.shape}")
    out[...] = r
    return out


def _virtual(xp: Any, km1: Any, q: Any, method: str) -> Any:
    """NumPy's virtual index of each quantile among n sorted values (km1 = n - 1); xp: numpy or lazygraph."""
    v = km1 * q
    if method == "lower":
        return xp.floor(v).astype(np.intp)
    if method == "higher":
        return xp.ceil(v).astype(np.intp)
    if method == "nearest":
        return xp.round(v).astype(np.intp)
    if method == "midpoint":
        return 0.5 * (xp.floor(v) + xp.ceil(v))
    return v


def _lerp(a: Array, b: Array, t: Any, one_minus: Any, upper: Any) -> Array:
    """NumPy's interpolation: a + (b - a) t, or b - (b - a)(1 - t) where t >= 0.5 (`upper`)."""
    diff = api.subtract(b, a)
    low = api.add(a, api.multiply(diff, t))
    if isinstance(upper, bool):
        return api.subtract(b, api.multiply(diff, one_minus)) if upper else low
    return api.where(upper, api.subtract(b, api.multiply(diff, one_minus)), low)


def _along(s: Array, idx: Any) -> Array:
    """s[..., idx] for an index array of shape s.shape[:-1] + (m,) (lazy) or (m,) (static)."""
    if isinstance(idx, Array):
        lead = [
            np.arange(d).reshape([-1 if k == i else 1 for k in range(s.ndim)])
            for i, d in enumerate(s.shape[:-1])
        ]
        return s[(*lead, idx)]
    return s[..., np.asarray(idx, dtype=np.intp)]


def _front(r: Array, qshape: tuple[int, ...], kept: tuple[int, ...]) -> Array:
    """kept + (m,) -> q.shape + kept."""
    return moveaxis(r, -1, 0).reshape(qshape + kept)


def _quantile(
    name: str, a: Any, q: Any, axis: Any, out: Any, method: str, keepdims: bool, percent: bool
) -> Array:
    a = _arr(a)
    _check(name, a, method, False, out)
    q, weak = _q(name, q, percent, a.dtype)
    x, kept, axes = _merge(name, a, axis)
    n = x.shape[-1]
    if n == 0:
        raise IndexError(
            f"{name}: index -1 is out of bounds for axis 0 with size 0 (input {a.shape}, axis {axis})"
        )
    s = record("sort", x, axis=-1)
    vi = np.asanyarray(_virtual(np, n - 1, q, method))
    flat = vi.reshape(-1)
    if vi.dtype.kind in "iu":
        r = _front(_along(s, flat), q.shape, kept)
    else:
        prev = np.floor(flat)
        above, below = flat >= n - 1, flat < 0
        prev[above], prev[below] = -1, 0
        nxt = np.where(above, -1, np.where(below, 0, prev + 1))
        gamma = np.asanyarray(vi - prev.reshape(vi.shape), dtype=vi.dtype)
        if method == "midpoint":
            gamma = np.where(vi % 1 == 0, 0.0, 0.5).astype(vi.dtype)
        lo = _front(_along(s, prev.astype(np.intp) % n), q.shape, kept)
        hi = _front(_along(s, nxt.astype(np.intp) % n), q.shape, kept)
        if weak:
            t = float(gamma)
            r = _lerp(lo, hi, t, 1 - t, t >= 0.5)
        else:
            g = gamma.reshape(q.shape + (1,) * len(kept))
            r = _lerp(lo, hi, g, 1 - g, g >= 0.5)
    if a.dtype.kind == "f":  # a slice holding NaN sorts it last: the result is that NaN
        last = s[..., -1]
        r = api.where(api.isnan(last), last, r)
    return _out(name, _keep(r, a, axes, q.shape, keepdims), out)


def quantile(
    a: Any,
    q: Any,
    axis: Any = None,
    out: Any = None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
) -> Array:
    """The q-th quantiles (q in [0, 1]) along axes, recorded lazily (sort, gather, NumPy's interpolation)."""
    return _quantile("quantile", a, q, axis, out, method, keepdims, False)


def percentile(
    a: Any,
    q: Any,
    axis: Any = None,
    out: Any = None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
) -> Array:
    """The q-th percentiles (q in [0, 100]) along axes, for summaries and robust thresholds."""
    return _quantile("percentile", a, q, axis, out, method, keepdims, True)


def median(
    a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False, keepdims: bool = False
) -> Array:
    """The median along axes (mean of the two middle values for even counts; NaN propagates), lazily."""
    a = _arr(a)
    x, kept, axes = _merge("median", a, axis)
    n = x.shape[-1]
    h = n // 2
    if n >= _SELECT_MIN and a.dtype.kind in "biuf" and not (a.node.requires_grad and GRAD_STATE.enabled):
        # NumPy's own selection (O(n)): the middle values, and the max last (NaN sorts there);
        # with gradients the stable sort decides which of equal elements the median is
        kth = ([h] if n % 2 else [h - 1, h]) + ([n - 1] if a.dtype.kind == "f" else [])
        s = record("partition", x, axis=-1, kth=tuple(kth))
    else:
        s = record("sort", x, axis=-1)
    r = api.mean(s[..., h : h + 1] if n % 2 else s[..., h - 1 : h + 1], axis=-1)
    if a.dtype.kind in "fc" and n > 0:
        last = s[..., -1]
        r = api.where(api.isnan(last), last, r)
    return _out("median", _keep(r, a, axes, (), keepdims), out)


# -- NaN-ignoring versions ---------------------------------------------------------------------------


def _valid_sorted(name: str, a: Array, axis: Any) -> tuple[Array, Array, tuple, tuple, int]:
    x, kept, axes = _merge(name, a, axis)
    s = record("sort", x, axis=-1)  # NaN last: the k valid values come first
    k = api.sum(api.logical_not(api.isnan(x)), axis=-1)
    return s, k, kept, axes, x.shape[-1]


def _nanquantile(
    name: str, a: Any, q: Any, axis: Any, out: Any, method: str, keepdims: bool, percent: bool
) -> Array:
    a = _arr(a)
    _check(name, a, method, False, out)
    q, weak = _q(name, q, percent, a.dtype)
    if a.size == 0:
        return _out(name, nanmean(a, axis=axis, keepdims=keepdims), out)
    if a.dtype.kind != "f":  # nothing to ignore
        return _quantile(name, a, q if not weak else q.item(), axis, out, method, keepdims, False)
    s, k, kept, axes, n = _valid_sorted(name, a, axis)
    km1 = api.subtract(k, 1)
    if q.dtype.kind == "f":
        km1 = km1.astype(q.dtype)  # NumPy multiplies the Python int n - 1 in q's dtype
    flat = q.reshape(-1)
    vi = _virtual(api, km1[..., None], flat, method)  # kept + (m,)
    last = api.maximum(km1[..., None], 0).astype(np.intp)
    if vi.dtype.kind in "iu":
        r = _along(s, api.clip(vi, 0, n - 1))
    else:
        above = api.greater_equal(vi, km1[..., None])
        below = api.less(vi, 0)
        fl = api.floor(vi)
        prev = api.where(above, -1.0, api.where(below, 0.0, fl))
        gamma = api.subtract(vi, prev).astype(vi.dtype)
        if method == "midpoint":
            gamma = api.where(api.equal(api.remainder(vi, 1), 0), 0.0, 0.5).astype(vi.dtype)
        pi = api.where(above, last, api.where(below, 0, api.clip(fl, 0, n - 1).astype(np.intp)))
        ni = api.where(above, last, api.where(below, 0, api.clip(api.add(fl, 1), 0, n - 1).astype(np.intp)))
        lo, hi = _along(s, pi), _along(s, ni)
        one_minus = api.subtract(1, gamma)
        upper = api.greater_equal(gamma, 0.5)
        if weak:  # NumPy uses a Python float: weak, computed in the data's float dtype
            dt = np.result_type(a.dtype, 0.0)
            gamma, one_minus = gamma.astype(dt), one_minus.astype(dt)
        r = _lerp(lo, hi, gamma, one_minus, upper)
    r = api.where(api.equal(k, 0)[..., None], math.nan, r)  # all-NaN slice
    r = moveaxis(r, -1, 0).reshape(q.shape + kept)
    return _out(name, _keep(r, a, axes, q.shape, keepdims), out)


def nanquantile(
    a: Any,
    q: Any,
    axis: Any = None,
    out: Any = None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
) -> Array:
    """Quantiles ignoring NaN (all-NaN slices give NaN), recorded lazily from per-slice valid counts."""
    return _nanquantile("nanquantile", a, q, axis, out, method, keepdims, False)


def nanpercentile(
    a: Any,
    q: Any,
    axis: Any = None,
    out: Any = None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
) -> Array:
    """Percentiles ignoring NaN (all-NaN slices give NaN), recorded lazily."""
    return _nanquantile("nanpercentile", a, q, axis, out, method, keepdims, True)


def nanmedian(
    a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False, keepdims: bool = False
) -> Array:
    """The median ignoring NaN (all-NaN slices give NaN), recorded lazily from per-slice valid counts."""
    a = _arr(a)
    if a.size == 0:
        return _out("nanmedian", nanmean(a, axis=axis, keepdims=keepdims), out)
    if a.dtype.kind != "f":
        return median(a, axis=axis, out=out, keepdims=keepdims)
    s, k, kept, axes, n = _valid_sorted("nanmedian", a, axis)
    lo_i = api.clip(api.floor_divide(api.subtract(k, 1), 2), 0, max(n - 1, 0))[..., None]
    hi_i = api.clip(api.floor_divide(k, 2), 0, max(n - 1, 0))[..., None]
    lo, hi = _along(s, lo_i)[..., 0], _along(s, hi_i)[..., 0]
    if axis is None or a.ndim == 1 or n >= 600:
        # NumPy's 1-d path: the median of the valid values (the middle one, or the mean of two)
        two = stack([lo, hi], axis=-1)
        r = api.where(api.equal(api.remainder(k, 2), 1), lo, api.mean(two, axis=-1))
    else:
        # NumPy's masked path: (low + high) / 2, the middle value twice for odd counts
        r = api.divide(api.add(lo, hi), 2.0)
    r = api.where(api.equal(k, 0), math.nan, r).astype(a.dtype)
    return _out("nanmedian", _keep(r, a, axes, (), keepdims), out)
