"""Beam search over sets of scheduled nodes (the paper's approximate DP), vectorized with NumPy.

All partial orders in the beam have run the same number of nodes; those that ran the same
set are merged (the one with the lower peak so far survives, since the live bytes are equal).
Each step expands every set in the beam by every node ready in it, at once, as NumPy arrays
over (set, candidate) pairs. The same machinery re-optimizes a window of an existing order:
the nodes before the window are a fixed starting set, and whatever order the window's nodes
run in, the live bytes after it are the same, so only the steps inside the window change.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from optimizer.schedule.graph import Dag

_BLOCKED = 1 << 30  # an in-degree that never reaches 0: the node is outside the window


def _csr(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Row pointers and concatenated entries of a list of integer lists."""
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    flat = np.fromiter((x for r in rows for x in r), dtype=np.int64, count=int(ptr[-1]))
    return ptr, flat


def _gather(ptr: np.ndarray, flat: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each requested row, its entries: (index of the request, entry), concatenated."""
    lens = ptr[rows + 1] - ptr[rows]
    owner = np.repeat(np.arange(len(rows)), lens)
    starts = np.repeat(ptr[rows] - np.cumsum(lens) + lens, lens)
    return owner, flat[starts + np.arange(len(owner))]


class Tables:
    """A Dag's tables as NumPy arrays, built once and shared by every beam over that graph."""

    def __init__(self, dag: Dag) -> None:
        n = dag.n
        self.n = n
        self.alloc = np.asarray(dag.alloc, dtype=np.int64)
        self.need = self.alloc + np.asarray(dag.temp, dtype=np.int64)
        self.sizes = np.asarray(dag.sizes, dtype=np.int64)
        self.touch_ptr, self.touch = _csr(dag.touch_s)
        self.succ_ptr, self.succ = _csr(dag.succs)
        self.pred_ptr, self.pred = _csr(dag.preds)
        self.rem0 = np.zeros(n, dtype=np.int32)
        for s, fs in dag.free_nodes.items():
            self.rem0[s] = len(fs)
        self.indeg0 = np.asarray([len(p) for p in dag.preds], dtype=np.int32)
        # Sets are identified by a hash, the XOR of per-node keys: the exact bitset when it fits
        # in 63 bits, random 64-bit keys otherwise (a collision is astronomically unlikely).
        if n <= 63:
            self.keys = np.left_shift(np.uint64(1), np.arange(n, dtype=np.uint64))
        else:
            self.keys = np.random.default_rng(0x5EED).integers(0, 2**63, size=n, dtype=np.uint64)


def _beam(
    t: Tables,
    indeg0: np.ndarray,
    rem0: np.ndarray,
    live0: int,
    steps: int,
    width: int | None,
    weight: float,
    cutoff: int | None,
    deadline: float | None,
    give_up: bool = False,
) -> tuple[list[int], int] | None:
    """Schedule `steps` more nodes from the state (indeg0, rem0, live0); (order, peak) or None.

    Past `deadline` the beam narrows to one set, or returns None at once if `give_up`.
    """
    indeg = indeg0[None, :].copy()  # inputs not yet run, or -1 once the node has run
    rem = rem0[None, :].copy()  # members and readers of each buffer not yet run
    live = np.full(1, live0, dtype=np.int64)
    peak = np.zeros(1, dtype=np.int64)
    hsh = np.zeros(1, dtype=np.uint64)
    # Only nodes ready in some set can be candidates: the frontier is far narrower than the graph.
    cols = np.flatnonzero(indeg0 == 0)
    parents: list[np.ndarray] = []
    choices: list[np.ndarray] = []
    k = width
    for _ in range(steps):
        if deadline is not None and k != 1 and time.perf_counter() > deadline:
            if give_up:
                return None
            k = 1
        ki, ci = np.nonzero(indeg[:, cols] == 0)
        vi = cols[ci]
        step = live[ki] + t.need[vi]
        if cutoff is not None:
            ok = step <= cutoff
            if not ok.all():
                ki, vi, step = ki[ok], vi[ok], step[ok]
                if len(ki) == 0:
                    return None
        npk = np.maximum(peak[ki], step)
        owner, s = _gather(t.touch_ptr, t.touch, vi)
        last = rem[ki[owner], s] == 1
        freed = np.bincount(owner, weights=t.sizes[s] * last, minlength=len(vi)).astype(np.int64)
        nlive = live[ki] + t.alloc[vi] - freed
        h = hsh[ki] ^ t.keys[vi]
        score = npk + weight * nlive if weight else npk
        order = np.lexsort((vi, ki, nlive, score))
        _, first = np.unique(h[order], return_index=True)
        first.sort()
        sel = order[first if k is None else first[:k]]
        pk, vk = ki[sel], vi[sel]
        rem = rem[pk]
        owner, s = _gather(t.touch_ptr, t.touch, vk)
        rem[owner, s] -= 1
        indeg = indeg[pk]
        indeg[np.arange(len(sel)), vk] = -1
        owner, w = _gather(t.succ_ptr, t.succ, vk)
        indeg[owner, w] -= 1
        # sorted distinct values by hand: np.union1d imports numpy.ma on its first call (8-60 ms
        # holding the import lock, inside some program's first call)
        cols = np.sort(np.concatenate((cols, w)))
        cols = cols[np.concatenate(([True], cols[1:] != cols[:-1]))] if len(cols) else cols
        cols = cols[(indeg[:, cols] == 0).any(axis=0)]
        live, peak, hsh = nlive[sel], npk[sel], h[sel]
        parents.append(pk)
        choices.append(vk)
    best = int(np.argmin(peak))
    result = int(peak[best])
    order_out = []
    for par, cho in zip(reversed(parents), reversed(choices)):
        order_out.append(int(cho[best]))
        best = int(par[best])
    order_out.reverse()
    return order_out, result


def beam_order(
    dag: Dag,
    width: int | None,
    *,
    weight: float = 0.0,
    cutoff: int | None = None,
    deadline: float | None = None,
    tables: Tables | None = None,
) -> tuple[list[int], int] | None:
    """Beam search over scheduled sets, one layer per step; returns (order, peak) or None.

    Each layer keeps the `width` best distinct sets (all of them if width is None, which makes
    this the exact layer-by-layer DP). Candidates are ranked by peak so far + `weight` x live
    bytes, ties by live bytes: weight 0 is the paper's approximate DP; a positive weight also
    values headroom, which keeps sets that postponed big allocations from crowding the beam.
    Partial orders whose peak would exceed `cutoff` are dropped (None if all of them are).
    Past `deadline` (a perf_counter time) the remaining layers keep one set each, so a
    complete order still comes back.
    """
    if dag.n == 0:
        return [], 0
    t = tables or Tables(dag)
    return _beam(t, t.indeg0, t.rem0, 0, dag.n, width, weight, cutoff, deadline)


def reoptimize_window(
    tables: Tables,
    order: Sequence[int],
    lo: int,
    hi: int,
    live_before: int,
    cutoff: int,
    width: int | None,
    weight: float = 0.0,
    deadline: float | None = None,
) -> tuple[list[int], int] | None:
    """Another order for steps lo..hi-1 of `order` whose steps all stay within `cutoff`, or None.

    `live_before` is the live bytes after step lo-1. Returns (the window's new order, its peak).
    Past `deadline` it gives up (None).
    """
    t = tables
    window = np.asarray(order[lo:hi], dtype=np.int64)
    done = np.asarray(order[:lo], dtype=np.int64)
    inside = np.zeros(t.n, dtype=bool)
    inside[window] = True
    indeg = np.full(t.n, _BLOCKED, dtype=np.int32)
    owner, p = _gather(t.pred_ptr, t.pred, window)
    indeg[window] = np.bincount(owner, weights=inside[p], minlength=len(window)).astype(np.int32)
    indeg[done] = -1
    _, s = _gather(t.touch_ptr, t.touch, done)
    rem = t.rem0 - np.bincount(s, minlength=t.n).astype(np.int32)
    return _beam(t, indeg, rem, live_before, hi - lo, width, weight, cutoff, deadline, give_up=True)
