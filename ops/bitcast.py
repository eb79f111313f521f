"""`bitcast`: an array's bytes read as another dtype (the value behind NumPy's `a.view(dtype)`).

NumPy's rule: the same item size keeps the shape; another item size rescales the last axis,
which must hold a whole number of new items (a 0-d array cannot change item size). Whether
the last axis is contiguous is a property of the caller's view, so the front end checks it
(lazygraph/array_methods.py); the operand here is the value, which the kernel copies in
C order. Not differentiable: the bytes of one dtype say nothing smooth about another.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import Op, fmt_shape, type_error
from ops.declare import declare
from ops.namespace import namespace
from ops.node import Node


def bitcast_shape(shape: tuple[int, ...], old: np.dtype, new: np.dtype) -> tuple[int, ...]:
    """The shape of `shape`-shaped `old` data read as `new` (NumPy's ValueError otherwise)."""
    if old.itemsize == new.itemsize:
        return shape
    if not shape:
        raise ValueError(
            f"bitcast: changing the dtype of a 0d array is only supported if the itemsize is unchanged "
            f"({old} is {old.itemsize} bytes, {new} is {new.itemsize})"
        )
    nbytes = shape[-1] * old.itemsize
    if nbytes % new.itemsize:
        raise ValueError(
            f"bitcast: when changing to a larger dtype, its size must be a divisor of the total size in "
            f"bytes of the last axis of the array (shape {fmt_shape(shape)} {old} as {new})"
        )
    return shape[:-1] + (nbytes // new.itemsize,)


class Bitcast(Op):
    """The operand's bytes (C order) reinterpreted as `dtype`."""

    kind = "movement"

    def __init__(self) -> None:
        super().__init__("bitcast")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """NumPy's view shape rule; numeric and bool dtypes only."""
        (x,) = inputs
        try:
            dtype = np.dtype(attrs["dtype"])
        except TypeError as e:
            raise type_error("bitcast", f"invalid dtype {attrs['dtype']!r}: {e}", inputs) from None
        if dtype.kind not in "biufc" or x.dtype.kind not in "biufc":
            raise type_error("bitcast", f"cannot reinterpret {x.dtype} as {dtype}", inputs)
        return bitcast_shape(x.shape, x.dtype, dtype), dtype, {"dtype": dtype}

    def kernel(self, x: Any, dtype: np.dtype) -> Any:
        """A C-ordered copy's bytes as `dtype` (NumPy, or CuPy for CuPy operands): never the operand's buffer."""
        return namespace(x).array(x, copy=True, order="C").view(dtype)


declare(Bitcast())
