"""The reference executor: runs a recorded graph with the NumPy kernels from ops/.

It is the fallback path the optimizer and the JIT later sit in front of. Values of the
requested nodes, and of nodes a live array still holds, are memoized on the nodes
(`Node.buffer`), whose inputs are then dropped so evaluated history can be freed.
Other intermediates are released as soon as their last consumer has run.
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from lazygraph import debug
from ops.creation import BUFFER
from ops.node import Node


class EvaluationError(RuntimeError):
    """An operator failed on data only known at run time (e.g. an index out of range)."""


def schedule(roots: Sequence[Node]) -> list[Node]:
    """Unrealized nodes reachable from `roots`, inputs before consumers (iterative DFS)."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        if root.buffer is not None or id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(root.inputs))]
        while stack:
            node, it = stack[-1]
            for child in it:
                if child.buffer is None and id(child) not in seen:
                    seen.add(id(child))
                    stack.append((child, iter(child.inputs)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def _run_kernel(node: Node, args: list) -> np.ndarray:
    try:
        out = node.op.kernel(*args, **node.attrs)
    except Exception as e:  # data-dependent failures: name the op and the operands
        shapes = ", ".join(f"{tuple(n.shape)} {n.dtype}" for n in node.inputs)
        cls = type(e) if type(e) in (IndexError, ValueError, TypeError) else EvaluationError
        raise cls(f"{node.op.name} failed at evaluation: {e} (operands: {shapes})") from e
    out = np.asarray(out)
    if out.shape != node.shape or out.dtype != node.dtype:
        raise EvaluationError(
            f"internal error: {node.op.name} produced {out.shape} {out.dtype}, "
            f"recorded as {node.shape} {node.dtype}"
        )
    return out


def _consumers(order: list[Node]) -> dict[int, int]:
    """How often each node is an input within the graph."""
    counts: dict[int, int] = {}
    for node in order:
        for child in node.inputs:
            counts[id(child)] = counts.get(id(child), 0) + 1
    return counts


def _held_outside(order: list[Node], consumers: dict[int, int]) -> set[int]:
    """Nodes referenced from outside this graph: by a later-recorded, unevaluated consumer
    (`loss` evaluated before the `w -= ...` that was recorded from the same `w`), or by an
    array's cached view. Their values are memoized, or that history is recomputed by every
    later evaluation and never freed. References within the graph are its consumers' inputs.
    """
    probe = [object()]  # the same loop on an object only the list holds: this Python's baseline
    for obj in probe:
        baseline = sys.getrefcount(obj)
    held = set()
    for node in order:
        if sys.getrefcount(node) > baseline + consumers.get(id(node), 0):
            held.add(id(node))
    return held


#: storages whose pending value the next evaluation point computes too (the loss that
#: backward() was called on, running statistics), so it joins the same graph
_deferred: weakref.WeakSet = weakref.WeakSet()


def defer(storage: Any) -> None:
    """Compute `storage.node` at the next evaluation point, whatever it evaluates."""
    _deferred.add(storage)


def evaluate(roots: Sequence[Node]) -> None:
    """Compute and memoize every root (one graph, one schedule)."""
    t0 = time.perf_counter()
    if _deferred:
        extra = [s.node for s in list(_deferred) if s.node.buffer is None]
        _deferred.clear()
        roots = [*roots, *extra]
    order = schedule(roots)
    if not order:
        return
    remaining = _consumers(order)
    keep = {id(r) for r in roots} | _held_outside(order, remaining)
    values: dict[int, np.ndarray] = {}
    verbose = debug.level()
    if verbose >= 3:
        debug.log("graph:\n  " + "\n  ".join(debug.graph_lines(roots)), at=3)
    with np.errstate(all="ignore"):
        for node in order:
            args = [c.buffer if c.buffer is not None else values[id(c)] for c in node.inputs]
            if verbose >= 2:
                t = time.perf_counter()
                values[id(node)] = _run_kernel(node, args)
                debug.log(
                    f"  {node.op.name}{list(node.shape)} {node.dtype}: "
                    f"{(time.perf_counter() - t) * 1e6:.1f} us",
                    at=2,
                )
            else:
                values[id(node)] = _run_kernel(node, args)
            for child in node.inputs:
                cid = id(child)
                remaining[cid] -= 1
                if remaining[cid] == 0 and cid not in keep and child.users == 0:
                    values.pop(cid, None)
    kernels = len(order)
    for node in order:
        nid = id(node)
        if nid in keep or node.users > 0:
            buf = values[nid]
            buf.flags.writeable = False
            realize(node, buf)
    debug.log_evaluation(roots, kernels, time.perf_counter() - t0)


def realize(node: Node, buffer: np.ndarray) -> None:
    """Turn a node into a leaf holding its value; its recorded meaning is unchanged."""
    node.buffer = buffer
    if node.requires_grad and not node.grad_leaf:
        return  # a later backward() still needs the operation and its inputs
    node.op = BUFFER
    node.inputs = ()
    node.attrs = {}
