"""Reductions and scans over axes (sum, mean, var, max, argmax, cumsum, ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ops.base import (
    Op,
    defvjp,
    dtype_by_example,
    holomorphic,
    normalize_axes,
    normalize_axis,
    reduced_shape,
    shape_error,
)
from ops.declare import declare
from ops.namespace import namespace
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
        """Apply the NumPy scan (a 0-d operand along axis 0 as its one-element vector: NumPy's
        result, which CuPy's scan refuses)."""
        if attrs.get("axis") is not None and getattr(x, "ndim", 1) == 0:
            x = x.reshape(1)
        return self.fn(x, **attrs)


def _mean(x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None, ddof: Any = 0) -> Any:
    """np.mean; with `ddof` (inside var's decomposition) the sum over max(count - ddof, 0), as np.var
    divides: the sum in the accumulation dtype, the quotient in float64 rounded to it."""
    if not ddof:
        return np.mean(x, axis=axis, keepdims=keepdims, dtype=dtype)
    x = namespace(x).asarray(x)
    if dtype is None and x.dtype.kind in "biu":
        dtype = np.float64
    axes = tuple(range(x.ndim)) if axis is None else axis
    count = 1
    for a in axes:
        count *= x.shape[a]
    total = np.sum(x, axis=axis, keepdims=keepdims, dtype=dtype)
    divisor = np.maximum(np.intp(count) - ddof, 0)
    if isinstance(total, np.generic):  # a host scalar (a device namespace returns 0-d arrays)
        return total.dtype.type(total / divisor)
    return np.true_divide(total, divisor, out=total, casting="unsafe")


def _var_parts(F: Any, xs: list, attrs: dict, root: bool) -> Any:
    """var (std: its sqrt) from primitives, in np.var's steps: the mean (kept dims), the squared
    deviations, their sum over max(count - ddof, 0)."""
    (x,) = xs
    if x.dtype.kind == "c":
        raise TypeError(f"{'std' if root else 'var'}: complex input has no decomposition (|x - mean|^2)")
    axis, dtype = attrs["axis"], attrs.get("dtype")
    if dtype is None and x.dtype.kind in "biu":
        dtype = np.dtype(np.float64)  # np.var computes integer variance in float64
    m = F.mean(x, axis=axis, keepdims=True, dtype=dtype)
    d = F.subtract(x, m)
    v = F.mean(
        F.multiply(d, d), axis=axis, keepdims=attrs["keepdims"], dtype=dtype, ddof=attrs.get("ddof") or 0
    )
    return F.sqrt(v) if root else v


# JIT reductions (jit/ fuses them into kernels): how each accumulates. `combine` is add, mul,
# max, min, or, and; `identity` starts the accumulator ("lowest"/"highest": the dtype's
# extremes, -inf/+inf for floats); `finish` turns the accumulator into the result, with {acc},
# {T} (the result's C type), {count} (elements reduced) and {divisor} (max(count - ddof, 0)).
# NumPy divides a sum by its count in float64 and rounds the quotient to the result dtype.
# var and std are composites: the JIT lowers their decomposition (two means).
_SUM = {"combine": "add", "identity": "0", "finish": "{acc}"}
for _op, _reduce in (
    (Reduction("sum", np.sum, extra=("dtype",)), _SUM),
    (Reduction("prod", np.prod, extra=("dtype",)), {"combine": "mul", "identity": "1", "finish": "{acc}"}),
    (
        Reduction("mean", _mean, extra=("dtype", "ddof")),
        {"combine": "add", "identity": "0", "finish": "({T})((double){acc} / {divisor})"},
    ),
    (Reduction("max", np.max, identity=False), {"combine": "max", "identity": "lowest", "finish": "{acc}"}),
    (Reduction("min", np.min, identity=False), {"combine": "min", "identity": "highest", "finish": "{acc}"}),
    (Reduction("any", np.any), {"combine": "or", "identity": "0", "finish": "{acc}"}),
    (Reduction("all", np.all), {"combine": "and", "identity": "1", "finish": "{acc}"}),
):
    declare(_op, jit_reduce=_reduce)
declare(
    Reduction("var", np.var, extra=("ddof", "dtype")), decompose=lambda F, xs, a: _var_parts(F, xs, a, False)
)
declare(
    Reduction("std", np.std, extra=("ddof", "dtype")), decompose=lambda F, xs, a: _var_parts(F, xs, a, True)
)
for _op in (
    ArgReduction("argmax", np.argmax),
    ArgReduction("argmin", np.argmin),
    Scan("cumsum", np.cumsum),
    Scan("cumprod", np.cumprod),
):
    declare(_op)


# ---------------------------------------------------------------------------------------
# Gradients (see Op.vjp).


def _expand(F: Any, g: Any, x: Any, attrs: dict) -> Any:
    """The reduced cotangent with the reduced axes back as size 1 (broadcasts against x)."""
    if attrs["keepdims"] or not attrs["axis"]:
        return g
    return F.expand_dims(g, attrs["axis"])


def _count(x: Any, attrs: dict) -> int:
    n = 1
    for a in attrs["axis"]:
        n *= x.shape[a]
    return n


@defvjp("sum")
def _sum_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    return (F.broadcast_to(_expand(F, g, x, attrs), x.shape),)


@defvjp("mean")
def _mean_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    divisor = max(_count(x, attrs) - (attrs.get("ddof") or 0), 1)
    return (F.broadcast_to(_expand(F, g, x, attrs) / divisor, x.shape),)


def _centered(F: Any, g: Any, x: Any, attrs: dict) -> tuple:
    dof = _count(x, attrs) - attrs.get("ddof", 0)
    return _expand(F, g, x, attrs), x - F.mean(x, axis=attrs["axis"], keepdims=True), dof


@defvjp("var")
def _var_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    ge, centered, dof = _centered(F, g, xs[0], attrs)
    return (ge * centered * (2.0 / dof),)


@defvjp("std")
def _std_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    ge, centered, dof = _centered(F, g, xs[0], attrs)
    return (ge * centered / (_expand(F, out, xs[0], attrs) * dof),)


@defvjp("prod")
@holomorphic
def _prod_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    # out / x is exact away from zeros; an element that is 0 gets the product of the others.
    safe = F.where(x == 0, 1.0, x)
    others = F.prod(safe, axis=attrs["axis"], keepdims=True)
    zeros = F.sum(x == 0, axis=attrs["axis"], keepdims=True)
    ge = _expand(F, g, x, attrs)
    grad = F.where(zeros == 0, others / safe, F.where((zeros == 1) & (x == 0), others, 0.0))
    return (ge * grad,)


@defvjp("max", "min")
def _extreme_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    hit = (x == _expand(F, out, x, attrs)) * 1.0
    # Ties share the cotangent equally (PyTorch's amax convention).
    return (_expand(F, g, x, attrs) * hit / F.sum(hit, axis=attrs["axis"], keepdims=True),)


def _scan_axis(x: Any, attrs: dict) -> int:
    return 0 if attrs["axis"] is None else attrs["axis"]


@defvjp("cumsum")
def _cumsum_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    a = _scan_axis(x, attrs)
    r = F.flip(F.cumsum(F.flip(g, axis=a), axis=a), axis=a)
    return (r.reshape(x.shape),)


@defvjp("cumprod")
@holomorphic
def _cumprod_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    a = _scan_axis(x, attrs)
    # sum_{j >= i} g_j * out_j / x_i; exact where x has no zeros (a known limitation).
    r = F.flip(F.cumsum(F.flip(g * out, axis=a), axis=a), axis=a)
    return ((r / x.reshape(out.shape)).reshape(x.shape),)
