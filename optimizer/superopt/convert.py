"""Between lazygraph graphs and term graphs: "raise" recorded operators, "lower" terms into Q.

`from_nodes(roots)` turns the operators below some roots (ops Nodes or Q's QNodes) into a term
graph: every node the vocabulary recognizes becomes a term node, anything else (and every
leaf) becomes a variable `?v<i>` bound to that node. `from_graph(g, nodes)` does the same for
a region of Q and records what a pass must guard. `to_graph(g, tg, binding)` emits a term
graph into Q with `Graph.new` and returns the Q nodes of its outputs; the caller rewires
with `Graph.substitute`.

Recognized (raised): add/multiply of two same-shape arrays (add, mul), multiply by a 0-d
operand or Python scalar (smul), maximum(x, 0) (relu), matmul with a 2-D right operand,
concat of two operands, a view swapping the last two axes of its base (transpose), a view
cutting its base at the last concat boundary of an axis (split0/split1), conv2d without
bias and dilation (square stride, 'same' or 'valid' padding), pooling likewise, and a
symmetric zero pad of a kernel's window (enlarge).

Lowered: to the same lazygraph operators (conv2d, matmul, concat, pools, pad, add,
multiply, maximum with a 0-d zero from `full`); transposes, splits and constants run as
`superopt` steps (a constructor computing the term operator in the input's dtype). Shapes
and attributes of New nodes are the concrete ones, so `to_graph` guards the shapes of the
bound inputs: a cached transformation is replayed only on graphs of the same sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cache.graph import Graph, QNode
from cache.recipe import Recipe
from ops.base import is_weak_scalar
from optimizer.superopt.opset import OPS, TS, readings, view_cut
from optimizer.superopt.pseudo import SuperoptOp  # noqa: F401  (re-exported; registers superopt)
from optimizer.superopt.term import Ref, TermGraph


def _is_scalar(n: Any) -> bool:
    if isinstance(n, QNode):
        return n.scalar
    return is_weak_scalar(n)


def _raisable(n: Any) -> bool:
    """An operator application (leaves and non-operator steps of Q are variables)."""
    if isinstance(n, QNode):
        return not (n.leaf or n.op is None or (n.recipe is not None and n.recipe.ctor != "op"))
    return bool(n.inputs)


class _NodeSite:
    """A recorded or Q node as the vocabulary's raise rules read it (vocab.Site)."""

    def __init__(self, n: Any, value_of: Callable[[Any], Any], type_of: Callable[[Any], TS | None]) -> None:
        self.attrs, self.shape, self.dtype = n.attrs, tuple(n.shape), n.dtype
        self.args = list(n.inputs)
        self.value_of, self.type_of = value_of, type_of

    def shape_of(self, h: Any) -> tuple[int, ...]:
        return tuple(h.shape)

    def dtype_of(self, h: Any) -> np.dtype:
        return h.dtype

    def is_scalar(self, h: Any) -> bool:
        return _is_scalar(h)

    def is_zero(self, h: Any) -> bool:
        if not _is_scalar(h):
            return False
        v = self.value_of(h)
        return type(v) in (int, float) and v == 0

    def splits_of(self, h: Any) -> tuple[tuple[int, ...], ...] | None:
        t = self.type_of(h)
        return None if t is None else t.splits


def slice_of(n: Any) -> tuple[int, int, int] | None:
    """(axis, start, stop) if the view node is a contiguous-strided cut of its base along one axis."""
    return view_cut(tuple(n.inputs[0].shape), n.attrs["view"])


def from_nodes(
    roots: list[Any], value_of: Callable[[Any], Any], stop: Callable[[Any], bool] | None = None
) -> tuple[TermGraph, dict[str, Any], dict[int, Ref]]:
    """Term graph of the operators below `roots`; returns (graph, variable -> node, id(node) -> ref).

    `stop(node)` marks nodes to treat as variables even if recognized (region boundaries).
    """
    tg = TermGraph()
    binding: dict[str, Any] = {}
    refs: dict[int, Ref] = {}
    shapes: dict[str, tuple] = {}

    def variable(n: Any) -> Ref:
        name = f"?v{len(binding)}"
        binding[name] = n
        shapes[name] = tuple(n.shape)
        return tg.var(name)

    def typ(r: Ref) -> TS | None:
        t = tg.types(shapes)
        return None if t is None else t[r[0]][r[1]]

    order: list[Any] = []
    seen: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.append((n, True))
            if not (stop and stop(n)):
                stack.extend((c, False) for c in n.inputs)
    for n in order:
        r = None
        if _raisable(n) and not (stop and stop(n)) and all(id(c) in refs for c in n.inputs):
            site = _NodeSite(n, value_of, lambda h: typ(refs[id(h)]))
            for op, params, args, k in readings(n.op, site):
                cand = tg.apply(op, params, [refs[id(c)] for c in args])[k]
                if (t := typ(cand)) is not None and t.shape == tuple(n.shape):
                    r = cand
                    break  # else the vocabulary's shape rule disagrees: try the next reading
        refs[id(n)] = r if r is not None else variable(n)
    tg.outputs = [refs[id(r)] for r in roots]
    live = set(tg.variables)
    return tg, {v: n for v, n in binding.items() if v in live}, refs


def from_graph(g: Graph, roots: list[QNode], stop: Callable[[QNode], bool] | None = None) -> tuple:
    """`from_nodes` on Q; the values of the scalar leaves it read (relu's 0) are guarded."""
    read: list[QNode] = []

    def value(q: QNode) -> Any:
        read.append(q)
        return g.value(q)

    out = from_nodes(roots, value, stop)
    for q in read:
        if q.src >= 0 and type(g.value(q)) in (int, float) and g.value(q) == 0:
            g.guard(("eq", ("value", q.src), ("const", g.value(q))))
    return out


# ---------------------------------------------------------------------------------------
# Lowering


class NativeRing:
    """Real arithmetic in the operands' own dtype (what a lowered step computes)."""

    exact = False

    @staticmethod
    def norm(a: Any) -> np.ndarray:
        """No change."""
        return np.asarray(a)

    @staticmethod
    def relu(a: np.ndarray) -> np.ndarray:
        """The real relu, dtype kept."""
        return np.maximum(a, np.zeros((), dtype=a.dtype))

    @staticmethod
    def scale(a: np.ndarray, num: int, den: int) -> np.ndarray:
        """a * num / den."""
        return a * (num / den)


def build_superopt(recipe: Recipe, artifacts: dict) -> Callable:
    """A term operator as one step (transposes, splits, constants)."""
    d = recipe.data
    spec = OPS[str(d["op"])]
    params = tuple(d["params"])
    ins = [TS(tuple(s), tuple(tuple(p) for p in sp)) for s, sp in d["ins"]]
    outs = [TS(tuple(s), tuple(tuple(p) for p in sp)) for s, sp in d["outs"]]
    k = int(d["out"])
    dtype = np.dtype(recipe.dtype)

    def run(*xs: Any, **attrs: Any) -> np.ndarray:
        args = [np.asarray(x) for x in xs]
        if spec.constant:
            args = [np.zeros(t.shape, dtype=dtype) for t in ins]
        return np.ascontiguousarray(spec.compute(params, args, ins, outs, NativeRing)[k], dtype=dtype)

    return run


def _const(v: Any) -> tuple:
    return ("const", v)


def to_graph(g: Graph, tg: TermGraph, binding: dict[str, QNode], dtype: Any = None) -> list[QNode]:
    """Emit the live nodes of `tg` into Q (variables bound to Q nodes); the outputs' Q nodes."""
    shapes = {v: tuple(q.shape) for v, q in binding.items()}
    types = tg.types(shapes)
    if types is None:
        raise ValueError(f"superopt: term graph does not fit the bound shapes {shapes}")
    for q in binding.values():
        if not q.scalar:
            g.guard(("eq", g.shape_expr(q), _const(tuple(q.shape))))
    live = tg.live()
    made: dict[int, list[QNode]] = {}
    for i, n in enumerate(tg.nodes):
        if i not in live:
            continue
        if n.op == "var":
            made[i] = [binding[n.params[0]]]
            continue
        xs = [made[j][k] for j, k in n.args]
        ins = [types[j][k] for j, k in n.args]
        outs = types[i]
        dt = dtype or np.result_type(*[x.dtype for x in xs])
        spec = OPS[n.op]
        low = spec.lower(n.params, ins, outs) if spec.lower else None
        if low is not None or spec.activation is not None:
            if low is not None:
                op, attrs = low
                q = g.new(op, xs, {k: _const(v) for k, v in attrs.items()}, _const(outs[0].shape), dt)
            else:
                q = xs[0]
            if spec.activation is not None and spec.activation(n.params):
                q = _relu(g, q)
            made[i] = [q]
        else:
            data = {
                "op": n.op,
                "params": list(n.params),
                "ins": [[list(t.shape), [list(s) for s in t.splits]] for t in ins],
                "outs": [[list(t.shape), [list(s) for s in t.splits]] for t in outs],
            }
            args = [] if spec.constant else xs
            made[i] = [
                g.new("superopt", args, {}, _const(t.shape), dt, ctor="superopt", data={**data, "out": k})
                for k, t in enumerate(outs)
            ]
    return [made[i][k] for i, k in tg.outputs]


def _relu(g: Graph, x: QNode) -> QNode:
    zero = g.new(
        "full",
        [],
        {"shape": _const(()), "fill_value": _const(0), "dtype": ("dtype", x.dtype.str)},
        _const(()),
        x.dtype,
    )
    return g.new("maximum", [x, zero], {}, _const(x.shape), x.dtype)
