"""Differential checks for fused kernels: a program run through the JIT against NumPy.

`check(fn, *arrays)` runs `fn(np, *arrays)` eagerly and `fn(lg, *lazy arrays)` through
jit.runner (every fusable chain becomes a compiled C kernel), compares values, shapes and
dtypes, and renders every region it compiled as CUDA and compiles that with NVRTC too (when
pynvrtc is installed, as in CI). It returns the regions' operator names so tests can assert
that fusion happened.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import lazygraph as lg
from jit import backend, nvrtc
from jit.fusion import find_regions
from jit.kernel import compile_region
from jit.runner import run_graph
from lazygraph.engine.evaluate import schedule


def compile_cuda_for(region: Any, values: list[Any]) -> None:
    """Render the region's kernel for CUDA and compile it with NVRTC."""
    k = compile_region(region)
    arrays = [np.asarray(v) for (kind, _), v in zip(k.spec.arg_of_input, values) if kind == "array"]
    layout, _, _ = k.layout_for(arrays)
    binary = backend.get("cuda").compile(k.source(layout, "cuda").text)
    assert binary.data and binary.kind in ("ptx", "cubin")


def tolerance(dtype: np.dtype) -> dict[str, float]:
    """rtol/atol for comparing a fused result with NumPy's (summation order differs)."""
    if dtype == np.float32:
        return {"rtol": 2e-4, "atol": 1e-5}
    if dtype == np.float64:
        return {"rtol": 1e-9, "atol": 1e-12}
    return {"rtol": 0, "atol": 0}


def check(fn: Callable[..., Any], *arrays: np.ndarray, scale: float = 1.0) -> list[list[str]]:
    """Run `fn` both ways and compare (see the module docstring)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        expected = fn(np, *arrays)
    expected = expected if isinstance(expected, tuple) else (expected,)
    lazy = fn(lg, *(lg.asarray(a) for a in arrays))
    lazy = lazy if isinstance(lazy, tuple) else (lazy,)
    roots = [a.node for a in lazy]
    order = schedule(roots)
    regions = find_regions(order, roots)
    got = run_graph(order, roots)
    for e, g in zip(expected, got):
        e = np.asarray(e)
        assert g.shape == e.shape, (g.shape, e.shape)
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        tol = tolerance(e.dtype)
        np.testing.assert_allclose(g, e, rtol=tol["rtol"], atol=tol["atol"] * scale, equal_nan=True)
    if nvrtc.available():
        for r in regions:
            values = [c.buffer if c.buffer is not None else np.zeros(c.shape, c.dtype) for c in r.inputs]
            compile_cuda_for(r, values)
    return [[n.op.name for n in r.nodes] for r in regions]
