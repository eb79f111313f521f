"""Window operators lowered to C: max pooling, its gradient, and the im2col gather.

NumPy can express a window operator only as one strided pass per kernel offset, each a
full read (and often a write) of the image; compiled, the whole window loop is one pass
that reads the input once. The window geometry (kernel size, stride, padding, dilation)
and the dtypes are compile-time constants, so the inner loops unroll and one structure
compiles once (the kernel store keeps the library on disk); sizes are runtime arguments.

The kernels give the reference kernels' values exactly (ops/nn.py, ops/window.py,
ops/conv.py): the first maximum of a window in row-major offset order takes the
gradient, NaN propagates and the first NaN wins, padding (-inf, or the integer minimum)
never beats a real element it does not equal, and where windows overlap each element's
contributions are added in the reference's order (by kernel offset). `lower` returns None
for what they do not cover (bool or complex maxima, other operators); callers then run
the reference kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from jit import c_program, compile_c, types
from jit.c_program import CpuProgram as Program
from ops.conv import out_hw
from ops.settings import SETTINGS

Pair = tuple[int, int]

#: dtypes the max-pool kernels take (every real dtype; bool and complex stay with NumPy)
_REAL = frozenset(t for t in types.SUPPORTED if t.kind in "iuf")
#: element copies move bits: any dtype of these sizes (bool, complex64 included)
_BITS = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}

HEAD = """#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
"""

SIG = "void lg_kernel(void **ptrs, const int64_t *dims, const double *fs, const int64_t *is) {\n"


def _fill(dt: np.dtype) -> str:
    """The padding value of a max pool, which never wins a maximum."""
    if dt.kind == "f":
        return "(-INFINITY)"
    if dt.kind == "u":
        return "0"
    return f"INT{8 * dt.itemsize}_MIN"


def geometry(k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    """The window's constants as C macros."""
    names = ("KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW")
    vals = (*k, *s, *p, *d)
    return "".join(f"#define {n} {int(v)}\n" for n, v in zip(names, vals))


# The first maximum in row-major offset order, for a whole row of windows at once (loops
# over the row vectorise): a later element wins only if it is larger, or a NaN where the
# best so far is not (np.maximum's propagation, argmax's first NaN). Padding holds FILL,
# which never wins after the first offset; `at` is the winning offset, -1 for padding.
_ROW_ARGMAX = """
static void row_argmax(const XT *xp, int64_t H, int64_t W, int64_t WO, int64_t oh, XT *best, int32_t *at) {
  for (int o = 0; o < KH * KW; o++) {
    const int kh = o / KW, kw = o % KW;
    const int64_t ih = oh * SH - PH + kh * DH;
    /* the windows of this row whose element at offset o is inside the image: [lo, hi) */
    int64_t lo = 0, hi = WO;
    if (PW > 0) {
      const int64_t need = PW - kw * DW;
      lo = need > 0 ? (need + SW - 1) / SW : 0;
      const int64_t last = W - 1 + PW - kw * DW;
      hi = last < 0 ? 0 : last / SW + 1;
      if (hi > WO) hi = WO;
      if (lo > hi) lo = hi;
    }
    const int row_in = (PH == 0) || (ih >= 0 && ih < H);
    if (!row_in) { lo = 0; hi = 0; }
    const XT *xr = xp + ih * W - PW + kw * DW;
    if (o == 0) {
      for (int64_t ow = 0; ow < lo; ow++) { best[ow] = (XT)FILL; at[ow] = -1; }
      for (int64_t ow = lo; ow < hi; ow++) { best[ow] = xr[ow * SW]; at[ow] = 0; }
      for (int64_t ow = hi; ow < WO; ow++) { best[ow] = (XT)FILL; at[ow] = -1; }
    } else {
      for (int64_t ow = lo; ow < hi; ow++) {
        const XT v = xr[ow * SW], b = best[ow];
        const int win = v > b || (ISNAN(v) && !ISNAN(b));
        best[ow] = win ? v : b;
        at[ow] = win ? o : at[ow];
      }
    }
  }
}
"""

# The common case, one window at a time with the offsets unrolled, which vectorises across
# a row: the first larger element wins. NaN only sets a flag; a plane that has one is
# redone by row_argmax, whose comparisons give NaN its reference meaning.
_WINDOW = """
static inline XT window_max(const XT *xp, int64_t H, int64_t W, int64_t oh, int64_t ow, int32_t *at, int *nan) {
  XT m = 0; int32_t a = -1; int bad = 0;
  #pragma GCC unroll 64
  for (int o = 0; o < KH * KW; o++) {
    const int kh = o / KW, kw = o % KW;
    const int64_t ih = oh * SH - PH + kh * DH, iw = ow * SW - PW + kw * DW;
    const int inside = (PH == 0 && PW == 0) || (ih >= 0 && ih < H && iw >= 0 && iw < W);
    const XT v = inside ? xp[ih * W + iw] : (XT)FILL;
    bad |= ISNAN(v);
    if (o == 0) { m = v; a = inside ? 0 : -1; }
    else { const int w = v > m; a = w ? o : a; m = w ? v : m; }
  }
  *at = a; *nan |= bad;
  return m;
}
"""


def _pool_prelude(xdt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    nan = "((v) != (v))" if xdt.kind == "f" else "0"
    return (
        HEAD
        + f"typedef {types.ctype(xdt)} XT;\n#define FILL {_fill(xdt)}\n#define ISNAN(v) {nan}\n"
        + geometry(k, s, p, d)
        + _ROW_ARGMAX
        + _WINDOW
    )


def _pool_source(xdt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    return (
        _pool_prelude(xdt, k, s, p, d)
        + SIG
        + """  const XT *x = (const XT *)ptrs[0]; XT *y = (XT *)ptrs[1];
  const int64_t planes = dims[0], H = dims[1], W = dims[2], HO = dims[3], WO = dims[4];
  #pragma omp parallel
  {
    int32_t *at = (int32_t *)malloc(sizeof(int32_t) * (WO > 0 ? WO : 1));
    #pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
      const XT *xp = x + pl * H * W; XT *yp = y + pl * HO * WO;
      int nan = 0;
      for (int64_t oh = 0; oh < HO; oh++)
        for (int64_t ow = 0; ow < WO; ow++) { int32_t a; yp[oh * WO + ow] = window_max(xp, H, W, oh, ow, &a, &nan); }
      if (nan)
        for (int64_t oh = 0; oh < HO; oh++) row_argmax(xp, H, W, WO, oh, yp + oh * WO, at);
    }
    free(at);
  }
}
"""
    )


def _pool_grad_source(gdt: np.dtype, xdt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    tile = int(s == k and p == (0, 0) and d == (1, 1))
    return (
        _pool_prelude(xdt, k, s, p, d)
        + f"typedef {types.ctype(gdt)} GT;\n#define TILE {tile}\n"
        + SIG
        + """  const GT *g = (const GT *)ptrs[0]; const XT *x = (const XT *)ptrs[1]; GT *gi = (GT *)ptrs[2];
  const int64_t planes = dims[0], H = dims[1], W = dims[2], HO = dims[3], WO = dims[4];
  #pragma omp parallel
  {
    XT *best = (XT *)malloc(sizeof(XT) * (WO > 0 ? WO : 1));
    int32_t *at = (int32_t *)malloc(sizeof(int32_t) * (HO * WO > 0 ? HO * WO : 1));
    #pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
      const XT *xp = x + pl * H * W; const GT *gp = g + pl * HO * WO; GT *op = gi + pl * H * W;
      /* each window's winner (the exact routine redoes a plane that holds a NaN) */
      int nan = 0;
      for (int64_t oh = 0; oh < HO; oh++)
        for (int64_t ow = 0; ow < WO; ow++) {
          int32_t a;  /* a local, so the store cannot alias the NaN flag: the loop vectorises */
          window_max(xp, H, W, oh, ow, &a, &nan);
          at[oh * WO + ow] = a;
        }
      if (nan)
        for (int64_t oh = 0; oh < HO; oh++) row_argmax(xp, H, W, WO, oh, best, at + oh * WO);
      if (TILE) {
        /* windows tile the image: every element is written once, its window's value or 0 */
        for (int64_t oh = 0; oh < HO; oh++) {
          const GT *gr = gp + oh * WO; const int32_t *ar = at + oh * WO;
          for (int kh = 0; kh < KH; kh++) {
            GT *orow = op + (oh * KH + kh) * W;
            for (int64_t ow = 0; ow < WO; ow++) {
              const GT gv = (GT)(0 + gr[ow]);
              #pragma GCC unroll 64
              for (int kw = 0; kw < KW; kw++) orow[ow * KW + kw] = ar[ow] == kh * KW + kw ? gv : (GT)0;
            }
          }
          for (int kh = 0; kh < KH; kh++)
            for (int64_t iw = WO * KW; iw < W; iw++) op[(oh * KH + kh) * W + iw] = 0;
        }
        for (int64_t i = HO * KH * W; i < H * W; i++) op[i] = 0;
        continue;
      }
      /* one sweep per kernel offset, so where windows overlap an element sums its
         contributions in the reference's (offset) order */
      for (int64_t i = 0; i < H * W; i++) op[i] = 0;
      for (int o = 0; o < KH * KW; o++) {
        const int kh = o / KW, kw = o % KW;
        for (int64_t oh = 0; oh < HO; oh++) {
          const int64_t ih = oh * SH - PH + kh * DH;
          for (int64_t ow = 0; ow < WO; ow++)
            if (at[oh * WO + ow] == o) op[ih * W + ow * SW - PW + kw * DW] += gp[oh * WO + ow];
        }
      }
    }
    free(best); free(at);
  }
}
"""
    )


def _im2col_source(dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    return (
        HEAD
        + f"typedef {_BITS[dt.itemsize]} T;\n"
        + geometry(k, s, p, d)
        + SIG
        + """  const T *x = (const T *)ptrs[0]; T *out = (T *)ptrs[1];
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], HO = dims[4], WO = dims[5];
  const int64_t HP = H + 2 * PH, WP = W + 2 * PW;
  #pragma omp parallel
  {
    /* one image at a time: padded and channel-last in a private buffer, then every
       window row is KW runs of C channels (one run of KW*C when undilated) */
    T *xp = (T *)malloc(sizeof(T) * (HP * WP * C > 0 ? HP * WP * C : 1));
    #pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
      memset(xp, 0, sizeof(T) * HP * WP * C);
      const T *xn = x + n * C * H * W;
      for (int64_t c = 0; c < C; c++)
        for (int64_t ih = 0; ih < H; ih++) {
          const T *src = xn + (c * H + ih) * W; T *dst = xp + ((ih + PH) * WP + PW) * C + c;
          for (int64_t iw = 0; iw < W; iw++) dst[iw * C] = src[iw];
        }
      T *on = out + n * HO * WO * KH * KW * C;
      for (int64_t oh = 0; oh < HO; oh++)
        for (int64_t ow = 0; ow < WO; ow++) {
          T *row = on + (oh * WO + ow) * KH * KW * C;
          for (int kh = 0; kh < KH; kh++) {
            const T *src = xp + ((oh * SH + kh * DH) * WP + ow * SW) * C;
            if (DW == 1) memcpy(row + kh * KW * C, src, sizeof(T) * KW * C);
            else for (int kw = 0; kw < KW; kw++) memcpy(row + (kh * KW + kw) * C, src + kw * DW * C, sizeof(T) * C);
          }
        }
    }
    free(xp);
  }
}
"""
    )


@functools.cache
def _compiled(fast: bool, build: Callable[..., str], *args: Any) -> Program:
    # `fast` (the numeric mode) is in the cache key: the library's flags depend on it
    return c_program.load(compile_c.compile_library(build(*args)))


def function(build: Callable[..., str], dtypes: tuple, *geometry_args: Pair) -> Program:
    """The compiled `lg_kernel` of build(*dtypes, *window): source built and loaded once per structure.

    Launches look it up by the builder and its arguments, so a chunked convolution does not
    rebuild and rehash the source on every chunk. The program is the CPU backend's: launched
    as `fn(arrays, dims)` (None in `arrays` is a null pointer).
    """
    window = (tuple(int(v) for v in a) for a in geometry_args)
    return _compiled(SETTINGS.fast_math, build, *dtypes, *window)


def _out(shape: tuple, dtype: np.dtype, out: np.ndarray | None) -> np.ndarray:
    if out is not None and out.shape == shape and out.dtype == dtype and out.flags.c_contiguous:
        return out
    return np.empty(shape, dtype=dtype)


def _max_pool2d(x: np.ndarray, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair, out=None):
    x = np.ascontiguousarray(x)
    n, c, h, w = x.shape
    ho, wo = out_hw((h, w), kernel_size, stride, padding, dilation)
    y = _out((n, c, ho, wo), x.dtype, out)
    fn = function(_pool_source, (x.dtype,), kernel_size, stride, padding, dilation)
    fn([x, y], [n * c, h, w, ho, wo])
    return y


def _max_pool2d_grad(
    g: np.ndarray,
    x: np.ndarray,
    y: Any = None,
    *,
    kernel_size: Pair,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    out=None,
):
    # y (the forward's maxima) is not needed: each window's winner is found again from x
    g = np.ascontiguousarray(g)
    x = np.ascontiguousarray(x)
    n, c, h, w = x.shape
    ho, wo = g.shape[2:]
    gi = _out(x.shape, g.dtype, out)
    fn = function(_pool_grad_source, (g.dtype, x.dtype), kernel_size, stride, padding, dilation)
    fn([g, x, gi], [n * c, h, w, ho, wo])
    return gi


def im2col_into(x: np.ndarray, cols: np.ndarray, k: Pair, s: Pair, p: Pair, d: Pair) -> None:
    """Fill C-contiguous `cols` (N, H_out, W_out, kH, kW, C) with the windows of NCHW `x`."""
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    ho, wo = cols.shape[1:3]
    fn = function(_im2col_source, (x.dtype,), k, s, p, d)
    fn([x, cols], [n, c, h, wd, ho, wo])


def im2col(x: np.ndarray, k: Pair, s: Pair, p: Pair, d: Pair) -> np.ndarray:
    """Row columns (N, H_out, W_out, kH, kW, C) of NCHW x: ops/conv.py's `im2col_rows`, compiled."""
    n, c, h, wd = np.shape(x)
    ho, wo = out_hw((h, wd), k, s, p, d)
    cols = np.empty((n, ho, wo, k[0], k[1], c), dtype=np.asarray(x).dtype)
    im2col_into(np.asarray(x), cols, k, s, p, d)
    return cols


def supported(op: str, dtypes: list[np.dtype]) -> bool:
    """Whether `op` on inputs of these dtypes has a compiled kernel (else: the reference)."""
    if op == "max_pool2d":
        return dtypes[0] in _REAL
    if op == "max_pool2d_grad":
        return dtypes[0] in _REAL and dtypes[1] in _REAL
    return False


#: operator name -> compiled implementation, called like the operator's kernel (plus out=)
KERNELS: dict[str, Callable] = {
    "max_pool2d": _max_pool2d,
    "max_pool2d_grad": _max_pool2d_grad,
}


def available() -> bool:
    """Whether window kernels can be compiled here (a working C compiler)."""
    return compile_c.available()
