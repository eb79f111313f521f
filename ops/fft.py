"""Discrete Fourier transforms (numpy.fft) and window functions: one operator each.

The transforms read their operand's array namespace (NumPy, or CuPy on the GPU) and call its
`fft`; NumPy 2 keeps single precision (float32 -> complex64). One-axis transforms carry `n`,
`axis`, `norm`; the n-d ones `s`, `axes`, `norm` (axes must be distinct here). Gradients of
fft/ifft/rfft/irfft/fftn/ifftn are their adjoints (a linear map's transpose-conjugate, with the
dual normalization), written with the transforms themselves; for a real operand the cotangent's
real part is kept. Complex cotangents follow the convention g = dL/dRe + i dL/dIm.

`window` creates NumPy's hanning/hamming/blackman/bartlett/kaiser windows (no operands).
"""

from __future__ import annotations

import operator
import warnings
from typing import Any

import numpy as np

from ops.base import Op, defvjp, normalize_axis, register, type_error
from ops.namespace import namespace
from ops.node import Node

NORMS = (None, "backward", "ortho", "forward")
DUAL = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}
#: output length along a transformed axis from the (given or default) n; default n from the input length
HALF = ("rfft", "ihfft", "rfftn")
REAL_OUT = ("irfft", "hfft", "irfftn")


def _norm(op: str, norm: Any) -> Any:
    if norm not in NORMS:
        raise ValueError(f'{op}: Invalid norm value {norm!r}; should be "backward", "ortho" or "forward".')
    return norm


def _points(op: str, n: Any) -> int:
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"{op}: n must be an integer, got {n!r}") from None
    if n < 1:
        raise ValueError(f"{op}: Invalid number of FFT data points ({n}) specified.")
    return n


_DT: dict[tuple, np.dtype] = {}


def _dtype(op: str, node: Node) -> np.dtype:
    key = (op, node.dtype)
    if key not in _DT:
        fn = getattr(np.fft, op)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ex = np.ones((2, 2) if op.endswith("n") else 2, dtype=node.dtype)
                _DT[key] = fn(ex).dtype
        except TypeError as e:
            raise type_error(op, f"not supported for input type {node.dtype}: {e}", (node,)) from None
    return _DT[key]


class FFT(Op):
    """numpy.fft.<name>(x, n, axis, norm): one transformed axis."""

    kind = "fft"

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """The axis takes length n (rfft/ihfft: n//2+1; irfft/hfft default n: 2*(m-1))."""
        (x,) = inputs
        if x.ndim == 0:
            raise ValueError(f"{self.name}: input must have at least one dimension (got a 0-d array)")
        axis = normalize_axis(self.name, attrs.get("axis", -1), x.ndim)
        m = x.shape[axis]
        n = attrs.get("n")
        n = (2 * (m - 1) if self.name in REAL_OUT else m) if n is None else n
        n = _points(self.name, n)
        norm = _norm(self.name, attrs.get("norm"))
        shape = list(x.shape)
        shape[axis] = n // 2 + 1 if self.name in HALF else n
        return tuple(shape), _dtype(self.name, x), {"n": n, "axis": axis, "norm": norm}

    def kernel(self, x: Any, n: int, axis: int, norm: Any) -> Any:
        return getattr(namespace(x).fft, self.name)(x, n=n, axis=axis, norm=norm)


class FFTN(Op):
    """numpy.fft.<name>(x, s, axes, norm): several transformed axes (the last one halved for rfftn)."""

    kind = "fft"

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Axes default to all (or the last len(s)); s defaults to the input lengths."""
        (x,) = inputs
        s, axes = attrs.get("s"), attrs.get("axes")
        if axes is None:
            axes = range(x.ndim) if s is None else range(x.ndim - len(s), x.ndim)
        axes = tuple(normalize_axis(self.name, a, x.ndim) for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError(f"{self.name}: repeated axes {axes} are not supported")
        if s is not None and len(s) != len(axes):
            raise ValueError(f"{self.name}: Shape and axes have different lengths ({len(s)} and {len(axes)})")
        s = [None] * len(axes) if s is None else list(s)
        if axes and s[-1] in (None, -1) and self.name == "irfftn":
            s[-1] = 2 * (x.shape[axes[-1]] - 1)
        s = tuple(_points(self.name, x.shape[a] if d in (None, -1) else d) for a, d in zip(axes, s))
        shape = list(x.shape)
        for a, d in zip(axes, s):
            shape[a] = d
        if axes and self.name == "rfftn":
            shape[axes[-1]] = s[-1] // 2 + 1
        norm = _norm(self.name, attrs.get("norm"))
        return tuple(shape), _dtype(self.name, x), {"s": s, "axes": axes, "norm": norm}

    def kernel(self, x: Any, s: tuple, axes: tuple, norm: Any) -> Any:
        return getattr(namespace(x).fft, self.name)(x, s=s, axes=axes, norm=norm)


WINDOWS = ("hanning", "hamming", "blackman", "bartlett", "kaiser")


class Window(Op):
    """numpy's window functions of M points (kaiser with beta): float64, no operands."""

    kind = "creation"

    def __init__(self) -> None:
        super().__init__("window")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Length max(M, 0)."""
        kind = attrs["kind"]
        if kind not in WINDOWS:
            raise ValueError(f"window: unknown window {kind!r}; known: {', '.join(WINDOWS)}")
        m = attrs["M"]
        if isinstance(m, float) and m.is_integer():
            m = int(m)
        try:
            m = operator.index(m)
        except TypeError:
            raise TypeError(f"{kind}: M must be an integer, got {m!r}") from None
        out = {"kind": kind, "M": m}
        if kind == "kaiser":
            out["beta"] = float(attrs["beta"])
        return (max(m, 0),), np.dtype(np.float64), out

    def kernel(self, kind: str, M: int, beta: float | None = None, xp: Any = np) -> Any:
        """The window in namespace `xp` (no operand says where: the caller's device does),
        computed by NumPy (CuPy's differ from it in the last bits) and copied there."""
        fn = getattr(np, kind)
        return xp.asarray(fn(M) if beta is None else fn(M, beta), dtype=np.float64)


for _name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
    register(FFT(_name))
for _name in ("fftn", "ifftn", "rfftn", "irfftn"):
    register(FFTN(_name))
register(Window())


# ---------------------------------------------------------------------------------------
# Gradients: adjoints.


def _fit(F: Any, g: Any, axis: int, length: int) -> Any:
    """Adjoint of the transforms' crop/zero-pad to n: crop or zero-pad back to the input length."""
    have = g.shape[axis]
    if have > length:
        index = [slice(None)] * g.ndim
        index[axis] = slice(0, length)
        return g[tuple(index)]
    if have < length:
        widths = [(0, 0)] * g.ndim
        widths[axis] = (0, length - have)
        return F.pad(g, widths)
    return g


def _as_input(F: Any, g: Any, x: Any) -> Any:
    """The real part of a complex cotangent for a real operand (exact: stored into a real buffer)."""
    if g.dtype.kind != "c" or x.dtype.kind == "c":
        return g
    out = F.zeros(g.shape, np.finfo(g.dtype).dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the intended loss of the imaginary part
        out[...] = g
    return out


def _half_weights(n: int, axis: int, ndim: int, interior: float) -> np.ndarray:
    """1 for the zero (and, n even, the Nyquist) bin of a half spectrum, `interior` elsewhere."""
    w = np.full(n // 2 + 1, interior)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w.reshape([-1 if i == axis else 1 for i in range(ndim)])


def _complex_rule(inverse: str) -> Any:
    def rule(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
        r = F.record(inverse, g, n=attrs["n"], axis=attrs["axis"], norm=DUAL[attrs["norm"]])
        return (_as_input(F, _fit(F, r, attrs["axis"], xs[0].shape[attrs["axis"]]), xs[0]),)

    return rule


defvjp("fft")(_complex_rule("ifft"))
defvjp("ifft")(_complex_rule("fft"))


@defvjp("rfft")
def _rfft_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    n, axis = attrs["n"], attrs["axis"]
    half = g * F.asarray(_half_weights(n, axis, g.ndim, 0.5).astype(np.finfo(g.dtype).dtype))
    r = F.record("irfft", half, n=n, axis=axis, norm=DUAL[attrs["norm"]])
    return (_fit(F, r, axis, xs[0].shape[axis]),)


@defvjp("irfft")
def _irfft_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    n, axis = attrs["n"], attrs["axis"]
    r = F.record("rfft", g, n=n, axis=axis, norm=DUAL[attrs["norm"]])
    r = r * F.asarray(_half_weights(n, axis, g.ndim, 2.0).astype(g.dtype))
    return (_as_input(F, _fit(F, r, axis, xs[0].shape[axis]), xs[0]),)


def _complex_rule_n(inverse: str) -> Any:
    def rule(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
        r = F.record(inverse, g, s=attrs["s"], axes=attrs["axes"], norm=DUAL[attrs["norm"]])
        for a in attrs["axes"]:
            r = _fit(F, r, a, xs[0].shape[a])
        return (_as_input(F, r, xs[0]),)

    return rule


defvjp("fftn")(_complex_rule_n("ifftn"))
defvjp("ifftn")(_complex_rule_n("fftn"))
