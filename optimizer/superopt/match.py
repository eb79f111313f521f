"""How the search matches rules on its graphs (single- and multi-output), conditions, targets.

The search reads the optimizer's one rule record (`optimizer.rewrite.rules.Rule`); a
`Matcher` is the strategy that finds a rule's matches on an `SGraph`, with one interface,
`rewrites(ctx)`, which yields one rewritten `SGraph` per match:

- `PatternMatcher`: for rules in the ops vocabulary (patterns over lazygraph's operators,
  one per output, so two-output rules such as "two matmuls sharing an input" are one rule),
  conditions, target attributes computed from matched shapes; `pattern_rule` declares one.
  Rules in the term vocabulary (the verified library) get `adapt.TermMatcher`;
  `adapt.matcher_of(rule)` picks and caches the matcher of a rule.
- Structural matchers written in Python for the multi-output substitutions that need
  arithmetic on shapes that patterns cannot say (an enlarged kernel, slice bounds of a merged
  output): `MergeMatmul`, `MergeConv`, `HoistUnary`, `MatmulAddMerge`. Each is the `matcher`
  of a rule (`builtin_rules`) whose patterns state, in the term vocabulary, the two-way
  instance it generalizes, an equality TASO's generator finds and the verifier proves
  (tests/test_superopt_search.py proves them): matmul and conv are linear in their weight,
  so concatenating weights and splitting the output is exact; zero-padding a kernel by whole
  taps leaves the convolution unchanged when the padding of the input grows by the same
  amount; an elementwise op commutes with a split.

Every rewrite goes through `rewrite`: the target must give each replaced output the same
shape and dtype, the result must be acyclic (a multi-output match can create a cycle when
one source output feeds the other's inputs), and equal nodes are merged afterwards.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from optimizer.rewrite.rules import OPS, Rule, make_rule
from optimizer.rewrite.sexpr import parse
from optimizer.superopt.apply import RewriteError, SGraph
from optimizer.superopt.rulefile import term_rule

COMMUTATIVE = frozenset(("add", "multiply", "maximum", "minimum"))
UNARY = frozenset(("tanh", "sigmoid", "exp", "negative", "abs", "sqrt", "square", "erf", "log"))
_PAIRS = 3  # pairs are offered in groups of at most this many same-input consumers


class Context:
    """What rules read from a graph: live order, consumers, constant ids."""

    def __init__(self, sg: SGraph, order: list[int]) -> None:
        self.sg = sg
        self.order = order
        self.users = sg.consumers(order)
        self.by_op: dict[str, list[int]] = {}
        for i in order:
            self.by_op.setdefault(sg.nodes[i].op, []).append(i)


def rewrite(sg: SGraph, name: str, build: Callable[[SGraph], dict[int, int]]) -> SGraph | None:
    """Copy, build the target (old id -> new id), check types, redirect, reject cycles, CSE."""
    g = sg.copy()
    try:
        mapping = build(g)
    except RewriteError:
        return None
    if not mapping:
        return None
    for old, new in mapping.items():
        a, b = g.nodes[old], g.nodes[new]
        if a.shape != b.shape or a.dtype != b.dtype or old == new:
            return None
    g.redirect(mapping)
    order = g.topo()
    if order is None:
        return None
    g.prune()
    g.hashcons([i for i in order if i in g.nodes])
    g.applied.append(name)
    return g


class Matcher(ABC):
    """How the search finds one rule's matches: `roots` are the operators a match starts from."""

    name = "rule"
    roots: tuple[str, ...] = ()

    @abstractmethod
    def rewrites(self, ctx: Context) -> Iterator[SGraph]:
        """One rewritten graph per match."""


def _subsets(items: list[int], groups: list[list[int]]) -> Iterator[tuple[int, ...]]:
    """What a merge rule offers: every compatible group whole, its same-kind subgroups, and
    pairs among its first few members (TASO reaches a k-way merge by k-1 pairwise steps; the
    whole group is the same result in one step, which keeps the search short on wide models).
    """
    seen: set[tuple[int, ...]] = set()
    for grp in [items, *groups]:
        t = tuple(grp)
        if len(t) >= 2 and t not in seen:
            seen.add(t)
            yield t
    if len(items) > _PAIRS:
        return  # a wide group: its whole and its same-kind parts only (pairs would swamp the queue)
    for pair in itertools.combinations(items, 2):
        if pair not in seen:
            seen.add(pair)
            yield pair


def _split(g: SGraph, y: int, axis: int, members: tuple[int, ...], widths: list[int]) -> dict[int, int]:
    """Each member replaced by its piece of the merged output y."""
    g.focus = y
    out, start = {}, 0
    for m, w in zip(members, widths):
        out[m] = g.add("slice_axis", [y], {"axis": axis, "start": start, "stop": start + w})
        start += w
    return out


class MergeMatmul(Matcher):
    """matmul(x, W1), ..., matmul(x, Wk) -> split(matmul(x, concat(W1, ..., Wk, axis=1)))."""

    name = "merge-matmul"
    roots = ("matmul",)

    def rewrites(self, ctx: Context) -> Iterator[SGraph]:
        """Matmuls reading the same left operand with 2-D right operands."""
        sg = ctx.sg
        for x, users in ctx.users.items():
            mms: list[int] = []
            for u in dict.fromkeys(users):
                n = sg.nodes[u]
                if n.op == "matmul" and n.inputs[0] == x and n.inputs[1] != x:
                    if len(sg.nodes[n.inputs[1]].shape) == 2:
                        mms.append(u)
            for sub in _subsets(mms, []):
                yield from _with_hoist(rewrite(sg, self.name, lambda g, s=sub, x=x: self._build(g, x, s)))

    @staticmethod
    def _build(g: SGraph, x: int, members: tuple[int, ...]) -> dict[int, int]:
        ws = [g.nodes[m].inputs[1] for m in members]
        y = g.add("matmul", [x, g.add("concat", ws, {"axis": 1})])
        return _split(g, y, len(g.nodes[y].shape) - 1, members, [g.nodes[w].shape[1] for w in ws])


class MergeConv(Matcher):
    """conv(x, W1), ..., conv(x, Wk) -> split(conv(x, concat(enlarge(W1), ..., Wk))) (kernels centred)."""

    name = "merge-conv"
    roots = ("conv2d",)

    def rewrites(self, ctx: Context) -> Iterator[SGraph]:
        """Ungrouped convolutions of one input with the same stride, dilation and bias use."""
        sg = ctx.sg
        for x, users in ctx.users.items():
            kinds: dict[tuple, list[int]] = {}
            for u in dict.fromkeys(users):
                n = sg.nodes[u]
                if n.op == "conv2d" and n.inputs[0] == x and n.attrs.get("groups", 1) == 1:
                    key = (repr(n.attrs["stride"]), repr(n.attrs["dilation"]), len(n.inputs))
                    kinds.setdefault(key, []).append(u)
            for convs in kinds.values():
                same_kernel: dict[tuple, list[int]] = {}
                for u in convs:
                    n = sg.nodes[u]
                    shape = sg.nodes[n.inputs[1]].shape[2:]
                    same_kernel.setdefault((shape, repr(n.attrs["padding"])), []).append(u)
                for sub in _subsets(convs, list(same_kernel.values())):
                    g = rewrite(sg, self.name, lambda g, s=sub, x=x: self._build(g, x, s))
                    yield from _with_hoist(g)

    @staticmethod
    def _build(g: SGraph, x: int, members: tuple[int, ...]) -> dict[int, int]:
        nodes = [g.nodes[m] for m in members]
        ks = [g.nodes[n.inputs[1]].shape[2:] for n in nodes]
        big = (max(k[0] for k in ks), max(k[1] for k in ks))
        dil = nodes[0].attrs["dilation"]
        weights, pads = [], set()
        for n, k in zip(nodes, ks):
            grow = (big[0] - k[0], big[1] - k[1])
            if grow[0] % 2 or grow[1] % 2:
                raise RewriteError("kernels cannot be centred on each other")
            half = (grow[0] // 2, grow[1] // 2)
            w = n.inputs[1]
            if half != (0, 0):
                width = ((0, 0), (0, 0), (half[0], half[0]), (half[1], half[1]))
                w = g.add("pad", [w], {"pad_width": width, "mode": "constant", "constant_values": 0})
            weights.append(w)
            pads.add(tuple(n.attrs["padding"][d] + half[d] * dil[d] for d in range(2)))
        if len(pads) != 1:
            raise RewriteError("the convolutions would not line up")
        ins = [x, g.add("concat", weights, {"axis": 0})]
        if len(nodes[0].inputs) == 3:
            ins.append(g.add("concat", [n.inputs[2] for n in nodes], {"axis": 0}))
        attrs = {"stride": nodes[0].attrs["stride"], "padding": pads.pop(), "dilation": dil, "groups": 1}
        y = g.add("conv2d", ins, attrs)
        return _split(g, y, 1, members, [g.nodes[w].shape[0] for w in weights])


class HoistUnary(Matcher):
    """u(slice(y, p1)), u(slice(y, p2)) -> slice(u(y), p1), slice(u(y), p2) (ReLU, tanh, ...)."""

    name = "hoist-unary"
    roots = ("slice_axis",)

    def rewrites(self, ctx: Context) -> Iterator[SGraph]:
        """Slices of one array each read by the same elementwise op (ReLU: the same scalar)."""
        for y in ctx.users:
            yield from self.at(ctx.sg, y, ctx.users)

    def at(self, sg: SGraph, y: int, users: dict[int, list[int]]) -> Iterator[SGraph]:
        """The rewrites for the slices of one array y."""
        groups: dict[tuple, list[tuple[int, int]]] = {}
        for s in dict.fromkeys(users.get(y, [])):
            if sg.nodes[s].op != "slice_axis":
                continue
            for u in dict.fromkeys(users.get(s, [])):
                sig = self._signature(sg, u, s)
                if sig is not None:
                    groups.setdefault(sig, []).append((s, u))
        for members in groups.values():
            if len({s for s, _ in members}) >= 2:
                yield from _maybe(rewrite(sg, self.name, lambda g, y=y, m=members: self._build(g, y, m)))

    @staticmethod
    def _signature(sg: SGraph, u: int, s: int) -> tuple | None:
        n = sg.nodes[u]
        if n.op in UNARY and n.inputs == (s,):
            return (n.op,)
        if n.op in ("maximum", "minimum") and len(n.inputs) == 2 and s in n.inputs:
            other = sg.nodes[n.inputs[1] if n.inputs[0] == s else n.inputs[0]]
            if other.op == "scalar" and other.inputs == ():
                return (n.op, type(other.value).__name__, repr(other.value))
        return None

    @staticmethod
    def _build(g: SGraph, y: int, members: list[tuple[int, int]]) -> dict[int, int]:
        s0, u0 = members[0]
        n = g.nodes[u0]
        if len(n.inputs) == 2:
            scalar = n.inputs[1] if n.inputs[0] == s0 else n.inputs[0]
            for _, u in members:
                un = g.nodes[u]
                g.value_guards.add(un.inputs[1] if un.inputs[0] != scalar else un.inputs[0])
            g.value_guards.add(scalar)
            whole = g.add(n.op, [y, scalar])
        else:
            whole = g.add(n.op, [y])
        out = {}
        for s, u in members:
            out[u] = g.add("slice_axis", [whole], dict(g.nodes[s].attrs))
        return out


class MatmulAddMerge(Matcher):
    """matmul(x, A) + matmul(h, B) -> matmul(concat(x, h, axis=1), concat(A, B, axis=0))."""

    name = "matmul-add-merge"
    roots = ("matmul",)

    def rewrites(self, ctx: Context) -> Iterator[SGraph]:
        """Sums of two 2-D matmuls with the same number of rows and columns."""
        sg = ctx.sg
        for a in ctx.by_op.get("add", []):
            n = sg.nodes[a]
            if len(n.inputs) != 2 or n.inputs[0] == n.inputs[1]:
                continue
            p, q = (sg.nodes[i] for i in n.inputs)
            if p.op == q.op == "matmul" and all(len(sg.nodes[i].shape) == 2 for i in p.inputs + q.inputs):
                yield from _maybe(rewrite(sg, self.name, lambda g, a=a: self._build(g, a)))

    @staticmethod
    def _build(g: SGraph, a: int) -> dict[int, int]:
        p, q = (g.nodes[i] for i in g.nodes[a].inputs)
        x = g.add("concat", [p.inputs[0], q.inputs[0]], {"axis": 1})
        w = g.add("concat", [p.inputs[1], q.inputs[1]], {"axis": 0})
        return {a: g.add("matmul", [x, w])}


def _maybe(g: SGraph | None) -> Iterator[SGraph]:
    if g is not None:
        yield g


def _with_hoist(g: SGraph | None) -> Iterator[SGraph]:
    """A merge, and the merge with its pieces' common activation moved before the split.

    Merging alone loses the library step's fused ReLU (the ReLU now reads a slice), so it
    usually costs more than alpha allows; the compound rewrite (4 source operators, as
    TASO's larger substitutions) is what pays, so both are offered to the search.
    """
    if g is None:
        return
    yield g
    y = g.focus
    if y is None or y not in g.nodes:
        return
    users: dict[int, list[int]] = {}
    for i, n in g.nodes.items():  # readers of y, then readers of y's slices
        if y in n.inputs:
            users.setdefault(y, []).append(i)
    pieces = set(users.get(y, []))
    for i, n in g.nodes.items():
        for c in n.inputs:
            if c in pieces:
                users.setdefault(c, []).append(i)
    yield from HoistUnary().at(g, y, users)


_TWO = {"kind": "tensor", "rank": 2}
_IMG, _KER = {"kind": "tensor", "rank": 4}, {"kind": "tensor", "rank": 4}


def builtin_rules() -> list[Rule]:
    """The structural multi-output substitutions (see the module docstring): each a rule whose
    patterns state the instance its matcher generalizes, in the term vocabulary."""
    mm = ("(matmul ?x (concat 1 ?y ?z))",)
    cv = ("(conv2d 1 same none ?x (concat 0 ?w ?v))",)
    rl = ("(relu (concat 1 ?x ?y))",)
    declared = [
        (
            MergeMatmul(),
            {"?x": _TWO, "?y": _TWO, "?z": _TWO},
            ["(matmul ?x ?y)", "(matmul ?x ?z)"],
            [f"(split0 1 {mm[0]})", f"(split1 1 {mm[0]})"],
            {"?x": (2, 3), "?y": (3, 2), "?z": (3, 3)},
        ),
        (
            MergeConv(),
            {"?x": _IMG, "?w": _KER, "?v": _KER},
            ["(conv2d 1 same none ?x ?w)", "(conv2d 1 same none ?x ?v)"],
            [f"(split0 1 {cv[0]})", f"(split1 1 {cv[0]})"],
            {"?x": (1, 2, 3, 3), "?w": (2, 2, 3, 3), "?v": (3, 2, 3, 3)},
        ),
        (
            HoistUnary(),
            {"?x": _TWO, "?y": _TWO},
            ["(relu ?x)", "(relu ?y)"],
            [f"(split0 1 {rl[0]})", f"(split1 1 {rl[0]})"],
            {"?x": (2, 3), "?y": (2, 2)},
        ),
        (
            MatmulAddMerge(),
            {"?x": _TWO, "?a": _TWO, "?h": _TWO, "?b": _TWO},
            ["(add (matmul ?x ?a) (matmul ?h ?b))"],
            ["(matmul (concat 1 ?x ?h) (concat 0 ?a ?b))"],
            {"?x": (2, 3), "?a": (3, 4), "?h": (2, 2), "?b": (2, 4)},
        ),
    ]
    return [
        term_rule(m.name, inputs, src, dst, [], [shapes], matcher=m, origin="builtin")
        for m, inputs, src, dst, shapes in declared
    ]


# -- rules as data ------------------------------------------------------------------------------


#: the conditions PatternMatcher evaluates
PATTERN_CONDITIONS = frozenset(("rank", "same_shape", "kind", "scalar", "constant"))


class PatternMatcher(Matcher):
    """Matches an ops-vocabulary rule's source patterns (one per output) and builds its targets."""

    def __init__(self, rule: Rule) -> None:
        if rule.vocabulary is not OPS:
            raise ValueError(f"rule {rule.name}: patterns in the {rule.vocabulary.name} vocabulary")
        extra = {c[0] for c in rule.when} - PATTERN_CONDITIONS
        if extra:
            raise ValueError(f"rule {rule.name}: the search does not evaluate conditions {sorted(extra)}")
        self.name = rule.name
        self.src = [rule.derived(f"src{k}", lambda t=t: parse(t)) for k, t in enumerate(rule.source)]
        self.dst = [rule.derived(f"dst{k}", lambda t=t: parse(t)) for k, t in enumerate(rule.target)]
        self.when = rule.when
        self.roots = tuple(dict.fromkeys(p[0] for p in self.src if isinstance(p, list)))

    def rewrites(self, ctx: Context) -> Iterator[SGraph]:
        """Every match of all source patterns (distinct roots), conditions true."""
        if not all(isinstance(p, list) for p in self.src):
            return
        for env in self._match_all(ctx, 0, {}, ()):
            roots = env.pop("#roots")
            yield from _maybe(rewrite(ctx.sg, self.name, lambda g, e=env, r=roots: self._build(g, e, r)))

    def _match_all(self, ctx: Context, k: int, env: dict, roots: tuple) -> Iterator[dict]:
        if k == len(self.src):
            if _conditions(ctx.sg, self.when, env):
                yield {**env, "#roots": roots}
            return
        for i in ctx.by_op.get(self.src[k][0], []):
            if i in roots:
                continue
            for e in _match(ctx.sg, self.src[k], i, dict(env)):
                yield from self._match_all(ctx, k + 1, e, (*roots, i))

    def _build(self, g: SGraph, env: dict, roots: tuple) -> dict[int, int]:
        for name, i in env.items():
            if g.nodes[i].op == "scalar" and name.startswith("#c"):
                g.value_guards.add(i)
        return {r: _build_target(g, t, env) for r, t in zip(roots, self.dst)}


def pattern_rule(name: str, src: list[str] | str, dst: list[str] | str, when: list[str] = ()) -> Rule:
    """A data rule for the search: `src`/`dst` s-expressions over lazygraph's operators (lists
    for multi-output rules), `when` conditions (an ops-vocabulary `Rule`, validated).

    Patterns: `?x` any node (repeated: the same node), a number: a scalar of that value,
    `(op arg ... :attr value)`: an operator node (commutative ops in either order). Target
    attribute values: numbers, `(dim ?x axis)`, `(+ e e)`. Conditions: `(rank ?x n)`,
    `(same_shape ?a ?b)`, `(constant ?x)` (weights/scalars only), `(kind ?x f)`, `(scalar ?x)`.
    """
    srcs = [src] if isinstance(src, str) else list(src)
    dsts = [dst] if isinstance(dst, str) else list(dst)
    return make_rule(name, srcs, dsts, list(when), origin="search")


def _split_args(p: list) -> tuple[list, dict]:
    args, attrs, i = [], {}, 1
    while i < len(p):
        if isinstance(p[i], str) and p[i].startswith(":"):
            attrs[p[i][1:]] = p[i + 1]
            i += 2
        else:
            args.append(p[i])
            i += 1
    return args, attrs


def _match(sg: SGraph, pat: Any, i: int, env: dict) -> Iterator[dict]:
    n = sg.nodes[i]
    if isinstance(pat, str) and pat.startswith("?"):
        prev = env.get(pat)
        if prev is None:
            yield {**env, pat: i}
        elif prev == i:
            yield env
        return
    if isinstance(pat, (int, float)) and not isinstance(pat, bool):
        if n.op in ("scalar", "const") and n.shape == () and n.value == pat:
            yield {**env, f"#c{len(env)}": i}
        return
    if not isinstance(pat, list) or n.op != pat[0]:
        return
    args, attrs = _split_args(pat)
    if len(args) != len(n.inputs) or any(n.attrs.get(k) != v for k, v in attrs.items()):
        return
    orders = [n.inputs]
    if n.op in COMMUTATIVE and len(n.inputs) == 2:
        orders.append(n.inputs[::-1])
    for ins in orders:
        envs = [env]
        for p, c in zip(args, ins):
            envs = [e2 for e in envs for e2 in _match(sg, p, c, e)]
        yield from envs


def _conditions(sg: SGraph, when: list, env: dict) -> bool:
    order = None
    for c in when:
        what, a = c[0], sg.nodes[env[c[1]]]
        if what == "rank":
            ok = len(a.shape) == c[2]
        elif what == "same_shape":
            ok = a.shape == sg.nodes[env[c[2]]].shape
        elif what == "kind":
            ok = a.dtype.kind in str(c[2])
        elif what == "scalar":
            ok = a.op == "scalar"
        elif what == "constant":
            order = order if order is not None else sg.constant_ids(sg.topo() or [])
            ok = env[c[1]] in order
        else:
            raise ValueError(f"unknown condition {c!r}")
        if not ok:
            return False
    return True


def _attr_value(g: SGraph, v: Any, env: dict) -> Any:
    if isinstance(v, list) and v and v[0] == "dim":
        return g.nodes[env[v[1]]].shape[int(v[2])]
    if isinstance(v, list) and v and v[0] == "+":
        return sum(_attr_value(g, x, env) for x in v[1:])
    if isinstance(v, list):
        return tuple(_attr_value(g, x, env) for x in v)
    return v


def _build_target(g: SGraph, t: Any, env: dict) -> int:
    if isinstance(t, str) and t.startswith("?"):
        return env[t]
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return g.leaf("scalar", (), type(t), value=t)
    args, attrs = _split_args(t)
    ins = [_build_target(g, a, env) for a in args]
    return g.add(t[0], ins, {k: _attr_value(g, v, env) for k, v in attrs.items()})
