"""The compiled template matcher as a tier: a structure matched twice compiles its matcher on the
background worker, ahead of queued work, and the hit path never compiles one itself.

Without the worker (the rest of the suite) a template compiles in place after
`template.compile_after` general matches (tests/test_eval_small.py). Values always match NumPy's.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lazygraph as lg
from cache import template
from cache.key import walk
from jit import background


@pytest.fixture(autouse=True)
def worker(memory_cache, monkeypatch):
    """The background worker on, templates and cache fresh (memory_cache: conftest)."""
    monkeypatch.setenv("LAZYGRAPH_JIT_BACKGROUND", "1")
    yield
    assert lg.jit_wait(60)


def chain(x):
    """A 120-operation chain: `compile_after` waits for more than DEFER_AFTER general matches."""
    for _ in range(40):
        x = lg.sin(x) * 0.5 + 1.0
    return x


def numpy_chain(x):
    for _ in range(40):
        x = np.sin(x) * 0.5 + 1.0
    return x


def _template(r):
    """The template the graph behind `r` matched (None: walked in full, a new structure)."""
    return walk([r.node]).template


class _held:
    """Keep the worker busy until the block ends (queued jobs wait behind it)."""

    def __enter__(self) -> _held:
        self.release = threading.Event()
        started = threading.Event()

        def job() -> None:
            started.set()
            self.release.wait(60)

        assert background.submit(("test-hold-matcher", id(self)), job)
        assert started.wait(60)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()


def test_matcher_compiles_on_the_worker_after_two_matches():
    a0 = np.linspace(-1, 1, 7)
    r = chain(lg.asarray(a0))
    assert _template(r) is None  # new: walked in full
    with _held():
        for _ in range(template.DEFER_AFTER):
            t = _template(chain(lg.asarray(a0)))
        assert t.uses == template.DEFER_AFTER < template.compile_after(t.n)
        assert t.fast is None  # queued behind the held job, not compiled on the hit path
        assert background.queued(("matcher", id(t)))
    assert lg.jit_wait(60)
    assert t.fast is not None and t.uses < template.compile_after(t.n)
    r = chain(lg.asarray(a0))
    assert _template(r) is t
    np.testing.assert_allclose(r.numpy(), numpy_chain(a0), rtol=1e-12)


def test_a_busy_worker_does_not_hold_up_the_hit_path():
    """Still queued at `compile_after` matches: compiled in place, as without a worker."""
    a0 = np.linspace(-1, 1, 7)
    results = []
    with _held():
        r = chain(lg.asarray(a0))
        assert _template(r) is None
        while True:
            r = chain(lg.asarray(a0))
            t = _template(r)
            results.append(r.numpy())
            if t.uses >= template.compile_after(t.n):
                break
            assert t.fast is None, f"compiled after {t.uses} uses"
        assert t.fast is not None
        fast = t.fast
    assert lg.jit_wait(60)
    assert t.fast is fast  # the worker's job found it compiled and kept it
    for got in results:
        np.testing.assert_allclose(got, numpy_chain(a0), rtol=1e-12)


def test_matcher_job_goes_ahead_of_queued_work():
    order: list[str] = []
    release = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        release.wait(60)

    assert background.submit(("test-hold-order", 0), hold)
    assert started.wait(60)
    try:
        assert background.submit(("test-late", 0), lambda: order.append("late"))
        assert background.submit(("test-first", 0), lambda: order.append("first"), first=True)
    finally:
        release.set()
    assert lg.jit_wait(60)
    assert order == ["first", "late"]


def test_without_the_worker_the_matcher_compiles_in_place(monkeypatch):
    monkeypatch.setenv("LAZYGRAPH_JIT_BACKGROUND", "0")
    a0 = np.linspace(0, 2, 5)
    r = chain(lg.asarray(a0))
    assert _template(r) is None  # new: walked in full
    while True:
        r = chain(lg.asarray(a0))
        t = _template(r)
        if t.uses >= template.compile_after(t.n):
            break
        assert t.fast is None, f"compiled after {t.uses} uses"
    assert t.fast is not None
    assert not background.known(("matcher", id(t)))
    np.testing.assert_allclose(r.numpy(), numpy_chain(a0), rtol=1e-12)
