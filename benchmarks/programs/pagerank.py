"""PageRank by power iteration on a random directed graph with dangling nodes, until the L1 change is small."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# nodes, average out-degree
SIZES = {"small": (80, 4), "medium": (2_000, 8), "large": (8_000, 8)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Rank the nodes; returns the rank vector, the iteration count and the ten best nodes."""
    n, degree = SIZES[size]
    rng = default_rng(19)
    adj = np.asarray(rng.random((n, n)) < degree / n).astype(np.float64)
    adj[:, : n // 10] = 0.0  # some nodes no one links to
    adj[n // 2 : n // 2 + 3] = 0.0  # dangling nodes, no out-links
    out_degree = adj.sum(axis=1)
    dangling = out_degree == 0
    M = (adj / np.where(dangling, 1.0, out_degree)[:, None]).T
    d = 0.85

    r = np.full(n, 1.0 / n)
    iterations = 0
    for _ in range(200):
        r_new = d * (M @ r) + d * r[dangling].sum() / n + (1 - d) / n
        iterations += 1
        delta = np.abs(r_new - r).sum()
        r = r_new
        if delta < 1e-12:
            break
    top = np.argsort(-r, kind="stable")[:10]
    return {"rank": r, "iterations": iterations, "top": top, "total": r.sum()}
