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

from collections.abc import Sequence
from typing import Any

from cache import template
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
from cache.nodekey import (  # noqa: F401  (re-exported)
    _SCALAR_IDS,
    TOKENS,
    hint_of,
    intern,
    kid_of,
    leaf_hint,
    leaf_parts,
)
from ops.node import Node

Key = tuple


class Walk:
    """One evaluation's graph: nodes by slot (inputs first), the operations' slots, the key."""

    __slots__ = ("nodes", "interior", "roots", "key", "cacheable", "_parsed", "_tokens", "_refs", "template")

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.interior: list[int] = []
        self.roots: tuple[int, ...] = ()
        self.key: Key = ()
        self.cacheable = True  # False when an attribute cannot be written into a key
        self._parsed: tuple[list[int], list[Any]] | None = None
        self._tokens: tuple | None = None
        self._refs: list[int] | None = None
        self.template: Any = None  # the template it matched (cache/template.py), if any

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
    def refs(self) -> list[int]:
        """Per slot, how many times the graph's operations read it (structure: a template keeps it)."""
        if self._refs is None:
            self._refs = in_graph_refs(len(self.nodes), self.edges, self.interior)
        return self._refs

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

    This is the hot path of every evaluation. A graph whose structure was seen before is
    found by its roots' hints (computed while recording) and verified against that
    numbering (cache/template.py), with no key to build or hash; otherwise `full_walk`
    numbers it and its numbering becomes a template for the next time.
    """
    h, t, nodes = template.find(roots)
    if nodes is not None:
        w = Walk.__new__(Walk)
        w.nodes = nodes
        w.interior = t.interior
        w.roots = t.roots
        w.key = t.key
        w.cacheable = True
        w._parsed = (t.ids, t.edges)
        w._tokens = None
        w._refs = t.refs
        w.template = t
        return w
    # no template under the recorded hint: a new structure, or hints gone stale (an input
    # evaluated after its consumer was recorded). The full walk recomputes every hint as it
    # numbers the nodes (one pass, where recomputing the hints first and looking again was a
    # pass more on every new structure), and its template is filed under both hints.
    w = full_walk(roots)
    if w.cacheable and w.interior:
        fresh = template.roots_hint(roots)
        if fresh is not None:
            template.remember(h, fresh, w.key, w.roots, *w._parse(), w.interior)
    return w


def full_walk(roots: Sequence[Node]) -> Walk:
    """The full walk: one iterative depth-first pass numbering nodes and building the flat key.

    The flat key holds, per slot: the local id; for a buffer its alias slot; for an
    operation its number of inputs and their slots. Then -1 and the root slots. Every
    operation's hint is recomputed here from its inputs' (inputs first); a leaf without one
    gets its own.
    """
    w = Walk()
    nodes, interior = w.nodes, w.interior
    ids: list[int] = []
    edges: list[Any] = []
    flat: list[int] = []
    slot: dict[Node, int] = {}  # -1 while a node is on the stack
    memory: dict[int, int] = {}
    scalar_ids = _SCALAR_IDS
    getslot = slot.__getitem__
    append, extend = flat.append, flat.extend
    root_slots = []

    def leaf(node: Node, buf: Any) -> None:
        s = len(nodes)
        slot[node] = s
        nodes.append(node)
        i = scalar_ids.get(type(buf))
        if i is not None:
            append(i)
            ids.append(i)
            edges.append(None)
            if node.h is None:
                node.h = i
            return
        c = node.kid
        if type(c) is tuple and c[0] == node.static:
            i, owner = c[1], c[2]
        else:
            i, owner = leaf_parts(node, buf)[1:]
        a = memory.setdefault(owner, s)
        append(i)
        append(a)
        ids.append(i)
        edges.append(a)
        if node.h is None:
            node.h = i

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
                        leaf(child, buf)
                else:
                    stack.pop()
                    s = len(nodes)
                    i = node.kid
                    if i is None:
                        i = kid_of(node)
                    inputs = node.inputs
                    # recomputed even when set: a hint recorded before an input was evaluated
                    # is stale (the inputs' hints are this walk's: inputs come first)
                    node.h = hash((i, *[c.h for c in inputs]))
                    if i < 0:  # evaluated without the cache; the token only names it
                        i = intern((node.op.name, dtype_str(node.dtype), shape_class(node.shape), ("?",)))
                        w.cacheable = False
                    e = tuple(map(getslot, inputs))
                    append(i)
                    append(len(inputs))
                    extend(e)
                    ids.append(i)
                    edges.append(e)
                    slot[node] = s
                    nodes.append(node)
                    interior.append(s)
            s = slot[root]
        root_slots.append(s)
    w.roots = tuple(root_slots)
    append(-1)
    extend(root_slots)
    w.key = tuple(flat)
    w._parsed = (ids, edges)
    return w


def in_graph_refs(n: int, edges: list[Any], interior: list[int]) -> list[int]:
    """Per slot, the number of its occurrences among the operations' inputs."""
    refs = [0] * n
    for s in interior:
        for j in edges[s]:
            refs[j] += 1
    return refs


def key_hash(key: Key) -> int:
    """Hash used to find a key's bucket; buckets compare keys whole (tests force collisions).

    A template's key is hashed once (tuples do not keep their hash): its id finds it.
    """
    known = template.KEY_HASHES.get(id(key))
    if known is not None and known[0] is key:
        return known[1]
    return hash(key)


def is_leaf_token(token: tuple) -> bool:
    """True for the token of a held buffer or a Python scalar."""
    return token[0] == LEAF_BUFFER or token[0] == LEAF_SCALAR
