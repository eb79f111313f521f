"""CUDA C for NVRTC: one `extern "C" __global__ lg_kernel` per fused region.

Assignment to CUDA: Blocks is a grid-stride loop over blockIdx.x, Threads a block-stride
loop over threadIdx.x, BlocksAndThreads a grid-stride loop over the global thread index,
Sequential a plain loop. A reduction whose loop uses threads ends with a block reduction
(warp shuffles, one value per warp through shared memory, then thread 0 combines the warps'
values in order; lanes past the last warp must not re-read a warp's value) that every thread of the
block enters — the constraints guarantee the enclosing loops are uniform across the block —
and whose result is broadcast, with __syncthreads() between the fused stages. Stores are
guarded so that values computed redundantly by several threads or blocks are written once.
"""

from __future__ import annotations

import numpy as np

from jit import types
from jit.complex_c import prelude as complex_prelude
from jit.complex_c import uses_complex
from jit.ir import Par
from jit.layout import Layout
from jit.render import Renderer
from jit.spec import Spec

PRELUDE = r"""typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
// operator templates are filled with C's type names (jit/spec.py): C's _Bool is C++'s bool
#define _Bool bool
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)

template <typename T> __device__ __forceinline__ T lg_floordiv_int(T a, T b) {
  if (b == 0) return 0;
  if (b == (T)-1 && (T)-1 < 0) return (T)(0 - (uint64_t)a);
  T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q; }
template <typename T> __device__ __forceinline__ T lg_remainder_int(T a, T b) {
  if (b == 0 || (b == (T)-1 && (T)-1 < 0)) return 0;
  T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
template <typename T> __device__ __forceinline__ T lg_floordiv_flt(T a, T b) {
  if (b == 0) return a / b;
  T mod = fmod(a, b); T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div != 0) { T f = floor(div); if (div - f > (T)0.5) f += 1; return f; }
  return copysign((T)0, a / b); }
template <typename T> __device__ __forceinline__ T lg_remainder_flt(T a, T b) {
  T mod = fmod(a, b); if (b == 0) return mod;
  if (mod != 0) { if ((b < 0) != (mod < 0)) mod += b; } else { mod = copysign((T)0, b); }
  return mod; }
template <typename T> __device__ __forceinline__ T lg_shl(T a, T b) {
  return (b < 0 || b >= (T)(8 * sizeof(T))) ? (T)0 : (T)((uint64_t)a << b); }
template <typename T> __device__ __forceinline__ T lg_shr(T a, T b) {
  return (b < 0 || b >= (T)(8 * sizeof(T))) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b); }
#define LG_INT(t, T) \
  __device__ __forceinline__ T lg_floordiv_##t(T a, T b) { return lg_floordiv_int(a, b); } \
  __device__ __forceinline__ T lg_remainder_##t(T a, T b) { return lg_remainder_int(a, b); } \
  __device__ __forceinline__ T lg_shl_##t(T a, T b) { return lg_shl(a, b); } \
  __device__ __forceinline__ T lg_shr_##t(T a, T b) { return lg_shr(a, b); }
LG_INT(i8, int8_t) LG_INT(i16, int16_t) LG_INT(i32, int32_t) LG_INT(i64, int64_t)
LG_INT(u8, uint8_t) LG_INT(u16, uint16_t) LG_INT(u32, uint32_t) LG_INT(u64, uint64_t)
__device__ __forceinline__ float lg_floordiv_f32(float a, float b) { return lg_floordiv_flt(a, b); }
__device__ __forceinline__ double lg_floordiv_f64(double a, double b) { return lg_floordiv_flt(a, b); }
__device__ __forceinline__ float lg_remainder_f32(float a, float b) { return lg_remainder_flt(a, b); }
__device__ __forceinline__ double lg_remainder_f64(double a, double b) { return lg_remainder_flt(a, b); }
template <typename T> __device__ __forceinline__ T lg_sigmoid(T x) {
  T e = exp(-fabs(x)); return x >= 0 ? (T)1 / ((T)1 + e) : e / ((T)1 + e); }
template <typename T> __device__ __forceinline__ T lg_round(T x, int d) {
  if (d == 0) return rint(x);
  T p = (T)pow(10.0, (double)(d > 0 ? d : -d));
  return d > 0 ? rint(x * p) / p : rint(x / p) * p; }
// negation flips the sign bit, so no compiler folds it into a preceding fma (see render_c)
__device__ __forceinline__ float lg_fneg(float x) { union { float f; uint32_t u; } t; t.f = x; t.u ^= 0x80000000u; return t.f; }
__device__ __forceinline__ double lg_fneg(double x) {
  union { double f; uint64_t u; } t; t.f = x; t.u ^= 0x8000000000000000ull; return t.f; }
template <typename T> __device__ __forceinline__ T lg_max_(T a, T b) { return (a >= b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T lg_min_(T a, T b) { return (a <= b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T lg_clip(T x, T lo, T hi) { return lg_min_(lg_max_(x, lo), hi); }

struct lg_add { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct lg_mul { template <typename T> __device__ T operator()(T a, T b) const { return a * b; } };
struct lg_max { template <typename T> __device__ T operator()(T a, T b) const { return (a > b || a != a) ? a : b; } };
struct lg_min { template <typename T> __device__ T operator()(T a, T b) const { return (a < b || a != a) ? a : b; } };
struct lg_or { template <typename T> __device__ T operator()(T a, T b) const { return a || b; } };
struct lg_and { template <typename T> __device__ T operator()(T a, T b) const { return a && b; } };

// Every thread of the block calls this with its partial value; all get the block's result.
template <typename T, typename F>
__device__ T lg_block_reduce(T v, F f, T* sh) {
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) { T r = sh[0]; for (int w = 1; w < warps; w++) r = f(r, sh[w]); sh[32] = r; }
  __syncthreads();
  v = sh[32];
  __syncthreads();  // the next stage may reuse sh
  return v;
}
"""

#: threads per block when any loop uses threads
BLOCK = 256


class CudaRenderer(Renderer):
    """CUDA C (see the module docstring)."""

    cuda = True
    stash_ok = False  # stages may spread a row over threads differently

    def open_loop(self, li: int, par: Par, reds: list[int], kept: bool) -> None:
        """A grid-, block- or plain loop."""
        v = f"i{li}"
        if par is Par.BLOCKS:
            head = f"for (int64_t {v} = blockIdx.x; {v} < n{li}; {v} += gridDim.x)"
        elif par is Par.THREADS:
            head = f"for (int64_t {v} = threadIdx.x; {v} < n{li}; {v} += blockDim.x)"
        elif par is Par.BLOCKS_AND_THREADS:
            head = (
                f"for (int64_t {v} = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; {v} < n{li}; "
                f"{v} += (int64_t)gridDim.x * blockDim.x)"
            )
        else:
            head = f"for (int64_t {v} = 0; {v} < n{li}; {v}++)"
        self.emit(head + " {")
        self.depth += 1

    def close_rloops(self, st: int) -> None:
        """After the loops: combine the threads' partial accumulators within the block."""
        super().close_rloops(st)
        if any(p.threads for p in self.rpar[st]):
            for r in self.reds.get(st, []):
                op = "add" if self.spec.values[r].center >= 0 else self.spec.values[r].combine
                self.emit(f"acc{r} = lg_block_reduce(acc{r}, lg_{op}(), lg_sh{r});")

    def store(self, ai: int, v: int, reduced: bool) -> None:
        """Guarded store: one writer per element."""
        pars = list(self.kpar)
        if not reduced and self.nr:
            pars += self.rpar[self.final_stage]
        conds = []
        if not any(p.threads for p in pars):
            conds.append("threadIdx.x == 0")
        if not any(p.blocks for p in pars):
            conds.append("blockIdx.x == 0")
        line = f"a{ai}[{self.index(ai)}] = v{v};"
        self.emit(f"if ({' && '.join(conds)}) {line}" if conds else line)


def render_cuda(spec: Spec, layout: Layout, assign: tuple[Par, ...]) -> str:
    """The complete CUDA source of one kernel."""
    r = CudaRenderer(spec, layout, assign)
    body = r.body()
    params = []
    nl = layout.nloops
    for ai, ref in enumerate(spec.arrays):
        t = r.ct(ref.dtype)
        params.append(f"{'' if ref.output else 'const '}{t} *__restrict__ a{ai}")
    params += [f"int64_t n{li}" for li in range(nl)]
    for ai in range(len(spec.arrays)):
        params += [f"int64_t s{ai}_{li}" for li in range(nl) if layout.moves[ai][li]]
    scal = []
    for i, v in enumerate(spec.values):
        if v.kind == "scalar":
            kind = "double" if v.dtype.kind == "f" else "int64_t"
            params.append(f"{kind} c{v.index}")
            scal.append(f"  const {r.ct(v.dtype)} v{i} = ({r.ct(v.dtype)})c{v.index};")
    head = [
        PRELUDE + (complex_prelude(cuda=True) if uses_complex(spec) else ""),
        f'extern "C" __global__ void lg_kernel({", ".join(params)}) {{',
    ]
    head += scal
    for _st, reds in r.reds.items():
        for red in reds:
            head.append(f"  __shared__ {r.acc_type(red)} lg_sh{red}[33];")
    count = " * ".join(f"n{li}" for li in range(len(layout.kloops), nl)) or "1"
    head.append(f"  const int64_t lg_count = {count};")
    head.append("  (void)lg_count;")
    return "\n".join(head) + "\n" + "\n".join(body) + "\n}\n"


def launch_config(layout: Layout, assign: tuple[Par, ...], extents: list[int]) -> tuple[int, int]:
    """(blocks, threads per block) for a launch with these loop extents."""
    per = layout.nloops
    threads = BLOCK if any(p.threads for p in assign) else 1
    blocks = 1
    for i, p in enumerate(assign):
        if p.blocks:
            n = extents[i % per]
            need = -(-n // threads) if p is Par.BLOCKS_AND_THREADS else n
            blocks = max(blocks, min(need, 65535))
    return max(1, blocks), threads


def dtype_ok(dtype: np.dtype) -> bool:
    """Dtypes the CUDA renderer spells (all the JIT supports)."""
    return types.supported(dtype)
