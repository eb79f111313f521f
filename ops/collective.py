"""Collective operators: all_reduce, broadcast, all_gather (and reduce) across processes.

A collective is two recorded operators, so the executor can overlap communication with the
rest of a graph:

    s = collective_start(x, token, kind=..., ...)   # posts the non-blocking transfer
    y = collective_wait(s, kind=..., ...)           # completes it; readers of y read this

`collective_start` returns a placeholder buffer whose contents arrive later and registers the
pending request with the transport; `collective_wait` completes it (polled against a
deadline) and returns the result. Whatever order a rank's program runs its steps in (programs
differ between ranks: a time-boxed miss on one, the full optimization on another), MPI needs
every rank to post its collectives in the same order. The `token` input gives that order: it
is the previous still-pending collective's start (or a fresh 0-d leaf), so every program
starts collectives in the order they were recorded, which SPMD code makes the same on every
rank. The token is also never a constant, so the fold pass never memoizes a collective.

The communicator is not part of any key: kernels look their transport up by name
(`"mpi"`, `"nccl"`) in a table `lazygraph.distributed` fills through `set_transport`; ops/
imports nothing from lazygraph. `collective_shard` takes this rank's slice of an axis (the
gradient of all_gather); `collective_unshard` puts a slice back into zeros (its gradient). The structure digest of the graph being run (`set_structure`,
called by the engine before each run) travels with every collective's arrival message, so
ranks that disagree on a graph's structure fail with both digests named.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ops.base import Op, defvjp, fmt_shape, normalize_axis, register, shape_error, type_error
from ops.namespace import namespace
from ops.node import Node

KINDS = ("all_reduce", "broadcast", "all_gather", "reduce")
REDUCE_OPS = ("sum", "mean", "max", "min", "prod")
_TRANSPORTS: dict[str, Any] = {}
_STATE = threading.local()


def set_transport(name: str, transport: Any) -> None:
    """Install (or with None remove) the object that carries collectives named `name`.

    A transport has `rank`, `size`, `start(x, kind, attrs, structure) -> placeholder` and
    `wait(placeholder, kind) -> value` (lazygraph/distributed/transport.py).
    """
    if transport is None:
        _TRANSPORTS.pop(name, None)
    else:
        _TRANSPORTS[name] = transport


def get_transport(name: str) -> Any:
    """The installed transport `name`, or a clear error when `lazygraph.distributed` has none."""
    t = _TRANSPORTS.get(name)
    if t is None:
        raise RuntimeError(
            f"collective: no {name!r} transport is installed (call lazygraph.distributed.init() "
            "in every process before running collectives)"
        )
    return t


def set_structure(digest: Callable[[], str] | None) -> None:
    """The engine names the graph it is about to run (a callable giving its structure digest)."""
    _STATE.structure = digest


def structure() -> str:
    """The digest of the graph being run on this thread ('' outside an evaluation)."""
    fn = getattr(_STATE, "structure", None)
    return fn() if fn is not None else ""


def out_dtype(kind: str, op: str, dtype: np.dtype) -> np.dtype:
    """The result dtype: NumPy's mean of integers is float64; everything else keeps the dtype."""
    if kind in ("all_reduce", "reduce") and op == "mean" and dtype.kind in "biu":
        return np.dtype(np.float64)
    return dtype


def _check(name: str, x: Node, attrs: dict) -> dict:
    """Validate and normalize a collective's attributes (shared by start and wait)."""
    kind = attrs.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{name}: unknown collective {kind!r}; known: {', '.join(KINDS)}")
    world = attrs.get("world")
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"{name}: world must be a positive int, got {world!r}")
    out = {"kind": kind, "world": world, "transport": str(attrs.get("transport", "mpi"))}
    if kind in ("all_reduce", "reduce"):
        op = attrs.get("reduction", "sum")
        if op not in REDUCE_OPS:
            raise ValueError(f"{kind}: unknown reduction {op!r}; use one of {', '.join(REDUCE_OPS)}")
        if x.dtype.kind == "b" and op not in ("max", "min"):
            raise type_error(kind, f"op={op!r} on bool arrays (max and min act as any/all)", (x,))
        if x.dtype.kind == "c" and op in ("max", "min"):
            raise type_error(kind, f"op={op!r} on complex arrays (no ordering)", (x,))
        if x.dtype.kind not in "biufc":
            raise type_error(kind, "only numeric arrays can be reduced", (x,))
        out["reduction"] = op
    elif x.dtype.kind not in "biufc":
        raise type_error(kind, "only numeric and bool arrays can be communicated", (x,))
    if kind in ("broadcast", "reduce"):
        root = attrs.get("root", 0)
        if not isinstance(root, int) or not 0 <= root < world:
            raise ValueError(f"{kind}: root must be a rank in [0, {world}), got {root!r}")
        out["root"] = root
    if kind == "all_gather":
        if x.ndim == 0:
            raise shape_error("all_gather", "cannot gather 0-d arrays along an axis (reshape to (1,))", (x,))
        out["axis"] = normalize_axis("all_gather", attrs.get("axis", 0), x.ndim)
    return out


def out_shape(kind: str, shape: tuple[int, ...], attrs: dict) -> tuple[int, ...]:
    """The result shape: all_gather multiplies its axis by the world size; the rest keep it."""
    if kind != "all_gather":
        return shape
    a = attrs["axis"]
    return shape[:a] + (shape[a] * attrs["world"],) + shape[a + 1 :]


class CollectiveStart(Op):
    """Post a collective (inputs: the array, the ordering token); the value is a placeholder."""

    def __init__(self) -> None:
        super().__init__("collective_start")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """The collective's result shape and dtype (the placeholder has them)."""
        if len(inputs) != 2:
            raise TypeError(f"{self.name}: expected (array, token), got {len(inputs)} operands")
        attrs = _check(self.name, inputs[0], attrs)
        x = inputs[0]
        return (
            out_shape(attrs["kind"], x.shape, attrs),
            out_dtype(attrs["kind"], attrs.get("reduction", ""), x.dtype),
            attrs,
        )

    def kernel(self, x: Any, token: Any, **attrs: Any) -> Any:
        """Hand the array to the transport: the transfer starts, the placeholder comes back."""
        return get_transport(attrs["transport"]).start(x, attrs["kind"], attrs, structure())


class CollectiveWait(Op):
    """Complete a posted collective: its value is the collective's result."""

    def __init__(self) -> None:
        super().__init__("collective_wait")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """The start's shape and dtype."""
        if len(inputs) != 1 or inputs[0].op is not REGISTRY_START:
            raise TypeError(f"{self.name}: reads exactly one collective_start")
        return inputs[0].shape, inputs[0].dtype, dict(attrs)

    def kernel(self, s: Any, **attrs: Any) -> Any:
        """Wait (against the transport's deadline) for the transfer the start posted."""
        return get_transport(attrs["transport"]).wait(s, attrs["kind"])


class CollectiveShard(Op):
    """This rank's block of `axis` (extent / world): the gradient of all_gather."""

    def __init__(self) -> None:
        super().__init__("collective_shard")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """The axis divided by the world size (it must divide evenly)."""
        (x,) = inputs
        world = attrs["world"]
        axis = normalize_axis(self.name, attrs.get("axis", 0), x.ndim)
        if x.shape[axis] % world:
            raise shape_error(
                self.name,
                f"axis {axis} of {fmt_shape(x.shape)} does not split into {world} equal parts",
                (x,),
            )
        shape = x.shape[:axis] + (x.shape[axis] // world,) + x.shape[axis + 1 :]
        return shape, x.dtype, {"axis": axis, "world": world, "transport": attrs.get("transport", "mpi")}

    def kernel(self, x: Any, axis: int, world: int, transport: str) -> Any:
        """The block of the transport's rank."""
        r = get_transport(transport).rank
        n = x.shape[axis] // world
        return x[(slice(None),) * axis + (slice(r * n, (r + 1) * n),)]


class CollectiveUnshard(CollectiveShard):
    """This rank's block placed into zeros (extent x world): the gradient of collective_shard."""

    def __init__(self) -> None:
        Op.__init__(self, "collective_unshard")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """The axis multiplied by the world size."""
        (x,) = inputs
        world = attrs["world"]
        axis = normalize_axis(self.name, attrs.get("axis", 0), x.ndim)
        shape = x.shape[:axis] + (x.shape[axis] * world,) + x.shape[axis + 1 :]
        return shape, x.dtype, {"axis": axis, "world": world, "transport": attrs.get("transport", "mpi")}

    def kernel(self, x: Any, axis: int, world: int, transport: str) -> Any:
        """Zeros, with `x` at the transport's rank's block."""
        r = get_transport(transport).rank
        n = x.shape[axis]
        out = namespace(x).zeros(x.shape[:axis] + (n * world,) + x.shape[axis + 1 :], dtype=x.dtype)
        out[(slice(None),) * axis + (slice(r * n, (r + 1) * n),)] = x
        return out


REGISTRY_START = register(CollectiveStart())
register(CollectiveWait())
register(CollectiveShard())
register(CollectiveUnshard())


def _front(F: Any) -> Any:
    """The recording front end of collectives (gradients of collectives are collectives)."""
    return F.distributed


def _start_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    """Cotangents of the whole collective (the wait passes its cotangent through)."""
    kind, front = attrs["kind"], _front(F)
    t = attrs["transport"]
    if kind == "all_reduce":
        op = attrs["reduction"]
        if op not in ("sum", "mean"):
            raise NotImplementedError(
                f"all_reduce: the gradient of op={op!r} is not implemented (sum, mean are)"
            )
        # d(sum over ranks of loss_r)/dx_q = sum over r of g_r (mean: divided by the world)
        return front.all_reduce(g, op=op, _transport=t), None
    if kind == "broadcast":
        return front.reduce(g, root=attrs["root"], _transport=t), None
    if kind == "all_gather":
        summed = front.all_reduce(g, op="sum", _transport=t)  # the reduce-scatter, as sum + slice
        return F.record(
            "collective_shard", summed, axis=attrs["axis"], world=attrs["world"], transport=t
        ), None
    raise NotImplementedError(f"{kind}: no gradient (it is the gradient of broadcast)")


def _wait_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (g,)


def _shard_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (F.record("collective_unshard", g, **attrs),)


def _unshard_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (F.record("collective_shard", g, **attrs),)


REGISTRY_START.vjp = _start_vjp
defvjp("collective_wait")(_wait_vjp)
defvjp("collective_shard")(_shard_vjp)
defvjp("collective_unshard")(_unshard_vjp)
