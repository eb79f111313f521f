"""The pass registry and the built-in passes: what they remove, their guards, New nodes."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
import optimizer
from cache import key as keymod
from cache.graph import Graph, PassError
from lazygraph.engine import ENGINE
from lazygraph.engine import compile as compiler
from lazygraph.engine.program import FunctionKernel


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test starts with an empty cache in its own directory."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAZYGRAPH_CACHE", raising=False)
    monkeypatch.delenv("LAZYGRAPH_OPTIMIZE", raising=False)
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")  # the built-in passes only: step counts below are theirs
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


def lazy(a) -> lg.Array:
    """An unevaluated copy (`positive`: no pass touches it), so views of it are view nodes."""
    return lg.positive(lg.asarray(np.asarray(a)))


def optimized(*arrays: lg.Array) -> tuple[Graph, object]:
    """P -> Q for these arrays, without evaluating (Graph and its transformation graph)."""
    w = keymod.walk([a.node for a in arrays])
    g = Graph(w)
    optimizer.optimize(g)
    return g, g.finalize()


def step_ops(tg, w=None) -> list[str]:
    """Operator names of the plan's steps."""
    names = []
    for q in tg.order:
        n = tg.nodes[q]
        names.append(n[1].label if n[0] == "new" else "copy")
    return names


def last_entry():
    """The entry of the newest evaluation."""
    return max(ENGINE.stats.used.values(), key=lambda e: e.last_used)


# -- the registry ---------------------------------------------------------------------


def test_builtin_passes_run_in_priority_order():
    names = [p.name for p in optimizer.ordered()]
    assert names.index("algebraic") < names.index("identity") < names.index("cse") < names.index("dce")
    assert names[-1] == "dce"
    assert all(a.priority >= b.priority for a, b in zip(optimizer.ordered(), optimizer.ordered()[1:]))


def test_register_a_pass_and_it_runs_with_its_condition():
    calls = []

    @optimizer.register_pass("test_noop", priority=150, condition=lambda g: len(g.nodes) > 3)
    def noop(g):
        calls.append(len(g.nodes))
        return False

    try:
        with pytest.raises(ValueError, match="already registered"):
            optimizer.register_pass("test_noop", priority=1)(noop)
        x = lazy(np.arange(3.0))
        optimized(x * 2)  # positive(buffer) * 2: 4 nodes, the condition holds
        optimized(x)  # 2 nodes: skipped
        assert calls == [4]
    finally:
        optimizer.unregister_pass("test_noop")
    assert "test_noop" not in optimizer.PASSES


def test_a_pass_that_changes_a_shape_is_rejected_by_name():
    @optimizer.register_pass("test_bad", priority=400)
    def bad(g):
        n = next(n for n in g.nodes if not n.leaf)
        n.shape = n.shape + (1,)
        return True

    try:
        with pytest.raises(PassError, match="test_bad"):
            optimized(lazy(np.ones(3)) * 2)
    finally:
        optimizer.unregister_pass("test_bad")


def test_a_pass_that_leaves_a_dangling_input_is_rejected():
    @optimizer.register_pass("test_dangling", priority=400)
    def dangling(g):
        leaf = next(n for n in g.nodes if n.leaf)
        g.nodes.remove(leaf)
        return True

    try:
        with pytest.raises(PassError, match="test_dangling"):
            optimized(lazy(np.ones(3)) * 2)
    finally:
        optimizer.unregister_pass("test_dangling")


# -- CSE and DCE ------------------------------------------------------------------------


def test_cse_merges_duplicates_and_dce_drops_them():
    x = lazy(np.arange(4.0))
    y = lg.tanh(x * 2) + lg.tanh(x * 2)
    g, tg = optimized(y)
    assert "cse" in g.fired and "dce" in g.fired
    # add, tanh, multiply (+ x's own add): the duplicate multiply and tanh are gone
    assert len(tg.order) == 4
    np.testing.assert_array_equal(y.numpy(), np.tanh(np.arange(4.0) * 2) * 2)


def test_cse_keeps_different_scalars_apart_and_guards_equal_ones():
    x = lazy(np.arange(4.0))
    y1 = lg.eval(x * 2.0 + x * 2.0)[0]
    entry = last_entry()
    assert any(g[1][0] == "value" for g in entry.variants[0].tgraph.guards)
    # same structure, different scalar values: the guard fails, a new variant is made
    z = lazy(np.arange(4.0))
    y2 = lg.eval(z * 2.0 + z * 3.0)[0]
    assert last_entry() is entry and len(entry.variants) == 2
    np.testing.assert_array_equal(y1, np.arange(4.0) * 4)
    np.testing.assert_array_equal(y2, np.arange(4.0) * 5)


def test_cse_never_merges_minus_zero_with_zero():
    x = lazy(np.array([-0.0, 1.0]))
    y = x * 0.0 + x * -0.0
    g, tg = optimized(y)
    assert "cse" not in g.fired
    np.testing.assert_array_equal(y.numpy(), np.array([-0.0, 1.0]) * 0.0 + np.array([-0.0, 1.0]) * -0.0)


def test_cse_merges_transposes_of_one_buffer():
    xn = np.arange(6.0).reshape(2, 3)
    x = lg.asarray(xn)
    y = x @ x.T + x @ x.T
    g, tg = optimized(y)
    assert "cse" in g.fired
    assert len(tg.order) == 2  # one matmul, one add
    np.testing.assert_array_equal(y.numpy(), 2 * (xn @ xn.T))


def test_cse_guard_on_size_attributes():
    # two reshapes of x: equal targets are merged under a guard; unequal ones on P' miss it
    x = lazy(np.arange(12.0))
    a = lg.eval(lg.reshape(x[::1] * 1.5, (3, 4)).sum(0) + 0, lg.reshape(x * 1.5, (3, 4)))
    y = lazy(np.arange(12.0))
    b = lg.eval(lg.reshape(y[::1] * 1.5, (3, 4)).sum(0) + 0, lg.reshape(y * 1.5, (6, 2)))
    np.testing.assert_array_equal(a[1], (np.arange(12.0) * 1.5).reshape(3, 4))
    np.testing.assert_array_equal(b[1], (np.arange(12.0) * 1.5).reshape(6, 2))


# -- algebraic identities and New nodes -------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x * 1,
        lambda x: 1 * x,
        lambda x: x * 1.0,
        lambda x: x / 1,
        lambda x: x - 0,
        lambda x: x - 0.0,
        lambda x: x**1,
    ],
)
def test_neutral_scalars_are_dropped(make):
    xn = np.array([-0.0, 1.5, np.inf, np.nan])
    x = lazy(xn)
    y = make(x)
    g, tg = optimized(y)
    assert "algebraic" in g.fired
    assert len(tg.order) == 1  # only x's own `positive` is left
    np.testing.assert_array_equal(y.numpy(), make(xn))


@pytest.mark.parametrize(
    "xn, make",
    [
        (np.array([-0.0, 1.0]), lambda x: x + 0),  # -0.0 + 0 is 0.0
        (np.array([-0.0, 1.0]), lambda x: x - (-0.0)),
        (np.array([1 + 1j, np.inf + 1j]), lambda x: x * 1),  # inf * 0 inside complex products
        (np.array([1.0, 2.0]), lambda x: x * 2),
        (np.array([1, 2]), lambda x: x / 1),  # int / 1 is float: another dtype
    ],
)
def test_inexact_identities_are_not_applied(xn, make):
    x = lazy(xn)
    y = make(x)
    g, _ = optimized(y)
    assert "algebraic" not in g.fired
    with np.errstate(all="ignore"):
        expected = make(xn)
    np.testing.assert_array_equal(y.numpy(), expected)


def test_integer_times_zero_becomes_a_new_full_node_rebuilt_from_new_sizes():
    for n in (3, 7):
        xn = np.arange(n, dtype=np.int32)
        x = lazy(xn)
        y = (x * 2) * 0 + 5
        g, tg = optimized(y)
        assert "algebraic" in g.fired and "dce" in g.fired
        # x * 2 is dead: not run at all (full + 5 reads only literals: the fold pass memoizes it)
        memo = ["full", [], ["dtype", "fill_value", "shape"]] in tg.nodes[-1][1].data
        assert "full" in step_ops(tg) or memo
        got = y.numpy()
        np.testing.assert_array_equal(got, (xn * 2) * 0 + 5)
        assert got.dtype == np.int32 and got.shape == (n,)
    assert last_entry().hits == 1  # the second size replayed the New node


def test_power_zero_is_ones_even_for_nan():
    xn = np.array([np.nan, -np.inf, 0.0, 2.0], dtype=np.float32)
    y = lazy(xn) ** 0
    g, tg = optimized(y)
    assert "full" in step_ops(tg)
    got = y.numpy()
    np.testing.assert_array_equal(got, xn**0)
    assert got.dtype == np.float32


def test_value_guard_rejects_another_scalar_on_replay():
    x = lazy(np.arange(3.0))
    np.testing.assert_array_equal((x * 1.0).numpy(), np.arange(3.0))
    y = lazy(np.arange(3.0))
    np.testing.assert_array_equal((y * 3.0).numpy(), np.arange(3.0) * 3)  # same key, guard fails
    assert len(last_entry().variants) == 2


# -- identity operations ------------------------------------------------------------------


def test_cast_to_same_dtype_and_detach_are_dropped():
    x = lazy(np.arange(4.0))
    y = lg.tanh(x.astype(np.float64)).detach() + 1
    g, tg = optimized(y)
    assert "identity" in g.fired
    assert len(tg.order) == 3  # positive, tanh, + 1
    np.testing.assert_allclose(y.numpy(), np.tanh(np.arange(4.0)) + 1)


def test_identity_view_guard_fails_for_a_real_window_with_the_same_key():
    a = lazy(np.arange(3.0))
    v1 = (a.detach() * 2).numpy()  # identity view over (3,)
    b = lazy(np.arange(4.0))
    v2 = (b[1:] * 2).numpy()  # a (3,) window over (4,): same key, guard must fail
    np.testing.assert_array_equal(v1, np.arange(3.0) * 2)
    np.testing.assert_array_equal(v2, np.arange(1.0, 4.0) * 2)


def test_reshape_guard_fails_when_the_shapes_differ_on_replay():
    x = lazy(np.arange(6.0).reshape(2, 3))
    r1 = lg.reshape(x.T, (3, 2)).numpy()  # a copying reshape to its own shape: dropped
    y = lazy(np.arange(6.0).reshape(2, 3))
    r2 = lg.reshape(y.T, (2, 3)).numpy()  # same key, different target
    np.testing.assert_array_equal(r1, np.arange(6.0).reshape(2, 3).T)
    np.testing.assert_array_equal(r2, np.arange(6.0).reshape(2, 3).T.reshape(2, 3))


# -- New nodes with a custom constructor, plans ----------------------------------------


def test_custom_constructor_new_node_survives_disk_and_new_sizes():
    calls = []

    def build(recipe, artifacts):
        assert artifacts["note"] == "kept"

        def run(x, **attrs):
            calls.append(x.shape)
            return np.tanh(x)

        return run

    ENGINE.register_constructor("test_tanh", build)

    @optimizer.register_pass("test_tanh_pass", priority=500)
    def replace_tanh(g):
        mapping = {}
        for n in g.nodes:
            if n.op is not None and n.op.name == "tanh" and n.recipe is None:
                mapping[id(n)] = g.new(None, [n.inputs[0]], {}, g.shape_expr(n), n.dtype, ctor="test_tanh")
        g.artifacts["note"] = "kept"
        if mapping:
            g.substitute(mapping)
        return bool(mapping)

    try:
        for n in (3, 5):
            x = lazy(np.arange(float(n)))
            np.testing.assert_allclose(lg.tanh(x * 2).numpy(), np.tanh(np.arange(float(n)) * 2))
        assert calls == [(3,), (5,)]
        lg.cache.clear(disk=False)  # the next evaluation loads the entry from disk
        x = lazy(np.arange(4.0))
        np.testing.assert_allclose(lg.tanh(x * 2).numpy(), np.tanh(np.arange(4.0) * 2))
        assert calls[-1] == (4,) and lg.cache.stats()["disk_hits"] == 1
    finally:
        optimizer.unregister_pass("test_tanh_pass")
        ENGINE.unregister_constructor("test_tanh")


def test_plan_reorder_and_replaceable_step_functions():
    a = lazy(np.arange(3.0))
    b = lazy(np.arange(3.0))
    y = lg.exp(a) + lg.sin(b)
    w = keymod.walk([y.node])
    g = Graph(w)
    optimizer.optimize(g)
    tg = g.finalize()
    plan = compiler.build(tg, w.tokens, ENGINE.constructors)
    order = list(tg.order)
    # another topological order: always run the ready step with the highest index
    alt, done = [], {q for q, n in enumerate(tg.nodes) if n[0] == "leaf"}
    while len(alt) < len(order):
        q = max(q for q in order if q not in done and all(i in done for i in tg.nodes[q][2]))
        alt.append(q)
        done.add(q)
    assert alt != order
    plan.reorder(alt)
    assert [s.outs[0] for s in plan.steps] == alt and plan.tgraph.order == alt
    with pytest.raises(ValueError, match="before one of its inputs"):
        plan.reorder(list(reversed(order)))
    vals = plan.run(w.nodes, set())
    expected = np.exp(np.arange(3.0)) + np.sin(np.arange(3.0))
    np.testing.assert_allclose(vals[tg.pmap[w.roots[0]]], expected)
    # swap the exp step's callable, as a JIT would with a compiled kernel
    step = next(s for s in plan.steps if s.name == "exp")
    step.kernel = FunctionKernel(lambda x: np.exp(x) * 0)
    plan.refresh()
    vals = plan.run(w.nodes, set())
    np.testing.assert_allclose(vals[tg.pmap[w.roots[0]]], np.sin(np.arange(3.0)))
