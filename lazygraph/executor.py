"""Evaluation: key the graph, replay or build its cached plan, run it, memoize the results.

Each evaluation walks the graph behind the requested roots once (`cache.key.walk`), which
numbers the nodes and builds the structural key. A key seen before (in this process, or on
disk from an earlier one) gives its plan at once: the passes do not run, the plan binds the
new graph's leaves and runs its steps. A new key is optimized (`optimizer.optimize`: P -> Q),
recorded as a transformation graph and stored. `LAZYGRAPH_CACHE=0` turns the cache off (every
evaluation optimizes), `=memory` keeps it in this process only; `LAZYGRAPH_OPTIMIZE=0` runs
no passes (Q = P).

Memoization: the requested roots and nodes a live array or a later-recorded consumer still
holds keep their values (`realize`), their inputs are dropped so evaluated history can be
freed; other values are freed after their last consumer.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

import optimizer
from cache import disk as diskmod
from cache.explain import explain_miss, memory_lines
from cache.graph import Graph
from cache.key import Walk, walk
from cache.meter import Meter
from cache.plan import EvaluationError, Plan
from cache.stats import Stats
from cache.store import Entry, MemoryStore, key_json
from lazygraph import debug, memplan, txn
from ops import storage
from ops.creation import BUFFER
from ops.node import Node
from optimizer.rewrite.report import REPORT

__all__ = ["EvaluationError", "defer", "evaluate", "realize", "schedule", "STATS", "MEMORY"]

#: this process's cache statistics and in-process store (see lazygraph/cachectl.py)
STATS = Stats()
MEMORY = MemoryStore()
_disk: diskmod.DiskStore | None = None
_version: str | None = None


def schedule(roots: Sequence[Node]) -> list[Node]:
    """Unevaluated nodes reachable from `roots`, inputs before consumers (the key's order)."""
    w = walk(roots)
    return [w.nodes[s] for s in w.interior]


class _OrderedWeakSet:
    """A set of weakly held objects that iterates in insertion order (a WeakSet's order
    varies from run to run, and the order of an evaluation's roots is part of its key)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}

    def add(self, obj: Any) -> None:
        """Insert obj (kept in place if present; a dead object's reused id is replaced)."""
        ref = self._refs.get(id(obj))
        if ref is None or ref() is not obj:
            self._refs.pop(id(obj), None)
            self._refs[id(obj)] = weakref.ref(obj)

    def clear(self) -> None:
        """Forget everything."""
        self._refs.clear()

    def __iter__(self) -> Any:
        return iter([o for o in (r() for r in list(self._refs.values())) if o is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        # Every evaluation asks; dead references are dropped when the set is read.
        return bool(self._refs)


class _Recording(threading.local):
    """This thread's recording context (each thread records and evaluates its own graphs)."""

    def __init__(self) -> None:
        #: storages whose pending value this thread's next evaluation point computes too (the
        #: loss that backward() was called on, running statistics), so it joins the same graph
        self.deferred = _OrderedWeakSet()


_recording = _Recording()


def defer(storage: Any) -> None:
    """Compute `storage.node` at this thread's next evaluation point, whatever it evaluates."""
    _recording.deferred.add(storage)


def deferred() -> list[Any]:
    """The storages this thread's next evaluation point will compute too (for checks and tests)."""
    return list(_recording.deferred)


#: pending nodes some thread's evaluation is computing: id(node) -> that thread's ident. Two
#: threads may share an unevaluated array; evaluating it at once from both would have one
#: thread read a node the other is turning into a leaf, so the second waits for the first.
_claims: dict[int, int] = {}
_claims_changed = threading.Condition(threading.Lock())


def _claim(w: Walk) -> list[int] | None:
    """Claim the walk's pending nodes for this thread; None (after waiting) when it must walk again.

    Only called while other threads exist (one thread cannot race itself). A walk is stale
    when another thread realized one of its pending nodes meanwhile (realize sets the buffer
    first), or when another evaluation is computing one of them: then wait until it ends.
    """
    me = threading.get_ident()
    nodes = w.nodes
    ids = []
    for s in w.interior:
        node = nodes[s]
        if node.buffer is not None:
            return None
        ids.append(id(node))
    with _claims_changed:
        if any(_claims.get(i, me) != me for i in ids):
            _claims_changed.wait(0.05)  # woken when an evaluation releases its claims
            return None
        mine = [i for i in ids if i not in _claims]  # (a nested evaluation keeps the outer claims)
        for i in mine:
            _claims[i] = me
    if any(nodes[s].buffer is not None for s in w.interior):  # realized just before the claim
        _release(mine)
        return None
    return mine


def _release(ids: list[int]) -> None:
    """Give up claims once the evaluation has memoized its values (or failed)."""
    with _claims_changed:
        for i in ids:
            _claims.pop(i, None)
        _claims_changed.notify_all()


def _memoized(w: Walk) -> set[int]:
    """P slots whose values are kept: roots, nodes a storage holds, nodes held from outside.

    Outside references are a later-recorded, unevaluated consumer (`loss` evaluated before
    the `w -= ...` recorded from the same `w`) or an array's cached view; without keeping
    them each later evaluation would recompute (and retain) that history. References from
    inside the graph are its consumers' inputs; they are counted only when some node has
    more references than a single consumer explains (chains never need the count).
    """
    nodes = w.nodes
    probe = [object()]  # the same access pattern on an object only the list holds: the baseline
    for obj in probe:
        baseline = sys.getrefcount(obj)
    keep = {s for s in w.roots if nodes[s].buffer is None}
    getrefcount = sys.getrefcount
    candidates = []
    for s in w.interior:
        node = nodes[s]
        if node.users > 0:
            keep.add(s)
        elif getrefcount(node) > baseline + 1:
            candidates.append(s)
    if candidates:
        consumers = Counter(map(id, chain.from_iterable([nodes[s].inputs for s in w.interior])))
        consumers.update(txn.history_refs())  # write histories are not users' references
        for s in candidates:
            node = nodes[s]
            if getrefcount(node) > baseline + consumers.get(id(node), 0):
                keep.add(s)
    return keep


def _disk_store() -> diskmod.DiskStore:
    """The on-disk store for the current cache root (ops/storage.py decides where and how much)."""
    global _disk, _version
    root = storage.cache_root()
    limit = storage.limit_bytes()  # read per call: a bad value is an error, as soon as it is set
    if _version is None:  # the sources' hash, once per process (about 7 ms)
        import lazygraph

        _version = storage.version_tag([lazygraph.__version__, np.__version__])
    # the registered passes shape every plan, and users and tests register passes at any time:
    # entries made with another set of passes are other versions (a few microseconds, on misses)
    version = f"{_version}-{optimizer.fingerprint()}"
    if _disk is None or _disk.root != root or _disk.version != version:
        if _disk is None:
            atexit.register(_save_run)
        _disk = diskmod.DiskStore(root, version, limit, report=lambda msg: debug.log(msg, at=1))
    _disk.limit = limit
    return _disk


def _save_run() -> None:
    """At exit: this process's statistics and history, for `python -m lazygraph cache`."""
    if _disk is None or not STATS.history:
        return
    _disk.save_run(
        {
            "format": 1,
            "pid": os.getpid(),
            "argv": sys.argv,
            "started": STATS.started,
            "stats": STATS.summary(),
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
            "history": STATS.history_rows(),
        }
    )


def _build(w: Walk, optimize: bool, verbose: int, keep: set[int], report: bool = True) -> tuple[Graph, Any]:
    """Optimize P into Q and return it with its transformation graph (counted in the pass report)."""
    g = Graph(w, frozenset(keep))
    if optimize:

        def trace(name: str, fired: bool, seconds: float, n: int) -> None:
            if report:
                REPORT.record_pass(name, fired, seconds, n)
            if verbose >= 2:
                what = "fired" if fired else "no change"
                debug.log(f"  pass {name}: {what} in {seconds * 1e6:.0f} us ({n} nodes)", at=2)

        optimizer.optimize(g, trace)
        if report:
            REPORT.finish(g)
    return g, g.finalize()


def _structural(w: Walk, opt: bool, sched: bool) -> tuple:
    """The process-independent key (tokens, roots), marked when the optimizer or planner is off."""
    skey = w.structural_key if opt else (*w.structural_key, "noopt")
    return skey if sched else (*skey, "nosched")


def _memory_key(w: Walk, opt: bool, sched: bool) -> tuple:
    """The in-process key, marked (like `_structural`) when the optimizer or planner is off."""
    key = w.key if opt else (*w.key, -2)
    return key if sched else (*key, -3)


def _keep_slots(plan: Plan, keep: set[int]) -> set[int]:
    """The Q slots holding the memoized P nodes."""
    pmap = plan.pmap
    return {q for q in (pmap[p] for p in keep) if q >= 0}


def _miss(
    w: Walk, key: tuple, entry: Entry | None, mode: str, opt: bool, verbose: int, keep: set[int]
) -> tuple:
    """No applicable variant in memory: try the disk, else optimize and store."""
    sched = memplan.enabled()
    skey = entry.skey if entry is not None else _structural(w, opt, sched)
    text = entry.json if entry is not None else key_json(skey)
    store = _disk_store() if mode != "memory" else None
    if store is not None and entry is None:
        found, corrupt = store.load(key, skey, text)
        if corrupt:
            with STATS.lock:
                STATS.corrupt += 1
        if found is not None:
            plan = found.select(w.nodes)
            if plan is not None:
                MEMORY.put(found)
                with STATS.lock:
                    found.disk_hits += 1
                return plan, found, "disk"
    if os.environ.get("LAZYGRAPH_EXPLAIN_MISSES", "0") not in ("", "0"):
        debug.log(f"cache miss: {explain_miss(skey, MEMORY.entries())}", at=0)
    t = time.perf_counter()
    _, tg = _build(w, opt, verbose, keep)
    fresh = entry is None
    if fresh:
        entry = Entry(key, skey, text)

    def prepare(plan: Plan) -> None:
        if sched:  # the chosen order is part of the transformation (saved below, replayed on hits)
            memplan.schedule_plan(plan, w.nodes, _keep_slots(plan, keep))

    # published (to other threads too) only once scheduled: a shared plan never changes
    plan = entry.add(tg, prepare)
    if fresh:
        MEMORY.put(entry)
    with STATS.lock:
        entry.misses += 1
        entry.optimize_seconds += time.perf_counter() - t
    if store is not None:
        meta = {"optimize_seconds": entry.optimize_seconds, "p_nodes": len(skey[0]), "q_nodes": len(tg.nodes)}
        store.save(entry, meta)
        with STATS.lock:
            STATS.disk_writes += 1
    return plan, entry, "miss"


class _Attempt:
    """What one evaluation has done so far, so that a failure can be undone (lazygraph/txn.py)."""

    __slots__ = ("deferred", "walk", "plan", "done", "claimed")

    def __init__(self) -> None:
        self.claimed: list[int] | None = None  # pending nodes this thread claimed (see `_claim`)
        self.deferred: list[Any] = []  # the deferred storages this evaluation took over
        self.walk: Walk | None = None
        self.plan: Plan | None = None
        self.done: tuple | None = None  # (kept P slots, values by Q slot) once the run succeeded

    def fail(self, e: BaseException) -> None:
        """Leave every array as it was, minus the pending writes that depend on the failure."""
        w = self.walk
        if self.done is not None:  # the run succeeded (an interrupt came later): keep its results
            keep, vals = self.done
            _realize_kept(w.nodes, keep, self.plan.pmap, vals)
            txn.commit()
            return
        if w is None:  # nothing was walked: the deferred values are still to be computed
            for s in self.deferred:
                defer(s)
            return
        failed = _failed_slots(e, w, self.plan) if isinstance(e, Exception) else None
        if failed:
            where = txn.origin_of(w.nodes, failed)
            if where is not None and e.args and isinstance(e.args[0], str):
                e.args = (f"{e.args[0]} (recorded at {where})", *e.args[1:])
        taint = txn.rollback(w.nodes, w.interior, failed)
        for s in self.deferred:  # values that do not depend on the failure are still wanted
            if s.node.buffer is None and not taint(s.node):
                defer(s)


def _failed_slots(e: Exception, w: Walk, plan: Plan | None) -> list[int] | None:
    """The P slots the failed step computes, or None when the failure is not a step's."""
    step = getattr(e, "failed_step", None)
    if step is None or plan is None:
        return None
    src, out = step
    if src >= 0:
        return [src]
    # a New step (a fused region, a rewrite): the P nodes it holds, a region's members, and
    # those it computes without materializing them (no Q node of their own)
    pmap, nodes = plan.pmap, w.nodes
    failed = [p for p, q in enumerate(pmap) if q == out]
    i = plan.pos.get(out)
    data = plan.steps[i].recipe.data if i is not None and plan.steps[i].recipe is not None else None
    if isinstance(data, dict) and isinstance(data.get("members"), list):
        failed += [p for p in data["members"] if type(p) is int and 0 <= p < len(nodes)]
    if not failed:
        return None
    slot = {id(n): p for p, n in enumerate(nodes)}
    covered, stack = set(failed), list(failed)
    while stack:
        for c in nodes[stack.pop()].inputs:
            p = slot.get(id(c))
            if p is not None and p not in covered and pmap[p] < 0 and c.buffer is None:
                covered.add(p)
                stack.append(p)
    return sorted(covered)


def _realize_kept(nodes: list[Node], keep: set[int], pmap: list[int], vals: list[Any]) -> None:
    """Memoize the kept values of a successful run (idempotent: an interrupt may repeat it)."""
    for p in keep:
        q = pmap[p]
        if q >= 0:
            buf = vals[q]
            if buf is not None:
                buf.setflags(write=False)  # cheaper than buf.flags.writeable = False
                realize(nodes[p], buf)


def evaluate(roots: Sequence[Node]) -> None:
    """Compute and memoize every root (one graph, one plan); a failure changes nothing.

    When the run fails (an index or label out of range, a kernel error, an interrupt),
    every array keeps its value and the pending writes that depend on the failing operator
    are dropped (lazygraph/txn.py); the error names the line that recorded that operator.
    """
    attempt = _Attempt()
    try:
        _evaluate(roots, attempt)
    except BaseException as e:
        attempt.fail(e)
        raise
    finally:
        if attempt.claimed:
            _release(attempt.claimed)
    txn.commit()


def _evaluate(roots: Sequence[Node], attempt: _Attempt) -> None:
    """One evaluation; `attempt` records its progress for `_Attempt.fail`."""
    t0 = time.perf_counter()
    pending = _recording.deferred
    if pending:
        attempt.deferred = list(pending)
        extra = [s.node for s in attempt.deferred if s.node.buffer is None]
        pending.clear()
        roots = [*roots, *extra]
    w = walk(roots)
    attempt.walk = w
    # other threads may be computing (and realizing) nodes of this graph: see `_claim`
    while w.interior and threading.active_count() > 1:
        attempt.claimed = _claim(w)
        if attempt.claimed is not None:
            break
        w = attempt.walk = walk(roots)
    if not w.interior:
        return
    t1 = time.perf_counter()
    # settings are read per evaluation (tests and users change them at run time); the time
    # counts as running, not as replay
    verbose = debug.level()
    if verbose >= 3:
        debug.log("graph:\n  " + "\n  ".join(debug.graph_lines(roots)), at=3)
    env = os.environ
    mode = env.get("LAZYGRAPH_CACHE", "1")
    opt = env.get("LAZYGRAPH_OPTIMIZE", "1") != "0"
    sched = memplan.enabled()
    key = _memory_key(w, opt, sched)
    metering = verbose >= 1 or env.get("LAZYGRAPH_MEASURE", "0") not in ("", "0")
    t_settings = time.perf_counter() - t1
    t1 += t_settings
    entry = None
    keep = None  # a miss needs it to plan; on a hit it is computed as part of the run (timed so)
    if mode == "0" or not w.cacheable:
        keep = _memoized(w)
        plan: Plan | None = Plan(_build(w, opt, verbose, keep)[1], w.tokens)
        if sched:
            memplan.schedule_plan(plan, w.nodes, _keep_slots(plan, keep))
        outcome = "off"
    else:
        entry = MEMORY.get(key)
        plan = entry.select(w.nodes) if entry is not None else None
        outcome = "hit"
        if plan is None:
            keep = _memoized(w)
            plan, entry, outcome = _miss(w, key, entry, mode, opt, verbose, keep)
    attempt.plan = plan
    REPORT.evaluated(plan.tgraph.artifacts, outcome)  # what `lg.cache.passes()["last"]` shows
    t2 = time.perf_counter()
    if keep is None:
        keep = _memoized(w)
    pmap = plan.pmap
    keepq = _keep_slots(plan, keep)
    fkeep = frozenset(keepq)
    layout = plan.layouts.get(fkeep)
    # runs are metered until a layout is learnt for these kept values, and when asked for
    meter = Meter() if metering or layout is None else None
    trace = None
    if verbose >= 2:

        def trace(name: str, shape: tuple, dtype: np.dtype, seconds: float) -> None:
            debug.log(f"  {name}{list(shape)} {dtype}: {seconds * 1e6:.1f} us", at=2)

    with np.errstate(all="ignore"):
        vals = plan.run(w.nodes, keepq, trace, layout, meter)
    attempt.done = (keep, vals)
    if meter is not None:
        _account(plan, w.nodes, keepq, fkeep, layout, meter)
    nodes = w.nodes
    _realize_kept(nodes, keep, pmap, vals)  # only now: a failed run memoizes nothing
    t3 = time.perf_counter()
    prep = t2 - t1
    # also stamps the entry's use and, on a hit, its hit count (under the statistics' lock)
    STATS.record(outcome, entry, t1 - t0 - t_settings, prep, t3 - t2 + t_settings, len(nodes))
    if verbose >= 1:
        digest = f" {entry.digest[:8]}" if entry is not None else ""
        what = {"hit": "hit", "disk": "disk hit", "miss": "miss", "off": "uncached"}[outcome]
        detail = (
            f"cache {what}{digest}, hash {(t1 - t0 - t_settings) * 1e6:.0f} us, "
            f"{'replay' if outcome in ('hit', 'disk') else 'optimize'} {prep * 1e6:.0f} us"
        )
        if plan.memory is not None:
            pred, meas, reused, inplace = plan.memory
            detail += (
                f", peak {debug.fmt_bytes(pred)} predicted / {debug.fmt_bytes(meas)} measured"
                f" ({reused} buffers reused, {inplace} in-place writes)"
            )
        debug.log_evaluation(roots, len(plan.steps), t3 - t0, detail, verbose)
    else:
        debug.log_evaluation(roots, len(plan.steps), t3 - t0, "", verbose)


def _account(
    plan: Plan, nodes: list[Node], keepq: set[int], fkeep: frozenset, layout: Any, meter: Meter
) -> None:
    """After a metered run: the predicted and measured peaks; a layout for the next runs."""
    if layout is None or layout.key != (tuple(meter.sizes), tuple(meter.aliases), tuple(meter.dtypes)):
        # first run with these kept values, or sizes/aliases changed: plan for what was observed
        # (a run without a layout reuses nothing, and reuse never raises the peak)
        fresh = memplan.layout_for(plan, nodes, keepq, meter)
        memplan.remember(plan, fkeep, fresh)
        predicted = fresh.predicted
    else:
        predicted = layout.predicted
    plan.memory = (predicted, meter.peak, meter.reused, meter.inplace)
    STATS.record_memory(predicted, meter.peak, meter.reused, meter.inplace)


def realize(node: Node, buffer: np.ndarray) -> None:
    """Turn a node into a leaf holding its value; its recorded meaning is unchanged."""
    node.buffer = buffer
    if node.requires_grad and not node.grad_leaf:
        return  # a later backward() still needs the operation and its inputs
    node.op = BUFFER
    node.inputs = ()
    node.attrs = {}


def explain_lines(roots: Sequence[Node]) -> list[str]:
    """Q for these roots (without running anything): passes fired, cache status, nodes."""
    w = walk(roots)
    if not w.interior:
        return ["Q = nothing to run (every output is already evaluated)"]
    opt = os.environ.get("LAZYGRAPH_OPTIMIZE", "1") != "0"
    key = _memory_key(w, opt, memplan.enabled())
    entry = MEMORY.get(key) if w.cacheable else None
    plan = entry.select(w.nodes) if entry is not None else None
    cached = plan is not None
    g, tg = _build(w, opt, 0, _memoized(w), report=False)
    if plan is None:  # what the planner would choose for this graph (nothing runs)
        plan = Plan(tg, w.tokens)
        if memplan.enabled():
            memplan.schedule_plan(plan, w.nodes, _keep_slots(plan, _memoized(w)))
    status = f"cached as {entry.digest[:8]}" if cached else "not cached yet"
    passes = ", ".join(g.fired) or "none"
    head = (
        f"Q = optimized graph, {len(tg.nodes)} nodes, {len(tg.order)} steps "
        f"(passes fired: {passes}; guards: {len(tg.guards)}; {status}):"
    )
    rules = g.artifacts.get("rules", {})
    fired = ["rules fired = " + ", ".join(f"{k} x{v}" for k, v in sorted(rules.items()))] if rules else []
    return [head, *fired, *REPORT.lines(), *memory_lines(plan), *g.lines()]
