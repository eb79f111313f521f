"""Leaves and creation operators: held buffers, Python scalars, full, arange, linspace, eye."""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any

import numpy as np

from ops.base import Op, register
from ops.node import Node


class Leaf(Op):
    """A value that is already known: a held buffer or a weak Python scalar."""

    kind = "leaf"

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Leaves are built directly, never inferred."""
        raise TypeError(f"{self.name}: leaves are created from values, not recorded")

    def kernel(self) -> Any:
        """Leaves always carry their value in Node.buffer."""
        raise RuntimeError(f"{self.name}: a leaf has no kernel; its value is its buffer")


def shape_arg(op: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{op}: shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"{op}: negative dimensions are not allowed: {shape}")
    return shape


class Full(Op):
    """An array filled with one value: zeros, ones, empty and full."""

    kind = "creation"
    size_attrs = ("shape", "fill_value")

    def __init__(self) -> None:
        super().__init__("full")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """dtype defaults to NumPy's choice for the fill value."""
        shape = shape_arg("full", attrs["shape"])
        value = attrs["fill_value"]
        given = attrs.get("dtype")
        dtype = np.dtype(given) if given is not None else np.asarray(value).dtype
        # a value of its own dtype, or a Python float, bool or exactly representable int into a
        # float array, always fits: the check below costs 8 us of the 16 a `zeros(n)` took
        t = type(value)
        fits = given is None or (
            dtype.kind in "fc" and (t is float or t is bool or (t is int and -(2**53) <= value <= 2**53))
        )
        if not fits:
            try:  # NumPy's own checks on the fill value (300 into int8), now rather than at evaluation
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # evaluation warns as NumPy does, once
                    np.full((), value, dtype=dtype)
            except (TypeError, ValueError, OverflowError) as e:
                raise type(e)(f"full: {e}") from None
        return shape, dtype, {"shape": shape, "fill_value": value, "dtype": dtype}

    def kernel(self, shape: tuple[int, ...], fill_value: Any, dtype: np.dtype, xp: Any = np) -> Any:
        """full in namespace `xp` (no operand says where: the caller's device does)."""
        return xp.full(shape, fill_value, dtype=dtype)


class Arange(Op):
    """Evenly spaced values in [start, stop) with a step."""

    kind = "creation"
    size_attrs = ("start", "stop", "step")

    def __init__(self) -> None:
        super().__init__("arange")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Length ceil((stop - start) / step), as NumPy computes it."""
        start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
        if step == 0:
            raise ValueError("arange: step must not be zero")
        n = max(math.ceil((stop - start) / step), 0)
        dtype = attrs.get("dtype")
        dtype = np.dtype(dtype) if dtype is not None else np.array([start, stop, step]).dtype
        return (n,), dtype, {"start": start, "stop": stop, "step": step, "dtype": dtype}

    def kernel(self, start: Any, stop: Any, step: Any, dtype: np.dtype, xp: Any = np) -> Any:
        """arange in namespace `xp`."""
        return xp.arange(start, stop, step, dtype=dtype)


class Linspace(Op):
    """`num` evenly spaced values from start to stop."""

    kind = "creation"
    size_attrs = ("start", "stop", "num")

    def __init__(self) -> None:
        super().__init__("linspace")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Shape (num,); float64 unless asked otherwise."""
        num = operator.index(attrs["num"])
        if num < 0:
            raise ValueError(f"linspace: number of samples, {num}, must be non-negative")
        out = dict(attrs, num=num)
        dtype = attrs.get("dtype")
        dtype = np.dtype(dtype) if dtype is not None else np.linspace(attrs["start"], attrs["stop"], 0).dtype
        out["dtype"] = dtype
        return (num,), dtype, out

    def kernel(self, start: Any, stop: Any, num: int, endpoint: bool, dtype: np.dtype, xp: Any = np) -> Any:
        """linspace in namespace `xp`."""
        return xp.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)


class Eye(Op):
    """Ones on the k-th diagonal of an n x m matrix."""

    kind = "creation"
    size_attrs = ("n", "m", "k")

    def __init__(self) -> None:
        super().__init__("eye")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Shape (n, m)."""
        n = operator.index(attrs["n"])
        m = n if attrs.get("m") is None else operator.index(attrs["m"])
        if n < 0 or m < 0:
            raise ValueError(f"eye: negative dimensions are not allowed: ({n}, {m})")
        dtype = np.dtype(attrs.get("dtype") or np.float64)
        return (n, m), dtype, {"n": n, "m": m, "k": operator.index(attrs.get("k", 0)), "dtype": dtype}

    def kernel(self, n: int, m: int, k: int, dtype: np.dtype, xp: Any = np) -> Any:
        """eye in namespace `xp`."""
        return xp.eye(n, m, k, dtype=dtype)


BUFFER = register(Leaf("buffer"))
SCALAR = register(Leaf("scalar"))
for _op in (Full(), Arange(), Linspace(), Eye()):
    register(_op)
