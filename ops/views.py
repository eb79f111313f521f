"""Strided views: (shape, strides, offset) in elements over a C-contiguous base.

Every NumPy view lazygraph supports (basic indexing, transpose, reshape without copy,
broadcast, expand/squeeze, flip) is one `View`. Composing views composes these triples, so
a view of a view is still one view of the base buffer, as in NumPy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

Shape = tuple[int, ...]


class View(NamedTuple):
    """Where an array's elements sit inside its base buffer."""

    shape: Shape
    strides: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))


def c_strides(shape: Shape) -> tuple[int, ...]:
    """Element strides of a C-contiguous array."""
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def contiguous(shape: Shape) -> View:
    """The view that covers a whole base of this shape."""
    return View(tuple(shape), c_strides(shape), 0)


def is_identity(view: View, base_shape: Shape) -> bool:
    """True when the view is exactly its whole base."""
    return view.offset == 0 and view.shape == tuple(base_shape) and view.strides == c_strides(base_shape)


def slice_view(view: View, items: tuple[Any, ...]) -> View:
    """Apply basic index items (int, slice, None) with Ellipsis already expanded.

    Integers must already be range-checked; slices are clipped as NumPy clips them.
    """
    shape, strides, offset = [], [], view.offset
    dim = 0
    for it in items:
        if it is None:
            shape.append(1)
            strides.append(0)
            continue
        n, st = view.shape[dim], view.strides[dim]
        if isinstance(it, slice):
            start, stop, step = it.indices(n)
            length = len(range(start, stop, step))
            if length:
                offset += start * st
            shape.append(length)
            strides.append(st * step)
        else:
            offset += (it % n) * st
        dim += 1
    shape.extend(view.shape[dim:])
    strides.extend(view.strides[dim:])
    return View(tuple(shape), tuple(strides), offset)


def permute_view(view: View, axes: tuple[int, ...]) -> View:
    """Reorder dimensions."""
    return View(tuple(view.shape[a] for a in axes), tuple(view.strides[a] for a in axes), view.offset)


def broadcast_view(view: View, shape: Shape) -> View:
    """Broadcast to `shape` with zero strides (caller checked compatibility)."""
    lead = len(shape) - len(view.shape)
    strides = [0] * lead
    for d_old, s_old, d_new in zip(view.shape, view.strides, shape[lead:]):
        strides.append(0 if d_old == 1 and d_new != 1 else s_old)
    return View(tuple(shape), tuple(strides), view.offset)


def flip_view(view: View, axes: tuple[int, ...]) -> View:
    """Reverse the given axes (negative strides), as np.flip does."""
    offset = view.offset
    strides = list(view.strides)
    for a in axes:
        if view.shape[a] > 0:
            offset += (view.shape[a] - 1) * strides[a]
        strides[a] = -strides[a]
    return View(view.shape, tuple(strides), offset)


def reshape_view(view: View, shape: Shape) -> View | None:
    """The view NumPy's reshape gives without copying, or None when a copy is needed.

    Follows NumPy's no-copy reshape: unit dimensions are dropped, then each group of old
    dimensions that multiplies to a group of new ones must be contiguous within itself.
    """
    shape = tuple(shape)
    if view.size == 0:
        return View(shape, c_strides(shape), view.offset)
    old = [(d, s) for d, s in zip(view.shape, view.strides) if d != 1]
    new_strides = [0] * len(shape)
    oi, ni = 0, 0
    while ni < len(shape) and oi < len(old):
        np_, op_ = shape[ni], old[oi][0]
        nj, oj = ni + 1, oi + 1
        while np_ != op_:
            if np_ < op_:
                np_ *= shape[nj]
                nj += 1
            else:
                op_ *= old[oj][0]
                oj += 1
        for ok in range(oi, oj - 1):
            if old[ok][1] != old[ok + 1][0] * old[ok + 1][1]:
                return None
        new_strides[nj - 1] = old[oj - 1][1]
        for nk in range(nj - 1, ni, -1):
            new_strides[nk - 1] = new_strides[nk] * shape[nk]
        ni, oi = nj, oj
    # Trailing unit dimensions: any stride works; use the last real one.
    last = new_strides[ni - 1] if ni > 0 else 1
    for k in range(ni, len(shape)):
        new_strides[k] = last
    return View(shape, tuple(new_strides), view.offset)


def materialize(base: np.ndarray, view: View, writeable: bool = False) -> np.ndarray:
    """The NumPy array a view denotes over a C-contiguous base buffer."""
    axes = _permutation(view, np.shape(base))
    if axes is not None and not writeable:
        # A whole-base transpose (a gradient's view of a transposed weight) needs no copy
        # of a base that is itself a non-contiguous view.
        out = np.asarray(base).transpose(axes)
        out.flags.writeable = False  # like as_strided below: values are never written through views
        return out
    flat = np.ascontiguousarray(base).reshape(-1)
    if view.size == 0:
        return np.empty(view.shape, dtype=flat.dtype)
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(
        flat[view.offset :],
        shape=view.shape,
        strides=tuple(s * item for s in view.strides),
        writeable=writeable,
    )


def _permutation(view: View, base_shape: Shape) -> tuple[int, ...] | None:
    """The axes when the view is a permutation of its whole (non-empty) base, else None."""
    if view.offset or len(view.shape) != len(base_shape) or 0 in base_shape:
        return None
    cs = c_strides(base_shape)
    axes = []
    for d, s in zip(view.shape, view.strides):
        hits = [a for a, (bd, bs) in enumerate(zip(base_shape, cs)) if bs == s and bd == d and a not in axes]
        if not hits:
            return None
        axes.append(hits[0])
    return tuple(axes)
