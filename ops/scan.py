"""Ufunc methods as operators: `ufunc_reduce`, `accumulate`, `reduceat` and `ufunc_at`.

Each names its binary ufunc by an attribute (`ufunc="bitwise_xor"`), so one record serves every
binary ufunc NumPy has: `np.bitwise_xor.reduce`, `np.maximum.accumulate`, `np.maximum.reduceat`,
`np.add.at`. The front end (`lazygraph/ufuncs.py`) records the existing reductions and scans
(sum, prod, max, min, all, any, cumsum, cumprod) where they give the same dtype, and these
operators otherwise. `ufunc_at` is an unbuffered scatter: repeated indices accumulate, as in
NumPy's `ufunc.at`; like every write it returns a new version of the whole base buffer.

Gradients: `accumulate` of maximum/minimum (each output's cotangent goes to the element that set
the running extreme; after a NaN, to the NaN), `reduceat` of add, `ufunc_at` of add/subtract.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import (
    Op,
    defvjp,
    dtype_by_example,
    fmt_shape,
    normalize_axes,
    normalize_axis,
    reduced_shape,
    shape_error,
    type_error,
)
from ops.declare import declare
from ops.movement import build_index, host_at, index_shape
from ops.namespace import namespace, on_host
from ops.node import Node
from ops.sorting import scatter_along


def binary_ufunc(op: str, name: Any) -> str:
    """Check that `name` names a binary NumPy ufunc with one output; returns the name."""
    uf = getattr(np, name, None) if isinstance(name, str) else None
    if not isinstance(uf, np.ufunc) or uf.nin != 2 or uf.nout != 1:
        raise ValueError(f"{op}: ufunc must name a binary NumPy ufunc with one output, got {name!r}")
    return name


def xp_ufunc(x: Any, name: str) -> Any:
    """The ufunc `name` of kernel operand `x`'s namespace (CuPy's for CuPy arrays).

    NumPy's own ufunc where the namespace's lacks the methods: it dispatches to the operand's
    type (NEP 13) all the same."""
    uf = getattr(namespace(x), name, None)
    return uf if uf is not None and hasattr(uf, "reduce") else getattr(np, name)


def _dtype_attr(attrs: dict, out: dict) -> None:
    if attrs.get("dtype") is not None:
        out["dtype"] = np.dtype(attrs["dtype"])


class UfuncReduce(Op):
    """`ufunc.reduce` over a set of axes (with keepdims, dtype and initial)."""

    kind = "other"

    def __init__(self) -> None:
        super().__init__("ufunc_reduce")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Shape without the reduced axes; NumPy's dtype; empty reductions need an identity or initial."""
        (x,) = inputs
        uf = binary_ufunc(self.name, attrs.get("ufunc"))
        axes = normalize_axes(f"{uf}.reduce", attrs.get("axis", 0), x.ndim)
        out: dict = {"ufunc": uf, "axis": axes, "keepdims": bool(attrs.get("keepdims", False))}
        _dtype_attr(attrs, out)
        if attrs.get("initial") is not None:
            out["initial"] = attrs["initial"]
        elif getattr(np, uf).identity is None and any(x.shape[a] == 0 for a in axes):
            raise shape_error(
                f"{uf}.reduce", "zero-size array to reduction operation which has no identity", inputs
            )
        kw = {k: v for k, v in out.items() if k != "ufunc"}
        dtype = dtype_by_example(f"{uf}.reduce", getattr(np, uf).reduce, inputs, **kw)
        return reduced_shape(x.shape, axes, out["keepdims"]), dtype, out

    def kernel(self, x: Any, ufunc: str, **attrs: Any) -> Any:
        """NumPy's (or CuPy's) ufunc.reduce; on the host where CuPy lacks it (bitwise_xor's)."""
        try:
            return xp_ufunc(x, ufunc).reduce(x, **attrs)
        except NotImplementedError:
            return on_host(lambda h: getattr(np, ufunc).reduce(h, **attrs), x)


class Accumulate(Op):
    """`ufunc.accumulate` along one axis: the inclusive running combination."""

    kind = "scan"

    def __init__(self) -> None:
        super().__init__("accumulate")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Same shape; NumPy's dtype; a 0-d operand is an error, as in NumPy."""
        (x,) = inputs
        uf = binary_ufunc(self.name, attrs.get("ufunc"))
        if x.ndim == 0:
            raise type_error(f"{uf}.accumulate", "cannot accumulate on a scalar", inputs)
        out: dict = {"ufunc": uf, "axis": normalize_axis(f"{uf}.accumulate", attrs.get("axis", 0), x.ndim)}
        _dtype_attr(attrs, out)
        kw = {k: v for k, v in out.items() if k != "ufunc"}
        dtype = dtype_by_example(f"{uf}.accumulate", getattr(np, uf).accumulate, inputs, **kw)
        return x.shape, dtype, out

    def kernel(self, x: Any, ufunc: str, **attrs: Any) -> Any:
        """NumPy's (or CuPy's) ufunc.accumulate; on the host where CuPy lacks it (maximum's)."""
        try:
            return xp_ufunc(x, ufunc).accumulate(x, **attrs)
        except NotImplementedError:
            return on_host(lambda h: getattr(np, ufunc).accumulate(h, **attrs), x)


class ReduceAt(Op):
    """`ufunc.reduceat(x, indices, axis)`: reductions over the slices indices[i]:indices[i+1].

    NumPy's rule: where indices[i] >= indices[i+1] the result is x[indices[i]]; the last slice
    runs to the end. An index out of range fails at evaluation (indices are data).
    """

    kind = "other"

    def __init__(self) -> None:
        super().__init__("reduceat")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """x's shape with the axis replaced by len(indices); indices 1-d integers."""
        x, idx = inputs
        uf = binary_ufunc(self.name, attrs.get("ufunc"))
        op = f"{uf}.reduceat"
        if x.ndim == 0:
            raise type_error(op, "cannot reduceat a scalar", inputs)
        if idx.ndim != 1:
            raise shape_error(op, f"indices must be 1-d, got shape {fmt_shape(idx.shape)}", inputs)
        if idx.dtype.kind not in "iu":
            raise type_error(op, f"indices must be integers, got {idx.dtype}", inputs)
        axis = normalize_axis(op, attrs.get("axis", 0), x.ndim)
        out: dict = {"ufunc": uf, "axis": axis}
        _dtype_attr(attrs, out)
        if x.shape[axis] == 0 and idx.shape[0] > 0:
            raise IndexError(f"{op}: index out of bounds for an axis of length 0")
        kw = {k: v for k, v in out.items() if k != "ufunc"}

        def example(a: Any, i: Any, **kw: Any) -> Any:
            return getattr(np, uf).reduceat(a, np.zeros(min(a.shape[axis], 1), np.intp), **kw)

        dtype = dtype_by_example(op, example, inputs, **kw)
        shape = x.shape[:axis] + (idx.shape[0],) + x.shape[axis + 1 :]
        return shape, dtype, out

    def kernel(self, x: Any, idx: Any, ufunc: str, **attrs: Any) -> Any:
        """NumPy's (or CuPy's) ufunc.reduceat; on the host where CuPy lacks it (maximum's)."""
        try:
            return xp_ufunc(x, ufunc).reduceat(x, idx, **attrs)
        except NotImplementedError:
            return on_host(lambda h, i: getattr(np, ufunc).reduceat(h, i, **attrs), x, idx)


class UfuncAt(Op):
    """base with `ufunc.at` applied at an index: unbuffered, repeated positions accumulate.

    Operands: base, value, *index operands; `index` is the template of ops/movement.py.
    """

    kind = "gather"
    size_attrs = ("index",)

    def __init__(self) -> None:
        super().__init__("ufunc_at")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """The value must broadcast to the indexed region; the base's shape and dtype."""
        base, value, *idx = inputs
        uf = binary_ufunc(self.name, attrs.get("ufunc"))
        op = f"{uf}.at"
        for n in idx:
            if n.dtype.kind not in "iu":
                raise IndexError(f"{op}: index arrays must be integers, got {n.dtype}")
        try:
            target = index_shape(base.shape, attrs["index"], [n.shape for n in idx])
        except ValueError:
            raise IndexError(
                f"{op}: index arrays could not be broadcast together with shapes "
                + " ".join(fmt_shape(n.shape) for n in idx)
            ) from None
        try:
            ok = tuple(np.broadcast_shapes(value.shape, target)) == target
        except ValueError:
            ok = False
        if not ok:
            raise shape_error(
                op,
                f"value of shape {fmt_shape(value.shape)} does not broadcast to the region {fmt_shape(target)}",
            )

        def example(b: Any, v: Any) -> Any:
            out = np.zeros(1, b.dtype)
            getattr(np, uf).at(out, np.zeros(1, np.intp), np.zeros(1, getattr(v, "dtype", type(v))))
            return out

        dtype_by_example(op, example, (base, value))
        return base.shape, base.dtype, {"ufunc": uf, "index": attrs["index"]}

    def kernel(self, base: Any, value: Any, *idx: Any, ufunc: str, index: tuple) -> Any:
        """A copy of base with ufunc.at applied."""
        out = base.copy(order="C") if hasattr(base, "copy") else namespace(base).array(base, copy=True)
        where = build_index(index, idx, out.shape)
        try:
            xp_ufunc(out, ufunc).at(out, where, value)
        except (NotImplementedError, TypeError):
            if type(out) is np.ndarray:
                raise
            # CuPy's ufunc.at covers a few ufuncs and dtypes (no complex): NumPy's on the host
            return host_at(ufunc, base, value, idx, index)
        return out


for _op in (UfuncReduce(), Accumulate(), ReduceAt(), UfuncAt()):
    declare(_op)


# ---------------------------------------------------------------------------------------
# Gradients


@defvjp("accumulate")
def _accumulate_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    uf = attrs["ufunc"]
    if uf not in ("maximum", "minimum", "fmax", "fmin"):
        raise NotImplementedError(f"{uf}.accumulate is not differentiable in lazygraph")
    x, axis = xs[0], attrs["axis"]
    n = x.shape[axis]
    pos = np.arange(n, dtype=np.intp).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
    # where the running extreme was set: the element equals it, or is a NaN (which then sticks)
    hit = F.logical_or(x == out, F.isnan(x)) if x.dtype.kind in "fc" else x == out
    setter = F.record("accumulate", F.where(hit, pos, 0), ufunc="maximum", axis=axis)
    return (scatter_along(F, g, setter, axis, x.shape),)


@defvjp("reduceat")
def _reduceat_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    if attrs["ufunc"] != "add":
        raise NotImplementedError(f"{attrs['ufunc']}.reduceat is not differentiable in lazygraph")
    x, idx = xs
    axis = attrs["axis"]
    n = x.shape[axis]
    m = idx.shape[0]
    # each output i sums x[lo_i:hi_i] (hi_i = lo_i + 1 where the next index is not larger):
    # add g_i at lo_i and subtract it at hi_i in a difference array, then cumsum
    lo = idx
    nxt = F.concat([lo[1:], F.full((1,), n, dtype=lo.dtype)]) if m else lo
    hi = F.where(lo < nxt, nxt, lo + 1)
    gm = F.moveaxis(g, axis, 0)
    diff = F.zeros((n + 1,) + gm.shape[1:], dtype=g.dtype)
    diff = F.record("scatter_add", diff, gm, lo, index=(("a", 0),))
    diff = F.record("scatter_add", diff, -gm, hi, index=(("a", 0),))
    dx = F.cumsum(diff, axis=0)[:n]
    return (F.moveaxis(dx, 0, axis), None)


@defvjp("ufunc_at")
def _ufunc_at_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    uf = attrs["ufunc"]
    if uf not in ("add", "subtract"):
        raise NotImplementedError(f"{uf}.at is not differentiable in lazygraph")
    base, value, *idx = xs
    gv = F.record("gather", g, *idx, index=attrs["index"])
    if uf == "subtract":
        gv = -gv
    return (g, gv, *([None] * len(idx)))
