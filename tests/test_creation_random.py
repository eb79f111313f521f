"""Creation functions and seeded random generators against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import RECORD_ERRORS, arrays, assert_matches, check, dtypes, shapes

import lazygraph as lg

CREATION_DTYPES = [None, np.bool_, np.int8, np.uint8, np.int32, np.int64, np.float32, np.float64]
shape_args = shapes(max_dims=3) | st.integers(0, 4)
creation_dtypes = st.sampled_from(CREATION_DTYPES)


# -- filled arrays --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["zeros", "ones"])
@given(shape=shape_args, dtype=creation_dtypes)
def test_zeros_ones(name, shape, dtype):
    check(lambda: getattr(np, name)(shape, dtype=dtype), lambda: getattr(lg, name)(shape, dtype=dtype))
    check(lambda: getattr(np, name)(shape), lambda: getattr(lg, name)(shape))


@given(shape=shape_args, dtype=creation_dtypes)
def test_empty_shape_and_dtype(shape, dtype):
    expected = np.empty(shape, dtype=dtype)
    got = lg.empty(shape, dtype=dtype)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    value = got.numpy()  # values are unspecified; only the layout is NumPy's
    assert value.shape == expected.shape and value.dtype == expected.dtype
    like = lg.empty_like(lg.asarray(np.zeros(expected.shape, expected.dtype)))
    assert like.shape == expected.shape and like.dtype == expected.dtype


fill_values = (
    st.integers(-5, 5) | st.floats(-5, 5) | st.booleans() | st.sampled_from([np.float32(1.5), np.int8(3)])
)


@given(shape=shape_args, fill=fill_values, dtype=creation_dtypes)
def test_full(shape, fill, dtype):
    check(lambda: np.full(shape, fill), lambda: lg.full(shape, fill))
    if dtype is not None and not (np.dtype(dtype).kind == "u" and isinstance(fill, float) and fill < 0):
        # (a negative float into an unsigned dtype is undefined in C; a negative int raises)
        check(lambda: np.full(shape, fill, dtype=dtype), lambda: lg.full(shape, fill, dtype=dtype))


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize(
    ("fill", "dtype"), [(-1, np.uint8), (300, np.int8), (2**70, np.int64), (1 + 2j, np.float64)]
)
def test_full_bad_fill_raises_at_record(fill, dtype):
    check(lambda: np.full(3, fill, dtype=dtype), lambda: lg.full(3, fill, dtype=dtype))
    if np.dtype(dtype).kind in "iu":
        x = np.zeros(3, dtype)
        check(lambda: np.full_like(x, fill), lambda: lg.full_like(lg.asarray(x), fill))


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "full_like"])
@given(x=arrays(dtypes, shapes(max_dims=3)), dtype=creation_dtypes, lazy=st.booleans())
def test_like_functions(name, x, dtype, lazy):
    src = lg.asarray(x) if lazy else x
    args = (2,) if name == "full_like" else ()
    check(
        lambda: getattr(np, name)(x, *args, dtype=dtype), lambda: getattr(lg, name)(src, *args, dtype=dtype)
    )
    check(lambda: getattr(np, name)(x, *args), lambda: getattr(lg, name)(src, *args))


def test_negative_shape_raises_at_record():
    for fn in (lg.zeros, lg.ones, lg.empty):
        with pytest.raises(ValueError):
            np.zeros((2, -1))
        with pytest.raises(ValueError):
            fn((2, -1))
    with pytest.raises(TypeError):
        lg.zeros((2.5, 1))


# -- ranges ---------------------------------------------------------------------------------

small_numbers = st.integers(-10, 10) | st.sampled_from([0.5, -1.5, 2.25, 3.0, -0.25, 7.5])


@given(
    start=small_numbers,
    stop=small_numbers,
    step=small_numbers.filter(lambda s: s != 0),
    dtype=st.sampled_from([None, np.int64, np.int32, np.float32, np.float64]),
)
def test_arange(start, stop, step, dtype):
    check(lambda: np.arange(start, stop, step), lambda: lg.arange(start, stop, step))
    check(lambda: np.arange(start, stop), lambda: lg.arange(start, stop))
    check(lambda: np.arange(stop), lambda: lg.arange(stop))
    check(
        lambda: np.arange(start, stop, step, dtype=dtype), lambda: lg.arange(start, stop, step, dtype=dtype)
    )


def test_arange_step_zero_raises():
    with pytest.raises((ValueError, ZeroDivisionError)):
        np.arange(0, 5, 0)
    with pytest.raises(ValueError):
        lg.arange(0, 5, 0)


def test_arange_float_steps():
    for args in [
        (0, 1, 0.1),
        (1, 0, -0.1),
        (0.0, 2.0, 0.3),
        (-1.0, 1.0, 0.25),
        (0, 10, 3),
        (10, 0, -3),
        (0.5, 5),
    ]:
        check(lambda args=args: np.arange(*args), lambda args=args: lg.arange(*args))


@given(
    start=small_numbers,
    stop=small_numbers,
    num=st.integers(0, 7),
    endpoint=st.booleans(),
    dtype=st.sampled_from([None, np.float32, np.float64, np.int64]),
)
def test_linspace(start, stop, num, endpoint, dtype):
    check(
        lambda: np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype),
        lambda: lg.linspace(start, stop, num, endpoint=endpoint, dtype=dtype),
    )
    check(lambda: np.linspace(start, stop), lambda: lg.linspace(start, stop))


def test_linspace_negative_num_raises():
    with pytest.raises(ValueError):
        np.linspace(0, 1, -1)
    with pytest.raises(ValueError):
        lg.linspace(0, 1, -1)


@given(n=st.integers(0, 5), m=st.none() | st.integers(0, 5), k=st.integers(-6, 6), dtype=creation_dtypes)
def test_eye(n, m, k, dtype):
    check(lambda: np.eye(n, m, k, dtype=dtype), lambda: lg.eye(n, m, k, dtype=dtype))
    check(lambda: np.eye(n), lambda: lg.eye(n))
    check(lambda: np.eye(n, k=k), lambda: lg.eye(n, k=k))


# -- asarray / array -------------------------------------------------------------------------

python_values = st.recursive(
    st.integers(-5, 5) | st.floats(-5, 5) | st.booleans(),
    lambda children: st.lists(children, min_size=0, max_size=3),
    max_leaves=8,
)


@given(value=python_values, dtype=creation_dtypes)
def test_asarray_python_values(value, dtype):
    check(lambda: np.asarray(value), lambda: lg.asarray(value), RECORD_ERRORS + (ValueError,))
    check(lambda: np.array(value), lambda: lg.array(value), RECORD_ERRORS)
    if dtype is not None and np.dtype(dtype).kind != "u":
        check(lambda: np.asarray(value, dtype=dtype), lambda: lg.asarray(value, dtype=dtype), RECORD_ERRORS)


@pytest.mark.parametrize(
    "value",
    [
        3,
        2.5,
        True,
        1 + 2j,
        [1, 2.5],
        [True, 2],
        [[1, 2], [3, 4]],
        (1, 2, 3),
        [],
        np.float32(2.5),
        np.int8(-3),
        np.bool_(True),
    ],
)
def test_asarray_default_dtypes(value):
    check(lambda: np.asarray(value), lambda: lg.asarray(value))


@pytest.mark.parametrize("value", [[[1, 2], [3]], {"a": 1}, object(), None])
def test_asarray_rejects_non_numeric(value):
    with pytest.raises((TypeError, ValueError)):
        lg.asarray(value)


@given(x=arrays(dtypes, shapes()))
def test_asarray_copies_numpy_input(x):
    src = x.copy()
    lx = lg.asarray(src)
    la = lg.array(src)
    src[...] = np.logical_not(src) if src.dtype == np.bool_ else src + 1  # every element changes
    assert_matches(lx, x)
    assert_matches(la, x)


def test_asarray_of_a_noncontiguous_view():
    base = np.arange(24).reshape(4, 6)
    view = base[::2, ::-3]
    lx = lg.asarray(view)
    base[...] = 0
    assert_matches(lx, np.arange(24).reshape(4, 6)[::2, ::-3])


def test_asarray_and_array_of_lazy_arrays():
    x = lg.asarray(np.arange(4.0))
    assert lg.asarray(x) is x  # like np.asarray: no copy
    y = lg.array(x)  # like np.array: a copy
    y[0] = 100.0
    assert_matches(x, np.arange(4.0))
    z = lg.asarray(x, dtype=np.float32)
    assert_matches(z, np.arange(4.0, dtype=np.float32))
    w = lg.asarray(x, copy=True)
    w[1] = -1.0
    assert_matches(x, np.arange(4.0))


def test_asarray_device():
    assert lg.asarray([1, 2], device="cpu").device == "cpu"
    with pytest.raises(ValueError):
        lg.asarray([1, 2], device="gpu:7")


# -- random ----------------------------------------------------------------------------------

sizes = st.none() | st.integers(0, 5) | shapes(max_dims=3)


@given(seed=st.integers(0, 2**32 - 1), size=sizes, loc=st.floats(-3, 3), scale=st.floats(0, 3))
@settings(max_examples=30)
def test_random_normal_matches_numpy(seed, size, loc, scale):
    expected = np.random.default_rng(seed).normal(loc, scale, size)
    assert_matches(lg.random.default_rng(seed).normal(loc, scale, size), expected, exact_float=True)
    expected = np.random.default_rng(seed).standard_normal(size)
    assert_matches(lg.random.default_rng(seed).standard_normal(size), expected, exact_float=True)


@given(seed=st.integers(0, 2**32 - 1), size=sizes, low=st.floats(-3, 0), high=st.floats(0.5, 3))
@settings(max_examples=30)
def test_random_uniform_and_random(seed, size, low, high):
    assert_matches(
        lg.random.default_rng(seed).uniform(low, high, size),
        np.random.default_rng(seed).uniform(low, high, size),
        exact_float=True,
    )
    assert_matches(
        lg.random.default_rng(seed).random(size), np.random.default_rng(seed).random(size), exact_float=True
    )


@given(
    seed=st.integers(0, 2**32 - 1),
    size=sizes,
    low=st.integers(-5, 5),
    span=st.integers(1, 20),
    dtype=st.sampled_from([np.int64, np.int32, np.int8, np.uint8]),
    endpoint=st.booleans(),
)
@settings(max_examples=30)
def test_random_integers(seed, size, low, span, dtype, endpoint):
    if np.dtype(dtype).kind == "u":
        low = abs(low)
    expected = np.random.default_rng(seed).integers(low, low + span, size, dtype=dtype, endpoint=endpoint)
    got = lg.random.default_rng(seed).integers(low, low + span, size, dtype=dtype, endpoint=endpoint)
    assert_matches(got, expected)
    assert_matches(
        lg.random.default_rng(seed).integers(span, size=size),
        np.random.default_rng(seed).integers(span, size=size),
    )


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 8), x=arrays(dtypes, shapes(min_dims=1, max_dims=3)))
@settings(max_examples=30)
def test_random_permutation(seed, n, x):
    assert_matches(lg.random.default_rng(seed).permutation(n), np.random.default_rng(seed).permutation(n))
    assert_matches(lg.random.default_rng(seed).permutation(x), np.random.default_rng(seed).permutation(x))
    assert_matches(
        lg.random.default_rng(seed).permutation(lg.asarray(x)), np.random.default_rng(seed).permutation(x)
    )


@given(
    seed=st.integers(0, 2**32 - 1),
    size=shapes(max_dims=2),
    dtype=st.sampled_from([np.float32, np.float64, np.float16]),
)
@settings(max_examples=30)
def test_random_dtype_casts(seed, size, dtype):
    """`dtype=` casts NumPy's float64 draws (the same numbers, stored in `dtype`)."""
    ref = np.random.default_rng(seed)
    rng = lg.random.default_rng(seed)
    assert_matches(rng.normal(size=size, dtype=dtype), ref.normal(size=size).astype(dtype), exact_float=True)
    assert_matches(
        rng.uniform(size=size, dtype=dtype), ref.uniform(size=size).astype(dtype), exact_float=True
    )
    assert_matches(rng.random(size, dtype=dtype), ref.random(size).astype(dtype), exact_float=True)


def test_random_sequence_of_draws_and_reproducibility():
    def program(rng):
        return [
            rng.normal(size=(2, 3)),
            rng.uniform(-1, 1, size=4),
            rng.integers(0, 10, size=(3,)),
            rng.permutation(5),
            rng.random((2, 2)),
            rng.normal(1.0, 2.0),
        ]

    expected = program(np.random.default_rng(1234))
    first = program(lg.random.default_rng(1234))
    second = program(lg.random.default_rng(1234))
    for e, a, b in zip(expected, first, second):
        assert_matches(a, e, exact_float=True)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    other = program(lg.random.default_rng(4321))
    assert not np.array_equal(other[0].numpy(), first[0].numpy())


def test_random_draws_enter_graphs_lazily():
    rng = lg.random.default_rng(0)
    x = rng.normal(size=(3, 3))
    y = lg.tanh(x @ x.T) * 2
    ref = np.random.default_rng(0).normal(size=(3, 3))
    assert_matches(y, np.tanh(ref @ ref.T) * 2, rtol=1e-12)


@pytest.mark.parametrize(
    "kw",
    [
        {"size": 5},
        {"size": 2, "replace": False},
        {"size": 3, "p": [0.5, 0.2, 0.3]},
        {"size": 2, "axis": 1},
        {},
    ],
)
def test_generator_choice_draws_numpys_stream(kw):
    """choice over an int, a NumPy array and a lazy array gives NumPy's draws (slices of a lazy a)."""
    x = np.arange(12.0).reshape(3, 4)
    assert_matches(
        lg.random.default_rng(3).choice(lg.asarray(x), **kw), np.random.default_rng(3).choice(x, **kw)
    )
    assert_matches(lg.random.default_rng(3).choice(7, 4), np.random.default_rng(3).choice(7, 4))
    with pytest.raises(ValueError):
        lg.random.default_rng(3).choice(lg.asarray(x), 4, replace=False)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_generator_shuffle_is_a_recorded_write(axis):
    """shuffle permutes in place as NumPy's does; views see it, values recorded before do not."""
    x = np.arange(12.0).reshape(3, 4)
    a = lg.asarray(x)
    view, before = a[1:], a * 1
    assert lg.random.default_rng(5).shuffle(a, axis=axis) is None
    want = x.copy()
    np.random.default_rng(5).shuffle(want, axis=axis)
    assert_matches(a, want)
    assert_matches(view, want[1:])
    assert_matches(before, x)
