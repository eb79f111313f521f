"""Conjugate gradient on a symmetric positive-definite system (a 2-D Poisson matrix plus a dense term)."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# grid side (unknowns = side**2), maximum iterations
SIZES = {"small": (8, 200), "medium": (30, 500), "large": (60, 1000)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Solve Ax = b by CG, stopping on the residual norm; returns x, the iteration count and the residuals."""
    side, max_iter = SIZES[size]
    n = side * side
    rng = default_rng(18)
    T = 2 * np.eye(side) - np.eye(side, k=1) - np.eye(side, k=-1)
    A = np.kron(T, np.eye(side)) + np.kron(np.eye(side), T)
    low_rank = np.asarray(rng.normal(size=(n, 4)))
    A = A + 0.01 * low_rank @ low_rank.T
    b = np.asarray(rng.normal(size=n))

    x = np.zeros(n)
    r = b - A @ x
    p = r.copy()
    rs = r @ r
    history = [np.sqrt(rs)]
    iterations = 0
    for _ in range(max_iter):
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rs_new = r @ r
        history.append(np.sqrt(rs_new))
        iterations += 1
        if np.sqrt(rs_new) < 1e-10:
            break
        p = r + (rs_new / rs) * p
        rs = rs_new
    return {"x": x, "iterations": iterations, "history": np.array(history), "residual": A @ x - b}
