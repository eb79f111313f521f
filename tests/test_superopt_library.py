"""The committed rule library and the parallel verifier: proven rules re-prove (sampled), the
parallel verifier agrees with the sequential one, and the elementwise operators of
opset_elem.py (tanh, sigmoid, exp, sub) are raised, lowered and fingerprinted as declared."""

from __future__ import annotations

import time

import numpy as np

import lazygraph as lg
from optimizer.superopt.convert import from_nodes
from optimizer.superopt.generate import WORLDS, Candidate, Stats, _expands, enumerate_world
from optimizer.superopt.opset import OPS, FloatRing, IntRing
from optimizer.superopt.rulefile import LIBRARY, read_rules
from optimizer.superopt.term import parse_terms
from optimizer.superopt.verify import apply_verdict, numeric_check, rule_from_pair, verify_many, verify_rule

RNG = np.random.default_rng(0)


def _small_rule_file() -> list:
    """Proven, refuted and unknown rules, the new operators among them."""
    s = {"?x": (3, 3), "?y": (3, 3)}
    return [
        rule_from_pair(
            "tanh-cat",
            ["(tanh (concat 0 ?x ?y))"],
            ["(concat 0 (tanh ?x) (tanh ?y))"],
            [{"?x": (2, 3), "?y": (4, 3)}],
        ),
        rule_from_pair("sub-t", ["(transpose (sub ?x ?y))"], ["(sub (transpose ?x) (transpose ?y))"], [s]),
        rule_from_pair("swap", ["(matmul ?x ?y)"], ["(matmul ?y ?x)"], [s]),
        rule_from_pair("exp-sub", ["(exp (sub ?x ?y))"], ["(sub (exp ?x) (exp ?y))"], [s]),
        rule_from_pair("ones-other", ["(mul ?x (ones ?y))"], ["?x"], [s]),
        rule_from_pair(
            "mm-sub",
            ["(matmul ?z (sub ?x ?y))"],
            ["(sub (matmul ?z ?x) (matmul ?z ?y))"],
            [{**s, "?z": (2, 3)}],
        ),
    ]


def test_parallel_verifier_gives_the_sequential_statuses_in_order():
    rules = _small_rule_file()
    seq = [v.status for v in verify_many(rules, timeout_ms=500, jobs=1)]
    par = list(verify_many(rules, timeout_ms=500, jobs=2))
    assert [v.status for v in par] == seq == ["proven", "proven", "refuted", "refuted", "unknown", "proven"]
    # a worker's verdict carries what the sequential one does: the axioms used, the counterexample
    one = verify_rule(rules[0], timeout_ms=500)
    assert par[0].axioms == one.axioms and "tanh-concat" in one.axioms
    assert "differs by up to" in par[2].counterexample


def test_sampled_proven_library_rules_re_prove():
    loaded = read_rules(LIBRARY)
    assert loaded.errors == []
    proven = [r for r in loaded.rules if r.status == "proven"]
    assert len(proven) >= 743  # TASO's count
    pick = np.random.default_rng(19).choice(len(proven), 20, replace=False)
    sample = [proven[i] for i in sorted(pick)]
    verdicts = list(verify_many(sample, timeout_ms=5000, jobs=2))
    assert [(r.name, v.status) for r, v in zip(sample, verdicts)] == [(r.name, "proven") for r in sample]
    for r, v in zip(sample, verdicts):
        apply_verdict(r, v)
        assert set(r.proof["axioms"]) <= {a for v2 in verdicts for a in v2.axioms}


def test_library_uses_the_new_operators():
    rules = [r for r in read_rules(LIBRARY).rules if r.status == "proven"]
    text = " ".join(" ".join(r.source + r.target) for r in rules)
    for op in ("tanh", "sigmoid", "exp", "sub"):
        assert f"({op} " in text, op


def test_stand_ins_are_distinct_non_linear_and_exact():
    g = parse_terms(["(tanh ?x)", "(sigmoid ?x)", "(exp ?x)", "(relu ?x)", "(tanh (add ?x ?y))"])
    env = {"?x": IntRing.random(RNG, (3, 3)), "?y": IntRing.random(RNG, (3, 3))}
    vals, _ = g.evaluate(env, IntRing)
    assert all(v.dtype == np.int64 for v in vals)
    assert len({v.tobytes() for v in vals[:4]}) == 4  # no two functions share a fingerprint
    add_of = parse_terms(["(add (tanh ?x) (tanh ?y))"]).evaluate(env, IntRing)[0][0]
    assert not np.array_equal(vals[4], add_of)  # tanh is not additive in the ring either


def test_float_ring_uses_the_real_functions():
    x = RNG.standard_normal((3, 4))
    y = RNG.standard_normal((3, 4))
    g = parse_terms(["(tanh ?x)", "(sigmoid ?x)", "(exp ?x)", "(sub ?x ?y)"])
    vals, _ = g.evaluate({"?x": x, "?y": y}, FloatRing)
    np.testing.assert_allclose(vals[0], np.tanh(x))
    np.testing.assert_allclose(vals[1], 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(vals[2], np.exp(x))
    np.testing.assert_allclose(vals[3], x - y)
    wrong = rule_from_pair("sig-neg", ["(sigmoid ?x)"], ["(exp ?x)"], [{"?x": (2, 3)}])
    assert numeric_check(wrong, RNG) is not None


def test_recorded_elementwise_operators_are_raised_and_lowered():
    a = lg.positive(lg.asarray(RNG.standard_normal((4, 3)).astype(np.float32)))
    b = lg.positive(lg.asarray(RNG.standard_normal((4, 3)).astype(np.float32)))
    out = lg.tanh(lg.sigmoid(a) - lg.exp(b))
    tg, _, _ = from_nodes([out.node], lambda n: n.buffer)
    (t,) = tg.texts()
    assert t.startswith("(tanh (sub (sigmoid ?") and "(exp ?" in t
    assert {OPS[k].lower((), [], [])[0] for k in ("tanh", "sigmoid", "exp", "sub")} == {
        "tanh",
        "sigmoid",
        "exp",
        "subtract",
    }
    # broadcasting or a scalar operand is not `sub`: it stays opaque
    tg2, _, _ = from_nodes([(a - 1.0).node], lambda n: n.buffer)
    assert "(sub" not in tg2.texts()[0]


def test_expanding_candidates_are_pruned():
    def cand(src, tgt):
        return Candidate([src], [tgt], {}, "matrix")

    assert _expands(cand("(tanh ?x)", "(split0 0 (tanh (concat 0 ?x ?x)))")) == "target duplicates an operand"
    assert _expands(cand("(mul ?x ?y)", "(add (mul ?x ?x) (mul ?x (sub ?y ?x)))")) == "target brings in sub"
    # the other direction removes the duplicate or the subtraction: kept
    assert _expands(cand("(split0 0 (tanh (concat 0 ?x ?x)))", "(tanh ?x)")) is None
    assert _expands(cand("(transpose (sub ?x ?y))", "(sub (transpose ?x) (transpose ?y))")) is None
    assert _expands(cand("(tanh (concat 0 ?x ?y))", "(concat 0 (tanh ?x) (tanh ?y))")) is None


def test_term_count_limit_stops_enumeration_at_the_same_term():
    runs = []
    for _ in range(2):
        stats = Stats()
        cands = list(
            enumerate_world(WORLDS[0], 3, time.monotonic() + 60, np.random.default_rng(0), stats, 3000)
        )
        runs.append(([(c.source, c.target) for c in cands], stats.terms))
    assert runs[0] == runs[1] and runs[0][1] == 3000
