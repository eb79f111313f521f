"""NumPy's elementwise extras, comparisons, statistics and NaN-ignoring reductions on lazy arrays.

Part of the NumPy library layer (see ``lazygraph.numlib`` for the list and the documented
differences); every function records lazily unless its docstring says it is an evaluation point.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array
from lazygraph.creation import full, zeros
from lazygraph.shape import _arr, broadcast_to, concat, permute_dims, reshape, squeeze
from lazygraph.shape import copy as _copy
from ops.base import fmt_shape, normalize_axes

__all__ = [
    "hypot",
    "copysign",
    "signbit",
    "heaviside",
    "fmax",
    "fmin",
    "isclose",
    "allclose",
    "array_equal",
    "count_nonzero",
    "ptp",
    "average",
    "cov",
    "corrcoef",
    "nansum",
    "nanprod",
    "nancumsum",
    "nancumprod",
    "nanmean",
    "nanvar",
    "nanstd",
    "nanmax",
    "nanmin",
    "nanargmax",
    "nanargmin",
    "nan_to_num",
]

_PY_SCALARS = (bool, int, float, complex)


def _operand(x: Any) -> Any:
    """Arrays and Python scalars (weak, as NumPy treats them) as they are; anything else lazy."""
    return x if isinstance(x, (Array, *_PY_SCALARS)) else _arr(x)


def _ufunc_dtype(name: str, ufunc: np.ufunc, *xs: Any) -> np.dtype:
    """The dtype NumPy's ufunc gives for these operands (probed on 0-d examples, not on data)."""
    examples = [x if isinstance(x, _PY_SCALARS) else np.zeros((), x.dtype) for x in xs]
    try:
        with np.errstate(all="ignore"):
            return np.asarray(ufunc(*examples)).dtype
    except TypeError:
        kinds = ", ".join(str(np.asarray(e).dtype) for e in examples)
        raise TypeError(f"{name}: not supported for input types ({kinds})") from None


def _real(z: Array) -> Array:
    """The real part of a complex array (exact: stored into a real buffer)."""
    out = zeros(z.shape, np.finfo(z.dtype).dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the intended loss of the imaginary part
        out[...] = z
    return out


def _conj(z: Array) -> Array:
    """Complex conjugate (exact for finite values; see lazygraph.numlib); real input unchanged."""
    if z.dtype.kind != "c":
        return z
    re = _real(z)
    return api.add(re, api.subtract(re, z))


# -- elementwise ---------------------------------------------------------------------------------


def hypot(x1: Any, x2: Any) -> Array:
    """sqrt(x1**2 + x2**2) without overflow, for norms of 2-vectors (within 2 ulp of NumPy)."""
    x1, x2 = _operand(x1), _operand(x2)
    dt = _ufunc_dtype("hypot", np.hypot, x1, x2)
    work = np.float64 if dt.itemsize < 8 else dt  # narrow floats: one rounding at the end
    a, b = api.abs(api.astype(x1, work)), api.abs(api.astype(x2, work))
    big, small = api.maximum(a, b), api.minimum(a, b)
    r = api.divide(small, api.where(api.equal(big, 0), 1, big))
    res = api.multiply(big, api.sqrt(api.add(1, api.multiply(r, r))))
    res = api.where(api.logical_or(api.isinf(a), api.isinf(b)), math.inf, res)
    return api.astype(res, dt)


# operators of their own (ops/elementwise.py): NumPy's bits, the sign of NaN included
signbit = api.signbit
copysign = api.copysign


def heaviside(x1: Any, x2: Any) -> Array:
    """The step function: 0 below zero, x2 at zero, 1 above (NaN stays NaN)."""
    x1, x2 = _operand(x1), _operand(x2)
    dt = _ufunc_dtype("heaviside", np.heaviside, x1, x2)
    a, h = api.astype(x1, dt), api.astype(x2, dt)
    inner = api.where(api.less(a, 0), 0, api.where(api.greater(a, 0), 1, h))
    return api.where(api.isnan(a), a, inner)


def _fminmax(name: str, ufunc: np.ufunc, cmp: Any, x1: Any, x2: Any) -> Array:
    x1, x2 = _operand(x1), _operand(x2)
    dt = _ufunc_dtype(name, ufunc, x1, x2)
    a, b = api.astype(x1, dt), api.astype(x2, dt)
    keep = cmp(a, b)
    if dt.kind in "fc":
        keep = api.logical_or(api.isnan(b), keep)
    return api.where(keep, a, b)


def fmax(x1: Any, x2: Any) -> Array:
    """Elementwise maximum that ignores NaN (NaN only where both are NaN)."""
    return _fminmax("fmax", np.fmax, api.greater_equal, x1, x2)


def fmin(x1: Any, x2: Any) -> Array:
    """Elementwise minimum that ignores NaN (NaN only where both are NaN)."""
    return _fminmax("fmin", np.fmin, api.less_equal, x1, x2)


# -- comparisons ---------------------------------------------------------------------------------


def isclose(a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> Array:
    """Elementwise |a - b| <= atol + rtol * |b| (inf equal only to itself), for tolerant tests."""
    x, y, atol, rtol = (t if isinstance(t, _PY_SCALARS) else _arr(t) for t in (a, b, atol, rtol))
    if isinstance(y, Array):
        dt = np.result_type(y.dtype, 1.0)
        if dt != y.dtype:
            y = api.astype(y, dt)
    elif isinstance(y, int):
        y = float(y)
    close = api.less_equal(api.abs(api.subtract(x, y)), api.add(atol, api.multiply(rtol, api.abs(y))))
    result = api.logical_or(api.logical_and(close, api.isfinite(y)), api.equal(x, y))
    if equal_nan:
        result = api.logical_or(result, api.logical_and(api.isnan(x), api.isnan(y)))
    return result


def allclose(a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element is close (an evaluation point: returns a Python bool, as NumPy)."""
    return bool(api.all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)))


def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> bool:
    """Same shape and elements (an evaluation point: returns a Python bool, as NumPy)."""
    try:
        a1, a2 = _arr(a1), _arr(a2)
    except Exception:  # noqa: BLE001 - NumPy: anything that is not an array is not equal
        return False
    if a1.shape != a2.shape:
        return False
    eq = api.equal(a1, a2)
    if equal_nan and (a1.dtype.kind in "fc" or a2.dtype.kind in "fc"):
        eq = api.logical_or(eq, api.logical_and(api.isnan(a1), api.isnan(a2)))
    return bool(api.all(eq))


# -- statistics ----------------------------------------------------------------------------------


def count_nonzero(a: Any, axis: Any = None, *, keepdims: bool = False) -> Array:
    """Number of non-zero elements (axis None: a lazy 0-d int64 array, not a Python int)."""
    return api.sum(api.not_equal(_arr(a), 0), axis=axis, dtype=np.intp, keepdims=keepdims)


def ptp(a: Any, axis: Any = None, keepdims: bool = False) -> Array:
    """Range (maximum - minimum), in the input's dtype as NumPy (integers wrap)."""
    a = _arr(a)
    return api.subtract(api.max(a, axis=axis, keepdims=keepdims), api.min(a, axis=axis, keepdims=keepdims))


def average(
    a: Any, axis: Any = None, weights: Any = None, returned: bool = False, *, keepdims: bool = False
) -> Any:
    """Weighted mean (weights summing to zero give nan/inf, not NumPy's ZeroDivisionError)."""
    a = _arr(a)
    if weights is None:
        avg = api.mean(a, axis=axis, keepdims=keepdims)
        if not returned:
            return avg
        return avg, full(avg.shape, a.size / avg.size, avg.dtype)
    wgt = _arr(weights)
    if axis is not None:
        normalize_axes("average", axis, a.ndim)  # NumPy checks the axes first when weighted
    if a.dtype.kind in "iub":
        dt = np.result_type(a.dtype, wgt.dtype, "f8")
    else:
        dt = np.result_type(a.dtype, wgt.dtype)
    if a.shape != wgt.shape:
        if axis is None:
            raise TypeError(
                f"average: axis must be specified when shapes of a {fmt_shape(a.shape)} and weights "
                f"{fmt_shape(wgt.shape)} differ"
            )
        axes = normalize_axes("average", axis, a.ndim)
        given = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
        given = tuple(g % a.ndim for g in given)
        if wgt.shape != tuple(a.shape[ax] for ax in given):
            raise ValueError(
                f"average: shape of weights {fmt_shape(wgt.shape)} must be consistent with shape of a "
                f"{fmt_shape(a.shape)} along specified axis {axis}"
            )
        wgt = permute_dims(wgt, tuple(int(i) for i in np.argsort(given)))
        wgt = reshape(wgt, tuple(s if ax in axes else 1 for ax, s in enumerate(a.shape)))
    scl = api.sum(wgt, axis=axis, dtype=dt, keepdims=keepdims)
    prod = api.multiply(api.astype(a, dt), api.astype(wgt, dt))
    avg = api.divide(api.sum(prod, axis=axis, keepdims=keepdims), scl)
    if not returned:
        return avg
    if scl.shape != avg.shape:
        scl = _copy(broadcast_to(scl, avg.shape))
    return avg, scl


def _as_2d(x: Array) -> Array:
    return reshape(x, (1,) * (2 - x.ndim) + x.shape) if x.ndim < 2 else x


def _weights(name: str, w: Any, n: int, check_int: bool) -> Array:
    if not isinstance(w, Array):
        arr = np.asarray(w, dtype=float)
        if check_int and not np.all(arr == np.around(arr)):
            raise TypeError(f"cov: {name} must be integer")
        if arr.ndim == 1 and (arr < 0).any():
            raise ValueError(f"cov: {name} cannot be negative")
    w = api.astype(_arr(w), np.float64)
    if w.ndim > 1:
        raise RuntimeError(f"cov: cannot handle multidimensional {name} (shape {fmt_shape(w.shape)})")
    if w.shape[0] != n:
        raise RuntimeError(f"cov: incompatible numbers of samples ({n}) and {name} ({w.shape[0]})")
    return w


def cov(
    m: Any,
    y: Any = None,
    rowvar: bool = True,
    bias: bool = False,
    ddof: int | None = None,
    fweights: Any = None,
    aweights: Any = None,
    *,
    dtype: Any = None,
) -> Array:
    """Covariance matrix of variables (rows, or columns when rowvar=False)."""
    if ddof is not None and ddof != int(ddof):
        raise ValueError("cov: ddof must be integer")
    m = _arr(m)
    if m.ndim > 2:
        raise ValueError(f"cov: m has more than 2 dimensions (shape {fmt_shape(m.shape)})")
    if y is not None:
        y = _arr(y)
        if y.ndim > 2:
            raise ValueError(f"cov: y has more than 2 dimensions (shape {fmt_shape(y.shape)})")
    if dtype is None:
        dtype = (
            np.result_type(m.dtype, np.float64) if y is None else np.result_type(m.dtype, y.dtype, np.float64)
        )
    X = _as_2d(api.astype(m, dtype))
    if not rowvar and m.ndim != 1:
        X = X.T
    if X.shape[0] == 0:
        return zeros((0, 0))
    if y is not None:
        Y = _as_2d(api.astype(y, dtype))
        if not rowvar and Y.shape[0] != 1:
            Y = Y.T
        X = concat([X, Y], axis=0)
    if ddof is None:
        ddof = 1 if bias == 0 else 0
    w = None
    n = X.shape[1]
    if fweights is not None:
        w = _weights("fweights", fweights, n, True)
    aw = None
    if aweights is not None:
        aw = _weights("aweights", aweights, n, False)
        w = aw if w is None else api.multiply(w, aw)
    avg, w_sum = average(X, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        fact: Any = n - ddof
        if fact <= 0:
            warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
            fact = 0.0
    else:
        if ddof == 0:
            fact = w_sum
        elif aw is None:
            fact = api.subtract(w_sum, ddof)
        else:
            fact = api.subtract(w_sum, api.divide(api.multiply(ddof, api.sum(api.multiply(w, aw))), w_sum))
        # NumPy replaces a non-positive factor by the float 0.0: the scale 1/fact is then a real
        # inf, never complex 1/(0+0j) (which would turn every entry into nan)
        fact = api.where(api.less_equal(fact, 0), 0.0, fact)
        if np.dtype(fact.dtype).kind == "c":
            fact = _real(fact)
    X = api.subtract(X, avg[:, None])
    X_T = X.T if w is None else api.multiply(X, w).T
    c = api.matmul(X, _conj(X_T))
    with np.errstate(divide="ignore"):
        scale = float(np.true_divide(1, fact)) if not isinstance(fact, Array) else api.divide(1, fact)
    c = api.astype(api.multiply(c, scale), c.dtype, copy=False)  # NumPy scales c in place
    return squeeze(c)


def corrcoef(x: Any, y: Any = None, rowvar: bool = True, *, dtype: Any = None) -> Array:
    """Pearson correlation coefficients, clipped to [-1, 1] (real input)."""
    for v in (x, y):
        if v is not None and np.dtype(_arr(v).dtype).kind == "c":
            raise TypeError("corrcoef: complex input is not supported")
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return api.divide(c, c)
    n = c.shape[0]
    stddev = api.sqrt(c[np.arange(n), np.arange(n)])
    c = api.divide(c, stddev[:, None])
    c = api.divide(c, stddev[None, :])
    return api.clip(c, -1, 1)


# -- NaN-ignoring reductions ---------------------------------------------------------------------


def _replace_nan(a: Array, value: float) -> tuple[Array, Array | None]:
    if a.dtype.kind not in "fc":
        return a, None
    mask = api.isnan(a)
    return api.where(mask, value, a), mask


def nansum(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """Sum treating NaN as zero."""
    arr, _ = _replace_nan(_arr(a), 0)
    return api.sum(arr, axis=axis, dtype=dtype, keepdims=keepdims)


def nanprod(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """Product treating NaN as one."""
    arr, _ = _replace_nan(_arr(a), 1)
    return api.prod(arr, axis=axis, dtype=dtype, keepdims=keepdims)


def nancumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Array:
    """Running sum treating NaN as zero (leading NaNs give zeros), for series with gaps."""
    arr, _ = _replace_nan(_arr(a), 0)
    return _stored(api.cumsum(arr, axis=axis, dtype=dtype), out, "nancumsum")


def nancumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Array:
    """Running product treating NaN as one."""
    arr, _ = _replace_nan(_arr(a), 1)
    return _stored(api.cumprod(arr, axis=axis, dtype=dtype), out, "nancumprod")


def _stored(r: Array, out: Any, name: str) -> Array:
    """NumPy's `out=`: the result written into `out` (an lg array of the result's shape), returned."""
    if out is None:
        return r
    if not isinstance(out, Array):
        raise TypeError(f"{name}: out must be a lazygraph array, got {type(out).__name__}")
    if out.shape != r.shape:
        raise ValueError(f"{name}: out has shape {fmt_shape(out.shape)}, the result {fmt_shape(r.shape)}")
    out[...] = r
    return out


def _count(mask: Array, axis: Any, keepdims: bool) -> Array:
    return api.sum(api.logical_not(mask), axis=axis, dtype=np.intp, keepdims=keepdims)


def _divide_by_count(x: Array, cnt: Any) -> Array:
    """x / cnt stored in x's dtype (NumPy divides in place)."""
    return api.astype(api.divide(x, cnt), x.dtype, copy=False)


def nanmean(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """Mean ignoring NaN (an all-NaN slice gives nan, without NumPy's RuntimeWarning)."""
    arr, mask = _replace_nan(_arr(a), 0)
    if mask is None:
        return api.mean(arr, axis=axis, dtype=dtype, keepdims=keepdims)
    if dtype is not None and not issubclass(np.dtype(dtype).type, np.inexact):
        raise TypeError(f"nanmean: if a is inexact, then dtype must be inexact (got {np.dtype(dtype)})")
    cnt = _count(mask, axis, keepdims)
    tot = api.sum(arr, axis=axis, dtype=dtype, keepdims=keepdims)
    return _divide_by_count(tot, cnt)


def nanvar(a: Any, axis: Any = None, dtype: Any = None, ddof: float = 0, keepdims: bool = False) -> Array:
    """Variance ignoring NaN (nan where fewer than ddof + 1 values remain)."""
    arr, mask = _replace_nan(_arr(a), 0)
    if mask is None:
        return api.var(arr, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    if dtype is not None and not issubclass(np.dtype(dtype).type, np.inexact):
        raise TypeError(f"nanvar: if a is inexact, then dtype must be inexact (got {np.dtype(dtype)})")
    cnt = _count(mask, axis, True)
    avg = _divide_by_count(api.sum(arr, axis=axis, dtype=dtype, keepdims=True), cnt)
    arr = api.astype(api.subtract(arr, avg), arr.dtype, copy=False)
    arr = api.where(mask, 0, arr)
    sqr = _real(api.multiply(arr, _conj(arr))) if arr.dtype.kind == "c" else api.multiply(arr, arr)
    var = api.sum(sqr, axis=axis, dtype=dtype, keepdims=keepdims)
    if var.ndim < cnt.ndim:
        cnt = reshape(cnt, var.shape)
    dof = api.subtract(cnt, ddof)
    var = _divide_by_count(var, dof)
    return api.where(api.less_equal(dof, 0), math.nan, var)


def nanstd(a: Any, axis: Any = None, dtype: Any = None, ddof: float = 0, keepdims: bool = False) -> Array:
    """Standard deviation ignoring NaN."""
    return api.sqrt(nanvar(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims))


def _nan_extreme(name: str, reduce: Any, fill: float, a: Any, axis: Any, keepdims: bool) -> Array:
    a = _arr(a)
    if a.dtype.kind == "c":
        raise TypeError(f"{name}: complex input is not supported")
    if a.dtype.kind != "f":
        return reduce(a, axis=axis, keepdims=keepdims)
    mask = api.isnan(a)
    res = reduce(api.where(mask, fill, a), axis=axis, keepdims=keepdims)
    return api.where(api.all(mask, axis=axis, keepdims=keepdims), math.nan, res)


def nanmax(a: Any, axis: Any = None, keepdims: bool = False) -> Array:
    """Maximum ignoring NaN (an all-NaN slice gives nan, without NumPy's RuntimeWarning)."""
    return _nan_extreme("nanmax", api.max, -math.inf, a, axis, keepdims)


def nanmin(a: Any, axis: Any = None, keepdims: bool = False) -> Array:
    """Minimum ignoring NaN (an all-NaN slice gives nan, without NumPy's RuntimeWarning)."""
    return _nan_extreme("nanmin", api.min, math.inf, a, axis, keepdims)


def _nan_arg(name: str, reduce: Any, fill: float, a: Any, axis: Any, keepdims: bool) -> Array:
    a = _arr(a)
    if a.dtype.kind == "c":
        raise TypeError(f"{name}: complex input is not supported")
    if a.dtype.kind != "f":
        return reduce(a, axis=axis, keepdims=keepdims)
    mask = api.isnan(a)
    res = reduce(api.where(mask, fill, a), axis=axis, keepdims=keepdims)  # shape errors first
    if a.size and bool(api.any(api.all(mask, axis=axis))):  # the evaluation point
        raise ValueError(f"{name}: All-NaN slice encountered (shape {fmt_shape(a.shape)}, axis {axis})")
    return res


def nanargmax(a: Any, axis: int | None = None, keepdims: bool = False) -> Array:
    """Index of the maximum ignoring NaN; for floats an evaluation point (all-NaN raises ValueError)."""
    return _nan_arg("nanargmax", api.argmax, -math.inf, a, axis, keepdims)


def nanargmin(a: Any, axis: int | None = None, keepdims: bool = False) -> Array:
    """Index of the minimum ignoring NaN; for floats an evaluation point (all-NaN raises ValueError)."""
    return _nan_arg("nanargmin", api.argmin, math.inf, a, axis, keepdims)


def nan_to_num(
    x: Any, copy: bool = True, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
) -> Array:
    """Replace NaN and infinities by finite numbers (copy=False writes into x, as NumPy)."""
    x = _arr(x)
    if x.dtype.kind == "c":
        raise TypeError("nan_to_num: complex input is not supported")
    if x.dtype.kind != "f":
        return _copy(x) if copy else x
    info = np.finfo(x.dtype)
    with np.errstate(all="ignore"):
        vals = [
            np.array(v, dtype=x.dtype)
            for v in (nan, info.max if posinf is None else posinf, info.min if neginf is None else neginf)
        ]
    res = api.where(api.isnan(x), vals[0], x)
    res = api.where(api.logical_and(api.isinf(x), api.greater(x, 0)), vals[1], res)
    res = api.where(api.logical_and(api.isinf(x), api.less(x, 0)), vals[2], res)
    if not copy:
        x[...] = res
        return x
    return res
