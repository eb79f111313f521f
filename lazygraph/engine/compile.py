"""Compile: a graph P to the program that computes it, once per structure, in one order.

    P (walked)  --passes + lowering-->  Q (cache.graph.Graph)  --finalize-->  transformation graph
                --constructors-->  Program (program.py)  --planner-->  order (memory.py)

`transform` runs the optimizer's registered passes together with the engine's own lowering
passes (window kernels at priority 110, fused regions at 50: lower_window.py,
lower_fusion.py), which this module installs by handing them to the pass runner, not by
registering them anywhere. `build` turns a transformation graph into a `Program`: each New
node's recipe names a constructor, looked up in the table `constructors` builds here, from
the packages that make such nodes (the optimizer's library, memo and superoptimizer steps,
the lowering passes' region and window steps). `load` is `build` for a graph read from disk:
it first checks what the stored recipes rely on against the key (region_check.py).

A miss may be time-boxed (`TimeBox`, LAZYGRAPH_OPTIMIZE_BUDGET_MS): passes are started only
while the box has time left, and passes whose single run may outlast any box (`DEFERRED`) and
the order search are not started at all (the program runs in the recorded order); a small
graph (`small`) starts none. Every pass
is optional (Q = P is a correct program), so the result is correct; when something was left out the program's
artifacts say so (`partial`) and engine/tiered.py finishes the job off the critical path.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import optimizer
from cache.graph import Graph
from cache.key import Walk
from cache.recipe import Recipe, RecipeError
from cache.tgraph import TransformationGraph
from jit import background
from jit import prefetch as jit_prefetch
from jit.kernel import FusedKernel, Shaped
from lazygraph import debug
from lazygraph.engine import lower_fusion, lower_window, memory, overlap, region_check
from lazygraph.engine.program import FunctionKernel, Kernel, OpKernel, Program
from ops.base import REGISTRY
from ops.node import Node
from ops.settings import SETTINGS
from optimizer import fold, library
from optimizer.registry import Pass
from optimizer.rewrite.report import REPORT
from optimizer.superopt import convert as superopt_convert
from optimizer.superopt import pass_ as superopt_pass

#: the engine's lowering passes, run with the optimizer's passes in one priority order
LOWERING: tuple[Pass, ...] = (lower_window.PASS, lower_fusion.PASS)

Constructor = Callable[[Recipe, dict], Any]


def _op(recipe: Recipe, artifacts: dict) -> Kernel:
    """A New node of a plain operator: its reference kernel."""
    op = REGISTRY.get(str(recipe.op))
    if op is None:
        raise RecipeError(f"unknown operator {recipe.op!r}")
    return OpKernel(op)


def _library(recipe: Recipe, artifacts: dict) -> Kernel:
    """A library step; a GEMM producer writes into a given buffer, a convolution allocates."""
    d = recipe.data
    writes = isinstance(d, dict) and d.get("producer") == "matmul"
    return FunctionKernel(library.build_library(recipe, artifacts), writes=writes)


def constructors(regions: lower_fusion.RegionKernels) -> dict[str, Constructor]:
    """Recipe constructor name -> kernel builder, for an engine whose region kernels are `regions`."""
    return {
        "op": _op,
        "jit_region": regions.build,
        "jit_window": lower_window.build_window,
        "library": _library,
        "memo": fold.build_memo,
        "superopt": superopt_convert.build_superopt,
        "superopt_view": superopt_pass.build_view,
    }


def passes(lowering: dict[str, Pass]) -> list[Pass]:
    """The passes a miss runs: the registered ones and the installed lowering, by priority."""
    return optimizer.ordered(lowering.values())


#: passes a time-boxed miss never starts. One run of the superoptimizer may outlast any box (it
#: loads its rule library once, then searches for up to LAZYGRAPH_SUPEROPT_SECONDS). Fusion
#: would buy nothing yet: a new region's kernel compiles in the background and its first
#: launches run op by op on NumPy (jit/background.py), which the unfused steps do anyway.
DEFERRED = frozenset({"superopt", "jit_fusion"})


#: per pass, seconds per graph node of its recent runs (an average leaning to the latest): a
#: box starts no pass predicted to outlast what is left of it. Passes such as common
#: subexpressions or the rewrite engine take tens of milliseconds on a few hundred nodes, and
#: a box only looks at the clock between passes. Unknown passes run (and are measured).
#: Until a pass has run in this process its estimate is its prior below: the low end of what
#: the program suite's graphs measured per node (rewrite engine 11-27 us, cse 7-16, fold 2-7,
#: identity 0.7-3.3, library 5-6, dce 0.8-2.2). Without them a fresh process's first miss ran
#: the rewrite engine on running_stats' 642 nodes for 8 ms in a 1 ms box.
PRIOR_COST = {
    "algebraic": 10e-6,
    "cse": 7e-6,
    "fold": 2e-6,
    "identity": 0.7e-6,
    "library": 5e-6,
    "dce": 0.8e-6,
}
PASS_COST: dict[str, float] = dict(PRIOR_COST)


def learn_cost(name: str, seconds: float, nodes: int) -> None:
    """Account one run of a pass (any thread: a lost update only blurs an estimate)."""
    per = seconds / max(nodes, 1)
    old = PASS_COST.get(name)
    PASS_COST[name] = per if old is None else 0.5 * (old + per)


#: a time-boxed miss of a graph whose operations touch fewer elements than this (each
#: operation's inputs and output) runs no passes: such a run costs tens of microseconds and
#: the passes 0.2-0.3 ms on a handful of nodes (int_overflow's outputs read one by one: 31),
#: so they pay only when the structure comes back, and then the background runs them all.
#: Being partial, such a program is not written to the disk on the miss either (a write is
#: about 1 ms): only when it returns, once the background has made the full one
SMALL_WORK = 65536
#: what a small graph's time box lists as left out
SMALL_SKIP = "every pass (a small graph)"


def small(g: Graph) -> bool:
    """Whether g's operations touch fewer than SMALL_WORK elements, inputs and outputs."""
    total = 0
    for n in g.nodes:
        if not n.leaf:
            total += math.prod(n.shape) + sum(math.prod(c.shape) for c in n.inputs)
            if total >= SMALL_WORK:
                return False
    return True


class TimeBox:
    """A time-boxed miss: passes are offered while time is left; what was left out is listed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.perf_counter()
        self.skipped: list[str] = []

    def left(self) -> float:
        """Seconds left in the box (negative when overrun)."""
        return self.seconds - (time.perf_counter() - self.start)

    def offer(self, passes: list[Pass], g: Graph) -> Iterator[Pass]:
        """The passes to run, each decided just before it would start (none for a small graph)."""
        if small(g):
            # not even their conditions (25-90 us): the program is partial, finished if it returns
            self.skipped.append(SMALL_SKIP)
            return
        for p in passes:
            if p.name == "jit_window" and not background.toolchain_probed():
                # its condition probes the C compiler (a few hundred ms, once): on the worker
                background.probe_toolchain()
                self.skipped.append(p.name)
            elif (
                p.name in DEFERRED
                or (left := self.left()) <= 0
                or PASS_COST.get(p.name, 0.0) * len(g.nodes) > left
            ):
                if p.condition(g):  # conditions are cheap: only what would run is missing
                    self.skipped.append(p.name)
            else:
                yield p

    def record(self, tg: TransformationGraph) -> None:
        """Mark the transformation partial when anything was left out (see `partial`)."""
        if self.skipped:
            tg.artifacts["time_box"] = {"ms": round(self.seconds * 1e3, 3), "skipped": list(self.skipped)}


def partial(program: Program) -> bool:
    """Whether a time-boxed miss left passes or the order search out of this program."""
    return "time_box" in program.tgraph.artifacts


def transform(
    w: Walk,
    keep: set[int],
    opt: bool,
    lowering: dict[str, Pass],
    verbose: int = 0,
    report: bool = True,
    box: TimeBox | None = None,
    graph: Graph | None = None,
) -> tuple[Graph, TransformationGraph]:
    """P -> Q (counted in the pass report), and Q's transformation graph.

    `graph` is Q made from `w` beforehand: P's operation nodes become leaves once evaluated
    (attempt.realize), so work done after the run (tiered.py) starts from a Q taken before it.
    """
    g = graph if graph is not None else Graph(w, frozenset(keep))
    if opt:

        def trace(name: str, fired: bool, seconds: float, n: int) -> None:
            learn_cost(name, seconds, n)
            if report:
                REPORT.record_pass(name, fired, seconds, n)
            if verbose >= 2:
                what = "fired" if fired else "no change"
                debug.log(f"  pass {name}: {what} in {seconds * 1e6:.0f} us ({n} nodes)", at=2)

        todo = passes(lowering)
        optimizer.optimize(g, trace, todo if box is None else box.offer(todo, g))  # type: ignore[arg-type]
        if report:
            REPORT.finish(g)
    return g, g.finalize()


def build(tg: TransformationGraph, tokens: tuple, table: dict[str, Constructor]) -> Program:
    """The program of a transformation graph (its recipes' constructors looked up in `table`)."""

    def kernel_for(recipe: Recipe, artifacts: dict) -> Kernel:
        make = table.get(recipe.ctor)
        if make is None:
            raise RecipeError(f"unknown constructor {recipe.ctor!r}")
        k = make(recipe, artifacts)
        # a constructor may give a plain callable (one value, allocated): the common case
        return k if isinstance(k, Kernel) else FunctionKernel(k)

    return Program(tg, tokens, kernel_for)


def load(tg: TransformationGraph, tokens: tuple, table: dict[str, Constructor]) -> Program:
    """`build` for a graph read from disk: fused regions' descriptions must fit the key first."""
    region_check.check_regions(tg, tokens)
    return build(tg, tokens, table)


def keep_slots(program: Program, keep: set[int]) -> set[int]:
    """The Q slots holding the memoized P nodes."""
    pmap = program.pmap
    return {q for q in (pmap[p] for p in keep) if q >= 0}


def compile_graph(
    w: Walk,
    keep: set[int],
    opt: bool,
    sched: bool,
    lowering: dict[str, Pass],
    table: dict[str, Constructor],
    verbose: int = 0,
    report: bool = True,
    box: float | None = None,
    graph: Graph | None = None,
) -> tuple[Graph, Program]:
    """P -> passes and lowering -> program -> order: everything a miss makes, once, in order.

    The chosen order is part of the transformation (stored with the entry, replayed on hits);
    the program is complete before it is returned, so it can be published to other threads.
    `box` (seconds) time-boxes the passes and leaves the order search out (the module docstring);
    `graph` is Q taken from `w` beforehand (`transform`).
    """
    tbox = TimeBox(box) if box is not None else None
    g, tg = transform(w, keep, opt, lowering, verbose, report, tbox, graph)
    program = build(tg, w.tokens, table)
    if sched and tbox is None:
        memory.schedule(program, w.nodes, keep_slots(program, keep))
    elif sched and len(program.steps) >= memory.MIN_STEPS and memory.budget() > 0:
        # a time-boxed miss runs the recorded order (NumPy's own): the search overran any box
        # (its first heuristic runs before it looks at the clock: 10-40 ms on small graphs, and
        # NumPy's first `unique` call imports numpy.ma, 60 ms), so the full tier searches
        tbox.skipped.append("order_search")
    if tbox is not None:
        tbox.record(program.tgraph)
    overlap.hoist(program)  # collectives posted early, completed late (a no-op without them)
    return g, program


_FINGERPRINT: tuple[tuple, str] = ((), "")


def fingerprint(lowering: dict[str, Pass]) -> str:
    """What cached entries depend on of the passes: names and priorities, lowering included."""
    global _FINGERPRINT
    now = (*optimizer.PASSES.values(), *lowering.values())
    memo = _FINGERPRINT  # one read: another thread may replace it (with an equally valid pair)
    if memo[0] != now:
        # every miss asks (the disk store's tag): sorting and hashing cost 5-20 us of it
        memo = _FINGERPRINT = (now, optimizer.fingerprint(passes(lowering)))
    return memo[1]


# -- the program's kernels, compiled before its first run ------------------------------------


def region_arguments(program: Program, nodes: list[Node]) -> list[tuple[FusedKernel, list]]:
    """Each CPU region step's kernel with the shapes and strides its first launch will see.

    Leaves are the arrays themselves; a region's values are fresh C-contiguous arrays (so is
    the planner's `out=` buffer), and so are a library call's and a window kernel's, and an
    operator's when all its array inputs are, unless it makes views. A memo step's value (a
    folded constant, computed by NumPy's kernels) is taken to be C-contiguous too: it nearly
    always is, and where it is not, the launch builds its own variant as it would have (one
    wasted compile in a parallel batch, against a whole compile after the batch when the
    guess is right). A view of a C-contiguous value has the view's strides. Anything else
    (other views, superoptimizer steps) is unknown, and a region reading an unknown value is
    left to compile at its launch.
    """
    known: dict[int, Shaped] = {}
    leaf_slots = set()
    for q, p in program.leaves:
        leaf_slots.add(q)
        b = nodes[p].buffer
        if type(b) is np.ndarray:
            known[q] = Shaped.of(b)
    work = []
    for s in program.steps:
        k = s.kernel
        if isinstance(k, lower_fusion.RegionKernel):
            if k.device is not None:
                continue
            spec = k.fused.spec
            args = [
                None if kind == "scalar" else known.get(q) for q, (kind, _) in zip(s.ins, spec.arg_of_input)
            ]
            if all(a is not None for a, (kind, _) in zip(args, spec.arg_of_input) if kind != "scalar"):
                work.append((k.fused, args))
        elif isinstance(k, OpKernel) and k.op.kind == "view":
            # a view of a C-contiguous base has the view's own strides (ops/views.materialize)
            base = known.get(s.ins[0])
            # (a background prefetch may find the view's node realized since: a leaf, no view)
            view = None
            if base is not None and _contiguous(base):
                view = (s.recover(nodes)[0] if s.recover is not None else nodes[s.src].attrs).get("view")
            if view is not None:
                item = base.itemsize
                strides = tuple(st * item for st in view.strides)
                known[s.outs[0]] = Shaped(tuple(view.shape), strides, item, view.size)
            continue
        elif isinstance(k, OpKernel):
            # NumPy keeps its inputs' memory order (and views are views): a fresh C-contiguous
            # value only from C-contiguous inputs (a leaf that is not an array is a scalar)
            if k.op.kind in _NOT_FRESH or not all(
                _contiguous(known[q]) if q in known else q in leaf_slots for q in s.ins
            ):
                continue
        elif s.recipe is None or s.recipe.ctor not in _ALLOCATING:
            continue
        if s.recover is None:
            node = nodes[s.src]
            shape, dtype = node.shape, node.dtype
        else:
            _, shape, dtype = s.recover(nodes)
        known[s.outs[0]] = Shaped.contiguous(tuple(shape), dtype)
        for slot, shape_of, dt in s.more or ():
            known[slot] = Shaped.contiguous(tuple(shape_of(nodes)), dt)
    return work


#: operator kinds whose value may be a view or a write through one
_NOT_FRESH = frozenset({"movement", "view", "assign", "other"})
#: step constructors whose value is planned as a fresh C-contiguous array: GEMMs and window
#: kernels make one, a memo step nearly always (region_arguments)
_ALLOCATING = frozenset({"library", "jit_window", "memo"})


def _contiguous(a: Shaped) -> bool:
    """C-contiguous (unit dimensions' strides do not matter, as for NumPy's flag)."""
    step = a.itemsize
    for d, st in zip(reversed(a.shape), reversed(a.strides)):
        if d != 1 and st != step:
            return False
        step *= d
    return True


def prepare(program: Program, nodes: list[Node], on_worker: bool = False) -> None:
    """Compile a new program's fused kernels together before its first run (jit.prefetch.prefetch).

    With background compilation on this is one job on the worker (`on_worker`: the caller is
    that worker): the launches meanwhile run on NumPy as before and switch when the kernels
    are ready, and one core is left to the evaluating thread. Otherwise it runs here, on every
    core, so the first run finds its kernels built.
    """
    if not SETTINGS.jit or not any(isinstance(s.kernel, lower_fusion.RegionKernel) for s in program.steps):
        return  # (a time-boxed program has no regions yet)
    needed = jit_prefetch.missing(region_arguments(program, nodes), SETTINGS.jit_min_size)
    if not needed:
        return
    if on_worker:
        jit_prefetch.prefetch(needed, spare=1)
    elif not background.enabled():
        jit_prefetch.prefetch(needed)
    else:
        background.submit(("prefetch", id(program)), lambda: jit_prefetch.prefetch(needed, spare=1))
