"""Stateless neural-network functions (PyTorch's `torch.nn.functional` names and defaults).

Everything records into the lazy graph; gradients come from the operators' own rules.
Losses take logits or log-probabilities with the class axis at 1 and integer targets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from lazygraph import api, nnops
from lazygraph.array import Array, record
from lazygraph.engine import threads
from lazygraph.gradmode import no_grad
from lazygraph.random import Generator, default_generator
from lazygraph.shape import asarray, moveaxis
from ops.base import fmt_shape

_REDUCTIONS = ("none", "mean", "sum")


def _arr(x: Any, device: Any = None) -> Array:
    """An Array as it is; other data (NumPy targets, index lists) on `device` (the input's)."""
    return x if isinstance(x, Array) else asarray(x, device=device)


# -- activations ----------------------------------------------------------------------------


def relu(x: Any) -> Array:
    """max(x, 0)."""
    return api.maximum(_arr(x), 0)


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Array:
    """x where positive, negative_slope * x elsewhere."""
    x = _arr(x)
    return api.where(x > 0, x, x * negative_slope)


def sigmoid(x: Any) -> Array:
    """1 / (1 + exp(-x))."""
    return api.sigmoid(_arr(x))


def tanh(x: Any) -> Array:
    """Hyperbolic tangent."""
    return api.tanh(_arr(x))


def silu(x: Any) -> Array:
    """x * sigmoid(x) (swish)."""
    x = _arr(x)
    return x * api.sigmoid(x)


def gelu(x: Any, approximate: str = "none") -> Array:
    """x * Phi(x): the exact erf form, or approximate='tanh' for the tanh approximation."""
    x = _arr(x)
    if approximate == "none":
        return x * 0.5 * (1.0 + api.erf(x * (1.0 / math.sqrt(2.0))))
    if approximate == "tanh":
        inner = (x + 0.044715 * (x * x * x)) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (1.0 + api.tanh(inner))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def softmax(x: Any, dim: int = -1) -> Array:
    """exp(x) / sum(exp(x)) along `dim`, computed stably."""
    return nnops.softmax(_arr(x), axis=dim)


def log_softmax(x: Any, dim: int = -1) -> Array:
    """log(softmax(x)) along `dim`, computed stably."""
    return nnops.log_softmax(_arr(x), axis=dim)


# -- layers as functions ---------------------------------------------------------------------


def linear(x: Any, weight: Array, bias: Array | None = None) -> Array:
    """x @ weight.T + bias, with weight of shape (out_features, in_features)."""
    x = _arr(x)
    if x.ndim == 0 or weight.ndim != 2 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"linear: input of shape {fmt_shape(x.shape)} does not match weight of shape "
            f"{fmt_shape(weight.shape)} (expected input (..., {weight.shape[-1]}))"
        )
    y = x @ weight.T
    return y if bias is None else y + bias


conv2d = nnops.conv2d
max_pool2d = nnops.max_pool2d
avg_pool2d = nnops.avg_pool2d
one_hot = nnops.one_hot


def flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> Array:
    """Merge dimensions start_dim..end_dim into one."""
    x = _arr(x)
    nd = max(x.ndim, 1)
    s, e = start_dim % nd, end_dim % nd
    if s > e:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for {x.ndim}-D input")
    shape = x.shape[:s] + (math.prod(x.shape[s : e + 1]),) + x.shape[e + 1 :]
    return x.reshape(shape)


def dropout(x: Any, p: float = 0.5, training: bool = True, generator: Generator | None = None) -> Array:
    """Zero each element with probability p and scale the rest by 1/(1-p) (training only)."""
    x = _arr(x)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability must be between 0 and 1, got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    rng = (generator or default_generator())._rng
    # The mask is drawn now, from the seeded generator, and enters the graph as a leaf.
    mask = (rng.random(x.shape) >= p).astype(x.dtype) * np.asarray(1.0 / (1.0 - p), dtype=x.dtype)
    return x * mask


def embedding(indices: Any, weight: Array, padding_idx: int | None = None) -> Array:
    """Rows of `weight` picked by integer indices (shape indices.shape + (dim,))."""
    idx = _arr(indices, weight.device)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {idx.dtype}")
    out = weight[idx]
    if padding_idx is not None:
        # The padding row is zero; masking its uses also keeps its gradient zero.
        out = out * (idx != padding_idx).astype(weight.dtype)[..., None]
    return out


def layer_norm(
    x: Any,
    normalized_shape: int | Sequence[int],
    weight: Array | None = None,
    bias: Array | None = None,
    eps: float = 1e-5,
) -> Array:
    """Normalize over the trailing `normalized_shape` dimensions, then scale and shift."""
    x = _arr(x)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(ns) == 0 or x.shape[len(x.shape) - len(ns) :] != ns or x.ndim < len(ns):
        raise ValueError(
            f"layer_norm: input of shape {fmt_shape(x.shape)} does not end with normalized_shape {fmt_shape(ns)}"
        )
    axes = tuple(range(x.ndim - len(ns), x.ndim))
    d = x - x.mean(axis=axes, keepdims=True)
    var = (d * d).mean(axis=axes, keepdims=True)
    y = d / api.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def batch_norm(
    x: Any,
    running_mean: Array | None,
    running_var: Array | None,
    weight: Array | None = None,
    bias: Array | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    num_batches_tracked: Array | None = None,
) -> Array:
    """Normalize each channel (axis 1) by batch statistics (training) or running ones.

    In training the running statistics are updated (momentum, unbiased variance) as writes
    recorded without gradient tracking and deferred to the next evaluation point, so they are
    computed in the training step's graph and never form a chain across steps.
    """
    x = _arr(x)
    if x.ndim < 2:
        raise ValueError(
            f"batch_norm: input must have a channel axis (N, C, ...), got shape {fmt_shape(x.shape)}"
        )
    c = x.shape[1]
    bshape = (1, c) + (1,) * (x.ndim - 2)
    for name, a in (
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ):
        if a is not None and a.shape != (c,):
            raise ValueError(
                f"batch_norm: {name} of shape {fmt_shape(a.shape)} does not match {c} channels "
                f"of input {fmt_shape(x.shape)}"
            )
    if training or running_mean is None:
        axes = (0,) + tuple(range(2, x.ndim))
        n = x.size // c if c else 0
        if n <= 1 and training:
            raise ValueError(
                f"batch_norm: expected more than 1 value per channel when training, got input {fmt_shape(x.shape)}"
            )
        mean = x.mean(axis=axes, keepdims=True)
        d = x - mean
        var = (d * d).mean(axis=axes, keepdims=True)
        if training and running_mean is not None and running_var is not None:
            with no_grad():
                running_mean[...] = running_mean * (1.0 - momentum) + mean.reshape(c) * momentum
                running_var[...] = running_var * (1.0 - momentum) + var.reshape(c) * (momentum * n / (n - 1))
                if num_batches_tracked is not None:
                    num_batches_tracked += 1
            for buf in (running_mean, running_var, num_batches_tracked):
                if buf is not None:
                    threads.defer(buf._storage)
        y = d / api.sqrt(var + eps)
    else:
        y = (x - running_mean.reshape(bshape)) / api.sqrt(running_var.reshape(bshape) + eps)
    if weight is not None:
        y = y * weight.reshape(bshape)
    if bias is not None:
        y = y + bias.reshape(bshape)
    return y


# -- losses -------------------------------------------------------------------------------------


def _reduce(loss: Array, reduction: str, who: str) -> Array:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    raise ValueError(f"{who}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _class_targets(x: Array, target: Any, who: str) -> Array:
    """Integer class targets checked against input (N, C, ...): shape (N, ...)."""
    t = _arr(target, x.device)
    expect = x.shape[:1] + x.shape[2:]
    if t.dtype.kind not in "iu":
        raise TypeError(f"{who}: class targets must be integers, got {t.dtype} (input {fmt_shape(x.shape)})")
    if t.shape != expect:
        raise ValueError(
            f"{who}: target of shape {fmt_shape(t.shape)} does not match input of shape "
            f"{fmt_shape(x.shape)} (expected target {fmt_shape(expect)})"
        )
    return t


def _one_hot_at_axis1(t: Array, c: int, dtype: np.dtype) -> Array:
    oh = nnops.one_hot(t, c, dtype=dtype)
    return oh if oh.ndim == 2 else moveaxis(oh, -1, 1)


def _check_weight(weight: Array | None, c: int, who: str) -> Array | None:
    if weight is None:
        return None
    w = _arr(weight)
    if w.shape != (c,):
        raise ValueError(f"{who}: weight of shape {fmt_shape(w.shape)} must have one entry per class ({c})")
    return w


def _weighted_nll(logp: Array, target: Any, weight: Any, reduction: str, smoothing: float, who: str) -> Array:
    """Negative log-likelihood of integer targets, with class weights and label smoothing."""
    c = logp.shape[1]
    t = _class_targets(logp, target, who)
    w = _check_weight(weight, c, who)
    oh = _one_hot_at_axis1(t, c, logp.dtype)
    wshape = (1, c) + (1,) * (logp.ndim - 2)
    wl = logp if w is None else logp * w.reshape(wshape)
    loss = -(oh * wl).sum(axis=1)
    if smoothing:
        loss = loss * (1.0 - smoothing) - wl.sum(axis=1) * (smoothing / c)
    if reduction == "mean" and w is not None:
        wt = (oh * w.reshape(wshape)).sum(axis=1)  # each element's target-class weight
        return loss.sum() / wt.sum()
    return _reduce(loss, reduction, who)


def nll_loss(input: Any, target: Any, weight: Any = None, reduction: str = "mean") -> Array:  # noqa: A002
    """Negative log-likelihood of integer class targets, from log-probabilities (N, C, ...)."""
    x = _arr(input)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"nll_loss: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if x.ndim == 1:
        out = _weighted_nll(x[None], _arr(target, x.device).reshape(1), weight, reduction, 0.0, "nll_loss")
        return out.reshape(()) if reduction == "none" else out
    if x.ndim < 2:
        raise ValueError(f"nll_loss: input must be (N, C, ...), got shape {fmt_shape(x.shape)}")
    return _weighted_nll(x, target, weight, reduction, 0.0, "nll_loss")


def cross_entropy(
    input: Any,  # noqa: A002 - PyTorch's name
    target: Any,
    weight: Any = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Array:
    """Softmax cross-entropy from logits (N, C, ...): integer targets or class probabilities.

    Computed as -log_softmax (stable for any logit magnitude); label_smoothing mixes the
    target with the uniform distribution, as in PyTorch.
    """
    x = _arr(input)
    who = "cross_entropy"
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{who}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{who}: label_smoothing must be in [0, 1], got {label_smoothing}")
    if x.dtype.kind != "f":
        raise TypeError(f"{who}: input must be floating-point logits, got {x.dtype}")
    squeeze = x.ndim == 1
    if squeeze:
        x = x[None]
        t = _arr(target, x.device)
        target = t.reshape((1,) + t.shape) if t.dtype.kind == "f" else t.reshape(1)
    if x.ndim < 2:
        raise ValueError(f"{who}: input must be (N, C, ...) logits, got shape {fmt_shape(x.shape)}")
    t = _arr(target, x.device)
    if weight is None:
        # One numerically stable operator whose gradient is softmax * sum(q) - q.
        c = x.shape[1]
        if t.dtype.kind == "f":
            if t.shape != x.shape:
                raise ValueError(
                    f"{who}: probability targets of shape {fmt_shape(t.shape)} must match input {fmt_shape(x.shape)}"
                )
            q = t
        else:
            q = _one_hot_at_axis1(_class_targets(x, t, who), c, x.dtype)
        if label_smoothing:
            q = q * (1.0 - label_smoothing) + label_smoothing / c
        out = _reduce(record("softmax_cross_entropy", x, q), reduction, who)
        return out.reshape(()) if squeeze and reduction == "none" else out
    logp = nnops.log_softmax(x, axis=1)
    if t.dtype.kind == "f":  # class probabilities, same shape as the input
        if t.shape != x.shape:
            raise ValueError(
                f"{who}: probability targets of shape {fmt_shape(t.shape)} must match input {fmt_shape(x.shape)}"
            )
        c = x.shape[1]
        q = t if not label_smoothing else t * (1.0 - label_smoothing) + label_smoothing / c
        w = _check_weight(weight, c, who)
        wl = logp if w is None else logp * w.reshape((1, c) + (1,) * (x.ndim - 2))
        out = _reduce(-(q * wl).sum(axis=1), reduction, who)
    else:
        out = _weighted_nll(logp, t, weight, reduction, label_smoothing, who)
    return out.reshape(()) if squeeze and reduction == "none" else out


def mse_loss(input: Any, target: Any, reduction: str = "mean") -> Array:  # noqa: A002
    """Mean squared error (shapes must match; no silent broadcasting)."""
    x = _arr(input)
    t = _arr(target, x.device)
    if x.shape != t.shape:
        raise ValueError(
            f"mse_loss: input {fmt_shape(x.shape)} and target {fmt_shape(t.shape)} differ in shape"
        )
    d = x - t
    return _reduce(d * d, reduction, "mse_loss")


def l1_loss(input: Any, target: Any, reduction: str = "mean") -> Array:  # noqa: A002
    """Mean absolute error (shapes must match)."""
    x = _arr(input)
    t = _arr(target, x.device)
    if x.shape != t.shape:
        raise ValueError(
            f"l1_loss: input {fmt_shape(x.shape)} and target {fmt_shape(t.shape)} differ in shape"
        )
    return _reduce(api.abs(x - t), reduction, "l1_loss")
