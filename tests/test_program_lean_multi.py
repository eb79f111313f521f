"""The lean step loop (Program.run_lean) on steps with several outputs: a fused region whose
two values both leave it (conjugate gradient's `x += a * p; r -= a * q`). Checked against the
general loop (Program.run) and NumPy, and for the same error on a kernel returning too few values.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from cache import template
from cache.key import walk
from lazygraph.engine import program as programmod
from lazygraph.engine.attempt import memoized
from lazygraph.engine.runerrors import EvaluationError

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend

N = 900  # conjugate gradient's medium vectors (below the JIT's size threshold on some machines)


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """An in-process cache and no templates from earlier tests."""
    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    lg.cache.clear(disk=False)
    template.clear()
    yield
    template.clear()


def _step(m, x, r, p, q, a):
    """Two updated vectors from one region, and a value computed from one of them."""
    x2 = x + a * p
    r2 = r - a * q
    return x2, r2, r2 * r2 + 1.0


def _spy_plans(monkeypatch) -> list:
    seen = []
    plan = programmod.Program.plan

    def spy(self, keep):
        got = plan(self, keep)
        seen.append((self, got))
        return got

    monkeypatch.setattr(programmod.Program, "plan", spy)
    return seen


def _inputs():
    rng = np.random.default_rng(5)
    return [rng.random(N) for _ in range(4)]


def _run_until_lean(monkeypatch):
    """Evaluate the structure until its plan is lean with a multi-output step; return it."""
    xn, rn, pn, qn = _inputs()
    want = _step(np, xn, rn, pn, qn, 0.25)
    seen = _spy_plans(monkeypatch)
    for _ in range(8):
        outs = _step(lg, *(lg.asarray(v) for v in (xn, rn, pn, qn)), 0.25)
        got = lg.eval(*outs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-15, atol=0)
        assert lg.jit_wait(60)
    program, (_, keepq, _, layout, lean) = seen[-1]
    return program, keepq, layout, lean, want


def test_multi_output_steps_run_lean_and_equal_the_general_loop(monkeypatch):
    program, keepq, layout, lean, want = _run_until_lean(monkeypatch)
    multi = [s for s in program.steps if len(s.outs) > 1]
    assert multi, [s.name for s in program.steps]  # the region computes both updates
    assert layout is not None and lean is not None
    assert any(step[7] is not None for step in lean)  # the lean loop kept the step's further outputs
    xn, rn, pn, qn = _inputs()
    outs = _step(lg, *(lg.asarray(v) for v in (xn, rn, pn, qn)), 0.25)
    w = walk([o.node for o in outs])
    assert program.plan(memoized(w))[4] is lean
    general = program.run(w.nodes, keepq, layout)
    fast = program.run_lean(w.nodes, lean)
    assert fast is not None
    for root, expected in zip(w.roots, want):
        q = program.pmap[root]
        np.testing.assert_array_equal(fast[q], general[q])
        np.testing.assert_allclose(fast[q], expected, rtol=1e-15, atol=0)
    # every value of the multi-output steps is set, with the recorded shapes and dtypes
    for s in multi:
        for q in s.outs:
            if q in keepq:
                assert fast[q].shape == general[q].shape and fast[q].dtype == general[q].dtype


def test_a_multi_output_step_returning_one_value_fails_alike_in_both_loops(monkeypatch):
    program, keepq, layout, lean, _ = _run_until_lean(monkeypatch)
    k = next(j for j, step in enumerate(lean) if step[7] is not None)
    i = lean[k][8]
    fn = lean[k][0]

    def first_only(*args, **attrs):
        return fn(*args, **attrs)[0]  # a kernel that forgot its further outputs

    broken = list(lean)
    broken[k] = (first_only, *lean[k][1:])
    xn, rn, pn, qn = _inputs()
    outs = _step(lg, *(lg.asarray(v) for v in (xn, rn, pn, qn)), 0.25)
    w = walk([o.node for o in outs])
    with pytest.raises(EvaluationError) as lean_err:
        program.run_lean(w.nodes, broken)
    saved = program.program[i]
    program.program[i] = (first_only, *saved[1:])
    try:
        with pytest.raises(EvaluationError) as general_err:
            program.run(w.nodes, keepq, None)
    finally:
        program.program[i] = saved
    assert str(lean_err.value) == str(general_err.value)
    assert "instead of" in str(lean_err.value)
    assert lean_err.value.failed_step == general_err.value.failed_step
