"""The `superopt` pass: TASO's search on Q, once per graph structure (the cache replays it).

On a cache miss the pass converts Q's live nodes into a search graph (`SGraph`: lazygraph's
own operators, so whole models convert; parameters become weights, other buffers inputs,
Python scalars scalars), runs the cost-based search with the structural merge rules and the
proven rules of the library, and, if the best graph is cheaper, emits its new nodes into Q
and rewires the replaced nodes with one `Graph.substitute`. New nodes carry concrete shapes
and attributes, so the pass guards the shapes of the nodes the rewrite read (and the values
of scalars a rule compared): a hit replays the rewrite only on graphs of the same sizes.

Where it runs (the condition, cheap): inference graphs with something to merge — two or
more matmuls or convolutions reading the same array, or a sum of two matmuls. Inference means
recorded without autograd (under `lg.no_grad()`, or on arrays that need no gradient): graphs
recorded for a backward pass, and graphs that write buffers, are training steps and left
alone. Merged weights pay off only because the fold pass memoizes their concatenation, which
holds only while the weights do not change between evaluations.

Settings (`ops.settings.SETTINGS`, from LAZYGRAPH_SUPEROPT*): `superopt` off turns the pass
off (an entry already cached keeps its rewrite); `superopt_seconds` (default 0.5) and
`superopt_graphs` (default 100) bound the search; `superopt_cost` picks the cost model
(`analytic`, the default: no timing during evaluation; `measured`); `superopt_search` picks the
search (`taso`, the default; `eqsat`, `mcts`, `auto` from optimizer/eqsat/, by `SEARCHES`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cache.graph import Graph, QNode
from cache.recipe import Recipe
from ops.settings import SETTINGS
from ops.views import View
from optimizer.registry import register_pass
from optimizer.rewrite.rules import Rule
from optimizer.superopt.apply import SGraph
from optimizer.superopt.convert import slice_of
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import builtin_rules
from optimizer.superopt.pool_conv import pool_rules
from optimizer.superopt.search import SEARCHES, SearchResult

PRIORITY = 175  # after CSE (200), before constant folding (150): folding sees merged weights
#: what the last run of the pass did (for lg.explain-style reports and tests)
LAST: dict[str, Any] = {}
#: searches run in this process (a cache hit runs none), rewrites emitted, searches that failed
COUNTS = {"searches": 0, "rewrites": 0, "errors": 0}


def enabled() -> bool:
    """The `superopt` setting (LAZYGRAPH_SUPEROPT=0 turns the pass off)."""
    return bool(SETTINGS.superopt)


def _settings() -> tuple[float, int, str]:
    """The search's bounds and cost model from the settings object."""
    return float(SETTINGS.superopt_seconds), int(SETTINGS.superopt_graphs), str(SETTINGS.superopt_cost)


_STAGES: list[list[Rule]] | None = None


def stages() -> list[list[Rule]]:
    """The rule sets of the search's stages: the structural merges, then those plus the library."""
    global _STAGES
    if _STAGES is None:
        from optimizer.superopt.adapt import library_rules

        base = (
            pool_rules() + builtin_rules()
        )  # pools first: one cheap candidate, before the merges fill the budget
        _STAGES = [base, base + library_rules()]
    return _STAGES


def rules() -> list[Rule]:
    """Every rule the pass may apply (the last stage's set)."""
    return stages()[-1]


def _plain(q: QNode) -> bool:
    return not q.leaf and q.op is not None and (q.recipe is None or q.recipe.ctor == "op")


def worth_searching(g: Graph) -> bool:
    """The pass's condition: an inference graph with matmuls/convolutions to merge or average pools."""
    if not enabled():
        return False
    readers: dict[int, int] = {}
    for n in g.nodes:
        if n.op is None:
            continue
        name = n.op.name
        if name == "assign" or (n.src >= 0 and not n.leaf and g.pnodes[n.src].requires_grad):
            return False  # recorded for autograd (training) or writing buffers: weights change
        if _plain(n) and name in ("matmul", "conv2d"):
            k = id(n.inputs[0])
            readers[k] = readers.get(k, 0) + 1
        elif _plain(n) and name == "add" and all(_plain(c) and c.op.name == "matmul" for c in n.inputs):
            readers[-1] = 2
        elif _plain(n) and name == "avg_pool2d":
            readers[-2] = 2  # a pooling the rules may turn into a convolution
    return any(v >= 2 for v in readers.values())


def to_sgraph(g: Graph) -> tuple[SGraph, list[QNode]]:
    """Q's live nodes as a search graph; `qnodes[src]` is the Q node each SNode stands for."""
    live = g.live_ids()
    sg = SGraph()
    qnodes: list[QNode] = []
    ids: dict[int, int] = {}
    for q in g.nodes:
        if id(q) not in live:
            continue
        src = len(qnodes)
        qnodes.append(q)
        if q.leaf:
            if q.scalar:
                i = sg.leaf("scalar", (), q.dtype, src, value=g.value(q))
            else:
                # the key's static flag (model state): decided by structure, so cached plans agree
                kind = "weight" if g.tokens[q.src][4] is True else "input"
                i = sg.leaf(kind, q.shape, q.dtype, src)
        else:
            op, attrs = (q.op.name, q.attrs) if _plain(q) else (f"opaque:{q.name}", {})
            if op == "view":
                cut = slice_of(q)
                if cut is not None:
                    op, attrs = "slice_axis", {"axis": cut[0], "start": cut[1], "stop": cut[2]}
            i = sg.raw(op, [ids[id(c)] for c in q.inputs], attrs, q.shape, q.dtype, src)
        ids[id(q)] = i
    sg.outputs = [ids[id(o)] for o in g.outputs]
    return sg, qnodes


def emit(g: Graph, sg: SGraph, qnodes: list[QNode], origin: dict[int, int]) -> int:
    """Write the search's result into Q: new nodes, guards, one substitute; returns nodes replaced.

    `origin`: search-graph id -> index in `qnodes`, for the ids the conversion made (replaced
    ones are no longer in `sg.nodes`).
    """
    made: dict[int, QNode] = {}
    read: dict[int, QNode] = {}

    def node(i: int) -> QNode:
        n = sg.nodes[i]
        if n.src >= 0:
            return qnodes[n.src]
        if i in made:
            return made[i]
        ins = []
        for c in n.inputs:
            q = node(c)
            if sg.nodes[c].src >= 0:
                read[id(q)] = q
            ins.append(q)
        made[i] = _new(g, n.op, ins, n.attrs, n.shape, n.dtype, n.value)
        return made[i]

    mapping: dict[int, QNode] = {}
    for old in sg.replaced:
        new = old
        while new in sg.replaced:
            new = sg.replaced[new]
        src = origin.get(old)
        if src is not None and new in sg.nodes:
            mapping[id(qnodes[src])] = node(new)
            read[id(qnodes[src])] = qnodes[src]
    for q in read.values():
        if not q.scalar:
            g.guard(("eq", g.shape_expr(q), ("const", tuple(q.shape))))
    for i in sg.value_guards:
        n = sg.nodes.get(i)
        if n is not None and n.src >= 0 and qnodes[n.src].leaf:
            q = qnodes[n.src]
            g.guard(("eq", ("value", q.src), ("const", g.value(q))))
    if mapping:
        g.substitute(mapping)
    return len(mapping)


def _new(
    g: Graph, op: str, ins: list[QNode], attrs: dict, shape: tuple, dtype: np.dtype, value: Any
) -> QNode:
    """A New node with concrete (guarded) attributes and shape."""
    if op in ("const", "scalar"):
        a = {"shape": ("const", ()), "fill_value": ("const", value), "dtype": ("dtype", dtype.str)}
        return g.new("full", [], a, ("const", ()), dtype)
    if op == "full":  # a rule's constant array (pool_conv.py's kernel): its dtype as `full` reads it
        a = {"shape": ("const", tuple(shape)), "fill_value": ("const", attrs["fill_value"])}
        return g.new("full", [], {**a, "dtype": ("dtype", dtype.str)}, ("const", tuple(shape)), dtype)
    if op == "view":
        v = attrs["view"]
        data = [list(v.shape), list(v.strides), int(v.offset)]
        # the View also as an attribute, for passes that read views' windows in this process
        attrs = {"view": ("const", v)}
        return g.new("view", ins, attrs, ("const", tuple(shape)), dtype, ctor="superopt_view", data=data)
    return g.new(op, ins, {k: ("const", v) for k, v in attrs.items()}, ("const", tuple(shape)), dtype)


def build_view(recipe: Recipe, artifacts: dict) -> Callable:
    """A view made by a rewrite (its View travels as JSON data)."""
    from ops.views import materialize

    shape, strides, offset = recipe.data
    view = View(tuple(int(d) for d in shape), tuple(int(s) for s in strides), int(offset))

    def run(base: Any, **attrs: Any) -> np.ndarray:
        return materialize(base, view)

    return run


def optimize_graph(g: Graph, seconds: float, graphs: int, cost: str) -> SearchResult:
    """Run the search on Q and emit the result when it is cheaper."""
    sg, qnodes = to_sgraph(g)
    origin = {i: n.src for i, n in sg.nodes.items()}
    COUNTS["searches"] += 1
    LAST.clear()
    try:
        name = str(SETTINGS.superopt_search)
        if name not in SEARCHES:
            raise ValueError(f"superopt: unknown search {name!r} (known: {sorted(SEARCHES)})")
        result = SEARCHES[name](sg, stages(), CostModel(cost), seconds=seconds, graphs=graphs)
        LAST["search"] = name
    except Exception as e:  # noqa: BLE001  (a search bug must not fail the user's evaluation)
        # the search works on its own copy: Q is untouched, the graph runs unoptimized
        COUNTS["errors"] += 1
        LAST["error"] = f"{type(e).__name__}: {e}"
        return SearchResult(sg, 0.0, 0.0)
    LAST.update(
        start=result.start_cost,
        cost=result.cost,
        explored=result.explored,
        seconds=result.seconds,
        rules=dict(result.rules),
    )
    if result.cost < result.start_cost and not _new_scalars(result.best):
        replaced = emit(g, result.best, qnodes, origin)
        if replaced:
            COUNTS["rewrites"] += 1
            g.artifacts["superopt"] = {
                "rules": dict(result.rules),
                "speedup": round(result.speedup, 4),
                "explored": result.explored,
            }
    return result


def _new_scalars(sg: SGraph) -> bool:
    """Python-scalar leaves made by a rewrite cannot be emitted (Q's leaves are P's)."""
    return any(n.op == "scalar" and n.src < 0 for n in sg.nodes.values())


@register_pass("superopt", priority=PRIORITY, condition=worth_searching)
def superopt(g: Graph) -> bool:
    """Cost-based search with verified substitutions (paid once per structure: cached)."""
    seconds, graphs, cost = _settings()
    optimize_graph(g, seconds, graphs, cost)
    return "superopt" in g.artifacts
