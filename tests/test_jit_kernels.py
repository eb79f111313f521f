"""Fused CPU kernels against NumPy: elementwise chains, broadcasting, views, reductions, nn patterns.

Each check also renders the same regions as CUDA and compiles them with NVRTC (jit_check).
Programs are written once against a namespace (np or lg). Example counts are modest because
every new structure compiles a C kernel (a fraction of a second); the kernel store makes
later runs fast.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jit_check import check

import lazygraph as lg
import lazygraph.nn.functional as F

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend

DTYPES = [
    np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int32, np.int64, np.uint32, np.float32, np.float64)
]
FLOATS = [np.dtype(np.float32), np.dtype(np.float64)]
SIZES = st.sampled_from([0, 1, 2, 3, 5, 7, 16, 33])


def values(dtype: np.dtype, shape: tuple[int, ...], special: bool = False) -> st.SearchStrategy:
    """Arrays of small values (floats optionally with nan/inf)."""
    if dtype.kind == "f":
        elems = st.floats(-20, 20, width=dtype.itemsize * 8, allow_nan=False)
        if special:
            elems = st.one_of(elems, st.sampled_from([math.nan, math.inf, -math.inf]))
    elif dtype.kind == "b":
        elems = st.booleans()
    else:
        info = np.iinfo(dtype)
        elems = st.integers(max(info.min, -100), min(info.max, 100))
    return hnp.arrays(dtype, shape, elements=elems)


@st.composite
def broadcast_pair(draw: st.DrawFn, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays whose shapes broadcast (unit and missing dimensions included)."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(SIZES) for _ in range(ndim))
    other = tuple(1 if draw(st.booleans()) else d for d in shape)[draw(st.integers(0, ndim - 1)) :]
    return draw(values(dtype, shape)), draw(values(dtype, other))


UNARY = {
    "f": ["exp", "tanh", "sqrt", "log1p", "abs", "negative", "sin", "floor", "sigmoid", "erf", "isnan"],
    "i": ["abs", "negative", "square", "sign", "bitwise_invert"],
    "u": ["square", "bitwise_invert", "sign"],
    "b": ["logical_not", "bitwise_invert"],
}
BINARY = {
    "f": [
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
        "floor_divide",
        "remainder",
        "pow",
        "less",
    ],
    "i": [
        "add",
        "subtract",
        "multiply",
        "maximum",
        "floor_divide",
        "remainder",
        "bitwise_xor",
        "greater_equal",
    ],
    "u": ["add", "multiply", "minimum", "floor_divide", "remainder", "bitwise_or", "not_equal"],
    "b": ["logical_and", "logical_xor", "equal", "maximum", "multiply"],
}
NS_NAME = {"bitwise_invert": ("invert", "bitwise_invert"), "pow": ("power", "pow")}


def fn_of(ns, name: str):  # noqa: ANN001, ANN201
    """The function `name` in NumPy or in lazygraph's namespace."""
    np_name, lg_name = NS_NAME.get(name, (name, name))
    if ns is np:
        if name == "sigmoid":
            return lambda x: 1 / (1 + np.exp(-x))
        if name == "erf":
            return _np_erf
        return getattr(np, np_name)
    return getattr(ns, lg_name)


def _np_erf(x: np.ndarray) -> np.ndarray:
    out = np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))
    return out.astype(x.dtype)


@settings(max_examples=30)
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_elementwise_chains_with_broadcasting(data: st.DataObject, dtype: np.dtype) -> None:
    x, y = data.draw(broadcast_pair(dtype))
    un = data.draw(st.sampled_from(UNARY[dtype.kind]))
    bi = data.draw(st.sampled_from(BINARY[dtype.kind]))
    if dtype.kind == "f" and un in ("sqrt", "log1p"):
        x = np.abs(x)
    if dtype.kind in "iu" and bi in ("floor_divide", "remainder"):
        y = np.where(y == 0, 3, y).astype(dtype)  # NumPy warns on zero divisors; values agree anyway

    def prog(ns, a, b):  # noqa: ANN001, ANN202
        u = fn_of(ns, un)(a)
        return fn_of(ns, bi)(u, b), u

    regions = check(prog, x, y)
    assert regions, "the chain should have been fused"


@settings(max_examples=20)
@given(data=st.data(), dtype=st.sampled_from(FLOATS + [np.dtype(np.int32), np.dtype(np.uint8)]))
def test_python_scalars_are_weak(data: st.DataObject, dtype: np.dtype) -> None:
    shape = (data.draw(SIZES), data.draw(SIZES))
    x = data.draw(values(dtype, shape))
    c = (
        data.draw(st.sampled_from([2, 3, -1, 1000]))
        if dtype.kind != "f"
        else data.draw(st.sampled_from([0.5, 3.0, -2.0]))
    )
    if dtype == np.uint8 and c < 0:
        c = 7

    def prog(ns, a):  # noqa: ANN001, ANN202
        return (a * 2 + 1) if dtype.kind != "f" else a * c - c, a < c, ns.maximum(a, 1)

    check(prog, x)


@settings(max_examples=25)
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_strided_and_negative_step_views(data: st.DataObject, dtype: np.dtype) -> None:
    base = data.draw(
        values(dtype, (data.draw(st.sampled_from([4, 7, 9])), data.draw(st.sampled_from([5, 8, 12]))))
    )
    step0 = data.draw(st.sampled_from([1, 2, -1, -2]))
    step1 = data.draw(st.sampled_from([1, 3, -1]))
    transpose = data.draw(st.booleans())

    def prog(ns, a):  # noqa: ANN001, ANN202
        v = a[::step0, ::step1]
        v = v.T if transpose else v
        return ns.exp(v * 0.5) - v, (v * v).sum(axis=-1)

    check(prog, base, scale=10.0)


REDUCTIONS = ["sum", "mean", "max", "min", "prod", "var", "std", "any", "all"]


@settings(max_examples=40)
@given(data=st.data(), dtype=st.sampled_from(DTYPES), red=st.sampled_from(REDUCTIONS), keepdims=st.booleans())
def test_reductions_over_any_axes(data: st.DataObject, dtype: np.dtype, red: str, keepdims: bool) -> None:
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(SIZES) for _ in range(ndim))
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, ndim - 1), min_size=1))))
    if red in ("max", "min"):
        assume(all(shape[a] > 0 for a in axes))
    if red == "prod" and dtype.kind in "iu":
        assume(math.prod(shape[a] for a in axes) <= 8)  # keep products exact in every order
    x = data.draw(values(dtype, shape))
    if red == "prod" and dtype.kind == "f":
        x = (np.abs(x) % 2 + 0.5).astype(dtype)

    def prog(ns, a):  # noqa: ANN001, ANN202
        pre = a if dtype.kind == "b" else a + a
        return getattr(ns, red)(pre, axis=axes, keepdims=keepdims)

    check(prog, x, scale=100.0)


@settings(max_examples=25)
@given(
    data=st.data(), dtype=st.sampled_from(FLOATS), op=st.sampled_from(["softmax", "log_softmax", "logsumexp"])
)
def test_softmax_family_with_nan_and_inf(data: st.DataObject, dtype: np.dtype, op: str) -> None:
    shape = (data.draw(st.sampled_from([1, 2, 5])), data.draw(st.sampled_from([1, 3, 16, 33])))
    x = data.draw(values(dtype, shape, special=True))
    axis = data.draw(st.sampled_from([0, 1, -1]))

    def prog(ns, a):  # noqa: ANN001, ANN202
        if ns is np:
            from ops.base import REGISTRY

            return (
                REGISTRY[op].kernel(a, axis=axis)
                if op != "logsumexp"
                else REGISTRY[op].kernel(a, axis=(axis % 2,), keepdims=False)
            )
        return getattr(ns, op)(a, axis=axis)

    regions = check(prog, x)
    # a reduction over a unit axis is not worth a kernel; otherwise the op is one region
    assert regions == ([[op]] if shape[axis] > 1 else [])


def test_nan_propagates_through_max_min_and_maximum() -> None:
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, 2.0, np.inf], [np.nan, np.nan, 0.0]], np.float32)
    check(lambda ns, a: (ns.max(a, axis=1), ns.min(a * 2, axis=0), ns.maximum(a, 1.5), a.sum(axis=1)), x)


def test_fused_nn_patterns_are_one_region_each() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((33, 70)).astype(np.float32)
    w = rng.standard_normal(70).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)

    def layernorm(ns, a, w_, b_):  # noqa: ANN001, ANN202
        if ns is np:
            d = a - a.mean(axis=-1, keepdims=True)
            return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5) * w_ + b_
        return F.layer_norm(a, 70, w_, b_)

    assert len(check(layernorm, x, w, b)) == 1

    def gelu(ns, a):  # noqa: ANN001, ANN202
        return 0.5 * a * (1.0 + ns.tanh(0.7978845608 * (a + 0.044715 * a * a * a)))

    assert len(check(gelu, x)) == 1

    def adam(ns, p, g, m, v):  # noqa: ANN001, ANN202
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        return m, v, p - 0.01 * m / (ns.sqrt(v) + 1e-8)

    assert len(check(adam, x, x * 0.1, x * 0.2, np.abs(x))) == 1

    def logsoftmax_nll(ns, a, onehot):  # noqa: ANN001, ANN202
        if ns is np:
            m = a.max(axis=1, keepdims=True)
            logp = a - m - np.log(np.exp(a - m).sum(axis=1, keepdims=True))
        else:
            logp = ns.log_softmax(a, axis=1)
        return -(logp * onehot).sum(axis=1)

    onehot = np.eye(70, dtype=np.float32)[rng.integers(0, 70, 33)]
    assert check(logsoftmax_nll, x, onehot) == [["log_softmax", "multiply", "sum", "negative"]]


def test_library_calls_are_region_boundaries() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 6))
    w = rng.standard_normal((6, 5))
    regions = check(lambda ns, x, y: ns.tanh(ns.exp(x) @ y + 1.0) * 2, a, w)
    assert regions == [["exp"], ["add", "tanh", "multiply"]]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_zero_and_one_sized_arrays(dtype: type) -> None:
    for shape in [(0,), (0, 3), (3, 0), (1, 1), (1,), (2, 1, 3)]:
        x = np.ones(shape, dtype)
        check(lambda ns, a: (a + a, a.sum(axis=-1), ns.any(a, axis=0)), x)


def test_astype_chain() -> None:
    x = np.arange(-5, 7, dtype=np.int16).reshape(3, 4)
    check(lambda ns, a: (a.astype(np.float32) * 0.5, (a > 0).astype(np.int8) + a.astype(np.int8)), x)


def test_expensive_shared_values_are_stored_not_recomputed() -> None:
    x = np.random.default_rng(3).standard_normal((9, 40))
    # t costs sin + erf per element; normalizing by its row sums would recompute it in a
    # second stage, which costs more than storing it: the division starts a new region.
    regions = check(lambda ns, a: (t := fn_of(ns, "erf")(ns.sin(a))) / t.sum(axis=1, keepdims=True), x)
    assert regions == [["sin", "erf", "sum"], ["divide"]]
    # a cheap shared value (one subtraction) is recomputed instead: one region
    cheap = check(lambda ns, a: (d := a - 1.0) / d.sum(axis=1, keepdims=True), x)
    assert cheap == [["subtract", "sum", "divide"]]


def test_values_beside_empty_ones_are_computed() -> None:
    """A 0-d value whose consumer is empty is still computed (the fuzzer found it left at 0).

    minimum(x, x) and floor_divide(it, empty) would share one region whose loop has no
    iterations; empty values therefore never join a region.
    """
    b = np.array(True)
    e = np.zeros((1, 0, 1, 3), bool)
    m = lg.minimum(lg.asarray(b) ** 0, lg.asarray(b) ** 0)
    q = lg.floor_divide(m, lg.asarray(e))
    lg.eval(m, q)
    assert m.numpy() == 1 and q.shape == (1, 0, 1, 3)
    with np.errstate(all="ignore"):
        mean = lg.mean(lg.asarray(e) | True, keepdims=True)
        sq = lg.pow(mean, 2)
        z = mean + lg.asarray(np.zeros((0, 1, 1), np.float64))
        lg.eval(sq, z)
        np.testing.assert_array_equal(sq.numpy(), np.full((1, 1, 1, 1), np.nan))
