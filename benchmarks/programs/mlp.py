"""A two-layer MLP with hand-written backprop and full-batch SGD, in float32, on a spiral data set."""

from __future__ import annotations

from typing import Any

import numpy
from numpy.random import default_rng

# points per class, classes, hidden width, epochs
SIZES = {"small": (100, 3, 32, 30), "medium": (1_000, 5, 128, 50), "large": (20_000, 10, 1024, 50)}


def _spiral(per_class: int, classes: int) -> tuple[Any, Any]:
    """The classic spiral toy data (real NumPy), features float32 and int64 labels."""
    rng = default_rng(12)
    x, y = [], []
    for c in range(classes):
        r = numpy.linspace(0.0, 1.0, per_class)
        t = numpy.linspace(c * 4.0, (c + 1) * 4.0, per_class) + rng.normal(0, 0.2, per_class)
        x.append(numpy.c_[r * numpy.sin(t), r * numpy.cos(t)])
        y.append(numpy.full(per_class, c))
    return numpy.concatenate(x).astype(numpy.float32), numpy.concatenate(y)


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Train the MLP; returns the loss curve, the trained weights and the training accuracy."""
    per_class, classes, hidden, epochs = SIZES[size]
    xs, ys = _spiral(per_class, classes)
    rng = default_rng(13)
    X, y = np.asarray(xs), np.asarray(ys)
    n = X.shape[0]
    W1 = np.asarray(rng.normal(0, 1.0, (2, hidden)), dtype=np.float32)
    b1 = np.zeros(hidden, dtype=np.float32)
    W2 = np.asarray(rng.normal(0, 1.0 / hidden**0.5, (hidden, classes)), dtype=np.float32)
    b2 = np.zeros(classes, dtype=np.float32)
    lr, reg = 0.5, 1e-3

    losses = []
    for _ in range(epochs):
        hid = np.maximum(0, X @ W1 + b1)
        logits = hid @ W2 + b2
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        loss = -np.log(probs[np.arange(n), y]).mean() + 0.5 * reg * ((W1**2).sum() + (W2**2).sum())
        losses.append(loss)

        dlogits = probs.copy()
        dlogits[np.arange(n), y] -= 1
        dlogits /= n
        dW2 = hid.T @ dlogits + reg * W2
        db2 = dlogits.sum(axis=0)
        dhid = dlogits @ W2.T
        dhid[hid <= 0] = 0
        dW1 = X.T @ dhid + reg * W1
        db1 = dhid.sum(axis=0)
        W1 -= lr * dW1
        b1 -= lr * db1
        W2 -= lr * dW2
        b2 -= lr * db2

    predictions = np.argmax(np.maximum(0, X @ W1 + b1) @ W2 + b2, axis=1)
    return {
        "losses": np.array(losses),
        "W1": W1,
        "b1": b1,
        "W2": W2,
        "b2": b2,
        "accuracy": (predictions == y).mean(),
    }
