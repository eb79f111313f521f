"""Complex parts (ops/complexparts.py, lazygraph/numlib_complex.py) against NumPy."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from gradcheck import check_grad
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import ALL_DTYPES, arrays, assert_matches, shapes

import lazygraph as lg

COMPLEX = [np.dtype(np.complex64), np.dtype(np.complex128)]
EVERY = st.sampled_from([*ALL_DTYPES, np.dtype(np.float16), *COMPLEX])


def _value(dtype: np.dtype, shape: tuple, data: st.DataObject) -> np.ndarray:
    if dtype.kind != "c":
        return data.draw(arrays(dtype, shape, special=dtype.kind == "f"))
    part = np.float32 if dtype == np.complex64 else np.float64
    re = data.draw(arrays(part, shape, special=True))
    im = data.draw(arrays(part, shape, special=True))
    out = np.empty(shape, dtype)
    out.real, out.imag = re, im
    return out


@settings(deadline=None, max_examples=40)
@given(EVERY, shapes(max_dims=3), st.booleans(), st.data())
def test_parts_match_numpy(dtype, shape, flip, data):
    """real, imag, conj, angle, abs, iscomplex, isreal on every dtype, NaN/inf, 0-d, empty, reversed views."""
    value = _value(dtype, shape, data)
    ref = value[::-1] if flip and value.ndim else value
    lazy = lg.asarray(value)[::-1] if flip and value.ndim else lg.asarray(value)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_matches(lg.real(lazy), np.real(ref), exact_float=True)
        assert_matches(lg.imag(lazy), np.imag(ref), exact_float=True)
        assert_matches(lazy.real, ref.real, exact_float=True)
        assert_matches(lazy.imag, ref.imag, exact_float=True)
        assert_matches(lg.conj(lazy), np.conjugate(ref), exact_float=True)
        assert_matches(lazy.conjugate(), ref.conjugate(), exact_float=True)
        assert_matches(lg.angle(lazy), np.angle(ref))
        assert_matches(lg.angle(lazy, deg=True), np.angle(ref, deg=True))
        assert_matches(lg.iscomplex(lazy), np.iscomplex(ref))
        assert_matches(lg.isreal(lazy), np.isreal(ref))
        if dtype.kind != "b":
            assert_matches(lg.abs(lazy), np.abs(ref))
        assert_matches(np.real(lazy), np.real(ref), exact_float=True)  # NumPy's names dispatch here
        assert_matches(np.conj(lazy), np.conj(ref), exact_float=True)
    assert lg.iscomplexobj(lazy) == np.iscomplexobj(ref)
    assert lg.isrealobj(lazy) == np.isrealobj(ref)


def test_parts_broadcast_in_expressions_and_fuse_for_real_input():
    """Real-input templates compile and give NumPy's bits inside a fused region."""
    x = np.linspace(-3.0, 3.0, 50).reshape(5, 10)
    x[0, 0] = -0.0
    with lg.settings.override(jit_min_size=0):
        got = (
            lg.angle(lg.asarray(x))
            + lg.real(lg.asarray(x)) * 2
            + lg.imag(lg.asarray(x))
            - lg.conj(lg.asarray(x))
        )
        assert_matches(got, np.angle(x) + np.real(x) * 2 + np.imag(x) - np.conj(x), exact_float=True)


def test_real_if_close_is_an_evaluation_point():
    """real_if_close drops a negligible imaginary part (the dtype depends on the values)."""
    z = np.array([1 + 1e-15j, 2 - 1e-16j])
    assert_matches(lg.real_if_close(lg.asarray(z)), np.real_if_close(z))
    w = np.array([1 + 1e-3j])
    assert_matches(lg.real_if_close(lg.asarray(w)), np.real_if_close(w))
    assert_matches(lg.real_if_close(lg.asarray(z), tol=1e-20), np.real_if_close(z, tol=1e-20))
    assert_matches(lg.real_if_close(lg.arange(3)), np.real_if_close(np.arange(3)))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_part_writes_are_recorded_into_the_complex_array(dtype):
    """z.real = v, z.imag[1:] = v, z.imag += 1 write into z; z.real follows later writes to z."""
    want = np.array([1 + 2j, -3 + 0.5j, 0j, math.inf - 1j], dtype=dtype)
    z = lg.asarray(want)
    base = z[::-1]  # a view of z: sees the writes
    before = lg.copy(z)  # recorded before: does not
    want.real = 5
    z.real = 5
    want.imag[1:] = [7, 8, 9]
    z.imag[1:] = lg.asarray([7.0, 8.0, 9.0])
    want.imag += 1
    z.imag += 1
    assert_matches(z, want, exact_float=True)
    assert_matches(base, want[::-1], exact_float=True)
    assert_matches(before, np.array([1 + 2j, -3 + 0.5j, 0j, math.inf - 1j], dtype=dtype), exact_float=True)
    re = z.real
    z[0] = 100 - 100j  # NumPy: re is a view and sees this
    want[0] = 100 - 100j
    assert_matches(re, want.real, exact_float=True)
    whole = lg.asarray(want)
    whole[1:].imag[0] = -1  # writes through a part of a view go into the base
    want[1:].imag[0] = -1
    assert_matches(whole, want, exact_float=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z.real[...] = lg.asarray([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    assert_matches(z.real, np.array([1.0, 2.0, 3.0, 4.0], dtype=want.real.dtype), exact_float=True)


def test_real_part_of_real_arrays_is_a_view_and_imag_read_only():
    """x.real of a real array writes into x (NumPy's view); x.imag is read-only zeros; x.imag = v fails."""
    x = lg.arange(4.0)
    x.real[1] = 9
    assert_matches(x, np.array([0.0, 9.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="read-only"):
        x.imag[0] = 1
    with pytest.raises(TypeError, match="imaginary part"):
        x.imag = 1


def test_gradients_of_parts_of_real_input():
    """real and conj pass the cotangent through, imag and angle have none (finite differences)."""
    x = np.array([[0.5, -1.5, 2.0], [3.0, -0.25, 1.0]])
    check_grad(lambda a: lg.real(a) * a, x)
    check_grad(lambda a: lg.conj(a) ** 2 + lg.imag(a), x)
    check_grad(lambda a: lg.angle(a) + a, x)
    check_grad(lambda a, b: lg.fmod(a, b), x, np.array([0.8, 0.7, -0.65]))


@settings(deadline=None, max_examples=30)
@given(
    st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.float32, np.float64]),
    shapes(max_dims=2),
    st.data(),
)
def test_fmod_matches_numpy(dtype, shape, data):
    """fmod: C's truncated remainder, integer division by zero as NumPy (0), NaN/inf, broadcasting."""
    dtype = np.dtype(dtype)
    a = data.draw(arrays(dtype, shape, special=True))
    b = data.draw(arrays(dtype, shape[-1:] if shape else (), special=True))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.fmod(a, b)
        assert_matches(lg.fmod(lg.asarray(a), lg.asarray(b)), want, exact_float=True)
        assert_matches(np.fmod(lg.asarray(a), 3), np.fmod(a, 3), exact_float=True)
