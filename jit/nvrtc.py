"""NVRTC through pynvrtc: CUDA C -> PTX or CUBIN, no GPU needed.

libnvrtc comes from pip's nvidia-cuda-nvrtc-cu12 wheel (nvidia/cuda_nvrtc/lib) or the
system. Code for a real device must load on its driver: with a device present (the CUDA
backend passes its compute capability) we build a CUBIN for its exact architecture
(`-arch=sm_XY`), which any driver of that major CUDA version loads; PTX would need an NVRTC
no newer than the driver. Without a device (CI) we build PTX for the oldest architecture
this NVRTC supports, which checks the kernel compiles. Results go to the kernel store keyed
by source, NVRTC version, options and architecture.

NVRTC contracts `a * b + c` into one fused multiply-add by default; `--fmad=false` keeps the
two roundings NumPy makes, unless fast math (`SETTINGS.fast_math`) asks for speed
(`--fmad=true`). The option is part of the store key, so the two modes never share a binary.
This module compiles only; the CUDA backend (jit/backend/cuda.py) loads and launches.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import os

from jit import store
from jit.compile_c import CompileError, numbered
from jit.runtime import Binary
from ops.settings import SETTINGS

OPTIONS = ["--std=c++17", "-default-device"]


def options() -> list[str]:
    """NVRTC options of the current numeric mode (no FMA contraction unless fast math is on)."""
    return OPTIONS + (["--fmad=true"] if SETTINGS.fast_math else ["--fmad=false"])


#: NVRTC compilations this process ran, and kernels it took from the store instead: a warm run
#: (kernels on disk) compiles nothing (benchmarks/bench_gpu.py prints both)
COUNTS = {"compiled": 0, "from_store": 0}

_PATTERNS = ("libnvrtc.so*", "nvrtc64*.dll", "libnvrtc*.dylib")
# pip's CUDA 12 wheel installs nvidia/cuda_nvrtc/lib; CUDA 13's wheels share nvidia/cu13/lib
_WHEEL_DIRS = ("cuda_nvrtc/lib", "cuda_nvrtc/bin", "cu13/lib", "cu13/bin", "cu12/lib", "cu12/bin")
_TOOLKIT_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu")


def _nvrtc_in(d: str) -> str | None:
    """The first libnvrtc (not its builtins or alt libraries) in folder `d`."""
    for pattern in _PATTERNS:
        for path in sorted(glob.glob(os.path.join(d, pattern))):
            if ".alt." not in path and "builtins" not in path:
                return path
    return None


@functools.lru_cache(maxsize=1)
def library() -> str | None:
    """Path of libnvrtc: a pip wheel's first (CUDA 12 or 13 layout), then the toolkit's, then
    the loader's search path; None when absent."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for d in [os.path.join(r, sub) for r in roots for sub in _WHEEL_DIRS] + list(_TOOLKIT_DIRS):
        found = _nvrtc_in(d)
        if found:
            return found
    for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return None


def available() -> bool:
    """True when pynvrtc and libnvrtc are both importable."""
    if importlib.util.find_spec("pynvrtc") is None:
        return False
    return library() is not None


@functools.lru_cache(maxsize=1)
def _interface():  # noqa: ANN202 - pynvrtc's class
    from pynvrtc.interface import NVRTCInterface

    lib = library()
    if lib is None:
        raise CompileError("libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")
    return NVRTCInterface(lib)


def version() -> tuple[int, int]:
    """NVRTC's (major, minor)."""
    return _interface().nvrtcVersion()


def supported_archs() -> list[int]:
    """Compute capabilities this NVRTC can target (e.g. [50, 52, ..., 90])."""
    lib = _interface()._lib
    n = ctypes.c_int()
    if lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) != 0:
        return [52, 60, 70, 75, 80, 86, 90]
    arr = (ctypes.c_int * n.value)()
    lib.nvrtcGetSupportedArchs(arr)
    return list(arr)


def choose_arch(device: int | None = None) -> tuple[str, str]:
    """(-arch option, output kind "cubin" or "ptx") for a device of compute capability `device`.

    None means no device (compile-only, as in CI): PTX for the oldest supported architecture.
    """
    archs = supported_archs()
    if device is not None and device in archs:
        return f"-arch=sm_{device}", "cubin"
    if device is not None:  # a device newer than this NVRTC: PTX the driver can JIT
        best = max(a for a in archs if a <= device) if any(a <= device for a in archs) else min(archs)
        return f"-arch=compute_{best}", "ptx"
    return f"-arch=compute_{min(archs)}", "ptx"


def compile_cuda(source: str, name: str = "lazygraph_kernel.cu", device: int | None = None) -> Binary:
    """The PTX or CUBIN of `source` for `device` (see `choose_arch`): from the store, or compiled now."""
    arch, kind = choose_arch(device)
    ver = version()
    opts = options() + [arch]
    key = store.make_key(source, f"nvrtc-{ver[0]}.{ver[1]}", opts, arch)
    data = store.read(key, kind)
    if data is None:
        data = _compile(source, name, opts, kind)
        COUNTS["compiled"] += 1
        store.put(key, kind, data, {"nvrtc": f"{ver[0]}.{ver[1]}", "options": opts})
    else:
        COUNTS["from_store"] += 1
    return Binary(data, kind, key)


def _compile(source: str, name: str, options: list[str], kind: str) -> bytes:
    from pynvrtc.compiler import Program, ProgramException

    prog = Program(source, name, lib_name=library() or "")
    try:
        ptx = prog.compile(options)
    except ProgramException as e:
        raise CompileError(
            f"NVRTC failed:\n{e.get_message().strip()}\n--- kernel source ---\n{numbered(source)}"
        ) from None
    if kind == "ptx":
        return ptx.encode()
    lib = prog._interface._lib
    size = ctypes.c_size_t()
    if lib.nvrtcGetCUBINSize(prog._program, ctypes.byref(size)) != 0:
        raise CompileError("NVRTC produced no CUBIN (an -arch=sm_XY option is needed)")
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetCUBIN(prog._program, buf)
    return buf.raw
