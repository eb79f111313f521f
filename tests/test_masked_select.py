"""Deferred boolean-mask selections (lazygraph/masked.py) against NumPy.

`x[mask]` stays lazy while it is only combined elementwise under the same mask and written
back (`y[mask] = ...`, `y[mask] += ...`): these tests run the same program on NumPy and on
lazygraph and compare values, dtypes and errors; check that the selections really stayed
deferred (no evaluation inside a mandelbrot-like loop); and that materializing gives the
values lazygraph gave before selections were deferred.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazygraph as lg
import lazygraph.masked  # noqa: F401  (installs the deferred selections)
from lazygraph.array import DEFERRED
from lazygraph.masked import Masked

DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int32, np.int64, np.float32, np.float64)]
DTYPES.append(np.dtype(np.complex128))


@contextlib.contextmanager
def gathered() -> Iterator[None]:
    """lazygraph as it was before deferral: every `x[mask]` is gathered at once."""
    saved = list(DEFERRED)
    DEFERRED[:] = [None, None]
    try:
        yield
    finally:
        DEFERRED[:] = saved


def _complex(parts: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.empty(parts.shape[1:], dtype)
    out.real, out.imag = parts[0], parts[1]  # not re + 1j * im: that turns an infinite part into nan
    return out


def values(dtype: np.dtype, shape: tuple, nan: bool = False) -> st.SearchStrategy:
    """Arrays of small values (NaN and inf among floats when asked)."""
    if dtype.kind == "b":
        return hnp.arrays(dtype, shape)
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -20
        return hnp.arrays(dtype, shape, elements=st.integers(lo, 20))
    real = st.floats(-8, 8, width=32) | (st.sampled_from([np.nan, np.inf, -np.inf]) if nan else st.nothing())
    if dtype.kind == "c":
        parts = hnp.arrays(np.float64, (2, *shape), elements=real)
        return parts.map(lambda p: _complex(p, dtype))
    return hnp.arrays(dtype, shape, elements=real)


@st.composite
def cases(draw: Any, dtypes: list = DTYPES, nan: bool = False) -> tuple:
    """(dtype, target values, other values of the same shape, mask, number of mask axes)."""
    dtype = draw(st.sampled_from(dtypes))
    mshape = draw(
        hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=5)
        | hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=2)  # size 0 too
    )
    rest = draw(hnp.array_shapes(min_dims=0, max_dims=1, min_side=1, max_side=3))
    shape = mshape + rest
    mask = draw(st.sampled_from(["random"] * 4 + ["none", "all"]))
    m = {
        "random": draw(hnp.arrays(np.bool_, mshape)),
        "none": np.zeros(mshape, bool),
        "all": np.ones(mshape, bool),
    }
    return dtype, draw(values(dtype, shape, nan)), draw(values(dtype, shape, nan)), m[mask], len(mshape)


def outcome(fn: Any, *args: Any) -> Any:
    """fn's results as NumPy arrays, or the type of the error it raised."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = fn(*args)
    except (TypeError, ValueError, IndexError, OverflowError) as e:
        return TypeError if isinstance(e, TypeError) else type(e)
    return [np.asarray(o) for o in out]


def same(got: Any, want: Any) -> None:
    """Equal results (values bit for bit, NaN where NaN, dtypes and shapes) or the same error type."""
    if isinstance(want, type):
        assert got is want, (got, want)
        return
    assert isinstance(got, list), got
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        assert np.array_equal(g, w, equal_nan=w.dtype.kind in "fc"), (g, w)


def both(prog: Any, *args: Any) -> None:
    """prog on NumPy and lazygraph (asarray copies the inputs): the same outcome."""
    want = outcome(prog, np, *[a.copy() for a in args])
    got = outcome(prog, lg, *[lg.asarray(a) for a in args])
    same(got, want)


def update(xp: Any, y: Any, b: Any, m: Any) -> tuple:
    """The mandelbrot pattern, plus a view of the target read after the writes."""
    mask = xp.asarray(m)
    view = y[:1]
    y[mask] = y[mask] * 2 - b[mask]
    y[mask] += 1
    z = b[mask] == y[mask]
    return y, view, b, z


def update_derived(xp: Any, y: Any, b: Any, m: Any) -> tuple:
    """The mask computed lazily from the target itself, used after the target changed."""
    active = (y != 0) | xp.asarray(m)
    y[active] = -y[active] + b[active] * 3
    b[active] -= 2
    y[active] = 7
    tail = y[1:]  # a window of y as the target: y sees the write
    positive = tail > 0
    tail[positive] = tail[positive] * 3
    return y, b, tail


@settings(max_examples=40)
@given(cases())
def test_update_patterns_match_numpy(case: tuple) -> None:
    dtype, y, b, m, _ = case
    both(update, y, b, m)
    both(update_derived, y, b, m)


@settings(max_examples=30)
@given(cases(nan=True), st.sampled_from([0, 1, -1, 3, 300, -129, 1.5, -2.5, np.nan, np.inf, True, 1j]))
def test_scalar_writes_convert_as_numpy(case: tuple, value: Any) -> None:
    dtype, y, b, m, _ = case

    def prog(xp: Any, y: Any, m: Any) -> tuple:
        y[xp.asarray(m)] = value  # NumPy converts the scalar first: 300 into int8 raises
        return (y,)

    both(prog, y, m)


@settings(max_examples=30)
@given(cases([np.dtype(t) for t in (np.int32, np.float64, np.complex128)]), st.integers(1, 3))
def test_trailing_broadcast_and_zero_d(case: tuple, k: int) -> None:
    dtype, y, b, m, nm = case

    def prog(xp: Any, y: Any, b: Any, m: Any) -> tuple:
        mask = xp.asarray(m)
        w = xp.asarray(b[(0,) * nm])  # the trailing axes only (0-d for a mask over every axis)
        sel = y[mask]
        out = (sel + w) * k - xp.asarray(b.sum())  # a 0-d array operand
        y[mask] = out
        return y, out.sum(axis=0) if out.dtype.kind in "iu" else out

    both(prog, y, b, m)


@settings(max_examples=30)
@given(
    cases([np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int32, np.float64, np.complex128)], nan=True)
)
def test_reductions(case: tuple) -> None:
    dtype, y, b, m, _ = case

    def prog(xp: Any, y: Any, m: Any) -> tuple:
        sel = y[xp.asarray(m)]
        out = [sel.any(), sel.all(), sel.any(axis=0), sel.all(axis=0)]
        if dtype.kind in "biu":
            out += [sel.sum(), sel.sum(axis=0)]
        return tuple(out)

    both(prog, y, m)
    if dtype.kind in "biu":  # integer sums stay lazy
        assert isinstance(lg.asarray(y)[lg.asarray(m)].sum(), lg.Array)


@settings(max_examples=25)
@given(cases(nan=True))
def test_materializing_points_match_numpy(case: tuple) -> None:
    dtype, y, b, m, _ = case

    def prog(xp: Any, y: Any, b: Any, m: Any) -> tuple:
        mask = xp.asarray(m)
        sel = y[mask] + b[mask]
        n = len(sel)  # the count: materializes
        first = sel[:1]  # other indexing
        return sel, first, xp.asarray([n, sel.ndim, sel.shape[0]]), y[mask].max() if n else xp.asarray(0)

    both(prog, y, b, m)


def test_deferred_values_equal_the_gathered_ones() -> None:
    def mandel(ns: Any) -> tuple:
        x = ns.linspace(-2.2, 0.8, 13)
        c = x[None, :] + 1j * ns.linspace(-1.2, 1.2, 9)[:, None]
        z = ns.zeros_like(c)
        counts = ns.zeros(c.shape, dtype=np.int32)
        for _ in range(12):
            active = ns.abs(z) <= 2.0
            z[active] = z[active] ** 2 + c[active]
            counts[active] += 1
        return np.asarray(z), np.asarray(counts), np.asarray(z.real[counts == 12].sum())

    deferred = mandel(lg)
    with gathered():
        before = mandel(lg)
    for d, g in zip(deferred, before):
        assert d.dtype == g.dtype and np.array_equal(d, g)
    for d, w in zip(deferred, mandel(np)):
        assert d.dtype == w.dtype and np.allclose(d, w, rtol=1e-12, atol=1e-12)


def _evaluations() -> int:
    return lg.cache.stats()["evaluations"]


def test_mandelbrot_loop_does_not_evaluate() -> None:
    c = lg.asarray(np.linspace(-2, 1, 24).reshape(4, 6) + 0.3j)
    z = lg.zeros_like(c)
    counts = lg.zeros(c.shape, dtype=np.int32)
    e0 = _evaluations()
    for _ in range(10):
        active = lg.abs(z) <= 2.0
        assert isinstance(z[active], Masked)
        z[active] = z[active] ** 2 + c[active]
        counts[active] += 1
    assert _evaluations() == e0  # nothing ran inside the loop
    lg.eval(z, counts)
    assert _evaluations() == e0 + 1
    assert counts.dtype == np.int32 and z.dtype == np.complex128

    with gathered():
        z = lg.zeros_like(c)
        e0 = _evaluations()
        for _ in range(10):
            active = lg.abs(z) <= 2.0
            z[active] = z[active] ** 2 + c[active]
        assert _evaluations() >= e0 + 10  # one an iteration before


def test_relu_backward_mask_write_is_lazy() -> None:
    h = lg.asarray(np.arange(-6.0, 6.0).reshape(3, 4))
    d = lg.asarray(np.ones((3, 4)))
    e0 = _evaluations()
    d[h <= 0] = 0
    assert _evaluations() == e0
    want = np.ones((3, 4))
    want[np.arange(-6.0, 6.0).reshape(3, 4) <= 0] = 0
    assert np.array_equal(d.numpy(), want)


def test_mask_shape_errors_at_the_users_line() -> None:
    x = lg.asarray(np.arange(6.0).reshape(2, 3))
    bad = lg.asarray(np.array([True, False, True]))
    with pytest.raises(IndexError):
        x[bad]
    with pytest.raises(IndexError):
        x[bad] = 1.0
    with pytest.raises(OverflowError):
        lg.asarray(np.zeros(3, np.int8))[lg.asarray(np.ones(3, bool))] = 300
    with pytest.raises(TypeError):  # same_kind: float into an int selection, as NumPy
        s = lg.asarray(np.arange(3))[lg.asarray(np.ones(3, bool))]
        s += 1.5


def test_masked_out_lanes_never_trap_or_leak() -> None:
    base = np.array([4, -3, 9, 2], dtype=np.int64)
    expo = np.array([2, -1, 3, 0], dtype=np.int64)  # a negative exponent where the mask is False
    div = np.array([2, 0, 3, 0], dtype=np.int64)
    fl = np.array([1.0, np.nan, np.inf, 2.0])
    m = np.array([True, False, True, True])

    def prog(xp: Any, base: Any, expo: Any, div: Any, fl: Any, m: Any) -> tuple:
        mask = xp.asarray(m) & (div != 0) | xp.asarray([False, False, False, False])
        p = base[mask] ** expo[mask]
        q = base[mask] // div[mask]
        fl[xp.asarray(m) & (div != 0)] = fl[xp.asarray(m) & (div != 0)] * 0.5
        r = fl[xp.asarray(~m)]
        return p, q, fl, base[mask].sum(), r

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division-by-zero warning from a masked-out lane
        got = outcome(prog, lg, *[lg.asarray(a) for a in (base, expo, div, fl, m)])
    same(got, outcome(prog, np, base, expo, div, fl.copy(), m))


def test_aliasing_and_program_order() -> None:
    def prog(xp: Any, y: Any, m: Any) -> tuple:
        mask = xp.asarray(m)
        s = y[mask]
        t = s  # the same selection object: an in-place operator changes both names
        s += 1
        old = y[mask]
        y[mask] = 0
        y[mask] = old  # the value read before the write
        w = y[1:]
        w[mask[1:]] = t[: int(mask[1:].sum())]
        m2 = mask.copy()
        u = y[m2]
        m2[0] = not bool(m2[0])  # the mask changed after the read: the write uses its new value
        y[m2] = u if int(m2.sum()) == len(u) else 5
        return y, w, t

    y = np.arange(10, dtype=np.int32)
    for m in (np.arange(10) % 3 == 0, np.ones(10, bool), np.zeros(10, bool)):
        both(prog, y, m)


def test_different_masks_and_other_operands_gather() -> None:
    def prog(xp: Any, y: Any, m: Any) -> tuple:
        m1 = xp.asarray(m)
        m2 = xp.asarray(m)  # equal values, another array: the selections are gathered
        a = y[m1] + y[m2]
        b = y[m1] @ xp.ones(len(y[m1]))
        c = y[m1][::-1] * y[m1]
        return a, b, c

    y = np.arange(8.0)
    both(prog, y, np.arange(8) % 2 == 0)

    def mismatch(xp: Any, y: Any, m: Any) -> Any:
        return (y[xp.asarray(m)] + y[xp.asarray(~m)],)

    both(mismatch, y, np.arange(8) < 3)  # (3,) + (5,): NumPy's ValueError


def test_complex_into_real_target_warns_as_numpy() -> None:
    y = lg.asarray(np.arange(4.0))
    c = lg.asarray(np.arange(4.0) + 1j)
    m = lg.asarray(np.array([True, False, True, False]))
    with pytest.warns(np.exceptions.ComplexWarning):
        y[m] = c[m]
    assert np.array_equal(y.numpy(), [0.0, 1.0, 2.0, 3.0])


def test_complex_parts_as_source_and_target() -> None:
    def prog(xp: Any, z: Any, m: Any) -> tuple:
        mask = xp.asarray(m)
        re = z.real[mask] * 2  # a ComplexPart read: deferred
        z.real[mask] = re + 1  # a ComplexPart target: the general path
        z[mask] = z[mask] * 1j
        return z, z.imag[mask].sum(axis=0), re

    z = np.arange(6.0).reshape(3, 2) + 1j * np.arange(6.0).reshape(3, 2)[::-1]
    for m in (np.array([True, False, True]), np.array([[True, False], [False, True], [True, True]])):
        both(prog, z, m)


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "sub", "mul", "cmp", "write", "iadd", "scalar", "remask"]), st.integers(-3, 3)
    ),
    min_size=1,
    max_size=8,
)


def run_steps(xp: Any, y: Any, b: Any, m: Any, steps: list) -> tuple:
    """A random program over selections: elementwise steps, in-place steps, writes, new masks."""
    mask = xp.asarray(m)
    sel = y[mask]
    for kind, k in steps:
        if kind == "add":
            sel = sel + b[mask]
        elif kind == "sub":
            sel = k - sel
        elif kind == "mul":
            sel = sel * k
        elif kind == "cmp":
            sel = sel > k
        elif kind == "write":
            y[mask] = sel
        elif kind == "iadd":
            sel += k
        elif kind == "scalar":
            y[mask] = k
        else:
            mask = y > k
            sel = y[mask]
    return y, sel


@pytest.mark.slow
@settings(max_examples=400)
@given(
    cases(
        [np.dtype(t) for t in (np.bool_, np.int8, np.int32, np.int64, np.float32, np.float64, np.complex128)]
    ),
    STEPS,
)
def test_random_programs_over_selections(case: tuple, steps: list) -> None:
    dtype, y, b, m, _ = case
    if dtype.kind == "c":
        steps = [(kind, k) for kind, k in steps if kind not in ("cmp", "remask")]  # complex has no order
    both(lambda xp, y, b, m: run_steps(xp, y, b, m, steps), y, b, m)
