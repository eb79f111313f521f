"""Operator definitions: every operator lazygraph knows, each defined once.

Importing this package registers all operators in `REGISTRY`. Only NumPy is imported
here: `cache/`, `optimizer/`, `jit/` and `lazygraph/` build on these definitions.
"""

from ops import (  # noqa: F401  (registration)
    collective,  # noqa: F401  (registration: collective_start, collective_wait, collective_shard)
    complexparts,  # noqa: F401  (registration: real, imag, conj, angle)
    creation,
    elementwise,
    linalg,
    movement,
    movement_grad,  # noqa: F401  (registration: the movement operators' gradient rules)
    nn,
    reduction,
    scan,  # noqa: F401  (registration: ufunc_reduce, accumulate, reduceat, ufunc_at)
    sorting,  # noqa: F401  (registration: sort, argsort, searchsorted)
)
from ops.base import REGISTRY, Op, register
from ops.node import Node
from ops.views import View

__all__ = ["REGISTRY", "Node", "Op", "View", "register"]
