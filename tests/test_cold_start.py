"""Cold start: what a time-boxed miss leaves to the full tier, and what a hit skips.

A new structure's first call runs a time-boxed program (engine/tiered.py): no order search,
no buffer planning for its runs, no pass predicted to outlast the box. Each check compares
values with NumPy and looks at what the engine recorded (artifacts, statistics), never at
the clock.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from lazygraph.engine import ENGINE
from lazygraph.engine import compile as compiler
from lazygraph.engine import evaluate as evaluation
from ops import collective


@pytest.fixture(autouse=True)
def tiered(tmp_path, monkeypatch):
    """Tiering on (conftest turns it off for the rest of the suite), a fresh cache per test."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LAZYGRAPH_JIT_BACKGROUND", "1")
    monkeypatch.setenv("LAZYGRAPH_OPTIMIZE_BUDGET_MS", "50")
    lg.cache.clear(disk=False)
    yield
    assert lg.jit_wait(60)
    lg.cache.clear(disk=False)


def _chain(x: np.ndarray, ns=lg):
    """Enough steps for the order search to apply (memory.MIN_STEPS)."""
    a = ns.asarray(x)
    b = ns.exp(a * 0.5) - a
    c = ns.tanh(b) @ a.T
    d = (c + b.sum(axis=1, keepdims=True)) * 2.0
    return d.sum(axis=0), ns.abs(b).max(axis=1)


def _only_entry():
    entries = ENGINE.memory.entries()
    assert len(entries) == 1
    return entries[0]


def test_time_boxed_miss_leaves_the_order_search_and_buffer_planning_out():
    x = np.random.default_rng(0).normal(size=(6, 6))
    want = _chain(x, np)
    before = lg.cache.stats(per_entry=False)
    got = lg.eval(*_chain(x))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    program = _only_entry().variants[0].program
    art = program.tgraph.artifacts
    assert compiler.partial(program)
    assert "order_search" in art["time_box"]["skipped"]
    assert "schedule" not in art  # the recorded order
    assert program.layouts == {}  # its run was not metered: no layout learnt
    after = lg.cache.stats(per_entry=False)
    assert after["evaluations"] == before["evaluations"] + 1


def test_the_full_program_searches_the_order_and_learns_a_layout():
    x = np.random.default_rng(1).normal(size=(6, 6))
    want = _chain(x, np)
    for _ in range(2):  # the miss, then the hit that queues the full optimization
        for g, w in zip(lg.eval(*_chain(x)), want):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    assert lg.jit_wait(60)
    for _ in range(2):
        for g, w in zip(lg.eval(*_chain(x)), want):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    program = _only_entry().variants[0].program
    assert not compiler.partial(program)
    assert "schedule" in program.tgraph.artifacts
    assert program.layouts  # metered once, then planned


def test_a_pass_predicted_to_outlast_the_box_is_left_to_the_full_tier(monkeypatch):
    monkeypatch.setitem(compiler.PASS_COST, "cse", 1.0)  # a second per node: never fits
    x = np.random.default_rng(2).normal(size=(160, 160))  # not a small graph (compiler.small)
    a = lg.asarray(x)
    y = (lg.exp(a) + lg.exp(a)) * (lg.exp(a) + 1.0)  # common subexpressions for cse
    np.testing.assert_allclose(y.numpy(), (np.exp(x) + np.exp(x)) * (np.exp(x) + 1.0), rtol=1e-12)
    skipped = _only_entry().variants[0].tgraph.artifacts["time_box"]["skipped"]
    assert "cse" in skipped


def test_learnt_pass_costs_follow_the_runs():
    compiler.learn_cost("test-pass", 0.002, 100)
    assert compiler.PASS_COST["test-pass"] == pytest.approx(2e-5)
    compiler.learn_cost("test-pass", 0.0, 100)
    assert compiler.PASS_COST["test-pass"] == pytest.approx(1e-5)
    del compiler.PASS_COST["test-pass"]


def test_a_hit_without_collectives_does_not_name_the_structure(monkeypatch):
    calls = []
    real = collective.set_structure
    monkeypatch.setattr(collective, "set_structure", lambda d: (calls.append(d), real(d)))
    x = np.arange(6.0)
    for _ in range(3):
        np.testing.assert_allclose((lg.tanh(lg.asarray(x)) * 2.0).numpy(), np.tanh(x) * 2.0, rtol=1e-12)
    assert len(calls) == 1  # the miss names it; the hits' program has no collective step
    variant = _only_entry().variants[0]
    assert variant.memo is False
    assert evaluation._collective(variant.program) is False


def test_roots_on_one_device_are_one_graph():
    x = np.arange(4.0)
    a, b = lg.asarray(x) + 1.0, lg.asarray(x) * 3.0
    before = lg.cache.stats(per_entry=False)["evaluations"]
    got = lg.eval(a, b)
    np.testing.assert_allclose(got[0], x + 1.0)
    np.testing.assert_allclose(got[1], x * 3.0)
    assert lg.cache.stats(per_entry=False)["evaluations"] == before + 1
