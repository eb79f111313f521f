"""The system C compiler: C source -> shared library bytes, kept in the kernel store.

The compiler is `SETTINGS.cc` ($CC), else the first of cc, gcc, clang on PATH; none means the
JIT is unavailable and regions run op by op on NumPy (the caller warns once). This module
compiles and stores; loading and launching are the CPU backend's (jit/backend/cpu.py).

Flags keep NumPy's bits (docs/reliability.md, "Numeric contract"). Every flag is either
value-preserving or asked for:
- `-ffp-contract=off`: C allows `a * b + c` to become one fused multiply-add (one rounding
  instead of two), and gcc does so by default in GNU C mode when `-march=native` offers FMA;
  NumPy rounds the product, so contraction is off.
- no `-ffast-math` family (`-funsafe-math-optimizations`, `-fassociative-math`,
  `-ffinite-math-only`, `-fno-signed-zeros`, `-freciprocal-math`): each changes results.
- `-fno-math-errno`: math functions need not set `errno`, so sqrt becomes the sqrt
  instruction (correctly rounded, like libm's) and loops calling libm can vectorise; the
  values are those of the same functions, only the `errno` side effect goes.
- `-fno-trapping-math`: the compiler may assume floating-point operations do not trap, so it
  may evaluate them speculatively; the default rounding mode is still assumed
  (`-fno-rounding-math`), so every value is the IEEE one and only exception flags, which no
  kernel reads, may differ.
- `-fwrapv`: signed integer overflow wraps, as NumPy's does.
- `-march=native`: kernels are built where they run (the architecture is part of the store
  key); it selects instructions (vector width, FMA available), and with contraction off and
  no reassociation allowed every instruction computes the IEEE result of the C expression.
- `-mprefer-vector-width=512` where the CPU has AVX-512: libmvec has one variant of each
  function per vector width (`_ZGVdN8v_expf` for 256 bits, `_ZGVeN16v_expf` for 512), and
  they differ in the last bit for many inputs; the compiler picks the variant from a loop's
  vector length, which with 256-bit preference depends on the dtypes a loop mixes (a float64
  exp fused with float32 work took the 512-bit one). With 512-bit vectors preferred every
  loop uses the 512-bit variants, so a function's value does not depend on what it is fused
  with. It changes instruction selection only.
- `-fopenmp` for the parallel and simd loops; reductions whose order matters are written
  in a fixed order by the renderers (jit/render.py), never left to OpenMP.

Vector math (glibc's libmvec, `-lmvec`) is used in both modes; by default only in block loops
that send every element through the vector function (jit/render_block.py).
Fast math (`SETTINGS.fast_math`, LAZYGRAPH_FAST_MATH=1; off by default) adds
`-ffp-contract=fast`, lets float sums and products use OpenMP reductions (an order that
depends on the thread count) and lets any loop call libmvec, its remainder the scalar libm
(jit/render_c.py): faster, not NumPy's bits. The flags are part of the store key, so the two
modes never share a binary.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

from jit import store
from jit.runtime import Binary
from ops.settings import SETTINGS


class CompileError(RuntimeError):
    """The compiler rejected a generated kernel; the message shows the numbered source."""


def numbered(source: str) -> str:
    """Source with line numbers, for error messages and debug output."""
    return "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(source.splitlines()))


@functools.lru_cache(maxsize=1)
def find_compiler() -> tuple[str, str] | None:
    """(path, identity) of the C compiler, or None when there is none."""
    cands = [SETTINGS.cc] if SETTINGS.cc else []
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

#: the flag that keeps `a * b + c` two roundings (NumPy's bits), and its fast-math opposite
EXACT_FLAGS = ["-ffp-contract=off"]
FAST_FLAGS = ["-ffp-contract=fast"]

#: flags that change floating-point results; never passed (a test checks the flag list)
VALUE_CHANGING = (
    "-ffast-math",
    "-Ofast",
    "-funsafe-math-optimizations",
    "-fassociative-math",
    "-freciprocal-math",
    "-ffinite-math-only",
    "-fno-signed-zeros",
    "-ffp-contract=fast",
    "-ffp-contract=on",
    "-fcx-limited-range",
)


def flags() -> list[str]:
    """The compiler flags of the current numeric mode (the probed toolchain's plus the mode's)."""
    tc = toolchain()
    if tc is None:
        return []
    return tc["flags"] + (FAST_FLAGS if SETTINGS.fast_math else EXACT_FLAGS)


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
    # one libmvec variant per function and dtype (module docstring): 512-bit vectors where there are
    avx512 = "#ifndef __AVX512F__\n#error no AVX-512\n#endif\n" + probe
    if "-march=native" in flags and _try(cc, flags + ["-mprefer-vector-width=512"], avx512, ["-lm"]):
        flags.append("-mprefer-vector-width=512")
    plain = "#pragma omp declare simd notinbranch\nfloat expf(float);\n" + probe
    alias = '#pragma omp declare simd notinbranch\nfloat lg_vexpf(float) __asm__("expf");\n' + probe.replace(
        "= expf(", "= lg_vexpf("
    )
    mvec = "-fopenmp" in flags and all(_try(cc, flags, src, ["-lmvec", "-lm"]) for src in (plain, alias))
    libs = (["-lmvec"] if mvec else []) + ["-lm"]
    return {"cc": cc, "id": ident, "flags": flags, "libs": libs, "mvec": mvec, "arch": _cpu_arch()}


def available() -> bool:
    """True when a working C compiler exists."""
    return toolchain() is not None


# Between kernel launches the process runs NumPy, BLAS or PyTorch, whose own thread pools
# need the cores: OpenMP threads that spin-wait after a parallel loop would fight them (a
# 5-10x slowdown on two cores). libgomp reads this when the first kernel library loads it.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def compile_library(source: str) -> Binary:
    """The shared library of `source` (exporting `lg_kernel`): from the store, or compiled now."""
    tc = toolchain()
    if tc is None:
        raise CompileError("no C compiler found ($CC, cc, gcc, clang)")
    fl = flags()
    key = store.make_key(source, tc["id"], fl + tc["libs"], tc["arch"])
    data = store.read(key, "so")
    if data is None:
        data = _compile(tc, fl, source)
        store.put(key, "so", data, {"compiler": tc["id"], "flags": fl})
    return Binary(data, "so", key)


def _compile(tc: dict, fl: list[str], source: str) -> bytes:
    return build_shared(tc["cc"], fl, source, tc["libs"])


def build_shared(
    compiler: str, fl: list[str], source: str, libs: list[str], suffix: str = ".c", what: str = "C"
) -> bytes:
    """The bytes of the shared library `compiler` builds from `source` (C, or C++ for the emulation)."""
    with tempfile.TemporaryDirectory(prefix="lazygraph-cc-") as d:
        src = os.path.join(d, "kernel" + suffix)
        so = os.path.join(d, "kernel.so")
        with open(src, "w") as f:
            f.write(source)
        cmd = [compiler, *fl, src, "-o", so, *libs]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise CompileError(
                f"{what} compiler failed ({' '.join(cmd[:1] + fl)}):\n{r.stderr.strip()}\n"
                f"--- kernel source ---\n{numbered(source)}"
            )
        with open(so, "rb") as f:
            return f.read()
