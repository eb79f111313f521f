"""convolve/correlate with up to 64 taps over many rows are sums of shifted slices: NumPy's values and dtypes."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.numlib_signal as ns

RNG = np.random.default_rng(29)
# small ones take the gathered windows, (3000, 32) and (40000, 2) the shifted slices
SIZES = [(100, 5), (5, 100), (7, 7), (3000, 32), (40000, 2), (10, 65), (1, 1), (2, 40)]


@pytest.mark.parametrize("na, nv", SIZES)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int8])
def test_matches_numpy(na: int, nv: int, mode: str, dtype: type) -> None:
    """Every mode, both argument orders, real, complex and integer taps (integers exactly)."""
    a = (RNG.normal(size=na) * 5).astype(dtype)
    v = (RNG.normal(size=nv) * 5).astype(dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    # rounding is relative to the terms' size, not to a sum that cancels
    scale = float(np.abs(a).astype(float).max() * np.abs(v).astype(float).max() * min(na, nv))
    for f in ("convolve", "correlate"):
        e = getattr(np, f)(a, v, mode)
        got = getattr(lg, f)(lg.asarray(a), lg.asarray(v), mode).numpy()
        assert got.shape == e.shape and got.dtype == e.dtype
        if np.dtype(dtype).kind in "iu":
            assert np.array_equal(got, e)
        else:
            np.testing.assert_allclose(got, e, rtol=0, atol=tol * scale)


def test_windows_leaving_the_input_add_no_nan() -> None:
    """Infinite values next to the padding: the missing terms are absent, not 0 * inf."""
    a, v = np.array([1.0, np.inf, 2.0]), np.array([1.0, 2.0, 3.0])
    for mode in ("full", "same", "valid"):
        for x, y in ((a, v), (v, a)):
            np.testing.assert_array_equal(lg.convolve(x, y, mode).numpy(), np.convolve(x, y, mode))
            np.testing.assert_array_equal(lg.correlate(x, y, mode).numpy(), np.correlate(x, y, mode))


def test_no_window_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A moving average over 32 taps records slices, not the gathered rows x taps windows."""
    gathered: list[tuple] = []
    orig = ns.Array.__getitem__

    def spy(self, key):  # noqa: ANN001, ANN202
        if isinstance(key, np.ndarray) and key.ndim == 2:
            gathered.append(key.shape)
        return orig(self, key)

    monkeypatch.setattr(ns.Array, "__getitem__", spy)
    x = RNG.normal(size=5000)
    got = lg.convolve(lg.asarray(x), np.ones(32) / 32, mode="valid").numpy()
    np.testing.assert_allclose(got, np.convolve(x, np.ones(32) / 32, mode="valid"), rtol=0, atol=1e-13)
    assert gathered == []


def test_roll_int_shift_and_axis_match_numpy() -> None:
    """roll's lean path (one int shift, one int axis) and the broadcast one give NumPy's arrays and errors."""
    a = np.arange(24).reshape(2, 3, 4)
    for sh, ax in [
        (1, 0),
        (-1, 1),
        (5, 2),
        (0, 0),
        (3, None),
        ((1, 2), (0, 2)),
        (1, -1),
        (-7, -2),
        (2, (0, 1)),
    ]:
        assert np.array_equal(lg.roll(lg.asarray(a), sh, ax).numpy(), np.roll(a, sh, ax))
    for ax in (3, -4):
        with pytest.raises(np.exceptions.AxisError):
            lg.roll(lg.asarray(a), 1, ax)


def test_small_windows_stay_gathered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A few hundred windows take the gathered matrix (fewer nodes to record); many take the slices."""
    calls: list[int] = []
    orig = ns._shifted_rows

    def spy(a, v, rows, dt):  # noqa: ANN001, ANN202
        calls.append(len(rows))
        return orig(a, v, rows, dt)

    monkeypatch.setattr(ns, "_shifted_rows", spy)
    x = RNG.normal(size=300)
    lg.convolve(lg.asarray(x), np.ones(8) / 8, mode="valid").numpy()
    assert calls == []
    lg.convolve(lg.asarray(RNG.normal(size=20000)), np.ones(8) / 8, mode="valid").numpy()
    assert calls == [19993]
