"""The superoptimizer's convolution, pooling, enlarge and constant operators (see opset.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ops.base import REGISTRY
from ops.window import conv2d_forward
from optimizer.superopt.vocab import TS, OpSpec, Site, declare, pad_word, plain

# ---------------------------------------------------------------------------------------
# Convolution, pooling, enlarge


def _pads(pad: Any, k: tuple[int, int]) -> tuple[int, int] | None:
    if pad == "valid":
        return (0, 0)
    if pad == "same":
        return (k[0] // 2, k[1] // 2) if k[0] % 2 and k[1] % 2 else None
    return None


def _out(h: int, k: int, s: int, p: int) -> int:
    return (h + 2 * p - k) // s + 1


def _conv_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    stride, pad, act = params
    x, w = ins
    if len(x.shape) != 4 or len(w.shape) != 4 or w.shape[1] == 0:
        return None
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % cg or o % (c // cg):
        return None
    p = _pads(pad, (kh, kw))
    if p is None or h + 2 * p[0] < kh or wd + 2 * p[1] < kw:
        return None
    shape = (n, o, _out(h, kh, stride, p[0]), _out(wd, kw, stride, p[1]))
    return [TS(shape, (x.splits[0], w.splits[0], (), ()))]


def _conv_compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
    stride, pad, act = p
    x, w = xs
    groups = i[0].shape[1] // i[1].shape[1]
    pads = _pads(pad, i[1].shape[2:])
    y = R.norm(conv2d_forward(x, w, None, (stride, stride), pads, (1, 1), groups))
    return [R.relu(y) if act == "relu" else y]


def _conv_lower(p: tuple, i: list[TS], o: list[TS]) -> tuple[str, dict] | None:
    stride, pad, act = p
    # the conv alone: with activation relu, the caller appends maximum(., 0) (convert.to_graph)
    return "conv2d", {
        "stride": (stride, stride),
        "padding": _pads(pad, i[1].shape[2:]),
        "dilation": (1, 1),
        "groups": i[0].shape[1] // i[1].shape[1],
    }


def _raise_conv(site: Site) -> list:
    """conv2d without bias or dilation, square stride, 'same' or 'valid' padding."""
    a = site.attrs
    if len(site.args) != 2 or tuple(a["dilation"]) != (1, 1):
        return []
    s, pad = tuple(a["stride"]), pad_word(a["padding"], site.shape_of(site.args[1])[2:])
    return [((s[0], pad, "none"), list(site.args), 0)] if s[0] == s[1] and pad is not None else []


def _raise_pool(count_pad: bool) -> Callable:
    def read(site: Site) -> list:
        """Square kernel and stride, 'same'/'valid' padding; avg counts the padding, max is undilated."""
        a = site.attrs
        k, s = tuple(a["kernel_size"]), tuple(a["stride"])
        pad = pad_word(a["padding"], k)
        ok = a.get("count_include_pad", True) if count_pad else tuple(a.get("dilation", (1, 1))) == (1, 1)
        return (
            [((k[0], s[0], pad), list(site.args), 0)] if ok and k[0] == k[1] and s[0] == s[1] and pad else []
        )

    return read


def _raise_enlarge(site: Site) -> list:
    """A symmetric zero pad of the two window axes of a square 4-D kernel."""
    a, shape = site.attrs, site.shape
    if a.get("mode") != "constant" or len(shape) != 4 or shape[2] != shape[3]:
        return []
    w = tuple(tuple(p) for p in a["pad_width"])
    ok = w[:2] == ((0, 0), (0, 0)) and w[2][0] == w[2][1] and w[3][0] == w[3][1]
    return [((shape[2],), list(site.args), 0)] if ok and a.get("constant_values", 0) == 0 else []


def _pool_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    k, stride, pad = params
    (x,) = ins
    if len(x.shape) != 4:
        return None
    p = _pads(pad, (k, k))
    if p is None or x.shape[2] + 2 * p[0] < k or x.shape[3] + 2 * p[1] < k:
        return None
    n, c, h, w = x.shape
    return [TS((n, c, _out(h, k, stride, p[0]), _out(w, k, stride, p[1])), x.splits[:2] + ((), ()))]


def _avg_compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
    k, stride, pad = p
    c = i[0].shape[1]
    pads = _pads(pad, (k, k))
    ones = np.ones((c, 1, k, k), dtype=xs[0].dtype)
    total = conv2d_forward(xs[0], ones, None, (stride, stride), pads, (1, 1), c)
    return [R.scale(R.norm(total), 1, k * k)]


def _max_compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
    k, stride, pad = p
    pads = _pads(pad, (k, k))
    kern = REGISTRY["max_pool2d"].kernel
    return [R.norm(kern(xs[0], kernel_size=(k, k), stride=(stride, stride), padding=pads, dilation=(1, 1)))]


def _pool_lower(name: str, count_pad: bool) -> Callable:
    def lower(p: tuple, i: list[TS], o: list[TS]) -> tuple[str, dict]:
        k, stride, pad = p
        attrs: dict[str, Any] = {
            "kernel_size": (k, k),
            "stride": (stride, stride),
            "padding": _pads(pad, (k, k)),
        }
        attrs.update({"count_include_pad": True} if count_pad else {"dilation": (1, 1)})
        return name, attrs

    return lower


def _enlarge_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    (k,) = params
    (w,) = ins
    if len(w.shape) != 4 or w.shape[2] > k or w.shape[3] > k or (k - w.shape[2]) % 2 or (k - w.shape[3]) % 2:
        return None
    return [TS(w.shape[:2] + (k, k), w.splits[:2] + ((), ()))]


def _enlarge_widths(w: tuple[int, ...], k: int) -> tuple:
    a, b = (k - w[2]) // 2, (k - w[3]) // 2
    return ((0, 0), (0, 0), (a, a), (b, b))


declare(
    OpSpec(
        "conv2d",
        2,
        _conv_infer,
        _conv_compute,
        params=("stride", "padding", "activation"),
        choices={"stride": (1,), "padding": ("same",), "activation": ("none", "relu")},
        lower=_conv_lower,
        doc="NCHW cross-correlation; groups = C_in / weight.shape[1]; optional fused relu",
        raises={"conv2d": _raise_conv},
        activation=lambda p: p[2] == "relu",
        grouped=True,
    )
)
declare(
    OpSpec(
        "avg_pool2d",
        1,
        _pool_infer,
        _avg_compute,
        params=("kernel", "stride", "padding"),
        choices={"kernel": (3,), "stride": (1,), "padding": ("same",)},
        lower=_pool_lower("avg_pool2d", True),
        raises={"avg_pool2d": _raise_pool(True)},
        doc="average pooling (zero padding counted, as a depthwise conv with the pool kernel)",
    )
)
declare(
    OpSpec(
        "max_pool2d",
        1,
        _pool_infer,
        _max_compute,
        params=("kernel", "stride", "padding"),
        choices={"kernel": (3,), "stride": (1,), "padding": ("same",)},
        lower=_pool_lower("max_pool2d", False),
        raises={"max_pool2d": _raise_pool(False)},
        doc="max pooling",
    )
)
declare(
    OpSpec(
        "enlarge",
        1,
        _enlarge_infer,
        lambda p, xs, i, o, R: [np.pad(xs[0], _enlarge_widths(i[0].shape, p[0]))],
        params=("kernel",),
        choices={"kernel": (3,)},
        lower=lambda p, i, o: ("pad", {"pad_width": _enlarge_widths(i[0].shape, p[0]), "mode": "constant"}),
        doc="a conv kernel zero-padded to a larger odd window (centered)",
        raises={"pad": _raise_enlarge},
    )
)


# ---------------------------------------------------------------------------------------
# Constants: their argument only gives the shape


def _ident_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    s = ins[0].shape
    return [plain((s[-1], s[-1]))] if len(s) >= 2 else None


def _ones_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    return [plain(ins[0].shape)] if ins[0].shape else None


def _pool_kernel_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    s = ins[0].shape
    return [plain((s[1], 1, params[0], params[0]))] if len(s) == 4 else None


def _conv_ident_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    s = ins[0].shape
    return [plain((s[1], s[1], 1, 1))] if len(s) == 4 else None


def _const(make: Callable[[tuple, tuple], tuple[np.ndarray, int]]) -> Callable:
    def compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
        num, den = make(p, o[0].shape)
        return [R.scale(R.norm(num), 1, den) if den != 1 else R.norm(num)]

    return compute


def _pool_kernel_value(p: tuple, shape: tuple) -> tuple[np.ndarray, int]:
    return np.ones(shape, dtype=np.int64), p[0] * p[0]


def _conv_ident_value(p: tuple, shape: tuple) -> tuple[np.ndarray, int]:
    return np.eye(shape[0], dtype=np.int64).reshape(shape), 1


for _spec in (
    OpSpec(
        "ident",
        1,
        _ident_infer,
        _const(lambda p, s: (np.eye(s[0], dtype=np.int64), 1)),
        constant=True,
        doc="identity matrix n x n, n = last axis of the argument",
    ),
    OpSpec(
        "ones",
        1,
        _ones_infer,
        _const(lambda p, s: (np.ones(s, dtype=np.int64), 1)),
        constant=True,
        doc="all ones, the argument's shape",
    ),
    OpSpec(
        "pool_kernel",
        1,
        _pool_kernel_infer,
        _const(_pool_kernel_value),
        params=("kernel",),
        choices={"kernel": (3,)},
        constant=True,
        doc="(C, 1, k, k) filled with 1/k^2: avg pooling as a depthwise conv (C = argument's axis 1)",
    ),
    OpSpec(
        "conv_ident",
        1,
        _conv_ident_infer,
        _const(_conv_ident_value),
        constant=True,
        doc="(C, C, 1, 1) identity conv kernel (C = argument's axis 1)",
    ),
):
    declare(_spec)
