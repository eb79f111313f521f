"""The superoptimizer's own operators: made by its pass only, declared like every operator.

`slice_axis` is the piece of a split (a NumPy view, so free); `superopt` is the step that
computes a term operator lazygraph has no operator for (transposes, splits and constants,
built by the `superopt` recipe constructor of convert.py). Both go through
`ops.declare.declare`, so their records sit in `REGISTRY` next to the recorded operators.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import REGISTRY, Op
from ops.declare import declare


class SliceOp(Op):
    """x[..., start:stop, ...] along one axis: a piece of a split (made by the superopt pass only)."""

    kind = "other"

    def __init__(self) -> None:
        super().__init__("slice_axis")

    def infer(self, inputs: tuple, attrs: dict) -> tuple:
        """Shape with the axis cut to [start, stop); the input's dtype."""
        (x,) = inputs
        axis, start, stop = int(attrs["axis"]), int(attrs["start"]), int(attrs["stop"])
        if not (0 <= axis < len(x.shape) and 0 <= start < stop <= x.shape[axis]):
            raise ValueError(f"slice_axis: bad piece {axis}:{start}:{stop} of shape {x.shape}")
        shape = x.shape[:axis] + (stop - start,) + x.shape[axis + 1 :]
        return shape, x.dtype, {"axis": axis, "start": start, "stop": stop}

    def kernel(self, x: np.ndarray, axis: int, start: int, stop: int) -> np.ndarray:
        """A view of the piece (no copy)."""
        return x[(slice(None),) * int(axis) + (slice(int(start), int(stop)),)]


class SuperoptOp(Op):
    """The operator of `superopt` steps (made by convert.to_graph, never recorded)."""

    def __init__(self) -> None:
        super().__init__("superopt")

    def infer(self, inputs: tuple, attrs: dict) -> tuple:
        """Never recorded by users."""
        raise TypeError("superopt: made by the superoptimizer only")

    def kernel(self, *args: Any, **attrs: Any) -> Any:
        """Runs through its constructor."""
        raise TypeError("superopt: made by the superoptimizer only")


for _op in (SliceOp(), SuperoptOp()):
    if _op.name not in REGISTRY:
        declare(_op)
