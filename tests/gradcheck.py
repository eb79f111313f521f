"""Central finite differences against lazygraph's reverse-mode gradients (float64)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import lazygraph as lg


def numeric_grad(
    f: Callable[[list[np.ndarray]], float], arrays: list[np.ndarray], i: int, eps: float
) -> np.ndarray:
    """d f / d arrays[i] by central differences, one element at a time."""
    base = [a.copy() for a in arrays]
    out = np.zeros_like(base[i])
    flat = out.reshape(-1)
    target = base[i].reshape(-1)
    for j in range(target.size):
        keep = target[j]
        target[j] = keep + eps
        hi = f(base)
        target[j] = keep - eps
        lo = f(base)
        target[j] = keep
        flat[j] = (hi - lo) / (2 * eps)
    return out


def check_grad(
    fn: Callable[..., lg.Array],
    *arrays: np.ndarray,
    wrt: tuple[int, ...] | None = None,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    seed: int = 0,
) -> None:
    """Assert that lg.grad of sum(fn(*xs) * r) matches finite differences for each input."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    wrt = tuple(range(len(arrays))) if wrt is None else wrt
    probe = fn(*[lg.asarray(a) for a in arrays])
    r = np.random.default_rng(seed).standard_normal(probe.shape)

    def value(arrs: list[np.ndarray]) -> float:
        return float((np.asarray(fn(*[lg.asarray(a) for a in arrs])) * r).sum())

    xs = [lg.asarray(a, requires_grad=i in wrt) for i, a in enumerate(arrays)]
    loss = (fn(*xs) * lg.asarray(r)).sum()
    grads = lg.grad(loss, [xs[i] for i in wrt])
    for i, g in zip(wrt, grads, strict=True):
        got = np.asarray(g)
        assert got.shape == arrays[i].shape, (got.shape, arrays[i].shape)
        assert got.dtype == arrays[i].dtype, (got.dtype, arrays[i].dtype)
        want = numeric_grad(value, arrays, i, eps)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")
