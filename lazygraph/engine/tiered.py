"""Tiered optimization: a new structure runs after a time-boxed optimization, the full one follows.

A cache miss used to run every pass, the superoptimizer and the order search before the
first run: hundreds of milliseconds for a graph that then runs in one or two. Now a miss
whose box is set (LAZYGRAPH_OPTIMIZE_BUDGET_MS, default 1 ms) gets a time-boxed program
(compile.py: passes while time is left, no superoptimizer, no fusion, no order search: the
recorded order; no pass at all for a small graph, `compile.small`). When that program is `partial` and its structure comes back (the first hit:
a loop, the next call of a function), the full optimization of that evaluation's graph is
queued on the background worker (jit/background.py), as tiered JITs compile only hot code: a
structure evaluated once costs no background work. When the job is done the full program
replaces the partial one in the entry (`Entry.replace`) and is written to the disk cache. Only
full programs are written: a later process never mistakes a partial one for the finished job.
Both programs compute the same values (every pass preserves them), so which one a run gets
changes nothing but speed; where a fused kernel and NumPy round float reductions
differently, that was already so between small and large arrays.

Without a background worker (LAZYGRAPH_JIT_BACKGROUND=0) nothing would finish the job, so a
miss optimizes fully, as does an uncached evaluation (nothing to replace).

The hit path's compiled template matchers (cache/template.py) are a tier too: a structure
matched twice gets its matcher compiled on the worker, ahead of the queued kernels (in place,
as without a worker, when the worker is still busy at `template.compile_after` matches).
"""

from __future__ import annotations

import time
from operator import attrgetter
from typing import Any

import numpy as np

from cache import template, tmatch
from cache.graph import Graph
from cache.key import Walk
from cache.store import Entry
from jit import backend as jit_backend
from jit import background
from lazygraph import debug, lean_native
from lazygraph.engine import compile as compiler
from lazygraph.engine.program import Program
from lazygraph.engine.state import Engine
from ops.settings import SETTINGS


def box(mode: str) -> float | None:
    """A miss's time box in seconds, or None when it optimizes fully now."""
    ms = SETTINGS.optimize_budget_ms
    if ms <= 0 or mode == "0" or not background.enabled():
        return None
    return ms / 1e3


def finish_later(
    engine: Engine,
    entry: Entry,
    partial: Program,
    w: Walk,
    keep: set[int],
    opt: bool,
    sched: bool,
    mode: str,
) -> None:
    """Queue the full optimization of `w`, to replace `partial` in `entry` (and be saved) when done.

    Called on a hit of `partial`, before the run: what Q needs of P's nodes is taken now, as
    the run turns some into leaves. A job queued, running or failed for `partial` is not queued again.
    """
    key = ("optimize", id(entry), id(partial))
    if background.known(key):
        return
    # Q is built on the worker from what the run changes (kept nodes become leaves: operator
    # and attributes; leaves written in place lose their buffer), taken now: one C-level pass
    # here instead of Q's construction (milliseconds on graphs of thousands of nodes, in the
    # first calls of the loops that make them)
    ops = list(map(_OP_ATTRS, w.nodes))
    store = engine.disk_store() if mode != "memory" else None
    device = jit_backend.active_name()  # the worker builds steps for the graph's device

    def job() -> None:
        _await_quiet(engine)
        g = Graph(w, frozenset(keep), ops)
        with jit_backend.running(device):
            _finish(engine, entry, partial, w, keep, g, opt, sched, store)

    background.submit(key, job)


_OP_ATTRS = attrgetter("op", "attrs", "buffer")

#: A full optimization is pure Python: while it runs, threads recording or evaluating share the
#: interpreter lock with it and run at about half speed. So it starts when the program pauses (no
#: other thread ran Python for QUIET_S seconds: a loop's first call ended, `lg.jit_wait()`), or
#: after PATIENCE_S seconds of a loop that never pauses.
QUIET_S = 0.01
PATIENCE_S = 0.1


def _await_quiet(engine: Engine) -> None:
    # evaluations alone are no signal: a loop's first call records for milliseconds between them
    background.await_idle(PATIENCE_S, QUIET_S)


def _finish(
    engine: Engine,
    entry: Entry,
    partial: Program,
    w: Walk,
    keep: set[int],
    g: Graph,
    opt: bool,
    sched: bool,
    store: Any,
) -> None:
    t = time.perf_counter()
    try:
        with np.errstate(all="ignore"):  # passes may compute constants
            _, program = compiler.compile_graph(
                w, keep, opt, sched, engine.lowering, engine.constructors, graph=g
            )
    except Exception as e:  # the partial program stays (correct, only slower); not tried again
        debug.log(
            f"background optimization failed, the time-boxed program stays: {type(e).__name__}: {e}", at=1
        )
        raise
    # its kernels compile here, together, so the program that replaces the partial one runs
    # compiled from its first launch (a kernel whose layout was not foreseen compiles at launch)
    compiler.prepare(program, w.nodes, on_worker=True)
    entry.replace(partial, program.tgraph, program)
    with engine.stats.lock:
        entry.optimize_seconds += time.perf_counter() - t
    if store is not None:
        save(engine, entry, store)


def save(engine: Engine, entry: Entry, store: Any) -> None:
    """Write the entry's full variants to the disk cache (partial ones are left out)."""
    full = [v for v in entry.variants if "time_box" not in v.tgraph.artifacts]
    if not full:
        return
    durable = entry
    if len(full) != len(entry.variants):
        durable = Entry(entry.key, entry.skey, entry.json)
        durable.created = entry.created
        durable.variants = full
    tg = full[0].tgraph
    meta = {
        "optimize_seconds": entry.optimize_seconds,
        "p_nodes": len(entry.skey[0]),
        "q_nodes": len(tg.nodes),
    }
    store.save(durable, meta)
    with engine.stats.lock:
        engine.stats.disk_writes += 1


def wait(timeout: float | None = None) -> bool:
    """Block until background optimization and kernel compilation are done; False on timeout.

    For measuring the steady state, and for tests that check what the full optimization did.
    """
    return background.wait(timeout)


def pending() -> bool:
    """Whether background work (optimization or compilation) is queued or running."""
    return not background.idle()


def _defer_matcher(key: Any, job: Any) -> bool:
    """Compile a template's matcher on the worker, first in its queue (False: it is off), once
    the program pauses: compiling is Python work (7 ms at 238 slots), which in a first call that
    records without pause would take the interpreter lock from it (docs/jit.md)."""

    def quietly() -> None:
        background.await_idle(PATIENCE_S, QUIET_S)
        job()

    return background.enabled() and background.submit(key, quietly, first=True)


template.DEFER = _defer_matcher
tmatch.NATIVE = lean_native.native_matcher  # templates' matchers in C (lazygraph/lean_match.c)
# what the first evaluation would otherwise start or import on its way: the worker's thread,
# and the CPU backend (built on first use; its module imported then: 1.5 ms without bytecode)
jit_backend.get()
if background.enabled():
    background.start()
