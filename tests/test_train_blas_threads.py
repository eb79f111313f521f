"""BLAS threads fitted to the cores other processes leave free, around a training step's evaluation."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from jit import blas_quiet
from lazygraph import nn, optim


def test_others_running_is_a_count():
    n = blas_quiet.others_running()
    assert isinstance(n, int) and n >= 0


def test_threads_drop_while_cores_are_busy_and_come_back(monkeypatch):
    fns = blas_quiet._thread_count_fns()
    if fns is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS here")
    getter = fns[1]
    before = getter()
    if before < 2:
        pytest.skip("OpenBLAS runs one thread here")
    monkeypatch.setattr(blas_quiet, "others_running", lambda: 10**6)  # every core busy
    with blas_quiet.blas_threads_fit_load():
        assert getter() == 1
        a = (np.arange(64 * 64) % 5).astype(np.float32).reshape(64, 64)  # exact sums
        np.testing.assert_array_equal(a @ a, (a.astype(np.float64) @ a).astype(np.float32))
    assert getter() == before
    monkeypatch.setattr(blas_quiet, "others_running", lambda: 0)  # an idle machine: unchanged
    with blas_quiet.blas_threads_fit_load():
        assert getter() == before
    assert getter() == before


def test_a_failed_step_restores_the_thread_count(monkeypatch):
    fns = blas_quiet._thread_count_fns()
    before = fns[1]() if fns is not None else None
    monkeypatch.setattr(blas_quiet, "others_running", lambda: 10**6)
    lg.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = optim.SGD(model.parameters(), lr=0.1)
    loss = nn.functional.cross_entropy(model(lg.asarray(np.ones((2, 4), np.float32))), np.array([0, 5]))
    loss.backward()
    with pytest.raises(Exception):  # label 5 of 3 classes: the evaluation fails
        opt.step()
    if fns is not None:
        assert fns[1]() == before
