"""Threads: each records into its own context, and evaluations sharing pending nodes take turns.

`Recording` is per thread: the storages whose pending value the thread's next evaluation
point computes too (the loss that backward() was called on, running statistics), so they
join the same graph. `Claims` is per engine and shared: the pending nodes some thread's
evaluation is computing. Two threads may share an unevaluated array; evaluating it at once
from both would have one thread read a node the other is turning into a leaf, so the second
waits for the first.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from cache.key import Walk

_DEREF = weakref.ref.__call__  # a weak reference's object (None once dead), as a C function


class OrderedWeakSet:
    """A set of weakly held objects that iterates in insertion order (a WeakSet's order
    varies from run to run, and the order of an evaluation's roots is part of its key)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}

    def add(self, obj: Any) -> None:
        """Insert obj (kept in place if present; a dead object's reused id is replaced)."""
        ref = self._refs.get(id(obj))
        if ref is None or ref() is not obj:
            self._refs.pop(id(obj), None)
            self._refs[id(obj)] = weakref.ref(obj)

    def clear(self) -> None:
        """Forget everything."""
        self._refs.clear()

    def __iter__(self) -> Any:
        live = list(map(_DEREF, self._refs.values()))  # no Python frames: every evaluation reads it
        return iter([o for o in live if o is not None] if None in live else live)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        # Every evaluation asks; dead references are dropped when the set is read.
        return bool(self._refs)


class Recording(threading.local):
    """This thread's recording context (each thread records and evaluates its own graphs)."""

    def __init__(self) -> None:
        #: storages whose pending value this thread's next evaluation point computes too
        self.deferred = OrderedWeakSet()


#: every thread's own recording context (a threading.local: one object per thread)
RECORDING = Recording()


def defer(storage: Any) -> None:
    """Compute `storage.node` at this thread's next evaluation point, whatever it evaluates."""
    RECORDING.deferred.add(storage)


def deferred() -> list[Any]:
    """The storages this thread's next evaluation point will compute too (for checks and tests)."""
    return list(RECORDING.deferred)


class Claims:
    """Pending nodes some thread's evaluation is computing: id(node) -> that thread's ident."""

    def __init__(self) -> None:
        self._claims: dict[int, int] = {}
        self._changed = threading.Condition(threading.Lock())

    def claim(self, w: Walk) -> list[int] | None:
        """Claim the walk's pending nodes for this thread; None (after waiting) when it must walk again.

        Only called while other threads exist (one thread cannot race itself). A walk is stale
        when another thread realized one of its pending nodes meanwhile (realize sets the buffer
        first), or when another evaluation is computing one of them: then wait until it ends.
        """
        me = threading.get_ident()
        nodes = w.nodes
        ids = []
        for s in w.interior:
            node = nodes[s]
            if node.buffer is not None:
                return None
            ids.append(id(node))
        claims = self._claims
        with self._changed:
            if any(claims.get(i, me) != me for i in ids):
                self._changed.wait(0.05)  # woken when an evaluation releases its claims
                return None
            mine = [i for i in ids if i not in claims]  # (a nested evaluation keeps the outer claims)
            for i in mine:
                claims[i] = me
        if any(nodes[s].buffer is not None for s in w.interior):  # realized just before the claim
            self.release(mine)
            return None
        return mine

    def release(self, ids: list[int]) -> None:
        """Give up claims once the evaluation has memoized its values (or failed)."""
        with self._changed:
            for i in ids:
                self._claims.pop(i, None)
            self._changed.notify_all()
