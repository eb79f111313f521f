"""Scatter-adds as in graph neural networks: np.add.at message passing, degrees, a 2-D histogram, maxima."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# nodes, edges, features
SIZES = {"small": (100, 600, 8), "medium": (20_000, 200_000, 32), "large": (200_000, 2_000_000, 64)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Two rounds of mean-aggregation message passing; returns aggregates and the scatter results."""
    n, e, f = SIZES[size]
    rng = default_rng(10)
    src = np.asarray(rng.integers(0, n, e))
    dst = np.asarray(rng.integers(0, n, e))
    h = np.asarray(rng.normal(size=(n, f)))
    w = np.asarray(rng.normal(size=(f, f)) / f**0.5)

    deg = np.zeros(n)
    np.add.at(deg, dst, 1)
    for _ in range(2):
        agg = np.zeros((n, f))
        np.add.at(agg, dst, h[src])
        h = np.tanh((agg / np.maximum(deg, 1)[:, None]) @ w + h)

    # the buffered-indexing gotcha: duplicates in `a[idx] += 1` count once, np.add.at counts all
    buffered = np.zeros(n)
    buffered[dst] += 1
    hist2d = np.zeros((16, 16), dtype=np.int64)
    np.add.at(hist2d, (src % 16, dst % 16), 1)
    best = np.full(n, -np.inf)
    np.maximum.at(best, dst, h[src, 0])
    return {"h": h, "deg": deg, "buffered": buffered, "hist2d": hist2d, "best": best}
