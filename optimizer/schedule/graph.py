"""The abstract graph the schedulers work on: nodes with output bytes, views, edges, kept outputs.

A `Dag` is independent of lazygraph's node type so that the schedulers can be tested and
benchmarked on synthetic graphs and reused by any executor. Everything the schedulers need
per node is precomputed here once, as plain lists and Python-int bitsets (bit v = node v),
because the searches below run in pure Python and touch these tables millions of times.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence


class Dag:
    """A computation DAG for memory-aware scheduling.

    Node v produces `sizes[v]` bytes and needs `temp[v]` bytes of scratch space while it runs.
    `inputs[v]` are the nodes it reads. `view_of[v]` is -1, or the input that v is a view of:
    a view costs nothing but keeps its base's buffer alive as long as the view is needed.
    Nodes in `keep` (requested outputs, values the user still holds) are never freed; all other
    values are freed right after their last consumer has run (at once, if they have none).
    `dtypes[v]` only matters to the buffer planner: buffers are reused within one dtype.
    Node labels are arbitrary; `recorded` is the identity order if it is topological.
    """

    __slots__ = (
        "n",
        "inputs",
        "sizes",
        "temp",
        "view_of",
        "keep",
        "dtypes",
        "preds",
        "succs",
        "_pred_mask",
        "root",
        "members",
        "_free_mask",
        "free_nodes",
        "kept_storage",
        "_touch",
        "touch_s",
        "alloc",
        "recorded",
        "_closure",
    )

    def __init__(
        self,
        sizes: Sequence[int],
        inputs: Sequence[Iterable[int]],
        keep: Iterable[int] = (),
        view_of: Sequence[int] | None = None,
        temp: Sequence[int] | None = None,
        dtypes: Sequence[Hashable] | None = None,
    ) -> None:
        n = len(sizes)
        if len(inputs) != n:
            raise ValueError(f"Dag: {n} sizes but {len(inputs)} input lists")
        self.n = n
        self.inputs = [tuple(int(u) for u in ins) for ins in inputs]
        self.view_of = [-1] * n if view_of is None else [int(b) for b in view_of]
        self.temp = [0] * n if temp is None else [int(t) for t in temp]
        self.dtypes = [""] * n if dtypes is None else list(dtypes)
        if not (len(self.view_of) == len(self.temp) == len(self.dtypes) == n):
            raise ValueError("Dag: view_of, temp and dtypes must have one entry per node")
        # A view has no buffer of its own, whatever size its shape would have.
        self.sizes = [0 if self.view_of[v] >= 0 else int(s) for v, s in enumerate(sizes)]
        self.keep = frozenset(int(k) for k in keep)
        self._validate()
        self.preds = [sorted(set(ins)) for ins in self.inputs]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for v in range(n):
            for u in self.preds[v]:
                self.succs[u].append(v)
        self._pred_mask: list[int] | None = None
        self._free_mask: dict[int, int] | None = None
        self._touch: list[list[tuple[int, int]]] | None = None
        self.recorded = _topological(self.preds, self.succs)
        self._storages()
        # bytes newly allocated by running v: its size, or nothing for a view
        self.alloc = [self.sizes[v] if self.root[v] == v else 0 for v in range(n)]
        self._closure: tuple[list[int], list[int]] | None = None

    def _validate(self) -> None:
        n = self.n
        for v in range(n):
            for u in self.inputs[v]:
                if not 0 <= u < n or u == v:
                    raise ValueError(f"Dag: node {v} has an invalid input {u}")
            b = self.view_of[v]
            if b >= 0 and b not in self.inputs[v]:
                raise ValueError(f"Dag: node {v} is a view of {b}, which is not one of its inputs")
            if self.sizes[v] < 0 or self.temp[v] < 0:
                raise ValueError(f"Dag: node {v} has a negative size")
        if any(not 0 <= k < n for k in self.keep):
            raise ValueError("Dag: a kept node is out of range")

    def _storages(self) -> None:
        """Group views with their base: one buffer, freed when every member and reader has run."""
        n = self.n
        root = list(range(n))
        for v in self.recorded:  # bases come first, so a view of a view finds its final base
            if self.view_of[v] >= 0:
                root[v] = root[self.view_of[v]]
        self.root = root
        self.members: dict[int, list[int]] = {}
        for v in range(n):
            self.members.setdefault(root[v], []).append(v)
        # Sparse first: lists of node indices cost the edges, where a Python-int bitset per
        # buffer costs its highest index (quadratic over a graph of 100,000 steps). The
        # bitsets the searches use are built on first use (small graphs only, in practice).
        self.free_nodes: dict[int, list[int]] = {}
        self.kept_storage: set[int] = set()
        for s, mem in self.members.items():
            fs = set(mem)
            for v in mem:
                fs.update(self.succs[v])
            self.free_nodes[s] = sorted(fs)
            if any(v in self.keep for v in mem):
                self.kept_storage.add(s)
        # touch_s[v]: the freeable buffers whose release waits for v.
        self.touch_s: list[list[int]] = [[] for _ in range(n)]
        for s, fs in self.free_nodes.items():
            if s in self.kept_storage or self.sizes[s] == 0:
                continue
            for v in fs:
                self.touch_s[v].append(s)

    @property
    def pred_mask(self) -> list[int]:
        """Per node, the bitset of its inputs (built on first use)."""
        if self._pred_mask is None:
            self._pred_mask = [mask(p) for p in self.preds]
        return self._pred_mask

    @property
    def free_mask(self) -> dict[int, int]:
        """Per storage, the bitset of the nodes whose run its release waits for (built on first use)."""
        if self._free_mask is None:
            self._free_mask = {s: mask(fs) for s, fs in self.free_nodes.items()}
        return self._free_mask

    @property
    def touch(self) -> list[list[tuple[int, int]]]:
        """Per node, the freeable buffers whose release waits for it, with their free masks."""
        if self._touch is None:
            fm = self.free_mask
            self._touch = [[(s, fm[s]) for s in ts] for ts in self.touch_s]
        return self._touch

    def closure(self) -> tuple[list[int], list[int]]:
        """Ancestor and descendant bitsets of every node (computed once, on demand)."""
        if self._closure is None:
            anc = [0] * self.n
            for v in self.recorded:
                a = 0
                for u in self.preds[v]:
                    a |= anc[u] | (1 << u)
                anc[v] = a
            desc = [0] * self.n
            for v in reversed(self.recorded):
                d = 0
                for w in self.succs[v]:
                    d |= desc[w] | (1 << w)
                desc[v] = d
            self._closure = (anc, desc)
        return self._closure

    def relabel(self, perm: Sequence[int]) -> Dag:
        """The same graph with node v renamed perm[v] (used to test label independence)."""
        n = self.n
        inv = [0] * n
        for v, p in enumerate(perm):
            inv[p] = v

        def at(seq: Sequence) -> list:
            return [seq[inv[p]] for p in range(n)]

        return Dag(
            at(self.sizes),
            [[perm[u] for u in self.inputs[inv[p]]] for p in range(n)],
            keep=[perm[k] for k in self.keep],
            view_of=[perm[b] if b >= 0 else -1 for b in at(self.view_of)],
            temp=at(self.temp),
            dtypes=at(self.dtypes),
        )

    def __repr__(self) -> str:
        edges = sum(len(p) for p in self.preds)
        return f"<Dag {self.n} nodes, {edges} edges, {len(self.keep)} kept>"


def mask(nodes: Iterable[int]) -> int:
    """The bitset of a collection of node indices."""
    m = 0
    for v in nodes:
        m |= 1 << v
    return m


def bits(m: int) -> list[int]:
    """Indices of the set bits of m, lowest first."""
    out = []
    while m:
        low = m & -m
        out.append(low.bit_length() - 1)
        m ^= low
    return out


def _topological(preds: list[list[int]], succs: list[list[int]]) -> list[int]:
    """The identity order if it is topological, else Kahn's order taking the lowest label first."""
    n = len(preds)
    if all(u < v for v in range(n) for u in preds[v]):
        return list(range(n))
    indeg = [len(p) for p in preds]
    heap = [v for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        v = heapq.heappop(heap)
        order.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    if len(order) != n:
        raise ValueError("Dag: the graph has a cycle")
    return order
