"""pad(mode="wrap") with widths up to the axis length copies slices itself (ops/movement.py):
the same values as np.pad, corners included, for every rank and dtype."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    dtype=st.sampled_from(["uint8", "int32", "float32", "complex128", "bool"]),
    data=st.data(),
)
def test_wrap_padding_matches_numpy(shape, dtype, data) -> None:
    x = (np.arange(np.prod(shape)).reshape(shape) * 7 % 11).astype(dtype)
    widths = tuple((data.draw(st.integers(0, n)), data.draw(st.integers(0, n))) for n in shape)
    want = np.pad(x, widths, mode="wrap")
    got = lg.pad(lg.asarray(x), widths, mode="wrap").numpy()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_wider_than_the_axis_falls_back_to_numpy() -> None:
    x = np.arange(6.0).reshape(2, 3)
    want = np.pad(x, ((3, 5), (4, 0)), mode="wrap")
    np.testing.assert_array_equal(lg.pad(lg.asarray(x), ((3, 5), (4, 0)), mode="wrap").numpy(), want)
