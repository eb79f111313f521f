"""Running statistics over a stream of chunks: Welford/Chan merging, moving averages, EMA, running max."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# chunks, rows per chunk, features, moving-average window
SIZES = {"small": (20, 50, 6, 8), "medium": (100, 2_000, 32, 32), "large": (200, 20_000, 64, 64)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Stream chunks through running mean/variance and smoothers; returns the statistics."""
    chunks, rows, feats, window = SIZES[size]
    rng = default_rng(9)
    trend = np.linspace(0.0, 3.0, chunks * rows)[:, None]
    data = np.asarray(rng.normal(size=(chunks * rows, feats)) * rng.uniform(0.5, 2.0, feats)) + trend

    count, mean, m2 = 0, np.zeros(feats), np.zeros(feats)
    ema = np.zeros(feats)
    running_max = np.full(feats, -np.inf)
    history = []
    for c in range(chunks):
        block = data[c * rows : (c + 1) * rows]
        n_b = block.shape[0]
        mean_b = block.mean(axis=0)
        m2_b = ((block - mean_b) ** 2).sum(axis=0)
        delta = mean_b - mean
        total = count + n_b
        mean = mean + delta * n_b / total
        m2 = m2 + m2_b + delta**2 * count * n_b / total
        count = total
        ema = 0.9 * ema + 0.1 * mean_b
        running_max = np.maximum(running_max, block.max(axis=0))
        history.append(np.sqrt(m2 / (count - 1)))

    series = data[:, 0]
    moving = np.convolve(series, np.ones(window) / window, mode="valid")
    c = np.cumsum(np.insert(series, 0, 0.0))
    moving_cumsum = (c[window:] - c[:-window]) / window
    zscores = (data - data.mean(axis=0)) / data.std(axis=0)
    return {
        "mean": mean,
        "std": np.sqrt(m2 / (count - 1)),
        "std_check": data.std(axis=0, ddof=1),
        "ema": ema,
        "running_max": running_max,
        "history": np.stack(history),
        "moving": moving,
        "moving_cumsum": moving_cumsum,
        "cummax": np.maximum.accumulate(series),
        "zscore_extremes": np.abs(zscores).max(axis=0),
    }
