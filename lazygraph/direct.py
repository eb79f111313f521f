"""Direct element reads and writes of an evaluated host buffer (NumPy's speed for element loops)."""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from sys import getrefcount
from typing import Any
from weakref import ref

import numpy as np

from lazygraph import writes
from lazygraph.array import (
    _FALLIBLE,
    Array,
    Scalar,
    Storage,
)
from lazygraph.engine.attempt import RELEASED
from ops.base import REGISTRY
from ops.creation import BUFFER
from ops.node import HOST, Node
from ops.views import materialize

_new = object.__new__

#: the fields of the recipes (lazygraph/elements.py) and `_Held` (anything else set on such a storage, `.grad`, is kept)
RECIPE_FIELDS = (
    "arr",
    "key",
    "base",
    "view",
    "elem",
    "op",
    "other",
    "onode",
    "opdef",
    "dtype",
    "hint",
    "val",
    "src",
)


def built_node(self: Any) -> Node:
    """A recipe storage's node, built once; from then on the storage is a plain `Storage`."""
    node = self.build()
    node.users += 1
    self.__class__ = Storage  # same layout: the instance keeps its identity
    d = self.__dict__
    for name in RECIPE_FIELDS:  # let go of the recipe (the array it was read from)
        d.pop(name, None)
    self.node = node
    return node


#: `node` of the recipe storages (lazygraph/elements.py) and of `_Held`
recipe_node = property(built_node)


# -- direct element reads and writes of an evaluated host buffer ------------------------------
#
# Once an array is evaluated its value is a NumPy buffer, so `s = a[i]` reads the element at
# once (a NumPy scalar: NumPy's own copy), `s op= v` computes with NumPy's scalar arithmetic
# (what NumPy's `a[i] += v` runs), and `a[i] = s` writes into the buffer itself when nothing
# recorded but not yet evaluated can read the value being overwritten (`_direct_set`'s proof).
# Anything else (a pending reader, a view or user holding the buffer, autograd, model state, a
# device buffer, another index or value) takes the recorded path, whose checks raise errors.


class _Held:
    """The storage of an element read at once from an evaluated host buffer: `val`, a NumPy scalar.

    `src` is a weak reference to the node read (floating values only), so that the 0-d constant
    built when the scalar meets a lazy array is marked as released when that node was (grad()
    must refuse a path through a released history, as for the view node it stands for). Not a
    `Storage` subclass, so that reading an element makes no finalizer call (element loops make
    one per read); it has Storage's layout and class-level fields, and becomes a `Storage` when
    its node is built, as the recipes above do.
    """

    # made field by field (`_held_scalar`, `_held_element`): val, src
    requires_grad = False
    static = False
    grad = None
    hist = None
    ghist = None
    set = Storage.set
    restore_grad = Storage.restore_grad

    def build(self) -> Node:
        """A 0-d constant holding the element (what a view of an evaluated buffer is)."""
        value = np.array(self.val)
        value.setflags(write=False)
        node = Node(BUFFER, (), {}, (), value.dtype, buffer=value)
        src = self.src
        if src is not None:
            read = src()
            if read is not None and read in RELEASED:
                RELEASED.add(node)
        return node

    node = recipe_node


def _held_scalar(val: Any, src: Any) -> Scalar:
    """A Scalar holding the NumPy scalar `val` (built field by field: element loops make many)."""
    st = _new(_Held)
    st.val = val
    st.src = src
    out = _new(Scalar)
    out._storage = st
    out._view = out._vnode = out._vbase = None
    out._readonly = False
    return out


def _held_once() -> int:
    """What `getrefcount(x)` reads for a local `x` whose object one other reference holds.

    3 on CPython 3.11 (the holder, the local, the call's argument); measured rather than
    assumed, since newer interpreters borrow references for locals and arguments.
    """
    holder = [object()]
    x = holder[0]
    return getrefcount(x)


#: see `_held_once`: the direct paths' proofs compare reference counts against it
_ONCE = _held_once()


#: integer types an index may hold for the direct paths (NumPy indexes with them alike)
_INT_KEYS = {int, np.int64, np.int32, np.intp, np.uint64, np.uint32, np.int16, np.int8, np.uint16, np.uint8}


def _held_element(base: Node, buf: np.ndarray, key: Any) -> Scalar | None:
    """`a[key]` of an evaluated host buffer when `key` picks one element (else None: the general path)."""
    kind = base.dtype.kind
    if base.device is not HOST or kind not in "biufc":
        return None
    t = type(key)
    if t is tuple:
        if len(key) != buf.ndim:
            return None
        for k in key:
            if type(k) not in _INT_KEYS:
                return None
    elif t not in _INT_KEYS or buf.ndim != 1:
        return None
    try:
        val = buf[key]
    except IndexError:
        return None  # the general path raises it, in lazygraph's words
    st = _new(_Held)  # _held_scalar, inline: element loops make one per read
    st.val = val
    st.src = ref(base) if kind == "f" else None
    out = _new(Scalar)
    out._storage = st
    out._view = out._vnode = out._vbase = None
    out._readonly = False
    return out


#: value types `_direct_set` writes (Python and NumPy scalars; other values take the recorded path)
_NP_SCALARS = {np.dtype(c).type for c in "?bhilqBHILQefdgFDG"}
_DIRECT_VALUES = {int, float, bool, complex} | _NP_SCALARS
_COMPLEX_VALUES = {complex, np.complex64, np.complex128, np.clongdouble}


def _held_op(s: Scalar, fn: Callable[[Any, Any], Any], other: Any) -> Scalar | None:
    """`s op= t` for two held elements with NumPy's scalar arithmetic (None: record it instead)."""
    if type(other) is not Scalar or type(other._storage) is not _Held:
        return None
    st = s._storage
    ost = other._storage
    try:
        r = fn(st.val, ost.val)
    except Exception:  # the recorded path raises it, in lazygraph's words (or records it)
        return None
    if type(r) not in _NP_SCALARS:
        return None
    return _held_scalar(r, ost.src if st.src is None else st.src)


def _direct_set(arr: Array, key: Any, value: Any) -> bool:
    """Write a scalar into an evaluated array's host buffer itself, when nothing else can see it.

    The proof is reference counts: the array's node is held by its storage alone (no pending
    node reads it, no element recipe, view, other array or write history refers to it), and
    its buffer by the node alone (no NumPy view, no `numpy()` result, no other node shares the
    memory), so the old value is dead. Model state, autograd, device buffers and indices
    other than integers and integer slices take the recorded path (False).
    """
    if arr._vbase is not None:
        return False  # (a view whose node was read: a pending reader may hold that node)
    t = type(key)
    if t is tuple:
        for k in key:
            if type(k) not in _INT_KEYS and (type(k) is not slice or not _int_slice(k)):
                return False
    elif t not in _INT_KEYS and (t is not slice or not _int_slice(key)):
        return False
    buf = _writable(arr)
    if buf is None:
        return False
    v = value._storage.val if type(value) is Scalar else value
    if type(v) in _COMPLEX_VALUES and buf.dtype.kind != "c":
        return False  # NumPy warns about the lost imaginary part: the recorded path warns at the user's line
    view = arr._view
    if view is not None and not buf.flags.c_contiguous:
        return False  # (a region of another layout would be materialized as a copy)
    try:
        (buf if view is None else materialize(buf, view, writeable=True))[key] = v
    except ValueError:
        if buf.flags.writeable:
            return False  # a value the dtype cannot hold: the recorded path raises it
        # evaluated values are read-only: it stays writeable for the next write (`_value`
        # hands it out read-only again)
        buf.setflags(write=True)
        try:
            (buf if view is None else materialize(buf, view, writeable=True))[key] = v
        except Exception:
            buf.setflags(write=False)
            return False
    except Exception:  # out of range, a value the dtype cannot hold: the recorded path raises it
        return False
    return True


#: most elements a region written by `_direct_inplace` has (larger writes stay recorded, where
#: they fuse with what follows and may run compiled)
DIRECT_REGION_MAX = 1 << 14


def _writable(arr: Array) -> np.ndarray | None:
    """The buffer of an evaluated host array whose current value nothing else can read (else None).

    The proof of both direct writes: a plain storage, not model state, not tracked by autograd,
    no write history, on the host, owning its memory; then reference counts: the node held by
    its storage alone, its buffer by the node alone (`_direct_set` says what that excludes).
    """
    storage = arr._storage
    if type(storage) is not Storage:
        return None
    node = storage.node
    buf = node.buffer
    if (
        type(buf) is not np.ndarray
        or node.users != 1
        or storage.hist is not None
        or node.requires_grad
        or node.static
        or storage.requires_grad
        or storage.static
        or node.device is not HOST
        or buf.base is not None
    ):
        return None
    # held by the storage's node, `node` and getrefcount's argument; the buffer likewise
    if getrefcount(node) != _ONCE or getrefcount(buf) != _ONCE:
        return None
    return buf


def _direct_inplace(arr: Array, op: str, other: Any) -> bool:
    """`region op= other` on a view of an evaluated array, in its buffer, when nothing else can see it.

    `other` is a scalar, a NumPy array or an evaluated host array; the operator a plain binary
    ufunc that cannot fail on data. NumPy's in-place ufunc (casting 'same_kind', overlapping
    operands buffered) gives NumPy's result; its errors leave the buffer unchanged and take
    the recorded path, which raises them in lazygraph's words.
    """
    if arr._vbase is not None:
        return False  # the view was read: its node may be held by a pending reader
    fn = _INPLACE_FNS.get(op)
    if fn is None:
        opdef = REGISTRY[op]
        if opdef not in writes.FUSABLE or opdef in _FALLIBLE:
            return False
        fn = _INPLACE_FNS[op] = opdef.fn
    t = type(other)
    if t is Array:
        o = other._storage.node if other._view is None else other.node
        o = o.buffer
        if type(o) is not np.ndarray:
            return False
    elif t is np.ndarray or t in _DIRECT_VALUES:
        o = other
    else:
        return False
    buf = _writable(arr)
    if buf is None:
        return False
    view = arr._view
    if prod(view.shape) > DIRECT_REGION_MAX:
        return False
    flags = buf.flags  # (one flags object: each `buf.flags` makes a new one)
    if not flags.c_contiguous:
        return False  # (a region of another layout would be materialized as a copy)
    if not flags.writeable:
        buf.setflags(write=True)  # evaluated values are read-only; `_value` hands it out so again
    region = materialize(buf, view, writeable=True)
    try:
        fn(region, o, out=region)
    except FloatingPointError:
        raise  # np.errstate asked for it: NumPy's `region op= o` raises too
    except Exception:  # a cast or shape NumPy refuses: nothing was written, the recorded path raises
        return False
    return True


#: the ufunc of each operator `_direct_inplace` runs (plain binary ufuncs that cannot fail on
#: data: found once per operator, as REGISTRY, FUSABLE and _FALLIBLE cost three lookups a call)
_INPLACE_FNS: dict[str, Any] = {}


def _int_slice(k: slice) -> bool:
    """Whether a slice's bounds are plain integers (or None)."""
    return all(x is None or type(x) in _INT_KEYS for x in (k.start, k.stop, k.step))
