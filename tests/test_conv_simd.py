"""The implicit-GEMM convolution (jit/conv_simd.py) against the reference kernels.

Geometries cover strides, padding, dilation, 1x1 and non-square windows; shapes cover batch
0 and 1, channel counts that leave partial 6-row tiles, and every tile width (NV = 1..4
vectors of 16 output channels with AVX-512, 1..2 of 8 with AVX2). A CPU with AVX-512 runs
the AVX2 tiles too; on a CPU with neither the kernels must decline.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from jit import blas_quiet, conv, conv_simd, window
from ops.base import REGISTRY
from ops.settings import SETTINGS
from tests.reliability.test_numeric import run_with_threads

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend

# (kernel, stride, padding, dilation, input height/width)
GEOMETRIES = [
    ((5, 5), (1, 1), (2, 2), (1, 1), (9, 7)),
    ((3, 3), (2, 2), (1, 1), (1, 1), (8, 9)),
    ((3, 2), (1, 2), (0, 1), (2, 1), (7, 8)),
    ((1, 1), (1, 1), (0, 0), (1, 1), (3, 2)),
    ((1, 1), (2, 2), (0, 0), (1, 1), (1, 1)),
    ((3, 3), (1, 1), (1, 1), (2, 2), (6, 6)),
]

# (batch, input channels, output channels): NV 4, 3, 1 (80 = 5 x 16), 2; C % 6 != 0
SHAPES = [(3, 7, 64), (1, 13, 48), (2, 1, 80), (0, 3, 32), (2, 6, 16)]


def _attrs(s, p, d) -> dict:  # noqa: ANN001
    return {"stride": s, "padding": p, "dilation": d, "groups": 1}


def _data(n: int, c: int, o: int, geo: tuple, seed: int):  # noqa: ANN202
    k, s, p, d, hw = geo
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *hw)).astype(np.float32)
    w = rng.standard_normal((o, c, *k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    return x, w, b


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


#: the tile widths this CPU can run: AVX-512 machines run AVX2's 8-lane tiles as well
WIDTHS = [v for v in (16, 8) if v <= conv_simd.vector_width()] or [0]


@pytest.fixture(params=WIDTHS, ids=lambda v: f"lanes{v}")
def lanes(request, monkeypatch) -> int:  # noqa: ANN001
    """Build the kernels with this many float32 lanes (0: a CPU without AVX2 or AVX-512)."""
    monkeypatch.setattr(conv_simd, "vector_width", lambda: request.param)
    return request.param


@pytest.mark.parametrize("geo", GEOMETRIES)
def test_forward_and_weight_gradient_match_reference(geo: tuple, lanes: int) -> None:
    k, s, p, d, _ = geo
    for i, (n, c, o) in enumerate(SHAPES):
        x, w, b = _data(n, c, o, geo, i)
        attrs = _attrs(s, p, d)
        want = REGISTRY["conv2d"].kernel(x, w, b, **attrs)
        g = np.random.default_rng(i).standard_normal(want.shape).astype(np.float32)
        gw = REGISTRY["conv2d_grad_weight"].kernel(g, x, w, **attrs)
        if not lanes:
            assert not conv_simd.applies(x.dtype, w.shape)
            continue
        assert conv_simd.applies(x.dtype, w.shape)
        _close(conv_simd.forward(x, w, b, s, p, d), want)
        _close(conv_simd.forward(x, w, None, s, p, d), REGISTRY["conv2d"].kernel(x, w, None, **attrs))
        _close(conv_simd.grad_weight(g, x, w.shape, s, p, d), gw)
        # non-contiguous inputs are laid out first
        xt = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
        _close(conv_simd.forward(xt, w, b, s, p, d), want)


@pytest.mark.parametrize("geo", GEOMETRIES[:3])
def test_routed_through_the_window_kernels(geo: tuple, lanes: int) -> None:
    """conv.KERNELS sends float32 shapes here, with out= buffers, and the input gradient via the forward."""
    k, s, p, d, _ = geo
    n, c, o = 2, 64, 16  # C*kH*kW >= O: the GEMM route, and O <= C for the input gradient
    x, w, b = _data(n, c, o, geo, 7)
    attrs = _attrs(s, p, d)
    want = REGISTRY["conv2d"].kernel(x, w, b, **attrs)
    buf = np.full(want.shape, 7, dtype=np.float32)
    assert conv.KERNELS["conv2d"](x, w, b, out=buf, **attrs) is buf
    _close(buf, want)
    g = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    wbuf = np.full(w.shape, 7, dtype=np.float32)
    assert conv.KERNELS["conv2d_grad_weight"](g, x, w, out=wbuf, **attrs) is wbuf
    _close(wbuf, REGISTRY["conv2d_grad_weight"].kernel(g, x, w, **attrs))
    gi = conv.KERNELS["conv2d_grad_input"](g, w, x, **attrs)
    if conv.grad_input_applies(w.shape, s, p, d):
        _close(gi, REGISTRY["conv2d_grad_input"].kernel(g, w, x, **attrs))
    else:
        assert gi is None


def test_short_window_weight_gradient_routed_here() -> None:
    """A window shorter than the output channels (a first layer): the weight gradient comes here too."""
    geo = GEOMETRIES[1]
    x, w, _ = _data(3, 1, 16, geo, 9)  # C*kH*kW = 9 < 16: the direct route
    attrs = _attrs(*geo[1:4])
    g = np.random.default_rng(2).standard_normal(REGISTRY["conv2d"].kernel(x, w, None, **attrs).shape)
    g = g.astype(np.float32)
    wbuf = np.full(w.shape, 7, dtype=np.float32)
    assert conv.KERNELS["conv2d_grad_weight"](g, x, w, out=wbuf, **attrs) is wbuf
    _close(wbuf, REGISTRY["conv2d_grad_weight"].kernel(g, x, w, **attrs))


def test_out_buffer_that_does_not_fit_is_filled_by_copy(lanes: int) -> None:
    geo = GEOMETRIES[0]
    x, w, b = _data(2, 3, 16, geo, 3)
    want = REGISTRY["conv2d"].kernel(x, w, b, **_attrs(*geo[1:4]))
    if not lanes:
        assert not conv_simd.applies(x.dtype, w.shape)
        return
    out = np.zeros(want.shape[::-1], dtype=np.float32).T  # right shape, Fortran order
    assert conv_simd.forward(x, w, b, *geo[1:4], out=out) is out
    _close(np.ascontiguousarray(out), want)


def test_declines_what_it_does_not_cover(lanes: int) -> None:
    f4 = np.dtype(np.float32)
    assert not conv_simd.applies(np.dtype(np.float64), (64, 8, 3, 3))
    assert not conv_simd.applies(f4, (20, 8, 3, 3))  # not a multiple of 8 or 16
    assert conv_simd.applies(f4, (24, 8, 3, 3)) == (lanes == 8)  # a multiple of 8, not of 16
    assert not conv_simd.applies(f4, (0, 8, 3, 3))
    assert not conv_simd.applies(f4, (2048, 2048, 3, 3))  # the weight slice outgrows L2: BLAS
    with SETTINGS.override(conv_simd=False):
        assert not conv_simd.applies(f4, (64, 64, 5, 5))
        # the chunked BLAS path then gives the same values
        geo = GEOMETRIES[0]
        x, w, b = _data(2, 64, 16, geo, 5)
        _close(
            conv.KERNELS["conv2d"](x, w, b, **_attrs(*geo[1:4])),
            REGISTRY["conv2d"].kernel(x, w, b, **_attrs(*geo[1:4])),
        )
    assert conv_simd.applies(f4, (64, 64, 5, 5)) == bool(lanes)


def test_parking_blas_workers_keeps_blas_working(monkeypatch) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 300))
    want = a @ a
    fns = blas_quiet._openblas()
    # OpenBLAS starts its thread server only with more than one thread (1 core, OMP_NUM_THREADS=1)
    found = fns is not None and bool(fns[1].value)
    assert blas_quiet.park_blas_workers() == found
    np.testing.assert_allclose(a @ a, want)  # the next call starts the workers again
    # or an evaluation's end does (unpark): before the cores idle
    assert blas_quiet.park_blas_workers() == found
    assert blas_quiet.PARKED[0] == found
    assert blas_quiet.unpark_blas_workers() == found
    assert not blas_quiet.PARKED[0]
    assert fns is None or bool(fns[1].value) == found
    assert not blas_quiet.unpark_blas_workers()  # running already: nothing to do
    np.testing.assert_allclose(a @ a, want)
    # another thread that might be inside BLAS: no shutdown
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="user-thread")
    other.start()
    try:
        a @ a
        assert not blas_quiet.park_blas_workers()
    finally:
        stop.set()
        other.join()
    # lazygraph's background worker while it runs a job: no shutdown either
    from jit import background

    started, release = threading.Event(), threading.Event()
    with SETTINGS.override(jit_background=True):  # the tests turn the worker off by default
        assert background.submit(("test_conv_simd", "busy"), lambda: (started.set(), release.wait(5)))
        try:
            assert started.wait(5)
            a @ a
            assert not blas_quiet.park_blas_workers()
        finally:
            release.set()
            assert background.wait(5)
    a @ a
    assert blas_quiet.park_blas_workers() == found  # the idle worker is no obstacle
    a @ a
    with SETTINGS.override(blas_quiet=False):
        assert not blas_quiet.park_blas_workers()
    np.testing.assert_allclose(a @ a, want)


def test_inference_conv_the_simd_kernel_covers_is_lowered() -> None:
    """Without a weight gradient, a conv2d the SIMD kernel covers becomes a window step too."""
    import lazygraph as lg

    rng = np.random.default_rng(4)
    xn = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    wn = rng.standard_normal((32, 8, 3, 3)).astype(np.float32)
    bn = rng.standard_normal(32).astype(np.float32)

    def run() -> np.ndarray:
        y = lg.conv2d(lg.asarray(xn), lg.asarray(wn), lg.asarray(bn), padding=1)
        return lg.max_pool2d(lg.nn.functional.relu(y), 2).numpy()

    lg.cache.clear(disk=False)
    with lg.settings.override(jit=True):  # the window pass is the JIT's (LAZYGRAPH_JIT=0 skips it)
        on = run()
    fired = {r for r in lg.cache.passes()["rules"] if r.startswith("jit_window:")}
    assert ("jit_window:conv2d" in fired) == bool(conv_simd.vector_width()), fired
    with lg.settings.override(optimize=False):
        ref = run()
    np.testing.assert_allclose(on, ref, rtol=1e-4, atol=1e-4)
    # a pointwise inference convolution stays with the library pass
    lg.cache.clear(disk=False)
    w1 = rng.standard_normal((32, 8, 1, 1)).astype(np.float32)
    lg.conv2d(lg.asarray(xn), lg.asarray(w1)).numpy()
    assert "jit_window:conv2d" not in lg.cache.passes()["rules"]


_THREADS_SCRIPT = r"""
import hashlib, numpy as np
from jit import conv, conv_simd
rng = np.random.default_rng(3)
x = rng.standard_normal((37, 8, 9, 9)).astype(np.float32)
w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
g = rng.standard_normal((37, 16, 9, 9)).astype(np.float32)
h = hashlib.sha256()
if conv_simd.applies(x.dtype, w.shape):
    for _ in range(3):  # and the same bits run after run, whichever thread takes which images
        h.update(conv_simd.grad_weight(g, x, w.shape, (1, 1), (1, 1), (1, 1)).tobytes())
        h.update(conv_simd.forward(x, w, None, (1, 1), (1, 1), (1, 1)).tobytes())
# the short-window path (jit/conv.py, no SIMD tiles needed) sums chunks of images too
x1 = rng.standard_normal((37, 1, 9, 9)).astype(np.float32)
for _ in range(3):
    h.update(conv.direct_grad_weight(g, x1, (16, 1, 3, 3), (1, 1), (1, 1), (1, 1)).tobytes())
print(conv_simd.applies(x.dtype, w.shape), h.hexdigest())
"""


def test_same_bits_with_one_thread_or_two(tmp_path) -> None:  # noqa: ANN001
    """The weight gradients sum fixed chunks of images, not one block per thread."""
    runs = [run_with_threads(_THREADS_SCRIPT, threads, tmp_path) for threads in ("1", "2")]
    assert runs[0] == runs[1]  # (without AVX2 or AVX-512 only the short-window path runs)


def test_an_evaluation_that_parked_blas_starts_it_again() -> None:
    """A training convolution's window step parks OpenBLAS's workers; the evaluation's end restarts them."""
    import lazygraph as lg

    fns = blas_quiet._openblas()
    found = fns is not None and bool(fns[1].value)
    rng = np.random.default_rng(1)
    x = lg.asarray(rng.standard_normal((4, 8, 12, 12)).astype(np.float32))
    w = lg.asarray(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), requires_grad=True)
    parks = []
    real = blas_quiet.park_blas_workers

    def park() -> bool:
        parks.append(real())
        return parks[-1]

    import lazygraph.engine.lower_window as lw

    with SETTINGS.override(jit_min_size=1), pytest.MonkeyPatch.context() as mp:
        mp.setattr(lw, "park_blas_workers", park)
        loss = lg.sum(lg.nn.functional.conv2d(x, w, padding=1) ** 2)
        loss.backward()
        lg.eval(w.grad)
    # the step parked them where there is a thread server to park and a compiled window step
    # (LAZYGRAPH_JIT=0: the reference kernel runs, nothing parks) ...
    assert any(parks) == (found and SETTINGS.jit and window.available()), parks
    assert not blas_quiet.PARKED[0]  # ... and the evaluation's end started them again
    assert fns is None or bool(fns[1].value) == found
