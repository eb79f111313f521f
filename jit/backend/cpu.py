"""The CPU backend: NumPy buffers, the system C compiler, ctypes, BLAS through NumPy.

- Allocator: NumPy arrays.
- Compiler: jit/compile_c.py (C with OpenMP; the binary goes to the kernel store).
- Loader: the shared library is dlopened from a private copy of the verified bytes
  (jit/store.py's `load_library`), once per binary; a program calls its `lg_kernel(void
  **ptrs, const int64_t *dims, const double *fs, const int64_t *is)` through ctypes.
- Library calls: GEMM is NumPy's matmul (BLAS; a transposed operand is a strided view, which
  NumPy hands to BLAS as a transpose flag, not a copy). Max pooling and its gradient run the
  compiled window kernels (jit/window.py, bit for bit the reference's); inexact convolutions
  run the compiled im2col chunks or the direct kernel (jit/conv.py) where they apply. Exact
  calls, unsupported dtypes, `SETTINGS.jit` off or no compiler: the reference kernels (ops/).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jit import c_program, compile_c, conv, window
from jit.c_program import CpuProgram
from jit.runtime import Backend, Binary, ScalarSlots
from ops.base import REGISTRY
from ops.settings import SETTINGS


def _into(v: Any, out: np.ndarray | None) -> np.ndarray:
    """A reference kernel's value, copied into `out` where one was given."""
    v = np.asarray(v)
    if out is None:
        return v
    np.copyto(out, v)
    return out


class CpuBackend(Backend):
    """The CPU backend (module docstring)."""

    name = "cpu"
    language = "c"

    # -- allocator ------------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """np.empty."""
        return np.empty(shape, dtype=dtype)

    def to_device(self, host: Any) -> np.ndarray:
        """np.asarray (host memory is this device's memory)."""
        return np.asarray(host)

    def to_host(self, x: Any) -> np.ndarray:
        """np.asarray."""
        return np.asarray(x)

    def is_buffer(self, x: Any) -> bool:
        """A NumPy array (not a subclass: kernels write raw memory)."""
        return type(x) is np.ndarray

    def may_share(self, a: Any, b: Any) -> bool:
        """np.may_share_memory."""
        return np.may_share_memory(a, b)

    # -- compiler, loader -----------------------------------------------------------------
    def available(self) -> bool:
        """True when a working C compiler exists."""
        return compile_c.available()

    def compile(self, source: str, name: str = "kernel") -> Binary:
        """The shared library of C `source` (jit/compile_c.py; `name` is only a label here)."""
        return compile_c.compile_library(source)

    def load(self, binary: Binary, entry: str = "lg_kernel", scalars: ScalarSlots = ()) -> CpuProgram:
        """The program of `entry` in `binary`, dlopened once per binary from its verified bytes."""
        return c_program.load(binary, entry)

    def drop_loaded(self) -> None:
        """Forget loaded libraries, so the next load of each binary reads the store's bytes again."""
        c_program.drop_loaded()

    # -- library calls --------------------------------------------------------------------
    def _compiled(self) -> bool:
        return SETTINGS.jit and compile_c.available()

    def gemm(
        self,
        a: np.ndarray,
        b: np.ndarray,
        *,
        trans_a: bool = False,
        trans_b: bool = False,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """np.matmul on (transposed) views: BLAS gets a transpose flag, the result NumPy's bits."""
        if trans_a:
            a = np.swapaxes(a, -1, -2)
        if trans_b:
            b = np.swapaxes(b, -1, -2)
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)

    def epilogue(self, y: np.ndarray, bias: Any = None, relu: bool = False) -> np.ndarray:
        """In place: y += bias, then y = max(y, 0) (the reference's operations, in its order)."""
        if bias is not None:
            np.add(y, bias, out=y)
        if relu:
            np.maximum(y, 0, out=y)
        return y

    def _window(self, op: str, compiled: Callable | None, args: tuple, out: Any, attrs: dict) -> np.ndarray:
        if compiled is not None:
            v = compiled(*args, out=out, **attrs)
            if v is not None:
                return v
        return _into(REGISTRY[op].kernel(*args, **attrs), out)

    def conv2d(
        self, x: Any, w: Any, b: Any = None, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """The reference's im2col + GEMM when exact; else compiled chunks or direct where they apply."""
        fast = None if exact or not self._compiled() else conv.conv2d_kernel
        return self._window("conv2d", fast, (x, w, b), out, attrs)

    def conv2d_grad_input(
        self, g: Any, w: Any, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """The reference when exact; else the stride-1 compiled convolution of g where it applies."""
        fast = None if exact or not self._compiled() else conv.conv2d_grad_input_kernel
        return self._window("conv2d_grad_input", fast, (g, w, x), out, attrs)

    def conv2d_grad_weight(
        self, g: Any, x: Any, w: Any, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """The reference when exact; else compiled chunks or direct dot products where they apply."""
        fast = None if exact or not self._compiled() else conv.conv2d_grad_weight_kernel
        return self._window("conv2d_grad_weight", fast, (g, x, w), out, attrs)

    def max_pool2d(self, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """The compiled window kernel (the reference's bits) for real dtypes, else the reference."""
        ok = self._compiled() and window.supported("max_pool2d", [np.asarray(x).dtype])
        return self._window("max_pool2d", window.KERNELS["max_pool2d"] if ok else None, (x,), out, attrs)

    def max_pool2d_grad(
        self, g: Any, x: Any, y: Any = None, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """The compiled gradient kernel (the reference's bits) for real dtypes, else the reference."""
        dts = [np.asarray(g).dtype, np.asarray(x).dtype]
        ok = self._compiled() and window.supported("max_pool2d_grad", dts)
        fn = window.KERNELS["max_pool2d_grad"] if ok else None
        return self._window("max_pool2d_grad", fn, (g, x, y), out, attrs)

    def avg_pool2d(self, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """The reference kernel (one contiguous add per kernel offset, ops.window)."""
        return self._window("avg_pool2d", None, (x,), out, attrs)

    def avg_pool2d_grad(self, g: Any, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """The reference kernel (NumPy's strided adds per kernel offset)."""
        return self._window("avg_pool2d_grad", None, (g, x), out, attrs)
