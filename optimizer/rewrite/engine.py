"""The rewrite engine: match rules (indexed by root operator) on Q and apply them.

One pass of the registry (`algebraic`) runs the engine to a fixed point: each round walks
Q's nodes once, tries the rules indexed under the node's operator in order, and applies the
first that matches; matches never overlap inside a round, so a round is one
`Graph.substitute`. Decisions that read a concrete value or size become guards.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

import numpy as np

from cache.graph import Graph, QNode
from cache.key import canon
from cache.recipe import Expr
from ops.views import contiguous, permute_view
from optimizer.rewrite.rules import COMMUTATIVE, OPS, Rule, make_rule, rule_from_json
from optimizer.rewrite.sexpr import head, is_var

_MAX_ROUNDS = 16


_HEADS: dict[str, tuple[str, str | None]] = {}


def _head(pat: list) -> tuple[str, str | None]:
    """`head` of a pattern list, memoized by its operator word (patterns are fixed data)."""
    word = pat[0]
    h = _HEADS.get(word)
    if h is None:
        h = _HEADS[word] = head(pat)
    return h


class _Match:
    """Bindings and guards of one (partial) match."""

    __slots__ = ("env", "guards", "users")

    def __init__(self) -> None:
        self.env: dict[str, QNode] = {}
        self.guards: list[Expr] = []
        # readers per node, for `single_use`: made on demand, per match (the engine is shared
        # by every thread, so nothing about one graph may live on it)
        self.users: dict[int, int] | None = None

    def save(self) -> tuple[dict, int]:
        return dict(self.env), len(self.guards)

    def restore(self, state: tuple[dict, int]) -> None:
        self.env = state[0]
        del self.guards[state[1] :]


def _is_value(value: Any, target: Any) -> bool:
    """value equals `target` in value's own Python type (never -0.0 for 0, never nan)."""
    t = type(value)
    if t is float:
        return value == target and math.copysign(1.0, value) == math.copysign(1.0, float(target))
    return (t is int or t is bool) and value == target and float(target).is_integer()


class Engine:
    """A rule set indexed by root operator, applied to graphs."""

    def __init__(self, rules: list[Rule] | None = None) -> None:
        self.rules: list[Rule] = []
        self.index: dict[str, list[Rule]] = {}
        self.fired: Counter[str] = Counter()  # totals over this process
        self.seconds = 0.0
        for r in rules or []:
            self.add(r)

    def add(self, rule: Rule | dict, prove: bool = False) -> Rule:
        """Add a rule (a Rule or its JSON form); names are unique. With `prove`, only once z3 has
        proven it from its operators' specifications (optimizer/rewrite/prove.py); the rule's
        `status` and `proof` then record the proof."""
        r = rule if isinstance(rule, Rule) else rule_from_json(rule)
        why = unsupported(r)
        if why:
            raise ValueError(f"rule {r.name}: the rewrite engine cannot run it ({why})")
        if any(x.name == r.name for x in self.rules):
            raise ValueError(f"rule {r.name!r} already exists")
        if prove:
            from optimizer.rewrite.prove import require_proof  # z3 is loaded only when asked for

            v = require_proof(r)
            r.status, r.proof = "proven", {"by": "z3 facets", "detail": v.detail}
        self.rules.append(r)
        self.index.setdefault(r.root_op, []).append(r)
        return r

    def remove(self, name: str) -> None:
        """Drop a rule by name (tests and experiments)."""
        self.rules = [r for r in self.rules if r.name != name]
        self.index = {}
        for r in self.rules:
            self.index.setdefault(r.root_op, []).append(r)

    # -- matching --------------------------------------------------------------------------

    def _match(self, g: Graph, pat: Any, n: QNode, m: _Match) -> bool:
        if is_var(pat):
            prev = m.env.get(pat)
            if prev is None:
                m.env[pat] = n
                return True
            return prev is n
        if isinstance(pat, (bool, int, float)):
            if not n.scalar:
                return False
            v = g.value(n)
            if not _is_value(v, pat):
                return False
            m.guards.append(("eq", ("value", n.src), ("const", type(v)(pat))))
            return True
        name, bind = _head(pat)
        if n.leaf or n.op is None or n.op.name != name:
            return False
        if n.recipe is not None and n.recipe.ctor != "op":
            return False
        args = pat[1:]
        if len(args) != len(n.inputs):
            return False
        if bind is not None:
            prev = m.env.get(bind)
            if prev is not None and prev is not n:
                return False
            m.env[bind] = n
        if not args:
            return True
        orders = [n.inputs]
        if name in COMMUTATIVE and len(n.inputs) == 2:
            orders.append([n.inputs[1], n.inputs[0]])
        for ins in orders:
            state = m.save()
            if all(self._match(g, p, c, m) for p, c in zip(args, ins)):
                return True
            m.restore(state)
        return False

    def _conditions(self, g: Graph, rule: Rule, m: _Match) -> bool:
        env = m.env
        for c in rule.when:
            what, a = c[0], env[c[1]]
            if what == "kind":
                ok = a.dtype.kind in str(c[2])
            elif what == "same_dtype":
                ok = a.dtype == env[c[2]].dtype
            elif what == "same_shape":
                b = env[c[2]]
                ok = a.shape == b.shape
                if ok:
                    m.guards.append(("eq", g.shape_expr(a), g.shape_expr(b)))
            elif what == "rank":
                ok = len(a.shape) == c[2]
            elif what == "attr":
                name, want = str(c[2]), c[3]
                ok = not a.leaf and name in a.attrs and canon(a.attrs[name]) == canon(want)
                if ok and (a.recipe is not None or name in a.op.size_attrs):
                    m.guards.append(("eq", g.attr_expr(a, name), ("const", want)))
            elif what == "transpose":
                ok = _is_transpose(a)
                if ok:
                    m.guards.append(("eq", g.attr_expr(a, "view"), ("transposed", g.shape_expr(a.inputs[0]))))
            elif what == "single_use":
                if m.users is None:
                    m.users = g.users()
                ok = m.users.get(id(a), 0) == 1
            elif what == "scalar":
                ok = a.scalar
            elif what == "array":
                ok = not a.scalar
            else:  # finite_int
                ok = a.dtype.kind in "biu"
            if not ok:
                return False
        return True

    # -- building the target ---------------------------------------------------------------

    def _attr_value(self, g: Graph, v: Any, env: dict[str, QNode]) -> Expr:
        if isinstance(v, (bool, int, float)):
            return ("const", v)
        tag = v[0]
        if tag == "shape":
            return g.shape_expr(env[v[1]])
        if tag == "dtype":
            return ("dtype", env[v[1]].dtype.str)
        if tag == "attr":
            return g.attr_expr(env[v[1]], str(v[2]))
        if tag == "transposed":
            return ("transposed", g.shape_expr(env[v[1]]))
        value = np.zeros((), env[v[2]].dtype).dtype.type(v[1]).item()  # typed
        return ("const", value)

    def _build(self, g: Graph, t: Any, env: dict[str, QNode], root: QNode | None) -> QNode:
        if is_var(t):
            return env[t]
        name, like_var = head(t)
        like = env[like_var] if like_var is not None else None
        attrs: dict[str, Expr] = {}
        if like is not None:
            attrs = {k: g.attr_expr(like, k) for k in like.attrs}
        inputs: list[QNode] = []
        args = t[1:]
        i = 0
        while i < len(args):
            a = args[i]
            if isinstance(a, str) and a.startswith(":"):
                attrs[a[1:]] = self._attr_value(g, args[i + 1], env)
                i += 2
            else:
                inputs.append(self._build(g, a, env, None))
                i += 1
        view = attrs.get("view")
        if root is None and name == "view" and isinstance(view, tuple) and view[0] == "transposed":
            # A transposing view below the root: the swapped shape of what it views.
            return g.new(name, inputs, attrs, ("swapped", view[1]), inputs[0].dtype)
        shaped = root if root is not None else like
        if shaped is None:
            raise ValueError(f"target {t!r} below the root needs op@?like for its shape")
        return g.new(name, inputs, attrs, g.shape_expr(shaped), shaped.dtype)

    # -- the pass --------------------------------------------------------------------------

    def try_rule(self, g: Graph, rule: Rule, n: QNode) -> QNode | None:
        """The replacement for n if `rule` matches it (guards recorded), else None."""
        m = _Match()
        m.env["?root"] = n
        if not self._match(g, rule.lhs, n, m) or not self._conditions(g, rule, m):
            return None
        new = self._build(g, rule.rhs, m.env, n)
        if new.shape != n.shape or new.dtype != n.dtype:
            return None  # a rule that would change the value's type: not applicable here
        for guard in m.guards:
            g.guard(guard)
        return new

    def run(self, g: Graph) -> bool:
        """Apply the rules to a fixed point; returns whether anything changed."""
        t0 = time.perf_counter()
        changed = False
        fired: dict[str, int] = g.artifacts.setdefault("rules", {})
        for _ in range(_MAX_ROUNDS):
            mapping: dict[int, QNode] = {}
            touched: set[int] = set()
            for n in _live(g):
                rules = self.index.get(n.op.name) if n.op is not None else None
                if not rules or id(n) in touched:
                    continue
                for rule in rules:
                    new = self.try_rule(g, rule, n)
                    if new is not None:
                        mapping[id(n)] = new
                        touched.update(id(c) for c in n.inputs)
                        fired[rule.name] = fired.get(rule.name, 0) + 1
                        self.fired[rule.name] += 1
                        break
            if not mapping:
                break
            g.substitute(mapping)
            changed = True
        if not fired:
            del g.artifacts["rules"]
        self.seconds += time.perf_counter() - t0
        return changed


#: the conditions this engine evaluates (the search's `constant` it does not)
ENGINE_CONDITIONS = frozenset(
    "kind same_dtype same_shape rank attr scalar array finite_int transpose single_use".split()
)


def unsupported(rule: Rule) -> str:
    """Why this engine cannot run a rule ('' when it can): it reads one-output rules over
    lazygraph's operators, without attribute keywords in the source, with its conditions."""
    if rule.vocabulary is not OPS:
        return f"its patterns are in the {rule.vocabulary.name} vocabulary"
    if rule.matcher is not None:
        return "its matching is code"
    if len(rule.source) != 1:
        return f"it has {len(rule.source)} outputs"
    if any(isinstance(a, str) and a.startswith(":") for a in _atoms(rule.lhs)):
        return "its source matches attributes"
    extra = {c[0] for c in rule.when} - ENGINE_CONDITIONS
    if extra:
        return f"conditions {sorted(extra)}"
    return ""


def _atoms(e: object) -> list:
    if isinstance(e, list):
        return [a for x in e for a in _atoms(x)]
    return [e]


def _is_transpose(n: QNode) -> bool:
    """n is a view swapping the last two axes of its whole (rank >= 2) input."""
    if n.leaf or n.op is None or n.op.name != "view" or len(n.inputs) != 1:
        return False
    shape = n.inputs[0].shape
    if len(shape) < 2:
        return False
    axes = tuple(range(len(shape) - 2)) + (len(shape) - 1, len(shape) - 2)
    return n.attrs.get("view") == permute_view(contiguous(shape), axes)


def _live(g: Graph) -> list[QNode]:
    """Nodes some output depends on, inputs first (dead ones are left for `dce`)."""
    live = g.live_ids()
    return [n for n in g.nodes if id(n) in live]


def default_engine() -> Engine:
    """An engine with the built-in rule set."""
    from optimizer.rewrite.builtin import BUILTIN_RULES

    return Engine(
        [make_rule(d["name"], d["lhs"], d["rhs"], d.get("when", []), origin="builtin") for d in BUILTIN_RULES]
    )
