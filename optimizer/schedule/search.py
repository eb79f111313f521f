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


def _spans(dag: Dag) -> dict[int, int]:
    """Per buffer s, the nodes while which s is live in every order.

    Buffer s is live while node v runs if s's producer is an ancestor of v and s is still needed
    by v or by something after v: a reader of s (or of one of its views) among v and its
    descendants, or s is kept.
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
        out[s] = desc[s] & need
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
    for s, span in _spans(dag).items():
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

    Returns (order, peak, proven). Sets are expanded in order of an admissible estimate of the
    final peak: the peak so far, the live bytes, and the largest per-node bound among nodes
    still to run. So the first complete set reached is optimal. Only orders strictly better
    than `incumbent` are searched for: if none exists the result is (None, incumbent, True).
    When `state_cap` sets have been expanded, or at `deadline`, the search stops with
    proven=False and the lower bound it established in place of a peak.
    """
    n = dag.n
    if n == 0:
        return ([], 0, True) if incumbent is None or incumbent > 0 else (None, incumbent, True)
    need = [a + t for a, t in zip(dag.alloc, dag.temp)]
    alloc, sizes, pred_mask, succs, touch = dag.alloc, dag.sizes, dag.pred_mask, dag.succs, dag.touch
    node_lb = node_lower_bounds(dag)
    by_lb = sorted(range(n), key=lambda v: -node_lb[v])
    full = (1 << n) - 1
    bound = incumbent if incumbent is not None else float("inf")

    def rest(m: int) -> int:
        """The largest per-node bound among the nodes not in m."""
        for v in by_lb:
            if not m >> v & 1:
                return node_lb[v]
        return 0

    sources = sum(1 << v for v in range(n) if not dag.preds[v])
    # mask -> (peak so far, live bytes, ready nodes, bound on completing it, parent mask, node)
    best: dict[int, tuple[int, int, int, int, int, int]] = {0: (0, 0, sources, 0, -1, -1)}
    heap = [(rest(0), 0, 0)]
    closed: dict[int, int] = {}  # mask -> the peak it was expanded with
    expanded = 0
    while heap:
        f, _, m = heapq.heappop(heap)
        if f >= bound:
            break
        pk, live, ready, _, _, _ = best[m]
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
        r = ready
        while r:
            vb = r & -r
            r ^= vb
            v = vb.bit_length() - 1
            step = live + need[v]
            npk = pk if pk >= step else step
            if npk >= bound:
                continue
            nm = m | vb
            old = best.get(nm)
            if old is not None:
                if old[0] <= npk:
                    continue
                _, nlive, nready, h, _, _ = old
            else:
                nlive = live + alloc[v]
                for s, fm in touch[v]:
                    if fm & not_m == vb:
                        nlive -= sizes[s]
                nready = ready ^ vb
                for w in succs[v]:
                    if not pred_mask[w] & ~nm:
                        nready |= 1 << w
                h = max(nlive, rest(nm)) if nm != full else 0
            nf = npk if npk >= h else h
            if nf >= bound:
                continue
            best[nm] = (npk, nlive, nready, h, m, v)
            heapq.heappush(heap, (nf, -nm.bit_count(), nm))
    return None, int(bound), True
