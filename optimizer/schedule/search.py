"""Searches over sets of scheduled nodes: exact best-first DP, beam search, and a lower bound.

The memory in use after a set S of nodes has run does not depend on the order they ran in
(a buffer is live iff its producer is in S and, unless kept, some reader is not), so two
partial orders that scheduled the same set differ only in the peak so far: the one with the
lower peak dominates. Both searches therefore work on sets (Python ints as bitsets) and keep
one best partial order per set, as in the paper's approximate DP.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from optimizer.schedule.graph import Dag, bits


def _spans(dag: Dag) -> dict[int, tuple[int, int]]:
    """Per freeable or kept buffer s: (the steps at which s is surely live, and those at which it
    is surely live once allocated but only by the order's choice of when to allocate it).

    Buffer s is live while node v runs when s was allocated before and is still needed by v or
    by something after v: a reader of s (or of one of its views) in v's descendants or v itself,
    or s is kept. If s's producer is an ancestor of v that holds in every order (the first set);
    otherwise it holds in the orders that happen to allocate s before v (the second).
    """
    anc, desc = dag.closure()
    everything = (1 << dag.n) - 1
    out = {}
    for s, fm in dag.free_mask.items():
        if dag.sizes[s] == 0:
            continue
        if s in dag.kept_storage:
            need = everything
        else:
            need = 0  # nodes that run no later than some reader of s
            for c in bits(fm & ~(1 << s)):
                need |= anc[c] | (1 << c)
        need &= ~(1 << s)
        out[s] = (desc[s] & need, need & ~desc[s])
    return out


def node_lower_bounds(dag: Dag) -> list[int]:
    """Per node, bytes that are in use while it runs in every valid order.

    Node v needs its output and scratch, plus every buffer produced by an ancestor of v that is
    read (or kept) by v or a descendant of v: whatever the order, that buffer was allocated
    before v and cannot be freed until after v.
    """
    n = dag.n
    if n == 0:
        return []
    nbytes = (n + 7) // 8
    lb = np.zeros(n, dtype=np.int64)
    for s, (span, _) in _spans(dag).items():
        if span:
            flags = np.unpackbits(np.frombuffer(span.to_bytes(nbytes, "little"), np.uint8), bitorder="little")
            lb += dag.sizes[s] * flags[:n].astype(np.int64)
    return [int(lb[v]) + dag.alloc[v] + dag.temp[v] for v in range(n)]


def lower_bound(dag: Dag) -> int:
    """A peak no order can beat: the largest per-node bound, or all kept buffers together."""
    kept = sum(dag.sizes[s] for s in dag.kept_storage)
    return max([kept, *node_lower_bounds(dag)])


def exact_order(
    dag: Dag,
    incumbent: int | None = None,
    *,
    state_cap: int = 200_000,
    deadline: float | None = None,
) -> tuple[list[int] | None, int, bool]:
    """Best-first search over scheduled sets for an order with the least peak.

    Returns (order, peak, proven). States are expanded in order of an admissible estimate of
    the final peak (the peak so far; and for every node still to run, the bytes surely in use
    while it runs given what is live now), so the first complete set reached is optimal. Only
    orders strictly better than `incumbent` are searched for: if none exists the result is
    (None, incumbent, True). When `state_cap` sets have been expanded, or at `deadline`, the
    search stops with proven=False and the best lower bound it established in place of a peak.
    """
    n = dag.n
    if n == 0:
        return ([], 0, True) if incumbent is None or incumbent > 0 else (None, incumbent, True)
    alloc, temp, sizes, pred_mask, touch = dag.alloc, dag.temp, dag.sizes, dag.pred_mask, dag.touch
    node_lb = node_lower_bounds(dag)
    by_lb = sorted(range(n), key=lambda v: -node_lb[v])
    extra = {s: later for s, (_, later) in _spans(dag).items() if later}
    full = (1 << n) - 1
    bound = incumbent if incumbent is not None else float("inf")

    def estimate(m: int, lset: int, live: int) -> int:
        """Peak bound for completing set m whose live buffers are `lset`."""
        h = live
        for v in by_lb:  # the largest static bound among nodes still to run
            if not m >> v & 1:
                h = max(h, node_lb[v])
                break
        acc: dict[int, int] = {}
        not_m = ~m
        for s in bits(lset):
            later = extra.get(s, 0) & not_m
            while later:
                low = later & -later
                v = low.bit_length() - 1
                acc[v] = acc.get(v, node_lb[v]) + sizes[s]
                later ^= low
        return max(h, max(acc.values(), default=0))

    # mask -> (peak, live bytes, live buffers, bound on completing it, parent mask, last node)
    best: dict[int, tuple[int, int, int, int, int, int]] = {0: (0, 0, 0, 0, -1, -1)}
    heap = [(estimate(0, 0, 0), 0, 0)]
    closed: dict[int, int] = {}  # mask -> the peak it was expanded with
    expanded = 0
    while heap:
        f, _, m = heapq.heappop(heap)
        if f >= bound:
            break
        pk, live, lset, _, _, _ = best[m]
        if closed.get(m, bound) <= pk:  # already expanded with this peak (a duplicate entry)
            continue
        closed[m] = pk
        if m == full:
            order = []
            while m:
                v, m = best[m][5], best[m][4]
                order.append(v)
            order.reverse()
            return order, pk, True
        expanded += 1
        if expanded > state_cap or (
            deadline is not None and expanded % 256 == 0 and time.perf_counter() > deadline
        ):
            return None, int(min(f, bound)), False
        not_m = ~m
        for v in bits(full & not_m):
            if pred_mask[v] & not_m:
                continue
            step = live + alloc[v] + temp[v]
            npk = pk if pk >= step else step
            if npk >= bound:
                continue
            vb = 1 << v
            nm = m | vb
            old = best.get(nm)
            if old is not None and old[0] <= npk:
                continue
            if old is not None:
                _, nlive, nset, h, _, _ = old
            else:
                nlive = live + alloc[v]
                nset = lset | vb if alloc[v] else lset
                for s, fm in touch[v]:
                    if fm & not_m == vb:
                        nlive -= sizes[s]
                        nset &= ~(1 << s)
                h = estimate(nm, nset, nlive) if nm != full else 0
            nf = max(npk, h)
            if nf >= bound:
                continue
            best[nm] = (npk, nlive, nset, h, m, v)
            heapq.heappush(heap, (nf, -nm.bit_count(), nm))
    return None, int(bound), True
