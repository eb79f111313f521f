"""Several processes, one program: `init()` under `mpiexec` or torchrun-style variables, ranks,
and collectives on arrays.

    mpiexec -n 2 python3 train.py
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 train.py &   # and RANK=1

    import lazygraph as lg
    lg.distributed.init()                         # MPI's COMM_WORLD, the TCP rendezvous, or one process
    y = lg.distributed.all_reduce(x, op="mean")   # recorded like any operator: nothing runs yet

A collective is an operator in the recorded graph (ops/collective.py), so a training step and
its gradient all-reduce are one graph, hashed and cached like any other; the communicator is
looked up by the kernels at run time and is no part of any key. With one process every
collective is the identity. Backends: "mpi" (CPU arrays), "tcp" (the same without MPI, for
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT launches: a star through rank 0, tcp.py) and "nccl"
(arrays on "cuda": CuPy's NCCL, see nccl.py; on "cuda-emulated" the NCCL path runs over the
CPU transport). mpi4py is imported only by `init()`; without it, or without an MPI library,
`init()` says what to install.
See docs/distributed.md.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

from lazygraph.distributed.collectives import (
    all_gather,
    all_reduce,
    all_reduce_coalesced,
    broadcast,
    reduce,
)
from lazygraph.distributed.rendezvous import RankDiedError
from lazygraph.distributed.transport import (
    DistributedError,
    RankTimeoutError,
    StructureMismatchError,
)
from lazygraph.distributed.world import WORLD
from ops import collective as _collective

#: variables mpiexec/mpirun launchers set (MPICH/Hydra, Open MPI, PMIx, Slurm's PMI)
_MPI_VARS = (
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "MPI_LOCALNRANKS",
    "HYDI_CONTROL_FD",
)
INSTALL = 'pip install "lazygraph[distributed]"  (mpi4py and the mpich wheel)'


class DistributedUnavailable(ImportError):
    """mpi4py or an MPI library is missing (the message says what to install)."""


def launched_by_mpi() -> bool:
    """Whether an MPI launcher started this process (its environment variables are set)."""
    return any(v in os.environ for v in _MPI_VARS)


def _torch_style() -> tuple[int, int] | None:
    """(RANK, WORLD_SIZE) when a torchrun-style launcher set them."""
    if "WORLD_SIZE" not in os.environ and "RANK" not in os.environ:
        return None
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ValueError(
            f"lazygraph.distributed.init: RANK={os.environ.get('RANK')!r} and "
            f"WORLD_SIZE={os.environ.get('WORLD_SIZE')!r} must be integers"
        ) from None


def _timeout() -> float:
    raw = os.environ.get("LAZYGRAPH_DIST_TIMEOUT", "60")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"LAZYGRAPH_DIST_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"LAZYGRAPH_DIST_TIMEOUT must be positive, got {raw!r}")
    return value


def _import_mpi() -> Any:
    """mpi4py's MPI module, or an error naming what to install."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise DistributedUnavailable(
            f"lazygraph.distributed needs mpi4py ({e}); install it: {INSTALL}"
        ) from e
    except RuntimeError as e:  # mpi4py without a loadable MPI library
        raise DistributedUnavailable(
            f"lazygraph.distributed: mpi4py found no MPI library ({e}); install one: {INSTALL}"
        ) from e
    return MPI


def _tcp_address(backend: str | None) -> tuple[str, int, int, int] | None:
    """(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) when the TCP rendezvous should run, else None."""
    torch = _torch_style()
    wanted = backend == "tcp" or (backend is None and torch is not None and not launched_by_mpi())
    if not wanted or (torch is not None and torch[1] == 1 and backend is None):
        return None
    need = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if need:
        raise DistributedError(
            f"lazygraph.distributed.init: the TCP rendezvous needs {', '.join(need)} set (as torchrun sets "
            "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or start the processes with `mpiexec -n N`"
        )
    rank, size = torch  # type: ignore[misc]
    raw = os.environ["MASTER_PORT"]
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"lazygraph.distributed.init: MASTER_PORT={raw!r} must be a port number")
    if not 0 <= rank < size:
        raise ValueError(f"lazygraph.distributed.init: RANK={rank} is not in [0, WORLD_SIZE={size})")
    return os.environ["MASTER_ADDR"], int(raw), rank, size


def init(backend: str | None = None, timeout: float | None = None) -> None:
    """Join the processes the launcher started (idempotent): MPI's COMM_WORLD, the TCP
    rendezvous of torchrun-style variables, or one process.

    `backend`: None (MPI under an MPI launcher; TCP when RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
    are set without one; else MPI if it loads, else one process), "mpi" (collectives of CPU and
    cuda-emulated arrays over MPI), "tcp" (the same over sockets, see tcp.py), "nccl" (arrays on
    "cuda" over NCCL, needs CuPy and a GPU; MPI still starts the processes).
    `timeout`: seconds a rank waits for the others at a collective (LAZYGRAPH_DIST_TIMEOUT).
    """
    if WORLD.initialized:
        return
    if backend not in (None, "mpi", "nccl", "tcp"):
        raise ValueError(
            f"lazygraph.distributed.init: unknown backend {backend!r} (use 'mpi', 'tcp' or 'nccl')"
        )
    seconds = _timeout() if timeout is None else float(timeout)
    tcp = _tcp_address(backend)
    if tcp is not None:
        from lazygraph.distributed.tcp import TcpTransport

        addr, port, r, n = tcp
        transport = TcpTransport(addr, port, r, n, seconds)
        atexit.register(transport.close)
        WORLD.join(transport, None, seconds)
        _install(WORLD)
        return
    if backend == "tcp":  # WORLD_SIZE=1: nothing to connect
        WORLD.single(seconds)
        return
    torch = _torch_style()
    launched = launched_by_mpi()
    try:
        MPI = _import_mpi()
    except DistributedUnavailable:
        if launched or backend is not None:
            raise
        WORLD.single(seconds)  # plain `python3 script.py` without mpi4py: one process
        _install(None)
        return
    comm = MPI.COMM_WORLD
    if torch is not None and (torch[0], torch[1]) != (comm.Get_rank(), comm.Get_size()) and torch[1] > 1:
        raise DistributedError(
            f"lazygraph.distributed.init: RANK={torch[0]} WORLD_SIZE={torch[1]} disagree with MPI's "
            f"rank {comm.Get_rank()} of {comm.Get_size()}"
        )
    from lazygraph.distributed.transport import MpiTransport

    mpi = MpiTransport(comm, seconds)
    atexit.register(mpi.close)  # runs before mpi4py's MPI_Finalize (registered earlier)
    nccl: Any = None
    if backend == "nccl":
        from lazygraph.distributed.nccl import NcclTransport

        nccl = NcclTransport(mpi)
    WORLD.join(mpi, nccl, seconds)
    _install(WORLD)


def _install(world: Any) -> None:
    """Hand the transports to the collective kernels (ops/ imports nothing from here).

    The name "mpi" stands for the CPU transport (MPI's or TCP's): graphs and their cache keys
    are the same whichever carries them."""
    if world is None or world.mpi is None:
        return
    _collective.set_transport("mpi", world.mpi)
    # on "cuda-emulated" the NCCL path runs over MPI (the buffers are NumPy arrays)
    _collective.set_transport("nccl", world.nccl if world.nccl is not None else world.mpi)


def is_initialized() -> bool:
    """Whether `init()` has run in this process."""
    return WORLD.initialized


def rank() -> int:
    """This process's rank (0 before `init()` and in a single process)."""
    return WORLD.rank


def world_size() -> int:
    """How many processes take part (1 before `init()` and in a single process)."""
    return WORLD.size


def barrier() -> None:
    """Wait until every rank arrives (with the deadline: a missing rank is named)."""
    WORLD.require("barrier")
    if WORLD.mpi is not None:
        WORLD.mpi.barrier()


def backend() -> str | None:
    """The transport carrying CPU collectives: "mpi", "tcp", or None (one process)."""
    return WORLD.mpi.name if WORLD.mpi is not None else None


def set_overlap(on: bool) -> None:
    """Overlap communication with computation (default on); off: each collective completes when posted."""
    if WORLD.mpi is not None:
        WORLD.mpi.overlap = bool(on)


def set_bucket_bytes(n: int) -> None:
    """Bucket consecutive all-reduces up to `n` bytes into one call (default 1 MiB; 0: off)."""
    if n < 0:
        raise ValueError(f"set_bucket_bytes: expected a size >= 0, got {n}")
    if WORLD.mpi is not None:
        WORLD.mpi.flush()
        WORLD.mpi.bucket_bytes = int(n)


def communication_seconds() -> float:
    """Seconds spent in MPI calls and waits by this process so far (the benchmark's share)."""
    return WORLD.mpi.seconds if WORLD.mpi is not None else 0.0


def stats() -> dict[str, float]:
    """This process's communication so far: collectives posted (`calls`; a bucket is one),
    the arrays they carried (`arrays`) and the seconds spent in MPI (`seconds`)."""
    t = WORLD.mpi
    return (
        {"calls": t.calls, "arrays": t.arrays, "seconds": t.seconds}
        if t
        else {"calls": 0, "arrays": 0, "seconds": 0.0}
    )


__all__ = [
    "init",
    "is_initialized",
    "backend",
    "rank",
    "world_size",
    "barrier",
    "all_reduce",
    "all_reduce_coalesced",
    "broadcast",
    "reduce",
    "all_gather",
    "set_overlap",
    "set_bucket_bytes",
    "communication_seconds",
    "stats",
    "launched_by_mpi",
    "DistributedError",
    "DistributedUnavailable",
    "RankTimeoutError",
    "RankDiedError",
    "StructureMismatchError",
]
