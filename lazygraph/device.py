"""Devices: where arrays live, where their operators run, and how values move between them.

A device is a name: "cpu" (NumPy buffers, C kernels), "cuda-emulated" (the CUDA kernels the
GPU would run, compiled for and run on the host; buffers are NumPy arrays) and "cuda" (a GPU
through CuPy, usable where CuPy sees one). Every recorded node carries its device
(`Node.device`): creation functions and `asarray` place their leaves on `device=` or the
default device, and an operator runs where its inputs live. Mixing arrays of two devices in
one operator is an error when it is recorded, naming the operator and both devices; values
move only through an explicit transfer (`x.to(device)`, `x.to_device(device)`), an evaluated
copy. Python scalars and NumPy operands converted on the fly are neutral: they join the
device of the arrays they meet.

The default device is, innermost first: the `with lg.device(name):` blocks this thread is in,
then the `LAZYGRAPH_DEVICE` setting (default "cpu"). `lg.device(name)` is both the device
object (a `Device`, equal to its name) and that context manager.

Evaluation (lazygraph/engine/evaluate.py) runs a graph with its device's backend
(jit/backend/), and the device is part of the cache key, in memory and on disk.

Values stay where they live: a leaf placed on a device whose memory is not the host's holds
that device's array (`on_device`: copied once, when placed), evaluated values stay device
arrays (lazygraph/engine/device_run.py), and only `host_value` (`.numpy()`, printing,
`to("cpu")`) copies one back.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ops.creation import SCALAR
from ops.node import HOST, Node
from ops.settings import SETTINGS

#: canonical name -> the one string object nodes hold (placement compares identities)
_CANON: dict[str, str] = {
    HOST: HOST,
    "cuda-emulated": sys.intern("cuda-emulated"),
    "cuda": sys.intern("cuda"),
}
#: further spellings users may write
_ALIASES = {"cuda:0": "cuda", "gpu": "cuda"}
KNOWN = tuple(_CANON)
CUDA = _CANON["cuda"]


class DeviceMismatchError(ValueError):
    """An operator recorded on arrays of two devices (move one with `.to(device)` first)."""


class Device(str):
    """A device arrays live on (the Array API's device object): equal to its name, shown as it.

    It is also a context manager making itself this thread's default device inside the block.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__str__(self)

    def __enter__(self) -> Device:
        _stack().append(canonical(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        _stack().pop()


#: the host
CPU = Device(HOST)


class _Local(threading.local):
    """Per thread: the `with lg.device(...)` blocks it is in, innermost last."""

    def __init__(self) -> None:
        self.stack: list[str] = []  # set per thread: a missing attribute would be a slow lookup


_local = _Local()


def _stack() -> list[str]:
    return _local.stack


_cuda_problem: list[str | None] = []  # probed once: why "cuda" cannot run here (None: it can)


def _cuda_unavailable() -> str | None:
    """Why the CUDA device cannot be used on this machine, or None when it can."""
    if not _cuda_problem:
        if importlib.util.find_spec("cupy") is None:
            why: str | None = "CuPy is not installed"
        else:
            from jit import backend

            cuda = backend.get("cuda")
            if cuda.device_arch() is None:  # type: ignore[attr-defined]
                why = "CuPy sees no GPU (or no driver)"
            elif not cuda.available():
                why = "NVRTC (pynvrtc and libnvrtc) is missing"
            else:
                why = None
        _cuda_problem.append(why)
    return _cuda_problem[0]


def canonical(device: Any) -> str:
    """The canonical name of `device` (None: the default device); unknown or unusable ones raise."""
    if device is None:
        return default()
    if not isinstance(device, str):
        raise TypeError(f"device must be a device name such as 'cpu', got {type(device).__name__}")
    name = str.__str__(device)
    c = _CANON.get(name) or _CANON.get(_ALIASES.get(name, ""))
    if c is None:
        raise ValueError(f"device {name!r} is not available (known devices: {', '.join(KNOWN)})")
    if c is CUDA:
        why = _cuda_unavailable()
        if why is not None:
            raise ValueError(
                f"device 'cuda' is not available here: {why}; "
                "'cuda-emulated' runs the same CUDA kernels on the host"
            )
    return c


def device(name: Any) -> Device:
    """The device called `name` (checked now); `with lg.device(name):` makes it the default."""
    return Device(canonical(name))


def devices() -> list[Device]:
    """The devices arrays can be placed on here ("cuda" only where CuPy sees a GPU)."""
    out = [CPU, Device(_CANON["cuda-emulated"])]
    if _cuda_unavailable() is None:
        out.append(Device(CUDA))
    return out


def default() -> str:
    """This thread's default device (innermost `with lg.device(...)`, else LAZYGRAPH_DEVICE)."""
    s = _local.stack
    if s:
        return s[-1]
    name = SETTINGS.device
    return HOST if name == HOST else canonical(name)


def default_device() -> Device:
    """The default device as a Device object."""
    return Device(default())


def place(op: str, nodes: Sequence[Node]) -> str:
    """The device an operator on `nodes` runs on; arrays of two devices are an error naming both."""
    found = None
    for n in nodes:
        d = n.device
        if d is None or n.op is SCALAR:
            continue  # neutral: a Python scalar or a NumPy operand converted on the fly
        if found is None:
            found = d
        elif d is not found:
            raise DeviceMismatchError(
                f"{op}: operands are on different devices, {found!r} and {d!r}; "
                "move one with x.to(device) first"
            )
    return found if found is not None else default()


def of(node: Node) -> str:
    """The device of a node (a neutral one reads as the default device)."""
    d = node.device
    return d if d is not None else default()


#: 0-d values already copied to a device: (device, dtype, bytes) -> the device's array. An
#: optimizer makes its learning rate (and Adam's bias corrections) a 0-d leaf per parameter
#: per step; one copy per distinct value instead of one per leaf. The cache holds a reference
#: to each array, so the device loop never writes into one or reuses it (its `held_only`
#: checks count every holder: lazygraph/engine/device_memory.py), and leaves may share them.
_SCALARS: dict[tuple, Any] = {}
_SCALARS_MAX = 256
_scalars_lock = threading.Lock()

#: host constants met in a device graph (`x + np.ones(3)`), by content: (device, dtype, shape,
#: bytes) -> the device's copy, so a constant re-recorded each step is copied once. Only
#: constants up to CONSTANT_MAX bytes: a larger one would cost as much to key as to copy.
_CONSTANTS: dict[tuple, Any] = {}
CONSTANT_MAX = 1 << 16
#: bytes of device memory the constant cache may hold (oldest entries go first)
_CONSTANTS_BUDGET = 1 << 23
_constants_bytes = 0


def on_device(value: np.ndarray, dev: str) -> Any:
    """`value` (host data) as the buffer of a leaf on `dev`: the device's array (a counted copy)
    where its memory is not the host's, else `value` itself."""
    if dev is HOST:
        return value
    from jit import backend

    be = backend.get(dev)
    if backend.host_memory(be):
        return value
    if value.ndim:
        return be.to_device(value)
    key = (dev, value.dtype.str, value.tobytes())
    d = _SCALARS.get(key)
    if d is None:
        d = be.to_device(value)
        with _scalars_lock:
            if len(_SCALARS) >= _SCALARS_MAX:
                _SCALARS.pop(next(iter(_SCALARS)))
            _SCALARS[key] = d
    return d


def constant(be: Any, value: np.ndarray) -> Any:
    """A host constant of a device graph on device `be`: copied once per distinct small value
    (a counted copy; cached by content, shared by leaves, never written), per run if large."""
    global _constants_bytes
    if value.nbytes > CONSTANT_MAX or value.dtype.kind == "O":
        return be.to_device(value)
    key = (be.name, value.dtype.str, value.shape, value.tobytes())
    d = _CONSTANTS.get(key)
    if d is None:
        d = be.to_device(value)
        with _scalars_lock:
            while _CONSTANTS and _constants_bytes + value.nbytes > _CONSTANTS_BUDGET:
                old = _CONSTANTS.pop(next(iter(_CONSTANTS)))
                _constants_bytes -= old.nbytes
            if key not in _CONSTANTS:
                _CONSTANTS[key] = d
                _constants_bytes += value.nbytes
    return d


def host_value(node: Node) -> np.ndarray:
    """The value a node holds, as a read-only host array (a counted copy from device memory)."""
    b = node.buffer
    if type(b) is np.ndarray:
        return b
    d = node.device
    if d is not None and d is not HOST and hasattr(b, "shape") and not isinstance(b, np.generic):
        from jit import backend

        h = backend.get(d).to_host(b)
        h.setflags(write=False)
        return h
    return np.asarray(b)
