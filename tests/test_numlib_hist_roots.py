"""histogramdd/histogram2d, nancumsum/nancumprod and roots against NumPy (recorded lazily)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import arrays, assert_matches, check, lazy, shapes

import lazygraph as lg

NUM = [np.dtype(t) for t in (np.int8, np.int64, np.float32, np.float64, np.bool_)]


@settings(max_examples=40, deadline=None)
@given(st.data(), shapes(0, 3), st.sampled_from(NUM), st.sampled_from(["sum", "prod"]))
def test_nancumulative_matches_numpy(data, shape, dtype, which):
    x = data.draw(arrays(dtype, shape, special=dtype.kind == "f"))
    axis = data.draw(st.sampled_from([None, *range(-len(shape), len(shape))]))
    np_fn, lg_fn = getattr(np, f"nancum{which}"), getattr(lg, f"nancum{which}")
    check(lambda: np_fn(x, axis=axis), lambda: lg_fn(lazy(x), axis=axis))


def test_nancumulative_dtype_out_and_gradient():
    x = np.array([[1.0, np.nan, 2.0], [np.nan, 3.0, np.nan]])
    assert_matches(
        lg.nancumsum(lg.asarray(x), axis=1, dtype=np.float32), np.nancumsum(x, axis=1, dtype=np.float32)
    )
    out = lg.zeros((6,))
    assert lg.nancumprod(lg.asarray(x), out=out) is out
    np.testing.assert_array_equal(out.numpy(), np.nancumprod(x))
    with pytest.raises(ValueError, match="nancumsum: out has shape"):
        lg.nancumsum(lg.asarray(x), out=lg.zeros((2,)))
    check_grad(
        lambda a: lg.nancumprod(a + lg.asarray(np.where(np.isnan(x), np.nan, 0.0)), axis=1),
        np.ones((2, 3)) * 1.5,
    )


def _same(got, want) -> None:
    assert isinstance(got, lg.Array)
    g = got.numpy()
    assert g.shape == want.shape and g.dtype == want.dtype, (g.shape, want.shape, g.dtype, want.dtype)
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.data(),
    st.integers(0, 12),
    st.sampled_from([np.float32, np.float64, np.int64]),
    st.sampled_from(["int", "pair", "edges", "edge-pair", "range", "weights", "density"]),
)
def test_histogram2d_matches_numpy(data, n, dtype, form):
    x = data.draw(arrays(np.dtype(dtype), (n,)))
    y = data.draw(arrays(np.dtype(dtype), (n,)))
    kw: dict = {}
    if form == "int":
        kw["bins"] = data.draw(st.integers(1, 4))
    elif form == "pair":
        kw["bins"] = [data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))]
    elif form == "edges":
        kw["bins"] = np.array([-3.0, -1.0, 0.0, 2.5, 9.0])
    elif form == "edge-pair":
        kw["bins"] = [np.array([-2.0, 0.0, 1.0]), np.array([-5.0, 5.0])]
    elif form == "range":
        kw.update(bins=3, range=[[-1, 1], [0, 4]])
    elif form == "weights":
        kw.update(bins=2, weights=data.draw(arrays(np.dtype(np.float64), (n,))))
    else:
        kw.update(bins=[2, 3], range=[[-10, 10], [-10, 10]], density=True)
    with np.errstate(all="ignore"):
        want = np.histogram2d(x, y, **kw)
    got = lg.histogram2d(
        lg.asarray(x), lg.asarray(y), **{k: lazy(v) if k == "weights" else v for k, v in kw.items()}
    )
    for g, w in zip(got, want, strict=True):
        _same(g, w)


def test_histogramdd_lazy_with_static_edges_and_errors():
    r = np.random.default_rng(0)
    s = r.standard_normal((30, 3))
    before = lg.debug.evaluation_stats()["evaluations"]
    got = lg.histogramdd(lg.asarray(s), bins=(2, 3, 4), range=[(-2, 2)] * 3)
    assert lg.debug.evaluation_stats()["evaluations"] == before  # static edges: nothing evaluated
    want = np.histogramdd(s, bins=(2, 3, 4), range=[(-2, 2)] * 3)
    _same(got[0], want[0])
    for g, w in zip(got[1], want[1], strict=True):
        _same(g, w)
    _same(
        lg.histogramdd([lg.asarray(s[:, 0]), lg.asarray(s[:, 1])], bins=3)[0],
        np.histogramdd([s[:, 0], s[:, 1]], bins=3)[0],
    )
    with pytest.raises(ValueError, match="dimension of bins"):
        lg.histogramdd(lg.asarray(s), bins=(2, 3))
    with pytest.raises(ValueError, match="must be positive"):
        lg.histogramdd(lg.asarray(s), bins=0)
    with pytest.raises(ValueError, match="histogram2d: x and y"):
        lg.histogram2d(lg.zeros(3), lg.zeros(4))


@pytest.mark.parametrize(
    "p",
    [[1, -3, 2], [0, 0, 1, -3, 2, 0, 0], [2.0, 0, 1], [1, 0, 0, 0], [3], [0, 0], [1j, 2, 1], [1, 2, 3, 4, 5]],
)
def test_roots_match_numpy(p):
    want = np.roots(p)
    got = lg.roots(lg.asarray(np.asarray(p)))
    assert got.shape == want.shape
    assert got.dtype.kind == "c" or want.size == 0  # always complex (lazygraph's eigvals), see docs/numpy.md
    np.testing.assert_allclose(
        np.sort_complex(got.numpy()), np.sort_complex(want.astype(complex)), atol=1e-10
    )
    with pytest.raises(ValueError, match="rank-1"):
        lg.roots(lg.zeros((2, 2)))
