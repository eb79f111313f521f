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

import ctypes
import functools
import threading
from typing import Any

from ops.settings import SETTINGS


@functools.cache
def _openblas() -> tuple[Any, Any] | None:
    """(shutdown function, server-running flag) of the OpenBLAS NumPy loaded, or None."""
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
        return shutdown, avail
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
