"""Reverse-mode differentiation on the lazy graph.

Gradients are recorded like any other computation: `lg.grad(y, xs)` walks the tracked part
of the graph behind `y` once, in reverse, and applies each operator's rule (`Op.vjp`, defined
with the operator in ops/). Nothing is computed until an evaluation point, so a training
step's forward pass, backward pass and parameter update form one graph.

Arrays that require grad (parameters) are leaves: their storage marks each value it holds as
a grad leaf, so `backward()` knows where to accumulate `.grad`.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from lazygraph.array import LEAF_OWNERS, VIEW, Array, accumulate_grad, from_node, record
from lazygraph.creation import ones, zeros
from lazygraph.engine import threads
from lazygraph.gradmode import is_grad_enabled, no_grad, set_grad_enabled
from lazygraph.shape import asarray
from ops.base import fmt_shape
from ops.node import Node
from ops.views import contiguous


class _Namespace:
    """What gradient rules record with: the lazygraph namespace plus raw `record`."""

    record = staticmethod(record)
    namespace: ModuleType | None = None  # the `lazygraph` package, handed over by its __init__

    def __getattr__(self, name: str) -> Any:
        return getattr(self.namespace, name)


F = _Namespace()


def _tracked_order(root: Node) -> list[Node]:
    """Tracked nodes behind `root`, inputs before consumers; stops at grad leaves."""
    order: list[Node] = []
    seen = {id(root)}
    stack = [(root, iter(_tracked_inputs(root)))]
    while stack:
        node, it = stack[-1]
        for child in it:
            if id(child) not in seen:
                seen.add(id(child))
                stack.append((child, iter(_tracked_inputs(child))))
                break
        else:
            stack.pop()
            order.append(node)
    return order


def _tracked_inputs(node: Node) -> tuple[Node, ...]:
    if not node.requires_grad or node.grad_leaf:
        return ()
    return tuple(c for c in node.inputs if c.requires_grad)


def _sum_to(g: Array, shape: tuple[int, ...]) -> Array:
    """Undo broadcasting: sum a cotangent back to an input's shape."""
    if g.shape == shape:
        return g
    if g.ndim < len(shape):
        g = g.reshape((1,) * (len(shape) - g.ndim) + g.shape)
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1
    )
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


def _backprop(root: Node, seed: Array, wanted: set[int]) -> dict[int, Array]:
    """Cotangents of every node on a path from a `wanted` node to `root`."""
    order = _tracked_order(root)
    # Only nodes from which a wanted node is reachable need a cotangent.
    useful: set[int] = set()
    for node in order:
        if id(node) in wanted or any(id(c) in useful for c in _tracked_inputs(node)):
            useful.add(id(node))
    cot: dict[int, Array] = {id(root): seed}
    for node in reversed(order):
        g = cot.get(id(node))
        if g is None or node.grad_leaf or not node.inputs or id(node) not in useful:
            continue
        rule = node.op.vjp
        if rule is None:
            raise TypeError(
                f"grad: operator {node.op.name!r} has no gradient rule "
                f"(output {fmt_shape(node.shape)} {node.dtype})"
            )
        xs = [from_node(c) for c in node.inputs]
        grads = rule(F, g, xs, from_node(node), node.attrs)
        for child, c in zip(node.inputs, grads, strict=True):
            if c is None or id(child) not in useful:
                continue
            if not isinstance(c, Array):
                c = asarray(c)
            c = _sum_to(c, child.shape)
            if c.dtype != child.dtype:
                c = c.astype(child.dtype)
            prev = cot.get(id(child))
            cot[id(child)] = c if prev is None else prev + c
    return cot


def _seed(y: Array, grad_output: Any, who: str) -> Array:
    if y.dtype.kind != "f":
        raise TypeError(f"{who}: can only differentiate floating-point arrays, got {y.dtype}")
    if grad_output is None:
        if y.size != 1:
            raise ValueError(
                f"{who}: grad can be implicitly created only for single-element outputs "
                f"(got shape {fmt_shape(y.shape)}); pass grad_output"
            )
        return ones(y.shape, dtype=y.dtype)
    g = grad_output if isinstance(grad_output, Array) else asarray(grad_output, dtype=y.dtype)
    if g.shape != y.shape:
        raise ValueError(
            f"{who}: grad_output shape {fmt_shape(g.shape)} != output shape {fmt_shape(y.shape)}"
        )
    return g


def grad(
    y: Array, xs: Sequence[Array] | Array, grad_output: Any = None, create_graph: bool = False
) -> list[Array] | Array:
    """Lazy gradients of `y` with respect to each of `xs` (zeros where y does not depend on one)."""
    single = isinstance(xs, Array)
    xs = [xs] if single else list(xs)
    for x in xs:
        if not isinstance(x, Array):
            raise TypeError(f"grad: inputs must be lazygraph arrays, got {type(x).__name__}")
    prev = is_grad_enabled()
    set_grad_enabled(create_graph)
    try:
        seed = _seed(y, grad_output, "grad")
        targets = [x.node for x in xs]
        cot = _backprop(y.node, seed, {id(t) for t in targets})
        out = []
        for x, t in zip(xs, targets, strict=True):
            g = cot.get(id(t))
            out.append(zeros(x.shape, dtype=x.dtype) if g is None else g)
    finally:
        set_grad_enabled(prev)
    return out[0] if single else out


def backward(y: Array, grad_output: Any = None, create_graph: bool = False) -> None:
    """Accumulate d(y)/d(leaf) into `.grad` of every array that requires grad and feeds y."""
    prev = is_grad_enabled()
    set_grad_enabled(create_graph)
    try:
        seed = _seed(y, grad_output, "backward")
        root = y.node
        leaves = [n for n in _tracked_order(root) if n.grad_leaf]
        if not leaves and not root.requires_grad:
            raise RuntimeError(
                "backward: the array does not depend on anything that requires grad "
                "(create parameters with lg.nn.Parameter or requires_grad=True)"
            )
        cot = _backprop(root, seed, {id(n) for n in leaves})
        for leaf in leaves:
            ref = LEAF_OWNERS.get(leaf)
            storage = ref() if ref is not None else None
            g = cot.get(id(leaf))
            if storage is None or g is None:
                continue
            accumulate_grad(storage, g)  # remembered: a failed evaluation of g undoes it
    finally:
        set_grad_enabled(prev)
    # The loss is usually read right after the update: compute it in the same graph.
    threads.defer(y._storage)


# -- the Array face of autograd -----------------------------------------------------------


def _get_requires_grad(self: Array) -> bool:
    return self._storage.requires_grad or self.node.requires_grad


def _set_requires_grad(self: Array, flag: bool) -> None:
    if self._view is not None:
        raise RuntimeError("requires_grad can only be set on a whole array, not on a view")
    if flag and self.dtype.kind != "f":
        raise TypeError(f"requires_grad: only floating-point arrays can require grad, got {self.dtype}")
    storage = self._storage
    if bool(flag) == storage.requires_grad:
        return
    node = storage.node
    # A fresh identity node keeps the old value's other consumers unaffected.
    fresh = Node(VIEW, (node,), {"view": contiguous(node.shape)}, node.shape, node.dtype)
    if node.buffer is not None and not node.requires_grad:
        fresh = Node(node.op, (), {}, node.shape, node.dtype, buffer=node.buffer)
    storage.requires_grad = bool(flag)
    storage.set(fresh)


def requires_grad_(self: Array, flag: bool = True) -> Array:
    """Set requires_grad in place and return the array (PyTorch's spelling)."""
    _set_requires_grad(self, flag)
    return self


def _get_grad(self: Array) -> Array | None:
    return self._storage.grad if self._view is None else None


def _set_grad(self: Array, value: Array | None) -> None:
    if value is not None and not isinstance(value, Array):
        value = asarray(value)
    if value is not None and value.shape != self.shape:
        raise ValueError(
            f"grad: assigned grad has shape {fmt_shape(value.shape)}, array has {fmt_shape(self.shape)}"
        )
    self._storage.grad = value


def detach(self: Array) -> Array:
    """The same values, cut off from differentiation."""
    node = self.node
    return from_node(Node(VIEW, (node,), {"view": contiguous(node.shape)}, node.shape, node.dtype))


def _backward(self: Array, grad_output: Any = None, create_graph: bool = False) -> None:
    """Accumulate gradients of this array into the `.grad` of the leaves it depends on."""
    backward(self, grad_output, create_graph)


Array.requires_grad = property(
    _get_requires_grad, _set_requires_grad, doc="Whether gradients flow to this array."
)
Array.grad = property(_get_grad, _set_grad, doc="Accumulated gradient (a lazy array), or None.")
Array.requires_grad_ = requires_grad_
Array.detach = detach
Array.backward = _backward

__all__ = ["grad", "backward", "no_grad"]
