"""Conway's game of life on a torus, neighbours counted with `np.roll`, on a uint8 grid."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# grid side, generations
SIZES = {"small": (48, 40), "medium": (512, 100), "large": (2048, 100)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Step a random soup; returns the final grid and the population of every generation."""
    n, steps = SIZES[size]
    rng = default_rng(3)
    grid = np.asarray(rng.random((n, n)) < 0.3).astype(np.uint8)
    glider = np.array([[0, 1, 0], [0, 0, 1], [1, 1, 1]], dtype=np.uint8)
    grid[1:4, 1:4] = glider

    population = []
    for _ in range(steps):
        neighbours = sum(
            np.roll(np.roll(grid, dy, axis=0), dx, axis=1)
            for dy in (-1, 0, 1)
            for dx in (-1, 0, 1)
            if (dy, dx) != (0, 0)
        )
        grid = ((neighbours == 3) | ((grid == 1) & (neighbours == 2))).astype(np.uint8)
        population.append(int(grid.sum()))
    alive = np.count_nonzero(grid)
    return {"grid": grid, "population": np.array(population), "alive": alive, "rows": grid.sum(axis=1)}
