"""Helpers shared by several test files: structural-key checks, fused-kernel runs, e-graph inputs.

The cache-state fixtures (`memory_cache`, `cache_dir`) live in conftest.py; files take them with
`pytestmark = pytest.mark.usefixtures(...)`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

import lazygraph as lg
from cache.key import Walk, full_walk, walk
from jit import kernel
from jit.runner import run_graph
from lazygraph.engine.evaluate import schedule
from ops.settings import SETTINGS
from optimizer.superopt.apply import SGraph


def walked(roots: list) -> tuple[Walk, Walk]:
    """`walk`'s result and the full walk's, after checking they give the same key, roots and nodes."""
    w, full = walk(roots), full_walk(roots)
    assert w.key == full.key and w.roots == full.roots
    assert len(w.nodes) == len(full.nodes) and all(a is b for a, b in zip(w.nodes, full.nodes))
    return w, full


def run_kernels(
    fn: Callable[..., Any], arrays: tuple[np.ndarray, ...], module: ModuleType, name: str, value: Any
) -> tuple[list[np.ndarray], list[str]]:
    """fn(lg, ...) through fused kernels built with `module.name = value`, and the kernels' sources.

    The kernel cache is emptied for the run (so every kernel is rendered with `value`) and
    restored after it, with the module's setting.
    """
    saved, saved_value = kernel._kernels, getattr(module, name)
    kernel._kernels = {}
    setattr(module, name, value)
    try:
        with SETTINGS.override(jit_background=False), np.errstate(all="ignore"):
            out = fn(lg, *(lg.asarray(a) for a in arrays))
            out = out if isinstance(out, tuple) else (out,)
            roots = [o.node for o in out]
            got = [np.asarray(g) for g in run_graph(schedule(roots), roots)]
        srcs = [v.source for k in kernel._kernels.values() for v in k.variants.values()]
    finally:
        kernel._kernels = saved
        setattr(module, name, saved_value)
    return got, srcs


def mixed(n: int = 6) -> SGraph:
    """float64: matmuls of one input (ReLUs, one by value), a product chain, pooled convolutions."""
    f64 = np.float64
    sg = SGraph()
    x = sg.leaf("input", (4, n), f64)
    zero = sg.leaf("scalar", (), f64, value=0.0)
    ws = [sg.leaf("weight", (n, n), f64) for _ in range(3)]
    ys = [sg.add("matmul", [x, w]) for w in ws]
    ys[0] = sg.add("maximum", [ys[0], zero])
    chain = sg.add("matmul", [sg.add("matmul", [ys[1], ws[2]]), ws[0]])
    img = sg.leaf("input", (1, 2, 5, 5), f64)
    convs = [sg.add("conv2d", [img, sg.leaf("weight", (2, 2, 3, 3), f64)], {"padding": 1}) for _ in range(2)]
    pools = [sg.add("avg_pool2d", [c], {"kernel_size": 3, "stride": 1, "padding": 1}) for c in convs]
    sg.outputs = [sg.add("add", [sg.add("add", [ys[0], ys[2]]), chain]), sg.add("add", pools)]
    return sg
