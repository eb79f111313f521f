"""Memory planning of a program: its order of least peak, and the buffer layout runs follow.

The planner sees a program as a scheduling `Dag` over its values (optimizer/schedule): one
node per value a step computes, so a step with several outputs is several nodes, each freed
after its own last reader. A further output's node reads what its step reads plus the first
output, so in every order its step's values come together and the step's inputs stay alive
until all of them exist (as they do while the kernel runs).

On a cache miss, `schedule` lets `best_order` choose the order of least predicted peak within
a time box and reorders the program's steps; the order is part of the transformation graph,
stored with the entry (in memory and on disk), so every hit runs it without searching again.
`layout_for` turns a metered run into a `Layout`: `plan_buffers` over the run's observed
sizes and aliases says which freed buffer each later first output can live in, for the steps
whose kernel declares it can write into a given buffer (`Kernel.writer`). LAZYGRAPH_SCHEDULE=0
keeps the recorded order and reuses no buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

import numpy as np

from lazygraph.engine.meter import LEAF_ALIAS, Layout, Meter
from lazygraph.engine.program import Program
from ops.node import Node
from ops.settings import SETTINGS
from optimizer.schedule import Dag, best_order, peak_memory, plan_buffers

#: programs with fewer steps than this keep their recorded order (nothing to choose from)
MIN_STEPS = 3
#: layouts kept per program (one per set of kept values seen recently)
MAX_LAYOUTS = 4


def enabled() -> bool:
    """Whether the planner runs (LAZYGRAPH_SCHEDULE=0 turns it off)."""
    return SETTINGS.schedule


def budget() -> float:
    """Seconds the order search may take on one miss (LAZYGRAPH_SCHEDULE_BUDGET, default 0.2)."""
    return float(SETTINGS.schedule_budget)


def writers(program: Program, nodes: list[Node]) -> list[Callable | None]:
    """Per step, the callable writing its first output into a given buffer (`out=`), or None.

    Each step's kernel declares it (`Kernel.writer`): a copy step's attributes and dtype are
    P''s; a New step's attributes are only known when it runs (a rebuilt operator allocates).
    """
    out: list[Callable | None] = []
    for s in program.steps:
        if s.src >= 0:
            node = nodes[s.src]
            out.append(s.kernel.writer(node.attrs, node.dtype))
        else:
            out.append(s.kernel.writer(None, np.dtype(s.recipe.dtype)))
    return out


def _dag(
    program: Program, sizes: list[int], aliases: list[int], keepq: set[int], dtypes: list | None = None
) -> Dag:
    """The program's values as a Dag (node v = value v in run order; leaves cost nothing)."""
    vpos: dict[int, int] = {}
    for i, s in enumerate(program.steps):
        for j, q in enumerate(s.outs):
            vpos[q] = program.first_value[i] + j
    inputs, view_of, sz = [], [], []
    for i, s in enumerate(program.steps):
        ins = [vpos[q] for q in s.ins if q in vpos]
        first = program.first_value[i]
        for j in range(len(s.outs)):
            v = first + j
            inputs.append(ins if j == 0 else [*ins, first])
            a = aliases[v]
            view_of.append(vpos[s.ins[a]] if a >= 0 and s.ins[a] in vpos else -1)
            sz.append(0 if a == LEAF_ALIAS else sizes[v])
    read = {q for s in program.steps for q in s.ins}
    # values nobody reads stay to the end, like kept ones (the program never frees them)
    keep = [vpos[q] for q in keepq if q in vpos] + [v for q, v in vpos.items() if q not in read]
    return Dag(sz, inputs, keep=keep, view_of=view_of, dtypes=dtypes)


def static_model(program: Program, nodes: list[Node]) -> tuple[list[int], list[int]]:
    """Bytes and aliases of each value as far as known before running (views alias their base)."""
    sizes, aliases = [], []
    leaf_slots = {q for q, _ in program.leaves}
    for s in program.steps:
        if s.recover is None:
            node = nodes[s.src]
            shape, dtype = node.shape, node.dtype
        else:
            _, shape, dtype = s.recover(nodes)
        sizes.append(prod(shape) * np.dtype(dtype).itemsize)
        if getattr(s.kernel, "op", None) is not None and s.kernel.op.kind == "view":
            aliases.append(LEAF_ALIAS if s.ins[0] in leaf_slots else 0)
        else:
            aliases.append(-1)
        for _, shape_of, dt in s.more or ():
            sizes.append(prod(shape_of(nodes)) * dt.itemsize)
            aliases.append(-1)
    return sizes, aliases


def _steps_of(program: Program, values: list[int]) -> list[int]:
    """The step order an order of values gives (a step runs where its first value is)."""
    first = {v: i for i, v in enumerate(program.first_value)}
    return [first[v] for v in values if v in first]


def _values_of(program: Program, steps: list[int]) -> list[int]:
    """The values of steps run in this order (each step's values together)."""
    fv = program.first_value
    return [fv[i] + j for i in steps for j in range(len(program.steps[i].outs))]


def schedule(program: Program, nodes: list[Node], keepq: set[int], seconds: float | None = None) -> dict:
    """Choose the program's order of least predicted peak and reorder it (once per structure).

    `seconds` bounds the search (default: the `schedule_budget` setting); a time-boxed miss
    passes what is left of its box (compile.py).
    """
    n = len(program.steps)
    sizes, aliases = static_model(program, nodes)
    dag = _dag(program, sizes, aliases, keepq)
    recorded_peak = peak_memory(dag, list(range(dag.n)))
    info: dict = {"recorded_peak": recorded_peak, "peak": recorded_peak, "method": "recorded", "seconds": 0.0}
    if n < MIN_STEPS:
        return info
    res = best_order(dag, budget() if seconds is None else seconds)
    steps = _steps_of(program, res.order)
    peak = peak_memory(dag, _values_of(program, steps))
    info.update(seconds=round(res.seconds, 6), optimal=res.optimal, lower_bound=res.lower_bound)
    if peak < recorded_peak:
        program.reorder([program.steps[i].outs[0] for i in steps])
        info.update(peak=peak, method=res.method)
    program.tgraph.artifacts["schedule"] = info
    return info


def layout_for(program: Program, nodes: list[Node], keepq: set[int], meter: Meter) -> Layout:
    """Plan buffers for runs like the metered one (same kept values, sizes and aliases)."""
    dtypes = list(meter.dtypes)
    dag = _dag(program, meter.sizes, meter.aliases, keepq, dtypes)
    steps = program.steps
    into = writers(program, nodes) if enabled() else [None] * len(steps)
    takes = [False] * dag.n
    step_of = [0] * dag.n
    for i, s in enumerate(steps):
        first = program.first_value[i]
        takes[first] = into[i] is not None  # only the first output is written where it is pointed
        for j in range(len(s.outs)):
            step_of[first + j] = i
    bp = plan_buffers(dag, list(range(dag.n)), takes=takes)
    take = [-1] * len(steps)
    give: list[list[tuple[int, int]]] = [[] for _ in steps]
    last_value: dict[int, int] = {}  # buffer -> its latest value
    slot_of = [q for s in steps for q in s.outs]
    for v in range(dag.n):
        b = bp.assign[v]
        if b < 0 or dag.root[v] != v:
            continue
        prev = last_value.get(b)
        last_value[b] = v
        if prev is None:
            continue
        take[step_of[v]] = b
        # the value after which prev's storage is released, and a member still held then
        end = dag.free_nodes[prev][-1]
        for m in dag.members[prev]:
            if max([m, *dag.succs[m]]) == end:
                give[step_of[end]].append((slot_of[m], b))
                break
    key = (tuple(meter.sizes), tuple(meter.aliases), tuple(dtypes))
    return Layout(key, take, give, len(bp.buffers), bp.peak, into)


def remember(program: Program, fkeep: frozenset, layout: Layout) -> None:
    """Keep a layout for this set of kept values (a few per program).

    Programs are shared by threads and runs read `program.layouts` without a lock: the dict is
    replaced, never changed in place. Two threads learning one at once both planned from
    correct runs; the last one wins.
    """
    layouts = dict(program.layouts)
    if fkeep not in layouts and len(layouts) >= MAX_LAYOUTS:
        layouts.pop(next(iter(layouts)), None)
    layouts[fkeep] = layout
    program.layouts = layouts
