"""Row kernels with row buffers and streaming stores (jit/render_rows.py) against NumPy.

Streaming only moves finished values (a byte copy), so every case is compared bit for bit
with the same kernel built without streaming, and within the JIT's tolerance with NumPy.
The size threshold is lowered so that small arrays take the streaming path.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import run_kernels
from jit_check import tolerance

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import compile_c, render_rows
from ops.settings import SETTINGS

pytestmark = [
    pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler"),
    pytest.mark.host_backend,
]


def run(fn, *arrays: np.ndarray, stream_min: int) -> tuple[list[np.ndarray], list[str]]:  # noqa: ANN001
    """fn(lg, ...) through fused kernels built with this streaming threshold, and their sources."""
    return run_kernels(fn, arrays, render_rows, "STREAM_MIN_BYTES", stream_min)


def softmax(xp, a):  # noqa: ANN001, ANN201
    """Softmax over rows: the parked exp goes through the row buffer."""
    return xp.softmax(a, axis=1) if xp is lg else _np_softmax(a)


def _np_softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def log_softmax(xp, a):  # noqa: ANN001, ANN201
    """log_softmax over rows."""
    if xp is lg:
        return lg.log_softmax(a, axis=1)
    m = a.max(axis=1, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis=1, keepdims=True))


def layernorm(xp, a):  # noqa: ANN001, ANN201
    """LayerNorm with weight and bias, and a second output (the centred rows)."""
    n = a.shape[1]
    w = xp.asarray(np.linspace(0.5, 1.5, n).astype(a.dtype))
    b = xp.asarray(np.linspace(-1, 1, n).astype(a.dtype))
    d = a - a.mean(axis=1, keepdims=True)
    return d / xp.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * w + b, d * 2


def softmax_grad(xp, y, g):  # noqa: ANN001, ANN201
    """Softmax's backward: y * (g - sum(g * y)) over rows."""
    return y * (g - (g * y).sum(axis=1, keepdims=True))


PROGRAMS = {"softmax": softmax, "log_softmax": log_softmax, "layernorm": layernorm}
#: programs whose rows stream (softmax parks its exp in the output row: not streamed)
STREAMS = {"softmax": False, "log_softmax": True, "layernorm": True}


def check(fn, *arrays: np.ndarray, rows: bool = True) -> None:  # noqa: ANN001
    """Streamed == not streamed (bits), both within tolerance of NumPy, and streaming was built
    exactly when `rows` says (a row kernel exists: more than one row and column, and it parks
    no value for its final stage)."""
    streamed, srcs = run(fn, *arrays, stream_min=0)
    plain, plain_srcs = run(fn, *arrays, stream_min=1 << 62)
    with np.errstate(all="ignore"):
        want = fn(np, *arrays)
    want = want if isinstance(want, tuple) else (want,)
    for s, p, w in zip(streamed, plain, want):
        assert s.tobytes() == p.tobytes()
        tol = tolerance(w.dtype)
        np.testing.assert_allclose(s, w, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True)
    # rows leave through lg_stream (a row buffer) or the final stage's own streaming stores
    assert any("lg_stream(a" in s or "LG_NTSTORE(a" in s for s in srcs) == rows
    assert all("lg_nt" in s for s in plain_srcs if "lg_y" in s)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("shape", [(1, 5), (3, 1), (7, 1031), (33, 4097), (2, 16385)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_streamed_match_unstreamed_and_numpy(name: str, shape: tuple[int, int], dtype: type) -> None:
    x = (np.random.default_rng(3).standard_normal(shape) * 4).astype(dtype)
    check(PROGRAMS[name], x, rows=min(shape) > 1 and STREAMS[name])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_nan_inf_and_empty_rows(name: str) -> None:
    x = np.random.default_rng(4).standard_normal((9, 301)).astype(np.float32)
    x[1, 7] = np.nan
    x[2, :] = -np.inf
    x[3, 4] = np.inf
    x[5, :] = 0
    check(PROGRAMS[name], x, rows=STREAMS[name])
    for shape in [(0, 9), (4, 0)]:
        got, _ = run(PROGRAMS[name], np.zeros(shape, np.float32), stream_min=0)
        assert got[0].shape == shape


def test_non_contiguous_input_and_the_softmax_gradient() -> None:
    x = np.random.default_rng(5).standard_normal((300, 515)).astype(np.float32)
    check(softmax, x[::2, 3:], rows=False)
    check(log_softmax, x[::2, 3:])  # strided rows, unaligned row starts
    check(layernorm, x.T[:, 1:])  # the reduced axis strided: read in order, written as rows
    y = _np_softmax(x)
    g = np.random.default_rng(6).standard_normal(x.shape).astype(np.float32)
    check(softmax_grad, y, g)


def test_large_rows_stream_at_the_default_threshold() -> None:
    """A 16 MB output streams with the default threshold; the bits are the small path's."""
    x = np.random.default_rng(7).standard_normal((1024, 4096)).astype(np.float32)
    got, srcs = run(log_softmax, x, stream_min=render_rows.STREAM_MIN_BYTES)
    plain, _ = run(log_softmax, x, stream_min=1 << 62)
    assert got[0].tobytes() == plain[0].tobytes()
    np.testing.assert_allclose(got[0], log_softmax(np, x), **tolerance(np.dtype(np.float32)))
    assert any("lg_stream(a" in s or "LG_NTSTORE(a" in s for s in srcs)


def test_engine_path_uses_one_row_kernel() -> None:
    """Through the evaluator: layer_norm and softmax each run as one fused region step."""
    x = np.random.default_rng(8).standard_normal((64, 333)).astype(np.float32)
    w, b = np.ones(333, np.float32), np.zeros(333, np.float32)
    a = lg.asarray(x)
    with SETTINGS.override(jit_background=False):
        got = F.layer_norm(a, 333, lg.asarray(w), lg.asarray(b)).numpy()
        soft = lg.softmax(a, axis=1).numpy()
    want = layernorm(np, x)[0]
    np.testing.assert_allclose(got, (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5),
                               rtol=2e-4, atol=2e-5)  # fmt: skip
    assert want.shape == got.shape
    np.testing.assert_allclose(soft, _np_softmax(x), **tolerance(np.dtype(np.float32)))


def test_many_full_outputs_do_not_stream() -> None:
    """Five row outputs would need five row buffers on a thread's stack: written in place."""

    def five(xp, a):  # noqa: ANN001, ANN202
        d = a - a.mean(axis=1, keepdims=True)
        return d, d * 2, d * 3, d * 4, d * 5

    x = np.random.default_rng(9).standard_normal((40, 77)).astype(np.float32)
    check(five, x, rows=False)
    assert render_rows.MAX_STREAMED < 5
