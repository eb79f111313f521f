"""Large-neighbourhood search: re-optimize windows of an order around its peak.

Whatever order the nodes of a window of consecutive steps run in, the set that has run after
the window is the same, so the steps after it are unchanged; only the window's own steps can
move. Re-scheduling a window that contains the peak with a beam (exact when the window is
small) and keeping the result when its highest step is lower strictly lowers that peak
occurrence. Windows of growing size are tried around each peak step until none helps or the
time is up.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from optimizer.schedule.beam import Tables, reoptimize_window
from optimizer.schedule.graph import Dag
from optimizer.schedule.memory import live_profile

#: (window length, beam width) pairs, tried in turn around a peak step until one helps
WINDOWS = ((12, None), (24, 64), (48, 32), (96, 16), (192, 8))


def improve(
    dag: Dag, order: Sequence[int], deadline: float, tables: Tables | None = None
) -> tuple[list[int], int]:
    """Lower the peak of `order` by re-optimizing windows around it until `deadline`."""
    order = list(order)
    n = dag.n
    if n == 0:
        return order, 0
    t = tables or Tables(dag)
    steps, after = live_profile(dag, order)
    while time.perf_counter() < deadline:
        peak = max(steps)
        improved = False
        for length, width in WINDOWS:
            for at in [i for i, s in enumerate(steps) if s == peak]:
                for lo in sorted({max(0, min(at - length // 2, n - length)), max(0, at - length + 1), at}):
                    if time.perf_counter() > deadline:
                        return order, max(steps)
                    hi = min(n, lo + length)
                    live = after[lo - 1] if lo else 0
                    found = reoptimize_window(t, order, lo, hi, live, peak - 1, width, deadline=deadline)
                    if found is not None:
                        order[lo:hi] = found[0]
                        steps, after = live_profile(dag, order)
                        improved = True
                        break
                if improved:
                    break
            if improved:
                break
        if not improved:
            break
    return order, max(steps)
