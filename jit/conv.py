"""Convolution from compiled im2col chunks: the column matrix never exists whole.

The reference builds im2col of the whole batch (kH*kW times the image, 320 MB for the
CNN's second layer) and multiplies it once; on a bandwidth-bound machine writing and
re-reading it costs about as much as the GEMM. Here the compiled gather of jit/window.py
fills a buffer of a few images (a few MB, still in cache) and BLAS (NumPy's matmul)
multiplies each chunk while it is hot: the forward, the weight gradient (chunk products
summed) and, at stride 1, the input gradient (a convolution of the cotangent with the
flipped kernel). Rows orientation only (one row of kH*kW*C per output pixel, as
ops/conv.py's `im2col_rows`), one group, float32 or float64; `applies` says when.

Where jit/conv_simd.py's implicit GEMM applies (float32, AVX-512 or AVX2, output channels a
multiple of the vector's 16 or 8 lanes) it replaces the chunks, and the first layer's weight gradient; pointwise (1x1,
unpadded) convolutions are one GEMM per image (ops/conv.py's `conv_pointwise`).
"""

from __future__ import annotations

import numpy as np

from jit import conv_simd
from jit.blas_quiet import park_blas_workers
from jit.window import HEAD, SIG, function, geometry, im2col_into
from ops.conv import conv_pointwise, grad_weight_pointwise, out_hw, pointwise

Pair = tuple[int, int]

#: rows of the column matrix per chunk: large enough for BLAS to run at full speed on
#: two threads, small enough to stay in cache
CHUNK_ROWS = 3072


def _one_float(x_dtype: np.dtype, dtypes: list[np.dtype], groups: int) -> bool:
    return (
        groups == 1
        and x_dtype.kind == "f"
        and x_dtype.itemsize in (4, 8)
        and all(dt == x_dtype for dt in dtypes)
    )


def applies(x_dtype: np.dtype, w_shape: tuple, dtypes: list[np.dtype], groups: int) -> bool:
    """One group, one float dtype throughout, and a window at least as long as the output channels."""
    o, c, kh, kw = w_shape
    return _one_float(x_dtype, dtypes, groups) and c * kh * kw >= o


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
    if conv_simd.applies(np.asarray(x).dtype, w.shape):
        return conv_simd.forward(x, w, b, s, p, d, out=out)
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    ho, wo = out_hw((h, wd), (kh, kw), s, p, d)
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
    if conv_simd.applies(g.dtype, w_shape):
        return conv_simd.grad_weight(g, x, w_shape, s, p, d, out=out)
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


# -- direct convolution for short windows (C*kH*kW below the output channels) -------------
#
# A first layer's window (one channel, 5x5: 25 elements) makes a GEMM with a contraction of
# 25, where BLAS runs far below its speed and im2col writes 25 copies of the image. Here
# one image's patch matrix (C*kH*kW rows of H_out*W_out values, in cache) is used
# directly: each output plane accumulates the patch rows scaled by its weights, and each
# weight's gradient is the dot product of a cotangent plane with a patch row.

_PATCH = """
static void patch(const T *xn, int64_t C, int64_t H, int64_t W, int64_t HO, int64_t WO, T *P) {
  for (int64_t c = 0; c < C; c++)
    for (int kh = 0; kh < KH; kh++)
      for (int kw = 0; kw < KW; kw++) {
        T *pr = P + ((c * KH + kh) * KW + kw) * HO * WO;
        for (int64_t oh = 0; oh < HO; oh++) {
          const int64_t ih = oh * SH - PH + kh * DH;
          T *prow = pr + oh * WO;
          if (ih < 0 || ih >= H) { for (int64_t ow = 0; ow < WO; ow++) prow[ow] = 0; continue; }
          const T *xr = xn + (c * H + ih) * W;
          for (int64_t ow = 0; ow < WO; ow++) {
            const int64_t iw = ow * SW - PW + kw * DW;
            prow[ow] = (iw >= 0 && iw < W) ? xr[iw] : (T)0;
          }
        }
      }
}
"""


def _direct_source(dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair, body: str) -> str:
    ct = "float" if dt.itemsize == 4 else "double"
    tile = 64 if dt.itemsize == 4 else 32  # four 512-bit vectors of sums
    return HEAD + f"typedef {ct} T;\n#define TILE {tile}\n" + geometry(k, s, p, d) + _PATCH + SIG + body


_DIRECT_FORWARD = """  const T *x = (const T *)ptrs[0], *w = (const T *)ptrs[1], *b = (const T *)ptrs[2]; T *y = (T *)ptrs[3];
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], O = dims[4], HO = dims[5], WO = dims[6];
  const int64_t K = C * KH * KW, M = HO * WO;
  #pragma omp parallel
  {
    T *P = (T *)calloc(K * M + TILE, sizeof(T));
    #pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
      patch(x + n * C * H * W, C, H, W, HO, WO, P);
      /* tiles of TILE outputs whose sums stay in registers over the window; the patch has
         TILE values of slack at its end, so a last partial tile reads but never writes past M */
      for (int64_t i0 = 0; i0 < M; i0 += TILE) {
        const int64_t m = M - i0 < TILE ? M - i0 : TILE;
        for (int64_t o = 0; o < O; o++) {
          const T *wr = w + o * K;
          T acc[TILE];
          for (int j = 0; j < TILE; j++) acc[j] = 0;
          for (int64_t kk = 0; kk < K; kk++) {
            const T wk = wr[kk]; const T *pr = P + kk * M + i0;
            for (int j = 0; j < TILE; j++) acc[j] += wk * pr[j];
          }
          const T bo = b ? b[o] : (T)0;
          T *yp = y + (n * O + o) * M + i0;
          if (b) for (int64_t j = 0; j < m; j++) yp[j] = acc[j] + bo;
          else for (int64_t j = 0; j < m; j++) yp[j] = acc[j];
        }
      }
    }
    free(P);
  }
}
"""


def _direct_forward_source(dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    return _direct_source(dt, k, s, p, d, _DIRECT_FORWARD)


_DIRECT_GRAD_WEIGHT = """  const T *g = (const T *)ptrs[0], *x = (const T *)ptrs[1]; T *part = (T *)ptrs[2];
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], O = dims[4], HO = dims[5], WO = dims[6];
  const int64_t K = C * KH * KW, M = HO * WO, NCH = dims[7];
  /* part: one (O, K) block of sums per chunk of consecutive images, whichever thread runs it
     (the same bits with any number of threads); the caller adds them up in order */
  #pragma omp parallel
  {
    T *P = (T *)malloc(sizeof(T) * (K * M > 0 ? K * M : 1));
    #pragma omp for schedule(dynamic, 1)
    for (int64_t ch = 0; ch < NCH; ch++) {
    T *S = part + ch * O * K;
    for (int64_t n = N * ch / NCH; n < N * (ch + 1) / NCH; n++) {
      patch(x + n * C * H * W, C, H, W, HO, WO, P);
      for (int64_t o = 0; o < O; o++) {
        const T *gp = g + (n * O + o) * M;
        for (int64_t kk = 0; kk < K; kk++) {
          const T *pr = P + kk * M;
          T acc = 0;
          #pragma omp simd reduction(+:acc)
          for (int64_t i = 0; i < M; i++) acc += gp[i] * pr[i];
          S[o * K + kk] += acc;
        }
      }
    }
    }
    free(P);
  }
}
"""


def _direct_grad_weight_source(dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    return _direct_source(dt, k, s, p, d, _DIRECT_GRAD_WEIGHT)


def direct_applies(x_dtype: np.dtype, w_shape: tuple, dtypes: list[np.dtype], groups: int) -> bool:
    """One group, one float dtype, and a window shorter than the output channels."""
    o, c, kh, kw = w_shape
    return _one_float(x_dtype, dtypes, groups) and c * kh * kw < o


def direct_forward(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    s: Pair,
    p: Pair,
    d: Pair,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """conv2d by direct accumulation of each output row's patch (short windows)."""
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(w)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    ho, wo = out_hw((h, wd), (kh, kw), s, p, d)
    y = out if out is not None else np.empty((n, o, ho, wo), dtype=x.dtype)
    fn = function(_direct_forward_source, (x.dtype,), (kh, kw), s, p, d)
    park_blas_workers()
    fn([x, w, None if b is None else np.ascontiguousarray(b), y], [n, c, h, wd, o, ho, wo])
    return y


def direct_grad_weight(
    g: np.ndarray, x: np.ndarray, w_shape: tuple, s: Pair, p: Pair, d: Pair, out: np.ndarray | None = None
) -> np.ndarray:
    """d(conv2d)/d(w) as dot products of cotangent planes with patch rows (short windows)."""
    g = np.ascontiguousarray(g)
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    o, _, kh, kw = w_shape
    ho, wo = g.shape[2:]
    k = c * kh * kw
    chunks = max(1, min(conv_simd.WEIGHT_CHUNKS, n))  # fixed: the same bits with any thread count
    part = np.zeros((chunks, o, k), dtype=g.dtype)
    fn = function(_direct_grad_weight_source, (g.dtype,), (kh, kw), s, p, d)
    park_blas_workers()
    fn([g, x, part], [n, c, h, wd, o, ho, wo, chunks])
    res = out if out is not None else np.empty((o, c, kh, kw), dtype=g.dtype)
    np.sum(part, axis=0, out=res.reshape(o, k))
    return res


# -- called like the operators' kernels (plus out=); None where they do not apply ----------


def _into(res: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """`res`, written into `out` when a buffer is given."""
    if out is None:
        return res
    np.copyto(out, res)
    return out


def conv2d_kernel(x, w, b=None, *, stride, padding, dilation, groups, out=None):
    """conv2d from chunks or directly, as the sizes suit, else None (the caller runs the reference)."""
    dts = [np.asarray(w).dtype] + ([np.asarray(b).dtype] if b is not None else [])
    w, b = np.asarray(w), None if b is None else np.asarray(b)
    if pointwise(w.shape[2:], padding) and _one_float(np.asarray(x).dtype, dts, groups):
        # a 1x1 window is one GEMM per image with the result already NCHW
        return _into(conv_pointwise(np.asarray(x), w, b, stride), out)
    if applies(np.asarray(x).dtype, w.shape, dts, groups):
        return forward(x, w, b, stride, padding, dilation, out=out)
    if direct_applies(np.asarray(x).dtype, w.shape, dts, groups):
        return direct_forward(x, w, b, stride, padding, dilation, out=out)
    return None


def conv2d_grad_weight_kernel(g, x, w, *, stride, padding, dilation, groups, out=None):
    """conv2d_grad_weight from chunks or directly, as the sizes suit, else None."""
    if pointwise(np.shape(w)[2:], padding) and _one_float(np.asarray(g).dtype, [np.asarray(x).dtype], groups):
        return _into(grad_weight_pointwise(np.asarray(g), np.asarray(x), stride), out)
    if applies(np.asarray(g).dtype, np.shape(w), [np.asarray(x).dtype], groups):
        return grad_weight(np.asarray(g), x, np.shape(w), stride, padding, dilation, out=out)
    if direct_applies(np.asarray(g).dtype, np.shape(w), [np.asarray(x).dtype], groups):
        if conv_simd.applies(np.asarray(g).dtype, np.shape(w)):
            # the first layer's 1 -> 64 channels, 5x5: 12-13 ms against 14-17 ms direct
            return conv_simd.grad_weight(np.asarray(g), x, np.shape(w), stride, padding, dilation, out=out)
        return direct_grad_weight(np.asarray(g), x, np.shape(w), stride, padding, dilation, out=out)
    return None


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
