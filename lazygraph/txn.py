"""Failed evaluations change nothing: write histories, rollback, and where fallible ops were recorded.

Every write points a storage at a new node (lazygraph/array.py). Until an evaluation computes
it, that write is pending; a storage remembers the nodes it held since its last evaluated
value (`Storage.hist`: the evaluated value first, then each pending value in order), and
`backward()` remembers the `.grad` values it replaced (`Storage.ghist`). Only storages with
such a history are registered here, so an evaluation's cost grows with its pending writes,
not with the number of arrays.

When an evaluation fails, the engine calls `rollback` with the failed graph and, when the
failing operator is known, its P slots. Every registered storage whose value depends on the
failing operator (on any part of the failed graph, when it is not known: an interrupt, a
planning error) goes back to the newest value in its history that does not, so the writes
that caused the failure are dropped and everything else is kept. A successful evaluation
calls `commit`, which forgets the histories of what it computed.

Operators whose kernels can fail on data (lazy integer indices, class labels, integer powers)
remember the user's line that recorded them (`note_origin`), so the error can name it.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
import weakref
from collections import Counter
from typing import Any

from ops.node import Node

#: most pending values a storage remembers (the evaluated one is always kept): a loop that
#: overwrites an array many times without evaluating it must not hold every old graph
HISTORY_LIMIT = 64


class _Local(threading.local):
    """Per thread (each records into its own context): id(storage) -> weak reference, for
    every storage this thread gave a write or grad history."""

    def __init__(self) -> None:
        self.pending: dict[int, weakref.ref] = {}


_local = _Local()

#: fallible node -> (file, line) of the user's code that recorded it
ORIGINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL = tuple(os.path.join(_ROOT, p) + os.sep for p in ("lazygraph", "ops", "cache", "optimizer", "jit"))


def register(storage: Any) -> None:
    """Remember that `storage` has a history (called when it starts one)."""
    _local.pending[id(storage)] = weakref.ref(storage)


def pending() -> dict[int, weakref.ref]:
    """This thread's registered storages (for checks and tests)."""
    return _local.pending


def _storages() -> list[Any]:
    """This thread's live registered storages (dead entries are dropped)."""
    table = _local.pending
    out = []
    for key, ref in list(table.items()):
        s = ref()
        if s is None:
            table.pop(key, None)
        else:
            out.append(s)
    return out


def history_refs() -> Counter:
    """How many references histories hold to each node (by id): they are not users' references.

    The engine keeps a node's value when something outside the graph refers to it; the
    histories must not count, or every intermediate of an in-place chain would be kept.
    """
    counts: Counter = Counter()
    for s in _storages():
        if s.hist is not None:
            counts.update(map(id, s.hist))
        if s.ghist is not None:
            counts.update(id(n) for n in s.ghist if n is not None)
    return counts


def commit() -> None:
    """After a successful evaluation: forget the histories of values that are now evaluated."""
    for s in _storages():
        if s.hist is not None and s.node.buffer is not None:
            s.hist = None
        if s.ghist is not None:
            g = s.grad
            if g is None or g.node.buffer is not None:
                s.ghist = None
        if s.hist is None and s.ghist is None:
            _local.pending.pop(id(s), None)


class _Taint:
    """Whether a node depends on the failure: `bad` holds the failed graph's tainted nodes;
    a node outside that graph (an overwritten value nobody reads) is followed to its inputs."""

    def __init__(self, bad: set[int], walked: set[int]) -> None:
        self.bad = bad
        self.walked = walked
        self.memo: dict[int, bool] = {}

    def __call__(self, node: Node) -> bool:
        bad, walked, memo = self.bad, self.walked, self.memo
        stack = [node]
        while stack:
            n = stack[-1]
            k = id(n)
            if k in memo:
                stack.pop()
                continue
            if k in bad:
                memo[k] = True
            elif k in walked or n.buffer is not None:
                memo[k] = False
            else:
                todo = [c for c in n.inputs if id(c) not in memo]
                if todo:
                    stack.extend(todo)
                    continue
                memo[k] = any(memo[id(c)] for c in n.inputs)
            stack.pop()
        return memo[id(node)]


def tainted_set(nodes: list[Node], interior: list[int], failed: list[int] | None) -> set[int]:
    """Ids of the failed graph's nodes that depend on the failed slots (all of them when unknown)."""
    if failed is None:
        return {id(nodes[s]) for s in interior}
    bad = {id(nodes[s]) for s in failed}
    for s in interior:  # inputs before consumers
        n = nodes[s]
        if id(n) not in bad:
            for c in n.inputs:
                if id(c) in bad:
                    bad.add(id(n))
                    break
    return bad


def _revert(s: Any, i: int) -> None:
    """Point storage `s` back at its history entry i, forgetting the entries after it."""
    h = s.hist
    target = h[i]
    target.users += 1
    s.node.users -= 1
    s.node = target
    s.hist = h[:i] or None


def rollback(nodes: list[Node], interior: list[int], failed: list[int] | None) -> Any:
    """Drop every pending write (and `.grad` accumulation) that depends on the failure.

    Returns the taint test, so the caller can tell which other pending values still hold.
    """
    taint = _Taint(tainted_set(nodes, interior, failed), {id(nodes[s]) for s in interior})
    for s in _storages():
        if taint(s.node):
            h = s.hist or ()
            for i in range(len(h) - 1, -1, -1):
                if not taint(h[i]):
                    _revert(s, i)
                    break
        g = s.grad
        if g is not None and s.ghist is not None and taint(g.node):
            gh = s.ghist
            for i in range(len(gh) - 1, -1, -1):
                prev = gh[i]
                if prev is None or not taint(prev):
                    s.restore_grad(prev)
                    s.ghist = gh[:i] or None
                    break
    return taint


def restore(storage: Any, node: Node) -> None:
    """Point `storage` back at `node` if it held it since its last evaluated value (an undo)."""
    if storage.node is node:
        return
    h = storage.hist or ()
    for i in range(len(h) - 1, -1, -1):
        if h[i] is node:
            _revert(storage, i)
            return


# -- where fallible operators were recorded ----------------------------------------------------


def note_origin(node: Node) -> None:
    """Remember the user's line recording `node` (the first frame outside lazygraph's packages)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_INTERNAL):
        f = f.f_back
    if f is not None:
        ORIGINS[node] = (f.f_code.co_filename, f.f_lineno)


def warn_user(message: str, category: type[Warning]) -> None:
    """Warn at the user's line (the first frame outside lazygraph's packages), as NumPy would."""
    level, f = 2, sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_INTERNAL):
        f = f.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def origin(node: Node) -> str | None:
    """`file:line` where `node` was recorded, if it is a fallible operator."""
    where = ORIGINS.get(node)
    return None if where is None else f"{where[0]}:{where[1]}"


def origin_of(nodes: list[Node], slots: list[int]) -> str | None:
    """The recording line of the first failed slot that has one."""
    for s in slots:
        where = origin(nodes[s])
        if where is not None:
            return where
    return None
