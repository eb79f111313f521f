"""Evaluation: key the graph, look it up, compile it on a miss, run it, memoize the results.

Each evaluation walks the graph behind the requested roots once (`cache.key.walk`), which
numbers the nodes and builds the structural key. A key seen before (in this process, or on
disk from an earlier one) gives its program at once: no pass runs, the program binds the new
graph's leaves and runs its steps. A new key is compiled (compile.py: passes, lowering,
program, order) and stored; a miss is time-boxed, and a structure that comes back gets its
full optimization in the background (tiered.py). `LAZYGRAPH_CACHE=0` turns the cache off (every evaluation
compiles), `=memory` keeps it in this process only; `LAZYGRAPH_OPTIMIZE=0` runs no passes.
A failed evaluation changes nothing (attempt.py, lazygraph/txn.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from cache.explain import explain_miss, memory_lines
from cache.key import Walk, walk
from cache.store import Entry, digest_of, key_json
from jit import backend
from jit import background as workers
from jit.blas_quiet import PARKED as _BLAS_PARKED
from jit.blas_quiet import unpark_blas_workers
from lazygraph import debug, txn
from lazygraph.engine import compile as compiler
from lazygraph.engine import memory, tiered
from lazygraph.engine.attempt import Attempt, memoized, realize_kept
from lazygraph.engine.meter import Meter
from lazygraph.engine.program import Program
from lazygraph.engine.state import ENGINE, Engine
from lazygraph.engine.threads import _DEREF, RECORDING
from ops import collective, settings
from ops.node import HOST, Node
from ops.settings import HOT as _HOT
from ops.settings import SETTINGS
from optimizer.rewrite.report import REPORT

#: the threading module's registries of running and starting threads (read, never changed here)
_ACTIVE = threading._active  # type: ignore[attr-defined]
_LIMBO = threading._limbo  # type: ignore[attr-defined]
_OUTCOME = {"hit": "hit", "disk": "disk hit", "miss": "miss", "off": "uncached"}
_DEVICE = attrgetter("device")
_HOSTS = frozenset({None, HOST})  # a node's device: None is the host


# NumPy's floating-point error state is a context variable (`np.errstate` sets it): the run
# sets it directly to a state derived once per current state, as `errstate.__enter__` would
# derive it on every run (about a microsecond a run)
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _EXTOBJ
    from numpy._core._ufunc_config import _make_extobj
except ImportError:  # another NumPy: the public context manager
    _EXTOBJ = None
_IGNORING: dict[Any, Any] = {}  # the current state -> the same with every error ignored


def _quiet() -> Any:
    """Ignore floating-point errors in the kernels (as eager NumPy code under errstate would);
    returns what the caller resets."""
    if _EXTOBJ is None:
        es = np.errstate(all="ignore")
        es.__enter__()
        return es
    current = _EXTOBJ.get()
    quiet = _IGNORING.get(current)
    if quiet is None:
        quiet = _make_extobj(all="ignore")  # from the current state: its buffer size and callback
        if len(_IGNORING) > 64:
            _IGNORING.clear()
        _IGNORING[current] = quiet
    return _EXTOBJ.set(quiet)


def schedule(roots: Sequence[Node]) -> list[Node]:
    """Unevaluated nodes reachable from `roots`, inputs before consumers (the key's order)."""
    w = walk(roots)
    return [w.nodes[s] for s in w.interior]


def _variant() -> str | None:
    """The superoptimizer's settings when they are not the defaults (None): a structure compiled
    under other settings is another cache entry, in memory and on disk."""
    s = SETTINGS
    if not s.superopt:
        return "nosuperopt"
    search, cost = s.superopt_search, s.superopt_cost
    return None if search == "taso" and cost == "analytic" else f"superopt:{search}:{cost}"


def _jit_variant() -> str | None:
    """The JIT's settings when they are not the defaults (None): a plan fused and compiled under
    LAZYGRAPH_JIT=1 is not the plan of LAZYGRAPH_JIT=0 (replayed, it made "JIT on" and "JIT off"
    in one process run the same plan), nor of another size threshold or fast math."""
    s = SETTINGS
    if not s.jit:
        return "nojit"
    if s.jit_min_size != 1 or s.fast_math:
        return f"jit:{s.jit_min_size}:{int(s.fast_math)}"
    return None


def settings_now() -> tuple:
    """(debug, cache, optimize, schedule, default key, measure): what every evaluation reads, as
    one tuple (ops/settings.py `HOT`); "default key": no variant marks the key, so a host graph's
    structural key alone names its program."""
    s = SETTINGS
    default = s.optimize and s.schedule and _variant() is None and _jit_variant() is None
    return (s.debug, s.cache, s.optimize, s.schedule, bool(default), s.measure)


def _memory_key(w: Walk, opt: bool, sched: bool, dev: str = HOST) -> tuple:
    """The in-process key, marked when the optimizer or planner is off or set otherwise, or the
    device not the host."""
    key = w.key if opt else (*w.key, -2)
    key = key if sched else (*key, -3)
    v = _variant() if opt else None
    key = key if v is None else (*key, v)
    j = _jit_variant()
    key = key if j is None else (*key, j)
    return key if dev is HOST else (*key, f"device:{dev}")


def _structural(w: Walk, opt: bool, sched: bool, dev: str = HOST) -> tuple:
    """The process-independent key (tokens, roots), marked like `_memory_key`."""
    skey = w.structural_key if opt else (*w.structural_key, "noopt")
    skey = skey if sched else (*skey, "nosched")
    v = _variant() if opt else None
    skey = skey if v is None else (*skey, v)
    j = _jit_variant()
    skey = skey if j is None else (*skey, j)
    return skey if dev is HOST else (*skey, f"device:{dev}")


def device_of(roots: Sequence[Node]) -> str:
    """The device a graph runs on: its roots' (recording keeps each graph on one device)."""
    d = roots[0].device if roots else HOST
    return HOST if d is None else d


def _miss(
    engine: Engine,
    w: Walk,
    key: tuple,
    entry: Entry | None,
    mode: str,
    opt: bool,
    verbose: int,
    keep: set[int],
    dev: str = HOST,
) -> tuple[Program, Entry, str]:
    """No variant applies in memory: read the disk, else compile and store."""
    sched = SETTINGS.schedule
    skey = entry.skey if entry is not None else _structural(w, opt, sched, dev)
    text = entry.json if entry is not None else key_json(skey)
    stats, table = engine.stats, engine.constructors
    store = engine.disk_store() if mode != "memory" else None
    if store is not None and entry is None:
        found, corrupt = store.load(key, skey, text, lambda tg: compiler.load(tg, skey[0], table))
        if corrupt:
            with stats.lock:
                stats.corrupt += 1
        if found is not None:
            program = found.select(w.nodes)
            if program is not None:
                engine.memory.put(found)
                with stats.lock:
                    found.disk_hits += 1
                return program, found, "disk"
    if SETTINGS.explain_misses:
        debug.log(f"cache miss: {explain_miss(skey, engine.memory.entries())}", at=0)
    t = time.perf_counter()
    # time-boxed: the full optimization follows in the background (the host's programs only)
    box = tiered.box(mode) if dev is HOST else None
    _, program = compiler.compile_graph(w, keep, opt, sched, engine.lowering, table, verbose, box=box)
    fresh = entry is None
    if fresh:
        entry = Entry(key, skey, text)
    entry.add(program.tgraph, program)  # published (to other threads too) complete and ordered
    if fresh:
        engine.memory.put(entry)
    with stats.lock:
        entry.misses += 1
        entry.optimize_seconds += time.perf_counter() - t
    if store is not None and not compiler.partial(program):  # a partial one: when finished (tiered.py)
        tiered.save(engine, entry, store)
    return program, entry, "miss"


def evaluate(roots: Sequence[Node], engine: Engine = ENGINE) -> None:
    """Compute and memoize every root (one graph, one program); a failure changes nothing.

    When the run fails (an index or label out of range, a kernel error, an interrupt),
    every array keeps its value and the pending writes that depend on the failing operator
    are dropped (lazygraph/txn.py); the error names the line that recorded that operator.
    """
    d = roots[0].device if roots else HOST  # device_of(roots), inline
    dev = HOST if d is None else d
    if len(roots) > 1 and len(devs := set(map(_DEVICE, roots))) > 1 and not devs <= _HOSTS:
        for d in dict.fromkeys((r.device or HOST) for r in roots):  # one graph per device
            evaluate([r for r in roots if (r.device or HOST) is d], engine)
        return
    attempt = Attempt()
    try:
        if dev is not backend.active_name():
            with backend.running(dev):  # the steps built for this graph launch on its device
                _evaluate(roots, attempt, engine, dev)
        else:
            _evaluate(roots, attempt, engine, dev)
    except BaseException as e:
        attempt.fail(e)
        raise
    finally:
        if attempt.claimed:
            engine.claims.release(attempt.claimed)
    if txn.pending():  # histories to forget (none: nothing to walk)
        txn.commit()


def _evaluate(roots: Sequence[Node], attempt: Attempt, engine: Engine, dev: str = HOST) -> None:
    """One evaluation; `attempt` records its progress for `Attempt.fail`."""
    t0 = time.perf_counter()
    refs = RECORDING.deferred._refs  # the deferred storages, in order (threads.OrderedWeakSet)
    if refs:
        # iterating the set, inline: the weak references dereferenced in C (a dead one is None)
        live = list(map(_DEREF, refs.values()))
        if None in live:
            live = [s for s in live if s is not None]
        attempt.deferred = live
        extra = [s.node for s in live if s.node.buffer is None]
        refs.clear()
        roots = [*roots, *extra]
    w = attempt.walk = walk(roots)
    # other threads may be computing (and realizing) nodes of this graph: see threads.Claims
    # `threading.active_count() > 1 + background.threads()` without a call (each costs microseconds
    # with the caches cold from the last run): the registries' sizes, and whether the second
    # thread is the background compiler (a thread leaves `_active` when its function returns)
    n = len(_ACTIVE) + len(_LIMBO)
    while w.interior and n > 1 and (n > 2 or workers.IDENT not in _ACTIVE):
        attempt.claimed = engine.claims.claim(w)
        if attempt.claimed is not None:
            break
        w = attempt.walk = walk(roots)
        n = len(_ACTIVE) + len(_LIMBO)
    if not w.interior:
        return
    t1 = time.perf_counter()
    verbose, mode, opt, sched, default, measure = _HOT[0] or settings.hot(settings_now)
    if verbose >= 3:
        debug.log("graph:\n  " + "\n  ".join(debug.graph_lines(roots)), at=3)
    # the default superoptimizer and JIT settings (both variants None): the structural key alone
    key = w.key if default and dev is HOST else _memory_key(w, opt, sched, dev)
    entry = None
    talks = None
    keep = None  # a miss needs it to compile; on a hit it is computed as part of the run (timed so)
    if mode == "0" or not w.cacheable:
        keep = memoized(w)
        _, program = compiler.compile_graph(
            w, keep, opt, sched, engine.lowering, engine.constructors, verbose
        )
        outcome = "off"
    else:
        store = engine.memory
        t = w.template  # a template remembers its entry while the store keeps it
        c = t.cached if t is not None and key is w.key else None
        if c is not None and c[0] is store and c[1] == store.generation:
            entry = c[2]
        else:
            g = store.generation  # read first: a put between the two makes the pair stale, not wrong
            entry = store.get(key)
            if entry is not None and t is not None and key is w.key:
                t.cached = (store, g, entry)
        program = None
        if entry is not None:  # entry.select(w.nodes), inline (the hit path)
            for v in entry.variants:
                check = v.check
                if check is None or check(w.nodes):
                    program = v.program
                    talks = v.memo  # whether it has collectives (None: not asked yet)
                    break
        outcome = "hit"
        if program is None:
            keep = memoized(w)
            program, entry, outcome = _miss(engine, w, key, entry, mode, opt, verbose, keep, dev)
            talks = None
        elif talks is None:
            talks = v.memo = _collective(program)
    if outcome != "hit":  # a new program: its kernels compile together, before (or beside) the run
        compiler.prepare(program, w.nodes)
    attempt.program = program
    # collectives send the structure's digest with their arrival message (ranks must agree);
    # nothing else reads it, so a program without them leaves it alone (a call and a closure less)
    if outcome != "hit" or talks:
        collective.set_structure(
            (lambda: entry.digest)
            if entry is not None
            else (lambda: digest_of(key_json(_structural(w, opt, sched, dev))))
        )
    REPORT.evaluated(program.tgraph.artifacts, outcome)  # what `lg.cache.passes()["last"]` shows
    t2 = time.perf_counter()
    partial = "time_box" in program.tgraph.artifacts  # compiler.partial(program), inline
    if keep is None:
        keep = memoized(w)
        if partial:  # a time-boxed structure came back: finish it (tiered.py)
            tiered.finish_later(engine, entry, program, w, keep, opt, sched, mode)
    _, keepq, fkeep, layout, lean = program.plan(keep)  # memoized per keep set and layout
    # runs are metered until a layout is learnt for these kept values, and when asked for; a
    # time-boxed program learns none (planning its buffers cost first calls more than the run:
    # the full program replaces it), it runs as NumPy would, freeing each value after its last use
    meter = Meter() if verbose >= 1 or measure or (layout is None and not partial) else None
    # _quiet(), inline for the common case (a frame less on every evaluation)
    quiet = _IGNORING.get(_EXTOBJ.get()) if _EXTOBJ is not None else None
    token = _EXTOBJ.set(quiet) if quiet is not None else _quiet()
    try:
        if meter is not None or verbose >= 2:
            vals = program.run_observed(w.nodes, keepq, layout, meter, _trace if verbose >= 2 else None)
        elif lean is None or (vals := program.run_lean(w.nodes, lean)) is None:
            vals = program.run(w.nodes, keepq, layout)
    finally:
        _EXTOBJ.reset(token) if _EXTOBJ is not None else token.__exit__(None, None, None)
        if _BLAS_PARKED[0]:  # its kernels parked OpenBLAS's workers: back, before the cores idle
            unpark_blas_workers()
    attempt.done = (keep, vals)
    if meter is not None:
        _account(engine, program, w.nodes, keepq, fkeep, layout, meter)
    realize_kept(w.nodes, keep, program.pmap, vals)  # only now: a failed run memoizes nothing
    t3 = time.perf_counter()
    prep = t2 - t1
    # also stamps the entry's use and, on a hit, its hit count (a hit is queued: Stats.hit)
    if outcome == "hit":
        engine.stats.hit(entry, t1 - t0, prep, t3 - t2, len(w.nodes), t3)
    else:
        engine.stats.record(outcome, entry, t1 - t0, prep, t3 - t2, len(w.nodes))
    number = debug.TOTALS.count(len(program.steps))
    if verbose >= 1:
        digest = f" {entry.digest[:8]}" if entry is not None else ""
        detail = (
            f"cache {_OUTCOME[outcome]}{digest}, hash {(t1 - t0) * 1e6:.0f} us, "
            f"{'replay' if outcome in ('hit', 'disk') else 'optimize'} {prep * 1e6:.0f} us"
        )
        if program.memory is not None:
            pred, meas, reused, inplace = program.memory
            detail += (
                f", peak {debug.fmt_bytes(pred)} predicted / {debug.fmt_bytes(meas)} measured"
                f" ({reused} buffers reused, {inplace} in-place writes)"
            )
        debug.log_evaluation(number, roots, len(program.steps), t3 - t0, detail)


def _collective(program: Program) -> bool:
    """Whether a program posts collectives (they read the structure digest as they run)."""
    return any(s.name in _COLLECTIVE_STEPS for s in program.steps)


_COLLECTIVE_STEPS = frozenset({"collective_start", "collective_wait"})


def _trace(name: str, shape: tuple, dtype: np.dtype, seconds: float) -> None:
    debug.log(f"  {name}{list(shape)} {dtype}: {seconds * 1e6:.1f} us", at=2)


def _account(
    engine: Engine,
    program: Program,
    nodes: list[Node],
    keepq: set[int],
    fkeep: frozenset,
    layout: Any,
    meter: Meter,
) -> None:
    """After a metered run: the predicted and measured peaks; a layout for the next runs."""
    if layout is None or layout.key != (tuple(meter.sizes), tuple(meter.aliases), tuple(meter.dtypes)):
        # first run with these kept values, or sizes/aliases changed: plan for what was observed
        # (a run without a layout reuses nothing, and reuse never raises the peak)
        fresh = memory.layout_for(program, nodes, keepq, meter)
        memory.remember(program, fkeep, fresh)
        predicted = fresh.predicted
    else:
        predicted = layout.predicted
    program.memory = (predicted, meter.peak, meter.reused, meter.inplace)
    engine.stats.record_memory(predicted, meter.peak, meter.reused, meter.inplace)


def explain_lines(roots: Sequence[Node], engine: Engine = ENGINE) -> list[str]:
    """Q for these roots (without running anything): passes fired, cache status, nodes."""
    w = walk(roots)
    if not w.interior:
        return ["Q = nothing to run (every output is already evaluated)"]
    opt, sched = SETTINGS.optimize, SETTINGS.schedule
    entry = engine.memory.get(_memory_key(w, opt, sched, device_of(roots))) if w.cacheable else None
    program = entry.select(w.nodes) if entry is not None else None
    cached = program is not None
    keep = memoized(w)
    g, tg = compiler.transform(w, keep, opt, engine.lowering, report=False)
    if program is None:  # what the planner would choose for this graph (nothing runs)
        program = compiler.build(tg, w.tokens, engine.constructors)
        if sched:
            memory.schedule(program, w.nodes, compiler.keep_slots(program, keep))
    status = f"cached as {entry.digest[:8]}" if cached else "not cached yet"
    passes = ", ".join(g.fired) or "none"
    head = (
        f"Q = optimized graph, {len(tg.nodes)} nodes, {len(tg.order)} steps "
        f"(passes fired: {passes}; guards: {len(tg.guards)}; {status}):"
    )
    rules = g.artifacts.get("rules", {})
    fired = ["rules fired = " + ", ".join(f"{k} x{v}" for k, v in sorted(rules.items()))] if rules else []
    return [head, *fired, *REPORT.lines(), *memory_lines(program), *g.lines()]
