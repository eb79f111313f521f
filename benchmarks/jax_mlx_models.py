"""bench_train.py's models as JAX (jax.jit) and MLX (CPU, mx.compile) training steps.

The peers start from the same weights as lazygraph's model (PyTorch's layout), compute the
same loss (mean softmax cross-entropy) and apply the same update rules as PyTorch (SGD with
momentum for the CNN, Adam with bias correction for the MLP), written out by hand so that
no library default (MLX's Adam skips bias correction unless asked) changes the numbers.
Each step returns the loss as a Python float, which waits for the device to finish.
A peer whose library is not installed is None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError:  # optional peer
    jax = jnp = None
try:
    import mlx.core as mx
except ImportError:  # optional peer
    mx = None

Step = Callable[[np.ndarray, np.ndarray], float]
B1, B2, EPS = 0.9, 0.999, 1e-8


def _xent(xp: Any, logits: Any, y: Any) -> Any:
    """Mean cross-entropy of integer labels in namespace `xp` (jax.numpy or mlx.core)."""
    m = logits.max(axis=1, keepdims=True)
    z = logits - m
    lse = xp.log(xp.exp(z).sum(axis=1))
    picked = xp.take_along_axis(z, y[:, None], axis=1)[:, 0]
    return (lse - picked).mean()


def _mlp(xp: Any, p: dict[str, Any], x: Any) -> Any:
    h = xp.maximum(x @ p["0.weight"].T + p["0.bias"], 0)
    h = xp.maximum(h @ p["2.weight"].T + p["2.bias"], 0)
    return h @ p["4.weight"].T + p["4.bias"]


def _pool(h: Any, channels_last: bool) -> Any:
    """2x2 max pooling by a reshape (the sizes are even)."""
    if channels_last:
        n, hh, ww, c = h.shape
        return h.reshape(n, hh // 2, 2, ww // 2, 2, c).max(axis=(2, 4))
    n, c, hh, ww = h.shape
    return h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))


def _cnn_jax(p: dict[str, Any], x: Any) -> Any:
    def conv(h: Any, w: Any, b: Any) -> Any:
        dn = ("NCHW", "OIHW", "NCHW")
        out = jax.lax.conv_general_dilated(h, w, (1, 1), ((2, 2), (2, 2)), dimension_numbers=dn)
        return out + b[None, :, None, None]

    h = _pool(jnp.maximum(conv(x, p["0.weight"], p["0.bias"]), 0), False)
    h = _pool(jnp.maximum(conv(h, p["3.weight"], p["3.bias"]), 0), False)
    h = jnp.maximum(h.reshape(h.shape[0], -1) @ p["7.weight"].T + p["7.bias"], 0)
    return h @ p["9.weight"].T + p["9.bias"]


def _cnn_mlx(p: dict[str, Any], x: Any) -> Any:
    # MLX convolves channels-last (NHWC input, OHWI weights); flatten in PyTorch's (C, H, W) order
    h = _pool(mx.maximum(mx.conv2d(x, p["0.weight"], padding=2) + p["0.bias"], 0), True)
    h = _pool(mx.maximum(mx.conv2d(h, p["3.weight"], padding=2) + p["3.bias"], 0), True)
    h = h.transpose(0, 3, 1, 2).reshape(h.shape[0], -1)
    h = mx.maximum(h @ p["7.weight"].T + p["7.bias"], 0)
    return h @ p["9.weight"].T + p["9.bias"]


def jax_step(name: str, weights: dict[str, np.ndarray], lr: float, momentum: float) -> Step | None:
    """The whole step as one jax.jit executable; the step number enters as scalars (bias
    corrections, first-step flag), so every step runs the same executable."""
    if jax is None:
        return None
    model = _cnn_jax if name == "cnn" else _mlp

    def loss_fn(p: dict, x: Any, y: Any) -> Any:
        return _xent(jnp, model(p, x) if name == "cnn" else model(jnp, p, x), y)

    def step(p: dict, s1: dict, s2: dict, x: Any, y: Any, c1: Any, c2: Any, first: Any) -> tuple:
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        np_, n1, n2 = {}, {}, {}
        for k in p:
            if name == "cnn":
                buf = jnp.where(first, g[k], momentum * s1[k] + g[k])
                n1[k], n2[k], np_[k] = buf, s2[k], p[k] - lr * buf
            else:
                m = B1 * s1[k] + (1 - B1) * g[k]
                v = B2 * s2[k] + (1 - B2) * g[k] * g[k]
                n1[k], n2[k] = m, v
                np_[k] = p[k] - c1 * m / (jnp.sqrt(v) * c2 + EPS)
        return loss, np_, n1, n2

    jstep = jax.jit(step, donate_argnums=(0, 1, 2))
    state = {
        "p": {k: jnp.asarray(v) for k, v in weights.items()},
        "s1": {k: jnp.zeros(v.shape, jnp.float32) for k, v in weights.items()},
        "s2": {k: jnp.zeros(v.shape, jnp.float32) for k, v in weights.items()},
        "t": 0,
    }

    def run(x: np.ndarray, y: np.ndarray) -> float:
        state["t"] = t = state["t"] + 1
        c1 = np.float32(lr / (1 - B1**t))
        c2 = np.float32(1 / math.sqrt(1 - B2**t))
        loss, state["p"], state["s1"], state["s2"] = jstep(
            state["p"], state["s1"], state["s2"], x, y, c1, c2, np.bool_(t == 1)
        )
        return float(loss)

    return run


def mlx_step(name: str, weights: dict[str, np.ndarray], lr: float, momentum: float) -> Step | None:
    """The step as one mx.compile'd function on MLX's CPU device."""
    if mx is None:
        return None
    mx.set_default_device(mx.cpu)
    p = {}
    for k, v in weights.items():
        # conv weights OIHW -> OHWI for channels-last convolution
        p[k] = mx.array(v.transpose(0, 2, 3, 1) if v.ndim == 4 else v)

    def loss_fn(params: dict, x: Any, y: Any) -> Any:
        logits = _cnn_mlx(params, x) if name == "cnn" else _mlp(mx, params, x)
        return _xent(mx, logits, y)

    grad_fn = mx.value_and_grad(loss_fn)

    def step(params: dict, s1: dict, s2: dict, x: Any, y: Any, c1: Any, c2: Any, first: Any) -> tuple:
        loss, g = grad_fn(params, x, y)
        np_, n1, n2 = {}, {}, {}
        for k in params:
            if name == "cnn":
                buf = mx.where(first, g[k], momentum * s1[k] + g[k])
                n1[k], n2[k], np_[k] = buf, s2[k], params[k] - lr * buf
            else:
                m = B1 * s1[k] + (1 - B1) * g[k]
                v = B2 * s2[k] + (1 - B2) * g[k] * g[k]
                n1[k], n2[k] = m, v
                np_[k] = params[k] - c1 * m / (mx.sqrt(v) * c2 + EPS)
        return loss, np_, n1, n2

    cstep = mx.compile(step)
    state = {"p": p, "s1": {k: mx.zeros_like(v) for k, v in p.items()}, "t": 0}
    state["s2"] = {k: mx.zeros_like(v) for k, v in p.items()}

    def run(x: np.ndarray, y: np.ndarray) -> float:
        state["t"] = t = state["t"] + 1
        xm = mx.array(x.transpose(0, 2, 3, 1) if x.ndim == 4 else x)
        c1 = mx.array(lr / (1 - B1**t), mx.float32)
        c2 = mx.array(1 / math.sqrt(1 - B2**t), mx.float32)
        out = cstep(state["p"], state["s1"], state["s2"], xm, mx.array(y), c1, c2, mx.array(t == 1))
        loss, state["p"], state["s1"], state["s2"] = out
        mx.eval(loss, state["p"], state["s1"], state["s2"])
        return loss.item()

    return run
