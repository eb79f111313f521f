"""The compiled template matcher (cache/tmatch.py): one structural difference is one miss.

Each case records a base structure until its template has a compiled matcher, then records a
variant that differs in one thing (an attribute, a scalar's type, an aliasing relation, a leaf's
dtype or rank, a view for a copy, sharing, arity, a static mark, an evaluated input). The walk
must give exactly the full walk's key and nodes, and the values must equal NumPy's. Every test
runs with both compiled matchers: the C one (lazygraph/lean_match.c) and the generated Python.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from _support import one_hint, programs_match_numpy, walked
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cache_fuzz import inputs_for, programs, run

import lazygraph as lg
from cache import template
from cache.tmatch import SLOW
from lazygraph import lean_native

pytestmark = pytest.mark.usefixtures("memory_cache")


@pytest.fixture(autouse=True, params=["C", "Python"])
def matcher_kind(request):
    """Which compiled matcher the templates get; the C one must load here (a compiler is present)."""
    native = request.param == "C"
    if native:
        assert lean_native.match_module() is not None, "the C matcher did not build"
    with lg.settings.override(native_match=native):
        yield request.param


def kind_of(t) -> str:
    """'C' or 'Python': the kind of a template's compiled matcher."""
    return "Python" if type(t.fast).__name__ == "function" else "C"


def exact(roots: list) -> tuple:
    """The key `walk` gives, checked against the full walk's (nodes and key)."""
    w, full = walked(roots)
    assert w.interior == full.interior
    return w.key


def compiled(roots: list) -> bool:
    """Whether these roots' template has its compiled matcher (of the test's kind) and it accepts them."""
    _, t, nodes = template.find(roots)
    if t is None or t.fast is None or nodes is None:
        return False
    assert kind_of(t) == ("C" if lg.settings.native_match else "Python")
    return True


RNG = np.random.default_rng(7)
A = RNG.normal(size=(4, 5)).astype(np.float32)
B = RNG.normal(size=(4, 5)).astype(np.float32)
C = RNG.normal(size=(5, 4)).astype(np.float32)


def base(x, y, xp=lg):
    """Shared input, scalars, a reduction: the structure every variant departs from."""
    u = xp.tanh(x * 2.0 + y)
    return (u * x - u).sum(axis=0)


# (name, lazygraph variant over NumPy inputs, NumPy reference); every one differs in structure but
# the last two, which the key deliberately equates (asarray copies a broadcast or a sliced buffer
# into memory of its own): they must still give the full walk's key and NumPy's values
VARIANTS: list[tuple[str, Callable, Callable]] = [
    (
        "attribute",
        lambda: (lg.tanh(lg.asarray(A) * 2.0 + lg.asarray(B)) * lg.asarray(A)).sum(axis=1),
        lambda: (np.tanh(A * 2.0 + B) * A).sum(axis=1),
    ),
    ("scalar type", lambda: base2(lg.asarray(A), lg.asarray(B), 2), lambda: base2(A, B, 2, np)),
    ("aliasing x*x", lambda: base(*(lambda a: (a, a))(lg.asarray(A))), lambda: base(A, A, np)),
    (
        "leaf dtype",
        lambda: base(lg.asarray(A.astype(np.float64)), lg.asarray(B)),
        lambda: base(A.astype(np.float64), B, np),
    ),
    ("leaf rank", lambda: base(lg.asarray(A[None]), lg.asarray(B[None])), lambda: base(A[None], B[None], np)),
    ("view vs copy", lambda: base(lg.positive(lg.asarray(C)).T, lg.asarray(B)), lambda: base(C.T, B, np)),
    ("one input evaluated", lambda: evaluated_inner(), lambda: base(A, B, np)),
    ("static leaf", lambda: base(lg.mark_static(lg.asarray(A)), lg.asarray(B)), lambda: base(A, B, np)),
    (
        "broadcast leaf",
        lambda: base(lg.asarray(np.broadcast_to(A[:1], A.shape)), lg.asarray(B)),
        lambda: base(np.broadcast_to(A[:1], A.shape), B, np),
    ),
    (
        "memory shared",
        lambda: base(*(lambda m: (lg.asarray(m[:4]), lg.asarray(m[4:])))(np.concatenate([A, B]))),
        lambda: base(A, B, np),
    ),
]
EQUAL = {"broadcast leaf", "memory shared"}


def base2(x, y, k, xp=lg):
    """`base` with the scalar 2.0 replaced by `k` (same value, another Python type)."""
    u = xp.tanh(x * k + y)
    return (u * x - u).sum(axis=0)


def evaluated_inner():
    """The base structure whose inner `tanh` was evaluated after the consumers were recorded."""
    x, y = lg.asarray(A), lg.asarray(B)
    u = lg.tanh(x * 2.0 + y)
    r = (u * x - u).sum(axis=0)
    u.numpy()
    return r


def warm() -> list:
    """Record the base structure until its template is compiled; the last roots, checked."""
    for _ in range(4):
        r = base(lg.asarray(A), lg.asarray(B))
        exact([r.node])
        np.testing.assert_allclose(r.numpy(), base(A, B, np), rtol=1e-5)
    r = base(lg.asarray(A), lg.asarray(B))
    assert compiled([r.node])
    return [r.node]


@pytest.mark.parametrize("name,variant,reference", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_one_difference_misses_the_compiled_template(name, variant, reference):
    roots = warm()
    k0 = exact(roots)
    v = variant()
    assert (exact([v.node]) == k0) == (name in EQUAL), name
    np.testing.assert_allclose(v.numpy(), reference(), rtol=1e-5)


def test_sharing_an_interior_node_differs_from_two_equal_ones():
    """`t * t` with one `t` against `t1 * t2` recorded twice: the same tree, another graph."""

    def two(x):
        return lg.exp(x + 1.0) * lg.exp(x + 1.0)

    def one(x):
        t = lg.exp(x + 1.0)
        return t * t

    for f, g in ((two, one), (one, two)):
        lg.cache.clear(disk=False)
        template.clear()
        for _ in range(4):
            exact([f(lg.asarray(A)).node])
        k0 = exact([f(lg.asarray(A)).node])
        assert compiled([f(lg.asarray(A)).node])
        r = g(lg.asarray(A))
        assert exact([r.node]) != k0
        np.testing.assert_allclose(r.numpy(), np.exp(A + 1.0) ** 2, rtol=1e-5)


def test_arity_and_static_mark_miss():
    """A concatenation of three for one of two; a leaf marked static (model state)."""

    def cat(*xs):
        return lg.concatenate([lg.exp(x) for x in xs])

    for _ in range(4):
        exact([cat(lg.asarray(A), lg.asarray(B)).node])
    roots = [cat(lg.asarray(A), lg.asarray(B)).node]
    assert compiled(roots)
    k0 = exact(roots)
    r = cat(lg.asarray(A), lg.asarray(B), lg.asarray(A))
    assert exact([r.node]) != k0
    np.testing.assert_allclose(r.numpy(), np.exp(np.concatenate([A, B, A])), rtol=1e-5)
    r = cat(lg.mark_static(lg.asarray(A)), lg.asarray(B))
    assert exact([r.node]) != k0
    np.testing.assert_allclose(r.numpy(), np.exp(np.concatenate([A, B])), rtol=1e-5)


def test_repeated_roots_and_many_hits_stay_exact():
    """Two roots, one requested twice, evaluated many times through the compiled matcher."""
    for i in range(6):
        x, y = lg.asarray(A * i), lg.asarray(B)
        a = lg.tanh(x) + y
        b = a * 0.5
        exact([a.node, b.node, a.node])
        lg.eval(a, b)
        np.testing.assert_allclose(a.numpy(), np.tanh(A * i) + B, rtol=1e-5)
        np.testing.assert_allclose(b.numpy(), (np.tanh(A * i) + B) * 0.5, rtol=1e-5)
    roots = [(lg.tanh(lg.asarray(A)) + lg.asarray(B)).node]
    assert template.find(roots)[1] is None or compiled(roots)


def test_a_node_without_its_local_id_takes_the_general_match():
    """A recorded node whose id was dropped: the compiled matcher defers (SLOW), the walk is exact."""
    roots = warm()
    _, t, _ = template.find(roots)
    node = roots[0].inputs[0]
    node.kid = None
    assert t.fast(roots) is SLOW
    exact(roots)


def test_deep_sharing_compiles_in_linear_time():
    """A chain of diamonds (each value read twice): the matcher's value numbers stay flat.

    Nested value numbers would hash the unfolded tree, 2**depth nodes; this must finish at once.
    """

    def diamonds(x):
        for _ in range(60):
            x = lg.sin(x) * lg.cos(x)
        return x

    expected = np.asarray(A, dtype=np.float32)
    for _ in range(60):
        expected = np.sin(expected) * np.cos(expected)
    for _ in range(template.compile_after(3 * 60 + 1) + 1):  # until its matcher compiles
        r = diamonds(lg.asarray(A))
        exact([r.node])
    assert compiled([r.node])
    np.testing.assert_allclose(r.numpy(), expected, rtol=1e-4, atol=1e-6)


def five(a, b, c, d, e):
    """Five held buffers: the compiled matcher checks them inline (more than three)."""
    return a * b + c * d - e


@pytest.mark.parametrize("case", ["same", "shared memory", "static", "dtype", "evaluated leaf"])
def test_inline_buffer_checks(case):
    data = [RNG.normal(size=(3, 4)).astype(np.float32) for _ in range(5)]
    for _ in range(4):
        r = five(*[lg.asarray(x) for x in data])
        exact([r.node])
    r = five(*[lg.asarray(x) for x in data])
    assert compiled([r.node])
    k0 = exact([r.node])
    leaves = [lg.asarray(x) for x in data]
    expected = five(*data)
    if case == "shared memory":  # two leaves over one held buffer: an aliasing relation
        both = lg.asarray(np.stack([data[0], data[2]]))
        leaves[0], leaves[2] = both[0], both[1]
    elif case == "static":
        leaves[3] = lg.mark_static(leaves[3])
    elif case == "dtype":
        leaves[4] = lg.asarray(data[4].astype(np.float64))
        expected = five(*data[:4], data[4].astype(np.float64))
    elif case == "evaluated leaf":  # a held value that was an operation's result (its kid is -2)
        leaves[1] = lg.positive(lg.asarray(data[1]))
        leaves[1].numpy()
    r = five(*leaves)
    same = case in ("same", "evaluated leaf")
    assert (template.find([r.node])[2] is not None) == same, case  # through the compiled matcher
    k = exact([r.node])
    assert (k == k0) == same, case
    np.testing.assert_allclose(r.numpy(), expected, rtol=1e-6)


def test_memoized_guard_check_matches_the_guards():
    """The generated check (reads, memo, then the guards) agrees with evaluating every guard."""
    from types import SimpleNamespace

    from cache.recipe import compile_guard
    from cache.store import _all_hold

    spec = [("eq", ("dim", 0, 0), ("const", 4)), ("eq", ("attr", 1, "axis"), ("const", 1))]
    check = _all_hold([compile_guard(g) for g in spec], spec)

    def nodes(rows, axis):
        return [SimpleNamespace(shape=(rows, 3), attrs={}), SimpleNamespace(shape=(), attrs={"axis": axis})]

    for _ in range(2):  # the second round answers from the memo
        assert check(nodes(4, 1)) is True
        assert check(nodes(4, 1)) is True  # the same reads again: the last outcome
        assert check(nodes(5, 1)) is False
        assert check(nodes(4, 2)) is False
        assert check(nodes(4, True)) is False  # a bool is not 1 here: its key form differs
        assert check(nodes(4, 1.0)) is False
    broken = nodes(4, 1)
    broken[1].attrs = {}
    assert check(broken) is False  # a guard that cannot be computed fails


def test_a_template_forgets_its_entry_when_the_store_changes():
    """The entry a template remembers is used only while the store is unchanged since."""
    with lg.settings.override(jit=True):  # templates remember entries under the default settings
        _template_forgets_its_entry()


def _template_forgets_its_entry():
    for _ in range(5):
        r = base(lg.asarray(A), lg.asarray(B))
        np.testing.assert_allclose(r.numpy(), base(A, B, np), rtol=1e-5)
    r = base(lg.asarray(A), lg.asarray(B))
    _, t, _ = template.find([r.node])
    assert t is not None and t.cached is not None
    lg.cache.clear(disk=False)  # the entry is gone: the next evaluation must compile again
    before = lg.cache.stats(per_entry=False)["misses"]
    np.testing.assert_allclose(r.numpy(), base(A, B, np), rtol=1e-5)
    assert lg.cache.stats(per_entry=False)["misses"] == before + 1


@settings(max_examples=10, deadline=None)
@given(progs=st.lists(programs(), min_size=2, max_size=3), seed=st.integers(0, 99))
def test_random_programs_through_compiled_matchers_get_the_full_walks_keys(progs, seed):
    """Random programs under one forced hint, recorded until their templates compile, then run.

    Every graph tries the others' compiled matchers first (at most 4 templates share a hint, so
    up to 3 programs, recorded without evaluations in between).
    """
    with one_hint(), lg.settings.override(jit=False):
        for _ in range(template.compile_after(160) + 2):  # until every template compiles
            for code, _ in progs:
                exact([a.node for a in run(lg, code, inputs_for(3, 4, seed), False)])
        compiled_now = [t for ts in template._templates.values() for t in ts if t.fast is not None]
        assert len(compiled_now) == len(
            {exact([a.node for a in run(lg, c, inputs_for(3, 4, seed), False)]) for c, _ in progs}
        )
        programs_match_numpy(progs, seed)


@pytest.mark.parametrize("matcher_kind", ["C"], indirect=True)
def test_c_matchers_leave_with_their_templates(matcher_kind):
    """A template and its C matcher hold each other: the collector frees the pair."""
    import gc

    warm()

    def matchers() -> int:
        return sum(type(o).__name__ == "Matcher" for o in gc.get_objects())

    assert matchers() >= 1
    template.clear()
    gc.collect()
    assert matchers() == 0


@pytest.mark.parametrize("matcher_kind", ["C"], indirect=True)
def test_c_matcher_tables_are_checked_and_odd_roots_go_to_the_general_match(matcher_kind):
    """Slots out of range are refused when a matcher is made; roots that are not nodes return SLOW."""
    native = lean_native.match_module()
    roots = warm()
    _, t, _ = template.find(roots)
    assert t.fast([object()]) is SLOW and t.fast((roots[0],)) is not None
    assert t.fast([]) is None
    with pytest.raises(ValueError, match="out of range"):
        native.match_make(2, [5], [], [], [], [], (), [], [], (), [], False, t, template.buffers_ok, SLOW)
    with pytest.raises(ValueError, match="out of range"):
        native.match_make(
            2, [1], [1, 3, 0], [1], [7], [], (), [], [], (), [], False, t, template.buffers_ok, SLOW
        )
