"""Linear algebra against NumPy: matmul/@, dot, tensordot, einsum, outer, inner, vecdot.

Contractions may sum in a different order than NumPy (BLAS vs einsum), so float results
are compared with a tolerance scaled by the number of summed terms; integers exactly.
A shape mismatch raises ValueError while recording, naming the operation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from strategies import arrays, assert_matches, broadcast_shapes, dtypes, reference

import lazygraph as lg

SIDE = st.integers(0, 3)


def contraction_atol(dtype: np.dtype, terms: int) -> float:
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        return 0.0
    # elements are at most 10 in magnitude: each product is at most 100
    return float(np.finfo(dtype).eps) * 8 * max(terms, 1) * 100


def check_contraction(np_fn, lg_fn, terms: int, name: str):
    expected, err = reference(np_fn)
    if err is not None:
        before = lg.debug.evaluation_stats()["evaluations"]
        with pytest.raises(ValueError, match=name):
            lg_fn()
        assert lg.debug.evaluation_stats()["evaluations"] == before
        return
    got = lg_fn()
    expected = np.asarray(expected)
    assert_matches(
        got,
        expected,
        rtol=1e-5 if expected.dtype == np.float32 else 1e-10,
        atol=contraction_atol(expected.dtype, terms),
    )


# -- matmul ------------------------------------------------------------------------------


@st.composite
def matmul_operands(draw, mismatch: bool = False):
    n, k, m = draw(SIDE), draw(SIDE), draw(SIDE)
    ba, bb = draw(broadcast_shapes(2, max_dims=2))
    a_vec, b_vec = draw(st.booleans()), draw(st.booleans())
    a_shape = (k,) if a_vec else (*ba, n, k)
    kb = k if not mismatch else draw(SIDE.filter(lambda v: v != k))
    b_shape = (kb,) if b_vec else (*bb, kb, m)
    a = draw(arrays(dtypes, a_shape))
    b = draw(arrays(dtypes, b_shape))
    return a, b


@given(ab=matmul_operands())
def test_matmul(ab):
    a, b = ab
    k = a.shape[-1]
    check_contraction(lambda: np.matmul(a, b), lambda: lg.matmul(lg.asarray(a), lg.asarray(b)), k, "matmul")
    check_contraction(lambda: a @ b, lambda: lg.asarray(a) @ lg.asarray(b), k, "matmul")


@given(ab=matmul_operands(mismatch=True))
@settings(max_examples=30)
def test_matmul_mismatch_raises_at_record(ab):
    a, b = ab
    with pytest.raises(ValueError):
        np.matmul(a, b)
    with pytest.raises(ValueError, match="matmul"):
        lg.matmul(lg.asarray(a), lg.asarray(b))
    with pytest.raises(ValueError, match="matmul"):
        lg.asarray(a) @ b


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((), (3,)),
        ((3,), ()),
        ((2, 3), (4, 3, 2)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((0, 2, 3), (3, 4)),
        ((2, 2, 3), (3, 3, 4)),
    ],
)
def test_matmul_edge_shapes(sa, sb):
    a, b = np.ones(sa), np.ones(sb)
    check_contraction(lambda: a @ b, lambda: lg.asarray(a) @ lg.asarray(b), 4, "matmul")


# -- dot / inner / outer / vecdot ----------------------------------------------------------


@st.composite
def dot_operands(draw, mismatch: bool = False):
    a_shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    b_shape = list(draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)))
    if a_shape and b_shape:
        pos = len(b_shape) - 2 if len(b_shape) >= 2 else 0
        b_shape[pos] = a_shape[-1]
        if mismatch:
            b_shape[pos] = a_shape[-1] + 1
    a = draw(arrays(dtypes, a_shape))
    b = draw(arrays(dtypes, tuple(b_shape)))
    return a, b


@given(ab=dot_operands())
def test_dot(ab):
    a, b = ab
    k = a.shape[-1] if a.ndim else 1
    check_contraction(lambda: np.dot(a, b), lambda: lg.dot(lg.asarray(a), lg.asarray(b)), k, "dot")
    check_contraction(lambda: a.dot(b), lambda: lg.asarray(a).dot(lg.asarray(b)), k, "dot")


@given(ab=dot_operands(mismatch=True).filter(lambda ab: ab[0].ndim and ab[1].ndim))
@settings(max_examples=30)
def test_dot_mismatch_raises_at_record(ab):
    a, b = ab
    check_contraction(lambda: np.dot(a, b), lambda: lg.dot(lg.asarray(a), lg.asarray(b)), 1, "dot")


@st.composite
def inner_operands(draw, mismatch: bool = False):
    a_shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    b_shape = list(draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)))
    if a_shape and b_shape:
        b_shape[-1] = a_shape[-1] + (1 if mismatch else 0)
    return draw(arrays(dtypes, a_shape)), draw(arrays(dtypes, tuple(b_shape)))


@given(ab=inner_operands())
def test_inner(ab):
    a, b = ab
    k = a.shape[-1] if a.ndim else 1
    check_contraction(lambda: np.inner(a, b), lambda: lg.inner(lg.asarray(a), lg.asarray(b)), k, "inner")


@given(ab=inner_operands(mismatch=True).filter(lambda ab: ab[0].ndim and ab[1].ndim))
@settings(max_examples=20)
def test_inner_mismatch_raises_at_record(ab):
    a, b = ab
    check_contraction(lambda: np.inner(a, b), lambda: lg.inner(lg.asarray(a), lg.asarray(b)), 1, "inner")


@given(
    a=arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=3, max_side=3)),
    b=arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=2, max_side=4)),
)
def test_outer(a, b):
    check_contraction(lambda: np.outer(a, b), lambda: lg.outer(lg.asarray(a), lg.asarray(b)), 1, "outer")


@st.composite
def vecdot_operands(draw, mismatch: bool = False):
    sa, sb = draw(broadcast_shapes(2, min_dims=1, max_dims=3))
    n = draw(st.integers(0, 4))
    axis = draw(st.integers(-1, 0)) if draw(st.booleans()) else -1
    sa, sb = list(sa), list(sb)
    if axis == -1:
        sa[-1], sb[-1] = n, n + (1 if mismatch else 0)
    else:
        # axis 0 with equal ranks (NumPy's vecdot axis is counted on the broadcast shape)
        sb = sb[: len(sa)] + [1] * (len(sa) - len(sb))
        sa[0], sb[0] = n, n + (1 if mismatch else 0)
    return draw(arrays(dtypes, tuple(sa))), draw(arrays(dtypes, tuple(sb))), axis


@given(abx=vecdot_operands())
def test_vecdot(abx):
    a, b, axis = abx
    n = a.shape[axis]
    check_contraction(
        lambda: np.vecdot(a, b, axis=axis),
        lambda: lg.vecdot(lg.asarray(a), lg.asarray(b), axis=axis),
        n,
        "vecdot",
    )


@given(abx=vecdot_operands(mismatch=True))
@settings(max_examples=20)
def test_vecdot_mismatch_raises_at_record(abx):
    a, b, axis = abx
    check_contraction(
        lambda: np.vecdot(a, b, axis=axis),
        lambda: lg.vecdot(lg.asarray(a), lg.asarray(b), axis=axis),
        1,
        "vecdot",
    )


# -- tensordot -----------------------------------------------------------------------------


@st.composite
def tensordot_int_axes(draw):
    a_shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    n = draw(st.integers(0, len(a_shape)))
    tail = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3))
    b_shape = a_shape[len(a_shape) - n :] + tail
    return draw(arrays(dtypes, a_shape)), draw(arrays(dtypes, b_shape)), n


@given(abn=tensordot_int_axes())
def test_tensordot_int_axes(abn):
    a, b, n = abn
    terms = math.prod(a.shape[a.ndim - n :])
    check_contraction(
        lambda: np.tensordot(a, b, axes=n),
        lambda: lg.tensordot(lg.asarray(a), lg.asarray(b), axes=n),
        terms,
        "tensordot",
    )


@st.composite
def tensordot_axis_lists(draw, mismatch: bool = False):
    a_shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    b_ndim = draw(st.integers(1, 3))
    n = draw(st.integers(1, min(len(a_shape), b_ndim)))
    ax_a = draw(st.permutations(range(len(a_shape))))[:n]
    ax_b = draw(st.permutations(range(b_ndim)))[:n]
    b_shape = [draw(st.integers(1, 3)) for _ in range(b_ndim)]
    for i, j in zip(ax_a, ax_b):
        b_shape[j] = a_shape[i]
    if mismatch:
        b_shape[ax_b[0]] += 1
    # sometimes negative axes, sometimes a bare int for a single axis
    ax_a = [i - len(a_shape) if draw(st.booleans()) else i for i in ax_a]
    ax_b = [j - b_ndim if draw(st.booleans()) else j for j in ax_b]
    axes = (ax_a[0], ax_b[0]) if n == 1 and draw(st.booleans()) else (ax_a, ax_b)
    return draw(arrays(dtypes, a_shape)), draw(arrays(dtypes, tuple(b_shape))), axes


@given(abx=tensordot_axis_lists())
def test_tensordot_axis_lists(abx):
    a, b, axes = abx
    check_contraction(
        lambda: np.tensordot(a, b, axes=axes),
        lambda: lg.tensordot(lg.asarray(a), lg.asarray(b), axes=axes),
        27,
        "tensordot",
    )


@given(abx=tensordot_axis_lists(mismatch=True))
@settings(max_examples=20)
def test_tensordot_mismatch_raises_at_record(abx):
    a, b, axes = abx
    check_contraction(
        lambda: np.tensordot(a, b, axes=axes),
        lambda: lg.tensordot(lg.asarray(a), lg.asarray(b), axes=axes),
        1,
        "tensordot",
    )


# -- einsum ---------------------------------------------------------------------------------

EINSUM_SPECS = [
    "ij,jk->ik",
    "ij,jk",
    "ij,kj->ik",
    "i,j->ij",
    "i,j",
    "i,i->",
    "i,i",
    "ij,ij->i",
    "ij,ij->ij",
    "ij,ij",
    "bij,bjk->bik",
    "ijk,ikl->jl",
    "ij,jk->ki",
    "ij,j->i",
    "ij->ji",
    "ij->j",
    "ij",
    "ji",
    "...ij,...jk->...ik",
    "...i,...i->...",
    "i...,i...->...",
    "...ij,jk",
    "aB,Bc->ac",
    "ii->i",
    "ii",
    "ij,ik->jk",
]


@st.composite
def einsum_case(draw, spec: str):
    lhs = spec.split("->")[0]
    terms = lhs.split(",")
    sizes: dict[str, int] = {}
    n_ell = sum("..." in t for t in terms)
    ell_shapes = list(draw(broadcast_shapes(n_ell, max_dims=2))) if n_ell else []
    operands = []
    for t in terms:
        shape = []
        for part in t.split("..."):
            pass
        if "..." in t:
            pre, post = t.split("...")
            ell = ell_shapes.pop(0)
        else:
            pre, post, ell = t, "", ()
        for ch in pre:
            shape.append(sizes.setdefault(ch, draw(SIDE)))
        shape.extend(ell)
        for ch in post:
            shape.append(sizes.setdefault(ch, draw(SIDE)))
        operands.append(draw(arrays(dtypes, tuple(shape))))
    return operands


@pytest.mark.parametrize("spec", EINSUM_SPECS)
@given(data=st.data())
@settings(max_examples=25)
def test_einsum(spec, data):
    ops = data.draw(einsum_case(spec))
    check_contraction(
        lambda: np.einsum(spec, *ops), lambda: lg.einsum(spec, *[lg.asarray(o) for o in ops]), 81, "einsum"
    )


@pytest.mark.parametrize(
    ("spec", "shapes"),
    [
        ("ij,jk->ik", [(2, 3), (4, 5)]),
        ("i,i->", [(3,), (4,)]),
        ("ij,jk->ik", [(2, 3, 1), (3, 2)]),
        ("ij,jk->iz", [(2, 3), (3, 2)]),
        ("ij,jk", [(2, 3)]),
    ],
)
def test_einsum_errors_at_record(spec, shapes):
    ops = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError):
        np.einsum(spec, *ops)
    before = lg.debug.evaluation_stats()["evaluations"]
    with pytest.raises(ValueError, match="einsum"):
        lg.einsum(spec, *[lg.asarray(o) for o in ops])
    assert lg.debug.evaluation_stats()["evaluations"] == before


@pytest.mark.parametrize(
    ("spec", "shapes"),
    [
        ("ij,jk->ik", [(1, 2), (1, 1)]),
        ("ij,jk->ik", [(2, 1), (3, 4)]),
        ("i,i->", [(3,), (1,)]),
        ("ij,ij->ij", [(2, 1), (1, 3)]),
        ("bij,bjk->bik", [(1, 2, 3), (4, 3, 2)]),
        ("ij,jk,kl->il", [(2, 3), (1, 4), (4, 2)]),
        ("ii->i", [(2, 1)]),
        ("ij,jk->ik", [(2, 0), (1, 3)]),
    ],
)
def test_einsum_broadcasts_size_one_dimensions(spec, shapes):
    """NumPy's einsum broadcasts size-1 dimensions of any label (not within one operand)."""
    ops = [np.arange(np.prod(s), dtype=np.float64).reshape(s) + 1 for s in shapes]
    check_contraction(
        lambda: np.einsum(spec, *ops), lambda: lg.einsum(spec, *[lg.asarray(o) for o in ops]), 8, "einsum"
    )


@pytest.mark.parametrize(
    ("fn", "sa", "sb"),
    [
        ("dot", (2, 1), (3, 2)),
        ("dot", (1,), (3,)),
        ("inner", (2, 1), (4, 3)),
        ("tensordot", (2, 1), (3, 2)),
        ("vecdot", (2, 1), (2, 3)),
        ("matmul", (2, 1), (3, 2)),
    ],
)
def test_contracted_size_one_does_not_broadcast(fn, sa, sb):
    a, b = np.ones(sa), np.ones(sb)
    check_contraction(
        lambda: getattr(np, fn)(a, b), lambda: getattr(lg, fn)(lg.asarray(a), lg.asarray(b)), 1, fn
    )


def test_contractions_of_views_and_numpy_operands():
    a = np.arange(12.0).reshape(3, 4)
    la = lg.asarray(a)
    check_contraction(lambda: a.T @ a, lambda: la.T @ la, 3, "matmul")
    check_contraction(lambda: np.dot(a[:, ::-1], a.T), lambda: lg.dot(la[:, ::-1], a.T), 4, "dot")
    check_contraction(
        lambda: np.einsum("ij,kj->ik", a, a[::2]), lambda: lg.einsum("ij,kj->ik", la, la[::2]), 4, "einsum"
    )
    r = np.dot(la, a.T)  # __array_function__
    assert isinstance(r, lg.Array)
    assert_matches(r, np.dot(a, a.T))


@pytest.mark.parametrize("hermitian", [False, True])
def test_matrix_rank_with_a_tolerance_per_matrix(hermitian):
    # the Array API lets rtol (and NumPy tol) be an array broadcast against the batch
    rng = np.random.default_rng(3)
    a = rng.random((3, 4, 4)).astype(np.float32)
    if hermitian:
        a = a + a.transpose(0, 2, 1)
    for kw in (
        {"rtol": np.array([0.1, 0.5, 0.9], np.float32)},
        {"tol": np.array([0.1, 0.5, 2.0])},
        {"rtol": np.array(0.2)},
    ):
        want = np.linalg.matrix_rank(a, hermitian=hermitian, **kw)
        got = lg.linalg.matrix_rank(
            lg.asarray(a), hermitian=hermitian, **{k: lg.asarray(v) for k, v in kw.items()}
        )
        np.testing.assert_array_equal(got.numpy(), want)
    empty = np.zeros((0, 3, 3), np.float32)
    got = lg.linalg.matrix_rank(lg.asarray(empty), rtol=lg.asarray(np.zeros(0, np.float32)))
    assert got.numpy().shape == (0,)
