"""Declaring an operator: one call gives its record every facet the other packages read.

    cube = declare_elementwise(
        "cube", lambda x: x * x * x, arity=1,
        jit={"fiu": "{0} * {0} * {0}"}, jit_cost=2,
        dx=lambda F, g, x, out: g * 3 * x * x,
        z3=lambda x: x * x * x,
    )

The record (an `Op` in `REGISTRY`) then holds the shape/dtype rule (broadcasting and NumPy's
own dtype rule, found on the reference kernel), the reference kernel, the gradient, the JIT
expression and its cost, and the z3 specification. Consumers read the facets from the record:
recording (`lazygraph.array.record`, `lg.apply`), evaluation (`kernel`), autograd (`vjp`),
fusion and kernels (`jit_expr`, `jit_loop`, `jit_cost`, `jit_reduce`), rule proofs (`z3`),
the superoptimizer's cost model (`cost`) and vocabulary (`superopt`). Composite operators
carry `decompose`; `expand` turns one node of them into primitive nodes (what the JIT lowers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ops.base import REGISTRY, Op, broadcast_shapes, dtype_by_example, register, unregister
from ops.node import Node

_FACETS = ("vjp", "jit_expr", "jit_cost", "jit_loop", "jit_reduce", "z3", "cost", "decompose")
_LOOPS = ("ufunc", "out", "select", "convert")


class Elementwise(Op):
    """A pointwise function of `arity` broadcast operands."""

    kind = "elementwise"

    def __init__(self, name: str, fn: Callable, arity: int, dtype_fn: Callable | None = None):
        super().__init__(name)
        self.fn = fn
        self.arity = arity
        self.dtype_fn = dtype_fn or fn
        # The lean recording path's memo (lazygraph.array.record_unary/record_binary): operand
        # signature (per operand its dtype and shape, or a weak scalar's `_weak_sig` and None) ->
        # what recording found for it. Only operators that keep this class's rule have one.
        self.sig_cache: dict | None = {} if type(self).infer is Elementwise.infer else None

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Broadcast shapes; NumPy's result dtype."""
        if len(inputs) != self.arity:
            raise TypeError(f"{self.name}: expected {self.arity} operands, got {len(inputs)}")
        # NumPy resolves the loop (dtypes) before it broadcasts: a TypeError wins.
        dtype = dtype_by_example(self.name, self.dtype_fn, inputs, **attrs)
        shape = broadcast_shapes(self.name, inputs)
        return shape, dtype, attrs

    def kernel(self, *args: Any, **attrs: Any) -> Any:
        """Apply the NumPy function."""
        return self.fn(*args, **attrs)


def _unary_rule(dx: Callable) -> Callable:
    """A unary gradient dx(F, g, x, out) as the general rule vjp(F, g, xs, out, attrs)."""

    def rule(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
        return (dx(F, g, xs[0], out),)

    return rule


def declare(op: Op, *, dx: Callable | None = None, **facets: Any) -> Op:
    """Register `op` with its facets (see ops/base.Op); `dx` is a unary op's gradient shorthand."""
    unknown = sorted(set(facets) - set(_FACETS))
    if unknown:
        raise TypeError(
            f"declare {op.name}: unknown facet(s) {', '.join(unknown)}; known: {', '.join(_FACETS)}"
        )
    if facets.get("jit_loop", "ufunc") not in _LOOPS:
        raise ValueError(f"declare {op.name}: jit_loop must be one of {_LOOPS}, got {facets['jit_loop']!r}")
    if dx is not None:
        if facets.get("vjp") is not None:
            raise TypeError(f"declare {op.name}: give dx or vjp, not both")
        facets["vjp"] = _unary_rule(dx)
    for k, v in facets.items():
        if v is not None:
            setattr(op, k, v)
    return register(op)


def declare_elementwise(
    name: str,
    fn: Callable,
    arity: int,
    *,
    jit: dict[str, str] | None = None,
    dtype_fn: Callable | None = None,
    **facets: Any,
) -> Op:
    """Declare a pointwise operator from its NumPy reference `fn` (and its facets) in one call.

    A kernel computes a ufunc in NumPy's loop dtypes, anything else in the result dtype
    (`jit_loop="out"`), unless `jit_loop` says otherwise.
    """
    facets.setdefault("jit_loop", "ufunc" if isinstance(fn, np.ufunc) else "out")
    return declare(Elementwise(name, fn, arity, dtype_fn), jit_expr=jit, **facets)


def undeclare(name: str) -> Op:
    """Remove a declared operator (tests that declare one clean up with this)."""
    return unregister(name)


# ---------------------------------------------------------------------------------------
# Decompositions: a composite's value built from primitive operators


_SCALAR_DTYPES = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
}


class Builder:
    """The namespace `decompose` receives in ops/: `F.exp(x)` builds a Node of the `exp` record.

    Operands are nodes (anything with op, shape, dtype) or Python scalars, which become weak
    scalar leaves as the recording front end makes them. `made` lists the nodes built, inputs
    before readers.
    """

    def __init__(self) -> None:
        self.made: list[Node] = []

    def operand(self, x: Any, op: str) -> Any:
        """A node for an operand (Python scalars become weak scalar leaves)."""
        dtype = _SCALAR_DTYPES.get(type(x))
        if dtype is not None:
            return Node(REGISTRY["scalar"], (), {}, (), dtype, buffer=x)
        if not hasattr(x, "op"):
            raise TypeError(f"{op}: a decomposition operand must be a node or a Python scalar, got {x!r}")
        return x

    def apply(self, name: str, *operands: Any, **attrs: Any) -> Node:
        """One primitive application, checked by its record's rule."""
        op = REGISTRY[name]
        nodes = tuple(self.operand(x, name) for x in operands)
        shape, dtype, attrs = op.infer(nodes, attrs)
        node = Node(op, nodes, attrs, shape, dtype)
        self.made.append(node)
        return node

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("_") or name not in REGISTRY:
            raise AttributeError(f"no operator {name!r} to decompose into")
        return lambda *xs, **attrs: self.apply(name, *xs, **attrs)


def expand(node: Any) -> list[Node]:
    """The primitive nodes of a composite node's decomposition (the last one is its value).

    Inputs of the decomposition are the node's own inputs, so the parts read what it reads.
    Raises ValueError or TypeError when these operands have no decomposition (complex input).
    """
    op = node.op
    if op.decompose is None:
        raise TypeError(f"{op.name} is a primitive operator (no decomposition)")
    b = Builder()
    value = op.decompose(b, list(node.inputs), dict(node.attrs))
    if not b.made or value is not b.made[-1]:
        raise ValueError(f"{op.name}: a decomposition must end with the node it returns")
    if tuple(value.shape) != tuple(node.shape) or value.dtype != node.dtype:
        raise ValueError(
            f"{op.name}: decomposition gives {value.dtype}{list(value.shape)}, "
            f"the operator {node.dtype}{list(node.shape)}"
        )
    return b.made
