"""The graph optimization passes rewrite: Q, starting as a copy of P, with recovery info.

Every `QNode` either stands for a node of P (`src` is its slot: a Copy, whose operator and
attributes a replay re-reads from P') or was made by a pass with `Graph.new` (a New node:
its `recipe` says how to rebuild attributes and shape from P'). A New node may compute
several values at once (a fused region with several outputs): its value is the first, and
`Graph.output` makes a node standing for a further one (`output` = (index, shape expression),
its only input the New node). Nodes also carry P's concrete attributes, shape and dtype, so
passes see a real graph.

Rules for passes: decide from structure (operators, dtypes, ranks, unit extents: what the
key holds). A decision that reads a concrete size or value must be recorded with
`Graph.guard`, which every later hit rechecks. Rewire with `Graph.substitute`; never mutate
P's nodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cache.key import Walk, dtype_str, is_leaf_token
from cache.recipe import Expr, Recipe, compile_guard, eval_expr
from cache.tgraph import TransformationGraph
from ops.base import REGISTRY
from ops.node import Node, postorder


class PassError(RuntimeError):
    """A pass broke an invariant (changed a shape or dtype, or left a dangling input)."""


class QNode:
    """A node of Q: an operator application, a leaf of P, or a New node with a recipe."""

    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "src", "recipe", "leaf", "scalar", "output")

    def __init__(
        self,
        op: Any,
        inputs: list[QNode],
        attrs: dict,
        shape: tuple[int, ...],
        dtype: np.dtype,
        src: int = -1,
        recipe: Recipe | None = None,
        leaf: bool = False,
        scalar: bool = False,
    ) -> None:
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.src = src
        self.recipe = recipe
        self.leaf = leaf
        self.scalar = scalar  # a weak Python scalar leaf
        #: (j, shape expression) when this node is output j >= 1 of its only input's step
        self.output: tuple[int, Expr] | None = None

    @property
    def name(self) -> str:
        """Operator name for listings."""
        if self.leaf:
            return "scalar" if self.scalar else "buffer"
        if self.output is not None:
            return f"{self.inputs[0].name}[{self.output[0]}]"
        return self.recipe.label if self.recipe is not None else self.op.name

    @property
    def ndim(self) -> int:
        """Number of dimensions (shape rules read Q nodes like ops nodes)."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def buffer(self) -> Any:
        """What code reading ops nodes sees of a leaf's value: a weak scalar's stand-in, else None.

        A Python scalar's type is structure (the key holds its dtype); its value is data that a
        decision would need a guard for (`Graph.value`), so fusion and shape rules see 0 of it.
        """
        return _SCALAR_STANDIN.get(self.dtype.kind, 0) if self.scalar else None

    def __repr__(self) -> str:
        kind = f"P{self.src}" if self.src >= 0 else "new"
        return f"<QNode {self.name} {kind} {self.dtype}{list(self.shape)}>"


#: a weak scalar leaf's stand-in value by dtype kind (its Python type: bool, int, float, complex)
_SCALAR_STANDIN = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}

#: operator kinds cheap enough to compute for a held value alone (a pass over memory at most)
_CHEAP_KINDS = frozenset({"view", "movement", "elementwise", "reduction", "gather"})


class _Before:
    """A P node as it was before a run changed it: its operator, attributes and buffer then (a
    kept node became a leaf without attributes, a leaf written in place lost its buffer)."""

    __slots__ = ("node", "op", "attrs", "buffer")

    def __init__(self, node: Node, op: Any, attrs: dict, buffer: Any) -> None:
        self.node, self.op, self.attrs, self.buffer = node, op, attrs, buffer

    def __getattr__(self, name: str) -> Any:  # shape, dtype: unchanged by the run
        return getattr(self.node, name)


class Graph:
    """Q under construction: nodes (inputs first), outputs (one per root), P slot -> node."""

    def __init__(
        self,
        w: Walk,
        held: set[int] | frozenset = frozenset(),
        ops: list[tuple[Any, dict, Any]] | None = None,
    ) -> None:
        """Q = P. `ops`: each P node's (operator, attributes, buffer) taken before a run changed some
        (kept nodes turned leaves, leaves written in place) (the background's full optimization builds Q after that run, engine/tiered.py)."""
        self.pnodes: list[Node] = w.nodes
        #: what guards and recipe expressions read of P: its nodes as they were when `ops` was
        #: taken (a run since has turned kept nodes into leaves without attributes)
        self.enodes: list[Any] = (
            w.nodes
            if ops is None
            else [n if n.attrs is o[1] and n.buffer is o[2] else _Before(n, *o) for n, o in zip(w.nodes, ops)]
        )
        #: P slots whose values the evaluation memoizes (live arrays hold them): kept computed
        self.held = held
        self.tokens = w.tokens
        self.nodes: list[QNode] = []
        for p, (node, tok) in enumerate(zip(w.nodes, self.tokens)):
            if is_leaf_token(tok):
                q = QNode(None, [], {}, node.shape, node.dtype, p, leaf=True, scalar=tok[0] == "<S>")
            else:
                op, attrs = (node.op, node.attrs) if ops is None else ops[p][:2]
                q = QNode(op, [self.nodes[i] for i in tok[4]], attrs, node.shape, node.dtype, p)
            self.nodes.append(q)
        self.outputs: list[QNode] = [self.nodes[s] for s in w.roots]
        self.pmap: list[QNode | None] = list(self.nodes)
        self.guards: list[Expr] = []
        self._guard_set: set = set()
        self.fired: list[str] = []
        self.artifacts: dict = {}

    # -- what passes read ----------------------------------------------------------------

    def value(self, q: QNode) -> Any:
        """The value of a leaf on P (data: decisions on it need a guard)."""
        if not q.leaf:
            raise PassError(f"value() of a non-leaf node {q!r}")
        return self.enodes[q.src].buffer

    def shape_expr(self, q: QNode) -> Expr:
        """An expression giving q's shape on P'."""
        if q.src >= 0:
            return ("shape", q.src)
        return q.output[1] if q.output is not None else q.recipe.shape

    def attr_expr(self, q: QNode, name: str) -> Expr:
        """An expression giving q's attribute on P'."""
        if q.src >= 0:
            return ("attr", q.src, name)
        return q.recipe.attrs[name]

    def users(self) -> dict[int, int]:
        """How often each node (by id) is an input or an output."""
        counts: dict[int, int] = {}
        for n in self.nodes:
            for c in n.inputs:
                counts[id(c)] = counts.get(id(c), 0) + 1
        for o in self.outputs:
            counts[id(o)] = counts.get(id(o), 0) + 1
        return counts

    # -- what passes do ------------------------------------------------------------------

    def new(
        self,
        op: str | None,
        inputs: list[QNode],
        attrs: dict[str, Expr],
        shape: Expr,
        dtype: np.dtype,
        ctor: str = "op",
        data: Any = None,
    ) -> QNode:
        """A New node: `attrs` and `shape` are expressions over P's slots, rebuilt on P'."""
        recipe = Recipe(ctor, op, dict(attrs), shape, dtype_str(np.dtype(dtype)), data)
        concrete = {k: eval_expr(e, self.enodes) for k, e in attrs.items()}
        shp = tuple(eval_expr(shape, self.enodes))
        opdef = REGISTRY[op] if op is not None else None
        node = QNode(opdef, list(inputs), concrete, shp, np.dtype(dtype), -1, recipe)
        self.nodes.append(node)
        return node

    def output(self, first: QNode, j: int, shape: Expr, dtype: np.dtype) -> QNode:
        """The node standing for value j >= 1 of the multi-output New node `first`."""
        if first.recipe is None or j < 1:
            raise PassError(f"output {j} of {first!r}: only New nodes have further outputs")
        node = QNode(None, [first], {}, tuple(eval_expr(shape, self.enodes)), np.dtype(dtype))
        node.output = (j, shape)
        self.nodes.append(node)
        return node

    def guard(self, g: Expr) -> None:
        """Record a size- or value-dependent decision; it must hold on P now."""
        if not compile_guard(g)(self.enodes):
            raise PassError(f"guard {g!r} does not hold on the graph being optimized")
        try:
            new = g not in self._guard_set
            self._guard_set.add(g)
        except TypeError:  # an unhashable constant inside: compare with the list
            new = g not in self.guards
        if new:
            self.guards.append(g)

    def substitute(self, mapping: dict[int, QNode]) -> None:
        """Replace nodes (by id) everywhere: inputs, outputs and P's map; keeps inputs first."""

        def rep(n: QNode) -> QNode:
            seen = 0
            while id(n) in mapping:
                n = mapping[id(n)]
                seen += 1
                if seen > len(mapping):
                    raise PassError("substitution cycle")
            return n

        for n in self.nodes:
            if any(id(c) in mapping for c in n.inputs):
                n.inputs = [rep(c) for c in n.inputs]
        self.outputs = [rep(o) for o in self.outputs]
        self.pmap = [None if n is None else rep(n) for n in self.pmap]
        self.toposort()

    def toposort(self) -> None:
        """Order nodes inputs-first (replacements may sit later than their new consumers)."""
        self.nodes = postorder(self.nodes)

    @staticmethod
    def _reach(roots: list[QNode], live: set[int]) -> set[int]:
        """Add to `live` the ids of `roots` and everything they depend on."""
        stack = list(roots)
        while stack:
            n = stack.pop()
            if id(n) in live:
                continue
            live.add(id(n))
            stack.extend(n.inputs)
        return live

    def _roots_and_live(self) -> tuple[list[QNode], set[int]]:
        """The outputs and the held values the plan computes too, and the ids they depend on.

        A value a live array holds (a gradient, an intermediate the user kept) is memoized by
        the evaluation, so the plan computes it too. The exception is a storage's whole buffer
        (`users > 0`) that the outputs do not need and that is not one cheap step (a view, an
        elementwise or reduction step) from what they need: a gradient's product whose readers
        were rewritten to use its transposed product (computed, and held through the
        gradient's view), or a chain fold replaced by a memo step. Computing it would repeat
        that work; it stays unevaluated, as it was.
        """
        live = self._reach(self.outputs, set())
        pmap, pnodes = self.pmap, self.pnodes
        extra = []
        for p in sorted(self.held):
            q = pmap[p]
            if q is None or q.leaf:
                continue
            if id(q) in live or pnodes[p].users == 0:
                extra.append(q)
            elif (
                q.recipe is None
                and q.op is not None
                and q.op.kind in _CHEAP_KINDS
                and all(id(c) in live for c in q.inputs)
            ):
                extra.append(q)
        return [*self.outputs, *extra], self._reach(extra, live)

    def live_ids(self) -> set[int]:
        """ids of the nodes the outputs and computed held values depend on (`dce` drops the rest)."""
        return self._roots_and_live()[1]

    def remove_unreachable(self) -> int:
        """Drop nodes no output depends on; returns how many were dropped."""
        live = self.live_ids()
        before = len(self.nodes)
        self.nodes = [n for n in self.nodes if id(n) in live]
        self.pmap = [n if n is not None and id(n) in live else None for n in self.pmap]
        return before - len(self.nodes)

    # -- checks and the result -----------------------------------------------------------

    def check(self, who: str) -> None:
        """A pass must keep every P node's value: same shape and dtype, inputs present first."""
        index = {id(n): i for i, n in enumerate(self.nodes)}
        for i, n in enumerate(self.nodes):
            for c in n.inputs:
                j = index.get(id(c))
                if j is None or j >= i:
                    raise PassError(f"pass {who}: {n!r} reads {c!r}, which is not computed before it")
            if n.leaf and n.inputs:
                raise PassError(f"pass {who}: leaf {n!r} has inputs")
        for o in self.outputs:
            if id(o) not in index:
                raise PassError(f"pass {who}: output {o!r} was removed")
        for p, q in enumerate(self.pmap):
            if q is None:
                continue
            pn = self.pnodes[p]
            if q.shape != pn.shape or q.dtype != pn.dtype:
                raise PassError(
                    f"pass {who}: {pn.op.name} node {p} is now {q!r} "
                    f"({q.dtype}{list(q.shape)} instead of {pn.dtype}{list(pn.shape)})"
                )
            if q.scalar and self.tokens[p][0] != "<S>":
                raise PassError(f"pass {who}: array node {p} maps to a Python scalar")

    def finalize(self) -> TransformationGraph:
        """Q as a transformation graph: canonical order (from the outputs), recovery per node."""
        order: list[QNode] = []
        index: dict[int, int] = {}
        for root in self._roots_and_live()[0]:
            if id(root) in index:
                continue
            stack = [(root, iter(root.inputs))]
            index[id(root)] = -1
            while stack:
                node, it = stack[-1]
                for c in it:
                    if id(c) not in index:
                        index[id(c)] = -1
                        stack.append((c, iter(c.inputs)))
                        break
                else:
                    stack.pop()
                    index[id(node)] = len(order)
                    order.append(node)
        entries: list[tuple] = []
        for n in order:
            ins = tuple(map(index.__getitem__, map(id, n.inputs)))  # in C: no generator frame
            if n.leaf:
                entries.append(("leaf", n.src))
            elif n.output is not None:
                entries.append(("out", ins[0], n.output[0], n.output[1], dtype_str(n.dtype)))
            elif n.recipe is not None:
                entries.append(("new", n.recipe, ins))
            else:
                entries.append(("copy", n.src, ins))
        pmap = [-1 if q is None else index.get(id(q), -1) for q in self.pmap]
        steps = [i for i, e in enumerate(entries) if e[0] in ("copy", "new")]
        return TransformationGraph(
            entries, steps, pmap, list(self.guards), list(self.fired), len(self.pnodes), dict(self.artifacts)
        )

    def lines(self) -> list[str]:
        """Readable listing of Q, like `lg.explain`'s listing of P."""
        names = {id(n): f"%{i}" for i, n in enumerate(self.nodes)}
        out = []
        for n in self.nodes:
            ty = f"{n.dtype}[{','.join(map(str, n.shape))}]"
            origin = f"P{n.src}" if n.src >= 0 else "new"
            if n.leaf:
                out.append(f"{names[id(n)]} = {n.name} : {ty}  <- {origin}")
            else:
                args = ", ".join(names.get(id(c), "?") for c in n.inputs)
                out.append(f"{names[id(n)]} = {n.name}({args}) : {ty}  <- {origin}")
        out.append("return " + ", ".join(names.get(id(o), "?") for o in self.outputs))
        return out
