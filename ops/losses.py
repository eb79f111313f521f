"""Softmax cross-entropy as one operator, forward and gradient, numerically stable.

Recorded piecewise (log_softmax, a one-hot product, a sum over classes) the loss is several
steps and its gradient several more; as one operator the forward is a single max-shifted
log-sum-exp pass and the gradient the closed form g * (softmax(x) * sum(q) - q), which is
softmax - onehot for one-hot targets. Targets q are class probabilities with the logits'
shape (one-hot rows, smoothed rows or soft labels), classes on axis 1. Both are composites:
their decompositions are the kernels' steps, which the JIT fuses (on the CUDA devices too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import Op, defvjp, fmt_shape, shape_error, type_error
from ops.declare import declare
from ops.namespace import max_keepdims, namespace
from ops.node import Node


def _work(dtype: np.dtype) -> np.dtype:
    """The dtype to compute in: float16 sums of exponentials lose digits fast, so float32."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def _shifted(x: np.ndarray) -> np.ndarray:
    """x minus its max over axis 1 (0 for an all -inf row, so no inf - inf is formed)."""
    m = max_keepdims(x, 1)
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
        xp = namespace(x, q)
        x = xp.asarray(x, dtype=_work(dtype))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            s = _shifted(x)
            logp = s - np.log(np.sum(np.exp(s), axis=1, keepdims=True))
            # A class with no target mass adds nothing, even where its log-probability
            # underflows to -inf (0 * -inf would be nan; torch's class-index form agrees).
            terms = np.where(q == 0, 0, q * logp)
            return xp.asarray(-np.sum(terms, axis=1), dtype=dtype)


class SoftmaxCrossEntropyGrad(Op):
    """Gradient of softmax_cross_entropy in the logits: g * (softmax(x) * sum(q) - q).

    g is the loss's cotangent, with or without the class axis (size 1) kept.
    """

    def __init__(self) -> None:
        super().__init__("softmax_cross_entropy_grad")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Inputs (g, x, q): the logits' shape and dtype."""
        return inputs[1].shape, inputs[1].dtype, attrs

    def kernel(self, g: np.ndarray, x: np.ndarray, q: np.ndarray) -> np.ndarray:
        """softmax by the max shift, then the closed form, all in x's dtype."""
        xp = namespace(g, x, q)
        x = xp.asarray(x)
        dtype = x.dtype
        work = _work(dtype)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            e = np.exp(_shifted(x.astype(work, copy=False)))
            p = e / np.sum(e, axis=1, keepdims=True)
            q = xp.asarray(q, dtype=work)
            out = p * np.sum(q, axis=1, keepdims=True) - q
            g = xp.asarray(g, dtype=work)
            out *= g if g.ndim == x.ndim else np.expand_dims(g, 1)
        return out.astype(dtype, copy=False)


def _shifted_parts(F: Any, x: Any) -> Any:
    """`_shifted` from primitives."""
    m = F.max(x, axis=1, keepdims=True)
    return F.subtract(x, F.where(F.equal(m, -np.inf), 0, m))


def _sce_parts(F: Any, xs: list, attrs: dict) -> Any:
    """softmax_cross_entropy from primitives, in the kernel's steps (so the JIT fuses it, on a GPU too)."""
    x, q = xs
    out = np.result_type(x.dtype, q.dtype)
    work = _work(out)
    xf = x if x.dtype == work else F.astype(x, dtype=work)
    qf = q if q.dtype == work else F.astype(q, dtype=work)
    s = _shifted_parts(F, xf)
    logp = F.subtract(s, F.log(F.sum(F.exp(s), axis=1, keepdims=True)))
    # the product first: it puts q on the logits' loops, which a fused kernel needs before
    # q is compared or reduced on its own
    prod = F.multiply(qf, logp)
    terms = F.where(F.equal(qf, 0), 0, prod)
    r = F.negative(F.sum(terms, axis=1))
    return r if r.dtype == out else F.astype(r, dtype=out)


def _sce_grad_parts(F: Any, xs: list, attrs: dict) -> Any:
    """softmax_cross_entropy_grad from primitives, in the kernel's steps."""
    g, x, q = xs
    out = x.dtype
    work = _work(out)

    def cast(v: Any) -> Any:
        return v if v.dtype == work else F.astype(v, dtype=work)

    e = F.exp(_shifted_parts(F, cast(x)))
    p = F.divide(e, F.sum(e, axis=1, keepdims=True))
    qf = cast(q)
    # p * sum(q) - q as (p - q) + p * (sum(q) - 1): the same bits for one-hot rows (sum 1), and
    # p - q first puts q on the logits' loops, which a fused kernel needs before q is reduced
    d = F.subtract(p, qf)
    r = F.add(d, F.multiply(p, F.subtract(F.sum(qf, axis=1, keepdims=True), 1)))
    if g.ndim != x.ndim:  # fused kernels cannot insert the class axis: the vjp passes g with it
        raise ValueError(
            f"softmax_cross_entropy_grad: the cotangent needs the class axis kept (shape {g.shape})"
        )
    r = F.multiply(r, cast(g))
    return r if r.dtype == out else F.astype(r, dtype=out)


declare(SoftmaxCrossEntropy(), decompose=_sce_parts)
declare(SoftmaxCrossEntropyGrad(), decompose=_sce_grad_parts)


@defvjp("softmax_cross_entropy")
def _softmax_cross_entropy_vjp(
    F: Any, g: Any, xs: list, out: Any, attrs: dict, needs: tuple = (True, True)
) -> tuple:
    x, q = xs
    # g with the class axis kept (size 1): the gradient's decomposition then fuses into one kernel
    gx = F.record("softmax_cross_entropy_grad", F.expand_dims(g, 1), x, q) if needs[0] else None
    # Soft targets can be differentiated too: d/dq = -log_softmax(x)
    gq = -F.log_softmax(x, axis=1) * F.expand_dims(g, 1) if needs[1] else None
    return gx, gq
