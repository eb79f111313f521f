"""An operator declared in this file alone, in one declaration, reaches every consumer.

`cube` (x * x * x) is declared once with ops.declare.declare_elementwise: its NumPy reference,
JIT expression and cost, gradient and z3 specification. The tests show that it records through
the user API (`lg.apply`), evaluates equal to its reference, fuses with its neighbours into one
compiled kernel (the reference is never called when the kernel runs), differentiates against
finite differences, and that a rewrite rule mentioning it is proven by z3 from its
specification (and a wrong one refuted). The fixture removes the declaration afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from ops.base import REGISTRY
from ops.declare import declare_elementwise, undeclare
from ops.node import postorder
from tests.gradcheck import check_grad

CALLS = {"reference": 0}


def _cube(x: np.ndarray) -> np.ndarray:
    CALLS["reference"] += 1
    return x * x * x


@pytest.fixture
def cube():  # noqa: ANN201
    """The one declaration of the new operator, removed after the test."""
    op = declare_elementwise(
        "cube",
        _cube,
        1,
        jit={"fiu": "{0} * {0} * {0}"},
        jit_cost=2,
        dx=lambda F, g, x, out: g * 3 * x * x,
        z3=lambda Z, x: x * x * x,
    )
    yield op
    undeclare("cube")
    assert "cube" not in REGISTRY


def test_records_through_the_user_api_with_numpys_rules(cube) -> None:  # noqa: ANN001
    x = lg.asarray(np.arange(6, dtype=np.int8).reshape(2, 3))
    CALLS["reference"] = 0
    y = lg.apply(cube, x)
    assert y.node.op is cube and y.shape == (2, 3) and y.dtype == np.int8  # NumPy's int8 * int8
    assert lg.apply("cube", lg.asarray(np.ones(3, np.float32))).dtype == np.float32
    with pytest.raises(TypeError, match="cube: expected 1 operands, got 2"):
        lg.apply(cube, x, x)


def test_evaluates_equal_to_its_reference(cube) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    for a in (rng.standard_normal((5, 7)).astype(np.float32), rng.integers(-9, 9, (4, 3))):
        got = lg.apply(cube, lg.asarray(a)).numpy()
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, a * a * a)


def test_fuses_into_one_compiled_kernel_with_its_neighbours(cube, monkeypatch) -> None:  # noqa: ANN001
    from jit import kernel
    from jit.fusion import find_regions

    monkeypatch.setenv("LAZYGRAPH_JIT", "1")
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "1000")
    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    lg.cache.clear()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 64))

    def program(x: lg.Array) -> lg.Array:
        return lg.tanh(lg.apply(cube, x) + 1.0) * 2.0

    y = program(lg.asarray(a))
    (region,) = find_regions(postorder([y.node]), [y.node])
    assert {m.op.name for m in region.nodes} == {"cube", "add", "tanh", "multiply"}

    before = kernel.kernel_count()
    CALLS["reference"] = 0
    got = y.numpy()
    assert CALLS["reference"] == 0  # the kernel computed cube: its NumPy reference never ran
    assert kernel.kernel_count() == before + 1
    np.testing.assert_allclose(got, np.tanh(a * a * a + 1.0) * 2.0, rtol=1e-15, atol=0)

    small = program(lg.asarray(a[:3, :3]))  # below LAZYGRAPH_JIT_MIN_SIZE: NumPy runs the region
    CALLS["reference"] = 0
    np.testing.assert_allclose(small.numpy(), np.tanh(a[:3, :3] ** 3 + 1.0) * 2.0, rtol=1e-15)
    assert CALLS["reference"] >= 1
    lg.cache.clear()


def test_differentiates_like_finite_differences(cube) -> None:  # noqa: ANN001
    rng = np.random.default_rng(2)
    check_grad(lambda x, w: lg.apply(cube, x * w) - x, rng.standard_normal((3, 4)), rng.standard_normal(4))


def test_rules_about_it_are_proven_or_refuted_by_z3(cube) -> None:  # noqa: ANN001
    from optimizer.rewrite import Engine, make_rule
    from optimizer.rewrite.prove import prove_rule

    good = make_rule("cube-of-neg", "(cube (negative ?x))", "(negative (cube ?x))")
    assert prove_rule(good).status == "proven"
    twice = make_rule("cube-times", "(multiply (cube ?x) (cube ?y))", "(cube (multiply ?x ?y))")
    assert prove_rule(twice).status == "proven"
    wrong = make_rule("cube-is-square", "(cube ?x)", "(square ?x)")
    v = prove_rule(wrong)
    assert v.status == "refuted" and "?x = " in v.detail

    engine = Engine()
    engine.add(good, prove=True)
    with pytest.raises(ValueError, match="rule cube-is-square is refuted"):
        engine.add(wrong, prove=True)
    assert [r.name for r in engine.rules] == ["cube-of-neg"]


def test_the_proven_rule_rewrites_and_keeps_values(cube) -> None:  # noqa: ANN001
    from optimizer.rewrite import ENGINE, make_rule

    # the inner cube takes its shape and dtype from the matched one (op@?like)
    rule = make_rule("cube-of-neg", "(cube@?c (negative ?x))", "(negative (cube@?c ?x))", ["(kind ?x f)"])
    ENGINE.add(rule, prove=True)
    try:
        a = np.random.default_rng(3).standard_normal(10)
        got = lg.apply(cube, -lg.asarray(a)).numpy()
        np.testing.assert_array_equal(got, -(a * a * a))  # exact: negation commutes with rounding
        assert lg.cache.passes()["rules"].get("cube-of-neg", 0) >= 1
    finally:
        ENGINE.remove("cube-of-neg")


def test_builtin_elementwise_rules_are_proven_from_the_records() -> None:
    from optimizer.rewrite import ENGINE
    from optimizer.rewrite.prove import prove_rule

    verdicts = {r.name: prove_rule(r).status for r in ENGINE.rules}
    for name in ("mul-one", "div-one", "sub-zero", "add-zero-int", "neg-neg"):
        assert verdicts[name] == "proven", name
    assert "refuted" not in verdicts.values()
