"""NumPy scalar operands (`x * np.float32(0.5)`, `np.int32(3) + x`, `x += np.float64(1)`).

They take the lean recording path (a private 0-d leaf, memoized like a 0-d array of the
scalar's dtype, whose NEP 50 promotion they share): the results must equal NumPy's in dtype and
value on the first recording (the memo's miss) and the later ones (its hit), on either side of
the operator, in place, and on a device.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import lazygraph as lg

ARRAY_DTYPES = ["bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64", "complex64"]
SCALARS = [
    np.bool_(True),
    np.int8(-3),
    np.uint8(200),
    np.int32(7),
    np.int64(-300),
    np.uint64(5),
    np.float16(1.5),
    np.float32(-0.25),
    np.float64(2.5),
    np.complex64(1 - 2j),
    np.complex128(0.5 + 1j),
]
OPS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.lt]


def _array(dtype: str) -> np.ndarray:
    return (np.arange(-3, 5) % 3 if dtype == "bool" else np.arange(1, 9)).astype(dtype)


def _numpy(f, a, b):  # noqa: ANN001, ANN202
    with np.errstate(all="ignore"):
        try:
            return f(a, b)
        except (TypeError, np.exceptions.DTypePromotionError) as e:
            return e


@pytest.mark.parametrize("dtype", ARRAY_DTYPES)
@pytest.mark.parametrize("scalar", SCALARS, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("f", OPS, ids=lambda f: f.__name__)
def test_binary_operators_match_numpy_both_sides(dtype: str, scalar: np.generic, f) -> None:  # noqa: ANN001
    x = _array(dtype)
    for left in (True, False):
        want = _numpy(f, x, scalar) if left else _numpy(f, scalar, x)
        for _ in range(2):  # the signature's first recording, then its memo
            a = lg.asarray(x)
            if isinstance(want, Exception):
                with pytest.raises(type(want)):
                    f(a, scalar) if left else f(scalar, a)
                continue
            got = f(a, scalar) if left else f(scalar, a)
            assert got.dtype == want.dtype, (left, got.dtype, want.dtype)
            np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize(
    ("dtype", "scalar"),
    [
        ("int32", np.int32(4)),
        ("int32", np.float64(1.5)),
        ("float32", np.float64(0.5)),
        ("uint8", np.int64(-1)),
    ],
)
def test_in_place_operators_follow_numpys_casting(dtype: str, scalar: np.generic) -> None:
    for _ in range(2):
        x = _array(dtype)
        a = lg.asarray(x.copy())
        try:
            with np.errstate(all="ignore"):
                x += scalar
        except (TypeError, OverflowError) as e:
            with pytest.raises(TypeError if isinstance(e, TypeError) else type(e)):
                a += scalar
            continue
        a += scalar
        assert a.dtype == x.dtype
        np.testing.assert_array_equal(a.numpy(), x)


def test_the_scalar_is_copied_and_joins_the_arrays_device() -> None:
    x = lg.asarray(np.arange(4.0, dtype=np.float32), device="cuda-emulated")
    s = np.float32(3.0)
    y = x * s
    assert y.device == "cuda-emulated" and y.dtype == np.float32
    np.testing.assert_array_equal(y.to_device("cpu").numpy(), np.arange(4.0, dtype=np.float32) * 3)


def test_gradients_flow_past_a_numpy_scalar() -> None:
    w = lg.asarray(np.array([1.0, -2.0, 3.0]))
    w.requires_grad_()
    loss = ((w * np.float64(3.0) - np.float64(1.0)) ** 2).sum()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * (3 * np.array([1.0, -2.0, 3.0]) - 1) * 3)
