"""Term graphs: the superoptimizer's graphs (inputs, hash-consed operator nodes, outputs).

A `TermGraph` is a DAG over the vocabulary of opset.py. Node 0.. are `var` nodes (rule inputs,
by name) or applications `TNode(op, params, args)`; an argument or output is a `Ref`
(node index, output index): split has two outputs. Building is hash-consed, so a structure
appears once (shared subterms need no names: equal text is the same node), and commutative
operators order their arguments canonically.

Text form (the s-expressions of optimizer/rewrite/sexpr.py): `(op param ... arg ...)`, e.g.
`(matmul ?x (concat 1 ?y ?z))`, `(conv2d 1 same relu ?x ?w)`, `(split0 1 ?t)` / `(split1 1 ?t)`
for the two outputs of a split. Parameters come first, in the order `OpSpec.params` gives.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from optimizer.rewrite.sexpr import RuleSyntaxError, SExpr, is_var, parse, unparse
from optimizer.superopt.opset import OPS, PROJECTIONS, TS, WORDS, infer, plain

Ref = tuple[int, int]


class TNode(NamedTuple):
    """An operator application (or a `var`, whose params hold its name)."""

    op: str
    params: tuple
    args: tuple[Ref, ...]


class TermGraph:
    """A hash-consed DAG of term nodes with a list of outputs."""

    def __init__(self) -> None:
        self.nodes: list[TNode] = []
        self._index: dict[TNode, int] = {}
        self._text: list[str] = []  # per node, outputs' text with variables blanked (for ordering)
        self.outputs: list[Ref] = []

    # -- building --------------------------------------------------------------------------

    def _add(self, node: TNode) -> int:
        i = self._index.get(node)
        if i is None:
            i = len(self.nodes)
            self.nodes.append(node)
            self._index[node] = i
            self._text.append(self._render(node, blank=True))
        return i

    def var(self, name: str) -> Ref:
        """The input variable `name` (`?x`)."""
        return (self._add(TNode("var", (name,), ())), 0)

    def apply(self, op: str, params: Iterable[Any], args: Iterable[Ref]) -> tuple[Ref, ...]:
        """The outputs of op(params; args), reusing an equal node."""
        spec = OPS.get(op)
        if spec is None:
            raise RuleSyntaxError(f"unknown superopt operator {op!r}")
        params, args = tuple(params), tuple(args)
        if len(params) != len(spec.params) or len(args) != spec.arity:
            raise RuleSyntaxError(
                f"{op} takes {len(spec.params)} parameter(s) {spec.params} and {spec.arity} argument(s)"
            )
        for p in params:
            if not (isinstance(p, int) and not isinstance(p, bool)) and p not in WORDS:
                raise RuleSyntaxError(f"{op}: bad parameter {p!r}")
        if spec.commutative:
            args = tuple(sorted(args, key=lambda r: (self.text(r, blank=True), self.text(r))))
        i = self._add(TNode(op, params, args))
        return tuple((i, k) for k in range(spec.n_out))

    def apply1(self, op: str, params: Iterable[Any], args: Iterable[Ref]) -> Ref:
        """The only output of a single-output operator."""
        return self.apply(op, params, args)[0]

    # -- reading ---------------------------------------------------------------------------

    @property
    def variables(self) -> list[str]:
        """Names of the variables the outputs read, in order of creation."""
        live = self.live()
        return [n.params[0] for i, n in enumerate(self.nodes) if n.op == "var" and i in live]

    def op_nodes(self) -> list[int]:
        """Indices of the operator (non-variable) nodes."""
        return [i for i, n in enumerate(self.nodes) if n.op != "var"]

    def live(self) -> set[int]:
        """Node indices reachable from the outputs."""
        seen: set[int] = set()
        stack = [r[0] for r in self.outputs]
        while stack:
            i = stack.pop()
            if i not in seen:
                seen.add(i)
                stack.extend(a[0] for a in self.nodes[i].args)
        return seen

    def _render(self, node: TNode, blank: bool) -> str:
        if node.op == "var":
            return "?" if blank else node.params[0]
        spec = OPS[node.op]
        parts = [str(p) for p in node.params] + [self.text(a, blank) for a in node.args]
        name = spec.out_names[0] if spec.n_out > 1 else node.op
        return "(" + " ".join([name] + parts) + ")"

    def text(self, ref: Ref, blank: bool = False) -> str:
        """The s-expression of one value (shared subterms written out)."""
        i, k = ref
        node = self.nodes[i]
        if blank and k == 0 and i < len(self._text):
            return self._text[i]
        s = self._render(node, blank)
        if k:
            s = "(" + OPS[node.op].out_names[k] + s[len(OPS[node.op].out_names[0]) + 1 :]
        return s

    def texts(self) -> list[str]:
        """The outputs as s-expressions."""
        return [self.text(r) for r in self.outputs]

    def key(self) -> str:
        """Canonical text: outputs with variables renamed in order of first appearance."""
        rename: dict[str, str] = {}

        def walk(r: Ref) -> str:
            n = self.nodes[r[0]]
            if n.op == "var":
                return rename.setdefault(n.params[0], f"?{len(rename)}")
            spec = OPS[n.op]
            name = spec.out_names[r[1]] if spec.n_out > 1 else n.op
            return "(" + " ".join([name] + [str(p) for p in n.params] + [walk(a) for a in n.args]) + ")"

        return " | ".join(walk(r) for r in self.outputs)

    def n_ops(self) -> int:
        """Operator nodes reachable from the outputs (constants count)."""
        return sum(1 for i in self.live() if self.nodes[i].op != "var")

    # -- types and values --------------------------------------------------------------------

    def types(self, shapes: dict[str, tuple[int, ...]]) -> list[list[TS]] | None:
        """Per node, its output types for these variable shapes, or None if a shape rule fails."""
        out: list[list[TS]] = []
        for n in self.nodes:
            if n.op == "var":
                if n.params[0] not in shapes:
                    return None
                out.append([plain(shapes[n.params[0]])])
                continue
            t = infer(n.op, n.params, [out[i][k] for i, k in n.args])
            if t is None:
                return None
            out.append(t)
        return out

    def conv_groups(self, types: list[list[TS]]) -> set[int]:
        """The group counts of the live convolutions at these types (groups = C_in / w.shape[1])."""
        live = self.live()
        return {
            types[n.args[0][0]][n.args[0][1]].shape[1] // types[n.args[1][0]][n.args[1][1]].shape[1]
            for i, n in enumerate(self.nodes)
            if n.op == "conv2d" and i in live
        }

    def evaluate(self, env: dict[str, np.ndarray], ring: Any) -> tuple[list[np.ndarray], list[TS]] | None:
        """Output values and types on these inputs (None if the shapes don't fit)."""
        types = self.types({k: np.shape(v) for k, v in env.items()})
        if types is None:
            return None
        vals: list[list[np.ndarray]] = []
        live = self.live()
        for i, n in enumerate(self.nodes):
            if i not in live:
                vals.append([])
            elif n.op == "var":
                vals.append([env[n.params[0]]])
            else:
                xs = [vals[j][k] for j, k in n.args]
                ins = [types[j][k] for j, k in n.args]
                vals.append(OPS[n.op].compute(n.params, xs, ins, types[i], ring))
        return [vals[i][k] for i, k in self.outputs], [types[i][k] for i, k in self.outputs]


def _build(g: TermGraph, e: SExpr) -> Ref:
    if is_var(e):
        return g.var(e)
    if not isinstance(e, list) or not e or not isinstance(e[0], str):
        raise RuleSyntaxError(f"expected a variable or (op ...), got {unparse(e)}")
    name, out = e[0], 0
    if name in PROJECTIONS:
        name, out = PROJECTIONS[name]
    elif name in OPS and OPS[name].n_out > 1:
        raise RuleSyntaxError(f"{name} has several outputs: write {' or '.join(OPS[name].out_names)}")
    spec = OPS.get(name)
    if spec is None:
        raise RuleSyntaxError(f"unknown superopt operator {e[0]!r}")
    np_ = len(spec.params)
    params, args = e[1 : 1 + np_], e[1 + np_ :]
    return g.apply(name, params, [_build(g, a) for a in args])[out]


def parse_terms(texts: Iterable[str | SExpr], graph: TermGraph | None = None) -> TermGraph:
    """A term graph whose outputs are these s-expressions (text or parsed)."""
    g = graph if graph is not None else TermGraph()
    for t in texts:
        g.outputs.append(_build(g, parse(t) if isinstance(t, str) else t))
    return g
