"""Structural keys from hints hashed as recorded: templates give exactly the full walk's key.

`walk` finds a graph seen before by its roots' hints and verifies it against the stored
numbering (cache/template.py); every test here checks that it returns what the full walk
returns (nodes and key), that different structures keep different keys, and that a hint
collision never gives a wrong key or a wrong result.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import one_hint, programs_match_numpy, walked
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cache_fuzz import inputs_for, programs, run

import lazygraph as lg
from cache import key as keymod
from cache import template
from cache.key import full_walk, walk
from lazygraph.engine import ENGINE

pytestmark = pytest.mark.usefixtures("memory_cache")


def exact(*arrays: lg.Array) -> tuple:
    """The key `walk` gives, after checking it is the full walk's (nodes and key alike)."""
    roots = [a.node for a in arrays]
    w, full = walked(roots)
    assert w.interior == full.interior and w.tokens == full.tokens
    return w.key


def matched(*arrays: lg.Array) -> bool:
    """Whether these roots are found through a template (no full walk)."""
    return template.find([a.node for a in arrays])[2] is not None


def lazy(a) -> lg.Array:
    """An unevaluated copy of a NumPy array."""
    return lg.positive(lg.asarray(np.asarray(a)))


def chain(x: lg.Array) -> lg.Array:
    """A small elementwise chain with scalars and a shared input."""
    y = lg.tanh(x * 2.0 + 1.0)
    return y * x - y


def test_the_same_program_recorded_again_matches_its_template():
    rng = np.random.default_rng(0)
    keys = []
    for _ in range(3):
        x = lg.asarray(rng.normal(size=(4, 5)))
        y = chain(x)
        keys.append(exact(y))
        assert matched(y)
        xn = x.numpy()
        np.testing.assert_allclose(y.numpy(), np.tanh(xn * 2.0 + 1.0) * xn - np.tanh(xn * 2.0 + 1.0))
    assert keys[0] == keys[1] == keys[2]


def _pairs() -> list[tuple[str, object, object]]:
    """Pairs of programs of different structure (each a function of fresh inputs)."""
    a = np.arange(12.0).reshape(3, 4)

    def shared():
        x = lg.asarray(a)
        return x + x

    def distinct():
        return lg.asarray(a) + lg.asarray(a)

    def write():
        z = lazy(a)
        z[0] = 1.0
        return z * 2

    def no_write():
        return lazy(a) * 2

    def alias():  # two leaves over one evaluated buffer
        b = lg.asarray(a)
        return b[0] + b[1]

    def no_alias():
        return lg.asarray(a[0]) + lg.asarray(a[1])

    def broadcast_leaf():  # a leaf whose buffer reads one row many times (stride 0)
        return lg.broadcast_to(lg.asarray(a[0]), (3, 4)) + 1.0

    def plain_leaf():
        return lg.asarray(a) + 1.0

    return [
        ("op", lambda: lazy(a) + 1.0, lambda: lazy(a) * 1.0),
        ("attrs", lambda: lazy(a).sum(axis=0), lambda: lazy(a).sum(axis=1)),
        ("dtype", lambda: lazy(a) + 1.0, lambda: lazy(a.astype(np.float32)) + 1.0),
        ("scalar type", lambda: lazy(a) * 2, lambda: lazy(a) * 2.0),
        ("view", lambda: lazy(a)[:, ::-1] + 0.0, lambda: lazy(a)[:, 1:] + 0.0),
        ("sharing", shared, distinct),
        ("in-place write", write, no_write),
        ("memory aliasing", alias, no_alias),
        ("leaf strides", broadcast_leaf, plain_leaf),
    ]


@pytest.mark.parametrize("name,first,second", _pairs(), ids=[p[0] for p in _pairs()])
def test_different_structures_keep_different_keys(name, first, second):
    k1, k2 = exact(first()), exact(second())
    assert k1 != k2
    # again, through the templates now: each still gets its own key
    assert exact(first()) == k1 and exact(second()) == k2


@pytest.mark.parametrize("name,first,second", _pairs(), ids=[p[0] for p in _pairs()])
def test_colliding_hints_never_give_a_wrong_key_or_result(monkeypatch, name, first, second):
    monkeypatch.setattr(template, "roots_hint", lambda roots: 0)  # every graph: one hint
    for make in (first, second, first, second):
        y = make()
        exact(y)
        expected = full_walk([y.node]).key
        assert walk([y.node]).key == expected
    # and the programs found through colliding templates compute the right values
    for make in (first, second):
        got = make().numpy()
        with monkeypatch.context() as m:
            m.setattr(template, "roots_hint", lambda roots: None)  # the full walk only
            lg.cache.clear(disk=False)
            reference = make().numpy()
        np.testing.assert_array_equal(got, reference)


def test_values_evaluated_between_recordings_are_leaves_in_the_key():
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = lg.asarray(rng.normal(size=8))
        a = lg.exp(x)
        b = a * 2.0
        exact(b)
        a.numpy()  # a is a leaf now: b's hint was recorded over the operation
        exact(b)
        c = b + a
        exact(c)
        np.testing.assert_allclose(c.numpy(), 3 * np.exp(x.numpy()))


def test_a_leaf_marked_static_after_matching_changes_the_key():
    x = lg.asarray(np.ones(4))
    y = x * 3.0
    before = exact(y)
    assert matched(y)
    x.node.static = True  # model state now: a different structure for the fold pass
    after = exact(y)
    assert after != before
    x.node.static = False
    assert exact(y) == before


def test_graphs_recorded_without_hints_are_hinted_by_the_walk():
    x = lg.asarray(np.arange(6.0))
    y = lg.sin(x) + 1.0
    for n in (y.node, *y.node.inputs):
        n.h = None
        n.kid = None
    exact(y)
    assert y.node.h is not None and matched(y)


def test_a_deep_chain_is_keyed_like_the_full_walk():
    x = lg.asarray(np.ones(3))
    y = x
    for _ in range(3000):  # deeper than the recursion limit
        y = y + 1.0
    node = y.node
    while node.inputs:  # forget the hints recorded: they are recomputed without recursion
        node.h = None
        node = node.inputs[0]
    exact(y)
    exact(y)
    np.testing.assert_array_equal(y.numpy(), np.full(3, 3001.0))


def test_template_keys_hash_once_and_key_hash_stays_the_hash():
    x = lg.asarray(np.ones(5))
    y = lg.exp(x) - 1.0
    w = walk([y.node])
    w = walk([y.node])
    assert keymod.key_hash(w.key) == hash(w.key)


def test_guard_outcomes_are_memoized_per_sizes_and_still_right():
    # (a @ b).T is rewritten under a guard (the view must be a transpose); a slice of the
    # same product has the same key and fails it: both alternate over a few sizes
    rng = np.random.default_rng(2)
    for n in (3, 4, 3, 5, 4, 3):
        for transpose in (True, False, True):
            a, b = rng.normal(size=(n, 6)), rng.normal(size=(6, 3))
            p = lazy(a) @ lazy(b)
            z = (p.T if transpose else p[1:, :]) * 0.5
            expected = ((a @ b).T if transpose else (a @ b)[1:, :]) * 0.5
            np.testing.assert_allclose(z.numpy(), expected, rtol=1e-12)
    assert any(v.check is not None for e in ENGINE.memory.entries() for v in e.variants)


@settings(max_examples=30)
@given(progs=st.lists(programs(), min_size=2, max_size=3), seed=st.integers(0, 99))
def test_random_programs_under_one_hint_get_the_full_walks_keys(progs, seed):
    # every graph has the same hint, so each walk tries the others' templates first; programs
    # are recorded twice (the second time through a template) and then evaluated
    with one_hint(), lg.settings.override(jit=False):
        for _ in range(2):
            for code, evaluate_mid in progs:
                exact(*run(lg, code, inputs_for(3, 4, seed), evaluate_mid))
        programs_match_numpy(progs, seed)
