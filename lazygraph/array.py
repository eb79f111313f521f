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
from collections.abc import Iterator
from math import prod
from typing import Any

import numpy as np
from numpy.exceptions import ComplexWarning

from cache.key import hint_of
from lazygraph import infer_memo, txn, writes
from lazygraph.device import CPU, Device, canonical, default, host_value, on_device, place
from lazygraph.engine import evaluate as evaluation
from lazygraph.engine.attempt import RELEASED
from lazygraph.gradmode import is_grad_enabled, track
from lazygraph.indexing import parse_index
from ops.base import FAST_SIZE, REGISTRY, check_size, drops_imaginary, fmt_shape
from ops.creation import BUFFER, SCALAR
from ops.node import HOST, Node
from ops.views import View, contiguous, is_identity

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
    key = None
    if attrs and len(operands) == 1 and type(operands[0]) is Array:
        key, lean = _one_operand(opdef, operands[0], attrs)
        if lean is not None:
            return lean
    given = attrs  # (`attrs` becomes the node's, as inference returns them)
    nodes = tuple([as_node(x, op) for x in operands])
    for n in nodes:
        if n.op is not SCALAR:
            break
    else:
        if nodes:  # NumPy treats all-scalar operations as on default-dtype arrays.
            nodes = tuple([constant(n.buffer, device=HOST) for n in nodes])  # neutral: host memory
            for n in nodes:
                n.device = None  # made from Python scalars: they join whatever device they meet
    shape, dtype, attrs = infer_memo.infer(opdef, nodes, attrs)
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
    elif (
        key is not None
        and type(node.kid) is int
        and node.kid >= 0
        and infer_memo.settled(opdef, nodes, given)
    ):
        if len(_ONE) >= _ONE_MAX:
            _ONE.clear()
        _ONE[key] = (shape, dtype, dict(attrs), node.kid)  # a copy: passes may edit a node's
    return Array(Storage(node))


#: (operator, dtype, shape and device of the one array operand, attributes with their types) ->
#: (shape, dtype, attributes, local id) of what `record` made for it: reductions, `astype`,
#: `transpose`... with their keywords then cost one dictionary lookup and a node (about 2 µs
#: instead of 9), as the binary recorders' memos do for `a + b` (lazygraph/recorders.py)
_ONE: dict[tuple, tuple] = {}
_ONE_MAX = 4096
_INEXACT = (float, complex, np.inexact)


def _one_operand(opdef: Any, x: Array, attrs: dict) -> tuple[tuple | None, Array | None]:
    """`record`'s result for one array operand from `_ONE` (None: not memoized), and its key."""
    nx = x._storage.node if x._view is None else x.node
    d = nx.device
    if d is None:
        return None, None  # a neutral value: `record` places it
    try:
        for v in attrs.values():
            if isinstance(v, _INEXACT) or isinstance(v, tuple) and any(isinstance(e, _INEXACT) for e in v):
                return None, None  # 0.0 == -0.0 and (1,) == (1.0,): such keys would not tell values apart
        key = (opdef, nx.dtype, nx.shape, d, tuple([(k, type(v), v) for k, v in attrs.items()]))
        hit = _ONE.get(key)
    except TypeError:  # an unhashable attribute
        return None, None
    if hit is None:
        return key, None
    shape, dtype, out_attrs, kid = hit
    node = Node(opdef, (nx,), dict(out_attrs), shape, dtype)
    node.device = d
    track(node)
    node.kid = kid
    node.h = hash((kid, nx.h if nx.h is not None else hint_of(nx)))
    return key, Array(Storage(node))


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
        if vnode.device is None and vnode.op is BUFFER and d is not None and d is not HOST:
            # a NumPy value written into a device array: its copy on the device, not the host
            # buffer (`w[...] = values` would otherwise make the array hold host memory)
            vnode = Node(BUFFER, (), {}, vnode.shape, vnode.dtype, buffer=on_device(vnode.buffer, d))
            vnode.device = d
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
        if vnode.op is SCALAR or (isinstance(value, (np.floating, np.integer)) and base.dtype.kind in "iu"):
            # NumPy's checks on a scalar stored into this dtype (300 into int8, nan into int; a
            # NumPy float or integer scalar is checked like a Python one, a 0-d array is not)
            try:
                np.empty((), base.dtype)[()] = vnode.buffer if vnode.op is SCALAR else value
            except (TypeError, ValueError, OverflowError) as e:
                raise type(e)(f"{op}: {e}") from None
        # NumPy stores complex arrays into real ones by dropping the imaginary part, with a
        # warning at the write (bool takes the truth value; a Python complex raised above)
        discard = drops_imaginary(vnode.dtype, base.dtype)
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


#: hooks of deferred boolean-mask selections, set by lazygraph/masked.py (which sits above
#: this module): [select(x, mask) -> Array | None, assign(y, mask, value) -> bool]. None of
#: them set: every `x[mask]` is gathered at once, as NumPy does.
DEFERRED: list = [None, None]


# -- the lean recording path of writes (lazygraph/writes.py) ------------------------------------

#: array types whose reads and writes are Array's own (not ComplexPart, whose writes go back
#: to its complex array): `a[i]`, `a[i] = v` and in-place operators take the lean path
_LEAN = {Array, Scalar}


def _fallible(node: Node) -> bool:
    """Whether the node's kernel can fail on data (it keeps its own step: errors name its line)."""
    f = _FALLIBLE.get(node.op)
    return f is not None and f(node)
