"""The substitution generator: enumerate small graphs, fingerprint them, pair equal ones.

Graphs are enumerated per *world* (a set of input variables with small fixed shapes and the
operators that make sense on them: matrices, convolutions). Terms are built bottom-up by
operator count from representatives only: a term whose exact-integer fingerprint (values
mod a prime on fixed random inputs, relu replaced by an integer polynomial, plus split
positions) equals an earlier term's is never extended further. Such a term and its
representative form a candidate; candidates are pruned when

- the target reads an input the source doesn't (it could not be built),
- source and target share an operator subterm (a smaller rule with a fresh input covers it),
- both end in the same operator with pairwise equal arguments (congruence of a smaller rule),
- an equal candidate up to renaming of inputs was already produced,
- the target computes an operand twice, (concat a t t), or brings in sub, where the source
  doesn't (pure extra work, `_expands`).

Multi-output candidates: for a term u whose value carries a concat boundary, if both parts
of split(u) equal representatives a and b, then (a, b) -> (split0 u, split1 u) is a candidate
(two matmuls sharing an input -> one matmul on concatenated weights; two convs -> one conv
on concatenated kernels). Every candidate is then checked numerically at the enumeration
shapes and at *generalized* shapes (all sizes mapped to larger ones, and random shapes on
which both sides type-check), and proven with z3 (verify.py). The shapes stored with a rule
are those instances; the rule applies wherever the shape rules accept both sides.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from optimizer.rewrite.rules import Rule
from optimizer.rewrite.sexpr import SExpr, parse, unparse
from optimizer.superopt.axioms import sample_shapes
from optimizer.superopt.opset import OPS, TS, IntRing, infer, plain
from optimizer.superopt.term import parse_terms
from optimizer.superopt.verify import apply_verdict, default_jobs, rule_from_pair, verify_many


@dataclass(frozen=True)
class World:
    """Input variables (name -> shape) and the operator applications (op, params) to try.

    `weights` names the inputs that are convolution kernels: a term mixes no data with
    weights, and conv2d takes data then weights (so kernels are never read as images).
    """

    name: str
    inputs: dict[str, tuple[int, ...]]
    ops: tuple[tuple[str, tuple], ...]
    weights: frozenset[str] = frozenset()

    def role(self, v: str) -> str:
        """'w' for a kernel input, 's' for a scalar, 'd' for data."""
        return "w" if v in self.weights else ("s" if not self.inputs[v] else "d")


def _apps(*names: str) -> tuple[tuple[str, tuple], ...]:
    """Each operator with every parameter combination its `OpSpec.choices` lists."""
    out = []
    for name in names:
        spec = OPS[name]
        for params in itertools.product(*(spec.choices[p] for p in spec.params)):
            out.append((name, tuple(params)))
    return tuple(out)


MATRIX_OPS = ("add", "mul", "smul", "matmul", "transpose", "relu", "concat", "split", "ident", "ones")
MATRIX_OPS += ("sub", "tanh", "sigmoid", "exp")  # the recurrent cells' and softmax's pieces
CONV_OPS = ("add", "smul", "relu", "conv2d", "concat", "split", "enlarge", "avg_pool2d", "max_pool2d")
CONV_OPS += ("pool_kernel", "conv_ident")

WORLDS = (
    World("matrix", {"?x": (3, 3), "?y": (3, 3), "?z": (3, 3), "?s": ()}, _apps(*MATRIX_OPS)),
    World(
        "conv",
        {
            "?x": (1, 2, 3, 3),
            "?y": (1, 2, 3, 3),
            "?w": (2, 2, 3, 3),
            "?v": (2, 2, 3, 3),
            "?u": (2, 2, 1, 1),
            "?s": (),
        },
        _apps(*CONV_OPS),
        frozenset({"?w", "?v", "?u"}),
    ),
)


def _role(op: str, roles: list[str]) -> str | None:
    """The role of an application's value, or None when it mixes data and weights."""
    if OPS[op].constant:
        return "w" if op in ("pool_kernel", "conv_ident") else roles[0]
    if op == "conv2d":
        return "d" if roles == ["d", "w"] else None
    if op == "smul":
        return roles[0] if roles[1] == "s" else None
    if op in ("avg_pool2d", "max_pool2d"):
        return "d" if roles == ["d"] else None
    if op == "enlarge":
        return "w" if roles == ["w"] else None
    kinds = {r for r in roles if r != "s"}
    if len(kinds) > 1:
        return None
    return kinds.pop() if kinds else "s"


@dataclass
class Term:
    """An enumerated term: text, operator count, type, exact values and fingerprint."""

    text: str
    size: int
    ts: TS
    val: np.ndarray | None
    fp: bytes
    vars: frozenset[str]
    subs: frozenset[str]  # texts of its operator subterms (itself included)
    head: tuple = ()  # (op, params, args' fingerprints)
    role: str = "d"  # data, weight or scalar (see World)


def _fingerprint(ts: TS, val: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((ts.shape, ts.splits)).encode())
    h.update(np.ascontiguousarray(val, dtype=np.int64).tobytes())
    return h.digest()


def _text(op: str, params: tuple, args: list[Term], out: int = 0) -> str:
    spec = OPS[op]
    name = spec.out_names[out] if spec.n_out > 1 else op
    return "(" + " ".join([name] + [str(p) for p in params] + [a.text for a in args]) + ")"


@dataclass
class Candidate:
    """A candidate substitution found by fingerprints."""

    source: list[str]
    target: list[str]
    shapes: dict[str, tuple[int, ...]]
    world: str


@dataclass
class Stats:
    """What the generator did, for the report."""

    terms: int = 0
    representatives: int = 0
    candidates: int = 0
    pruned: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def prune(self, why: str) -> None:
        """Count a pruned candidate."""
        self.pruned[why] = self.pruned.get(why, 0) + 1


def _rename(text: str, rename: dict[str, str]) -> str:
    toks = text.replace("(", "( ").replace(")", " )").split()
    return " ".join(rename.get(t, t) for t in toks).replace("( ", "(").replace(" )", ")")


def _canonical(source: list[str], target: list[str]) -> tuple[list[str], list[str], dict[str, str], str]:
    """Source and target with inputs renamed in order of first appearance, the renaming, the key."""
    rename = {v: f"?t{i}" for i, v in enumerate(_vars_in(source + target))}
    src, tgt = [_rename(t, rename) for t in source], [_rename(t, rename) for t in target]
    return src, tgt, rename, parse_terms(src + tgt).key()


def enumerate_world(
    world: World,
    max_ops: int,
    deadline: float,
    rng: np.random.Generator,
    stats: Stats,
    max_terms: int | None = None,
) -> Iterator[Candidate]:
    """Candidates of one world, smallest first, until max_ops, the deadline or `max_terms`
    terms (a count, unlike the deadline, stops at the same term on every machine)."""
    start = stats.terms
    env = {v: (IntRing.random(rng, s) if s else IntRing.random(rng, ())) for v, s in world.inputs.items()}
    reps: dict[bytes, Term] = {}
    by_size: dict[int, list[Term]] = {0: []}
    for v, s in world.inputs.items():
        t = Term(v, 0, plain(s), env[v], b"", frozenset([v]), frozenset(), (), world.role(v))
        t.fp = _fingerprint(t.ts, t.val)
        reps[t.fp] = t
        by_size[0].append(t)
    for size in range(1, max_ops + 1):
        by_size[size] = []
        for op, params in world.ops:
            spec = OPS[op]
            if spec.constant and size > 1:
                continue  # a constant only reads its argument's shape: inputs stand for every shape
            for args in _arg_tuples(by_size, size - 1, spec.arity, spec.commutative):
                if time.monotonic() > deadline or (
                    max_terms is not None and stats.terms - start >= max_terms
                ):
                    return
                if _ring_trivia(op, args):
                    continue
                role = _role(op, [a.role for a in args]) if world.weights else "d"
                if role is None:
                    continue
                outs = infer(op, params, [a.ts for a in args])
                if outs is None:
                    continue
                vals = spec.compute(params, [a.val for a in args], [a.ts for a in args], outs, IntRing)
                subs = frozenset().union(*(a.subs for a in args))
                for k, (ts, val) in enumerate(zip(outs, vals)):
                    stats.terms += 1
                    text = _text(op, params, args, k)
                    t = Term(
                        text,
                        size,
                        ts,
                        val,
                        _fingerprint(ts, val),
                        frozenset().union(*(a.vars for a in args)),
                        subs | {text},
                        (op, params, k, tuple(a.fp for a in args)),
                        role,
                    )
                    rep = reps.get(t.fp)
                    if rep is None:
                        reps[t.fp] = t
                        stats.representatives += 1
                        yield from _split_candidates(t, reps, world, stats)
                        if size < max_ops:
                            by_size[size].append(t)
                        else:
                            t.val = None  # never extended: keep memory for the last level small
                    else:
                        yield from _pair_candidates(t, rep, world, stats)


def _ring_trivia(op: str, args: list[Term]) -> bool:
    """x - x, and sub mixed with add or sub: identities of the ring (x - y = x + (y - (y + y)))
    that no graph has and that z3 has no axioms for (no zero, no negation): not enumerated."""
    if op == "sub" and args[0].fp == args[1].fp:
        return True
    if op not in ("add", "sub"):
        return False
    heads = {a.head[0] for a in args if a.head} & {"add", "sub"}
    return bool(heads) and "sub" in heads | {op}


def _arg_tuples(by_size: dict[int, list[Term]], total: int, arity: int, comm: bool) -> Iterator[list[Term]]:
    """Argument lists of representatives whose sizes sum to `total`."""
    if arity == 1:
        yield from ([t] for t in by_size.get(total, []))
        return
    for a_size in range(total + 1):
        b_size = total - a_size
        if comm and a_size > b_size:
            continue
        for a in by_size.get(a_size, []):
            for b in by_size.get(b_size, []):
                if comm and a_size == b_size and a.text > b.text:
                    continue
                yield [a, b]


def _pair_candidates(t: Term, rep: Term, world: World, stats: Stats) -> Iterator[Candidate]:
    """t == rep: the rule t -> rep (and rep -> t when that is a rule too), pruned."""
    if t.subs & rep.subs:
        stats.prune("common subterm")
        return
    if t.head and rep.head and t.head[:3] == rep.head[:3] and sorted(t.head[3]) == sorted(rep.head[3]):
        stats.prune("common last operator")
        return
    if not rep.vars <= t.vars:
        stats.prune("target needs more inputs")
        return
    shapes = {v: world.inputs[v] for v in t.vars}
    yield Candidate([t.text], [rep.text], shapes, world.name)
    if rep.size > 0 and rep.vars == t.vars:
        yield Candidate([rep.text], [t.text], shapes, world.name)


def _split_candidates(u: Term, reps: dict[bytes, Term], world: World, stats: Stats) -> Iterator[Candidate]:
    """(a, b) -> (split0 u, split1 u) when both parts of u equal representatives."""
    for axis in range(len(u.ts.shape)):
        outs = infer("split", (axis,), [u.ts])
        if outs is None:
            continue
        vals = OPS["split"].compute((axis,), [u.val], [u.ts], outs, IntRing)
        parts = [reps.get(_fingerprint(ts, v)) for ts, v in zip(outs, vals)]
        a, b = parts
        if a is None or b is None or a.size == 0 or b.size == 0 or a is b:
            continue
        if not u.vars <= (a.vars | b.vars) or not (a.vars & b.vars):
            stats.prune("multi-output: inputs")
            continue
        if (a.subs | b.subs) & u.subs:
            stats.prune("common subterm")
            continue
        shapes = {v: world.inputs[v] for v in a.vars | b.vars}
        yield Candidate(
            [a.text, b.text], [f"(split0 {axis} {u.text})", f"(split1 {axis} {u.text})"], shapes, world.name
        )


def generalized_shapes(rule: Rule, rng: np.random.Generator, want: int = 2) -> list[dict]:
    """Other shapes for which both sides type-check with the same output types."""
    base = rule.shapes[0]
    out: list[dict] = []

    def ok(shapes: dict) -> bool:
        return rule.applicable(shapes)

    for mapping in ({1: 1, 2: 4, 3: 5}, {1: 1, 2: 3, 3: 7}, {1: 2, 2: 3, 3: 4}):
        s = {v: tuple(mapping.get(d, d) for d in shp) for v, shp in base.items()}
        if s != base and s not in out and ok(s):
            out.append(s)
            if len(out) >= want:
                return out
    ranks = {v: len(s) for v, s in base.items()}
    for s in sample_shapes(rule.source + rule.target, ranks, rng, want * 3, tries=300):
        if s != base and s not in out and ok(s):
            out.append(s)
            if len(out) >= want:
                break
    return out


def generate(
    max_ops: int = 3,
    budget_s: float = 300.0,
    timeout_ms: int = 1000,
    seed: int = 0,
    worlds: tuple[World, ...] = WORLDS,
    progress: Callable[[int, int], None] | None = None,
    max_candidates: int = 3000,
    jobs: int | None = None,
    max_terms: int | None = None,
) -> tuple[list[Rule], dict]:
    """Generate and verify rules; returns (rules with statuses, a report with times and counts).

    `budget_s` bounds the enumeration (split evenly between worlds), and so does `max_terms`
    (terms per world, deterministic); at most `max_candidates` candidates (the smallest first)
    go to the verifier, each with a z3 budget of `timeout_ms` (resource units, see verify.py),
    over `jobs` processes (default: one per core).
    """
    rng = np.random.default_rng(seed)
    stats = Stats()
    t0 = time.monotonic()
    found: dict[str, Candidate] = {}
    share = budget_s / len(worlds)
    for i, w in enumerate(worlds):
        deadline = t0 + share * (i + 1)
        for c in enumerate_world(w, max_ops, deadline, rng, stats, max_terms):
            why = _expands(c)
            if why:
                stats.prune(why)
                continue
            src, tgt, rename, key = _canonical(c.source, c.target)
            if key in found:
                stats.prune("renaming duplicate")
                continue
            found[key] = Candidate(src, tgt, {rename[v]: s for v, s in c.shapes.items()}, c.world)
    cands = dict(list(_drop_redundant(found, stats).items())[:max_candidates])
    stats.candidates = len(cands)
    stats.seconds = time.monotonic() - t0
    t1 = time.monotonic()
    rules: list[Rule] = []
    for i, c in enumerate(cands.values()):
        rule = rule_from_pair(f"{c.world}-{i}", c.source, c.target, [c.shapes])
        rule.origin = "generated"
        rule.shapes += generalized_shapes(rule, rng)  # drawn here, in order: the same shapes for any jobs
        rules.append(rule)
    counts = {"proven": 0, "refuted": 0, "unknown": 0}
    for rule, v in zip(rules, verify_many(rules, timeout_ms, seed, jobs, progress)):
        counts[v.status] += 1
        apply_verdict(rule, v)
    report = {
        "generate_seconds": round(stats.seconds, 2),
        "verify_seconds": round(time.monotonic() - t1, 2),
        "terms": stats.terms,
        "representatives": stats.representatives,
        "candidates": stats.candidates,
        "pruned": stats.pruned,
        "status": counts,
        "max_ops": max_ops,
        "max_terms": max_terms,
        "timeout_ms": timeout_ms,
        "jobs": default_jobs() if jobs is None else jobs,
    }
    return rules, report


def _self_concat(text: str) -> bool:
    """Whether a term concatenates some value with itself, (concat a t t)."""

    def walk(e: SExpr) -> bool:
        if not isinstance(e, list):
            return False
        return (e[0] == "concat" and e[2] == e[3]) or any(walk(x) for x in e[1:])

    return walk(parse(text))


def _expands(c: Candidate) -> str | None:
    """Why a candidate only adds work that no search keeps (None: it may pay): a target that
    computes an operand twice, concat(t, t), where the source doesn't (x -> split0(f(concat
    x x)), 148 proven rules that matched every tanh, sigmoid and matmul of NasRNN), or one
    that brings a subtraction into a graph without any (x*y -> x*x + x*(y - x))."""
    if any(map(_self_concat, c.target)) and not any(map(_self_concat, c.source)):
        return "target duplicates an operand"
    if any("(sub " in t for t in c.target) and not any("(sub " in t for t in c.source):
        return "target brings in sub"
    return None


def _subterms(e: SExpr, out: set[str]) -> set[str]:
    if isinstance(e, list):
        out.add(unparse(e))
        for x in e[1:]:
            _subterms(x, out)
    return out


def _skeleton(texts: list[str]) -> tuple[str, list[str]]:
    toks = " | ".join(texts).replace("(", "( ").replace(")", " )").split()
    return " ".join("?" if t.startswith("?") else t for t in toks), [t for t in toks if t.startswith("?")]


def _instance(general: list[str], vs: list[str]) -> bool:
    """The token variables of a candidate are a (non-injective) image of the general one's."""
    m: dict[str, str] = {}
    return all(m.setdefault(a, b) == b for a, b in zip(general, vs))


def _drop_redundant(found: dict[str, Candidate], stats: Stats) -> dict[str, Candidate]:
    """Drop candidates implied by a more general kept one: an instance of it (inputs
    identified), or it with an operator subterm in place of an input."""

    def order(c: Candidate) -> tuple:
        ops = sum(t.count("(") for t in c.source)
        return (ops, -len(c.shapes))

    kept: dict[str, Candidate] = {}
    skeletons: dict[str, list[list[str]]] = {}
    for key, c in sorted(found.items(), key=lambda kv: order(kv[1])):
        texts = c.source + c.target
        sk, vs = _skeleton(texts)
        if any(_instance(g, vs) for g in skeletons.get(sk, [])):
            stats.prune("instance of a more general rule")
            continue
        subs: set[str] = set()
        for t in texts:
            _subterms(parse(t), subs)
        general = False
        for sub in subs:
            gen = [t.replace(sub, "?fresh") for t in texts]
            if any(g == "?fresh" for g in gen[: len(c.source)]):
                continue
            if _canonical(gen[: len(c.source)], gen[len(c.source) :])[3] in kept:
                general = True
                break
        if general:
            stats.prune("a subterm generalizes to a kept rule")
            continue
        kept[key] = c
        skeletons.setdefault(sk, []).append(vs)
    return kept


def _vars_in(texts: list[str]) -> list[str]:
    order: list[str] = []
    for t in texts:
        for tok in t.replace("(", " ").replace(")", " ").split():
            if tok.startswith("?") and tok not in order:
                order.append(tok)
    return order
