"""Strided views: (shape, strides, offset) in elements over a C-contiguous base.

Every NumPy view lazygraph supports (basic indexing, transpose, reshape without copy,
broadcast, expand/squeeze, flip) is one `View`. Composing views composes these triples, so
a view of a view is still one view of the base buffer, as in NumPy.
"""

from __future__ import annotations

import operator
from math import prod
from typing import Any, NamedTuple

import numpy as np

from ops.base import REGISTRY, Op, register
from ops.namespace import namespace, strided_view
from ops.node import Node

Shape = tuple[int, ...]


class View(NamedTuple):
    """Where an array's elements sit inside its base buffer."""

    shape: Shape
    strides: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        """Number of elements."""
        return prod(self.shape)


def c_strides(shape: Shape) -> tuple[int, ...]:
    """Element strides of a C-contiguous array."""
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def contiguous(shape: Shape) -> View:
    """The view that covers a whole base of this shape (asked for on every index of a base)."""
    v = _WHOLE.get(shape) if type(shape) is tuple else None
    if v is None:
        v = View(tuple(int(d) for d in shape), c_strides(shape), 0)
        if len(_WHOLE) >= _MAX_RECIPES:
            _WHOLE.clear()
        _WHOLE[v.shape] = v
    return v


_WHOLE: dict[tuple, View] = {}


def is_identity(view: View, base_shape: Shape) -> bool:
    """True when the view is exactly its whole base (asked on every new view: the whole view is cached)."""
    return view.offset == 0 and view == contiguous(tuple(base_shape))


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


#: (view, shape) -> what `reshape_view` answers: a loop reshapes the same views again and again
_RESHAPES: dict[tuple, View | None] = {}
_RESHAPES_LIMIT = 4096


def reshape_view(view: View, shape: Shape) -> View | None:
    """The view NumPy's reshape gives without copying, or None when a copy is needed.

    Follows NumPy's no-copy reshape: unit dimensions are dropped, then each group of old
    dimensions that multiplies to a group of new ones must be contiguous within itself.
    Memoized per (view, shape): views are immutable, and the walk costs microseconds.
    """
    key = (view, shape := tuple(shape))
    found = _RESHAPES.get(key, key)
    if found is not key:
        return found
    if len(_RESHAPES) >= _RESHAPES_LIMIT:
        _RESHAPES.clear()
    found = _RESHAPES[key] = _reshape_view(view, shape)
    return found


def _reshape_view(view: View, shape: tuple[int, ...]) -> View | None:
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
    """The NumPy array a view denotes over a base buffer (read-only unless `writeable`).

    Runs on every view step of every evaluation, so the way to build each (view, base shape)
    is worked out once (`_recipe`): a basic index (`base[1:-1, ::2]`, a few hundred ns, valid
    over any layout of the base since views address its logical C order), a whole-base
    transpose, or explicit strides over a C-contiguous copy for the rest (broadcasts, reshapes).
    """
    if type(base) is not np.ndarray:
        if namespace(base) is not np:  # a device array (CuPy): its own namespace's view of it
            return strided_view(base, tuple(view.shape), tuple(view.strides), view.offset)
        base = np.asarray(base)
    key = (view, base.shape)
    how = _RECIPES.get(key)
    if how is None:
        how = _recipe(view, base.shape)
        if len(_RECIPES) >= _MAX_RECIPES:
            _RECIPES.clear()
        _RECIPES[key] = how
    kind, arg = how
    if kind == "i":
        out = base[arg]
    elif kind == "p" and not writeable:
        # A whole-base transpose (a gradient's view of a transposed weight) needs no copy
        # of a base that is itself a non-contiguous view.
        out = base.transpose(arg)
    elif view.size == 0:
        return np.empty(view.shape, dtype=base.dtype)
    else:
        flat = base if base.flags.c_contiguous else np.ascontiguousarray(base)
        item = flat.itemsize
        out = np.ndarray(
            view.shape, flat.dtype, flat, view.offset * item, tuple(s * item for s in view.strides)
        )
    if not writeable:
        out.setflags(write=False)  # values are never written through a read view (cheaper than .flags)
    return out


def box_of(view: View, base_shape: Shape) -> tuple[int, ...] | None:
    """The per-axis starts of a view that is a box of its base (`u[1:-1, 1:-1]`: unit steps, no
    axis dropped, permuted or broadcast), or None."""
    if len(view.shape) != len(base_shape) or 0 in view.shape:
        return None
    starts, rem = [], view.offset
    for d, c, n, s in zip(base_shape, c_strides(base_shape), view.shape, view.strides):
        q, rem = divmod(rem, c)
        if (n > 1 and s != c) or q + n > d:
            return None
        starts.append(q)
    return None if rem else tuple(starts)


def mostly_overwritten(view: View, base_shape: Shape) -> tuple[int, ...] | None:
    """The box starts of a write that covers more than half of its base (its copy writes only
    the slabs outside the box: ops.movement.Assign), or None."""
    return box_of(view, base_shape) if 2 * view.size > prod(base_shape) else None


def write_into(base: np.ndarray, view: View, value: Any) -> None:
    """`base[view] = value` with NumPy's assignment rules (broadcasting, casting).

    A view with a basic index is written through it (`base[1:-1, 1:-1] = value`, `base[3] = x`:
    no view object is made, the loops of small writes' common case); others through a
    writeable strided view.
    """
    how = _RECIPES.get((view, base.shape))
    if how is not None and how[0] == "i":
        base[how[1]] = value
    else:
        materialize(base, view, writeable=True)[...] = value


#: (view, base shape) -> how `materialize` builds it: ("i", basic index) | ("p", axes) | ("s", None)
_RECIPES: dict[tuple, tuple] = {}
_MAX_RECIPES = 8192


def _recipe(view: View, base_shape: Shape) -> tuple:
    """How to build a view of a base of this shape (see `materialize`)."""
    items = basic_index(view, base_shape)
    if items is not None:
        return ("i", items)
    axes = _permutation(view, base_shape)
    if axes is not None:
        return ("p", axes)
    return ("s", None)


def basic_index(view: View, base_shape: Shape) -> tuple | None:
    """The NumPy basic index (ints, slices, None) giving `view` of a base, or None when there is none.

    Broadcasts (zero strides), reshapes across dimensions and permutations have none. The
    answer is checked by replaying it through `slice_view`: same shape, offset and strides
    (but on unit dimensions, whose strides address nothing).
    """
    if 0 in view.shape or 0 in base_shape:
        return None
    cs = c_strides(base_shape)
    starts, rem = [], view.offset
    for d, c in zip(base_shape, cs):
        q, rem = divmod(rem, c)
        if q >= d:
            return None
        starts.append(q)
    if rem:
        return None
    items: list[Any] = []
    e = 0  # next base dimension
    for n, s in zip(view.shape, view.strides):
        if n == 1:
            items.append(None)
            continue
        while e < len(base_shape):
            c, st = cs[e], starts[e]
            step = s // c if s % c == 0 else 0
            if step and 0 <= st + step * (n - 1) < base_shape[e]:
                break
            items.append(st)
            e += 1
        else:
            return None
        stop = st + step * n
        items.append(slice(st, stop if stop >= 0 else None, step))
        e += 1
    items.extend(starts[e:])
    if all(type(it) is int for it in items):
        items.append(Ellipsis)  # a 0-d array, not a NumPy scalar
    got = slice_view(contiguous(base_shape), tuple(it for it in items if it is not Ellipsis))
    same = got.shape == view.shape and got.offset == view.offset
    if not same or any(n != 1 and a != b for n, a, b in zip(view.shape, got.strides, view.strides)):
        return None
    return tuple(items)


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


# -- `base[view] op= value` as one step (recorded by lazygraph/writes.py) ---------------------


class Update(Op):
    """A new base equal to the old one with `base[view] = op(base[view], value)` (one step).

    It stands for the three recorded nodes of `a[i] += v` (a view, the operator, an `assign`)
    and means exactly what they mean: the operator's result, of dtype `dtype`, is stored into
    the region with NumPy's assignment casting. The recording side (lazygraph/writes.py) makes
    it only after the three-node form's checks passed, and only for operators whose kernel is
    a NumPy ufunc that cannot fail on data.
    """

    kind = "assign"
    size_attrs = ("view",)

    def __init__(self) -> None:
        super().__init__("update")

    def infer(self, inputs: tuple[Node, ...], attrs: dict) -> tuple[Shape, np.dtype, dict]:
        """The base's shape and dtype (the recording side checked the operator and the shapes)."""
        base, value = inputs
        fn = REGISTRY[attrs["ufunc"]]
        if not isinstance(getattr(fn, "fn", None), np.ufunc) or getattr(fn, "arity", 2) != 2:
            raise TypeError(f"update: {attrs['ufunc']} is not a binary NumPy ufunc")
        target = tuple(attrs["view"].shape)
        if tuple(np.broadcast_shapes(value.shape, target)) != target:
            raise ValueError(
                f"update: a value of shape {value.shape} does not broadcast to the region's {target}"
            )
        return base.shape, base.dtype, attrs

    def kernel(self, base: np.ndarray, value: Any, *, view: View, ufunc: str, dtype: str) -> np.ndarray:
        """Copy the base, then combine the region with `value` in the copy."""
        return update_into(namespace(base).array(base, copy=True, order="C"), value, view, ufunc, dtype)


def update_into(out: np.ndarray, value: Any, view: View, ufunc: str, dtype: str) -> np.ndarray:
    """`out[view] = ufunc(out[view], value)` cast to out's dtype, in `out` (also the engine's in-place path).

    When the operator's result dtype is out's, the ufunc writes into the region itself
    (`np.add(r, v, out=r)`: NumPy buffers overlapping operands, so `a[1:] += a[:-1]` gives
    its result); else the result is computed, then stored with setitem's casting.
    """
    fn = REGISTRY[ufunc].fn
    how = _RECIPES.get((view, out.shape))
    if how is not None and how[0] == "i":
        idx = how[1]
        if idx[-1] is Ellipsis and out.dtype.str == dtype and type(out) is np.ndarray:
            # one element, no cast: NumPy's own `a[i] += v` (a NumPy scalar, then setitem), five
            # times cheaper than a 0-d ufunc call (a cast goes through the array path below, which
            # stores NaN into an integer as the three recorded nodes did, without raising)
            idx = idx[:-1]
            out[idx] = _SCALAR_OPS.get(fn, fn)(out[idx], value)
            return out
        target = out[idx]
    else:
        target = materialize(out, view, writeable=True)
    if out.dtype.str == dtype:
        fn(target, value, out=target)
    else:
        # as an array (a ufunc gives a 0-d result as a scalar, whose setitem checks the value)
        r = fn(target, value)
        target[...] = np.asarray(r) if type(target) is np.ndarray else r  # a device's stays there
    return out


#: ufunc -> the Python operator NumPy scalars implement it with (what NumPy's `a[i] += v` calls;
#: a ufunc call on a scalar and a Python number costs five times as much)
_SCALAR_OPS = {
    np.add: operator.add,
    np.subtract: operator.sub,
    np.multiply: operator.mul,
    np.true_divide: operator.truediv,
    np.floor_divide: operator.floordiv,
    np.remainder: operator.mod,
    np.power: operator.pow,
    np.bitwise_and: operator.and_,
    np.bitwise_or: operator.or_,
    np.bitwise_xor: operator.xor,
    np.left_shift: operator.lshift,
    np.right_shift: operator.rshift,
}

register(Update())
