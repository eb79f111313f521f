"""Term-vocabulary rules matched on the search's graphs, and the matcher of any rule.

The library (optimizer/superopt/rules.json, see docs/superopt.md) writes rules over the term
vocabulary of opset.py (`add`, `smul`, `relu`, `conv2d 1 same relu`, `split0`, `enlarge`, ...).
The search works on lazygraph's operators, so a `TermMatcher` *raises* each search-graph node
into that vocabulary while matching (maximum(x, 0) is `relu`, a multiply by a 0-d operand is
`smul`, maximum(conv2d(x, w), 0) is `conv2d ... relu`, a slice is `split0`/`split1`, a
symmetric kernel pad is `enlarge`) and *lowers* the target with the vocabulary's own
`lower` (splits become slices at the boundary the target's types give, transposes views).

`matcher_of(rule)` is how the search reads a rule: the rule's own `matcher` (structural
rules), else a `TermMatcher` (term vocabulary) or a `match.PatternMatcher` (lazygraph's
operators), built once per rule. Only proven rules are loaded (`rulefile.proven_rules`). Rules the search cannot use are
skipped and counted in `SKIPPED`: sources that split a bare variable (the split position
lives in the value's history, which a search-graph node does not carry) and rules that build
shape-only constants (`ident`, `ones`, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from ops.base import REGISTRY
from ops.views import View, c_strides
from optimizer.rewrite.rules import Rule
from optimizer.superopt.apply import RewriteError, SGraph
from optimizer.superopt.match import Context, Matcher, PatternMatcher, rewrite
from optimizer.superopt.opset import OPS, TS, readings
from optimizer.superopt.rulefile import TERMS, proven_rules


def _heads(term: str) -> tuple[str, ...]:
    """The lazygraph operators a node matching `term` can have: those its record raises from,
    and for a term with an activation parameter (conv2d ... relu) those of the activation."""
    spec = OPS[term]
    heads = tuple(spec.raises)
    if "activation" in spec.params:
        heads += tuple(
            src for s in OPS.values() if s.activation is not None and s.lower is None for src in s.raises
        )
    return heads


#: term operator -> the lazygraph operators a node it matches can have (from the vocabulary)
HEADS = {name: _heads(name) for name in OPS}
#: why library rules were left out of the search (name -> reason), filled by `library_rules`
SKIPPED: dict[str, str] = {}


class _SearchSite:
    """Node i of a search graph as the vocabulary's raise rules read it (vocab.Site)."""

    def __init__(self, sg: SGraph, i: int) -> None:
        n = sg.nodes[i]
        self.sg, self.attrs, self.shape, self.dtype, self.args = sg, n.attrs, n.shape, n.dtype, list(n.inputs)

    def shape_of(self, h: int) -> tuple[int, ...]:
        return self.sg.nodes[h].shape

    def dtype_of(self, h: int) -> Any:
        return self.sg.nodes[h].dtype

    def is_scalar(self, h: int) -> bool:
        return self.sg.nodes[h].op == "scalar"  # the search graph's Python-scalar leaf kind

    def is_zero(self, h: int) -> bool:
        m = self.sg.nodes[h]
        return m.leaf and m.shape == () and m.value is not None and m.value == 0

    def splits_of(self, h: int) -> None:
        return None  # a search-graph node does not carry its value's split history


def raise_node(sg: SGraph, i: int) -> list[tuple[str, tuple, tuple[int, ...], int]]:
    """The ways node i reads in the term vocabulary: (op, params, argument ids, output index)."""
    n = sg.nodes[i]
    out = [(op, p, tuple(args), k) for op, p, args, k in readings(REGISTRY.get(n.op), _SearchSite(sg, i))]
    for op, _p, args, _k in list(out):
        spec = OPS[op]
        if spec.activation is not None and spec.lower is None:  # relu over a term that can absorb it
            out.extend(
                (op2, p2[:-1] + (op,), a2, 0)
                for op2, p2, a2, _ in raise_node(sg, args[0])
                if "activation" in OPS[op2].params
            )
    return out


def raised(ctx: Context) -> dict[tuple, list[int]]:
    """(term op, params, output) -> the nodes that read as it; per-node readings in ctx.raised.

    Computed once per explored graph and shared by every library rule.
    """
    index = getattr(ctx, "raise_index", None)
    if index is None:
        index = {}
        ctx.raised = {}
        for i in ctx.order:
            ways = ctx.raised[i] = raise_node(ctx.sg, i) if not ctx.sg.nodes[i].leaf else []
            for op, params, _, out in ways:
                index.setdefault((op, params, out), []).append(i)
        ctx.raise_index = index
    return index


class TermMatcher(Matcher):
    """A term-vocabulary rule matched and built on search graphs (see the module docstring)."""

    def __init__(self, rule: Rule) -> None:
        if rule.vocabulary is not TERMS:
            raise ValueError(f"rule {rule.name}: patterns in the {rule.vocabulary.name} vocabulary")
        self.rule = rule
        self.name = rule.name
        self.src, self.dst = rule.graphs()
        self.pair = rule.pair()
        self.conditions = rule.when
        heads = [self.src.nodes[r[0]].op for r in self.src.outputs]
        if any(h == "var" for h in heads):
            raise ValueError("a source output is a bare variable")
        self.roots = tuple(dict.fromkeys(op for h in heads for op in HEADS.get(h, ())))
        for n in self.dst.nodes:
            if n.op != "var" and OPS[n.op].constant:
                raise ValueError(f"the target builds the constant {n.op}")

    def rewrites(self, ctx: Context) -> Iterator[SGraph]:
        """Every match of the source outputs at distinct nodes whose types check."""
        index = raised(ctx)
        for ref in self.src.outputs:
            t = self.src.nodes[ref[0]]
            if not index.get((t.op, t.params, ref[1])):
                return  # some source output has no node to match here
        for env in self._roots(ctx, 0, {}, ()):
            roots = env.pop("#roots")
            yield from _maybe(rewrite(ctx.sg, self.name, lambda g, e=env, r=roots: self.build(g, e, r)))

    def _roots(self, ctx: Context, k: int, env: dict, roots: tuple) -> Iterator[dict]:
        if k == len(self.src.outputs):
            if self.typed(ctx.sg, env):
                yield {**env, "#roots": roots}
            return
        ref = self.src.outputs[k]
        t = self.src.nodes[ref[0]]
        for i in raised(ctx).get((t.op, t.params, ref[1]), []):
            if i not in roots:
                for e in self._match(ctx, ref, i, env):
                    yield from self._roots(ctx, k + 1, e, (*roots, i))

    def _match(self, ctx: Context, ref: tuple[int, int], i: int, env: dict) -> Iterator[dict]:
        t = self.src.nodes[ref[0]]
        key = f"#{ref[0]}:{ref[1]}"
        if env.get(key, i) != i:
            return
        if t.op == "var":
            if env.get(t.params[0], i) == i:
                yield {**env, t.params[0]: i, key: i}
            return
        for op, params, args, out in ctx.raised[i]:
            if op != t.op or params != t.params or out != ref[1] or len(args) != len(t.args):
                continue
            orders = [args, args[::-1]] if OPS[op].commutative and len(args) == 2 else [args]
            for order in orders:
                envs = [{**env, key: i}]
                for r, c in zip(t.args, order):
                    envs = [e2 for e in envs for e2 in self._match(ctx, r, c, e)]
                yield from envs

    def typed(self, sg: SGraph, env: dict) -> bool:
        """Conditions hold and the source's types (split positions too) are the matched shapes."""
        shapes = {v: sg.nodes[env[v]].shape for v in self.src.variables}
        pair = self.pair.types(shapes)
        if pair is None:
            return False
        for c in self.conditions:
            what = c[0]
            if what == "groups":  # every convolution of the rule has this many groups
                if self.pair.conv_groups(pair) - {c[1]}:
                    return False
                continue
            a = sg.nodes[env[c[1]]]
            if what == "rank" and len(a.shape) != int(c[2]):
                return False
            if what == "kind" and a.dtype.kind not in str(c[2]):
                return False
            if what == "same_shape" and a.shape != sg.nodes[env[c[2]]].shape:
                return False
        outs = [pair[i][k] for i, k in self.pair.outputs]
        n = len(self.src.outputs)
        if any(x != y for x, y in zip(outs[:n], outs[n:])):
            return False  # the target's types (split positions too) differ from the source's here
        types = self.src.types(shapes)
        if types is None:
            return False
        for key, i in env.items():
            if key.startswith("#") and key != "#roots":
                j, k = (int(p) for p in key[1:].split(":"))
                if types[j][k].shape != sg.nodes[i].shape:
                    return False
        return True

    def build(self, g: SGraph, env: dict, roots: tuple) -> dict[int, int]:
        """The target built into `g` for match `env` at `roots` (also the e-matcher's builder): old -> new ids."""
        for key, i in env.items():  # a ReLU was recognized by its scalar's value: guard it
            n = g.nodes[i]
            if key.startswith("#") and n.op == "maximum":
                g.value_guards.update(c for c in n.inputs if g.nodes[c].op == "scalar")
        shapes = {v: g.nodes[env[v]].shape for v in self.src.variables}
        types = self.dst.types(shapes)
        if types is None:
            raise RewriteError("the target does not type-check here")
        dtype = g.nodes[roots[0]].dtype
        made: dict[int, list[int]] = {}
        live = self.dst.live()
        for i, n in enumerate(self.dst.nodes):
            if i not in live:
                continue
            if n.op == "var":
                made[i] = [env[n.params[0]]]
                continue
            xs = [made[j][k] for j, k in n.args]
            made[i] = _lower(g, n.op, n.params, xs, [types[j][k] for j, k in n.args], types[i], dtype)
        return {r: made[j][k] for r, (j, k) in zip(roots, self.dst.outputs)}


def _relu(g: SGraph, x: int) -> int:
    return g.add("maximum", [x, g.leaf("const", (), g.nodes[x].dtype, value=0)])


def _lower(
    g: SGraph, op: str, params: tuple, xs: list[int], ins: list[TS], outs: list[TS], dtype: Any
) -> list[int]:
    """Search-graph nodes computing a term operator's outputs."""
    if op == "split":
        (ax,) = params
        top, full = ins[0].splits[ax][-1], ins[0].shape[ax]
        return [
            g.add("slice_axis", xs, {"axis": ax, "start": 0, "stop": top}),
            g.add("slice_axis", xs, {"axis": ax, "start": top, "stop": full}),
        ]
    if op == "transpose":
        shape = list(ins[0].shape)
        st = list(c_strides(tuple(shape)))
        shape[-1], shape[-2] = shape[-2], shape[-1]
        st[-1], st[-2] = st[-2], st[-1]
        return [g.add("view", xs, {"view": View(tuple(shape), tuple(st), 0)})]
    spec = OPS[op]
    low = spec.lower(params, ins, outs) if spec.lower else None
    if low is None and spec.activation is None:
        raise RewriteError(f"{op} has no lowering")
    x = g.add(low[0], xs, low[1]) if low is not None else xs[0]
    return [_relu(g, x) if spec.activation is not None and spec.activation(params) else x]


def _maybe(g: SGraph | None) -> Iterator[SGraph]:
    if g is not None:
        yield g


def matcher_of(rule: Rule) -> Matcher:
    """How the search matches a rule: its own matcher, else one built from its vocabulary (once)."""
    if rule.matcher is not None:
        return rule.matcher
    if rule.vocabulary is TERMS:
        return rule.derived("search", lambda: TermMatcher(rule))
    return rule.derived("search", lambda: PatternMatcher(rule))


def from_library(rules: list[Rule]) -> list[Rule]:
    """The search's copies of library rules (proven ones only, named `lib:<name>`, their matchers
    built); the others are listed in SKIPPED."""
    out: list[Rule] = []
    for r in rules:
        if r.status != "proven":
            SKIPPED[r.name] = f"status {r.status}"
            continue
        lib = dataclasses.replace(r, name=f"lib:{r.name}", origin=r.origin or "library", compiled={})
        try:
            matcher_of(lib)
        except (ValueError, KeyError) as e:
            SKIPPED[r.name] = str(e)
            continue
        out.append(lib)
    return out


def library_rules() -> list[Rule]:
    """The proven rules of the library file that the search can use."""
    return from_library(proven_rules())


__all__ = ["HEADS", "SKIPPED", "TermMatcher", "from_library", "library_rules", "matcher_of", "raise_node"]
