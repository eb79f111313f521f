"""Lazy 0-d integers as indices and slice bounds; grad with respect to arrays not marked requires_grad."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import numeric_grad
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_matches

import lazygraph as lg

# -- lazy 0-d integers as indices ---------------------------------------------------------


def test_lazy_integer_as_slice_bound_index_range_and_shape():
    """a[:k + 1], a[k], range(k), reshape(k, -1) with a lazy 0-d integer k, as with a NumPy one."""
    v = np.arange(12.0)
    a, k = lg.asarray(v), lg.asarray(np.int64(3))
    assert_matches(a[: k + 1], v[:4])
    assert_matches(a[k:], v[3:])
    assert_matches(a[::k], v[::3])
    assert_matches(a[k], v[3])
    assert list(range(k)) == [0, 1, 2]
    assert a.reshape(k, -1).shape == (3, 4)
    m = lg.asarray(v.reshape(3, 4))
    assert_matches(m[: k - 1, lg.asarray([0, 2])], v.reshape(3, 4)[:2, [0, 2]])
    m[: k - 1, 1] = -1.0  # setitem: the bound is evaluated too
    want = v.reshape(3, 4).copy()
    want[:2, 1] = -1.0
    assert_matches(m, want)


def test_bad_slice_bounds_are_index_errors():
    """A lazy float or a multi-element array as a bound is refused as NumPy refuses it."""
    a = lg.arange(5)
    with pytest.raises(IndexError, match="slice indices"):
        a[: lg.asarray(2.0)]
    with pytest.raises(IndexError, match="slice indices"):
        a[: lg.asarray([1, 2])]
    with pytest.raises(IndexError, match="slice indices"):
        a[:1.5]


@settings(deadline=None, max_examples=40)
@given(
    st.integers(0, 6),
    st.integers(-8, 8),
    st.integers(-8, 8),
    st.sampled_from([None, 1, 2, -1, -3]),
    st.sampled_from(["int64", "int32", "uint8", "int8"]),
)
def test_lazy_slice_bounds_match_numpy(n, start, stop, step, dtype):
    """Differential: every bound lazy (any integer dtype), 0-size arrays and negative steps."""
    v = np.arange(float(n))
    if dtype[0] == "u" and (start < 0 or stop < 0):
        start, stop = abs(start), abs(stop)
    lazy_step = None if step is None else lg.asarray(np.array(step, dtype="int64"))
    key = slice(lg.asarray(np.array(start, dtype)), lg.asarray(np.array(stop, dtype)), lazy_step)
    assert_matches(lg.asarray(v)[key], v[start:stop:step])


# -- grad with respect to arrays that do not require grad -----------------------------------


def test_grad_differentiates_an_untracked_array():
    """lg.asarray(x) not marked requires_grad: lg.grad differentiates it as JAX does."""
    x = np.array([1.0, -2.0, 3.0])
    a = lg.asarray(x)
    assert_matches(lg.grad((a**2).sum(), [a])[0], 2 * x)
    w = lg.asarray([0.5, 1.5, -1.0], requires_grad=True)
    gw, ga = lg.grad((lg.tanh(w * a) * a).sum(), [w, a])
    t = np.tanh(np.array([0.5, 1.5, -1.0]) * x)
    assert_matches(gw, (1 - t**2) * x * x)
    assert_matches(ga, t + (1 - t**2) * np.array([0.5, 1.5, -1.0]) * x)


def test_grad_of_untracked_inputs_matches_finite_differences():
    """A composite of many operators, differentiated with respect to plain arrays."""
    xs = [np.array([[0.3, -1.2], [2.0, 0.7]]), np.array([0.5, -0.4])]

    def f(a, b):
        return (lg.exp(a * b) / (1 + a**2) + lg.sin(a @ b)[:, None]).sum()

    lazy = [lg.asarray(x) for x in xs]
    grads = lg.grad(f(*lazy), lazy)
    for i, g in enumerate(grads):
        want = numeric_grad(lambda arrs: float(f(*[lg.asarray(x) for x in arrs])), xs, i, 1e-6)
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-7)


def test_no_grad_and_detach_are_constants_to_untracked_grad():
    """Values recorded under no_grad or made by detach() do not carry the gradient (zeros, as tracked)."""
    a = lg.asarray([1.0, 2.0])
    with lg.no_grad():
        b = a * 2
    assert_matches(lg.grad((b * b).sum() + (a * 3).sum(), [a])[0], np.array([3.0, 3.0]))
    assert_matches(lg.grad((a.detach() * a).sum(), [a])[0], np.array([1.0, 2.0]))
    unrelated = lg.asarray([5.0])
    assert_matches(lg.grad((a * 2).sum(), [unrelated])[0], np.array([0.0]))


def test_untracked_grad_through_an_evaluated_value_is_an_error_not_a_zero():
    """Evaluation released the history of an untracked intermediate: grad refuses, naming the argument."""
    a = lg.asarray([1.0, 2.0, 3.0])
    b = a * 2
    b.numpy()  # evaluation point: b keeps its value, not how it was computed
    with pytest.raises(RuntimeError, match=r"argument 0 \(float64, shape \(3,\)\).*requires_grad"):
        lg.grad((b * b).sum(), [a])
    with pytest.raises(RuntimeError, match="requires_grad"):
        lg.grad((b[1:] ** 2).sum(), [a])  # also through a view of the evaluated value
    loss = (a * a).sum()
    float(loss)
    with pytest.raises(RuntimeError, match="evaluated before"):
        lg.grad(loss, [a])
    # the fix the message names: mark the argument before computing
    a.requires_grad_()
    b = a * 2
    b.numpy()
    assert_matches(lg.grad((b * b).sum(), [a])[0], np.array([8.0, 16.0, 24.0]))


def test_backward_fills_grad_only_of_arrays_that_require_grad():
    """backward(): .grad of requires_grad leaves; plain arrays get none; nothing tracked is an error."""
    a = lg.asarray([1.0, 2.0])
    with pytest.raises(RuntimeError, match="does not depend on anything that requires grad"):
        (a**2).sum().backward()
    assert a.grad is None
    w = lg.asarray([3.0, 4.0], requires_grad=True)
    (w * a).sum().backward()
    assert_matches(w.grad, np.array([1.0, 2.0]))
    assert a.grad is None
    with lg.no_grad():
        c = w * 2
    with pytest.raises(RuntimeError, match="does not depend on anything that requires grad"):
        (c * c).sum().backward()
