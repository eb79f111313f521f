"""Multi-head causal self-attention in float32, written by hand: projections, masked softmax, LayerNorm."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# batch, sequence length, model width, heads
SIZES = {"small": (2, 16, 32, 4), "medium": (8, 256, 256, 8), "large": (16, 1024, 512, 8)}


def _softmax(np: Any, x: Any, axis: int = -1) -> Any:
    """Numerically stable softmax."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layer_norm(np: Any, x: Any, eps: float = 1e-5) -> Any:
    """LayerNorm over the last axis, no affine parameters."""
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """One transformer attention block; returns the block's output and the attention weights."""
    b, t, d, heads = SIZES[size]
    dh = d // heads
    rng = default_rng(8)
    x = np.asarray(rng.normal(size=(b, t, d)), dtype=np.float32)
    wq, wk, wv, wo = (np.asarray(rng.normal(size=(d, d)) / d**0.5, dtype=np.float32) for _ in range(4))

    def split(z: Any) -> Any:
        return z.reshape(b, t, heads, dh).transpose(0, 2, 1, 3)

    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    scores = q @ k.transpose(0, 1, 3, 2) / dh**0.5
    mask = np.triu(np.ones((t, t), dtype=bool), k=1)
    scores = np.where(mask, -np.inf, scores)
    weights = _softmax(np, scores)
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    out = _layer_norm(np, x + context @ wo)
    entropy = -(weights * np.log(weights + 1e-9)).sum(axis=-1).mean()
    return {"out": out, "weights": weights, "entropy": entropy}
