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
from cache.recipe import Recipe, register_constructor
from ops.base import REGISTRY, Op, register
from ops.views import c_strides
from optimizer.superopt.opset import OPS, TS
from optimizer.superopt.term import Ref, TermGraph


def _is_scalar(n: Any) -> bool:
    if isinstance(n, QNode):
        return n.scalar
    return n.op is not None and n.op.name == "scalar"


def _opname(n: Any) -> str | None:
    if isinstance(n, QNode):
        if n.leaf or n.op is None or (n.recipe is not None and n.recipe.ctor != "op"):
            return None
    elif not n.inputs and n.op.name in ("buffer", "scalar"):
        return None
    return n.op.name


def _pad_word(padding: Any, k: tuple[int, int]) -> str | None:
    p = tuple(padding)
    if p == (0, 0):
        return "valid"
    if k[0] % 2 and k[1] % 2 and p == (k[0] // 2, k[1] // 2):
        return "same"
    return None


def _raise_one(n: Any, name: str, value_of: Callable[[Any], Any]) -> tuple[str, tuple, list] | None:
    """(op, params, inputs) of a recognized node (split handled by the caller), else None."""
    ins, a = list(n.inputs), n.attrs
    if name in ("add", "multiply") and len(ins) == 2:
        x, y = ins
        if x.shape == y.shape == n.shape and n.shape and not _is_scalar(x) and not _is_scalar(y):
            return ("add" if name == "add" else "mul"), (), ins
        if name == "multiply":
            for t, s in ((x, y), (y, x)):
                if t.shape == n.shape and n.shape and s.shape == () and t.dtype == n.dtype:
                    return "smul", (), [t, s]
        return None
    if name == "maximum" and len(ins) == 2:
        for t, s in ins, ins[::-1]:
            if _is_scalar(s) and t.shape == n.shape and t.dtype == n.dtype:
                v = value_of(s)
                if type(v) in (int, float) and v == 0:
                    return "relu", (), [t]
        return None
    if name == "matmul" and len(ins) == 2 and len(ins[1].shape) == 2 and len(ins[0].shape) >= 2:
        return "matmul", (), ins
    if name == "concat" and len(ins) == 2:
        return "concat", (a["axis"],), ins
    if name == "conv2d" and len(ins) == 2 and tuple(a["dilation"]) == (1, 1):
        s = tuple(a["stride"])
        pad = _pad_word(a["padding"], ins[1].shape[2:])
        if s[0] == s[1] and pad is not None:
            return "conv2d", (s[0], pad, "none"), ins
        return None
    if name in ("avg_pool2d", "max_pool2d"):
        k, s = tuple(a["kernel_size"]), tuple(a["stride"])
        pad = _pad_word(a["padding"], k)
        if name == "avg_pool2d" and not a.get("count_include_pad", True):
            return None
        if name == "max_pool2d" and tuple(a.get("dilation", (1, 1))) != (1, 1):
            return None
        if k[0] == k[1] and s[0] == s[1] and pad is not None:
            return name, (k[0], s[0], pad), ins
        return None
    if name == "pad" and a.get("mode") == "constant" and len(n.shape) == 4:
        w = tuple(tuple(p) for p in a["pad_width"])
        cv = a.get("constant_values", 0)
        if w[:2] == ((0, 0), (0, 0)) and w[2][0] == w[2][1] and w[3][0] == w[3][1] and cv == 0:
            if n.shape[2] == n.shape[3]:
                return "enlarge", (n.shape[2],), ins
        return None
    if name == "view" and len(ins) == 1:
        base, v = ins[0], a["view"]
        bs = tuple(base.shape)
        if len(bs) >= 2 and v.offset == 0:
            st = list(c_strides(bs))
            st[-1], st[-2] = st[-2], st[-1]
            sh = list(bs)
            sh[-1], sh[-2] = sh[-2], sh[-1]
            if tuple(v.shape) == tuple(sh) and tuple(v.strides) == tuple(st):
                return "transpose", (), ins
    return None


def slice_of(n: Any) -> tuple[int, int, int] | None:
    """(axis, start, stop) if the view is a contiguous-strided cut of its base along one axis."""
    base, v = n.inputs[0], n.attrs["view"]
    bs = tuple(base.shape)
    if len(v.shape) != len(bs) or tuple(v.strides) != c_strides(bs):
        return None
    diff = [k for k, (d, e) in enumerate(zip(v.shape, bs)) if d != e]
    if len(diff) != 1:
        return None
    ax = diff[0]
    step = c_strides(bs)[ax]
    if step == 0 or v.offset % step:
        return None
    start = v.offset // step
    return ax, start, start + v.shape[ax]


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
        name = _opname(n)
        r = None
        if name is not None and not (stop and stop(n)) and all(id(c) in refs for c in n.inputs):
            if name == "view" and len(n.inputs) == 1:
                cut = slice_of(n)
                t = typ(refs[id(n.inputs[0])]) if cut else None
                if cut and t is not None and t.splits[cut[0]]:
                    ax, start, stop_ = cut
                    top = t.splits[ax][-1]
                    parts = tg.apply("split", (ax,), [refs[id(n.inputs[0])]])
                    if (start, stop_) == (0, top):
                        r = parts[0]
                    elif (start, stop_) == (top, t.shape[ax]):
                        r = parts[1]
            if r is None:
                got = _raise_one(n, name, value_of)
                if got is not None:
                    op, params, ins = got
                    r = tg.apply1(op, params, [refs[id(c)] for c in ins])
                    if (t := typ(r)) is None or t.shape != tuple(n.shape):
                        r = None  # the vocabulary's shape rule disagrees: keep it opaque
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


class SuperoptOp(Op):
    """The operator of `superopt` steps (made by to_graph, never recorded)."""

    def __init__(self) -> None:
        super().__init__("superopt")

    def infer(self, inputs: tuple, attrs: dict) -> tuple:
        """Never recorded by users."""
        raise TypeError("superopt: made by the superoptimizer only")

    def kernel(self, *args: Any, **attrs: Any) -> Any:
        """Runs through its constructor."""
        raise TypeError("superopt: made by the superoptimizer only")


if "superopt" not in REGISTRY:
    register(SuperoptOp())


def _build_superopt(recipe: Recipe, artifacts: dict) -> Callable:
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


register_constructor("superopt", _build_superopt)


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
        if low is not None:
            op, attrs = low
            q = g.new(op, xs, {k: _const(v) for k, v in attrs.items()}, _const(outs[0].shape), dt)
            if n.op == "conv2d" and n.params[2] == "relu":
                q = _relu(g, q)
            made[i] = [q]
        elif n.op == "relu":
            made[i] = [_relu(g, xs[0])]
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
