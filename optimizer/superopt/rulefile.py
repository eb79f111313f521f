"""Superoptimizer rules as data: one JSON object per rule, the library file, loading and saving.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ops.fileio import atomic_write
from optimizer.rewrite.sexpr import RuleSyntaxError, parse
from optimizer.superopt.term import TermGraph, parse_terms

FORMAT = "lazygraph-superopt"
STATUSES = ("proven", "refuted", "unknown")
CONDITIONS = {"rank": 2, "kind": 2, "same_shape": 2, "groups": 1}
LIBRARY = Path(__file__).with_name("rules.json")
#: rules users registered in this process (proven before they were added; see user.py)
USER_RULES: list[SuperRule] = []


@dataclass
class SuperRule:
    """One substitution: source outputs -> target outputs, with inputs, conditions and status."""

    name: str
    inputs: dict[str, dict[str, Any]]
    source: list[str]
    target: list[str]
    conditions: list[str] = field(default_factory=list)
    shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    status: str = "unknown"
    proof: dict[str, Any] = field(default_factory=dict)

    def graphs(self) -> tuple[TermGraph, TermGraph]:
        """Source and target as term graphs (variables shared by name)."""
        return parse_terms(self.source), parse_terms(self.target)

    def pair(self) -> TermGraph:
        """One graph holding source outputs then target outputs (shared nodes once)."""
        return parse_terms(self.source + self.target)

    def applicable(self, shapes: dict[str, tuple[int, ...]], kinds: dict[str, str] | None = None) -> bool:
        """Whether the rule holds for inputs of these shapes (and dtype kinds, when given)."""
        g = self.pair()
        types = g.types(shapes)
        if types is None:
            return False
        outs = [types[i][k] for i, k in g.outputs]
        n = len(self.source)
        if any(a != b for a, b in zip(outs[:n], outs[n:])):
            return False
        for c in self.conditions:
            e = parse(c)
            if e[0] == "rank" and len(shapes[e[1]]) != e[2]:
                return False
            if e[0] == "same_shape" and tuple(shapes[e[1]]) != tuple(shapes[e[2]]):
                return False
            if e[0] == "kind" and kinds is not None and kinds.get(e[1], "f") not in str(e[2]):
                return False
            if e[0] == "groups" and g.conv_groups(types) - {e[1]}:
                return False
        return True

    def to_json(self) -> dict:
        """The JSON form."""
        return {
            "name": self.name,
            "inputs": self.inputs,
            "source": list(self.source),
            "target": list(self.target),
            "conditions": list(self.conditions),
            "shapes": [{k: list(v) for k, v in s.items()} for s in self.shapes],
            "status": self.status,
            "proof": self.proof,
        }


def _check_shape(v: Any) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in v
    ):
        raise RuleSyntaxError(f"bad shape {v!r}")
    return tuple(v)


def rule_from_json(d: Any) -> SuperRule:
    """A validated rule (raises RuleSyntaxError on anything malformed)."""
    if not isinstance(d, dict):
        raise RuleSyntaxError("a rule must be an object")
    for k, t in (("name", str), ("inputs", dict), ("source", list), ("target", list)):
        if not isinstance(d.get(k), t):
            raise RuleSyntaxError(f"rule field {k!r} missing or not a {t.__name__}")
    name = d["name"]
    src, tgt = d["source"], d["target"]
    if not src or len(src) != len(tgt) or not all(isinstance(s, str) for s in src + tgt):
        raise RuleSyntaxError(f"rule {name}: source and target must list the same number of outputs")
    inputs: dict[str, dict[str, Any]] = {}
    for v, info in d["inputs"].items():
        if not isinstance(info, dict) or info.get("kind") not in ("tensor", "scalar"):
            raise RuleSyntaxError(f"rule {name}: input {v} needs kind tensor or scalar")
        rank = info.get("rank", 0)
        if not isinstance(rank, int) or rank < 0 or (info["kind"] == "scalar" and rank):
            raise RuleSyntaxError(f"rule {name}: input {v} has a bad rank {rank!r}")
        inputs[v] = {"kind": info["kind"], "rank": rank}
    g = parse_terms(src + tgt)
    unknown = set(g.variables) - set(inputs)
    if unknown:
        raise RuleSyntaxError(f"rule {name}: undeclared inputs {sorted(unknown)}")
    src_vars = set(parse_terms(src).variables)
    if set(parse_terms(tgt).variables) - src_vars:
        raise RuleSyntaxError(f"rule {name}: the target uses inputs the source does not bind")
    conds = d.get("conditions", [])
    if not isinstance(conds, list):
        raise RuleSyntaxError(f"rule {name}: conditions must be a list")
    for c in conds:
        e = parse(c) if isinstance(c, str) else None
        if not isinstance(e, list) or not e or e[0] not in CONDITIONS or len(e) != CONDITIONS[e[0]] + 1:
            raise RuleSyntaxError(f"rule {name}: unknown condition {c!r}")
        if e[0] == "groups":
            if not isinstance(e[1], int) or isinstance(e[1], bool) or e[1] < 1:
                raise RuleSyntaxError(f"rule {name}: bad group count in {c}")
        elif e[1] not in inputs or (e[0] == "same_shape" and e[2] not in inputs):
            raise RuleSyntaxError(f"rule {name}: condition {c} reads an unknown input")
    shapes = []
    for s in d.get("shapes", []):
        if not isinstance(s, dict) or set(s) != set(inputs):
            raise RuleSyntaxError(f"rule {name}: a shapes entry must give every input")
        shapes.append({k: (() if inputs[k]["kind"] == "scalar" else _check_shape(v)) for k, v in s.items()})
    status = d.get("status", "unknown")
    if status not in STATUSES:
        raise RuleSyntaxError(f"rule {name}: status must be one of {STATUSES}")
    proof = d.get("proof", {})
    if not isinstance(proof, dict):
        raise RuleSyntaxError(f"rule {name}: proof must be an object")
    return SuperRule(name, inputs, list(src), list(tgt), list(conds), shapes, status, proof)


@dataclass
class LoadResult:
    """Rules read from a file, and what was wrong with the entries that were skipped."""

    rules: list[SuperRule]
    errors: list[str]


def read_rules(path: str | Path) -> LoadResult:
    """Every valid rule of a file, whatever its status (a corrupt file gives none and one error)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        return LoadResult([], [f"{path}: unreadable rule file ({e})"])
    if isinstance(doc, list):  # a bare list of rules is accepted too
        doc = {"format": FORMAT, "version": 1, "rules": doc}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("rules"), list):
        return LoadResult([], [f"{path}: not a {FORMAT} file"])
    rules, errors = [], []
    for i, d in enumerate(doc["rules"]):
        try:
            rules.append(rule_from_json(d))
        except (RuleSyntaxError, ValueError, TypeError, KeyError) as e:
            errors.append(f"rule #{i}: {e}")
    return LoadResult(rules, errors)


_CACHE: dict[tuple, list[SuperRule]] = {}


def proven_rules(path: str | Path | None = None) -> list[SuperRule]:
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


def write_rules(path: str | Path, rules: list[SuperRule], meta: dict | None = None) -> None:
    """Write a rule file atomically."""
    doc = {"format": FORMAT, "version": 1, "meta": meta or {}, "rules": [r.to_json() for r in rules]}
    atomic_write(Path(path), (json.dumps(doc, indent=1) + "\n").encode())
