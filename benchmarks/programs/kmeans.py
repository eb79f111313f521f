"""K-means clustering (Lloyd's algorithm) on Gaussian blobs, stopping when the centroids settle."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# points, dimensions, clusters, maximum iterations
SIZES = {"small": (600, 4, 5, 12), "medium": (20_000, 8, 8, 20), "large": (200_000, 16, 16, 25)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Cluster blobs with k-means; returns centroids, labels and the inertia of every iteration."""
    n, d, k, iters = SIZES[size]
    rng = default_rng(0)
    centers = rng.normal(scale=4.0, size=(k, d))
    X = np.asarray(centers[rng.integers(0, k, n)] + rng.normal(size=(n, d)))
    centroids = X[rng.choice(n, size=k, replace=False)].copy()

    inertia = []
    for _ in range(iters):
        d2 = ((X[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        labels = d2.argmin(axis=1)
        inertia.append(d2.min(axis=1).sum())
        new = np.zeros_like(centroids)
        for j in range(k):
            members = X[labels == j]
            new[j] = members.mean(axis=0) if len(members) else centroids[j]
        shift = np.sqrt(((new - centroids) ** 2).sum(axis=1)).max()
        centroids = new
        if shift < 1e-8:
            break
    return {"centroids": centroids, "labels": labels, "inertia": np.array(inertia)}
