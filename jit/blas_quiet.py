"""Park NumPy's OpenBLAS worker threads before a compiled OpenMP kernel runs.

After each multi-threaded call OpenBLAS's workers spin for a while (2^28 cycles by default,
about 0.1 s; OPENBLAS_THREAD_TIMEOUT, read once when OpenBLAS loads) waiting for the next
one. A compiled OpenMP kernel that runs in that window shares the cores with the spinners:
on two cores the convolution kernels ran 40-60% slower right after a matmul (measured: the
weight gradient 51 ms alone, 72-97 ms after a matmul or inside the CNN step). Lowering
OpenBLAS's thread count does not stop the spinning (measured: no change); shutting its
server down does (0.06 ms), and the next BLAS call starts the workers again (its threads are
back, measured at full two-core speed). The shutdown joins the workers, so it runs only
while no other Python thread could be inside a BLAS call (the only other live thread is
lazygraph's idle background worker). Where NumPy's BLAS is not OpenBLAS or the
symbols are missing, this does nothing; LAZYGRAPH_BLAS_QUIET=0 turns it off.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

from ops.settings import SETTINGS


@functools.cache
def _openblas() -> tuple[Any, Any, Any] | None:
    """(shutdown function, server-running flag, library) of the OpenBLAS NumPy loaded, or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            shutdown = lib.blas_thread_shutdown_
            avail = ctypes.c_int.in_dll(lib, "blas_server_avail")
        except (OSError, AttributeError, ValueError):
            continue
        shutdown.restype = ctypes.c_int
        shutdown.argtypes = []
        return shutdown, avail, lib
    return None


def _alone() -> bool:
    """Whether no other Python thread can be inside a BLAS call now.

    The only other thread allowed is lazygraph's background worker, and only while it has
    nothing queued or running: its jobs (optimization, compilation) are submitted by the
    evaluating thread, which is here, so none can start before the kernel returns.
    """
    from jit import background  # imported late: jit.background imports the compiler module

    me = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not me]
    if any(t.name != "lazygraph-background" for t in others):
        return False
    return not others or background.idle()


def park_blas_workers() -> bool:
    """Stop OpenBLAS's spinning workers before an OpenMP kernel; True if they were stopped."""
    if not SETTINGS.blas_quiet:
        return False
    fns = _openblas()
    if fns is None or not fns[1].value or not _alone():
        return False
    fns[0]()
    return True


# -- GEMMs on a shared machine ------------------------------------------------------------
# A GEMM split over OpenBLAS's threads waits for its slowest part. When other processes
# occupy cores, one of those threads waits for a time slice and the whole product with it:
# on two cores under a load of 3-4, the MLP's Adam step took 143-167 ms with two BLAS
# threads and 36-50 ms with one (its GEMMs alone; measured in alternated processes).

_SET_NAMES = (
    "openblas_set_num_threads",
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads_64_",
)
_GET_NAMES = (
    "openblas_get_num_threads",
    "scipy_openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads_64_",
)


@functools.cache
def _thread_count_fns() -> tuple[Any, Any] | None:
    """(set, get) of the thread count of the OpenBLAS NumPy loaded, or None."""
    fns = _openblas()
    if fns is None:
        return None
    lib = fns[2]
    for set_name, get_name in zip(_SET_NAMES, _GET_NAMES):
        try:
            setter, getter = getattr(lib, set_name), getattr(lib, get_name)
        except AttributeError:
            continue
        setter.restype, setter.argtypes = None, [ctypes.c_int]
        getter.restype, getter.argtypes = ctypes.c_int, []
        return setter, getter
    return None


def others_running() -> int:
    """Runnable threads of other processes now (/proc/loadavg's count less this process's own)."""
    try:
        with open("/proc/loadavg") as f:
            total = int(f.read().split()[3].split("/")[0])
        mine = 0
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue  # a thread that ended meanwhile
            mine += stat[stat.rindex(")") + 2] == "R"
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, total - mine)


@contextlib.contextmanager
def blas_threads_fit_load() -> Iterator[None]:
    """Within the block, BLAS uses only the cores other processes leave free (at least one)."""
    fns = _thread_count_fns() if SETTINGS.blas_quiet else None
    if fns is None:
        yield
        return
    setter, getter = fns
    before = getter()
    free = max(1, (os.cpu_count() or 1) - others_running())
    if free >= before:
        yield
        return
    setter(free)
    try:
        yield
    finally:
        setter(before)
