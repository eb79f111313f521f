"""The rule library: every rule holds on random data, mutated rules are never proven, the file
format is validated (corrupt entries skipped, only proven rules used)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from optimizer.rewrite.rules import Rule
from optimizer.rewrite.sexpr import parse, unparse
from optimizer.superopt.opset import OPS, FloatRing
from optimizer.superopt.rulefile import (
    LIBRARY,
    proven_rules,
    read_rules,
    rule_from_json,
    write_rules,
)
from optimizer.superopt.verify import numeric_check, verify_rule, z3_status

LIB = read_rules(LIBRARY)


def test_library_is_valid_and_large_enough():
    assert LIB.errors == []
    proven = [r for r in LIB.rules if r.status == "proven"]
    assert len(proven) >= 133
    assert sum(len(r.source) > 1 for r in proven) >= 13  # multi-output rules
    names = [r.name for r in LIB.rules]
    assert len(names) == len(set(names))


def test_every_library_rule_holds_on_random_data():
    rng = np.random.default_rng(1)
    for rule in LIB.rules:
        if rule.status != "proven":
            continue
        assert len(rule.shapes) >= 1
        assert numeric_check(rule, rng, trials=1) is None, rule.name
        for shapes in rule.shapes:
            assert rule.applicable(shapes), (rule.name, shapes)


def _lazy(g, env: dict) -> list:
    """The term graph recorded with lazygraph: `lower` for the operators that declare it, the
    array API for the rest (relu, transpose, split, constants)."""
    import lazygraph as lg
    from lazygraph.array import record

    types = g.types({k: v.shape for k, v in env.items()})
    made = []
    for i, n in enumerate(g.nodes):
        if n.op == "var":
            made.append([lg.positive(lg.asarray(env[n.params[0]]))])
            continue
        spec = OPS[n.op]
        xs = [made[j][k] for j, k in n.args]
        ins = [types[j][k] for j, k in n.args]
        low = spec.lower(n.params, ins, types[i]) if spec.lower else None
        if low is not None:
            y = record(low[0], *xs, **low[1])
            made.append([lg.maximum(y, 0) if n.op == "conv2d" and n.params[2] == "relu" else y])
        elif n.op == "relu":
            made.append([lg.maximum(xs[0], 0)])
        elif n.op == "transpose":
            made.append([lg.swapaxes(xs[0], -1, -2)])
        elif n.op == "split":
            top = types[i][0].shape[n.params[0]]
            made.append(lg.split(xs[0], [top], axis=n.params[0]))
        else:  # constants: their value, as a buffer
            made.append(
                [lg.asarray(spec.compute(n.params, [None], ins, types[i], FloatRing)[0].astype(np.float32))]
            )
    return [made[i][k] for i, k in g.outputs]


def test_library_rules_hold_through_lazygraph_operators():
    """Recorded with lazygraph's operators (as the rules are lowered) and evaluated in float32."""
    import lazygraph as lg

    rng = np.random.default_rng(2)
    sample = random.Random(0).sample([r for r in LIB.rules if r.status == "proven"], 40)
    for rule in sample:
        g = rule.pair()
        env = {v: FloatRing.random(rng, s).astype(np.float32) for v, s in rule.shapes[-1].items()}
        outs = lg.eval(*_lazy(g, env))
        n = len(rule.source)
        for a, b in zip(outs[:n], outs[n:]):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-3, err_msg=rule.name)


# -- mutations ------------------------------------------------------------------------------

_NONCOMM = ("matmul", "concat", "conv2d", "smul")


def _mutations(e, path=()):
    """(description, mutated expression) for each place a mutation applies."""
    if not isinstance(e, list):
        return
    head = e[0]
    args_at = {"concat": 2, "split0": 2, "split1": 2, "conv2d": 4, "enlarge": 2, "avg_pool2d": 4}.get(head, 1)
    args = e[args_at:]
    if head in _NONCOMM and len(args) == 2 and args[0] != args[1]:
        yield "swap", e[:args_at] + [args[1], args[0]]
    if head in ("concat", "split0", "split1"):
        yield "axis", [head, 1 - e[1]] + e[2:]
    if head in ("split0", "split1"):
        yield "part", ["split1" if head == "split0" else "split0"] + e[1:]
    if head in ("add", "mul") and len(args) == 2:
        yield "drop", args[0]
    if head == "conv2d":
        yield "constant", [head, e[1], e[2], "relu" if e[3] == "none" else "none"] + e[4:]
    if head == "smul" and args[0] != args[1]:
        yield "drop", args[0]
    for i, a in enumerate(e[1:], 1):
        for why, m in _mutations(a, path + (i,)):
            yield why, e[:i] + [m] + e[i + 1 :]


def _mutants(rule: Rule):
    for side in ("source", "target"):
        for k, text in enumerate(getattr(rule, side)):
            for why, m in _mutations(parse(text)):
                new = list(getattr(rule, side))
                new[k] = unparse(m)
                d = rule.to_json()
                d[side] = new
                try:
                    yield why, rule_from_json(d)
                except ValueError:
                    continue


def _wrong(rule: Rule, rng) -> str | None:
    """'ill-typed' or 'false' when the mutant is wrong at its first shapes (checked numerically,
    independently of z3), None when it still holds."""
    g = rule.pair()
    types = g.types(rule.shapes[0])
    if types is None:
        return "ill-typed"
    outs = [types[i][k] for i, k in g.outputs]
    n = len(rule.source)
    if any(a.shape != b.shape for a, b in zip(outs[:n], outs[n:])):
        return "ill-typed"
    env = {v: FloatRing.random(rng, s) for v, s in rule.shapes[0].items()}
    vals, ts = g.evaluate(env, FloatRing)
    if any(not np.allclose(a, b) for a, b in zip(vals[:n], vals[n:])) or ts[:n] != ts[n:]:
        return "false"
    return None


def _wrong_mutants(count: int, seed: int):
    rng = np.random.default_rng(seed)
    proven = [r for r in LIB.rules if r.status == "proven"]
    random.Random(seed).shuffle(proven)
    out, picks = [], {}
    for rule in proven:
        wrong = [(why, m, w) for why, m in _mutants(rule) if (w := _wrong(m, rng))]
        if wrong:
            # the kind of mutation picked least so far: every kind gets exercised
            pick = min(wrong, key=lambda x: picks.get(x[0], 0))
            out.append(pick)
            picks[pick[0]] = picks.get(pick[0], 0) + 1
        if len(out) >= count:
            break
    return out, set(picks)


def test_mutated_rules_are_never_proven():
    mutants, kinds = _wrong_mutants(40, seed=0)
    assert len(mutants) >= 30
    assert {"swap", "axis", "drop", "part", "constant"} <= kinds
    for why, m, wrong in mutants:
        if wrong == "ill-typed":  # e.g. a wrong axis: the shape rules reject it
            v = verify_rule(m, timeout_ms=300)
            assert v.status == "refuted" and "shape" in v.counterexample, (why, m.source, m.target)
        else:
            # z3 alone (no numeric check first): the axioms must not prove a false rule
            status, _ = z3_status(m, timeout_ms=300)
            assert status != "proven", (why, m.source, m.target)


@pytest.mark.slow
def test_many_mutated_rules_are_never_proven():
    mutants, _ = _wrong_mutants(400, seed=1)
    for why, m, wrong in mutants:
        if wrong == "false":
            assert z3_status(m, timeout_ms=1000)[0] != "proven", (why, m.source, m.target)
        else:
            assert verify_rule(m, timeout_ms=1000).status == "refuted"


def test_changed_constant_is_refuted():
    rule = next(r for r in LIB.rules if r.status == "proven" and "conv2d 1 same none" in " ".join(r.source))
    d = rule.to_json()
    d["target"] = [t.replace("conv2d 1 same none", "conv2d 1 same relu") for t in d["target"]]
    m = rule_from_json(d)
    assert numeric_check(m, np.random.default_rng(0)) is not None


# -- the file -----------------------------------------------------------------------------------


def _rule_json(**kw) -> dict:
    d = {
        "name": "t",
        "inputs": {"?x": {"kind": "tensor", "rank": 2}, "?y": {"kind": "tensor", "rank": 2}},
        "source": ["(add ?x ?y)"],
        "target": ["(add ?y ?x)"],
        "shapes": [{"?x": [2, 3], "?y": [2, 3]}],
        "status": "proven",
    }
    d.update(kw)
    return d


def test_loader_skips_malformed_entries_and_flags_them(tmp_path):
    good = _rule_json()
    bad = [
        _rule_json(name="b1", source=["(frobnicate ?x)"]),
        _rule_json(name="b2", target=["(add ?x ?z)"]),
        _rule_json(name="b3", status="maybe"),
        _rule_json(name="b4", source=["(add ?x ?y)", "(add ?x ?x)"]),
        _rule_json(name="b5", conditions=["(shell rm)"]),
        "not a rule",
    ]
    p = tmp_path / "rules.json"
    p.write_text(json.dumps({"format": "lazygraph-superopt", "version": 1, "rules": [good] + bad}))
    res = read_rules(p)
    assert [r.name for r in res.rules] == ["t"]
    assert len(res.errors) == len(bad)


def test_corrupt_file_gives_no_rules(tmp_path):
    p = tmp_path / "rules.json"
    p.write_text('{"format": "lazygraph-superopt", "rules": [')
    assert read_rules(p).rules == [] and read_rules(p).errors
    assert proven_rules(p) == []
    p.write_bytes(b"\x80\x04\x95 pickle-looking bytes")
    assert proven_rules(p) == []


def test_only_proven_rules_are_used_and_writes_round_trip(tmp_path):
    rules = [rule_from_json(_rule_json(name=n, status=s)) for n, s in [("a", "proven"), ("b", "unknown")]]
    rules.append(rule_from_json(_rule_json(name="c", status="refuted")))
    p = tmp_path / "lib.json"
    write_rules(p, rules)
    assert [r.name for r in proven_rules(p)] == ["a"]
    assert [r.to_json() for r in read_rules(p).rules] == [r.to_json() for r in rules]
    assert not list(tmp_path.glob(".tmp-*"))  # atomic write leaves no temp file


# -- one rule record for both engines and both verifiers -------------------------------------------


def test_one_rule_record_for_every_engine_and_verifier(tmp_path, capsys):
    import lazygraph as lg  # noqa: F401  (registers the search's pseudo-operators)
    from optimizer.__main__ import main
    from optimizer.rewrite import ENGINE, Engine, make_rule
    from optimizer.rewrite.prove import prove_rule
    from optimizer.superopt.adapt import PatternMatcher, TermMatcher, from_library, matcher_of
    from optimizer.superopt.match import builtin_rules, pattern_rule
    from optimizer.superopt.rulefile import TERMS

    lib = from_library(LIB.rules[:5])
    everyone = [*ENGINE.rules, *LIB.rules, *lib, *builtin_rules(), pattern_rule("p", "(negative ?x)", "?x")]
    assert {type(r) for r in everyone} == {Rule}
    assert {r.vocabulary.name for r in everyone} == {"ops", "terms"}
    assert {r.origin for r in ENGINE.rules} == {"builtin"}

    # one ops rule: the rewrite engine runs it, the search matches it, both verifiers prove it
    neg = make_rule("neg-neg-f", "(negative (negative ?x))", "?x", ["(kind ?x f)"])
    Engine().add(neg, prove=True)
    assert neg.status == "proven" and neg.proof["by"] == "z3 facets"
    assert isinstance(matcher_of(neg), PatternMatcher) and matcher_of(neg) is matcher_of(neg)
    assert verify_rule(neg).status == prove_rule(neg).status == "proven"
    # a term rule: the search's term matcher and the axiom verifier read it; the rewrite engine refuses it
    term = next(r for r in lib if len(r.source) == 1)
    assert isinstance(matcher_of(term), TermMatcher) and term.vocabulary is TERMS
    assert prove_rule(term).status == "unknown"
    with pytest.raises(ValueError, match="terms vocabulary"):
        Engine().add(term)

    # one file holds both kinds; `python -m optimizer verify` proves each with its verifier
    p = tmp_path / "mixed.json"
    write_rules(p, [neg, LIB.rules[0]])
    back = read_rules(p)
    assert back.errors == [] and [r.vocabulary.name for r in back.rules] == ["ops", "terms"]
    assert [r.to_json() for r in back.rules] == [neg.to_json(), LIB.rules[0].to_json()]
    assert main(["verify", str(p), "--timeout-ms", "3000"]) == 0
    out = capsys.readouterr().out
    assert "neg-neg-f" in out and "2 proven" in out


def test_structural_search_rules_state_proven_instances():
    from optimizer.superopt.match import builtin_rules

    for rule in builtin_rules():
        assert rule.matcher is not None and rule.origin == "builtin"
        assert verify_rule(rule, timeout_ms=5000).status == "proven", rule.name


def test_rewrite_rule_files_keep_their_spelling_and_carry_status(tmp_path):
    from optimizer.rewrite import load_rules, make_rule, save_rules

    r = make_rule(
        "mul-one", "(multiply ?x 1)", "?x", ["(kind ?x f)"], status="proven", proof={"by": "z3 facets"}
    )
    p = tmp_path / "r.json"
    save_rules(p, [r])
    d = json.loads(p.read_text())["rules"][0]
    assert d["lhs"] == "(multiply ?x 1)" and d["status"] == "proven"
    (back,) = load_rules(p)
    assert back.status == "proven" and back.to_json() == r.to_json()
    # the superoptimizer's reader takes the rewrite engine's files too
    assert [x.name for x in read_rules(p).rules] == ["mul-one"]
