"""Proving a rewrite rule from its operators' z3 specifications (the `z3` facet of ops/ records).

A rule's source and target patterns become z3 terms over reals: a pattern variable is a real
constant, a number a real value, an operator application its record's specification applied
to the encoded operands (`op.z3(z3, *operands)`; ops/ never imports z3, so the module is
passed in). The rule is *proven* when `source != target` is unsatisfiable and *refuted* when
z3 gives a model (the counterexample names the variables' values). It is *unknown* when z3
cannot decide, when a model exists only because a specification leaves a function
uninterpreted (exp, log, pow: any meaning satisfies it), when an operator in the rule has no
specification, or when the target sets attributes (shapes, dtypes: not real arithmetic).
Conditions only narrow where a rule applies, so a proof without them is a proof with them.
Real arithmetic says nothing about rounding, NaN or overflow: those are what the conditions of
a rule are for.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from ops.base import REGISTRY
from optimizer.rewrite.rules import OPS, Rule
from optimizer.rewrite.sexpr import SExpr, head, is_var, parse, unparse


@dataclass
class Verdict:
    """The outcome of a proof: status ("proven", "refuted", "unknown") and why."""

    status: str
    detail: str = ""


class _NoSpec(Exception):
    """A pattern outside real arithmetic (an operator without a z3 facet, an attribute)."""


def encode(e: SExpr, env: dict[str, z3.ArithRef]) -> z3.ArithRef:
    """A rule pattern as a z3 real term (variables bound in, and added to, env)."""
    if is_var(e):
        if e not in env:
            env[e] = z3.Real(e)
        return env[e]
    if isinstance(e, bool):
        return z3.RealVal(int(e))
    if isinstance(e, (int, float)):
        return z3.RealVal(e)
    if not isinstance(e, list):
        raise _NoSpec(f"{unparse(e)} is not a real-valued term")
    name, _like = head(e)
    spec = REGISTRY[name].z3
    if spec is None:
        raise _NoSpec(f"{name} has no z3 specification")
    if any(isinstance(a, str) and a.startswith(":") for a in e[1:]):
        raise _NoSpec(f"{name}: a target that sets attributes is not real arithmetic")
    return spec(z3, *(encode(a, env) for a in e[1:]))


def _uninterpreted(e: z3.ExprRef) -> bool:
    """Whether a term applies a function its specification leaves uninterpreted (exp, log, ...)."""
    stack, seen = [e], set()
    while stack:
        t = stack.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_app(t):
            if t.num_args() and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                return True
            stack.extend(t.children())
    return False


def prove_rule(rule: Rule, timeout_ms: int = 5000) -> Verdict:
    """Prove the rule's source equals its target for all real operands (every output)."""
    if rule.vocabulary is not OPS:
        return Verdict(
            "unknown", f"its patterns are in the {rule.vocabulary.name} vocabulary, not lazygraph's"
        )
    env: dict[str, z3.ArithRef] = {}
    try:
        lhs = [encode(parse(t), env) for t in rule.source]
        rhs = [encode(parse(t), env) for t in rule.target]
    except _NoSpec as e:
        return Verdict("unknown", str(e))
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    s.add(z3.Or([a != b for a, b in zip(lhs, rhs)]))
    got = s.check()
    if got == z3.unsat:
        return Verdict("proven")
    if got == z3.sat and any(_uninterpreted(t) for t in lhs + rhs):
        # a model may give exp, log, ... any meaning: it is no counterexample to the real functions
        return Verdict(
            "unknown", "not provable from the specifications (they leave a function uninterpreted)"
        )
    if got == z3.sat:
        m = s.model()
        cex = ", ".join(f"{v} = {m.eval(x, model_completion=True)}" for v, x in sorted(env.items()))
        return Verdict("refuted", f"{' | '.join(rule.source)} != {' | '.join(rule.target)} at {cex}")
    return Verdict("unknown", f"z3 could not decide within {timeout_ms} ms ({s.reason_unknown()})")


def require_proof(rule: Rule, timeout_ms: int = 5000) -> Verdict:
    """prove_rule, raising ValueError naming the rule unless it is proven."""
    v = prove_rule(rule, timeout_ms)
    if v.status != "proven":
        raise ValueError(f"rule {rule.name} is {v.status}: {v.detail}")
    return v
