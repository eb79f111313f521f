"""Memory-aware execution order and buffer planning for one computation graph.

An executor describes its graph as a `Dag` (bytes per value, inputs, views, kept outputs),
calls `best_order(dag, budget)` once per graph structure, and `plan_buffers(dag, order)` for
the buffer each value lives in; both results are plain data that can be cached with the plan.
"""

from optimizer.schedule.beam import Tables, beam_order
from optimizer.schedule.buffers import BufferPlan, plan_buffers
from optimizer.schedule.graph import Dag
from optimizer.schedule.heuristics import HEURISTICS
from optimizer.schedule.memory import (
    check_order,
    is_topological,
    live_profile,
    peak_memory,
    peak_memory_intervals,
    step_memory,
)
from optimizer.schedule.portfolio import ScheduleResult, best_order
from optimizer.schedule.search import exact_order, lower_bound, node_lower_bounds
from optimizer.schedule.windows import improve

__all__ = [
    "HEURISTICS",
    "BufferPlan",
    "Dag",
    "ScheduleResult",
    "Tables",
    "beam_order",
    "best_order",
    "check_order",
    "exact_order",
    "improve",
    "is_topological",
    "live_profile",
    "lower_bound",
    "node_lower_bounds",
    "peak_memory",
    "peak_memory_intervals",
    "plan_buffers",
    "step_memory",
]
