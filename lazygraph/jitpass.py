"""Fused JIT kernels in the evaluation path: the fusion pass and the region constructor.

The pass (`jit_fusion`, after CSE; registered on import) mirrors Q as ops nodes, lets
jit/fusion.py group them into regions, and replaces each region by New nodes built by the
`jit_region` constructor: the first output's step runs the region's kernel, and each further
output is a step that reads its value from the first (so a multi-output region, like the Adam
update, runs once). The first output's step takes `out=`: the executor's buffer layout may
hand it a freed buffer to write into (cache/plan.py). The entry's artifacts hold each region's structure as JSON (operators,
attributes, dtypes, which dimensions are 1; never sizes), and recipes name it by digest, so a
cache hit rebuilds the same kernel object (jit.compile_region memoizes by structure) and
launches compiled code without searching or compiling again.

Whether a region runs compiled is decided per launch, from sizes: arrays smaller than
LAZYGRAPH_JIT_MIN_SIZE elements (default 65536) run op by op on NumPy, which is faster there
than a kernel launch and keeps the plan free of size guards. LAZYGRAPH_JIT=0 turns the pass
off, and makes existing region steps run on NumPy.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from typing import Any

import numpy as np

from cache.graph import Graph, QNode
from cache.recipe import Recipe, RecipeError, register_constructor
from jit import fusion, kernel
from jit.domain import NotFusable
from ops import settings
from ops.base import REGISTRY
from ops.creation import BUFFER, SCALAR
from ops.node import Node
from optimizer.registry import PASSES, register_pass, unregister_pass

_SCALAR_STANDIN = {"b": False, "i": 0, "u": 0, "f": 0.0}
_COMPOSITE = ("softmax", "log_softmax", "logsumexp", "var", "std")


def min_size() -> int:
    """Arrays below this many elements run on NumPy (LAZYGRAPH_JIT_MIN_SIZE)."""
    return int(settings.number("LAZYGRAPH_JIT_MIN_SIZE", 65536, minimum=0, integer=True))


# -- attributes as JSON ---------------------------------------------------------------------


def _enc(v: Any) -> Any:
    if isinstance(v, np.dtype):
        return {"dtype": v.str}
    if isinstance(v, (tuple, list)):
        return [_enc(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise NotFusable(f"attribute {v!r} cannot be stored in a region recipe")


def _dec(v: Any) -> Any:
    if isinstance(v, dict):
        return np.dtype(str(v["dtype"]))
    if isinstance(v, list):
        return tuple(_dec(x) for x in v)
    return v


def describe(region: kernel.Region) -> dict:
    """The region's structure as JSON (no sizes, no values)."""
    idx: dict[int, int] = {}
    inputs = []
    for n in region.inputs:
        idx[id(n)] = len(idx)
        kind = "scalar" if n.op is SCALAR else "array"
        inputs.append({"kind": kind, "dtype": n.dtype.str, "ones": [d == 1 for d in n.shape]})
    members = []
    for n in region.nodes:
        idx[id(n)] = len(idx)
        members.append(
            {
                "op": n.op.name,
                "attrs": {k: _enc(v) for k, v in sorted(n.attrs.items())},
                "dtype": n.dtype.str,
                "ins": [idx[id(c)] for c in n.inputs],
                "ones": [d == 1 for d in n.shape],
            }
        )
    return {"inputs": inputs, "members": members, "outputs": [idx[id(o)] for o in region.outputs]}


def rebuild(desc: dict) -> kernel.Region:
    """A region with the described structure; non-unit dimensions get a stand-in extent."""
    nodes: list[Node] = []
    try:
        for d in desc["inputs"]:
            dt = np.dtype(str(d["dtype"]))
            shape = tuple(1 if one else 2 for one in d["ones"])
            if d["kind"] == "scalar":
                nodes.append(Node(SCALAR, (), {}, (), dt, buffer=_SCALAR_STANDIN[dt.kind]))
            else:
                nodes.append(Node(BUFFER, (), {}, shape, dt, buffer=np.zeros(0, dt)))
        members = []
        for d in desc["members"]:
            op = REGISTRY[str(d["op"])]
            attrs = {str(k): _dec(v) for k, v in d["attrs"].items()}
            shape = tuple(1 if one else 2 for one in d["ones"])
            n = Node(op, tuple(nodes[i] for i in d["ins"]), attrs, shape, np.dtype(str(d["dtype"])))
            nodes.append(n)
            members.append(n)
        outputs = [nodes[i] for i in desc["outputs"]]
        return kernel.make_region(members, outputs)
    except (KeyError, TypeError, ValueError, IndexError, NotFusable) as e:
        raise RecipeError(f"bad JIT region recipe: {e}") from None


# -- the pass ------------------------------------------------------------------------------


def _mirror(g: Graph, live: set[int]) -> tuple[list[Node], dict[int, QNode], dict[int, Node]]:
    """Live Q as ops nodes (leaves with stand-in values), and both directions of the mapping."""
    to_q: dict[int, QNode] = {}
    to_n: dict[int, Node] = {}
    order: list[Node] = []
    for q in g.nodes:
        if id(q) not in live:
            continue
        if q.leaf:
            if q.scalar:
                n = Node(SCALAR, (), {}, (), q.dtype, buffer=_SCALAR_STANDIN.get(q.dtype.kind, 0))
            else:
                n = Node(BUFFER, (), {}, q.shape, q.dtype, buffer=np.zeros(0, q.dtype))
        else:
            n = Node(q.op, tuple(to_n[id(c)] for c in q.inputs), q.attrs, q.shape, q.dtype)
            order.append(n)
        to_q[id(n)] = q
        to_n[id(q)] = n
    return order, to_q, to_n


def _worth_it(region: kernel.Region) -> bool:
    """A single elementwise op or plain reduction is already one NumPy pass."""
    return len(region.nodes) > 1 or region.nodes[0].op.name in _COMPOSITE


def _jit_condition(g: Graph) -> bool:
    if not kernel.enabled():
        return False
    return any(
        q.op is not None and (q.op.kind in ("elementwise", "reduction") or q.op.name in _COMPOSITE)
        for q in g.nodes
    )


def jit_fusion(g: Graph) -> bool:
    """Replace fusable regions of Q by JIT region steps."""
    # Only what the outputs need: nodes an earlier pass replaced (fold's memo steps, the
    # superoptimizer's rewrites) wait for dead-code elimination, and fusing them is wasted
    # planning (or, through a held member, recomputing what a memo step already gives).
    live = g.live_ids()
    order, to_q, to_n = _mirror(g, live)
    # Region outputs: the roots, what other steps read, and members whose values are
    # memoized (a live array holds them): those stay in Q as extra outputs, so the
    # evaluation realizes them as it would without fusion. A value only autograd may need
    # later (requires_grad, no array holds it) is not memoized by the executor, so storing
    # it from inside a region would be wasted work and memory.
    needed = [to_n[id(o)] for o in g.outputs]
    held: set[int] = set()
    for p in g.held:
        q = g.pmap[p]
        if q is not None and not q.leaf and id(q) in live:
            needed.append(to_n[id(q)])
            held.add(id(q))
    changed = False
    mapping: dict[int, QNode] = {}
    extra: list[QNode] = []
    for rid, region in enumerate(fusion.find_regions(order, needed)):
        if not _worth_it(region):
            continue
        try:
            desc = describe(region)
        except NotFusable:
            continue
        ins = [to_q[id(c)] for c in region.inputs]
        # The structure is stored once per region in the entry's artifacts; steps name it.
        text = json.dumps(desc, sort_keys=True)
        sig = hashlib.sha256(text.encode()).hexdigest()[:24]
        g.artifacts.setdefault("jit_regions", {})[sig] = desc
        leader: QNode | None = None
        for j, out in enumerate(region.outputs):
            oq = to_q[id(out)]
            data = {"region": sig, "out": j, "rid": rid}
            if leader is None:
                # the P slot each member copies (-1: made by a pass): what lazygraph/jitcheck.py verifies
                data["members"] = [to_q[id(m)].src for m in region.nodes]
                new = g.new(None, ins, {}, g.shape_expr(oq), oq.dtype, ctor="jit_region", data=data)
                leader = new
            else:
                new = g.new(None, [leader], {}, g.shape_expr(oq), oq.dtype, ctor="jit_region", data=data)
            mapping[id(oq)] = new
            if id(oq) in held:
                extra.append(new)
        changed = True
    if changed:
        g.substitute(mapping)
        present = {id(q) for q in g.outputs}
        g.outputs.extend(q for q in extra if id(q) not in present)
        g.remove_unreachable()
    return changed


# -- the constructor -----------------------------------------------------------------------

_kernels: dict[str, kernel.FusedKernel] = {}
#: id(first output) -> (weak reference to it, all outputs) for the further outputs' steps
_siblings: dict[int, list] = {}


def _kernel_for(sig: str, artifacts: dict) -> kernel.FusedKernel:
    k = _kernels.get(sig)
    if k is None:
        desc = artifacts.get("jit_regions", {}).get(sig)
        if not isinstance(desc, dict):
            raise RecipeError(f"JIT region {sig} is missing from the entry's artifacts")
        if hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:24] != sig:
            raise RecipeError(f"JIT region {sig} does not match its description")
        k = kernel.compile_region(rebuild(desc))
        _kernels[sig] = k
    return k


def _build_region(recipe: Recipe, artifacts: dict) -> Any:
    data = recipe.data
    if not isinstance(data, dict) or not isinstance(data.get("region"), str):
        raise RecipeError("JIT region recipe without a region")
    k = _kernel_for(data["region"], artifacts)
    j = int(data.get("out", 0))
    n_out = len(k.out_slots)
    if not 0 <= j < n_out:
        raise RecipeError(f"JIT region recipe names output {j} of {n_out}")
    if j > 0:

        def pick(first: np.ndarray, **attrs: Any) -> np.ndarray:
            entry = _siblings.get(id(first))
            if entry is None or entry[0]() is not first:
                raise RecipeError("JIT region outputs read out of order")
            entry[2] -= 1
            if entry[2] == 0:  # the last further output: release them all
                del _siblings[id(first)]
            return entry[1][j]

        return pick

    def run(*args: Any, out: np.ndarray | None = None, **attrs: Any) -> np.ndarray:
        # out: the executor's planned buffer for the first output (cache/plan.py, Layout.take)
        small = max((np.size(a) for a in args), default=0) < min_size()
        outs = k.fallback(args, out) if small or not kernel.enabled() else k(*args, out=out)
        if n_out > 1:
            first = outs[0]
            _siblings[id(first)] = [weakref.ref(first), outs, n_out - 1]
            # a run that fails before every further output is read leaves nothing behind
            weakref.finalize(first, _siblings.pop, id(first), None)
        return outs[0]

    return run


register_constructor("jit_region", _build_region)


# -- checking a region read from disk against the key: lazygraph/jitcheck.py -------------------

from lazygraph import jitcheck  # noqa: E402, F401  (registers the check; needs `_dec` above)

#: after CSE (200), before dead-code elimination (0)
PRIORITY = 50


def install() -> None:
    """Register the fusion pass (region steps can always be rebuilt from cached plans)."""
    if "jit_fusion" not in PASSES:
        register_pass("jit_fusion", PRIORITY, _jit_condition)(jit_fusion)


def uninstall() -> None:
    """Remove the fusion pass (plans already cached keep their region steps)."""
    unregister_pass("jit_fusion")


def installed() -> bool:
    """Whether the fusion pass is registered."""
    return "jit_fusion" in PASSES


install()  # on by default: LAZYGRAPH_JIT=0 turns it off per evaluation
