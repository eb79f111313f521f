"""Softmax cross-entropy as one operator, forward and gradient, numerically stable.

Recorded piecewise (log_softmax, a one-hot product, a sum over classes) the loss is several
steps and its gradient several more; as one operator the forward is a single max-shifted
log-sum-exp pass and the gradient the closed form g * (softmax(x) * sum(q) - q), which is
softmax - onehot for one-hot targets. Targets q are class probabilities with the logits'
shape (one-hot rows, smoothed rows or soft labels), classes on axis 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import Op, defvjp, fmt_shape, register, shape_error, type_error
from ops.node import Node


def _work(dtype: np.dtype) -> np.dtype:
    """The dtype to compute in: float16 sums of exponentials lose digits fast, so float32."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def _shifted(x: np.ndarray) -> np.ndarray:
    """x minus its max over axis 1 (0 for an all -inf row, so no inf - inf is formed)."""
    m = np.max(x, axis=1, keepdims=True, initial=-np.inf)
    return x - np.where(m == -np.inf, 0, m)


class SoftmaxCrossEntropy(Op):
    """-sum(q * log_softmax(x, axis=1), axis=1): the loss per example (and per extra position)."""

    def __init__(self) -> None:
        super().__init__("softmax_cross_entropy")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Logits (N, C, ...) and targets of the same shape, both float; the loss drops axis 1."""
        if attrs:
            raise TypeError(f"{self.name}: unexpected attribute(s) {', '.join(sorted(attrs))}")
        if len(inputs) != 2:
            raise TypeError(f"{self.name}: expected inputs (logits, targets), got {len(inputs)} operands")
        x, q = inputs
        if x.dtype.kind != "f" or q.dtype.kind != "f":
            raise type_error(self.name, "logits and targets must be floating-point", inputs)
        if x.ndim < 2 or q.shape != x.shape:
            raise shape_error(
                self.name,
                f"targets {fmt_shape(q.shape)} must have the logits' shape {fmt_shape(x.shape)} (N, C, ...)",
                inputs,
            )
        return x.shape[:1] + x.shape[2:], np.result_type(x.dtype, q.dtype), {}

    def kernel(self, x: np.ndarray, q: np.ndarray) -> np.ndarray:
        """One max-shifted log-sum-exp pass, then the target-weighted sum."""
        dtype = np.result_type(x, q)
        x = np.asarray(x, dtype=_work(dtype))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            s = _shifted(x)
            logp = s - np.log(np.sum(np.exp(s), axis=1, keepdims=True))
            # A class with no target mass adds nothing, even where its log-probability
            # underflows to -inf (0 * -inf would be nan; torch's class-index form agrees).
            terms = np.where(q == 0, 0, q * logp)
            return np.asarray(-np.sum(terms, axis=1), dtype=dtype)


class SoftmaxCrossEntropyGrad(Op):
    """Gradient of softmax_cross_entropy in the logits: g * (softmax(x) * sum(q) - q)."""

    def __init__(self) -> None:
        super().__init__("softmax_cross_entropy_grad")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Inputs (g, x, q): the logits' shape and dtype."""
        return inputs[1].shape, inputs[1].dtype, attrs

    def kernel(self, g: np.ndarray, x: np.ndarray, q: np.ndarray) -> np.ndarray:
        """softmax by the max shift, then the closed form, all in x's dtype."""
        x = np.asarray(x)
        dtype = x.dtype
        work = _work(dtype)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            e = np.exp(_shifted(x.astype(work, copy=False)))
            p = e / np.sum(e, axis=1, keepdims=True)
            q = np.asarray(q, dtype=work)
            out = p * np.sum(q, axis=1, keepdims=True) - q
            out *= np.expand_dims(np.asarray(g, dtype=work), 1)
        return out.astype(dtype, copy=False)


for _op in (SoftmaxCrossEntropy(), SoftmaxCrossEntropyGrad()):
    register(_op)


@defvjp("softmax_cross_entropy")
def _softmax_cross_entropy_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, q = xs
    gx = F.record("softmax_cross_entropy_grad", g, x, q)
    # Soft targets can be differentiated too: d/dq = -log_softmax(x) (lazy: built only if read).
    gq = -F.log_softmax(x, axis=1) * F.expand_dims(g, 1)
    return gx, gq
