"""User substitution rules for the superoptimizer, written with the array API.

    import lazygraph as lg

    lg.superopt.rule(
        lambda x, y, z: (x @ y, x @ z),
        lambda x, y, z: tuple(lg.split(x @ lg.concat([y, z], axis=1), [y.shape[1]], axis=1)),
        shapes=[(8, 16), (16, 4), (16, 4)],
        name="merge-matmuls",
    )

`source` and `target` take one lazy array per entry of `shapes` (a 0-d shape `()` is a
scalar input) and return an array or a tuple of arrays (the outputs, in order). They are
traced, converted into the superoptimizer's term format, and proven equal by z3 (after a
numeric check on random inputs) before the optimizer may use the rule. A rule that is not
proven is refused with `RuleRefused`, whose message names the rule and gives the
counterexample or says z3 could not prove it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array
from lazygraph.shape import asarray
from optimizer.rewrite.rules import Rule
from optimizer.superopt.convert import from_nodes
from optimizer.superopt.rulefile import USER_RULES
from optimizer.superopt.term import TermGraph, parse_terms

__all__ = ["RuleRefused", "rule", "user_rules"]  # noqa: F822  (RuleRefused: module __getattr__)


def __getattr__(name: str) -> object:
    """RuleRefused on first use: optimizer.superopt.user pulls in z3 (~20 ms, ~13,000 objects at import)."""
    if name == "RuleRefused":
        from optimizer.superopt.user import RuleRefused

        return RuleRefused
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _trace(fn: Callable, inputs: list[Array], names: dict[int, str], rule_name: str, side: str) -> TermGraph:
    from optimizer.superopt.user import RuleRefused  # z3 only once a rule is proven

    out = fn(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs or not all(isinstance(o, Array) for o in outs):
        raise RuleRefused(f"rule {rule_name}: the {side} function must return lazy arrays")
    roots = [o.node for o in outs]
    tg, binding, _refs = from_nodes(roots, lambda n: n.buffer, stop=lambda n: id(n) in names)
    live = tg.live()
    rename: dict[str, str] = {}
    for i, n in enumerate(tg.nodes):
        if n.op != "var" or i not in live:
            continue
        node = binding[n.params[0]]
        if id(node) not in names:
            what = node.op.name if node.op is not None else "a constant"
            raise RuleRefused(
                f"rule {rule_name}: the {side} uses {what!r}, which is not an input and not in the "
                "superoptimizer's vocabulary (add, subtract, multiply, maximum(x, 0), tanh, sigmoid, exp, matmul, transpose, concat, "
                "slices of a concat, conv2d, pooling, pad)"
            )
        rename[n.params[0]] = names[id(node)]
    # Re-parse with the inputs' names so both sides share variables.
    texts = [_rename(t, rename) for t in tg.texts()]
    return parse_terms(texts)


def _rename(text: str, rename: dict[str, str]) -> str:
    toks = text.replace("(", "( ").replace(")", " )").split()
    return " ".join(rename.get(t, t) for t in toks).replace("( ", "(").replace(" )", ")")


def rule(
    source: Callable[..., Any],
    target: Callable[..., Any],
    shapes: Sequence[Sequence[int]],
    name: str | None = None,
    timeout_ms: int = 5000,
) -> Rule:
    """Register a substitution source -> target for the optimizer once z3 has proven it."""
    from optimizer.superopt.user import register  # z3 only once a rule is proven

    rule_name = name or f"user-{getattr(source, '__name__', 'rule')}-{len(USER_RULES)}"
    rng = np.random.default_rng(0)
    inputs, names, var_shapes = [], {}, {}
    for i, s in enumerate(shapes):
        # positive(): a recorded node standing for the input (a bare leaf would absorb views)
        a = api.positive(asarray(rng.standard_normal(tuple(s))))
        inputs.append(a)
        names[id(a.node)] = f"?a{i}"
        var_shapes[f"?a{i}"] = tuple(int(d) for d in s)
    src = _trace(source, inputs, names, rule_name, "source")
    tgt = _trace(target, inputs, names, rule_name, "target")
    used = {v: var_shapes[v] for v in src.variables}
    return register(rule_name, src, tgt, used, timeout_ms)


def user_rules() -> list[Rule]:
    """The user rules registered (and proven) in this process."""
    return list(USER_RULES)
