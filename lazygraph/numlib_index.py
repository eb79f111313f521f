"""NumPy's index functions, recorded lazily: writes (`fill_diagonal`, `put`, `put_along_axis`),
static insertions, deletions and resizing (`insert`, `delete`, `resize`), index creation (`triu_indices`, `indices`)
and index arithmetic (`unravel_index`, `ravel_multi_index`).

Writes are recorded writes (`a[idx] = v` underneath), so views of the array see them as in
NumPy. Positions given as Python or NumPy values (`insert`'s and `delete`'s `obj`, shapes and
dims) are static: they shape the graph. Lazy index arrays are data: `put`, `put_along_axis`,
`unravel_index` and `ravel_multi_index` take them, and an out-of-range lazy index cannot be
checked at record time (`put` and `put_along_axis` fail at evaluation; `unravel_index` and
`ravel_multi_index` with mode "raise" give wrapped coordinates for lazy indices: check them
yourself when they may be out of range). Static indices are checked now, as NumPy does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lazygraph import api, fallback
from lazygraph.array import Array
from lazygraph.creation import arange, zeros
from lazygraph.shape import _arr, asarray, broadcast_to, concat, moveaxis, ravel, reshape, stack
from ops.base import fmt_shape, normalize_axis

__all__ = [
    "delete",
    "diag_indices",
    "diag_indices_from",
    "fill_diagonal",
    "indices",
    "insert",
    "put",
    "put_along_axis",
    "ravel_multi_index",
    "resize",
    "tril_indices",
    "tril_indices_from",
    "triu_indices",
    "triu_indices_from",
    "unravel_index",
]


def _along(axis: int, item: Any) -> tuple:
    return (slice(None),) * axis + (item,)


def _cyclic(values: Any, n: int, op: str) -> Any:
    """`values` flattened and repeated cyclically to n elements (NumPy's flat-assignment rule)."""
    if isinstance(values, (int, float, bool, complex)):
        return values
    v = _arr(values)
    if v.size == 0:
        raise ValueError(f"{op}: cannot repeat an empty array of values")
    if v.size == 1:
        return v.reshape(())
    return ravel(v)[np.arange(n) % v.size]


def _int_index(x: Any, op: str) -> Array | np.ndarray:
    """A lazy integer array as it is; anything else as a NumPy integer array (static)."""
    if isinstance(x, Array):
        if x.dtype.kind not in "iu":
            raise TypeError(f"{op}: only integer indices are permitted, got {x.dtype}")
        return x
    a = np.asarray(x)
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.intp)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{op}: only integer indices are permitted, got {a.dtype}")
    return a


def fill_diagonal(a: Any, val: Any, wrap: bool = False) -> None:
    """Write `val` onto a's main diagonal in place (NumPy's rule: values repeat; `wrap` for tall matrices)."""
    if not isinstance(a, Array):  # a NumPy array to write into: NumPy's, on evaluated values
        fallback.call(np.fill_diagonal, (a, val), {"wrap": wrap}, name="numpy.fill_diagonal")
        return
    if a.ndim < 2:
        raise ValueError(f"fill_diagonal: array must be at least 2-d, got shape {fmt_shape(a.shape)}")
    if a.ndim == 2:
        step = a.shape[1] + 1
        end = a.size if wrap else min(a.size, a.shape[1] * a.shape[1])
    else:
        if len(set(a.shape)) != 1:
            raise ValueError(f"fill_diagonal: all dimensions of input must be of equal length, got {a.shape}")
        step, end = 1 + int(np.cumprod(a.shape[:-1]).sum()), a.size
    flat = np.arange(0, end, step)
    if flat.size == 0:
        return
    a[np.unravel_index(flat, a.shape)] = _cyclic(val, flat.size, "fill_diagonal")


def put(a: Any, ind: Any, v: Any, mode: str = "raise") -> None:
    """Write `v` (repeated cyclically) at flat positions `ind` of `a`, in place; `ind` may be lazy."""
    if not isinstance(a, Array):
        fallback.call(np.put, (a, ind, v), {"mode": mode}, name="numpy.put")
        return
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"put: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    ind = _int_index(ind, "put")
    n, size = int(np.prod(ind.shape, dtype=np.int64)), a.size
    if n == 0:
        return
    if size == 0:
        raise IndexError("put: cannot replace elements of an empty array")
    if mode == "raise" and isinstance(ind, np.ndarray):
        bad = ind[(ind < -size) | (ind >= size)]
        if bad.size:
            raise IndexError(f"put: index {int(bad.flat[0])} is out of bounds for size {size}")
    flat = ind.reshape(-1).astype(np.intp)
    if mode == "wrap":
        flat = flat % size
    elif mode == "clip":
        flat = api.clip(flat, 0, size - 1) if isinstance(flat, Array) else np.clip(flat, 0, size - 1)
    else:
        flat = api.where(flat < 0, flat + size, flat) if isinstance(flat, Array) else flat % size
    values = _cyclic(v, n, "put")
    if a.ndim == 0:
        a[...] = values if not isinstance(values, Array) or values.ndim == 0 else values[-1]
        return
    a[unravel_index(flat, a.shape)] = values


def put_along_axis(arr: Any, indices: Any, values: Any, axis: int | None) -> None:
    """Write `values` at `indices` along `axis` of `arr`, in place (the inverse of take_along_axis)."""
    if not isinstance(arr, Array):
        fallback.call(np.put_along_axis, (arr, indices, values, axis), {}, name="numpy.put_along_axis")
        return
    indices = _int_index(indices, "put_along_axis")
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(f"put_along_axis: when axis=None, indices must be 1-d, got {indices.shape}")
        size = arr.size
        flat = (
            api.where(indices < 0, indices + size, indices)
            if isinstance(indices, Array)
            else indices % max(size, 1)
        )
        arr[unravel_index(flat, arr.shape)] = values
        return
    if arr.ndim != indices.ndim:
        raise ValueError(
            f"put_along_axis: indices {fmt_shape(indices.shape)} and arr {fmt_shape(arr.shape)} "
            "must have the same number of dimensions"
        )
    axis = normalize_axis("put_along_axis", axis, arr.ndim)
    key: list[Any] = []
    for d in range(arr.ndim):
        if d == axis:
            key.append(indices)
        else:
            key.append(np.arange(arr.shape[d]).reshape([-1 if k == d else 1 for k in range(arr.ndim)]))
    arr[tuple(key)] = values


def _static_obj(obj: Any, op: str) -> Any:
    if isinstance(obj, Array):
        raise TypeError(
            f"{op}: obj must be static (an int, slice or sequence of ints): positions decide the "
            "result's shape; evaluate them first (obj.numpy()) or use where/put for lazy positions"
        )
    return obj


def resize(a: Any, new_shape: Any) -> Array:
    """NumPy's `resize` function: the flattened array repeated (or cut) to fill a static new shape."""
    a = _arr(a)
    shape = (
        (int(new_shape),) if isinstance(new_shape, (int, np.integer)) else tuple(int(d) for d in new_shape)
    )
    if any(d < 0 for d in shape):
        raise ValueError("all elements of `new_shape` must be non-negative")
    size = int(np.prod(shape, dtype=np.int64))
    if a.size == 0 or size == 0:  # nothing to repeat: zeros, as NumPy gives
        return zeros(shape, dtype=a.dtype)
    flat = ravel(a)
    reps = -(-size // a.size)
    if reps > 1:
        flat = concat([flat] * reps)
    return reshape(flat[:size], shape)


def insert(arr: Any, obj: Any, values: Any, axis: int | None = None) -> Array:
    """A copy of `arr` with `values` inserted before the static positions `obj` along `axis` (values may be lazy)."""
    obj = _static_obj(obj, "insert")
    arr = _arr(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = normalize_axis("insert", axis, arr.ndim)
    n = arr.shape[axis]
    idx = np.arange(*obj.indices(n)) if isinstance(obj, slice) else np.asarray(obj)
    if idx.dtype == np.bool_:
        raise TypeError("insert: boolean obj is not supported; give the positions (np.flatnonzero(obj))")
    if idx.size == 0 and idx.dtype.kind == "f":
        idx = idx.astype(np.intp)
    if idx.dtype.kind not in "iu":
        raise IndexError(f"insert: index array must be integers, got {idx.dtype}")
    if idx.ndim > 1:
        raise ValueError("insert: index array argument obj to insert must be one dimensional or scalar")
    bad = idx[(idx < -n) | (idx > n)]
    if bad.size:
        raise IndexError(f"insert: index {int(bad.flat[0])} is out of bounds for axis {axis} with size {n}")
    idx = np.where(idx < 0, idx + n, idx).astype(np.intp)
    vals = _arr(values)
    vals = vals if vals.dtype == arr.dtype else api.astype(vals, arr.dtype)
    if idx.size == 1:
        index = int(idx.reshape(-1)[0])
        vals = vals.reshape((1,) * (arr.ndim - vals.ndim) + vals.shape)
        if idx.ndim == 0:
            vals = moveaxis(vals, 0, axis)
        shape = arr.shape[:axis] + (vals.shape[axis],) + arr.shape[axis + 1 :]
        block = broadcast_to(vals, shape)
        return concat(
            [arr[_along(axis, slice(None, index))], block, arr[_along(axis, slice(index, None))]], axis=axis
        )
    numnew = idx.size
    order = np.argsort(idx, kind="stable")
    idx = idx.copy()
    idx[order] += np.arange(numnew)
    block = broadcast_to(vals, arr.shape[:axis] + (numnew,) + arr.shape[axis + 1 :])
    perm = np.empty(n + numnew, np.intp)
    keep = np.ones(n + numnew, bool)
    keep[idx] = False
    perm[keep] = np.arange(n)
    perm[idx] = n + np.arange(numnew)
    return concat([arr, block], axis=axis)[_along(axis, perm)]


def delete(arr: Any, obj: Any, axis: int | None = None) -> Array:
    """A copy of `arr` without the static positions `obj` (int, slice, ints or a boolean mask) along `axis`."""
    obj = _static_obj(obj, "delete")
    arr = _arr(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = normalize_axis("delete", axis, arr.ndim)
    n = arr.shape[axis]
    keep = np.ones(n, bool)
    if isinstance(obj, slice):
        keep[obj] = False
    else:
        o = np.asarray(obj)
        if o.dtype == np.bool_:
            if o.shape != (n,):
                raise ValueError(
                    f"delete: boolean array argument obj must be one dimensional and match the axis length of {n}"
                )
            keep = ~o
        else:
            if o.size == 0 and o.dtype.kind == "f":
                o = o.astype(np.intp)
            if o.dtype.kind not in "iu":
                raise IndexError(
                    f"delete: arrays used as indices must be of integer (or boolean) type, got {o.dtype}"
                )
            bad = o[(o < -n) | (o >= n)]
            if bad.size:
                raise IndexError(
                    f"delete: index {int(bad.flat[0])} is out of bounds for axis {axis} with size {n}"
                )
            keep[o] = False
    return arr[_along(axis, np.flatnonzero(keep))]


def _static_indices(value: tuple) -> tuple[Array, ...]:
    return tuple(asarray(v) for v in value)


def triu_indices(n: int, k: int = 0, m: int | None = None) -> tuple[Array, ...]:
    """Row and column indices of the upper triangle of an (n, m) matrix (static: from shapes only)."""
    return _static_indices(np.triu_indices(n, k, m))


def tril_indices(n: int, k: int = 0, m: int | None = None) -> tuple[Array, ...]:
    """Row and column indices of the lower triangle of an (n, m) matrix (static: from shapes only)."""
    return _static_indices(np.tril_indices(n, k, m))


def diag_indices(n: int, ndim: int = 2) -> tuple[Array, ...]:
    """Indices of the main diagonal of an n x ... x n array (static: from shapes only)."""
    return _static_indices(np.diag_indices(n, ndim))


def _square(arr: Any, op: str) -> tuple[int, ...]:
    shape = np.shape(arr) if not isinstance(arr, Array) else arr.shape
    if len(shape) != 2:
        raise ValueError(f"{op}: input array must be 2-d, got shape {fmt_shape(shape)}")
    return shape


def triu_indices_from(arr: Any, k: int = 0) -> tuple[Array, ...]:
    """triu_indices for arr's (2-d) shape."""
    n, m = _square(arr, "triu_indices_from")
    return triu_indices(n, k, m)


def tril_indices_from(arr: Any, k: int = 0) -> tuple[Array, ...]:
    """tril_indices for arr's (2-d) shape."""
    n, m = _square(arr, "tril_indices_from")
    return tril_indices(n, k, m)


def diag_indices_from(arr: Any) -> tuple[Array, ...]:
    """diag_indices for arr's shape (at least 2-d, all sides equal)."""
    shape = arr.shape if isinstance(arr, Array) else np.shape(arr)
    if len(shape) < 2:
        raise ValueError("diag_indices_from: input array must be at least 2-d")
    if len(set(shape)) != 1:
        raise ValueError("diag_indices_from: all dimensions of input must be of equal length")
    return diag_indices(shape[0], len(shape))


def indices(dimensions: Any, dtype: Any = int, sparse: bool = False) -> Any:
    """The index grid of a shape (one array per axis), recorded as aranges broadcast to the shape."""
    dims = tuple(int(d) for d in dimensions)
    parts = [
        arange(d, dtype=dtype).reshape([-1 if k == i else 1 for k in range(len(dims))])
        for i, d in enumerate(dims)
    ]
    if sparse:
        return tuple(parts)
    if not dims:
        return asarray(np.empty((0,), dtype=dtype))
    return stack([broadcast_to(p, dims) for p in parts])


def _dims(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


def unravel_index(indices: Any, shape: Any, order: str = "C") -> tuple[Array, ...]:
    """Flat indices to coordinate arrays for `shape`, as lazy integer arithmetic (lazy indices welcome).

    Static indices are checked against the shape now; lazy ones cannot be: an out-of-range lazy
    index gives wrapped coordinates instead of NumPy's ValueError.
    """
    if order not in ("C", "F"):
        raise ValueError(f"unravel_index: order must be 'C' or 'F', got {order!r}")
    dims = _dims(shape)
    idx = _int_index(indices, "unravel_index")
    size = int(np.prod(dims, dtype=np.int64))
    if isinstance(idx, np.ndarray):
        bad = idx[(idx < 0) | (idx >= size)]
        if bad.size:
            raise ValueError(
                f"unravel_index: index {int(bad.flat[0])} is out of bounds for array with size {size}"
            )
    elif size == 0 and idx.size:
        raise ValueError("unravel_index: every index is out of bounds for an array of size 0")
    rem = _arr(idx)
    rem = rem if rem.dtype == np.intp else api.astype(rem, np.intp)
    axes = range(len(dims) - 1, -1, -1) if order == "C" else range(len(dims))
    out: dict[int, Array] = {}
    for step, d in enumerate(axes):
        last = step == len(dims) - 1
        out[d] = rem if last else rem % dims[d]
        if not last:
            rem = rem // dims[d]
    return tuple(out[d] for d in range(len(dims)))


def ravel_multi_index(multi_index: Any, dims: Any, mode: Any = "raise", order: str = "C") -> Array:
    """Coordinate arrays to flat indices for `dims`, as lazy integer arithmetic (modes raise/wrap/clip).

    With mode "raise", static coordinates are checked now; lazy ones cannot be (see unravel_index).
    """
    dims = _dims(dims)
    if order not in ("C", "F"):
        raise ValueError(f"ravel_multi_index: order must be 'C' or 'F', got {order!r}")
    coords = list(multi_index)
    if len(coords) != len(dims):
        raise ValueError(
            f"ravel_multi_index: parameter multi_index must be a sequence of length {len(dims)}, got {len(coords)}"
        )
    modes = (mode,) * len(dims) if isinstance(mode, str) else tuple(mode)
    if len(modes) != len(dims) or any(m not in ("raise", "wrap", "clip") for m in modes):
        raise ValueError(f"ravel_multi_index: invalid mode {mode!r}")
    strides = [
        int(np.prod(dims[k + 1 :] if order == "C" else dims[:k], dtype=np.int64)) for k in range(len(dims))
    ]
    total: Any = None
    for c, d, m, s in zip(coords, dims, modes, strides):
        c = _int_index(c, "ravel_multi_index")
        if m == "raise" and isinstance(c, np.ndarray):
            bad = c[(c < 0) | (c >= d)]
            if bad.size:
                raise ValueError("ravel_multi_index: invalid entry in coordinates array")
        c = _arr(c)
        c = c if c.dtype == np.intp else api.astype(c, np.intp)
        if m == "wrap":
            c = c % d
        elif m == "clip":
            c = api.clip(c, 0, d - 1)
        term = c * s
        total = term if total is None else total + term
    return total
