"""The TCP transport's wire (tcp.py is the transport): framing and the torchrun-style rendezvous.

Rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank connects to it (retrying until the
deadline) and says its RANK and WORLD_SIZE; rank 0 answers once all have joined. A frame is a
fixed header (frame kind, collective code, collective number, structure digest, root/op,
payload length, dtype string length, ndim), the dtype string, the shape (int64s) and the raw
array bytes: nothing is pickled.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from lazygraph.distributed.transport import (
    DistributedError,
    RankTimeoutError,
    StructureMismatchError,
)

_HEAD = struct.Struct("!4sBBqqqQBB")  # magic, frame, code, seq, digest, aux, nbytes, dtype len, ndim
_MAGIC = b"LGT1"
HELLO, PART, RESULT, ERROR = 1, 2, 3, 4


class RankDiedError(RankTimeoutError):
    """A rank's connection closed before it took part in a collective (it died): raised at once."""


_ERRORS: dict[int, type[DistributedError]] = {
    1: DistributedError,
    2: StructureMismatchError,
    3: RankTimeoutError,
    4: RankDiedError,
}
_ERROR_CODES = {v: k for k, v in _ERRORS.items()}


class Frame(NamedTuple):
    """One message: its header fields, the operand's dtype and shape, and the payload bytes."""

    frame: int
    code: int
    seq: int
    digest: int
    aux: int
    dtype: str
    shape: tuple[int, ...]
    data: bytes


def send_frame(sock: socket.socket, f: Frame) -> None:
    """Write one frame (header, dtype string, shape, payload)."""
    dt = f.dtype.encode()
    head = _HEAD.pack(_MAGIC, f.frame, f.code, f.seq, f.digest, f.aux, len(f.data), len(dt), len(f.shape))
    shape = struct.pack(f"!{len(f.shape)}q", *f.shape)
    sock.sendall(head + dt + shape)
    if f.data:
        sock.sendall(f.data)


def _recv_exact(sock: socket.socket, n: int, closing: Callable[[], bool]) -> bytes | None:
    """n bytes, or None at end of stream (a socket timeout only re-checks `closing`)."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 22))
        except TimeoutError:
            if closing():
                return None
            continue
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, closing: Callable[[], bool] = lambda: False) -> Frame | None:
    """The next frame, or None when the peer closed the connection (or it broke)."""
    head = _recv_exact(sock, _HEAD.size, closing)
    if head is None:
        return None
    magic, frame, code, seq, digest, aux, nbytes, dtlen, ndim = _HEAD.unpack(head)
    if magic != _MAGIC:
        raise DistributedError(
            f"lazygraph.distributed (tcp): a peer sent a frame without the magic {_MAGIC!r}"
        )
    rest = _recv_exact(sock, dtlen + 8 * ndim + nbytes, closing)
    if rest is None:
        return None
    shape = struct.unpack(f"!{ndim}q", rest[dtlen : dtlen + 8 * ndim])
    return Frame(frame, code, seq, digest, aux, rest[:dtlen].decode(), shape, rest[dtlen + 8 * ndim :])


def _error_frame(seq: int, e: DistributedError) -> Frame:
    return Frame(ERROR, _ERROR_CODES.get(type(e), 1), seq, 0, 0, "", (), str(e).encode())


_STORE_KEY = "lazygraph/distributed/tcp-port"


def _agent_store(addr: str, port: int, size: int, timeout: float) -> Any:
    """torchrun's agent store when it serves MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE), else None.

    torchrun's agent already listens on MASTER_PORT (a key-value store); rank 0 then listens on
    a free port and publishes it there. torch is present whenever torchrun launched us."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        return None
    from datetime import timedelta

    try:
        from torch.distributed import TCPStore
    except ImportError:
        return None
    key = f"{_STORE_KEY}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    store = TCPStore(addr, port, size, is_master=False, timeout=timedelta(seconds=timeout))
    return _Keyed(store, key)


class _Keyed:
    """The store, under this launch attempt's key (a restarted group publishes afresh)."""

    def __init__(self, store: Any, key: str) -> None:
        self.store, self.key = store, key

    def set(self, value: str) -> None:
        """Publish rank 0's port."""
        self.store.set(self.key, value)

    def get(self) -> bytes:
        """Rank 0's port (waits until it is set, within the store's timeout)."""
        return self.store.get(self.key)


def rendezvous(addr: str, port: int, rank: int, size: int, timeout: float) -> dict[int, socket.socket]:
    """Connect the star: rank 0 accepts size-1 peers, the others connect to it (retrying)."""
    deadline = time.monotonic() + timeout
    where = f"MASTER_ADDR:MASTER_PORT = {addr}:{port}"
    store = _agent_store(addr, port, size, timeout)
    if store is not None:
        where = f"the port rank 0 published in torchrun's store on {addr}:{port}"
    if rank == 0:
        try:
            server = socket.create_server((addr, 0 if store else port))
        except OSError:
            try:  # MASTER_ADDR may name this machine by an address it cannot bind: all interfaces
                server = socket.create_server(("", 0 if store else port))
            except OSError as e:
                raise DistributedError(
                    f"lazygraph.distributed (tcp): rank 0 cannot listen on {where}: {e}"
                ) from e
        if store is not None:
            store.set(str(server.getsockname()[1]))
        peers: dict[int, socket.socket] = {}
        try:
            server.listen(size)
            while len(peers) < size - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(1, size)) - set(peers))
                    raise RankTimeoutError(
                        f"lazygraph.distributed (tcp): rank 0 waited {timeout:g} s at the rendezvous on "
                        f"{where} for rank(s) {', '.join(map(str, missing))}, which did not connect"
                    )
                server.settimeout(min(left, 1.0))
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.settimeout(max(deadline - time.monotonic(), 0.1))
                hello = recv_frame(conn)
                problem = ""
                if hello is None or hello.frame != HELLO:
                    problem = "a connection that is not a lazygraph rank"
                elif hello.aux != size:
                    problem = f"rank {hello.seq} says WORLD_SIZE={hello.aux}, rank 0 says {size}"
                elif not 0 < hello.seq < size or hello.seq in peers:
                    problem = f"a second or out-of-range RANK={hello.seq} (WORLD_SIZE={size})"
                if problem:
                    err = DistributedError(f"lazygraph.distributed (tcp): rendezvous on {where}: {problem}")
                    try:
                        send_frame(conn, _error_frame(0, err))
                    except OSError:
                        pass
                    conn.close()
                    if hello is None or hello.frame != HELLO:
                        continue  # a stray connection: keep waiting for the ranks
                    raise err
                peers[hello.seq] = conn
            for conn in peers.values():
                send_frame(conn, Frame(HELLO, 0, 0, 0, size, "", (), b""))
        except BaseException:
            for conn in peers.values():
                conn.close()
            raise
        finally:
            server.close()
        return peers
    if store is not None:
        try:
            port = int(store.get())
        except Exception as e:
            raise RankTimeoutError(
                f"lazygraph.distributed (tcp): rank {rank}: rank 0 did not publish its port in "
                f"torchrun's store on {addr}:{port} within {timeout:g} s ({e})"
            ) from e
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=max(deadline - time.monotonic(), 0.1))
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise RankTimeoutError(
                    f"lazygraph.distributed (tcp): rank {rank} could not reach rank 0 at {where} within "
                    f"{timeout:g} s ({e})"
                ) from e
            time.sleep(0.05)
    try:
        send_frame(sock, Frame(HELLO, 0, rank, 0, size, "", (), b""))
        sock.settimeout(max(deadline - time.monotonic(), 0.1))
        reply = recv_frame(sock)
    except OSError as e:
        sock.close()
        raise DistributedError(
            f"lazygraph.distributed (tcp): rank {rank}: rendezvous on {where} broke: {e}"
        ) from e
    if reply is None or reply.frame != HELLO:
        sock.close()
        if reply is not None and reply.frame == ERROR:
            raise _ERRORS[reply.code](reply.data.decode())
        raise RankTimeoutError(
            f"lazygraph.distributed (tcp): rank {rank}: rank 0 at {where} did not complete the rendezvous "
            f"within {timeout:g} s"
        )
    return {0: sock}
