"""histogram with equal bins (int bins, static range) takes NumPy's scaled-index path: same counts."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.numlib_sort as numlib_sort

RNG = np.random.default_rng(16)
EDGES = np.linspace(-1.0, 1.0, 11)
# values on, just above and just below every edge of 10 bins over [-1, 1], NaN and infinities
ON_EDGES = np.concatenate(
    [EDGES, np.nextafter(EDGES, 2.0), np.nextafter(EDGES, -2.0), [np.nan, np.inf, -np.inf]]
)

CASES = [
    (RNG.integers(0, 256, (60, 50)).astype(np.uint8), 32, (0, 256)),
    (RNG.integers(0, 256, 3000).astype(np.uint8), 7, (10, 200)),
    (RNG.normal(size=4000), 10, (-1, 1)),
    (RNG.normal(size=4000).astype(np.float32), 7, (-1.5, 2.25)),
    (RNG.normal(size=4000).astype(np.float32), 7, (-1, 2)),
    (RNG.normal(size=500), 3, (0.1, 0.1)),  # an empty range: NumPy widens it by 0.5 each way
    (RNG.normal(size=4000) * 1e3, 50, (-3000, 3000)),
    (RNG.integers(-100, 100, 3000).astype(np.int16), 13, (-50, 60)),
    (RNG.integers(-(2**31), 2**31 - 1, 3000).astype(np.int32), 9, (-(2**31), 2**31)),
    (RNG.random(3000) < 0.3, 2, (0, 1)),
    (ON_EDGES, 10, (-1, 1)),
    (np.array([0.1 * k for k in range(-30, 31)]), 6, (-3, 3)),  # decimals that land next to edges
    (np.zeros(0), 4, (0, 1)),
]


def _used(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    seen: list[bool] = []
    orig = numlib_sort.uniform_index

    def spy(*args):  # noqa: ANN002, ANN202
        out = orig(*args)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(numlib_sort, "uniform_index", spy)
    return seen


@pytest.mark.parametrize("a, bins, rng", CASES)
def test_equal_bins_match_numpy(
    a: np.ndarray, bins: int, rng: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counts, their dtype and the edges equal NumPy's; the scaled path is the one taken."""
    seen = _used(monkeypatch)
    n, e = np.histogram(a, bins, range=rng)
    ln, le = lg.histogram(lg.asarray(a), bins, range=rng)
    ln, le = ln.numpy(), le.numpy()
    assert ln.dtype == n.dtype and np.array_equal(ln, n)
    assert le.dtype == e.dtype and np.array_equal(le, e)
    assert seen == [True]


@pytest.mark.parametrize("a, bins, rng", CASES[:5])
def test_weighted_and_density(a: np.ndarray, bins: int, rng: tuple) -> None:
    """Weighted sums and densities over the same bins (float tolerance: the order of additions)."""
    w = RNG.random(a.shape)
    n, _ = np.histogram(a, bins, range=rng, weights=w)
    ln, _ = lg.histogram(lg.asarray(a), bins, range=rng, weights=lg.asarray(w))
    np.testing.assert_allclose(ln.numpy(), n, rtol=1e-12)
    d, _ = np.histogram(a, bins, range=rng, density=True)
    ld, _ = lg.histogram(lg.asarray(a), bins, range=rng, density=True)
    np.testing.assert_allclose(ld.numpy(), d, rtol=1e-12)


def test_other_bins_take_the_edge_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Array bins, NumPy-scalar ranges, int64 and float16 values keep the edge search (and NumPy's counts)."""
    seen = _used(monkeypatch)
    x = RNG.normal(size=1000)
    cases = [
        (x, [-1.0, 0.0, 0.5, 2.0], None),
        (x, 5, (np.float32(-1), np.float32(1))),
        (RNG.integers(-50, 50, 1000), 5, (-20, 20)),
        (x.astype(np.float16), 5, (-1, 1)),
    ]
    for a, bins, rng in cases:
        n, _ = np.histogram(a, bins, range=rng)
        ln, _ = lg.histogram(lg.asarray(a), bins, range=rng)
        assert np.array_equal(ln.numpy(), n)
    assert not any(seen)


def test_errors_stay_numpys() -> None:
    """A reversed or infinite range raises NumPy's ValueError before any index is recorded."""
    x = lg.asarray(RNG.normal(size=10))
    for rng in ((1, 0), (0, np.inf)):
        with pytest.raises(ValueError):
            np.histogram(x.numpy(), 4, range=rng)
        with pytest.raises(ValueError):
            lg.histogram(x, 4, range=rng)


@pytest.mark.parametrize("a, bins, rng", CASES[:4] + CASES[10:12])
def test_edges_by_gather_match_too(
    a: np.ndarray, bins: int, rng: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where linspace's formula would not give the edges, gathering them gives the same counts."""
    import lazygraph.numlib_bins as nbins

    monkeypatch.setattr(nbins, "_edge_formula", lambda *args: None)
    n, _ = np.histogram(a, bins, range=rng)
    ln, _ = lg.histogram(lg.asarray(a), bins, range=rng)
    assert np.array_equal(ln.numpy(), n)


def test_edge_formula_is_the_edges() -> None:
    """The formula reproduces every edge NumPy computes (float64 and float32 edges, odd ranges)."""
    import lazygraph.numlib_bins as nbins

    for lo, hi, nb, dt in [(0, 256, 32, np.uint8), (-1.5, 2.25, 7, np.float32), (0.1, 0.7, 3, np.float64)]:
        edges = np.histogram_bin_edges(np.zeros(0, dt), nb, range=(lo, hi))
        edge = nbins._edge_formula(lo, hi, nb, edges)
        assert edge is not None
        got = edge(lg.asarray(np.arange(nb + 1))).numpy()
        assert got.dtype == edges.dtype and np.array_equal(got, edges)
