"""NumPy's matrix functions on lazy arrays (part of ``lazygraph.numlib``; see its docstring).

``tri``, ``tril``, ``triu``, ``diagonal``, ``diag``, ``trace``, ``kron``, ``vdot``, ``cross``:
compositions of lazygraph's own operations, recorded, never computed here.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array
from lazygraph.creation import arange, zeros
from lazygraph.numlib_math import _conj
from lazygraph.shape import _arr, broadcast_to, expand_dims, moveaxis, pad, ravel, reshape, stack
from ops.base import fmt_shape, normalize_axis


def tri(N: int, M: int | None = None, k: int = 0, dtype: Any = float) -> Array:
    """Ones at and below the k-th diagonal, the mask behind tril/triu."""
    M = N if M is None else M
    mask = api.greater_equal(arange(N)[:, None], arange(-k, M - k)[None, :])
    return api.astype(mask, dtype)


def _tri_mask(name: str, m: Array, k: int) -> Array:
    if m.ndim == 0:
        raise ValueError(f"{name}: input must be at least 1-d, got shape ()")
    return tri(*m.shape[-2:], k=k, dtype=bool)


def tril(m: Any, k: int = 0) -> Array:
    """Zero the elements above the k-th diagonal (of the last two axes)."""
    m = _arr(m)
    return api.where(_tri_mask("tril", m, k), m, zeros((1,), m.dtype))


def triu(m: Any, k: int = 0) -> Array:
    """Zero the elements below the k-th diagonal (of the last two axes)."""
    m = _arr(m)
    return api.where(_tri_mask("triu", m, k - 1), zeros((1,), m.dtype), m)


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    """The (offset) diagonal of two axes as the last axis: read-only, a copy (see the module notes)."""
    a = _arr(a)
    if a.ndim < 2:
        raise ValueError(f"diagonal: requires an array of at least two dimensions, got {fmt_shape(a.shape)}")
    ax1 = normalize_axis("diagonal", axis1, a.ndim)
    ax2 = normalize_axis("diagonal", axis2, a.ndim)
    if ax1 == ax2:
        raise ValueError("diagonal: axis1 and axis2 cannot be the same")
    x = moveaxis(a, (ax1, ax2), (-2, -1))
    n, m = x.shape[-2:]
    offset = int(offset)
    if offset >= 0:
        length = max(0, min(n, m - offset))
        rows, cols = np.arange(length), np.arange(length) + offset
    else:
        length = max(0, min(n + offset, m))
        rows, cols = np.arange(length) - offset, np.arange(length)
    out = x[..., rows, cols]
    return broadcast_to(out, out.shape)  # read-only, as NumPy's diagonal view


def diag(v: Any, k: int = 0) -> Array:
    """A 1-d array as a matrix's k-th diagonal, or a matrix's k-th diagonal as a 1-d array."""
    v = _arr(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError(f"diag: input must be 1- or 2-d, got shape {fmt_shape(v.shape)}")
    k = int(k)
    n = v.shape[0] + abs(k)
    vp = pad(v, ((k, 0),) if k >= 0 else ((0, -k),))
    mask = api.astype(api.equal(arange(n)[:, None] + k, arange(n)[None, :]), bool)
    return api.where(mask, vp[None, :], zeros((), v.dtype))


def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Array:
    """Sum of a diagonal."""
    return api.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def kron(a: Any, b: Any) -> Array:
    """Kronecker product: every element of a times the whole of b, as blocks."""
    b = _arr(b)
    a = _arr(a)
    if a.ndim < b.ndim:
        a = reshape(a, (1,) * (b.ndim - a.ndim) + a.shape)
    nda, ndb = a.ndim, b.ndim
    if nda == 0 or ndb == 0:
        return api.multiply(a, b)
    nd = max(nda, ndb)
    as_ = (1,) * max(0, ndb - nda) + a.shape
    bs = (1,) * max(0, nda - ndb) + b.shape
    a_arr = reshape(a, as_)
    b_arr = reshape(b, bs)
    a_arr = expand_dims(a_arr, tuple(range(1, nd * 2, 2)))
    b_arr = expand_dims(b_arr, tuple(range(0, nd * 2, 2)))
    return reshape(api.multiply(a_arr, b_arr), tuple(x * y for x, y in zip(as_, bs)))


def vdot(a: Any, b: Any) -> Array:
    """Dot product of the flattened inputs, conjugating the first (a lazy 0-d array)."""
    a, b = ravel(_arr(a)), ravel(_arr(b))
    if a.size != b.size:
        raise ValueError(f"vdot: vectors have different lengths ({a.size} and {b.size})")
    dt = np.result_type(a.dtype, b.dtype)
    if dt == np.bool_:
        return api.any(api.logical_and(a, b))
    return api.sum(api.multiply(_conj(a), b), dtype=dt)


def cross(
    a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: int | None = None
) -> Array:
    """Cross product of 3-vectors (and NumPy's 2-vector forms) along an axis."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _arr(a), _arr(b)
    if a.ndim < 1 or b.ndim < 1:
        raise ValueError(
            f"cross: at least one array has zero dimension ({fmt_shape(a.shape)}, {fmt_shape(b.shape)})"
        )
    a = moveaxis(a, normalize_axis("cross", axisa, a.ndim), -1)
    b = moveaxis(b, normalize_axis("cross", axisb, b.ndim), -1)
    na, nb = a.shape[-1], b.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError(
            f"cross: incompatible dimensions for cross product (dimension must be 2 or 3), got shapes "
            f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}"
        )
    if na == 2 or nb == 2:
        warnings.warn(
            "Arrays of 2-dimensional vectors are deprecated. Use arrays of 3-dimensional vectors instead.",
            DeprecationWarning,
            stacklevel=2,
        )
    dt = np.promote_types(a.dtype, b.dtype)
    a, b = api.astype(a, dt), api.astype(b, dt)
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    a0, a1, b0, b1 = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    cp2 = api.subtract(api.multiply(a0, b1), api.multiply(a1, b0))
    if na == 2 and nb == 2:
        return broadcast_to(cp2, shape) if cp2.shape != shape else cp2
    if na == 2:
        b2 = b[..., 2]
        cp0, cp1 = api.multiply(a1, b2), api.negative(api.multiply(a0, b2))
    elif nb == 2:
        a2 = a[..., 2]
        cp0, cp1 = api.negative(api.multiply(a2, b1)), api.multiply(a2, b0)
    else:
        a2, b2 = a[..., 2], b[..., 2]
        cp0 = api.subtract(api.multiply(a1, b2), api.multiply(a2, b1))
        cp1 = api.subtract(api.multiply(a2, b0), api.multiply(a0, b2))
    cp = stack([broadcast_to(c, shape) for c in (cp0, cp1, cp2)], axis=-1)
    return moveaxis(cp, -1, normalize_axis("cross", axisc, cp.ndim))


__all__ = ["tri", "tril", "triu", "diagonal", "diag", "trace", "kron", "vdot", "cross"]
