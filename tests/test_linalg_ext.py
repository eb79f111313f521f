"""lg.linalg against numpy.linalg: values, dtypes, batching, record-time errors, LinAlgError at
evaluation naming the recording line, and gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg

L = lg.linalg
FEW = settings(max_examples=15, deadline=None)
DTYPES = [np.float32, np.float64, np.complex128, np.int64]


def close(got, want, dtype=np.float64):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    tol = 1e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-8
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def matrices(draw, square=True, dtype=np.float64, spd=False):
    batch = draw(st.lists(st.integers(0, 2), max_size=2))
    m = draw(st.integers(0, 4))
    n = m if square else draw(st.integers(0, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = rng.normal(size=(*batch, m, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.normal(size=a.shape)
    if spd:
        a = a @ np.conj(np.swapaxes(a, -1, -2)) + m * np.eye(m)
    elif square:
        a = a + 3 * np.eye(m)  # well conditioned
    if np.dtype(dtype).kind == "i":
        a = np.round(a * 3)
    return a.astype(dtype)


def lazy(a, draw_view=False):
    if draw_view and a.ndim >= 2:  # a negative-stride view of the same values
        return lg.asarray(np.ascontiguousarray(a[..., ::-1, :]))[..., ::-1, :]
    return lg.asarray(a)


@FEW
@given(st.data(), st.sampled_from(DTYPES), st.booleans())
def test_square_functions(data, dtype, view):
    a = matrices(data.draw, dtype=dtype)
    x = lazy(a, view)
    close(L.inv(x), np.linalg.inv(a), dtype)
    close(L.det(x), np.linalg.det(a), dtype)
    s = L.slogdet(x)
    e = np.linalg.slogdet(a)
    close(s.sign, e.sign, dtype)
    close(s.logabsdet, e.logabsdet, dtype)
    close(L.solve(x, x), np.linalg.solve(a, a), dtype)
    close(
        L.eigvals(x), np.linalg.eigvals(a).astype(np.result_type(np.linalg.eigvals(a), np.complex64)), dtype
    )
    close(L.matrix_power(x, 3), np.linalg.matrix_power(a, 3), dtype)
    close(L.matrix_power(x, 0), np.linalg.matrix_power(a, 0), dtype)
    if a.size:
        close(L.pinv(x), np.linalg.pinv(a), dtype)
        close(L.matrix_rank(x), np.linalg.matrix_rank(a), dtype)


@FEW
@given(st.data(), st.sampled_from(DTYPES))
def test_hermitian_decompositions(data, dtype):
    a = matrices(data.draw, dtype=dtype, spd=True)
    x = lg.asarray(a)
    close(L.cholesky(x), np.linalg.cholesky(a), dtype)
    close(L.cholesky(x, upper=True), np.linalg.cholesky(a, upper=True), dtype)
    w, v = L.eigh(x)
    ew, ev = np.linalg.eigh(a)
    close(w, ew, dtype)
    close(abs(np.asarray(v)), abs(ev), dtype)  # eigenvector signs are LAPACK's, equal here
    close(L.eigvalsh(x, UPLO="U"), np.linalg.eigvalsh(a, UPLO="U"), dtype)


@FEW
@given(st.data(), st.sampled_from(DTYPES), st.booleans())
def test_rectangular_decompositions(data, dtype, full):
    a = matrices(data.draw, square=False, dtype=dtype)
    x = lg.asarray(a)
    u, s, vh = L.svd(x, full_matrices=full)
    eu, es, evh = np.linalg.svd(a, full_matrices=full)
    close(s, es, dtype)
    close(u, eu, dtype)
    close(vh, evh, dtype)
    close(L.svdvals(x), np.linalg.svd(a, compute_uv=False), dtype)
    mode = "complete" if full else "reduced"
    q, r = L.qr(x, mode=mode)
    eq, er = np.linalg.qr(a, mode=mode)
    close(q, eq, dtype)
    close(r, er, dtype)
    close(L.qr(x, mode="r"), np.linalg.qr(a, mode="r"), dtype)


ORDS_V = [None, np.inf, -np.inf, 0, 1, -1, 2, -2, 3, 0.5]
ORDS_M = [None, "fro", "nuc", np.inf, -np.inf, 1, -1, 2, -2]


@FEW
@given(st.data(), st.sampled_from([np.float32, np.float64, np.complex128, np.int64, np.bool_]), st.booleans())
def test_norms(data, dtype, keepdims):
    a = matrices(data.draw, square=False, dtype=np.float64)
    a = (a > 0) if dtype is np.bool_ else a.astype(dtype)
    if a.ndim < 3 or 0 in a.shape:
        a = np.ones((2, 3, 4), dtype)
    x = lg.asarray(a)
    close(L.norm(x), np.linalg.norm(a), dtype)
    for o in ORDS_V:
        close(L.norm(x, o, axis=1, keepdims=keepdims), np.linalg.norm(a, o, axis=1, keepdims=keepdims), dtype)
    for o in ORDS_M:
        close(
            L.norm(x, o, axis=(2, 0), keepdims=keepdims),
            np.linalg.norm(a, o, axis=(2, 0), keepdims=keepdims),
            dtype,
        )
    close(L.vector_norm(x, axis=(0, 2), ord=3), np.linalg.vector_norm(a, axis=(0, 2), ord=3), dtype)
    close(L.matrix_norm(x, ord="nuc"), np.linalg.matrix_norm(a, ord="nuc"), dtype)


def test_nan_inf_propagate():
    a = np.array([[np.nan, 1.0], [2.0, np.inf]])
    close(L.norm(lg.asarray(a)), np.linalg.norm(a))
    close(L.norm(lg.asarray(a), np.inf, axis=1), np.linalg.norm(a, np.inf, axis=1))


def test_lstsq_multi_dot_and_array_api_names():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(20, 3)), rng.normal(size=(20, 2))
    res = L.lstsq(lg.asarray(a), lg.asarray(b), rcond=None)
    for got, want in zip(res, np.linalg.lstsq(a, b, rcond=None)):
        close(got, want)
    close(L.lstsq(a[:2], b[:2])[1], np.linalg.lstsq(a[:2], b[:2])[1])  # wide: no residuals
    close(L.lstsq(a, b[:, 0])[0], np.linalg.lstsq(a, b[:, 0])[0])
    ms = [rng.normal(size=s) for s in [(3,), (3, 5), (5, 2), (2, 7), (7,)]]
    close(L.multi_dot([lg.asarray(m) for m in ms]), np.linalg.multi_dot(ms))
    close(L.multi_dot([lg.asarray(m) for m in ms[1:4]]), np.linalg.multi_dot(ms[1:4]))
    x = rng.normal(size=(2, 3, 3))
    close(L.trace(lg.asarray(x), offset=1), np.linalg.trace(x, offset=1))
    close(L.diagonal(lg.asarray(x)), np.linalg.diagonal(x))
    close(L.cross(lg.asarray(x), lg.asarray(x[::-1])), np.linalg.cross(x, x[::-1]))
    close(L.vecdot(lg.asarray(x), lg.asarray(x)), np.linalg.vecdot(x, x))
    close(L.outer(lg.asarray(x[0, 0]), lg.asarray(x[1, 1])), np.linalg.outer(x[0, 0], x[1, 1]))
    close(L.tensordot(lg.asarray(x), lg.asarray(x[0]), axes=2), np.linalg.tensordot(x, x[0], axes=2))
    close(L.matrix_transpose(lg.asarray(x)), np.linalg.matrix_transpose(x))
    close(lg.polyfit(a[:, 0], b, 2), np.polyfit(a[:, 0], b, 2))
    close(lg.diagflat(lg.asarray(x[0]), 1), np.diagflat(x[0], 1))


def test_record_time_errors():
    with pytest.raises(np.linalg.LinAlgError, match=r"inv: Last 2 dimensions.*\(2,3\)"):
        L.inv(lg.zeros((2, 3)))
    with pytest.raises(np.linalg.LinAlgError, match="det: 1-dimensional"):
        L.det(lg.zeros(3))
    with pytest.raises(TypeError, match="float16"):
        L.eigh(lg.zeros((2, 2), dtype=lg.float16))
    with pytest.raises(ValueError, match="solve: b of shape"):
        L.solve(lg.zeros((3, 3)), lg.zeros(4))
    with pytest.raises(ValueError, match="norm: Invalid norm order"):
        L.norm(lg.zeros((2, 2)), "bad")


def test_singular_matrix_fails_at_evaluation_naming_op_and_line():
    x = L.inv(lg.asarray(np.zeros((2, 2))))  # recorded: nothing fails yet
    y = x + 1
    with pytest.raises(
        np.linalg.LinAlgError,
        match=r"inv failed at evaluation: Singular matrix.*recorded at .*test_linalg_ext.py",
    ):
        y.numpy()
    with pytest.raises(np.linalg.LinAlgError, match="cholesky failed at evaluation"):
        L.cholesky(lg.asarray(-np.eye(2))).numpy()


def test_recording_is_lazy():
    """Decompositions record; nothing is evaluated until a value is read."""
    stats = lg.cache.stats()
    before = stats["hits"] + stats["misses"]
    L.svd(lg.ones((3, 3)))
    L.lstsq(lg.ones((3, 2)), lg.ones(3))[0]
    L.norm(lg.ones((3, 3)), 2)
    stats = lg.cache.stats()
    assert stats["hits"] + stats["misses"] == before


RNG = np.random.default_rng(3)
A = RNG.normal(size=(2, 3, 3)) + 3 * np.eye(3)
SPD = A @ np.swapaxes(A, -1, -2) + np.eye(3)
T = RNG.normal(size=(4, 3))


@pytest.mark.parametrize(
    "fn, xs",
    [
        (L.inv, [A]),
        (L.det, [A]),
        (lambda x: L.slogdet(x).logabsdet, [A]),
        (L.solve, [A, RNG.normal(size=(3, 2))]),
        (L.solve, [A, RNG.normal(size=3)]),
        (L.cholesky, [SPD]),
        (lambda x: L.cholesky(x, upper=True), [SPD]),
        (lambda x: L.eigh(x).eigenvalues, [SPD]),
        (lambda x: L.eigh(x, UPLO="U").eigenvectors ** 2, [SPD]),
        (L.eigvalsh, [SPD]),
        (L.svdvals, [T]),
        (lambda x: L.svd(x, full_matrices=False).U ** 2, [T]),
        (lambda x: L.svd(x.T, full_matrices=False).Vh ** 2, [T]),
        (lambda x: L.norm(x, 2), [T]),
        (lambda x: L.norm(x, "nuc"), [T]),
        (lambda x: L.norm(x, 3, axis=0), [T]),
        (lambda x: L.matrix_power(x, -2), [A]),
        (lambda x, y: L.multi_dot([x, y, x]), [A[0], A[1]]),
    ],
)
def test_gradients(fn, xs):
    check_grad(fn, *xs, rtol=1e-4, atol=1e-6)
