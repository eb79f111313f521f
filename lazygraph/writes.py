"""The lean recording path of views and writes (`a[i]`, `a[i] = v`, `a[i] += v`, `v += w`).

A loop of small writes records a view, an operation and an `assign` per iteration, so what
each costs at record time is what the loop costs. What the general path finds for a write
(the target's shape against the value's, NumPy's conversion checks on a Python scalar, the
in-place operator's casting rule) depends only on a signature: the base's dtype and shape,
the view's shape and strides, the value's dtype and shape (a Python scalar's type and, for an
int, which integer dtypes hold it). lazygraph/array.py runs the general path, which raises
any error at the user's line, the first time it meets a signature, and remembers here the
signatures that passed; later writes of that signature build their nodes directly
(`assign_node`, `view_node`), with the structural key's parts (`kid`, `h`) computed as the
general path would. A signature that failed is never remembered, so it fails again.
"""

from __future__ import annotations

from typing import Any
from weakref import ref

import numpy as np

from cache.key import hint_of, kid_of
from lazygraph.engine.attempt import RELEASED
from lazygraph.gradmode import GRAD_STATE
from ops.base import REGISTRY, _weak_sig
from ops.declare import Elementwise
from ops.node import Node
from ops.views import View, materialize

VIEW = REGISTRY["view"]
ASSIGN = REGISTRY["assign"]
BUFFER = REGISTRY["buffer"]
UPDATE = REGISTRY["update"]
_PLAIN_KERNEL = Elementwise.kernel
#: most signatures each memo holds before it starts over
LIMIT = 4096
#: write signatures whose checks passed once (setitem's, and the in-place operators')
PASSED: dict[tuple, bool] = {}
#: (op, base dtype, base shape, view shape, view strides) -> the node's interned local id
_KIDS: dict[tuple, int] = {}
#: operator -> the last of its signatures met, with its local id (see `_kid`)
_KLAST: dict = {}
_SMALL_INT = _weak_sig(0)  # every integer dtype holds 0..127
_SMALL_NEG = _weak_sig(-1)  # every signed one -128..-1
#: a float this small in magnitude fits every float dtype (float16's largest is 65504)
_F16_MAX = 65504.0


def scalar_sig(x: Any, dtype: np.dtype) -> Any:
    """The signature of a Python scalar written into a `dtype` array, or None for the general path.

    Only values whose conversion checks (NumPy's errors and warnings on storing them) depend on
    the signature alone: bools, ints by which integer dtypes hold them, and floats into floating
    arrays when no overflow is possible. Complex values and the rest take the general path.
    """
    t = type(x)
    kind = dtype.kind
    if t is float:
        if kind == "f":
            wide = dtype.itemsize >= 8
        elif kind == "c":
            wide = dtype.itemsize >= 16  # complex64 holds two float32
        else:
            return None
        return float if wide or -_F16_MAX < x < _F16_MAX or x != x else None
    if t is int:
        if 0 <= x <= 127:
            return _SMALL_INT
        if -128 <= x < 0:
            return _SMALL_NEG
        return _weak_sig(x) if kind in "iub" else None
    if t is bool:
        return bool
    return None


def remember(key: tuple) -> None:
    """Note that a write of this signature passed the general path's checks."""
    if len(PASSED) >= LIMIT:
        PASSED.clear()
    PASSED[key] = True


def _kid(node: Node, view: View) -> int:
    """The interned local id of a view or assign node (it depends on the view's class only)."""
    op, dtype, shape, vs, vst = node.op, node.dtype, node.shape, view.shape, view.strides
    last = _KLAST.get(op)
    # a loop repeats one signature per operator, its parts the same objects each time (an
    # element view's shape and strides are the empty tuple): compared by identity, unhashed
    if last is not None and last[0] is dtype and last[1] is shape and last[2] is vs and last[3] is vst:
        return last[4]
    key = (op, dtype, shape, vs, vst)
    k = _KIDS.get(key)
    if k is None:
        if len(_KIDS) >= LIMIT:
            _KIDS.clear()
        k = _KIDS[key] = kid_of(node)
    _KLAST[op] = (dtype, shape, vs, vst, k)
    return k


def assign_node(base: Node, value: Node, view: View) -> Node:
    """The `assign` writing `value` through `view` of `base`, as the general path records it."""
    node = Node(ASSIGN, (base, value), {"view": view, "index": None}, base.shape, base.dtype)
    k = node.kid = _kid(node, view)
    hb = base.h
    hv = value.h
    node.h = hash((k, hint_of(base) if hb is None else hb, hint_of(value) if hv is None else hv))
    if base.dtype.kind in "fc":  # gradmode.track
        if GRAD_STATE.enabled:
            if base.requires_grad or value.requires_grad:
                node.requires_grad = True
        else:
            node.grad_leaf = True
    return node


def view_node(base: Node, view: View) -> Node:
    """The node reading `view` of `base` (not the whole base): a free buffer view once `base` is held."""
    buf = base.buffer
    if buf is not None and not base.requires_grad:
        node = Node(BUFFER, (), {}, view.shape, base.dtype, buffer=materialize(buf, view))
        node.device = base.device
        node.static = base.static  # w.T of frozen weights is model state too
        if base in RELEASED:  # its history is gone: grad() must know (autograd.py)
            RELEASED.add(node)
    else:
        node = Node(VIEW, (base,), {"view": view}, view.shape, base.dtype)
        node.requires_grad = base.requires_grad
        k = node.kid = _kid(node, view)
        hb = base.h
        node.h = hash((k, hint_of(base) if hb is None else hb))
    if not view.shape:  # an element (`a[i]` of `a[i] += v`): `update_of` may fuse its write-back
        _LAST[0] = (ref(node), ref(base), view)
    return node


# -- `a[idx] op= v` as one `update` node (ops/views.py) ---------------------------------------

#: the last element view read: (its node, its base, the view), weakly (see `update_of`)
_LAST: list = [None]
#: (base dtype, base shape, view shape, view strides, operator, result dtype) -> update's local id
_UKIDS: dict[tuple, int] = {}
#: the last of them met, with its local id and the dtype's string (see update_parts)
_ULAST: list = [None]


def update_node(base: Node, other: Node, view: View, value: Node) -> Node | None:
    """One `update` node for `base[view] = value` where `value` is `op(base[view], other)`.

    None when the three-node form must be recorded instead: the operator is not a plain
    NumPy ufunc, its result does not have the region's shape (`a[i] = a[i] + ones(1)`
    drops a unit axis), the base is model state (static), or autograd must see the write
    (an operand requires grad while grad mode is on).
    """
    return update_parts(base, other, view, value.op, value.dtype, value.shape)


def update_parts(base: Node, other: Node, view: View, op: Any, dtype: np.dtype, shape: tuple) -> Node | None:
    """`update_node` from the parts of `value` (its operator, dtype and shape), built or not."""
    if op not in FUSABLE or shape != view.shape or base.static:
        # model state (a parameter, a module buffer) keeps the `assign` passes know as a write
        return None
    if GRAD_STATE.enabled and (base.requires_grad or other.requires_grad):
        return None
    bd, bs, vs, vst = base.dtype, base.shape, view.shape, view.strides
    last = _ULAST[0]
    # a loop of element writes repeats one signature, whose parts are the same objects each
    # time (an element view's shape and strides are the empty tuple): compared by identity
    if (
        last is not None
        and last[0] is bd
        and last[1] is bs
        and last[2] is vs
        and last[3] is vst
        and last[4] is op
        and last[5] is dtype
    ):
        node = Node(UPDATE, (base, other), {"view": view, "ufunc": op.name, "dtype": last[7]}, bs, bd)
        k = last[6]
    else:
        dstr = dtype.str
        node = Node(UPDATE, (base, other), {"view": view, "ufunc": op.name, "dtype": dstr}, bs, bd)
        key = (bd, bs, vs, vst, op, dtype)
        k = _UKIDS.get(key)
        if k is None:
            if len(_UKIDS) >= LIMIT:
                _UKIDS.clear()
            k = _UKIDS[key] = kid_of(node)
        _ULAST[0] = (bd, bs, vs, vst, op, dtype, k, dstr)
    node.kid = k
    hb = base.h
    ho = other.h
    node.h = hash((k, hint_of(base) if hb is None else hb, hint_of(other) if ho is None else ho))
    if base.dtype.kind in "fc" and not GRAD_STATE.enabled:  # gradmode.track, as assign_node
        node.grad_leaf = True
    return node


def update_of(base: Node, value: Node, view: View) -> Node | None:
    """The `update` node standing for `base[view] = value` when `value` is `op(base[view], w)`.

    `value`'s first operand must be the element view of `base` read last (`s = a[i]` in
    `a[i] += v`, whose write-back this is); None otherwise (record an `assign`).
    """
    last = _LAST[0]
    if last is None or len(value.inputs) != 2:
        return None
    vref, bref, lview = last
    if vref() is not value.inputs[0] or bref() is not base or lview != view:
        return None
    return update_node(base, value.inputs[1], view, value)


def fusable(op: Any) -> bool:
    """Whether `update` may stand for `view op= v` (a binary ufunc kernel that cannot fail on data)."""
    fn = getattr(op, "fn", None)
    return (
        isinstance(fn, np.ufunc)
        and fn.nin == 2
        and fn.nout == 1
        and getattr(op, "arity", 0) == 2
        and type(op).kernel is _PLAIN_KERNEL
    )


#: operators `update` may stand for (array.py drops those whose kernel can fail on data)
FUSABLE: set = {op for op in REGISTRY.values() if fusable(op)}
