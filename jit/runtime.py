"""The backend seam: what evaluation needs from a device, behind one small interface.

A backend is four things (the layout of a device in most array runtimes):
- an allocator: `empty`, `to_device`, `to_host`, plus `is_buffer` and `may_share` so that a
  caller can check an `out=` buffer it was handed, and `namespace()`, the array namespace of
  its buffers (what creation kernels allocate with). A device whose memory is not the host's
  counts every copy through `count_transfer` (read back with `transfers`), and a step that runs
  on the host instead through `count_host_step` (`host_steps`);
- a compiler: `compile(source, name) -> Binary`, from the source language the backend names in
  `language` ("c" or "cuda"; jit/generate.py renders the fused kernels in it), with the binary
  kept in the compiled-kernel store (jit/store.py);
- a loader and runner: `load(binary, entry, scalars) -> Program`, and a program launched as
  `program(arrays, ints, fs, is_, grid, block)`;
- library calls: `gemm` (transpose flags, strided operands, `out=`), the GEMM's in-place
  `epilogue` (bias, ReLU), `conv2d` and its input and weight gradients, max and average
  pooling and their gradients. The convolution and pooling calls take the operator's
  reference-kernel signature (ops/) plus `out=` and `exact=`: exact calls give the reference
  kernel's bits, inexact ones may use a faster algorithm whose results differ by rounding. The
  CUDA devices have no reference-bits convolution or average pooling: they run their device
  kernels (cuDNN, or jit/window_cuda.py's) whatever `exact` says.

Every generated kernel, whatever its language, has one argument convention (the kernel ABI):
its arrays (inputs, then outputs), int64 loop sizes and strides (`ints`), and its scalar
operands, slot k read from `fs[k]` (float64) or `is_[k]` (int64). The C kernels take these as
four pointers; the CUDA kernels take them as separate parameters, the scalars in the order
`scalars` gives at load time. `grid` and `block` are the launch shape (blocks, threads per
block); a CPU kernel ignores them (OpenMP chooses its threads).

A new device (for example a CUDA backend emulated on the host) is one subclass: `language`
picks its renderer, and its allocator, compiler, loader and library calls are its own.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: per by-value scalar parameter, in parameter order: ("f", k) passes fs[k], ("i", k) passes is_[k]
ScalarSlots = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Binary:
    """A compiled kernel image: its bytes, format ("so", "ptx", "cubin") and store key."""

    data: bytes
    kind: str
    key: str


class Program(ABC):
    """A loaded kernel entry point, launched with the kernel ABI (module docstring)."""

    @abstractmethod
    def __call__(
        self,
        arrays: Sequence[Any],
        ints: Sequence[int],
        fs: Sequence[float] = (),
        is_: Sequence[int] = (),
        grid: int = 1,
        block: int = 1,
    ) -> None:
        """Run the kernel once on these arguments and launch shape (returns when the work is queued)."""


class Backend(ABC):
    """One device's allocator, compiler, loader and library calls (module docstring)."""

    #: the registry's name for the backend ("cpu", "cuda")
    name: str = ""
    #: the source language its compiler takes: "c" or "cuda"
    language: str = ""

    # -- allocator ------------------------------------------------------------------------
    @abstractmethod
    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """An uninitialised C-contiguous buffer on the device."""

    @abstractmethod
    def to_device(self, host: Any) -> Any:
        """A device buffer holding `host`'s values (the array itself where it already is one)."""

    @abstractmethod
    def to_host(self, x: Any) -> np.ndarray:
        """`x`'s values as a NumPy array (waits for queued work that writes it)."""

    @abstractmethod
    def is_buffer(self, x: Any) -> bool:
        """True when `x` is an array of this device (what `out=` must be)."""

    @abstractmethod
    def may_share(self, a: Any, b: Any) -> bool:
        """True when device arrays `a` and `b` may overlap in memory."""

    # -- compiler, loader -----------------------------------------------------------------
    @abstractmethod
    def available(self) -> bool:
        """True when kernels can be compiled and run here."""

    @abstractmethod
    def compile(self, source: str, name: str = "kernel") -> Binary:
        """The binary of `source` in the current numeric mode: from the store, or compiled now."""

    @abstractmethod
    def load(self, binary: Binary, entry: str = "lg_kernel", scalars: ScalarSlots = ()) -> Program:
        """The program of `binary`'s function `entry` (loaded once per binary)."""

    # -- library calls --------------------------------------------------------------------
    @abstractmethod
    def gemm(self, a: Any, b: Any, *, trans_a: bool = False, trans_b: bool = False, out: Any = None) -> Any:
        """op(a) @ op(b) with op = transpose of the last two axes where asked (no copy: a BLAS flag)."""

    @abstractmethod
    def epilogue(self, y: Any, bias: Any = None, relu: bool = False) -> Any:
        """y + bias, then max(., 0), in place on `y` (a GEMM or convolution's fused tail)."""

    @abstractmethod
    def conv2d(
        self, x: Any, w: Any, b: Any = None, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """conv2d(x, w, b; stride, padding, dilation, groups) like ops' conv2d kernel."""

    @abstractmethod
    def conv2d_grad_input(
        self, g: Any, w: Any, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """d(conv2d)/dx like ops' conv2d_grad_input kernel (x supplies the shape)."""

    @abstractmethod
    def conv2d_grad_weight(
        self, g: Any, x: Any, w: Any, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """d(conv2d)/dw like ops' conv2d_grad_weight kernel (w supplies the shape)."""

    @abstractmethod
    def max_pool2d(self, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """max_pool2d(x; kernel_size, stride, padding, dilation) like ops' kernel."""

    @abstractmethod
    def max_pool2d_grad(
        self, g: Any, x: Any, y: Any = None, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """The cotangent routed to each window's first maximum, like ops' max_pool2d_grad kernel."""

    @abstractmethod
    def avg_pool2d(self, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """avg_pool2d(x; kernel_size, stride, padding, count_include_pad) like ops' kernel."""

    @abstractmethod
    def avg_pool2d_grad(self, g: Any, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """Each window's cotangent spread over the elements it averaged (x supplies the shape)."""

    def namespace(self) -> Any:
        """The array namespace of this device's buffers (NumPy's module; CuPy's on "cuda")."""
        return np

    def library(self, op: str) -> Any:
        """The library call implementing operator `op` (e.g. "conv2d"), or None where there is none."""
        name = {"matmul": "gemm"}.get(op, op)
        return getattr(self, name, None) if name in LIBRARY_CALLS else None


#: the library calls every backend provides, by name
LIBRARY_CALLS = (
    "gemm",
    "conv2d",
    "conv2d_grad_input",
    "conv2d_grad_weight",
    "max_pool2d",
    "max_pool2d_grad",
    "avg_pool2d",
    "avg_pool2d_grad",
)


#: (backend name, "to_device" | "to_host") -> copies, and the same with "_bytes" -> bytes copied
_TRANSFERS: Counter = Counter()
#: (backend name, what) -> steps that ran on the host with a counted round trip (`host_step`)
_HOST_STEPS: Counter = Counter()
_count_lock = threading.Lock()


def count_transfer(name: str, direction: str, nbytes: int) -> None:
    """Account one copy of `nbytes` between host and device `name` ("to_device" or "to_host")."""
    with _count_lock:
        _TRANSFERS[(name, direction)] += 1
        _TRANSFERS[(name, direction + "_bytes")] += int(nbytes)


def count_host_step(name: str, what: str) -> None:
    """Account one step of device `name` that ran on the host (its operands copied there and back)."""
    with _count_lock:
        _HOST_STEPS[(name, what)] += 1


def transfers(name: str | None = None) -> dict:
    """Host <-> device copies so far: {"to_device": n, "to_device_bytes": b, "to_host": ..., ...}
    for device `name`, or keyed by (device, direction) for every device."""
    with _count_lock:
        if name is None:
            return dict(_TRANSFERS)
        out = {k: 0 for k in ("to_device", "to_device_bytes", "to_host", "to_host_bytes")}
        out.update({d: n for (b, d), n in _TRANSFERS.items() if b == name})
        return out


def host_steps(name: str | None = None) -> dict:
    """Steps that ran on the host with a round trip, by what they were, for device `name` (or all)."""
    with _count_lock:
        if name is None:
            return dict(_HOST_STEPS)
        return {w: n for (b, w), n in _HOST_STEPS.items() if b == name}
