"""Dask arrays of lazygraph chunks against NumPy chunks on a LocalCluster (2 worker processes).

    python3 benchmarks/bench_dask.py            # a 4 GiB float64 array (minutes on 2 busy cores)
    python3 benchmarks/bench_dask.py --quick    # 64 MiB (well under a minute)

The array is drawn chunk by chunk on the workers (`da.random.default_rng(seed).standard_normal`
with the "numpy" or the "lazygraph" array backend: the same bit generators, so the same
values), never materialised whole. Two workloads, each computed to a small result:

    reduction   x.std(axis=0)                                   (Dask's tree reduction)
    pipeline    (tanh(x) * 0.5 + exp(-x * x) - x / 3).sum(axis=0)  (elementwise, then a sum)

Each workload runs once with NumPy chunks (warming the workers up), once with lazygraph chunks
cold (each worker optimizes and compiles every new chunk structure), then `--repeat` times
each way, alternating (lazygraph warm: every chunk replays its cached transformation); the
best NumPy and best warm lazygraph times are kept. Times include drawing the array, as both
sides draw it. Ratio = lazygraph warm / NumPy (below 1: lazygraph faster).

The cache figures are gathered from both workers with `lazygraph.dask.cache_stats(client)`
over all lazygraph runs; with cold caches the expected hit rate is 1 - (structures met per
worker, summed) / evaluations, and entries already on disk (a previous run's) turn misses
into hits. `run(quick)` returns the `result: <metric> = <number>` lines
(benchmarks/bench_distributed.py calls it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

# one BLAS/OpenMP thread per worker process: the 2 workers use the 2 cores
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import lazygraph as lg  # noqa: E402

GIB = 1 << 30


def _workloads() -> dict[str, Any]:
    """The Dask programs timed, each on a Dask array of either chunk type."""
    return {
        "reduction": lambda x: x.std(axis=0),
        "pipeline": lambda x: (np.tanh(x) * 0.5 + np.exp(-x * x) - x / 3).sum(axis=0),
    }


def _array(backend: str, shape: tuple[int, int], chunks: tuple[int, int]) -> Any:
    """A random Dask array drawn chunk by chunk on the workers, NumPy or lazygraph chunks."""
    import dask
    import dask.array as da

    with dask.config.set({"array.backend": backend}):
        return da.random.default_rng(2026).standard_normal(shape, chunks=chunks)


def _time(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def run(quick: bool, repeat: int | None = None) -> list[str]:
    """Time both workloads with NumPy and lazygraph chunks; print the table, return the result lines."""
    import dask
    from distributed import Client, LocalCluster

    import lazygraph.dask as lgd

    shape, chunks = ((4096, 2048), (1024, 1024)) if quick else ((16384, 32768), (4096, 4096))
    repeat = (2 if quick else 1) if repeat is None else repeat
    nchunks = (shape[0] // chunks[0]) * (shape[1] // chunks[1])
    gib = shape[0] * shape[1] * 8 / GIB
    print(f"array {shape[0]}x{shape[1]} float64 = {gib:.2f} GiB in {nchunks} chunks of {chunks}")
    rows, results = [], []
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as client,
        dask.config.set({"distributed.worker.daemon": False}),
    ):
        lgd.reset_cache_stats(client)
        for name, program in _workloads().items():
            # NumPy first (it also warms the workers up), then lazygraph cold, then warm runs
            # alternating with NumPy's so that both see the same machine load
            t_np, ref = _time(lambda p=program: p(_array("numpy", shape, chunks)).compute())
            t_cold, out = _time(lambda p=program: p(_array("lazygraph", shape, chunks)).compute())
            t_warm = float("inf")
            for _ in range(repeat):
                t_np = min(t_np, _time(lambda p=program: p(_array("numpy", shape, chunks)).compute())[0])
                t_warm = min(
                    t_warm, _time(lambda p=program: p(_array("lazygraph", shape, chunks)).compute())[0]
                )
            kind = type(out).__module__.split(".")[0]
            if kind != "lazygraph":
                raise AssertionError(f"{name}: the result is a {type(out).__name__}, not a lazygraph array")
            err = float(np.max(np.abs(np.asarray(out) - ref)))
            if not np.allclose(np.asarray(out), ref, rtol=1e-9, atol=1e-9):
                raise AssertionError(f"{name}: lazygraph chunks differ from NumPy's by {err:.3g}")
            rows.append((name, t_np, t_cold, t_warm, t_warm / t_np, err))
            results += [
                f"result: dask_{name}_numpy_s = {t_np:.3f}",
                f"result: dask_{name}_lazygraph_s = {t_warm:.3f}",
                f"result: dask_{name}_lazygraph_cold_s = {t_cold:.3f}",
                f"result: dask_{name}_ratio = {t_warm / t_np:.3f}",
            ]
        stats = lgd.cache_stats(client)
    print(
        f"{'workload':<10} {'numpy s':>9} {'lg cold s':>10} {'lg warm s':>10} {'ratio':>7} {'max |diff|':>11}"
    )
    for name, t_np, t_cold, t_warm, ratio, err in rows:
        print(f"{name:<10} {t_np:>9.3f} {t_cold:>10.3f} {t_warm:>10.3f} {ratio:>7.3f} {err:>11.2e}")
    print("lazygraph cache, per worker process (all lazygraph runs):")
    for address, s in stats["workers"].items():
        print(
            f"  {address}: {s['evaluations']} evaluations, {s['hits']} hits ({s['disk_hits']} from disk), "
            f"{s['misses']} misses, {s['distinct_graphs']} structures, hit rate {s['hit_rate']:.3f}"
        )
    total = stats["total"]
    # cold caches: each worker process misses once per structure it meets, replays the rest
    structures = sum(s["distinct_graphs"] for s in stats["workers"].values())
    expected = 1 - structures / total["evaluations"] if total["evaluations"] else 0.0
    print(
        f"  total: {total['evaluations']} evaluations, {total['hits']} hits, {total['misses']} misses, "
        f"hit rate {total['hit_rate']:.3f} (expected from cold caches: 1 - {structures} structures "
        f"/ {total['evaluations']} evaluations = {expected:.3f}; hits from disk come on top)"
    )
    results += [
        f"result: dask_array_gib = {gib:.2f}",
        f"result: dask_chunks = {nchunks}",
        f"result: dask_cache_hit_rate = {total['hit_rate']:.4f}",
        f"result: dask_cache_hit_rate_expected = {expected:.4f}",
        f"result: dask_cache_misses = {total['misses']}",
    ]
    return results


def main(argv: list[str] | None = None) -> int:
    """Standalone: the table, then the result lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a 64 MiB array instead of 4 GiB")
    ap.add_argument(
        "--repeat", type=int, default=None, help="warm runs per workload (default 2, 1 in the full run)"
    )
    args = ap.parse_args(argv)
    print(f"lazygraph {lg.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}")
    for line in run(args.quick, args.repeat):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
