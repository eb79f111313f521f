"""Element reads and writes of `Array` and `Scalar`: `a[i]`, `a[i] = v`, `a op= b`, `s op= v`.

Installed on the classes here (as methods.py installs the operators): they need the direct
paths (lazygraph/direct.py) and the lean recorders (lazygraph/recorders.py), which sit above
lazygraph/array.py."""

from __future__ import annotations

from collections.abc import Callable
from sys import getrefcount
from typing import Any
from weakref import ref

import numpy as np

from lazygraph import element_ext, writes
from lazygraph.array import (
    _FALLIBLE,
    _LEAN,
    _SCALAR_DTYPES,
    DEFERRED,
    Array,
    Scalar,
    Storage,
    from_node,
    record,
    result_dtype,
)
from lazygraph.direct import (
    _DIRECT_VALUES,
    _INT_KEYS,
    _NP_SCALARS,
    _ONCE,
    _direct_inplace,
    _direct_set,
    _Held,
    _held_element,
    _held_op,
    _held_scalar,
    recipe_node,
)
from lazygraph.gradmode import GRAD_STATE
from lazygraph.indexing import plain_view
from lazygraph.recorders import (
    _PLAIN,
    _inplace_sig,
    _lean_result,
    _lean_setitem,
    _new,
    _weak,
    binary_recorder,
    record_binary,
)
from ops.base import REGISTRY, fmt_shape
from ops.creation import SCALAR
from ops.node import HOST, Node
from ops.views import _SCALAR_OPS, contiguous

# -- `a[i] += v` without building what the write-back replaces ---------------------------------
#
# `a[i] += v` runs as `s = a[i]; s = s + v; a[i] = s`. Recorded as written, that is a view
# node, an operation node and an `update` (writes.update_of), three storages and three arrays,
# though only the `update` survives. So the element read and the operation are kept as
# recipes (storages whose node is built on first use) and the write-back, finding its own
# read's recipe, records the one `update` node directly. Anything else that touches the
# scalar (`float(s)`, `s * 2`, `b[j] = s`) reads its `node`, which builds exactly the nodes the
# plain path records, from the values captured at the read, so program order holds. Only
# signatures that passed once (their operation memoized, the write in `writes.PASSED`) take
# this path, so every error still comes from the general path, at the user's line.


class _Element(Storage):
    """The storage of `s = arr[key]`: the element `view` of `base` (arr's value then), built when read."""

    # made field by field (Array.__getitem__): arr, key, base, view

    def build(self) -> Node:
        """The node the plain path records for this element."""
        return writes.view_node(self.base, self.view)

    node = recipe_node

    def __del__(self) -> None:  # no node was built, so no count to give back
        pass


class _Update(_Element):
    """The storage of `s op= v` on an element read (`s = a[i]`): `op(s, v)`, built when read."""

    # made field by field (`_pending_update`): elem (the element's Scalar), op, other (a Python
    # scalar, or None with onode the array operand's value), opdef, dtype, hint (the scalar's)

    def build(self) -> Node:
        """The node `record_binary` gives for the operation (its element read built first)."""
        other = self.other if self.onode is None else from_node(self.onode)
        return binary_recorder(self.op)(self.elem, other)._storage.node


def scalar_inplace(op: str) -> Callable[[Scalar, Any], Array]:
    """`Scalar.__iop__`: `s op= v` rebinds `s` to `s op v`, kept as a recipe for an unread element."""
    f = _SCALAR_INPLACE.get(op)
    if f is not None:
        return f
    opdef = REGISTRY[op]
    rec = binary_recorder(op)
    if opdef.sig_cache is None or opdef not in writes.FUSABLE:
        f = rec
    else:
        fn = _SCALAR_OPS.get(opdef.fn, opdef.fn)
        # a held element computes with NumPy's scalar arithmetic whatever the operator (`**`
        # too: NumPy's float32 scalar power rounds unlike its array power; an integer to a
        # negative power raises, and the recorded path raises it); an unread element's recipe
        # only for operators that cannot fail on data (a fallible node remembers the user's line)
        recipes = opdef not in _FALLIBLE

        def f(self: Scalar, other: Any) -> Array:
            st = self._storage
            t = type(st)
            if t is _Held:
                if type(other) in _DIRECT_VALUES:  # NumPy's scalar arithmetic, as NumPy's `a[i] += v`
                    try:
                        r = fn(st.val, other)
                    except Exception:  # the recorded path raises it, in lazygraph's words
                        r = None
                    if type(r) in _NP_SCALARS:
                        # held by the statement alone (`a[i] += v`): nobody sees the old value go
                        if getrefcount(self) == _ONCE and getrefcount(st) == _ONCE:
                            st.val = r
                            return self
                        return _held_scalar(r, st.src)
                else:
                    held = _held_op(self, fn, other)
                    if held is not None:
                        return held
            elif t is _Element and recipes:
                pending = _pending_update(self, op, opdef, other)
                if pending is not None:
                    return pending
            return rec(self, other)

    _SCALAR_INPLACE[op] = f
    return f


_SCALAR_INPLACE: dict[str, Callable[[Scalar, Any], Array]] = {}


def _pending_update(elem: Scalar, op: str, opdef: Any, other: Any) -> Array | None:
    """`elem op= other` on an unread element as a recipe, when its signature is memoized (else None)."""
    cache = opdef.sig_cache
    dtype = elem._storage.base.dtype
    t = type(other)
    if t in _PLAIN:
        onode = other._storage.node if other._view is None else other.node
        hit = cache.get((dtype, (), onode.dtype, onode.shape))
        other = None
    else:
        sig = _weak(other)
        if sig is None:
            return None
        hit = cache.get((dtype, (), sig, None))
        onode = None
    if hit is None or hit[0] != ():
        return None
    st = _new(_Update)
    st.elem = elem
    st.op = op
    st.other = other
    st.onode = onode
    st.opdef = opdef
    st.dtype = hit[1]
    st.hint = hit[6]
    out = _new(Scalar)
    out._storage = st
    out._view = out._vnode = out._vbase = None
    out._readonly = False
    return out


def _write_update(arr: Array, key: Any, pending: _Update) -> bool:
    """Record `arr[key] = s` for `s` an operation on `arr[key]` read since no write: one `update`."""
    el = pending.elem._storage
    storage = arr._storage
    base = storage.node
    # `a[i] op= v` passes the very key object to the read and the write-back
    if type(el) is not _Element or el.key is not key or el.arr is not arr or el.base is not base:
        return False
    if storage.requires_grad and GRAD_STATE.enabled:
        return False
    onode = pending.onode
    if onode is None:
        other = pending.other
        onode = Node(SCALAR, (), {}, (), _SCALAR_DTYPES[type(other)], other)  # as record_binary's
        onode.h = pending.hint
    elif onode.device is not base.device:
        return False
    view = el.view
    dtype = pending.dtype
    last = _PASSED_LAST[0]
    if last is None or last[0] is not base.shape or last[1] is not base.dtype or last[2] is not dtype:
        if (base.dtype, base.shape, view.shape, view.strides, dtype, ()) not in writes.PASSED:
            return False
        _PASSED_LAST[0] = (base.shape, base.dtype, dtype)
    node = writes.update_parts(base, onode, view, pending.opdef, dtype, ())
    if node is None:
        return False
    storage.set(node)
    return True


#: the last element write signature found in `writes.PASSED` (an element's view is always
#: shape (), strides ()): (base shape, base dtype, value dtype), compared by identity
_PASSED_LAST: list = [None]


#: whether the element extension (lazygraph/element_ext.py) is still to be asked for: the first
#: direct element read or write starts its build in the background
_WANT_EXT = [True]


def _want_ext() -> None:
    _WANT_EXT[0] = False
    element_ext.want()


# -- the methods, installed on Array and Scalar below ----------------------------------------


def _inplace(self, op: str, other: Any) -> Array:
    # NumPy's order of checks: read-only output, dtypes and casting, then shapes.
    if self._readonly:
        raise ValueError(f"{op}: output array is read-only (a broadcast view)")
    if self._view is not None and type(self) is Array and _direct_inplace(self, op, other):
        return self  # `a[i] += v` of a row: NumPy's in-place ufunc on the held buffer
    return _inplace_recorded(self, op, other)


def _inplace_recorded(self, op: str, other: Any) -> Array:
    """`self op= other` recorded (the lean path, else the general one with NumPy's checks)."""
    key = _inplace_sig(self, op, other)
    if key is not None and key in writes.PASSED and _lean_result(self, record_binary(op, self, other)):
        return self
    dtype = result_dtype(op, self, other)
    if not np.can_cast(dtype, self.dtype, "same_kind"):
        raise TypeError(
            f"{op}: cannot cast output from {dtype} to {self.dtype} "
            f"with casting rule 'same_kind' (in-place operation on a {self.dtype} array)"
        )
    result = record(op, self, other)
    if result.shape != self.shape:
        raise ValueError(
            f"{op}: non-broadcastable output operand with shape {fmt_shape(self.shape)} "
            f"doesn't match the broadcast shape {fmt_shape(result.shape)}"
        )
    self._write(result, op=op)
    if key is not None:
        writes.remember(key)
    return self


def __setitem__(self, key: Any, value: Any) -> None:
    if self._readonly:  # NumPy checks this before the index, whatever is wrong with it
        raise ValueError("setitem: assignment destination is read-only (a broadcast view)")
    sig = None
    if type(self) in _LEAN:
        t = type(value)
        if (t in _DIRECT_VALUES or (t is Scalar and type(value._storage) is _Held)) and _direct_set(
            self, key, value
        ):
            if _WANT_EXT[0]:
                _want_ext()
            return  # written into the held buffer, as NumPy writes
        if t is Scalar and type(value._storage) is _Held and self._storage.node.dtype.kind in "iu":
            # a NumPy scalar stored into an integer array is checked (int8: 300, 343.0 and NaN
            # raise), not cast as a 0-d array's value would be: the general path checks it so
            # (no gradient flows into an integer array, so the element's node is not needed)
            value = value._storage.val
        if (
            type(value) is Scalar
            and type(value._storage) is _Update
            and _write_update(self, key, value._storage)
        ):
            return  # `a[i] op= v`: one `update` node
        view = self._view
        if view is None and type(key) is int:
            view = _ROWS.get((self._storage.node.shape, key))
            if view is None:
                view = plain_view(self, contiguous(self._storage.node.shape), key)
        else:
            view = plain_view(self, contiguous(self._storage.node.shape) if view is None else view, key)
        if view is not None:
            sig = _lean_setitem(self, view, value)
            if sig is True:
                return
        elif type(key) is Array:
            hook = DEFERRED[1]
            if hook is not None and hook(self, key, value):
                return  # `y[mask] = v` recorded as y's new value `where(mask, v, y)` (masked.py)
    self._setitem(key, value)
    if sig is not None:
        writes.remember(sig)  # the checks passed: this signature takes the lean path from now on


#: the view of row `i` of a whole base of each shape: (shape, i) -> View, negative i included
#: (found by `plain_view`; rows only, so that reads and writes of rows skip building a View)
_ROWS: dict[tuple, Any] = {}


def _row_view(arr: Array, shape: tuple, key: int) -> Any:
    """Row `key` of a whole base of this shape, memoized in `_ROWS` (None: not a row, or out of range)."""
    row = plain_view(arr, contiguous(shape), key)
    if row is None or not row.shape:
        return None
    if len(_ROWS) >= 4096:
        _ROWS.clear()
    _ROWS[(shape, key)] = row
    return row


def __getitem__(self, key: Any) -> Array:
    if type(self) in _LEAN:
        base = self._storage.node
        buf = base.buffer
        if type(buf) is np.ndarray and self._view is None and not base.requires_grad:
            if type(key) in _INT_KEYS and buf.ndim == 1 and base.device is HOST:
                # `a[i]` of an evaluated vector, the loops' case: `_held_element`, inline
                kind = base.dtype.kind
                if kind in "biufc":
                    try:
                        val = buf[key]
                    except IndexError:
                        pass  # the general path raises it, in lazygraph's words
                    else:
                        st = _new(_Held)
                        st.val = val
                        st.src = ref(base) if kind == "f" else None
                        out = _new(Scalar)
                        out._storage = st
                        out._view = out._vnode = out._vbase = None
                        out._readonly = False
                        if _WANT_EXT[0]:
                            _want_ext()
                        return out
            else:
                out = _held_element(base, buf, key)
                if out is not None:
                    if _WANT_EXT[0]:
                        _want_ext()
                    return out
        view = self._view
        if view is None and type(key) is int:
            # `a[i]`, a row of a whole base (the row loops' case): its view memoized per (shape, i)
            row = _ROWS.get((base.shape, key))
            if row is None:
                row = _row_view(self, base.shape, key)
            if row is not None:
                out = _new(Array)  # (a row is never its whole base: Array.__init__'s check is moot)
                out._storage = self._storage
                out._view = row
                out._vnode = out._vbase = None
                out._readonly = self._readonly
                return out
        view = plain_view(self, contiguous(self._storage.node.shape) if view is None else view, key)
        if view is not None:
            if view.shape:
                return Array(self._storage, view, self._readonly)
            # NumPy: one element by integers is a scalar, i.e. a copy (`s = x[1, 2]; s += 1`)
            base = self._storage.node
            if not base.shape:
                return Scalar(Storage(base))
            st = _new(_Element)  # its node is built when read (see _Element)
            st.arr = self
            st.key = key
            st.base = base
            st.view = view
            out = _new(Scalar)
            out._storage = st
            out._view = out._vnode = out._vbase = None
            out._readonly = False
            return out
    if type(key) is Array:
        hook = DEFERRED[0]
        if hook is not None:
            out = hook(self, key)
            if out is not None:
                return out  # `x[mask]` deferred until its count is needed (masked.py)
    return self._getitem(key)


def _scalar_inplace(self, op: str, other: Any) -> Array:
    return scalar_inplace(op)(self, other)


def _held(self) -> Any:
    """The element as a Python scalar when it is an unbuilt read of an evaluated host buffer
    of a real kind, converted as NumPy converts it; else None (the general conversion)."""
    st = self._storage
    if type(st) is _Held:
        return st.val.item()
    if type(st) is _Element:
        base = st.base
        buf = base.buffer
        if type(buf) is np.ndarray and base.dtype.kind in "biuf":
            return buf.item(st.view.offset)  # a flat index in the base's logical C order
    return None


#: Array's own `float(a)`: the element extension may take `Array.__float__` to its C base
_ARRAY_FLOAT = Array.__float__


# `float(a[i, j])` of an evaluated array reads the element without building a node
def __float__(self) -> float:
    v = self._held()
    return _ARRAY_FLOAT(self) if v is None else float(v)


def __int__(self) -> int:
    v = self._held()
    return Array.__int__(self) if v is None else int(v)


def __bool__(self) -> bool:
    v = self._held()
    return Array.__bool__(self) if v is None else bool(v)


def item(self, *args: Any) -> Any:
    """Evaluate and return the element as a Python scalar."""
    v = None if args else self._held()
    return Array.item(self, *args) if v is None else v


element_ext.register(
    {
        "getitem": __getitem__,
        "setitem": __setitem__,
        "float": __float__,
        "rows": _ROWS,
        "recorded": _inplace_recorded,
        **{d: scalar_inplace(op) for d, op in zip(("iadd", "isub", "imul", "itruediv"), element_ext.IOPS)},
    }
)
for _name, _fn in {"_inplace": _inplace, "__setitem__": __setitem__, "__getitem__": __getitem__}.items():
    setattr(Array, _name, _fn)
for _name, _fn in {
    "_inplace": _scalar_inplace,
    "_held": _held,
    "__float__": __float__,
    "__int__": __int__,
    "__bool__": __bool__,
    "item": item,
}.items():
    setattr(Scalar, _name, _fn)
