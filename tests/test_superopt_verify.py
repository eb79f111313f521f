"""Axioms (numeric check, wrong axioms caught, redundancy), the z3 verifier, user rules, and the
`python -m optimizer verify` command."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lazygraph as lg
from optimizer.__main__ import main
from optimizer.superopt.axioms import AXIOMS, _ax, check_axiom
from optimizer.superopt.rulefile import USER_RULES, proven_rules, write_rules
from optimizer.superopt.verify import redundant_axioms, rule_from_pair, verify_rule, z3_status


def test_every_axiom_holds_numerically_on_several_shapes():
    for ax in AXIOMS:
        r = check_axiom(ax)
        assert r.failure is None, r.failure
        assert r.instances >= (1 if all(rank == 0 for rank in ax.vars.values()) else 2), ax.name


@pytest.mark.parametrize(
    "wrong",
    [
        _ax("matmul-comm", "(matmul ?x ?y)", "(matmul ?y ?x)", "x:2 y:2"),
        _ax("relu-additive", "(relu (add ?x ?y))", "(add (relu ?x) (relu ?y))", "x:2 y:2"),
        _ax("transpose-id", "(transpose ?x)", "?x", "x:2"),
        # numerically true on values, but contradicts split: caught through the split positions
        _ax(
            "concat-assoc",
            "(concat ?a (concat ?a ?x ?y) ?z)",
            "(concat ?a ?x (concat ?a ?y ?z))",
            "x:2 y:2 z:2",
            "a=0,1",
        ),
        # the grouped-conv property TASO had to remove
        _ax(
            "grouped-conv-concat",
            "(concat 1 (conv2d 1 same none ?x ?y) (conv2d 1 same none ?x ?z))",
            "(conv2d 1 same none ?x (concat 0 ?y ?z))",
            "x:4 y:4 z:4",
        ),
    ],
    ids=lambda a: a.name,
)
def test_a_wrong_axiom_is_caught_by_the_numeric_check(wrong):
    r = check_axiom(wrong, want=4)
    assert r.failure is not None and wrong.name in r.failure


def test_redundant_axioms_are_reported():
    base = [a for a in AXIOMS if a.name in ("add-comm", "add-assoc", "transpose-twice", "transpose-add")]
    dup = _ax("add-comm-again", "(add ?y ?x)", "(add ?x ?y)", "x:2 y:2")
    assert "add-comm-again" in redundant_axioms(timeout_ms=500, axioms=base + [dup])
    assert "transpose-twice" not in redundant_axioms(timeout_ms=300, axioms=base)


def test_verifier_proves_refutes_and_leaves_unknown():
    ok = rule_from_pair(
        "merge",
        ["(matmul ?x ?y)", "(matmul ?x ?z)"],
        ["(split0 1 (matmul ?x (concat 1 ?y ?z)))", "(split1 1 (matmul ?x (concat 1 ?y ?z)))"],
        [{"?x": (2, 3), "?y": (3, 2), "?z": (3, 4)}],
    )
    v = verify_rule(ok)
    assert v.status == "proven" and "matmul-concat-right" in v.axioms
    bad = rule_from_pair("swap", ["(matmul ?x ?y)"], ["(matmul ?y ?x)"], [{"?x": (3, 3), "?y": (3, 3)}])
    v = verify_rule(bad)
    assert v.status == "refuted" and "?x[3, 3]" in v.counterexample and "differs by up to" in v.counterexample
    # true at these shapes, but not derivable from the axioms (ones of another tensor): never proven
    odd = rule_from_pair("ones-other", ["(mul ?x (ones ?y))"], ["?x"], [{"?x": (3, 3), "?y": (3, 3)}])
    assert verify_rule(odd, timeout_ms=300).status == "unknown"


def test_scalar_axioms_say_nothing_about_tensors():
    """Scalars have their own z3 sort: commutativity of scalar products must not make matmul commute."""
    shapes = [{"?x": (3, 3), "?s": (), "?y": (3, 3)}]
    wrong = rule_from_pair("w", ["(matmul ?y (smul ?x ?s))"], ["(smul (matmul ?x ?y) ?s)"], shapes)
    assert z3_status(wrong, timeout_ms=1000)[0] != "proven"
    right = rule_from_pair("r", ["(matmul ?y (smul ?x ?s))"], ["(smul (matmul ?y ?x) ?s)"], shapes)
    assert z3_status(right, timeout_ms=1000)[0] == "proven"


def test_grouped_convolutions_keep_their_group_condition():
    r = rule_from_pair(
        "conv-merge",
        ["(conv2d 1 same none ?x ?y)", "(conv2d 1 same none ?x ?z)"],
        [
            "(split0 1 (conv2d 1 same none ?x (concat 0 ?y ?z)))",
            "(split1 1 (conv2d 1 same none ?x (concat 0 ?y ?z)))",
        ],
        [{"?x": (1, 2, 4, 4), "?y": (3, 2, 3, 3), "?z": (2, 2, 3, 3)}],
    )
    assert "(groups 1)" in r.conditions and verify_rule(r).status == "proven"
    grouped = {"?x": (1, 4, 4, 4), "?y": (4, 2, 3, 3), "?z": (2, 2, 3, 3)}
    assert not r.applicable(grouped)


# -- user rules ---------------------------------------------------------------------------------


@pytest.fixture
def clean_user_rules():
    saved = list(USER_RULES)
    yield
    USER_RULES[:] = saved


def test_user_rule_true_is_accepted_and_used(clean_user_rules):
    def source(x, y, z):
        return x @ y, x @ z

    def target(x, y, z):
        a, b = lg.split(x @ lg.concat([y, z], axis=1), [y.shape[1]], axis=1)
        return a, b

    r = lg.superopt.rule(source, target, shapes=[(4, 5), (5, 3), (5, 2)], name="merge-matmuls")
    assert r.status == "proven"
    assert r.source == ["(matmul ?a0 ?a1)", "(matmul ?a0 ?a2)"]
    assert any(x.name == "merge-matmuls" for x in proven_rules())
    r2 = lg.register_rule(
        lambda x, s: lg.maximum(x.T * s, 0), lambda x, s: lg.maximum(x * s, 0).T, shapes=[(3, 4), ()]
    )
    assert r2.status == "proven" and r2.inputs["?a1"]["kind"] == "scalar"


def test_user_rule_false_is_refused_with_a_clear_message(clean_user_rules):
    with pytest.raises(lg.superopt.RuleRefused, match=r"rule bad-comm is refuted: at shapes \?a0\[3, 3\]"):
        lg.superopt.rule(lambda x, y: x @ y, lambda x, y: y @ x, shapes=[(3, 3), (3, 3)], name="bad-comm")
    with pytest.raises(lg.superopt.RuleRefused, match="rule uses-cos: the source uses 'cos'"):
        lg.superopt.rule(lambda x: lg.cos(x), lambda x: lg.cos(x) + 0, shapes=[(2, 2)], name="uses-cos")
    # true (relu is idempotent) but not derivable from the axioms: unknown, so refused
    with pytest.raises(lg.superopt.RuleRefused, match="rule relu-twice is unknown"):
        lg.superopt.rule(
            lambda x: lg.maximum(lg.maximum(x, 0), 0),
            lambda x: lg.maximum(x, 0),
            shapes=[(2, 3)],
            name="relu-twice",
            timeout_ms=300,
        )
    assert not any(r.name in ("bad-comm", "uses-cos", "relu-twice") for r in proven_rules())


# -- the command line ---------------------------------------------------------------------------


def test_cli_verify_prints_statuses_and_totals(tmp_path, capsys):
    rules = [
        rule_from_pair("good", ["(transpose (transpose ?x))"], ["?x"], [{"?x": (2, 3)}]),
        rule_from_pair("wrong", ["(matmul ?x ?y)"], ["(matmul ?y ?x)"], [{"?x": (2, 2), "?y": (2, 2)}]),
        rule_from_pair("open", ["(mul ?x (ones ?y))"], ["?x"], [{"?x": (3, 3), "?y": (3, 3)}]),
    ]
    p = tmp_path / "mine.json"
    write_rules(p, rules)
    code = main(["verify", str(p), "--timeout-ms", "300"])
    out = capsys.readouterr().out
    assert code == 1  # a refuted rule
    assert "good" in out and "proven" in out
    assert "wrong" in out and "refuted" in out and "counterexample" in out
    assert "open" in out and "unknown" in out
    assert "totals: 3 rules: 1 proven, 1 refuted, 1 unknown" in out
    main(["verify", str(p), "--timeout-ms", "300", "--write"])
    statuses = [r["status"] for r in json.loads(p.read_text())["rules"]]
    assert statuses == ["proven", "refuted", "unknown"]


def test_cli_axioms(capsys):
    assert main(["axioms"]) == 0
    out = capsys.readouterr().out
    assert f"totals: {len(AXIOMS)} axioms, 0 wrong" in out


def test_numeric_check_uses_float64_values():
    r = rule_from_pair("t", ["(add ?x ?y)"], ["(add ?y ?x)"], [{"?x": (2, 3), "?y": (2, 3)}])
    assert verify_rule(r, seed=int(np.random.default_rng(0).integers(100))).status == "proven"
