"""Fused kernels on a CUDA GPU (NVRTC + CuPy) against NumPy; skipped where there is no GPU."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import backend
from jit.fusion import find_regions
from jit.kernel import FusedKernel
from lazygraph.engine.evaluate import schedule

pytestmark = pytest.mark.cuda


def _run_on_gpu(*arrays: lg.Array, need_region: bool = True) -> list[np.ndarray]:
    """Each region on the GPU; everything else (and the inputs) through NumPy."""
    import cupy

    roots = [a.node for a in arrays]
    order = schedule(roots)
    vals: dict[int, object] = {}
    regions = find_regions(order, roots)
    assert regions or not need_region
    member = {id(m): r for r in regions for m in r.nodes}
    done: set[int] = set()

    def value(c):  # noqa: ANN001, ANN202
        return c.buffer if c.buffer is not None else vals[id(c)]

    for n in order:
        r = member.get(id(n))
        if r is None:
            vals[id(n)] = np.asarray(n.op.kernel(*(np.asarray(value(c)) for c in n.inputs), **n.attrs))
        elif id(r) not in done:
            done.add(id(r))
            outs = FusedKernel(r)(*(value(c) for c in r.inputs), backend=backend.get("cuda"))
            for o, v in zip(r.outputs, outs):
                vals[id(o)] = cupy.asnumpy(v)
    return [np.asarray(value(r)) for r in roots]


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (64, 1000), (257, 33)])
def test_softmax_layernorm_gelu_on_gpu(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    X, W = lg.asarray(x), lg.asarray(w)
    outs = [lg.softmax(X, axis=1), F.layer_norm(X, shape[1], W, W), F.gelu(X), X.sum(axis=0), X.max(axis=1)]
    # a (1, 1) input's sum and max over one element are no fused region: they run on NumPy
    fused = [bool(find_regions(schedule([o.node]), [o.node])) for o in outs]
    assert sum(fused) >= 2, fused
    for lazy in outs:
        (got,) = _run_on_gpu(lazy, need_region=False)
        np.testing.assert_allclose(got, lazy.numpy(), rtol=1e-4, atol=1e-5)


def test_strided_views_and_integers_on_gpu() -> None:
    x = np.arange(-40, 80, dtype=np.int32).reshape(8, 15)
    X = lg.asarray(x)
    v = X[::-2, 1::3]
    (got,) = _run_on_gpu((v // 3) % 5 + (v << 1))
    np.testing.assert_array_equal(got, (x[::-2, 1::3] // 3) % 5 + (x[::-2, 1::3] << 1))
