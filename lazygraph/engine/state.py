"""An engine's state: everything an evaluation reads or writes besides the graph itself.

One `Engine` holds the cache statistics, the in-process store, the on-disk store (opened on
first use, for the current cache root and passes), the pending-node claims between threads,
the fused-region kernels it has built, its constructor table and its lowering passes. Every
part shared by threads locks itself (stores, statistics, claims, region kernels); nothing on
the evaluation path lives in module globals. `ENGINE` is the process's default engine, the
one `lg.eval`, `lg.cache` and `python -m lazygraph cache` use.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from cache import disk as diskmod
from cache.stats import Stats
from cache.store import MemoryStore
from lazygraph import debug
from lazygraph.engine import compile as compiler
from lazygraph.engine.lower_fusion import RegionKernels
from lazygraph.engine.threads import Claims
from ops import storage
from ops.settings import SETTINGS
from optimizer.registry import Pass


class Engine:
    """One evaluation engine's state (see the module docstring)."""

    def __init__(self) -> None:
        self.stats = Stats()
        self.memory = MemoryStore()
        self.memory.before_listing = self.stats.flush  # entries listed with their hits counted
        self.claims = Claims()
        self.regions = RegionKernels()
        #: recipe constructor name -> kernel builder (compile.constructors, plus registered ones)
        self.constructors: dict[str, compiler.Constructor] = compiler.constructors(self.regions)
        #: the lowering passes a miss runs with the optimizer's (by name)
        self.lowering: dict[str, Pass] = {p.name: p for p in compiler.LOWERING}
        self._disk: diskmod.DiskStore | None = None
        self._version: str | None = None
        self._disk_lock = threading.Lock()

    # -- what users and tests extend ------------------------------------------------------

    def register_constructor(self, name: str, build: Callable[[Any, dict], Any]) -> None:
        """Make New nodes with this constructor name buildable (a pass of one's own makes them)."""
        self.constructors[name] = build

    def unregister_constructor(self, name: str) -> None:
        """Forget a registered constructor (entries naming it are then dropped when read)."""
        self.constructors.pop(name, None)

    def install(self, p: Pass) -> None:
        """Run a lowering pass on every miss (region and window lowering are installed already)."""
        self.lowering[p.name] = p

    def uninstall(self, name: str) -> None:
        """Stop running a lowering pass (programs already cached keep its steps)."""
        self.lowering.pop(name, None)

    def installed(self, name: str) -> bool:
        """Whether a lowering pass runs on misses."""
        return name in self.lowering

    # -- the disk store -------------------------------------------------------------------

    def disk_store(self) -> diskmod.DiskStore:
        """The on-disk store for the current cache root (ops/storage.py decides where and how much)."""
        root = storage.cache_root()
        limit = storage.limit_bytes()  # read per call: a bad value is an error, as soon as it is set
        with self._disk_lock:
            # the passes shape every program, and users and tests register passes at any time:
            # entries made with another set of passes are other versions (microseconds, on misses)
            passes = compiler.fingerprint(self.lowering)
            d = self._disk
            if d is None or (d.root is not root and d.root != root) or d.passes != passes:
                if d is None:
                    atexit.register(self.save_run)
                d = self._disk = diskmod.DiskStore(
                    root,
                    lambda: f"{self.source_tag()}-{passes}",
                    limit,
                    report=lambda msg: debug.log(msg, at=1),
                )
                d.passes = passes
            d.limit = limit
            return d

    def source_tag(self) -> str:
        """The hash of lazygraph's sources and versions, once per process.

        About 7 ms quiet, 40-60 ms on a busy machine (every source file read and hashed): the
        store asks for it only when it writes an entry or reads a listed file, so a first call
        in a fresh store leaves it to the background worker's first save.
        """
        v = self._version
        if v is None:
            from lazygraph.version import __version__

            v = self._version = storage.version_tag([__version__, np.__version__])
        return v

    def save_run(self) -> None:
        """At exit: this process's statistics and history, for `python -m lazygraph cache`."""
        d, stats = self._disk, self.stats
        if d is None or not stats.history:
            return
        d.save_run(
            {
                "format": 1,
                "pid": os.getpid(),
                "argv": sys.argv,
                "started": stats.started,
                "stats": stats.summary(),
                "history_columns": [
                    "t",
                    "evaluations",
                    "hits",
                    "hash_s",
                    "replay_s",
                    "optimize_s",
                    "run_s",
                    "nodes",
                ],
                "history": stats.history_rows(),
            }
        )


#: the process's default engine
ENGINE = Engine()


def freeze_imported() -> None:
    """Take the objects alive now out of the cyclic collector's scans (`gc.freeze`).

    A full collection visits every tracked object: after importing NumPy and most of
    lazygraph about 29,000 module-level objects (functions, classes, dicts) that live as long as
    the process, 15-50 ms a collection on a busy 2-core machine. A loop's first call builds
    enough lasting objects (templates, programs, kernels) to trigger one, so it landed in
    first calls (heat's 52-117 ms, of which 15-49 ms were that collection). Frozen objects are
    still freed by reference counting; only a reference cycle among them, once garbage, is
    never collected: they are what the import created, before any user data.
    `LAZYGRAPH_GC_FREEZE=0` leaves the collector as it is.
    """
    if SETTINGS.gc_freeze:
        gc.freeze()


freeze_imported()  # at import, before the user's objects exist
