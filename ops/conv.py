"""Convolution with one group: im2col in the layout the GEMM wants, and the column matrix as a value.

The columns are written by one strided copy from a zero-padded NHWC image into a
preallocated array, either one row per output pixel (N, H_out, W_out, kH, kW, C) or one
row per kernel element (C, kH, kW, N, H_out, W_out); the forward picks the orientation
whose GEMM is faster for the shapes at hand (a long, thin contraction such as the first
layer's 25 elements prefers the second). The weight gradient needs the same columns as the
forward, so the library pass can compute them once (`conv2d_im2col`) and hand them to both
`conv2d_from_cols` and `conv2d_grad_weight_from_cols`; these three operators are made only
by that pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import Op, register
from ops.namespace import as_strided, namespace

Pair = tuple[int, int]


def out_hw(hw: tuple[int, ...], k: Pair, s: Pair, p: Pair, d: Pair) -> Pair:
    """PyTorch's output height and width (ceil_mode=False)."""
    return (
        (hw[0] + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1,
        (hw[1] + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1,
    )


def im2col_rows(x: np.ndarray, k: Pair, s: Pair, p: Pair, d: Pair) -> np.ndarray:
    """Columns (N, H_out, W_out, kH, kW, C) of NCHW x: one row of kH*kW*C per output pixel."""
    n, c, h, w = x.shape
    ho, wo = out_hw((h, w), k, s, p, d)
    xp = namespace(x)
    xpad = xp.zeros((n, h + 2 * p[0], w + 2 * p[1], c), dtype=x.dtype)
    xpad[:, p[0] : p[0] + h, p[1] : p[1] + w, :] = x.transpose(0, 2, 3, 1)
    st = xpad.strides
    shape = (n, ho, wo, k[0], k[1], c)
    strides = (st[0], st[1] * s[0], st[2] * s[1], st[1] * d[0], st[2] * d[1], st[3])
    out = xp.empty(shape, dtype=x.dtype)
    np.copyto(out, as_strided(xpad, shape, strides))
    return out


def im2col_cols(x: np.ndarray, k: Pair, s: Pair, p: Pair, d: Pair) -> np.ndarray:
    """Columns (C, kH, kW, N, H_out, W_out) of NCHW x: one row of N*H_out*W_out per kernel element."""
    n, c, h, w = x.shape
    ho, wo = out_hw((h, w), k, s, p, d)
    xp = namespace(x)
    xpad = xp.zeros((c, n, h + 2 * p[0], w + 2 * p[1]), dtype=x.dtype)
    xpad[:, :, p[0] : p[0] + h, p[1] : p[1] + w] = x.transpose(1, 0, 2, 3)
    st = xpad.strides
    shape = (c, k[0], k[1], n, ho, wo)
    strides = (st[0], st[2] * d[0], st[3] * d[1], st[1], st[2] * s[0], st[3] * s[1])
    out = xp.empty(shape, dtype=x.dtype)
    np.copyto(out, as_strided(xpad, shape, strides))
    return out


def conv_from_rows(cols: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """NCHW output from row columns (N, H_out, W_out, kH, kW, C): one GEMM, bias added in place."""
    n, ho, wo, kh, kw, c = cols.shape
    o = w.shape[0]
    wm = w.transpose(2, 3, 1, 0).reshape(kh * kw * c, o)
    y = cols.reshape(n * ho * wo, kh * kw * c) @ wm
    if b is not None:
        y += b
    return namespace(y).ascontiguousarray(y.reshape(n, ho, wo, o).transpose(0, 3, 1, 2))


#: rows of the column matrix per GEMM when the forward streams im2col in chunks: large
#: enough for BLAS to run at full speed on two threads, small enough (~25 MB for the
#: CNN's second layer) that each chunk is still in cache when its GEMM reads it
CHUNK_ROWS = 4096


def conv_rows_chunked(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: Pair, p: Pair, d: Pair
) -> np.ndarray:
    """conv_from_rows(im2col_rows(x)) without the whole column matrix: a few images at a time.

    The columns are kH*kW times larger than x; writing them all to memory and reading
    them back costs more than the GEMM on a bandwidth-bound machine, so each chunk of
    images is copied into one reused buffer and multiplied while it is hot.
    """
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    ho, wo = out_hw((h, wd), (kh, kw), s, p, d)
    k = kh * kw * c
    xp = namespace(x)
    xpad = xp.zeros((n, h + 2 * p[0], wd + 2 * p[1], c), dtype=x.dtype)
    xpad[:, p[0] : p[0] + h, p[1] : p[1] + wd, :] = x.transpose(0, 2, 3, 1)
    st = xpad.strides
    strides = (st[0], st[1] * s[0], st[2] * s[1], st[1] * d[0], st[2] * d[1], st[3])
    wm = xp.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(k, o))
    y = xp.empty((n, ho, wo, o), dtype=np.result_type(x, w))
    step = max(1, CHUNK_ROWS // (ho * wo))
    buf = xp.empty((min(step, n), ho, wo, kh, kw, c), dtype=x.dtype)
    for i in range(0, n, step):
        m = min(step, n - i)
        np.copyto(buf[:m], as_strided(xpad[i:], (m, ho, wo, kh, kw, c), strides))
        np.matmul(buf[:m].reshape(m * ho * wo, k), wm, out=y[i : i + m].reshape(m * ho * wo, o))
    if b is not None:
        y += b
    return xp.ascontiguousarray(y.transpose(0, 3, 1, 2))


def pointwise(k: Pair, p: Pair) -> bool:
    """A 1x1 window without padding: each output pixel is one input pixel, im2col is a no-op."""
    return tuple(k) == (1, 1) and tuple(p) == (0, 0)


def _pixels(x: np.ndarray, s: Pair) -> np.ndarray:
    """(N, C, H_out*W_out): the input pixels a pointwise convolution reads, channel-major per image."""
    if tuple(s) != (1, 1):
        x = x[:, :, :: s[0], :: s[1]]
    n, c, h, w = x.shape
    return namespace(x).ascontiguousarray(x).reshape(n, c, h * w)


def conv_pointwise(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: Pair) -> np.ndarray:
    """A pointwise convolution as W (C_out, C) @ x_n (C, pixels) per image: NCHW with no copies.

    The row-chunked path pads, lays the image out channel-last and transposes the product
    back; for a 1x1 window all of that is data movement around the same GEMM.
    """
    n, c, h, wd = x.shape
    o = w.shape[0]
    ho, wo = (h - 1) // s[0] + 1, (wd - 1) // s[1] + 1
    xp = namespace(x)
    y = xp.matmul(w.reshape(o, c), _pixels(x, s))
    if b is not None:
        y += b.reshape(o, 1)
    return y.reshape(n, o, ho, wo)


def grad_weight_pointwise(g: np.ndarray, x: np.ndarray, s: Pair) -> np.ndarray:
    """d(conv2d)/d(w) of a pointwise convolution: one contraction over images and pixels."""
    n, o, ho, wo = g.shape
    xs = _pixels(x, s)
    dw = namespace(g).tensordot(g.reshape(n, o, ho * wo), xs, axes=([0, 2], [0, 2]))
    return dw.reshape(o, xs.shape[1], 1, 1)


def conv_one_group(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: Pair, p: Pair, d: Pair
) -> np.ndarray:
    """Cross-correlation with one group in the work dtype; output NCHW, contiguous."""
    n = x.shape[0]
    o, c, kh, kw = w.shape
    if pointwise((kh, kw), p):
        return conv_pointwise(x, w, b, s)
    if c * kh * kw >= o:
        return conv_rows_chunked(x, w, b, s, p, d)
    # A contraction shorter than the output channels: (C_out, K) @ (K, pixels), whose
    # result is already channel-major; one copy moves the batch axis to the front.
    cols = im2col_cols(x, (kh, kw), s, p, d)
    ho, wo = cols.shape[4:]
    y = w.reshape(o, c * kh * kw) @ cols.reshape(c * kh * kw, n * ho * wo)
    if b is not None:
        y += b[:, None]
    return namespace(y).ascontiguousarray(y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3))


def _padded(x: np.ndarray, p: Pair) -> np.ndarray:
    """x zero-padded on both spatial axes (x itself when there is no padding)."""
    if tuple(p) == (0, 0):
        return x
    n, c, h, w = x.shape
    xpad = namespace(x).zeros((n, c, h + 2 * p[0], w + 2 * p[1]), dtype=x.dtype)
    xpad[:, :, p[0] : p[0] + h, p[1] : p[1] + w] = x
    return xpad


def conv_grouped(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: Pair, p: Pair, d: Pair, groups: int
) -> np.ndarray:
    """Cross-correlation with several groups, NCHW in and out with no transposes.

    The columns are gathered group-major, (N, groups, C/groups*kH*kW, pixels), and multiplied
    by the weight (groups, O/groups, K) in one batched GEMM whose result is already
    (N, C_out, pixels). Depthwise convolutions too: on NASNet-A's shapes this ran 1.1-2.2x
    faster than kH*kW multiply-adds of shifted views (which won only for 5x5 and 7x7 windows
    at stride 2, by 1.1-1.3x).
    """
    n, c, h, wd = x.shape
    o, cp, kh, kw = w.shape
    ho, wo = out_hw((h, wd), (kh, kw), s, p, d)
    xp = namespace(x)
    xpad = xp.ascontiguousarray(_padded(x, p))
    st = xpad.strides
    shape = (n, groups, cp, kh, kw, ho, wo)
    strides = (st[0], st[1] * cp, st[1], st[2] * d[0], st[3] * d[1], st[2] * s[0], st[3] * s[1])
    k = cp * kh * kw
    cols = xp.empty(shape, dtype=x.dtype)
    np.copyto(cols, as_strided(xpad, shape, strides))
    wm = w.reshape(groups, o // groups, k)
    y = xp.matmul(wm, cols.reshape(n, groups, k, ho * wo))
    if b is not None:
        y += b.reshape(groups, o // groups, 1)
    return y.reshape(n, o, ho, wo)


def grad_weight_from_rows(g: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """d(conv2d)/d(w) for one group from the forward's row columns: one GEMM."""
    n, o, ho, wo = g.shape
    kh, kw, c = cols.shape[3:]
    k = kh * kw * c
    gh = g.transpose(0, 2, 3, 1).reshape(n * ho * wo, o)
    cm = cols.reshape(n * ho * wo, k)
    # The long pixel axis is the contraction; BLAS is several times faster when the larger
    # of the other two (window size, output channels) is the rows of the product.
    dwt = cm.T @ gh if k >= o else (gh.T @ cm).T
    return namespace(dwt).ascontiguousarray(dwt.reshape(kh, kw, c, o).transpose(3, 2, 0, 1))


def grad_weight_one_group(g: np.ndarray, x: np.ndarray, k: Pair, s: Pair, p: Pair, d: Pair) -> np.ndarray:
    """d(conv2d)/d(w) for one group: GEMMs of the cotangent with im2col(x) in the cheaper layout."""
    n, o, ho, wo = g.shape
    c = x.shape[1]
    kk = c * k[0] * k[1]
    if pointwise(k, p):
        return grad_weight_pointwise(g, x, s)
    if kk >= o:
        return grad_weight_from_rows(g, im2col_rows(x, k, s, p, d))
    # Few window elements (the first layer's 25): the columns as (K, pixels) are small, and
    # one GEMM (C_out, pixels) @ (pixels, K) with the cotangent channel-major gives the
    # weight's layout directly. (A batched product per image avoids the cotangent's copy
    # but makes hundreds of small BLAS calls, which collapse when other threads are busy.)
    cols = im2col_cols(x, k, s, p, d).reshape(kk, n * ho * wo)
    gc = namespace(g).ascontiguousarray(g.reshape(n, o, ho * wo).transpose(1, 0, 2)).reshape(o, n * ho * wo)
    return (gc @ cols.T).reshape(o, c, k[0], k[1])


class _PassOp(Op):
    """An operator only the library pass makes (shapes come from the pass, never from infer)."""

    def infer(self, inputs: tuple, attrs: dict) -> tuple:
        """Never recorded by users."""
        raise TypeError(f"{self.name}: made by the library pass only")


class Conv2dIm2col(_PassOp):
    """Row columns of x for a conv2d with one group (inputs x, w; w supplies the kernel size)."""

    def kernel(self, x: np.ndarray, w: np.ndarray, *, stride: Pair, padding: Pair, dilation: Pair) -> Any:
        """im2col_rows of x."""
        return im2col_rows(namespace(x).asarray(x), tuple(np.shape(w)[2:]), stride, padding, dilation)


class Conv2dFromCols(_PassOp):
    """conv2d from precomputed row columns (inputs cols, w[, b])."""

    kind = "contraction"

    def kernel(self, cols: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> Any:
        """One GEMM, the bias, NCHW."""
        xp = namespace(cols, w, b)
        return conv_from_rows(xp.asarray(cols), xp.asarray(w), None if b is None else xp.asarray(b))


class Conv2dGradWeightFromCols(_PassOp):
    """conv2d_grad_weight from the forward's row columns (inputs g, cols)."""

    kind = "contraction"

    def kernel(self, g: np.ndarray, cols: np.ndarray) -> Any:
        """One GEMM of the cotangent with the columns."""
        xp = namespace(g, cols)
        return grad_weight_from_rows(xp.asarray(g), xp.asarray(cols))


for _op in (
    Conv2dIm2col("conv2d_im2col"),
    Conv2dFromCols("conv2d_from_cols"),
    Conv2dGradWeightFromCols("conv2d_grad_weight_from_cols"),
):
    register(_op)
