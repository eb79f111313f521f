"""k-nearest-neighbour classification: distances by the expansion trick, argpartition, a majority vote."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# training points, queries, features, classes, k
SIZES = {
    "small": (400, 100, 5, 3, 7),
    "medium": (10_000, 1_000, 16, 10, 15),
    "large": (100_000, 5_000, 32, 10, 15),
}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Classify queries by their k nearest training points; returns neighbours, predictions, accuracy."""
    n, q, d, classes, k = SIZES[size]
    rng = default_rng(20)
    centers = rng.normal(scale=2.0, size=(classes, d))
    train_y = rng.integers(0, classes, n)
    test_y = rng.integers(0, classes, q)
    X = np.asarray(centers[train_y] + rng.normal(size=(n, d)))
    Q = np.asarray(centers[test_y] + rng.normal(size=(q, d)))
    y = np.asarray(train_y)

    d2 = (Q**2).sum(axis=1)[:, None] - 2 * Q @ X.T + (X**2).sum(axis=1)[None, :]
    d2 = np.maximum(d2, 0)
    nearest = np.argpartition(d2, k, axis=1)[:, :k]
    near_d = np.take_along_axis(d2, nearest, axis=1)
    order = np.argsort(near_d, axis=1)
    nearest = np.take_along_axis(nearest, order, axis=1)
    votes = y[nearest]
    tally = (votes[:, :, None] == np.arange(classes)).sum(axis=1)
    predictions = tally.argmax(axis=1)
    return {
        "nearest": nearest,
        "distances": np.sqrt(np.sort(near_d, axis=1)),
        "tally": tally,
        "predictions": predictions,
        "accuracy": (predictions == np.asarray(test_y)).mean(),
    }
