"""Creation functions: zeros, ones, full, empty, arange, linspace, eye and *_like."""

from __future__ import annotations

from typing import Any

import numpy as np

from lazygraph.array import Array, check_device, record
from lazygraph.shape import _arr


def _on(x: Array, device: str) -> Array:
    """Place a freshly recorded leaf (nothing has read it yet) on `device`."""
    x._storage.node.device = device
    return x


def full(
    shape: Any, fill_value: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False
) -> Array:
    """An array of `shape` filled with `fill_value`, on `device` (default: the default device)."""
    dev = check_device(device)
    if isinstance(fill_value, Array):
        raise TypeError("full: fill_value must be a Python or NumPy scalar, not a lazy Array")
    if dtype is not None and np.dtype(dtype).fields is not None:
        # a TypeError, as from CuPy: callers such as Dask's arg-reductions then use a dict instead
        raise TypeError(
            f"full: structured dtype {np.dtype(dtype)} is not supported (lazygraph arrays hold numbers)"
        )
    out = _on(record("full", shape=shape, fill_value=fill_value, dtype=dtype), dev)
    if requires_grad:
        out.requires_grad = True
    return out


def zeros(shape: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Array:
    """An array of zeros (float64 by default)."""
    return full(shape, 0, np.float64 if dtype is None else dtype, device, requires_grad)


def ones(shape: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Array:
    """An array of ones (float64 by default)."""
    return full(shape, 1, np.float64 if dtype is None else dtype, device, requires_grad)


def empty(shape: Any, dtype: Any = None, device: str | None = None) -> Array:
    """An array whose values must not be relied on (lazygraph gives zeros)."""
    return zeros(shape, dtype, device)


def full_like(
    x: Any, fill_value: Any, dtype: Any = None, device: str | None = None, shape: Any = None
) -> Array:
    """Like full, with x's shape (or `shape`, as NumPy's) and (by default) dtype and device."""
    x = _arr(x)
    return full(
        x.shape if shape is None else shape,
        fill_value,
        x.dtype if dtype is None else dtype,
        device or x.device,
    )


def zeros_like(x: Any, dtype: Any = None, device: str | None = None, shape: Any = None) -> Array:
    """Zeros with x's shape and dtype."""
    return full_like(x, 0, dtype, device, shape)


def ones_like(x: Any, dtype: Any = None, device: str | None = None, shape: Any = None) -> Array:
    """Ones with x's shape and dtype."""
    return full_like(x, 1, dtype, device, shape)


def empty_like(x: Any, dtype: Any = None, device: str | None = None, shape: Any = None) -> Array:
    """Uninitialised-by-contract array with x's shape and dtype (zeros here)."""
    return full_like(x, 0, dtype, device, shape)


def arange(
    start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: str | None = None
) -> Array:
    """Evenly spaced values in [start, stop)."""
    dev = check_device(device)
    if stop is None:
        start, stop = 0, start
    return _on(record("arange", start=start, stop=stop, step=step, dtype=dtype), dev)


def linspace(
    start: Any, stop: Any, num: int = 50, endpoint: bool = True, dtype: Any = None, device: str | None = None
) -> Array:
    """`num` evenly spaced samples from start to stop."""
    dev = check_device(device)
    return _on(record("linspace", start=start, stop=stop, num=num, endpoint=endpoint, dtype=dtype), dev)


def eye(
    n_rows: int, n_cols: int | None = None, k: int = 0, dtype: Any = None, device: str | None = None
) -> Array:
    """Ones on the k-th diagonal."""
    dev = check_device(device)
    return _on(record("eye", n=n_rows, m=n_cols, k=k, dtype=dtype), dev)
