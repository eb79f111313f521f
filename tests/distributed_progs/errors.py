"""Run by tests/test_distributed.py under `mpiexec -n 2`: the errors a distributed run must give.

    errors.py mismatch    ranks record graphs of different structure: every rank fails, naming both
                          digests; then rank 1 passes a longer array: every rank fails, naming both shapes
    errors.py dead        rank 1 exits at once: rank 0 fails within LAZYGRAPH_DIST_TIMEOUT naming it
                          (MPICH's mpiexec needs -disable-auto-cleanup, else it ends the job itself)
    errors.py hung        rank 1 never arrives (sleeps): the same error
    errors.py dead-root   rank 0 exits at once (TCP: the rank every collective goes through)
Each rank prints `rank R: <ExceptionType>: <message>` and leaves without MPI_Finalize (a peer is gone)."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import lazygraph as lg

D = lg.distributed
D.init()
R = D.rank()
mode = sys.argv[1]


def say(line: str) -> None:
    """One write per line, so the two ranks' lines never interleave in mpiexec's output."""
    os.write(1, (line + "\n").encode())


def report(e: BaseException, together: bool = False, leave: bool = True) -> None:
    say(f"rank {R}: {type(e).__name__}: {e}")
    if not leave:
        return
    if together:  # the ranks still talk: leave together, so no rank ends the job under another
        D.barrier()
    os._exit(0)


if mode == "mismatch":
    x = lg.asarray(np.ones(4, np.float32))
    y = x * 2.0 if R == 0 else lg.exp(x)  # same shapes, different structure
    try:
        D.all_reduce(y).numpy()
    except Exception as e:
        report(e, leave=False)
    D.barrier()  # both failed at the same collective: the ranks still agree and go on
    x = lg.asarray(np.ones(3 + R, np.float32))  # rank 1 passes one more element
    try:
        D.all_gather(x).numpy()
    except Exception as e:
        report(e, together=True)
elif mode in ("dead", "hung", "dead-root"):
    if R == 1 and mode == "dead" or R == 0 and mode == "dead-root":
        os._exit(3)  # dies without a word
    if R == 1 and mode == "hung":
        time.sleep(60)  # hung (or gone elsewhere): never arrives at the collective
    t0 = time.monotonic()
    try:
        D.all_reduce(lg.asarray(np.ones(3))).numpy()
    except Exception as e:
        say(f"rank {R}: failed after {time.monotonic() - t0:.1f} s")
        report(e)
say(f"rank {R}: no error")
os._exit(1)
