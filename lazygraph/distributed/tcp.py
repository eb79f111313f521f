"""The TCP transport: collectives for processes started with torchrun-style variables, no MPI.

`init()` picks it when RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set and no MPI
launcher started the process (or with `init(backend="tcp")`); rendezvous.py connects the
ranks. It is a star: every collective goes through rank 0, which is fine for a few CPU
processes (not a ring or a tree; arrays on "cuda" need the NCCL backend).

Each rank's part of a collective (its arrival message and its operand's bytes) goes to rank 0
in `start`; rank 0 checks that every rank is at the same collective with the same structure
digest, dtype and shape (the MPI transport's handshake), combines the parts, and answers each
rank with the result or with an error written from that rank's side. `wait` waits for the
answer. A reader thread per socket keeps the streams drained (a send never waits on a peer
that is itself sending) and notices a closed connection at once: what waits on that rank
fails naming it (RankDiedError) instead of at the deadline. On rank 0 a service thread
combines collectives in order as their parts arrive, so a transfer progresses while this
process computes. All-reduces are bucketed as in the MPI transport (bucket.py).
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lazygraph.distributed.bucket import Bucket, Bucketing
from lazygraph.distributed.rendezvous import (
    _ERRORS,
    ERROR,
    PART,
    RESULT,
    Frame,
    RankDiedError,
    _error_frame,
    recv_frame,
    rendezvous,
    send_frame,
)
from lazygraph.distributed.transport import (
    DistributedError,
    RankTimeoutError,
    StructureMismatchError,
    _digest_int,
)
from ops.collective import out_dtype, out_shape

_CODES = {"all_reduce": 1, "broadcast": 2, "all_gather": 3, "reduce": 4, "barrier": 5}
_NAMES = {v: k for k, v in _CODES.items()}
_OPS = ("sum", "mean", "max", "min", "prod")
_UFUNC = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
_PREFIX = "lazygraph.distributed"


def _operand(f: Frame) -> str:
    """'float32 (3, 4)' of a part."""
    dims = ", ".join(map(str, f.shape)) + ("," if len(f.shape) == 1 else "")
    return f"{f.dtype} ({dims})"


def _disagreement(parts: dict[int, Frame], label: str) -> Callable[[int], DistributedError] | None:
    """None when every part agrees with rank 0's; else the error each rank should raise."""

    def differ(a: Frame, b: Frame) -> int:
        if a.code != b.code:
            return 1
        if a.digest and b.digest and a.digest != b.digest:
            return 2
        if (a.dtype, a.shape) != (b.dtype, b.shape):
            return 3
        return 0

    odd = next((r for r in sorted(parts) if differ(parts[0], parts[r])), None)
    if odd is None:
        return None
    how = differ(parts[0], parts[odd])

    def error(q: int) -> DistributedError:
        other = 0 if differ(parts[0], parts[q]) else odd
        a, b = parts[q], parts[other]
        seq = a.seq
        if how == 1:
            return DistributedError(
                f"{_PREFIX}: ranks issue different collectives: rank {q} is at collective #{seq} "
                f"({_NAMES.get(a.code, a.code)}), rank {other} at #{seq} ({_NAMES.get(b.code, b.code)})"
            )
        if how == 2:
            return StructureMismatchError(
                f"{_PREFIX}: ranks disagree on the graph's structure at {label}: rank {q} runs structure "
                f"{a.digest:015x}, rank {other} runs {b.digest:015x} (every rank must record the same "
                "operations on the same shapes and dtypes)"
            )
        return DistributedError(
            f"{_PREFIX}: {label}: rank {q} passes {_operand(a)}, rank {other} passes {_operand(b)} "
            "(every rank must pass the same shape and dtype)"
        )

    return error


def _combine(parts: dict[int, Frame], size: int) -> dict[int, bytes]:
    """Each rank's answer payload from the (agreeing) parts."""
    p0 = parts[0]
    kind = _NAMES[p0.code]
    if kind == "barrier":
        return dict.fromkeys(range(size), b"")
    root, op = divmod(p0.aux, 8)
    if kind == "broadcast":
        return dict.fromkeys(range(size), parts[root].data)
    if kind == "all_gather":
        whole = b"".join(parts[r].data for r in range(size))
        return dict.fromkeys(range(size), whole)
    reduction = _OPS[op]
    dtype = np.dtype(p0.dtype)
    out = out_dtype(kind, reduction, dtype)
    work = np.dtype(np.float32) if out == np.float16 else out  # as the MPI transport: half in float32
    xs = [np.frombuffer(parts[r].data, dtype=dtype).astype(work) for r in range(size)]
    value = functools.reduce(_UFUNC[reduction], xs)
    if reduction == "mean":
        value = value / size
    data = np.asarray(value, dtype=work).astype(out, copy=False).tobytes()
    if kind == "all_reduce":
        return dict.fromkeys(range(size), data)
    return {r: data if r == root else b"" for r in range(size)}


class TcpTransport(Bucketing):
    """Collectives of CPU arrays over the rendezvous's sockets (a star through rank 0)."""

    # rank 0 combines raw frames of any dtype and divides a mean itself before answering
    mean_scale_here = False
    bools_as_bytes = False

    def __init__(self, addr: str, port: int, rank: int, size: int, timeout: float) -> None:
        self.rank, self.size, self.timeout, self.name = rank, size, timeout, "tcp"
        self.where = f"{addr}:{port}"
        self.overlap = True
        self.bucket_bytes = 1 << 20
        self.bucket: Bucket | None = None
        self.seq = 0
        #: id(placeholder) -> (seq, finish, out, label) or (bucket, member index)
        self.pending: dict[int, tuple] = {}
        self.seconds = 0.0
        self.calls = 0
        self.arrays = 0
        #: collectives that failed here (collectives.py: a failed one is not re-posted by the next)
        self.failures = 0
        self.closing = False
        self.cond = threading.Condition()
        #: (rank, seq) -> frame: parts on rank 0, answers (from rank 0) elsewhere
        self.inbox: dict[tuple[int, int], Frame] = {}
        #: rank -> why its connection ended
        self.dead: dict[int, str] = {}
        #: rank 0: seq -> this rank's answer (bytes or the error), and the last seq served
        self.answers: dict[int, Any] = {}
        self.served = 0
        self.peers = rendezvous(addr, port, rank, size, timeout)
        for r, sock in self.peers.items():
            # a send may block this long on a peer that does not drain its socket; the readers
            # re-check `closing` at this pace (close() also shuts the sockets down to wake them)
            sock.settimeout(timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=self._read, args=(r, sock), daemon=True, name=f"lazygraph-tcp-{r}"
            ).start()
        if rank == 0:
            threading.Thread(target=self._serve, daemon=True, name="lazygraph-tcp-serve").start()

    # -- threads -------------------------------------------------------------------------
    def _read(self, r: int, sock: socket.socket) -> None:
        """Drain rank r's socket into the inbox; a closed connection marks r dead."""
        try:
            while True:
                f = recv_frame(sock, lambda: self.closing)
                if f is None:
                    break
                with self.cond:
                    if self.rank != 0 or f.seq > self.served:  # late parts of a failed collective: drop
                        self.inbox[(r, f.seq)] = f
                    self.cond.notify_all()
        except DistributedError:
            pass
        with self.cond:
            self.dead.setdefault(r, "its connection closed: the process died or left")
            self.cond.notify_all()

    def _serve(self) -> None:
        """Rank 0: combine collective n once every part is in (or fail it), answer every rank."""
        n = 0
        while True:
            n += 1
            first: float | None = None
            with self.cond:
                while True:
                    have = {r: f for (r, s), f in self.inbox.items() if s == n}
                    if len(have) == self.size or self.closing:
                        break
                    if have and first is None:
                        first = time.monotonic()
                    # a dead rank fails the collective once every live rank is there to be told
                    # (or at the deadline), not before anyone waits on it
                    gone = have and all(r in have or r in self.dead for r in range(self.size))
                    late = first is not None and time.monotonic() - first > self.timeout
                    if gone or late:
                        break
                    self.cond.wait(0.05)
                if self.closing:
                    return
                for r in have:
                    del self.inbox[(r, n)]
            code = next(iter(have.values())).code if have else 0
            label = f"{_NAMES.get(code, 'a collective')} (collective #{n})"
            if len(have) < self.size:
                answers: dict[int, Any] = self._missing(have, label)
            else:
                error = _disagreement(have, label)
                try:
                    answers = {r: error(r) for r in have} if error else _combine(have, self.size)
                except Exception as e:  # a broken part must fail the collective, not the service
                    msg = f"{_PREFIX}: rank 0 could not combine {label}: {type(e).__name__}: {e}"
                    answers = {r: DistributedError(msg) for r in have}
            for r, a in answers.items():
                if r == 0:
                    continue
                f = _error_frame(n, a) if isinstance(a, Exception) else Frame(RESULT, 0, n, 0, 0, "", (), a)
                try:
                    send_frame(self.peers[r], f)
                except OSError as e:
                    with self.cond:
                        self.dead.setdefault(r, f"sending to it failed ({e})")
            with self.cond:
                self.answers[n] = answers.get(0)
                self.served = n
                self.cond.notify_all()

    def _missing(self, have: dict[int, Frame], label: str) -> dict[int, DistributedError]:
        """Each rank's error when some ranks' parts did not come: dead ones (at once) or late ones."""
        missing = [r for r in range(self.size) if r not in have]
        dead = [r for r in missing if r in self.dead]
        names = ", ".join(map(str, dead or missing))
        out: dict[int, DistributedError] = {}
        for q in range(self.size):
            if dead:
                why = "; ".join(sorted({self.dead[r] for r in dead}))
                out[q] = RankDiedError(
                    f"{_PREFIX}: rank {q} cannot complete {label}: rank(s) {names} left the run ({why})"
                )
            elif q in have:
                out[q] = RankTimeoutError(
                    f"{_PREFIX}: rank {q} waited {self.timeout:g} s at {label} for rank(s) {names}, which "
                    "did not arrive: it died or took another path (LAZYGRAPH_DIST_TIMEOUT sets the deadline)"
                )
            else:
                out[q] = RankTimeoutError(
                    f"{_PREFIX}: rank {q} arrived at {label} after the deadline: the other ranks waited "
                    f"{self.timeout:g} s for it (LAZYGRAPH_DIST_TIMEOUT sets the deadline)"
                )
        return out

    # -- posting and waiting ---------------------------------------------------------------
    def _post(self, kind: str, structure: str, x: np.ndarray | None, aux: int, data: bytes) -> int:
        """Send this rank's part of the next collective (rank 0 keeps its own); its number."""
        self.seq += 1
        if x is None:
            dtype, shape = "", ()
        else:
            dtype, shape = x.dtype.name, tuple(int(d) for d in x.shape)
        f = Frame(PART, _CODES[kind], self.seq, _digest_int(structure), aux, dtype, shape, data)
        if self.rank == 0:
            with self.cond:
                if self.seq > self.served:  # else the collective already failed without this rank
                    self.inbox[(0, self.seq)] = f
                self.cond.notify_all()
        else:
            try:
                send_frame(self.peers[0], f)
            except TimeoutError as e:
                self.failures += 1
                raise RankTimeoutError(
                    f"{_PREFIX}: rank {self.rank} could not send its part of {kind} (collective "
                    f"#{self.seq}) to rank 0 within {self.timeout:g} s: rank 0 does not read it"
                ) from e
            except OSError as e:
                self.failures += 1
                raise RankDiedError(
                    f"{_PREFIX}: rank {self.rank} cannot reach rank 0 at {kind} (collective #{self.seq}): "
                    f"{e} (rank 0 died or left)"
                ) from e
        self.calls += 1
        return self.seq

    def _answer(self, seq: int, label: str) -> bytes:
        """This rank's answer to collective `seq` (waiting for it), or its error raised."""
        # rank 0's service thread fails a collective `timeout` after its first part; the others
        # wait a little longer for that verdict, which names the missing rank
        deadline = time.monotonic() + self.timeout + 1.0
        with self.cond:
            while True:
                if self.rank == 0:
                    if seq in self.answers:
                        a = self.answers.pop(seq)
                        break
                elif (f := self.inbox.pop((0, seq), None)) is not None:
                    a = _ERRORS[f.code](f.data.decode()) if f.frame == ERROR else f.data
                    break
                if self.rank != 0 and 0 in self.dead:
                    self.failures += 1
                    raise RankDiedError(
                        f"{_PREFIX}: rank {self.rank} cannot complete {label}: rank 0, which relays every "
                        f"collective, left the run ({self.dead[0]})"
                    )
                if time.monotonic() > deadline:
                    self.failures += 1
                    raise RankTimeoutError(
                        f"{_PREFIX}: rank {self.rank} waited {self.timeout:g} s at {label} for rank(s) 0 "
                        "(which relays every collective), which did not answer: it died or took another "
                        "path (LAZYGRAPH_DIST_TIMEOUT sets the deadline)"
                    )
                self.cond.wait(0.05)
        if isinstance(a, Exception):
            self.failures += 1
            raise a
        return a

    def start(self, x: Any, kind: str, attrs: dict, structure: str) -> np.ndarray:
        """Send this rank's part of the collective on `x`; the returned placeholder is filled by `wait`."""
        x = np.ascontiguousarray(x) if np.ndim(x) else np.asarray(x)
        if kind == "all_reduce" and self.bucket_bytes > 0:
            return self._bucketed(x, attrs, structure)
        self.flush()  # an open bucket is posted first: collectives keep the recording order
        t0 = time.perf_counter()
        root = attrs.get("root", 0)
        aux = root * 8 + _OPS.index(attrs.get("reduction", "sum"))
        send = kind != "broadcast" or self.rank == root
        seq = self._post(kind, structure, x, aux, x.tobytes() if send else b"")
        out = np.empty(
            out_shape(kind, x.shape, attrs), dtype=out_dtype(kind, attrs.get("reduction", ""), x.dtype)
        )
        self.pending[id(out)] = (seq, attrs, out, f"{kind} (collective #{seq})", x.shape)
        self.arrays += 1
        self.seconds += time.perf_counter() - t0
        if not self.overlap:
            self.wait(out, kind)
        return out

    def flush(self) -> None:
        """Post the open bucket as one flat all-reduce."""
        b, self.bucket = self.bucket, None
        if b is None:
            return
        t0 = time.perf_counter()
        flat = b.flat()
        b.req = self._post("all_reduce", b.structure, flat, _OPS.index(b.key[0]), flat.tobytes())
        b.label = f"all_reduce of {len(b.outs)} bucketed arrays (collective #{b.req})"
        self.arrays += len(b.outs)
        b.sends = [flat]
        self.seconds += time.perf_counter() - t0
        if not self.overlap:
            self._complete(b)

    def _complete(self, b: Bucket) -> None:
        """Wait for a posted bucket's answer once."""
        if not b.done:
            b.recv = np.frombuffer(self._answer(b.req, b.label), dtype=b.key[1])
            b.done = True

    def wait(self, s: np.ndarray, kind: str) -> np.ndarray:
        """Complete the collective whose placeholder is `s` (already complete: `s` itself)."""
        entry = self.pending.pop(id(s), None)
        if entry is None:
            return s
        t0 = time.perf_counter()
        try:
            if isinstance(entry[0], Bucket):
                b, i = entry
                if b.req is None:
                    self.flush()  # a wait needs it: the open bucket is this one
                self._complete(b)
                return b.result(i)
            seq, attrs, out, label, shape = entry
            data = self._answer(seq, label)
            if kind == "reduce" and not data:
                out[...] = 0  # not the root: zeros, as MPI's reduce leaves them here
            elif kind == "all_gather":
                buf = np.frombuffer(data, dtype=out.dtype).reshape((self.size, *shape))
                np.concatenate(list(buf), axis=attrs["axis"], out=out)
            elif data:
                out[...] = np.frombuffer(data, dtype=out.dtype).reshape(out.shape)
            return out
        finally:
            self.seconds += time.perf_counter() - t0

    def barrier(self) -> None:
        """Every rank arrives, with the deadline."""
        self.flush()
        seq = self._post("barrier", "", None, 0, b"")
        self._answer(seq, f"barrier (collective #{seq})")

    def close(self) -> None:
        """At exit: stop the threads and close the connections (never block: a peer may be gone)."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        for sock in self.peers.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        self.pending.clear()
