"""`masked_sum`: the sum of a boolean-mask selection, `x[mask].sum(axis)`, as one operator.

A float sum of a selection depends on the order of its additions: NumPy sums the gathered
elements pairwise in blocks that depend on their count, so adding the masked-out lanes as
zeros would change its bits. The selection's count is only known once the mask is, so the
gather cannot be recorded without evaluating the mask. This operator takes the full-shape
value and the mask and gathers when it runs: its kernel is NumPy's own expression, so the
result is NumPy's bits, and its shape (every axis, or the masked axes only) needs no count,
so `x[mask].sum()` stays lazy (lazygraph/masked.py records it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import Op, register, shape_error
from ops.node import Node


class MaskedSum(Op):
    """x[mask].sum() (axis None) or x[mask].sum(axis=0) (axis 0: the masked axes), NumPy's bits."""

    kind = "other"

    def __init__(self) -> None:
        super().__init__("masked_sum")

    def infer(self, inputs: tuple[Node, ...], attrs: dict) -> tuple[tuple[int, ...], np.dtype, dict]:
        """The mask covers x's leading axes; the result keeps the trailing ones for axis 0."""
        x, mask = inputs
        axis = attrs.get("axis")
        if mask.dtype.kind != "b" or not mask.shape or x.shape[: mask.ndim] != mask.shape:
            raise shape_error("masked_sum", "the mask must be boolean over x's leading axes", inputs)
        if axis not in (None, 0):
            raise ValueError(f"masked_sum: axis must be None or 0, got {axis!r}")
        shape = () if axis is None else tuple(x.shape[mask.ndim :])
        dtype = np.zeros(0, x.dtype).sum().dtype
        return shape, dtype, {"axis": axis}

    def kernel(self, x: Any, mask: Any, axis: int | None = None) -> Any:
        """NumPy's `x[mask].sum(axis)`."""
        return x[mask].sum(axis=axis)


MASKED_SUM = register(MaskedSum())
