"""The lean recorders: elementwise operators and writes recorded in one frame per call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cache.key import hint_of, kid_of, leaf_hint
from lazygraph import lean_native, txn, writes
from lazygraph.array import (
    _FALLIBLE,
    _SCALAR_DTYPES,
    Array,
    Scalar,
    Storage,
    _fallible,
    record,
)
from lazygraph.device import place
from lazygraph.gradmode import GRAD_STATE
from ops.base import REGISTRY, _weak_sig, drops_imaginary
from ops.creation import BUFFER, SCALAR
from ops.node import HOST, Node
from ops.views import View, contiguous

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


#: NumPy's numeric scalar types: an operand of one is a strong-typed 0-d value (NEP 50), recorded
#: as `as_node` records it (a private read-only 0-d buffer joining the other operand's device)
#: and memoized like a 0-d array of its dtype, whose promotion it shares
_NUMPY_SCALARS = frozenset(np.dtype(c).type for c in "?bhilqpBHILQPefdFD")


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


def _numpy_scalar_leaf(value: Any) -> Node:
    """`as_node(value)` for a NumPy scalar: a private read-only 0-d copy (a buffer leaf, the
    scalar leaf's fields otherwise) that joins the device of the array it meets."""
    arr = np.array(value)
    arr.setflags(write=False)
    node = _scalar_leaf(arr.dtype, arr)
    node.op = BUFFER
    node.device = None
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
    if op in _SIG_RECORDED:
        cache = _SIG_RECORDED[op]
    elif cache is None or opdef.arity != 2:

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
    numpy_scalars, numpy_leaf = _NUMPY_SCALARS, _numpy_scalar_leaf

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
            elif ty in numpy_scalars:
                ny = numpy_leaf(y)
                key = (nx.dtype, nx.shape, ny.dtype, ())
            else:
                sig = _weak(y)
                if sig is None:
                    return f(x, y) if _adopt(ty) else record(op, x, y)
                key = (nx.dtype, nx.shape, sig, None)
                ny = leaf(_SCALAR_DTYPES[ty], y)
        elif ty in plain:
            ny = y._storage.node if y._view is None else y.node
            if tx in numpy_scalars:
                nx = numpy_leaf(x)
                key = (nx.dtype, (), ny.dtype, ny.shape)
            else:
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
    f = _BINARY[op] = _native(2, opdef, cache, f)
    return f


def reflected_recorder(op: str) -> Callable[[Any, Any], Array]:
    """The reflected dunder of a binary operator (`x.__radd__(y)` records `y + x`)."""
    f = _REFLECTED.get(op)
    if f is not None:
        return f
    forward = binary_recorder(op)

    def method(self: Array, other: Any) -> Array:
        return forward(other, self)

    method.__name__ = method.__qualname__ = f"r{op}"
    memo = getattr(forward, "memo", None)  # the forward C recorder's (none: it is not built)
    f = _REFLECTED[op] = method if memo is None else _native(2, REGISTRY[op], memo, method, swap=True)
    return f


#: binary operators, not elementwise, whose recording (shape, dtype, attributes: none) depends
#: on the operands' dtypes and shapes alone, with their memos: `a @ b` takes the lean path as
#: `a + b` does (ops/linalg.py MatMul.infer costs about 5 µs: np.broadcast_shapes of the batch
#: dimensions, dtype_by_example); Python scalar operands fail in `record` and are never memoized
_SIG_RECORDED: dict[str, dict] = {"matmul": {}}


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
    f = _UNARY[op] = _native(1, opdef, cache, f)
    return f


def _native(arity: int, opdef: Any, memo: dict, python: Callable, swap: bool = False) -> Callable:
    """`python`'s hit path in C (lazygraph/lean_native.py), or `python` where that is not built."""
    if not _DIRECT:  # the C recorder sets Node's fields by their slots, as `_made` does
        return python
    return lean_native.wrap(arity, opdef, memo, python, swap, _shared)


def _shared() -> tuple:
    """What every C recorder reads (lean_record.c `setup`): the classes and the hit path's names."""
    return (
        Node,
        Storage,
        Array,
        _PLAIN,
        SCALAR,
        GRAD_STATE,
        hint_of,
        txn.note_origin,
        _F64,
        _I64,
        _SMALL_INT,
        HOST,
    )


#: operator name -> its lean recorder (built on first use)
_BINARY: dict[str, Callable[[Any, Any], Array]] = {}
_UNARY: dict[str, Callable[[Any], Array]] = {}
_REFLECTED: dict[str, Callable[[Any, Any], Array]] = {}


def record_binary(op: str, x: Any, y: Any) -> Array:
    """`record(op, x, y)` for a binary elementwise operator, memoized per operand signature."""
    f = _BINARY.get(op)
    return (binary_recorder(op) if f is None else f)(x, y)


def record_unary(op: str, x: Any) -> Array:
    """`record(op, x)` for a unary elementwise operator, memoized per operand signature."""
    f = _UNARY.get(op)
    return (unary_recorder(op) if f is None else f)(x)


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
    if t in _NUMPY_SCALARS:
        return (opdef, node.dtype, node.shape, np.dtype(t), ())
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
        if vnode.device is not base.device or drops_imaginary(vnode.dtype, base.dtype):
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
