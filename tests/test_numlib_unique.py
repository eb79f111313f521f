"""unique on the CPU: one evaluation and one NumPy unique call; NumPy's results; values differentiable."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.numlib_evaluated as ns

RNG = np.random.default_rng(31)
ARRAYS = [
    RNG.integers(0, 50, (30, 7)),
    RNG.normal(size=40).round(1).astype(np.float32),
    np.array([np.nan, 1.0, np.nan, -0.0, 0.0, 2.0]),
    np.zeros(0),
    np.array([True, False, True]),
]


def _evaluations() -> int:
    return lg.debug.evaluation_stats()["evaluations"]


@pytest.mark.parametrize("a", ARRAYS)
@pytest.mark.parametrize("flags", [(1, 1, 1), (0, 1, 1), (1, 0, 0), (0, 0, 1)])
@pytest.mark.parametrize("equal_nan", [True, False])
def test_unique_matches_numpy(a: np.ndarray, flags: tuple, equal_nan: bool) -> None:
    """Values, first indices, inverse (x's shape) and counts: NumPy's shapes, dtypes and values."""
    ri, rv, rc = (bool(f) for f in flags)
    kw = {"return_index": ri, "return_inverse": rv, "return_counts": rc, "equal_nan": equal_nan}
    e = np.unique(a, **kw)
    got = lg.unique(lg.asarray(a), **kw)
    e, got = (e if isinstance(e, tuple) else (e,)), (got if isinstance(got, tuple) else (got,))
    assert len(e) == len(got)
    for x, y in zip(e, got):
        y = y.numpy()
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f")


def test_one_evaluation_and_no_unique_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """x is evaluated once (for the count) and no unique operator is recorded after it."""
    recorded: list[str] = []
    orig = ns.record

    def spy(name, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        recorded.append(name)
        return orig(name, *args, **kw)

    monkeypatch.setattr(ns, "record", spy)
    x = lg.asarray(RNG.integers(0, 20, 500)) * 3
    before = _evaluations()
    keys, inverse, counts = lg.unique(x, return_inverse=True, return_counts=True)
    assert _evaluations() - before == 1
    sums = lg.bincount(inverse, weights=lg.asarray(RNG.random(500)))
    np.testing.assert_array_equal(counts.numpy(), np.unique(x.numpy(), return_counts=True)[1])
    assert sums.shape == keys.shape
    assert "unique_count" not in recorded and "unique_indices" not in recorded


def test_values_are_differentiable() -> None:
    """The distinct values are gathered from x: the gradient reaches each value's first occurrence."""
    v = np.array([3.0, 1.0, 3.0, 2.0, 1.0])
    x = lg.asarray(v, requires_grad=True)
    (g,) = lg.grad((lg.unique(x) * lg.asarray(np.array([1.0, 10.0, 100.0]))).sum(), [x])
    np.testing.assert_array_equal(g.numpy(), [100.0, 1.0, 0.0, 10.0, 0.0])
