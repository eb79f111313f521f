"""NumPy functions lazygraph lacks run on evaluated arguments (lazygraph/fallback.py): no dead ends."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import arrays, assert_matches, int_dtypes, numeric_dtypes, shapes

import lazygraph as lg
from lazygraph import fallback


@pytest.fixture(autouse=True)
def _fresh_warnings():
    fallback.reset_warnings()
    yield
    fallback.reset_warnings()


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lg.LazygraphFallbackWarning)
        return fn(*args, **kwargs)


def test_unimplemented_function_runs_numpy_and_warns_once_naming_it():
    """np.i0 on a lazy array: NumPy's values as a lazy array, one warning naming the function."""
    x = np.array([1.0, 4.0, 9.0, 16.0])
    with pytest.warns(lg.LazygraphFallbackWarning, match=r"numpy\.i0"):
        out = np.i0(lg.asarray(x))
    assert_matches(out, np.i0(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call does not warn again
        assert_matches(np.i0(lg.asarray(x)), np.i0(x))
    assert issubclass(lg.LazygraphFallbackWarning, UserWarning)


def test_warning_silenced_by_setting_and_by_filters(monkeypatch):
    """LAZYGRAPH_FALLBACK_WARNINGS=0, lg.settings and warnings filters each silence it."""
    x = lg.arange(5.0)
    with lg.settings.override(fallback_warnings=False), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_matches(np.trapezoid(x), np.trapezoid(np.arange(5.0)))
    monkeypatch.setenv("LAZYGRAPH_FALLBACK_WARNINGS", "0")
    lg.settings.reload()
    assert lg.settings.fallback_warnings is False
    monkeypatch.setenv("LAZYGRAPH_FALLBACK_WARNINGS", "maybe")
    lg.settings.reload()
    with pytest.raises(ValueError, match="LAZYGRAPH_FALLBACK_WARNINGS"):
        lg.settings.fallback_warnings  # noqa: B018
    monkeypatch.delenv("LAZYGRAPH_FALLBACK_WARNINGS")
    lg.settings.reload()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=lg.LazygraphFallbackWarning)
        with pytest.raises(lg.LazygraphFallbackWarning, match="numpy.trapezoid"):
            np.trapezoid(x)


def test_evaluates_lazy_arguments_once_as_one_graph():
    """The arguments are evaluated together (one evaluation), then NumPy runs."""
    a, b = lg.arange(4.0) * 2, lg.arange(4.0) + 1
    before = lg.debug.evaluation_stats()["evaluations"]
    out = _quiet(np.polyadd, a, b)
    assert lg.debug.evaluation_stats()["evaluations"] == before + 1
    assert_matches(out, np.polyadd(np.arange(4.0) * 2, np.arange(4.0) + 1))


@pytest.mark.filterwarnings("ignore::lazygraph.LazygraphFallbackWarning")
def test_ufunc_methods():
    """reduce, accumulate, reduceat, outer and at of NumPy's ufuncs on lazy arrays."""
    v = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    x = lg.asarray(v)
    assert_matches(np.maximum.accumulate(x), np.maximum.accumulate(v))
    assert_matches(np.add.reduceat(x, [0, 4, 6]), np.add.reduceat(v, [0, 4, 6]))
    assert_matches(np.bitwise_xor.reduce(x), np.bitwise_xor.reduce(v))
    assert_matches(np.multiply.outer(x[:3], x[:2]), np.multiply.outer(v[:3], v[:2]))
    assert_matches(np.logaddexp2(lg.asarray([1.0, 2.0]), 3.0), np.logaddexp2([1.0, 2.0], 3.0))
    # the lg namespace's elementwise functions carry NumPy's ufunc methods and attributes
    assert_matches(lg.maximum.accumulate(x), np.maximum.accumulate(v))
    assert lg.add.nin == 2 and lg.add.identity == 0


@pytest.mark.filterwarnings("ignore::lazygraph.LazygraphFallbackWarning")
def test_add_at_writes_into_a_view_with_numpy_aliasing():
    """np.add.at into a view of a lazy array: the base sees it, values recorded before do not."""
    base = np.zeros((3, 4))
    lbase = lg.asarray(base)
    before = lbase + 0  # recorded before the write
    np.add.at(base[1, ::-1], [0, 0, 2], [1.0, 2.0, 5.0])
    view = lbase[1, ::-1]
    assert np.add.at(view, lg.asarray([0, 0, 2]), lg.asarray([1.0, 2.0, 5.0])) is None
    assert_matches(lbase, base)
    assert_matches(view, base[1, ::-1])
    assert_matches(before, np.zeros((3, 4)))
    hist = lg.zeros((2, 2), dtype=lg.int64)
    np.maximum.at(hist, (lg.asarray([0, 1, 1]), lg.asarray([1, 0, 0])), lg.asarray([4, 7, 2]))
    want = np.zeros((2, 2), dtype=np.int64)
    np.maximum.at(want, ([0, 1, 1], [1, 0, 0]), [4, 7, 2])
    assert_matches(hist, want)


@pytest.mark.filterwarnings("ignore::lazygraph.LazygraphFallbackWarning")
@pytest.mark.parametrize(
    "name, call",
    [
        ("fill_diagonal", lambda xp, a: xp.fill_diagonal(a, 7)),
        ("copyto", lambda xp, a: xp.copyto(a, np.arange(4.0), where=np.array([True, False, True, False]))),
        ("put", lambda xp, a: xp.put(a, [0, 5, -1], [-1.0, -2.0, -3.0])),
        ("place", lambda xp, a: xp.place(a, np.arange(12).reshape(3, 4) % 3 == 0, [8.0, 9.0])),
        ("putmask", lambda xp, a: xp.putmask(a, np.eye(3, 4, dtype=bool), [5.0])),
        ("put_along_axis", lambda xp, a: xp.put_along_axis(a, np.array([[1], [0], [3]]), 6.0, axis=1)),
    ],
)
def test_inplace_numpy_functions_write_into_lazy_arrays(name, call):
    """In-place NumPy functions on lazy arrays (and views of them) are recorded writes."""
    want = np.arange(24.0).reshape(2, 3, 4)
    lazy = lg.asarray(want)
    old = lazy[0] * 1
    call(np, want[1])
    assert call(np, lazy[1]) is None
    assert_matches(lazy, want)
    assert_matches(old, np.arange(12.0).reshape(3, 4))


@pytest.mark.filterwarnings("ignore::lazygraph.LazygraphFallbackWarning")
def test_out_arguments_and_results_that_are_not_arrays():
    """out= (lazy or NumPy), tuples, named tuples, lists and scalars come back element-wise."""
    v = np.array([[1.0, 5.0], [3.0, 2.0]])
    x = lg.asarray(v)
    out = np.zeros(2)
    assert np.add(x[0], 1, out=out) is out  # a NumPy out: NumPy's array, written
    np.testing.assert_array_equal(out, v[0] + 1)
    lazy_out = lg.zeros(4)
    assert np.cumsum(lg.asarray([1.0, 2.0, 3.0, 4.0]), out=lazy_out, dtype=float) is lazy_out
    assert_matches(lazy_out, np.array([1.0, 3.0, 6.0, 10.0]))
    rows, cols = np.unravel_index(lg.asarray([3, 1]), (2, 2))
    assert_matches(rows, np.array([1, 0]))
    assert_matches(cols, np.array([1, 1]))
    parts = np.array_split(x.reshape(-1), 3)
    assert isinstance(parts, list) and [p.shape for p in parts] == [(2,), (1,), (1,)]
    mantissa, exponent = np.frexp(x)  # a ufunc with two outputs lazygraph lacks
    assert_matches(mantissa, np.frexp(v)[0])
    assert_matches(exponent, np.frexp(v)[1])
    assert np.ndim(x) == 2 and np.shape(x) == (2, 2)


@pytest.mark.filterwarnings("ignore::lazygraph.LazygraphFallbackWarning")
def test_namespace_offers_numpy_functions_it_lacks():
    """`lg.<name>` for a NumPy function lazygraph lacks runs NumPy's; types and modules stay missing."""
    assert_matches(lg.i0(lg.asarray([1.0, 4.0, 9.0])), np.i0([1.0, 4.0, 9.0]))
    assert_matches(lg.insert(lg.arange(3.0), 0, 9.0), np.array([9.0, 0.0, 1.0, 2.0]))
    for name in ("errstate", "ndarray", "__array_wrap__", "no_such_function", "char"):
        with pytest.raises(AttributeError):
            getattr(lg, name)
    assert lg.logaddexp2.nin == 2
    assert_matches(lg.logaddexp2.reduce(lg.asarray([1.0, 2.0])), np.logaddexp2.reduce([1.0, 2.0]))


def test_fallback_result_is_not_silently_differentiated():
    """Through a NumPy fallback, grad is an error naming the function, never a silent zero."""
    w = lg.asarray([1.0, 2.0], requires_grad=True)
    y = _quiet(np.i0, w)  # i0: a function lazygraph lacks
    with pytest.raises(TypeError, match=r"numpy\.i0.*not differentiable"):
        lg.grad((y * y).sum(), [w])
    with lg.no_grad():  # under no_grad the result is a plain constant
        z = _quiet(np.i0, w)
    assert not z.requires_grad


@settings(deadline=None, max_examples=25)
@given(
    st.sampled_from(["maximum", "minimum", "add", "multiply"]),
    arrays(numeric_dtypes, shapes(min_dims=1, max_dims=3)),
    st.booleans(),
)
def test_accumulate_and_reduce_match_numpy(name, value, flip):
    """Differential: ufunc.accumulate/reduce over dtypes and shapes (0-size, 1-sized), reversed views."""
    ufunc = getattr(np, name)
    ref = value[::-1] if flip else value
    lazy = lg.asarray(value)[::-1] if flip else lg.asarray(value)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_matches(ufunc.accumulate(lazy, axis=0), ufunc.accumulate(ref, axis=0))
        if ref.shape[0] or ufunc.identity is not None:
            assert_matches(ufunc.reduce(lazy, axis=0), ufunc.reduce(ref, axis=0))


@settings(deadline=None, max_examples=25)
@given(arrays(int_dtypes, shapes(min_dims=1, max_dims=2, min_side=1)), st.data())
def test_add_at_matches_numpy(value, data):
    """Differential: np.add.at with repeated indices, on integer dtypes."""
    n = value.shape[0]
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), max_size=6)), dtype=np.intp)
    want = value.copy()
    np.add.at(want, idx, 1)
    lazy = lg.asarray(value)
    _quiet(np.add.at, lazy, lg.asarray(idx), 1)
    assert_matches(lazy, want)


def test_a_fallback_on_device_values_reads_them_back_and_returns_on_that_device() -> None:
    """NumPy's function on arrays of a device whose memory is not the host's: a counted copy back
    (device arrays refuse `np.asarray`), and the result placed on the inputs' device."""
    from jit import backend

    x = np.array([3.0, 1.0, 2.0, -4.0])
    d = lg.asarray(x, device="cuda-emulated")
    before = backend.transfers("cuda-emulated")["to_host"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = np.trapezoid(d)
        z = np.sort_complex(d)
    assert backend.transfers("cuda-emulated")["to_host"] > before
    assert y.device == "cuda-emulated" and z.device == "cuda-emulated"
    np.testing.assert_allclose(float(y), np.trapezoid(x))
    np.testing.assert_array_equal((z * 2).numpy(), np.sort_complex(x) * 2)
