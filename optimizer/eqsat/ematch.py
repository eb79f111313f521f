"""E-matching of the proven library's rules on the e-graph itself.

The library's rules are written in the term vocabulary (opset.py); the e-graph holds
lazygraph's operators. Each e-node is *raised* into the vocabulary once (the same raise rules
`adapt.TermMatcher` uses on concrete graphs, read through a `Site` whose arguments are
e-classes: a class's shape and dtype, whether it holds a Python scalar or a 0-d zero), and
the readings are indexed by (term operator, parameters, output). A rule's source is matched
top-down: a variable binds an e-class, an operator node tries every e-node of the class that
reads as it (both argument orders for commutative terms), and a shared subterm of the source
must be the same class wherever it occurs. A multi-output rule matches each source output on
its own and joins the matches on the variables and subterms they share (a hash join), roots
in distinct classes. So a rule matches every combination the e-graph represents, not only
the graphs a driver draws from it.

A match is checked exactly as the concrete matcher checks it (`TermMatcher.typed`: the
rule's conditions, `rank`, `kind`, `same_shape`, `groups`, and the source's and target's
types, split positions included, at the matched shapes), then the target is built by the
concrete matcher's own builder (`TermMatcher.build`) into a small `SGraph` whose leaves
stand for the matched classes: each operator goes through `SGraph.add`, that is the
operator's `infer`, so a target that does not type-check raises `RewriteError` and nothing
enters the e-graph. The built nodes are added as e-nodes over the matched classes and each
source output's class is united with its target's class when shapes and dtypes agree.

A ReLU recognized by its scalar's value (maximum(x, 0)) makes the pass guard that scalar:
the classes read that way are recorded in `EGraph.guard_classes`, which `graph_of` turns into
the value guards of the input's leaves in those classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ops.base import REGISTRY
from optimizer.eqsat.egraph import EGraph, leaf_key
from optimizer.rewrite.rules import Rule
from optimizer.superopt.adapt import TermMatcher, matcher_of
from optimizer.superopt.apply import RewriteError, SGraph, SNode
from optimizer.superopt.opset import OPS, readings

#: a reading: (term op, params, argument classes, output index, e-node, guarded scalar classes)
Reading = tuple[str, tuple, tuple[int, ...], int, int, frozenset]


class _ClassSite:
    """An e-node as the vocabulary's raise rules read it: its arguments are e-classes."""

    def __init__(self, eg: EGraph, n: SNode, children: tuple[int, ...]) -> None:
        self.eg, self.attrs, self.shape, self.dtype, self.args = eg, n.attrs, n.shape, n.dtype, list(children)

    def shape_of(self, h: int) -> tuple[int, ...]:
        return self.eg.rep(h).shape

    def dtype_of(self, h: int) -> Any:
        return self.eg.rep(h).dtype

    def is_scalar(self, h: int) -> bool:
        return any(self.eg.enodes[k].node.op == "scalar" for k in self.eg.nodes_of(h))

    def is_zero(self, h: int) -> bool:
        for k in self.eg.nodes_of(h):
            m = self.eg.enodes[k].node
            if m.leaf and m.shape == () and m.value is not None and m.value == 0:
                return True
        return False

    def splits_of(self, h: int) -> None:
        return None  # an e-class carries no split history (as a search-graph node)


def _guarded(eg: EGraph, idx: int) -> frozenset:
    """The scalar classes a reading of e-node idx compares by value (maximum(x, 0) is relu)."""
    n = eg.enodes[idx].node
    if n.op not in ("maximum", "minimum"):
        return frozenset()
    return frozenset(c for c in eg.children(idx) if eg.rep(c).leaf and eg.rep(c).shape == ())


class Index:
    """Readings of every e-node of one e-graph state, by class and by (op, params, output)."""

    def __init__(self, eg: EGraph) -> None:
        self.eg = eg
        self.sig = eg.version
        self.by_class: dict[int, list[Reading]] = {}
        self.by_head: dict[tuple, list[int]] = {}
        heads: dict[tuple, dict[int, None]] = {}
        base: dict[int, list[Reading]] = {}
        for c, idxs in eg.members.items():
            for idx in idxs:
                e = eg.enodes[idx]
                if e.node.leaf:
                    continue
                ch = eg.children(idx)
                ways = eg.raised.get(id(e))
                if ways is None or ways[0] is not e or ways[1] != ch:
                    got = readings(REGISTRY.get(e.node.op), _ClassSite(eg, e.node, ch))
                    ways = (e, ch, [(op, p, tuple(a), k) for op, p, a, k in got])
                    eg.raised[id(e)] = ways
                g = _guarded(eg, idx)
                base.setdefault(c, []).extend((op, p, a, k, idx, g) for op, p, a, k in ways[2])
        for c, rs in base.items():
            out = list(rs)
            for op, _p, a, _k, idx, g in rs:
                spec = OPS[op]
                if spec.activation is None or spec.lower is not None:
                    continue
                # relu over a class that reads as a term with an activation parameter:
                # conv2d ... relu (the same extension as adapt.raise_node)
                for op2, p2, a2, _k2, _i2, g2 in base.get(eg.find(a[0]), []):
                    if "activation" in OPS[op2].params:
                        out.append((op2, p2[:-1] + (op,), a2, 0, idx, g | g2))
            self.by_class[c] = out
            for r in out:
                heads.setdefault((r[0], r[1], r[3]), {})[c] = None
        self.by_head = {k: list(v) for k, v in heads.items()}


def index_of(eg: EGraph) -> Index:
    """The readings index of eg's current state (rebuilt when eg changed)."""
    got = getattr(eg, "_index", None)
    if got is None or got.sig != eg.version:
        got = Index(eg)
        eg._index = got  # type: ignore[attr-defined]
    return got


@dataclass
class Match:
    """One match: env maps variables and source subterms (`#node:output`) to classes."""

    env: dict[str, int]
    roots: tuple[int, ...]
    guards: frozenset


class EMatcher:
    """One library rule compiled for e-matching (source patterns over the term vocabulary)."""

    def __init__(self, rule: Rule) -> None:
        m = matcher_of(rule)
        if not isinstance(m, TermMatcher):
            raise ValueError(f"rule {rule.name}: not a term-vocabulary rule")
        self.rule, self.term = rule, m
        self.name = rule.name
        self.src = m.src
        #: operators the target adds beyond those the source matches (instantiation order)
        self.growth = m.dst.n_ops() - m.src.n_ops()
        self.heads = [(self.src.nodes[r[0]].op, self.src.nodes[r[0]].params, r[1]) for r in self.src.outputs]
        #: every (operator, parameters, output) the source reads: a rule one of them is absent
        #: from cannot match (checked against the index first: most of the library's 865 rules
        #: on a model that has none of their operators, such as convolutions in NasRNN)
        self.needs: frozenset = frozenset()
        refs, needs = list(self.src.outputs), set()
        while refs:
            i, out = refs.pop()
            t = self.src.nodes[i]
            if t.op != "var" and (t.op, t.params, out) not in needs:
                needs.add((t.op, t.params, out))
                refs.extend(t.args)
        self.needs = frozenset(needs)

    # -- matching ------------------------------------------------------------------------------

    def _match(self, ix: Index, ref: tuple[int, int], c: int, env: dict, guards: frozenset) -> Iterator:
        t = self.src.nodes[ref[0]]
        key = f"#{ref[0]}:{ref[1]}"
        if env.get(key, c) != c:
            return
        if t.op == "var":
            if env.get(t.params[0], c) == c:
                yield {**env, t.params[0]: c, key: c}, guards
            return
        for op, params, args, out, _idx, g in ix.by_class.get(c, ()):
            if op != t.op or params != t.params or out != ref[1] or len(args) != len(t.args):
                continue
            args = tuple(ix.eg.find(a) for a in args)
            orders = (
                [args, args[::-1]]
                if OPS[op].commutative and len(args) == 2 and args[0] != args[1]
                else [args]
            )
            for order in orders:
                envs = [({**env, key: c}, guards | g)]
                for r, a in zip(t.args, order):
                    envs = [x for e, gs in envs for x in self._match(ix, r, a, e, gs)]
                    if not envs:
                        break
                yield from envs

    def possible(self, ix: Index) -> bool:
        """Whether every operator the source reads is in the e-graph (else no match)."""
        return all(k in ix.by_head for k in self.needs)

    def exists(self, eg: EGraph, fresh: Callable[[Match], bool], tries: int = 32) -> bool:
        """Whether the rule has a match that `fresh` accepts (conditions and types checked)
        among its first `tries` candidates: what MCTS's pruning asks of every rule at every
        step. A one-output rule stops at the first such match instead of gathering matches
        and joining them."""
        ix = index_of(eg)
        if not self.possible(ix):
            return False
        if len(self.src.outputs) > 1:
            return any(fresh(m) for m in self.matches(eg, limit=tries))
        view, ref = _ClassNodes(eg), self.src.outputs[0]
        key = f"#{ref[0]}:{ref[1]}"
        for c in ix.by_head.get(self.heads[0], ()):
            for e, g in self._match(ix, ref, c, {}, frozenset()):
                if self.term.typed(view, e) and fresh(Match(e, (e[key],), g)):
                    return True
                tries -= 1
                if tries <= 0:
                    return False
        return False

    def matches(self, eg: EGraph, limit: int = 200) -> list[Match]:
        """Matches of the whole source (every output), at most `limit`, each output in its own class."""
        ix = index_of(eg)
        if not self.possible(ix):
            return []
        per: list[list[tuple[dict, frozenset]]] = []
        for ref, head in zip(self.src.outputs, self.heads):
            got = []
            for c in ix.by_head.get(head, ()):
                got.extend(self._match(ix, ref, c, {}, frozenset()))
                if len(got) > limit * 4:
                    break
            if not got:
                return []
            per.append([(e, g) for e, g in got])
        joined = [(e, g, (e[f"#{self.src.outputs[0][0]}:{self.src.outputs[0][1]}"],)) for e, g in per[0]]
        for k in range(1, len(per)):
            ref = self.src.outputs[k]
            rkey = f"#{ref[0]}:{ref[1]}"
            shared = sorted(set(joined[0][0]) & set(per[k][0][0])) if joined else []
            table: dict[tuple, list] = {}
            for e, g in per[k]:
                table.setdefault(tuple(e[s] for s in shared), []).append((e, g))
            nxt = []
            for e, g, roots in joined:
                for e2, g2 in table.get(tuple(e[s] for s in shared), ()):
                    if e2[rkey] in roots:
                        continue  # two source outputs in one class: not a multi-output match
                    nxt.append(({**e, **e2}, g | g2, (*roots, e2[rkey])))
                    if len(nxt) >= limit * 4:
                        break
            joined = nxt
        out = []
        view = _ClassNodes(eg)
        for e, g, roots in joined:
            if self.term.typed(view, e):  # conditions and types, as the concrete matcher checks
                out.append(Match(e, roots, g))
                if len(out) >= limit:
                    break
        return out

    # -- instantiation -------------------------------------------------------------------------

    def apply(self, eg: EGraph, m: Match) -> bool:
        """Build the target over the matched classes and union; True when eg changed."""
        g = SGraph()
        place: dict[int, int] = {}
        for c in dict.fromkeys((*m.env.values(), *m.roots)):
            rep = _leaf_for(eg, c)
            place[c] = g._put(rep)
        env = {k: place[c] for k, c in m.env.items()}
        try:
            made = self.term.build(g, env, tuple(place[c] for c in m.roots))
        except RewriteError:
            return False  # the target does not type-check at these shapes: nothing enters
        back = {i: c for c, i in place.items()}
        before = eg.version
        pending: list[tuple[int, int]] = []
        for c, i in zip(m.roots, made.values()):
            a, b = eg.rep(c), g.nodes[i]
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            pending.append((c, i))
        g.outputs = [i for _, i in pending]
        got: dict[int, int] = {}
        for i in g.topo() or []:
            if i in back:
                got[i] = eg.find(back[i])
                continue
            n = g.nodes[i]
            if n.leaf:
                got[i] = eg.add_node(n, (), leaf_key(g, i), self.name)
            else:
                got[i] = eg.add_node(n, tuple(got[x] for x in n.inputs), None, self.name)
        merged = False
        for c, i in pending:
            merged |= eg.union(c, got[i])
        if m.guards and (merged or eg.version != before):
            eg.guard_classes |= set(m.guards)
        if merged:
            eg.dirty = True
        return merged or eg.version != before


class _ClassNodes:
    """`sg.nodes[c]` for a class c: its representative e-node (what `typed` reads: shape, dtype)."""

    def __init__(self, eg: EGraph) -> None:
        self.nodes = _Reps(eg)


class _Reps:
    def __init__(self, eg: EGraph) -> None:
        self.eg = eg

    def __getitem__(self, c: int) -> SNode:
        return self.eg.rep(c)


def _leaf_for(eg: EGraph, c: int) -> SNode:
    """A leaf standing for class c in a target under construction: the class's scalar or
    constant when it has one (so `infer` sees a weak scalar and scalars fold), else an input."""
    for k in eg.nodes_of(c):
        n = eg.enodes[k].node
        if n.op in ("scalar", "const"):
            return SNode(n.op, (), {}, n.shape, n.dtype, -1, n.value)
    r = eg.rep(c)
    return SNode("input", (), {}, r.shape, r.dtype)


def ematchers(rules: list[Rule]) -> dict[str, EMatcher]:
    """The rules that e-match (term-vocabulary rules), by name; the others keep their matchers."""
    out: dict[str, EMatcher] = {}
    for r in rules:
        if r.matcher is not None:
            continue  # a structural rule (Python on shapes): matched on concrete graphs
        try:
            out[r.name] = r.derived("ematch", lambda r=r: EMatcher(r))
        except ValueError:
            continue
    return out


__all__ = ["EMatcher", "Index", "Match", "ematchers", "index_of"]
