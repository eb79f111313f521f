"""Principal component analysis of correlated data, by the covariance's eigendecomposition and by SVD."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# samples, features, components kept
SIZES = {"small": (500, 12, 3), "medium": (20_000, 64, 8), "large": (200_000, 128, 16)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Fit PCA two ways; returns explained variance, sign-fixed components, projections, singular values."""
    n, d, k = SIZES[size]
    rng = default_rng(2)
    mixing = rng.normal(size=(d, d)) * np.asarray(rng.random(d) * 3)[:, None]
    X = np.asarray(rng.normal(size=(n, d))) @ np.asarray(mixing) + 5.0

    mean = X.mean(axis=0)
    Xc = X - mean
    cov = np.cov(X, rowvar=False)
    evals, evecs = np.linalg.eigh(cov)
    order = np.argsort(evals)[::-1]
    evals, evecs = evals[order], evecs[:, order]
    # make the largest entry of every component positive (eigenvectors are defined up to sign)
    signs = np.sign(evecs[np.abs(evecs).argmax(axis=0), np.arange(d)])
    components = (evecs * signs)[:, :k].T
    explained = evals[:k] / evals.sum()
    projected = Xc @ components.T

    _, s, vt = np.linalg.svd(Xc, full_matrices=False)
    svd_var = s**2 / (n - 1)
    agreement = np.abs((vt[:k] * components).sum(axis=1))
    return {
        "explained_ratio": explained,
        "components": components,
        "projected": projected,
        "singular_values": s,
        "svd_variance": svd_var[:k],
        "agreement": agreement,
        "cov_matches": np.allclose(svd_var, evals),
    }
