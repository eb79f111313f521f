"""The graph node every package shares: one recorded operator application."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

#: the host's device name (the one object every host node shares, so placement compares identities)
HOST = "cpu"


class Node:
    """An immutable operator application; `buffer` memoizes its value once evaluated.

    A node never changes meaning after it is recorded. Evaluation only memoizes: the
    engine stores the value in `buffer` and drops `inputs`, turning the node into a leaf
    so that evaluated graphs do not keep their history alive (nodes that require grad keep
    their history for a later backward pass).
    """

    __slots__ = (
        "op",
        "inputs",
        "attrs",
        "shape",
        "dtype",
        "buffer",
        "users",
        "requires_grad",
        "grad_leaf",
        "static",
        "device",
        "kid",
        "h",
        "__weakref__",
    )

    def __init__(
        self,
        op: Any,
        inputs: tuple[Node, ...],
        attrs: dict,
        shape: tuple[int, ...],
        dtype: np.dtype,
        buffer: Any = None,
    ) -> None:
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.buffer = buffer
        # How many user-visible storages currently hold this node; those are memoized.
        self.users = 0
        # Autograd: the value depends on an array that requires grad (so evaluation keeps the
        # node's history for a later backward); a grad leaf is where differentiation stops.
        self.requires_grad = False
        self.grad_leaf = False
        # Model state (a parameter, a module buffer, an array marked with lg.mark_static): held
        # across evaluations and rarely written, so the fold pass memoizes what depends on it.
        self.static = False
        # Structural key parts, computed once per node (cache/key.py): `kid` is the operation's
        # interned local token (a held buffer's: a tuple with its layout's, -2 once evaluated),
        # `h` a hint hash of the structure behind the node (None: not yet known).
        self.kid: int | None = None
        self.h: int | None = None
        # Where the value lives (lazygraph/device.py): an operator's result is placed with its
        # first input (the recording front end checks the others and places leaves); None is a
        # neutral operand (a Python scalar or NumPy value converted on the fly) that joins any.
        try:
            self.device: str | None = inputs[0].device if inputs else HOST
        except AttributeError:  # a decomposition over the optimizer's nodes: placement is P's
            self.device = HOST

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __repr__(self) -> str:
        dims = ",".join(map(str, self.shape))
        return f"<Node {self.op.name} {self.dtype}[{dims}]>"


def postorder(roots: Iterable[Any], expand: Callable[[Any], bool] | None = None) -> list[Any]:
    """Every node reachable from `roots` (anything with `.inputs`), inputs before their readers.

    Iterative, so deep graphs do not hit Python's recursion limit. Nodes for which `expand`
    says False are listed but their inputs are not followed.
    """
    order: list[Any] = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(root.inputs if expand is None or expand(root) else ()))]
        while stack:
            node, it = stack[-1]
            for c in it:
                if id(c) not in seen:
                    seen.add(id(c))
                    follow = expand is None or expand(c)
                    stack.append((c, iter(c.inputs if follow else ())))
                    break
            else:
                stack.pop()
                order.append(node)
    return order
