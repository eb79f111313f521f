"""The generator: enumeration with fingerprints, pruning, multi-output candidates, generalized
shapes, and a small end-to-end run through `python -m optimizer generate`."""

from __future__ import annotations

import time

import numpy as np
import pytest

from optimizer.__main__ import main
from optimizer.superopt.generate import WORLDS, Stats, enumerate_world, generalized_shapes, generate
from optimizer.superopt.opset import FloatRing, IntRing
from optimizer.superopt.rulefile import read_rules
from optimizer.superopt.term import parse_terms
from optimizer.superopt.verify import numeric_check, rule_from_pair

MATRIX = WORLDS[0]


def _candidates(world, max_ops):
    stats = Stats()
    out = list(enumerate_world(world, max_ops, time.monotonic() + 60, np.random.default_rng(0), stats))
    return out, stats


def test_enumeration_finds_known_identities_and_prunes():
    cands, stats = _candidates(MATRIX, 2)
    pairs = {(tuple(c.source), tuple(c.target)) for c in cands}
    assert (("(transpose (transpose ?x))",), ("?x",)) in pairs
    assert (("(split0 0 (concat 0 ?x ?y))",), ("?x",)) in pairs
    assert stats.pruned.get("common subterm", 0) > 0
    assert stats.representatives < stats.terms
    # multi-output: two matmuls sharing an input -> one matmul on concatenated weights + split
    multi = [c for c in cands if len(c.source) == 2]
    assert any(
        c.source == ["(matmul ?x ?y)", "(matmul ?x ?z)"] and "concat 1 ?y ?z" in c.target[0] for c in multi
    )


def test_fingerprints_are_exact_and_relu_is_a_non_linear_stand_in():
    g = parse_terms(["(relu (relu ?x))", "(relu ?x)", "(relu (add ?x ?y))", "(add (relu ?x) (relu ?y))"])
    rng = np.random.default_rng(0)
    env = {"?x": IntRing.random(rng, (3, 3)), "?y": IntRing.random(rng, (3, 3))}
    vals, _ = g.evaluate(env, IntRing)
    assert vals[0].dtype == np.int64
    assert not np.array_equal(vals[0], vals[1])  # the stand-in is not idempotent
    assert not np.array_equal(vals[2], vals[3])  # nor additive
    # exact: the same graph evaluated twice gives identical integers (no rounding)
    again, _ = parse_terms(["(matmul (matmul ?x ?y) ?x)", "(matmul ?x (matmul ?y ?x))"]).evaluate(
        env, IntRing
    )
    assert np.array_equal(again[0], again[1])


def test_conv_world_finds_the_enlarge_and_merge_candidates():
    cands, _ = _candidates(WORLDS[1], 2)
    texts = {(" | ".join(c.source), " | ".join(c.target)) for c in cands}
    assert any("enlarge 3" in t for s, t in texts)
    assert any(s.count("conv2d") == 2 and "split0 1 (conv2d" in t for s, t in texts)


def test_generalized_shapes_differ_and_keep_the_rule_applicable():
    r = rule_from_pair(
        "m",
        ["(matmul ?x ?y)", "(matmul ?x ?z)"],
        ["(split0 1 (matmul ?x (concat 1 ?y ?z)))", "(split1 1 (matmul ?x (concat 1 ?y ?z)))"],
        [{"?x": (3, 3), "?y": (3, 3), "?z": (3, 3)}],
    )
    more = generalized_shapes(r, np.random.default_rng(0))
    assert len(more) == 2 and all(s != r.shapes[0] and r.applicable(s) for s in more)


def test_small_generation_run_proves_rules_that_hold():
    rules, report = generate(max_ops=2, budget_s=30, timeout_ms=500, worlds=(MATRIX,))
    proven = [r for r in rules if r.status == "proven"]
    assert report["status"]["proven"] == len(proven) >= 20
    assert report["candidates"] == len(rules)
    assert any(len(r.source) == 2 for r in proven)
    rng = np.random.default_rng(3)
    for r in proven:
        assert len(r.shapes) >= 2, r.name  # checked beyond the enumeration shapes
        assert numeric_check(r, rng, trials=1) is None


def test_cli_generate_writes_a_library(tmp_path, capsys):
    out = tmp_path / "lib.json"
    assert main(["generate", "--out", str(out), "--max-ops", "1", "--budget-s", "5", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "verified in" in text and "proven" in text
    assert out.exists() and read_rules(out).errors == []


@pytest.mark.slow
def test_full_generation_reaches_the_target():
    rules, report = generate(max_ops=3, budget_s=300, timeout_ms=1000)
    assert report["status"]["proven"] >= 133
    rng = np.random.default_rng(4)
    assert all(numeric_check(r, rng, trials=1) is None for r in rules if r.status == "proven")


def test_float_and_integer_evaluation_agree_on_linear_graphs():
    g = parse_terms(["(add (matmul ?x ?y) (smul ?x ?s))"])
    rng = np.random.default_rng(0)
    env_i = {"?x": rng.integers(0, 5, (3, 3)), "?y": rng.integers(0, 5, (3, 3)), "?s": np.array(2)}
    vi, _ = g.evaluate(env_i, IntRing)
    vf, _ = g.evaluate({k: v.astype(float) for k, v in env_i.items()}, FloatRing)
    assert np.array_equal(vi[0], vf[0].astype(np.int64))
