"""Reductions and scans over axes (sum, mean, var, max, argmax, cumsum, ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ops.base import (
    Op,
    dtype_by_example,
    normalize_axes,
    normalize_axis,
    reduced_shape,
    register,
    shape_error,
)
from ops.node import Node


def _zero_d_axis(axis: Any) -> bool:
    return isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and axis in (0, -1)


class Reduction(Op):
    """Reduce over a set of axes; `identity=False` ops reject empty reductions."""

    kind = "reduction"

    def __init__(self, name: str, fn: Callable, identity: bool = True, extra: tuple = ()):
        super().__init__(name)
        self.fn = fn
        self.identity = identity
        self.extra = extra  # names of extra keyword attributes (ddof, dtype)

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Normalize axis to a sorted tuple; shape without (or with unit) reduced axes."""
        (x,) = inputs
        axis = attrs.get("axis")
        if x.ndim == 0 and _zero_d_axis(axis) and self.name in ("sum", "prod", "max", "min", "any", "all"):
            axis = ()  # NumPy's ufunc reductions accept axis 0 / -1 on a 0-d array
        axes = normalize_axes(self.name, axis, x.ndim)
        keepdims = bool(attrs.get("keepdims", False))
        if not self.identity and any(x.shape[a] == 0 for a in axes):
            raise shape_error(
                self.name,
                "zero-size array to reduction operation which has no identity",
                inputs,
            )
        out = {"axis": axes, "keepdims": keepdims}
        for k in self.extra:
            if attrs.get(k) is not None:
                out[k] = np.dtype(attrs[k]) if k == "dtype" else attrs[k]
        extras = {k: v for k, v in out.items() if k != "axis" and k != "keepdims"}
        dtype = dtype_by_example(self.name, self.fn, inputs, axis=axes, **extras)
        return reduced_shape(x.shape, axes, keepdims), dtype, out

    def kernel(self, x: Any, **attrs: Any) -> Any:
        """Apply the NumPy reduction."""
        return self.fn(x, **attrs)


class ArgReduction(Op):
    """argmax / argmin: index of the extreme element along one axis or the flattened array."""

    kind = "reduction"

    def __init__(self, name: str, fn: Callable):
        super().__init__(name)
        self.fn = fn

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Axis None flattens; empty inputs are rejected as NumPy does."""
        (x,) = inputs
        axis = attrs.get("axis")
        keepdims = bool(attrs.get("keepdims", False))
        if x.ndim == 0 and _zero_d_axis(axis):
            axis = None  # as NumPy: a 0-d array is treated as 1-d here
        if axis is None:
            if x.size == 0:
                raise shape_error(self.name, f"attempt to get {self.name} of an empty sequence", inputs)
            shape = (1,) * x.ndim if keepdims else ()
        else:
            axis = normalize_axis(self.name, axis, x.ndim)
            if x.shape[axis] == 0:
                raise shape_error(self.name, f"attempt to get {self.name} of an empty sequence", inputs)
            shape = reduced_shape(x.shape, (axis,), keepdims)
        return shape, np.dtype(np.intp), {"axis": axis, "keepdims": keepdims}

    def kernel(self, x: Any, axis: int | None, keepdims: bool) -> Any:
        """Apply the NumPy arg-reduction."""
        return self.fn(x, axis=axis, keepdims=keepdims)


class Scan(Op):
    """Inclusive prefix combination along one axis (cumsum, cumprod); axis None flattens."""

    kind = "scan"

    def __init__(self, name: str, fn: Callable):
        super().__init__(name)
        self.fn = fn

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Same shape (or flattened when axis is None); NumPy's accumulation dtype."""
        (x,) = inputs
        axis = attrs.get("axis")
        out = {"axis": None}
        if axis is None:
            shape = (x.size,)
        else:
            out["axis"] = normalize_axis(self.name, axis, max(x.ndim, 1))
            if x.ndim == 0:
                shape = (1,)
            else:
                shape = x.shape
        if attrs.get("dtype") is not None:
            out["dtype"] = np.dtype(attrs["dtype"])
        dtype = dtype_by_example(self.name, self.fn, inputs, **{k: v for k, v in out.items() if k == "dtype"})
        return shape, dtype, out

    def kernel(self, x: Any, **attrs: Any) -> Any:
        """Apply the NumPy scan."""
        return self.fn(x, **attrs)


for _op in (
    Reduction("sum", np.sum, extra=("dtype",)),
    Reduction("prod", np.prod, extra=("dtype",)),
    Reduction("mean", np.mean, extra=("dtype",)),
    Reduction("var", np.var, extra=("ddof", "dtype")),
    Reduction("std", np.std, extra=("ddof", "dtype")),
    Reduction("max", np.max, identity=False),
    Reduction("min", np.min, identity=False),
    Reduction("any", np.any),
    Reduction("all", np.all),
    ArgReduction("argmax", np.argmax),
    ArgReduction("argmin", np.argmin),
    Scan("cumsum", np.cumsum),
    Scan("cumprod", np.cumprod),
):
    register(_op)
