"""The NCCL transport for arrays on the "cuda" device (CuPy's `cupy.cuda.nccl`).

Kept thin on purpose: it has NOT run on a GPU (the machines this was written on have none).
MPI starts the processes and hands rank 0's NCCL unique id to the others; NCCL collectives
are asynchronous on CuPy's current stream, so `start` enqueues and `wait` synchronizes the
stream. The handshake (dead ranks, structure digests) still goes over MPI. Arrays on
"cuda-emulated" never come here: their NCCL path is the MPI transport (CI runs it).
"""

from __future__ import annotations

from typing import Any

from ops.collective import out_dtype, out_shape

_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "mean": 0}  # ncclSum, ncclProd, ncclMax, ncclMin


class NcclTransport:
    """Collectives of CuPy arrays through one NCCL communicator per process (one GPU each)."""

    def __init__(self, mpi: Any) -> None:
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError as e:
            raise ImportError(
                f"lazygraph.distributed: backend 'nccl' needs CuPy with NCCL ({e}); install "
                "cupy-cuda12x and nvidia-nccl-cu12, or use backend 'mpi'"
            ) from e
        self.cp, self.nccl, self.mpi = cupy, nccl, mpi
        self.rank, self.size = mpi.rank, mpi.size
        uid = nccl.get_unique_id() if self.rank == 0 else None
        uid = mpi.comm.bcast(uid, root=0)
        cupy.cuda.Device(self.rank % cupy.cuda.runtime.getDeviceCount()).use()
        self.comm = nccl.NcclCommunicator(self.size, uid, self.rank)

    def _dtype(self, dtype: Any) -> int:
        table = {"f2": self.nccl.NCCL_FLOAT16, "f4": self.nccl.NCCL_FLOAT32, "f8": self.nccl.NCCL_FLOAT64}
        table.update({"i4": self.nccl.NCCL_INT32, "i8": self.nccl.NCCL_INT64, "u1": self.nccl.NCCL_UINT8})
        code = table.get(dtype.str[1:])
        if code is None:
            raise TypeError(f"nccl: dtype {dtype} is not supported (float16/32/64, int32/64, uint8)")
        return code

    def start(self, x: Any, kind: str, attrs: dict, structure: str) -> Any:
        """Enqueue the collective on the current stream (after the MPI handshake)."""
        self.mpi.arrive(kind, structure)
        cp, stream = self.cp, self.cp.cuda.get_current_stream().ptr
        x = cp.ascontiguousarray(x)
        out = cp.empty(
            out_shape(kind, x.shape, attrs), dtype=out_dtype(kind, attrs.get("reduction", ""), x.dtype)
        )
        if kind == "all_reduce":
            src = x.astype(out.dtype, copy=False)
            self.comm.allReduce(
                src.data.ptr, out.data.ptr, src.size, self._dtype(out.dtype), _OPS[attrs["reduction"]], stream
            )
            if attrs["reduction"] == "mean":
                out /= self.size
        elif kind == "broadcast":
            if self.rank == attrs["root"]:
                out[...] = x
            self.comm.bcast(out.data.ptr, out.size, self._dtype(out.dtype), attrs["root"], stream)
        elif kind == "reduce":
            self.comm.reduce(
                x.data.ptr,
                out.data.ptr,
                x.size,
                self._dtype(x.dtype),
                _OPS[attrs["reduction"]],
                attrs["root"],
                stream,
            )
            if self.rank != attrs["root"]:
                out[...] = 0
        else:  # all_gather: NCCL gathers along the leading axis; others are moved there and back
            axis = attrs["axis"]
            lead = cp.ascontiguousarray(cp.moveaxis(x, axis, 0))
            buf = cp.empty((self.size, *lead.shape), dtype=x.dtype)
            self.comm.allGather(lead.data.ptr, buf.data.ptr, lead.size, self._dtype(x.dtype), stream)
            out[...] = cp.moveaxis(buf.reshape((-1, *lead.shape[1:])), 0, axis)
        return out

    def wait(self, s: Any, kind: str) -> Any:
        """The stream orders every later kernel after the collective: synchronize only for the host."""
        self.cp.cuda.get_current_stream().synchronize()
        return s

    def barrier(self) -> None:
        """Over MPI (with its deadline)."""
        self.mpi.barrier()
