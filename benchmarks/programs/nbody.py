"""Gravitational n-body simulation: all-pairs forces by broadcasting, leapfrog integration, energy."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# bodies, steps
SIZES = {"small": (64, 20), "medium": (512, 40), "large": (2048, 20)}


def _accelerations(np: Any, pos: Any, mass: Any, eps: float) -> tuple[Any, Any]:
    """Accelerations of all bodies and the softened squared distances between them."""
    dx = pos[None, :, :] - pos[:, None, :]
    r2 = (dx**2).sum(axis=-1) + eps**2
    inv_r3 = r2**-1.5
    np.fill_diagonal(inv_r3, 0.0)
    acc = (dx * (inv_r3 * mass[None, :])[:, :, None]).sum(axis=1)
    return acc, r2


def _energy(np: Any, pos: Any, vel: Any, mass: Any, eps: float) -> Any:
    """Kinetic plus potential energy."""
    kinetic = 0.5 * (mass * (vel**2).sum(axis=1)).sum()
    i, j = np.triu_indices(len(mass), k=1)
    r = np.sqrt(((pos[i] - pos[j]) ** 2).sum(axis=1) + eps**2)
    potential = -(mass[i] * mass[j] / r).sum()
    return kinetic + potential


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Integrate a Plummer-like cluster; returns positions, velocities and the energy drift."""
    n, steps = SIZES[size]
    rng = default_rng(4)
    pos = np.asarray(rng.normal(size=(n, 3)))
    vel = np.asarray(rng.normal(scale=0.1, size=(n, 3)))
    mass = np.asarray(rng.uniform(0.5, 1.5, n) / n)
    vel -= (mass[:, None] * vel).sum(axis=0) / mass.sum()  # no net momentum
    dt, eps = 0.01, 0.05

    e0 = _energy(np, pos, vel, mass, eps)
    acc, _ = _accelerations(np, pos, mass, eps)
    for _ in range(steps):
        vel += 0.5 * dt * acc
        pos += dt * vel
        acc, _ = _accelerations(np, pos, mass, eps)
        vel += 0.5 * dt * acc
    e1 = _energy(np, pos, vel, mass, eps)
    com = (mass[:, None] * pos).sum(axis=0) / mass.sum()
    return {
        "pos": pos,
        "vel": vel,
        "energy": np.stack([e0, e1]),
        "drift": abs(float((e1 - e0) / e0)),
        "com": com,
    }
