"""median selects its middle values with NumPy's partition (O(n)) when no gradient is wanted: NumPy's bits."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.numlib_quantile as nq

RNG = np.random.default_rng(23)


def _ops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the order operators median records."""
    seen: list[str] = []
    orig = nq.record

    def spy(name, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        if name in ("sort", "partition"):
            seen.append(name)
        return orig(name, *args, **kw)

    monkeypatch.setattr(nq, "record", spy)
    return seen


def _bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x).tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize(
    "shape, axis, keepdims",
    [
        ((129,), None, False),
        ((130,), None, True),
        ((200, 3), 0, False),
        ((3, 257), 1, True),
        ((16, 4, 9), (0, 2), False),
    ],
)
def test_median_bits(dtype, shape, axis, keepdims, monkeypatch: pytest.MonkeyPatch) -> None:
    """Odd and even counts, several axes, ints and bools: NumPy's value, dtype and bits, via partition."""
    seen = _ops(monkeypatch)
    a = (RNG.normal(size=shape) * 7).astype(dtype)
    e = np.asarray(np.median(a, axis=axis, keepdims=keepdims))
    got = lg.median(lg.asarray(a), axis=axis, keepdims=keepdims).numpy()
    assert got.dtype == e.dtype and got.shape == e.shape and _bits(got) == _bits(e)
    assert seen == ["partition"]


def test_median_nan_and_ties() -> None:
    """A slice holding NaN gives NaN (NumPy's check of the last position); repeated values as NumPy."""
    a = RNG.integers(0, 4, (5, 300)).astype(np.float64)
    a[1, 3] = np.nan
    a[3, [0, 299]] = np.nan
    for axis in (1, None):
        e = np.median(a, axis=axis)
        got = lg.median(lg.asarray(a), axis=axis).numpy()
        assert _bits(np.asarray(got)) == _bits(np.asarray(e))
    inf = np.array([np.inf, -np.inf, 1.0, np.inf] * 40)
    assert _bits(lg.median(lg.asarray(inf)).numpy()) == _bits(np.asarray(np.median(inf)))


def test_gradients_keep_the_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a gradient wanted, ties go to the element the stable sort chose (the sort is recorded)."""
    seen = _ops(monkeypatch)
    v = np.zeros(201)
    v[:101] = 1.0
    x = lg.asarray(v, requires_grad=True)
    (g,) = lg.grad(lg.median(x), [x])
    expected = np.zeros(201)
    expected[0] = 1.0  # sorted: 100 zeros, then the ones in order: the median is x[0]
    np.testing.assert_array_equal(g.numpy(), expected)
    assert seen == ["sort"]


def test_short_empty_and_complex_keep_the_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short slices (the sort is cheaper there), an empty axis and complex values sort: NumPy's results."""
    seen = _ops(monkeypatch)
    a = RNG.normal(size=(9, 40, 30)).astype(np.float32)
    assert _bits(lg.median(lg.asarray(a), axis=0).numpy()) == _bits(np.median(a, axis=0))
    c = RNG.normal(size=300) + 1j * RNG.normal(size=300)
    assert lg.median(lg.asarray(c)).numpy() == np.median(c)
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        e = np.median(np.zeros((3, 0)), axis=1)
    got = lg.median(lg.asarray(np.zeros((3, 0))), axis=1).numpy()
    assert got.shape == e.shape and np.isnan(got).all()
    assert seen == ["sort", "sort", "sort"]
