"""Sorting, searching, counting and set functions on lazy arrays (NumPy's and the Array API's).

Recorded lazily: ``sort``, ``argsort`` (always stable; NaN last; ``descending`` as the Array
API has it), ``partition`` and ``argpartition`` (NumPy's O(n) introselect: argpartition's
indices are NumPy's, partition gathers by them), ``searchsorted``,
``digitize`` (static bins), ``histogram_bin_edges`` and ``histogram`` (int bins with an explicit
range, or array bins), ``bincount`` of unsigned or bool input when ``minlength`` bounds it, and
the quantiles of ``numlib_quantile``.

Evaluation points (the output's shape depends on values; each evaluates its input once and
returns arrays built from the result as new leaves): ``unique`` and the Array API's
``unique_all``, ``unique_counts``, ``unique_inverse``, ``unique_values``; ``nonzero``,
``argwhere``, ``flatnonzero`` and one-argument ``where``; ``bincount`` otherwise (it evaluates
the input's max, and min for signed input, then records a scatter-add of that length);
``histogram``/``histogram_bin_edges`` with a data-dependent range (min and max evaluated) or
string bins (the input evaluated); ``digitize`` with lazy bins (their monotonicity evaluated).
unique, nonzero and their kin live in ``numlib_evaluated``.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from lazygraph import api
from lazygraph import methods as _methods
from lazygraph.array import Array, record
from lazygraph.creation import zeros
from lazygraph.numlib_bins import uniform_index
from lazygraph.numlib_evaluated import *  # noqa: F403
from lazygraph.numlib_evaluated import __all__ as _evaluated_all
from lazygraph.numlib_evaluated import nonzero
from lazygraph.numlib_quantile import *  # noqa: F403
from lazygraph.numlib_quantile import __all__ as _quantile_all
from lazygraph.shape import _arr, asarray, ravel
from ops.base import fmt_shape, normalize_axis

_KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")


def _kind(name: str, kind: Any, order: Any) -> None:
    """NumPy's `kind` (every kind gives the stable result here) and `order` (structured arrays only)."""
    if kind not in _KINDS:
        raise ValueError(f"{name}: sort kind must be one of 'quick', 'heap', or 'stable' (got {kind!r})")
    if order is not None:
        raise ValueError(f"{name}: Cannot specify order when the array has no fields.")


# -- sorting ---------------------------------------------------------------------------------------


def sort(
    a: Any,
    axis: int | None = -1,
    kind: str | None = None,
    order: Any = None,
    *,
    descending: bool = False,
    stable: bool | None = None,
) -> Array:
    """Sorted copy along an axis (None: flattened), stable, NaN last; NumPy's and the Array API's sort."""
    _kind("sort", kind, order)
    return record("sort", a, axis=axis, descending=descending)


def argsort(
    a: Any,
    axis: int | None = -1,
    kind: str | None = None,
    order: Any = None,
    *,
    descending: bool = False,
    stable: bool | None = None,
) -> Array:
    """Indices that sort along an axis (stable: ties keep their order), for ranking and reordering."""
    _kind("argsort", kind, order)
    return record("argsort", a, axis=axis, descending=descending)


def _kth(name: str, kth: Any, n: int, size: int) -> None:
    """Check partition indices as NumPy does (ints in [-n, n); anything goes for an empty array)."""
    ks = np.asarray(kth)
    if ks.dtype == np.bool_:
        raise ValueError(f"{name}: Booleans unacceptable as partition index")
    if ks.dtype.kind not in "iu":
        raise TypeError(f"{name}: Partition index must be integer")
    if ks.ndim > 1:
        raise ValueError(f"{name}: kth array must have dimension <= 1")
    for k in ks.reshape(-1).tolist() if size else ():
        if not -n <= k < n:
            raise ValueError(f"{name}: kth(={k}) out of bounds ({n})")


def _partition(name: str, a: Any, kth: Any, axis: int | None, kind: str, order: Any) -> Array:
    if kind != "introselect":
        raise ValueError(f"{name}: Unknown selection kind {kind!r}")
    _kind(name, None, order)
    if isinstance(kth, Array):
        raise TypeError(f"{name}: kth must be static (Python or NumPy integers), not a lazy array")
    x = _arr(a)
    if axis is None:
        x, axis = ravel(x), 0
    elif x.ndim == 0:
        if name == "argpartition":  # NumPy's argpartition reads a 0-d array as 1-d, partition refuses
            x = x.reshape(1)
        normalize_axis(name, axis, x.ndim)
    axis = normalize_axis(name, axis, x.ndim)
    _kth(name, kth, x.shape[axis], x.size)
    return record(name, x, axis=axis, kth=tuple(np.asarray(kth).reshape(-1).tolist()))


def partition(a: Any, kth: Any, axis: int | None = -1, kind: str = "introselect", order: Any = None) -> Array:
    """A copy with the kth elements in sorted position, smaller before, larger after (NumPy's O(n) selection)."""
    return _partition("partition", a, kth, axis, kind, order)


def argpartition(
    a: Any, kth: Any, axis: int | None = -1, kind: str = "introselect", order: Any = None
) -> Array:
    """Indices that partition around kth (NumPy's O(n) selection): the k smallest without a full ordering."""
    return _partition("argpartition", a, kth, axis, kind, order)


# -- searching -------------------------------------------------------------------------------------


def searchsorted(a: Any, v: Any, side: str = "left", sorter: Any = None) -> Array:
    """Insertion indices of v into the sorted 1-d a (left/right of equal elements), for binning and lookup."""
    operands = (a, v) if sorter is None else (a, v, sorter)
    return record("searchsorted", *operands, side=side)


def _monotonic(bins: np.ndarray) -> int:
    """1 increasing, -1 decreasing, as NumPy's digitize reads the bins as doubles (NaN included)."""
    if bins.ndim != 1:
        raise ValueError(f"digitize: bins must be 1-d, got shape {fmt_shape(bins.shape)}")
    b = bins.astype(np.float64).tolist()
    i = 1
    while i < len(b) and b[i] == b[0]:
        i += 1
    if i >= len(b):
        return 1  # empty or all equal
    up = b[i - 1] < b[i]
    for last, nxt in zip(b[i:], b[i + 1 :]):
        if (last > nxt) if up else (last < nxt):
            raise ValueError("digitize: bins must be monotonically increasing or decreasing")
    return 1 if up else -1


def digitize(x: Any, bins: Any, right: bool = False) -> Array:
    """Bin index of each element of x (NumPy's convention); lazy bins are an evaluation point (monotonicity)."""
    xa = x if isinstance(x, Array) else asarray(x)
    if xa.dtype.kind == "c":
        raise TypeError("digitize: x may not be complex")
    b = bins.numpy() if isinstance(bins, Array) else np.asarray(bins)
    mono = _monotonic(b)
    side = "left" if right else "right"
    bins = bins if isinstance(bins, Array) else b
    if mono == -1:
        return api.subtract(len(b), searchsorted(_arr(bins)[::-1], xa, side=side))
    return searchsorted(bins, xa, side=side)


# -- counting --------------------------------------------------------------------------------------


def bincount(x: Any, weights: Any = None, minlength: int = 0) -> Array:
    """Occurrences of each non-negative integer (or summed weights), for group counts and histograms.

    The length is max(x.max() + 1, minlength): static for empty, bool or unsigned input whose dtype
    bound minlength covers; otherwise an evaluation point (x's max, and min for signed input, are
    evaluated once), after which the counting is a recorded scatter-add.
    """
    x = _arr(x)
    minlength = operator.index(0 if minlength is None else minlength)
    if minlength < 0:
        raise ValueError("bincount: 'minlength' must not be negative")
    if x.ndim != 1:
        raise ValueError(
            f"bincount: x must be 1-d, got shape {fmt_shape(x.shape)} "
            f"(object {'too deep' if x.ndim else 'of too small depth'} for desired array)"
        )
    if x.dtype.kind not in "biu" or not np.can_cast(x.dtype, np.intp, "safe"):
        raise TypeError(
            f"bincount: Cannot cast array data from {x.dtype} to {np.dtype(np.intp)} (rule 'safe')"
        )
    if weights is not None:
        weights = _arr(weights)
        if weights.shape != x.shape:
            raise ValueError(
                f"bincount: The weights and list don't have the same length "
                f"({fmt_shape(weights.shape)} and {fmt_shape(x.shape)})"
            )
        if not np.can_cast(weights.dtype, np.float64, "safe"):
            raise TypeError(f"bincount: Cannot cast weights from {weights.dtype} to float64 (rule 'safe')")
    if x.size == 0:  # NumPy: zeros of intp, weights or not
        return zeros((minlength,), dtype=np.intp)
    bound = 1 if x.dtype.kind == "b" else (np.iinfo(x.dtype).max if x.dtype.kind == "u" else None)
    if bound is not None and bound < minlength:
        length = minlength
    elif x.dtype.kind in "bu":
        length = max(int(api.max(x)) + 1, minlength)  # the evaluation point
    else:
        lo, hi = api.eval(api.min(x), api.max(x))  # the evaluation point (one graph)
        if lo < 0:
            raise ValueError("bincount: 'list' argument must have no negative elements")
        length = max(int(hi) + 1, minlength)
    idx = x.astype(np.intp)
    if weights is None:
        return record("scatter_add", zeros((length,), dtype=np.intp), 1, idx, index=(("a", 0),))
    w = weights.astype(np.float64)
    return record("scatter_add", zeros((length,), dtype=np.float64), w, idx, index=(("a", 0),))


def _static_edges(a: Array, bins: Any, rng: Any) -> np.ndarray | None:
    """NumPy's bin edges when they do not depend on a's values (computed on an empty stand-in)."""
    if isinstance(bins, str):
        return None
    if np.ndim(bins) == 0 and rng is None and a.size:
        return None
    if isinstance(rng, Array):
        rng = rng.numpy()  # the bounds are parameters: an evaluation point of their own
    return np.histogram_bin_edges(np.empty((0,), a.dtype), bins, range=rng)


def _edges(name: str, a: Array, bins: Any, rng: Any) -> Any:
    """Bin edges: static NumPy edges, the lazy `bins` array itself, or from evaluated data."""
    if isinstance(bins, Array):
        if bins.ndim != 1:
            raise ValueError(f"{name}: `bins` must be 1d, when an array")
        return bins
    edges = _static_edges(a, bins, rng)
    if edges is not None:
        return edges
    if isinstance(bins, str):  # the rule reads every value: evaluation point
        return np.histogram_bin_edges(a.numpy(), bins, range=rng)
    lo, hi = api.eval(api.min(a), api.max(a))  # data-dependent rng: evaluation point (one graph)
    return np.histogram_bin_edges(np.array([lo, hi], dtype=a.dtype), bins)


def histogram_bin_edges(a: Any, bins: Any = 10, range: Any = None, weights: Any = None) -> Array:  # noqa: A002
    """The edges histogram would use; int bins without range (or string bins) are an evaluation point."""
    a = ravel(_arr(a))
    edges = _edges("histogram_bin_edges", a, bins, range)
    return edges if isinstance(edges, Array) else asarray(edges)


def histogram(
    a: Any,
    bins: Any = 10,
    range: Any = None,  # noqa: A002 - NumPy's name
    density: bool | None = None,
    weights: Any = None,
) -> tuple[Array, Array]:
    """Counts (or summed weights, or a density) per bin and the edges; last bin closed, as NumPy.

    Lazy for array bins and for int bins with an explicit range (equal bins: NumPy's scaled
    index, numlib_bins.py; otherwise a search of the edges); a data-dependent range or string
    bins make it an evaluation point. Weighted float sums are added in element order (NumPy adds
    blocks of 65536 and sorts for array bins): within float tolerance of NumPy's.
    """
    a = _arr(a)
    if weights is not None:
        weights = _arr(weights)
        if weights.shape != a.shape:
            raise ValueError("histogram: weights should have the same shape as a.")
        weights = ravel(weights)
    a = ravel(a)
    edges = _edges("histogram", a, bins, range)
    e = _arr(edges)
    nb = e.shape[0] - 1
    idx = None if isinstance(edges, Array) else uniform_index(a, bins, range, edges)
    if idx is None:
        # bin i holds edges[i] <= v < edges[i+1], the last one also v == edges[-1]; the rest go to bin nb
        idx = api.subtract(searchsorted(e, a, side="right"), 1)
        idx = api.where(api.equal(a, e[-1]), nb - 1, idx)
        idx = api.where(api.logical_or(api.less(idx, 0), api.greater_equal(idx, nb)), nb, idx)
    if weights is None:
        n = record("scatter_add", zeros((nb + 1,), dtype=np.intp), 1, idx, index=(("a", 0),))[:nb]
    else:
        acc = np.complex128 if weights.dtype.kind == "c" else np.float64
        w = weights.astype(acc)
        n = record("scatter_add", zeros((nb + 1,), dtype=acc), w, idx, index=(("a", 0),))[:nb]
        if n.dtype != weights.dtype:
            n = n.astype(weights.dtype)
    if density:
        db = (e[1:] - e[:-1]).astype(np.float64)
        n = n / db / n.sum()
    return n, edges if isinstance(edges, Array) else asarray(edges)


# -- Array methods (NumPy's spellings): installed here, next to the functions they call ---------------


def _sort_method(
    self: Array, axis: int = -1, kind: str | None = None, order: Any = None, *, stable: bool | None = None
) -> None:
    """Sort in place along an axis (recorded as a write of the sorted values, like a[...] = sorted)."""
    self._write(sort(self, axis, kind, order), op="sort")


def _partition_method(
    self: Array, kth: Any, axis: int = -1, kind: str = "introselect", order: Any = None
) -> None:
    """Partition in place around kth (the stable sort, recorded as a write)."""
    self._write(partition(self, kth, axis, kind, order), op="partition")


def _argsort_method(
    self: Array,
    axis: int | None = -1,
    kind: str | None = None,
    order: Any = None,
    *,
    stable: bool | None = None,
) -> Array:
    """Indices that sort along an axis (stable)."""
    return argsort(self, axis, kind, order)


def _argpartition_method(
    self: Array, kth: Any, axis: int | None = -1, kind: str = "introselect", order: Any = None
) -> Array:
    """Indices that partition around kth (the stable argsort)."""
    return argpartition(self, kth, axis, kind, order)


def _searchsorted_method(self: Array, v: Any, side: str = "left", sorter: Any = None) -> Array:
    """Insertion indices of v into this sorted 1-d array."""
    return searchsorted(self, v, side, sorter)


def _take_method(
    self: Array, indices: Any, axis: int | None = None, out: Any = None, mode: str = "raise"
) -> Array:
    """Elements at indices along an axis (the namespace's take)."""
    return _methods._namespace.take(self, indices, axis=axis, out=out, mode=mode)


Array.sort = _sort_method
Array.partition = _partition_method
Array.argsort = _argsort_method
Array.argpartition = _argpartition_method
Array.searchsorted = _searchsorted_method
Array.nonzero = nonzero
if not hasattr(Array, "take"):
    Array.take = _take_method


__all__ = sorted(
    [
        "sort",
        "argsort",
        "partition",
        "argpartition",
        "searchsorted",
        "digitize",
        "bincount",
        "histogram_bin_edges",
        "histogram",
        *_quantile_all,
        *_evaluated_all,
    ]
)
