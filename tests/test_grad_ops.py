"""Every differentiable operator's gradient against central finite differences (float64).

Shapes come from hypothesis (0-d, size 0 and 1, broadcasting, any axes); values come from
a seeded generator inside each operator's smooth domain, spaced apart where the operator
has kinks (max, abs, pooling) so a finite-difference step never crosses one.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazygraph as lg
from tests.gradcheck import check_grad

EXAMPLES = max(8, settings().max_examples // 2)
grad_settings = settings(max_examples=EXAMPLES, deadline=None)

small_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)
seeds = st.integers(0, 2**16)


def values(shape: tuple, seed: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    """Smooth-domain values."""
    return np.random.default_rng(seed).uniform(lo, hi, size=shape)


def spaced(shape: tuple, seed: int) -> np.ndarray:
    """Distinct values at least 0.1 apart (no ties, no kinks within a finite-difference step)."""
    n = int(np.prod(shape, dtype=np.int64))
    perm = np.random.default_rng(seed).permutation(n)
    return ((perm - n // 2) * 0.1 + 0.05).reshape(shape)


UNARY_DOMAINS = {
    "negative": (-2, 2),
    "positive": (-2, 2),
    "exp": (-2, 2),
    "expm1": (-2, 2),
    "log": (0.5, 3),
    "log1p": (-0.5, 2),
    "log2": (0.5, 3),
    "log10": (0.5, 3),
    "sqrt": (0.5, 3),
    "square": (-2, 2),
    "reciprocal": (0.5, 2),
    "sin": (-2, 2),
    "cos": (-2, 2),
    "tan": (-1, 1),
    "asin": (-0.8, 0.8),
    "acos": (-0.8, 0.8),
    "atan": (-2, 2),
    "sinh": (-2, 2),
    "cosh": (-2, 2),
    "tanh": (-2, 2),
    "sigmoid": (-3, 3),
    "erf": (-2, 2),
}


@pytest.mark.parametrize("name", sorted(UNARY_DOMAINS))
@grad_settings
@given(shape=small_shapes, seed=seeds)
def test_unary(name: str, shape: tuple, seed: int) -> None:
    lo, hi = UNARY_DOMAINS[name]
    check_grad(getattr(lg, name), values(shape, seed, lo, hi))


@pytest.mark.parametrize("name", ["abs", "sign", "floor", "ceil", "trunc", "round"])
@grad_settings
@given(shape=small_shapes, seed=seeds)
def test_piecewise(name: str, shape: tuple, seed: int) -> None:
    # spaced values sit 0.05 away from integers and from 0: no kink within a step
    check_grad(getattr(lg, name), spaced(shape, seed))


BINARY_DOMAINS = {
    "add": ((-2, 2), (-2, 2)),
    "subtract": ((-2, 2), (-2, 2)),
    "multiply": ((-2, 2), (-2, 2)),
    "divide": ((-2, 2), (0.5, 2)),
    "pow": ((0.5, 2), (-2, 2)),
    "atan2": ((0.5, 2), (0.5, 2)),
}

pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3)


@pytest.mark.parametrize("name", sorted(BINARY_DOMAINS))
@grad_settings
@given(shapes=pairs, seed=seeds)
def test_binary_broadcasting(name: str, shapes, seed: int) -> None:
    (lo1, hi1), (lo2, hi2) = BINARY_DOMAINS[name]
    a, b = shapes.input_shapes
    check_grad(getattr(lg, name), values(a, seed, lo1, hi1), values(b, seed + 1, lo2, hi2))


@pytest.mark.parametrize("name", ["maximum", "minimum"])
@grad_settings
@given(shapes=pairs, seed=seeds)
def test_maximum_minimum(name: str, shapes, seed: int) -> None:
    a, b = shapes.input_shapes
    x = spaced(a, seed)
    y = spaced(b, seed + 1) + 0.025  # never equal to an x value
    check_grad(getattr(lg, name), x, y)


def test_maximum_ties_share_the_gradient() -> None:
    x = lg.asarray(np.array([1.0, 2.0]), requires_grad=True)
    y = lg.asarray(np.array([1.0, 3.0]), requires_grad=True)
    gx, gy = lg.grad(lg.maximum(x, y).sum(), [x, y])
    np.testing.assert_array_equal(gx.numpy(), [0.5, 0.0])
    np.testing.assert_array_equal(gy.numpy(), [0.5, 1.0])


def test_pow_with_python_exponent_and_zero_base() -> None:
    x = lg.asarray(np.array([0.0, 1.5, -2.0]), requires_grad=True)
    (g,) = lg.grad((x**2).sum(), [x])
    np.testing.assert_allclose(g.numpy(), [0.0, 3.0, -4.0])
    (g,) = lg.grad((x**0).sum(), [x])
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0, 0.0])


def test_remainder_and_floor_divide() -> None:
    x, y = np.array([2.3, -1.7, 5.2]), np.array([1.1, 0.7, -2.0])
    check_grad(lg.remainder, x, y)
    check_grad(lambda a, b: lg.floor_divide(a, b) * a, x, y)


@grad_settings
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3), seed=seeds)
def test_where(shapes, seed: int) -> None:
    c, a, b = shapes.input_shapes
    cond = np.random.default_rng(seed).random(c) < 0.5
    check_grad(lambda x, y: lg.where(lg.asarray(cond), x, y), values(a, seed), values(b, seed + 1))


@grad_settings
@given(shape=small_shapes, seed=seeds)
def test_clip(shape: tuple, seed: int) -> None:
    x = spaced(shape, seed)
    lo = np.full(shape, -0.525)
    hi = np.full(shape, 0.525)
    check_grad(lg.clip, x, lo, hi)
    check_grad(lambda a: lg.clip(a, -0.525, None), x)


def test_clip_crossed_bounds_take_the_upper_one() -> None:
    x = lg.asarray(np.array([0.0, 5.0]), requires_grad=True)
    lo = lg.asarray(np.array([1.0, 1.0]), requires_grad=True)
    hi = lg.asarray(np.array([0.5, 0.5]), requires_grad=True)
    gx, glo, ghi = lg.grad(lg.clip(x, lo, hi).sum(), [x, lo, hi])
    np.testing.assert_array_equal(gx.numpy(), [0, 0])
    np.testing.assert_array_equal(glo.numpy(), [0, 0])
    np.testing.assert_array_equal(ghi.numpy(), [1, 1])


def test_astype_round_trip_keeps_dtypes() -> None:
    x = lg.asarray(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
    y = (x.astype(np.float64) ** 2).sum()
    (g,) = lg.grad(y, [x])
    assert g.dtype == np.float32
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])


# -- reductions and scans ----------------------------------------------------------------


@st.composite
def shape_and_axis(draw, min_dims: int = 0):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=0, max_side=3))
    axis = draw(
        st.one_of(
            st.none(),
            st.integers(-len(shape), len(shape) - 1) if shape else st.none(),
            st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True, max_size=len(shape)).map(tuple),
        )
    )
    return shape, axis, draw(st.booleans())


@pytest.mark.parametrize("name", ["sum", "mean", "prod"])
@grad_settings
@given(spec=shape_and_axis(), seed=seeds)
def test_reductions(name: str, spec, seed: int) -> None:
    shape, axis, keepdims = spec
    x = values(shape, seed, 0.5, 1.5) if name == "prod" else values(shape, seed)
    check_grad(lambda a: getattr(lg, name)(a, axis=axis, keepdims=keepdims), x)


def test_prod_with_zeros() -> None:
    check_grad(lambda a: lg.prod(a, axis=1), np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 3.0]]))


@pytest.mark.parametrize("name", ["var", "std"])
@grad_settings
@given(spec=shape_and_axis(), seed=seeds, ddof=st.integers(0, 1))
def test_var_std(name: str, spec, seed: int, ddof: int) -> None:
    shape, axis, keepdims = spec
    axes = range(len(shape)) if axis is None else ([axis] if isinstance(axis, int) else axis)
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    if n - ddof <= 0 or (name == "std" and n <= 1):
        return  # undefined (nan) or std's kink at zero spread
    check_grad(lambda a: getattr(lg, name)(a, axis=axis, keepdims=keepdims, ddof=ddof), values(shape, seed))


@pytest.mark.parametrize("name", ["max", "min"])
@grad_settings
@given(spec=shape_and_axis(), seed=seeds)
def test_max_min(name: str, spec, seed: int) -> None:
    shape, axis, keepdims = spec
    axes = range(len(shape)) if axis is None else ([axis] if isinstance(axis, int) else axis)
    if any(shape[a] == 0 for a in axes):
        return  # empty max is an error at record time
    check_grad(lambda a: getattr(lg, name)(a, axis=axis, keepdims=keepdims), spaced(shape, seed))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@grad_settings
@given(shape=small_shapes, seed=seeds, data=st.data())
def test_scans(name: str, shape: tuple, seed: int, data) -> None:
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)) if shape else st.none())
    check_grad(lambda a: getattr(lg, name)(a, axis=axis), values(shape, seed, 0.5, 1.5))


# -- linear algebra ----------------------------------------------------------------------

matmul_shapes = st.sampled_from(
    [
        ((3,), (3,)),
        ((3,), (3, 2)),
        ((2, 3), (3,)),
        ((2, 3), (3, 4)),
        ((2, 2, 3), (3, 4)),
        ((3,), (2, 3, 4)),
        ((2, 1, 2, 3), (3, 3, 2)),
        ((1, 2, 3), (2, 3, 1)),
        ((0, 3), (3, 2)),
        ((2, 0), (0, 2)),
    ]
)


@grad_settings
@given(shapes=matmul_shapes, seed=seeds)
def test_matmul(shapes, seed: int) -> None:
    a, b = shapes
    check_grad(lg.matmul, values(a, seed), values(b, seed + 1))


@pytest.mark.parametrize(
    "spec,shapes",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("ij,jk", [(2, 3), (3, 4)]),
        ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
        ("ij->j", [(3, 4)]),
        ("i,j->ij", [(3,), (2,)]),
        ("ij,j->", [(2, 3), (3,)]),
        ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]),
        ("ij,ik->jk", [(1, 3), (4, 2)]),
        ("ijk,k->i", [(2, 3, 2), (2,)]),
    ],
)
def test_einsum(spec: str, shapes: list) -> None:
    arrays = [values(s, i) for i, s in enumerate(shapes)]
    check_grad(lambda *xs: lg.einsum(spec, *xs), *arrays)


def test_tensordot_dot_outer_inner() -> None:
    a, b = values((2, 3), 0), values((3, 2), 1)
    check_grad(lambda x, y: lg.tensordot(x, y, axes=1), a, b)
    check_grad(lambda x, y: lg.outer(x, y), values((3,), 2), values((2,), 3))
    check_grad(lambda x, y: lg.inner(x, y), values((3,), 4), values((3,), 5))
