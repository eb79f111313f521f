"""Work off the critical path: one daemon thread runs jobs in the order they were submitted.

A cold start pays for compiling kernels (the C compiler, tens to hundreds of milliseconds
each) and for finishing a new structure's optimization (engine/tiered.py). Neither is needed
for a correct first run: a fused region runs op by op on NumPy (`FusedKernel.fallback`) and a
time-boxed program is a correct, merely slower, program. So those jobs go here, and callers
switch to their results when the jobs are done, as tiered JIT runtimes do.

Jobs are named by a key: a key already queued or running is not queued again, and a key whose
job failed is remembered, so the caller does that work in the foreground next time (where its
error reaches the user as it would without this module). The worker is a daemon: it never
keeps the process alive at exit; what it writes to the disk cache is written atomically, so an
exit in the middle of a job leaves no partial file. One thread: on a small machine the
evaluating thread keeps the other core.

`LAZYGRAPH_JIT_BACKGROUND=0` (`SETTINGS.jit_background`) turns the worker off: callers then do
the work where they stand. `wait()` blocks until nothing is queued or running (tests,
benchmarks measuring the steady state, `lg.jit_wait()`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

from jit import compile_c
from ops.settings import SETTINGS

_cond = threading.Condition()
_queue: deque[tuple[Hashable, Callable[[], object]]] = deque()
_queued: set[Hashable] = set()  # queued or running
_failed: dict[Hashable, BaseException] = {}
_worker: threading.Thread | None = None
#: the worker's thread ident (None before it starts): evaluations check that the only other
#: running thread is this one (engine/evaluate.py) with one lookup in `threading`'s registry
IDENT: int | None = None
#: jobs submitted, finished and failed in this process
COUNTS = {"submitted": 0, "done": 0, "failed": 0}


def enabled() -> bool:
    """Whether work may leave the critical path (LAZYGRAPH_JIT_BACKGROUND, default on)."""
    return SETTINGS.jit_background


def submit(key: Hashable, job: Callable[[], object], first: bool = False) -> bool:
    """Queue `job` under `key` (once while it is queued); False when that key failed before.

    On False the caller does the work itself, in the foreground. `first` queues it ahead of the
    others (a short job whose result the next evaluations use, behind no kernel compile).
    """
    with _cond:
        if key in _failed:
            return False
        if key in _queued:
            return True
        _queued.add(key)
        if first:
            _queue.appendleft((key, job))
        else:
            _queue.append((key, job))
        COUNTS["submitted"] += 1
        if _worker is None or not _worker.is_alive():
            start()  # (the condition's lock is reentrant)
        _cond.notify_all()
    return True


def start() -> None:
    """Start the worker now, idle until a job comes (it waits on a condition: no CPU, no lock).

    A process's first thread costs about 10 ms to start (measured: 9.6 ms, then 0.2 ms) plus a
    wait for the interpreter lock; started here, at import, that is not the first call's.
    """
    global _worker, IDENT
    with _cond:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_run, name="lazygraph-background", daemon=True)
            _worker.start()
            IDENT = _worker.ident


def threads() -> int:
    """How many threads of this module run (0 or 1): they never realize a user's arrays, so an
    evaluation need not claim its nodes against them (engine/threads.py)."""
    w = _worker
    return 1 if w is not None and w.is_alive() else 0


def queued(key: Hashable) -> bool:
    """Whether a job is queued or running under `key`."""
    with _cond:
        return key in _queued


def known(key: Hashable) -> bool:
    """Whether a job under `key` is queued, running or failed (a new submission would do nothing)."""
    with _cond:
        return key in _queued or key in _failed


def failure(key: Hashable) -> BaseException | None:
    """The error of `key`'s failed job, if it failed."""
    with _cond:
        return _failed.get(key)


def _run() -> None:
    while True:
        with _cond:
            while not _queue:
                _cond.wait()
            key, job = _queue.popleft()
        error: BaseException | None = None
        try:
            job()
        except BaseException as e:  # noqa: BLE001  (recorded: the caller redoes the work in the foreground)
            error = e
        del job  # a finished job's closure may hold a whole graph: not until the next job
        with _cond:
            _queued.discard(key)
            if error is None:
                COUNTS["done"] += 1
            else:
                COUNTS["failed"] += 1
                error.__traceback__ = None  # its frames would hold what the job held
                _failed[key] = error
            _cond.notify_all()
        error = None


def wait(timeout: float | None = None) -> bool:
    """Block until no job is queued or running; False when `timeout` seconds passed first."""
    with _cond:
        return _cond.wait_for(lambda: not _queued, timeout)


def idle() -> bool:
    """True when no job is queued or running."""
    with _cond:
        return not _queued


def await_idle(patience: float, quiet: float = 0.002) -> None:
    """Return once no other thread has run Python code for `quiet` seconds, or after `patience`.

    Python work here shares the interpreter lock with the threads that record and evaluate:
    started while they run (a loop's first call records between its evaluations), it roughly
    halves their speed. A thread that runs Python moves its frame; one blocked in C (a sleep,
    a lock, `lg.jit_wait()`, I/O) keeps it, so unchanged frames over `quiet` seconds say the
    program pauses. Only the frames' identities and positions are kept between looks: a frame
    object held here would keep its function's locals alive after it returns.
    """
    me = threading.get_ident()
    end = time.perf_counter() + patience
    seen = None
    while time.perf_counter() < end:
        frames = sys._current_frames()
        now = sorted((i, id(f), f.f_lasti) for i, f in frames.items() if i != me)
        del frames
        if now == seen:
            return
        seen = now
        time.sleep(quiet)


_probed = False


def toolchain_probed() -> bool:
    """Whether the C toolchain has been probed (probing runs the compiler a few times: not free)."""
    global _probed
    if not _probed:
        _probed = compile_c.toolchain.cache_info().currsize > 0
    return _probed


def probe_toolchain() -> None:
    """Probe the C toolchain on the worker (where it is not probed yet), so no launch waits for it."""
    if not toolchain_probed():
        submit(("toolchain",), compile_c.available)


def forget_failures() -> None:
    """Forget failed jobs (their work is tried again: a test changed the compiler, say)."""
    with _cond:
        _failed.clear()
