"""The fixed-cost launch path (jit/launch.py) and small arrays running compiled.

Every launcher (the C extension and its ctypes fallback) must give the NumPy fallback's values,
on the first call of an argument signature and on the repeated calls that take the cached path.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from jit import compile_c, extension, launch
from jit.fusion import find_regions
from jit.kernel import FusedKernel
from lazygraph.engine.evaluate import schedule

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend


@pytest.fixture(autouse=True)
def _foreground(monkeypatch):  # noqa: ANN001, ANN202
    """Kernels compiled where they are first called (no background tier): each call is compiled."""
    monkeypatch.setenv("LAZYGRAPH_JIT_BACKGROUND", "0")


@pytest.fixture(params=["extension", "ctypes"])
def launcher(request, monkeypatch):  # noqa: ANN001, ANN201
    """Each test runs with the extension (where it builds here) and with the ctypes fallback."""
    launch.prepare()
    monkeypatch.setattr(launch, "_enabled", request.param == "extension")
    monkeypatch.setattr(launch, "FAST", request.param == "extension" and launch._ext is not None)
    return request.param


def _kernel(build) -> tuple[FusedKernel, list]:  # noqa: ANN001
    roots = [r.node for r in build()]
    (region,) = find_regions(schedule(roots), roots)
    return FusedKernel(region), [c.buffer for c in region.inputs]


def _check(k: FusedKernel, vals: list, out: np.ndarray | None = None) -> None:
    expected = k.fallback(tuple(vals))
    for _ in range(3):  # the first call builds the signature's launch, the others reuse it
        got = k(*vals, out=None if out is None else out)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)
        if out is not None:
            assert got[0] is out


def test_float_chain_with_scalars_matches_numpy(launcher: str) -> None:
    x = np.linspace(-2, 2, 100, dtype=np.float32)
    k, vals = _kernel(lambda: [lg.sqrt(lg.abs(lg.asarray(x) * 1.5 + 0.25) / 3.0) - 0.5])
    _check(k, vals)
    assert len(k.launches) == 1


def test_integer_scalars_wrap_like_the_reference(launcher: str) -> None:
    x = np.arange(50, dtype=np.uint64)
    k, vals = _kernel(lambda: [(lg.asarray(x) + (2**64 - 3)) * 3])
    _check(k, vals)
    y = np.arange(-20, 20, dtype=np.int64)
    k, vals = _kernel(lambda: [(lg.asarray(y) - 7) * -3 + lg.asarray(y)])
    _check(k, vals)


def test_strided_broadcast_and_multi_output_launches(launcher: str) -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 9))
    b = rng.normal(size=9)
    k, vals = _kernel(lambda: (lambda s: [s * 2.0, s * s - 1.0])(lg.asarray(a) + lg.asarray(b)))
    _check(k, vals)
    # other strides are another signature: transposed, reversed and sliced inputs
    for a2, b2 in ((np.asfortranarray(a), b), (a[::-1, ::-1], b[::-1]), (a[:, ::2], b[::2])):
        swap = iter((a2, b2))
        _check(k, [next(swap) if isinstance(v, np.ndarray) else v for v in vals])
    assert len(k.launches) >= 2


def test_out_buffer_checks_on_the_cached_path(launcher: str) -> None:
    x = np.linspace(0, 1, 40, dtype=np.float32).reshape(8, 5)
    k, vals = _kernel(lambda: [lg.asarray(x) * 2.0 + 1.0])
    _check(k, vals, out=np.empty((8, 5), np.float32))
    for _ in range(2):  # the general path, then the cached one
        with pytest.raises(ValueError, match="shares memory"):
            k(*vals, out=vals[0])
    ro = np.empty((8, 5), np.float32)
    ro.flags.writeable = False
    for _ in range(2):
        with pytest.raises(ValueError):
            k(*vals, out=ro)


def test_min_size_runs_small_signatures_on_numpy(launcher: str, monkeypatch) -> None:  # noqa: ANN001
    x = np.linspace(-1, 1, 30)
    k, vals = _kernel(lambda: [lg.tanh(lg.asarray(x) * 0.5) + 1.0])
    calls = []
    real = k.fallback
    monkeypatch.setattr(k, "fallback", lambda *a: calls.append(1) or real(*a))
    k(*vals, min_size=31)
    k(*vals, min_size=31)
    assert len(calls) == 2
    k(*vals, min_size=30)
    k(*vals, min_size=30)
    # through ctypes a launch costs as much as several NumPy calls: small arrays stay on NumPy
    assert len(calls) == (2 if launcher == "extension" else 4)
    k(*vals, min_size=0)  # direct calls (tests, benchmarks) always run compiled
    assert len(calls) == (2 if launcher == "extension" else 4)


def test_ctypes_fallback_without_python_headers(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(extension, "headers", lambda: None)
    monkeypatch.setattr(launch, "_tried", False)
    monkeypatch.setattr(launch, "_ext", None)
    monkeypatch.setattr(launch, "FAST", True)
    launch.prepare()
    assert launch.extension_status() == "ctypes (no Python.h)" and not launch.FAST
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    k, vals = _kernel(lambda: [lg.maximum(lg.asarray(x) * 2.0, 0.5) - 1.0])
    _check(k, vals)


def test_the_extension_is_built_wherever_python_headers_are() -> None:
    launch.prepare()
    if extension.headers() is not None and compile_c.available():
        assert launch.extension_status() == "extension" and launch.FAST
    else:
        assert launch.extension_status().startswith("ctypes (")


def test_small_kernels_do_not_fork_threads() -> None:
    x = np.ones((64, 64), np.float32)
    k, vals = _kernel(lambda: [lg.softmax(lg.asarray(x) * 2.0, axis=1)])
    lay = k.layout_for([np.asarray(v) for v in vals if isinstance(v, np.ndarray)])[0]
    src = k.source(lay).text
    pragmas = [ln for ln in src.splitlines() if ln.strip().startswith("#pragma omp parallel")]
    # `if(parallel: ...)`: a bare if() on `parallel for simd` would switch the simd loop off too
    # (OpenMP 5), and small arrays would run one element at a time
    assert pragmas and all(ln.endswith(" if(parallel: lg_par)") for ln in pragmas)
    assert "lg_par = " in src


@pytest.mark.parametrize("dtype", [np.float16, np.complex64, np.float32])
def test_engine_small_regions_match_numpy(monkeypatch, dtype) -> None:  # noqa: ANN001
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "1")
    x = (np.arange(1, 101) / 50).astype(dtype)

    def prog(xp, v):  # noqa: ANN001, ANN202
        y = v * 1.5
        y = y + 0.5
        y = y * y
        return y / 3.0 - v

    for _ in range(3):
        got = prog(lg, lg.asarray(x)).numpy()
        np.testing.assert_array_equal(got, prog(np, x))
        assert got.dtype == prog(np, x).dtype


def test_a_region_with_more_arguments_than_the_stack_block(launcher: str) -> None:
    """Regions with more than MAX_ARGS arrays and scalars take the extension's heap block."""
    # one three-input member per two new arrays: more arguments than MAX_ARGS in a region far
    # below fusion's member cap (jit/fusion.py MAX_MEMBERS)
    n = launch.MAX_ARGS // 2 + 4
    xs = [np.full(8, i, dtype=np.float64) for i in range(n)]
    masks = [np.arange(8) % (i + 2) == 0 for i in range(n)]

    def build() -> list:
        acc = lg.asarray(xs[0])
        for x, m in zip(xs[1:], masks[1:]):
            acc = lg.where(lg.asarray(m), lg.asarray(x), acc)
        return [acc]

    k, vals = _kernel(build)
    assert len(vals) > launch.MAX_ARGS
    _check(k, vals)
