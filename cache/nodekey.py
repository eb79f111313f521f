"""Per-node parts of structural keys: interned local tokens, and hints computed as recorded.

A node's local token is everything in its key token but the slots (cache/key.py): for an
operation (op name, dtype, shape class, key form of the attributes), for a held buffer
("<B>", dtype, shape/stride class, device, static), for a Python scalar ("<S>", type). Each
is interned once per process as a small integer (ids are never reused), memoized per
concrete (operator, dtype, shape, attributes), and memoized on the node itself (`kid`).

A node's hint (`h`) hashes its local id with its inputs' hints: a Merkle hash of the
structure behind it, computed once, mostly while recording (lazygraph/array.py). It only
proposes a template (cache/template.py); it never decides a key.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from cache.keyform import LEAF_BUFFER, LEAF_SCALAR, Uncacheable, attrs_key, dtype_str, shape_class
from ops.node import Node

#: interned local tokens: token -> id and id -> token (append-only: ids are never reused)
_ids: dict[tuple, int] = {}
TOKENS: list[tuple] = []
_intern_lock = threading.Lock()
#: (op, dtype, shape[, attribute items and types]) -> id; caches, cleared when large
_memo: dict[tuple, int] = {}
_leaf_memo: dict[tuple, int] = {}
_INEXACT = (float, complex)


def intern(token: tuple) -> int:
    """The id of a local token (the same token always gets the same id)."""
    i = _ids.get(token)
    if i is None:
        with _intern_lock:
            i = _ids.get(token)
            if i is None:
                i = _ids[token] = len(TOKENS)
                TOKENS.append(token)
    return i


_SCALAR_IDS = {t: intern((LEAF_SCALAR, t.__name__)) for t in (bool, int, float, complex)}


def _exact_sig(values: Any) -> tuple | None:
    """Types of the attribute values (one level into tuples); None when a float is involved.

    The memo compares attribute values with ==, which equates 1, 1.0 and True, and 0.0 and
    -0.0; with their types alongside (and floats never memoized) equal memo keys give
    equal key forms. Deeper levels hold normalized ints and strings (views, index
    templates, pad widths, pairs).
    """
    types = tuple(map(type, values))
    if float in types or complex in types:
        return None
    if tuple not in types:
        return types
    sig = []
    for v, t in zip(values, types):
        if t is tuple:
            t = tuple(map(type, v))
            if float in t or complex in t:
                return None
        sig.append(t)
    return tuple(sig)


def _interior_id(node: Node) -> int:
    """Interned id of an operation's local token (memoized on its concrete form)."""
    op, attrs = node.op, node.attrs
    mk: tuple | None
    if attrs:
        sig = _exact_sig(attrs.values())
        mk = None if sig is None else (op, node.dtype, node.shape, tuple(attrs.items()), sig)
    else:
        mk = (op, node.dtype, node.shape)
    if mk is not None:
        try:
            i = _memo.get(mk)
        except TypeError:  # an unhashable attribute value
            mk, i = None, None
        if i is not None:
            return i
    akey = attrs_key(op, attrs) if attrs else ()
    i = intern((op.name, dtype_str(node.dtype), shape_class(node.shape), akey))
    if mk is not None:
        if len(_memo) > 100_000:
            _memo.clear()
        _memo[mk] = i
    return i


def _leaf_id(node: Node, buf: Any) -> int:
    """Interned id of a held buffer's local token: dtype, unit and stride-0 axes, device, static.

    Static (model state: parameters, module buffers) is structure: which leaves the fold pass
    may memoize on, so it decides the optimized graph and belongs in the key.
    """
    static = node.static
    if type(buf) is np.ndarray:
        mk = (node.dtype, buf.shape, buf.strides, static)
        i = _leaf_memo.get(mk)
        if i is None:
            if len(_leaf_memo) > 100_000:
                _leaf_memo.clear()
            cls = shape_class(buf.shape)
            if 2 in cls and 0 in buf.strides:  # 3: a broadcast axis, one element read many times
                cls = tuple(3 if c == 2 and s == 0 else c for c, s in zip(cls, buf.strides))
            i = _leaf_memo[mk] = intern((LEAF_BUFFER, dtype_str(node.dtype), cls, "cpu", static))
        return i
    device = type(buf).__module__ + "." + type(buf).__name__  # a device array: its type is structure
    return intern((LEAF_BUFFER, dtype_str(node.dtype), shape_class(node.shape), device, static))


def _memory_root(buf: Any) -> Any:
    """The object owning a buffer's memory (NumPy views chain through `.base`)."""
    while True:
        base = getattr(buf, "base", None)
        if base is None:
            return buf
        buf = base


def kid_of(node: Node) -> int:
    """An operation's interned local id, memoized on the node (-1: its attributes cannot be keyed)."""
    i = node.kid
    if i is None:
        try:
            i = _interior_id(node)
        except Uncacheable:
            i = -1
        node.kid = i
    return i


def leaf_hint(node: Node, buf: Any) -> int:
    """A held value's hint: its local id (Python scalars by type; buffers by dtype and layout class).

    A buffer's parts are memoized on the node (`leaf_parts`) as they are hinted, that is when
    the first operation on it is recorded, so the evaluation's match finds them ready.
    """
    i = _SCALAR_IDS.get(type(buf))
    if i is not None:
        return i
    return leaf_parts(node, buf)[1]


def hint_of(node: Node) -> int:
    """The hint hash of the structure behind `node`, memoized on it (recursing into unhinted inputs).

    Recording sets it (lazygraph/array.py) from the operation's local id and its inputs' hints,
    so an evaluation finds its key's template without walking; `realize` forgets it (the node
    becomes a leaf). A hint may be stale or collide: it only proposes a template, which
    cache/template.py verifies.
    """
    h = node.h
    if h is None:
        buf = node.buffer
        if buf is not None:
            h = leaf_hint(node, buf)
        else:
            k = node.kid
            if k is None:
                k = kid_of(node)
            h = hash((k, *[c.h if c.h is not None else hint_of(c) for c in node.inputs]))
        node.h = h
    return h


def leaf_parts(node: Node, buf: Any) -> tuple[bool, int, int]:
    """(static, local id, id of the memory's owner) of a held buffer, memoized in `node.kid`.

    A node's buffer never changes once held (`realize` sets it once), and the owner lives as
    long as the buffer; the static mark can change, so it is part of the memo and compared.
    An operation's `kid` is an int: a tuple is never taken for one.
    """
    static = node.static
    if type(buf) is np.ndarray:
        i = _leaf_memo.get((node.dtype, buf.shape, buf.strides, static))
        base = buf.base
        root = buf if base is None else _memory_root(base)
    else:
        i, root = None, _memory_root(buf)
    c = (static, _leaf_id(node, buf) if i is None else i, id(root))
    node.kid = c
    return c
