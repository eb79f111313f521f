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
from itertools import chain
from sys import getrefcount
from typing import Any

import numpy as np

from ops.node import Node
from ops.views import View, materialize, write_into

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


# -- writes into an evaluated array's buffer (no whole-buffer copy) ---------------------------
#
# `u[1:-1, 1:-1] = f(u)` on an evaluated `u` would copy u's whole buffer, because the old node
# keeps its value for anyone who still reads it and for rollback. When nobody can read it any
# more (checked by `may_overwrite`), the engine writes into the buffer itself and first saves
# only the region it overwrites; a run that fails puts the regions back (`undo`), so rollback
# stays exact. (A write over most of the buffer copies only what lies outside its box into a
# fresh buffer instead: Assign.kernel, Program._leaf_write.)

#: buffers smaller than this are copied as before: the copy costs less than the checks
LEAF_WRITE_MIN = 1 << 16


def may_overwrite(nodes: list[Node], p: int, q: int, vals: list, step: int, last: dict[int, int]) -> bool:
    """Whether step `step` may write into leaf `nodes[p]`'s buffer (`vals[q]`) instead of a copy.

    Yes when nothing outside this run can read the old value again: the node is no array's
    value (`users`), nothing but this graph's consumers and the write histories of arrays this
    run computes refers to it, and every view of the buffer among the run's values is a leaf
    view (`u[2:, 1:-1]` of the stencil) that no later step reads and that is held as the node
    alone. `last` is each leaf slot's last reading step (-1: none).
    """
    buf = vals[q]
    node = nodes[p]
    if (
        type(buf) is not np.ndarray
        or node.buffer is not buf
        or buf.base is not None
        or buf.nbytes < LEAF_WRITE_MIN
        or not buf.flags.c_contiguous
        or node.users
        or node.requires_grad
        or node.static
    ):
        return False
    del node
    views = _leaf_views(nodes, q, vals, step, last)
    # the buffer is held by the node, its slot, one per view, `buf` and getrefcount's argument
    if views is None or getrefcount(buf) != 4 + len(views):
        return False
    hist = history_refs()
    if hist.get(id(nodes[p])) and not _histories_committed(nodes, p):
        return False
    consumers = Counter(map(id, chain.from_iterable([n.inputs for n in nodes])))
    return not _held_outside(nodes, [p, *views], consumers, hist)


def _leaf_views(nodes: list[Node], q: int, vals: list, step: int, last: dict[int, int]) -> list[int] | None:
    """The P slots of the leaf views of `vals[q]` this run holds (None: one is read later or held)."""
    buf = vals[q]
    slots = []
    for k in range(len(vals)):
        x = vals[k]
        if k != q and type(x) is np.ndarray and x.base is buf:
            if last.get(k, step + 1) > step:
                return None  # a step output, or a leaf read later: it must keep the old values
            if getrefcount(x) > 4:  # its slot, its node, `x` and the argument: no user holds it
                return None
            slots.append(id(x))
    if not slots:
        return []
    found = {}
    for lp in range(len(nodes)):
        b = nodes[lp].buffer
        if type(b) is np.ndarray and b.base is buf:
            found[id(b)] = lp
    views = []
    for k in slots:
        lp = found.get(k)
        if lp is None or nodes[lp].users:
            return None
        views.append(lp)
    return views


def _histories_committed(nodes: list[Node], p: int) -> bool:
    """Whether every array whose write history holds `nodes[p]` gets its value from this run.

    Such an array's history is forgotten when the run succeeds (`commit`), so none can go
    back to the overwritten value; a `.grad` history never does.
    """
    node = nodes[p]
    interior = None
    for s in _storages():
        h = s.hist
        if h is not None and node in h:  # identity: nodes define no equality
            if interior is None:
                interior = {id(n) for n in nodes if n.buffer is None}
            if id(s.node) not in interior:
                return False
        g = s.ghist
        if g is not None and node in g:
            return False
    return True


def _held_outside(nodes: list[Node], ps: list[int], consumers: Counter, hist: Counter) -> bool:
    """Whether something beyond the graph's consumers and the histories refers to these nodes."""
    probe = [object()]  # the same access pattern on an object only a list holds: the baseline
    for obj in probe:
        baseline = getrefcount(obj)
    for p in ps:
        n = nodes[p]  # `nodes`, `n` and the argument, as the probe's list, `obj` and the argument
        if getrefcount(n) > baseline + consumers.get(id(n), 0) + hist.get(id(n), 0):
            return True
    return False


def overwrite(node: Node, buf: np.ndarray, view: View, log: list) -> None:
    """Before a step writes `view` of the leaf's buffer: save the region (for `undo`), allow writes.

    The node gives up the buffer for the rest of the run, so the buffer is held once and
    the run's next write into it goes in place too; `undo` gives it back.
    """
    log.append((node, buf, view, materialize(buf, view).copy(), buf.flags.writeable))
    LOGGED[id(buf)] = LOGGED.get(id(buf), 0) + 1
    buf.setflags(write=True)
    node.buffer = None


#: id of a buffer -> how many references to it undo logs hold (the engine's in-place checks
#: count a buffer's holders: these do not stop a write)
LOGGED: dict[int, int] = {}


def _unlog(buf: np.ndarray) -> None:
    k = id(buf)
    n = LOGGED.pop(k, 1) - 1
    if n:
        LOGGED[k] = n


def forget(log: list) -> None:
    """The run succeeded: its writes into leaf buffers stay, their saved regions go."""
    while log:
        _unlog(log.pop()[1])


def undo(log: list) -> None:
    """A run failed after writing into leaf buffers: put back every saved region, newest first."""
    while log:
        node, buf, view, saved, writeable = log.pop()
        _unlog(buf)
        buf.setflags(write=True)
        write_into(buf, view, saved)
        node.buffer = buf
        buf.setflags(write=writeable)
