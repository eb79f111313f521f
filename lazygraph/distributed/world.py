"""This process's place in the distributed run: rank, size, and the transports (one object)."""

from __future__ import annotations

from typing import Any


class World:
    """Rank and size, and the transports `init()` made (None in a single process without MPI)."""

    def __init__(self) -> None:
        self.initialized = False
        self.rank = 0
        self.size = 1
        self.timeout = 60.0
        self.mpi: Any = None
        self.nccl: Any = None

    def single(self, timeout: float) -> None:
        """One process, no MPI: every collective is the identity."""
        self.initialized, self.rank, self.size, self.timeout = True, 0, 1, timeout

    def join(self, mpi: Any, nccl: Any, timeout: float) -> None:
        """The processes of an MPI communicator."""
        self.mpi, self.nccl, self.timeout = mpi, nccl, timeout
        self.rank, self.size, self.initialized = mpi.rank, mpi.size, True

    def require(self, what: str) -> None:
        """Collectives need `init()` first (as torch.distributed's process group does)."""
        if not self.initialized:
            raise RuntimeError(f"lazygraph.distributed.{what}: call lazygraph.distributed.init() first")


WORLD = World()
