"""`roll` by small shifts as a view of one wrap-padded copy, so shifted reads fuse.

NumPy's roll is two slice copies; recorded that way (`concat` of two views) each roll is a copy
step of its own that a fused region cannot absorb: life's eight neighbours were eight
`concat` steps an iteration before the region adding them. A roll by s along an axis of
length n is instead a window of `pad(x, w, mode="wrap")` (w >= |s|): offset w - s, x's shape,
the padded array's strides. Rolls of a roll compose onto the first roll's base (the result
remembers its base and total shifts), and every roll of one base reads one padded copy whose
width is the largest shift seen so far for that base, so `roll(roll(g, dy, 0), dx, 1)` over
the eight (dy, dx) is one `pad` (a copy of 514 x 514 for a 512 x 512 grid) and eight windows
of it, which the fused region reads with their strides. The values are NumPy's: every
element is a copy of an element of x (no arithmetic).

Only shifts up to a quarter of the axis take this path (the padded copy then costs at most
1.5x x along each padded axis); larger ones, `axis=None` and arrays with an empty axis keep
numlib.roll's two views and `concat`.
"""

from __future__ import annotations

import weakref
from typing import Any

from lazygraph.array import Array, from_node, record
from lazygraph.writes import view_node
from ops.node import Node
from ops.views import View, contiguous

#: a roll result's node -> (weak reference to its base node, total shift per axis); kept
#: weakly so a result holds no more than its recorded inputs do
_ROLLED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: base node -> [widths padded so far (per axis, the largest |shift|), {widths: weak pad node}]
_PADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def roll_window(a: Array, shift: int, ax: int) -> Array | None:
    """`a` rolled by `shift` along axis `ax` (normalized) as a window of a wrap-padded copy of
    its base, or None when the shift is too large for that (the caller copies)."""
    node = a.node
    base, shifts = node, None
    meta = _ROLLED.get(node)
    if meta is not None and node.inputs:  # an evaluated result is a value of its own
        b = meta[0]()
        if b is not None:
            base, shifts = b, meta[1]
    shape = base.shape
    if shifts is None:
        shifts = (0,) * len(shape)
    n = shape[ax]
    total = list(shifts)
    total[ax] = (total[ax] + shift) % n
    small = [s - d if 2 * s > d else s for s, d in zip(total, shape)]  # in (-d/2, d/2]
    for s, d in zip(small, shape):
        if 4 * abs(s) > d:
            return None
    if not any(small):
        return from_node(base)  # a copy: the storage is new, the value base's
    entry = _PADS.get(base)
    if entry is None:
        entry = _PADS[base] = [[0] * len(shape), {}]
    widths = entry[0]
    for i, s in enumerate(small):
        if abs(s) > widths[i]:
            widths[i] = abs(s)
    key = tuple(widths)
    ref = entry[1].get(key)
    padded = ref() if ref is not None else None
    if padded is None:
        padded = _pad_node(base, key)
        entry[1][key] = weakref.ref(padded)
    strides = contiguous(padded.shape).strides
    offset = sum((w - s) * st for w, s, st in zip(key, small, strides))
    out = from_node(view_node(padded, View(shape, strides, offset)))
    _ROLLED[out.node] = (weakref.ref(base), tuple(total))
    return out


def _pad_node(base: Node, widths: tuple[int, ...]) -> Node:
    """The node of `base` padded by `widths` on both sides of each axis, wrapping around."""
    return record("pad", from_node(base), pad_width=tuple((w, w) for w in widths), mode="wrap").node


def roll_fast(a: Array, shift: Any, axis: Any) -> Array | None:
    """numlib.roll's path for one int shift and one int axis (normalized), else None."""
    if not a.ndim or 0 in a.shape:
        return None
    return roll_window(a, shift, axis)
