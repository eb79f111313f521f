"""The memory model, computed two independent ways.

Running node v at step t needs: every buffer still live before the step (v's inputs among
them: they are live until their last consumer has run), plus v's output, plus v's scratch
space. After the step, each buffer whose last reader (or, for a buffer with views, the last
reader of any of its views) has run is freed, unless it is kept. The peak of an order is the
largest step. `peak_memory` simulates this step by step with reference counts over the
precomputed tables of `Dag`; `peak_memory_intervals` derives every buffer's lifetime from the
raw inputs with NumPy and sums the intervals. Tests check that the two agree on random graphs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from optimizer.schedule.graph import Dag


def check_order(dag: Dag, order: Sequence[int]) -> None:
    """Raise ValueError unless `order` runs every node once, inputs before consumers."""
    if sorted(order) != list(range(dag.n)):
        raise ValueError(f"schedule: an order must be a permutation of the {dag.n} nodes")
    pos = [0] * dag.n
    for t, v in enumerate(order):
        pos[v] = t
    for v in range(dag.n):
        for u in dag.preds[v]:
            if pos[u] > pos[v]:
                raise ValueError(f"schedule: node {v} runs before its input {u}")


def is_topological(dag: Dag, order: Sequence[int]) -> bool:
    """Whether `order` is a valid execution order of `dag`."""
    try:
        check_order(dag, order)
    except ValueError:
        return False
    return True


def live_profile(dag: Dag, order: Sequence[int]) -> tuple[list[int], list[int]]:
    """Bytes in use during each step of `order`, and live bytes after it (a reference-count simulation)."""
    check_order(dag, order)
    sizes, temp, alloc, touch = dag.sizes, dag.temp, dag.alloc, dag.touch_s
    remaining = {s: len(fs) for s, fs in dag.free_nodes.items()}
    live = 0
    steps, after = [], []
    for v in order:
        live += alloc[v]
        steps.append(live + temp[v])
        for s in touch[v]:
            remaining[s] -= 1
            if remaining[s] == 0:
                live -= sizes[s]
        after.append(live)
    return steps, after


def step_memory(dag: Dag, order: Sequence[int]) -> list[int]:
    """Bytes in use while each step of `order` runs."""
    return live_profile(dag, order)[0]


def peak_memory(dag: Dag, order: Sequence[int]) -> int:
    """Peak bytes of running `dag` in `order` (0 for an empty graph)."""
    return max(step_memory(dag, order), default=0)


def peak_memory_intervals(dag: Dag, order: Sequence[int]) -> int:
    """Peak bytes again, from buffer lifetimes derived from the raw graph (a cross-check)."""
    n = dag.n
    if n == 0:
        return 0
    pos = np.empty(n, dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(n)
    if sorted(order) != list(range(n)):
        raise ValueError("schedule: not a permutation")
    base = list(range(n))
    for v in order:  # in execution order every view's base is resolved before the view
        if dag.view_of[v] >= 0:
            if pos[dag.view_of[v]] > pos[v]:
                raise ValueError("schedule: a view runs before its base")
            base[v] = base[dag.view_of[v]]
    last = pos.copy()  # the last step at which each buffer is needed
    for v in range(n):
        for u in dag.inputs[v]:
            if pos[u] > pos[v]:
                raise ValueError("schedule: a node runs before its input")
            b = base[u]
            last[b] = max(last[b], pos[v])
        last[base[v]] = max(last[base[v]], pos[v])
    for k in dag.keep:
        last[base[k]] = n - 1
    delta = np.zeros(n + 1, dtype=np.int64)
    for v in range(n):
        if base[v] == v and dag.sizes[v]:
            delta[pos[v]] += dag.sizes[v]
            delta[last[v] + 1] -= dag.sizes[v]
    in_use = np.cumsum(delta)[:n] + np.asarray(dag.temp, dtype=np.int64)[np.asarray(order)]
    return int(in_use.max())
