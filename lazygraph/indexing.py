"""Index parsing: NumPy's rules for basic (view) and advanced (gather) indexing.

Everything that can be checked without data is checked here, at the user's line:
too many indices, out-of-range integers, boolean mask shapes, non-integer index arrays.
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from ops.base import fmt_shape
from ops.views import View, slice_view

if TYPE_CHECKING:
    from lazygraph.array import Array


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_array_like(x: Any, lazy: type) -> bool:
    return isinstance(x, (lazy, np.ndarray, list, bool, np.bool_))


def parse_index(arr: Array, key: Any, op: str, lazy: type) -> tuple[View | None, tuple | None, list]:
    """(view, None, []) for basic indexing, or (None, template, index operands) for a gather.

    `lazy` is the lazy array class, passed by array.py so that this module sits below it.
    """
    items = key if type(key) is tuple else (key,)
    shape = arr.shape
    if len(items) <= len(shape):
        view = _plain(arr, items, shape)
        if view is not None:
            return view, None, []
    items = key if isinstance(key, tuple) else (key,)
    consumed = 0
    ellipses = 0
    for it in items:
        if it is None:
            continue
        if it is Ellipsis:
            ellipses += 1
        elif isinstance(it, (lazy, np.ndarray)) and it.dtype == np.bool_:
            consumed += it.ndim
        elif isinstance(it, (bool, np.bool_)):
            pass  # a 0-d boolean index adds an axis and consumes none
        elif isinstance(it, list) and np.asarray(it).dtype == np.bool_:
            consumed += np.asarray(it).ndim
        else:
            consumed += 1
    if ellipses > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
    if consumed > len(shape):
        raise IndexError(
            f"{op}: too many indices for array: array is {len(shape)}-dimensional, "
            f"but {consumed} were indexed (shape {fmt_shape(shape)})"
        )
    expanded: list[Any] = []
    for it in items:
        if it is Ellipsis:
            # an Ellipsis standing for no dimensions is kept: it separates advanced indices
            expanded.extend([slice(None)] * (len(shape) - consumed) or [Ellipsis])
        elif isinstance(it, slice):
            expanded.append(_slice_ints(it, op))
        else:
            expanded.append(it)

    expanded, empty = _bool_scalars(expanded, op, lazy)
    if not any(_is_array_like(it, lazy) for it in expanded):
        basic: list[Any] = []
        dim = 0
        for k, it in enumerate(expanded):
            if it is Ellipsis:
                continue
            if it is None:
                if k in empty:  # a False 0-d mask: the new axis has length 0
                    empty[k] = sum(1 for b in basic if not _is_int(b))
                basic.append(None)
                continue
            if isinstance(it, slice):
                for part in (it.start, it.stop, it.step):
                    if part is not None and not _is_int(part):
                        raise IndexError(f"{op}: slice indices must be integers or None, got {part!r}")
                if it.step == 0:
                    raise ValueError(f"{op}: slice step cannot be zero")
                basic.append(it)
            else:
                basic.append(_check_int(it, shape[dim], dim, op))
            dim += 1
        view = slice_view(arr.view_of(), tuple(basic))
        for pos in empty.values():
            view = slice_view(view, (slice(None),) * pos + (slice(0, 0),))
        return view, None, []

    template: list[tuple] = []
    operands: list[Any] = []
    errors: list[IndexError] = []
    dim = 0
    for it in expanded:
        if it is None:
            template.append(("n",))
            continue
        if it is Ellipsis:
            template.append(("e",))
            continue
        if isinstance(it, slice):
            if it.step == 0:
                raise ValueError(f"{op}: slice step cannot be zero")
            template.append(("s", it.start, it.stop, it.step))
            dim += 1
        elif _is_int(it):
            template.append(("i", _check_int(it, shape[dim], dim, op)))
            dim += 1
        else:
            for idx in _index_arrays(it, shape, dim, op, errors, lazy):
                template.append(("a", len(operands)))
                operands.append(idx)
                dim += 1
    if errors:
        # NumPy checks index arrays (not integers or 0-d arrays) only when the broadcast
        # advanced indices select something.
        shapes = [tuple(x.shape) for x in operands]
        try:
            empty = math.prod(np.broadcast_shapes(*shapes)) == 0
        except ValueError:
            empty = False
        if not empty:
            raise errors[0]
    return None, tuple(template), operands


def plain_view(arr: Array, view: View, key: Any) -> View | None:
    """The view of `arr` (whose window is `view`) for a key of Python ints in range and slices of
    Python ints (`a[i]`, `a[i, j]`, `u[1:-1, 1:-1]`); None for any other key.

    The general path parses every other key and says what is wrong with it. The lean recording
    path of reads and writes (lazygraph/writes.py) starts here, so integers, the loop's usual
    keys, are composed without `slice_view`.
    """
    t = type(key)
    if t is int:
        shape = view.shape
        if not shape:
            return None
        n = shape[0]
        if not -n <= key < n:
            return None
        strides = view.strides
        return View(shape[1:], strides[1:], view.offset + (key if key >= 0 else key + n) * strides[0])
    if t is tuple:
        shape = view.shape
        if len(key) > len(shape):
            return None
        offset = view.offset
        strides = view.strides
        for k, i in enumerate(key):
            if type(i) is not int:
                return _plain(arr, key, shape)
            n = shape[k]
            if not -n <= i < n:
                return None
            offset += (i if i >= 0 else i + n) * strides[k]
        k = len(key)
        return View(shape[k:], strides[k:], offset)
    if t is slice:
        return _plain(arr, (key,), arr.shape)
    return None


def _plain(arr: Array, items: tuple, shape: tuple[int, ...]) -> View | None:
    """The view of the common keys (Python ints in range, slices of Python ints), else None.

    Anything else, errors included, takes the general path, which says what is wrong.
    """
    basic: list[Any] = []
    for it, n in zip(items, shape):
        t = type(it)
        if t is int:
            if not -n <= it < n:
                return None
            basic.append(it % n)
        elif t is slice:
            for part in (it.start, it.stop, it.step):
                if part is not None and type(part) is not int:
                    return None
            if it.step == 0:
                return None
            basic.append(it)
        else:
            return None
    return slice_view(arr.view_of(), tuple(basic))


def _bool_scalars(items: list, op: str, lazy: type) -> tuple[list, dict[int, int]]:
    """0-d boolean indices (NumPy: a new axis of length 1 for True, 0 for False) as a None item.

    NumPy reads them as advanced indices, broadcast with the integers of the key into one axis
    (length 1 if every boolean is True, else 0), placed where the first of them stands when
    they are adjacent, else first. Returns the items and {position of that axis' None: 0} when
    its length is 0 (the result axis is filled in by the caller). A lazy 0-d mask is evaluated:
    the result's shape depends on it. Mixed with index arrays it is refused.
    """
    found = [
        k
        for k, it in enumerate(items)
        if isinstance(it, (bool, np.bool_))
        or (isinstance(it, (lazy, np.ndarray)) and it.dtype == np.bool_ and it.ndim == 0)
    ]
    if not found:
        return items, {}
    if any(_is_array_like(it, lazy) for k, it in enumerate(items) if k not in found):
        raise IndexError(
            f"{op}: a 0-d boolean index combined with index arrays is not supported; "
            "index with the arrays first, then with the boolean"
        )
    truth = all(bool(items[k].numpy() if isinstance(items[k], lazy) else items[k]) for k in found)
    advanced = sorted(found + [k for k, it in enumerate(items) if _is_int(it)])
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1))
    at = advanced[0] if adjacent else 0
    out = [it for k, it in enumerate(items) if k not in found]
    out.insert(at - sum(1 for k in found if k < at), None)
    return out, ({} if truth else {at - sum(1 for k in found if k < at): 0})


def _slice_ints(s: slice, op: str) -> slice:
    """A slice whose bounds are Python ints or None.

    A bound with `__index__` (a NumPy integer, a 0-d integer array, a lazy 0-d integer array as
    in `a[:k + 1]`) is converted here: a lazy bound is an evaluation point, because the result's
    shape depends on its value.
    """
    parts = (s.start, s.stop, s.step)
    if all(p is None or type(p) is int for p in parts):
        return s
    out = []
    for part in parts:
        if part is None or _is_int(part):
            out.append(part if part is None else int(part))
            continue
        try:
            out.append(operator.index(part))
        except TypeError:
            raise IndexError(
                f"{op}: slice indices must be integers or None or have an __index__ method "
                f"(a 0-d integer array), got {part!r}"
            ) from None
    return slice(*out)


def _check_int(i: Any, n: int, dim: int, op: str) -> int:
    try:
        i = operator.index(i)
    except TypeError:
        raise IndexError(
            f"{op}: only integers, slices (`:`), ellipsis (`...`), None and integer or boolean "
            f"arrays are valid indices, got {type(i).__name__} {i!r}"
        ) from None
    if not -n <= i < n:
        raise IndexError(f"{op}: index {i} is out of bounds for axis {dim} with size {n}")
    return i % n


def _index_arrays(it: Any, shape: tuple[int, ...], dim: int, op: str, errors: list, lazy: type) -> list[Any]:
    """One advanced index item as integer index operands (boolean masks become nonzero())."""
    if isinstance(it, (bool, np.bool_)):
        raise IndexError(f"{op}: boolean scalar indices are not supported; use a boolean array")
    if isinstance(it, lazy):
        if it.dtype == np.bool_:
            # The result's shape depends on the mask's values: evaluate it here.
            it = it.numpy()
        elif it.dtype.kind not in "iu":
            raise IndexError(
                f"{op}: arrays used as indices must be of integer or boolean type, got {it.dtype}"
            )
        else:
            if shape[dim] == 0 and it.size:
                # every index is out of bounds on an empty axis, whatever the values
                err = IndexError(f"{op}: index array {fmt_shape(it.shape)} indexes axis {dim} of size 0")
                if it.ndim == 0:
                    raise err
                errors.append(err)
            return [it]
    arr = np.asarray(it)
    if arr.dtype == np.bool_:
        mask_shape = shape[dim : dim + arr.ndim]
        for k, (a, b) in enumerate(zip(arr.shape, mask_shape)):
            if a != b and a != 0:  # NumPy lets an empty mask axis meet any size
                raise IndexError(
                    f"{op}: boolean index did not match indexed array along axis {dim + k}; "
                    f"size of axis is {b} but size of corresponding boolean axis is {a}"
                )
        return [np.ascontiguousarray(x) for x in np.nonzero(arr)]
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.intp)
    if arr.dtype.kind not in "iu":
        raise IndexError(f"{op}: arrays used as indices must be of integer or boolean type, got {arr.dtype}")
    n = shape[dim]
    if arr.size and (arr.max() >= n or arr.min() < -n):
        bad = arr.max() if arr.max() >= n else arr.min()
        err = IndexError(f"{op}: index {bad} is out of bounds for axis {dim} with size {n}")
        if arr.ndim == 0:
            raise err
        errors.append(err)
    return [arr]
