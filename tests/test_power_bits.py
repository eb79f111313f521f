"""`x ** k` gives NumPy's bits: NumPy's operator takes square, reciprocal or sqrt for some exponents."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend

EXPONENTS = [2, -1, 0.5, 3, 2.0, -2, 1]


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("k", EXPONENTS)
def test_power_operator_matches_numpy_bit_for_bit(dtype: str, k: object) -> None:
    rng = np.random.default_rng(7)
    a = rng.normal(size=257) * 3
    if dtype.startswith("complex"):
        a = a + 1j * rng.normal(size=257)
    a = np.concatenate([a, [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(dtype)
    with np.errstate(all="ignore"):
        want = a**k
        got = (lg.asarray(a) ** k).numpy()
        inplace = lg.asarray(a.copy())
        inplace **= k
        expected_inplace = a.copy()
        expected_inplace **= k
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(inplace.numpy(), expected_inplace)


def test_bool_squared_is_int8_and_int_powers_stay_power() -> None:
    b = np.array([True, False, True])
    assert (lg.asarray(b) ** 2).dtype == (b**2).dtype == np.int8
    i = np.arange(-3, 4)
    np.testing.assert_array_equal((lg.asarray(i) ** 2).numpy(), i**2)
    with pytest.raises(ValueError):
        (lg.asarray(i) ** -1).numpy()
