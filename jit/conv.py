"""Convolution from compiled im2col chunks: the column matrix never exists whole.

The reference builds im2col of the whole batch (kH*kW times the image, 320 MB for the
CNN's second layer) and multiplies it once; on a bandwidth-bound machine writing and
re-reading it costs about as much as the GEMM. Here the compiled gather of jit/window.py
fills a buffer of a few images (a few MB, still in cache) and BLAS (NumPy's matmul)
multiplies each chunk while it is hot: the forward, the weight gradient (chunk products
summed) and, at stride 1, the input gradient (a convolution of the cotangent with the
flipped kernel). Rows orientation only (one row of kH*kW*C per output pixel, as
ops/conv.py's `im2col_rows`), one group, float32 or float64; `applies` says when.
"""

from __future__ import annotations

import numpy as np

from jit.window import im2col_into

Pair = tuple[int, int]

#: rows of the column matrix per chunk: large enough for BLAS to run at full speed on
#: two threads, small enough to stay in cache
CHUNK_ROWS = 3072


def _out_hw(h: int, w: int, k: Pair, s: Pair, p: Pair, d: Pair) -> Pair:
    return (
        (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1,
        (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1,
    )


def applies(x_dtype: np.dtype, w_shape: tuple, dtypes: list[np.dtype], groups: int) -> bool:
    """One group, one float dtype throughout, and a window at least as long as the output channels."""
    o, c, kh, kw = w_shape
    return (
        groups == 1
        and x_dtype.kind == "f"
        and x_dtype.itemsize in (4, 8)
        and all(dt == x_dtype for dt in dtypes)
        and c * kh * kw >= o
    )


def forward(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    s: Pair,
    p: Pair,
    d: Pair,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """conv2d (one group, rows orientation): NCHW output, bias added as it is laid out."""
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    ho, wo = _out_hw(h, wd, (kh, kw), s, p, d)
    k = kh * kw * c
    wm = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(k, o))
    y = np.empty((n, ho, wo, o), dtype=x.dtype)
    step = max(1, CHUNK_ROWS // max(1, ho * wo))
    buf = np.empty((min(step, n), ho, wo, kh, kw, c), dtype=x.dtype)
    for i in range(0, n, step):
        m = min(step, n - i)
        im2col_into(x[i : i + m], buf[:m], (kh, kw), s, p, d)
        np.matmul(buf[:m].reshape(m * ho * wo, k), wm, out=y[i : i + m].reshape(m * ho * wo, o))
    res = out if out is not None else np.empty((n, o, ho, wo), dtype=x.dtype)
    if b is None:
        np.copyto(res, y.transpose(0, 3, 1, 2))
    else:
        np.add(y.transpose(0, 3, 1, 2), b.reshape(o, 1, 1), out=res)
    return res


def grad_weight(
    g: np.ndarray, x: np.ndarray, w_shape: tuple, s: Pair, p: Pair, d: Pair, out: np.ndarray | None = None
) -> np.ndarray:
    """d(conv2d)/d(w): per chunk, the columns' transpose times the cotangent's rows, summed."""
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    o, _, kh, kw = w_shape
    ho, wo = g.shape[2:]
    k = kh * kw * c
    acc = np.zeros((k, o), dtype=g.dtype)
    part = np.empty((k, o), dtype=g.dtype)
    step = max(1, CHUNK_ROWS // max(1, ho * wo))
    buf = np.empty((min(step, n), ho, wo, kh, kw, c), dtype=x.dtype)
    gh = np.empty((min(step, n), ho, wo, o), dtype=g.dtype)
    for i in range(0, n, step):
        m = min(step, n - i)
        im2col_into(x[i : i + m], buf[:m], (kh, kw), s, p, d)
        np.copyto(gh[:m], g[i : i + m].transpose(0, 2, 3, 1))
        np.matmul(buf[:m].reshape(m * ho * wo, k).T, gh[:m].reshape(m * ho * wo, o), out=part)
        acc += part
    res = out if out is not None else np.empty((o, c, kh, kw), dtype=g.dtype)
    np.copyto(res, acc.reshape(kh, kw, c, o).transpose(3, 2, 0, 1))
    return res


def grad_input_applies(w_shape: tuple, s: Pair, p: Pair, d: Pair) -> bool:
    """Stride 1 with padding a full correlation can undo, and no more output than input channels.

    Then the input gradient is a convolution of the cotangent; with more output channels
    the cotangent's columns outgrow x's, and the reference's GEMM + col2im is cheaper.
    """
    o, c, kh, kw = w_shape
    return s == (1, 1) and o <= c and all(pp <= dd * (q - 1) for pp, dd, q in zip(p, d, (kh, kw)))


def grad_input(g: np.ndarray, w: np.ndarray, p: Pair, d: Pair, out: np.ndarray | None = None) -> np.ndarray:
    """d(conv2d)/d(x) at stride 1: the cotangent, padded to a full correlation, with the flipped kernel."""
    kh, kw = w.shape[2:]
    wf = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
    full = (d[0] * (kh - 1) - p[0], d[1] * (kw - 1) - p[1])
    # at stride 1 the full correlation's output is exactly x's size
    return forward(g, wf, None, (1, 1), full, d, out=out)


# -- called like the operators' kernels (plus out=); None where they do not apply ----------


def conv2d_kernel(x, w, b=None, *, stride, padding, dilation, groups, out=None):
    """conv2d when `applies` at these sizes, else None (the caller runs the reference)."""
    dts = [np.asarray(w).dtype] + ([np.asarray(b).dtype] if b is not None else [])
    if not applies(np.asarray(x).dtype, np.shape(w), dts, groups):
        return None
    return forward(x, np.asarray(w), None if b is None else np.asarray(b), stride, padding, dilation, out=out)


def conv2d_grad_weight_kernel(g, x, w, *, stride, padding, dilation, groups, out=None):
    """conv2d_grad_weight when `applies`, else None."""
    if not applies(np.asarray(g).dtype, np.shape(w), [np.asarray(x).dtype], groups):
        return None
    return grad_weight(np.asarray(g), x, np.shape(w), stride, padding, dilation, out=out)


def conv2d_grad_input_kernel(g, w, x, *, stride, padding, dilation, groups, out=None):
    """conv2d_grad_input at stride 1 when `applies`, else None."""
    g = np.asarray(g)
    w = np.asarray(w)
    wt = (w.shape[1], w.shape[0], *w.shape[2:])  # the flipped convolution's weight shape
    if not (
        applies(g.dtype, wt, [w.dtype], groups) and grad_input_applies(w.shape, stride, padding, dilation)
    ):
        return None
    return grad_input(g, w, padding, dilation, out=out)


KERNELS = {
    "conv2d": conv2d_kernel,
    "conv2d_grad_weight": conv2d_grad_weight_kernel,
    "conv2d_grad_input": conv2d_grad_input_kernel,
}
