"""The system C compiler: C source -> shared library -> ctypes function.

The compiler is $CC, else the first of cc, gcc, clang on PATH; none means the JIT is
unavailable and regions run op by op on NumPy (the caller warns once). Flags keep NumPy's
floating-point meaning: no -ffast-math (NaN, inf and signed zeros behave), -fno-math-errno
so math calls can vectorise, -fwrapv so integer overflow wraps as NumPy's does, OpenMP for
the parallel and simd loops, and -march=native because kernels are built where they run
(the architecture is part of the store key).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

from jit import store


class CompileError(RuntimeError):
    """The compiler rejected a generated kernel; the message shows the numbered source."""


def numbered(source: str) -> str:
    """Source with line numbers, for error messages and debug output."""
    return "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(source.splitlines()))


@functools.lru_cache(maxsize=1)
def find_compiler() -> tuple[str, str] | None:
    """(path, identity) of the C compiler, or None when there is none."""
    cands = [os.environ["CC"]] if os.environ.get("CC") else []
    cands += ["cc", "gcc", "clang"]
    for c in cands:
        path = shutil.which(c)
        if not path:
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0:
            return path, out.stdout.splitlines()[0] if out.stdout else path
    return None


def _cpu_arch() -> str:
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "model name", "Features")):
                    flags += line
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return f"{platform.machine()}-{hashlib.sha256(flags.encode()).hexdigest()[:16]}"


BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math", "-fwrapv", "-std=gnu11"]


def _try(cc: str, flags: list[str], src: str, libs: list[str]) -> bool:
    with tempfile.TemporaryDirectory(prefix="lazygraph-cc-") as d:
        c = os.path.join(d, "t.c")
        with open(c, "w") as f:
            f.write(src)
        r = subprocess.run(
            [cc, *flags, c, "-o", os.path.join(d, "t.so"), *libs], capture_output=True, timeout=120
        )
        return r.returncode == 0


@functools.lru_cache(maxsize=1)
def toolchain() -> dict | None:
    """Compiler, flags and libraries that work here (probed once), or None without a compiler."""
    found = find_compiler()
    if found is None:
        return None
    cc, ident = found
    probe = "#include <math.h>\nvoid f(float *x, long n) {\n#pragma omp parallel for simd\nfor (long i = 0; i < n; i++) x[i] = expf(x[i]);\n}\n"
    flags = list(BASE_FLAGS)
    for extra in (["-march=native"], ["-fopenmp"]):
        if _try(cc, flags + extra, probe, ["-lm"]):
            flags += extra
    mvec = "-fopenmp" in flags and _try(
        cc, flags, "#pragma omp declare simd notinbranch\nfloat expf(float);\n" + probe, ["-lmvec", "-lm"]
    )
    libs = (["-lmvec"] if mvec else []) + ["-lm"]
    return {"cc": cc, "id": ident, "flags": flags, "libs": libs, "mvec": mvec, "arch": _cpu_arch()}


def available() -> bool:
    """True when a working C compiler exists."""
    return toolchain() is not None


_loaded: dict[str, ctypes.CDLL] = {}

# Between kernel launches the process runs NumPy, BLAS or PyTorch, whose own thread pools
# need the cores: OpenMP threads that spin-wait after a parallel loop would fight them (a
# 5-10x slowdown on two cores). libgomp reads this when the first kernel library loads it.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def build(source: str) -> ctypes._CFuncPtr:
    """The `lg_kernel` function of `source`, compiled or taken from the store."""
    tc = toolchain()
    if tc is None:
        raise CompileError("no C compiler found ($CC, cc, gcc, clang)")
    key = store.make_key(source, tc["id"], tc["flags"] + tc["libs"], tc["arch"])
    lib = _loaded.get(key)
    if lib is None:
        path = store.get(key, "so")
        if path is None:
            path = store.put(key, "so", _compile(tc, source), {"compiler": tc["id"], "flags": tc["flags"]})
        lib = ctypes.CDLL(str(path))
        _loaded[key] = lib
    fn = lib.lg_kernel
    fn.argtypes = [ctypes.c_void_p] * 4
    fn.restype = None
    return fn


def _compile(tc: dict, source: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="lazygraph-cc-") as d:
        c = os.path.join(d, "kernel.c")
        so = os.path.join(d, "kernel.so")
        with open(c, "w") as f:
            f.write(source)
        cmd = [tc["cc"], *tc["flags"], c, "-o", so, *tc["libs"]]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise CompileError(
                f"C compiler failed ({' '.join(cmd[:1] + tc['flags'])}):\n{r.stderr.strip()}\n"
                f"--- kernel source ---\n{numbered(source)}"
            )
        with open(so, "rb") as f:
            return f.read()
