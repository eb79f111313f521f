"""`lg.cache`: is graph optimization amortized? Statistics, entries, clearing.

lg.cache.stats()    # hits, misses, hit_rate, distinct_graphs, optimize/replay/hash seconds, ...
lg.cache.passes()   # which passes and rewrite rules fired, how often, their time (last and total)
lg.cache.clear()    # forget cached transformations (in this process and on disk, kernels too)
lg.cache.usage()    # graph entries and compiled kernels on disk, with the limit they share
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lazygraph.engine import ENGINE
from ops import storage


def stats(per_entry: bool = True) -> dict[str, Any]:
    """This process's cache figures since start (or the last clear/reset_stats).

    Keys: hits, misses, hit_rate, distinct_graphs, optimize_seconds, replay_seconds,
    hash_seconds, run_seconds, evaluations, uncached, disk_hits, disk_writes,
    corrupt_entries, and `entries` (per structure: hits, misses, P and Q sizes, passes).
    """
    return ENGINE.stats.summary(per_entry)


def reset_stats() -> None:
    """Zero the counters (cached entries stay)."""
    ENGINE.stats.reset()
    reset_passes()


def reset_passes() -> None:
    """Zero the pass report's counters."""
    from optimizer.rewrite.report import REPORT

    REPORT.reset()


def clear(disk: bool = True) -> int:
    """Forget every cached transformation, in this process and (by default) on disk.

    On disk that is every graph entry, run log and compiled kernel under the cache root.
    Returns the number of files removed from the cache directory. Counters restart too.
    """
    ENGINE.memory.clear()
    ENGINE.stats.reset()
    reset_passes()
    if not disk:
        return 0
    return ENGINE.disk_store().clear()


def directory() -> Path:
    """Where entries are stored: $LAZYGRAPH_CACHE_DIR, $XDG_CACHE_HOME/lazygraph or ~/.cache/lazygraph."""
    return ENGINE.disk_store().root


def usage() -> dict[str, Any]:
    """Graph entries and compiled kernels on disk (counts, bytes) and the byte limit they share.

    `refused` says why this process does not use the directory (None when it does).
    """
    store = ENGINE.disk_store()
    return {
        "directory": str(store.root),
        **store.usage(),
        "limit": store.limit,
        "refused": storage.refused(store.root),
    }


def entries() -> list[dict[str, Any]]:
    """The entries on disk (current and other library versions), newest first."""
    return ENGINE.disk_store().listing()


def history() -> list[list]:
    """Per-evaluation figures of this process (rows merge pairwise in long runs).

    Columns: seconds since start, evaluations, hits, hash s, replay s, optimize s, run s, nodes.
    """
    return ENGINE.stats.history_rows()


def passes() -> dict[str, Any]:
    """The pass report: per pass runs/fired/seconds, rule firings, memo hits, and the last optimization."""
    from optimizer.rewrite.report import REPORT

    return REPORT.summary()
