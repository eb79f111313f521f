"""Shape functions: views (transpose, reshape, broadcast, squeeze, ...) and joins.

Functions that NumPy implements as views return arrays sharing the input's storage, so
writes through them reach the original; the others record a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lazygraph.array import Array, as_node, constant, from_node, record
from ops.base import check_size, fmt_shape, normalize_axes, normalize_axis
from ops.movement import resolve_shape
from ops.views import broadcast_view, flip_view, permute_view, reshape_view, slice_view


def asarray(
    x: Any,
    dtype: Any = None,
    device: str | None = None,
    copy: bool | None = None,
    requires_grad: bool = False,
) -> Array:
    """A lazy array from an array, nested sequence or scalar (NumPy data is copied once)."""
    if requires_grad:
        out = asarray(x, dtype, device, copy=True)
        out.requires_grad = True
        return out
    if isinstance(x, Array):
        if device is not None:
            x = x.to(device)  # a transfer where it lives elsewhere
        if dtype is not None and np.dtype(dtype) != x.dtype:
            return x.astype(dtype)
        return from_node(x.node) if copy else x
    if isinstance(x, (list, tuple)) and any(isinstance(e, Array) for e in x):
        xs = [asarray(e, device=device) for e in x]
        return stack(xs) if dtype is None else stack(xs).astype(dtype)
    return from_node(constant(x, dtype, device))


def array(
    x: Any,
    dtype: Any = None,
    device: str | None = None,
    copy: bool = True,
    requires_grad: bool = False,
    ndmin: int = 0,
) -> Array:
    """Like asarray, but a lazy array input is copied (NumPy's np.array; `ndmin` prepends 1s)."""
    out = asarray(x, dtype=dtype, device=device, copy=copy, requires_grad=requires_grad)
    if out.ndim < ndmin:
        out = reshape(out, (1,) * (ndmin - out.ndim) + out.shape)
    return out


def _arr(x: Any) -> Array:
    return x if isinstance(x, Array) else asarray(x)


def permute_dims(x: Any, axes: Sequence[int] | None = None) -> Array:
    """Reorder axes (a view); reverses them when axes is None."""
    x = _arr(x)
    if axes is None:  # `x.T`: a permutation by construction
        return x._derive(permute_view(x.view_of(), tuple(range(x.ndim))[::-1]))
    axes = tuple(normalize_axis("permute_dims", a, x.ndim) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(
            f"permute_dims: axes {axes} are not a permutation of an array of shape {fmt_shape(x.shape)}"
        )
    return x._derive(permute_view(x.view_of(), axes))


def transpose(x: Any, axes: Sequence[int] | None = None) -> Array:
    """NumPy spelling of permute_dims."""
    return permute_dims(x, axes)


def swapaxes(x: Any, axis1: int, axis2: int) -> Array:
    """Exchange two axes (a view)."""
    x = _arr(x)
    a = normalize_axis("swapaxes", axis1, x.ndim)
    b = normalize_axis("swapaxes", axis2, x.ndim)
    axes = list(range(x.ndim))
    axes[a], axes[b] = axes[b], axes[a]
    return permute_dims(x, axes)


def matrix_transpose(x: Any) -> Array:
    """Swap the last two axes (a view)."""
    x = _arr(x)
    nd = x.ndim
    if nd < 2:
        raise ValueError(f"matrix_transpose: needs at least 2 dimensions, got shape {fmt_shape(x.shape)}")
    # the permutation directly (gradients of every matmul take two: no axis checks to redo)
    axes = (1, 0) if nd == 2 else (*range(nd - 2), nd - 1, nd - 2)
    return x._derive(permute_view(x.view_of(), axes))


def moveaxis(x: Any, source: Any, destination: Any) -> Array:
    """Move axes to new positions (a view)."""
    x = _arr(x)
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ValueError(
            "moveaxis: `source` and `destination` arguments must have the same number of elements"
        )
    src = [normalize_axis("moveaxis", a, x.ndim) for a in src]
    dst = [normalize_axis("moveaxis", a, x.ndim) for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("moveaxis: repeated axis")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, order)


def reshape(x: Any, shape: Any, copy: bool | None = None) -> Array:
    """New shape: a view when NumPy would make one, else a copy."""
    x = _arr(x)
    shape = resolve_shape("reshape", shape, x.size)
    view = None if copy else reshape_view(x.view_of(), shape)
    if view is not None:
        return x._derive(view)
    if copy is False:
        raise ValueError(
            f"reshape: cannot reshape {fmt_shape(x.shape)} to {fmt_shape(shape)} without copying"
        )
    return record("reshape", x, shape=shape)


def ravel(x: Any) -> Array:
    """Flatten: a view when x is C-contiguous, else a copy (as np.ravel, unlike reshape(-1))."""
    x = _arr(x)
    v = x.view_of()
    expected = 1
    for d, st in reversed(list(zip(v.shape, v.strides))):
        if d != 1 and st != expected and v.size:
            return record("reshape", x, shape=(x.size,))
        expected *= d
    return reshape(x, (-1,))


def flatten(x: Any) -> Array:
    """Flatten into a new array (never aliases the input)."""
    return from_node(reshape(x, (-1,)).node)


def broadcast_to(x: Any, shape: Any) -> Array:
    """A read-only view with the given broadcast shape."""
    x = _arr(x)
    shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    ok = len(shape) >= x.ndim and all(a == b or a == 1 for a, b in zip(x.shape, shape[len(shape) - x.ndim :]))
    if not ok or any(d < 0 for d in shape):
        raise ValueError(
            f"broadcast_to: array of shape {fmt_shape(x.shape)} cannot be broadcast to shape {fmt_shape(shape)}"
        )
    check_size("broadcast_to", shape, x.dtype)  # a view, but reading it must be possible
    return x._derive(broadcast_view(x.view_of(), shape), readonly=True)


def broadcast_arrays(*arrays: Any) -> list[Array]:
    """Read-only views of all inputs at their common broadcast shape."""
    arrays = [_arr(a) for a in arrays]
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        shapes = " ".join(fmt_shape(a.shape) for a in arrays)
        raise ValueError(f"broadcast_arrays: shapes {shapes} do not broadcast together") from None
    return [broadcast_to(a, shape) for a in arrays]


def expand_dims(x: Any, axis: Any = 0) -> Array:
    """Insert unit axes (a view)."""
    x = _arr(x)
    axes = normalize_axes("expand_dims", axis, x.ndim + (len(axis) if isinstance(axis, (tuple, list)) else 1))
    items = tuple(None if i in axes else slice(None) for i in range(x.ndim + len(axes)))
    return x._derive(slice_view(x.view_of(), items))


def squeeze(x: Any, axis: Any = None) -> Array:
    """Remove unit axes (a view)."""
    x = _arr(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    elif x.ndim == 0 and isinstance(axis, (int, np.integer)) and axis in (0, -1):
        axes = ()  # NumPy lets a 0-d array "squeeze" axis 0 or -1
    else:
        axes = normalize_axes("squeeze", axis, x.ndim)
        for a in axes:
            if x.shape[a] != 1:
                raise ValueError(
                    f"squeeze: cannot select an axis to squeeze out which has size not equal to one "
                    f"(axis {a} of shape {fmt_shape(x.shape)})"
                )
    items = tuple(0 if i in axes else slice(None) for i in range(x.ndim))
    return x._derive(slice_view(x.view_of(), items))


def flip(x: Any, axis: Any = None) -> Array:
    """Reverse the order of elements along axes (a view)."""
    x = _arr(x)
    view = x._derive(flip_view(x.view_of(), normalize_axes("flip", axis, x.ndim)))
    # NumPy flips by indexing, x[()] for a 0-d x: a scalar, i.e. a copy that later writes miss
    return from_node(view.node) if x.ndim == 0 else view


def concat(arrays: Sequence[Any], axis: int | None = 0) -> Array:
    """Join arrays along an existing axis (None flattens them first)."""
    arrays = [_arr(a) for a in arrays]
    if axis is None:
        arrays = [ravel(a) for a in arrays]
        axis = 0
    return record("concat", *arrays, axis=axis)


concatenate = concat


def stack(arrays: Sequence[Any], axis: int = 0) -> Array:
    """Join same-shaped arrays along a new axis."""
    return record("stack", *[_arr(a) for a in arrays], axis=axis)


def split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Array]:
    """Views of consecutive pieces along an axis."""
    x = _arr(x)
    axis = normalize_axis("split", axis, x.ndim)
    n = x.shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError(
                f"split: array split does not result in an equal division ({n} along axis {axis} into {k})"
            )
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        bounds = [0, *[int(i) for i in indices_or_sections], n]
    pieces = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        items = [slice(None)] * x.ndim
        items[axis] = slice(lo, hi)
        pieces.append(x[tuple(items)])
    return pieces


def pad(x: Any, pad_width: Any, mode: str = "constant", constant_values: Any = 0) -> Array:
    """Pad with a constant or by extending the edges (np.pad modes)."""
    attrs = {"pad_width": pad_width, "mode": mode}
    if mode == "constant":
        attrs["constant_values"] = constant_values
    return record("pad", _arr(x), **attrs)


def copy(x: Any) -> Array:
    """A new array with the same values (costs nothing until one of them is written)."""
    return from_node(as_node(x, "copy"))
