"""Run by tests/test_distributed.py under `mpiexec -n 2`: the errors a distributed run must give.

    errors.py structure   ranks record graphs of different structure: every rank fails, naming both
    errors.py dead        rank 1 exits at once: rank 0 fails within LAZYGRAPH_DIST_TIMEOUT naming it
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


def report(e: BaseException) -> None:
    print(f"rank {R}: {type(e).__name__}: {e}", flush=True)
    os._exit(0)


if mode == "structure":
    x = lg.asarray(np.ones(4, np.float32))
    y = x * 2.0 if R == 0 else lg.exp(x)  # same shapes, different structure
    try:
        D.all_reduce(y).numpy()
    except Exception as e:
        report(e)
elif mode == "dead":
    if R == 1:
        time.sleep(60)  # hung (or gone elsewhere): never arrives at the collective
    t0 = time.monotonic()
    try:
        D.all_reduce(lg.asarray(np.ones(3))).numpy()
    except Exception as e:
        print(f"rank {R}: failed after {time.monotonic() - t0:.1f} s", flush=True)
        report(e)
print(f"rank {R}: no error", flush=True)
os._exit(1)
