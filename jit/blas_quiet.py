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

An evaluation that parked the workers starts them again as it ends (`unpark_blas_workers`,
0.05 ms). Left down, the next BLAS call starts them itself, which is fast while the cores are
busy but not after both have idled: a matmul (256 x 1024 by 1024 x 1024) took 13-14 ms
instead of 4.5 after a park and a 30 ms pause, and 4.6-5.1 ms with the workers started again
before the pause. Each park is still a restart to come, and one in the middle of a step can
be slow too (jit/kernel.py's `PARK_MIN`: why short kernels do not park).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any

from ops.settings import SETTINGS


@functools.cache
def _openblas() -> tuple[Any, Any, Any] | None:
    """(shutdown function, server-running flag, start function) of the OpenBLAS NumPy loaded, or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            shutdown = lib.blas_thread_shutdown_
            start = lib.blas_thread_init
            avail = ctypes.c_int.in_dll(lib, "blas_server_avail")
        except (OSError, AttributeError, ValueError):
            continue
        for fn in (shutdown, start):
            fn.restype = ctypes.c_int
            fn.argtypes = []
        return shutdown, avail, start
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
    PARKED[0] = True
    return True


#: whether the workers were parked since they last ran (read inline at every evaluation's end)
PARKED = [False]


def unpark_blas_workers() -> bool:
    """Start the parked workers again (an evaluation's end): True if they were started."""
    PARKED[0] = False
    fns = _openblas()
    if fns is None or fns[1].value:  # down no more: a BLAS call has started them
        return False
    fns[2]()
    return True
