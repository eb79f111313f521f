"""Functions whose result's shape depends on values (part of ``lazygraph.numlib_sort``).

Each is an evaluation point: it evaluates its input once (or only what decides the shape, a
count) and returns arrays built from the result: ``unique`` and the Array API's ``unique_all``,
``unique_counts``, ``unique_inverse``, ``unique_values``; ``nonzero``, ``argwhere``,
``flatnonzero`` and one-argument ``where`` (with x and y, ``where`` records).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array, record
from lazygraph.numlib_unique import unique_host
from lazygraph.shape import _arr, asarray, permute_dims, ravel, reshape
from ops.sorting import array_namespace


def _leaves(result: Any) -> Any:
    """NumPy results of an evaluation point as lazy leaves (tuples stay tuples)."""
    if isinstance(result, tuple):
        return tuple(asarray(r) for r in result)
    return asarray(result)


def _value(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, Array) else np.asarray(x)


def _unique_parts(x: Any, equal_nan: bool, first: bool = True) -> tuple[Array, Array, Array, Array]:
    """(values, first indices, inverse of x's shape, counts) of x flattened, as NumPy's unique.

    The number of distinct values decides the shapes: it is evaluated (x evaluated once). On the
    CPU NumPy's unique then runs on those values (numlib_unique.py: indices, inverse and counts
    are leaves); on a device the `unique_indices` operator is recorded. The values are a gather
    from x either way, so they are differentiable with respect to x.
    """
    x = _arr(x)
    flat = ravel(x)
    if str(x.device) == "cpu":
        return unique_host(x, flat, equal_nan, first)
    k = int(record("unique_count", flat, equal_nan=equal_nan))
    packed = record("unique_indices", flat, count=k, equal_nan=equal_nan, first=first)
    index, counts = packed[:k], packed[k : 2 * k]
    return flat[index], index, reshape(packed[2 * k :], x.shape), counts


def unique(
    ar: Any,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: int | None = None,
    *,
    equal_nan: bool = True,
    sorted: bool = True,  # noqa: A002 - NumPy's name
) -> Any:
    """Sorted distinct values (and first indices, inverse, counts): an evaluation point (their number)."""
    if axis is not None:  # distinct slices: NumPy's function on the value
        res = np.unique(
            _value(ar),
            return_index=return_index,
            return_inverse=return_inverse,
            return_counts=return_counts,
            axis=axis,
            equal_nan=equal_nan,
            sorted=sorted,
        )
        return _leaves(res)
    if not (sorted or return_index or return_inverse or return_counts):
        return _unsorted_values(ar, equal_nan)
    values, index, inverse, counts = _unique_parts(ar, equal_nan, return_index)
    extra = [
        r for r, want in ((index, return_index), (inverse, return_inverse), (counts, return_counts)) if want
    ]
    return (values, *extra) if extra else values


def _unsorted_values(x: Any, equal_nan: bool) -> Array:
    """NumPy's unique(sorted=False) values (its own order): the count evaluated, the values recorded."""
    flat = ravel(_arr(x))
    k = int(record("unique_count", flat, equal_nan=equal_nan))
    return record("unique_values", flat, count=k, equal_nan=equal_nan)


UniqueAllResult = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])
UniqueCountsResult = namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def unique_all(x: Any, /) -> UniqueAllResult:
    """Array API: distinct values, first indices, inverse indices (x's shape), counts; NaNs distinct."""
    return UniqueAllResult(*_unique_parts(x, False))


def unique_counts(x: Any, /) -> UniqueCountsResult:
    """Array API: distinct values and their counts (NaNs distinct); their number is evaluated."""
    values, _, _, counts = _unique_parts(x, False, first=False)
    return UniqueCountsResult(values, counts)


def unique_inverse(x: Any, /) -> UniqueInverseResult:
    """Array API: distinct values and the inverse indices (x's shape); their number is evaluated."""
    values, _, inverse, _ = _unique_parts(x, False, first=False)
    return UniqueInverseResult(values, inverse)


def unique_values(x: Any, /) -> Array:
    """Array API: distinct values (NaNs distinct, NumPy's unsorted order); their number is evaluated."""
    return _unsorted_values(x, False)


def _nonzero_rows(a: Any) -> Array:
    """The `nonzero` operator's (ndim, count) indices: the count is evaluated, the indices recorded."""
    a = _arr(a)
    if a.ndim == 0:
        raise ValueError(
            "nonzero: Calling nonzero on 0d arrays is not allowed. Use np.atleast_1d(scalar).nonzero() instead."
        )
    buf = a.node.buffer
    if buf is not None:  # already evaluated: count from the value, no graph to run
        count = int(array_namespace(buf).count_nonzero(buf))
    else:
        count = int(api.sum(api.not_equal(a, 0), dtype=np.intp))
    return record("nonzero", a, count=count)


def nonzero(a: Any) -> tuple[Array, ...]:
    """Indices of the nonzero elements, one array per axis: an evaluation point (their number)."""
    rows = _nonzero_rows(a)
    return tuple(rows[d] for d in range(rows.shape[0]))


def argwhere(a: Any) -> Array:
    """Indices of nonzero elements as rows (one column per axis): an evaluation point (their number)."""
    if np.ndim(a) == 0:  # NumPy reads a 0-d array as (1, 0) or (0, 0)
        return _leaves(np.argwhere(_value(a)))
    return permute_dims(_nonzero_rows(a), (1, 0))


def flatnonzero(a: Any) -> Array:
    """Indices of the nonzero elements of the flattened array: an evaluation point (their number)."""
    return _nonzero_rows(ravel(_arr(a)))[0]


def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """Elements of x where condition holds, else of y (lazy); with condition alone, nonzero (an evaluation point)."""
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError("where: either both or neither of x and y should be given")
    return api.where(condition, x, y)


__all__ = [
    "unique",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "nonzero",
    "argwhere",
    "flatnonzero",
    "where",
]
