"""Cache statistics of this process: counters, times, and a per-evaluation history."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from cache.store import Entry

#: rows of history kept for plots; when full, neighbouring rows merge (constant memory)
HISTORY_ROWS = 2048
#: queued hits accounted at once when nobody reads the figures (bounded memory: the queue holds entries)
QUEUE_LIMIT = 256


class History:
    """Per-evaluation figures over a whole run in constant memory.

    Each row sums `width` consecutive evaluations: (seconds since start at the last one,
    evaluations, hits, hash s, replay s, optimize s, run s, P nodes). When the table is
    full, pairs of rows merge and the width doubles, so a long run keeps an even picture.
    """

    def __init__(self, capacity: int = HISTORY_ROWS) -> None:
        self.capacity = capacity
        self.width = 1
        self.rows: list[tuple] = []
        self._acc: list[float] | None = None

    def add(self, t: float, hit: bool, hash_s: float, replay_s: float, opt_s: float, run_s: float, n: int):
        """Account one evaluation."""
        acc = self._acc
        if acc is None:
            acc = self._acc = [t, 0, 0, 0.0, 0.0, 0.0, 0.0, 0]
        acc[0] = t
        acc[1] += 1
        acc[2] += hit
        acc[3] += hash_s
        acc[4] += replay_s
        acc[5] += opt_s
        acc[6] += run_s
        acc[7] += n
        if acc[1] >= self.width:
            self.rows.append(tuple(acc))
            self._acc = None
            if len(self.rows) >= self.capacity:
                r = self.rows
                self.rows = [(b[0], *(x + y for x, y in zip(a[1:], b[1:]))) for a, b in zip(r[0::2], r[1::2])]
                self.width *= 2

    def all_rows(self) -> list[tuple]:
        """Completed rows plus the partial one."""
        return self.rows + ([tuple(self._acc)] if self._acc else [])

    def __len__(self) -> int:
        return len(self.rows) + (1 if self._acc else 0)


class Stats:
    """Hits, misses and where the time went, since start (or the last reset).

    Shared by every thread of the process: counters change under `lock` (the engine also
    takes it for the few counters it updates itself), so no evaluation's figures are lost.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        """Zero everything."""
        with self.lock:
            self._reset()

    def _reset(self) -> None:
        if hasattr(self, "_queue"):
            self._flush()  # the entries keep their own counts
        self.started = time.time()
        self.perf_started = time.perf_counter()  # the history's clock (cheaper to read than time())
        self._hits = 0
        self.misses = 0
        self.disk_hits = 0
        self.uncached = 0  # evaluations with caching off (LAZYGRAPH_CACHE=0 or an uncacheable graph)
        self.disk_writes = 0
        self.corrupt = 0
        self._hash_seconds = 0.0
        self._replay_seconds = 0.0
        self.optimize_seconds = 0.0
        self._run_seconds = 0.0
        self._used: dict[str, Entry] = {}
        self._history = History()
        #: hits not accounted yet (see `hit`); a new deque: a hit racing the reset lands in the old one
        self._queue: deque = deque()
        # metered evaluations (see lazygraph/engine/meter.py): peaks in bytes, reuse counts
        self.metered = 0
        self.peak_predicted = 0
        self.peak_measured = 0
        self.peak_mismatches = 0
        self.buffers_reused = 0
        self.inplace_writes = 0

    def record_memory(self, predicted: int, measured: int, reused: int, inplace: int) -> None:
        """Account one metered evaluation: its predicted and measured peak bytes."""
        with self.lock:
            self._record_memory(predicted, measured, reused, inplace)

    def _record_memory(self, predicted: int, measured: int, reused: int, inplace: int) -> None:
        self.metered += 1
        self.peak_predicted = max(self.peak_predicted, predicted)
        self.peak_measured = max(self.peak_measured, measured)
        self.peak_mismatches += predicted != measured
        self.buffers_reused += reused
        self.inplace_writes += inplace

    def record(
        self, outcome: str, entry: Entry | None, hash_s: float, prep_s: float, run_s: float, n: int
    ) -> None:
        """Account one evaluation (outcome hit, disk, miss or off), and its entry's use on a hit."""
        with self.lock:
            self._record(outcome, entry, hash_s, prep_s, run_s, n)

    def _record(
        self, outcome: str, entry: Entry | None, hash_s: float, prep_s: float, run_s: float, n: int
    ) -> None:
        self._flush()  # the queued hits came first (the history keeps the order)
        self._hash_seconds += hash_s
        self._run_seconds += run_s
        if outcome == "hit" or outcome == "disk":
            self._hits += 1
            self._replay_seconds += prep_s
            if outcome == "disk":
                self.disk_hits += 1
        else:
            self.optimize_seconds += prep_s
            if outcome == "miss":
                self.misses += 1
            else:
                self.uncached += 1
        hit = outcome == "hit" or outcome == "disk"
        if entry is not None:
            self._used[entry.digest] = entry
            entry.last_used = time.perf_counter()
            if hit:
                entry.hits += 1
                entry.replay_seconds += prep_s
        self._history.add(
            time.perf_counter() - self.perf_started,
            hit,
            hash_s,
            prep_s if hit else 0.0,
            0.0 if hit else prep_s,
            run_s,
            n,
        )

    def hit(self, entry: Entry, hash_s: float, prep_s: float, run_s: float, n: int, now: float) -> None:
        """Account a warm hit (`now`: its perf_counter): queued, accounted by the next reader.

        Every warm evaluation comes here, so a hit costs one append to a deque (atomic: no lock
        taken); every figure read through this object, `MemoryStore.entries` and `record`
        account the queue first, so no reader sees a hit missing and none is lost.
        """
        q = self._queue
        q.append((entry, hash_s, prep_s, run_s, n, now))
        if len(q) >= QUEUE_LIMIT:
            self.flush()

    def flush(self) -> None:
        """Account the queued hits (in their order)."""
        if self._queue:
            with self.lock:
                self._flush()

    def _flush(self) -> None:
        q, history, origin = self._queue, self._history, self.perf_started
        used = self._used
        pop = q.popleft
        while q:
            try:
                entry, hash_s, prep_s, run_s, n, now = pop()
            except IndexError:  # another thread took the last one
                break
            self._hits += 1
            self._hash_seconds += hash_s
            self._replay_seconds += prep_s
            self._run_seconds += run_s
            used[entry.digest] = entry
            entry.last_used = now
            entry.hits += 1
            entry.replay_seconds += prep_s
            history.add(now - origin, True, hash_s, prep_s, 0.0, run_s, n)

    @property
    def hits(self) -> int:
        """Evaluations that found their program (in memory or on disk)."""
        self.flush()
        return self._hits

    @property
    def hash_seconds(self) -> float:
        """Seconds spent keying graphs."""
        self.flush()
        return self._hash_seconds

    @property
    def replay_seconds(self) -> float:
        """Seconds spent preparing hits."""
        self.flush()
        return self._replay_seconds

    @property
    def run_seconds(self) -> float:
        """Seconds spent running programs."""
        self.flush()
        return self._run_seconds

    @property
    def used(self) -> dict[str, Entry]:
        """The entries evaluations used, by digest."""
        self.flush()
        return self._used

    @property
    def history(self) -> History:
        """The per-evaluation history."""
        self.flush()
        return self._history

    def activity(self) -> int:
        """Evaluations so far, without locking or accounting the queue (a hint for idle detection)."""
        return self._hits + len(self._queue) + self.misses + self.uncached

    def summary(self, per_entry: bool = True) -> dict[str, Any]:
        """The figures `lg.cache.stats()` returns."""
        with self.lock:
            return self._summary(per_entry)

    def _summary(self, per_entry: bool) -> dict[str, Any]:
        self._flush()
        looked_up = self._hits + self.misses
        out: dict[str, Any] = {
            "hits": self._hits,
            "misses": self.misses,
            "hit_rate": self._hits / looked_up if looked_up else 0.0,
            "distinct_graphs": len(self._used),
            "optimize_seconds": self.optimize_seconds,
            "replay_seconds": self._replay_seconds,
            "hash_seconds": self._hash_seconds,
            "run_seconds": self._run_seconds,
            "evaluations": self._hits + self.misses + self.uncached,
            "uncached": self.uncached,
            "disk_hits": self.disk_hits,
            "disk_writes": self.disk_writes,
            "corrupt_entries": self.corrupt,
            "metered_evaluations": self.metered,
            "peak_predicted_bytes": self.peak_predicted,
            "peak_measured_bytes": self.peak_measured,
            "peak_mismatches": self.peak_mismatches,
            "buffers_reused": self.buffers_reused,
            "inplace_writes": self.inplace_writes,
        }
        if per_entry:
            out["entries"] = [e.summary() for e in self._used.values()]
        return out

    def history_rows(self) -> list[list]:
        """The history as JSON-ready rows (see `History`)."""
        with self.lock:
            self._flush()
            return [list(r) for r in self._history.all_rows()]
