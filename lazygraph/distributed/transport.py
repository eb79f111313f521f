"""The MPI transport: non-blocking collectives with an arrival handshake and a deadline.

ops/collective.py's kernels call `start` (post the transfer, return a placeholder) and `wait`
(complete it). Before every collective each rank tells every other one, on a duplicated
communicator, that it has arrived: its collective number, what it is, and the structure
digest of the graph it is running. So
  - a rank that died (or went elsewhere) is named: the handshake is polled against a
    deadline (LAZYGRAPH_DIST_TIMEOUT seconds, default 60) instead of blocking forever;
  - ranks running graphs of different structure fail on every rank, naming both digests;
  - ranks issuing different collectives (a different count or kind) fail the same way.
The transfer itself is MPI's non-blocking collective (Iallreduce, Ibcast, Iallgather,
Ireduce) into a fresh buffer; `wait` polls it against the same deadline. With `overlap`
off, `start` completes the transfer itself (the measurement baseline).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lazygraph.distributed.bucket import Bucket, Bucketing
from ops.collective import out_dtype, out_shape

_TAG = 0x1A2B
_MSG = 13  # handshake: seq, kind, digest, dtype number, ndim, up to 8 extents
_CODES = {"all_reduce": 1, "broadcast": 2, "all_gather": 3, "reduce": 4, "barrier": 5}
_NAMES = {v: k for k, v in _CODES.items()}


class DistributedError(RuntimeError):
    """Processes of a distributed run disagree (structure, collectives) or cannot proceed."""

    #: the engine re-raises it as itself, message intact (not as "<op> failed at evaluation")
    keeps_type = True


class StructureMismatchError(DistributedError):
    """Ranks ran graphs of different structure at the same collective."""


class RankTimeoutError(DistributedError, TimeoutError):
    """A rank did not arrive at (or finish) a collective within the deadline."""


def _operand(msg: np.ndarray) -> str:
    """'float32 (3, 4)' from a handshake message."""
    ndim = int(msg[4])
    dims = [str(int(d)) for d in msg[5 : 5 + min(ndim, _MSG - 5)]] + ["..."] * (ndim > _MSG - 5)
    return f"{_dtype_of(int(msg[3]))} ({', '.join(dims)}{',' if ndim == 1 else ''})"


def _dtype_of(num: int) -> str:
    """The dtype name of a NumPy type number."""
    for t in np.sctypeDict.values():
        if np.dtype(t).num == num:
            return np.dtype(t).name
    return f"dtype #{num}"


def _digest_int(digest: str) -> int:
    """The first 60 bits of a hex structure digest (0: no digest)."""
    try:
        return int(digest[:15], 16) if digest else 0
    except ValueError:
        return 0


class MpiTransport(Bucketing):
    """Collectives over an mpi4py communicator (CPU buffers; also the emulated NCCL path)."""

    def __init__(self, comm: Any, timeout: float, name: str = "mpi") -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm
        self.ctl = comm.Dup()  # the handshake never mixes with the transfers or user traffic
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout = timeout
        self.name = name
        self.overlap = True
        #: executor-side bucketing of all-reduces (bucket.py); 0: each posted alone
        self.bucket_bytes = 1 << 20
        self.bucket: Bucket | None = None
        self.seq = 0
        #: id(placeholder) -> (request, finish, buffers kept alive, label)
        self.pending: dict[int, tuple] = {}
        #: seconds spent inside MPI calls and polling (the benchmark's communication share)
        self.seconds = 0.0
        #: collectives posted (a bucket is one) and arrays they carried
        self.calls = 0
        self.arrays = 0
        self._ops = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}

    # -- the handshake -------------------------------------------------------------------
    def arrive(self, what: str, structure: str = "", x: np.ndarray | None = None) -> None:
        """Exchange (collective number, kind, structure digest, operand dtype and shape) with
        every other rank; any difference fails on every rank, naming both."""
        self.seq += 1
        if self.size == 1:
            return
        t0 = time.perf_counter()
        label = f"{what} (collective #{self.seq})"
        mine = np.zeros(_MSG, dtype=np.int64)
        mine[:3] = self.seq, _CODES[what], _digest_int(structure)
        if x is not None:
            mine[3], mine[4] = x.dtype.num, x.ndim
            mine[5 : 5 + min(x.ndim, _MSG - 5)] = x.shape[: _MSG - 5]
        others = [r for r in range(self.size) if r != self.rank]
        got = {r: np.zeros(_MSG, dtype=np.int64) for r in others}
        recvs = {r: self.ctl.Irecv(got[r], source=r, tag=_TAG) for r in others}
        sends = [self.ctl.Isend(mine, dest=r, tag=_TAG) for r in others]
        self._poll(list(recvs.values()), label, lambda: [r for r, q in recvs.items() if not q.Test()])
        self._poll(sends, label, lambda: others)
        self.seconds += time.perf_counter() - t0
        for r in others:
            seq, code, digest = (int(v) for v in got[r][:3])
            if seq != self.seq or code != _CODES[what]:
                raise DistributedError(
                    f"lazygraph.distributed: ranks issue different collectives: rank {self.rank} is at "
                    f"collective #{self.seq} ({what}), rank {r} at #{seq} ({_NAMES.get(code, code)})"
                )
            if digest and mine[2] and digest != mine[2]:
                raise StructureMismatchError(
                    f"lazygraph.distributed: ranks disagree on the graph's structure at {label}: "
                    f"rank {self.rank} runs structure {int(mine[2]):015x}, rank {r} runs {digest:015x} "
                    "(every rank must record the same operations on the same shapes and dtypes)"
                )
            if x is not None and not np.array_equal(got[r][3:], mine[3:]):
                raise DistributedError(
                    f"lazygraph.distributed: {label}: rank {self.rank} passes {_operand(mine)}, "
                    f"rank {r} passes {_operand(got[r])} (every rank must pass the same shape and dtype)"
                )

    def _poll(self, reqs: list, label: str, missing: Callable[[], list[int]]) -> None:
        """Test `reqs` until all complete; past the deadline, name the ranks still missing."""
        if self.MPI.Request.Testall(reqs):
            return
        start = time.monotonic()
        deadline = start + self.timeout
        while not self.MPI.Request.Testall(reqs):
            # MPI progresses a transfer only while a process is inside MPI: test often (yielding
            # the core, ranks may share cores) for a while, then at a gentler pace
            now = time.monotonic()
            time.sleep(0 if now - start < 0.05 else 0.0002)
            if now > deadline:
                late = missing()
                for q in reqs:
                    if q != self.MPI.REQUEST_NULL and not q.Test():
                        try:
                            q.Cancel()
                        except self.MPI.Exception:
                            pass
                raise RankTimeoutError(
                    f"lazygraph.distributed: rank {self.rank} waited {self.timeout:g} s at {label} for "
                    f"rank(s) {', '.join(map(str, late))}, which did not arrive: it died or took "
                    "another path (LAZYGRAPH_DIST_TIMEOUT sets the deadline)"
                )

    # -- the collectives -----------------------------------------------------------------
    def start(self, x: Any, kind: str, attrs: dict, structure: str) -> np.ndarray:
        """Post the collective on `x`; the returned placeholder is filled by `wait`."""
        x = np.asarray(x)
        if not x.flags.c_contiguous:
            x = x.copy()  # (np.ascontiguousarray would make a 0-d array 1-d)
        if kind == "all_reduce" and self.bucket_bytes > 0:
            return self._bucketed(x, attrs, structure)
        self.flush()  # an open bucket is posted first: calls keep the recording order
        self.arrive(kind, structure, x)
        t0 = time.perf_counter()
        label = f"{kind} (collective #{self.seq})"
        dtype = out_dtype(kind, attrs.get("reduction", ""), x.dtype)
        out = np.empty(out_shape(kind, x.shape, attrs), dtype=dtype)
        finish: Callable[[], None] | None = None
        keep: tuple = (x,)
        comm, MPI = self.comm, self.MPI
        if kind in ("all_reduce", "reduce"):
            op = attrs["reduction"]
            work = np.dtype(np.float32) if dtype == np.float16 else dtype
            separate = work != dtype  # float16 is reduced in float32 (MPI has no half type)
            send = x.astype(work, copy=False).reshape(-1)
            recv = np.empty(out.size, dtype=work) if separate else out.reshape(-1)
            if dtype.kind == "b":  # max/min of bools: any/all, as bytes
                send, recv = send.view(np.uint8), recv.view(np.uint8)
            root = attrs.get("root", 0)
            if kind == "all_reduce":
                req = comm.Iallreduce(send, recv, op=self._ops[op])
            else:
                req = comm.Ireduce(send, recv if self.rank == root else None, op=self._ops[op], root=root)
            keep = (send, recv)
            scale = self.size if op == "mean" else 1

            def finish() -> None:
                if kind == "reduce" and self.rank != root:
                    out[...] = 0
                elif separate:
                    out.reshape(-1)[...] = recv if scale == 1 else recv / scale
                elif scale != 1:
                    out[...] /= scale

        elif kind == "broadcast":
            root = attrs["root"]
            if self.rank == root:
                out[...] = x
            req = comm.Ibcast([out.reshape(-1).view(np.uint8), MPI.BYTE], root=root)
        else:  # all_gather
            axis = attrs["axis"]
            buf = np.empty((self.size, *x.shape), dtype=x.dtype)
            req = comm.Iallgather(
                [x.reshape(-1).view(np.uint8), MPI.BYTE], [buf.reshape(-1).view(np.uint8), MPI.BYTE]
            )
            keep = (x, buf)
            if axis == 0:
                out = buf.reshape(out.shape)
            else:

                def finish() -> None:
                    np.concatenate(list(buf), axis=axis, out=out)

        self.pending[id(out)] = (req, finish, keep, out, label)
        self.calls += 1
        self.arrays += 1
        self.seconds += time.perf_counter() - t0
        if not self.overlap:
            self.wait(out, kind)
        return out

    def flush(self) -> None:
        """Post the open bucket as one flat all-reduce (after the handshake)."""
        b, self.bucket = self.bucket, None
        if b is None:
            return
        flat = b.flat()
        self.arrive("all_reduce", b.structure, flat)
        t0 = time.perf_counter()
        b.label = f"all_reduce of {len(b.outs)} bucketed arrays (collective #{self.seq})"
        b.recv = np.empty_like(flat)
        b.req = self.comm.Iallreduce(flat, b.recv, op=self._ops[b.key[0]])
        self.calls += 1
        self.arrays += len(b.outs)
        b.sends = [flat]  # the members' buffers are no longer needed once flattened
        if not self.overlap:  # the baseline: complete where posted
            others = [r for r in range(self.size) if r != self.rank]
            self._poll([b.req], b.label, lambda: others)
            b.done = True
        self.seconds += time.perf_counter() - t0

    def _wait_bucket(self, b: Bucket, i: int) -> np.ndarray:
        """Member i of a bucket: post the bucket if still open, complete it once, copy out."""
        if b.req is None:
            self.flush()  # a wait needs it: the open bucket is this one
        t0 = time.perf_counter()
        if not b.done:
            others = [r for r in range(self.size) if r != self.rank]
            self._poll([b.req], b.label, lambda: others)
            b.done = True
        out = b.result(i)
        self.seconds += time.perf_counter() - t0
        return out

    def wait(self, s: np.ndarray, kind: str) -> np.ndarray:
        """Complete the collective whose placeholder is `s` (already complete: `s` itself)."""
        entry = self.pending.pop(id(s), None)
        if entry is None:
            return s
        if isinstance(entry[0], Bucket):
            return self._wait_bucket(*entry)
        t0 = time.perf_counter()
        req, finish, _, out, label = entry
        others = [r for r in range(self.size) if r != self.rank]
        self._poll([req], label, lambda: others)
        if finish is not None:
            finish()
        self.seconds += time.perf_counter() - t0
        return out

    def barrier(self) -> None:
        """Every rank arrives (the handshake is a barrier), with the deadline."""
        self.flush()
        self.arrive("barrier")

    def close(self) -> None:
        """At exit: drop unfinished transfers (never block: a peer may be gone), free the handshake."""
        reqs = [e[0].req if isinstance(e[0], Bucket) else e[0] for e in self.pending.values()]
        for req in reqs:
            if req is not None and not req.Test():
                try:
                    req.Cancel()
                except self.MPI.Exception:
                    pass
        self.pending.clear()
        if self.ctl != self.MPI.COMM_NULL:
            self.ctl.Free()
