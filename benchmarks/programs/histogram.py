"""Histograms of a uint8 image: np.histogram, bincount, histogram equalisation by a lookup table, Otsu."""

from __future__ import annotations

from typing import Any

import numpy
from numpy.random import default_rng

# image height, width
SIZES = {"small": (64, 80), "medium": (1080, 1920), "large": (4320, 7680)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Equalise a low-contrast image and find its Otsu threshold; returns histograms, LUT and results."""
    h, w = SIZES[size]
    rng = default_rng(7)
    dark = rng.normal(70, 15, (h, w // 2))
    light = rng.normal(140, 20, (h, w - w // 2))
    img = np.asarray(numpy.hstack([dark, light]).clip(0, 255).astype("uint8"))

    hist, edges = np.histogram(img, bins=32, range=(0, 256))
    counts = np.bincount(img.ravel(), minlength=256)
    cdf = counts.cumsum()
    cdf_min = cdf[cdf > 0].min()
    lut = np.round((cdf - cdf_min) * 255.0 / (cdf[-1] - cdf_min)).clip(0, 255).astype(np.uint8)
    equalised = lut[img]
    eq_counts = np.bincount(equalised.ravel(), minlength=256)

    p = counts / counts.sum()
    levels = np.arange(256)
    w0 = np.cumsum(p)
    mu = np.cumsum(p * levels)
    mu_total = mu[-1]
    denom = w0 * (1.0 - w0)
    between = np.where(denom > 0, (mu_total * w0 - mu) ** 2 / np.where(denom > 0, denom, 1.0), 0.0)
    threshold = int(np.argmax(between))
    foreground = img > threshold
    return {
        "hist": hist,
        "edges": edges,
        "counts": counts,
        "lut": lut,
        "equalised": equalised,
        "eq_counts": eq_counts,
        "threshold": threshold,
        "foreground_fraction": foreground.mean(),
        "between": between,
    }
