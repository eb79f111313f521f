"""Weight initialisation (PyTorch's formulas), drawn from the seedable default generator.

Values are drawn with NumPy at call time and written into the parameter as a fresh buffer
leaf, so initialisation adds nothing to any graph. `lg.manual_seed(n)` makes them
reproducible; pass `generator=` for a private stream.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lazygraph.array import Array
from lazygraph.gradmode import no_grad
from lazygraph.random import Generator, default_generator


def _rng(generator: Generator | None) -> np.random.Generator:
    return (generator or default_generator())._rng


def _fill(x: Array, values: np.ndarray) -> Array:
    with no_grad():  # initialisation is not part of what gets differentiated
        x[...] = values.astype(x.dtype, copy=False)
    return x


def calculate_fan_in_and_fan_out(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of this shape: (out, in, *kernel) as in PyTorch."""
    if len(shape) < 2:
        raise ValueError(f"init: fan in/out need at least 2 dimensions, got shape {shape}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (PyTorch's table)."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "sigmoid", "identity"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def uniform_(x: Array, a: float = 0.0, b: float = 1.0, generator: Generator | None = None) -> Array:
    """Fill with U(a, b)."""
    return _fill(x, _rng(generator).uniform(a, b, x.shape))


def normal_(x: Array, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Array:
    """Fill with N(mean, std^2)."""
    return _fill(x, _rng(generator).normal(mean, std, x.shape))


def constant_(x: Array, value: float) -> Array:
    """Fill with one value."""
    return _fill(x, np.full(x.shape, value))


def zeros_(x: Array) -> Array:
    """Fill with zeros."""
    return constant_(x, 0.0)


def ones_(x: Array) -> Array:
    """Fill with ones."""
    return constant_(x, 1.0)


def kaiming_uniform_(
    x: Array,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Array:
    """He initialisation: U(-b, b), b = gain * sqrt(3 / fan) (Linear/Conv default uses a=sqrt(5))."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(x.shape)
    fan = {"fan_in": fan_in, "fan_out": fan_out}.get(mode)
    if fan is None:
        raise ValueError(f"kaiming_uniform_: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return uniform_(x, -bound, bound, generator)


def xavier_uniform_(x: Array, gain: float = 1.0, generator: Generator | None = None) -> Array:
    """Glorot initialisation: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(x.shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(x, -bound, bound, generator)


def default_bias_bound(weight_shape: Any) -> float:
    """PyTorch's bias bound for Linear/Conv: 1 / sqrt(fan_in) (0 when fan_in is 0)."""
    fan_in, _ = calculate_fan_in_and_fan_out(tuple(weight_shape))
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
