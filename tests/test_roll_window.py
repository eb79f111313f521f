"""roll as a window of a wrap-padded copy (lazygraph/numlib_roll.py): NumPy's values, copies' semantics."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad

import lazygraph as lg
from lazygraph import numlib_roll


def _grid(shape: tuple[int, ...], dtype: str = "uint8", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 200, shape).astype(dtype)


@pytest.mark.parametrize("shape", [(7,), (8, 9), (5, 12), (4, 6, 8), (1, 8), (16, 16)])
@pytest.mark.parametrize("dtype", ["uint8", "float64", "int32", "complex128", "bool"])
def test_nested_rolls_match_numpy(shape: tuple[int, ...], dtype: str) -> None:
    """Every roll of a roll (shifts within and beyond the padded range, both signs) equals NumPy's."""
    a = _grid(shape, dtype)
    x = lg.asarray(a)
    for s0 in (-3, -1, 0, 1, 2, 5):
        for s1 in (-2, 0, 1, 7):
            ax1 = min(1, len(shape) - 1)
            got = lg.roll(lg.roll(x, s0, axis=0), s1, axis=ax1)
            want = np.roll(np.roll(a, s0, axis=0), s1, axis=ax1)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.numpy(), want)


def test_life_neighbours_are_one_pad() -> None:
    """The eight neighbour rolls of one grid read one padded copy; the counts are NumPy's."""
    a = _grid((32, 40)) % 2
    g = lg.asarray(a)
    rolls = [
        lg.roll(lg.roll(g, dy, axis=0), dx, axis=1)
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
        if (dy, dx) != (0, 0)
    ]
    pads = {r.node.inputs[0] for r in rolls if r.node.inputs}
    assert len(pads) == 1 and next(iter(pads)).op.name == "pad"
    want = sum(
        np.roll(np.roll(a, dy, 0), dx, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)
    )
    np.testing.assert_array_equal(sum(rolls).numpy(), want)


def test_roll_results_are_independent_copies() -> None:
    """Writing into one roll result changes neither its base nor another roll of the same base."""
    a = np.arange(30.0).reshape(5, 6)
    x = lg.asarray(a)
    r1 = lg.roll(x, 1, axis=0)
    r2 = lg.roll(x, -1, axis=0)
    r1[0, 0] = -5.0
    r1 += 1
    np.testing.assert_array_equal(r2.numpy(), np.roll(a, -1, 0))
    np.testing.assert_array_equal(x.numpy(), a)
    want = np.roll(a, 1, 0)
    want[0, 0] = -5.0
    np.testing.assert_array_equal(r1.numpy(), want + 1)
    # a roll of the written result composes on its new value, not on the base
    np.testing.assert_array_equal(lg.roll(r1, 1, axis=1).numpy(), np.roll(want + 1, 1, 1))


def test_base_written_after_roll() -> None:
    """A roll recorded before its base is written keeps the old values; a later roll sees the new ones."""
    a = np.arange(12.0).reshape(3, 4)
    x = lg.asarray(a)
    r = lg.roll(x, 1, axis=1)
    x[...] = 0.0
    x += 2
    np.testing.assert_array_equal(r.numpy(), np.roll(a, 1, 1))
    np.testing.assert_array_equal(lg.roll(r, 1, axis=0).numpy(), np.roll(np.roll(a, 1, 1), 1, 0))
    np.testing.assert_array_equal(lg.roll(x, 1, axis=1).numpy(), np.full((3, 4), 2.0))


def test_roll_of_evaluated_roll_and_of_views() -> None:
    """An evaluated roll result is a value of its own; rolls of views and of roll views match NumPy."""
    a = _grid((9, 10), "int64")
    x = lg.asarray(a)
    r = lg.roll(x, 2, axis=0)
    r.numpy()
    np.testing.assert_array_equal(lg.roll(r, -1, axis=1).numpy(), np.roll(np.roll(a, 2, 0), -1, 1))
    v = x[1:, ::2]
    np.testing.assert_array_equal(lg.roll(v, 1, axis=1).numpy(), np.roll(a[1:, ::2], 1, 1))
    np.testing.assert_array_equal(lg.roll(r[2:], 1, axis=0).numpy(), np.roll(np.roll(a, 2, 0)[2:], 1, 0))


def test_large_and_zero_shifts_and_edge_shapes() -> None:
    """Shifts beyond a quarter of the axis take the concat path; zero shifts copy; empty axes work."""
    a = _grid((8, 8), "float32")
    x = lg.asarray(a)
    for s in (3, 4, 8, -9, 0, 16):
        np.testing.assert_array_equal(lg.roll(x, s, axis=1).numpy(), np.roll(a, s, 1))
    assert numlib_roll.roll_window(x, 4, 1) is None
    e = np.zeros((0, 3))
    np.testing.assert_array_equal(lg.roll(lg.asarray(e), 1, axis=1).numpy(), np.roll(e, 1, 1))
    z = lg.roll(x, 0, axis=0)
    z[0, 0] = 7.0
    assert x.numpy()[0, 0] == a[0, 0]


def test_roll_gradient() -> None:
    """Gradients through pad and window (rolls of rolls, in-range shifts) match finite differences."""
    m = np.random.default_rng(1).standard_normal((5, 6))
    check_grad(lambda x: lg.roll(lg.roll(x, 1, axis=0), -1, axis=1), m)
    check_grad(lambda x: lg.roll(x, 1, axis=1) * lg.roll(x, -1, axis=0), m)
