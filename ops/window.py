"""Windowed kernels: convolution as im2col + one GEMM, and the gradient operators of
convolution and pooling.

The forward kernels of conv2d and the poolings live with their operators in ops/nn.py and
call the helpers here. The gradient operators are operators of their own (so the graph,
the cache and the cost model see them whole) with NumPy reference kernels that loop only
over kernel offsets, never over pixels, channels or the batch.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ops.base import Op, register
from ops.conv import conv_grouped, conv_one_group, grad_weight_one_group
from ops.namespace import namespace
from ops.node import Node

Pair = tuple[int, int]


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    # Boolean convolution means "any product is True": compute in integers, compare at the end.
    return np.dtype(np.int64) if dtype == np.bool_ else dtype


def windows_nhwc(x: np.ndarray, k: Pair, s: Pair, p: Pair, d: Pair) -> np.ndarray:
    """View (N, H_out, W_out, C, kH, kW) of the windows of NCHW `x`, zero-padded, in NHWC order."""
    xh = namespace(x).asarray(x).transpose(0, 2, 3, 1)
    if p[0] or p[1]:
        xh = np.pad(xh, ((0, 0), (p[0], p[0]), (p[1], p[1]), (0, 0)))
    eff = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)
    win = sliding_window_view(xh, eff, axis=(1, 2))
    return win[:, :: s[0], :: s[1], :, :: d[0], :: d[1]]


def im2col(x: np.ndarray, k: Pair, s: Pair, p: Pair, d: Pair, groups: int) -> np.ndarray:
    """Columns (groups, N*H_out*W_out, kH*kW*C_per_group): one row per output pixel."""
    win = windows_nhwc(x, k, s, p, d)
    n, ho, wo, c = win.shape[:4]
    cp = c // groups
    win = win.reshape(n, ho, wo, groups, cp, k[0], k[1]).transpose(3, 0, 1, 2, 5, 6, 4)
    return namespace(win).ascontiguousarray(win).reshape(groups, n * ho * wo, k[0] * k[1] * cp)


def _weight_matrix(w: np.ndarray, groups: int) -> np.ndarray:
    """(groups, kH*kW*C_per_group, C_out_per_group): the weight laid out to match im2col rows."""
    o, cp, kh, kw = w.shape
    wm = w.reshape(groups, o // groups, cp, kh, kw).transpose(0, 3, 4, 2, 1)
    return namespace(wm).ascontiguousarray(wm).reshape(groups, kh * kw * cp, o // groups)


def _gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batched product over groups; one plain 2-D BLAS call when there is a single group."""
    if a.shape[0] == 1:
        return (a[0] @ b[0])[None]
    return np.matmul(a, b)


def conv2d_forward(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    groups: int,
) -> np.ndarray:
    """Cross-correlation as im2col plus one (batched over groups) BLAS GEMM."""
    dtype = np.result_type(x, w) if b is None else np.result_type(x, w, b)
    work = _compute_dtype(dtype)
    xp = namespace(x, w, b)
    x = xp.asarray(x, dtype=work)
    w = xp.asarray(w, dtype=work)
    if groups == 1:
        y = conv_one_group(x, w, None if b is None else xp.asarray(b, dtype=work), stride, padding, dilation)
        return xp.ascontiguousarray(y != 0) if dtype == np.bool_ else y.astype(dtype, copy=False)
    if xp is np and work.kind == "f":
        # host floats: one batched GEMM over group-major columns, NCHW out with no transposes
        # (1.4-3.5x the path below on ResNeXt-50's grouped and NASNet-A's depthwise shapes)
        bw = None if b is None else xp.asarray(b, dtype=work)
        return conv_grouped(x, w, bw, stride, padding, dilation, groups).astype(dtype, copy=False)
    n = x.shape[0]
    o, _, kh, kw = w.shape
    cols = im2col(x, (kh, kw), stride, padding, dilation, groups)
    ho = (x.shape[2] + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (x.shape[3] + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    y = _gemm(cols, _weight_matrix(w, groups))  # (groups, P, C_out_per_group)
    y = y.transpose(1, 0, 2).reshape(n, ho, wo, o)
    if b is not None:
        y = y + xp.asarray(b, dtype=work)
    y = y.transpose(0, 3, 1, 2)
    if dtype == np.bool_:
        return xp.ascontiguousarray(y != 0)
    return xp.ascontiguousarray(y, dtype=dtype)


def _scatter_windows(cols: np.ndarray, shape: tuple, k: Pair, s: Pair, p: Pair, d: Pair) -> np.ndarray:
    """col2im: add (N, H_out, W_out, kH, kW, C) window values back onto an NCHW image."""
    n, c, h, w = shape
    ho, wo = cols.shape[1:3]
    xp = namespace(cols)
    out = xp.zeros((n, h + 2 * p[0], w + 2 * p[1], c), dtype=cols.dtype)
    for i in range(k[0]):  # a loop over kernel offsets only: each step is one strided add
        r0 = i * d[0]
        for j in range(k[1]):
            c0 = j * d[1]
            out[:, r0 : r0 + s[0] * (ho - 1) + 1 : s[0], c0 : c0 + s[1] * (wo - 1) + 1 : s[1], :] += cols[
                :, :, :, i, j, :
            ]
    return xp.ascontiguousarray(out[:, p[0] : p[0] + h, p[1] : p[1] + w, :].transpose(0, 3, 1, 2))


def tiled(k: Pair, s: Pair, p: Pair, d: Pair = (1, 1)) -> bool:
    """Windows that tile the image (stride = kernel, no padding or dilation): pure reshapes."""
    return s == k and p == (0, 0) and d == (1, 1)


def tiles(x: np.ndarray, k: Pair) -> np.ndarray:
    """(N, C, H_out, W_out, kH*kW) copy of the tiles of x (the ragged border dropped)."""
    n, c, h, w = x.shape
    ho, wo = h // k[0], w // k[1]
    t = x[:, :, : ho * k[0], : wo * k[1]].reshape(n, c, ho, k[0], wo, k[1])
    return t.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, ho, wo, k[0] * k[1])


def untile(t: np.ndarray, k: Pair, shape: tuple) -> np.ndarray:
    """Inverse of `tiles`: (N, C, H_out, W_out, kH*kW) back to an image, zeros at the border."""
    n, c, ho, wo, _ = t.shape
    img = t.reshape(n, c, ho, wo, k[0], k[1]).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, ho * k[0], wo * k[1])
    xp = namespace(t)
    if img.shape[2:] == tuple(shape[2:]):
        return xp.ascontiguousarray(img)
    out = xp.zeros(shape, dtype=t.dtype)
    out[:, :, : ho * k[0], : wo * k[1]] = img
    return out


def pad_spatial(x: np.ndarray, p: Pair, fill: object = 0) -> np.ndarray:
    """x with its two spatial axes padded by `fill` (x itself when there is no padding)."""
    if not (p[0] or p[1]):
        return x
    return np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=fill)


def max_fill(dtype: np.dtype) -> object:
    """The padding value that never wins a maximum: -inf, False or the integer minimum."""
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def offset_views(xpad: np.ndarray, k: Pair, s: Pair, d: Pair, out_hw: Pair) -> list[np.ndarray]:
    """For each kernel offset (row-major), the strided view (N, C, H_out, W_out) it reads from xpad."""
    ho, wo = out_hw
    views = []
    for i in range(k[0]):
        r0 = i * d[0]
        for j in range(k[1]):
            c0 = j * d[1]
            views.append(
                xpad[:, :, r0 : r0 + s[0] * (ho - 1) + 1 : s[0], c0 : c0 + s[1] * (wo - 1) + 1 : s[1]]
            )
    return views


def window_max(xpad: np.ndarray, k: Pair, s: Pair, d: Pair, out_hw: Pair) -> np.ndarray:
    """Max over the windows of padded xpad: one elementwise maximum per kernel offset, no window copy."""
    views = offset_views(xpad, k, s, d, out_hw)
    acc = namespace(xpad).array(views[0], order="C")
    for v in views[1:]:
        np.maximum(acc, v, out=acc)
    return acc


def _padded_planes(x: np.ndarray, p: Pair) -> np.ndarray:
    """(N*C, Hp*Wp) zero-padded copy of NCHW x (one allocation, not np.pad's several passes)."""
    n, c, h, w = x.shape
    xp = namespace(x)
    if not (p[0] or p[1]):
        return xp.ascontiguousarray(x).reshape(n * c, h * w)
    out = xp.zeros((n * c, h + 2 * p[0], w + 2 * p[1]), dtype=x.dtype)
    out[:, p[0] : p[0] + h, p[1] : p[1] + w] = x.reshape(n * c, h, w)
    return out.reshape(n * c, -1)


def _real_counts(shape: Pair, k: Pair, s: Pair, p: Pair, dtype: np.dtype) -> np.ndarray:
    """(H_out, W_out) number of real (not padding) elements in each window."""
    real = pad_spatial(np.ones((1, 1) + tuple(shape), dtype=dtype), p)
    ho = (shape[0] + 2 * p[0] - k[0]) // s[0] + 1
    wo = (shape[1] + 2 * p[1] - k[1]) // s[1] + 1
    views = offset_views(real, k, s, (1, 1), (ho, wo))
    count = np.array(views[0], order="C")
    for v in views[1:]:
        count += v
    return count[0, 0]


def avg_pool2d_forward(x: np.ndarray, k: Pair, s: Pair, p: Pair, count_include_pad: bool) -> np.ndarray:
    """Mean over each window of NCHW x: one contiguous add per kernel offset.

    A window sum as np.sum over a sliding-window view reduces 9 elements at a time through
    NumPy's generic reduction (0.9 ms for a (1, 64, 16, 16) 3x3 pool, about 40 times its
    memory passes). At stride 1, the sum for output (i, j) is, in the padded image seen as
    one row, sum over offsets (a, b) of row[(i + a) * Wp + (j + b)]: each offset is one
    contiguous slice of that row, so the whole pool is kH*kW long vector adds and one gather
    of the valid outputs (5-30x the window reduction on NASNet-A's and SqueezeNet's pools).
    Other strides add the strided offset views (tiling windows too: 4-9x `tiles(x).mean`). The terms are added
    in row-major offset order, the order of the device kernels (jit/window_cuda.py).
    """
    xp = namespace(x)
    x = xp.asarray(x)
    out = np.mean(np.zeros(1, dtype=x.dtype)).dtype
    # np.mean's accumulator: float16 sums in float32, everything else in its result dtype.
    acc = np.dtype(np.float32) if out == np.float16 else out
    n, c, h, w = x.shape
    hp, wp = h + 2 * p[0], w + 2 * p[1]
    ho, wo = (hp - k[0]) // s[0] + 1, (wp - k[1]) // s[1] + 1
    if n * c == 0:
        return xp.zeros((n, c, ho, wo), dtype=out)
    rows = _padded_planes(x.astype(acc, copy=False), p)
    if s == (1, 1):
        # All planes as one row: an output's window never leaves its plane, so the slices
        # may run across plane boundaries (the positions they spoil are not outputs).
        flat = rows.reshape(-1)
        span = (n * c - 1) * hp * wp + (ho - 1) * wp + wo
        buf = xp.empty(n * c * hp * wp, dtype=acc)
        total = buf[:span]
        np.copyto(total, flat[:span])
        for a in range(k[0]):
            for b in range(k[1]):
                if a or b:
                    o = a * wp + b
                    np.add(total, flat[o : o + span], out=total)
        if count_include_pad:
            np.divide(total, k[0] * k[1], out=total)
        sums = buf.reshape(n, c, hp, wp)[:, :, :ho, :wo]
    else:
        views = offset_views(rows.reshape(n, c, hp, wp), k, s, (1, 1), (ho, wo))
        sums = xp.array(views[0], order="C")
        for v in views[1:]:
            np.add(sums, v, out=sums)
        if count_include_pad:
            np.divide(sums, k[0] * k[1], out=sums)
    if not count_include_pad:
        sums = sums / xp.asarray(_real_counts((h, w), k, s, p, acc))
    return xp.ascontiguousarray(sums, dtype=out)


class _GradOp(Op):
    """An operator that exists to compute a gradient: output like one of its inputs."""

    def __init__(self, name: str, like: int) -> None:
        super().__init__(name)
        self.like = like

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Shape of input `like`; the cotangent's dtype (attributes come from the forward op)."""
        return inputs[self.like].shape, inputs[0].dtype, attrs


class Conv2dGradInput(_GradOp):
    """d(conv2d)/d(x) applied to a cotangent: a convolution of it (stride 1), else GEMM + col2im."""

    kind = "contraction"

    def kernel(self, g: np.ndarray, w: np.ndarray, x: np.ndarray, *, stride, padding, dilation, groups):
        """Inputs (g, w, x); x only supplies its shape."""
        xp = namespace(g, w)
        g = xp.asarray(g)
        w = xp.asarray(w, dtype=g.dtype)
        k = w.shape[2:]
        o, cp = w.shape[:2]
        full_ok = all(p <= d * (q - 1) for p, d, q in zip(padding, dilation, k))
        if stride == (1, 1) and full_ok and o <= groups * cp:
            # With stride 1 the input gradient is itself a convolution: the cotangent, padded
            # to a full correlation, with the flipped kernel whose in/out channels swap per
            # group. Its im2col + GEMM beats GEMM + col2im (25 strided adds) by far, unless
            # the cotangent has more channels than x (its columns would be the larger).
            wf = w.reshape(groups, o // groups, cp, *k).transpose(0, 2, 1, 3, 4)
            wf = wf.reshape(groups * cp, o // groups, *k)[:, :, ::-1, ::-1]
            full = tuple(d * (q - 1) - p for p, d, q in zip(padding, dilation, k))
            return conv2d_forward(g, wf, None, (1, 1), full, dilation, groups)
        n, o, ho, wo = g.shape
        _, cp, kh, kw = w.shape
        gh = g.transpose(0, 2, 3, 1).reshape(n * ho * wo, groups, o // groups).transpose(1, 0, 2)
        wm = _weight_matrix(w, groups).transpose(0, 2, 1)  # (groups, C_out_per_group, kH*kW*C_per)
        dcols = _gemm(gh, wm).reshape(groups, n, ho, wo, kh, kw, cp)
        dcols = dcols.transpose(1, 2, 3, 4, 5, 0, 6).reshape(n, ho, wo, kh, kw, groups * cp)
        return _scatter_windows(dcols, x.shape, (kh, kw), stride, padding, dilation)


class Conv2dGradWeight(_GradOp):
    """d(conv2d)/d(w) applied to a cotangent: one GEMM of the cotangent with im2col(x)."""

    kind = "contraction"

    def kernel(self, g: np.ndarray, x: np.ndarray, w: np.ndarray, *, stride, padding, dilation, groups):
        """Inputs (g, x, w); w only supplies its shape."""
        xp = namespace(g, x)
        g = xp.asarray(g)
        o, cp, kh, kw = w.shape
        n, _, ho, wo = g.shape
        if groups == 1:
            return grad_weight_one_group(g, xp.asarray(x, dtype=g.dtype), (kh, kw), stride, padding, dilation)
        cols = im2col(xp.asarray(x, dtype=g.dtype), (kh, kw), stride, padding, dilation, groups)
        gh = g.transpose(0, 2, 3, 1).reshape(n * ho * wo, groups, o // groups).transpose(1, 0, 2)
        # The long pixel axis is the contraction; BLAS is several times faster when the larger
        # of the other two (window size, output channels) is the rows of the product.
        if cols.shape[2] >= gh.shape[2]:
            dwt = _gemm(cols.transpose(0, 2, 1), gh)  # (groups, kH*kW*C_per, C_out_per_group)
        else:
            dwt = _gemm(gh.transpose(0, 2, 1), cols).transpose(0, 2, 1)
        dw = dwt.reshape(groups, kh, kw, cp, o // groups).transpose(0, 4, 3, 1, 2)
        return xp.ascontiguousarray(dw.reshape(o, cp, kh, kw))


def _max_tile_grad(g: np.ndarray, x: np.ndarray, y: np.ndarray, k: Pair) -> np.ndarray:
    """Max-pool gradient when windows tile the image: full-resolution masks, no strided float writes.

    Rows of the image are (kH, W_out*kW) blocks; the window maximum and the cotangent are
    repeated along the row (np.repeat is a fast copy) so every elementwise step runs over
    long contiguous rows instead of broadcasting over a length-kW axis.
    """
    n, c, h, w = x.shape
    ho, wo = y.shape[2:]
    m = n * c * ho
    x4 = x[:, :, : ho * k[0], : wo * k[1]].reshape(m, k[0], wo * k[1])
    hit = x4 == np.repeat(y.reshape(m, 1, wo), k[1], axis=2)
    if x.dtype.kind == "f" and np.isnan(y).any():
        hit |= x4 != x4  # a nan maximum: the first nan of the window (argmax's choice)
    # Keep only the first hit of each window in row-major offset order, as argmax does.
    h5 = hit.reshape(m, k[0], wo, k[1])
    taken = h5[:, 0, :, 0].copy()
    for i in range(k[0]):
        for j in range(k[1]):
            if i or j:
                view = h5[:, i, :, j]
                np.greater(view, taken, out=view)
                taken |= view
    gr = np.repeat(g.reshape(m, 1, wo), k[1], axis=2)
    if g.dtype.kind == "f" and np.isfinite(g).all():
        out = np.multiply(hit, gr, dtype=g.dtype)  # 0 * finite is 0: the fast select
    else:
        out = np.where(hit, gr, g.dtype.type(0))
    out = out.reshape(n, c, ho * k[0], wo * k[1])
    if out.shape == x.shape:
        return out
    full = namespace(g).zeros(x.shape, dtype=g.dtype)
    full[:, :, : ho * k[0], : wo * k[1]] = out
    return full


class MaxPool2dGrad(_GradOp):
    """Routes each window's cotangent to the first maximal element (as PyTorch does)."""

    def kernel(
        self,
        g: np.ndarray,
        x: np.ndarray,
        y: np.ndarray | None = None,
        *,
        kernel_size,
        stride,
        padding,
        dilation,
    ):
        """Inputs (g, x[, y = the forward's output]): per kernel offset, a mask of the first maximum."""
        xp = namespace(g, x, y)
        g = xp.asarray(g)
        x = xp.asarray(x)
        h, w = x.shape[2:]
        k, s, p, d = kernel_size, stride, padding, dilation
        xpad = pad_spatial(x, p, max_fill(x.dtype))
        ho, wo = g.shape[2:]
        y = window_max(xpad, k, s, d, (ho, wo)) if y is None else xp.asarray(y)
        if tiled(k, s, p, d):
            return _max_tile_grad(g, x, y, k)
        gp = xp.zeros(xpad.shape, dtype=g.dtype)
        taken = xp.zeros(y.shape, dtype=bool)
        hit = xp.empty(y.shape, dtype=bool)
        part = xp.empty(y.shape, dtype=g.dtype)
        zero = g.dtype.type(0)
        nan = x.dtype.kind == "f" and bool(np.isnan(y).any())
        offsets = list(zip(offset_views(xpad, k, s, d, (ho, wo)), offset_views(gp, k, s, d, (ho, wo))))
        for i, (xv, gv) in enumerate(offsets):
            np.equal(xv, y, out=hit)
            if nan:
                hit |= xv != xv  # a nan maximum: the first nan of the window (argmax's choice)
            # Row-major offset order with `taken` picks the first maximum, as argmax does.
            np.greater(hit, taken, out=hit)
            if i + 1 < len(offsets):
                taken |= hit
            # A contiguous select, then one strided add: several times faster than a masked add.
            np.copyto(part, zero)
            np.copyto(part, g, where=hit)
            np.add(gv, part, out=gv)
        return xp.ascontiguousarray(gp[:, :, p[0] : p[0] + h, p[1] : p[1] + w])


class AvgPool2dGrad(_GradOp):
    """Spreads each window's cotangent evenly over the elements it averaged."""

    def kernel(self, g: np.ndarray, x: np.ndarray, *, kernel_size, stride, padding, count_include_pad):
        """Inputs (g, x); x only supplies its shape."""
        xp = namespace(g)
        g = xp.asarray(g)
        n, c, h, w = np.shape(x)
        k, s, p = kernel_size, stride, padding
        ho, wo = g.shape[2:]
        if tiled(k, s, p):
            share = np.broadcast_to((g / (k[0] * k[1]))[..., None], g.shape + (k[0] * k[1],))
            return untile(share.astype(g.dtype, copy=False), k, (n, c, h, w))
        if count_include_pad:
            share = g / (k[0] * k[1])
        else:
            real = xp.ones((1, 1, h, w), dtype=g.dtype)
            realp = np.pad(real, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
            counts = sliding_window_view(realp, k, axis=(2, 3))[:, :, :: s[0], :: s[1]].sum(axis=(-2, -1))
            share = g / counts
        cols = np.broadcast_to(
            share.transpose(0, 2, 3, 1)[:, :, :, None, None, :], (n, ho, wo, k[0], k[1], c)
        )
        return _scatter_windows(cols, (n, c, h, w), k, s, p, (1, 1)).astype(g.dtype, copy=False)


for _op in (
    Conv2dGradInput("conv2d_grad_input", like=2),
    Conv2dGradWeight("conv2d_grad_weight", like=2),
    MaxPool2dGrad("max_pool2d_grad", like=1),
    AvgPool2dGrad("avg_pool2d_grad", like=1),
):
    register(_op)
