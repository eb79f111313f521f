"""Superoptimizer rules as data: the term vocabulary, the library file, loading and saving.

A rule is the optimizer's one rule record, `optimizer.rewrite.rules.Rule`, with its
`vocabulary` field set to `TERMS` (this module): patterns over the term operators of
opset.py, validated by `parse_terms`, with `graphs()`, `pair()` and `applicable()` read
through the vocabulary. The same files may also hold rules over lazygraph's operators
(`"vocabulary": "ops"`, or the rewrite engine's `lhs`/`rhs` spelling), and `read_rules`
reads the rewrite engine's own files (`{"format": 1}`) too, so `python -m optimizer verify`
proves either kind.

A rule file is `{"format": "lazygraph-superopt", "version": 1, "rules": [...]}`; a rule is

    {"name": "matmul-concat-weights",
     "inputs": {"?x": {"kind": "tensor", "rank": 2}, "?y": {...}, "?z": {...}},
     "source": ["(matmul ?x ?y)", "(matmul ?x ?z)"],
     "target": ["(split0 1 (matmul ?x (concat 1 ?y ?z)))", "(split1 1 (matmul ?x (concat 1 ?y ?z)))"],
     "conditions": ["(rank ?x 2)", "(kind ?x f)"],
     "shapes": [{"?x": [2, 3], "?y": [3, 2], "?z": [3, 3]}],
     "status": "proven",
     "proof": {"seconds": 0.02, "axioms": 37, "counterexample": null}}

`source` and `target` list the outputs in the same order (output i of the source is replaced
by output i of the target). Subterms that are textually equal are one node (hash-consing),
so shared subterms need no names. Inputs are `tensor` (rank given) or `scalar` (0-d).

Conditions use the vocabulary of optimizer/rewrite/rules.py where it fits: `(rank ?x r)`,
`(kind ?x f)` (dtype kind among the letters), `(same_shape ?a ?b)`, plus `(groups k)`: every
convolution of the rule has k groups (the proof assumed them). Every other shape constraint
is implicit: a rule applies to any shapes for which the shape rules of opset.py accept both
sides and give the source's output types (split positions included); `applicable` checks
all of it. `shapes` lists the concrete instances the rule
was checked on numerically (the first is the one it was found at).

`status` is `proven`, `refuted` or `unknown`; only proven rules are ever used
(`proven_rules`). Loading validates every entry; a malformed entry is reported in
`LoadResult.errors` and skipped, a corrupt file gives no rules. Writing is atomic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.fileio import atomic_write
from optimizer.rewrite.rules import OPS, Rule, RuleSyntaxError, Vocabulary, check_conditions
from optimizer.rewrite.rules import rule_from_json as _rule_from_json
from optimizer.superopt.term import TermGraph, parse_terms

FORMAT = "lazygraph-superopt"
CONDITIONS = {"rank": 2, "kind": 2, "same_shape": 2, "groups": 1}
LIBRARY = Path(__file__).with_name("rules.json")
#: rules users registered in this process (proven before they were added; see user.py)
USER_RULES: list[Rule] = []


def _check_terms(rule: Rule) -> None:
    """Patterns over the term vocabulary, every variable a declared input, conditions on inputs."""
    name = rule.name
    if not rule.source or len(rule.source) != len(rule.target):
        raise RuleSyntaxError(f"rule {name}: source and target must list the same number of outputs")
    g = parse_terms(rule.source + rule.target)
    unknown = set(g.variables) - set(rule.inputs)
    if unknown:
        raise RuleSyntaxError(f"rule {name}: undeclared inputs {sorted(unknown)}")
    if set(parse_terms(rule.target).variables) - set(parse_terms(rule.source).variables):
        raise RuleSyntaxError(f"rule {name}: the target uses inputs the source does not bind")
    check_conditions(rule, set(rule.inputs))


def _applicable(rule: Rule, shapes: dict[str, tuple[int, ...]], kinds: dict[str, str] | None = None) -> bool:
    """Whether a term rule holds for inputs of these shapes (and dtype kinds, when given)."""
    g = rule.pair()
    types = g.types(shapes)
    if types is None:
        return False
    outs = [types[i][k] for i, k in g.outputs]
    n = len(rule.source)
    if any(a != b for a, b in zip(outs[:n], outs[n:])):
        return False
    for e in rule.when:
        if e[0] == "rank" and len(shapes[e[1]]) != e[2]:
            return False
        if e[0] == "same_shape" and tuple(shapes[e[1]]) != tuple(shapes[e[2]]):
            return False
        if e[0] == "kind" and kinds is not None and kinds.get(e[1], "f") not in str(e[2]):
            return False
        if e[0] == "groups" and g.conv_groups(types) - {e[1]}:
            return False
    return True


def _graph(texts: list[str]) -> TermGraph:
    return parse_terms(texts)


#: the superoptimizer's term operators (opset.py): the library's, the generator's and users' rules
TERMS = Vocabulary("terms", frozenset(CONDITIONS), _check_terms, _graph, _applicable)
#: the vocabularies a superopt rule file may use (an entry names its own; `source` entries default to terms)
VOCABULARIES = {"ops": OPS, "terms": TERMS}


def term_rule(
    name: str,
    inputs: dict[str, dict[str, Any]],
    source: list[str],
    target: list[str],
    conditions: list[str] = (),
    shapes: list[dict] = (),
    **fields: Any,
) -> Rule:
    """A validated rule in the term vocabulary (raises RuleSyntaxError on anything malformed)."""
    rule = Rule(
        name, list(source), list(target), list(conditions), TERMS, dict(inputs), [dict(s) for s in shapes]
    )
    for k, v in fields.items():
        setattr(rule, k, v)
    _check_terms(rule)
    return rule


def rule_from_json(d: Any) -> Rule:
    """A validated rule of a superopt rule file (raises RuleSyntaxError on anything malformed)."""
    return _rule_from_json(d, VOCABULARIES)


@dataclass
class LoadResult:
    """Rules read from a file, and what was wrong with the entries that were skipped."""

    rules: list[Rule]
    errors: list[str]


def read_rules(path: str | Path) -> LoadResult:
    """Every valid rule of a file, whatever its status (a corrupt file gives none and one error)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        return LoadResult([], [f"{path}: unreadable rule file ({e})"])
    if isinstance(doc, list):  # a bare list of rules is accepted too
        doc = {"format": FORMAT, "version": 1, "rules": doc}
    # the rewrite engine's files ({"format": 1}) hold ops-vocabulary rules in the same record
    if (
        not isinstance(doc, dict)
        or doc.get("format") not in (FORMAT, 1)
        or not isinstance(doc.get("rules"), list)
    ):
        return LoadResult([], [f"{path}: not a {FORMAT} file"])
    rules, errors = [], []
    for i, d in enumerate(doc["rules"]):
        try:
            rules.append(rule_from_json(d))
        except (RuleSyntaxError, ValueError, TypeError, KeyError) as e:
            errors.append(f"rule #{i}: {e}")
    return LoadResult(rules, errors)


_CACHE: dict[tuple, list[Rule]] = {}


def proven_rules(path: str | Path | None = None) -> list[Rule]:
    """The rules the optimizer may use: proven ones only. By default the library file's plus
    the user rules registered in this process (re-read when the file changes)."""
    p = Path(path) if path is not None else LIBRARY
    try:
        st = p.stat()
        key = (str(p), st.st_mtime_ns, st.st_size)
    except OSError:
        key = (str(p), 0, 0)
    cached = _CACHE.get(key)
    if cached is None:  # read into a local: another thread may clear the cache meanwhile
        cached = [r for r in read_rules(p).rules if r.status == "proven"]
        _CACHE.clear()
        _CACHE[key] = cached
    rules = list(cached)
    if path is None:
        rules += [r for r in USER_RULES if r.status == "proven"]
    return rules


def write_rules(path: str | Path, rules: list[Rule], meta: dict | None = None) -> None:
    """Write a rule file atomically."""
    doc = {"format": FORMAT, "version": 1, "meta": meta or {}, "rules": [r.to_json() for r in rules]}
    atomic_write(Path(path), (json.dumps(doc, indent=1) + "\n").encode())
