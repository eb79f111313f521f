"""Neural-network operators: softmax family, one_hot, conv2d and 2-D pooling.

The softmax family are recorded whole (their gradients and NumPy kernels want them whole)
and declared with a decomposition into max, sum, exp, log and pointwise steps, which is what
the JIT lowers. Convolution and pooling are primitives: their windowed forms would
materialize every window if recorded piecewise. Kernels are vectorized NumPy, never pixel
loops: max pooling reads strided windows, average pooling adds one contiguous slice per
kernel offset (ops.window.avg_pool2d_forward).
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from ops import losses  # noqa: F401  (registers softmax_cross_entropy and its gradient)
from ops.base import (
    Op,
    defvjp,
    dtype_by_example,
    fmt_shape,
    normalize_axes,
    normalize_axis,
    reduced_shape,
    shape_error,
    type_error,
)
from ops.declare import declare
from ops.namespace import max_keepdims, namespace
from ops.node import Node
from ops.window import avg_pool2d_forward, conv2d_forward, max_fill, pad_spatial, window_max

Pair = tuple[int, int]


def _check_attrs(op: str, attrs: dict, allowed: tuple[str, ...]) -> None:
    # A misspelt attribute (kernel= for kernel_size=) would otherwise silently use a default.
    unknown = sorted(set(attrs) - set(allowed))
    if unknown:
        raise TypeError(f"{op}: unexpected attribute(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")


def _int(op: str, name: str, value: Any) -> int:
    """A Python int from an int-like attribute (bools rejected: True is not a size)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}: {name} must be an integer, got {value!r}")
    return int(value)


def _default(attrs: dict, key: str, value: Any) -> Any:
    """attrs[key], with None meaning the default (front ends pass keyword defaults through)."""
    v = attrs.get(key)
    return value if v is None else v


def _pair(op: str, name: str, value: Any, minimum: int) -> Pair:
    """An int or a pair of ints as a pair, each at least `minimum`."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
        pair = (_int(op, name, value[0]), _int(op, name, value[1]))
    else:
        v = _int(op, name, value)
        pair = (v, v)
    if min(pair) < minimum:
        what = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{op}: {name} must be {what}, got {value!r}")
    return pair


def _out_size(n: int, k: int, s: int, p: int, d: int) -> int:
    """PyTorch's output length (ceil_mode=False); callers ensure the window fits."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _check_fits(op: str, inputs: tuple[Node, ...], hw: Pair, k: Pair, p: Pair, d: Pair) -> None:
    """The dilated kernel must fit inside the padded input, else the output would be empty."""
    padded = (hw[0] + 2 * p[0], hw[1] + 2 * p[1])
    eff = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)
    if eff[0] > padded[0] or eff[1] > padded[1]:
        raise shape_error(
            op,
            f"kernel of size {fmt_shape(k)} (dilated to {fmt_shape(eff)}) is larger than "
            f"the padded input of size {fmt_shape(padded)}",
            inputs,
        )


# ---------------------------------------------------------------------------------------
# softmax, log_softmax, logsumexp


def _exp_dtype(op: str, inputs: tuple[Node, ...]) -> np.dtype:
    """np.exp's result dtype (int -> float64, float32 -> float32); complex is rejected."""
    if inputs[0].dtype.kind == "c":
        # A max-shift has no meaning for complex numbers, and nobody needs it yet.
        raise type_error(op, "complex input is not supported", inputs)
    return dtype_by_example(op, np.exp, inputs)


def _work(x: np.ndarray) -> tuple[np.ndarray, np.dtype]:
    """x in the dtype to compute in, and the dtype to return."""
    out = np.exp(np.zeros((), dtype=x.dtype)).dtype
    # float16 sums of exponentials lose digits fast; compute wider and round once at the end.
    work = np.float32 if out == np.float16 else out
    return namespace(x).asarray(x).astype(work, copy=False), out


def _softmax_parts(F: Any, xs: list, attrs: dict, log: bool) -> Any:
    """softmax / log_softmax from primitives, in the kernel's steps (see Softmax)."""
    (x,) = xs
    out = _exp_dtype("log_softmax" if log else "softmax", tuple(xs))
    work = np.dtype(np.float32) if out == np.float16 else out
    xf = x if x.dtype == work else F.astype(x, dtype=work)
    a = attrs["axis"]
    m = F.max(xf, axis=a, keepdims=True)
    shifted = F.subtract(xf, F.where(F.equal(m, -np.inf), 0, m))
    if log:
        r = F.subtract(shifted, F.log(F.sum(F.exp(shifted), axis=a, keepdims=True)))
    else:
        e = F.exp(shifted)
        r = F.multiply(e, F.divide(1, F.sum(e, axis=a, keepdims=True)))
    return r if r.dtype == out else F.astype(r, dtype=out)


def _logsumexp_parts(F: Any, xs: list, attrs: dict) -> Any:
    """logsumexp from primitives, in the kernel's steps (see LogSumExp)."""
    (x,) = xs
    out = _exp_dtype("logsumexp", tuple(xs))
    work = np.dtype(np.float32) if out == np.float16 else out
    xf = x if x.dtype == work else F.astype(x, dtype=work)
    axes, keep = attrs["axis"], attrs["keepdims"]

    def shift(keepdims: bool) -> Any:
        m = F.max(xf, axis=axes, keepdims=keepdims)
        return F.where(F.isfinite(m), m, 0)

    s = F.sum(F.exp(F.subtract(xf, shift(True))), axis=axes, keepdims=keep)
    # the shift once more in the result's shape (kept or dropped axes), as the kernel squeezes
    r = F.add(F.log(s), shift(True) if keep else shift(False))
    return r if r.dtype == out else F.astype(r, dtype=out)


class Softmax(Op):
    """softmax / log_softmax along one axis, computed with the max-shift for stability.

    A row of all -inf gives nan (0/0), as torch does; a row containing +inf gives nan too
    (inf - inf in the shift), also as torch does. The shift is taken as 0 for an all -inf
    row only so that no inf - inf is formed where the result is already determined.
    """

    def __init__(self, name: str, log: bool) -> None:
        super().__init__(name)
        self.log = log

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Same shape; np.exp's float dtype; axis normalized to a non-negative int."""
        _check_attrs(self.name, attrs, ("axis",))
        (x,) = inputs
        axis = attrs.get("axis", -1)
        axis = normalize_axis(self.name, -1 if axis is None else axis, x.ndim)
        return x.shape, _exp_dtype(self.name, inputs), {"axis": axis}

    def kernel(self, x: np.ndarray, axis: int) -> np.ndarray:
        """exp(x - max) * (1 / sum(exp(x - max))), or log(softmax), along `axis`."""
        xf, out = _work(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = max_keepdims(xf, axis)
            shifted = xf - np.where(m == -np.inf, 0, m)
            e = np.exp(shifted)
            s = np.sum(e, axis=axis, keepdims=True)
            # one division a row and a multiply an element, as PyTorch's CPU kernel: a division
            # an element made the fused kernel compute-bound (4096 x 4096: 1.3-1.45x -> 1.15-1.2x
            # a copy's time); the result moves by at most an ulp or two
            r = shifted - np.log(s) if self.log else e * (1 / s)
        return r.astype(out, copy=False)


class LogSumExp(Op):
    """log(sum(exp(x))) over axes without overflow, as scipy.special.logsumexp.

    A non-finite max is replaced by 0 in the shift (scipy, torch): an all -inf row then
    gives log(0) = -inf, a row with +inf gives +inf, and an empty reduction gives -inf.
    """

    kind = "reduction"

    def __init__(self) -> None:
        super().__init__("logsumexp")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Reduce like `sum` (axis None, int or tuple; keepdims); np.exp's float dtype."""
        _check_attrs(self.name, attrs, ("axis", "keepdims"))
        (x,) = inputs
        axes = normalize_axes(self.name, attrs.get("axis"), x.ndim)
        keepdims = bool(attrs.get("keepdims", False))
        dtype = _exp_dtype(self.name, inputs)
        return reduced_shape(x.shape, axes, keepdims), dtype, {"axis": axes, "keepdims": keepdims}

    def kernel(self, x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
        """max + log(sum(exp(x - max))) with a finite max."""
        xf, out = _work(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = max_keepdims(xf, axis)
            m = np.where(np.isfinite(m), m, 0)
            r = np.log(np.sum(np.exp(xf - m), axis=axis, keepdims=True)) + m
        if not keepdims:
            r = np.squeeze(r, axis=axis)
        return namespace(r).asarray(r).astype(out, copy=False)


# ---------------------------------------------------------------------------------------
# one_hot


class OneHot(Op):
    """Integer class labels to indicator vectors on a new last axis (like torch one_hot).

    Labels are data, so the range check happens in the kernel: an out-of-range label is
    an IndexError rather than a silent all-zero row.
    """

    def __init__(self) -> None:
        super().__init__("one_hot")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """x.shape + (num_classes,); integer labels only; dtype default float64."""
        _check_attrs(self.name, attrs, ("num_classes", "dtype"))
        (x,) = inputs
        if x.dtype.kind not in "iu":
            raise type_error(self.name, f"labels must have an integer dtype, got {x.dtype}", inputs)
        if "num_classes" not in attrs:
            raise TypeError(f"{self.name}: missing required attribute num_classes")
        n = _int(self.name, "num_classes", attrs["num_classes"])
        if n <= 0:
            raise ValueError(f"{self.name}: num_classes must be positive, got {n}")
        try:
            # np.dtype objects can be falsy (len() counts fields), so test for None explicitly.
            dtype = np.dtype(_default(attrs, "dtype", np.float64))
        except TypeError as e:
            raise type_error(self.name, f"invalid dtype {attrs.get('dtype')!r}: {e}") from None
        return x.shape + (n,), dtype, {"num_classes": n, "dtype": dtype}

    def kernel(self, x: np.ndarray, num_classes: int, dtype: np.dtype) -> np.ndarray:
        """Compare labels with arange(num_classes); raise IndexError on bad labels."""
        xp = namespace(x)
        x = xp.asarray(x)
        if x.size:
            lo, hi = x.min(), x.max()
            # one test, so a device array costs one read back (a GPU waits for it), not two
            if bool((lo < 0) | (hi >= num_classes)):
                bad = lo if lo < 0 else hi
                raise IndexError(
                    f"one_hot: label {int(bad)} is out of range for num_classes={num_classes} "
                    f"(labels of shape {fmt_shape(x.shape)} must lie in [0, {num_classes}))"
                )
        # Safe after the range check; avoids mixed uint64/int64 comparison rules.
        labels = x.astype(np.intp)
        return (labels[..., None] == xp.arange(num_classes, dtype=np.intp)).astype(dtype)


# ---------------------------------------------------------------------------------------
# conv2d


class Conv2d(Op):
    """2-D cross-correlation (PyTorch conv2d, NCHW, zero padding, groups).

    A primitive because im2col through recorded movement ops would materialize every
    window in the graph; here the windows stay a strided view until the contraction.
    """

    kind = "contraction"

    def __init__(self) -> None:
        super().__init__("conv2d")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Validate shapes and hyper-parameters; PyTorch's output size; np.result_type."""
        op = self.name
        _check_attrs(op, attrs, ("stride", "padding", "dilation", "groups"))
        if len(inputs) not in (2, 3):
            raise TypeError(f"{op}: expected inputs (x, w) or (x, w, b), got {len(inputs)} operands")
        x, w = inputs[:2]
        for node in inputs:
            if node.dtype.kind not in "biufc":
                raise type_error(op, f"unsupported dtype {node.dtype}", inputs)
        if x.ndim != 4:
            raise shape_error(op, f"input must be 4-D (N, C, H, W), got shape {fmt_shape(x.shape)}", inputs)
        if w.ndim != 4:
            raise shape_error(
                op, f"weight must be 4-D (C_out, C_in/groups, kH, kW), got shape {fmt_shape(w.shape)}", inputs
            )
        stride = _pair(op, "stride", _default(attrs, "stride", 1), 1)
        padding = _pair(op, "padding", _default(attrs, "padding", 0), 0)
        dilation = _pair(op, "dilation", _default(attrs, "dilation", 1), 1)
        groups = _int(op, "groups", _default(attrs, "groups", 1))
        if groups < 1:
            raise ValueError(f"{op}: groups must be positive, got {groups}")
        n, c_in, h, wd = x.shape
        c_out, c_per, kh, kw = w.shape
        if c_in % groups or c_out % groups:
            raise shape_error(
                op,
                f"groups={groups} must divide both input channels {c_in} and output channels {c_out}",
                inputs,
            )
        if c_per != c_in // groups:
            raise shape_error(
                op,
                f"weight expects {c_per} channels per group but input has {c_in} channels "
                f"in {groups} group(s) ({c_in // groups} per group)",
                inputs,
            )
        if kh == 0 or kw == 0:
            raise shape_error(op, f"kernel size {fmt_shape((kh, kw))} must be positive", inputs)
        if len(inputs) == 3 and inputs[2].shape != (c_out,):
            raise shape_error(
                op, f"bias must have shape ({c_out},) to match the weight's output channels", inputs
            )
        _check_fits(op, inputs, (h, wd), (kh, kw), padding, dilation)
        shape = (
            n,
            c_out,
            _out_size(h, kh, stride[0], padding[0], dilation[0]),
            _out_size(wd, kw, stride[1], padding[1], dilation[1]),
        )
        dtype = np.result_type(*(node.dtype for node in inputs))
        out = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        return shape, dtype, out

    def kernel(
        self,
        x: np.ndarray,
        w: np.ndarray,
        b: np.ndarray | None = None,
        *,
        stride: Pair,
        padding: Pair,
        dilation: Pair,
        groups: int,
    ) -> np.ndarray:
        """im2col of the zero-padded input and one GEMM with the weight (ops/window.py)."""
        return conv2d_forward(x, w, b, stride, padding, dilation, groups)


# ---------------------------------------------------------------------------------------
# max_pool2d, avg_pool2d


class Pool2d(Op):
    """2-D max or average pooling over NCHW input (PyTorch semantics, ceil_mode=False).

    Max pooling pads with -inf (the dtype's minimum for integers) so padding never wins;
    average pooling pads with zeros and divides by the full window (count_include_pad)
    or by the number of real elements in it.
    """

    def __init__(self, name: str, mode: str) -> None:
        super().__init__(name)
        self.mode = mode

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Validate 4-D input and window hyper-parameters; max keeps dtype, avg is float."""
        op = self.name
        extra = ("dilation",) if self.mode == "max" else ("count_include_pad",)
        _check_attrs(op, attrs, ("kernel_size", "stride", "padding") + extra)
        (x,) = inputs
        if x.ndim != 4:
            raise shape_error(op, f"input must be 4-D (N, C, H, W), got shape {fmt_shape(x.shape)}", inputs)
        if attrs.get("kernel_size") is None:
            raise TypeError(f"{op}: missing required attribute kernel_size")
        k = _pair(op, "kernel_size", attrs["kernel_size"], 1)
        s = _pair(op, "stride", _default(attrs, "stride", k), 1)
        p = _pair(op, "padding", _default(attrs, "padding", 0), 0)
        out: dict[str, Any] = {"kernel_size": k, "stride": s, "padding": p}
        if self.mode == "max":
            d = _pair(op, "dilation", _default(attrs, "dilation", 1), 1)
            out["dilation"] = d
            if x.dtype.kind not in "biuf":
                raise type_error(op, f"unsupported dtype {x.dtype} (needs an ordered real dtype)", inputs)
            dtype = x.dtype
        else:
            d = (1, 1)
            out["count_include_pad"] = bool(_default(attrs, "count_include_pad", True))
            if x.dtype.kind not in "biufc":
                raise type_error(op, f"unsupported dtype {x.dtype}", inputs)
            dtype = dtype_by_example(op, np.mean, inputs)
        # PyTorch's rule; it also guarantees every undilated window holds a real element.
        if p[0] > k[0] // 2 or p[1] > k[1] // 2:
            raise shape_error(
                op, f"padding {fmt_shape(p)} must be at most half the kernel size {fmt_shape(k)}", inputs
            )
        h, w = x.shape[2:]
        if h == 0 or w == 0:
            raise shape_error(op, "spatial dimensions must be non-zero", inputs)
        _check_fits(op, inputs, (h, w), k, p, d)
        shape = x.shape[:2] + (_out_size(h, k[0], s[0], p[0], d[0]), _out_size(w, k[1], s[1], p[1], d[1]))
        return shape, dtype, out

    def kernel(
        self, x: np.ndarray, kernel_size: Pair, stride: Pair, padding: Pair, **attrs: Any
    ) -> np.ndarray:
        """Max or mean over each window of the padded input."""
        xp = namespace(x)
        x = xp.asarray(x)
        if self.mode == "max":
            d = attrs["dilation"]
            xpad = pad_spatial(x, padding, max_fill(x.dtype))
            hw = tuple(
                _out_size(n, k, s, p, q)
                for n, k, s, p, q in zip(x.shape[2:], kernel_size, stride, padding, d)
            )
            return window_max(xpad, kernel_size, stride, d, hw)
        return avg_pool2d_forward(x, kernel_size, stride, padding, attrs["count_include_pad"])


# The softmax family are composites: their kernels are NumPy's, the JIT lowers their
# decompositions into the same steps.
declare(Softmax("softmax", log=False), decompose=lambda F, xs, a: _softmax_parts(F, xs, a, False))
declare(Softmax("log_softmax", log=True), decompose=lambda F, xs, a: _softmax_parts(F, xs, a, True))
declare(LogSumExp(), decompose=_logsumexp_parts)


def _conv2d_cost(out: tuple, ins: list[tuple], attrs: dict) -> tuple[float, float]:
    """2 flops per output element per weight element it reads; the im2col buffer's traffic."""
    w = ins[1]
    return 2.0 * float(prod(out)) * w[1] * w[2] * w[3], w[1] * w[2] * w[3] / max(out[1], 1)


def _pool_cost(out: tuple, ins: list[tuple], attrs: dict) -> tuple[float, float]:
    """Each output element reads its window."""
    return 0.0, float(prod(attrs.get("kernel_size", (1, 1))))


declare(OneHot())
declare(Conv2d(), cost=_conv2d_cost)
declare(Pool2d("max_pool2d", "max"), cost=_pool_cost)
declare(Pool2d("avg_pool2d", "avg"), cost=_pool_cost)


# ---------------------------------------------------------------------------------------
# Gradients (see Op.vjp). Convolution and pooling differentiate into the gradient
# operators of ops/window.py.


@defvjp("softmax")
def _softmax_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    a = attrs["axis"]
    return (out * (g - F.sum(g * out, axis=a, keepdims=True)),)


@defvjp("log_softmax")
def _log_softmax_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    a = attrs["axis"]
    return (g - F.exp(out) * F.sum(g, axis=a, keepdims=True),)


@defvjp("logsumexp")
def _logsumexp_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    axes = attrs["axis"]
    if not attrs["keepdims"] and axes:
        g, out = F.expand_dims(g, axes), F.expand_dims(out, axes)
    return (g * F.exp(x - out),)


@defvjp("conv2d")
def _conv2d_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict, needs: tuple = (True, True, True)) -> tuple:
    x, w = xs[:2]
    gx = F.record("conv2d_grad_input", g, w, x, **attrs) if needs[0] else None
    gw = F.record("conv2d_grad_weight", g, x, w, **attrs) if needs[1] else None
    if len(xs) == 3:
        return gx, gw, F.sum(g, axis=(0, 2, 3)) if needs[2] else None
    return gx, gw


@defvjp("max_pool2d")
def _max_pool2d_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (F.record("max_pool2d_grad", g, xs[0], out, **attrs),)


@defvjp("avg_pool2d")
def _avg_pool2d_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (F.record("avg_pool2d_grad", g, xs[0], **attrs),)
