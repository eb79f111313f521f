"""Buffer planning: which buffer each value of an order lives in, and the peak that costs.

A planned buffer is created at the first step that uses it and dropped after the last; in
between it holds values one after another (a freed buffer goes back to its dtype's pool and a
later value that fits takes it). A reused buffer is still held while idle between two values,
and a value smaller than its buffer wastes the difference, so reuse can cost memory; the
planner reuses a buffer only when the pool's footprint stays within the order's peak (by
default the peak of the memory model), so planning never raises the peak: it only saves
allocations. The plan is plain data an executor follows step by step.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from optimizer.schedule.graph import Dag
from optimizer.schedule.memory import live_profile

#: how many fitting buffers (smallest first) are checked against the peak before allocating anew
CANDIDATES = 4


@dataclass
class BufferPlan:
    """Buffers for running one order: what to allocate, where each value goes, when to drop."""

    order: list[int]
    buffers: list[tuple[Hashable, int]]  # (dtype, bytes) of each planned buffer
    assign: list[int]  # node -> its buffer (a view's is its base's), -1 for a value of 0 bytes
    create_before: list[list[int]]  # step -> buffers to allocate before running it
    release_after: list[list[int]]  # step -> buffers to drop after running it (never used again)
    scratch: list[int]  # step -> scratch bytes the running node needs besides its output
    peak: int  # predicted peak bytes: held buffers plus the running node's scratch
    model_peak: int  # the memory model's peak of the order (the lower limit of `peak`)

    def footprint(self) -> list[int]:
        """Bytes held at each step by an executor that follows the plan."""
        held, out = 0, []
        for t in range(len(self.order)):
            held += sum(self.buffers[b][1] for b in self.create_before[t])
            out.append(held + self.scratch[t])
            held -= sum(self.buffers[b][1] for b in self.release_after[t])
        return out


def plan_buffers(
    dag: Dag, order: Sequence[int], limit: int | None = None, takes: Sequence[bool] | None = None
) -> BufferPlan:
    """Assign every value of `order` a buffer, reusing freed ones of its dtype when they fit.

    A freed buffer is reused only if holding it idle until then, and the bytes it has beyond the
    new value's size, keep every step within `limit` (default: the order's model peak).
    `takes[v]` False: v cannot write into a given buffer (its kernel allocates), so it gets a new
    one; its buffer can still be reused by later values once freed.
    """
    n = dag.n
    steps, _ = live_profile(dag, order)
    model_peak = max(steps, default=0)
    cap_limit = model_peak if limit is None else max(limit, model_peak)
    held = np.asarray(steps, dtype=np.int64)  # bytes the pool holds at each step, as planned
    pos = [0] * n
    for t, v in enumerate(order):
        pos[v] = t
    buffers: list[tuple[Hashable, int]] = []
    assign = [-1] * n
    first: list[int] = []  # buffer -> step of its first use
    last_end: list[int] = []  # buffer -> step after which its last value is freed
    pools: dict[Hashable, list[tuple[int, int, int]]] = {}  # dtype -> sorted (bytes, -freed at, id)
    freed_at: list[list[int]] = [[] for _ in range(n)]
    for t, v in enumerate(order):
        s = dag.root[v]
        if s != v:
            assign[v] = assign[s]
        elif dag.sizes[v]:
            kept = s in dag.kept_storage
            end = n - 1 if kept else max(pos[u] for u in dag.free_nodes[s])
            pool = pools.setdefault(dag.dtypes[v], [])
            b = None
            if takes is None or takes[v]:
                b = _reuse(pool, held, dag.sizes[v], t, end, cap_limit, exact=kept)
            if b is None:
                b = len(buffers)
                buffers.append((dag.dtypes[v], dag.sizes[v]))
                first.append(t)
                last_end.append(end)
            last_end[b] = end
            assign[v] = b
            if not kept:
                freed_at[end].append(b)
        for b in freed_at[t]:
            bisect.insort(pools[buffers[b][0]], (buffers[b][1], -t, b))
    create_before: list[list[int]] = [[] for _ in range(n)]
    release_after: list[list[int]] = [[] for _ in range(n)]
    for b in range(len(buffers)):
        create_before[first[b]].append(b)
        release_after[last_end[b]].append(b)
    scratch = [dag.temp[v] for v in order]
    peak = int(held.max(initial=0))
    return BufferPlan(list(order), buffers, assign, create_before, release_after, scratch, peak, model_peak)


def _reuse(
    pool: list[tuple[int, int, int]],
    held: np.ndarray,
    size: int,
    t: int,
    end: int,
    limit: int,
    exact: bool,
) -> int | None:
    """Take a pooled buffer for a value live over steps t..end if the footprint allows it."""
    i = bisect.bisect_left(pool, (size, -(1 << 62), -1))
    for j in range(i, min(i + CANDIDATES, len(pool))):
        cap, neg_freed, b = pool[j]
        if exact and cap != size:
            break
        idle = held[-neg_freed + 1 : t]
        if idle.size and int(idle.max()) + cap > limit:
            continue
        waste = cap - size
        if waste and int(held[t : end + 1].max()) + waste > limit:
            continue
        held[-neg_freed + 1 : t] += cap
        held[t : end + 1] += waste
        del pool[j]
        return b
    return None
