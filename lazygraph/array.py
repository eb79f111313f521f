"""The lazy `Array`, its storage, and recording.

An `Array` is a window (`View`) onto a `Storage`; the storage holds the node that is the
current value of the whole buffer. Views share a storage, exactly like NumPy views share
memory. A write (in-place operator, `a[i] = v`, `out=`) records a new node for the whole
buffer and points the storage at it, so every array aliasing that memory sees the write
while everything recorded earlier keeps referring to the old node.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Callable, Iterator
from math import prod
from sys import getrefcount
from typing import Any
from weakref import ref

import numpy as np
from numpy.exceptions import ComplexWarning

from cache.key import hint_of, kid_of, leaf_hint
from lazygraph import txn, writes
from lazygraph.device import CPU, Device, canonical, default, host_value, on_device, place
from lazygraph.engine import evaluate as evaluation
from lazygraph.engine.attempt import RELEASED
from lazygraph.gradmode import GRAD_STATE, is_grad_enabled, track
from lazygraph.indexing import parse_index, plain_view
from ops.base import FAST_SIZE, REGISTRY, _weak_sig, check_size, fmt_shape
from ops.creation import BUFFER, SCALAR
from ops.node import HOST, Node
from ops.views import _SCALAR_OPS, View, contiguous, is_identity, materialize

VIEW = REGISTRY["view"]
ASSIGN = REGISTRY["assign"]


class Storage:
    """The buffer several views share; `node` is its current value."""

    # Not slotted: one storage is made per recorded operation, and the fields below are rarely
    # set, so class-level defaults make a new storage one attribute store instead of six.
    requires_grad = False  # a leaf of differentiation (a parameter)
    static = False  # model state: every value it holds is marked static (see mark_static)
    grad: Array | None = None
    # the values held since the last evaluated one, so a failed evaluation can drop the
    # writes that caused it (lazygraph/txn.py); None while no write is pending
    hist: list[Node] | None = None
    ghist: list[Node | None] | None = None  # `.grad` values backward() replaced

    def __init__(self, node: Node) -> None:
        node.users += 1
        self.node = node

    def restore_grad(self, node: Node | None) -> None:
        """Put back a `.grad` value a failed backward() replaced (txn.rollback asks, as it sits below Array)."""
        self.grad = None if node is None else from_node(node)

    def set(self, node: Node) -> None:
        """Record that the buffer now holds `node`'s value."""
        node.users += 1
        old = self.node
        old.users -= 1
        self.node = node
        h = self.hist
        if h is None or old.buffer is not None:
            self.hist = [old]
            if h is None:
                txn.register(self)
        else:
            h.append(old)
            if len(h) > txn.HISTORY_LIMIT:
                del h[1]
        if self.requires_grad:
            mark_leaf(self, node)
        elif self.static:
            node.static = True

    def __del__(self) -> None:
        try:
            self.node.users -= 1
        except AttributeError:  # interpreter shutdown
            pass


#: grad-leaf node -> the storage whose value it is, so backward() can fill `.grad`
LEAF_OWNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def mark_leaf(storage: Storage, node: Node) -> None:
    """Make `node` a leaf of differentiation owned by `storage` (a parameter's value)."""
    node.requires_grad = True
    node.grad_leaf = True
    node.static = True  # a parameter's value is model state (the fold pass memoizes on it)
    LEAF_OWNERS[node] = weakref.ref(storage)


def accumulate_grad(storage: Storage, g: Array) -> None:
    """Add `g` to the storage's `.grad`, remembering the value it replaces (undone if `g` fails)."""
    prev = storage.grad
    storage.grad = g if prev is None else prev + g
    pnode = None if prev is None else prev.node
    gh = storage.ghist
    if gh is None or pnode is None or pnode.buffer is not None:
        storage.ghist = [pnode]
        if gh is None:
            txn.register(storage)
    else:
        gh.append(pnode)


def check_device(device: Any) -> str:
    """The canonical name of `device` (None: the default device); unknown or unusable ones raise."""
    return canonical(device)


def constant(value: Any, dtype: Any = None, device: Any = None) -> Node:
    """A leaf holding a private, read-only copy of a NumPy-convertible value, on `device` (default)."""
    arr = np.array(value, dtype=dtype, copy=True, order="C")
    if arr.dtype == object:
        raise TypeError(f"asarray: cannot convert {type(value).__name__} to a numeric array")
    arr.flags.writeable = False
    dev = canonical(device)
    node = Node(BUFFER, (), {}, arr.shape, arr.dtype, buffer=on_device(arr, dev))
    node.device = dev
    return node


_SCALAR_DTYPES = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
    complex: np.dtype(np.complex128),
}


def as_node(x: Any, op: str) -> Node:
    """Operand to node: arrays as they are, Python scalars as weak scalars, else a constant."""
    if isinstance(x, Array):
        return x.node
    dtype = _SCALAR_DTYPES.get(type(x))
    if dtype is not None:
        return Node(SCALAR, (), {}, (), dtype, buffer=x)
    if isinstance(x, (np.ndarray, np.generic, list, tuple, numbers.Number)):
        node = constant(x, device=HOST)
        node.device = None  # converted on the fly: it joins the device of the arrays it meets
        return node
    raise TypeError(f"{op}: unsupported operand type {type(x).__name__!r}")


def record(op: str, *operands: Any, **attrs: Any) -> Array:
    """Record `op` applied to operands; shape and dtype are checked now, not at evaluation."""
    opdef = REGISTRY[op]
    nodes = tuple([as_node(x, op) for x in operands])
    for n in nodes:
        if n.op is not SCALAR:
            break
    else:
        if nodes:  # NumPy treats all-scalar operations as on default-dtype arrays.
            nodes = tuple([constant(n.buffer) for n in nodes])
            for n in nodes:
                n.device = None  # made from Python scalars: they join whatever device they meet
    shape, dtype, attrs = opdef.infer(nodes, attrs)
    if not 0 < prod(shape) <= FAST_SIZE:  # the common case without a call
        check_size(op, shape, dtype)
    node = Node(opdef, nodes, attrs, shape, dtype)
    d = node.device
    if nodes and all(n.device is None and n.op is BUFFER for n in nodes):
        node.device = None  # a value of Python scalars only stays neutral (a gradient's `y - 1`)
    elif d is None or not nodes:
        node.device = place(op, nodes)
    else:
        for n in nodes:
            if n.device is not d:
                node.device = place(op, nodes)  # raises for arrays of two devices
                break
    node = track(node)
    if node.h is None:
        try:
            hint_of(node)  # the structural key's parts, hashed as recorded (cache/key.py)
        except RecursionError:  # inputs recorded without hints, in a long chain: the walk hints them
            pass
    if opdef in _FALLIBLE and _FALLIBLE[opdef](node):
        txn.note_origin(node)
    return Array(Storage(node))


#: operators whose kernels can fail on data (a lazy index or label out of range, a negative
#: integer power) -> when a node of them can: they remember the user's line (txn.note_origin)
_FALLIBLE = {
    REGISTRY["gather"]: lambda n: True,
    REGISTRY["scatter_add"]: lambda n: True,
    REGISTRY["one_hot"]: lambda n: True,
    REGISTRY["pow"]: lambda n: n.dtype.kind in "iu",
}


def result_dtype(op: str, *operands: Any) -> np.dtype:
    """The dtype elementwise `op` records for these operands, shapes unchecked (NumPy's order)."""
    from ops.base import dtype_by_example

    fn = getattr(REGISTRY[op], "dtype_fn", None)
    if fn is None:  # not elementwise (matmul): recording checks shapes too
        return record(op, *operands).dtype
    return dtype_by_example(op, fn, tuple(as_node(x, op) for x in operands))


def from_node(node: Node) -> Array:
    """A fresh array holding `node`."""
    return Array(Storage(node))


def mark_static(x: Array, flag: bool = True) -> Array:
    """Mark x's buffer as model state (weights loaded as plain arrays) so folding memoizes on it."""
    if not isinstance(x, Array):
        raise TypeError(f"mark_static: expected a lazygraph Array, got {type(x).__name__}")
    return x.static_(flag)


class Array:
    """A lazily evaluated n-dimensional array with NumPy semantics."""

    __slots__ = ("_storage", "_view", "_readonly", "_vnode", "_vbase", "__weakref__")
    __array_priority__ = 1000.0
    __hash__ = None  # like ndarray: == is elementwise

    def __init__(self, storage: Storage, view: View | None = None, readonly: bool = False) -> None:
        if view is not None and is_identity(view, storage.node.shape):
            view = None
        self._storage = storage
        self._view = view
        self._readonly = readonly
        self._vnode: Node | None = None
        self._vbase: Node | None = None

    # -- structure known at record time ------------------------------------------------

    @property
    def node(self) -> Node:
        """The node computing this array's current value."""
        base = self._storage.node
        view = self._view
        if view is None:
            return base
        if self._vbase is not base:
            # views of evaluated buffers cost nothing: they are realized immediately
            self._vnode, self._vbase = writes.view_node(base, view), base
        return self._vnode

    @property
    def shape(self) -> tuple[int, ...]:
        """Dimensions."""
        return self._view.shape if self._view is not None else self._storage.node.shape

    @property
    def dtype(self) -> np.dtype:
        """Element type."""
        return self._storage.node.dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return prod(self.shape)  # Python ints: exact, and a tenth of np.prod's cost

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements."""
        return self.size * self.dtype.itemsize

    @property
    def device(self) -> Device:
        """Where the array lives and its operators run: a Device, equal to its name ("cpu")."""
        d = self._storage.node.device
        return CPU if d is HOST else Device(d if d is not None else default())

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def view_of(self) -> View:
        """This array's window onto its storage."""
        return self._view if self._view is not None else contiguous(self._storage.node.shape)

    def _derive(self, view: View, readonly: bool = False) -> Array:
        return Array(self._storage, view, self._readonly or readonly)

    @property
    def is_static(self) -> bool:
        """Whether this array's buffer is model state (a parameter, a module buffer, mark_static)."""
        return self._storage.static or self._storage.requires_grad

    def static_(self, flag: bool = True) -> Array:
        """Mark (or unmark) the whole buffer as model state in place and return the array.

        Static buffers are read far more often than written (inference or frozen weights,
        embedding tables): the fold pass memoizes what is computed from them alone, and a
        write makes the next evaluation recompute. A buffer that requires grad is always static.
        """
        storage = self._storage
        if bool(flag) == storage.static:
            return self
        storage.static = bool(flag)
        if storage.requires_grad:
            return self  # its values are grad leaves, marked static already
        node = storage.node
        # A fresh node carries the mark, so other arrays holding the old value are unaffected.
        if node.buffer is not None and not node.requires_grad:
            fresh = Node(BUFFER, (), {}, node.shape, node.dtype, buffer=node.buffer)
            fresh.device = node.device
            if node in RELEASED:
                RELEASED.add(fresh)
        else:
            fresh = Node(VIEW, (node,), {"view": contiguous(node.shape)}, node.shape, node.dtype)
            fresh.requires_grad = node.requires_grad
        fresh.static = bool(flag)
        storage.set(fresh)
        return self

    # -- evaluation points -------------------------------------------------------------

    def _value(self) -> np.ndarray:
        node = self.node
        if node.buffer is None:
            evaluation.evaluate([node])
        value = host_value(node)  # a device's value is copied back here, and only here
        if value is node.buffer and value.flags.writeable:
            value.setflags(write=False)  # a direct write (`_direct_set`) left it writeable
        return value

    def numpy(self) -> np.ndarray:
        """Evaluate; the result is a read-only NumPy array (copy it to modify)."""
        return self._value()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        value = self._value()
        if copy:
            return np.array(value, dtype=dtype, copy=True)
        if copy is False and dtype is not None and np.dtype(dtype) != value.dtype:
            raise ValueError("Unable to avoid copy while creating an array as requested.")
        return value if dtype is None else value.astype(dtype, copy=False)

    def item(self, *args: Any) -> Any:
        """Evaluate and return one element as a Python scalar."""
        return self._value().item(*args)

    def tolist(self) -> Any:
        """Evaluate and return nested Python lists."""
        return self._value().tolist()

    def _scalar(self) -> np.ndarray:
        if self.size != 1:
            raise TypeError(
                f"only size-1 arrays can be converted to Python scalars (shape {fmt_shape(self.shape)})"
            )
        return self._value()

    # Size-1 arrays of any ndim are left to NumPy's own conversion (NumPy 2.4 accepts only 0-d).
    def __float__(self) -> float:
        return float(self._scalar())

    def __int__(self) -> int:
        return int(self._scalar())

    def __complex__(self) -> complex:
        return complex(self._scalar())

    def __index__(self) -> int:
        if self.ndim != 0 or self.dtype.kind not in "iu":
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return int(self._value())

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"The truth value of an array with more than one element is ambiguous "
                f"(shape {fmt_shape(self.shape)}). Use a.any() or a.all()"
            )
        return bool(self._value().reshape(()))

    def __iter__(self) -> Iterator[Array]:
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        self._value()  # iteration is an evaluation point; the rows are then free views
        for i in range(self.shape[0]):
            yield self[i]

    def __repr__(self) -> str:
        text = np.array2string(self._value(), separator=", ", prefix="Array(")
        return f"Array({text}, dtype={self.dtype})"

    def __str__(self) -> str:
        return str(self._value())

    def __format__(self, spec: str) -> str:
        if self.ndim == 0:
            return format(self._value().item(), spec)
        return format(str(self), spec)

    # -- memory transactions ------------------------------------------------------------

    def _write(
        self,
        value: Any,
        index: tuple | None = None,
        idx_nodes: tuple = (),
        op: str = "setitem",
        element: bool = False,
    ) -> None:
        """Write `value` into this array's region (optionally indexed) of its storage."""
        if self._readonly:
            raise ValueError(f"{op}: assignment destination is read-only (a broadcast view)")
        if self._storage.requires_grad and is_grad_enabled():
            raise RuntimeError(
                f"{op}: in-place write to an array that requires grad (a leaf such as a parameter); "
                "write inside `with lg.no_grad():`"
            )
        base = self._storage.node
        vnode = as_node(value, op)
        d = base.device
        if vnode.device is not d or any(n.device is not d for n in idx_nodes):
            vnode.device = place(op, (base, vnode, *idx_nodes))  # neutral values join the array's
        if element:
            # the caller knows NumPy converts this value with at most the target's dimensions
            from ops.movement import index_shape

            target = (
                self.shape if index is None else index_shape(self.shape, index, [n.shape for n in idx_nodes])
            )
            if vnode.ndim > len(target):
                raise ValueError(
                    f"{op}: setting an array element with a sequence (value of shape "
                    f"{fmt_shape(vnode.shape)} into a region of shape {fmt_shape(target)})"
                )
        if vnode.op is SCALAR or (isinstance(value, np.floating) and base.dtype.kind in "iu"):
            # NumPy's checks on a scalar stored into this dtype (300 into int8, nan into int; a
            # NumPy float scalar is checked like a Python float, a 0-d array is not)
            try:
                np.empty((), base.dtype)[()] = vnode.buffer if vnode.op is SCALAR else value
            except (TypeError, ValueError, OverflowError) as e:
                raise type(e)(f"{op}: {e}") from None
        # NumPy stores complex arrays into real ones by dropping the imaginary part, with a
        # warning at the write (bool takes the truth value; a Python complex raised above)
        discard = vnode.dtype.kind == "c" and base.dtype.kind not in "cb"
        if discard:
            txn.warn_user("Casting complex values to real discards the imaginary part", ComplexWarning)
        if (
            self._view is None
            and index is None
            and vnode.shape == base.shape
            and vnode.op is not SCALAR
            and not discard  # the assign kernel drops the imaginary part without warning again
        ):
            if vnode.dtype != base.dtype:
                vnode = record("astype", from_node(vnode), dtype=base.dtype).node
            self._storage.set(vnode)
            return
        attrs = {"view": self._view, "index": index}
        shape, dtype, attrs = ASSIGN.infer((base, vnode, *idx_nodes), attrs)
        view = self._view
        if index is None and view is not None and not discard and len(vnode.inputs) == 2:
            # `a[idx] op= v` (or `a[idx] = a[idx] op v`): one `update` node, as the lean path records
            if not _fallible(vnode):
                if vnode.inputs[0] is self._vnode and self._vbase is base:
                    node = writes.update_node(base, vnode.inputs[1], view, vnode)
                else:
                    node = writes.update_of(base, vnode, view) if not view.shape else None
                if node is not None:
                    self._storage.set(node)
                    return
        node = track(Node(ASSIGN, (base, vnode, *idx_nodes), attrs, shape, dtype))
        if idx_nodes:  # index arrays are data: an index out of range fails at evaluation
            txn.note_origin(node)
        self._storage.set(node)

    def _inplace(self, op: str, other: Any) -> Array:
        # NumPy's order of checks: read-only output, dtypes and casting, then shapes.
        if self._readonly:
            raise ValueError(f"{op}: output array is read-only (a broadcast view)")
        if self._view is not None and type(self) is Array and _direct_inplace(self, op, other):
            return self  # `a[i] += v` of a row: NumPy's in-place ufunc on the held buffer
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
                return  # written into the held buffer, as NumPy writes
            if (
                type(value) is Scalar
                and type(value._storage) is _Update
                and _write_update(self, key, value._storage)
            ):
                return  # `a[i] op= v`: one `update` node
            view = self._view
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

    def _setitem(self, key: Any, value: Any) -> None:
        """`self[key] = value` by the general path: every check, at the user's line."""
        basic, template, operands = parse_index(self, key, "setitem", Array)
        items = key if isinstance(key, tuple) else (key,)

        def int_like(it: Any) -> bool:  # integers, and 0-d integer arrays (NumPy indexes with them alike)
            if isinstance(it, (np.ndarray, Array)):
                return it.ndim == 0 and it.dtype.kind in "iu"
            return isinstance(it, (int, np.integer)) and not isinstance(it, (bool, np.bool_))

        # NumPy converts the value with at most the target's dimensions when it is a single
        # element (every axis indexed by an integer) or a nested list written without index arrays.
        element = len(items) == self.ndim and all(int_like(it) for it in items)
        if element and self.dtype == np.bool_:
            # NumPy stores the truth value of the object into a single bool element: a list's
            # Python truthiness, or a size-1 array's value (larger arrays raise).
            if isinstance(value, (list, tuple)):
                value = bool(value)
            elif np.size(value) == 1:
                element = False
        if element and self.dtype.kind in "iu" and isinstance(value, (list, tuple)):
            raise TypeError(
                f"setitem: int() argument must be a real number, not {type(value).__name__!r} "
                "(a single element of an integer array)"
            )
        limit = element or (
            isinstance(value, (list, tuple))
            and all(int_like(it) or it is None or it is Ellipsis or isinstance(it, slice) for it in items)
        )
        if len(items) == 1 and isinstance(items[0], (np.ndarray, Array)) and items[0].dtype == np.bool_:
            if items[0].shape == self.shape and np.ndim(value) > 1:
                raise TypeError(
                    "setitem: NumPy boolean array indexing assignment requires a 0 or 1-dimensional "
                    f"input, input has {np.ndim(value)} dimensions"
                )
        if template is None:
            self._derive(basic)._write(value, element=limit)
        else:
            self._write(value, template, tuple(as_node(o, "setitem") for o in operands), element=limit)

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
                            return out
                else:
                    out = _held_element(base, buf, key)
                    if out is not None:
                        return out
            view = self._view
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

    def _getitem(self, key: Any) -> Array:
        """`self[key]` by the general path: a view, or a gather (a boolean mask is evaluated)."""
        basic, template, operands = parse_index(self, key, "getitem", Array)
        if template is None:
            items = key if isinstance(key, tuple) else (key,)
            if len(items) == self.ndim and all(
                isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in items
            ):
                # NumPy: one element by integers is a scalar, i.e. a copy (`s = x[1, 2]; s += 1`)
                return Scalar(Storage(self._derive(basic).node))
            return self._derive(basic)
        return record("gather", self, *operands, index=template)

    # NumPy interoperability (`np.tanh(x)`, `np.mean(x)`): `__array_ufunc__` and
    # `__array_function__` are installed by methods.py, which sits above the namespace they call.


class Scalar(Array):
    """One element read by integer indices (`s = a[1, 2]`). NumPy gives an immutable scalar
    there, so an in-place operator rebinds the name to a new value with NumPy's promotion
    (`a[0] += 1.5` on an integer array stores int(a[0] + 1.5), where `a += 1.5` is an error)."""

    __slots__ = ()

    def _inplace(self, op: str, other: Any) -> Array:
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

    # `float(a[i, j])` of an evaluated array reads the element without building a node
    def __float__(self) -> float:
        v = self._held()
        return Array.__float__(self) if v is None else float(v)

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

    @property
    def node(self) -> Node:  # type: ignore[override]
        """Build the recipe's node once; from then on this is a plain Storage."""
        node = self.build()
        node.users += 1
        self.__class__ = Storage  # same layout: the instance keeps its identity
        d = self.__dict__
        for name in _RECIPE:  # let go of the recipe (the array it was read from)
            d.pop(name, None)
        self.node = node
        return node

    def __del__(self) -> None:  # no node was built, so no count to give back
        pass


#: the fields of the recipes below (anything else set on such a storage, `.grad`, is kept)
_RECIPE = (
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


class _Update(_Element):
    """The storage of `s op= v` on an element read (`s = a[i]`): `op(s, v)`, built when read."""

    # made field by field (`_pending_update`): elem (the element's Scalar), op, other (a Python
    # scalar, or None with onode the array operand's value), opdef, dtype, hint (the scalar's)

    def build(self) -> Node:
        """The node `record_binary` gives for the operation (its element read built first)."""
        other = self.other if self.onode is None else from_node(self.onode)
        return binary_recorder(self.op)(self.elem, other)._storage.node


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

    node = _Element.node


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
    storage = arr._storage
    if type(storage) is not Storage or arr._vbase is not None:
        return False  # (a view whose node was read: a pending reader may hold that node)
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
        return False
    t = type(key)
    if t is tuple:
        for k in key:
            if type(k) not in _INT_KEYS and (type(k) is not slice or not _int_slice(k)):
                return False
    elif t not in _INT_KEYS and (t is not slice or not _int_slice(key)):
        return False
    v = value._storage.val if type(value) is Scalar else value
    if type(v) in _COMPLEX_VALUES and buf.dtype.kind != "c":
        return False  # NumPy warns about the lost imaginary part: the recorded path warns at the user's line
    view = arr._view
    if view is not None and not buf.flags.c_contiguous:
        return False  # (a region of another layout would be materialized as a copy)
    # held by the storage's node, `node` and getrefcount's argument; the buffer likewise
    if getrefcount(node) != _ONCE or getrefcount(buf) != _ONCE:
        return False
    del node
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

    The proof `_direct_set` gives: the node is held by the storage alone (and the caller's
    `node`), its buffer by the node alone (and the caller's `buf`), counted by the caller.
    Here the facts that do not need counting: a plain storage, not model state, not tracked by
    autograd, no write history, on the host, owning its memory.
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
    opdef = REGISTRY[op]
    if opdef not in writes.FUSABLE or opdef in _FALLIBLE:
        return False
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
    if view.size > DIRECT_REGION_MAX or not buf.flags.c_contiguous:
        return False  # (a region of another layout would be materialized as a copy)
    node = arr._storage.node
    # as `_direct_set`: the node held by the storage and `node`, the buffer by it and `buf`
    if getrefcount(node) != _ONCE or getrefcount(buf) != _ONCE:
        return False
    del node
    if not buf.flags.writeable:
        buf.setflags(write=True)  # evaluated values are read-only; `_value` hands it out so again
    region = materialize(buf, view, writeable=True)
    try:
        opdef.fn(region, o, out=region)
    except FloatingPointError:
        raise  # np.errstate asked for it: NumPy's `region op= o` raises too
    except Exception:  # a cast or shape NumPy refuses: nothing was written, the recorded path raises
        return False
    return True


def _int_slice(k: slice) -> bool:
    """Whether a slice's bounds are plain integers (or None)."""
    return all(x is None or type(x) in _INT_KEYS for x in (k.start, k.stop, k.step))


def scalar_inplace(op: str) -> Callable[[Scalar, Any], Array]:
    """`Scalar.__iop__`: `s op= v` rebinds `s` to `s op v`, kept as a recipe for an unread element."""
    f = _SCALAR_INPLACE.get(op)
    if f is not None:
        return f
    opdef = REGISTRY[op]
    rec = binary_recorder(op)
    if opdef.sig_cache is None or opdef not in writes.FUSABLE or opdef in _FALLIBLE:
        f = rec
    else:
        fn = _SCALAR_OPS.get(opdef.fn, opdef.fn)

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
            elif t is _Element:
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


#: hooks of deferred boolean-mask selections, set by lazygraph/masked.py (which sits above
#: this module): [select(x, mask) -> Array | None, assign(y, mask, value) -> bool]. None of
#: them set: every `x[mask]` is gathered at once, as NumPy does.
DEFERRED: list = [None, None]


# -- the lean recording path ------------------------------------------------------------------
#
# Elementwise operators recorded by the operators (`a + b`) and the namespace's functions
# (`lg.tanh(a)`) come here. What recording finds (shape, dtype, whether the node is
# differentiable, whether its kernel can fail on data) depends only on the operands'
# signature: per array operand its dtype and shape, per Python scalar its weak-scalar
# signature (`_weak_sig`: a Python int's value matters only through which integer dtypes hold
# it). The operator's `sig_cache` remembers it after a first recording through `record`, which
# checks everything and raises any error at the user's line; a signature that failed is never
# remembered, so it fails again. Anything unusual (constants, NumPy scalars, operands that are
# all scalars, empty shapes, attributes, operators with their own rule) takes `record` itself.

#: array types whose `node` is the plain property (subclasses such as ComplexPart override it)
_PLAIN = {Array, Scalar}
_NODE = Array.__dict__["node"]
_F64 = _SCALAR_DTYPES[float]
_I64 = _SCALAR_DTYPES[int]
_SMALL_INT = _weak_sig(0)  # every integer dtype holds 0..127
_SMALL_NEG = _weak_sig(-1)  # every signed one -128..-1


def _adopt(*types: type) -> bool:
    """Admit Array subclasses that read `node` as Array does (nn.Parameter) to the lean path."""
    new = False
    for t in types:
        if t not in _PLAIN and issubclass(t, Array) and t.node is _NODE:
            _PLAIN.add(t)
            new = True
    return new


def _weak(x: Any) -> Any:
    """The cache signature of a Python scalar operand, or None for anything else."""
    t = type(x)
    if t is int:
        if 0 <= x <= 127:
            return _SMALL_INT
        return _SMALL_NEG if -128 <= x < 0 else _weak_sig(x)
    if t is float or t is bool or t is complex:
        return t
    return None


def _remember(cache: dict, key: tuple, result: Array) -> Array:
    """Memoize what `record` found for this signature (empty results are value-dependent)."""
    node = result._storage.node
    shape = node.shape
    if 0 not in shape:
        if len(cache) >= node.op.SIG_CACHE_LIMIT:
            cache.clear()
        fallible = node.op in _FALLIBLE and _FALLIBLE[node.op](node)
        # the operation's local id, and the hints of Python scalar operands (one per type)
        const = [leaf_hint(n, n.buffer) if n.op is SCALAR else None for n in node.inputs]
        cache[key] = (shape, node.dtype, node.dtype.kind in "fc", fallible, kid_of(node), *const)
    return result


#: Node's fields in the order ops/node.py sets them; `_made` builds a node field by field
#: (no `__init__` frame: a third of a node's cost) only while this list is Node's own.
_NODE_FIELDS = (
    "op", "inputs", "attrs", "shape", "dtype", "buffer", "users", "requires_grad",
    "grad_leaf", "static", "device", "kid", "h", "__weakref__",
)  # fmt: skip
_DIRECT = tuple(Node.__slots__) == _NODE_FIELDS
_new = object.__new__


def _made(
    opdef: Any,
    inputs: tuple,
    shape: tuple,
    dtype: np.dtype,
    kid: int,
    h: int,
    device: Any,
    rg: bool,
    gl: bool,
) -> Array:
    """`Array(Storage(Node(opdef, inputs, {}, shape, dtype)))` with its key parts, device and
    grad marks, in one frame (the lean path's result; Node, Storage and Array built field by field)."""
    if _DIRECT:
        node = _new(Node)
        node.op = opdef
        node.inputs = inputs
        node.attrs = {}
        node.shape = shape
        node.dtype = dtype
        node.buffer = None
        node.static = False
    else:
        node = Node(opdef, inputs, {}, shape, dtype)
    node.users = 1
    node.requires_grad = rg
    node.grad_leaf = gl
    node.device = device
    node.kid = kid
    node.h = h
    storage = _new(Storage)
    storage.node = node
    arr = _new(Array)
    arr._storage = storage
    arr._view = arr._vnode = arr._vbase = None
    arr._readonly = False
    return arr


def _scalar_leaf(dtype: np.dtype, value: Any) -> Node:
    """`Node(SCALAR, (), {}, (), dtype, value)`, a Python scalar operand's leaf, field by field."""
    if not _DIRECT:
        return Node(SCALAR, (), {}, (), dtype, value)
    node = _new(Node)
    node.op = SCALAR
    node.inputs = ()
    node.attrs = {}
    node.shape = ()
    node.dtype = dtype
    node.buffer = value
    node.users = 0
    node.requires_grad = node.grad_leaf = node.static = False
    node.device = HOST
    node.kid = node.h = None
    return node


def binary_recorder(op: str) -> Callable[[Any, Any], Array]:
    """The lean recorder of one binary elementwise operator: `f(x, y)` is `record(op, x, y)`.

    The operator, its memo and the names the hit path reads are bound once here, so that `a + b`
    costs one Python call after the operator's own (methods.py installs these as the dunders).
    """
    f = _BINARY.get(op)
    if f is not None:
        return f
    opdef = REGISTRY[op]
    cache = opdef.sig_cache
    if cache is None or opdef.arity != 2:

        def f(x: Any, y: Any) -> Array:
            return record(op, x, y)

        _BINARY[op] = f
        return f
    lookup = cache.get
    plain = _PLAIN
    scalar = SCALAR
    leaf = _scalar_leaf
    made = _made
    grad = GRAD_STATE
    f64, i64, small = _F64, _I64, _SMALL_INT

    def f(x: Any, y: Any) -> Array:
        tx = type(x)
        ty = type(y)
        if tx in plain:
            nx = x._storage.node if x._view is None else x.node
            if ty in plain:
                ny = y._storage.node if y._view is None else y.node
                key = (nx.dtype, nx.shape, ny.dtype, ny.shape)
            elif ty is float:
                key = (nx.dtype, nx.shape, float, None)
                ny = leaf(f64, y)
            elif ty is int and 0 <= y <= 127:
                key = (nx.dtype, nx.shape, small, None)
                ny = leaf(i64, y)
            else:
                sig = _weak(y)
                if sig is None:
                    return f(x, y) if _adopt(ty) else record(op, x, y)
                key = (nx.dtype, nx.shape, sig, None)
                ny = leaf(_SCALAR_DTYPES[ty], y)
        elif ty in plain:
            ny = y._storage.node if y._view is None else y.node
            sig = _weak(x)
            if sig is None:
                return f(x, y) if _adopt(tx) else record(op, x, y)
            key = (sig, None, ny.dtype, ny.shape)
            nx = leaf(_SCALAR_DTYPES[tx], x)
        else:
            return f(x, y) if _adopt(tx, ty) else record(op, x, y)
        hit = lookup(key)
        if hit is None:
            return _remember(cache, key, record(op, x, y))
        shape, dtype, fc, fallible, kid, hx, hy = hit
        if hx is None:
            hx = nx.h
            if hx is None:
                hx = hint_of(nx)
        if hy is None:
            hy = ny.h
            if hy is None:
                hy = hint_of(ny)
        # the structural key's parts, hashed as recorded (cache/key.py)
        device = nx.device
        if nx.op is scalar and ny.op is scalar:
            device = None  # Python scalars only (a gradient's `y - 1`): joins any device
        elif device is not ny.device:  # a scalar or NumPy operand joins; two devices raise
            device = place(op, (nx, ny))
        rg = gl = False
        if fc:  # gradmode.track
            if grad.enabled:
                rg = nx.requires_grad or ny.requires_grad
            else:
                gl = True
        out = made(opdef, (nx, ny), shape, dtype, kid, hash((kid, hx, hy)), device, rg, gl)
        if fallible:
            txn.note_origin(out._storage.node)
        return out

    f.__name__ = f.__qualname__ = op
    _BINARY[op] = f
    return f


def unary_recorder(op: str) -> Callable[[Any], Array]:
    """The lean recorder of one unary elementwise operator: `f(x)` is `record(op, x)`."""
    f = _UNARY.get(op)
    if f is not None:
        return f
    opdef = REGISTRY[op]
    cache = opdef.sig_cache
    if cache is None or opdef.arity != 1:

        def f(x: Any) -> Array:
            return record(op, x)

        _UNARY[op] = f
        return f
    lookup = cache.get
    plain = _PLAIN
    made = _made
    grad = GRAD_STATE

    def f(x: Any) -> Array:
        if type(x) not in plain and not _adopt(type(x)):
            return record(op, x)
        nx = x._storage.node if x._view is None else x.node
        key = (nx.dtype, nx.shape)
        hit = lookup(key)
        if hit is None:
            return _remember(cache, key, record(op, x))
        shape, dtype, fc, fallible, kid, _ = hit
        hx = nx.h
        rg = gl = False
        if fc:  # gradmode.track
            if grad.enabled:
                rg = nx.requires_grad
            else:
                gl = True
        h = hash((kid, hint_of(nx) if hx is None else hx))
        out = made(opdef, (nx,), shape, dtype, kid, h, nx.device, rg, gl)
        if fallible:
            txn.note_origin(out._storage.node)
        return out

    f.__name__ = f.__qualname__ = op
    _UNARY[op] = f
    return f


#: operator name -> its lean recorder (built on first use)
_BINARY: dict[str, Callable[[Any, Any], Array]] = {}
_UNARY: dict[str, Callable[[Any], Array]] = {}


def record_binary(op: str, x: Any, y: Any) -> Array:
    """`record(op, x, y)` for a binary elementwise operator, memoized per operand signature."""
    f = _BINARY.get(op)
    return (binary_recorder(op) if f is None else f)(x, y)


def record_unary(op: str, x: Any) -> Array:
    """`record(op, x)` for a unary elementwise operator, memoized per operand signature."""
    f = _UNARY.get(op)
    return (unary_recorder(op) if f is None else f)(x)


# -- the lean recording path of writes (lazygraph/writes.py) ------------------------------------

#: array types whose reads and writes are Array's own (not ComplexPart, whose writes go back
#: to its complex array): `a[i]`, `a[i] = v` and in-place operators take the lean path
_LEAN = {Array, Scalar}


def _inplace_sig(arr: Array, op: str, other: Any) -> tuple | None:
    """The signature of `arr op= other` whose checks depend on it alone (None: general path only)."""
    if type(arr) is not Array:
        return None
    opdef = REGISTRY[op]
    if opdef.sig_cache is None or opdef.arity != 2:
        return None
    node = arr._storage.node if arr._view is None else arr.node
    t = type(other)
    if t in _PLAIN:
        o = other._storage.node if other._view is None else other.node
        return (opdef, node.dtype, node.shape, o.dtype, o.shape)
    sig = _weak(other)
    return None if sig is None else (opdef, node.dtype, node.shape, sig, None)


def _lean_result(arr: Array, result: Array) -> bool:
    """Store an in-place operator's result (its checks passed) into `arr`; False: the general path must."""
    storage = arr._storage
    base = storage.node
    value = result._storage.node
    if (storage.requires_grad and GRAD_STATE.enabled) or value.device is not base.device:
        return False  # the general path raises, or places the value
    view = arr._view
    if view is None:
        if value.dtype != base.dtype:
            return False  # the general path records the cast
        storage.set(value)
        return True
    node = None
    if value.inputs and value.inputs[0] is arr._vnode and arr._vbase is base and not _fallible(value):
        node = writes.update_node(base, value.inputs[1], view, value)
    storage.set(writes.assign_node(base, value, view) if node is None else node)
    return True


def _fallible(node: Node) -> bool:
    """Whether the node's kernel can fail on data (it keeps its own step: errors name its line)."""
    f = _FALLIBLE.get(node.op)
    return f is not None and f(node)


def _lean_setitem(arr: Array, view: View, value: Any) -> tuple | bool | None:
    """Record `arr[view] = value` when its signature passed the checks once (True).

    Else the signature to remember once the general path has passed it, or None when this
    write always takes the general path (a whole-buffer write, complex into real, other
    values than arrays and Python scalars, another device, a parameter while grad is on).
    """
    storage = arr._storage
    if storage.requires_grad and GRAD_STATE.enabled:
        return None
    base = storage.node
    if view.shape == base.shape and view == contiguous(base.shape):
        return None
    t = type(value)
    if t in _PLAIN:
        if value._storage is storage and value._view == view:
            # `a[i] += v` of a view wrote through it already: storing it onto itself is NumPy's no-op
            return True
        vnode = value._storage.node if value._view is None else value.node
        if vnode.device is not base.device or (vnode.dtype.kind == "c" and base.dtype.kind not in "cb"):
            return None
        key = (base.dtype, base.shape, view.shape, view.strides, vnode.dtype, vnode.shape)
        if key not in writes.PASSED:
            return key
        if not view.shape and not _fallible(vnode):  # `a[i] += v` by an element: one `update` node
            node = writes.update_of(base, vnode, view)
            if node is not None:
                storage.set(node)
                return True
    else:
        sig = writes.scalar_sig(value, base.dtype)
        if sig is None or base.device is None:
            return None
        last = _SET_LAST[0]  # the last signature that passed, compared by identity (unhashed)
        if (
            last is None
            or last[0] is not base.dtype
            or last[1] is not base.shape
            or last[2] is not view.shape
            or last[3] is not view.strides
            or last[4] is not sig
        ):
            key = (base.dtype, base.shape, view.shape, view.strides, sig, None)
            if key not in writes.PASSED:
                return key
            _SET_LAST[0] = key
        vnode = Node(SCALAR, (), {}, (), _SCALAR_DTYPES[t], value)
        vnode.device = base.device  # a Python scalar joins the array's device
    storage.set(writes.assign_node(base, vnode, view))
    return True


#: the last Python-scalar write signature found in `writes.PASSED` (see `_lean_setitem`)
_SET_LAST: list = [None]
