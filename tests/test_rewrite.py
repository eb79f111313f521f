"""The rewrite-rule engine: every built-in rule against the reference (optimizer off), rules
that must not fire when their conditions fail, rules as JSON data."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg
import optimizer
from cache import key as keymod
from cache.graph import Graph
from optimizer.rewrite import ENGINE, Engine, RuleSyntaxError, load_rules, make_rule, save_rules
from optimizer.rewrite.builtin import BUILTIN_RULES


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test starts with an empty cache in its own directory, JIT off."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAZYGRAPH_CACHE", raising=False)
    monkeypatch.delenv("LAZYGRAPH_OPTIMIZE", raising=False)
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


def lazy(a) -> lg.Array:
    """An unevaluated copy, so the rules see an operator node rather than a buffer."""
    a = lg.asarray(np.asarray(a))
    return lg.logical_or(a, a) if a.dtype == np.bool_ else lg.positive(a)


def rules_fired(y: lg.Array) -> dict[str, int]:
    """Which rules the optimizer applies to y's graph (without evaluating)."""
    g = Graph(keymod.walk([y.node]))
    optimizer.optimize(g)
    g.finalize()
    return dict(g.artifacts.get("rules", {}))


def reference(make, xn: np.ndarray) -> np.ndarray:
    """The program's value with no passes at all."""
    os.environ["LAZYGRAPH_OPTIMIZE"] = "0"
    try:
        return make(lazy(xn)).numpy()
    finally:
        del os.environ["LAZYGRAPH_OPTIMIZE"]


# rule name -> (program, dtypes it fires on)
PROGRAMS = {
    "mul-one": (lambda x: (x * 1) + (1 * x), ("int32", "float64", "uint8")),
    "div-one": (lambda x: x / 1, ("float32", "float64")),
    "sub-zero": (lambda x: x - 0, ("int64", "float32")),
    "add-zero-int": (lambda x: (0 + x) + 0, ("int16", "uint32")),
    "pow-one": (lambda x: x**1, ("int32", "float64")),
    "mul-zero-int": (lambda x: x * 0, ("int32", "uint8", "bool")),
    "pow-zero": (lambda x: x**0, ("float32", "int64")),
    "sub-self-int": (lambda x: (lambda y: y - y)(x * 3), ("int8", "int64")),
    "neg-neg": (lambda x: -(-(x * 2)), ("int32", "float32")),
    "not-not": (lambda x: lg.logical_not(lg.logical_not(x)), ("bool",)),
    "invert-invert": (lambda x: ~~(x + 1), ("int16", "uint8")),
    "astype-self": (lambda x: (x * 2).astype(x.dtype), ("float32", "int64")),
    "broadcast-full": (
        lambda x: x + lg.broadcast_to(lg.full((1, x.shape[1]), 3, x.dtype), x.shape),
        ("int32",),
    ),
    # exact for integers; floats are checked with a tolerance below (BLAS blocking)
    "matmul-transpose": (lambda x: (x.T @ (x + 1)).T, ("int64", "int32")),
    "transpose-transpose": (lambda x: _grad_through_transpose(x), ("float64", "float32")),
}


def _grad_through_transpose(x: lg.Array) -> lg.Array:
    """d/da sum(a @ x.T) = ones @ x.T.T: the matmul's gradient transposes a transpose."""
    a = lg.asarray(np.ones((2, x.shape[1]), x.dtype), requires_grad=True)
    return lg.grad((a @ x.T).sum(), [a])[0]


def _zero_d(x: lg.Array) -> lg.Array:
    """A lazy 0-d array (not a literal, not a full: what a reduction or a 0-d input gives)."""
    return lg.positive(lg.asarray(np.array(3, x.dtype)))


for _op, _fn in [
    ("add", lambda a, b: a + b),
    ("multiply", lambda a, b: a * b),
    ("subtract", lambda a, b: a - b),
    ("divide", lambda a, b: a / b),
    ("maximum", lg.maximum),
    ("minimum", lg.minimum),
]:
    _kinds = ("float32", "float64") if _op == "divide" else ("int32", "float64")
    PROGRAMS[f"{_op}-scalar-broadcast"] = (
        lambda x, f=_fn: f(x, lg.broadcast_to(_zero_d(x), x.shape)),
        _kinds,
    )
    if _op in ("subtract", "divide"):
        PROGRAMS[f"{_op}-scalar-broadcast-left"] = (
            lambda x, f=_fn: f(lg.broadcast_to(_zero_d(x), x.shape), x),
            _kinds,
        )


def _data(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape, dtype=dtype)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[: min(3, x.size)] = [-0.0, np.inf, np.nan][: min(3, x.size)]
    return x


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@given(seed=st.integers(0, 2**31), rows=st.integers(1, 4), cols=st.sampled_from([2, 4, 6]))
@settings(max_examples=8, deadline=None)
def test_rule_fires_and_keeps_values(name, seed, rows, cols):
    make, dtypes = PROGRAMS[name]
    for dtype in dtypes:
        xn = _data(dtype, (rows + 1, cols), seed)
        y = make(lazy(xn))
        assert rules_fired(y).get(name, 0) >= 1, (name, dtype)
        with np.errstate(all="ignore"):
            got = y.numpy()
            want = reference(make, xn)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_every_builtin_rule_has_a_program():
    tested = set(PROGRAMS)
    assert {d["name"] for d in BUILTIN_RULES} == tested


def test_rules_reach_a_fixed_point():
    y = -(-(-(-(lazy(np.arange(4.0)) * 2))))
    g = Graph(keymod.walk([y.node]))
    optimizer.optimize(g)
    assert g.artifacts["rules"]["neg-neg"] >= 2
    assert [n.name for n in g.nodes if not n.leaf] == ["positive", "multiply"]
    np.testing.assert_array_equal(y.numpy(), np.arange(4.0) * 2)


@pytest.mark.parametrize(
    "xn, make",
    [
        (np.array([-0.0, 1.0]), lambda x: x + 0),  # -0.0 + 0 is 0.0
        (np.array([-0.0, 1.0]), lambda x: x - (-0.0)),
        (np.array([1 + 1j, np.inf + 1j]), lambda x: x * 1),
        (np.array([1, 2]), lambda x: x / 1),  # int / 1 is float
        (np.array([np.nan, np.inf]), lambda x: x * 0),
        (np.array([np.nan, np.inf]), lambda x: x - x),
        (np.array([1.0, 2.0]), lambda x: x * 2),
        (np.array([1, 2], dtype=np.int32), lambda x: x.astype(np.int64)),
        (np.array([1, 2], dtype=np.int32), lambda x: x - (x + 0 * x)),  # not the same node
        (np.array([True, False]), lambda x: -(-x.astype(np.int8))),  # fires on the int8 only
    ],
)
def test_rules_do_not_fire_when_conditions_fail(xn, make):
    y = make(lazy(xn))
    fired = rules_fired(y)
    wrong = {"add-zero-int", "sub-zero", "mul-one", "div-one", "mul-zero-int", "sub-self-int", "astype-self"}
    if xn.dtype.kind in "iub":
        wrong -= {"mul-zero-int"}  # 0 * x inside the program is an integer rewrite
    assert not (set(fired) & wrong), fired
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(y.numpy(), reference(make, xn))


def test_scalar_value_is_a_guard_not_structure():
    xn = np.arange(6, dtype=np.int32)
    a = lazy(xn) * 1
    np.testing.assert_array_equal(a.numpy(), xn)
    b = lazy(xn) * 2  # same key, the guard on the scalar fails: another variant
    np.testing.assert_array_equal(b.numpy(), xn * 2)
    c = lazy(xn) * 1
    np.testing.assert_array_equal(c.numpy(), xn)
    assert lg.cache.stats()["hits"] >= 1


def test_broadcast_full_is_rebuilt_for_new_sizes():
    for n in (3, 5):
        xn = np.arange(2.0 * n).reshape(2, n)
        y = lazy(xn) * lg.broadcast_to(lg.full((1, n), -0.0), (2, n))
        np.testing.assert_array_equal(y.numpy(), xn * -0.0)
    assert lg.cache.stats()["hits"] == 1


def test_engine_rules_are_data(tmp_path):
    path = tmp_path / "rules.json"
    rules = [make_rule(d["name"], d["lhs"], d["rhs"], d["when"]) for d in BUILTIN_RULES]
    save_rules(path, rules)
    back = load_rules(path)
    assert [r.to_json() for r in back] == [r.to_json() for r in rules]
    doc = json.loads(path.read_text())
    assert doc["rules"][0]["lhs"] == "(multiply ?x 1)"
    path.write_text("{not json")
    assert load_rules(path) == []


@pytest.mark.parametrize(
    "lhs, rhs, when",
    [
        ("(multiply ?x 1", "?x", []),
        ("(no_such_op ?x)", "?x", []),
        ("?x", "?x", []),
        ("(negative ?x)", "?y", []),
        ("(negative ?x)", "?x", ["(kind ?y f)"]),
        ("(negative ?x)", "?x", ["(exec ?x)"]),
        ("(negative ?x)", "(full :shape (eval ?x))", []),
    ],
)
def test_bad_rules_are_rejected(lhs, rhs, when):
    with pytest.raises(RuleSyntaxError):
        make_rule("bad", lhs, rhs, when)


def test_added_rule_runs_in_the_same_engine():
    rule = ENGINE.add({"name": "test-max-self", "lhs": "(maximum ?x ?x)", "rhs": "?x", "when": []})
    try:
        xn = np.array([np.nan, 1.0, -0.0])
        z = lazy(xn) * 2
        y = lg.maximum(z, z)
        assert rules_fired(y) == {"test-max-self": 1}
        np.testing.assert_array_equal(y.numpy(), np.maximum(xn * 2, xn * 2))
        assert ENGINE.fired["test-max-self"] >= 1
    finally:
        ENGINE.remove(rule.name)
    assert "test-max-self" not in [r.name for r in ENGINE.index.get("maximum", [])]


def test_engine_indexes_by_root_op():
    e = Engine([make_rule("a", "(negative (negative ?x))", "?x"), make_rule("b", "(astype ?x)", "?x")])
    assert sorted(e.index) == ["astype", "negative"]


def test_pass_report_counts_rules_and_passes():
    lg.cache.reset_stats()
    y = -(-(lazy(np.arange(4)) * 1))
    np.testing.assert_array_equal(y.numpy(), np.arange(4))
    z = -(-(lazy(np.arange(4)) * 1))  # a hit: the passes do not run again
    z.numpy()
    rep = lg.cache.passes()
    assert rep["optimizations"] == 1
    assert rep["rules"] == {"mul-one": 1, "neg-neg": 1}
    assert rep["passes"]["algebraic"]["fired"] == 1 and rep["passes"]["algebraic"]["seconds"] > 0
    assert [p["pass"] for p in rep["last"]["passes"]][0] == "algebraic"
    import io

    out = io.StringIO()
    w = -(-(lazy(np.arange(3)) * 1))
    lg.explain(w, file=out)
    text = out.getvalue()
    assert "rules fired = mul-one x1, neg-neg x1" in text
    assert "pass totals over 1 optimizations" in text and "rule totals = mul-one x1, neg-neg x1" in text
    assert any(line.startswith("return") for line in text.strip().splitlines())


@pytest.mark.parametrize(
    "shape, make, rule",
    [
        ((3, 4), lambda x: (lambda y: y.T + y)(x.T @ x), "matmul-transpose"),  # the product has 2 readers
        ((2, 3, 4), lambda x: lg.swapaxes(x @ lg.swapaxes(x, 1, 2), 1, 2), "matmul-transpose"),  # batched
        ((3, 4), lambda x: (x.T @ x)[:, ::-1], "matmul-transpose"),  # not a transpose
        ((3, 4), lambda x: (x @ x.T).reshape(9), "matmul-transpose"),  # a reshape
        (
            (3, 4),
            lambda x: x + lg.broadcast_to(lg.positive(lg.asarray(np.ones(1))), (3, 4)),
            "add-scalar-broadcast",
        ),
        (
            (1, 4),
            lambda x: x * lg.broadcast_to(lg.positive(lg.asarray(np.array(2.0))), (3, 4)),
            "multiply-scalar-broadcast",
        ),
    ],
)
def test_new_rules_do_not_fire_when_conditions_fail(shape, make, rule):
    xn = np.random.default_rng(0).standard_normal(shape)
    y = make(lazy(xn))
    assert rule not in rules_fired(y)
    np.testing.assert_array_equal(y.numpy(), reference(make, xn))


def test_transpose_of_a_strided_view_of_a_transpose_is_kept():
    # the outer view is a slice of the transposed weight, not its transpose: no rewrite
    def make(x):
        a = lg.asarray(np.ones((2, 3)), requires_grad=True)
        return lg.grad((a @ x.T[:3]).sum(), [a])[0]

    xn = np.arange(12.0).reshape(3, 4)
    y = make(lazy(xn))
    assert "transpose-transpose" not in rules_fired(y)
    np.testing.assert_array_equal(y.numpy(), reference(make, xn))


@given(seed=st.integers(0, 2**31), m=st.integers(2, 9), k=st.integers(1, 9), n=st.integers(2, 9))
@settings(max_examples=20, deadline=None)
def test_matmul_transpose_on_floats(seed, m, k, n):
    rng = np.random.default_rng(seed)
    an, bn = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)

    def make(a):
        return (a @ lg.asarray(bn)).T * 2

    y = make(lazy(an))
    assert rules_fired(y).get("matmul-transpose") == 1
    np.testing.assert_allclose(y.numpy(), reference(make, an), rtol=1e-5, atol=1e-5)


def test_pass_report_last_is_the_last_evaluation():
    lg.cache.reset_stats()
    (-(-(lazy(np.arange(4)) * 1))).numpy()  # a miss: the passes run
    rep = lg.cache.passes()
    assert rep["last"]["cached"] is False and rep["last"]["outcome"] == "miss"
    built = rep["last"]
    assert built["rules"] == {"mul-one": 1, "neg-neg": 1} and built["passes"]
    totals = (rep["optimizations"], rep["rules"])

    (lazy(np.arange(3.0)) + 1).numpy()  # another structure: another optimization
    assert lg.cache.passes()["last"]["rules"] == {}

    (-(-(lazy(np.arange(4)) * 1))).numpy()  # a hit: the report shows what built its transformation
    rep = lg.cache.passes()
    assert rep["last"]["cached"] is True and rep["last"]["outcome"] == "hit"
    assert rep["last"]["rules"] == built["rules"]
    assert [p["pass"] for p in rep["last"]["passes"]] == [p["pass"] for p in built["passes"]]
    assert (rep["optimizations"] - 1, rep["rules"]) == totals  # nothing ran again

    lg.cache.clear(disk=False)  # the transformation comes back from disk with its report
    (-(-(lazy(np.arange(4)) * 1))).numpy()
    rep = lg.cache.passes()
    assert rep["last"]["cached"] is True and rep["last"]["outcome"] == "disk"
    assert rep["last"]["rules"] == built["rules"]
