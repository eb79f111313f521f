"""`best_order`: the portfolio of schedulers, the searches, and the proof of optimality.

The order of work follows what pays off on computation graphs: every fast heuristic first
(milliseconds, and on layered graphs the depth-first orders are already strong), the lower
bound (which ends the search when a heuristic reaches it), then window re-optimization of the
best order found, then, on graphs small enough, the exact search, which either improves the
order or proves it optimal. Everything after the heuristics stops at the time budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from optimizer.schedule.beam import Tables, beam_order
from optimizer.schedule.graph import Dag
from optimizer.schedule.heuristics import HEURISTICS
from optimizer.schedule.memory import peak_memory
from optimizer.schedule.search import exact_order, lower_bound
from optimizer.schedule.windows import improve

#: graphs up to this many nodes get the exact search (with a state cap) after the heuristics
EXACT_MAX_NODES = 160
#: graphs up to this many nodes also get a small beam (larger ones spend the time on windows)
BEAM_MAX_NODES = 400
#: graphs up to this many nodes get the per-node lower bound (its ancestor and descendant
#: bitsets cost n^2/8 bytes); larger ones the simple bound, so the whole call stays near linear
BOUND_MAX_NODES = 8000


@dataclass
class ScheduleResult:
    """The chosen order and what is known about it."""

    order: list[int]
    peak: int  # predicted peak bytes of `order`
    method: str  # the scheduler whose order won ("+window" when window search improved it)
    optimal: bool  # proven: the peak equals the lower bound or the exact search finished
    lower_bound: int  # no order of this graph has a lower peak
    candidates: dict[str, int] = field(default_factory=dict)  # each scheduler's peak
    seconds: float = 0.0


def simple_bound(dag: Dag) -> int:
    """A peak no order can beat, in linear time: all kept buffers, or the largest single step."""
    kept = sum(dag.sizes[s] for s in dag.kept_storage)
    return max(kept, max(a + t for a, t in zip(dag.alloc, dag.temp)))


def best_order(dag: Dag, budget: float = 1.0, *, state_cap: int = 100_000) -> ScheduleResult:
    """The least-peak order the portfolio finds within about `budget` seconds.

    Deterministic whenever the searches finish within the budget (always on small graphs);
    on large graphs the time box decides how far the window search gets.
    """
    start = time.perf_counter()
    # The last window attempt and the bookkeeping after it run a little past the deadline:
    # stop slightly early so that the whole call stays within the budget.
    deadline = start + 0.97 * budget
    n = dag.n
    if n == 0:
        return ScheduleResult([], 0, "recorded", True, 0, {"recorded": 0})
    candidates: dict[str, int] = {}
    orders: dict[str, list[int]] = {}
    best_name, best_order_, best_peak = "", [], None
    for name, scheduler in HEURISTICS.items():
        order = scheduler(dag)
        peak = peak_memory(dag, order)
        candidates[name] = peak
        orders[name] = order
        if best_peak is None or peak < best_peak:
            best_name, best_order_, best_peak = name, order, peak
    lb = lower_bound(dag) if n <= BOUND_MAX_NODES else simple_bound(dag)

    def result(optimal: bool) -> ScheduleResult:
        proven = optimal or best_peak == lb
        return ScheduleResult(
            best_order_, best_peak, best_name, proven, lb, candidates, time.perf_counter() - start
        )

    if best_peak == lb:
        return result(True)
    tables = Tables(dag)
    if n <= BEAM_MAX_NODES:
        for width, weight in ((16, 0.0), (16, 0.5)):
            name = f"beam{width}" + (f"_w{weight}" if weight else "")
            order, peak = beam_order(dag, width, weight=weight, tables=tables, deadline=deadline)
            candidates[name] = peak
            orders[name] = order
            if peak < best_peak:
                best_name, best_order_, best_peak = name, order, peak
            if best_peak == lb:
                return result(True)
    exact = n <= EXACT_MAX_NODES
    # Window search from each start, best first, until its share of the time is spent: half of
    # what remains when the exact search follows, all of it otherwise.
    window_deadline = deadline if not exact else time.perf_counter() + (deadline - time.perf_counter()) / 2
    starts = sorted(candidates, key=candidates.get)
    seen_peaks = set()
    for name in starts:
        if time.perf_counter() >= window_deadline or best_peak == lb:
            break
        if candidates[name] in seen_peaks:  # most likely the same order again
            continue
        seen_peaks.add(candidates[name])
        order, peak = improve(dag, orders[name], window_deadline, tables)
        if peak < best_peak:
            best_name, best_order_, best_peak = name + "+window", order, peak
    if best_peak == lb:
        return result(True)
    if exact and time.perf_counter() < deadline:
        order, bound, proven = exact_order(dag, best_peak, state_cap=state_cap, deadline=deadline)
        if order is not None:
            best_name, best_order_, best_peak = "exact", order, bound
            candidates["exact"] = bound
        if proven:
            return result(True)
        return ScheduleResult(
            best_order_,
            best_peak,
            best_name,
            False,
            max(lb, bound),
            candidates,
            time.perf_counter() - start,
        )
    return result(False)
