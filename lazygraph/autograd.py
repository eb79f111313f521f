"""Reverse-mode differentiation on the lazy graph.

Gradients are recorded like any other computation: `lg.grad(y, xs)` walks the tracked part
of the graph behind `y` once, in reverse, and applies each operator's rule (`Op.vjp`, defined
with the operator in ops/). Nothing is computed until an evaluation point, so a training
step's forward pass, backward pass and parameter update form one graph.

Arrays that require grad (parameters) are leaves: their storage marks each value it holds as
a grad leaf, so `backward()` knows where to accumulate `.grad`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from lazygraph.array import LEAF_OWNERS, VIEW, Array, accumulate_grad, from_node, record
from lazygraph.creation import ones, zeros
from lazygraph.device import Device, default
from lazygraph.engine import threads
from lazygraph.engine.attempt import RELEASED
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


def _tracked_order(root: Node, inputs: Callable[[Node], tuple[Node, ...]] | None = None) -> list[Node]:
    """Tracked nodes behind `root`, inputs before consumers; stops at grad leaves."""
    inputs = inputs or _tracked_inputs
    order: list[Node] = []
    seen = {id(root)}
    stack = [(root, iter(inputs(root)))]
    while stack:
        node, it = stack[-1]
        for child in it:
            if id(child) not in seen:
                seen.add(id(child))
                stack.append((child, iter(inputs(child))))
                break
        else:
            stack.pop()
            order.append(node)
    return order


def _tracked_inputs(node: Node) -> tuple[Node, ...]:
    if not node.requires_grad or node.grad_leaf:
        return ()
    return tuple(c for c in node.inputs if c.requires_grad)


def _float_inputs(node: Node) -> tuple[Node, ...]:
    """Every floating-point or complex input, tracked or not (grad() with respect to an untracked array).

    Grad leaves stop the walk: parameters, and the values recorded under `no_grad` or made by
    `detach()` (gradmode.track marks them), through which nothing is differentiated.
    """
    if node.grad_leaf:
        return ()
    return tuple(c for c in node.inputs if c.dtype.kind in "fc")


def _check_recorded(order: list[Node], wanted: set[int], xs: list[Array], targets: list[Node]) -> None:
    """Refuse a gradient that could be silently wrong: a path through an evaluated value is lost.

    Evaluation releases the history of values that do not require grad, so a released value
    behind the output may have depended on an untracked target without the graph showing it.
    """
    for node in order:
        if id(node) not in wanted and node in RELEASED:
            i = next(k for k, t in enumerate(targets) if not t.requires_grad)
            x = xs[i]
            raise RuntimeError(
                f"grad: cannot differentiate with respect to argument {i} ({x.dtype}, shape {fmt_shape(x.shape)}), "
                "which does not require grad: the output depends on a value "
                f"({node.dtype}, shape {fmt_shape(node.shape)}) that was evaluated before, and evaluation "
                "releases the recorded history of arrays that do not require grad, so the path from "
                "the argument may be lost. Mark the argument with x.requires_grad_() (or create it with "
                "requires_grad=True) before computing the output"
            )


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


def _backprop(
    root: Node, seed: Array, wanted: set[int], order: list[Node] | None = None, inputs: Callable | None = None
) -> dict[int, Array]:
    """Cotangents of every node on a path from a `wanted` node to `root`."""
    dev = root.device
    if dev is not None and dev is not default():
        with Device(dev):  # what gradient rules create (zeros, constants) goes on the graph's device
            return _backprop(root, seed, wanted, order, inputs)
    inputs = inputs or _tracked_inputs
    order = _tracked_order(root, inputs) if order is None else order
    # Only nodes from which a wanted node is reachable need a cotangent.
    useful: set[int] = set()
    for node in order:
        nid = id(node)
        if nid in wanted:
            useful.add(nid)
            continue
        for c in inputs(node):
            if id(c) in useful:
                useful.add(nid)
                break
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
        if node.op.vjp_needs:
            needs = tuple([id(c) in useful for c in node.inputs])
            grads = rule(F, g, xs, from_node(node), node.attrs, needs=needs)
        else:
            grads = rule(F, g, xs, from_node(node), node.attrs)
        for child, c in zip(node.inputs, grads, strict=True):
            if c is None or id(child) not in useful:
                continue
            if not isinstance(c, Array):
                c = asarray(c, device=child.device)
            c = _sum_to(c, child.shape)
            if c.dtype != child.dtype:
                if c.dtype.kind == "c" and child.dtype.kind != "c":
                    c = F.real(c)  # a real input receives the real part (PyTorch's convention)
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
        return ones(y.shape, dtype=y.dtype, device=y.device)
    g = grad_output if isinstance(grad_output, Array) else asarray(grad_output, y.dtype, y.device)
    if g.shape != y.shape:
        raise ValueError(
            f"{who}: grad_output shape {fmt_shape(g.shape)} != output shape {fmt_shape(y.shape)}"
        )
    return g


def grad(
    y: Array, xs: Sequence[Array] | Array, grad_output: Any = None, create_graph: bool = False
) -> list[Array] | Array:
    """Lazy gradients of `y` with respect to each of `xs` (zeros where y does not depend on one).

    An array that was not marked `requires_grad` is differentiated too (as JAX does): the graph
    from it to `y` is recorded anyway. Values recorded under `no_grad` or by `detach()` are
    constants to it. If a value behind `y` was evaluated before (evaluation releases the
    history of untracked arrays), the path may be lost: that is an error, never a wrong value.
    """
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
        wanted = {id(t) for t in targets}
        if all(t.requires_grad for t in targets):
            cot = _backprop(y.node, seed, wanted)
        else:  # walk every floating-point value, not only the tracked ones
            order = _tracked_order(y.node, _float_inputs)
            _check_recorded(order, wanted, xs, targets)
            cot = _backprop(y.node, seed, wanted, order, _float_inputs)
        out = []
        for x, t in zip(xs, targets, strict=True):
            g = cot.get(id(t))
            out.append(zeros(x.shape, dtype=x.dtype, device=x.device) if g is None else g)
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
        order = _tracked_order(root)  # walked once: _backprop takes it
        leaves = [n for n in order if n.grad_leaf and n.requires_grad]
        if not leaves and not root.requires_grad:
            raise RuntimeError(
                "backward: the array does not depend on anything that requires grad "
                "(create parameters with lg.nn.Parameter or requires_grad=True)"
            )
        cot = _backprop(root, seed, {id(n) for n in leaves}, order)
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
        fresh.device = node.device
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
    cut = Node(VIEW, (node,), {"view": contiguous(node.shape)}, node.shape, node.dtype)
    cut.grad_leaf = True  # grad() with respect to an untracked array stops here too
    return from_node(cut)


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
