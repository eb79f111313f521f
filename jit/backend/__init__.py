"""Backends by name: `get("cpu")`, `get("cuda")`, and which of them can run here.

Each backend is built on first use, once per process (modules import lazily, so naming the
CUDA backend costs nothing on a machine without CuPy). A further backend registers a factory
with `register`.

`running(name)` names the backend an evaluation runs with, for the thread evaluating: the
engine enters it around an evaluation on a device, and the steps built meanwhile (fused regions,
window and library steps) bind `active()`. `host_memory(b)` says whether a backend's buffers are
NumPy arrays in host memory (the CPU), or device arrays (CuPy arrays on "cuda", emulated device
arrays on "cuda-emulated") that the engine keeps on the device between steps.

`count_transfer` is how every backend's `to_device` and `to_host` account for a copy between
host and device memory; `transfers()` reads the counters (tests check that a device-resident
program copies its leaves once and nothing per step), `host_steps()` the steps that had to run
on the host (each a counted round trip). `count_allocation` accounts a device buffer a backend
allocated (fresh device memory, not a view), read back with `allocations()`: tests show that a
device program reuses its buffers on warm runs.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from jit.runtime import (
    Backend,
    Binary,
    Program,
    ScalarSlots,
    count_host_step,
    count_transfer,
    host_steps,
    transfers,
)

__all__ = [
    "Backend",
    "Binary",
    "Program",
    "ScalarSlots",
    "active",
    "active_name",
    "available",
    "allocations",
    "count_allocation",
    "count_host_step",
    "count_transfer",
    "get",
    "host_memory",
    "host_steps",
    "library_call",
    "register",
    "running",
    "transfers",
]

#: (backend name, "count" | "bytes") -> device buffers allocated so far, and their bytes
_ALLOCATIONS: dict[tuple[str, str], int] = {}
_alloc_lock = threading.Lock()


def count_allocation(name: str, nbytes: int) -> None:
    """Account one fresh buffer of `nbytes` allocated in device `name`'s memory."""
    with _alloc_lock:
        _ALLOCATIONS[(name, "count")] = _ALLOCATIONS.get((name, "count"), 0) + 1
        _ALLOCATIONS[(name, "bytes")] = _ALLOCATIONS.get((name, "bytes"), 0) + int(nbytes)


def allocations(name: str) -> dict:
    """Device buffers allocated so far on device `name`: {"count": n, "bytes": b}."""
    with _alloc_lock:
        return {k: _ALLOCATIONS.get((name, k), 0) for k in ("count", "bytes")}


#: name -> "module:Class" (imported on first use) or a factory
_FACTORIES: dict[str, str | Callable[[], Backend]] = {
    "cpu": "jit.backend.cpu:CpuBackend",
    "cuda": "jit.backend.cuda:CudaBackend",
    "cuda-emulated": "jit.backend.cuda_emulated:CudaEmulatedBackend",
}
_built: dict[str, Backend] = {}
_lock = threading.Lock()


def register(name: str, factory: Callable[[], Backend]) -> None:
    """Make `get(name)` build its backend with `factory` (a new device slots in here)."""
    with _lock:
        _FACTORIES[name] = factory
        _built.pop(name, None)


def get(name: str = "cpu") -> Backend:
    """The process's backend called `name` (built once; unknown names are an error listing the known)."""
    b = _built.get(name)
    if b is not None:
        return b
    with _lock:
        b = _built.get(name)
        if b is None:
            factory = _FACTORIES.get(name)
            if factory is None:
                raise ValueError(f"no backend {name!r} (known: {', '.join(sorted(_FACTORIES))})")
            if isinstance(factory, str):
                module, cls = factory.split(":")
                factory = getattr(importlib.import_module(module), cls)
            b = _built[name] = factory()
    return b


def available() -> list[str]:
    """Names of the backends that can compile and run kernels here."""
    return [name for name in list(_FACTORIES) if get(name).available()]


class _Active(threading.local):
    """Per thread: the backend its evaluation runs with."""

    def __init__(self) -> None:
        self.name = "cpu"  # set per thread: a missing attribute would be a slow lookup


_active = _Active()


def active_name() -> str:
    """The name of the backend this thread's evaluation runs with ("cpu" outside `running`)."""
    return _active.name


def active() -> Backend:
    """The backend this thread's evaluation runs with: what the steps built now launch on."""
    return get(active_name())


@contextmanager
def running(name: str) -> Iterator[Backend]:
    """Run this thread's evaluation (and build its steps) with backend `name` inside the block."""
    b = get(name)
    old = active_name()
    _active.name = name
    try:
        yield b
    finally:
        _active.name = old


def host_memory(b: Backend) -> bool:
    """True when `b`'s buffers are NumPy arrays in host memory (no copy to reach its kernels)."""
    return getattr(b, "host_memory", True)


def library_call(b: Backend, op: str, args: tuple, out: Any, attrs: dict) -> Any:
    """Operator `op`'s library call on `b` for values in `b`'s memory (its inexact, fast form), into `out`.

    The engine keeps a device's values on the device (lazygraph/engine/program.py), so the
    operands are `b`'s arrays and so is the value: nothing is copied here.
    """
    call = b.library(op)
    if call is None:
        raise ValueError(f"the {b.name} backend has no library call for {op!r}")
    return call(*args, out=out, exact=False, **attrs)
