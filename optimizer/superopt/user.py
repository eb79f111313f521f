"""User rules: a substitution given as two term graphs is proven before it may ever be used.

lazygraph/superopt.py traces the user's source and target functions into term graphs and
calls `register`; this module builds the rule, checks it numerically at the traced shapes
and at generalized ones, proves it with z3, and either adds it to `USER_RULES` (which
`rulefile.proven_rules()` returns next to the library) or raises `RuleRefused` naming the
rule and why.
"""

from __future__ import annotations

import numpy as np

from optimizer.rewrite.rules import Rule
from optimizer.superopt.generate import generalized_shapes
from optimizer.superopt.rulefile import USER_RULES
from optimizer.superopt.term import TermGraph
from optimizer.superopt.verify import apply_verdict, rule_from_pair, verify_rule


class RuleRefused(ValueError):
    """A user rule that is not proven (refuted with a counterexample, or unknown)."""


def register(
    name: str,
    source: TermGraph,
    target: TermGraph,
    shapes: dict[str, tuple[int, ...]],
    timeout_ms: int = 5000,
) -> Rule:
    """Prove source == target and add the rule for the optimizer; RuleRefused otherwise."""
    if len(source.outputs) != len(target.outputs):
        raise RuleRefused(
            f"rule {name}: source has {len(source.outputs)} outputs but target has {len(target.outputs)}"
        )
    extra = set(target.variables) - set(source.variables)
    if extra:
        raise RuleRefused(f"rule {name}: the target reads inputs the source does not: {sorted(extra)}")
    src, tgt = source.texts(), target.texts()
    if src == tgt:
        raise RuleRefused(f"rule {name}: source and target are the same graph")
    rule = rule_from_pair(name, src, tgt, [shapes])
    rule.origin = "user"
    if not rule.applicable(shapes):
        raise RuleRefused(f"rule {name}: source and target differ in output shapes at {shapes}")
    rule.shapes += generalized_shapes(rule, np.random.default_rng(0))
    v = verify_rule(rule, timeout_ms=timeout_ms)
    apply_verdict(rule, v)
    if v.status == "refuted":
        raise RuleRefused(
            f"rule {name} is refuted: {v.counterexample} ({' | '.join(src)} vs {' | '.join(tgt)})"
        )
    if v.status != "proven":
        raise RuleRefused(
            f"rule {name} is unknown: z3 could not prove {' | '.join(src)} == {' | '.join(tgt)} from the "
            f"axioms within {timeout_ms} ms, so the optimizer will not use it"
        )
    USER_RULES[:] = [r for r in USER_RULES if r.name != name] + [rule]
    return rule
