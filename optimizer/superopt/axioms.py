"""Operator axioms as data, and their numeric check on concrete tensors.

An axiom is an equation between two patterns of the vocabulary, universally quantified over
its tensor variables (`vars`: name -> rank, 0 = scalar) and its parameter variables
(`params`: name -> the values the numeric check tries; z3 quantifies over all integers).
Convolutions inside one axiom share a groups argument `?g` unless `groups` fixes it (the
concat properties of conv hold for groups = 1 only).

The list follows TASO's operator properties (docs/superopt.md gives the correspondence),
adapted to lazygraph's operators; the properties known to be wrong (concat associativity,
which contradicts split; relu idempotence as TASO wrote it; the grouped-conv concat property)
are left out. A wrong axiom would prove everything, so `check_axiom` evaluates both sides on
random float64 tensors of several shapes with the reference kernels for every parameter
choice, comparing values and split positions.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optimizer.rewrite.sexpr import SExpr, parse
from optimizer.superopt.opset import FloatRing
from optimizer.superopt.term import parse_terms


@dataclass
class Axiom:
    """One operator property: lhs = rhs for all variables (and parameters)."""

    name: str
    lhs: str
    rhs: str
    vars: dict[str, int]
    params: dict[str, tuple] = field(default_factory=dict)
    groups: int | None = None

    def instantiate(self, values: dict[str, Any]) -> tuple[SExpr, SExpr]:
        """Both sides with parameter variables replaced by these values."""

        def sub(e: SExpr) -> SExpr:
            if isinstance(e, list):
                return [sub(x) for x in e]
            return values.get(e, e) if isinstance(e, str) else e

        return sub(parse(self.lhs)), sub(parse(self.rhs))


def _ax(name: str, lhs: str, rhs: str, vars_: str, params: str = "", groups: int | None = None) -> Axiom:
    """Compact declaration: vars 'x:2 y:2 w:0', params 'a=0,1 s=1,2'."""
    v = {f"?{n}": int(r) for n, r in (t.split(":") for t in vars_.split())}
    p: dict[str, tuple] = {}
    for t in params.split():
        n, vals = t.split("=")
        p[f"?{n}"] = tuple(int(x) if x.lstrip("-").isdigit() else x for x in vals.split(","))
    return Axiom(name, lhs, rhs, v, p, groups)


_CONV = "s=1,2 p=same,valid c=none,relu"
_POOL = "k=1,3 s=1,2 p=same,valid"

AXIOMS: list[Axiom] = [
    _ax("add-assoc", "(add ?x (add ?y ?z))", "(add (add ?x ?y) ?z)", "x:2 y:2 z:2"),
    _ax("add-comm", "(add ?x ?y)", "(add ?y ?x)", "x:2 y:2"),
    _ax("mul-assoc", "(mul ?x (mul ?y ?z))", "(mul (mul ?x ?y) ?z)", "x:2 y:2 z:2"),
    _ax("mul-comm", "(mul ?x ?y)", "(mul ?y ?x)", "x:2 y:2"),
    _ax("mul-add-distrib", "(mul (add ?x ?y) ?z)", "(add (mul ?x ?z) (mul ?y ?z))", "x:2 y:2 z:2"),
    _ax("smul-assoc", "(smul (smul ?x ?y) ?w)", "(smul ?x (smul ?y ?w))", "x:2 y:0 w:0"),
    _ax("smul-add", "(smul (add ?x ?y) ?w)", "(add (smul ?x ?w) (smul ?y ?w))", "x:2 y:2 w:0"),
    _ax("smul-mul", "(smul (mul ?x ?y) ?w)", "(mul ?x (smul ?y ?w))", "x:2 y:2 w:0"),
    _ax("smul-transpose", "(smul (transpose ?x) ?w)", "(transpose (smul ?x ?w))", "x:2 w:0"),
    _ax("smul-matmul", "(smul (matmul ?x ?y) ?w)", "(matmul ?x (smul ?y ?w))", "x:2 y:2 w:0"),
    _ax(
        "smul-concat",
        "(smul (concat ?a ?x ?y) ?w)",
        "(concat ?a (smul ?x ?w) (smul ?y ?w))",
        "x:2 y:2 w:0",
        "a=0,1",
    ),
    _ax(
        "conv-smul-move",
        "(conv2d ?s ?p ?c (smul ?x ?w) ?y)",
        "(conv2d ?s ?p ?c ?x (smul ?y ?w))",
        "x:4 y:4 w:0",
        _CONV,
    ),
    _ax(
        "smul-conv",
        "(smul (conv2d ?s ?p none ?x ?y) ?w)",
        "(conv2d ?s ?p none (smul ?x ?w) ?y)",
        "x:4 y:4 w:0",
        "s=1,2 p=same,valid",
    ),
    _ax(
        "relu-conv-fuse",
        "(relu (conv2d ?s ?p none ?x ?y))",
        "(conv2d ?s ?p relu ?x ?y)",
        "x:4 y:4",
        "s=1,2 p=same,valid",
    ),
    _ax("relu-concat", "(relu (concat ?a ?x ?y))", "(concat ?a (relu ?x) (relu ?y))", "x:2 y:2", "a=0,1"),
    _ax("relu-transpose", "(relu (transpose ?x))", "(transpose (relu ?x))", "x:2"),
    _ax(
        "conv-add-weight",
        "(conv2d ?s ?p none ?x (add ?y ?z))",
        "(add (conv2d ?s ?p none ?x ?y) (conv2d ?s ?p none ?x ?z))",
        "x:4 y:4 z:4",
        "s=1,2 p=same,valid",
    ),
    _ax(
        "conv-add-input",
        "(conv2d ?s ?p none (add ?x ?y) ?z)",
        "(add (conv2d ?s ?p none ?x ?z) (conv2d ?s ?p none ?y ?z))",
        "x:4 y:4 z:4",
        "s=1,2 p=same,valid",
    ),
    _ax(
        "conv-sum-concat-channels",
        "(add (conv2d ?s ?p none ?x ?y) (conv2d ?s ?p none ?z ?w))",
        "(conv2d ?s ?p none (concat 1 ?x ?z) (concat 1 ?y ?w))",
        "x:4 y:4 z:4 w:4",
        "s=1,2 p=same,valid",
        groups=1,
    ),
    _ax(
        "matmul-sum-concat",
        "(add (matmul ?x ?y) (matmul ?z ?w))",
        "(matmul (concat 1 ?x ?z) (concat 0 ?y ?w))",
        "x:2 y:2 z:2 w:2",
    ),
    _ax(
        "add-concat",
        "(add (concat ?a ?x ?y) (concat ?a ?z ?w))",
        "(concat ?a (add ?x ?z) (add ?y ?w))",
        "x:2 y:2 z:2 w:2",
        "a=0,1",
    ),
    _ax(
        "mul-concat",
        "(mul (concat ?a ?x ?y) (concat ?a ?z ?w))",
        "(concat ?a (mul ?x ?z) (mul ?y ?w))",
        "x:2 y:2 z:2 w:2",
        "a=0,1",
    ),
    _ax(
        "conv-concat-batch",
        "(concat 0 (conv2d ?s ?p ?c ?x ?z) (conv2d ?s ?p ?c ?y ?z))",
        "(conv2d ?s ?p ?c (concat 0 ?x ?y) ?z)",
        "x:4 y:4 z:4",
        _CONV,
    ),
    _ax(
        "conv-concat-kernels",
        "(concat 1 (conv2d ?s ?p ?c ?x ?y) (conv2d ?s ?p ?c ?x ?z))",
        "(conv2d ?s ?p ?c ?x (concat 0 ?y ?z))",
        "x:4 y:4 z:4",
        _CONV,
        groups=1,
    ),
    _ax("matmul-assoc", "(matmul ?x (matmul ?y ?z))", "(matmul (matmul ?x ?y) ?z)", "x:2 y:2 z:2"),
    _ax("split0-concat", "(split0 ?a (concat ?a ?x ?y))", "?x", "x:2 y:2", "a=0,1"),
    _ax("split1-concat", "(split1 ?a (concat ?a ?x ?y))", "?y", "x:2 y:2", "a=0,1"),
    _ax(
        "matmul-concat-right",
        "(matmul ?x (concat 1 ?y ?z))",
        "(concat 1 (matmul ?x ?y) (matmul ?x ?z))",
        "x:2 y:2 z:2",
    ),
    _ax("matmul-add-right", "(matmul ?x (add ?y ?z))", "(add (matmul ?x ?y) (matmul ?x ?z))", "x:2 y:2 z:2"),
    _ax(
        "matmul-concat-left",
        "(matmul (concat 0 ?x ?y) ?z)",
        "(concat 0 (matmul ?x ?z) (matmul ?y ?z))",
        "x:2 y:2 z:2",
    ),
    _ax("transpose-twice", "(transpose (transpose ?x))", "?x", "x:2"),
    _ax(
        "transpose-matmul",
        "(transpose (matmul ?x ?y))",
        "(matmul (transpose ?y) (transpose ?x))",
        "x:2 y:2",
    ),
    _ax(
        "transpose-concat",
        "(transpose (concat 0 ?x ?y))",
        "(concat 1 (transpose ?x) (transpose ?y))",
        "x:2 y:2",
    ),
    _ax(
        "concat-grid",
        "(concat 0 (concat 1 ?x ?y) (concat 1 ?z ?w))",
        "(concat 1 (concat 0 ?x ?z) (concat 0 ?y ?w))",
        "x:2 y:2 z:2 w:2",
    ),
    _ax("transpose-add", "(transpose (add ?x ?y))", "(add (transpose ?x) (transpose ?y))", "x:2 y:2"),
    _ax("transpose-mul", "(transpose (mul ?x ?y))", "(mul (transpose ?x) (transpose ?y))", "x:2 y:2"),
    _ax(
        "avgpool-concat",
        "(concat ?a (avg_pool2d ?k ?s ?p ?x) (avg_pool2d ?k ?s ?p ?y))",
        "(avg_pool2d ?k ?s ?p (concat ?a ?x ?y))",
        "x:4 y:4",
        "a=0,1 " + _POOL,
    ),
    _ax(
        "maxpool-concat",
        "(concat ?a (max_pool2d ?k ?s ?p ?x) (max_pool2d ?k ?s ?p ?y))",
        "(max_pool2d ?k ?s ?p (concat ?a ?x ?y))",
        "x:4 y:4",
        "a=0,1 " + _POOL,
    ),
    _ax(
        "conv-pool-kernel",
        "(conv2d ?s ?p none ?x (pool_kernel ?k ?x))",
        "(avg_pool2d ?k ?s ?p ?x)",
        "x:4",
        _POOL,
    ),
    _ax("conv-identity-kernel", "(conv2d 1 ?p none ?x (conv_ident ?x))", "?x", "x:4", "p=same,valid"),
    _ax("matmul-identity", "(matmul ?x (ident ?x))", "?x", "x:2"),
    _ax("mul-ones", "(mul ?x (ones ?x))", "?x", "x:2"),
    _ax("avgpool-1x1", "(avg_pool2d 1 1 ?p ?x)", "?x", "x:4", "p=same,valid"),
    _ax(
        "conv-enlarge",
        "(conv2d ?s same ?c ?x ?y)",
        "(conv2d ?s same ?c ?x (enlarge ?k ?y))",
        "x:4 y:4",
        "s=1,2 c=none,relu k=3,5",
    ),
    # lemmas and properties beyond TASO's list
    _ax("identity-matmul", "(matmul (ident (transpose ?x)) ?x)", "?x", "x:2"),
    _ax("transpose-ident", "(transpose (ident ?x))", "(ident ?x)", "x:2"),
    _ax("relu-maxpool", "(relu (max_pool2d ?k ?s ?p ?x))", "(max_pool2d ?k ?s ?p (relu ?x))", "x:4", _POOL),
    _ax(
        "avgpool-add",
        "(avg_pool2d ?k ?s ?p (add ?x ?y))",
        "(add (avg_pool2d ?k ?s ?p ?x) (avg_pool2d ?k ?s ?p ?y))",
        "x:4 y:4",
        _POOL,
    ),
    _ax(
        "smul-avgpool",
        "(smul (avg_pool2d ?k ?s ?p ?x) ?w)",
        "(avg_pool2d ?k ?s ?p (smul ?x ?w))",
        "x:4 w:0",
        _POOL,
    ),
    _ax("smul-comm-scalars", "(smul ?x ?y)", "(smul ?y ?x)", "x:0 y:0"),
    # subtract (opset_elem.py): the inverse of add, and what add's distributivity gives it
    _ax("sub-add-cancel", "(add (sub ?x ?y) ?y)", "?x", "x:2 y:2"),
    _ax("add-sub-cancel", "(sub (add ?x ?y) ?y)", "?x", "x:2 y:2"),
    _ax("mul-sub-distrib", "(mul (sub ?x ?y) ?z)", "(sub (mul ?x ?z) (mul ?y ?z))", "x:2 y:2 z:2"),
    _ax("smul-sub", "(smul (sub ?x ?y) ?w)", "(sub (smul ?x ?w) (smul ?y ?w))", "x:2 y:2 w:0"),
    _ax("matmul-sub-right", "(matmul ?x (sub ?y ?z))", "(sub (matmul ?x ?y) (matmul ?x ?z))", "x:2 y:2 z:2"),
    _ax("transpose-sub", "(transpose (sub ?x ?y))", "(sub (transpose ?x) (transpose ?y))", "x:2 y:2"),
    _ax(
        "sub-concat",
        "(sub (concat ?a ?x ?y) (concat ?a ?z ?w))",
        "(concat ?a (sub ?x ?z) (sub ?y ?w))",
        "x:2 y:2 z:2 w:2",
        "a=0,1",
    ),
]
# tanh, sigmoid, exp (opset_elem.py): elementwise, so they commute with concat and transpose
for _f in ("tanh", "sigmoid", "exp"):
    AXIOMS += [
        _ax(
            f"{_f}-concat",
            f"({_f} (concat ?a ?x ?y))",
            f"(concat ?a ({_f} ?x) ({_f} ?y))",
            "x:2 y:2",
            "a=0,1",
        ),
        _ax(f"{_f}-transpose", f"({_f} (transpose ?x))", f"(transpose ({_f} ?x))", "x:2"),
    ]


# ---------------------------------------------------------------------------------------
# Numeric check


def sample_shapes(
    texts: list[SExpr],
    ranks: dict[str, int],
    rng: np.random.Generator,
    want: int,
    tries: int = 4000,
    groups: int | None = None,
) -> list[dict[str, tuple[int, ...]]]:
    """Up to `want` distinct variable shapes for which every pattern type-checks (and the
    convolutions have `groups` groups, when given)."""
    g = parse_terms(texts)
    found: list[dict[str, tuple[int, ...]]] = []
    seen: set = set()
    for t in range(tries):
        hi = 3 if t % 2 else 5
        shapes = {v: tuple(int(rng.integers(1, hi + 1)) for _ in range(r)) for v, r in ranks.items()}
        types = g.types(shapes)
        if types is None:
            continue
        outs = [types[i][k] for i, k in g.outputs]
        if len({o.shape for o in outs}) != 1:
            continue  # lhs and rhs must at least have the same shape (split stacks are compared later)
        if groups is not None and g.conv_groups(types) - {groups}:
            continue
        key = tuple(sorted(shapes.items()))
        if key not in seen:
            seen.add(key)
            found.append(shapes)
            if len(found) >= want:
                break
    return found


@dataclass
class CheckResult:
    """The outcome of a numeric check: how many instances ran, and the first mismatch."""

    instances: int
    failure: str | None


def check_equation(
    lhs: SExpr,
    rhs: SExpr,
    ranks: dict[str, int],
    rng: np.random.Generator,
    want: int = 3,
    groups: int | None = None,
) -> CheckResult:
    """Evaluate lhs and rhs on random float64 tensors of several shapes; the first mismatch."""
    g = parse_terms([lhs, rhs])
    n = 0
    for shapes in sample_shapes([lhs, rhs], ranks, rng, want, groups=groups):
        env = {v: FloatRing.random(rng, s) for v, s in shapes.items()}
        got = g.evaluate(env, FloatRing)
        if got is None:
            continue
        (a, b), (ta, tb) = got
        n += 1
        if ta != tb:
            return CheckResult(n, f"split positions differ at shapes {shapes}: {ta.splits} vs {tb.splits}")
        if not np.allclose(a, b, rtol=1e-9, atol=1e-9):
            return CheckResult(
                n, f"values differ at shapes {shapes}: max |diff| = {np.max(np.abs(a - b)):.3g}"
            )
    return CheckResult(n, None)


def check_axiom(ax: Axiom, seed: int = 0, want: int = 3) -> CheckResult:
    """The numeric check of one axiom for every parameter choice (failure names the choice)."""
    rng = np.random.default_rng(seed)
    total = 0
    names = list(ax.params)
    for combo in itertools.product(*(ax.params[n] for n in names)):
        values = dict(zip(names, combo))
        lhs, rhs = ax.instantiate(values)
        r = check_equation(lhs, rhs, ax.vars, rng, want, ax.groups)
        total += r.instances
        if r.failure:
            where = f" with {values}" if values else ""
            return CheckResult(total, f"axiom {ax.name}{where}: {r.failure}")
    if total == 0:
        return CheckResult(0, f"axiom {ax.name}: no shapes found on which both sides type-check")
    return CheckResult(total, None)
