"""The memo of one-operand operators with keywords (`x.sum(axis=1)`, `x.astype(...)`, `x.max(...)`).

A second recording of the same signature builds its node from `lazygraph.array._ONE`: it must be
the node the full path builds (shape, dtype, attributes, key hint, gradient marks), and what the
full path says every time (errors, warnings) must still be said every time.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

import lazygraph as lg
from cache.key import hint_of

lg_array = importlib.import_module("lazygraph.array")  # (lg.array is the function)

CALLS = [
    ("sum axis 1", lambda m, a: a.sum(axis=1)),
    ("sum axes", lambda m, a: m.sum(a, axis=(0, 1), keepdims=True)),
    ("mean", lambda m, a: a.mean(axis=0)),
    ("max", lambda m, a: a.max(axis=1, keepdims=True)),
    ("argmax", lambda m, a: a.argmax(axis=1)),
    ("var ddof", lambda m, a: a.var(axis=1, ddof=1)),
    ("astype", lambda m, a: a.astype(np.float32)),
    ("cumsum", lambda m, a: m.cumsum(a, axis=1)),
    ("sum dtype", lambda m, a: a.sum(axis=0, dtype=np.int64)),
]


@pytest.mark.parametrize("name,f", CALLS, ids=[c[0] for c in CALLS])
def test_memoized_recordings_equal_the_full_path(name: str, f) -> None:  # noqa: ANN001
    x = np.arange(12.0).reshape(3, 4) - 5
    seen = []
    for _ in range(3):
        got = f(lg, lg.asarray(x))
        n = got.node
        seen.append((n.attrs, n.h, n.kid, n.requires_grad, n.grad_leaf))
        if len(seen) == 3:  # (read before the evaluation makes the node a leaf)
            n.h = n.kid = None
            assert hint_of(n) == seen[0][1]  # the hint the full path computes
        want = f(np, x)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want)
    assert seen[2] == seen[0] and seen[2][0] is not seen[0][0]


def test_errors_and_warnings_come_on_every_recording() -> None:
    a = lg.asarray(np.ones((2, 3)))
    for _ in range(2):
        with pytest.raises(Exception, match="axis"):
            a.sum(axis=3)
    z = lg.asarray(np.array([1 + 2j, 3 - 1j]))
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = z.astype(np.float64)
        assert [w.category for w in caught] == [np.exceptions.ComplexWarning]  # as NumPy's astype
        np.testing.assert_array_equal(r.numpy(), [1.0, 3.0])


def test_gradients_and_devices_follow_the_operand() -> None:
    for _ in range(2):
        w = lg.asarray(np.arange(6.0).reshape(2, 3))
        w.requires_grad_()
        loss = (w * w).sum(axis=1).sum()
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), 2 * np.arange(6.0).reshape(2, 3))
    for _ in range(2):
        y = lg.asarray(np.ones((2, 3), np.float32), device="cuda-emulated").sum(axis=0)
        assert y.device == "cuda-emulated"
        np.testing.assert_array_equal(y.to_device("cpu").numpy(), [2.0, 2.0, 2.0])


def test_inexact_attributes_are_not_memoized() -> None:
    a = lg.asarray(np.ones((2, 3)))
    before = len(lg_array._ONE)
    for _ in range(2):
        a.var(axis=1, ddof=0.5)
    assert len(lg_array._ONE) == before
    np.testing.assert_allclose(a.var(axis=1, ddof=0.5).numpy(), np.ones((2, 3)).var(axis=1, ddof=0.5))
