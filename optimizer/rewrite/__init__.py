"""Rewrite rules as data and the engine that applies them (the `algebraic` pass).

`ENGINE` holds the rule set the pass uses: `ENGINE.add({"name": ..., "lhs": ..., "rhs": ...,
"when": [...]})` adds a rule, `load_rules(path)` reads a JSON rule file. Rules are
described in optimizer/rewrite/rules.py: `Rule` there is the one rule record of the whole
optimizer (the superoptimizer's rules are `Rule`s too, in its term vocabulary).
"""

from optimizer.registry import register_pass
from optimizer.rewrite.engine import Engine, default_engine
from optimizer.rewrite.rules import (
    CONDITIONS,
    OPS,
    STATUSES,
    Rule,
    Vocabulary,
    load_rules,
    make_rule,
    rule_from_json,
    save_rules,
)
from optimizer.rewrite.sexpr import RuleSyntaxError, parse, unparse

ENGINE = default_engine()


def _has_candidates(g) -> bool:  # noqa: ANN001  (a cache.graph.Graph)
    index = ENGINE.index
    return any(n.op is not None and n.op.name in index for n in g.nodes)


@register_pass("algebraic", priority=300, condition=_has_candidates)
def algebraic(g) -> bool:  # noqa: ANN001
    """Apply the rewrite rules (the built-in algebraic clean-ups and any added rules)."""
    return ENGINE.run(g)


__all__ = [
    "CONDITIONS",
    "ENGINE",
    "OPS",
    "STATUSES",
    "Engine",
    "Rule",
    "RuleSyntaxError",
    "load_rules",
    "make_rule",
    "parse",
    "rule_from_json",
    "save_rules",
    "unparse",
    "Vocabulary",
]
