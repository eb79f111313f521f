"""Fusion lowering: groups of elementwise ops and reductions in Q become multi-output region steps.

The pass (`jit_fusion`, after CSE, before dead-code elimination; compile.py installs it) hands
Q's live nodes to jit/fusion.py as they are: fusion reads any node through one protocol (op,
inputs, attrs, shape, dtype; Q's leaves are marked `leaf`/`scalar` and hold no values). Each
region worth a kernel becomes one New node built by the `jit_region` constructor, computing
all the region's outputs at once; Q nodes for its further outputs (`Graph.output`) stand for
values 1, 2, ... of that one step (a multi-output region, like the Adam update, runs once).

The entry's artifacts hold each region's structure as JSON (operators, attributes, dtypes,
which dimensions are 1; never sizes), and recipes name it by digest. Building the step
rebuilds the region from that description (`rebuild`), on a miss as on a hit from disk, so a
stored entry and a fresh one run the very same kernel object (jit.compile_region memoizes by
structure) without searching or compiling again. The description is checked against the key
when read from disk (region_check.py).

Whether a region runs compiled is decided per launch, from sizes (kept per argument signature
by the kernel, so the program holds no size guards): on the CPU, arrays smaller than
LAZYGRAPH_JIT_MIN_SIZE elements (default 1: compiled at any size, a launch costing about a
microsecond; at least 65536 where launches go through ctypes) run op by op on NumPy. On a device (docs/devices.md)
every region launches the device's kernel, and single operators are regions too. LAZYGRAPH_JIT=0 turns the pass
off, and makes existing region steps run on NumPy. A region writes its first value into the
planner's buffer through `out=` (memory.py); the launch allocates its further values.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import numpy as np

from cache.graph import Graph, QNode
from cache.recipe import Recipe, RecipeError
from jit import backend, fusion, kernel
from jit.backend import Backend
from jit.domain import NotFusable
from lazygraph.engine.program import Kernel
from ops.base import REGISTRY, is_weak_scalar
from ops.creation import BUFFER, SCALAR
from ops.node import Node
from ops.settings import SETTINGS
from optimizer.registry import Pass

_SCALAR_STANDIN = {"b": False, "i": 0, "u": 0, "f": 0.0}

#: after CSE (200), before dead-code elimination (0)
PRIORITY = 50


# -- attributes as JSON ---------------------------------------------------------------------


def _enc(v: Any) -> Any:
    if isinstance(v, np.dtype):
        return {"dtype": v.str}
    if isinstance(v, (tuple, list)):
        return [_enc(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise NotFusable(f"attribute {v!r} cannot be stored in a region recipe")


def decode_attr(v: Any) -> Any:
    """A stored attribute value back in the form operators take (tuples, dtypes)."""
    if isinstance(v, dict):
        return np.dtype(str(v["dtype"]))
    if isinstance(v, list):
        return tuple(decode_attr(x) for x in v)
    return v


def describe(region: kernel.Region) -> dict:
    """The region's structure as JSON (no sizes, no values); its nodes may be ops or Q nodes."""
    idx: dict[int, int] = {}
    inputs = []
    for n in region.inputs:
        idx[id(n)] = len(idx)
        kind = "scalar" if is_weak_scalar(n) else "array"
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
            attrs = {str(k): decode_attr(v) for k, v in d["attrs"].items()}
            shape = tuple(1 if one else 2 for one in d["ones"])
            n = Node(op, tuple(nodes[i] for i in d["ins"]), attrs, shape, np.dtype(str(d["dtype"])))
            nodes.append(n)
            members.append(n)
        outputs = [nodes[i] for i in desc["outputs"]]
        return kernel.make_region(members, outputs)
    except (KeyError, TypeError, ValueError, IndexError, NotFusable) as e:
        raise RecipeError(f"bad JIT region recipe: {e}") from None


def digest(desc: dict) -> str:
    """The name a region's description is stored and referred to by."""
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:24]


# -- the pass ------------------------------------------------------------------------------


def _composite(op: Any) -> bool:
    return getattr(op, "decompose", None) is not None


def _worth_it(region: kernel.Region) -> bool:
    """A single elementwise op or plain reduction is already one NumPy pass (on the host).

    On a device every region is a kernel: that is where the device computes. Tried on the host
    (2026-11-29) for large single operators that keep NumPy's bits (arithmetic, comparisons,
    where, max/min, sqrt, sum, mean; 4096 elements and up): alone they ran 2.5-9x faster
    compiled (a 512x512x3 float64 broadcast subtract 3.5 -> 0.39 ms, ReLU on 12.8M float32
    7.5 -> 3.0 ms), but the medium programs that have them (nbody, kmeans, montecarlo, mlp,
    polyfit, attention, running_stats) took no less time in two alternated rounds, kmeans and
    montecarlo a little more, so single operators stay with NumPy.
    """
    return len(region.nodes) > 1 or _composite(region.nodes[0].op) or backend.active_name() != "cpu"


def _condition(g: Graph) -> bool:
    if not SETTINGS.jit:
        return False
    return any(
        q.op is not None and (q.op.kind in ("elementwise", "reduction") or _composite(q.op)) for q in g.nodes
    )


def jit_fusion(g: Graph) -> bool:
    """Replace fusable regions of Q by multi-output `jit_region` steps."""
    # Only what the outputs need: nodes an earlier pass replaced (fold's memo steps, the
    # superoptimizer's rewrites) wait for dead-code elimination, and fusing them is wasted
    # planning (or, through a held member, recomputing what a memo step already gives).
    live = g.live_ids()
    order = [q for q in g.nodes if id(q) in live and not q.leaf]
    # Region outputs: the roots, what other steps read, and members whose values are
    # memoized (a live array holds them): those stay in Q as extra outputs, so the
    # evaluation realizes them as it would without fusion. A value only autograd may need
    # later (requires_grad, no array holds it) is not memoized by the evaluation, so storing
    # it from inside a region would be wasted work and memory.
    needed: list[QNode] = list(g.outputs)
    held: set[int] = set()
    for p in g.held:
        q = g.pmap[p]
        if q is not None and not q.leaf and id(q) in live:
            needed.append(q)
            held.add(id(q))
    mapping: dict[int, QNode] = {}
    extra: list[QNode] = []
    for rid, region in enumerate(fusion.find_regions(order, needed)):
        if not _worth_it(region):
            continue
        try:
            desc = describe(region)
        except NotFusable:
            continue
        # The structure is stored once per region in the entry's artifacts; the step names it.
        sig = digest(desc)
        g.artifacts.setdefault("jit_regions", {})[sig] = desc
        # the P slot each member copies (-1: made by a pass): what region_check.py verifies
        data = {"region": sig, "rid": rid, "members": [m.src for m in region.nodes]}
        o0 = region.outputs[0]
        first = g.new(None, list(region.inputs), {}, g.shape_expr(o0), o0.dtype, ctor="jit_region", data=data)
        made = [first]
        for j, o in enumerate(region.outputs[1:], 1):
            made.append(g.output(first, j, g.shape_expr(o), o.dtype))
        for o, new in zip(region.outputs, made):
            mapping[id(o)] = new
            if id(o) in held:
                extra.append(new)
    if not mapping:
        return False
    g.substitute(mapping)
    present = {id(q) for q in g.outputs}
    g.outputs.extend(q for q in extra if id(q) not in present)
    g.remove_unreachable()
    return True


#: the lowering pass compile.py installs
PASS = Pass("jit_fusion", PRIORITY, jit_fusion, _condition)


# -- the constructor -----------------------------------------------------------------------


class RegionKernel(Kernel):
    """A fused region's step: all its outputs from one launch (compiled, or op by op on NumPy).

    `device` is the backend of the graph's device (None: the CPU's). On the CPU small arrays
    run on NumPy; on a device every launch is the device's kernel (so the emulated CUDA device
    runs the CUDA kernels at any size) on the device arrays the engine keeps there
    (program.py), and the outputs are the device's arrays: nothing is copied.
    """

    __slots__ = ("fused", "n_out", "device")

    def __init__(self, fused: kernel.FusedKernel, device: Backend | None = None) -> None:
        self.fused = fused
        self.n_out = len(fused.out_slots)
        self.device = device

    def run(self, *args: Any, out: np.ndarray | None = None, **attrs: Any) -> Any:
        """The outputs (a tuple when there are several); `out` takes the first."""
        k = self.fused
        be = self.device
        if be is None:
            # the kernel applies the size rule per argument signature (jit/kernel.py)
            outs = (
                k(*args, out=out, min_size=SETTINGS.jit_min_size) if SETTINGS.jit else k.fallback(args, out)
            )
        elif SETTINGS.jit:
            outs = k(*args, out=out, backend=be)
        elif backend.host_memory(be):
            outs = k.fallback(args, out)
        else:
            outs = _device_fallback(k, args, out, be)
        return tuple(outs) if self.n_out > 1 else outs[0]

    def writer(self, attrs: dict | None, dtype: np.dtype) -> Any:
        """The region's kernel (compiled or on NumPy) writes its first value where it is pointed.

        The further values of a multi-output region are allocated by the launch.
        """
        return self.run


def _device_fallback(k: kernel.FusedKernel, args: tuple, out: Any, be: Backend) -> list[Any]:
    """LAZYGRAPH_JIT=0 on a device: the region op by op, each reference kernel on the device
    arrays through their namespace (ops/namespace.py); the values stay device arrays."""
    env: list[Any] = list(args)
    with np.errstate(all="ignore"):
        for op, attrs, ins in k.program:
            env.append(op.kernel(*(env[i] for i in ins), **attrs))
    outs = [env[i] if be.is_buffer(env[i]) else be.to_device(env[i]) for i in k.out_slots]
    if out is not None:
        be.copyto(out, outs[0])
        outs[0] = out
    return outs


class RegionKernels:
    """One engine's fused-region kernels by description digest (shared by threads, locked)."""

    def __init__(self) -> None:
        self._by_sig: dict[str, kernel.FusedKernel] = {}
        self._lock = threading.Lock()

    def fused(self, sig: str, artifacts: dict) -> kernel.FusedKernel:
        """The kernel of region `sig`, rebuilt from its stored description the first time."""
        with self._lock:
            k = self._by_sig.get(sig)
        if k is not None:
            return k
        desc = artifacts.get("jit_regions", {}).get(sig)
        if not isinstance(desc, dict):
            raise RecipeError(f"JIT region {sig} is missing from the entry's artifacts")
        if digest(desc) != sig:
            raise RecipeError(f"JIT region {sig} does not match its description")
        k = kernel.compile_region(rebuild(desc))
        with self._lock:
            return self._by_sig.setdefault(sig, k)

    def build(self, recipe: Recipe, artifacts: dict) -> RegionKernel:
        """The `jit_region` constructor."""
        data = recipe.data
        if not isinstance(data, dict) or not isinstance(data.get("region"), str):
            raise RecipeError("JIT region recipe without a region")
        be = backend.active()  # the device of the graph being built (jit/backend: `running`)
        return RegionKernel(self.fused(data["region"], artifacts), None if be.name == "cpu" else be)

    def clear(self) -> None:
        """Forget the kernels (the next build rebuilds them from descriptions)."""
        with self._lock:
            self._by_sig.clear()
