"""CUDA emulated on the CPU: the CUDA C that NVRTC would compile, built by the host C++ compiler.

A backend for checking the CUDA kernels without a GPU: `language = "cuda"`, so FusedKernel
renders the very source the CUDA backend compiles (jit/render_cuda.py), and this backend runs
it on the host.

- Allocator: device arrays with CuPy's rules over host memory (`EmulatedDeviceArray`,
  jit/backend/emulated_array.py): `empty`, `to_device` and `to_host` (both counted copies,
  `jit.backend.transfers`), so the engine keeps values on this device exactly as it keeps
  CuPy arrays on "cuda", and any hidden `np.asarray` of a device value raises here, in CI.
  Kernels and GEMM get the memory behind the device arrays (`_raw`), as CUDA gets pointers.
- GEMM: NumPy's matmul where the CUDA backend calls cuBLAS. Window library calls (pooling
  and its gradients, convolution and its gradients): the CUDA kernels of jit/window_cuda.py,
  emulated like every other kernel (jit/window_cuda_calls.py: the CUDA backend's cuDNN-less
  path). Dtypes those kernels do not take, and LAZYGRAPH_JIT=0, run the operator's
  reference kernel on the device arrays (as on "cuda"). Every fresh device array is counted
  (`jit.backend.allocations`), and `held_only` counts the references to the host memory
  behind an array (the engine's buffer reuse and in-place writes, device_memory.py).
- Compiler: the rendered source is wrapped in a C++ prelude and compiled by the system C++
  compiler (`$CXX`, else the C compiler's C++ sibling: c++, g++, clang++) with the CPU
  backend's value-preserving flags (`-ffp-contract=off` unless fast math; never the fast-math
  family), the binary kept in the kernel store. The prelude
  - puts the CUDA source in a namespace (its own int64_t typedefs stay its own) with
    `__global__`, `__device__` and `__forceinline__` as plain C++, `__shared__` as a
    function-static thread-local (shared by the threads of a block, which run on one host
    thread), `INFINITY`/`NAN` through `__int_as_float`, and the host's <math.h> overloads
    (exp(float) is expf, as in CUDA);
  - emulates `threadIdx`, `blockIdx`, `blockDim` and `gridDim` (x only: the renderer launches
    1-D) as thread-local globals;
  - runs a launch block by block. A kernel that synchronises (render_cuda's block reduction:
    `__shfl_xor_sync` within warps, shared memory between `__syncthreads`) runs each block's
    threads as fibers (ucontext) on one host thread, scheduled in sweeps: a fiber runs to its
    next barrier or shuffle and yields. A barrier releases when every live thread of the
    block waits at it, and the sweeps after it run the threads in the opposite order to
    those before it (a shared-memory read that a missing barrier leaves unordered then sees
    the stale value in one order or the other; tests/test_cuda_bugs.py). A shuffle publishes
    the lane's value, yields once, then reads its partner's (double-buffered by the
    shuffle's parity, so a lane that is a shuffle ahead never overwrites a value not yet
    read). A barrier some thread of the block never reaches,
    or a shuffle that a lane of its mask is not at (a divergent warp), is an error. A kernel without
    barriers or shuffles runs its threads as a plain loop over (block, thread).
- Loader: the library is dlopened like a C kernel's (jit/c_program.py, store.load_library);
  a generated `extern "C" lg_emu_launch(void **ptrs, const int64_t *ints, const double *fs,
  const int64_t *is, int64_t grid, int64_t block)` unpacks the kernel ABI into `lg_kernel`'s
  separate parameters (arrays, sizes and strides, then each scalar `cK` from fs[K] or is[K]
  by its declared type, the order `ScalarSlots` names) and runs the grid.

Math functions are the host's libm, not CUDA's (whose results may differ in the last bit), and
float reductions combine in the CUDA kernel's order (per-thread partials, then a warp tree), not
NumPy's: values match NumPy within rounding; integer, bool, max/min and elementwise
non-transcendental results match bit for bit.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from jit import c_program, compile_c, store, window_cuda_calls
from jit.backend import count_allocation, count_transfer
from jit.backend.cpu import CpuBackend
from jit.backend.emulated_array import EmulatedDeviceArray, emulated_namespace
from jit.compile_c import CompileError
from jit.runtime import Binary, Program, ScalarSlots
from ops.settings import SETTINGS

#: what every emulated kernel is wrapped in (module docstring); the CUDA source follows it
PRELUDE = r"""#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#undef INFINITY
#undef NAN
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static thread_local

struct lg_emu_dim3 { unsigned int x, y, z; };
static thread_local lg_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

struct lg_emu_fiber { ucontext_t ctx; int state; unsigned int shfl; };  // state: 0 runs, 1 waits, 2 done
static thread_local lg_emu_fiber *lg_emu_cur = nullptr;
static thread_local ucontext_t lg_emu_sched;
static thread_local const char *lg_emu_err = nullptr;
static thread_local uint64_t lg_emu_xv[2][1024];
static thread_local unsigned int lg_emu_xc[2][1024];

static void lg_emu_fail(const char *msg) { if (!lg_emu_err) lg_emu_err = msg; }

static inline float __int_as_float(int i) { float f; memcpy(&f, &i, sizeof f); return f; }

static inline void __syncthreads() {
  if (!lg_emu_cur) { lg_emu_fail("__syncthreads in a kernel launched without fibers"); return; }
  lg_emu_cur->state = 1;
  swapcontext(&lg_emu_cur->ctx, &lg_emu_sched);
}

template <typename T> static inline T __shfl_xor_sync(unsigned int mask, T v, int o) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffled values are at most 8 bytes");
  lg_emu_fiber *f = lg_emu_cur;
  if (!f) { lg_emu_fail("__shfl_xor_sync in a kernel launched without fibers"); return v; }
  const unsigned int me = threadIdx.x, p = f->shfl & 1u;
  memcpy(&lg_emu_xv[p][me], &v, sizeof(T));
  lg_emu_xc[p][me] = f->shfl;
  swapcontext(&f->ctx, &lg_emu_sched);  // every lane of the warp publishes before any reads
  const unsigned int base = me & ~31u, src = base | ((me ^ (unsigned int)o) & 31u);
  for (unsigned int l = 0; l < 32 && base + l < blockDim.x; l++)
    if (((mask >> l) & 1u) && lg_emu_xc[p][base + l] != f->shfl)
      lg_emu_fail("__shfl_xor_sync: a lane of the mask is not at this shuffle (divergent warp)");
  T r = v;
  if (src < blockDim.x) memcpy(&r, &lg_emu_xv[p][src], sizeof(T));
  f->shfl++;
  return r;
}
"""

#: after the CUDA source: the grid loop and the fiber scheduler (the launcher's call is generated)
RUNNER = r"""
static void lg_emu_entry() { lg_emu_call(); lg_emu_cur->state = 2; }

static const size_t LG_EMU_STACK = 64 * 1024;

static void lg_emu_block_fibers(lg_emu_fiber *fs, char *stacks, unsigned int n) {
  for (unsigned int t = 0; t < n; t++) {
    lg_emu_xc[0][t] = lg_emu_xc[1][t] = 0xffffffffu;
    lg_emu_fiber *f = &fs[t];
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = stacks + (size_t)t * LG_EMU_STACK;
    f->ctx.uc_stack.ss_size = LG_EMU_STACK;
    f->ctx.uc_link = &lg_emu_sched;
    makecontext(&f->ctx, lg_emu_entry, 0);
    f->state = 0;
    f->shfl = 0;
  }
  bool rev = false;  // sweep direction, flipped at each barrier: a missing barrier's race shows
  for (;;) {
    bool ran = false;
    for (unsigned int u = 0; u < n; u++) {
      const unsigned int t = rev ? n - 1 - u : u;
      if (fs[t].state != 0) continue;
      ran = true;
      threadIdx.x = t;
      lg_emu_cur = &fs[t];
      swapcontext(&lg_emu_sched, &fs[t].ctx);
    }
    if (ran) continue;
    unsigned int waiting = 0;
    for (unsigned int t = 0; t < n; t++) waiting += fs[t].state == 1;
    if (waiting == 0) break;
    if (waiting != n) { lg_emu_fail("__syncthreads not reached by every thread of the block"); break; }
    for (unsigned int t = 0; t < n; t++) fs[t].state = 0;
    rev = !rev;
  }
  lg_emu_cur = nullptr;
}

extern "C" int lg_emu_launch(void **ptrs, const int64_t *ints, const double *fs, const int64_t *is,
                             int64_t grid, int64_t block) {
  lg_emu_err = nullptr;
  if (grid < 1 || grid > 2147483647LL || block < 1 || block > 1024) {
    lg_emu_fail("launch shape out of range (grid 1..2^31-1 blocks, block 1..1024 threads)");
    return 1;
  }
  lg_emu_p = ptrs; lg_emu_i = ints; lg_emu_f = fs; lg_emu_s = is;
  gridDim = {(unsigned int)grid, 1, 1};
  blockDim = {(unsigned int)block, 1, 1};
  threadIdx = blockIdx = {0, 0, 0};
  if (!LG_EMU_FIBERS) {
    for (int64_t b = 0; b < grid; b++) {
      blockIdx.x = (unsigned int)b;
      for (int64_t t = 0; t < block; t++) { threadIdx.x = (unsigned int)t; lg_emu_call(); }
    }
    return lg_emu_err != nullptr;
  }
  lg_emu_fiber *fibers = (lg_emu_fiber *)calloc((size_t)block, sizeof(lg_emu_fiber));
  char *stacks = (char *)malloc((size_t)block * LG_EMU_STACK);
  if (!fibers || !stacks) { free(fibers); free(stacks); lg_emu_fail("out of memory for fiber stacks"); return 1; }
  for (int64_t b = 0; b < grid && !lg_emu_err; b++) {
    blockIdx.x = (unsigned int)b;
    lg_emu_block_fibers(fibers, stacks, (unsigned int)block);
  }
  free(fibers);
  free(stacks);
  return lg_emu_err != nullptr;
}

extern "C" const char *lg_emu_error(void) { return lg_emu_err ? lg_emu_err : ""; }
"""

_SIGNATURE = re.compile(r'extern "C" __global__ void lg_kernel\(([^)]*)\)')
#: what makes a kernel need fibers (barriers, shuffles, the block reduction that uses both)
_SYNC = ("__syncthreads", "__shfl", "lg_block_reduce(")


def wrap(source: str) -> str:
    """The C++ translation unit of CUDA `source`: prelude, the source in a namespace, launcher."""
    m = _SIGNATURE.search(source)
    if m is None:
        raise CompileError('cuda-emulated: the source has no extern "C" __global__ void lg_kernel(...)')
    body = source[m.end() :]
    fibers = any(s in body for s in _SYNC)
    args = []
    arrays = ints = 0
    for param in (p.strip() for p in m.group(1).split(",") if p.strip()):
        ctype, name = param.rsplit(None, 1) if "*" not in param else param.rsplit("*", 1)
        name = name.replace("__restrict__", "").strip()
        if "*" in param:
            args.append(f"({ctype.strip()} *)lg_emu_p[{arrays}]")
            arrays += 1
        elif name[0] in "ns":
            args.append(f"lg_emu_i[{ints}]")
            ints += 1
        elif name[0] == "c" and name[1:].isdigit():
            args.append(f"lg_emu_f[{name[1:]}]" if ctype.strip() == "double" else f"lg_emu_s[{name[1:]}]")
        else:
            raise CompileError(f"cuda-emulated: unexpected kernel parameter {param!r}")
    call = (
        "static thread_local void **lg_emu_p;\nstatic thread_local const ::int64_t *lg_emu_i;\n"
        "static thread_local const double *lg_emu_f;\nstatic thread_local const ::int64_t *lg_emu_s;\n"
        f"static void lg_emu_call() {{ lg_kernel({', '.join(args)}); }}\n"
    )
    return (
        f"{PRELUDE}#define LG_EMU_FIBERS {int(fibers)}\nnamespace lg_cuda {{\n{source}\n{call}}}  // namespace lg_cuda\n"
        f"using lg_cuda::lg_emu_call;\nusing lg_cuda::lg_emu_p;\nusing lg_cuda::lg_emu_i;\n"
        f"using lg_cuda::lg_emu_f;\nusing lg_cuda::lg_emu_s;\n{RUNNER}"
    )


@functools.lru_cache(maxsize=1)
def toolchain() -> dict | None:
    """The C++ compiler and flags (the C toolchain's, as C++, without OpenMP), or None (probed once)."""
    tc = compile_c.toolchain()
    if tc is None:
        return None
    sibling = {"cc": "c++", "gcc": "g++", "clang": "clang++"}.get(os.path.basename(tc["cc"]))
    cands = [os.environ.get("CXX", ""), sibling or "", "c++", "g++", "clang++"]
    for c in filter(None, cands):
        path = shutil.which(c)
        if not path:
            continue
        flags = [f for f in tc["flags"] if f not in ("-fopenmp",) and not f.startswith("-std=")]
        flags.append("-std=gnu++17")
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode != 0:
            continue
        ident = out.stdout.splitlines()[0] if out.stdout else path
        t = {"cxx": path, "id": ident, "flags": flags, "libs": ["-lm"], "arch": tc["arch"]}
        try:
            _compile(
                t,
                flags,
                wrap('extern "C" __global__ void lg_kernel(float *a0, int64_t n0) { a0[0] = n0; }\n'),
            )
        except (CompileError, OSError, subprocess.SubprocessError):
            continue
        return t
    return None


def _compile(tc: dict, fl: list[str], source: str) -> bytes:
    return compile_c.build_shared(tc["cxx"], fl, source, tc["libs"], suffix=".cpp", what="C++")


def _raw(x: Any) -> Any:
    """The host memory behind a device array (what the emulated kernels and GEMM read)."""
    return x._data if type(x) is EmulatedDeviceArray else x


def _raw_out(out: Any) -> Any:
    """An `out=` device array's memory; a host array there is a caller's bug, as on CuPy."""
    if out is None or type(out) is EmulatedDeviceArray:
        return _raw(out)
    raise TypeError(f"cuda-emulated: out= must be a device array, got {type(out).__name__}")


class EmulatedProgram(Program):
    """`lg_emu_launch` of a loaded library: the kernel ABI as four pointers, then grid and block."""

    __slots__ = ("error", "fn", "lib")

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib  # keeps the library mapped while the program lives
        fn = lib["lg_emu_launch"]  # a fresh function object: c_program's has other argtypes
        fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2
        fn.restype = ctypes.c_int
        self.fn = fn
        err = lib["lg_emu_error"]
        err.argtypes = []
        err.restype = ctypes.c_char_p
        self.error = err

    def __call__(
        self,
        arrays: Sequence[Any],
        ints: Sequence[int],
        fs: Sequence[float] = (),
        is_: Sequence[int] = (),
        grid: int = 1,
        block: int = 1,
    ) -> None:
        """Run the grid on device arrays (or raw NumPy arrays); an emulation error (a diverged
        barrier...) raises."""
        rc = self.fn(*c_program.abi_args([_raw(a) for a in arrays], ints, fs, is_), grid, block)
        if rc:
            raise RuntimeError(f"cuda-emulated kernel: {self.error().decode()}")


class CudaEmulatedBackend(window_cuda_calls.DeviceWindowCalls, CpuBackend):
    """CUDA kernels run on the host (module docstring); buffers are emulated device arrays."""

    name = "cuda-emulated"
    language = "cuda"
    #: buffers are EmulatedDeviceArray: the engine keeps them on the device as it keeps CuPy's
    host_memory = False
    #: collectives (the NCCL path) run over the host transport on the device arrays' memory
    #: (`raw`/`from_raw`, no copy), as NCCL reads device memory (lazygraph/distributed)
    host_transport = True
    #: the emulator has no cuDNN by design: its convolutions are the im2col fallback, silently
    expects_cudnn = False

    # -- allocator: device arrays over host memory, with CuPy's rules ----------------------
    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> EmulatedDeviceArray:
        """An uninitialised device array (cupy.empty), counted (`jit.backend.allocations`)."""
        data = np.empty(shape, dtype=dtype)
        count_allocation(self.name, data.nbytes)
        return EmulatedDeviceArray(data)

    def to_device(self, host: Any) -> EmulatedDeviceArray:
        """A device copy of host data, counted (cupy.asarray); a device array as it is."""
        if isinstance(host, EmulatedDeviceArray):
            return host
        data = np.array(host, copy=True)
        count_transfer(self.name, "to_device", data.nbytes)
        count_allocation(self.name, data.nbytes)
        return EmulatedDeviceArray(data)

    def to_host(self, x: Any) -> np.ndarray:
        """A host copy of a device array, counted (cupy.asnumpy); host data as it is."""
        if not isinstance(x, EmulatedDeviceArray):
            return np.asarray(x)
        count_transfer(self.name, "to_host", x.nbytes)
        return x.get()

    def is_buffer(self, x: Any) -> bool:
        """An emulated device array over a NumPy array (what kernels and `out=` take)."""
        return type(x) is EmulatedDeviceArray

    def may_share(self, a: Any, b: Any) -> bool:
        """np.may_share_memory of the memory behind them."""
        return bool(np.may_share_memory(_raw(a), _raw(b)))

    def held_only(self, x: Any, n: int, views: Sequence[Any] = ()) -> bool:
        """Whether nothing refers to device array `x`'s memory but `n` references to `x` (the
        caller's slots and locals) and the arrays in `views` (views of `x`, each held `n` times
        besides the list): what the engine checks before it writes into `x` or reuses it
        (lazygraph/engine/device_memory.py). The host memory is counted: every NumPy view of it
        holds it through its chain of `.base` (as_strided's goes through a DummyArray), and
        each link of a view's chain must be held by the chain alone."""
        if type(x) is not EmulatedDeviceArray:
            return False
        d = x._data
        if d.base is not None or not d.flags.c_contiguous:
            return False
        own = 0
        for v in views:
            if type(v) is not EmulatedDeviceArray or sys.getrefcount(v) != n + 3:  # list, `v`, argument
                return False
            link = v._data
            if sys.getrefcount(link) != 3:  # v._data, `link`, the argument
                return False
            link = link.base
            while link is not None and link is not d:
                if sys.getrefcount(link) != 3:  # the previous link's base, `link`, the argument
                    return False
                link = getattr(link, "base", None)
            if link is None:
                return False
            link = None
            own += v._base is x
        # the memory: x._data, `d`, the argument, and the last link of each view's chain
        if sys.getrefcount(d) != 3 + len(views):
            return False
        # x: the caller's n, the parameter, the argument, and each view made by x's own methods
        return sys.getrefcount(x) == n + 2 + own

    def memory(self, x: Any) -> np.ndarray:
        """The host array owning a device array's memory (what the engine's meter counts, so a
        view, as_strided's included, aliases its base)."""
        a = _raw(x)
        link = a.base
        while link is not None:
            if type(link) is np.ndarray:
                a = link
            link = getattr(link, "base", None)
        return a

    def raw(self, x: Any) -> Any:
        """The host memory behind a device array, shared (no copy): what an emulated NCCL reads."""
        return _raw(x)

    def from_raw(self, x: Any) -> Any:
        """A device array over host memory an emulated library call wrote (no copy)."""
        return EmulatedDeviceArray(x) if type(x) is np.ndarray else x

    def namespace(self) -> Any:
        """The emulated device namespace (it creates device arrays, as CuPy's module does)."""
        return emulated_namespace

    def contiguous(self, x: Any) -> EmulatedDeviceArray:
        """cupy.ascontiguousarray (no copy for a C-contiguous array)."""
        data = _raw(x)
        c = np.ascontiguousarray(data)
        if c is data and type(x) is EmulatedDeviceArray:
            return x
        if c is not data:
            count_allocation(self.name, c.nbytes)
        return EmulatedDeviceArray(c)

    def copyto(self, dst: Any, src: Any) -> None:
        """cupy.copyto between device arrays."""
        np.copyto(_raw(dst), _raw(src))

    # -- library calls: GEMM as cuBLAS would, on the memory behind the device arrays -----------
    def gemm(self, a: Any, b: Any, *, trans_a: bool = False, trans_b: bool = False, out: Any = None) -> Any:
        """cupy.matmul's place: NumPy's matmul on the device arrays' memory, a device array back."""
        v = CpuBackend.gemm(self, _raw(a), _raw(b), trans_a=trans_a, trans_b=trans_b, out=_raw_out(out))
        if out is not None:
            return out
        count_allocation(self.name, v.nbytes)
        return EmulatedDeviceArray(v)

    def epilogue(self, y: Any, bias: Any = None, relu: bool = False) -> Any:
        """In place on the device array: y += bias, then y = max(y, 0)."""
        CpuBackend.epilogue(self, _raw(y), None if bias is None else _raw(bias), relu)
        return y

    def cudnn(self) -> None:
        """No cuDNN on the emulated device."""
        return None

    def host_backend(self) -> Any:
        """The CPU backend (the host path of dtypes the CUDA kernels do not take)."""
        from jit.backend import get

        return get("cpu")

    def cudnn_missing_reason(self) -> str:
        """Why there is no cuDNN (for the one-time warning)."""
        return "the emulated device has none"

    def cudnn_call(self, op: str, args: tuple, out: Any, attrs: dict) -> Any:
        """Never reached: `cudnn()` is None here."""
        raise RuntimeError(f"{self.name}: no cuDNN for {op}")

    def available(self) -> bool:
        """True when a working C++ compiler exists."""
        return toolchain() is not None

    def compile(self, source: str, name: str = "kernel") -> Binary:
        """The shared library of CUDA `source` wrapped for the host, from the store or compiled now."""
        tc = toolchain()
        if tc is None:
            raise CompileError("cuda-emulated: no C++ compiler found ($CXX, c++, g++, clang++)")
        fl = tc["flags"] + (compile_c.FAST_FLAGS if SETTINGS.fast_math else compile_c.EXACT_FLAGS)
        text = wrap(source)
        key = store.make_key(text, tc["id"], fl + tc["libs"], tc["arch"])
        data = store.read(key, "so")
        if data is None:
            data = _compile(tc, fl, text)
            store.put(key, "so", data, {"compiler": tc["id"], "flags": fl, "emulates": "cuda"})
        return Binary(data, "so", key)

    def load(self, binary: Binary, entry: str = "lg_kernel", scalars: ScalarSlots = ()) -> EmulatedProgram:
        """The launcher of `binary` (the library dlopened once, like a C kernel's).

        `entry` and `scalars` are the CUDA kernel's; the launcher was generated from its
        signature, whose scalar parameters are those `scalars` lists.
        """
        return EmulatedProgram(c_program.load(binary, "lg_emu_launch").lib)
