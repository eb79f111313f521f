"""Run by tests/test_distributed.py WITHOUT mpiexec: incomplete torchrun-style variables are refused
with a clear message; without them one process is a world of size 1 where collectives are identities."""

from __future__ import annotations

import os

import numpy as np

import lazygraph as lg

D = lg.distributed
os.environ.update(RANK="0", WORLD_SIZE="2")  # torchrun-style, but no MASTER_ADDR/MASTER_PORT
try:
    D.init()
except D.DistributedError as e:
    print(f"refused: {e}")
else:
    raise SystemExit("init() accepted WORLD_SIZE=2 without MASTER_ADDR/MASTER_PORT or an MPI launcher")
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="http")
try:
    D.init()
except ValueError as e:
    print(f"refused: {e}")
else:
    raise SystemExit("init() accepted MASTER_PORT=http")
for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    del os.environ[k]
try:
    D.init(backend="tcp")
except D.DistributedError as e:
    print(f"refused: {e}")
else:
    raise SystemExit("init(backend='tcp') accepted no RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT")
assert not D.is_initialized()
D.init()
assert (D.is_initialized(), D.rank(), D.world_size()) == (True, 0, 1)
x = lg.asarray(np.arange(6, dtype=np.int32).reshape(2, 3))
np.testing.assert_array_equal(D.all_reduce(x).numpy(), x.numpy())
assert D.all_reduce(x, "mean").dtype == np.float64
np.testing.assert_array_equal(D.broadcast(x).numpy(), x.numpy())
np.testing.assert_array_equal(D.all_gather(x, axis=1).numpy(), x.numpy())
D.barrier()
print("single process: collectives are identities")
