"""NumPy's ndarray methods on lazy arrays (lazygraph/array_methods.py) against NumPy's.

Each differential check calls the same method, with the same arguments, on a NumPy array and
on a lazy copy (sometimes a negative-stride view), and compares values and dtypes; `out=`,
`fill`, `put` and `flat[...] = v` are recorded writes, seen through views.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (
    any_arrays,
    assert_matches,
    check,
    float_dtypes,
    nonempty_shapes,
    numeric_dtypes,
    shapes,
)

import lazygraph as lg

FEW = settings(max_examples=25, deadline=None)


def _lazy(x: np.ndarray, flip: bool) -> tuple[np.ndarray, lg.Array]:
    """A NumPy array and its lazy twin; with `flip`, both are negative-stride views."""
    if flip and x.ndim:
        return x[::-1], lg.asarray(x)[::-1]
    return x, lg.asarray(x)


def _axis(draw: st.DrawFn, ndim: int) -> int | None:
    return draw(st.none() | st.integers(-ndim, ndim - 1)) if ndim else None


@FEW
@given(st.data(), any_arrays(numeric_dtypes, shapes(max_dims=3), special=None), st.booleans())
def test_reductions_take_numpy_method_keywords(data, x, flip):
    """sum/prod/max/min/mean/any/all with axis, keepdims, initial and where, as NumPy's methods."""
    x, a = _lazy(x, flip)
    axis = _axis(data.draw, x.ndim)
    keep = data.draw(st.booleans())
    where = data.draw(st.none() | st.just("mask"))
    w = {} if where is None else {"where": (np.arange(x.size).reshape(x.shape) % 3 != 1)}
    for name in ("sum", "prod", "max", "min"):
        init = {} if name in ("sum", "prod") and not w else {"initial": 1}
        kw = {"axis": axis, "keepdims": keep, **init, **w}
        check(lambda n=name, k=kw: getattr(x, n)(**k), lambda n=name, k=kw: getattr(a, n)(**k))
    for name in ("any", "all"):
        kw = {"axis": axis, "keepdims": keep, **w}
        check(lambda n=name, k=kw: getattr(x, n)(**k), lambda n=name, k=kw: getattr(a, n)(**k))
    if x.dtype.kind == "f" and x.size:
        check(lambda: x.mean(axis=axis, keepdims=keep, **w), lambda: a.mean(axis=axis, keepdims=keep, **w))


@pytest.mark.filterwarnings("ignore:Degrees of freedom:RuntimeWarning")
@FEW
@given(st.data(), any_arrays(float_dtypes, nonempty_shapes(min_dims=1, max_dims=3)))
def test_var_std_with_ddof_where_and_correction(data, x):
    """var and std with ddof, correction, keepdims and where= (mean over the selected elements)."""
    a = lg.asarray(x)
    axis = _axis(data.draw, x.ndim)
    w = x > 0
    for name in ("var", "std"):
        for kw in ({"ddof": 1}, {"correction": 0, "keepdims": True}, {"where": w}):
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = getattr(np, name)(x, axis=axis, **kw)
            assert_matches(getattr(a, name)(axis=axis, **kw), want, rtol=1e-5, atol=1e-6)


def test_out_is_a_recorded_write_seen_through_views():
    """out= writes into a lazy array (and its views); the out array is returned."""
    x = np.arange(12.0).reshape(3, 4)
    a = lg.asarray(x)
    base = lg.zeros((2, 4))
    out = base[1]
    assert a.sum(axis=0, out=out) is out
    assert_matches(base, np.stack([np.zeros(4), x.sum(0)]))
    for name, args in (("cumsum", (1,)), ("cumprod", (0,)), ("round", (1,)), ("clip", (2, 9))):
        o = lg.zeros((3, 4))
        assert getattr(a, name)(*args, out=o) is o
        assert_matches(o, getattr(x, name)(*args))
    o = lg.zeros(4, dtype=np.int64)
    a.argmax(axis=0, out=o)
    assert_matches(o, x.argmax(axis=0))
    with pytest.raises(ValueError, match="out has shape"):
        a.sum(out=lg.zeros(2))
    with pytest.raises(TypeError, match="lazygraph array"):
        a.sum(out=np.zeros(()))


@FEW
@given(any_arrays(numeric_dtypes, nonempty_shapes(min_dims=2, max_dims=3)), st.integers(-2, 2), st.booleans())
def test_trace_diagonal_ptp_repeat_squeeze(x, offset, flip):
    """trace, diagonal, ptp, repeat, squeeze, dot: NumPy's methods' values and dtypes."""
    x, a = _lazy(x, flip)
    check(lambda: x.trace(offset), lambda: a.trace(offset))
    check(lambda: x.trace(offset, 1, 0, dtype=np.float64), lambda: a.trace(offset, 1, 0, dtype=np.float64))
    check(lambda: x.diagonal(offset, 0, -1), lambda: a.diagonal(offset, 0, -1))
    check(lambda: np.ptp(x, axis=1, keepdims=True), lambda: a.ptp(axis=1, keepdims=True))
    check(lambda: x.repeat(2, axis=0), lambda: a.repeat(2, axis=0))
    check(lambda: x.repeat(list(range(x.shape[-1])), -1), lambda: a.repeat(list(range(x.shape[-1])), -1))
    check(lambda: x[:1].squeeze(0), lambda: a[:1].squeeze(0))
    check(lambda: x.dot(x.swapaxes(-1, -2)), lambda: a.dot(a.swapaxes(-1, -2)))


@FEW
@given(any_arrays(numeric_dtypes, shapes(max_dims=3)), st.booleans())
def test_fill_and_put_are_recorded_writes(x, flip):
    """fill and put write in place; views see the write, values recorded before do not."""
    for op in ("fill", "put"):
        want = x.copy()
        lazy = lg.asarray(x)
        before = lazy * 1
        view, wview = (lazy[::-1], want[::-1]) if flip and x.ndim else (lazy, want)
        if op == "fill":
            assert view.fill(3) is None
            wview.fill(3)
        elif x.size:
            idx = [0, -1, x.size // 2]
            assert view.put(idx, [7, 5]) is None
            wview.put(idx, [7, 5])
        assert_matches(lazy, want)
        assert_matches(before, x)
    with pytest.raises(ValueError, match="scalar"):
        lg.zeros(3).fill(np.ones(2))


def test_compress_choose_and_flat():
    """compress and choose as methods; a.flat reads lazily and writes in place."""
    x = np.arange(12).reshape(3, 4)
    a = lg.asarray(x)
    assert_matches(a.compress([True, False, True], axis=0), x.compress([True, False, True], axis=0))
    assert_matches(a.compress(lg.asarray([0, 1, 1, 0]), axis=1), x.compress([0, 1, 1, 0], axis=1))
    assert_matches(a.compress([1, 0, 1]), x.compress([1, 0, 1]))
    idx = np.array([0, 2, 1])
    assert_matches(
        lg.asarray(idx).choose([x[0, :3], x[1, :3], x[2, :3]]), idx.choose([x[0, :3], x[1, :3], x[2, :3]])
    )
    assert_matches(a.flat[5], x.flat[5])
    assert_matches(a.flat[2:7:2], x.flat[2:7:2])
    assert len(a.flat) == 12 and list(a.flat) == list(x.flat)
    want = x.copy()
    b = lg.asarray(x)
    b.flat[[1, 3]] = -1
    want.flat[[1, 3]] = -1
    b.T.flat[0:2] = 9  # flat of a view: C order of the view
    want.T.flat[0:2] = 9
    assert_matches(b, want)
    assert_matches(a.flat.copy(), x.flat.copy())


def test_view_bytes_pickles_and_clear_errors():
    """view(same dtype), tobytes, dumps, tofile evaluate; unsupported ones say what to do."""
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    a = lg.asarray(x)
    v = a.view()
    v[0, 0] = 5  # a view: writes reach a
    assert int(a[0, 0]) == 5
    a[0, 0] = 0
    assert a.view(np.int32).shape == (2, 3)
    assert a.tobytes() == x.tobytes() and a.T.tobytes("F") == x.T.tobytes("F")
    np.testing.assert_array_equal(pickle.loads(a.dumps()), x)
    np.testing.assert_array_equal(a.view(np.float32), x.view(np.float32))  # the bytes reread
    with pytest.raises(ValueError, match="referenced"):  # v views a: NumPy refuses too
        a.resize((3, 2))
    for call in (lambda: a.byteswap(), lambda: a.getfield(np.int16), lambda: a.setflags(write=False)):
        with pytest.raises(TypeError):
            call()


def test_method_surface_matches_numpy():
    """Every public ndarray method exists on Array except raw-memory attributes."""
    missing = {m for m in dir(np.ndarray) if not m.startswith("_") and not hasattr(lg.Array, m)}
    assert missing <= {"base", "ctypes", "data", "flags", "strides"}, missing


def test_method_gradients():
    """Methods record differentiable graphs: sum(where=), trace and var's gradients."""
    x = np.arange(1.0, 7.0).reshape(2, 3)
    a = lg.asarray(x, requires_grad=True)
    (g,) = lg.grad(a.sum(where=x > 2, initial=1.0), [a])
    np.testing.assert_array_equal(g.numpy(), (x > 2).astype(float))
    (g,) = lg.grad(a[:, :2].trace(), [a])
    np.testing.assert_array_equal(g.numpy(), np.array([[1.0, 0, 0], [0, 1.0, 0]]))
    (g,) = lg.grad(a.var(ddof=1), [a])
    np.testing.assert_allclose(g.numpy(), 2 * (x - x.mean()) / (x.size - 1))
