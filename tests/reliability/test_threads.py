"""Threads record and evaluate at once: each in its own context, over shared caches and plans.

Every check compares what threads get, switching as often as the interpreter allows
(`sys.setswitchinterval(1e-6)`), with what the same code gives run alone in this process,
bit for bit.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import nn
from lazygraph.engine import threads

THREADS = 8


@contextmanager
def fast_switching() -> Iterator[None]:
    """Switch threads as often as possible (the default interval hides most races)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def in_threads(fn: Callable[[int], Any], n: int = THREADS) -> list[Any]:
    """fn(i) in n threads started together; their results in order (the first error re-raised)."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def work(i: int) -> None:
        try:
            start.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    with fast_switching():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return results


def train(seed: int, steps: int = 6) -> list[float]:
    """A small MLP trained on its own data; the loss of every step and of a few plain evaluations.

    Weights and dropout masks come from this thread's own generators, so the numbers do not
    depend on how threads interleave. Hidden sizes differ by seed but share a structure (the
    key keeps ranks, not sizes), so threads also share cache entries; Adam and SGD alternate.
    """
    rng = np.random.default_rng(seed)
    hidden = (16, 24, 32)[seed % 3]
    model = nn.Sequential(
        nn.Linear(8, hidden),
        nn.ReLU(),
        nn.Dropout(0.1, generator=lg.random.default_rng(seed)),
        nn.Linear(hidden, 4),
    )
    with lg.no_grad():
        for p in model.parameters():
            p[...] = rng.normal(0.0, 0.3, p.shape).astype(np.float32)
    if seed % 2:
        opt = lg.optim.Adam(model.parameters(), lr=1e-2)
    else:
        opt = lg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = rng.integers(0, 4, 64)
    out = []
    for i in range(steps):
        loss = nn.functional.cross_entropy(model(lg.asarray(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(float(loss))
        if i % 3 == 2:  # an evaluation that is not a training step
            out.append(float((model(lg.asarray(x)) ** 2).mean()))
    return out


@pytest.mark.parametrize("fused", [False, True], ids=["numpy-kernels", "fused-kernels"])
def test_threads_train_as_they_do_alone(fused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """8 threads training 8 models give each model the losses it gets alone, bit for bit."""
    if fused:  # small arrays through compiled regions too (built by whichever thread misses first)
        monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "16")
    alone = [train(s) for s in range(THREADS)]
    lg.cache.clear()  # so the threads also miss, optimize and publish plans at the same time
    for _ in range(2):  # cold, then warm: every thread replays the shared entries
        assert in_threads(train) == alone
    stats = lg.cache.stats(per_entry=False)
    assert stats["hits"] > stats["misses"] > 0


def test_backward_in_one_thread_stays_out_of_another() -> None:
    """A loss deferred by backward() in thread A is computed by A's next evaluation, never by B's."""
    w0 = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8

    def record() -> tuple[nn.Parameter, lg.Array]:
        w = nn.Parameter(lg.asarray(w0))
        loss = lg.tanh(lg.asarray(x) @ w.T).sum()
        loss.backward()
        return w, loss

    w, loss = record()  # alone, in this thread: the reference
    ref_grad, ref_loss = w.grad.numpy(), float(loss)
    recorded, b_done = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def thread_a() -> None:
        w, loss = record()  # backward() defers the loss to this thread's next evaluation point
        seen["deferred_in_a"] = [s.node for s in threads.deferred()]
        seen["loss_node"] = loss.node
        recorded.set()
        b_done.wait(10)
        seen["pending_after_b"] = loss.node.buffer is None
        seen["grad"] = w.grad.numpy()  # A's evaluation point: now the loss joins A's graph
        seen["loss_done"] = loss.node.buffer is not None
        seen["loss"] = float(loss)

    def thread_b() -> None:
        recorded.wait(10)
        seen["deferred_in_b"] = threads.deferred()
        before = lg.cache.stats(per_entry=False)["evaluations"]
        seen["b"] = (lg.asarray(x) * 2).sum().numpy()
        seen["b_evaluations"] = lg.cache.stats(per_entry=False)["evaluations"] - before
        b_done.set()

    a, b = threading.Thread(target=thread_a), threading.Thread(target=thread_b)
    with fast_switching():
        a.start()
        b.start()
        a.join()
        b.join()
    assert seen["deferred_in_a"] == [seen["loss_node"]]
    assert seen["deferred_in_b"] == []
    assert seen["b"] == (x * 2).sum() and seen["b_evaluations"] == 1
    assert seen["pending_after_b"], "thread B's evaluation computed thread A's deferred loss"
    assert seen["loss_done"]
    assert seen["loss"] == ref_loss
    np.testing.assert_array_equal(seen["grad"], ref_grad)


def test_threads_share_one_cached_plan() -> None:
    """Threads running one cached plan at once (memo steps, fused regions) each get their own values."""
    rng = np.random.default_rng(7)
    weights = [lg.asarray(rng.normal(size=(16, 32)).astype(np.float32)).static_() for _ in range(THREADS)]
    batches = [[rng.normal(size=(32, 32)).astype(np.float32) for _ in range(16)] for _ in range(THREADS)]

    def infer(i: int) -> list[np.ndarray]:
        w = weights[i]
        out = []
        with lg.no_grad():
            for xb in batches[i]:
                x = lg.asarray(xb)
                # tanh(w) depends on model state only: a memo step whose remembered value is per
                # weight, so threads with different weights take turns in the shared step
                h = lg.maximum(x @ lg.tanh(w).T, 0.0) * 0.5 + 1.0
                out.extend(lg.eval(h.sum(axis=0), (h * h).mean(axis=1)))
        return out

    alone = [infer(i) for i in range(THREADS)]
    misses = lg.cache.stats(per_entry=False)["misses"]
    for _ in range(3):
        got = in_threads(infer)
        for mine, ref in zip(got, alone):
            for a, b in zip(mine, ref):
                np.testing.assert_array_equal(a, b)
    assert lg.cache.stats(per_entry=False)["misses"] == misses  # every threaded evaluation was a hit


def test_threads_keep_their_own_grad_mode_and_report() -> None:
    """no_grad in one thread leaves another's recording tracked; each sees its own last evaluation."""
    w = nn.Parameter(lg.ones((3,), dtype=lg.float32))
    with lg.no_grad():
        lg.eval(lg.arange(5.0) * 2)
    mine = lg.cache.passes()["last"]
    inside, checked = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def quiet() -> None:
        with lg.no_grad():
            inside.set()
            checked.wait(10)
            seen["quiet"] = (w * 2).requires_grad

    def tracked() -> None:
        inside.wait(10)
        seen["tracked"] = (w * 2).requires_grad
        with lg.no_grad():
            lg.eval(w * 3 - 1)
        seen["last"] = lg.cache.passes()["last"].get("outcome")
        checked.set()

    threads = [threading.Thread(target=quiet), threading.Thread(target=tracked)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["quiet"] is False and seen["tracked"] is True
    assert seen["last"] in ("hit", "miss", "disk")
    assert lg.cache.passes()["last"] == mine  # the other thread's evaluation is its own


def test_threads_evaluate_one_shared_pending_array() -> None:
    """An unevaluated array several threads read is computed by one and read by the others."""
    x0 = np.random.default_rng(3).normal(size=(48, 48)).astype(np.float32)

    def record() -> lg.Array:
        return lg.cumsum(lg.tanh(lg.asarray(x0)) * 2, axis=1)

    ref_shared = record()
    ref = [(ref_shared * i).sum(axis=0).numpy() for i in range(4)]
    for _ in range(20):
        shared = record()  # pending: whichever thread evaluates first computes it
        got = in_threads(lambda i, shared=shared: (shared * (i % 4)).sum(axis=0).numpy())
        for i, v in enumerate(got):
            np.testing.assert_array_equal(v, ref[i % 4])
        np.testing.assert_array_equal(shared.numpy(), ref_shared.numpy())
