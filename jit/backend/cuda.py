"""The CUDA backend: CuPy buffers, NVRTC through pynvrtc, RawModule launches, cuBLAS via CuPy.

- Allocator: CuPy arrays.
- Compiler: jit/nvrtc.py (CUDA C rendered by jit/render_cuda.py -> a CUBIN for the device's
  architecture, or PTX; without a device, PTX for the oldest supported one, which is how CI
  checks that every kernel compiles). Needs pynvrtc and libnvrtc only, not CuPy.
- Loader: the image is loaded by CuPy's RawModule; a program passes the kernel ABI as separate
  parameters: the arrays, the int64 sizes and strides, then each scalar as double or int64
  in the order the renderer declared them (`scalars` at load time).
- Library calls: GEMM is cupy.matmul (cuBLAS); the epilogue runs in place with CuPy.
  Convolution and its gradients go through cuDNN (CuPy's `cupy.cudnn`, with pip's
  nvidia-cudnn-cu12 wheels); without it, the im2col/col2im CUDA kernels of jit/window_cuda.py
  and cuBLAS run instead, after a one-time `CudnnMissingWarning` naming what to install.
  Max and average pooling and their gradients are the CUDA kernels of jit/window_cuda.py.
  Dtypes those kernels do not take (float16, bool, mixed) run the operator's reference
  kernel on the CuPy arrays (nothing leaves the device). The same kernels and calls
  run on the emulated device, which is how CI checks them (jit/window_cuda_calls.py).
- Values: the engine keeps a device program's values as CuPy arrays between steps
  (lazygraph/engine/device_run.py); `to_device`/`to_host` are the only copies, counted
  (`jit.backend.transfers`), and `empty`/`to_device` count their buffers
  (`jit.backend.allocations`). `held_only` tells the engine when nothing but its own
  references holds an array's memory (buffer reuse, writes in place; device_memory.py).

All CuPy calls live in jit/backend/cuda_cupy.py, imported on first use: this module imports,
and compiles, on machines without CuPy.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from jit import nvrtc, window_cuda_calls
from jit.backend import count_allocation, count_transfer
from jit.runtime import Backend, Binary, Program, ScalarSlots
from ops.conv import out_hw

_UNPROBED = object()


def _rt() -> ModuleType:
    from jit.backend import cuda_cupy

    return cuda_cupy


class CudaProgram(Program):
    """A kernel function loaded by CuPy, launched with separate typed parameters."""

    __slots__ = ("fn", "scalars")

    def __init__(self, fn: Any, scalars: ScalarSlots) -> None:
        self.fn = fn
        self.scalars = scalars

    def __call__(
        self,
        arrays: Sequence[Any],
        ints: Sequence[int],
        fs: Sequence[float] = (),
        is_: Sequence[int] = (),
        grid: int = 1,
        block: int = 1,
    ) -> None:
        """Queue one launch on CuPy arrays."""
        args: list[Any] = list(arrays) + [np.int64(i) for i in ints]
        args += [np.float64(fs[k]) if kind == "f" else np.int64(is_[k]) for kind, k in self.scalars]
        _rt().launch(self.fn, grid, block, args)


def _cupy_held_only(x: Any, n: int, views: Sequence[Any], nv: int) -> bool:
    """`CudaBackend.held_only`'s count on a CuPy array that owns its memory (see there): `x`
    held `n` times by the callers, each view `nv` times besides the list."""
    ptr = x.data
    mem = ptr.mem
    shared = 0
    for v in views:
        if sys.getrefcount(v) != nv + 3:  # the list, `v`, the argument
            return False
        vp = v.data
        if vp is ptr:
            shared += 1
        elif vp.mem is not mem or sys.getrefcount(vp) != 3:  # v.data, `vp`, the argument
            return False
        vp = None
    own = sum(1 for v in views if v.base is x)
    # the allocation: ptr.mem, `mem`, the argument, and one per other pointer into it
    if sys.getrefcount(mem) != 3 + len(views) - shared:
        return False
    # x's pointer: x.data, `ptr`, the argument, and each view sharing it
    if sys.getrefcount(ptr) != 3 + shared:
        return False
    return sys.getrefcount(x) == n + 2 + own


class CudaBackend(window_cuda_calls.DeviceWindowCalls, Backend):
    """The CUDA backend (module docstring)."""

    name = "cuda"
    language = "cuda"
    #: buffers are CuPy arrays: the engine keeps a program's values on the GPU between steps
    host_memory = False
    #: convolutions without cuDNN warn once (jit/window_cuda_calls.py)
    expects_cudnn = True

    def __init__(self) -> None:
        self._functions: dict[tuple[str, str], Any] = {}
        self._arch: Any = _UNPROBED
        self._cudnn: Any = _UNPROBED
        self._ndarray: Any = _UNPROBED
        self._held_ok: Any = _UNPROBED
        self._lock = threading.Lock()

    @staticmethod
    def _have_cupy() -> bool:
        return importlib.util.find_spec("cupy") is not None

    # -- allocator ------------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """cupy.empty, counted (`jit.backend.allocations`: the engine's own allocations; CuPy's
        functions allocate through its memory pool uncounted)."""
        v = _rt().empty(shape, dtype)
        count_allocation(self.name, v.nbytes)
        return v

    def to_device(self, host: Any) -> Any:
        """cupy.asarray (a copy to the device, counted, unless `host` is a CuPy array already)."""
        if self.is_buffer(host):
            return host
        v = _rt().to_device(host)
        count_transfer(self.name, "to_device", v.nbytes)
        count_allocation(self.name, v.nbytes)
        return v

    def to_host(self, x: Any) -> np.ndarray:
        """cupy.asnumpy (a counted copy for a CuPy array)."""
        if not self.is_buffer(x):
            return np.asarray(x)
        count_transfer(self.name, "to_host", x.nbytes)
        return _rt().to_host(x)

    def is_buffer(self, x: Any) -> bool:
        """A CuPy array (asked for every step's value: the type is looked up once)."""
        t = self._ndarray
        if t is _UNPROBED:
            t = self._ndarray = _rt().ndarray if self._have_cupy() else None
        return t is not None and isinstance(x, t)

    def may_share(self, a: Any, b: Any) -> bool:
        """cupy.may_share_memory."""
        return _rt().may_share(a, b)

    def held_only(self, x: Any, n: int, views: Sequence[Any] = ()) -> bool:
        """Whether nothing refers to CuPy array `x`'s memory but `n` references to `x` (the
        caller's slots and locals) and the arrays in `views` (views of `x`, each held `n` times
        besides the list): what the engine checks before it writes into `x` or reuses it
        (lazygraph/engine/device_memory.py).

        CuPy's views do not all hold their base (`as_strided` gives `base=None`), but every
        array over an allocation holds a `MemoryPointer` whose `mem` is the allocation: the
        references to `x.data` and to `x.data.mem` count every array over it. The counting is
        checked once against fresh arrays and their views (`_held_probe`); where it does not
        hold (another CuPy), the answer is always no: the engine copies and allocates instead.
        """
        if self._held_ok is _UNPROBED:
            self._held_ok = self._held_probe()
        if not self._held_ok or not self.is_buffer(x) or x.base is not None or not x.flags.c_contiguous:
            return False
        return _cupy_held_only(x, n + 1, views, n)  # + 1: this call's own parameter

    def _held_probe(self) -> bool:
        """Whether `held_only`'s counting sees views of a fresh CuPy array (probed once)."""
        try:
            rt = _rt()
            vals = [rt.empty((4, 4), np.float32)]
            if not _cupy_held_only(vals[0], 1, (), 1):
                return False
            checks = []
            for make in (
                lambda a: a[1:],
                lambda a: a.reshape(-1),
                lambda a: a.T,
                lambda a: _rt().cupy.lib.stride_tricks.as_strided(a.reshape(-1)[2:], (2, 2), (4, 8)),
            ):
                v = make(vals[0])
                checks.append(not _cupy_held_only(vals[0], 1, (), 1))  # the view is a holder
                vals.append(v)
                del v
                checks.append(_cupy_held_only(vals[0], 1, [vals[-1]], 1))  # named: accounted for
                vals.pop()
                checks.append(_cupy_held_only(vals[0], 1, (), 1))  # dropped: held once again
            return all(checks)
        except Exception:  # noqa: BLE001 - no CuPy or no device: never claim a buffer is free
            return False

    # -- compiler, loader -----------------------------------------------------------------
    def device_arch(self) -> int | None:
        """The device's compute capability (e.g. 90), or None without CuPy or a device (probed once)."""
        if self._arch is _UNPROBED:
            self._arch = _rt().device_arch() if self._have_cupy() else None
        return self._arch

    def available(self) -> bool:
        """True when NVRTC compiles and CuPy sees a device to run on."""
        return nvrtc.available() and self.device_arch() is not None

    def compile(self, source: str, name: str = "kernel") -> Binary:
        """PTX or a CUBIN for this machine's device (or compile-only PTX without one), via NVRTC."""
        return nvrtc.compile_cuda(source, f"{name}.cu", device=self.device_arch())

    def load(self, binary: Binary, entry: str = "lg_kernel", scalars: ScalarSlots = ()) -> CudaProgram:
        """The program of `entry` in `binary` (each image loaded once)."""
        fn = self._functions.get((binary.key, entry))
        if fn is None:
            with self._lock:
                fn = self._functions.get((binary.key, entry))
                if fn is None:
                    fn = self._functions[(binary.key, entry)] = _rt().load_function(
                        binary.data, binary.kind, entry
                    )
        return CudaProgram(fn, scalars)

    # -- library calls --------------------------------------------------------------------
    def gemm(self, a: Any, b: Any, *, trans_a: bool = False, trans_b: bool = False, out: Any = None) -> Any:
        """cupy.matmul (cuBLAS; a transposed view reaches it as a transpose flag)."""
        rt = _rt()
        return rt.matmul(rt.swapaxes(a) if trans_a else a, rt.swapaxes(b) if trans_b else b, out=out)

    def epilogue(self, y: Any, bias: Any = None, relu: bool = False) -> Any:
        """In place on the device: y += bias, then y = max(y, 0)."""
        if bias is not None:
            _rt().add(y, bias)
        if relu:
            _rt().relu(y)
        return y

    def namespace(self) -> Any:
        """CuPy's module (NumPy's API creating CuPy arrays)."""
        return _rt().cupy

    # -- helpers of the device window calls (jit/window_cuda_calls.py) ----------------------
    def contiguous(self, x: Any) -> Any:
        """cupy.ascontiguousarray."""
        return _rt().contiguous(x)

    def copyto(self, dst: Any, src: Any) -> None:
        """cupy.copyto."""
        _rt().copyto(dst, src)

    def cudnn(self) -> Any:
        """CuPy's cuDNN bindings, or None where CuPy or pip's cuDNN wheels are missing (probed once)."""
        if self._cudnn is _UNPROBED:
            self._cudnn = _rt().cudnn() if self._have_cupy() else None
        return self._cudnn

    def host_backend(self) -> Any:
        """The CPU backend (the host path of dtypes the CUDA kernels do not take)."""
        from jit.backend import get

        return get("cpu")

    def cudnn_missing_reason(self) -> str:
        """What the one-time warning says is missing."""
        return _rt().cudnn_error() if self._have_cupy() else "CuPy is not installed"

    def cudnn_call(self, op: str, args: tuple, out: Any, attrs: dict) -> Any:
        """`op` (a convolution or one of its gradients) through cuDNN, into `out` where given."""
        rt = _rt()
        conv = (attrs["stride"], attrs["padding"], attrs["dilation"], attrs["groups"])
        if op == "conv2d":
            x, w, b = args
            n, _, h, wd = x.shape
            ho, wo = out_hw((h, wd), tuple(w.shape[2:]), *conv[:3])
            y = out if out is not None else self.empty((n, w.shape[0], ho, wo), x.dtype)
            return rt.conv_forward(rt.contiguous(x), rt.contiguous(w), b, y, *conv)
        if op == "conv2d_grad_input":
            g, w, x = args
            gx = out if out is not None else self.empty(tuple(x.shape), g.dtype)
            return rt.conv_backward_data(rt.contiguous(w), rt.contiguous(g), gx, *conv)
        g, x, w = args
        gw = out if out is not None else self.empty(tuple(w.shape), g.dtype)
        return rt.conv_backward_filter(rt.contiguous(x), rt.contiguous(g), gw, *conv)
