"""Polynomial least-squares fits: np.polyfit/polyval, a Vandermonde lstsq, normal equations, Horner's rule."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# samples, degree, independent series fitted at once
SIZES = {"small": (200, 5, 4), "medium": (100_000, 7, 16), "large": (1_000_000, 9, 64)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Fit noisy polynomials several ways; returns coefficients, fitted values and residuals."""
    n, deg, series = SIZES[size]
    rng = default_rng(14)
    x = np.linspace(-1.0, 1.0, n)
    true = np.asarray(rng.normal(size=(deg + 1, series)))
    V = np.vander(x, deg + 1)
    Y = V @ true + np.asarray(rng.normal(scale=0.05, size=(n, series)))

    coeffs = np.polyfit(x, Y, deg)  # one column of coefficients per series
    fitted0 = np.polyval(coeffs[:, 0], x)
    lstsq_coeffs, residuals, rank, _ = np.linalg.lstsq(V, Y, rcond=None)
    normal = np.linalg.solve(V.T @ V, V.T @ Y)

    horner = np.zeros_like(Y)
    for c in normal:
        horner = horner * x[:, None] + c
    rms = np.sqrt(((Y - horner) ** 2).mean(axis=0))
    return {
        "coeffs": coeffs,
        "fitted0": fitted0,
        "lstsq": lstsq_coeffs,
        "residuals": residuals,
        "rank": rank,
        "normal": normal,
        "rms": rms,
        "r2": 1 - ((Y - horner) ** 2).sum(axis=0) / ((Y - Y.mean(axis=0)) ** 2).sum(axis=0),
    }
