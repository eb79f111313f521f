"""Gradient rules of the data-movement operators (ops/movement.py): view, assign, gather,
scatter_add, reshape, concat, stack, pad (see Op.vjp). Registered by importing `ops`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import defvjp
from ops.views import View, c_strides


@defvjp("view")
def _view_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    base = xs[0]
    view: View = attrs["view"]
    if view.offset == 0 and view.size == base.size:
        # Whole-base views without broadcasting are bijections: a reshape or a transpose of
        # the cotangent undoes them, with no zero-filled buffer and no scatter.
        if view.strides == c_strides(view.shape):
            return (g.reshape(base.shape),)
        order = sorted(range(len(view.shape)), key=lambda i: -view.strides[i])
        if tuple(view.shape[i] for i in order) == tuple(base.shape) and tuple(
            view.strides[i] for i in order
        ) == c_strides(base.shape):
            return (F.permute_dims(g, order),)
    # Broadcast axes (stride 0) read one element many times: sum their cotangent first, so
    # the write back through the view never has two elements landing on one address.
    bcast = tuple(i for i, (d, st) in enumerate(zip(view.shape, view.strides)) if st == 0 and d != 1)
    if bcast:
        g = F.sum(g, axis=bcast, keepdims=True)
        view = View(
            tuple(1 if i in bcast else d for i, d in enumerate(view.shape)), view.strides, view.offset
        )
    zeros = F.zeros(base.shape, dtype=g.dtype)
    return (F.record("assign", zeros, g, view=view, index=None),)


def _region(F: Any, g: Any, idx: list, attrs: dict) -> Any:
    """The part of a whole-base cotangent that an assign wrote (its view, then its index)."""
    r = g
    if attrs.get("view") is not None:
        r = F.record("view", r, view=attrs["view"])
    if attrs.get("index") is not None:
        r = F.record("gather", r, *idx, index=attrs["index"])
    return r


@defvjp("assign")
def _assign_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    base, value, *idx = xs
    # The written region no longer depends on the old base. (With repeated advanced indices
    # NumPy keeps the last write; every repeated position then passes its cotangent on.)
    g_base = F.record("assign", g, 0.0, *idx, view=attrs.get("view"), index=attrs.get("index"))
    g_value = _region(F, g, idx, attrs)
    while g_value.ndim > value.ndim and g_value.shape[0] == 1:
        g_value = g_value.reshape(g_value.shape[1:])
    return (g_base, g_value, *([None] * len(idx)))


@defvjp("gather")
def _gather_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    src, *idx = xs
    zeros = F.zeros(src.shape, dtype=g.dtype)
    return (F.record("scatter_add", zeros, g, *idx, index=attrs["index"]), *([None] * len(idx)))


@defvjp("scatter_add")
def _scatter_add_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    base, value, *idx = xs
    return (g, F.record("gather", g, *idx, index=attrs["index"]), *([None] * len(idx)))


@defvjp("reshape")
def _reshape_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (g.reshape(xs[0].shape),)


def _along(axis: int, item: Any) -> tuple:
    return (slice(None),) * axis + (item,)


@defvjp("concat")
def _concat_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    axis = attrs["axis"]
    grads, start = [], 0
    for x in xs:
        stop = start + x.shape[axis]
        grads.append(g[_along(axis, slice(start, stop))])
        start = stop
    return tuple(grads)


@defvjp("stack")
def _stack_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return tuple(g[_along(attrs["axis"], i)] for i in range(len(xs)))


@defvjp("pad")
def _pad_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    widths = attrs["pad_width"]
    if attrs["mode"] == "constant":
        return (g[tuple(slice(a, a + d) for (a, _), d in zip(widths, x.shape))],)
    # Other modes copy input elements into the border: pad an array of source positions the
    # same way, and add every output element's cotangent back to its source.
    source = np.pad(np.arange(x.size).reshape(x.shape), widths, mode=attrs["mode"]).reshape(-1)
    flat = F.zeros((x.size,), dtype=g.dtype)
    return (F.record("scatter_add", flat, g.reshape(-1), source, index=(("a", 0),)).reshape(x.shape),)
