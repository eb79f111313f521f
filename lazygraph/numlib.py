"""NumPy library functions on lazy arrays, written as compositions of lazygraph's own operations.

Every function here records; nothing is computed until an evaluation point, and the values are
NumPy's (bit for bit where the composition runs NumPy's own arithmetic in NumPy's order; the
few exceptions are listed below with their tolerance). Arguments that decide the result's
shape (repeats, split points, sections, reps, ``N``) must be static: Python or NumPy values,
never lazy arrays.

Covered (``lg.<name>`` once exported):

- rearranging: ``roll`` (axis None/int/tuple), ``tile``, ``repeat`` (int or static per-element
  repeats), ``fliplr``, ``flipud``, ``rot90``, ``unstack``, ``take_along_axis``
- joining and splitting: ``hstack``, ``vstack``, ``dstack``, ``column_stack``, ``array_split``,
  ``hsplit``, ``vsplit``, ``dsplit``, ``atleast_1d``, ``atleast_2d``, ``atleast_3d``,
  ``meshgrid`` (xy/ij, sparse, copy)
- matrices (``numlib_matrix``): ``tri``, ``tril``, ``triu``, ``diag`` (both directions, k), ``diagonal`` (read-only
  as NumPy's, but a copy where NumPy's is a view: later writes to the input are not seen through it),
  ``trace``, ``kron``, ``vdot``, ``cross`` (3- and 2-vectors, as NumPy, with its deprecation
  warning for 2-vectors)
- differences and sums (``numlib_signal``; ``roots`` in ``numlib_linalg``): ``diff``, ``gradient`` (uniform spacing, edge_order
  1 or 2), ``cumulative_sum``, ``cumulative_prod`` (include_initial), ``polyval``, ``roots``, ``vander``,
  ``interp`` (lazy xp/fp; no ``period``), ``convolve``, ``correlate`` (1-D, full/same/valid)
- comparison and statistics (``numlib_math``): ``isclose``, ``allclose`` and ``array_equal``
  (evaluation points returning a Python bool, as NumPy), ``count_nonzero``, ``ptp``,
  ``average``, ``cov``, ``corrcoef``, ``nansum``, ``nanprod``, ``nancumsum``, ``nancumprod``, ``nanmean``, ``nanvar``,
  ``nanstd``, ``nanmax``, ``nanmin``, ``nanargmax``, ``nanargmin``, ``nan_to_num``
- elementwise (``numlib_math``): ``hypot``, ``copysign``, ``signbit``, ``heaviside``, ``fmax``,
  ``fmin``

Where the lazy version cannot do what NumPy does (documented per function):

- value-dependent errors cannot be raised while recording: ``average`` with weights summing to
  zero gives nan/inf instead of ZeroDivisionError, ``nanmean``/``nanmax``/``nanvar`` of an
  all-NaN slice give nan without NumPy's RuntimeWarning, ``cov`` with lazy weights does not check
  that they are non-negative integers. ``nanargmax``/``nanargmin`` on float input are evaluation
  points: they evaluate whether a slice is all NaN and raise NumPy's ValueError if so.
- ``count_nonzero`` with ``axis=None`` returns a lazy 0-d int64 array, not a Python int.
- ``fmax``/``fmin`` of equal values (+0.0 and -0.0) return the first, as
  NumPy's scalar loop (NumPy's own vector loops differ among themselves there).
- ``interp`` locates each x by comparing it with every xp (memory x.size * xp.size), assumes xp
  increasing as NumPy does, and has no ``period``; ``gradient`` takes scalar spacings only.
- ``hypot`` is computed by a scaled square root: within 2 ulp of NumPy's, not its bits.
  ``vdot``, ``convolve`` and ``correlate`` sum in another order than NumPy's dot kernels:
  within the usual float tolerance (and non-finite complex products may differ, inf vs nan).
- complex input: the conjugate (``vdot``, ``cov``, ``correlate``, ``nanvar``) is exact for
  finite values; an infinite or NaN real part makes the conjugate's real part NaN.
  ``nan_to_num``, ``corrcoef``, ``nanmax``/``nanmin``/``nanarg*`` reject complex input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lazygraph.array import Array
from lazygraph.numlib_math import *  # noqa: F403
from lazygraph.numlib_math import __all__ as _math_all
from lazygraph.numlib_matrix import *  # noqa: F403
from lazygraph.numlib_matrix import __all__ as _matrix_all
from lazygraph.numlib_roll import roll_fast
from lazygraph.numlib_signal import *  # noqa: F403
from lazygraph.numlib_signal import __all__ as _signal_all
from lazygraph.shape import (
    _arr,
    broadcast_arrays,
    broadcast_to,
    concat,
    copy,
    expand_dims,
    flip,
    moveaxis,
    permute_dims,
    ravel,
    reshape,
    split,
)
from ops.base import fmt_shape, normalize_axis

_INT = (int, np.integer)


def _static_ints(name: str, value: Any, what: str) -> np.ndarray:
    """A shape-deciding argument as a NumPy int array (a lazy array here would need its values)."""
    if isinstance(value, Array):
        raise TypeError(
            f"{name}: {what} must be static (Python or NumPy integers), not a lazy Array: the "
            "result's shape would depend on its values; pass value.numpy() to decide it here"
        )
    arr = np.asarray(value)
    if arr.size == 0 and not isinstance(value, np.ndarray):  # [] and () are int sequences
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iub":
        raise TypeError(f"{name}: {what} must be integers, got {arr.dtype}")
    return arr.astype(np.int64)


def _is_seq(x: Any) -> bool:
    return isinstance(x, (list, tuple))


# -- rearranging ---------------------------------------------------------------------------------


def roll(a: Any, shift: Any, axis: Any = None) -> Array:
    """Rotate elements along axes (a copy), for shifting sequences and periodic boundaries."""
    a = _arr(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    if type(shift) is int and type(axis) is int:  # the common case, without broadcasting
        ax = normalize_axis("roll", axis, a.ndim)
        out = roll_fast(a, shift, ax)  # a window of a wrap-padded copy (numlib_roll.py)
        if out is not None:
            return out
        total = {ax: shift}
    else:
        total = _roll_shifts(a, shift, axis)
    out = a
    for ax, sh in total.items():
        n = a.shape[ax]
        s = sh % n if n else 0
        if s:
            lo = [slice(None)] * a.ndim
            hi = [slice(None)] * a.ndim
            lo[ax], hi[ax] = slice(n - s, None), slice(None, n - s)
            out = concat([out[tuple(lo)], out[tuple(hi)]], axis=ax)
    return copy(out) if out is a else out


def _roll_shifts(a: Array, shift: Any, axis: Any) -> dict[int, int]:
    """roll's total shift per axis (shifts and axes broadcast; repeated axes add up)."""
    try:
        shifts_in, axes_in = np.broadcast_arrays(np.asarray(shift), np.asarray(axis))
    except ValueError:
        raise ValueError(f"roll: shift {shift!r} and axis {axis!r} do not broadcast together") from None
    if shifts_in.ndim > 1:
        raise ValueError("roll: 'shift' and 'axis' should be scalars or 1D sequences")
    total = dict.fromkeys(range(a.ndim), 0)
    for sh, ax in zip(shifts_in.reshape(-1), axes_in.reshape(-1)):
        total[normalize_axis("roll", int(ax), a.ndim)] += int(sh)
    return total


def tile(A: Any, reps: Any) -> Array:
    """Repeat a whole array along each axis (a copy), for building periodic patterns."""
    tup = tuple(int(r) for r in _static_ints("tile", reps, "reps").reshape(-1))
    a = _arr(A)
    if any(r < 0 for r in tup):
        raise ValueError(f"tile: negative dimensions are not allowed (reps {tup})")
    d = max(len(tup), a.ndim)
    a = reshape(a, (1,) * (d - a.ndim) + a.shape)
    tup = (1,) * (d - len(tup)) + tup
    inter = reshape(a, tuple(x for s in a.shape for x in (1, s)))
    big = broadcast_to(inter, tuple(x for t, s in zip(tup, a.shape) for x in (t, s)))
    return copy(reshape(big, tuple(t * s for t, s in zip(tup, a.shape))))


def repeat(a: Any, repeats: Any, axis: int | None = None) -> Array:
    """Repeat each element (int or static per-element counts), for upsampling and expanding rows."""
    if isinstance(repeats, Array):  # the result's shape is the counts' sum: an evaluation point
        repeats = repeats.numpy()
    reps = _static_ints("repeat", repeats, "repeats")
    a = _arr(a)
    if axis is None or a.ndim == 0:
        a, axis = ravel(a), 0 if axis is None else axis
    axis = normalize_axis("repeat", axis, a.ndim)
    n = a.shape[axis]
    if reps.ndim > 1:
        raise ValueError(f"repeat: repeats must be an integer or 1-d sequence, got shape {reps.shape}")
    if (reps < 0).any() and (n or reps.size != 1):
        raise ValueError("repeat: negative dimensions are not allowed")
    if reps.size == 1:
        r = int(reps.reshape(())) if n else 0
        e = expand_dims(a, axis + 1)
        shp = a.shape[: axis + 1] + (r,) + a.shape[axis + 1 :]
        out = broadcast_to(e, shp)
        return copy(reshape(out, a.shape[:axis] + (n * r,) + a.shape[axis + 1 :]))
    if reps.shape[0] != n:
        raise ValueError(
            f"repeat: operands could not be broadcast together with shape ({n},) ({reps.shape[0]},) "
            f"(axis {axis} of shape {fmt_shape(a.shape)})"
        )
    index = np.repeat(np.arange(n), reps)
    return a[(slice(None),) * axis + (index,)]


def fliplr(m: Any) -> Array:
    """Reverse the columns (a view), NumPy's spelling of flip(m, 1)."""
    m = _arr(m)
    if m.ndim < 2:
        raise ValueError(f"fliplr: input must be >= 2-d, got shape {fmt_shape(m.shape)}")
    return flip(m, 1)


def flipud(m: Any) -> Array:
    """Reverse the rows (a view), NumPy's spelling of flip(m, 0)."""
    m = _arr(m)
    if m.ndim < 1:
        raise ValueError(f"flipud: input must be >= 1-d, got shape {fmt_shape(m.shape)}")
    return flip(m, 0)


def rot90(m: Any, k: int = 1, axes: Sequence[int] = (0, 1)) -> Array:
    """Rotate by 90 degrees in the plane of two axes (a view), for images and grids."""
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("rot90: len(axes) must be 2")
    m = _arr(m)
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == m.ndim:
        raise ValueError(f"rot90: axes must be different, got {axes}")
    if any(not -m.ndim <= ax < m.ndim for ax in axes):
        raise ValueError(f"rot90: axes={axes} out of range for array of ndim={m.ndim}")
    k %= 4
    if k == 0:
        return m[...]
    if k == 2:
        return flip(flip(m, axes[0]), axes[1])
    order = list(range(m.ndim))
    a0, a1 = axes[0] % m.ndim, axes[1] % m.ndim
    order[a0], order[a1] = order[a1], order[a0]
    if k == 1:
        return permute_dims(flip(m, axes[1]), order)
    return flip(permute_dims(m, order), axes[1])


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Array, ...]:
    """Split into the views along an axis (Array API), the inverse of stack."""
    x = _arr(x)
    if x.ndim == 0:
        raise ValueError("unstack: input array must be at least 1-d")
    x = moveaxis(x, normalize_axis("unstack", axis, x.ndim), 0)
    return tuple(x[i] for i in range(x.shape[0]))


def take_along_axis(arr: Any, indices: Any, axis: int | None = -1) -> Array:
    """Gather with an index array shaped like arr (lazy indices), e.g. to apply an argsort/argmax."""
    arr = _arr(arr)
    indices = indices if isinstance(indices, Array) else np.asarray(indices)
    if indices.dtype.kind not in "iu":
        raise IndexError(f"take_along_axis: indices must be of integer type, got {indices.dtype}")
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(f"take_along_axis: when axis=None, indices must be 1-d, got {indices.shape}")
        arr, axis = ravel(arr), 0
    if arr.ndim != indices.ndim:
        raise ValueError(
            f"take_along_axis: indices {fmt_shape(indices.shape)} and arr {fmt_shape(arr.shape)} "
            "must have the same number of dimensions"
        )
    axis = normalize_axis("take_along_axis", axis, arr.ndim)
    key = []
    for d in range(arr.ndim):
        if d == axis:
            key.append(indices)
        else:
            shp = [1] * arr.ndim
            shp[d] = arr.shape[d]
            key.append(np.arange(arr.shape[d]).reshape(shp))
    try:
        np.broadcast_shapes(*(k.shape for k in key))
    except ValueError:
        raise ValueError(
            f"take_along_axis: indices {fmt_shape(indices.shape)} do not broadcast with arr "
            f"{fmt_shape(arr.shape)}"
        ) from None
    return arr[tuple(key)]


# -- joining and splitting -----------------------------------------------------------------------


def _atleast(name: str, nd: int, arys: tuple) -> Any:
    res = []
    for a in arys:
        a = _arr(a)
        if a.ndim < nd:
            if nd == 3 and a.ndim == 2:
                a = a[:, :, None]
            elif nd == 3 and a.ndim == 1:
                a = a[None, :, None]
            else:
                a = reshape(a, (1,) * (nd - a.ndim) + a.shape)
        res.append(a)
    return res[0] if len(res) == 1 else tuple(res)


def atleast_1d(*arys: Any) -> Any:
    """Views with at least one dimension (one array, or a tuple for several)."""
    return _atleast("atleast_1d", 1, arys)


def atleast_2d(*arys: Any) -> Any:
    """Views with at least two dimensions (1-d becomes a row)."""
    return _atleast("atleast_2d", 2, arys)


def atleast_3d(*arys: Any) -> Any:
    """Views with at least three dimensions (NumPy's placement: (N,) -> (1,N,1), (M,N) -> (M,N,1))."""
    return _atleast("atleast_3d", 3, arys)


def _seq(name: str, tup: Any) -> list:
    if isinstance(tup, Array) or not isinstance(tup, (list, tuple)):
        raise TypeError(f"{name}: arrays to stack must be passed as a sequence (list or tuple)")
    if not tup:
        raise ValueError(f"{name}: need at least one array to concatenate")
    return list(tup)


def hstack(tup: Sequence[Any]) -> Array:
    """Join along the second axis (the first for 1-d inputs)."""
    arrs = [atleast_1d(a) for a in _seq("hstack", tup)]
    return concat(arrs, axis=0 if arrs[0].ndim == 1 else 1)


def vstack(tup: Sequence[Any]) -> Array:
    """Join as rows (1-d inputs become rows)."""
    return concat([atleast_2d(a) for a in _seq("vstack", tup)], axis=0)


def dstack(tup: Sequence[Any]) -> Array:
    """Join along the third axis (depth)."""
    return concat([atleast_3d(a) for a in _seq("dstack", tup)], axis=2)


def column_stack(tup: Sequence[Any]) -> Array:
    """Join 1-d arrays as columns (2-d ones as they are)."""
    arrs = []
    for a in _seq("column_stack", tup):
        a = _arr(a)
        arrs.append(reshape(a, (-1, 1)) if a.ndim < 2 else a)
    return concat(arrs, axis=1)


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Array]:
    """Split into views at static indices, or into n nearly equal sections (unequal allowed)."""
    ary = _arr(ary)
    axis = normalize_axis("array_split", axis, ary.ndim)
    if isinstance(indices_or_sections, Array):
        _static_ints("array_split", indices_or_sections, "indices_or_sections")
    if isinstance(indices_or_sections, _INT) or np.ndim(indices_or_sections) == 0:
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError("array_split: number sections must be larger than 0")
        each, extras = divmod(ary.shape[axis], k)
        sizes = [each + 1] * extras + [each] * (k - extras)
        bounds = np.cumsum(sizes)[:-1].tolist()
    else:
        bounds = [int(i) for i in indices_or_sections]
    return split(ary, bounds, axis=axis)


def _split_checked(name: str, ary: Any, ios: Any, min_nd: int, axis: int) -> list[Array]:
    ary = _arr(ary)
    if ary.ndim < min_nd:
        raise ValueError(
            f"{name} only works on arrays of {min_nd} or more dimensions (got shape {fmt_shape(ary.shape)})"
        )
    if isinstance(ios, Array):
        _static_ints(name, ios, "indices_or_sections")
    return split(ary, ios, axis=axis)


def hsplit(ary: Any, indices_or_sections: Any) -> list[Array]:
    """Split columns (the first axis of 1-d arrays) into views."""
    a = _arr(ary)
    return _split_checked("hsplit", a, indices_or_sections, 1, 1 if a.ndim > 1 else 0)


def vsplit(ary: Any, indices_or_sections: Any) -> list[Array]:
    """Split rows into views."""
    return _split_checked("vsplit", ary, indices_or_sections, 2, 0)


def dsplit(ary: Any, indices_or_sections: Any) -> list[Array]:
    """Split along the third axis into views."""
    return _split_checked("dsplit", ary, indices_or_sections, 3, 2)


def meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> list[Array]:
    """Coordinate arrays from coordinate vectors (xy or ij indexing), for evaluating on grids.

    A list, as the Array API 2024.12 asks (NumPy 2 returns a tuple; unpacking and indexing are alike).
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: valid values for `indexing` are 'xy' and 'ij', got {indexing!r}")
    nd = len(xi)
    s0 = (1,) * nd
    out = [reshape(_arr(x), s0[:i] + (-1,) + s0[i + 1 :]) for i, x in enumerate(xi)]
    if indexing == "xy" and nd > 1:
        out[0] = reshape(out[0], (1, -1) + s0[2:])
        out[1] = reshape(out[1], (-1, 1) + s0[2:])
    if not sparse:
        out = broadcast_arrays(*out)
    if copy:
        out = [_copy(x) for x in out]
    return list(out)


_copy = copy


__all__ = sorted(
    [
        "roll",
        "tile",
        "repeat",
        "fliplr",
        "flipud",
        "rot90",
        "unstack",
        "take_along_axis",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "hstack",
        "vstack",
        "dstack",
        "column_stack",
        "array_split",
        "hsplit",
        "vsplit",
        "dsplit",
        "meshgrid",
        *_math_all,
        *_matrix_all,
        *_signal_all,
    ]
)
