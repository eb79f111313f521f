"""Cold-start compile time of a program's fused kernels: one by one, in parallel, batched.

    python3 benchmarks/bench_compile.py --quick     # 8 small kernels (under a minute)
    python3 benchmarks/bench_compile.py             # also 4 large ones (a 2000-link chain's size)

A program of distinct fused regions (elementwise chains between matmuls, each chain another
structure, so each its own kernel) is evaluated once with an empty kernel store and no kernel
in memory, on the critical path (LAZYGRAPH_JIT_BACKGROUND=0), in three ways measured in the
same run: every kernel compiled alone, one after another (how launches compiled them before
programs prefetched their kernels); alone but one compiler process per core; and the
default (jit/compile_c.py: kernels sharing a prelude in a few translation units, compiled in
parallel). The table shows the first call's seconds and compiler runs; the ratios are over
one-by-one. Then the warm call for scale. No peers: the other frameworks' compile steps are
different work (XLA, MLX's graph compiler), not measured here. The last lines read
`result: <metric> = <number>`; on a busy machine compare ratios from one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ["LAZYGRAPH_JIT_BACKGROUND"] = "0"
os.environ["LAZYGRAPH_OPTIMIZE_BUDGET_MS"] = "0"
os.environ["LAZYGRAPH_JIT_MIN_SIZE"] = "1"

import numpy as np  # noqa: E402

import lazygraph as lg  # noqa: E402
from jit import c_program, compile_c, kernel, launch  # noqa: E402
from lazygraph.engine.state import ENGINE  # noqa: E402
from ops.settings import SETTINGS  # noqa: E402

UNARY = [lg.tanh, lg.exp, lg.sin, lg.cos, lg.sqrt, lg.log1p, lg.abs, lg.negative]


def _stage(i: int, links: int):
    """Chain i: `links` links, each a unary function of the stage's kind and two arithmetic ops."""
    f, g = UNARY[i % len(UNARY)], UNARY[(i * 3 + 1) % len(UNARY)]

    def run(x):
        for j in range(links):
            y = f(lg.tanh(x) * 0.25 + 0.5) if j % 2 == 0 else g(lg.abs(lg.tanh(x)) + 0.5)  # in every domain
            x = y * (0.5 + 0.01 * i) + x * 0.5
        return x

    return run


def _program(stages: list, a: np.ndarray, w: np.ndarray) -> np.ndarray:
    x, wl = lg.asarray(a), lg.asarray(w)
    for s in stages:
        x = s(x) @ wl
    return x.numpy()


def _cold(cache: str) -> None:
    """No kernel in memory, an empty store: what a new structure meets in a new process."""
    os.environ["LAZYGRAPH_CACHE_DIR"] = cache
    shutil.rmtree(cache, ignore_errors=True)
    SETTINGS.reload()
    lg.cache.clear(disk=False)
    ENGINE.regions.clear()
    with kernel._kernels_lock:
        kernel._kernels.clear()
    c_program.drop_loaded()


def measure(stages: list, batch: int, jobs: int | None) -> tuple[float, int, np.ndarray]:
    """First-call seconds and compiler runs with these batching settings, and the values."""
    compile_c.MAX_BATCH, compile_c.MAX_JOBS = batch, jobs
    a, w = _inputs()
    with tempfile.TemporaryDirectory(prefix="lazygraph-bench-compile-") as d:
        _cold(d)
        runs = compile_c.RUNS["invocations"]
        t = time.perf_counter()
        v = _program(stages, a, w)
        return time.perf_counter() - t, compile_c.RUNS["invocations"] - runs, v


def main() -> None:
    """Run the benchmark and print the table and `result:` lines."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small kernels only (under a minute)")
    args = ap.parse_args()
    if not compile_c.available():
        print("no C compiler: nothing to measure")
        return
    launch.prepare()  # the launcher extension is built once per machine, not per program
    cases = [("8 small kernels", [_stage(i, 4) for i in range(8)])]
    if not args.quick:
        cases.append(("4 large kernels", [_stage(i, 150) for i in range(4)]))
    cores = compile_c.jobs()
    modes = [("one by one", 1, 1), (f"parallel ({cores} jobs)", 1, None), ("batched + parallel", 8, None)]
    print(f"cores: {cores}")
    print(f"{'program':<18}{'mode':<24}{'first call s':>14}{'compiler runs':>15}{'vs one by one':>15}")
    results = {}
    for label, stages in cases:
        base, ref = None, None
        for mode, batch, jobs in modes:
            secs, runs, v = measure(stages, batch, jobs)
            if ref is None:
                base, ref = secs, v
            elif not np.array_equal(v, ref, equal_nan=True):
                raise SystemExit(f"{label}, {mode}: values differ from one-by-one compilation")
            results[(label, mode)] = (secs, runs)
            print(f"{label:<18}{mode:<24}{secs:>14.3f}{runs:>15}{base / secs:>14.2f}x")
        t = time.perf_counter()
        lg.cache.clear(disk=False)
        _program(stages, *_inputs())
        print(f"{label:<18}{'(kernels in memory)':<24}{time.perf_counter() - t:>14.3f}{0:>15}")
    small = [results[("8 small kernels", m)][0] for m, _, _ in modes]
    print(f"result: small_program_compile_seconds = {small[2]:.3f}")
    print(f"result: small_program_compile_seconds_one_by_one = {small[0]:.3f}")
    print(f"result: small_program_compile_speedup = {small[0] / small[2]:.2f}")
    print(f"result: small_kernel_compile_ms = {small[2] / 8 * 1e3:.1f}")
    if not args.quick:
        large = [results[("4 large kernels", m)][0] for m, _, _ in modes]
        print(f"result: large_program_compile_seconds = {large[2]:.3f}")
        print(f"result: large_program_compile_speedup = {large[0] / large[2]:.2f}")


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    return a, (rng.standard_normal((64, 64)) / 16).astype(np.float32)


if __name__ == "__main__":
    main()
