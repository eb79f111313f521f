"""The CUDA devices' window library calls, written once against a backend.

Pooling, its gradients and convolution for the CUDA backend and the emulated CUDA device:
each call takes the backend `be` and arrays in its memory (CuPy arrays on "cuda", NumPy arrays
on "cuda-emulated"), allocates through `be.empty`, launches the kernels of jit/window_cuda.py
through `be`'s compiler and loader, and multiplies through `be.gemm` (cuBLAS through CuPy, or
NumPy's BLAS on the emulated device). Nothing here names CuPy.

Convolution prefers cuDNN where the backend has it (`be.cudnn()`, the CUDA backend's CuPy
bindings); without it, the im2col + GEMM kernels run, and a backend that expects cuDNN
(`be.expects_cudnn`: the real CUDA backend) warns once per process which package is missing.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np

from jit import window_cuda as wc
from jit.runtime import count_host_step
from ops.base import REGISTRY
from ops.conv import out_hw
from ops.settings import SETTINGS

Pair = tuple[int, int]

#: what the one-time warning tells the user to install
CUDNN_HINT = (
    "CuPy 13 with cuDNN's wheels (pip install 'cupy-cuda12x<14' nvidia-cudnn-cu12); CuPy 14 removed its "
    "cuDNN bindings"
)

_warned: set[str] = set()
_warn_lock = threading.Lock()


class CudnnMissingWarning(RuntimeWarning):
    """Convolutions on a CUDA device run as im2col + cuBLAS because cuDNN is not usable."""


def warn_without_cudnn(be_name: str, why: str) -> bool:
    """Warn, once per process and backend, that convolution falls back to im2col + GEMM; True if it warned."""
    with _warn_lock:
        if be_name in _warned:
            return False
        _warned.add(be_name)
    warnings.warn(
        f"{be_name}: cuDNN is not available ({why}); convolutions run as im2col/col2im CUDA kernels "
        f"and cuBLAS GEMMs, which is slower. To use cuDNN: {CUDNN_HINT}",
        CudnnMissingWarning,
        stacklevel=3,
    )
    return True


def _out(be: Any, shape: tuple, dtype: np.dtype, out: Any) -> Any:
    """`out` where the kernel can write it directly, else a fresh buffer (copied to `out` after)."""
    if (
        out is not None
        and be.is_buffer(out)
        and tuple(out.shape) == tuple(shape)
        and out.dtype == dtype
        and out.flags.c_contiguous
    ):
        return out
    return be.empty(tuple(shape), np.dtype(dtype))


class _Scratch(threading.local):
    """Per thread: the convolutions' intermediate buffers (columns, weight matrices, GEMM rows),
    kept for the next call of the same shapes. They never leave the call that fills them, and
    a thread's launches are ordered (one stream), so the next call may overwrite them."""

    def __init__(self) -> None:
        self.buffers: dict[tuple, Any] = {}


_scratch = _Scratch()
#: intermediate buffers kept per thread (the oldest goes first)
SCRATCH_MAX = 16


def scratch(be: Any, role: str, shape: tuple, dtype: np.dtype) -> Any:
    """A device buffer for a call's intermediate `role`, reused by later calls of its shape."""
    key = (be.name, role, tuple(shape), np.dtype(dtype).str)
    buffers = _scratch.buffers
    b = buffers.pop(key, None)
    if b is None:
        b = be.empty(tuple(shape), np.dtype(dtype))
        while len(buffers) >= SCRATCH_MAX:
            buffers.pop(next(iter(buffers)))
    buffers[key] = b  # most recent last
    return b


def _done(be: Any, v: Any, out: Any) -> Any:
    if out is None or v is out:
        return v
    be.copyto(out, v)
    return out


# -- pooling ---------------------------------------------------------------------------------


def max_pool2d(
    be: Any, x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair, out: Any = None
) -> Any:
    """max_pool2d on the device: one thread per output, the reference's values."""
    x = be.contiguous(x)
    n, c, h, w = x.shape
    ho, wo = out_hw((h, w), kernel_size, stride, padding, dilation)
    y = _out(be, (n, c, ho, wo), x.dtype, out)
    geo = (kernel_size, stride, padding, dilation)
    wc.launch(be, wc._max_pool_source, (x.dtype, False, *geo), [x, y], [n * c * ho * wo, h, w, ho, wo])
    return _done(be, y, out)


def max_pool2d_grad(
    be: Any,
    g: Any,
    x: Any,
    y: Any = None,
    *,
    kernel_size: Pair,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    out: Any = None,
) -> Any:
    """The max-pool gradient on the device: each window's winner recomputed, then a gather (no atomics)."""
    g = be.contiguous(g)
    x = be.contiguous(x)
    n, c, h, w = x.shape
    ho, wo = out_hw((h, w), kernel_size, stride, padding, dilation)
    if tuple(g.shape) != (n, c, ho, wo):
        raise ValueError(f"max_pool2d_grad: cotangent {tuple(g.shape)} does not fit input {tuple(x.shape)}")
    geo = (kernel_size, stride, padding, dilation)
    at = scratch(be, "argmax", (n, c, ho, wo), np.dtype(np.int32))
    wc.launch(be, wc._max_pool_source, (x.dtype, True, *geo), [x, at], [n * c * ho * wo, h, w, ho, wo])
    gi = _out(be, x.shape, g.dtype, out)
    wc.launch(be, wc._max_pool_grad_source, (g.dtype, *geo), [g, at, gi], [n * c * h * w, h, w, ho, wo])
    return _done(be, gi, out)


def avg_pool2d(
    be: Any,
    x: Any,
    *,
    kernel_size: Pair,
    stride: Pair,
    padding: Pair,
    count_include_pad: bool,
    out: Any = None,
) -> Any:
    """avg_pool2d on the device (integers average to float64, as the reference)."""
    x = be.contiguous(x)
    n, c, h, w = x.shape
    ho, wo = out_hw((h, w), kernel_size, stride, padding, (1, 1))
    ydt = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    y = _out(be, (n, c, ho, wo), ydt, out)
    args = (x.dtype, ydt, bool(count_include_pad), kernel_size, stride, padding)
    wc.launch(be, wc._avg_pool_source, args, [x, y], [n * c * ho * wo, h, w, ho, wo])
    return _done(be, y, out)


def avg_pool2d_grad(
    be: Any,
    g: Any,
    x: Any,
    *,
    kernel_size: Pair,
    stride: Pair,
    padding: Pair,
    count_include_pad: bool,
    out: Any = None,
) -> Any:
    """The average-pool gradient on the device: each input gathers its windows' shares (x: its shape)."""
    g = be.contiguous(g)
    n, c, h, w = x.shape
    ho, wo = out_hw((h, w), kernel_size, stride, padding, (1, 1))
    if tuple(g.shape) != (n, c, ho, wo):
        raise ValueError(f"avg_pool2d_grad: cotangent {tuple(g.shape)} does not fit input {tuple(x.shape)}")
    gi = _out(be, (n, c, h, w), g.dtype, out)
    args = (g.dtype, bool(count_include_pad), kernel_size, stride, padding)
    wc.launch(be, wc._avg_pool_grad_source, args, [g, gi], [n * c * h * w, h, w, ho, wo])
    return _done(be, gi, out)


# -- convolution -----------------------------------------------------------------------------


def _check(op: str, x_shape: tuple, w_shape: tuple, groups: int) -> None:
    """The kernels index by these sizes: inconsistent ones would write out of bounds, so refuse them."""
    o, cp = w_shape[:2]
    if len(x_shape) != 4 or len(w_shape) != 4 or groups < 1 or o % groups or x_shape[1] != cp * groups:
        raise ValueError(
            f"{op}: input {tuple(x_shape)} and weight {tuple(w_shape)} do not fit groups={groups} "
            "(NCHW input, weight (C_out, C_in/groups, kH, kW), groups dividing C_out)"
        )


def _columns(be: Any, x: Any, w_shape: tuple, groups: int, s: Pair, p: Pair, d: Pair) -> tuple[Any, tuple]:
    """im2col of x as (G, N*HO*WO, K), and the sizes the other kernels take."""
    n, c, h, wd = x.shape
    o, cp, kh, kw = w_shape
    ho, wo = out_hw((h, wd), (kh, kw), s, p, d)
    P, K = n * ho * wo, kh * kw * cp
    cols = scratch(be, "cols", (groups, P, K), x.dtype)
    wc.launch(
        be,
        wc._im2col_source,
        (x.dtype, (kh, kw), s, p, d),
        [x, cols],
        [groups * P * K, c, h, wd, ho, wo, cp, n],
    )
    return cols, (n, c, h, wd, o, cp, kh, kw, ho, wo)


def _weight_matrix(be: Any, w: Any, groups: int) -> Any:
    o, cp, kh, kw = w.shape
    wm = scratch(be, "wm", (groups, kh * kw * cp, o // groups), w.dtype)
    wc.launch(
        be,
        wc._weight_to_mat_source,
        (w.dtype,),
        [w, wm],
        [o * cp * kh * kw, groups, o // groups, cp, kh * kw],
    )
    return wm


def conv2d(
    be: Any,
    x: Any,
    w: Any,
    b: Any = None,
    *,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    groups: int,
    out: Any = None,
) -> Any:
    """conv2d as im2col, one batched GEMM over groups, and the rows written as NCHW (+ bias)."""
    x, w = be.contiguous(x), be.contiguous(w)
    _check("conv2d", x.shape, w.shape, groups)
    if b is not None and tuple(b.shape) != (w.shape[0],):
        raise ValueError(
            f"conv2d: bias {tuple(b.shape)} does not match the weight's {w.shape[0]} output channels"
        )
    cols, (n, c, h, wd, o, cp, kh, kw, ho, wo) = _columns(be, x, w.shape, groups, stride, padding, dilation)
    rows = be.gemm(
        cols,
        _weight_matrix(be, w, groups),
        out=scratch(be, "rows", (groups, cols.shape[1], o // groups), x.dtype),
    )  # (G, P, OG)
    y = _out(be, (n, o, ho, wo), x.dtype, out)
    ints = [n * o * ho * wo, groups, o // groups, ho * wo, n]
    if b is None:
        wc.launch(be, wc._rows_to_nchw_source, (x.dtype, False), [rows, y], ints)
    else:
        wc.launch(be, wc._rows_to_nchw_source, (x.dtype, True), [rows, be.contiguous(b), y], ints)
    return _done(be, y, out)


def conv2d_grad_input(
    be: Any,
    g: Any,
    w: Any,
    x: Any,
    *,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    groups: int,
    out: Any = None,
) -> Any:
    """d(conv2d)/dx: the cotangent's rows times each group's weight matrix, then col2im (x: its shape)."""
    g, w = be.contiguous(g), be.contiguous(w)
    _check("conv2d_grad_input", x.shape, w.shape, groups)
    n, c, h, wd = x.shape
    o, cp, kh, kw = w.shape
    ho, wo = g.shape[2:]
    if tuple(g.shape) != (n, o, *out_hw((h, wd), (kh, kw), stride, padding, dilation)):
        raise ValueError(
            f"conv2d_grad_input: cotangent {tuple(g.shape)} does not fit input {tuple(x.shape)}, weight {tuple(w.shape)}"
        )
    og = o // groups
    gh = scratch(be, "gh", (groups, n * ho * wo, og), g.dtype)
    wc.launch(be, wc._nchw_to_rows_source, (g.dtype,), [g, gh], [n * o * ho * wo, groups, og, ho * wo, n])
    wm = _weight_matrix(be, w, groups)
    dcols = be.gemm(
        gh, wm, trans_b=True, out=scratch(be, "dcols", (groups, n * ho * wo, wm.shape[1]), g.dtype)
    )
    dx = _out(be, (n, c, h, wd), g.dtype, out)
    geo = ((kh, kw), stride, padding, dilation)
    wc.launch(be, wc._col2im_source, (g.dtype, *geo), [dcols, dx], [n * c * h * wd, c, h, wd, ho, wo, cp, n])
    return _done(be, dx, out)


def conv2d_grad_weight(
    be: Any,
    g: Any,
    x: Any,
    w: Any,
    *,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    groups: int,
    out: Any = None,
) -> Any:
    """d(conv2d)/dw: each group's columns, transposed, times the cotangent's rows (w: its shape)."""
    g, x = be.contiguous(g), be.contiguous(x)
    _check("conv2d_grad_weight", x.shape, tuple(w.shape), groups)
    want = (
        x.shape[0],
        w.shape[0],
        *out_hw(tuple(x.shape[2:]), tuple(w.shape[2:]), stride, padding, dilation),
    )
    if tuple(g.shape) != want:
        raise ValueError(
            f"conv2d_grad_weight: cotangent {tuple(g.shape)} does not fit input {tuple(x.shape)}, weight {tuple(w.shape)}"
        )
    cols, (n, c, h, wd, o, cp, kh, kw, ho, wo) = _columns(
        be, x, tuple(w.shape), groups, stride, padding, dilation
    )
    og = o // groups
    gh = scratch(be, "gh", (groups, n * ho * wo, og), g.dtype)
    wc.launch(be, wc._nchw_to_rows_source, (g.dtype,), [g, gh], [n * o * ho * wo, groups, og, ho * wo, n])
    dwm = be.gemm(cols, gh, trans_a=True, out=scratch(be, "dwm", (groups, cols.shape[2], og), g.dtype))
    dw = _out(be, (o, cp, kh, kw), g.dtype, out)
    wc.launch(
        be, wc._mat_to_weight_source, (g.dtype,), [dwm, dw], [o * cp * kh * kw, groups, og, cp, kh * kw]
    )
    return _done(be, dw, out)


#: library-call name -> the device implementation (called as fn(be, *args, out=, **attrs))
CALLS = {
    "max_pool2d": max_pool2d,
    "max_pool2d_grad": max_pool2d_grad,
    "avg_pool2d": avg_pool2d,
    "avg_pool2d_grad": avg_pool2d_grad,
    "conv2d": conv2d,
    "conv2d_grad_input": conv2d_grad_input,
    "conv2d_grad_weight": conv2d_grad_weight,
}

_CONV = ("conv2d", "conv2d_grad_input", "conv2d_grad_weight")


def dtypes_of(op: str, args: tuple) -> list[np.dtype]:
    """The dtypes that decide whether `op` has a device kernel (shape-only operands left out)."""
    if op == "conv2d":
        return [a.dtype for a in args if a is not None]
    if op in ("conv2d_grad_input", "conv2d_grad_weight", "max_pool2d_grad"):
        return [args[0].dtype, args[1].dtype]
    return [args[0].dtype]


def call(be: Any, op: str, args: tuple, out: Any, attrs: dict) -> Any | None:
    """`op` on device `be` (cuDNN for convolutions where `be` has it), or None where no kernel applies."""
    if not wc.supported(op, dtypes_of(op, args)):
        return None
    if op in _CONV:
        lib = be.cudnn()
        if lib is not None:
            return be.cudnn_call(op, args, out, attrs)
        if getattr(be, "expects_cudnn", False):
            warn_without_cudnn(be.name, be.cudnn_missing_reason())
    return CALLS[op](be, *args, out=out, **attrs)


class DeviceWindowCalls:
    """The backend interface's window calls for a CUDA device, each routed through `self._device`.

    Both CUDA backends (real and emulated) inherit these and `_device`, which tries `call`
    above and falls back to the operator's reference kernel on the device arrays (`_reference`). A backend
    provides `to_host`, `to_device`, `copyto`, `contiguous`, `empty`, `gemm` and the cuDNN probe.
    """

    def host_backend(self) -> Any:
        """The CPU backend, whose calls run the steps the device kernels do not take."""
        raise NotImplementedError

    def _device(self, op: str, args: tuple, out: Any, exact: bool, attrs: dict) -> Any:
        """cuDNN or the CUDA window kernels; the operator's reference kernel on the device
        arrays for dtypes they do not take, and under LAZYGRAPH_JIT=0."""
        v = call(self, op, args, out, attrs) if SETTINGS.jit else None
        return self._reference(op, args, out, attrs) if v is None else v

    def _reference(self, op: str, args: tuple, out: Any, attrs: dict) -> Any:
        """The operator's reference kernel on the device arrays, through their namespace
        (ops/namespace.py: CuPy's module on "cuda"), into `out` when given.

        What float16, bool and mixed dtypes, which the CUDA kernels do not take, run: the
        reference's values (the CPU device's for these dtypes), and nothing leaves the device.
        A value the kernel still gives as host data is copied, counted (`jit.backend.host_steps`).
        """
        v = REGISTRY[op].kernel(*args, **attrs)
        if not self.is_buffer(v):
            count_host_step(self.name, op)
            v = self.to_device(v)
        if out is None:
            return v
        self.copyto(out, v)
        return out

    def conv2d(
        self, x: Any, w: Any, b: Any = None, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """cuDNN, else im2col + GEMM + layout kernels; never the reference's bits."""
        return self._device("conv2d", (x, w, b), out, exact, attrs)

    def conv2d_grad_input(
        self, g: Any, w: Any, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """cuDNN's backward data, else GEMM + the col2im kernel."""
        return self._device("conv2d_grad_input", (g, w, x), out, exact, attrs)

    def conv2d_grad_weight(
        self, g: Any, x: Any, w: Any, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """cuDNN's backward filter, else the im2col kernel + GEMM."""
        return self._device("conv2d_grad_weight", (g, x, w), out, exact, attrs)

    def max_pool2d(self, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """The CUDA max-pool kernel (the reference's values)."""
        return self._device("max_pool2d", (x,), out, exact, attrs)

    def max_pool2d_grad(
        self, g: Any, x: Any, y: Any = None, *, out: Any = None, exact: bool = True, **attrs: Any
    ) -> Any:
        """The CUDA argmax + gather kernels (the reference's values)."""
        return self._device("max_pool2d_grad", (g, x, y), out, exact, attrs)

    def avg_pool2d(self, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """The CUDA average-pool kernel."""
        return self._device("avg_pool2d", (x,), out, exact, attrs)

    def avg_pool2d_grad(self, g: Any, x: Any, *, out: Any = None, exact: bool = True, **attrs: Any) -> Any:
        """The CUDA average-pool gradient (gather) kernel."""
        return self._device("avg_pool2d_grad", (g, x), out, exact, attrs)
