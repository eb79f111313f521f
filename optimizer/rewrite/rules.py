"""Rewrite rules as data: source pattern, target pattern, conditions; JSON in and out.

A rule is

    {"name": "mul-one", "lhs": "(multiply ?x 1)", "rhs": "?x", "when": ["(kind ?x biuf)"]}

Source patterns: `?x` binds any node (a repeated variable must be the same node), a number
matches a Python-scalar leaf of that value (in the scalar's own type, so `0` never matches
-0.0; recorded as a guard), `(op@?n arg ...)` an operator node with those inputs, bound to
`?n` (commutative binary operators are tried in both orders). The whole match is `?root`.

Target patterns: a bound variable, or `(op@?like arg ... :attr value ...)`, a New node whose
attributes are copied from `?like` and overridden by the keywords; its shape and dtype are
the matched root's (or `?like`'s, below the root). Attribute values: numbers, `true`/`false`,
`(shape ?n)`, `(dtype ?n)`, `(attr ?n name)`, `(typed 0 ?n)` (0 in ?n's dtype's Python type),
`(transposed ?n)` (the view swapping ?n's last two axes; a `view` target built with it
takes the swapped shape).

Conditions (the vocabulary in `CONDITIONS`) read dtypes, ranks, shapes and attributes; one
that compares concrete sizes or values adds a guard. Rules never read anything else, so a
rule file (see `load_rules`) can come from anywhere: it cannot execute code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ops.base import REGISTRY
from ops.fileio import atomic_write
from optimizer.rewrite.sexpr import RuleSyntaxError, SExpr, head, is_var, parse, unparse

#: condition name -> number of arguments (variables first, then literal words/numbers)
CONDITIONS: dict[str, int] = {
    "kind": 2,  # (kind ?x iuf): dtype kind among these letters
    "same_dtype": 2,  # (same_dtype ?a ?b)
    "same_shape": 2,  # (same_shape ?a ?b): equal shapes (guarded)
    "rank": 2,  # (rank ?x 2)
    "attr": 3,  # (attr ?n name value): attribute equals a literal (guarded when size-like)
    "scalar": 1,  # (scalar ?s): a Python-scalar leaf
    "array": 1,  # (array ?x): anything but a Python-scalar leaf
    "finite_int": 1,  # (finite_int ?x): bool or integer dtype (every value finite)
    "transpose": 1,  # (transpose ?v): a view swapping the last two axes of its whole input (guarded)
    "single_use": 1,  # (single_use ?n): read by exactly one node (so rewriting its reader drops it)
}

#: binary operators whose operands may be swapped when matching
COMMUTATIVE = frozenset(
    "add multiply maximum minimum equal not_equal logical_and logical_or logical_xor "
    "bitwise_and bitwise_or bitwise_xor".split()
)

_TARGET_EXPRS = {"shape": 1, "dtype": 1, "attr": 2, "typed": 2, "transposed": 1}


@dataclass
class Rule:
    """One rewrite rule, parsed and validated (`to_json` gives back its data form)."""

    name: str
    lhs: SExpr
    rhs: SExpr
    when: list[list] = field(default_factory=list)

    @property
    def root_op(self) -> str:
        """The operator a node must have for this rule to be tried (the engine's index)."""
        return head(self.lhs)[0]

    def to_json(self) -> dict:
        """The JSON form (patterns as text)."""
        return {
            "name": self.name,
            "lhs": unparse(self.lhs),
            "rhs": unparse(self.rhs),
            "when": [unparse(c) for c in self.when],
        }


def _vars_of(e: SExpr, out: set[str]) -> set[str]:
    if is_var(e):
        out.add(e)
    elif isinstance(e, list):
        if e and isinstance(e[0], str) and "@" in e[0]:
            out.add(e[0].partition("@")[2])
        for x in e[1:] if e and isinstance(e[0], str) else e:
            _vars_of(x, out)
    return out


def _check_lhs(e: SExpr, top: bool) -> None:
    if is_var(e):
        if top:
            raise RuleSyntaxError("a source pattern must be an operator application")
        return
    if isinstance(e, bool) or isinstance(e, (int, float)):
        if top:
            raise RuleSyntaxError("a source pattern cannot be a constant")
        return
    if not isinstance(e, list):
        raise RuleSyntaxError(f"unknown atom {e!r} in a source pattern")
    name, _ = head(e)
    if name not in REGISTRY:
        raise RuleSyntaxError(f"unknown operator {name!r}")
    for x in e[1:]:
        _check_lhs(x, False)


def _check_rhs(e: SExpr, bound: set[str]) -> None:
    if is_var(e):
        if e not in bound:
            raise RuleSyntaxError(f"target uses {e} which the source does not bind")
        return
    if not isinstance(e, list):
        raise RuleSyntaxError(f"a target must be a variable or an operator application, not {e!r}")
    name, like = head(e)
    if name not in REGISTRY:
        raise RuleSyntaxError(f"unknown operator {name!r}")
    if like is not None and like not in bound:
        raise RuleSyntaxError(f"target copies attributes of {like}, which the source does not bind")
    args = e[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if isinstance(a, str) and a.startswith(":"):
            if i + 1 >= len(args):
                raise RuleSyntaxError(f"keyword {a} without a value")
            _check_attr_value(args[i + 1], bound)
            i += 2
        else:
            _check_rhs(a, bound)
            i += 1


def _check_attr_value(v: SExpr, bound: set[str]) -> None:
    if isinstance(v, (bool, int, float)):
        return
    if not isinstance(v, list) or not v or v[0] not in _TARGET_EXPRS or len(v) != _TARGET_EXPRS[v[0]] + 1:
        raise RuleSyntaxError(f"bad attribute value {unparse(v)}")
    var = v[2] if v[0] == "typed" else v[1]
    if var not in bound:
        raise RuleSyntaxError(f"attribute value reads {var}, which the source does not bind")


def make_rule(name: str, lhs: str | SExpr, rhs: str | SExpr, when: list | tuple = ()) -> Rule:
    """Parse and validate a rule (patterns and conditions as text or as parsed lists)."""
    lp = parse(lhs) if isinstance(lhs, str) else lhs
    rp = parse(rhs) if isinstance(rhs, str) else rhs
    conds = [parse(c) if isinstance(c, str) else list(c) for c in when]
    _check_lhs(lp, True)
    bound = _vars_of(lp, set()) | {"?root"}
    _check_rhs(rp, bound)
    for c in conds:
        if not isinstance(c, list) or not c or c[0] not in CONDITIONS:
            raise RuleSyntaxError(f"rule {name}: unknown condition {unparse(c)}")
        if len(c) - 1 != CONDITIONS[c[0]]:
            raise RuleSyntaxError(f"rule {name}: {c[0]} takes {CONDITIONS[c[0]]} arguments")
        if c[1] not in bound or (c[0] in ("same_dtype", "same_shape") and c[2] not in bound):
            raise RuleSyntaxError(f"rule {name}: condition {unparse(c)} reads an unbound variable")
    return Rule(str(name), lp, rp, conds)


def rule_from_json(d: Any) -> Rule:
    """A rule from its JSON form (raises RuleSyntaxError on anything malformed)."""
    if not isinstance(d, dict) or not {"name", "lhs", "rhs"} <= set(d):
        raise RuleSyntaxError(f"a rule must be an object with name, lhs and rhs: {d!r}")
    when = d.get("when", [])
    if not isinstance(when, list):
        raise RuleSyntaxError("when must be a list")
    return make_rule(d["name"], d["lhs"], d["rhs"], when)


def load_rules(path: str | Path) -> list[Rule]:
    """Rules from a JSON file ({"format": 1, "rules": [...]}); a corrupt file gives no rules."""
    try:
        doc = json.loads(Path(path).read_text())
        if not isinstance(doc, dict) or doc.get("format") != 1 or not isinstance(doc.get("rules"), list):
            return []
        return [rule_from_json(d) for d in doc["rules"]]
    except (OSError, ValueError, RuleSyntaxError):
        return []


def save_rules(path: str | Path, rules: list[Rule]) -> None:
    """Write rules as JSON atomically (temp file + rename)."""
    path = Path(path)
    text = json.dumps({"format": 1, "rules": [r.to_json() for r in rules]}, indent=1)
    atomic_write(path, text.encode())
