"""Implicit-GEMM convolution with AVX-512 or AVX2 register tiles: no column matrix at all.

On these machines OpenBLAS runs the convolution's GEMM shapes (tens of thousands of
pixel rows, a contraction of kH*kW*C, 64 output channels) at about 60% of the FMA peak, and
the chunked im2col of jit/conv.py adds a copy kH*kW times the image on top. Here one
image at a time is laid out padded and channel-last in a private buffer (a few tens of KB,
in L1/L2), and a register tile of the product is accumulated straight from it: each
pixel's window row is a contiguous run of kW*C values of that buffer, so the "columns" are
just six pointers. Forward: 6 output pixels x VW*NV output channels, broadcasts from the
image, vectors from the weights packed block by block ((O / (VW*NV), kH*kW*C, VW*NV)), a
few window rows' slice of a block at a time so that it stays in L1 (1.25-1.5x faster than
sweeping the whole window per tile, whose (kH*kW*C, O) matrix spilled L2: conv 5x5 64 -> 64
on 14 x 14, batch 256, 2 threads, 112 -> 160 GFLOP/s). Weight gradient: 6 window elements x
VW*NV output channels, broadcasts from the image, vectors from the image's cotangent laid
out pixel-major, summed over the image's pixels into one (K, O) block per chunk of
consecutive images (`WEIGHT_CHUNKS` at most, a fixed count: the same bits with one thread or
many, whichever thread takes a chunk), then the blocks in order. VW is the
vector's float32 lanes (16 with AVX-512F, 8 with AVX2 and FMA) and NV the vectors per tile
row that the ISA's registers hold (6 x 4 zmm, 6 x 2 ymm accumulators).

float32 only, output channels a multiple of VW (`applies`); the input gradient at stride 1
is the forward of the cotangent with the flipped kernel (jit/conv.py). Sums run in a
different order from BLAS's: equal within float32 rounding, not bit for bit.
"""

from __future__ import annotations

import functools

import numpy as np

from jit import compile_c
from jit.blas_quiet import park_blas_workers
from jit.window import HEAD, SIG, function, geometry
from ops.conv import out_hw
from ops.settings import SETTINGS

Pair = tuple[int, int]

#: the weight gradient's chunks of images (one partial sum each): enough for 16 threads
WEIGHT_CHUNKS = 16


@functools.cache
def vector_width() -> int:
    """float32 lanes of the register tiles built here: 16 (AVX-512F), 8 (AVX2 with FMA) or 0 (none).

    The kernels are compiled with -march=native, so they can use only what this CPU has.
    """
    if "-march=native" not in compile_c.flags():
        return 0
    flags = compile_c.cpu_flags()
    if "avx512f" in flags:
        return 16
    return 8 if {"avx2", "fma"} <= flags else 0


@functools.cache
def l2_slice() -> int:
    """Bytes of the weight slice one forward tile may stream: half a core's L2 (512 KB if unknown).

    The slice (kH*kW*C rows of VW*NV channels) must stay in L2, or each tile rereads it from
    L3 and BLAS is faster.
    """
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip().upper()
        scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
        return int(text.rstrip("KM")) * scale // 2
    except (OSError, ValueError):
        return 512 * 1024


def applies(dtype: np.dtype, w_shape: tuple) -> bool:
    """float32, output channels a multiple of the vector width, a weight slice that fits L2, AVX-512F or AVX2.

    LAZYGRAPH_CONV_SIMD=0 turns these kernels off (the chunked BLAS path then runs).
    """
    o, c, kh, kw = w_shape
    vw = vector_width()
    return (
        np.dtype(dtype) == np.float32
        and vw > 0
        and o > 0
        and o % vw == 0
        and kh * kw * c * vw * _nv(o) * 4 <= l2_slice()
        and SETTINGS.conv_simd
    )


def _nv(o: int) -> int:
    """Vectors per tile row: AVX-512's 32 registers hold 6 x 4 accumulators, AVX2's 16 hold 6 x 2.

    The largest count of the ISA's choices dividing O / lanes.
    """
    vw = vector_width() or 16
    return next(v for v in ((4, 3, 2, 1) if vw == 16 else (2, 1)) if (o // vw) % v == 0)


# The padded, channel-last copy of image n, shared by both kernels.
_COMMON = """#include <immintrin.h>
typedef float T;
#if VW == 16
typedef __m512 V;
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VZERO _mm512_setzero_ps
#define VFMA _mm512_fmadd_ps
#else
typedef __m256 V;
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VZERO _mm256_setzero_ps
#define VFMA _mm256_fmadd_ps
#endif
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

# acc[r][v] += a_r[j] * b[j][v]: R rows of broadcasts, NV vectors of VW columns per step
_FWD_TILE = """
static inline __attribute__((always_inline)) void fwd_tile(const int R, const T *const *base, const T *ws,
    int kh0, int kh1, int64_t C, int64_t WP, T *yl, int64_t ldy) {
  V acc[6][NV];
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[r][v] = kh0 == 0 ? VZERO() : VLOAD(yl + r * ldy + VW * v);
  for (int kh = kh0; kh < kh1; kh++) {
    /* undilated, a window row is one run of KW*C values; dilated, KW runs of C */
    const int runs = DW == 1 ? 1 : KW;
    const int64_t len = DW == 1 ? KW * C : C;
    for (int q = 0; q < runs; q++) {
      const int64_t off = (kh * DH * WP + q * DW) * C;
      const T *wk = ws + ((int64_t)kh * KW + q) * C * (VW * NV);
      const T *a[6];
      #pragma GCC unroll 6
      for (int r = 0; r < R; r++) a[r] = base[r] + off;
      for (int64_t j = 0; j < len; j++) {
        V b[NV];
        #pragma GCC unroll 4
        for (int v = 0; v < NV; v++) b[v] = VLOAD(wk + j * (VW * NV) + VW * v);
        #pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
          const V s = VSET1(a[r][j]);
          #pragma GCC unroll 4
          for (int v = 0; v < NV; v++) acc[r][v] = VFMA(s, b[v], acc[r][v]);
        }
      }
    }
  }
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) VSTORE(yl + r * ldy + VW * v, acc[r][v]);
}
"""

_FWD_BODY = """  const T *x = (const T *)ptrs[0], *wm = (const T *)ptrs[1], *b = (const T *)ptrs[2]; T *y = (T *)ptrs[3];
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], O = dims[4], HO = dims[5], WO = dims[6];
  const int64_t HP = H + 2 * PH, WP = W + 2 * PW, M = HO * WO, K = KH * KW * C;
  /* each output pixel's window origin in the padded image (no divisions in the tile loops) */
  int64_t *pix = (int64_t *)malloc(sizeof(int64_t) * (M > 0 ? M : 1));
  for (int64_t p = 0; p < M; p++) pix[p] = ((p / WO) * SH * WP + (p % WO) * SW) * C;
  #pragma omp parallel
  {
    T *xp = (T *)malloc(sizeof(T) * (HP * WP * C + 16));
    T *yl = (T *)malloc(sizeof(T) * (M * O + 16));  /* this image's output, pixel-major */
    #pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < N; n++) {
      pad_nhwc(x + n * C * H * W, C, H, W, xp);
      /* one block of output channels, then a few window rows at a time: their slice of the
         block's weights (at most 16 KB: one row of KW*C x VW*NV at C = 64 with AVX2, the
         whole window at C = 1) stays in L1 while every pixel's tile passes; the tiles'
         partial sums wait in yl (the same additions in the same order as one pass over the
         whole window: float32 in registers or in memory) */
      const int64_t row_bytes = (int64_t)KW * C * (VW * NV) * (int64_t)sizeof(T);
      const int KC = row_bytes >= 16384 ? 1 : (int)(16384 / (row_bytes > 0 ? row_bytes : 1));
      for (int64_t ob = 0; ob < O; ob += VW * NV) {
        const T *ws = wm + ob * K;  /* this block's (K, VW*NV) slice, contiguous */
        for (int kh0 = 0; kh0 < KH; kh0 += KC) {
          const int kh1 = kh0 + KC < KH ? kh0 + KC : KH;
          for (int64_t p0 = 0; p0 < M; p0 += 6) {
            const int R = M - p0 < 6 ? (int)(M - p0) : 6;
            const T *base[6];
            for (int r = 0; r < R; r++) base[r] = xp + pix[p0 + r];
            T *dst = yl + p0 * O + ob;
            switch (R) {
              case 6: fwd_tile(6, base, ws, kh0, kh1, C, WP, dst, O); break;
              case 5: fwd_tile(5, base, ws, kh0, kh1, C, WP, dst, O); break;
              case 4: fwd_tile(4, base, ws, kh0, kh1, C, WP, dst, O); break;
              case 3: fwd_tile(3, base, ws, kh0, kh1, C, WP, dst, O); break;
              case 2: fwd_tile(2, base, ws, kh0, kh1, C, WP, dst, O); break;
              default: fwd_tile(1, base, ws, kh0, kh1, C, WP, dst, O); break;
            }
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
  free(pix);
}
"""

# acc[r][v] += x[pixel p, window element k0+r] * g[p][v], over the image's pixels
_WGT_TILE = """
static inline __attribute__((always_inline)) void wgt_tile(const int R, const T *xk, int64_t C, int64_t WP,
    int64_t WO, const T *gl, int64_t M, int64_t O, T *S) {
  V acc[6][NV];
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[r][v] = VLOAD(S + r * O + VW * v);
  /* pixel by pixel in row-major order; along an output row a pixel's window starts SW*C
     values after the previous one's: a pointer step and six broadcasts at fixed offsets (a
     table of pixel offsets cost an index load and six address computations a step) */
  const int64_t HO = WO > 0 ? M / WO : 0;
  for (int64_t oh = 0; oh < HO; oh++) {
    const T *a = xk + oh * SH * WP * C, *gp = gl + oh * WO * (VW * NV);
    for (int64_t ow = 0; ow < WO; ow++, a += SW * C, gp += VW * NV) {
      V g[NV];
      #pragma GCC unroll 4
      for (int v = 0; v < NV; v++) g[v] = VLOAD(gp + VW * v);
      #pragma GCC unroll 6
      for (int r = 0; r < R; r++) {
        const V s = VSET1(a[r]);
        #pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[r][v] = VFMA(s, g[v], acc[r][v]);
      }
    }
  }
  #pragma GCC unroll 6
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int v = 0; v < NV; v++) VSTORE(S + r * O + VW * v, acc[r][v]);
}
"""

_WGT_BODY = """  const T *g = (const T *)ptrs[0], *x = (const T *)ptrs[1]; T *part = (T *)ptrs[2];
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], O = dims[4], HO = dims[5], WO = dims[6];
  const int64_t HP = H + 2 * PH, WP = W + 2 * PW, M = HO * WO, K = KH * KW * C, NCH = dims[7];
  /* part: one (K, O) block of sums per chunk of consecutive images (window elements in
     (kh, kw, c) order), whichever thread runs it: the sums' order, so their bits, do not
     depend on the threads or on which one took which chunk */
  #pragma omp parallel
  {
    T *xp = (T *)malloc(sizeof(T) * (HP * WP * C + 16));
    /* this image's cotangent in blocks of VW*NV channels, pixel-major within a block: a block
       is one contiguous run (a stride of O floats would crowd a few cache sets) */
    T *gl = (T *)malloc(sizeof(T) * (M * O + 16));
    #pragma omp for schedule(dynamic, 1)
    for (int64_t ch = 0; ch < NCH; ch++) {
    T *S = part + ch * K * O;
    for (int64_t n = N * ch / NCH; n < N * (ch + 1) / NCH; n++) {
      pad_nhwc(x + n * C * H * W, C, H, W, xp);
      const T *gn = g + n * O * M;
      for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < M; p++) gl[(o / (VW * NV)) * M * (VW * NV) + p * (VW * NV) + o % (VW * NV)] = gn[o * M + p];
      /* one block of channels at a time: its cotangent columns (M x VW*NV) stay in L1 while
         every window element's pixels stream past them */
      for (int64_t ob = 0; ob < O; ob += VW * NV)
      for (int kh = 0; kh < KH; kh++) {
        /* undilated, a window row is one run of KW*C elements, tiled 6 at a time across its
           (kw, c) pairs: a single-channel first layer fills whole tiles, not one row of six */
        const int runs = DW == 1 ? 1 : KW;
        const int64_t len = DW == 1 ? KW * C : C;
        for (int q = 0; q < runs; q++) {
          const T *xk = xp + (kh * DH * WP + q * DW) * C;
          T *Sk = S + (int64_t)(kh * KW + q) * C * O;
          for (int64_t c0 = 0; c0 < len; c0 += 6) {
            const int R = len - c0 < 6 ? (int)(len - c0) : 6;
            {
              T *dst = Sk + c0 * O + ob;
              switch (R) {
                case 6: wgt_tile(6, xk + c0, C, WP, WO, gl + ob * M, M, O, dst); break;
                case 5: wgt_tile(5, xk + c0, C, WP, WO, gl + ob * M, M, O, dst); break;
                case 4: wgt_tile(4, xk + c0, C, WP, WO, gl + ob * M, M, O, dst); break;
                case 3: wgt_tile(3, xk + c0, C, WP, WO, gl + ob * M, M, O, dst); break;
                case 2: wgt_tile(2, xk + c0, C, WP, WO, gl + ob * M, M, O, dst); break;
                default: wgt_tile(1, xk + c0, C, WP, WO, gl + ob * M, M, O, dst); break;
              }
            }
          }
        }
      }
    }
    }
    free(xp); free(gl);
  }
}
"""


def _source(body: str, dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair, nv: Pair) -> str:
    tile = _FWD_TILE if body is _FWD_BODY else _WGT_TILE
    return (
        HEAD
        + f"#define NV {nv[0]}\n#define VW {nv[1]}\n"
        + geometry(k, s, p, d)
        + _COMMON
        + tile
        + SIG
        + body
    )


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
    blk = _nv(o) * vector_width()
    # (O / blk, K, blk): each block of output channels' weights one contiguous run, window
    # elements in (kh, kw, c) order
    wm = np.transpose(w, (2, 3, 1, 0)).reshape(kh * kw * c, o // blk, blk).transpose(1, 0, 2)
    wm = np.ascontiguousarray(wm)
    ok = out is not None and out.shape == (n, o, ho, wo) and out.dtype == x.dtype and out.flags.c_contiguous
    y = out if ok else np.empty((n, o, ho, wo), dtype=x.dtype)
    fn = function(_fwd_source, (x.dtype,), (kh, kw), s, p, d, (_nv(o), vector_width()))
    park_blas_workers()
    fn([x, wm, None if b is None else np.ascontiguousarray(b), y], [n, c, h, wd, o, ho, wo])
    if out is not None and not ok:
        np.copyto(out, y)
        return out
    return y


def grad_weight(
    g: np.ndarray, x: np.ndarray, w_shape: tuple, s: Pair, p: Pair, d: Pair, out: np.ndarray | None = None
) -> np.ndarray:
    """d(conv2d)/d(w), one group, float32: (K, O) sums per chunk of images, their sum, then (O, C, kH, kW)."""
    g = np.ascontiguousarray(g)
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    o, _, kh, kw = w_shape
    ho, wo = g.shape[2:]
    k = kh * kw * c
    # a fixed number of chunks, not one per thread: the same bits with any number of threads
    chunks = max(1, min(WEIGHT_CHUNKS, n))
    part = np.zeros((chunks, k, o), dtype=g.dtype)
    fn = function(_wgt_source, (g.dtype,), (kh, kw), s, p, d, (_nv(o), vector_width()))
    park_blas_workers()
    fn([g, x, part], [n, c, h, wd, o, ho, wo, chunks])
    acc = part[0] if chunks == 1 else part.sum(axis=0)
    res = out if out is not None else np.empty((o, c, kh, kw), dtype=g.dtype)
    np.copyto(res, acc.reshape(kh, kw, c, o).transpose(3, 2, 0, 1))
    return res
