"""Group-by aggregation: np.bincount with weights, np.unique inverse indices, sorted segments and reduceat."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# rows, distinct group ids
SIZES = {"small": (2_000, 40), "medium": (1_000_000, 1_000), "large": (10_000_000, 100_000)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Sales-style table grouped by store id; returns per-group count, sum, mean, std, max and the top group."""
    n, g = SIZES[size]
    rng = default_rng(11)
    ids = np.asarray(rng.choice(rng.integers(1000, 10**6, g), size=n))  # sparse, repeated ids
    amount = np.asarray(rng.gamma(2.0, 10.0, n))

    keys, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=amount)
    means = sums / counts
    sq = np.bincount(inverse, weights=amount**2)
    stds = np.sqrt(np.maximum(sq / counts - means**2, 0.0))
    check_counts = np.bincount(inverse, minlength=len(keys))

    order = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    maxima = np.maximum.reduceat(amount[order], starts)
    top = keys[np.argmax(sums)]
    return {
        "keys": keys,
        "counts": counts,
        "sums": sums,
        "means": means,
        "stds": stds,
        "check_counts": check_counts,
        "maxima": maxima,
        "top": top,
    }
