"""The pass report: which passes and rewrite rules fired, how often, and their time.

`REPORT.record_pass` is fed by the optimizer's trace on every optimization (a cache miss);
`REPORT.finish` closes one optimization with the graph's rule counts and files that record
with the transformation (artifact "pass_report", so it is stored on disk with it). Totals
are kept for the process. `last` describes the last evaluation: `REPORT.evaluated` is told
which transformation ran, so on a hit `last` shows the passes and rules that built the
cached transformation, marked `cached` (they did not run again: a pass runs once per
structure), and the totals are unchanged.
"""

from __future__ import annotations

import threading
from typing import Any

from cache.graph import Graph


class _PerThread(threading.local):
    """The optimization a thread is running and the evaluation it ran last."""

    def __init__(self) -> None:
        self.current: list[dict[str, Any]] = []
        self.last: dict[str, Any] = {"passes": [], "rules": {}}
        self.hit: tuple[dict, str] | None = None  # a cached run's (artifacts, outcome), described when asked


class PassReport:
    """Per-pass and per-rule counters (the last optimization and the process total).

    Threads optimize at once: the totals change under a lock, while the optimization being
    recorded and `last` belong to the calling thread (a thread sees its own last evaluation).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero every counter (and every thread's last evaluation)."""
        with self._lock:
            self.passes: dict[str, dict[str, float]] = {}
            self.rules: dict[str, int] = {}
            self.optimizations = 0
            self._local = _PerThread()

    @property
    def last(self) -> dict[str, Any]:
        """What this thread's last evaluation ran (see the module docstring)."""
        local = self._local
        if local.hit is not None:
            artifacts, outcome = local.hit
            local.hit = None
            rec = artifacts.get("pass_report")
            if not isinstance(rec, dict):  # made before reports were filed, or by another version
                rec = {"passes": [], "rules": {}}
            local.last = {
                "passes": [dict(row) for row in rec.get("passes", [])],
                "rules": dict(rec.get("rules", {})),
                "cached": True,
                "outcome": outcome,
            }
        return local.last

    @last.setter
    def last(self, value: dict[str, Any]) -> None:
        self._local.hit = None
        self._local.last = value

    def record_pass(self, name: str, fired: bool, seconds: float, nodes: int) -> None:
        """One pass ran (its condition held): whether it changed the graph, how long it took."""
        with self._lock:
            row = self.passes.setdefault(name, {"runs": 0, "fired": 0, "seconds": 0.0})
            row["runs"] += 1
            row["fired"] += int(fired)
            row["seconds"] += seconds
        self._local.current.append({"pass": name, "fired": fired, "seconds": seconds, "nodes_after": nodes})

    def finish(self, g: Graph) -> None:
        """Close one optimization of `g` (rules from its artifacts)."""
        rules = dict(g.artifacts.get("rules", {}))
        for what, n in g.artifacts.get("library", {}).items():
            rules[f"library:{what}"] = n
        with self._lock:
            for name, n in rules.items():
                self.rules[name] = self.rules.get(name, 0) + n
            self.optimizations += 1
        local = self._local
        current, local.current = local.current, []
        local.hit = None
        local.last = {"passes": current, "rules": rules, "cached": False}
        g.artifacts["pass_report"] = {"passes": current, "rules": rules}

    def evaluated(self, artifacts: dict, outcome: str) -> None:
        """An evaluation ran the transformation with these artifacts (outcome hit/disk/miss/off)."""
        if outcome in ("miss", "off"):
            self.last["outcome"] = outcome  # finish() has just described this optimization
            return
        self._local.hit = (artifacts, outcome)  # described when `last` is read: a hit copies nothing

    def summary(self) -> dict[str, Any]:
        """Totals and this thread's last optimization, JSON-ready."""
        from optimizer.fold import MEMO_STATS

        with self._lock:
            return {
                "optimizations": self.optimizations,
                "passes": {k: dict(v) for k, v in sorted(self.passes.items())},
                "rules": dict(sorted(self.rules.items())),
                "memo": dict(MEMO_STATS),
                "last": self.last,
            }

    def lines(self) -> list[str]:
        """The totals as `name = ...` lines (nothing before the first optimization)."""
        if not self.optimizations:
            return []
        with self._lock:
            rows = sorted(self.passes.items(), key=lambda kv: -kv[1]["seconds"])
            cells = ", ".join(f"{k} {r['runs']}/{r['fired']}/{r['seconds'] * 1e3:.2f}" for k, r in rows)
        out = [f"pass totals over {self.optimizations} optimizations (runs/fired/ms) = {cells}"]
        if self.rules:
            out.append("rule totals = " + ", ".join(f"{k} x{v}" for k, v in sorted(self.rules.items())))
        return out


REPORT = PassReport()
