"""Operator definitions: every operator lazygraph knows, each defined once.

Importing this package registers all operators in `REGISTRY`. Only NumPy is imported
here: `cache/`, `optimizer/`, `jit/` and `lazygraph/` build on these definitions.
"""

from ops import creation, elementwise, linalg, movement, nn, reduction  # noqa: F401  (registration)
from ops.base import REGISTRY, Op, register
from ops.node import Node
from ops.views import View

__all__ = ["REGISTRY", "Node", "Op", "View", "register"]
