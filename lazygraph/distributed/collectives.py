"""Recording collectives: each call records a start and a wait node (ops/collective.py).

The start's second input orders collectives: it is the previous collective's start while
that one is still pending (recorded, not yet computed), else a fresh 0-d leaf. So every
program, however its steps are ordered, posts collectives in recording order, the same on
every rank; and no collective is ever a constant the fold pass would memoize.

`all_reduce_coalesced` buckets in the graph: small arrays are flattened into one array per
bucket (up to `bucket_bytes`), reduced by one collective and split back into views. (The
executor also buckets consecutive all-reduces at run time: bucket.py.)
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from lazygraph.array import Array, constant, from_node, record
from lazygraph.distributed.world import WORLD
from lazygraph.shape import asarray, concat

#: (start node, wait node) of the last collective recorded, weakly, and the transport's
#: failure count then: a collective whose wait failed is not re-posted by the next one's token
_LAST: list[Any] = [None, None, 0]
DEFAULT_BUCKET_BYTES = 1 << 20


def _transport_for(x: Array) -> str:
    """CPU arrays go over MPI; CUDA arrays (real or emulated) over the NCCL path."""
    return "mpi" if x.device == "cpu" else "nccl"


def _failures() -> int:
    """How many collectives failed in this process so far (the transports that count them)."""
    return getattr(WORLD.mpi, "failures", 0)


def _token(x: Array) -> Array:
    """The ordering input: the pending previous collective, else a fresh (non-constant) leaf."""
    start, wait = (r() if r is not None else None for r in _LAST[:2])
    if _failures() != _LAST[2]:
        start = None
    if start is not None and wait is not None and wait.buffer is None and start.buffer is None:
        if start.inputs and start.device == x.device:
            return from_node(start)
    return from_node(constant(np.zeros((), dtype=np.int8), device=x.device))


def _record(x: Any, kind: str, transport: str | None, **attrs: Any) -> Array:
    """Record start + wait of one collective on `x` (world size > 1)."""
    x = asarray(x)
    t = transport or _transport_for(x)
    s = record("collective_start", x, _token(x), kind=kind, world=WORLD.size, transport=t, **attrs)
    y = record("collective_wait", s, **s.node.attrs)
    _LAST[:] = weakref.ref(s.node), weakref.ref(y.node), _failures()
    return y


def _single(x: Any, name: str) -> Array:
    WORLD.require(name)
    return asarray(x)


def all_reduce(x: Any, op: str = "sum", *, _transport: str | None = None) -> Array:
    """Combine `x` over every rank elementwise (op: sum, mean, max, min, prod); all get the result."""
    x = _single(x, "all_reduce")
    if WORLD.size == 1:
        from ops.collective import REDUCE_OPS, out_dtype

        if op not in REDUCE_OPS:
            raise ValueError(f"all_reduce: unknown reduction {op!r}; use one of {', '.join(REDUCE_OPS)}")
        dt = out_dtype("all_reduce", op, x.dtype)
        return x if dt == x.dtype else x.astype(dt)
    return _record(x, "all_reduce", _transport, reduction=op)


def reduce(x: Any, root: int = 0, op: str = "sum", *, _transport: str | None = None) -> Array:
    """Combine `x` over every rank onto `root`; the other ranks get zeros (broadcast's gradient)."""
    x = _single(x, "reduce")
    if WORLD.size == 1:
        return x
    return _record(x, "reduce", _transport, root=root, reduction=op)


def broadcast(x: Any, root: int = 0, *, _transport: str | None = None) -> Array:
    """Every rank gets `root`'s value of `x` (same shape and dtype on every rank)."""
    x = _single(x, "broadcast")
    if WORLD.size == 1:
        if root != 0:
            raise ValueError(f"broadcast: root {root} is not a rank of a 1-process world")
        return x
    return _record(x, "broadcast", _transport, root=root)


def all_gather(x: Any, axis: int = 0, *, _transport: str | None = None) -> Array:
    """Concatenate every rank's `x` along `axis`, in rank order (same shapes on every rank)."""
    x = _single(x, "all_gather")
    if WORLD.size == 1:
        if x.ndim == 0:
            raise ValueError("all_gather: cannot gather 0-d arrays along an axis (reshape to (1,))")
        return x
    return _record(x, "all_gather", _transport, axis=axis)


def all_reduce_coalesced(
    xs: Sequence[Any], op: str = "sum", bucket_bytes: int = DEFAULT_BUCKET_BYTES
) -> list[Array]:
    """all_reduce of many arrays in few calls: consecutive ones of one dtype and device share a
    flat bucket of up to `bucket_bytes` (0: one call per array)."""
    xs = [_single(x, "all_reduce_coalesced") for x in xs]
    if WORLD.size == 1:
        return [all_reduce(x, op) for x in xs]
    out: list[Array | None] = [None] * len(xs)
    bucket: list[int] = []
    size = 0

    def flush() -> None:
        nonlocal size
        if len(bucket) == 1:
            out[bucket[0]] = all_reduce(xs[bucket[0]], op)
        elif bucket:
            flat = all_reduce(concat([xs[i].reshape(-1) for i in bucket]), op)
            at = 0
            for i in bucket:
                n = xs[i].size
                out[i] = flat[at : at + n].reshape(xs[i].shape)
                at += n
        bucket.clear()
        size = 0

    for i, x in enumerate(xs):
        if bucket and (
            x.dtype != xs[bucket[0]].dtype
            or x.device != xs[bucket[0]].device
            or size + x.nbytes > bucket_bytes
        ):
            flush()
        bucket.append(i)
        size += x.nbytes
    flush()
    return out  # type: ignore[return-value]
