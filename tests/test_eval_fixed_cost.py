"""The warm evaluation's lean parts: the memoized run plan, the lean step loop, the queued hit
statistics and the floating-point error state (lazygraph/engine/evaluate.py, program.py,
cache/stats.py). Each is checked against the general path and against NumPy, including after
what must invalidate it (another kept set, a new layout, changed steps, a stats reset).
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import lazygraph as lg
from cache import template
from cache.stats import QUEUE_LIMIT
from lazygraph.engine import memory
from lazygraph.engine import program as programmod
from lazygraph.engine.attempt import memoized
from lazygraph.engine.meter import Layout
from lazygraph.engine.state import ENGINE
from tests.reliability.test_numeric import ULP

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """An in-process cache and no templates from earlier tests."""
    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    lg.cache.clear(disk=False)
    template.clear()
    yield
    template.clear()


def _plans(monkeypatch) -> list:
    """Record (program, P keep set, plan) of each evaluation."""
    seen = []
    plan = programmod.Program.plan

    def spy(self, keep):
        p = plan(self, keep)
        seen.append((self, frozenset(keep), p))
        return p

    monkeypatch.setattr(programmod.Program, "plan", spy)
    return seen


PROGRAMS = [
    ("add_scalar", lambda m, x, y: x + 1),
    ("chain", lambda m, x, y: m.tanh(x * y - 0.5) / (1.0 + x)),
    ("where", lambda m, x, y: m.where(x > y, x, y * 2)),
    ("reduce_axis", lambda m, x, y: (x * y).sum(axis=0)),
    ("mean_keepdims", lambda m, x, y: m.mean(x - y, axis=1, keepdims=True)),
    ("compare", lambda m, x, y: x >= 0.5),
    ("matmul", lambda m, x, y: x @ y.T),
    ("scan", lambda m, x, y: m.cumsum(x * y, axis=1)),
    ("max_min", lambda m, x, y: m.max(x, axis=0) - m.min(y, axis=0)),
]


#: programs with a transcendental, equal to NumPy within its stated tolerance (docs/reliability.md;
#: the kernels' libmvec tanh and NumPy's own AVX2 tanh differ in the last bits)
ULPS = {"chain": ULP["float64"]["tanh"]}


def _same_as_numpy(got: np.ndarray, want: np.ndarray, name: str) -> None:
    if name in ULPS:
        np.testing.assert_array_max_ulp(got, want, maxulp=ULPS[name])
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name,f", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_lean_run_equals_numpy_and_the_general_loop(name, f, monkeypatch):
    xn = np.random.default_rng(1).random((5, 4))
    yn = np.random.default_rng(2).random((5, 4))
    want = f(np, xn, yn)
    seen = _plans(monkeypatch)
    for _ in range(6):  # the first run is metered (learns the layout); later ones go lean
        got = f(lg, lg.asarray(xn), lg.asarray(yn)).numpy()
        _same_as_numpy(got, want, name)
    program, keep, (_, keepq, fkeep, layout, lean) = seen[-1]
    assert layout is not None and lean is not None, name
    # the same graph through the general loop gives the same values
    x, y = lg.asarray(xn), lg.asarray(yn)
    out = f(lg, x, y)
    from cache.key import walk

    w = walk([out.node])
    again = program.plan(memoized(w))
    assert again[4] is lean  # memoized: the same plan object
    general = program.run(w.nodes, keepq, layout)
    fast = program.run_lean(w.nodes, lean)
    q = program.pmap[w.roots[0]]
    np.testing.assert_array_equal(general[q], fast[q])
    _same_as_numpy(fast[q], want, name)
    for fn, *_, i, _pooled in lean:  # forwarding operator kernels are skipped
        kernel = program.steps[i].kernel
        if type(kernel) is programmod.OpKernel and type(kernel.op).kernel in programmod._FORWARDING:
            assert fn is kernel.op.fn


def test_plan_follows_the_kept_set_the_layout_and_refresh(monkeypatch):
    xn = np.arange(12.0).reshape(3, 4)
    seen = _plans(monkeypatch)
    for _ in range(3):
        np.testing.assert_array_equal((lg.asarray(xn) * 2 + 1).numpy(), xn * 2 + 1)
    program, keep, hot = seen[-1]
    # another kept set (an intermediate held by the user): a new plan for it
    for _ in range(3):
        a = lg.asarray(xn) * 2
        b = a + 1
        np.testing.assert_array_equal(b.numpy(), xn * 2 + 1)
        np.testing.assert_array_equal(a.numpy(), xn * 2)
    same = [(k, p) for prog, k, p in seen if prog is program]
    assert len({k for k, _ in same}) == 2  # both kept sets were planned for
    assert same[-1][1][0] == same[-1][0]
    # a replaced layout is picked up by the next plan
    old = same[-1][1]
    fresh = Layout(
        old[3].key, list(old[3].take), [list(g) for g in old[3].give], old[3].nbuf, 0, list(old[3].into)
    )
    memory.remember(program, old[2], fresh)
    assert program.plan(set(old[0]))[3] is fresh
    # changed steps: refresh forgets the plan
    program.refresh()
    assert program.hot is None
    for _ in range(3):
        np.testing.assert_array_equal((lg.asarray(xn) * 2 + 1).numpy(), xn * 2 + 1)


def test_pooled_steps_run_lean_while_small_and_the_general_loop_when_large(monkeypatch):
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")  # op by op: intermediates of one size, reusable
    seen = _plans(monkeypatch)
    ran = []
    lean_run = programmod.Program.run_lean
    general = programmod.Program.run

    def spy_lean(self, nodes, lean):
        vals = lean_run(self, nodes, lean)
        ran.append("lean" if vals is not None else "bail")
        return vals

    def spy_run(self, nodes, keep, layout=None):
        ran.append("run")
        return general(self, nodes, keep, layout)

    monkeypatch.setattr(programmod.Program, "run_lean", spy_lean)
    monkeypatch.setattr(programmod.Program, "run", spy_run)

    def f(m, x):
        return m.exp(m.sin(x) * 3 + 1) - x

    small = np.random.default_rng(0).random(512)
    for _ in range(4):
        np.testing.assert_array_equal(f(lg, lg.asarray(small)).numpy(), f(np, small))
    program, _, (_, _, _, layout, lean) = seen[-1]
    assert any(b >= 0 for b in layout.take)  # the layout reuses freed buffers
    assert lean is not None and any(step[-1] for step in lean) and ran[-1] == "lean"
    # the same structure with values above LEAN_REUSE_BYTES: the layout (learnt small) pools them
    large = np.random.default_rng(1).random(programmod.LEAN_REUSE_BYTES // 8 * 4)
    ran.clear()
    np.testing.assert_array_equal(f(lg, lg.asarray(large)).numpy(), f(np, large))
    assert ran == ["bail", "run"] and seen[-1][0] is program
    assert program.hot[4] is None  # later runs of this plan take the general loop at once
    ran.clear()
    np.testing.assert_array_equal(f(lg, lg.asarray(large)).numpy(), f(np, large))
    assert ran == ["run"]


def test_a_failing_lean_step_changes_nothing_and_names_the_operator():
    xn = np.arange(5.0)
    good = np.array([0, 1, 2])
    for _ in range(4):  # the structure's plan is lean by now
        np.testing.assert_array_equal(lg.asarray(xn)[lg.asarray(good)].numpy(), xn[good])
    x = lg.asarray(xn)
    y = x[lg.asarray(np.array([0, 9, 1]))]
    with pytest.raises(IndexError, match="gather|index"):
        y.numpy()
    np.testing.assert_array_equal(x.numpy(), xn)
    np.testing.assert_array_equal(x[lg.asarray(good)].numpy(), xn[good])


def test_hits_are_counted_exactly_through_the_queue():
    xn = np.arange(6.0)
    before = lg.cache.stats(per_entry=False) if _takes_per_entry() else lg.cache.stats()
    n = QUEUE_LIMIT + 37  # past one bulk accounting
    for _ in range(n):
        (lg.asarray(xn) + 1).numpy()
    after = lg.cache.stats()
    assert after["hits"] + after["misses"] - before["hits"] - before["misses"] == n
    assert after["evaluations"] - before["evaluations"] == n
    (entry,) = [e for e in after["entries"] if e["p_nodes"] == 3]
    assert entry["hits"] + entry["misses"] == n
    # the entries listed by the store carry their counts too
    listed = [e for e in ENGINE.memory.entries() if e.hits + e.misses == n]
    assert len(listed) == 1 and listed[0].last_used > 0
    assert sum(r[1] for r in lg.cache.history()) >= n
    assert ENGINE.stats.replay_seconds > 0 and ENGINE.stats.run_seconds > 0


def _takes_per_entry() -> bool:
    import inspect

    return "per_entry" in inspect.signature(lg.cache.stats).parameters


def test_hits_from_many_threads_are_all_counted():
    xn = np.arange(8.0)
    (lg.asarray(xn) * 3).numpy()
    base = lg.cache.stats()["evaluations"]
    per, n_threads = 300, 4
    errors: list = []

    def work() -> None:
        try:
            for _ in range(per):
                np.testing.assert_array_equal((lg.asarray(xn) * 3).numpy(), xn * 3)
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert lg.cache.stats()["evaluations"] - base == per * n_threads


def test_reset_keeps_queued_hits_on_their_entries():
    xn = np.arange(4.0)
    for _ in range(5):
        (lg.asarray(xn) - 2).numpy()
    ENGINE.stats.reset()
    assert lg.cache.stats()["hits"] == 0
    (entry,) = [e for e in ENGINE.memory.entries() if len(e.skey[0]) == 3]
    assert entry.hits + entry.misses == 5


def test_floating_point_errors_are_ignored_and_the_users_state_is_restored():
    xn = np.array([1.0, 0.0, -1.0])
    with np.errstate(divide="raise", invalid="raise", over="warn"):
        state, size = np.geterr(), np.getbufsize()
        for _ in range(4):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = (lg.asarray(xn) / lg.asarray(np.zeros(3))).numpy()
            np.testing.assert_array_equal(got, np.array([np.inf, np.nan, -np.inf]))
            assert np.geterr() == state and np.getbufsize() == size
        # a failing run restores it too
        with pytest.raises(IndexError):
            lg.asarray(xn)[lg.asarray(np.array([7]))].numpy()
        assert np.geterr() == state
    with np.errstate(all="ignore"), np.testing.assert_raises(FloatingPointError):
        with np.errstate(divide="raise"):
            np.array([1.0]) / 0.0


def test_totals_count_exactly_from_many_threads() -> None:
    """debug.TOTALS counts per thread without a lock: the totals and the numbers stay exact."""
    import threading

    from lazygraph import debug

    before = debug.evaluation_stats()
    numbers: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        got = [debug.TOTALS.count(3) for _ in range(2000)]
        with lock:
            numbers.extend(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = debug.evaluation_stats()
    assert after["evaluations"] - before["evaluations"] == 8000
    assert after["kernels"] - before["kernels"] == 24000
    assert len(set(numbers)) == 8000  # every evaluation has its own number
