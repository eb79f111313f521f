"""The signature-checking launcher (jit/launch.checked_launcher) and FusedKernel's repeated-call
path that uses it (`_last`): it launches only on arrays of the recorded shapes and strides,
writes nothing otherwise, and a kernel alternating signatures still matches the NumPy fallback.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from jit import launch
from jit.fusion import find_regions
from jit.kernel import FusedKernel
from lazygraph.engine.evaluate import schedule

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend


@pytest.fixture(autouse=True)
def _foreground(monkeypatch):  # noqa: ANN001, ANN202
    """Kernels compiled where they are first called (no background tier)."""
    monkeypatch.setenv("LAZYGRAPH_JIT_BACKGROUND", "0")
    launch.prepare()
    if launch._ext is None:
        pytest.fail(f"the launch extension did not build here: {launch.extension_status()}")


def _kernel(build) -> tuple[FusedKernel, list]:  # noqa: ANN001
    roots = [r.node for r in build()]
    (region,) = find_regions(schedule(roots), roots)
    return FusedKernel(region), [c.buffer for c in region.inputs]


def _two_outputs(a: np.ndarray, b: np.ndarray) -> tuple[FusedKernel, list]:
    return _kernel(lambda: (lambda s: [s * 2.0, s * s - 1.0])(lg.asarray(a) + lg.asarray(b)))


def test_checked_launch_runs_only_on_its_signature() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(6, 9)), rng.normal(size=9)
    k, vals = _two_outputs(a, b)
    want = k.fallback(tuple(vals))
    got = k(*vals)  # builds the launch (and its checked launcher)
    assert k._last is not None
    entry = k._last[1]
    assert entry.checked is not None
    outs = [np.full(s, -7.0) for s, _ in entry.outs]
    assert entry.checked(tuple(vals), outs) is True
    for g, o, w in zip(got, outs, want):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(o, w)
    # other shapes or strides: False, and the outputs are left as they were
    swaps = [
        [np.asfortranarray(a), b],
        [a[::-1], b],
        [a, b[::-1]],
        [np.ones((7, 9)), b],
        [a.reshape(6, 9, 1), b],
        [None, b],
    ]
    for arrays in swaps:
        it = iter(arrays)
        other = tuple(next(it) if isinstance(v, np.ndarray) else v for v in vals)
        outs = [np.full(s, -7.0) for s, _ in entry.outs]
        assert entry.checked(other, outs) is False
        for o in outs:
            assert (o == -7.0).all()


def test_alternating_signatures_match_the_fallback() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(6, 9)), rng.normal(size=9)
    k, vals = _two_outputs(a, b)
    variants = [(a, b), (a[::-1, ::-1].copy()[::-1, ::-1], b), (a[::-1], b[::-1]), (np.asfortranarray(a), b)]
    for _ in range(3):
        for a2, b2 in variants:
            it = iter((a2, b2))
            args = [next(it) if isinstance(v, np.ndarray) else v for v in vals]
            want = k.fallback(tuple(args))
            got = k(*args)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == w.dtype
                np.testing.assert_array_equal(g, w)
    assert len(k.launches) >= 3


def test_the_out_buffer_and_the_ctypes_launcher_do_not_use_the_checked_path(monkeypatch) -> None:
    x = np.linspace(0, 1, 40).reshape(8, 5)
    k, vals = _kernel(lambda: [lg.asarray(x) * 2.0 + 1.0])
    out = np.empty((8, 5))
    for _ in range(2):
        assert k(*vals, out=out)[0] is out
    assert k._last is None  # launches with out= keep the key lookup (and its overlap checks)
    np.testing.assert_array_equal(out, x * 2.0 + 1.0)
    with pytest.raises(ValueError, match="shares memory"):
        k(*vals, out=vals[0])
    monkeypatch.setattr(launch, "_enabled", False)
    monkeypatch.setattr(launch, "FAST", False)
    assert launch.checked_launcher(1, [0], b"", 0, [x]) is None
    k2, vals2 = _kernel(lambda: [lg.asarray(x) * 3.0 - 1.0])
    for _ in range(3):
        np.testing.assert_array_equal(k2(*vals2)[0], x * 3.0 - 1.0)
    assert k2._last is None


def test_pack_signature_layout() -> None:
    a = np.zeros((2, 3), np.float32)[:, ::2]
    got = np.frombuffer(launch.pack_signature([a, np.float64(1.0)]), np.int64)
    np.testing.assert_array_equal(got, [2, 2, 2, 12, 8, 0])
