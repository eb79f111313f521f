"""The CuPy-only layer of the CUDA backend: buffers, module loading, launches, cuBLAS, cuDNN.

Everything here needs CuPy (and, to run, a GPU and its driver); jit/backend/cuda.py imports
this module only when a CUDA buffer, program or library call is first needed, so the rest of
the package imports and compiles CUDA (NVRTC) without it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np

ndarray = cupy.ndarray


def empty(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """cupy.empty."""
    return cupy.empty(shape, dtype=dtype)


def to_device(x: Any) -> Any:
    """cupy.asarray (no copy for a CuPy array)."""
    return cupy.asarray(x)


def to_host(x: Any) -> np.ndarray:
    """cupy.asnumpy (synchronises with the stream that writes x)."""
    return cupy.asnumpy(x)


def may_share(a: Any, b: Any) -> bool:
    """cupy.may_share_memory."""
    return bool(cupy.may_share_memory(a, b))


def device_arch() -> int | None:
    """Compute capability of the current device (90 for sm_90), or None without a device or driver."""
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return int(cupy.cuda.Device().compute_capability)
    except Exception:  # no driver, no device: compile-only mode
        return None


def load_function(data: bytes, kind: str, entry: str) -> Any:
    """The function `entry` of a PTX or CUBIN image, through CuPy's RawModule."""
    with tempfile.NamedTemporaryFile(suffix=f".{kind}", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        return cupy.RawModule(path=path).get_function(entry)
    finally:
        os.unlink(path)


def launch(fn: Any, grid: int, block: int, args: Sequence[Any]) -> None:
    """Queue one launch of `fn` on the current stream."""
    fn((grid,), (block,), tuple(args))


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """cupy.matmul (cuBLAS for floating point)."""
    return cupy.matmul(a, b) if out is None else cupy.matmul(a, b, out=out)


def swapaxes(a: Any) -> Any:
    """The transpose of the last two axes, as a view."""
    return cupy.swapaxes(a, -1, -2)


def add(y: Any, b: Any) -> None:
    """y += b in place."""
    cupy.add(y, b, out=y)


def relu(y: Any) -> None:
    """y = max(y, 0) in place."""
    cupy.maximum(y, 0, out=y)


def copyto(dst: Any, src: Any) -> None:
    """cupy.copyto."""
    cupy.copyto(dst, src)


def contiguous(x: Any) -> Any:
    """cupy.ascontiguousarray (no copy for a C-contiguous array)."""
    return cupy.ascontiguousarray(x)


_cudnn_error = "not probed"


def cudnn() -> Any:
    """CuPy's cuDNN bindings (`cupy.cudnn`), or None where cuDNN's libraries do not load."""
    global _cudnn_error
    try:
        from cupy import cudnn as lib  # loads libcudnn (pip's nvidia-cudnn-cu12 or the system's)

        lib.get_handle()
    except Exception as e:  # ImportError, or CUDARuntimeError/CuDNNError when it cannot start
        major = int(cupy.__version__.split(".")[0])
        _cudnn_error = (
            f"CuPy {cupy.__version__} has no cupy.cudnn" if major >= 14 else f"{type(e).__name__}: {e}"
        )
        return None
    _cudnn_error = ""
    return lib


def cudnn_error() -> str:
    """Why `cudnn()` returned None."""
    return _cudnn_error


#: TF32 would change float32 results by far more than rounding: cuDNN keeps full precision
_TENSOR_CORE = "never"


def conv_forward(x: Any, w: Any, b: Any, y: Any, stride: tuple, pad: tuple, dil: tuple, groups: int) -> Any:
    """y = conv2d(x, w) + b through cuDNN (b may be None); returns y."""
    from cupy import cudnn as lib

    lib.convolution_forward(
        x,
        w,
        None if b is None else cupy.ascontiguousarray(b),
        y,
        tuple(pad),
        tuple(stride),
        tuple(dil),
        int(groups),
        auto_tune=False,
        tensor_core=_TENSOR_CORE,
    )
    return y


def conv_backward_data(w: Any, gy: Any, gx: Any, stride: tuple, pad: tuple, dil: tuple, groups: int) -> Any:
    """gx = d(conv2d)/dx of cotangent gy through cuDNN; returns gx."""
    from cupy import cudnn as lib

    lib.convolution_backward_data(
        w,
        gy,
        None,
        gx,
        tuple(pad),
        tuple(stride),
        tuple(dil),
        int(groups),
        deterministic=True,
        auto_tune=False,
        tensor_core=_TENSOR_CORE,
    )
    return gx


def conv_backward_filter(x: Any, gy: Any, gw: Any, stride: tuple, pad: tuple, dil: tuple, groups: int) -> Any:
    """gw = d(conv2d)/dw of cotangent gy through cuDNN; returns gw."""
    from cupy import cudnn as lib

    lib.convolution_backward_filter(
        x,
        gy,
        gw,
        tuple(pad),
        tuple(stride),
        tuple(dil),
        int(groups),
        deterministic=True,
        auto_tune=False,
        tensor_core=_TENSOR_CORE,
    )
    return gw
