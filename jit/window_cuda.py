"""Window operators as CUDA kernels: pooling and its gradients, im2col/col2im convolution.

The CUDA backend needs the window operators on the device, and the emulated CUDA device must
run the very same kernels so that CI checks them. Every kernel here is CUDA C with the
generated kernels' ABI (jit/runtime.py: arrays, then int64 sizes), compiled and launched
through a backend's `compile`/`load` and its program call, with the launch shape of a
grid-stride loop over one thread per output element (`launch_shape`, jit/render_cuda.py's
BLOCKS_AND_THREADS rule). So on "cuda" they are NVRTC images launched by CuPy, and on
"cuda-emulated" the same source built for the host with the emulation prelude.

- Pooling: one thread per output element scans its window in row-major offset order. The
  max-pool gradient is a gather with no atomics: a first kernel records each window's winning
  offset (the first maximum, NaN first, padding -1: the reference's argmax), then one thread per
  input element adds the cotangents of the windows that chose it, by kernel offset (the
  reference's summation order, so float results are the reference's bits). The average pool's
  gradient gathers each window's share the same way.
- Convolution (`conv2d`, `conv2d_grad_input`, `conv2d_grad_weight`, any groups): im2col into a
  (groups, N*H_out*W_out, kH*kW*C_per_group) column matrix, one batched GEMM through the
  backend (`gemm`: NumPy's on the emulated device, cuBLAS on a GPU), and layout kernels between
  NCHW and the GEMM's rows (bias added there). The input gradient is GEMM then col2im, a gather
  over kernel offsets (no atomics). The CUDA backend prefers cuDNN and comes here when cuDNN is
  missing (jit/backend/cuda.py); the emulated device always comes here.

Dtypes: pooling takes float32, float64 and the integer dtypes (average pooling of integers
gives float64, as the reference); convolution takes float32 and float64 with one dtype
throughout. `supported` says which; everything else (float16, bool, mixed dtypes) stays with
the backend's host path. `LAUNCHES` counts launches per (backend, kernel), which tests read.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from jit import types
from jit.render_cuda import BLOCK
from ops.settings import SETTINGS

Pair = tuple[int, int]

#: launches per (backend name, kernel name) in this process (tests check the device ran them)
LAUNCHES: Counter = Counter()
_lock = threading.Lock()

#: NVRTC has no <stdint.h>; the emulator keeps these typedefs in the source's namespace
PRELUDE = r"""typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INFINITY __int_as_float(0x7f800000)
"""

#: the grid-stride loop over one thread per element, `i` the element
LOOP = "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n0; i += (int64_t)gridDim.x * blockDim.x) {\n"

_INTS = frozenset(np.dtype(t) for t in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"))
_FLOATS = frozenset(np.dtype(t) for t in ("f4", "f8"))


def launch_shape(total: int) -> tuple[int, int]:
    """(blocks, threads per block) of a grid-stride loop over `total` elements (render_cuda's rule)."""
    return max(1, min(-(-total // BLOCK), 65535)), BLOCK


def supported(op: str, dtypes: list[np.dtype]) -> bool:
    """Whether `op` on inputs of these dtypes has a CUDA kernel here (else: the host path)."""
    dts = [np.dtype(d) for d in dtypes]
    if op in ("max_pool2d", "avg_pool2d"):
        return dts[0] in _FLOATS | _INTS
    if op == "max_pool2d_grad":
        return dts[0] in _FLOATS and dts[1] in _FLOATS | _INTS
    if op == "avg_pool2d_grad":
        return dts[0] in _FLOATS
    if op.startswith("conv2d"):
        return dts[0] in _FLOATS and all(d == dts[0] for d in dts)
    return False


def _geometry(k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    vals = (*k, *s, *p, *d)
    return "".join(
        f"#define {n} {int(v)}\n" for n, v in zip(("KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW"), vals)
    )


def _ct(dt: np.dtype) -> str:
    return types.ctype(np.dtype(dt), cuda=True)


def _sig(arrays: list[str], ints: int) -> str:
    ps = arrays + [f"int64_t n{k}" for k in range(ints)]
    return 'extern "C" __global__ void lg_kernel(' + ", ".join(ps) + ") {\n"


# -- pooling ---------------------------------------------------------------------------------

#: the window of output element i (plane-major (plane, oh, ow)); sizes n1..n4 = H, W, HO, WO
_OUT_POS = """    const int64_t H = n1, W = n2, HO = n3, WO = n4;
    const int64_t ow = i % WO, oh = (i / WO) % HO, pl = i / (WO * HO);
"""

#: the windows holding input element i (plane-major (plane, ih, iw)): for each kernel offset o
#: whose window exists, `j` is that window's output element
_IN_WINDOWS = """    const int64_t H = n1, W = n2, HO = n3, WO = n4;
    const int64_t iw = i % W, ih = (i / W) % H, pl = i / (W * H);
    for (int o = 0; o < KH * KW; o++) {
      const int64_t th = ih + PH - (o / KW) * DH, tw = iw + PW - (o % KW) * DW;
      if (th < 0 || tw < 0 || th % SH || tw % SW) continue;
      const int64_t oh = th / SH, ow = tw / SW;
      if (oh >= HO || ow >= WO) continue;
      const int64_t j = (pl * HO + oh) * WO + ow;
"""


def _max_pool_source(xdt: np.dtype, argmax: bool, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    """Each output's window maximum (argmax=False) or its winning offset, -1 for padding."""
    xdt = np.dtype(xdt)
    bits = 8 * xdt.itemsize
    fill = (
        "(-INFINITY)"
        if xdt.kind == "f"
        else ("0" if xdt.kind == "u" else f"((XT)(-{2 ** (bits - 1) - 1}LL - 1))")
    )
    out = "int32_t" if argmax else "XT"
    return (
        PRELUDE
        + f"typedef {_ct(xdt)} XT;\n#define FILL {fill}\n"
        + _geometry(k, s, p, d)
        + _sig(["const XT *__restrict__ a0", f"{out} *__restrict__ a1"], 5)
        + LOOP
        + _OUT_POS
        + """    const XT *xp = a0 + pl * H * W;
    XT m = (XT)FILL; int32_t a = -1;
    for (int o = 0; o < KH * KW; o++) {
      const int64_t ih = oh * SH - PH + (o / KW) * DH, iw = ow * SW - PW + (o % KW) * DW;
      const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
      const XT v = inside ? xp[ih * W + iw] : (XT)FILL;
      /* the first maximum in offset order; the first NaN beats any number (np.maximum, argmax) */
      if (o == 0) { m = v; a = inside ? 0 : -1; }
      else if (v > m || (v != v && m == m)) { m = v; a = o; }
    }
"""
        + ("    a1[i] = a;\n" if argmax else "    a1[i] = m;\n")
        + "  }\n}\n"
    )


def _max_pool_grad_source(gdt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    """Each input element's sum of the cotangents of the windows whose winner it is."""
    return (
        PRELUDE
        + f"typedef {_ct(gdt)} GT;\n"
        + _geometry(k, s, p, d)
        + _sig(["const GT *__restrict__ a0", "const int32_t *__restrict__ a1", "GT *__restrict__ a2"], 5)
        + LOOP
        + "    GT acc = 0;\n"
        + _IN_WINDOWS
        + "      if (a1[j] == o) acc += a0[j];\n    }\n    a2[i] = acc;\n  }\n}\n"
    )


#: the number of real (not padding) elements in window (oh, ow)
_REAL_COUNT = """      const int64_t h0 = oh * SH - PH, w0 = ow * SW - PW;
      const int64_t rh = (h0 + KH < H ? h0 + KH : H) - (h0 > 0 ? h0 : 0);
      const int64_t rw = (w0 + KW < W ? w0 + KW : W) - (w0 > 0 ? w0 : 0);
"""


def _avg_pool_source(xdt: np.dtype, ydt: np.dtype, count_pad: bool, k: Pair, s: Pair, p: Pair) -> str:
    """Each output's window mean: the sum in the output's precision (float32 for float16), divided."""
    acc = "float" if np.dtype(ydt).itemsize <= 4 else "double"
    count = "(KH * KW)" if count_pad else "(rh * rw)"
    return (
        PRELUDE
        + f"typedef {_ct(xdt)} XT;\ntypedef {_ct(ydt)} YT;\ntypedef {acc} AT;\n"
        + _geometry(k, s, p, (1, 1))
        + _sig(["const XT *__restrict__ a0", "YT *__restrict__ a1"], 5)
        + LOOP
        + _OUT_POS
        + """    const XT *xp = a0 + pl * H * W;
    AT sum = 0;
    for (int o = 0; o < KH * KW; o++) {
      const int64_t ih = oh * SH - PH + o / KW, iw = ow * SW - PW + o % KW;
      if (ih >= 0 && ih < H && iw >= 0 && iw < W) sum += (AT)xp[ih * W + iw];
    }
"""
        + _REAL_COUNT
        + f"    a1[i] = (YT)(sum / (AT){count});\n  }}\n}}\n"
    )


def _avg_pool_grad_source(gdt: np.dtype, count_pad: bool, k: Pair, s: Pair, p: Pair) -> str:
    """Each input element's sum, by kernel offset, of its windows' cotangent shares."""
    count = "(KH * KW)" if count_pad else "(rh * rw)"
    return (
        PRELUDE
        + f"typedef {_ct(gdt)} GT;\n"
        + _geometry(k, s, p, (1, 1))
        + _sig(["const GT *__restrict__ a0", "GT *__restrict__ a1"], 5)
        + LOOP
        + "    GT acc = 0;\n"
        + _IN_WINDOWS
        + _REAL_COUNT
        + f"      acc += a0[j] / (GT){count};\n    }}\n    a1[i] = acc;\n  }}\n}}\n"
    )


# -- convolution: im2col, col2im and the layouts around the GEMM ------------------------------
#
# Columns are (G, P, K): group, output pixel (n, oh, ow), window element (kh, kw, c in group);
# sizes n1..n7 = C, H, W, HO, WO, CP (channels per group), N.

_COLS_POS = """    const int64_t C = n1, H = n2, W = n3, HO = n4, WO = n5, CP = n6, N = n7;
    const int64_t K = KH * KW * CP, P = N * HO * WO;
"""


def _im2col_source(dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    """cols[g, (n, oh, ow), (kh, kw, c)] = x[n, g*CP + c, ih, iw], 0 in the padding."""
    return (
        PRELUDE
        + f"typedef {_ct(dt)} T;\n"
        + _geometry(k, s, p, d)
        + _sig(["const T *__restrict__ a0", "T *__restrict__ a1"], 8)
        + LOOP
        + _COLS_POS
        + """    const int64_t c = i % CP, o = (i / CP) % (KH * KW), r = (i / K) % P, g = i / (K * P);
    const int64_t ow = r % WO, oh = (r / WO) % HO, n = r / (WO * HO);
    const int64_t ih = oh * SH - PH + (o / KW) * DH, iw = ow * SW - PW + (o % KW) * DW;
    a1[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? a0[((n * C + g * CP + c) * H + ih) * W + iw] : (T)0;
  }
}
"""
    )


def _col2im_source(dt: np.dtype, k: Pair, s: Pair, p: Pair, d: Pair) -> str:
    """dx[n, c, ih, iw]: the sum, by kernel offset, of the column entries that read it."""
    return (
        PRELUDE
        + f"typedef {_ct(dt)} T;\n"
        + _geometry(k, s, p, d)
        + _sig(["const T *__restrict__ a0", "T *__restrict__ a1"], 8)
        + LOOP
        + _COLS_POS
        + """    const int64_t iw = i % W, ih = (i / W) % H, ch = (i / (W * H)) % C, n = i / (W * H * C);
    const int64_t g = ch / CP, c = ch % CP;
    T acc = 0;
    for (int o = 0; o < KH * KW; o++) {
      const int64_t th = ih + PH - (o / KW) * DH, tw = iw + PW - (o % KW) * DW;
      if (th < 0 || tw < 0 || th % SH || tw % SW) continue;
      const int64_t oh = th / SH, ow = tw / SW;
      if (oh >= HO || ow >= WO) continue;
      acc += a0[(g * P + (n * HO + oh) * WO + ow) * K + o * CP + c];
    }
    a1[i] = acc;
  }
}
"""
    )


# Rows (G, N*HO*WO, OG) <-> NCHW (N, G*OG, HO, WO); sizes n1..n4 = G, OG, M (= HO*WO), N.
_ROWS_POS = """    const int64_t G = n1, OG = n2, M = n3, N = n4;
    const int64_t m = i % M, ch = (i / M) % (G * OG), n = i / (M * G * OG);
    const int64_t r = (ch / OG * N * M + n * M + m) * OG + ch % OG;
"""


def _rows_to_nchw_source(dt: np.dtype, bias: bool) -> str:
    """y[n, o, oh, ow] = rows[g, (n, oh, ow), o in group] (+ b[o]): the GEMM's output as NCHW."""
    arrays = (
        ["const T *__restrict__ rows"] + (["const T *__restrict__ b"] if bias else []) + ["T *__restrict__ y"]
    )
    return (
        PRELUDE
        + f"typedef {_ct(dt)} T;\n"
        + _sig(arrays, 5)
        + LOOP
        + _ROWS_POS
        + ("    y[i] = rows[r] + b[ch];\n" if bias else "    y[i] = rows[r];\n")
        + "  }\n}\n"
    )


def _copy_source(dt: np.dtype, pos: str, assign: str) -> str:
    """A one-to-one layout copy a0 -> a1: `pos` computes the index pair, `assign` moves one element."""
    return (
        PRELUDE
        + f"typedef {_ct(dt)} T;\n"
        + _sig(["const T *__restrict__ a0", "T *__restrict__ a1"], 5)
        + LOOP
        + pos
        + f"    {assign}\n  }}\n}}\n"
    )


def _nchw_to_rows_source(dt: np.dtype) -> str:
    """rows[g, (n, oh, ow), o in group] = g[n, o, oh, ow]: a cotangent as the GEMM's operand."""
    return _copy_source(dt, _ROWS_POS, "a1[r] = a0[i];")


# Weight (G*OG, CP, KH, KW) <-> matrices (G, K, OG) with K = (kh, kw, c); sizes n1..n4 = G, OG, CP, KK.
_WMAT_POS = """    const int64_t G = n1, OG = n2, CP = n3, KK = n4;
    const int64_t kk = i % KK, c = (i / KK) % CP, o = i / (KK * CP), g = o / OG;
    const int64_t j = (g * KK * CP + kk * CP + c) * OG + o % OG;
    (void)G;
"""


def _weight_to_mat_source(dt: np.dtype) -> str:
    """The weight as each group's (K, OG) GEMM operand."""
    return _copy_source(dt, _WMAT_POS, "a1[j] = a0[i];")


def _mat_to_weight_source(dt: np.dtype) -> str:
    """Each group's (K, OG) product back in the weight's layout."""
    return _copy_source(dt, _WMAT_POS, "a1[i] = a0[j];")


# -- compile, load, launch --------------------------------------------------------------------


#: (backend, numeric mode, builder, its arguments) -> the loaded program
_programs: dict[tuple, Any] = {}


def _program(be: Any, build: Callable[..., str], args: tuple) -> Any:
    # the numeric mode is in the key: the compiler's flags depend on it
    key = (be.name, id(be), SETTINGS.fast_math, build, args)
    prog = _programs.get(key)
    if prog is None:
        prog = be.load(be.compile(build(*args), name=build.__name__.strip("_")))
        with _lock:
            _programs[key] = prog
    return prog


def source(build: Callable[..., str], *args: Any) -> str:
    """The CUDA C of a kernel builder for these dtypes and window (tests compile it with NVRTC)."""
    return build(*args)


def launch(be: Any, build: Callable[..., str], args: tuple, arrays: list, ints: list[int]) -> None:
    """Run kernel build(*args) on `be` over n0 = ints[0] elements (compiled and loaded once)."""
    key = tuple(tuple(int(v) for v in a) if isinstance(a, tuple) else a for a in args)
    prog = _program(be, build, key)
    if ints[0] == 0:
        return
    grid, block = launch_shape(ints[0])
    prog(arrays, ints, (), (), grid, block)
    with _lock:
        LAUNCHES[(be.name, build.__name__.strip("_").removesuffix("_source"))] += 1
