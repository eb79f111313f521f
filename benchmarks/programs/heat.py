"""Explicit 2-D heat equation: a five-point stencil updating `u[1:-1, 1:-1]` in place, in a loop."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# grid side, time steps
SIZES = {"small": (64, 60), "medium": (512, 200), "large": (2048, 200)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Diffuse a hot square with a fixed hot edge; returns the field and the total heat every 10 steps."""
    n, steps = SIZES[size]
    rng = default_rng(1)
    u = np.zeros((n, n))
    u[n // 4 : 3 * n // 4, n // 4 : 3 * n // 4] = 1.0
    u += np.asarray(rng.random((n, n)) * 0.01)
    alpha = 0.2

    heat = []
    for step in range(steps):
        u[0, :] = 1.0  # hot top edge
        u[-1, :] = 0.0
        u[:, 0] = u[:, 1]  # insulated sides
        u[:, -1] = u[:, -2]
        lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
        u[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * lap
        if step % 10 == 0:
            heat.append(float(u.sum()))
    peak = np.unravel_index(np.argmax(u[1:-1, 1:-1]), (n - 2, n - 2))
    return {"u": u, "heat": heat, "peak": np.array(peak), "max": u.max(), "mean": u.mean()}
