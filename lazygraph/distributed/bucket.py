"""Executor-side bucketing: consecutive small all-reduces posted as one flat call.

The transport (transport.py) adds each `all_reduce` start of one reduction and working dtype
to the open bucket instead of posting it; the bucket is posted (flattened into one buffer, one
Iallreduce) when it reaches the size limit, when a start that does not fit arrives, when any
other collective or a barrier comes, or when a wait needs one of its members. Starts run in
recording order on every rank (their token inputs), and engine/overlap.py orders every
program so that all starts not depending on a collective's result run before the first wait:
so every rank closes its buckets at the same starts. Each posted bucket goes through the
handshake with its flat size, so ranks that bucketed differently fail with both sizes named.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.collective import out_dtype


class Bucket:
    """The members of one flat all-reduce: what each sends, where each result goes."""

    def __init__(self, key: tuple, structure: str) -> None:
        self.key = key  # (reduction, working dtype)
        self.structure = structure
        self.sends: list[np.ndarray] = []
        #: per member: (placeholder, offset, scale, bool view) to fill when the call completes
        self.outs: list[tuple[np.ndarray, int, int, bool]] = []
        self.nbytes = 0
        self.req: Any = None
        self.recv: np.ndarray | None = None
        self.label = ""
        self.done = False

    def add(self, send: np.ndarray, out: np.ndarray, scale: int, as_bytes: bool) -> int:
        """Take a member; its index."""
        offset = sum(s.size for s in self.sends)
        self.sends.append(send)
        self.outs.append((out, offset, scale, as_bytes))
        self.nbytes += send.nbytes
        return len(self.outs) - 1

    def flat(self) -> np.ndarray:
        """The members' data, one after the other (the member itself when alone)."""
        return self.sends[0] if len(self.sends) == 1 else np.concatenate(self.sends)

    def result(self, i: int) -> np.ndarray:
        """Member i's value from the completed call (scaled for mean, cast back from float32)."""
        out, offset, scale, as_bytes = self.outs[i]
        seg = self.recv[offset : offset + out.size]  # type: ignore[index]
        dest = out.reshape(-1).view(np.uint8) if as_bytes else out.reshape(-1)
        if scale != 1:
            np.divide(seg, scale, out=dest, casting="unsafe")
        else:
            dest[...] = seg
        return out


class Bucketing:
    """The open-bucket bookkeeping both transports share; each supplies `flush` (posting a bucket).

    `mean_scale_here`: whether this rank divides a mean's sum itself (MPI: every rank; TCP:
    rank 0 does it before answering, so members keep scale 1). `bools_as_bytes`: whether
    booleans travel as bytes (MPI's reductions have no bool type).
    """

    bucket: Bucket | None
    bucket_bytes: int
    pending: dict
    size: int
    mean_scale_here = True
    bools_as_bytes = True

    def flush(self) -> None:
        raise NotImplementedError

    def _bucketed(self, x: np.ndarray, attrs: dict, structure: str) -> np.ndarray:
        """Add an all-reduce to the open bucket (posting the bucket when it is full)."""
        op = attrs["reduction"]
        dtype = out_dtype("all_reduce", op, x.dtype)
        work = np.dtype(np.float32) if dtype == np.float16 else dtype
        send = x.astype(work, copy=False).reshape(-1)
        as_bytes = self.bools_as_bytes and dtype.kind == "b"
        if as_bytes:
            send = send.view(np.uint8)
        key = (op, send.dtype)
        b = self.bucket
        if b is not None and (b.key != key or b.nbytes + send.nbytes > self.bucket_bytes):
            self.flush()
        if self.bucket is None:
            self.bucket = Bucket(key, structure)
        out = np.empty(x.shape, dtype=dtype)
        scale = self.size if op == "mean" and self.mean_scale_here else 1
        i = self.bucket.add(send, out, scale, as_bytes)
        self.pending[id(out)] = (self.bucket, i)
        if self.bucket.nbytes >= self.bucket_bytes:
            self.flush()
        return out
