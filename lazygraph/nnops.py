"""Neural-network operators in the NumPy-style namespace: softmax family, one_hot, conv, pooling."""

from __future__ import annotations

from typing import Any

from lazygraph.array import Array, record
from lazygraph.shape import _arr

IntPair = int | tuple[int, int]


def softmax(x: Any, axis: int = -1) -> Array:
    """exp(x) / sum(exp(x)) along an axis, computed stably (each row scaled by its sum's reciprocal)."""
    return record("softmax", _arr(x), axis=axis)


def log_softmax(x: Any, axis: int = -1) -> Array:
    """log(softmax(x)) along an axis, computed stably."""
    return record("log_softmax", _arr(x), axis=axis)


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Array:
    """log(sum(exp(x))) over axes, computed stably."""
    return record("logsumexp", _arr(x), axis=axis, keepdims=keepdims)


def one_hot(x: Any, num_classes: int, dtype: Any = None) -> Array:
    """Integer labels to one-hot rows (float64 by default)."""
    attrs = {"num_classes": num_classes}
    if dtype is not None:
        attrs["dtype"] = dtype
    return record("one_hot", _arr(x), **attrs)


def conv2d(
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: IntPair = 1,
    padding: IntPair = 0,
    dilation: IntPair = 1,
    groups: int = 1,
) -> Array:
    """2-D cross-correlation over NCHW input with (C_out, C_in/groups, kH, kW) weights."""
    operands = (x, weight) if bias is None else (x, weight, bias)
    return record("conv2d", *operands, stride=stride, padding=padding, dilation=dilation, groups=groups)


def max_pool2d(
    x: Any, kernel_size: IntPair, stride: IntPair | None = None, padding: IntPair = 0, dilation: IntPair = 1
) -> Array:
    """Maximum over sliding windows of NCHW input."""
    return record(
        "max_pool2d", _arr(x), kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation
    )


def avg_pool2d(
    x: Any,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    count_include_pad: bool = True,
) -> Array:
    """Mean over sliding windows of NCHW input."""
    return record(
        "avg_pool2d",
        _arr(x),
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        count_include_pad=count_include_pad,
    )
