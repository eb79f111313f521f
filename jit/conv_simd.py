"""Implicit-GEMM convolution with AVX-512 register tiles: no column matrix at all.

On this class of machine OpenBLAS runs the convolution's GEMM shapes (tens of thousands of
pixel rows, a contraction of kH*kW*C, 64 output channels) at about 60% of the FMA peak, and
the chunked im2col of jit/conv.py adds a copy kH*kW times the image on top. Here one
image at a time is laid out padded and channel-last in a private buffer (a few tens of KB,
in L1/L2), and a 6x64 register tile of the product is accumulated straight from it: each
pixel's window row is a contiguous run of kW*C values of that buffer, so the "columns" are
just six pointers. Forward: 6 output pixels x 16*NV output channels, broadcasts from the
image, vectors from the (kH*kW*C, O) weight matrix. Weight gradient: 6 window elements x
16*NV output channels, broadcasts from the image, vectors from the image's cotangent laid
out pixel-major, summed over the image's pixels into a per-thread (K, O) block.

float32 only, output channels a multiple of 16, a CPU with AVX-512F (`applies`); the input
gradient at stride 1 is the forward of the cotangent with the flipped kernel (jit/conv.py).
Sums run in a different order from BLAS's: equal within float32 rounding, not bit for bit.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from jit import compile_c
from jit.blas_quiet import park_blas_workers
from jit.window import HEAD, SIG, function, geometry
from ops.conv import out_hw
from ops.settings import SETTINGS

Pair = tuple[int, int]


@functools.cache
def has_avx512() -> bool:
    """Whether the kernels can be built here: a compiler taking -march=native on a CPU with AVX-512F."""
    if "-march=native" not in compile_c.flags():
        return False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return " avx512f " in line + " "
    except OSError:
        pass
    return False


#: bytes of the weight slice one forward tile streams (kH*kW*C rows of 16*NV channels): it
#: must stay in L2 (1 MB a core here), or each tile rereads it from L3 and BLAS is faster
L2_SLICE = 512 * 1024


def applies(dtype: np.dtype, w_shape: tuple) -> bool:
    """float32, output channels a multiple of 16, a weight slice that fits L2, AVX-512F here.

    LAZYGRAPH_CONV_SIMD=0 turns these kernels off (the chunked BLAS path then runs).
    """
    o, c, kh, kw = w_shape
    return (
        np.dtype(dtype) == np.float32
        and o > 0
        and o % 16 == 0
        and kh * kw * c * 16 * _nv(o) * 4 <= L2_SLICE
        and has_avx512()
        and SETTINGS.conv_simd
    )


def _nv(o: int) -> int:
    """Vectors of 16 channels per tile: the largest of 4, 3, 2, 1 dividing O/16."""
    return next(v for v in (4, 3, 2, 1) if (o // 16) % v == 0)


# The padded, channel-last copy of image n, shared by both kernels.
_COMMON = """#include <immintrin.h>
typedef float T;
static void pad_nhwc(const T *xn, int64_t C, int64_t H, int64_t W, T *xp) {
  const int64_t WP = W + 2 * PW;
  memset(xp, 0, sizeof(T) * (H + 2 * PH) * WP * C);
  for (int64_t c = 0; c < C; c++)
    for (int64_t ih = 0; ih < H; ih++) {
      const T *src = xn + (c * H + ih) * W; T *dst = xp + ((ih + PH) * WP + PW) * C + c;
      for (int64_t iw = 0; iw < W; iw++) dst[iw * C] = src[iw];
    }
}
"""

# acc[r][v] += a_r[j] * b[j][v]: R rows of broadcasts, NV vectors of 16 columns per step
_FWD_TILE = """
static inline __attribute__((always_inline)) void fwd_tile(const int R, const T *const *base, const T *wm,
    int64_t C, int64_t O, int64_t WP, T *yl, int64_t ldy) {
  __m512 acc[6][NV];
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
  for (int kh = 0; kh < KH; kh++) {
    /* undilated, a window row is one run of KW*C values; dilated, KW runs of C */
    const int runs = DW == 1 ? 1 : KW;
    const int64_t len = DW == 1 ? KW * C : C;
    for (int q = 0; q < runs; q++) {
      const int64_t off = (kh * DH * WP + q * DW) * C;
      const T *wk = wm + ((int64_t)kh * KW + q) * C * O;
      const T *a[6];
      #pragma GCC unroll 6
      for (int r = 0; r < R; r++) a[r] = base[r] + off;
      for (int64_t j = 0; j < len; j++) {
        __m512 b[NV];
        #pragma GCC unroll 4
        for (int v = 0; v < NV; v++) b[v] = _mm512_loadu_ps(wk + j * O + 16 * v);
        #pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
          const __m512 s = _mm512_set1_ps(a[r][j]);
          #pragma GCC unroll 4
          for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(s, b[v], acc[r][v]);
        }
      }
    }
  }
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) _mm512_storeu_ps(yl + r * ldy + 16 * v, acc[r][v]);
}
"""

_FWD_BODY = """  const T *x = (const T *)ptrs[0], *wm = (const T *)ptrs[1], *b = (const T *)ptrs[2]; T *y = (T *)ptrs[3];
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], O = dims[4], HO = dims[5], WO = dims[6];
  const int64_t HP = H + 2 * PH, WP = W + 2 * PW, M = HO * WO;
  #pragma omp parallel
  {
    T *xp = (T *)malloc(sizeof(T) * (HP * WP * C + 16));
    T *yl = (T *)malloc(sizeof(T) * (M * O + 16));  /* this image's output, pixel-major */
    #pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < N; n++) {
      pad_nhwc(x + n * C * H * W, C, H, W, xp);
      for (int64_t p0 = 0; p0 < M; p0 += 6) {
        const int R = M - p0 < 6 ? (int)(M - p0) : 6;
        const T *base[6];
        for (int r = 0; r < R; r++) {
          const int64_t p = p0 + r, oh = p / WO, ow = p % WO;
          base[r] = xp + (oh * SH * WP + ow * SW) * C;
        }
        for (int64_t ob = 0; ob < O; ob += 16 * NV) {
          T *dst = yl + p0 * O + ob;
          switch (R) {
            case 6: fwd_tile(6, base, wm + ob, C, O, WP, dst, O); break;
            case 5: fwd_tile(5, base, wm + ob, C, O, WP, dst, O); break;
            case 4: fwd_tile(4, base, wm + ob, C, O, WP, dst, O); break;
            case 3: fwd_tile(3, base, wm + ob, C, O, WP, dst, O); break;
            case 2: fwd_tile(2, base, wm + ob, C, O, WP, dst, O); break;
            default: fwd_tile(1, base, wm + ob, C, O, WP, dst, O); break;
          }
        }
      }
      /* NCHW: each output plane gathers its channel from the pixel-major rows */
      T *yn = y + n * O * M;
      for (int64_t o = 0; o < O; o++) {
        const T bo = b ? b[o] : (T)0;
        for (int64_t p = 0; p < M; p++) yn[o * M + p] = yl[p * O + o] + bo;
      }
    }
    free(xp); free(yl);
  }
}
"""

# acc[r][v] += x[pixel p, window element k0+r] * g[p][v], over the image's pixels
_WGT_TILE = """
static inline __attribute__((always_inline)) void wgt_tile(const int R, const T *xk, const int64_t *poff,
    const T *gl, int64_t M, int64_t O, T *S) {
  __m512 acc[6][NV];
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_loadu_ps(S + r * O + 16 * v);
  for (int64_t p = 0; p < M; p++) {
    __m512 g[NV];
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) g[v] = _mm512_loadu_ps(gl + p * O + 16 * v);
    const T *a = xk + poff[p];
    #pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      const __m512 s = _mm512_set1_ps(a[r]);
      #pragma GCC unroll 4
      for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(s, g[v], acc[r][v]);
    }
  }
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) _mm512_storeu_ps(S + r * O + 16 * v, acc[r][v]);
}
"""

_WGT_BODY = """  const T *g = (const T *)ptrs[0], *x = (const T *)ptrs[1]; T *part = (T *)ptrs[2];
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], O = dims[4], HO = dims[5], WO = dims[6];
  const int64_t HP = H + 2 * PH, WP = W + 2 * PW, M = HO * WO, K = KH * KW * C, NT = dims[7];
  int64_t *poff = (int64_t *)malloc(sizeof(int64_t) * (M > 0 ? M : 1));
  for (int64_t p = 0; p < M; p++) poff[p] = ((p / WO) * SH * WP + (p % WO) * SW) * C;
  /* part: one (K, O) block of sums per thread, window elements in (kh, kw, c) order */
  #pragma omp parallel num_threads(NT)
  {
    T *xp = (T *)malloc(sizeof(T) * (HP * WP * C + 16));
    T *gl = (T *)malloc(sizeof(T) * (M * O + 16));  /* this image's cotangent, pixel-major */
    T *S = part + (int64_t)omp_get_thread_num() * K * O;
    #pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < N; n++) {
      pad_nhwc(x + n * C * H * W, C, H, W, xp);
      const T *gn = g + n * O * M;
      for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < M; p++) gl[p * O + o] = gn[o * M + p];
      for (int kh = 0; kh < KH; kh++)
        for (int kw = 0; kw < KW; kw++) {
          const T *xk = xp + (kh * DH * WP + kw * DW) * C;
          T *Sk = S + (int64_t)(kh * KW + kw) * C * O;
          for (int64_t c0 = 0; c0 < C; c0 += 6) {
            const int R = C - c0 < 6 ? (int)(C - c0) : 6;
            for (int64_t ob = 0; ob < O; ob += 16 * NV) {
              T *dst = Sk + c0 * O + ob;
              switch (R) {
                case 6: wgt_tile(6, xk + c0, poff, gl + ob, M, O, dst); break;
                case 5: wgt_tile(5, xk + c0, poff, gl + ob, M, O, dst); break;
                case 4: wgt_tile(4, xk + c0, poff, gl + ob, M, O, dst); break;
                case 3: wgt_tile(3, xk + c0, poff, gl + ob, M, O, dst); break;
                case 2: wgt_tile(2, xk + c0, poff, gl + ob, M, O, dst); break;
                default: wgt_tile(1, xk + c0, poff, gl + ob, M, O, dst); break;
              }
            }
          }
        }
    }
    free(xp); free(gl);
  }
  free(poff);
}
"""

_OMP = """#ifdef _OPENMP
#include <omp.h>
#else
#define omp_get_thread_num() 0
#endif
"""


def _source(body: str, dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair, nv: Pair) -> str:
    tile = _FWD_TILE if body is _FWD_BODY else _WGT_TILE
    return HEAD + _OMP + f"#define NV {nv[0]}\n" + geometry(k, s, p, d) + _COMMON + tile + SIG + body


def _fwd_source(dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair, nv: Pair) -> str:
    return _source(_FWD_BODY, dt, k, s, p, d, nv)


def _wgt_source(dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair, nv: Pair) -> str:
    return _source(_WGT_BODY, dt, k, s, p, d, nv)


def forward(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    s: Pair,
    p: Pair,
    d: Pair,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """conv2d, one group, float32: NCHW output with the bias added."""
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    ho, wo = out_hw((h, wd), (kh, kw), s, p, d)
    wm = np.ascontiguousarray(np.transpose(w, (2, 3, 1, 0)).reshape(kh * kw * c, o))
    ok = out is not None and out.shape == (n, o, ho, wo) and out.dtype == x.dtype and out.flags.c_contiguous
    y = out if ok else np.empty((n, o, ho, wo), dtype=x.dtype)
    fn = function(_fwd_source, (x.dtype,), (kh, kw), s, p, d, (_nv(o), 0))
    park_blas_workers()
    fn([x, wm, None if b is None else np.ascontiguousarray(b), y], [n, c, h, wd, o, ho, wo])
    if out is not None and not ok:
        np.copyto(out, y)
        return out
    return y


def grad_weight(
    g: np.ndarray, x: np.ndarray, w_shape: tuple, s: Pair, p: Pair, d: Pair, out: np.ndarray | None = None
) -> np.ndarray:
    """d(conv2d)/d(w), one group, float32: per-thread (K, O) sums over images, then (O, C, kH, kW)."""
    g = np.ascontiguousarray(g)
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    o, _, kh, kw = w_shape
    ho, wo = g.shape[2:]
    k = kh * kw * c
    threads = max(1, min(len(os.sched_getaffinity(0)), n))
    part = np.zeros((threads, k, o), dtype=g.dtype)  # blocks of threads that never start stay 0
    fn = function(_wgt_source, (g.dtype,), (kh, kw), s, p, d, (_nv(o), 0))
    park_blas_workers()
    fn([g, x, part], [n, c, h, wd, o, ho, wo, threads])
    acc = part[0] if threads == 1 else part.sum(axis=0)
    res = out if out is not None else np.empty((o, c, kh, kw), dtype=g.dtype)
    np.copyto(res, acc.reshape(kh, kw, c, o).transpose(3, 2, 0, 1))
    return res
