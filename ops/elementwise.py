"""Elementwise operators: NumPy ufuncs and a few composite pointwise functions.

Shape rule: broadcasting. Dtype rule: NumPy's own, found by `dtype_by_example`, so
integer, boolean and weak Python-scalar promotion match NumPy 2 exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ops.base import Op, broadcast_shapes, dtype_by_example, register, type_error
from ops.node import Node


class Elementwise(Op):
    """A pointwise function of `arity` broadcast operands."""

    kind = "elementwise"

    def __init__(self, name: str, fn: Callable, arity: int, dtype_fn: Callable | None = None):
        super().__init__(name)
        self.fn = fn
        self.arity = arity
        self.dtype_fn = dtype_fn or fn

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


def _float_dtype(x: np.ndarray) -> np.dtype:
    # The dtype NumPy's transcendental ufuncs produce for x (int -> float64, bool -> float16).
    return np.exp(np.zeros((), dtype=x.dtype)).dtype


def _sigmoid(x: Any) -> np.ndarray:
    x = np.asarray(x)
    t = _float_dtype(x)
    xf = x.astype(t, copy=False)
    # exp(-|x|) never overflows, so both branches are finite.
    e = np.exp(-np.abs(xf))
    return np.where(xf >= 0, 1 / (1 + e), e / (1 + e)).astype(t, copy=False)


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x: Any) -> np.ndarray:
    x = np.asarray(x)
    t = _float_dtype(x)
    if t.kind == "c":
        raise TypeError("erf is not defined for complex input")
    # math.erf is correctly rounded in double precision; NumPy has no erf of its own.
    return np.asarray(_erf_scalar(x.astype(np.float64)), dtype=np.float64).astype(t)


def _cast(x: Any, dtype: np.dtype) -> np.ndarray:
    return np.asarray(x).astype(dtype)


class Cast(Elementwise):
    """Conversion to another dtype (NumPy's `astype`, unsafe casting)."""

    def __init__(self) -> None:
        super().__init__("astype", _cast, 1)

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Same shape; the requested dtype."""
        try:
            dtype = np.dtype(attrs["dtype"])
        except TypeError as e:
            raise type_error(self.name, f"invalid dtype {attrs['dtype']!r}: {e}") from None
        return inputs[0].shape, dtype, {"dtype": dtype}


BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.true_divide,
    "floor_divide": np.floor_divide,
    "remainder": np.remainder,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "atan2": np.arctan2,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "bitwise_left_shift": np.left_shift,
    "bitwise_right_shift": np.right_shift,
}

UNARY = {
    "negative": np.negative,
    "positive": np.positive,
    "abs": np.absolute,
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "log2": np.log2,
    "log10": np.log10,
    "sqrt": np.sqrt,
    "square": np.square,
    "reciprocal": np.reciprocal,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "isnan": np.isnan,
    "isfinite": np.isfinite,
    "isinf": np.isinf,
    "logical_not": np.logical_not,
    "bitwise_invert": np.invert,
}

for _name, _fn in BINARY.items():
    register(Elementwise(_name, _fn, 2))
for _name, _fn in UNARY.items():
    register(Elementwise(_name, _fn, 1))

register(Elementwise("sigmoid", _sigmoid, 1, dtype_fn=np.exp))
register(Elementwise("erf", _erf, 1, dtype_fn=_erf))
register(Elementwise("round", np.round, 1))
register(Elementwise("where", np.where, 3))
register(Elementwise("clip", np.clip, 3))  # both bounds: NumPy promotes the three operands together
register(Cast())
