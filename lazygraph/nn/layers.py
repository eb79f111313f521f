"""Layers: Linear, Conv2d, pooling, activations, Dropout, Flatten, Embedding, LayerNorm, BatchNorm.

Parameters are float32 and initialised as PyTorch does by default (kaiming_uniform with
a=sqrt(5) for weights, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for biases, N(0, 1) for
embeddings), drawn from the default generator that `lg.manual_seed` seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from lazygraph.array import Array
from lazygraph.nn import functional as F
from lazygraph.nn import init
from lazygraph.nn.module import Module, Parameter
from lazygraph.random import Generator
from lazygraph.shape import asarray

IntPair = int | tuple[int, int]


def _pair(v: IntPair) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _empty_param(shape: tuple[int, ...], dtype: Any) -> Parameter:
    return Parameter(np.zeros(shape, dtype=np.dtype(dtype)))


class Linear(Module):
    """y = x @ W.T + b with W of shape (out_features, in_features)."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, dtype: Any = np.float32
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = _empty_param((out_features, in_features), dtype)
        self.register_parameter("bias", _empty_param((out_features,), dtype) if bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default initialisation."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            b = init.default_bias_bound(self.weight.shape)
            init.uniform_(self.bias, -b, b)

    def forward(self, x: Any) -> Array:
        """Apply the affine map to the last axis."""
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )


class Conv2d(Module):
    """2-D convolution over NCHW input; padding may be an int, a pair, 'valid' or 'same'."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntPair,
        stride: IntPair = 1,
        padding: IntPair | str = 0,
        dilation: IntPair = 1,
        groups: int = 1,
        bias: bool = True,
        dtype: Any = np.float32,
    ) -> None:
        super().__init__()
        k, d = _pair(kernel_size), _pair(dilation)
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"Conv2d: groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}"
            )
        if padding == "valid":
            padding = 0
        elif padding == "same":
            if _pair(stride) != (1, 1):
                raise ValueError("Conv2d: padding='same' needs stride 1")
            total = (d[0] * (k[0] - 1), d[1] * (k[1] - 1))
            if total[0] % 2 or total[1] % 2:
                raise ValueError(f"Conv2d: padding='same' needs an odd (dilated) kernel size, got {k}")
            padding = (total[0] // 2, total[1] // 2)
        elif isinstance(padding, str):
            raise ValueError(f"Conv2d: padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = _pair(stride), _pair(padding), d, groups
        self.weight = _empty_param((out_channels, in_channels // groups, *k), dtype)
        self.register_parameter("bias", _empty_param((out_channels,), dtype) if bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default initialisation."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            b = init.default_bias_bound(self.weight.shape)
            init.uniform_(self.bias, -b, b)

    def forward(self, x: Any) -> Array:
        """Cross-correlate x with the kernels."""
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}"
        )


class MaxPool2d(Module):
    """Maximum over kernel_size windows (stride defaults to kernel_size)."""

    def __init__(
        self, kernel_size: IntPair, stride: IntPair | None = None, padding: IntPair = 0, dilation: IntPair = 1
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation

    def forward(self, x: Any) -> Array:
        """Pool each channel."""
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}"


class AvgPool2d(Module):
    """Mean over kernel_size windows (stride defaults to kernel_size)."""

    def __init__(
        self,
        kernel_size: IntPair,
        stride: IntPair | None = None,
        padding: IntPair = 0,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.count_include_pad = count_include_pad

    def forward(self, x: Any) -> Array:
        """Pool each channel."""
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}"


class ReLU(Module):
    """max(x, 0)."""

    def forward(self, x: Any) -> Array:
        """Apply elementwise."""
        return F.relu(x)


class Tanh(Module):
    """Hyperbolic tangent."""

    def forward(self, x: Any) -> Array:
        """Apply elementwise."""
        return F.tanh(x)


class Sigmoid(Module):
    """Logistic function."""

    def forward(self, x: Any) -> Array:
        """Apply elementwise."""
        return F.sigmoid(x)


class GELU(Module):
    """Gaussian error linear unit (approximate='tanh' for the tanh form)."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Any) -> Array:
        """Apply elementwise."""
        return F.gelu(x, self.approximate)


class Softmax(Module):
    """Softmax along `dim`."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Any) -> Array:
        """Normalize along dim."""
        return F.softmax(x, self.dim)


class LogSoftmax(Module):
    """log(softmax) along `dim`."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Any) -> Array:
        """Normalize along dim, in log space."""
        return F.log_softmax(x, self.dim)


class Dropout(Module):
    """Zero elements with probability p in training (scaling the rest); identity in eval()."""

    def __init__(self, p: float = 0.5, generator: Generator | None = None) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: probability must be between 0 and 1, got {p}")
        self.p, self.generator = p, generator

    def forward(self, x: Any) -> Array:
        """Apply a fresh mask (training) or pass through."""
        return F.dropout(x, self.p, self.training, self.generator)


class Flatten(Module):
    """Merge dimensions start_dim..end_dim (by default all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Any) -> Array:
        """Reshape."""
        return F.flatten(x, self.start_dim, self.end_dim)


class Identity(Module):
    """Returns its input."""

    def forward(self, x: Any) -> Any:
        """Pass through."""
        return x


class Embedding(Module):
    """A lookup table of num_embeddings vectors of size embedding_dim, initialised N(0, 1)."""

    def __init__(
        self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, dtype: Any = np.float32
    ) -> None:
        super().__init__()
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise ValueError(
                f"Embedding: padding_idx {padding_idx} out of range for {num_embeddings} embeddings"
            )
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        self.weight = _empty_param((num_embeddings, embedding_dim), dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, 1), with the padding row zero."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            values = np.array(self.weight.numpy())
            values[self.padding_idx] = 0
            init._fill(self.weight, values)

    def forward(self, indices: Any) -> Array:
        """Look up rows."""
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalize over the trailing normalized_shape dimensions, with a learned scale and shift."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        dtype: Any = np.float32,
    ) -> None:
        super().__init__()
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = ns, eps
        w = Parameter(np.ones(ns, dtype=dtype)) if elementwise_affine else None
        b = Parameter(np.zeros(ns, dtype=dtype)) if elementwise_affine and bias else None
        self.register_parameter("weight", w)
        self.register_parameter("bias", b)

    def forward(self, x: Any) -> Array:
        """Normalize."""
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class _BatchNorm(Module):
    """Shared by BatchNorm1d/2d: per-channel (axis 1) normalization with running statistics."""

    expected_ndim: tuple[int, ...] = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        dtype: Any = np.float32,
    ) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.register_parameter("weight", Parameter(np.ones(num_features, dtype=dtype)) if affine else None)
        self.register_parameter("bias", Parameter(np.zeros(num_features, dtype=dtype)) if affine else None)
        if track_running_stats:
            # Buffers hold values, not creation ops, so the first training step records the
            # same graph structure as every later one.
            self.register_buffer("running_mean", asarray(np.zeros(num_features, dtype=dtype)))
            self.register_buffer("running_var", asarray(np.ones(num_features, dtype=dtype)))
            self.register_buffer("num_batches_tracked", asarray(np.zeros((), dtype=np.int64)))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, x: Any) -> Array:
        """Batch statistics in training (updating the running ones), running statistics in eval."""
        x = F._arr(x)
        if x.ndim not in self.expected_ndim:
            raise ValueError(
                f"{type(self).__name__}: expected {' or '.join(f'{n}-D' for n in self.expected_ndim)} input, "
                f"got shape {x.shape}"
            )
        if x.shape[1] != self.num_features:
            raise ValueError(
                f"{type(self).__name__}: input of shape {x.shape} has {x.shape[1]} channels, "
                f"expected {self.num_features}"
            )
        use_batch = self.training or self.running_mean is None
        return F.batch_norm(
            x,
            self.running_mean if self.training or not use_batch else None,
            self.running_var if self.training or not use_batch else None,
            self.weight,
            self.bias,
            training=use_batch,
            momentum=self.momentum,
            eps=self.eps,
            num_batches_tracked=self.num_batches_tracked if self.training else None,
        )

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


class BatchNorm1d(_BatchNorm):
    """Batch normalization over (N, C) or (N, C, L) input."""

    expected_ndim = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization over (N, C, H, W) input."""

    expected_ndim = (4,)
