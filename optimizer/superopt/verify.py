"""The verifier: numeric check first, then a z3 proof of source == target against the axioms.

Tensors are one uninterpreted sort `T` (scalar inputs another, `S`, so that an axiom about
scalars says nothing about tensors); each operator output is an uninterpreted function
(`split0`, `split1` for the two outputs of split), taking its parameters as integer arguments
first (words as in `opset.WORDS`; conv2d also takes its group count). Axioms are universally
quantified, with each side that mentions every variable as an E-matching trigger. A rule is
*proven* when z3 reports `source_i != target_i for some i` unsatisfiable within the budget;
*refuted* when the numeric check (float64, reference kernels, random inputs at the rule's
shapes) finds a difference; *unknown* otherwise (an exhausted budget or a model is never a
proof). The budget `timeout_ms` is counted in z3 resource units, and each query has a z3
context of its own (`Z3Env`), so a verdict depends on nothing but the rule, the axioms and
the budget: `verify_many` spreads rules over processes and gets the sequential statuses.

`verify_rule` reads the optimizer's one rule record (`optimizer.rewrite.rules.Rule`): a rule
in the term vocabulary is checked here; a rule over lazygraph's operators (the rewrite
engine's, or a search pattern rule) is proven by `optimizer/rewrite/prove.py` from the
operators' z3 facets, and its verdict comes back in the same form.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import z3

from optimizer.rewrite.prove import prove_rule
from optimizer.rewrite.rules import Rule
from optimizer.rewrite.sexpr import SExpr, is_var, parse
from optimizer.superopt.axioms import AXIOMS, Axiom
from optimizer.superopt.opset import OPS, PROJECTIONS, WORDS, FloatRing
from optimizer.superopt.rulefile import TERMS, rule_from_json, term_rule
from optimizer.superopt.term import TermGraph, parse_terms

#: z3 resource units per millisecond of `timeout_ms` (about what one idle core of the 2-core
#: machine spends in a millisecond on these queries: 1,000 ms is 0.5 to 1.5 s of CPU)
RLIMIT_PER_MS = 1000


class Z3Env:
    """One z3 context with the vocabulary's sorts, symbols and axiom formulas.

    Every query gets a fresh one: z3's search depends on the order in which its terms were
    created, so in a shared context a verdict would depend on the queries that ran before it
    (a rule proven in one run was unknown in another, even with 5x the budget). A fresh
    context (63 axioms rebuilt: a few milliseconds) makes a verdict a function of the rule,
    the axioms and the budget alone, in any process and any order."""

    def __init__(self) -> None:
        self.ctx = z3.Context()
        self.T = z3.DeclareSort("T", self.ctx)
        # scalars (0-d inputs): a sort of their own, so scalar-only axioms stay typed
        self.S = z3.DeclareSort("S", self.ctx)
        self.funcs: dict[str, z3.FuncDeclRef] = {}

    def int(self, v: int) -> z3.ArithRef:
        """An integer constant of this context."""
        return z3.IntVal(v, self.ctx)


def symbol(z: Z3Env, op: str, out: int = 0, sorts: tuple = ()) -> z3.FuncDeclRef:
    """The z3 function of an operator's output (for these argument sorts: smul takes a
    tensor or a scalar first)."""
    spec = OPS[op]
    name = spec.out_names[out] if spec.n_out > 1 else op
    arg_sorts = [z.S if spec.arg_kind(k) == "scalar" else z.T for k in range(spec.arity)]
    if spec.kinds and "any" in spec.kinds and sorts:
        arg_sorts = [z.S if spec.arg_kind(k) == "scalar" else sorts[k] for k in range(spec.arity)]
    result = z.S if arg_sorts and all(a == z.S for a in arg_sorts) else z.T
    if result == z.S:
        name += "_s"
    f = z.funcs.get(name)
    if f is None:
        n_int = len(spec.params) + (1 if spec.grouped else 0)
        f = z3.Function(name, *([z3.IntSort(z.ctx)] * n_int + arg_sorts + [result]))
        z.funcs[name] = f
    return f


def tensor_var(z: Z3Env, name: str, rank: int) -> z3.ExprRef:
    """A z3 constant for an input: sort S for a scalar (rank 0), T otherwise."""
    return z3.Const(name, z.S if rank == 0 else z.T)


def _param(z: Z3Env, p: Any, env: dict[str, Any]) -> z3.ArithRef:
    if isinstance(p, str) and p.startswith("?"):
        return env[p]
    return z.int(WORDS[p] if isinstance(p, str) else int(p))


def encode_sexpr(z: Z3Env, e: SExpr, env: dict[str, Any], groups: z3.ArithRef) -> z3.ExprRef:
    """A pattern with variables (tensor and parameter) bound in env, as a z3 term."""
    if is_var(e):
        return env[e]
    name, out = e[0], 0
    if name in PROJECTIONS:
        name, out = PROJECTIONS[name]
    spec = OPS[name]
    k = len(spec.params)
    ints = [_param(z, p, env) for p in e[1 : 1 + k]] + ([groups] if spec.grouped else [])
    args = [encode_sexpr(z, a, env, groups) for a in e[1 + k :]]
    return symbol(z, name, out, tuple(a.sort() for a in args))(*ints, *args)


def encode_graph(z: Z3Env, g: TermGraph, types: list, env: dict[str, z3.ExprRef]) -> list[z3.ExprRef]:
    """The outputs of a term graph (at concrete types) as z3 terms."""
    made: list[list[z3.ExprRef]] = []
    for n in g.nodes:
        if n.op == "var":
            made.append([env[n.params[0]]])
            continue
        spec = OPS[n.op]
        ins = [types[i][k] for i, k in n.args]
        ints = [z.int(v) for v in spec.z3_extra(n.params, ins)]
        args = [made[i][k] for i, k in n.args]
        sorts = tuple(a.sort() for a in args)
        made.append([symbol(z, n.op, k, sorts)(*ints, *args) for k in range(spec.n_out)])
    return [made[i][k] for i, k in g.outputs]


def _sides(z: Z3Env, ax: Axiom, prefix: str) -> tuple[list, z3.ExprRef, z3.ExprRef]:
    """The axiom's bound variables (prefixed names) and its two sides."""
    env: dict[str, Any] = {v: tensor_var(z, f"{prefix}{v}", r) for v, r in ax.vars.items()}
    env.update({p: z3.Int(f"{prefix}{p}", z.ctx) for p in ax.params})
    groups = z.int(ax.groups) if ax.groups is not None else z3.Int(f"{prefix}?g", z.ctx)
    lhs, rhs = encode_sexpr(z, parse(ax.lhs), env, groups), encode_sexpr(z, parse(ax.rhs), env, groups)
    bound = list(env.values())
    if ax.groups is None and ("conv2d" in ax.lhs or "conv2d" in ax.rhs):
        bound.append(groups)
    return bound, lhs, rhs


def axiom_formula(z: Z3Env, ax: Axiom) -> z3.BoolRef:
    """The axiom as a quantified z3 formula with triggers."""
    bound, lhs, rhs = _sides(z, ax, ax.name)
    names = {str(b) for b in bound}
    pats = [s for s in (lhs, rhs) if z3.is_app(s) and s.num_args() > 0 and names <= _consts(s)]
    return z3.ForAll(bound, lhs == rhs, patterns=pats) if pats else z3.ForAll(bound, lhs == rhs)


def _consts(e: z3.ExprRef) -> set[str]:
    out: set[str] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            out.add(str(x))
        stack.extend(x.children())
    return out


def prove_equal(
    z: Z3Env,
    lhs: list[z3.ExprRef],
    rhs: list[z3.ExprRef],
    timeout_ms: int,
    axioms: list[Axiom] | None = None,
) -> tuple[str, list[str]]:
    """('proven', axioms used) if the axioms entail lhs == rhs, else ('unknown', [])."""
    s = z3.Solver(ctx=z.ctx)
    # The budget is z3's resource count, not the clock: a verdict then depends on the query
    # alone, not on the machine's load or on how many workers share it (the clock stays as
    # a backstop, far above what the resource budget takes on an idle core).
    s.set("rlimit", int(timeout_ms) * RLIMIT_PER_MS)
    s.set("timeout", int(timeout_ms) * 20)
    s.set("unsat_core", True)
    for ax in axioms if axioms is not None else AXIOMS:
        s.assert_and_track(axiom_formula(z, ax), z3.Bool(f"ax:{ax.name}", z.ctx))
    s.add(z3.Or([a != b for a, b in zip(lhs, rhs)]))
    if s.check() == z3.unsat:
        return "proven", sorted(str(c)[3:] for c in s.unsat_core())
    return "unknown", []


# ---------------------------------------------------------------------------------------
# Rules


@dataclass
class Verdict:
    """The verifier's answer for one rule."""

    status: str
    seconds: float
    counterexample: str | None = None
    axioms: list[str] = field(default_factory=list)


def numeric_check(rule: Rule, rng: np.random.Generator, trials: int = 2) -> str | None:
    """A counterexample (input shapes and max difference), or None if every check agreed."""
    g = rule.pair()
    n = len(rule.source)
    for shapes in rule.shapes:
        types = g.types(shapes)
        if types is None:
            return f"shape rules reject the shapes {shapes}"
        outs = [types[i][k] for i, k in g.outputs]
        for a, b in zip(outs[:n], outs[n:]):
            if a != b:
                return f"at shapes {_fmt(shapes)}: output types differ ({a.shape} {a.splits} vs {b.shape} {b.splits})"
        for _ in range(trials):
            env = {v: FloatRing.random(rng, s) for v, s in shapes.items()}
            vals, _types = g.evaluate(env, FloatRing)
            for i, (a, b) in enumerate(zip(vals[:n], vals[n:])):
                if not np.allclose(a, b, rtol=1e-9, atol=1e-9):
                    d = float(np.max(np.abs(a - b)))
                    return f"at shapes {_fmt(shapes)}: output {i} differs by up to {d:.3g}"
    return None


def _fmt(shapes: dict) -> str:
    return ", ".join(f"{k}{list(v)}" for k, v in shapes.items())


def verify_rule(
    rule: Rule, timeout_ms: int = 2000, seed: int = 0, axioms: list[Axiom] | None = None
) -> Verdict:
    """Numeric check, then z3 (see the module docstring); ops-vocabulary rules: prove.py."""
    t0 = time.perf_counter()
    if rule.vocabulary is not TERMS:
        v = prove_rule(rule, timeout_ms)
        return Verdict(v.status, time.perf_counter() - t0, v.detail or None)
    if not rule.shapes:
        return Verdict("unknown", 0.0, "the rule gives no shapes to check it on")
    cex = numeric_check(rule, np.random.default_rng(seed))
    if cex is not None:
        return Verdict("refuted", time.perf_counter() - t0, cex)
    status, used = z3_status(rule, timeout_ms, axioms)
    return Verdict(status, time.perf_counter() - t0, None, used)


def _verify_entry(task: tuple[dict, int, int]) -> Verdict:
    """A worker's job: one rule (as its JSON record, so its vocabulary is this process's) checked."""
    d, timeout_ms, seed = task
    return verify_rule(rule_from_json(d), timeout_ms=timeout_ms, seed=seed)


def default_jobs() -> int:
    """The worker count when none is given: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def verify_many(
    rules: list[Rule],
    timeout_ms: int = 2000,
    seed: int = 0,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[Verdict]:
    """Verdicts of `verify_rule` for every rule, in the rules' order, over `jobs` processes.

    Workers are spawned, not forked: each builds its own z3 context from scratch (a z3
    context is not safe to share across a fork), and a verdict depends only on its rule,
    timeout and seed, so the result is the sequential one whatever the worker count (up to
    rules whose proof time sits at the timeout, which z3 itself doesn't decide reproducibly).
    """
    jobs = default_jobs() if jobs is None else max(1, int(jobs))
    n = len(rules)
    if jobs == 1 or n < 2:
        for i, r in enumerate(rules):
            yield verify_rule(r, timeout_ms=timeout_ms, seed=seed)
            if progress:
                progress(i + 1, n)
        return
    tasks = [(r.to_json(), timeout_ms, seed) for r in rules]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(jobs, n)) as pool:
        for i, v in enumerate(pool.imap(_verify_entry, tasks, chunksize=1)):
            yield v
            if progress:
                progress(i + 1, n)


def z3_status(rule: Rule, timeout_ms: int = 2000, axioms: list[Axiom] | None = None) -> tuple[str, list[str]]:
    """The z3 half alone: ('proven', axioms used) or ('unknown', []) at the rule's first shapes."""
    g = rule.pair()
    types = g.types(rule.shapes[0])
    if types is None:
        return "unknown", []
    first = rule.shapes[0]
    z = Z3Env()
    env = {v: tensor_var(z, v, len(first[v])) for v in g.variables}
    outs = encode_graph(z, g, types, env)
    n = len(rule.source)
    return prove_equal(z, outs[:n], outs[n:], timeout_ms, axioms)


def apply_verdict(rule: Rule, v: Verdict) -> Rule:
    """The rule with its status and proof info set from a verdict."""
    rule.status = v.status
    rule.proof = {"seconds": round(v.seconds, 4), "axioms": v.axioms, "counterexample": v.counterexample}
    return rule


# ---------------------------------------------------------------------------------------
# Axioms themselves


def redundant_axioms(timeout_ms: int = 1000, axioms: list[Axiom] | None = None) -> list[str]:
    """Axioms that z3 proves from the others within the timeout (reported, not removed)."""
    axs = list(axioms if axioms is not None else AXIOMS)
    out = []
    for ax in axs:
        others = [a for a in axs if a is not ax]
        z = Z3Env()
        _, lhs, rhs = _sides(z, ax, "sk")
        if prove_equal(z, [lhs], [rhs], timeout_ms, others)[0] == "proven":
            out.append(ax.name)
    return out


def rule_from_pair(name: str, source: list[str], target: list[str], shapes: list[dict]) -> Rule:
    """A rule (status unknown) from source/target texts and the shapes to check it on."""
    g = parse_terms(source + target)
    first = shapes[0]
    inputs = {
        v: {"kind": "scalar" if first[v] == () else "tensor", "rank": len(first[v])} for v in g.variables
    }
    conds = [f"(rank {v} {i['rank']})" for v, i in inputs.items() if i["kind"] == "tensor"]
    conds += [f"(kind {v} f)" for v in inputs]
    types = g.types(first)
    if types is not None:
        # the proof used these group counts (the concat properties of conv need groups = 1)
        conds += [f"(groups {k})" for k in sorted(g.conv_groups(types))]
    return term_rule(name, inputs, list(source), list(target), conds, shapes)
