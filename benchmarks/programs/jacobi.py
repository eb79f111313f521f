"""Jacobi iteration for a diagonally dominant linear system, checking convergence every iteration."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# unknowns, maximum iterations
SIZES = {"small": (60, 500), "medium": (1_000, 500), "large": (4_000, 500)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Solve Ax = b by Jacobi until the update is below tolerance; returns x, iterations and the residuals."""
    n, max_iter = SIZES[size]
    rng = default_rng(17)
    A = np.asarray(rng.uniform(-1.0, 1.0, (n, n)))
    A = A + np.diag(np.abs(A).sum(axis=1) * 1.2)  # strictly diagonally dominant
    b = np.asarray(rng.normal(size=n))

    D = np.diag(A)
    R = A - np.diagflat(D)
    x = np.zeros(n)
    residuals = []
    iterations = max_iter
    for it in range(max_iter):
        x_new = (b - R @ x) / D
        residuals.append(np.linalg.norm(A @ x_new - b))
        if np.linalg.norm(x_new - x, ord=np.inf) < 1e-10:
            x = x_new
            iterations = it + 1
            break
        x = x_new
    return {"x": x, "iterations": iterations, "residuals": np.array(residuals), "check": A @ x - b}
