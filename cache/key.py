"""Structural keys: what a graph computes, without its data or its exact sizes.

One iterative depth-first walk from the requested roots numbers every node reachable
through unevaluated nodes (inputs before consumers; that order is the schedule too). Each
node has a token:

- interior node: (op name, dtype, shape class, key form of the attributes, input slots)
- held buffer:   ("<B>", dtype, shape/stride class, device, static, first leaf sharing its memory)
- Python scalar: ("<S>", Python type)

The shape class keeps the rank and which extents are 0 or 1 (and, for buffers, which
strides are 0), never the other sizes; attributes an operator declares size-like
(`Op.size_attrs`) keep only their form (see keyform.py). The structural key is the tuple
of tokens plus the root slots; its JSON is what the disk store compares.

For speed, the part of a token that does not depend on the numbering (everything but the
slots) is interned once per process as a small integer, remembered per concrete (operator,
dtype, shape, attributes), so the key an evaluation looks up is a flat tuple of integers:
per node its interned id, then its inputs' slots (or its alias). Ids are never reused, so
equal flat keys mean equal structural keys; lookups compare keys whole, never a hash alone.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from cache.keyform import (  # noqa: F401  (re-exported: the key vocabulary)
    LEAF_BUFFER,
    LEAF_SCALAR,
    Uncacheable,
    abstract,
    attrs_key,
    canon,
    dtype_str,
    shape_class,
)
from ops.node import Node

Key = tuple

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


class Walk:
    """One evaluation's graph: nodes by slot (inputs first), the operations' slots, the key."""

    __slots__ = ("nodes", "interior", "roots", "key", "cacheable", "_parsed", "_tokens")

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.interior: list[int] = []
        self.roots: tuple[int, ...] = ()
        self.key: Key = ()
        self.cacheable = True  # False when an attribute cannot be written into a key
        self._parsed: tuple[list[int], list[Any]] | None = None
        self._tokens: tuple | None = None

    def _parse(self) -> tuple[list[int], list[Any]]:
        """Per slot, from the flat key: the local id, and the input slots or alias (or None)."""
        if self._parsed is None:
            ids: list[int] = []
            edges: list[Any] = []
            key, pos = self.key, 0
            for _ in range(len(self.nodes)):
                i = key[pos]
                kind = TOKENS[i][0]
                ids.append(i)
                if kind == LEAF_SCALAR:
                    edges.append(None)
                    pos += 1
                elif kind == LEAF_BUFFER:
                    edges.append(key[pos + 1])
                    pos += 2
                else:
                    k = key[pos + 1]
                    edges.append(tuple(key[pos + 2 : pos + 2 + k]))
                    pos += 2 + k
            self._parsed = (ids, edges)
        return self._parsed

    @property
    def ids(self) -> list[int]:
        """Interned local token per slot."""
        return self._parse()[0]

    @property
    def edges(self) -> list[Any]:
        """Per slot: input slots (tuple) of an operation, alias slot of a buffer, None."""
        return self._parse()[1]

    @property
    def tokens(self) -> tuple:
        """Full tokens per slot (for passes, listings and the disk's JSON key)."""
        if self._tokens is None:
            ids, edges = self._parse()
            out = []
            for i, e in zip(ids, edges):
                t = TOKENS[i]
                out.append(t if e is None else (*t, e))
            self._tokens = tuple(out)
        return self._tokens

    @property
    def structural_key(self) -> tuple:
        """(tokens, root slots): the process-independent form of `key`."""
        return (self.tokens, self.roots)


def walk(roots: Sequence[Node]) -> Walk:
    """Number the graph behind `roots` (inputs first) and build its structural key.

    This is the hot path of every evaluation, hence the inlined lookups. The flat key holds,
    per slot: the local id; for a buffer its alias slot; for an operation its number of
    inputs and their slots. Then -1 and the root slots.
    """
    w = Walk()
    nodes, interior = w.nodes, w.interior
    flat: list[int] = []
    slot: dict[Node, int] = {}  # -1 while a node is on the stack
    memory: dict[int, int] = {}
    scalar_ids, memo_get = _SCALAR_IDS, _memo.get
    getslot = slot.__getitem__
    append, extend = flat.append, flat.extend
    root_slots = []

    leaf_memo_get = _leaf_memo.get

    def leaf(node: Node, buf: Any) -> None:
        s = len(nodes)
        slot[node] = s
        nodes.append(node)
        i = scalar_ids.get(type(buf))
        if i is not None:
            append(i)
            return
        if type(buf) is np.ndarray:
            i = leaf_memo_get((node.dtype, buf.shape, buf.strides, node.static))
            base = buf.base
            root = buf if base is None else _memory_root(base)
        else:
            i, root = None, _memory_root(buf)
        append(_leaf_id(node, buf) if i is None else i)
        append(memory.setdefault(id(root), s))

    for root in roots:
        s = slot.get(root)
        if s is None:
            buf = root.buffer
            if buf is not None:
                leaf(root, buf)
                root_slots.append(slot[root])
                continue
            slot[root] = -1
            stack = [(root, iter(root.inputs))]
            while stack:
                node, it = stack[-1]
                for child in it:
                    if child not in slot:
                        buf = child.buffer
                        if buf is None:
                            slot[child] = -1
                            stack.append((child, iter(child.inputs)))
                            break
                        i = scalar_ids.get(type(buf))
                        if i is None:
                            leaf(child, buf)
                        else:  # a weak Python scalar, the most common leaf: inlined
                            slot[child] = len(nodes)
                            nodes.append(child)
                            append(i)
                else:
                    stack.pop()
                    s = len(nodes)
                    i = None if node.attrs else memo_get((node.op, node.dtype, node.shape))
                    if i is None:
                        try:
                            i = _interior_id(node)
                        except Uncacheable:  # evaluated without the cache; the token only names it
                            i = intern((node.op.name, dtype_str(node.dtype), shape_class(node.shape), ("?",)))
                            w.cacheable = False
                    inputs = node.inputs
                    append(i)
                    append(len(inputs))
                    extend(map(getslot, inputs))
                    slot[node] = s
                    nodes.append(node)
                    interior.append(s)
            s = slot[root]
        root_slots.append(s)
    w.roots = tuple(root_slots)
    append(-1)
    extend(root_slots)
    w.key = tuple(flat)
    return w


def key_hash(key: Key) -> int:
    """Hash used to find a key's bucket; buckets compare keys whole (tests force collisions)."""
    return hash(key)


def is_leaf_token(token: tuple) -> bool:
    """True for the token of a held buffer or a Python scalar."""
    return token[0] == LEAF_BUFFER or token[0] == LEAF_SCALAR
