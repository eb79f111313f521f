"""Sorting and searching: `sort`, `argsort` (stable, NaN last, optionally descending), `partition`,
`argpartition` (NumPy's O(n) selection) and `searchsorted`.

Both sorts are stable whatever the caller asks for, so a graph means one result: equal
elements keep their order, NaN goes last (NumPy's order), and a descending sort keeps equal
elements in their original order too (the Array API's rule), which puts NaN first. `sort`
and `partition` are differentiable: the cotangent of each output element goes back to the
input element placed there (ties: the one chosen). Medians and quantiles are compositions of
these in `lazygraph/numlib_quantile.py`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import Op, defvjp, dtype_by_example, fmt_shape, normalize_axis, shape_error, type_error
from ops.declare import declare
from ops.namespace import is_device, namespace, on_host
from ops.node import Node

#: the former name of ops.namespace.namespace (lazygraph/numlib_sort.py reads it)
array_namespace = namespace


class Sort(Op):
    """Sort along one axis (None: the flattened array); `argsort` gives the permutation instead."""

    kind = "sort"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.arg = name == "argsort"

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Same shape (flattened for axis None); argsort's dtype is intp. 0-d: argsort only, as NumPy."""
        (x,) = inputs
        unknown = set(attrs) - {"axis", "descending"}
        if unknown:
            raise TypeError(f"{self.name}: unknown attribute(s) {', '.join(sorted(unknown))}")
        axis = attrs.get("axis", -1)
        descending = attrs.get("descending", False)
        if not isinstance(descending, (bool, np.bool_)):
            raise TypeError(f"{self.name}: descending must be a bool, got {descending!r}")
        if x.dtype.kind not in "biufc":
            raise type_error(self.name, f"cannot sort dtype {x.dtype}", inputs)
        if axis is None:
            shape = (int(np.prod(x.shape, dtype=np.int64)),)
        elif x.ndim == 0 and self.arg:
            normalize_axis(self.name, axis, 1)  # NumPy's argsort reads a 0-d array as 1-d
            axis, shape = None, (1,)
        else:
            axis = normalize_axis(self.name, axis, x.ndim)
            shape = x.shape
        dtype = np.dtype(np.intp) if self.arg else x.dtype
        return shape, dtype, {"axis": axis, "descending": bool(descending)}

    def kernel(self, x: Any, axis: int | None, descending: bool) -> Any:
        """A stable NumPy (or CuPy) sort; descending sorts the reversed array and reverses back."""
        xp = namespace(x)
        if axis is None:
            x, axis = x.reshape(-1), 0
        fn = xp.argsort if self.arg else xp.sort
        if not descending:
            return fn(x, axis=axis, kind="stable")
        out = xp.flip(fn(xp.flip(x, axis), axis=axis, kind="stable"), axis)
        if self.arg:
            out = (x.shape[axis] - 1) - out  # positions in the reversed array back to x's
        return xp.ascontiguousarray(out)


class SearchSorted(Op):
    """Insertion points of `v` into the sorted 1-d `a` (operands: a, v[, sorter]); side left/right."""

    kind = "search"

    def __init__(self) -> None:
        super().__init__("searchsorted")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """v's shape, intp; a must be 1-d, sorter an integer permutation of a's length."""
        if len(inputs) not in (2, 3):
            raise TypeError(f"searchsorted: expected operands a, v[, sorter], got {len(inputs)}")
        a, v, *sorter = inputs
        side = attrs.get("side", "left")
        if side not in ("left", "right"):
            raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if a.ndim != 1:
            raise shape_error("searchsorted", f"a must be 1-d, got shape {fmt_shape(a.shape)}", inputs)
        if sorter:
            (s,) = sorter
            if s.ndim != 1 or s.shape != a.shape:
                raise shape_error("searchsorted", "sorter must be 1-d with a's length", inputs)
            if s.dtype.kind not in "iu" or not np.can_cast(s.dtype, np.intp, "safe"):
                raise type_error("searchsorted", f"sorter must be an integer array, got {s.dtype}", inputs)
        # Comparable dtypes (NumPy's own rule, found on stand-ins)
        dtype_by_example("searchsorted", lambda a, v, *s: np.searchsorted(a, v), inputs[:2])
        return v.shape, np.dtype(np.intp), {"side": side}

    def kernel(self, a: Any, v: Any, sorter: Any = None, side: str = "left") -> Any:
        """NumPy's searchsorted (a sorter index out of range raises ValueError here)."""
        xp = namespace(a)
        return xp.asarray(xp.searchsorted(a, v, side=side, sorter=sorter))


class Partition(Op):
    """NumPy's introselect partition along one axis around static `kth`; argpartition gives indices.

    O(n) per slice, as NumPy's. argpartition's indices are NumPy's exactly; partition is the
    input gathered by them (the same kth values as NumPy's; the other elements on the correct
    side, in argpartition's arrangement, which NumPy's partition may not share).
    """

    kind = "sort"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.arg = name == "argpartition"

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Same shape; argpartition's dtype is intp. kth: ints in [-n, n) (any for an empty array)."""
        (x,) = inputs
        unknown = set(attrs) - {"axis", "kth"}
        if unknown:
            raise TypeError(f"{self.name}: unknown attribute(s) {', '.join(sorted(unknown))}")
        if x.ndim == 0:
            raise shape_error(self.name, "a 0-d array cannot be partitioned (reshape it to 1-d)", inputs)
        if x.dtype.kind not in "biufc":
            raise type_error(self.name, f"cannot partition dtype {x.dtype}", inputs)
        axis = normalize_axis(self.name, attrs.get("axis", -1), x.ndim)
        n = x.shape[axis]
        kth = tuple(int(k) for k in np.asarray(attrs.get("kth", ()), dtype=np.int64).reshape(-1))
        # kept as given, repeats included: NumPy processes every kth, and a repeat moves ties
        for k in kth if x.size else ():
            if not -n <= k < n:
                raise ValueError(f"{self.name}: kth(={k}) out of bounds ({n})")
        if not x.size:
            kth = ()
        dtype = np.dtype(np.intp) if self.arg else x.dtype
        return x.shape, dtype, {"axis": axis, "kth": kth}

    def kernel(self, x: Any, axis: int, kth: tuple[int, ...]) -> Any:
        """NumPy's (or CuPy's) argpartition; partition gathers by it (no kth: the elements as they are).

        NumPy's own partition may arrange the elements on either side of a kth differently from
        its argpartition (its SIMD paths): gathering keeps the two, and the gradient, consistent.
        """
        xp = namespace(x)
        if x.size == 0:  # nothing to arrange (CuPy's argpartition fails on empty operands)
            idx = xp.zeros(x.shape, dtype=np.intp)
            return idx if self.arg else xp.array(x, copy=True)
        # kth is a host attribute: a tuple of ints (NumPy refuses an empty tuple, not an empty array)
        idx = xp.argpartition(x, kth if kth else xp.asarray(kth, dtype=np.intp), axis=axis)
        return idx if self.arg else xp.take_along_axis(x, idx, axis=axis)


class NonZero(Op):
    """Indices of the nonzero elements, packed (ndim, count): row d holds the indices along axis d.

    The count is an attribute: the front end evaluates `count_nonzero` first (the output's shape
    depends on the values), then records this operator, so the indices are a node of the graph.
    """

    kind = "search"

    def __init__(self) -> None:
        super().__init__("nonzero")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """(ndim, count) intp; 0-d input is refused, as NumPy does."""
        (x,) = inputs
        if x.ndim == 0:
            raise shape_error(
                "nonzero", "calling nonzero on 0d arrays is not allowed (use atleast_1d)", inputs
            )
        count = int(attrs["count"])
        return (x.ndim, count), np.dtype(np.intp), {"count": count}

    def kernel(self, x: Any, count: int) -> Any:
        """NumPy's (or CuPy's) nonzero, stacked; a count that no longer holds is an error."""
        xp = namespace(x)
        out = xp.stack(xp.nonzero(x)) if x.ndim else xp.zeros((0, 0), dtype=np.intp)
        if out.shape[1] != count:
            raise ValueError(f"nonzero: {out.shape[1]} nonzero elements where {count} were counted")
        return out.astype(np.intp, copy=False)


class UniqueCount(Op):
    """The number of distinct values of a 1-d array (NaNs one value with equal_nan): 0-d intp."""

    kind = "search"

    def __init__(self) -> None:
        super().__init__("unique_count")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """0-d intp of a 1-d operand."""
        (x,) = inputs
        if x.ndim != 1:
            raise shape_error("unique_count", f"expects a 1-d operand, got {fmt_shape(x.shape)}", inputs)
        return (), np.dtype(np.intp), {"equal_nan": bool(attrs.get("equal_nan", True))}

    def kernel(self, x: Any, equal_nan: bool) -> Any:
        """The length of NumPy's (or CuPy's) unique."""
        xp = namespace(x)
        return xp.asarray(xp.unique(x, equal_nan=equal_nan).size, dtype=np.intp)


class UniqueIndices(Op):
    """NumPy's unique of a 1-d array as indices, packed (2 * count + n,) intp: an index of each
    distinct value, its count, then the inverse (each element's distinct value). The values
    themselves are a gather of the operand at those indices (lazygraph/numlib_sort.py).

    `first`: NumPy's unique with return_index (a stable sort: first occurrences). Without it NumPy
    sorts unstably, which orders distinct NaNs (equal_nan=False) differently: the kernel then
    calls it as NumPy's function would and takes each value's first element from the inverse.
    """

    kind = "search"

    def __init__(self) -> None:
        super().__init__("unique_indices")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Packed length from the count the front end evaluated."""
        (x,) = inputs
        if x.ndim != 1:
            raise shape_error("unique_indices", f"expects a 1-d operand, got {fmt_shape(x.shape)}", inputs)
        count = int(attrs["count"])
        out = {
            "count": count,
            "equal_nan": bool(attrs.get("equal_nan", True)),
            "first": bool(attrs.get("first", True)),
        }
        return (2 * count + x.shape[0],), np.dtype(np.intp), out

    def kernel(self, x: Any, count: int, equal_nan: bool, first: bool) -> Any:
        """NumPy's unique with (first: index,) inverse and counts; a device array's on the host:
        CuPy's return_index is not always the first occurrence, and the scatter below relies on
        the last of repeated writes winning, which a GPU does not promise."""
        if is_device(x):
            return on_host(self.kernel, x, count, equal_nan, first)
        xp = namespace(x)
        res = xp.unique(x, return_index=first, return_inverse=True, return_counts=True, equal_nan=equal_nan)
        if first:
            _, index, inverse, counts = res
        else:
            _, inverse, counts = res
            inverse = inverse.reshape(-1)
            index = xp.empty(counts.shape[0], dtype=np.intp)
            index[inverse[::-1]] = xp.arange(x.shape[0] - 1, -1, -1)  # the last write is the first
        if index.shape[0] != count:
            raise ValueError(f"unique: {index.shape[0]} distinct values where {count} were counted")
        parts = [index, counts, inverse.reshape(-1)]
        return xp.concatenate([p.astype(np.intp, copy=False) for p in parts])


class UniqueValues(Op):
    """NumPy's unsorted unique values of a 1-d array (`unique_values`, `unique(sorted=False)`):
    its hash-based order, which no gather of indices reproduces; not differentiable."""

    kind = "search"

    def __init__(self) -> None:
        super().__init__("unique_values")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """(count,) in the operand's dtype."""
        (x,) = inputs
        if x.ndim != 1:
            raise shape_error("unique_values", f"expects a 1-d operand, got {fmt_shape(x.shape)}", inputs)
        count = int(attrs["count"])
        return (count,), x.dtype, {"count": count, "equal_nan": bool(attrs.get("equal_nan", True))}

    def kernel(self, x: Any, count: int, equal_nan: bool) -> Any:
        """NumPy's (or CuPy's) unique with sorted=False where it has it."""
        xp = namespace(x)
        try:
            out = xp.unique(x, equal_nan=equal_nan, sorted=False)
        except TypeError:  # a namespace without `sorted`: its sorted unique
            out = xp.unique(x, equal_nan=equal_nan)
        if out.shape[0] != count:
            raise ValueError(f"unique_values: {out.shape[0]} distinct values where {count} were counted")
        return out


for _op in (
    UniqueValues(),
    Sort("sort"),
    Sort("argsort"),
    SearchSorted(),
    Partition("partition"),
    Partition("argpartition"),
    NonZero(),
    UniqueCount(),
    UniqueIndices(),
):
    declare(_op)


def scatter_along(F: Any, g: Any, idx: Any, axis: int, shape: tuple[int, ...]) -> Any:
    """zeros(shape) with g's elements added at positions `idx` along `axis` (put_along_axis's adjoint)."""
    ndim = len(shape)
    index = []
    for d in range(ndim):
        if d == axis:
            index.append(idx)
        else:
            index.append(np.arange(shape[d]).reshape([-1 if k == d else 1 for k in range(ndim)]))
    zeros = F.zeros(shape, dtype=g.dtype)
    return F.record("scatter_add", zeros, g, *index, index=tuple(("a", k) for k in range(ndim)))


@defvjp("sort")
def _sort_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    # The stable argsort is the permutation the sort applied: each cotangent goes back there.
    x = xs[0]
    axis, descending = attrs["axis"], attrs["descending"]
    idx = F.record("argsort", x, axis=axis, descending=descending)
    if axis is None:
        return (scatter_along(F, g, idx, 0, (x.size,)).reshape(x.shape),)
    return (scatter_along(F, g, idx, axis, x.shape),)


@defvjp("partition")
def _partition_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    # argpartition places the same values where partition does: each cotangent goes back there
    x = xs[0]
    idx = F.record("argpartition", x, axis=attrs["axis"], kth=attrs["kth"])
    return (scatter_along(F, g, idx, attrs["axis"], x.shape),)
