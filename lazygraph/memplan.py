"""The executor's memory planner: a cached plan as a scheduling `Dag`, its order, its buffer layout.

On a cache miss, after the passes, `schedule_plan` describes the plan's steps as a `Dag`
(bytes of each step's output, views of their input's buffer, the values this evaluation keeps),
lets `best_order` choose the order of least peak within a time box, and reorders the plan; the
order is part of the transformation graph, so it is stored with the entry (in memory and on
disk) and every hit runs it without searching again. `layout_for` turns a metered run into a
`Layout`: `plan_buffers` over the run's observed sizes and aliases says which freed buffer each
later output can live in, for the steps whose kernel can write into a given buffer.
`LAZYGRAPH_SCHEDULE=0` keeps the recorded order and reuses no buffers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from cache.meter import LEAF_ALIAS, Layout, Meter
from cache.plan import Plan
from ops import settings
from ops.elementwise import Elementwise
from ops.node import Node
from optimizer.schedule import Dag, best_order, peak_memory, plan_buffers

#: plans with fewer steps than this keep their recorded order (nothing to choose from)
MIN_STEPS = 3
#: layouts kept per plan (one per set of kept values seen recently)
MAX_LAYOUTS = 4


def enabled() -> bool:
    """Whether the planner runs (LAZYGRAPH_SCHEDULE=0 turns it off)."""
    return os.environ.get("LAZYGRAPH_SCHEDULE", "1") != "0"


def budget() -> float:
    """Seconds the order search may take on one miss (LAZYGRAPH_SCHEDULE_BUDGET, default 0.2)."""
    return float(settings.number("LAZYGRAPH_SCHEDULE_BUDGET", 0.2, minimum=0, accepted="seconds >= 0"))


def _pick_of(step: Any) -> bool:
    """A fused region's further output: its kernel already ran with the region's first output."""
    r = step.recipe
    return r is not None and r.ctor == "jit_region" and isinstance(r.data, dict) and r.data.get("out", 0) > 0


def writers(plan: Plan, nodes: list[Node]) -> list[Callable | None]:
    """Per step, a kernel that can write into a given buffer (called with `out=`), or None.

    Plain NumPy ufuncs on float/complex values, matmul (np.matmul), a fused region's first
    output (its compiled kernel writes wherever it is pointed), compiled window kernels and
    library GEMM steps; the
    rest allocate their results (reductions, convolutions, gathers, a region's further
    outputs, which its kernel produced with the first).
    """
    out: list[Callable | None] = []
    for s in plan.steps:
        w: Callable | None = None
        r = s.recipe
        if r is not None and r.ctor == "jit_region":
            w = None if _pick_of(s) else s.fn
        elif r is not None and r.ctor == "jit_window":
            w = s.fn
        elif r is not None and r.ctor == "library":
            w = s.fn if isinstance(r.data, dict) and r.data.get("producer") == "matmul" else None
        elif s.src >= 0:
            op = getattr(s.fn, "__self__", None)
            node = nodes[s.src]
            if isinstance(op, Elementwise) and isinstance(op.fn, np.ufunc) and op.fn.nout == 1:
                ok = not node.attrs and node.dtype.kind in "fc"
                w = s.fn if ok else None
            elif getattr(op, "name", "") == "matmul" and node.dtype.kind in "fc":
                w = np.matmul
        # a rebuilt ufunc node's dtype and attributes are only known when it runs: it allocates
        out.append(w)
    return out


def _dag(
    plan: Plan, sizes: list[int], aliases: list[int], keepq: set[int], dtypes: list | None = None
) -> Dag:
    """The plan's steps as a Dag (node i = step i; leaves are held anyway and cost nothing)."""
    pos = plan.pos
    inputs, view_of, sz = [], [], []
    for i, s in enumerate(plan.steps):
        inputs.append([pos[q] for q in s.ins if q in pos])
        a = aliases[i]
        view_of.append(pos[s.ins[a]] if a >= 0 and s.ins[a] in pos else -1)
        sz.append(0 if a == LEAF_ALIAS else sizes[i])
    read = {q for s in plan.steps for q in s.ins}
    # values nobody reads stay to the end, like kept ones (the plan never frees them)
    keep = [pos[q] for q in keepq if q in pos] + [i for i, s in enumerate(plan.steps) if s.out not in read]
    return Dag(sz, inputs, keep=keep, view_of=view_of, dtypes=dtypes)


def static_model(plan: Plan, nodes: list[Node]) -> tuple[list[int], list[int]]:
    """Output bytes and aliases of each step as far as known before running (views alias their base)."""
    sizes, aliases = [], []
    leaf_slots = {q for q, _ in plan.leaves}
    for s in plan.steps:
        if s.recover is None:
            node = nodes[s.src]
            shape, dtype = node.shape, node.dtype
        else:
            _, shape, dtype = s.recover(nodes)
        sizes.append(prod(shape) * np.dtype(dtype).itemsize)
        if s.name == "view":
            aliases.append(LEAF_ALIAS if s.ins[0] in leaf_slots else 0)
        else:
            aliases.append(-1)
    return sizes, aliases


def schedule_plan(plan: Plan, nodes: list[Node], keepq: set[int]) -> dict:
    """Choose the plan's order of least predicted peak and reorder it (once per structure)."""
    n = len(plan.steps)
    sizes, aliases = static_model(plan, nodes)
    dag = _dag(plan, sizes, aliases, keepq)
    recorded_peak = peak_memory(dag, list(range(n)))
    info: dict = {"recorded_peak": recorded_peak, "peak": recorded_peak, "method": "recorded", "seconds": 0.0}
    if n < MIN_STEPS:
        return info
    res = best_order(dag, budget())
    order = _picks_follow(plan, res.order)
    peak = peak_memory(dag, order)
    info.update(seconds=round(res.seconds, 6), optimal=res.optimal, lower_bound=res.lower_bound)
    if peak < recorded_peak:
        plan.reorder([plan.steps[i].out for i in order])
        info.update(peak=peak, method=res.method)
    plan.tgraph.artifacts["schedule"] = info
    return info


def _picks_follow(plan: Plan, order: list[int]) -> list[int]:
    """Move each fused region's further outputs right behind the region (they are handed over there)."""
    picks = {i for i, s in enumerate(plan.steps) if _pick_of(s)}
    if not picks:
        return order
    after: dict[int, list[int]] = {}
    for i in sorted(picks):
        after.setdefault(plan.pos[plan.steps[i].ins[0]], []).append(i)
    out: list[int] = []
    for i in order:
        if i in picks:
            continue
        out.append(i)
        out.extend(after.get(i, ()))
    return out


def layout_for(plan: Plan, nodes: list[Node], keepq: set[int], meter: Meter) -> Layout:
    """Plan buffers for runs like the metered one (same kept values, sizes and aliases)."""
    dtypes = list(meter.dtypes)
    dag = _dag(plan, meter.sizes, meter.aliases, keepq, dtypes)
    n = dag.n
    into = writers(plan, nodes) if enabled() else [None] * n
    bp = plan_buffers(dag, list(range(n)), takes=[w is not None for w in into])
    take = [-1] * n
    give: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    last_value: dict[int, int] = {}  # buffer -> its latest value (a step index)
    for v in range(n):
        b = bp.assign[v]
        if b < 0 or dag.root[v] != v:
            continue
        prev = last_value.get(b)
        last_value[b] = v
        if prev is None:
            continue
        take[v] = b
        # the step after which prev's storage is released, and a member still held then
        end = dag.free_nodes[prev][-1]
        for m in dag.members[prev]:
            if max([m, *dag.succs[m]]) == end:
                give[end].append((plan.steps[m].out, b))
                break
    key = (tuple(meter.sizes), tuple(meter.aliases), tuple(dtypes))
    return Layout(key, take, give, len(bp.buffers), bp.peak, into)


#: plans are shared by threads; learning a layout (rare: a metered run) is serialized
_layouts_lock = threading.Lock()


def remember(plan: Plan, fkeep: frozenset, layout: Layout) -> None:
    """Keep a layout for this set of kept values (a few per plan).

    A layout is immutable plain data and runs read `plan.layouts` without a lock; two threads
    learning one for the same kept values at once both planned from correct runs, the last wins.
    """
    with _layouts_lock:
        layouts = plan.layouts
        if fkeep not in layouts and len(layouts) >= MAX_LAYOUTS:
            layouts.pop(next(iter(layouts)), None)
        layouts[fkeep] = layout
