"""What the model builders share: random float32 weights (fixed seed), counted operator calls.

Every builder records an inference graph with lazygraph's array API (nothing runs until the
outputs are evaluated). Weights are `Parameter`s (leaves of differentiation), so the fold pass
treats them as constants, as an inference deployment would; the input is a plain array.
`counts` tallies the operators the builder called, by kind, to compare with the op counts of
the published model scripts (shared/reference/benchmark_models.md).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import lazygraph as lg
import lazygraph.nn.functional as F
from lazygraph.nn import Parameter


@dataclass
class Model:
    """A built model: lazy outputs, the input and weight arrays, operator counts."""

    name: str
    outputs: list[lg.Array]
    inputs: list[lg.Array]
    weights: list[lg.Array]
    counts: Counter = field(default_factory=Counter)

    @property
    def total_ops(self) -> int:
        """Operators called while building."""
        return sum(self.counts.values())


class Builder:
    """Counted operators over lazygraph arrays; weights drawn from one seeded generator."""

    def __init__(self, seed: int = 0, like: Model | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.weights: list[lg.Array] = []
        self.inputs: list[lg.Array] = []
        self.counts: Counter = Counter()
        # re-record a model on the same arrays (benchmarks: the same buffers, so folded weights stay)
        self._old_w = iter(like.weights) if like is not None else None
        self._old_x = iter(like.inputs) if like is not None else None

    def model(self, name: str, outputs: list[lg.Array]) -> Model:
        """Package the outputs with what was made on the way."""
        return Model(name, outputs, self.inputs, self.weights, self.counts)

    def input(self, *shape: int) -> lg.Array:
        """A random input array (standard normal)."""
        x = next(self._old_x, None) if self._old_x is not None else None
        if x is None or x.shape != shape:
            x = lg.asarray(self.rng.standard_normal(shape).astype(np.float32))
        self.inputs.append(x)
        return x

    def weight(self, *shape: int, fan_in: int | None = None, gain: float = 1.0) -> Parameter:
        """A random weight, scaled so activations keep their size through deep stacks."""
        old = next(self._old_w, None) if self._old_w is not None else None
        if old is not None and old.shape == shape:
            self.weights.append(old)
            return old
        fan = fan_in if fan_in is not None else int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        data = self.rng.standard_normal(shape).astype(np.float32) * np.float32(
            gain * np.sqrt(1.0 / max(fan, 1))
        )
        w = Parameter(lg.asarray(data))
        self.weights.append(w)
        return w

    def _n(self, kind: str, x: Any) -> Any:
        self.counts[kind] += 1
        return x

    def conv(
        self,
        x: lg.Array,
        cout: int,
        k: int,
        stride: int = 1,
        groups: int = 1,
        relu: bool = False,
        bias: bool = False,
    ) -> lg.Array:
        """'same'-padded convolution (odd kernels), optional bias and ReLU (counted apart)."""
        cin = x.shape[1]
        w = self.weight(cout, cin // groups, k, k)
        b = self.weight(cout, fan_in=cin) if bias else None
        y = self._n("conv", F.conv2d(x, w, b, stride=stride, padding=k // 2, groups=groups))
        return self.relu(y) if relu else y

    def relu(self, x: lg.Array) -> lg.Array:
        """maximum(x, 0)."""
        return self._n("relu", lg.maximum(x, 0))

    def matmul(self, a: lg.Array, b: lg.Array) -> lg.Array:
        """a @ b."""
        return self._n("matmul", lg.matmul(a, b))

    def add(self, a: lg.Array, b: lg.Array) -> lg.Array:
        """a + b."""
        return self._n("add", a + b)

    def mul(self, a: lg.Array, b: lg.Array) -> lg.Array:
        """a * b."""
        return self._n("mul", a * b)

    def tanh(self, x: lg.Array) -> lg.Array:
        """tanh."""
        return self._n("tanh", lg.tanh(x))

    def sigmoid(self, x: lg.Array) -> lg.Array:
        """Logistic sigmoid."""
        return self._n("sigmoid", lg.sigmoid(x))

    def concat(self, xs: list[lg.Array], axis: int = 1) -> lg.Array:
        """Concatenation along an axis."""
        return self._n("concat", lg.concat(xs, axis=axis))

    def avgpool(self, x: lg.Array, k: int, stride: int) -> lg.Array:
        """'same'-padded average pooling."""
        return self._n("avgpool", F.avg_pool2d(x, k, stride=stride, padding=k // 2))

    def maxpool(self, x: lg.Array, k: int, stride: int, pad: int | None = None) -> lg.Array:
        """Max pooling ('same' padding unless given)."""
        return self._n("maxpool", F.max_pool2d(x, k, stride=stride, padding=k // 2 if pad is None else pad))

    def reshape(self, x: lg.Array, shape: tuple[int, ...]) -> lg.Array:
        """Reshape."""
        return self._n("reshape", lg.reshape(x, shape))

    def transpose(self, x: lg.Array, axes: tuple[int, ...]) -> lg.Array:
        """Axis permutation."""
        return self._n("transpose", lg.transpose(x, axes))


def size(base: int, scale: float, multiple: int = 1, least: int = 1) -> int:
    """base * scale rounded to a multiple (model sizes for tests and quick runs)."""
    return max(least, int(round(base * scale / multiple)) * multiple)
