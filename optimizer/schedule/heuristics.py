"""Fast scheduling heuristics: the members of the portfolio.

Each takes a `Dag` and returns an execution order (a list of node indices). They are linear or
near-linear in the graph size, so the portfolio can run all of them on graphs of thousands of
nodes and keep the best; the searches in `search.py` then start from that incumbent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from optimizer.schedule.graph import Dag


def recorded(dag: Dag) -> list[int]:
    """The order the program recorded its operations in (what a plain interpreter runs)."""
    return list(dag.recorded)


def breadth_first(dag: Dag) -> list[int]:
    """Kahn's algorithm with a FIFO queue: level by level from the sources."""
    indeg = [len(p) for p in dag.preds]
    queue = deque(v for v in dag.recorded if indeg[v] == 0)
    order = []
    while queue:
        v = queue.popleft()
        order.append(v)
        for w in dag.succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    return order


def _post_order(dag: Dag, sinks: list[int], children: list[list[int]]) -> list[int]:
    """Depth-first post-order from `sinks`, visiting each node's inputs in `children` order."""
    done = [False] * dag.n
    order = []
    for s in sinks:
        if done[s]:
            continue
        done[s] = True
        stack = [(s, iter(children[s]))]
        while stack:
            v, it = stack[-1]
            for c in it:
                if not done[c]:
                    done[c] = True
                    stack.append((c, iter(children[c])))
                    break
            else:
                stack.pop()
                order.append(v)
    return order


def _sinks(dag: Dag) -> list[int]:
    return [v for v in dag.recorded if not dag.succs[v]]


def depth_first(dag: Dag) -> list[int]:
    """Post-order from the outputs, inputs in recorded order (a reference interpreter's order)."""
    return _post_order(dag, _sinks(dag), dag.preds)


def liu_estimates(dag: Dag) -> tuple[list[int], list[int]]:
    """Per node, the peak and the residual bytes of its subgraph run alone as a tree (Liu's P, R)."""
    n = dag.n
    peak, resid = [0] * n, [0] * n
    sizes, temp, view_of = dag.sizes, dag.temp, dag.view_of
    for v in dag.recorded:
        kids = sorted(dag.preds[v], key=lambda c: resid[c] - peak[c])
        acc = p = 0
        for c in kids:
            p = max(p, acc + peak[c])
            acc += resid[c]
        peak[v] = max(p, acc + sizes[v] + temp[v])
        resid[v] = resid[view_of[v]] if view_of[v] >= 0 else sizes[v]
    return peak, resid


def depth_first_liu(dag: Dag) -> list[int]:
    """Post-order with each node's inputs in Liu's order: decreasing (subtree peak - residual).

    On an in-tree (every value read once, no views) this is the best of all post-orders
    (Liu, 1986); on a DAG the tree estimates double-count shared inputs, so it is a heuristic.
    """
    peak, resid = liu_estimates(dag)
    children = [sorted(p, key=lambda c: resid[c] - peak[c]) for p in dag.preds]
    kept = dag.kept_storage
    final = [resid[v] if dag.root[v] in kept else 0 for v in range(dag.n)]
    sinks = sorted(_sinks(dag), key=lambda v: final[v] - peak[v])
    return _post_order(dag, sinks, children)


def _list_schedule(dag: Dag, choose: Callable[[list[int], int, list[int]], int]) -> list[int]:
    """Generic list scheduler: `choose(ready, live, gain)` picks the next node among `ready`.

    `gain[v]` is kept up to date incrementally: the bytes freed right after v if v ran next
    (the buffers for which v is the last unscheduled reader).
    """
    n = dag.n
    sizes, root = dag.sizes, dag.root
    indeg = [len(p) for p in dag.preds]
    free_nodes = dag.free_nodes
    remaining = {s: len(fs) for s, fs in free_nodes.items()}
    gain = [0] * n
    for s in free_nodes:
        if remaining[s] == 1 and s not in dag.kept_storage:
            gain[s] += sizes[s]
    done = bytearray(n)
    ready = [v for v in dag.recorded if indeg[v] == 0]
    live = 0
    order = []
    for _ in range(n):
        v = choose(ready, live, gain)
        ready.remove(v)
        order.append(v)
        done[v] = 1
        if root[v] == v:
            live += sizes[v]
        for s in dag.touch_s[v]:
            r = remaining[s] - 1
            remaining[s] = r
            if r == 0:
                live -= sizes[s]
            elif r == 1:
                last = next(u for u in free_nodes[s] if not done[u])
                gain[last] += sizes[s]
        for w in dag.succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return order


def greedy_least_peak(dag: Dag) -> list[int]:
    """Run next the ready node whose step needs the least memory; ties: most bytes freed."""
    alloc = dag.alloc
    need = [a + t for a, t in zip(alloc, dag.temp)]

    def choose(ready: list[int], live: int, gain: list[int]) -> int:
        best, key = ready[0], None
        for v in ready:
            k = (need[v], alloc[v] - gain[v])
            if key is None or k < key:
                best, key = v, k
        return best

    return _list_schedule(dag, choose)


def greedy_most_freed(dag: Dag) -> list[int]:
    """Run next the ready node that lowers live memory most (freed - allocated); ties: least step."""
    alloc = dag.alloc
    need = [a + t for a, t in zip(alloc, dag.temp)]

    def choose(ready: list[int], live: int, gain: list[int]) -> int:
        best, key = ready[0], None
        for v in ready:
            k = (alloc[v] - gain[v], need[v])
            if key is None or k < key:
                best, key = v, k
        return best

    return _list_schedule(dag, choose)


def greedy_most_freed_lifo(dag: Dag) -> list[int]:
    """As `greedy_most_freed`, ties going to the most recently readied node (depth-first flavour)."""
    alloc = dag.alloc
    need = [a + t for a, t in zip(alloc, dag.temp)]

    def choose(ready: list[int], live: int, gain: list[int]) -> int:
        best, key = ready[-1], None
        for v in reversed(ready):
            k = (alloc[v] - gain[v], need[v])
            if key is None or k < key:
                best, key = v, k
        return best

    return _list_schedule(dag, choose)


#: the portfolio's members, by the name reported when one of them wins
HEURISTICS: dict[str, Callable[[Dag], list[int]]] = {
    "recorded": recorded,
    "greedy_least_peak": greedy_least_peak,
    "greedy_most_freed": greedy_most_freed,
    "greedy_most_freed_lifo": greedy_most_freed_lifo,
    "depth_first": depth_first,
    "depth_first_liu": depth_first_liu,
    "breadth_first": breadth_first,
}
