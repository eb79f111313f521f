"""The benchmark's models written directly in NumPy: forward, backward and update by hand.

This is the "no framework" peer of bench_train.py: the Dali CNN with im2col convolutions
(channels-last window rows, one BLAS GEMM per convolution and per gradient)
and SGD with momentum, and the MLP 784-1024-1024-10 with Adam. Parameters are float32
NumPy arrays in PyTorch's layout and are updated in place.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def _softmax_ce(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    n = len(y)
    loss = float(np.mean(np.log(s[:, 0]) - z[np.arange(n), y]))
    g = e / s
    g[np.arange(n), y] -= 1
    return loss, g / n


def _im2col(x_nhwc: np.ndarray, k: int, pad: int) -> np.ndarray:
    """Rows of (kH, kW, C) windows of a zero-padded NHWC array: (N*H*W, k*k*C), contiguous.

    Channels last keeps each window's innermost run contiguous, so the copy into the GEMM
    operand is fast.
    """
    xp = np.pad(x_nhwc, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    n, h, w, c = x_nhwc.shape
    win = sliding_window_view(xp, (k, k), axis=(1, 2))  # (N, H, W, C, k, k), no copy
    return win.transpose(0, 1, 2, 4, 5, 3).reshape(n * h * w, k * k * c)


def _conv_same(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """'same' convolution (NCHW) by im2col and one GEMM; returns the output and the columns."""
    n, _, h, wd = x.shape
    o, c, k, _ = w.shape
    cols = _im2col(x.transpose(0, 2, 3, 1), k, pad)
    y = cols @ w.transpose(0, 2, 3, 1).reshape(o, k * k * c).T + b  # (N*H*W, O)
    return np.ascontiguousarray(y.reshape(n, h, wd, o).transpose(0, 3, 1, 2)), cols


def _conv_backward(
    dy: np.ndarray, cols: np.ndarray, w: np.ndarray, pad: int, need_dx: bool
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Gradients of a 'same' convolution: input (full correlation with the flipped kernel), weight, bias."""
    n, o, h, wd = dy.shape
    _, c, k, _ = w.shape
    dy_nhwc = dy.transpose(0, 2, 3, 1)
    dw = (dy_nhwc.reshape(-1, o).T @ cols).reshape(o, k, k, c).transpose(0, 3, 1, 2)
    db = dy.sum(axis=(0, 2, 3))
    dx = None
    if need_dx:
        dcols = _im2col(dy_nhwc, k, pad)  # (N*H*W, k*k*O)
        wflip = w[:, :, ::-1, ::-1].transpose(2, 3, 0, 1).reshape(k * k * o, c)
        dx = np.ascontiguousarray((dcols @ wflip).reshape(n, h, wd, c).transpose(0, 3, 1, 2))
    return dx, np.ascontiguousarray(dw), db


def _pool2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2x2 max pooling, stride 2, and the argmax mask for backward."""
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = r.max(axis=(3, 5))
    mask = r == out[:, :, :, None, :, None]
    return out, mask


def _pool2_backward(dy: np.ndarray, mask: np.ndarray) -> np.ndarray:
    n, c, h2, _, w2, _ = mask.shape
    return (mask * dy[:, :, :, None, :, None]).reshape(n, c, h2 * 2, w2 * 2)


class NumpyCNN:
    """The Dali CNN with SGD + momentum (PyTorch's update rule)."""

    def __init__(self, params: dict[str, np.ndarray], lr: float, momentum: float) -> None:
        self.p = {k: np.array(v, dtype=np.float32) for k, v in params.items()}
        self.buf = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.lr, self.momentum, self.steps = lr, momentum, 0

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        """One forward, backward and update; returns the loss."""
        p = self.p
        a1, cols1 = _conv_same(x, p["0.weight"], p["0.bias"], 2)
        r1 = np.maximum(a1, 0)
        h1, m1 = _pool2(r1)
        a2, cols2 = _conv_same(h1, p["3.weight"], p["3.bias"], 2)
        r2 = np.maximum(a2, 0)
        h2, m2 = _pool2(r2)
        f = h2.reshape(len(x), -1)
        a3 = f @ p["7.weight"].T + p["7.bias"]
        r3 = np.maximum(a3, 0)
        logits = r3 @ p["9.weight"].T + p["9.bias"]
        loss, g = _softmax_ce(logits, y)
        grads = {"9.weight": g.T @ r3, "9.bias": g.sum(0)}
        g = (g @ p["9.weight"]) * (a3 > 0)
        grads["7.weight"], grads["7.bias"] = g.T @ f, g.sum(0)
        g = (g @ p["7.weight"]).reshape(h2.shape)
        g = _pool2_backward(g, m2) * (a2 > 0)
        g, grads["3.weight"], grads["3.bias"] = _conv_backward(g, cols2, p["3.weight"], 2, True)
        g = _pool2_backward(g, m1) * (a1 > 0)
        _, grads["0.weight"], grads["0.bias"] = _conv_backward(g, cols1, p["0.weight"], 2, False)
        first = self.steps == 0
        for k, gk in grads.items():
            buf = self.buf[k]
            if first:
                buf[...] = gk
            else:
                buf *= self.momentum
                buf += gk
            p[k] -= self.lr * buf
        self.steps += 1
        return loss


class NumpyMLP:
    """MLP (Linear-ReLU-Linear-ReLU-Linear) with Adam (PyTorch's update rule)."""

    def __init__(
        self, params: dict[str, np.ndarray], lr: float, betas=(0.9, 0.999), eps: float = 1e-8
    ) -> None:
        self.p = {k: np.array(v, dtype=np.float32) for k, v in params.items()}
        self.m = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, 0

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        """One forward, backward and update; returns the loss."""
        p = self.p
        a1 = x @ p["0.weight"].T + p["0.bias"]
        r1 = np.maximum(a1, 0)
        a2 = r1 @ p["2.weight"].T + p["2.bias"]
        r2 = np.maximum(a2, 0)
        logits = r2 @ p["4.weight"].T + p["4.bias"]
        loss, g = _softmax_ce(logits, y)
        grads = {"4.weight": g.T @ r2, "4.bias": g.sum(0)}
        g = (g @ p["4.weight"]) * (a2 > 0)
        grads["2.weight"], grads["2.bias"] = g.T @ r1, g.sum(0)
        g = (g @ p["2.weight"]) * (a1 > 0)
        grads["0.weight"], grads["0.bias"] = g.T @ x, g.sum(0)
        self.t += 1
        b1, b2 = self.betas
        step_size = self.lr / (1 - b1**self.t)
        inv_bc2 = 1 / math.sqrt(1 - b2**self.t)
        for k, gk in grads.items():
            m, v = self.m[k], self.v[k]
            m *= b1
            m += (1 - b1) * gk
            v *= b2
            v += (1 - b2) * gk * gk
            p[k] -= step_size * m / (np.sqrt(v) * inv_bc2 + self.eps)
        return loss
