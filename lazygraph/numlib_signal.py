"""NumPy's differences, running sums, polynomials, interpolation and 1-d convolution, recorded lazily.

Part of the NumPy library layer (see ``lazygraph.numlib`` for the list and the documented
differences).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array
from lazygraph.creation import full, ones, zeros
from lazygraph.numlib_math import _conj
from lazygraph.shape import _arr, broadcast_to, concat, flip, reshape
from ops.base import normalize_axis

__all__ = [
    "diff",
    "gradient",
    "cumulative_sum",
    "cumulative_prod",
    "polyval",
    "vander",
    "interp",
    "convolve",
    "correlate",
]


def _along(ndim: int, axis: int, item: Any) -> tuple:
    key = [slice(None)] * ndim
    key[axis] = item
    return tuple(key)


def diff(a: Any, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None) -> Array:
    """n-th discrete difference along an axis (not_equal for booleans, as NumPy)."""
    if n == 0:
        return _arr(a)
    if n < 0:
        raise ValueError(f"diff: order must be non-negative but got {n!r}")
    a = _arr(a)
    if a.ndim == 0:
        raise ValueError("diff: requires input that is at least one dimensional")
    axis = normalize_axis("diff", axis, a.ndim)

    def edge(extra: Any) -> Array:
        extra = _arr(extra)
        if extra.ndim == 0:
            extra = broadcast_to(extra, a.shape[:axis] + (1,) + a.shape[axis + 1 :])
        return extra

    parts = [edge(prepend)] if prepend is not None else []
    parts.append(a)
    if append is not None:
        parts.append(edge(append))
    if len(parts) > 1:
        a = concat(parts, axis=axis)
    op = api.not_equal if a.dtype == np.bool_ else api.subtract
    for _ in range(n):
        a = op(a[_along(a.ndim, axis, slice(1, None))], a[_along(a.ndim, axis, slice(None, -1))])
    return a


def gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    """Central differences inside, one-sided at the edges (scalar spacings; edge_order 1 or 2)."""
    f = _arr(f)
    nd = f.ndim
    if axis is None:
        axes = tuple(range(nd))
    else:
        axes = tuple(
            normalize_axis("gradient", ax, nd)
            for ax in (axis if isinstance(axis, (tuple, list)) else (axis,))
        )
        if len(set(axes)) != len(axes):
            raise ValueError(f"gradient: repeated axis in {axis!r}")
    if len(varargs) == 0:
        dx = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        dx = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        dx = list(varargs)
    else:
        raise TypeError(
            f"gradient: invalid number of arguments ({len(varargs)} spacings for {len(axes)} axes)"
        )
    for d in dx:
        if isinstance(d, Array) or np.ndim(d) != 0:
            raise TypeError("gradient: only scalar (static) spacings are supported, not coordinate arrays")
    if edge_order > 2:
        raise ValueError("gradient: 'edge_order' greater than 2 not supported")
    otype = f.dtype
    if otype.kind in "iu":
        f, otype = api.astype(f, np.float64), np.dtype(np.float64)
    out = []
    for ax, h in zip(axes, dx):
        if f.shape[ax] < edge_order + 1:
            raise ValueError(
                "gradient: shape of array too small to calculate a numerical gradient, at least "
                f"(edge_order + 1) elements are required (axis {ax} of shape {f.shape})"
            )

        def at(item: Any, ax: int = ax) -> Array:
            return f[_along(nd, ax, item)]

        inner = api.divide(api.subtract(at(slice(2, None)), at(slice(None, -2))), 2.0 * h)
        if edge_order == 1:
            first = api.divide(api.subtract(at(slice(1, 2)), at(slice(0, 1))), h)
            last = api.divide(api.subtract(at(slice(-1, None)), at(slice(-2, -1))), h)
        else:
            first = api.add(
                api.add(api.multiply(-1.5 / h, at(slice(0, 1))), api.multiply(2.0 / h, at(slice(1, 2)))),
                api.multiply(-0.5 / h, at(slice(2, 3))),
            )
            last = api.add(
                api.add(api.multiply(0.5 / h, at(slice(-3, -2))), api.multiply(-2.0 / h, at(slice(-2, -1)))),
                api.multiply(1.5 / h, at(slice(-1, None))),
            )
        parts = [api.astype(p, otype, copy=False) for p in (first, inner, last)]
        out.append(concat(parts, axis=ax))
    return out[0] if len(axes) == 1 else tuple(out)


def _cumulative(
    name: str, fn: Any, identity: int, x: Any, axis: int | None, dtype: Any, include_initial: bool
):
    x = _arr(x)
    if x.ndim == 0:
        x = reshape(x, (1,))
    if axis is None:
        if x.ndim >= 2:
            raise ValueError(
                f"{name}: for arrays which have more than one dimension ``axis`` argument is required "
                f"(shape {x.shape})"
            )
        axis = 0
    axis = normalize_axis(name, axis, x.ndim)
    res = fn(x, axis=axis, dtype=dtype)
    if include_initial:
        shape = res.shape[:axis] + (1,) + res.shape[axis + 1 :]
        res = concat([full(shape, identity, res.dtype), res], axis=axis)
    return res


def cumulative_sum(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> Array:
    """Running sum (Array API 2024.12), optionally starting with the empty sum 0."""
    return _cumulative("cumulative_sum", api.cumsum, 0, x, axis, dtype, include_initial)


def cumulative_prod(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> Array:
    """Running product (Array API 2024.12), optionally starting with the empty product 1."""
    return _cumulative("cumulative_prod", api.cumprod, 1, x, axis, dtype, include_initial)


def polyval(p: Any, x: Any) -> Array:
    """Evaluate a polynomial (coefficients highest power first) at x, by Horner's rule as NumPy."""
    p, x = _arr(p), _arr(x)
    if p.ndim == 0:
        raise TypeError("polyval: iteration over a 0-d array (p must hold coefficients)")
    y = zeros(x.shape, x.dtype)
    for i in range(p.shape[0]):
        y = api.add(api.multiply(y, x), p[i])
    return y


def vander(x: Any, N: int | None = None, increasing: bool = False) -> Array:
    """Vandermonde matrix of powers of x (by running products, as NumPy)."""
    x = _arr(x)
    if x.ndim != 1:
        raise ValueError(f"vander: x must be a one-dimensional array or sequence, got shape {x.shape}")
    n = x.shape[0]
    N = n if N is None else int(N)
    if N < 0:
        raise ValueError(f"vander: negative dimensions are not allowed (N={N})")
    dt = np.promote_types(x.dtype, int)
    cols = []
    if N > 0:
        cols.append(ones((n, 1), dt))
    if N > 1:
        cols.append(api.cumprod(broadcast_to(api.astype(x, dt)[:, None], (n, N - 1)), axis=1, dtype=dt))
    v = concat(cols, axis=1) if cols else zeros((n, 0), dt)
    return v if increasing else flip(v, 1)


def interp(x: Any, xp: Any, fp: Any, left: Any = None, right: Any = None, period: Any = None) -> Array:
    """Piecewise-linear interpolation at x of the points (xp, fp), xp increasing (lazy xp and fp).

    Each x is located by counting the xp not above it, so time and memory grow with x.size * xp.size.
    """
    if period is not None:
        raise NotImplementedError("interp: period= needs xp sorted by value, which lazygraph cannot record")
    x, xp, fp = _arr(x), _arr(xp), _arr(fp)
    if xp.ndim != 1 or fp.ndim != 1:
        raise ValueError(f"interp: xp and fp must be 1-d, got shapes {xp.shape} and {fp.shape}")
    if xp.shape[0] != fp.shape[0]:
        raise ValueError(f"interp: fp and xp are not of the same length ({fp.shape[0]} and {xp.shape[0]})")
    n = xp.shape[0]
    if n == 0:
        raise ValueError("interp: array of sample points is empty")
    dt = np.dtype(np.complex128 if fp.dtype.kind == "c" else np.float64)
    xf, xpf, fpf = api.astype(x, np.float64), api.astype(xp, np.float64), api.astype(fp, dt)
    lval = fpf[0] if left is None else api.astype(_arr(left), dt)
    rval = fpf[n - 1] if right is None else api.astype(_arr(right), dt)
    if n == 1:
        inside = api.where(api.greater(xf, xpf[0]), rval, fpf[0])
        return api.where(api.less(xf, xpf[0]), lval, inside)
    count = api.sum(api.greater_equal(xf[..., None], xpf), axis=-1)
    j = api.clip(api.subtract(count, 1), 0, n - 2)
    j1 = api.add(j, 1)
    xj, xj1, yj, yj1 = xpf[j], xpf[j1], fpf[j], fpf[j1]
    slope = api.divide(api.subtract(yj1, yj), api.subtract(xj1, xj))
    res = api.add(api.multiply(slope, api.subtract(xf, xj)), yj)
    other = api.add(api.multiply(slope, api.subtract(xf, xj1)), yj1)
    other = api.where(api.logical_and(api.isnan(other), api.equal(yj, yj1)), yj, other)
    res = api.where(api.isnan(res), other, res)
    res = api.where(api.equal(xf, xj), yj, res)
    res = api.where(api.greater_equal(count, n), fpf[n - 1], res)
    res = api.where(api.less(xf, xpf[0]), lval, res)
    res = api.where(api.greater(xf, xpf[n - 1]), rval, res)
    return api.where(api.isnan(xf), api.astype(xf, dt), res)


_MODES = ("valid", "same", "full")


def _vector(name: str, v: Any, what: str) -> Array:
    v = _arr(v)
    if v.ndim == 0:
        if name == "correlate":
            raise ValueError(f"{name}: object of too small depth for desired array ({what} is 0-d)")
        v = reshape(v, (1,))
    if v.ndim > 1:
        raise ValueError(f"{name}: object too deep for desired array ({what} has shape {v.shape})")
    if v.shape[0] == 0:
        raise ValueError(f"{name}: {what} cannot be empty")
    return v


#: taps up to which a correlation is a sum of shifted slices (beyond: the gathered windows)
_SHIFTED_MAX = 64
#: window-matrix size (rows x taps) from which the shifted slices pay: below it the few nodes
#: of the gathered windows record and hash faster than 3 nodes a tap
_SHIFTED_MIN_WINDOWS = 1 << 16


def _full_rows(name: str, a: Array, v: Array, rows: range) -> Array:
    """Rows `rows` of the full correlation sum_n a[k - (len(v) - 1) + n] * v[n] (no zero padding)."""
    na, nv = a.shape[0], v.shape[0]
    dt = np.result_type(a.dtype, v.dtype)
    a, v = api.astype(a, dt, copy=False), api.astype(v, dt, copy=False)
    if dt != np.bool_ and 1 < nv <= _SHIFTED_MAX and len(rows) * nv >= _SHIFTED_MIN_WINDOWS:
        return _shifted_rows(a, v, rows, dt)
    k = np.asarray(rows, dtype=np.int64)[:, None]
    idx = k - (nv - 1) + np.arange(nv)[None, :]
    valid = (idx >= 0) & (idx < na)
    windows = a[np.clip(idx, 0, na - 1)]
    if dt == np.bool_:
        return api.any(api.logical_and(api.logical_and(windows, v[None, :]), valid), axis=1)
    prod = api.where(valid, api.multiply(windows, v[None, :]), zeros((), dt))
    return api.sum(prod, axis=1, dtype=dt)


def _shifted_rows(a: Array, v: Array, rows: range, dt: np.dtype) -> Array:
    """`_full_rows` as a sum of nv shifted slices of `a` times one tap each (no window matrix).

    Gathering every output's window builds a len(rows) x nv matrix (and its index); nv slices
    times a scalar are elementwise, so they fuse into one pass over `a`. Terms are added tap
    by tap (NumPy's correlate takes a dot product per output: the order differs as it did
    with the windows' sum, within float tolerance). A term whose window leaves `a` (modes
    full and same) is zero there, not a product with padding, so an infinite tap adds no NaN.
    """
    na, nv = a.shape[0], v.shape[0]
    r0, m = rows.start, len(rows)
    total = None
    for n in range(nv):
        lo = r0 - (nv - 1) + n  # the index into a of the first row's term
        s0, s1 = max(lo, 0), min(lo + m, na)
        if s1 <= s0:
            continue  # this tap meets no element of a for any row
        term = api.multiply(a[s0:s1], v[n])
        if s0 > lo or s1 < lo + m:  # rows whose window leaves a: the term is zero there
            parts = [zeros((s0 - lo,), dt)] if s0 > lo else []
            parts.append(term)
            if s1 < lo + m:
                parts.append(zeros((lo + m - s1,), dt))
            term = concat(parts)
        total = term if total is None else api.add(total, term)
    return total if total is not None else zeros((m,), dt)


def _mode(name: str, mode: Any) -> str:
    if mode not in _MODES:
        raise ValueError(f"{name}: mode must be one of 'valid', 'same' or 'full', got {mode!r}")
    return mode


def correlate(a: Any, v: Any, mode: str = "valid") -> Array:
    """Cross-correlation of two 1-d sequences, sum_n a[n + k] * conj(v[n]) (modes full/same/valid)."""
    mode = _mode("correlate", mode)
    a, v = _vector("correlate", a, "a"), _vector("correlate", v, "v")
    na, nv = a.shape[0], v.shape[0]
    n, n1 = min(na, nv), max(na, nv)
    if mode == "full":
        rows = range(0, na + nv - 1)
    elif mode == "valid":
        rows = range(n - 1, n1)
    else:
        start = n - 1 - n // 2 if na >= nv else n // 2
        rows = range(start, start + n1)
    return _full_rows("correlate", a, _conj(v), rows)


def convolve(a: Any, v: Any, mode: str = "full") -> Array:
    """Discrete linear convolution of two 1-d sequences (modes full/same/valid)."""
    mode = _mode("convolve", mode)
    a, v = _arr(a), _arr(v)
    if (v.shape[0] if v.ndim else 1) > (a.shape[0] if a.ndim else 1):
        a, v = v, a
    a, v = _vector("convolve", a, "a"), _vector("convolve", v, "v")
    na, nv = a.shape[0], v.shape[0]
    if mode == "full":
        rows = range(0, na + nv - 1)
    elif mode == "valid":
        rows = range(nv - 1, na)
    else:
        start = nv - 1 - nv // 2
        rows = range(start, start + na)
    return _full_rows("convolve", a, flip(v, 0), rows)
