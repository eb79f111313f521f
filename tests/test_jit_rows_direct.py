"""The final stage that streams its own rows (jit/render_rows.py, `direct_final`) against NumPy.

A row kernel whose final stage computes no vector math writes its streamed outputs straight
from the stage with streaming stores, one cache line at a time, instead of through a row
buffer. Compared bit for bit with the same kernel built without streaming.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import run_kernels
from jit_check import tolerance

from jit import compile_c, render_rows

pytestmark = [
    pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler"),
    pytest.mark.host_backend,
]


def layernorm(xp, a):  # noqa: ANN001, ANN201
    """LayerNorm with weight and bias (one output)."""
    n = a.shape[1]
    w = xp.asarray(np.linspace(0.5, 1.5, n).astype(a.dtype))
    b = xp.asarray(np.linspace(-1, 1, n).astype(a.dtype))
    d = a - a.mean(axis=1, keepdims=True)
    return d / xp.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * w + b


def run(fn, x: np.ndarray, stream_min: int) -> tuple[np.ndarray, list[str]]:  # noqa: ANN001
    """The kernel's output and sources with this streaming threshold."""
    got, srcs = run_kernels(fn, (x,), render_rows, "STREAM_MIN_BYTES", stream_min)
    return got[0], srcs


def test_large_layernorm_streams_from_its_final_stage() -> None:
    """16 MB of float32 rows at the default threshold: streaming stores, no row buffer, same bits."""
    x = (np.random.default_rng(11).standard_normal((1024, 4096)) * 3).astype(np.float32)
    got, srcs = run(layernorm, x, render_rows.STREAM_MIN_BYTES)
    plain, _ = run(layernorm, x, 1 << 62)
    assert got.tobytes() == plain.tobytes()
    np.testing.assert_allclose(got, layernorm(np, x), **tolerance(np.dtype(np.float32)))
    (src,) = [s for s in srcs if "lg_nt" in s]
    assert "LG_NTSTORE(a" in src and "lg_row" not in src and "lg_stream(a" not in src


@pytest.mark.parametrize("shape", [(3, 5), (4, 17), (5, 1031), (2, 4099)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unaligned_rows_and_short_rows(shape: tuple[int, int], dtype: type) -> None:
    """Rows starting anywhere in a line, and rows shorter than a line: the plainly stored ends."""
    x = (np.random.default_rng(12).standard_normal(shape) * 2).astype(dtype)
    x[0, 1] = np.nan
    got, srcs = run(layernorm, x, 0)
    plain, _ = run(layernorm, x, 1 << 62)
    assert got.tobytes() == plain.tobytes()
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, layernorm(np, x), equal_nan=True, **tolerance(np.dtype(dtype)))
    assert any("LG_NTSTORE(a" in s for s in srcs)


def test_outputs_of_two_element_sizes_use_the_row_buffers() -> None:
    """A float32 and a float64 output of one row kernel: their lines cannot start together."""
    x = np.random.default_rng(13).standard_normal((6, 300)).astype(np.float32)

    def two(xp, a):  # noqa: ANN001, ANN202
        d = a - a.mean(axis=1, keepdims=True)
        return d * 2, d.astype(np.float64) * 3

    got, srcs = run_kernels(two, (x,), render_rows, "STREAM_MIN_BYTES", 0)
    plain, _ = run_kernels(two, (x,), render_rows, "STREAM_MIN_BYTES", 1 << 62)
    for g, p, w in zip(got, plain, two(np, x)):
        assert g.tobytes() == p.tobytes()
        np.testing.assert_allclose(g, w, **tolerance(g.dtype))
    streamed = [s for s in srcs if "lg_nt" in s]
    assert streamed and all("LG_NTSTORE(a" not in s.split("void lg_kernel")[1] for s in streamed)
