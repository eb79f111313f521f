"""Rules as data: one representation for every rule of the optimizer, JSON in and out.

A rule (`Rule`) is declared once, as data, and every consumer reads that one record: the
algebraic rewrite engine (`optimizer/rewrite/engine.py`), the superoptimizer's search
(`optimizer/superopt/search.py`), and the two verifiers (`optimizer/rewrite/prove.py` from the
operators' z3 facets, `optimizer/superopt/verify.py` from the axioms). What differs between
rules is said by fields, not by classes:

- `vocabulary`: whose operators the patterns name. `OPS` (here): lazygraph's registered
  operators (`(multiply ?x 1)`, `(view@?t (matmul@?m ?a ?b))`). `TERMS`
  (`optimizer/superopt/rulefile.py`): the superoptimizer's term operators (`(smul ?s ?x)`,
  `(conv2d 1 same relu ?x ?w)`, `(split0 1 ?t)`). A `Vocabulary` validates a rule's patterns
  and conditions and, for term rules, builds their term graphs.
- `source` / `target`: output patterns as text, same count, mapped in order (a multi-output
  rule has several). `lhs`/`rhs` are the parsed patterns of a one-output rule.
- `conditions`: s-expressions from `CONDITIONS` (a vocabulary allows a subset).
- `inputs`, `shapes`: the declared inputs (`tensor` with a rank, or `scalar`) and the
  concrete instances the rule was checked at numerically (term rules).
- `status` (`proven`, `refuted`, `unknown`) and `proof`: what a verifier said. `origin`:
  where the rule came from (`builtin`, `generated`, `user`, a file, ...).
- `matcher`: for the few rules whose matching is code (the search's structural merges, which
  need arithmetic on shapes patterns cannot say), the strategy object that finds matches;
  `None` for rules the engines match from their patterns.

Ops-vocabulary patterns (the rewrite engine's): `?x` binds any node (a repeated variable must
be the same node), a number matches a Python-scalar leaf of that value (in the scalar's own
type, so `0` never matches -0.0; recorded as a guard), `(op@?n arg ... :attr value)` an
operator node with those inputs (and attributes), bound to `?n` (commutative binary operators
are tried in both orders). The whole match is `?root`. Targets: a bound variable, or
`(op@?like arg ... :attr value ...)`, a New node whose attributes are copied from `?like` and
overridden by the keywords; its shape and dtype are the matched root's (or `?like`'s, below
the root). Attribute values: numbers, `true`/`false`, `(shape ?n)`, `(dtype ?n)`,
`(attr ?n name)`, `(typed 0 ?n)` (0 in ?n's dtype's Python type), `(transposed ?n)` (the view
swapping ?n's last two axes), and for the search `(dim ?n axis)` and `(+ e ...)`.

Conditions read dtypes, ranks, shapes and attributes; one that compares concrete sizes or
values adds a guard. Rules never read anything else, so a rule file can come from anywhere:
it cannot execute code. JSON: a one-output ops rule is written `{"name", "lhs", "rhs",
"when"}` (the rewrite engine's files, `{"format": 1, "rules": [...]}`, see `load_rules`);
every other rule `{"name", "inputs", "source", "target", "conditions", "shapes", "status",
"proof"}` (the superoptimizer's files), with `"vocabulary"` where it is not the spelling's
default (`lhs`: ops, `source`: terms) and `"origin"` where known.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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
    "constant": 1,  # (constant ?x): model state or a scalar only (the search: what folding can fold)
    "groups": 1,  # (groups k): every convolution of the rule has k groups (term rules: the proof's)
}
#: conditions whose second argument is a variable too
_TWO_VARS = ("same_dtype", "same_shape")

#: binary operators whose operands may be swapped when matching
COMMUTATIVE = frozenset(
    "add multiply maximum minimum equal not_equal logical_and logical_or logical_xor "
    "bitwise_and bitwise_or bitwise_xor".split()
)

STATUSES = ("proven", "refuted", "unknown")

_TARGET_EXPRS = {"shape": 1, "dtype": 1, "attr": 2, "typed": 2, "transposed": 1, "dim": 2}


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """The operators a rule's patterns may name, the conditions it may state, and its checks.

    `check(rule)` raises RuleSyntaxError for a rule outside the vocabulary; `graph(texts)`
    (term vocabularies) builds the patterns' graph form; `applicable(rule, shapes, kinds)`
    says whether a rule holds at these input shapes.
    """

    name: str
    conditions: frozenset[str]
    check: Callable[[Rule], None]
    graph: Callable[[list[str]], Any] | None = None
    applicable: Callable[..., bool] | None = None

    def __repr__(self) -> str:
        return f"Vocabulary({self.name!r})"


@dataclass(eq=False)
class Rule:
    """One rule, parsed and validated by its vocabulary (see the module docstring)."""

    name: str
    source: list[str]
    target: list[str]
    conditions: list[str] = field(default_factory=list)
    vocabulary: Vocabulary | None = None  # None: OPS (set in __post_init__)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    status: str = "unknown"
    proof: dict[str, Any] = field(default_factory=dict)
    origin: str = ""
    matcher: Any = None
    #: derived forms consumers build once per rule (parsed patterns, term graphs, search matchers)
    compiled: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.vocabulary is None:
            self.vocabulary = OPS

    def derived(self, what: str, build: Callable[[], Any]) -> Any:
        """A form derived from the patterns, built once (rebuilt if the patterns change)."""
        key = (what, tuple(self.source), tuple(self.target), tuple(self.conditions))
        got = self.compiled.get(what)
        if got is None or got[0] != key:
            got = self.compiled[what] = (key, build())
        return got[1]

    # -- parsed forms ------------------------------------------------------------------------

    @property
    def lhs(self) -> SExpr:
        """The parsed source pattern of a one-output rule."""
        return self.derived("lhs", lambda: parse(self.source[0]))

    @property
    def rhs(self) -> SExpr:
        """The parsed target pattern of a one-output rule."""
        return self.derived("rhs", lambda: parse(self.target[0]))

    @property
    def when(self) -> list[list]:
        """The parsed conditions."""
        return self.derived("when", lambda: [parse(c) for c in self.conditions])

    @property
    def root_op(self) -> str:
        """The operator a node must have for this rule to be tried (the rewrite engine's index)."""
        return head(self.lhs)[0]

    # -- term-vocabulary forms ---------------------------------------------------------------

    def _graph_of(self, what: str, texts: Callable[[], list[str]]) -> Any:
        voc = self.vocabulary
        if voc.graph is None:
            raise TypeError(f"rule {self.name}: the {voc.name} vocabulary has no graph form")
        return self.derived(what, lambda: voc.graph(texts()))

    def graphs(self) -> tuple[Any, Any]:
        """Source and target as graphs of the vocabulary (variables shared by name)."""
        return self._graph_of("src", lambda: self.source), self._graph_of("dst", lambda: self.target)

    def pair(self) -> Any:
        """One graph holding the source outputs then the target outputs (shared nodes once)."""
        return self._graph_of("pair", lambda: self.source + self.target)

    def applicable(self, shapes: dict[str, tuple[int, ...]], kinds: dict[str, str] | None = None) -> bool:
        """Whether the rule holds for inputs of these shapes (and dtype kinds, when given)."""
        if self.vocabulary.applicable is None:
            raise TypeError(f"rule {self.name}: the {self.vocabulary.name} vocabulary has no shape rules")
        return self.vocabulary.applicable(self, shapes, kinds)

    # -- JSON --------------------------------------------------------------------------------

    def to_json(self) -> dict:
        """The JSON form (see the module docstring for the two spellings)."""
        if self.vocabulary is OPS and len(self.source) == 1 and not self.inputs and not self.shapes:
            d: dict[str, Any] = {
                "name": self.name,
                "lhs": unparse(self.lhs),
                "rhs": unparse(self.rhs),
                "when": [unparse(c) for c in self.when],
            }
            if self.status != "unknown" or self.proof:
                d.update(status=self.status, proof=self.proof)
        else:
            d = {"name": self.name}
            if self.vocabulary.name != "terms":
                d["vocabulary"] = self.vocabulary.name
            d.update(
                inputs=self.inputs,
                source=list(self.source),
                target=list(self.target),
                conditions=list(self.conditions),
                shapes=[{k: list(v) for k, v in s.items()} for s in self.shapes],
                status=self.status,
                proof=self.proof,
            )
        if self.origin:
            d["origin"] = self.origin
        return d


def vars_of(e: SExpr, out: set[str]) -> set[str]:
    """The pattern variables of e (bindings `op@?n` included), added to out."""
    if is_var(e):
        out.add(e)
    elif isinstance(e, list):
        if e and isinstance(e[0], str) and "@" in e[0]:
            out.add(e[0].partition("@")[2])
        for x in e[1:] if e and isinstance(e[0], str) else e:
            vars_of(x, out)
    return out


def _is_literal(v: SExpr) -> bool:
    return isinstance(v, (bool, int, float)) or (
        isinstance(v, str) and not is_var(v) and not v.startswith(":")
    )


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
    args = e[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if isinstance(a, str) and a.startswith(":"):  # an attribute the node must have
            if i + 1 >= len(args) or not _is_literal(args[i + 1]):
                raise RuleSyntaxError(f"keyword {a} needs a literal value in a source pattern")
            i += 2
        else:
            _check_lhs(a, False)
            i += 1


def _check_rhs(e: SExpr, bound: set[str]) -> None:
    if is_var(e):
        if e not in bound:
            raise RuleSyntaxError(f"target uses {e} which the source does not bind")
        return
    if isinstance(e, (bool, int, float)):
        return  # a Python-scalar constant (search targets: `(multiply ?x 0.5)`)
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
    if isinstance(v, list) and v and v[0] == "+" and len(v) > 1:
        for x in v[1:]:
            _check_attr_value(x, bound)
        return
    if not isinstance(v, list) or not v or v[0] not in _TARGET_EXPRS or len(v) != _TARGET_EXPRS[v[0]] + 1:
        raise RuleSyntaxError(f"bad attribute value {unparse(v)}")
    var = v[2] if v[0] == "typed" else v[1]
    if var not in bound:
        raise RuleSyntaxError(f"attribute value reads {var}, which the source does not bind")


def check_conditions(rule: Rule, bound: set[str]) -> None:
    """Every condition is known to the rule's vocabulary, has its arity and reads bound variables."""
    for text, c in zip(rule.conditions, rule.when):
        if not isinstance(c, list) or not c or c[0] not in rule.vocabulary.conditions:
            raise RuleSyntaxError(f"rule {rule.name}: unknown condition {text!r}")
        if len(c) - 1 != CONDITIONS[c[0]]:
            raise RuleSyntaxError(f"rule {rule.name}: {c[0]} takes {CONDITIONS[c[0]]} arguments")
        if c[0] == "groups":
            if not isinstance(c[1], int) or isinstance(c[1], bool) or c[1] < 1:
                raise RuleSyntaxError(f"rule {rule.name}: bad group count in {text}")
        elif c[1] not in bound or (c[0] in _TWO_VARS and c[2] not in bound):
            raise RuleSyntaxError(f"rule {rule.name}: condition {text} reads an unbound variable")


def _check_ops(rule: Rule) -> None:
    """Patterns over registered operators (see the module docstring)."""
    if not rule.source or len(rule.source) != len(rule.target):
        raise RuleSyntaxError(f"rule {rule.name}: source and target must list the same number of outputs")
    bound = {"?root"}
    for s in rule.source:
        p = parse(s)
        _check_lhs(p, True)
        vars_of(p, bound)
    for t in rule.target:
        _check_rhs(parse(t), bound)
    check_conditions(rule, bound)


#: lazygraph's registered operators (ops.base.REGISTRY): the rewrite engine's and the search's patterns
OPS = Vocabulary("ops", frozenset(CONDITIONS) - {"groups"}, _check_ops)


def _text(e: str | SExpr) -> str:
    return unparse(parse(e)) if isinstance(e, str) else unparse(e)


def _patterns(p: str | SExpr | list) -> list:
    """One pattern (text or parsed) or a list of pattern texts, as a list of patterns."""
    texts = isinstance(p, (list, tuple)) and p and all(isinstance(x, str) and x[:1] in "(?" for x in p)
    return list(p) if texts else [p]


def make_rule(
    name: str,
    lhs: str | SExpr | list,
    rhs: str | SExpr | list,
    when: list | tuple = (),
    *,
    vocabulary: Vocabulary | None = None,
    origin: str = "",
    **fields: Any,
) -> Rule:
    """Parse and validate a rule (patterns and conditions as text or as parsed lists).

    `lhs`/`rhs` are one pattern each, or, for multi-output rules, lists of pattern texts;
    further fields (`inputs`, `shapes`, `status`, `proof`, `matcher`) are passed through.
    """
    srcs, dsts = _patterns(lhs), _patterns(rhs)
    rule = Rule(
        str(name),
        [_text(s) for s in srcs],
        [_text(d) for d in dsts],
        [_text(c) for c in when],
        vocabulary or OPS,
        origin=origin,
        **fields,
    )
    if rule.status not in STATUSES:
        raise RuleSyntaxError(f"rule {name}: status must be one of {STATUSES}")
    rule.vocabulary.check(rule)
    return rule


def _check_shape(v: Any) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in v
    ):
        raise RuleSyntaxError(f"bad shape {v!r}")
    return tuple(v)


def rule_from_json(d: Any, vocabularies: Mapping[str, Vocabulary] | None = None) -> Rule:
    """A rule from its JSON form (either spelling; raises RuleSyntaxError on anything malformed).

    `vocabularies`: the vocabularies this reader knows by name (default: OPS only; the
    superoptimizer's reader adds TERMS).
    """
    vocabularies = vocabularies if vocabularies is not None else {"ops": OPS}
    if not isinstance(d, dict):
        raise RuleSyntaxError(f"a rule must be an object: {d!r}")
    if "lhs" in d:  # the one-output spelling
        if not {"name", "rhs"} <= set(d):
            raise RuleSyntaxError(f"a rule must be an object with name, lhs and rhs: {d!r}")
        src, tgt, conds = [d["lhs"]], [d["rhs"]], d.get("when", [])
        default = "ops"
    else:
        for k, t in (("name", str), ("source", list), ("target", list)):
            if not isinstance(d.get(k), t):
                raise RuleSyntaxError(f"rule field {k!r} missing or not a {t.__name__}")
        src, tgt, conds = d["source"], d["target"], d.get("conditions", [])
        default = "terms"
    name = d["name"]
    if not isinstance(name, str):
        raise RuleSyntaxError("a rule's name must be a string")
    if not src or len(src) != len(tgt) or not all(isinstance(s, str) for s in src + tgt):
        raise RuleSyntaxError(f"rule {name}: source and target must list the same number of outputs")
    if not isinstance(conds, list) or not all(isinstance(c, str) for c in conds):
        raise RuleSyntaxError(f"rule {name}: conditions must be a list of texts")
    vname = d.get("vocabulary", default)
    voc = vocabularies.get(vname) if isinstance(vname, str) else None
    if voc is None:
        raise RuleSyntaxError(f"rule {name}: vocabulary {vname!r} is not one this reader knows")
    inputs: dict[str, dict[str, Any]] = {}
    raw_inputs = d.get("inputs", {})
    if not isinstance(raw_inputs, dict):
        raise RuleSyntaxError(f"rule {name}: inputs must be an object")
    for v, info in raw_inputs.items():
        if not isinstance(info, dict) or info.get("kind") not in ("tensor", "scalar"):
            raise RuleSyntaxError(f"rule {name}: input {v} needs kind tensor or scalar")
        rank = info.get("rank", 0)
        if not isinstance(rank, int) or rank < 0 or (info["kind"] == "scalar" and rank):
            raise RuleSyntaxError(f"rule {name}: input {v} has a bad rank {rank!r}")
        inputs[v] = {"kind": info["kind"], "rank": rank}
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
    origin = d.get("origin", "")
    if not isinstance(origin, str):
        raise RuleSyntaxError(f"rule {name}: origin must be a string")
    rule = Rule(name, [_text(s) for s in src], [_text(t) for t in tgt], [_text(c) for c in conds], voc)
    rule.inputs, rule.shapes, rule.status, rule.proof, rule.origin = inputs, shapes, status, proof, origin
    voc.check(rule)
    return rule


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
