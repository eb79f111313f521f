"""Peak memory of execution orders on layered graphs: lazygraph's schedulers vs an approximate DP.

    python3 benchmarks/bench_schedule.py --quick   # 2 graphs per size, K = 16 (under a minute)
    python3 benchmarks/bench_schedule.py           # 300 graphs per size, K = 64 (about an hour)
    python3 benchmarks/bench_schedule.py --jobs 2  # graphs in parallel processes

(a) 500-, 1,000- and 2,000-node layered graphs (benchmarks/layered_graphs.py, seed = 1000 x size
    + index): for every scheduler, the peak memory's gap in % to the paper's approximate DP (a
    beam of width K over sets of scheduled nodes, run here on the same graph) and its time per
    graph. `best_order` is lazygraph's portfolio with a 1 s budget. The paper's anchors are
    printed beside ours: they are gaps to the paper's own approximate DP, whose width we do not
    know, on graphs from its generator with parameters we do not know either, so compare the
    shape, not the last digit.
(b) 50-100-node layered graphs: the exact search (state cap, time limit per graph) proves the
    optimum where it can; gap of each scheduler to that optimum.
(c) The buffer planner on `best_order`'s orders: buffers per value and the pool's peak vs the
    order's.
The MNIST training step's peak with and without the executor's planner (predicted and measured)
is `benchmarks/bench_memory.py`.

The last lines read `result: <metric> = <number>`.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from layered_graphs import layered_graph  # noqa: E402

from optimizer.schedule import (  # noqa: E402
    HEURISTICS,
    beam_order,
    best_order,
    exact_order,
    peak_memory,
    plan_buffers,
)

#: the paper's Table 1: % gap to its approximate DP at 500 / 1,000 / 2,000 nodes
ANCHORS = {
    "depth-first order": (12.9, 7.1, 3.57),
    "breadth-first order": (20.94, 11.31, 6.42),
    "best of random orders": (6.86, 2.62, 0.31),
    "depth-first DP (1 h cap)": (5.76, 3.84, 2.40),
    "Topoformer greedy": (4.32, 0.48, -1.47),
    "Topoformer beam": (3.21, 0.08, -1.66),
}
SIZES = (500, 1000, 2000)


def run_graph(n: int, seed: int, width: int, budget: float) -> dict[str, tuple[int, float]]:
    """(peak bytes, seconds) of every scheduler on one layered graph, plus buffer statistics."""
    dag = layered_graph(n, seed)
    row: dict[str, tuple[int, float]] = {}
    for name, scheduler in HEURISTICS.items():
        t0 = time.perf_counter()
        order = scheduler(dag)
        row[name] = (peak_memory(dag, order), time.perf_counter() - t0)
    t0 = time.perf_counter()
    _, ref_peak = beam_order(dag, width)
    row["approx_dp"] = (ref_peak, time.perf_counter() - t0)
    t0 = time.perf_counter()
    result = best_order(dag, budget)
    row["best_order"] = (result.peak, time.perf_counter() - t0)
    row["lower_bound"] = (result.lower_bound, 0.0)
    plan = plan_buffers(dag, result.order)
    values = sum(1 for v in range(dag.n) if dag.root[v] == v and dag.sizes[v])
    row["buffers"] = (len(plan.buffers), values)
    row["pool_peak"] = (plan.peak, result.peak)
    return row


def run_small(index: int, limit: float, budget: float, width: int) -> dict[str, tuple[int, float]]:
    """Schedulers and the exact optimum (if found within `limit` seconds) on a 50-100-node graph."""
    n = 50 + (index * 37) % 51
    dag = layered_graph(n, 77_000 + index)
    row = {name: (peak_memory(dag, f(dag)), 0.0) for name, f in HEURISTICS.items()}
    row["approx_dp"] = (beam_order(dag, width)[1], 0.0)
    t0 = time.perf_counter()
    result = best_order(dag, budget)
    row["best_order"] = (result.peak, time.perf_counter() - t0)
    t0 = time.perf_counter()
    order, bound, proven = exact_order(
        dag, result.peak, state_cap=1_000_000, deadline=time.perf_counter() + limit
    )
    optimum = (bound if order is not None else result.peak) if proven else -1
    row["optimum"] = (optimum, time.perf_counter() - t0)
    return row


def _mean_ci(xs: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(xs)
    half = 1.96 * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return mean, half


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 graphs per size, K = 16 (under a minute)")
    parser.add_argument("--graphs", type=int, help="graphs per size (default 300, quick 2)")
    parser.add_argument("--width", type=int, help="width K of the approximate DP (default 64, quick 16)")
    parser.add_argument("--budget", type=float, default=1.0, help="best_order's time budget in seconds")
    parser.add_argument("--jobs", type=int, default=1, help="graphs evaluated in parallel processes")
    parser.add_argument(
        "--sizes", type=int, nargs="+", choices=SIZES, default=list(SIZES), help="graph sizes"
    )
    parser.add_argument(
        "--small", type=int, help="50-100-node graphs for the exact optimum (default 60, quick 3)"
    )
    args = parser.parse_args(argv)
    graphs = args.graphs or (2 if args.quick else 300)
    width = args.width or (16 if args.quick else 64)
    small, limit = (3, 4.0) if args.quick else (60, 20.0)
    if args.small is not None:
        small = args.small
    sizes = tuple(args.sizes)
    print(
        f"lazygraph scheduling benchmark, Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; {graphs} graphs per size, approximate DP width K = {width}, "
        f"best_order budget {args.budget:g} s, {args.jobs} process(es)"
    )
    t_start = time.perf_counter()
    rows: dict[int, list[dict]] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for n in sizes:
            futures = [pool.submit(run_graph, n, 1000 * n + i, width, args.budget) for i in range(graphs)]
            rows[n] = [f.result() for f in futures]
            print(
                f"  {n}-node graphs done at {time.perf_counter() - t_start:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        small_rows = [
            f.result() for f in [pool.submit(run_small, i, limit, args.budget, width) for i in range(small)]
        ]

    names = [*HEURISTICS, "approx_dp", "best_order"]
    print(f"\n(a) % gap in peak memory to the approximate DP (K = {width}), mean ± 95% CI; ms per graph")
    header = f"{'scheduler':<24}" + "".join(f"{f'{n} nodes':>18}{'ms':>9}" for n in sizes)
    print(header)
    print("-" * len(header))
    gaps: dict[str, dict[int, float]] = {}
    for name in [*names, "lower_bound"]:
        line = f"{name:<24}"
        for n in sizes:
            gap = [100.0 * (r[name][0] / r["approx_dp"][0] - 1.0) for r in rows[n]]
            mean, half = _mean_ci(gap)
            ms = statistics.fmean(r[name][1] for r in rows[n]) * 1e3
            gaps.setdefault(name, {})[n] = mean
            line += f"{mean:>11.2f} ±{half:>5.2f}" + (f"{ms:>9.1f}" if name != "lower_bound" else f"{'':>9}")
        print(line)
    wins = {n: sum(r["best_order"][0] <= r["approx_dp"][0] for r in rows[n]) for n in sizes}
    print(
        "best_order ties or beats the approximate DP on "
        + ", ".join(f"{wins[n]}/{graphs} ({n})" for n in sizes)
    )

    print("\npaper anchors (% gap to the paper's approximate DP) beside ours")
    print(f"{'':<28}" + "".join(f"{n:>10}" for n in sizes))
    for label, values in ANCHORS.items():
        print(f"{'paper: ' + label:<28}" + "".join(f"{values[SIZES.index(n)]:>10.2f}" for n in sizes))
    for label, name in (
        ("depth_first", "depth_first"),
        ("breadth_first", "breadth_first"),
        ("best_order", "best_order"),
    ):
        print(f"{'lazygraph: ' + label:<28}" + "".join(f"{gaps[name][n]:>10.2f}" for n in sizes))

    found = [r for r in small_rows if r["optimum"][0] >= 0]
    opt_gap = {}
    if small_rows:
        print(
            f"\n(b) exact optimum on 50-100-node graphs: found for {len(found)}/{len(small_rows)} (limit {limit:g} s)"
        )
        if found:
            print(f"{'scheduler':<24}{'% above optimum':>18}{'optimal on':>14}")
            for name in names:
                gap = [100.0 * (r[name][0] / r["optimum"][0] - 1.0) for r in found]
                hits = sum(r[name][0] == r["optimum"][0] for r in found)
                opt_gap[name] = statistics.fmean(gap)
                print(f"{name:<24}{opt_gap[name]:>18.2f}{f'{hits}/{len(found)}':>14}")
            print(f"exact search: {statistics.fmean(r['optimum'][1] for r in found):.2f} s per solved graph")

    all_rows = [r for n in sizes for r in rows[n]]
    per_value = sum(r["buffers"][0] for r in all_rows) / sum(r["buffers"][1] for r in all_rows)
    same_peak = sum(r["pool_peak"][0] == r["pool_peak"][1] for r in all_rows)
    print(
        f"\n(c) buffer plans of best_order's orders: {per_value:.3f} buffers per value; "
        f"pool peak == order peak on {same_peak}/{len(all_rows)} graphs"
    )
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s\n")
    for n in sizes:
        print(f"result: best_order_gap_pct_{n} = {gaps['best_order'][n]:.2f}")
    for n in sizes:
        ms = statistics.fmean(r["best_order"][1] for r in rows[n]) * 1e3
        print(f"result: best_order_ms_per_graph_{n} = {ms:.0f}")
    for n in sizes:
        ms = statistics.fmean(r["approx_dp"][1] for r in rows[n]) * 1e3
        print(f"result: approx_dp_ms_per_graph_{n} = {ms:.0f}")
    for n in sizes:
        margin = gaps["best_order"][n] - ANCHORS["Topoformer beam"][SIZES.index(n)]
        print(f"result: margin_vs_topoformer_beam_{n} = {margin:.2f}")
    if found:
        print(f"result: best_order_gap_to_optimum_pct = {opt_gap['best_order']:.2f}")
    if small_rows:
        print(f"result: exact_optimum_found = {len(found)}/{len(small_rows)}")
    print(f"result: buffers_per_value = {per_value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
