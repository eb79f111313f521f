"""Backends by name: `get("cpu")`, `get("cuda")`, and which of them can run here.

Each backend is built on first use, once per process (modules import lazily, so naming the
CUDA backend costs nothing on a machine without CuPy). A further backend registers a factory
with `register`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable

from jit.runtime import Backend, Binary, Program, ScalarSlots

__all__ = ["Backend", "Binary", "Program", "ScalarSlots", "available", "get", "register"]

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
