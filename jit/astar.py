"""A* over assignments of parallelism to loops (Dali section 4.2), and the exhaustive check.

The search assigns loops in order (enclosing loops first). A node's estimate is the cost of
the kernel with the assigned loops as assigned and every unassigned loop counted as
maximally parallel (the best lane count among its options, no penalties): a lower bound on
every completion, so the heuristic is admissible and the first complete assignment popped is
optimal. Only data-consistent partial assignments are scored; `heuristic_calls` counts the
scores computed, as Dali's Table 1 does.

Cost: per stage, iterations x work per iteration / lanes, where lanes multiply over the
stage's loops; plus penalties for what parallelism costs: a fork/join (or grid-wide
schedule) per iteration of sequential enclosing loops for a blocks loop that is not
outermost, a combining tree per reduction spread over lanes, and uncoalesced (gathered)
reads for threads over non-sequential iterators.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
from dataclasses import dataclass

from jit.ir import KernelIR, Par, check_complete, consistent


@dataclass(frozen=True)
class Target:
    """Lane counts and penalties of one kind of hardware."""

    name: str
    blocks: int  # parallel blocks (OpenMP threads; resident CUDA blocks)
    threads: int  # lanes per block (SIMD lanes; CUDA threads per block)
    fork: float  # price of starting a parallel loop inside a sequential one
    combine: float  # price per level of a cross-lane reduction tree
    gather: float  # extra price per element of a non-sequential read under threads

    def lanes(self, par: Par, extent: int) -> int:
        """How many iterations run at once under `par`."""
        if par is Par.BLOCKS:
            n = self.blocks
        elif par is Par.THREADS:
            n = self.threads
        elif par is Par.BLOCKS_AND_THREADS:
            n = self.blocks * self.threads
        else:
            n = 1
        return max(1, min(n, extent))


def cpu_target(lanes: int = 8) -> Target:
    """This machine's cores as blocks and SIMD lanes as threads."""
    return Target("cpu", os.cpu_count() or 1, lanes, fork=2000.0, combine=4.0, gather=1.0)


CUDA = Target("cuda", 1024, 256, fork=200.0, combine=32.0, gather=4.0)


@dataclass
class SearchResult:
    """The best assignment and the search's statistics (Dali's Table 1 columns)."""

    assignment: tuple[Par, ...]
    cost: float
    heuristic_calls: int
    expanded: int
    variables: int
    space: int

    def describe(self, ir: KernelIR) -> str:
        """`L0 rows=Blocks, L1 cols=Threads ... (cost, calls)`."""
        parts = [f"L{i} {lp.name}={p.value}" for i, (lp, p) in enumerate(zip(ir.loops, self.assignment))]
        return (
            ", ".join(parts)
            + f"  (cost {self.cost:.4g}, {self.heuristic_calls} heuristic calls, space {self.space})"
        )


def estimate(ir: KernelIR, target: Target, assign: tuple[Par, ...]) -> float:
    """Cost of `assign`, unassigned loops maximally parallel (exact when complete)."""
    loops = ir.loops
    n = len(assign)
    stages: dict[int, list[int]] = {}
    for i, lp in enumerate(loops):
        stages.setdefault(lp.stage, []).append(i)
    total = 0.0
    for stage, idx in stages.items():
        iters = 1.0
        lanes = 1.0
        for i in idx:
            lp = loops[i]
            iters *= lp.hint
            if i < n:
                lanes *= target.lanes(assign[i], lp.hint)
            else:
                lanes *= max(target.lanes(o, lp.hint) for o in lp.options)
        base = iters * ir.work.get(stage, 1.0) / lanes
        total += base
        for i in idx:
            if i >= n:
                continue
            lp, par = loops[i], assign[i]
            if par.threads:
                gathers = sum(1 for it in lp.iterators if not it.sequential and it.producer is None)
                total += target.gather * gathers * iters / lanes
        total += _penalties(ir, target, assign, idx)
    return total


def _penalties(ir: KernelIR, target: Target, assign: tuple[Par, ...], idx: list[int]) -> float:
    out = 0.0
    n = len(assign)
    for i in idx:
        if i >= n:
            continue
        lp, par = ir.loops[i], assign[i]
        anc = ir.ancestors(i)
        outer_iters = 1.0
        outer_lanes = 1.0
        for a in anc:
            outer_iters *= ir.loops[a].hint
            outer_lanes *= target.lanes(assign[a], ir.loops[a].hint)
        if par.blocks and anc:
            out += target.fork * outer_iters / outer_lanes
        if lp.reduces and par is not Par.SEQUENTIAL:
            levels = math.log2(target.lanes(par, lp.hint) + 1)
            out += target.combine * levels * outer_iters / outer_lanes
    return out


def astar(ir: KernelIR, target: Target) -> SearchResult:
    """The optimal data-consistent assignment (raises ValueError when none exists)."""
    n = len(ir.loops)
    calls = 0
    expanded = 0
    tie = itertools.count()
    heap: list[tuple[float, int, int, tuple[Par, ...]]] = [(estimate(ir, target, ()), 0, next(tie), ())]
    while heap:
        f, _, _, assign = heapq.heappop(heap)
        if len(assign) == n:
            return SearchResult(assign, f, calls, expanded, n, ir.space())
        expanded += 1
        for par in ir.loops[len(assign)].options:
            child = assign + (par,)
            if not consistent(ir, child):
                continue
            calls += 1
            heapq.heappush(heap, (estimate(ir, target, child), -len(child), next(tie), child))
    raise ValueError("no data-consistent assignment of parallelism exists for this kernel")


def exhaustive(ir: KernelIR, target: Target) -> tuple[SearchResult, int]:
    """The optimum by trying every assignment, and the number of consistent ones."""
    best: tuple[Par, ...] | None = None
    best_cost = math.inf
    count = 0
    for assign in itertools.product(*(lp.options for lp in ir.loops)):
        if not check_complete(ir, assign):
            continue
        count += 1
        c = estimate(ir, target, assign)
        if c < best_cost:
            best, best_cost = assign, c
    if best is None:
        raise ValueError("no data-consistent assignment of parallelism exists for this kernel")
    n = len(ir.loops)
    return SearchResult(best, best_cost, 0, 0, n, ir.space()), count
