"""Monte Carlo: pi from random points, and European, Asian and barrier options on simulated price paths."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# points for pi, price paths, time steps per path
SIZES = {"small": (20_000, 2_000, 32), "medium": (2_000_000, 50_000, 64), "large": (20_000_000, 200_000, 128)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Estimate pi and three option prices; returns the estimates and their standard errors."""
    n_points, n_paths, n_steps = SIZES[size]
    rng = default_rng(5)
    xy = np.asarray(rng.random((n_points, 2)))
    inside = (xy**2).sum(axis=1) <= 1.0
    pi = 4.0 * inside.mean()
    pi_err = 4.0 * inside.std() / np.sqrt(n_points)

    s0, strike, rate, sigma, T, barrier = 100.0, 105.0, 0.03, 0.2, 1.0, 130.0
    dt = T / n_steps
    z = np.asarray(rng.standard_normal((n_paths, n_steps)))
    increments = (rate - 0.5 * sigma**2) * dt + sigma * np.sqrt(dt) * z
    paths = s0 * np.exp(np.cumsum(increments, axis=1))
    discount = np.exp(-rate * T)

    european = discount * np.maximum(paths[:, -1] - strike, 0.0)
    asian = discount * np.maximum(paths.mean(axis=1) - strike, 0.0)
    knocked_out = paths.max(axis=1) >= barrier
    up_and_out = np.where(knocked_out, 0.0, european)
    payoffs = np.stack([european, asian, up_and_out])
    prices = payoffs.mean(axis=1)
    stderr = payoffs.std(axis=1, ddof=1) / np.sqrt(n_paths)
    return {
        "pi": pi,
        "pi_err": pi_err,
        "prices": prices,
        "stderr": stderr,
        "knock_out_rate": knocked_out.mean(),
        "percentiles": np.percentile(paths[:, -1], [5, 50, 95]),
    }
