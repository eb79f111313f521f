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
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from jit import store
from jit.runtime import Binary
from ops.settings import SETTINGS


class CompileError(RuntimeError):
    """The compiler rejected a generated kernel; the message shows the numbered source."""


@dataclass(frozen=True)
class EntryBinary(Binary):
    """A kernel inside a library compiled with others: `entry` is its function, `lib` names the library.

    Every kernel of one batch has the same bytes (one `lib`), so the library is loaded once.
    """

    entry: str = "lg_kernel"
    lib: str = ""


#: compiler processes started and kernels they compiled, in this process (tests read it)
RUNS = {"invocations": 0, "kernels": 0, "batches": 0, "batch_failures": 0}
_runs_lock = threading.Lock()


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


@functools.cache
def _cpuinfo_head() -> str:
    """The first CPU's model name and feature lines of /proc/cpuinfo ("" where it cannot be read)."""
    head = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "model name", "Features")):
                    head += line
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return head


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as /proc/cpuinfo names them (avx2, fma, avx512f, ...); empty if unknown."""
    for line in _cpuinfo_head().splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def _cpu_arch() -> str:
    flags = _cpuinfo_head()
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


#: the flags the probe may add to BASE_FLAGS, and the libraries it may link: a stored probe
#: result naming anything else is not used (it would reach the compiler's command line)
_PROBED_FLAGS = frozenset({"-march=native", "-fopenmp", "-mprefer-vector-width=512"})
_PROBED_LIBS = frozenset({"-lmvec", "-lm"})


def _probe_key() -> tuple[str, str] | None:
    """(store key, compiler path) of this machine's probe: the compiler's path and file (size,
    time, inode), the CPU and the base flags; None when no compiler is on the path."""
    cands = ([SETTINGS.cc] if SETTINGS.cc else []) + ["cc", "gcc", "clang"]
    for c in cands:
        path = shutil.which(c)
        if path:
            try:
                st = os.stat(os.path.realpath(path))
            except OSError:
                return None
            ident = f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
            return store.make_key("toolchain-probe-v1", ident, BASE_FLAGS, _cpu_arch()), path
    return None


def _stored_probe(key: str, cc: str) -> dict | None:
    """The probe's stored result for `key`, checked field by field, or None."""
    raw = store.read(key, "tc")
    if raw is None:
        return None
    try:
        tc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    ok = (
        isinstance(tc, dict)
        and set(tc) == {"cc", "id", "flags", "libs", "mvec", "arch"}
        and tc["cc"] == cc
        and isinstance(tc["id"], str)
        and tc["arch"] == _cpu_arch()
        and type(tc["mvec"]) is bool
        and isinstance(tc["flags"], list)
        and tc["flags"][: len(BASE_FLAGS)] == BASE_FLAGS
        and all(f in _PROBED_FLAGS for f in tc["flags"][len(BASE_FLAGS) :])
        and isinstance(tc["libs"], list)
        and all(lib in _PROBED_LIBS for lib in tc["libs"])
    )
    return tc if ok else None


@functools.lru_cache(maxsize=1)
def toolchain() -> dict | None:
    """Compiler, flags and libraries that work here (probed once), or None without a compiler.

    The probe compiles half a dozen test programs (about 0.5 s), so its result is kept in the
    kernel store, keyed by the compiler's file and the CPU: a new process reads it back."""
    pk = _probe_key()
    if pk is not None:
        found = _stored_probe(*pk)
        if found is not None:
            return found
    tc = _probe()
    if tc is not None and pk is not None and tc["cc"] == pk[1]:
        store.put(pk[0], "tc", json.dumps(tc, sort_keys=True).encode(), {"probe": "toolchain"})
    return tc


def _probe() -> dict | None:
    """`toolchain`'s probe itself."""
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
# need the cores: OpenMP threads that spin-wait for milliseconds after a parallel loop (libgomp's
# default) would fight them (a 5-10x slowdown on two cores). A thread that sleeps at once,
# though, puts a futex wake on every kernel's critical path: the master waits for the last
# worker at the loop's end barrier asleep, and on this VM waking it cost as much as the work
# (a 1024 x 1024 softmax took 0.67 ms instead of 0.37 on two threads). So threads spin for
# SPIN_COUNT iterations (libgomp counts about 100 a microsecond: ~10 us) before sleeping.
# libgomp reads both when the first kernel library loads it; a user's own setting of either wins.
SPIN_COUNT = 1000
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def compile_library(source: str) -> Binary:
    """The shared library of `source` (exporting `lg_kernel`): from the store, or compiled now."""
    tc = toolchain()
    if tc is None:
        raise CompileError("no C compiler found ($CC, cc, gcc, clang)")
    fl = flags()
    key = store.make_key(source, tc["id"], fl + tc["libs"], tc["arch"])
    found = _stored(key)
    if found is not None:
        return found
    return _compile_one(tc, fl, key, source)


def _stored(key: str) -> Binary | None:
    """The stored binary of `key` (naming its entry where a batch built it), or None."""
    hit = store.read_info(key, "so")
    if hit is None:
        return None
    data, info = hit
    entry = info.get("entry")
    if entry is None:
        return Binary(data, "so", key)
    if not isinstance(entry, str) or _ENTRY.fullmatch(entry) is None:
        return None  # not a record this module writes: compiled again (and overwritten)
    return EntryBinary(data, "so", key, entry, hashlib.sha256(data).hexdigest())


def _compile_one(tc: dict, fl: list[str], key: str, source: str) -> Binary:
    data = build_shared(tc["cc"], fl, source, tc["libs"])
    store.put(key, "so", data, {"compiler": tc["id"], "flags": fl})
    return Binary(data, "so", key)


# -- many kernels at once ---------------------------------------------------------------------
#
# A cold program compiles all its kernels before (or while) it first runs. Two costs add up
# when they are compiled one after another: each compiler run starts the driver, parses the
# prelude (<tgmath.h> and the helpers, about half of a small kernel's time) and links; and a
# large kernel's register allocation takes seconds of one core. So small kernels whose
# preludes are equal go into a few translation units (one compiler run and one library each,
# every kernel's `lg_kernel` renamed to an entry named by its key), large ones are units
# alone, and the units compile in parallel, one compiler process per core. Each kernel is stored under its own key (the whole
# library's bytes, with its entry in the record), so a later process finds it with or without
# batching. A unit that fails is compiled again kernel by kernel: the failing kernel gets its
# own error, with its own numbered source, and the others their libraries.

#: kernels in one translation unit at most (each is stored with the whole library's bytes)
MAX_BATCH = 8
#: a kernel body this long compiles alone (measured here: a 9 KB body 0.3 s, 23 KB 1.2 s, a
#: 48 KB one 20 s of CPU, most of it gcc's register allocation; fixed cost 50-100 ms a run)
ALONE_BODY = 16 * 1024
#: compiler processes at once (None: the cores this process may run on)
MAX_JOBS: int | None = None
_ENTRY = re.compile(r"lg_k_[0-9a-f]{16}")
_DEF = "void lg_kernel("


def jobs() -> int:
    """How many compiler processes run at once: one per core this process may use."""
    if MAX_JOBS is not None:
        return max(1, MAX_JOBS)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def compile_libraries(sources: Sequence[str], spare: int = 0) -> list[Binary | CompileError]:
    """The libraries of many kernels: stored ones read, the others compiled together (above).

    Each result is the kernel's binary or its `CompileError`; one failure costs the others
    nothing. `spare` cores are left free (off the critical path, the evaluating thread keeps one).
    """
    njobs = max(1, jobs() - spare)
    tc = toolchain()
    if tc is None:
        raise CompileError("no C compiler found ($CC, cc, gcc, clang)")
    fl = flags()
    out: list[Binary | CompileError | None] = [None] * len(sources)
    todo: dict[str, list[int]] = {}  # key -> positions (a source given twice compiles once)
    for i, src in enumerate(sources):
        key = store.make_key(src, tc["id"], fl + tc["libs"], tc["arch"])
        if key in todo:
            todo[key].append(i)
            continue
        found = _stored(key)
        if found is not None:
            out[i] = found
        else:
            todo[key] = [i]
    if todo:
        groups = plan_batches([(k, sources[ix[0]]) for k, ix in todo.items()], njobs)
        if len(groups) == 1:
            done = [_build_group(tc, fl, groups[0])]
        else:
            with ThreadPoolExecutor(max_workers=min(njobs, len(groups))) as pool:
                done = list(pool.map(lambda g: _build_group(tc, fl, g), groups))
        for results in done:
            for key, r in results:
                for i in todo[key]:
                    out[i] = r
    return out  # type: ignore[return-value]


def plan_batches(items: list[tuple[str, str]], njobs: int) -> list[list[tuple[str, str]]]:
    """(key, source) pairs in translation units, the largest first (the pool takes them in order).

    A large kernel (a body of `ALONE_BODY` characters or more: its compile is seconds of register
    allocation, the fixed cost nothing beside it) is a unit alone, so the pool balances such
    kernels as they finish. Small kernels with equal preludes share units, at most `njobs` of
    them per prelude (filled largest first into the lightest); a source whose entry cannot be
    renamed safely (not exactly one `lg_kernel`) is a unit alone.
    """
    units: list[list[tuple[str, str]]] = []
    by_prelude: dict[str, list[tuple[str, str]]] = {}
    for key, src in items:
        at = src.find(_DEF)
        if at < 0 or src.count("lg_kernel") != 1 or len(src) - at >= ALONE_BODY:
            units.append([(key, src)])
        else:
            by_prelude.setdefault(src[:at], []).append((key, src))
    for members in by_prelude.values():
        members.sort(key=lambda ks: -len(ks[1]))
        n = max(min(njobs, len(members)), -(-len(members) // MAX_BATCH))
        bins: list[list[tuple[str, str]]] = [[] for _ in range(n)]
        load = [0] * n
        for ks in members:
            free = [b for b in range(n) if len(bins[b]) < MAX_BATCH]
            b = min(free, key=lambda j: load[j])
            bins[b].append(ks)
            load[b] += len(ks[1])
        units += [b for b in bins if b]
    units.sort(key=lambda u: -sum(len(src) for _, src in u))
    return units


def batch_source(unit: list[tuple[str, str]]) -> tuple[str, list[str]]:
    """One translation unit of kernels sharing a prelude, and each kernel's entry name."""
    prelude = unit[0][1][: unit[0][1].find(_DEF)]
    line = prelude.count("\n") + 1
    parts, entries = [prelude], []
    for key, src in unit:
        entry = f"lg_k_{key[:16]}"
        body = src[len(prelude) :]
        # diagnostics name the kernel and its own line numbers
        parts.append(f'#line {line} "kernel-{key[:16]}.c"\n')
        parts.append(body.replace(_DEF, f"void {entry}(", 1))
        parts.append("" if body.endswith("\n") else "\n")
        entries.append(entry)
    return "".join(parts), entries


def _build_group(
    tc: dict, fl: list[str], unit: list[tuple[str, str]]
) -> list[tuple[str, Binary | CompileError]]:
    """Compile one unit (one compiler run); a failed unit is compiled again kernel by kernel."""
    if len(unit) > 1:
        text, entries = batch_source(unit)
        try:
            data = build_shared(tc["cc"], fl, text, tc["libs"], what="C (batch)", count=len(unit))
        except CompileError:
            with _runs_lock:
                RUNS["batch_failures"] += 1
        else:
            with _runs_lock:
                RUNS["batches"] += 1
            lib = hashlib.sha256(data).hexdigest()
            results: list[tuple[str, Binary | CompileError]] = []
            for (key, _), entry in zip(unit, entries):
                store.put(
                    key, "so", data, {"compiler": tc["id"], "flags": fl, "entry": entry, "kernels": len(unit)}
                )
                results.append((key, EntryBinary(data, "so", key, entry, lib)))
            return results
    results = []
    for key, src in unit:
        try:
            results.append((key, _compile_one(tc, fl, key, src)))
        except CompileError as e:
            results.append((key, e))
    return results


def build_shared(
    compiler: str,
    fl: list[str],
    source: str,
    libs: list[str],
    suffix: str = ".c",
    what: str = "C",
    count: int | None = 1,
) -> bytes:
    """The bytes of the shared library `compiler` builds from `source` (C, or C++ for the emulation).

    `count` is how many kernels the source holds (counted in `RUNS`); None for a build that
    is not the JIT's (an extension built beside it), counted nowhere.
    """
    if count is not None:
        with _runs_lock:
            RUNS["invocations"] += 1
            RUNS["kernels"] += count
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
