"""Mandelbrot escape times with complex128 arrays, updating only the points that have not escaped."""

from __future__ import annotations

from typing import Any

import numpy

# grid height, width, maximum iterations
SIZES = {"small": (40, 60, 30), "medium": (400, 600, 80), "large": (1200, 1800, 100)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Iterate z = z**2 + c under a boolean mask; returns escape counts and the final |z|."""
    h, w, max_iter = SIZES[size]
    # The grid enters as data, as every program's inputs do: built from literals inside the
    # program, the whole result is constant-folded once and a warm call only replays it.
    x = np.asarray(numpy.linspace(-2.2, 0.8, w))
    y = np.asarray(numpy.linspace(-1.2, 1.2, h))
    c = x[None, :] + 1j * y[:, None]
    z = np.zeros_like(c)
    counts = np.zeros(c.shape, dtype=np.int32)
    for _ in range(max_iter):
        active = np.abs(z) <= 2.0
        z[active] = z[active] ** 2 + c[active]
        counts[active] += 1
    inside = counts == max_iter
    return {
        "counts": counts,
        "abs_z": np.abs(np.where(inside, z, 0)),
        "area": inside.mean() * 3.0 * 2.4,
        "real": z.real[inside].sum(),
    }
