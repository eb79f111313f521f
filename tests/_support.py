"""Helpers shared by several test files: evaluation counts, lazy inputs, structural-key checks,
fused-kernel runs, e-graph inputs.

The cache-state fixtures (`memory_cache`, `cache_dir`) live in conftest.py; files take them with
`pytestmark = pytest.mark.usefixtures(...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np
from hypothesis import strategies as st

import lazygraph as lg
from cache import template
from cache.key import Walk, full_walk, walk
from jit import kernel
from jit.runner import run_graph
from lazygraph.engine.evaluate import schedule
from ops.settings import SETTINGS
from optimizer.superopt.apply import SGraph


def evaluations() -> int:
    """How many evaluations this process has run (to check that a function only records)."""
    return lg.debug.evaluation_stats()["evaluations"]


@st.composite
def lazy_inputs(draw: st.DrawFn, a: np.ndarray) -> lg.Array:
    """A lazy array equal to `a`: a fresh one, a negative-stride view, or a strided slice."""
    kind = draw(st.sampled_from(["plain", "flipped", "strided"])) if a.ndim else "plain"
    if kind == "plain":
        return lg.asarray(a)
    if kind == "flipped":
        return lg.flip(lg.asarray(np.flip(a)))
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    big[..., 1::2] = a
    return lg.asarray(big)[..., 1::2]


def walked(roots: list) -> tuple[Walk, Walk]:
    """`walk`'s result and the full walk's, after checking they give the same key, roots and nodes."""
    w, full = walk(roots), full_walk(roots)
    assert w.key == full.key and w.roots == full.roots
    assert len(w.nodes) == len(full.nodes) and all(a is b for a, b in zip(w.nodes, full.nodes))
    return w, full


@contextmanager
def one_hint() -> Iterator[None]:
    """Every graph recorded inside gets the same roots hint, so each walk tries the others' templates first."""
    template.clear()
    real = template.roots_hint
    template.roots_hint = lambda roots: 0
    try:
        yield
    finally:
        template.roots_hint = real


def programs_match_numpy(progs: list, seed: int) -> None:
    """Each random program of tests/test_cache_fuzz.py evaluates to NumPy's values on its inputs."""
    from test_cache_fuzz import inputs_for, run  # only the cache tests need its program generator

    for code, _ in progs:
        inputs = inputs_for(3, 4, seed)
        got = [np.array(v) for v in lg.eval(*run(lg, code, inputs, False))]
        for g, w in zip(got, run(np, code, inputs, False)):
            np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=1e-6, equal_nan=True)


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
