"""Memoizing an evaluation's values, and undoing a failed one (lazygraph/txn.py).

`memoized` decides which P values an evaluation keeps: the requested roots and nodes a live
array or a later-recorded consumer still holds; their inputs are dropped (`realize`) so
evaluated history can be freed, and other values are freed after their last reader.
`Attempt` records how far one evaluation got, so that a failure leaves every array as it was.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import numpy as np

from cache.key import Walk
from lazygraph import txn
from lazygraph.engine.program import Program
from lazygraph.engine.threads import defer
from ops.creation import BUFFER
from ops.node import Node


def _baseline() -> int:
    """The reference count `memoized` reads for a node only its list holds (the same access
    pattern on an object only a list holds: the list, the loop variable, the call's argument)."""
    probe = [object()]
    for obj in probe:
        return sys.getrefcount(obj)
    raise AssertionError


_BASELINE = _baseline()


def memoized(w: Walk) -> set[int]:
    """P slots whose values are kept: roots, nodes a storage holds, nodes held from outside.

    Outside references are a later-recorded, unevaluated consumer (`loss` evaluated before
    the `w -= ...` recorded from the same `w`) or an array's cached view; without keeping
    them each later evaluation would recompute (and retain) that history. References from
    inside the graph are its consumers' inputs; they are counted only when some node has
    more references than a single consumer explains (chains never need the count).
    """
    nodes = w.nodes
    baseline = _BASELINE
    keep = {s for s in w.roots if nodes[s].buffer is None}
    getrefcount = sys.getrefcount
    candidates = []
    for s in w.interior:
        node = nodes[s]
        if node.users > 0:
            keep.add(s)
        elif getrefcount(node) > baseline + 1:
            candidates.append(s)
    if candidates:
        refs = w.refs  # the consumers' references: structure, counted once per template
        # nodes more referenced than their consumers explain; write histories are not users'
        # references, counted only when some node is left (they can only lower the count)
        held = []
        for s in candidates:
            node = nodes[s]  # (the access pattern the baseline was measured with)
            if getrefcount(node) > baseline + refs[s]:
                held.append(s)
        node = None
        if held:
            history = txn.history_refs()
            for s in held:
                node = nodes[s]
                if getrefcount(node) > baseline + refs[s] + history.get(id(node), 0):
                    keep.add(s)
    return keep


#: floating-point values whose recorded history an evaluation released (grad() with respect
#: to an untracked array refuses to differentiate through them: the path may be lost)
RELEASED: weakref.WeakSet = weakref.WeakSet()


def realize(node: Node, buffer: np.ndarray) -> None:
    """Turn a node into a leaf holding its value; its recorded meaning is unchanged.

    (`realize_kept` does the same inline.)
    """
    node.buffer = buffer
    node.h = None  # its hint is now a leaf's (cache/key.py hint_of)
    node.kid = -2  # and no operation's local id: templates place it only in leaf slots
    if node.requires_grad and not node.grad_leaf:
        return  # a later backward() still needs the operation and its inputs
    if node.inputs and node.dtype.kind == "f":
        RELEASED.add(node)
    node.op = BUFFER
    node.inputs = ()
    node.attrs = {}


def realize_kept(nodes: list[Node], keep: set[int], pmap: list[int], vals: list[Any]) -> None:
    """Memoize the kept values of a successful run (idempotent: an interrupt may repeat it)."""
    for p in keep:
        q = pmap[p]
        if q >= 0:
            buf = vals[q]
            if buf is not None:
                if type(buf) is np.ndarray or isinstance(buf, np.ndarray):  # device arrays have no flags
                    buf.setflags(write=False)  # cheaper than buf.flags.writeable = False
                node = nodes[p]  # realize(node, buf), inline: every evaluation comes here
                node.buffer = buf
                node.h = None
                node.kid = -2
                if node.requires_grad and not node.grad_leaf:
                    continue
                if node.inputs and node.dtype.kind == "f":
                    RELEASED.add(node)
                node.op = BUFFER
                node.inputs = ()
                node.attrs = {}


class Attempt:
    """What one evaluation has done so far, so that a failure can be undone (lazygraph/txn.py)."""

    __slots__ = ("deferred", "walk", "program", "done", "claimed")

    def __init__(self) -> None:
        self.claimed: list[int] | None = None  # pending nodes this thread claimed (threads.Claims)
        self.deferred: list[Any] = []  # the deferred storages this evaluation took over
        self.walk: Walk | None = None
        self.program: Program | None = None
        self.done: tuple | None = None  # (kept P slots, values by Q slot) once the run succeeded

    def fail(self, e: BaseException) -> None:
        """Leave every array as it was, minus the pending writes that depend on the failure."""
        w = self.walk
        if self.done is not None:  # the run succeeded (an interrupt came later): keep its results
            keep, vals = self.done
            realize_kept(w.nodes, keep, self.program.pmap, vals)
            txn.commit()
            return
        if w is None:  # nothing was walked: the deferred values are still to be computed
            for s in self.deferred:
                defer(s)
            return
        failed = failed_slots(e, w, self.program) if isinstance(e, Exception) else None
        if failed:
            where = txn.origin_of(w.nodes, failed)
            if where is not None and e.args and isinstance(e.args[0], str):
                e.args = (f"{e.args[0]} (recorded at {where})", *e.args[1:])
        taint = txn.rollback(w.nodes, w.interior, failed)
        for s in self.deferred:  # values that do not depend on the failure are still wanted
            if s.node.buffer is None and not taint(s.node):
                defer(s)


def failed_slots(e: Exception, w: Walk, program: Program | None) -> list[int] | None:
    """The P slots the failed step computes, or None when the failure is not a step's."""
    step = getattr(e, "failed_step", None)
    if step is None or program is None:
        return None
    src, outs = step
    if src >= 0:
        return [src]
    # a New step (a fused region, a rewrite): the P nodes its outputs hold, a region's members,
    # and those it computes without materializing them (no Q node of their own)
    pmap, nodes = program.pmap, w.nodes
    failed = [p for p, q in enumerate(pmap) if q in outs]
    i = program.pos.get(outs[0])
    recipe = program.steps[i].recipe if i is not None else None
    data = recipe.data if recipe is not None else None
    if isinstance(data, dict) and isinstance(data.get("members"), list):
        failed += [p for p in data["members"] if type(p) is int and 0 <= p < len(nodes)]
    if not failed:
        return None
    slot = {id(n): p for p, n in enumerate(nodes)}
    covered, stack = set(failed), list(failed)
    while stack:
        for c in nodes[stack.pop()].inputs:
            p = slot.get(id(c))
            if p is not None and p not in covered and pmap[p] < 0 and c.buffer is None:
                covered.add(p)
                stack.append(p)
    return sorted(covered)
