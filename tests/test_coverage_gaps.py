"""Differential tests for the coverage gaps closed late: `a.view(dtype)`, in-place `a.resize`,
O(n) `partition`/`argpartition`, 0-d boolean masks, `meshgrid`'s list, the complex special
values of `expm1`/`tanh`, and gradients of qr, eig, eigvals, pinv, lstsq and of complex values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gradcheck import check_grad
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import arrays, shapes

import lazygraph as lg

L = lg.linalg
VIEW_DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int16, np.int32, np.float32, np.int64,
                                     np.float64, np.complex64, np.complex128)]  # fmt: skip


def _evaluations() -> int:
    return lg.debug.evaluation_stats()["evaluations"]


def _outcome(fn):  # noqa: ANN001, ANN202
    """(value, None) or (None, exception type) of fn()."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(), None
    except (ValueError, TypeError) as e:
        return None, type(e)


def _windows(x: np.ndarray) -> st.SearchStrategy:
    """The array itself, a reversed last axis, a step of 2 on the first axis, or a transpose."""
    options = [lambda a: a]
    if x.ndim:
        options += [lambda a: a[..., ::-1], lambda a: a[::2]]
    if x.ndim > 1:
        options.append(lambda a: a.T)
    return st.sampled_from(options)


# -- view(dtype) -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(VIEW_DTYPES), st.sampled_from(VIEW_DTYPES), shapes(0, 3))
def test_view_dtype_matches_numpy(data, src, dst, shape):
    x = data.draw(arrays(np.dtype(np.uint8), shape + (src.itemsize,))).view(src).reshape(shape)
    window = data.draw(_windows(x))
    a = lg.asarray(x)
    want, err = _outcome(lambda: window(x).view(dst))
    before = _evaluations()
    got, got_err = _outcome(lambda: window(a).view(dst))
    assert got_err == err
    assert _evaluations() == before  # recorded, or refused at the call
    if err is None:
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.asarray(got).tobytes() == want.tobytes()


def test_view_dtype_writes_reach_the_array_and_reads_follow_it():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    a = lg.asarray(x)
    b = a.view(np.uint8)
    b[0, :4] = 255  # through the view: a recorded write into a
    x.view(np.uint8)[0, :4] = 255
    b += 1
    x.view(np.uint8)[...] += 1
    np.testing.assert_array_equal(np.asarray(a), x)
    a[1, 1] = -7  # into a: the view reads a's new bytes
    x[1, 1] = -7
    np.testing.assert_array_equal(np.asarray(b), x.view(np.uint8))
    f = lg.asarray(np.array([1.5, -2.0])).view(np.int64)
    np.testing.assert_array_equal(np.asarray(f), np.array([1.5, -2.0]).view(np.int64))


def test_view_dtype_errors_name_the_call():
    a = lg.asarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    with pytest.raises(ValueError, match="last axis must be contiguous"):
        a.T.view(np.int16)
    with pytest.raises(ValueError, match="divisor"):
        a.view(np.int64)
    with pytest.raises(ValueError, match="0d array"):
        a[0, 0].view(np.int16)
    with pytest.raises(TypeError, match="type="):
        a.view(np.int32, type=np.matrix)
    with pytest.raises(ValueError, match="read-only"):
        lg.broadcast_to(lg.arange(4, dtype=np.int32), (2, 4)).view(np.float32)[0, 0] = 1.0


# -- a.resize ----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.data(),
    shapes(0, 3),
    st.one_of(st.integers(0, 7), st.lists(st.integers(0, 4), max_size=3).map(tuple)),
    st.sampled_from([np.float64, np.int32, np.bool_, np.complex64]),
)
def test_resize_in_place_matches_numpy(data, shape, new_shape, dtype):
    x = data.draw(arrays(np.dtype(np.float64), shape)).astype(dtype)
    a = lg.asarray(x)
    a[...] = a  # a pending write: the array still owns its buffer
    before = _evaluations()
    assert a.resize(new_shape) is None
    assert _evaluations() == before
    want = x.copy()
    want.resize(new_shape, refcheck=False)
    assert a.shape == want.shape and a.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(a), want)
    a.resize(*((new_shape,) if isinstance(new_shape, int) else new_shape))  # separate ints too
    assert a.shape == want.shape


def test_resize_refuses_views_and_viewed_arrays_as_numpy():
    a = lg.arange(4.0)
    v = a[1:]
    with pytest.raises(ValueError, match="own its data"):
        v.resize(2)
    with pytest.raises(ValueError, match="referenced"):
        a.resize(8)
    a.resize(8, refcheck=False)  # v keeps the old values (NumPy would leave it dangling)
    np.testing.assert_array_equal(np.asarray(a), [0, 1, 2, 3, 0, 0, 0, 0])
    np.testing.assert_array_equal(np.asarray(v), [1, 2, 3])
    with pytest.raises(ValueError, match="negative"):
        lg.zeros(3).resize((-1,))


# -- partition / argpartition ------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.data(),
    shapes(1, 3, min_side=0),
    st.sampled_from([np.float64, np.float32, np.int64, np.int8, np.bool_]),
    st.booleans(),
)
def test_partition_equals_numpy(data, shape, dtype, special):
    x = data.draw(arrays(np.dtype(dtype), shape, special=special and np.dtype(dtype).kind == "f"))
    x = data.draw(_windows(x))(x)
    axis = data.draw(st.sampled_from([-1, 0, None]))
    n = x.size if axis is None else x.shape[axis]
    kth = data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3) if n else st.just([0]))
    kth = kth[0] if len(kth) == 1 and data.draw(st.booleans()) else kth
    a = lg.asarray(x)
    before = _evaluations()
    p, ap = lg.partition(a, kth, axis=axis), lg.argpartition(a, kth, axis=axis)
    assert _evaluations() == before
    want, want_idx = np.partition(x, kth, axis=axis), np.argpartition(x, kth, axis=axis)
    got, idx = np.asarray(p), np.asarray(ap)
    assert got.dtype == want.dtype and idx.dtype == want_idx.dtype and got.shape == want.shape
    np.testing.assert_array_equal(idx, want_idx)  # NumPy's own selection
    flat, ax = (x.reshape(-1), 0) if axis is None else (x, axis)
    np.testing.assert_array_equal(got, np.take_along_axis(flat, idx, axis=ax))
    for k in np.atleast_1d(kth) if x.size else ():  # the kth values are NumPy's, in sorted place
        np.testing.assert_array_equal(np.take(got, [k % n], axis=ax), np.take(want, [k % n], axis=ax))


def test_partition_method_gradient_and_errors():
    x = np.array([[3.0, -1.0, 2.5, 0.5], [1.0, 4.0, -2.0, 0.0]])
    a = lg.asarray(x)
    a.partition(1)
    want = x.copy()
    want.partition(1)
    np.testing.assert_array_equal(np.asarray(a), want)
    check_grad(lambda v: lg.partition(v, [0, 2], axis=1) * lg.arange(1.0, 5.0), x)
    check_grad(lambda v: lg.partition(v, 1, axis=0), x)
    with pytest.raises(ValueError, match="out of bounds"):
        lg.partition(lg.asarray(x), 4)
    with pytest.raises(TypeError, match="static"):
        lg.partition(lg.asarray(x), lg.asarray(1))


# -- 0-d boolean masks -------------------------------------------------------------------------


_ITEMS = st.sampled_from([0, -1, slice(None), slice(1, None), None, Ellipsis])


@settings(max_examples=80, deadline=None)
@given(st.data(), shapes(0, 3, min_side=1), st.lists(st.booleans(), min_size=1, max_size=2))
def test_zero_d_boolean_index_matches_numpy(data, shape, truths):
    x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    items = data.draw(st.lists(_ITEMS, max_size=len(shape)))
    if items.count(Ellipsis) > 1 or sum(1 for i in items if i is not None and i is not Ellipsis) > x.ndim:
        return
    kinds = [data.draw(st.sampled_from([bool, np.bool_, np.array, lg.asarray])) for _ in truths]
    key = list(items)
    for t, kind in zip(truths, kinds, strict=True):
        key.insert(data.draw(st.integers(0, len(key))), kind(t))
    np_key = tuple(np.asarray(k) if isinstance(k, lg.Array) else k for k in key)
    want = x[np_key]
    got = lg.asarray(x)[tuple(key)]
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)
    y, ly = x.copy(), lg.asarray(x)
    y[np_key] = -1
    ly[tuple(key)] = -1
    np.testing.assert_array_equal(np.asarray(ly), y)


def test_zero_d_boolean_mask_of_a_zero_d_array_and_mixed_index_arrays():
    a = lg.asarray(np.array(5.0))
    assert np.asarray(a[lg.asarray(True)]).tolist() == [5.0]
    assert a[np.array(False)].shape == (0,)
    a[np.array(True)] = 7.0
    a[np.array(False)] = 8.0
    assert float(a) == 7.0
    with pytest.raises(IndexError, match="0-d boolean"):
        lg.zeros((2, 3))[True, [0, 1]]


# -- meshgrid, complex special values -----------------------------------------------------------


def test_meshgrid_is_a_list_as_the_array_api_asks():
    out = lg.meshgrid(lg.arange(3), lg.arange(2))
    assert type(out) is list and [o.shape for o in out] == [(2, 3), (2, 3)]
    assert type(np.meshgrid(lg.arange(3))) is list  # NumPy's function reaches lazygraph's


INF, NAN = np.inf, np.nan
# (z, expm1(z)) from the Array API 2024.12 special cases; a NaN part matches any NaN
EXPM1 = [
    (complex(0.0, 0.0), complex(0.0, 0.0)),
    (complex(-0.0, 0.0), complex(0.0, 0.0)),
    (complex(INF, 0.0), complex(INF, 0.0)),
    (complex(-INF, INF), complex(-1.0, 0.0)),
    (complex(INF, INF), complex(INF, NAN)),
    (complex(-INF, NAN), complex(-1.0, 0.0)),
    (complex(INF, NAN), complex(INF, NAN)),
    (complex(NAN, 0.0), complex(NAN, 0.0)),
    (complex(-INF, 2.0), complex(-1.0, 0.0) + 0.0 * np.exp(2j)),
    (complex(1.0, INF), complex(NAN, NAN)),
]
TANH = [
    (complex(INF, 2.0), complex(1.0, 0.0)),
    (complex(INF, -2.0), complex(1.0, -0.0)),
    (complex(-INF, 2.0), complex(-1.0, 0.0)),
    (complex(INF, 0.0), complex(1.0, 0.0)),
]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name,table", [("expm1", EXPM1), ("tanh", TANH)])
def test_complex_special_values_follow_the_standard(dtype, name, table):
    z = np.array([c for c, _ in table], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = np.asarray(getattr(lg, name)(lg.asarray(z)))
        finite = np.array([1 + 1j, -0.5 + 2j, 1e-20 + 1e-20j], dtype=dtype)
        fin = np.asarray(getattr(lg, name)(lg.asarray(finite)))
    assert got.dtype == dtype
    for g, (_, w) in zip(got, table, strict=True):
        for part, want in ((g.real, w.real), (g.imag, w.imag)):
            assert (np.isnan(part) and np.isnan(want)) or (
                part == want and np.signbit(part) == np.signbit(want)
            )
    np.testing.assert_array_equal(fin, getattr(np, name)(finite))  # finite values: NumPy's bits


# -- gradients ---------------------------------------------------------------------------------

RNG = np.random.default_rng(7)
PAIR = np.array([[0.0, -2.0, 0.3], [1.0, 0.5, 0.1], [0.2, 0.4, 1.0]])  # one complex pair
REAL = np.array([[2.0, 1.0, 0.3], [0.5, 3.0, 0.1], [0.2, -0.4, -1.0]])


@pytest.mark.parametrize("m,n", [(4, 3), (3, 3), (2, 4)])
def test_qr_pinv_gradients(m, n):
    a = RNG.standard_normal((m, n))
    check_grad(lambda x: L.qr(x)[0], a)
    check_grad(lambda x: L.qr(x)[1] + L.qr(x)[0].sum(), a)
    check_grad(lambda x: L.qr(x, mode="r"), a)
    check_grad(lambda x: L.pinv(x), a)
    check_grad(lambda x: L.qr(x)[0], RNG.standard_normal((2, m, n)))


def test_qr_complete_of_a_tall_matrix_has_no_gradient_and_pinv_hermitian_reads_one_triangle():
    a = lg.asarray(RNG.standard_normal((4, 2)), requires_grad=True)
    with pytest.raises(TypeError, match="reduced"):
        lg.grad(L.qr(a, mode="complete")[0].sum(), [a])
    check_grad(lambda x: L.qr(x, mode="complete")[0], RNG.standard_normal((3, 3)))
    s = RNG.standard_normal((3, 3))
    check_grad(lambda x: L.pinv(x, hermitian=True), s + s.T)


@pytest.mark.parametrize("a", [REAL, PAIR], ids=["real", "complex-pair"])
def test_eig_gradients(a):
    check_grad(lambda x: lg.real(L.eig(x)[0]), a)
    check_grad(lambda x: lg.real(L.eigvals(x) * lg.conj(L.eigvals(x))), a)
    check_grad(lambda x: lg.imag(L.eigvals(x)) ** 2, a)
    # |v|^2 does not depend on the eigenvectors' arbitrary phase
    check_grad(lambda x: lg.real(L.eig(x)[1] * lg.conj(L.eig(x)[1])) * lg.real(L.eig(x)[0]), a)


@pytest.mark.parametrize("m,n,k", [(5, 3, 2), (5, 3, None), (3, 3, 1), (2, 4, 2)])
def test_lstsq_gradients(m, n, k):
    a, b = RNG.standard_normal((m, n)), RNG.standard_normal((m,) if k is None else (m, k))
    check_grad(lambda x, y: L.lstsq(x, y)[0], a, b)
    check_grad(lambda x, y: L.lstsq(x, y)[3], a, b)
    if m > n:
        check_grad(lambda x, y: L.lstsq(x, y)[1], a, b)


@pytest.mark.parametrize(
    "fn",
    [
        lambda z: lg.real(z * z / (z + 3.0)),
        lambda z: lg.real(lg.exp(z * 0.3) + lg.sin(z) + lg.sqrt(z + 2.0) + lg.log(z + 2.0)),
        lambda z: lg.real(z**3 + (z + 2.0) ** (z * 0.1)),
        lambda z: lg.imag(z * z) + lg.angle(z + 0.5) + lg.abs(z),
        lambda z: lg.real(lg.conj(z) * z * 1j),
    ],
    ids=["arith", "transcendental", "pow", "parts", "conj"],
)
def test_complex_intermediate_gradients(fn):
    # complex values between real ones: PyTorch's convention, checked by finite differences
    check_grad(lambda v: fn(lg.fft.fft(v) + lg.fft.ifft(v * v)), RNG.standard_normal(5))


# -- unique and nonzero as operators -----------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.data(), shapes(0, 3), st.sampled_from([np.float64, np.int8, np.bool_]), st.booleans())
def test_unique_and_nonzero_operators_evaluate_only_their_count(data, shape, dtype, equal_nan):
    x = data.draw(arrays(np.dtype(dtype), shape, special=np.dtype(dtype).kind == "f"))
    a = lg.asarray(x).astype(x.dtype, copy=True)  # an unevaluated value
    before = _evaluations()
    got = lg.unique(a, return_index=True, return_inverse=True, return_counts=True, equal_nan=equal_nan)
    assert _evaluations() == before + 1  # the number of distinct values
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True, equal_nan=equal_nan)
    for g, w in zip(lg.eval(*got), want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    if x.ndim:
        b = lg.asarray(x).astype(x.dtype, copy=True)
        before = _evaluations()
        rows = lg.nonzero(b)
        assert _evaluations() == before + 1  # the count; the indices are recorded
        assert all(r.node.buffer is None for r in rows) or not x.size
        for g, w in zip(lg.eval(*rows), np.nonzero(x), strict=True):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.asarray(lg.argwhere(b)), np.argwhere(x))
        np.testing.assert_array_equal(np.asarray(lg.flatnonzero(b)), np.flatnonzero(x))


def test_unique_values_are_differentiable_at_first_occurrences():
    check_grad(lambda v: lg.unique(v) ** 2, np.array([2.0, 1.0, 3.0, 0.5]))  # distinct: FD keeps the shape
    a = lg.asarray(np.array([2.0, 1.0, 2.0]), requires_grad=True)
    (g,) = lg.grad((lg.unique(a) * lg.asarray([10.0, 1.0])).sum(), [a])
    np.testing.assert_array_equal(np.asarray(g), [1.0, 10.0, 0.0])


@pytest.mark.parametrize("value", [np.float64("nan"), np.float32("inf"), np.float16("-inf"), float("nan")])
@pytest.mark.parametrize("key", [0, slice(0, 2), Ellipsis])
def test_non_finite_float_scalar_into_integer_array_raises_as_numpy(value, key):
    a = np.zeros(3, np.int32)
    with pytest.raises((ValueError, OverflowError)) as want:
        a[key] = value
    b = lg.zeros(3, dtype=np.int32)
    with pytest.raises(type(want.value), match="setitem: cannot convert float"):
        b[key] = value
    b[key] = np.float64(2.5)  # finite NumPy scalars are stored as NumPy stores them
    a[key] = np.float64(2.5)
    np.testing.assert_array_equal(b.numpy(), a)
