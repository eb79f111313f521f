"""Realistic NumPy programs, each `run(np, size)` written once against the namespace it is given.

`run(numpy)` and `run(lazygraph)` are the same code; the data comes from NumPy's seeded
`default_rng` and enters through `np.asarray`. `run.py` compares and times the two.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PROGRAMS: tuple[str, ...] = (
    "kmeans",
    "heat",
    "pca",
    "life",
    "nbody",
    "montecarlo",
    "filters",
    "histogram",
    "attention",
    "running_stats",
    "scatter_add",
    "groupby",
    "mlp",
    "polyfit",
    "int_overflow",
    "float16",
    "jacobi",
    "conjugate_gradient",
    "pagerank",
    "knn",
    "mandelbrot",
    "spectral",
)

SIZES: tuple[str, ...] = ("small", "medium", "large")


def load(name: str) -> ModuleType:
    """The module of the program called `name` (it defines `run(np, size)`)."""
    if name not in PROGRAMS:
        raise KeyError(f"no program {name!r}; the programs are {', '.join(PROGRAMS)}")
    return importlib.import_module(f"{__name__}.{name}")
