"""Cache entries and the in-process store.

An `Entry` is everything cached for one structural key: one or more variants (a
transformation graph and the program the engine built from it, which this package never
looks into; variants differ in the guards their size- or value-dependent decisions need),
plus counters. The store keeps entries in
buckets by `key_hash` and compares keys whole, so colliding hashes only cost a comparison.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from cache import key as keymod
from cache.key import Key
from cache.recipe import compile_guard, guard_reads
from cache.template import KEY_HASHES
from cache.tgraph import TransformationGraph
from ops.node import Node


def key_json(key: tuple) -> str:
    """A structural key (tokens, roots) as compact JSON; the same in every process."""
    return json.dumps(key, separators=(",", ":"))


def digest_of(text: str) -> str:
    """A short content hash for names: of files, of entries in listings."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Variant:
    """One transformation of a key: its graph, what the engine built from it, its guard check."""

    __slots__ = ("tgraph", "program", "check", "memo")

    def __init__(self, tgraph: TransformationGraph, program: Any) -> None:
        self.tgraph = tgraph
        self.program = program  # opaque here: the engine's executable form of `tgraph`
        self.memo: Any = None  # opaque here too: what the engine's hit path derives from `program` once
        guards = [compile_guard(g) for g in tgraph.guards]
        self.check: Callable[[list[Node]], bool] | None = _all_hold(guards, tgraph.guards) if guards else None


def _all_hold(guards: list[Callable[[list[Node]], bool]], spec: list) -> Callable[[list[Node]], bool]:
    """One callable telling whether every guard holds on P' (a guard that cannot be computed fails).

    Outcomes are memoized by what the guards read (`guard_reads`: one generated function), so a
    hit on the sizes of an earlier evaluation costs a few attribute reads, not the guards'
    expressions; guards that read values or memory windows are evaluated every time.
    """

    def evaluate(nodes: list[Node]) -> bool:
        for g in guards:
            try:
                if not g(nodes):
                    return False
            except Exception:  # a guard over values that no longer fit: not this variant
                return False
        return True

    check = guard_reads(spec, evaluate)
    return evaluate if check is None else check


class Entry:
    """The cached transformations of one structural key, with their statistics."""

    __slots__ = (
        "key",
        "skey",
        "json",
        "digest",
        "variants",
        "hits",
        "misses",
        "disk_hits",
        "optimize_seconds",
        "replay_seconds",
        "created",
        "last_used",
    )

    def __init__(self, key: Key, skey: tuple, text: str | None = None) -> None:
        self.key = key  # the flat key of this process (see cache/key.py)
        self.skey = skey  # (tokens, root slots): the same key in process-independent form
        self.json = text if text is not None else key_json(skey)
        self.digest = digest_of(self.json)
        self.variants: list[Variant] = []
        self.hits = 0
        self.misses = 0
        self.disk_hits = 0
        self.optimize_seconds = 0.0
        self.replay_seconds = 0.0
        self.created = time.time()
        self.last_used = time.perf_counter()  # the engine stamps each use with perf_counter

    def select(self, nodes: list[Node]) -> Any:
        """The program of the first variant whose guards hold on this graph, or None."""
        for v in self.variants:
            check = v.check
            if check is None or check(nodes):
                return v.program
        return None

    def add(self, tg: TransformationGraph, program: Any) -> Any:
        """Publish a finished variant (the newest is tried first: it was made for the latest sizes).

        Other threads may select it at once, so `program` must be complete (ordered) by now.
        """
        v = Variant(tg, program)
        with _VARIANTS_LOCK:
            # a new list, not an insert: a thread iterating the old one in `select` is undisturbed
            self.variants = [v, *self.variants[:7]]  # keep the recent variants of a key
        return program

    def replace(self, old: Any, tg: TransformationGraph, program: Any) -> Any:
        """Publish a finished variant in place of the one whose program is `old` (tiered optimization).

        Threads running `old` finish with it; the next selection finds the new one first.
        """
        v = Variant(tg, program)
        with _VARIANTS_LOCK:
            rest = [x for x in self.variants if x.program is not old]
            self.variants = [v, *rest[:7]]
        return program

    def summary(self) -> dict:
        """Per-entry counts and sizes for `lg.cache.stats()` and listings."""
        tg = self.variants[0].tgraph if self.variants else None
        return {
            "key": self.digest[:12],
            "hits": self.hits,
            "misses": self.misses,
            "disk_hits": self.disk_hits,
            "variants": len(self.variants),
            "p_nodes": len(self.skey[0]),
            "q_nodes": len(tg.nodes) if tg else 0,
            "steps": len(tg.order) if tg else 0,
            "guards": len(tg.guards) if tg else 0,
            "passes": list(tg.passes) if tg else [],
            "optimize_seconds": self.optimize_seconds,
            "replay_seconds": self.replay_seconds,
        }


#: guards every Entry's variant list (a rare write: once per miss)
_VARIANTS_LOCK = threading.Lock()


class MemoryStore:
    """Entries of this process, by full key (oldest dropped past `capacity`).

    Shared by every thread: each method holds the store's lock (a hit costs one uncontended
    acquire); entries and plans are shared, never copied, and never changed once published.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._buckets: dict[int, list[Entry]] = {}
        self._count = 0
        self._lock = threading.RLock()
        #: changes whenever an entry may have left or been replaced (templates remember entries)
        self.generation = 0
        #: called before entries are listed: the engine's statistics account their queued hits
        #: (the entries' counts and last uses) there (cache/stats.py `Stats.hit`)
        self.before_listing: Callable[[], None] | None = None

    def get(self, key: Key) -> Entry | None:
        """The entry for exactly this key."""
        known = KEY_HASHES.get(id(key))  # keymod.key_hash, inline: every evaluation comes here
        h = known[1] if known is not None and known[0] is key else hash(key)
        with self._lock:
            bucket = self._buckets.get(h)
            if bucket:
                for e in bucket:
                    if e.key is key or e.key == key:
                        return e
        return None

    def put(self, entry: Entry) -> None:
        """Insert or replace the entry for entry.key."""
        h = keymod.key_hash(entry.key)
        with self._lock:
            self.generation += 1
            bucket = self._buckets.setdefault(h, [])
            for i, e in enumerate(bucket):
                if e.key == entry.key:
                    bucket[i] = entry
                    return
            bucket.append(entry)
            self._count += 1
            if self._count > self.capacity:
                self._evict()

    def _evict(self) -> None:
        """Drop the least recently used quarter (rare: only programs with many structures)."""
        self.generation += 1
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        for e in entries[: max(1, len(entries) // 4)]:
            bucket = self._buckets[keymod.key_hash(e.key)]
            bucket.remove(e)
            if not bucket:
                del self._buckets[keymod.key_hash(e.key)]
            self._count -= 1

    def entries(self) -> list[Entry]:
        """All entries, in insertion order per bucket."""
        if self.before_listing is not None:
            self.before_listing()
        with self._lock:
            return [e for bucket in self._buckets.values() for e in bucket]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self.generation += 1
            self._buckets.clear()
            self._count = 0

    def __len__(self) -> int:
        return self._count
