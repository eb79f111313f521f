"""Peak memory of the MNIST training step, with and without the executor's memory planner.

    python3 benchmarks/bench_memory.py --quick   # batch 64, 4 timed steps (under a minute)
    python3 benchmarks/bench_memory.py           # batch 256, 8 timed steps
    python3 benchmarks/bench_memory.py --hot [--quick]   # unmetered step time: reuse by kind

The Dali CNN (benchmarks/bench_cache.py) trained with SGD + momentum; every evaluation is
metered (LAZYGRAPH_MEASURE=1): per training step, the planner's predicted peak and the measured
peak (bytes of the buffers the executor holds, counted as it allocates and frees; parameters
and inputs the user holds are not counted), with the planner on (chosen order, buffer reuse)
and off (LAZYGRAPH_SCHEDULE=0: recorded order, no reuse), and the step time in each setting.
The peer, measured in the same run: the same step written by hand in NumPy
(benchmarks/numpy_models.py), its peak bytes allocated during the step from tracemalloc
(NumPy reports its buffers there). The last lines read `result: <metric> = <number>`.

`--hot` times the unmetered step (the hot path) in one process, alternating blocks of steps
between the executor's full buffer layout and one where only ufunc steps write into freed
buffers (JIT regions, library GEMMs and matmuls allocate, as before they took buffers):
median wall and CPU time per step and minor page faults, so a shared machine's load drifts
over both settings alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_cache import LR, MOMENTUM, dali_cnn, mnist_batches  # noqa: E402

import lazygraph as lg  # noqa: E402
from lazygraph import nn  # noqa: E402
from lazygraph.engine import ENGINE  # noqa: E402

MIB = 2**20


def reuse_by_kind() -> dict[str, list[int]]:
    """Steps that write into a freed buffer in the cached plans' layouts: kind -> [steps, bytes]."""
    out: dict[str, list[int]] = {}
    for entry in ENGINE.memory.entries():
        for variant in entry.variants:
            program = variant.program
            layout = max(program.layouts.values(), key=lambda lay: lay.reuses, default=None)
            if layout is None:
                continue
            for step, b, first in zip(program.steps, layout.take, program.first_value):
                size = layout.key[0][first]  # the bytes of the step's first value (what it writes)
                if b >= 0:
                    kind = step.recipe.ctor if step.recipe is not None else step.name
                    tally = out.setdefault(kind, [0, 0])
                    tally[0] += 1
                    tally[1] += size
    return out


def run_lazygraph(schedule: str, data: list, warmup: int) -> dict[str, Any]:
    """Train on `data` with the planner on ("1") or off ("0"): peaks and step times after warm-up."""
    lg.settings.update(schedule=schedule)
    ENGINE.memory.clear()  # only this setting's plans (and their layouts) are counted below
    lg.manual_seed(0)
    model = dali_cnn()
    opt = lg.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    preds, meas, times, reused = [], [], [], []
    for i, (x, y) in enumerate(data):
        ENGINE.stats.reset()
        t0 = time.perf_counter()
        loss = nn.functional.cross_entropy(model(lg.asarray(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)
        t1 = time.perf_counter()
        if i >= warmup:
            s = ENGINE.stats
            preds.append(s.peak_predicted)
            meas.append(s.peak_measured)
            reused.append(s.buffers_reused + s.inplace_writes)
            times.append(t1 - t0)
    return {
        "predicted": statistics.median(preds),
        "measured": statistics.median(meas),
        "mismatch_steps": sum(p != m for p, m in zip(preds, meas)),
        "reused": statistics.median(reused),
        "step_ms": statistics.median(times) * 1e3,
        "by_kind": reuse_by_kind(),
    }


def run_numpy(data: list, warmup: int) -> float:
    """The hand-written NumPy step's peak bytes allocated during a step (median)."""
    from numpy_models import NumpyCNN

    lg.manual_seed(0)
    weights = {k: np.array(v) for k, v in dali_cnn().state_dict().items()}
    peer = NumpyCNN(weights, LR, MOMENTUM)
    peaks = []
    for i, (x, y) in enumerate(data):
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        peer.step(x, y)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        if i >= warmup:
            peaks.append(peak)
    return statistics.median(peaks)


def run_hot(data: list, blocks: int) -> dict[str, dict[str, float]]:
    """Unmetered steps, alternating blocks: full layout vs ufunc-only reuse (medians per step)."""
    from lazygraph.engine import memory

    real = memory.writers

    def ufuncs_only(program: Any, nodes: list) -> list:
        # elementwise steps write through their NumPy ufunc; matmul's is np.matmul
        return [w if isinstance(w, np.ufunc) and w is not np.matmul else None for w in real(program, nodes)]

    lg.settings.update(measure=False)
    lg.manual_seed(0)
    model = dali_cnn()
    opt = lg.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    samples: dict[str, list[tuple[float, float, int]]] = {"all": [], "ufuncs only": []}
    try:
        for _ in range(blocks):
            for name, writers in (("all", real), ("ufuncs only", ufuncs_only)):
                memory.writers = writers
                ENGINE.memory.clear()  # layouts are learnt anew with these writers
                for i, (x, y) in enumerate(data):
                    r0, c0, t0 = (
                        resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
                        time.process_time(),
                        time.perf_counter(),
                    )
                    loss = nn.functional.cross_entropy(model(lg.asarray(x)), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    float(loss)
                    t1, c1 = time.perf_counter(), time.process_time()
                    if i >= 2:  # a miss, then the metered run that learns the layout
                        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0
                        samples[name].append((t1 - t0, c1 - c0, faults))
    finally:
        memory.writers = real
    return {
        k: {
            "wall_ms": statistics.median(s[0] for s in v) * 1e3,
            "cpu_ms": statistics.median(s[1] for s in v) * 1e3,
            "faults": statistics.median(s[2] for s in v),
        }
        for k, v in samples.items()
    }


def main_hot(batch: int, steps: int, blocks: int) -> int:
    """Print the hot-path comparison and its result lines."""
    print(
        f"MNIST training step, batch {batch}, unmetered: {blocks} blocks of {steps} timed steps per setting"
    )
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared)")
    r = run_hot(mnist_batches(batch, steps + 2), blocks)
    print(f"{'writes into freed buffers':28}{'wall ms':>10}{'cpu ms':>10}{'faults':>10}")
    for name, v in r.items():
        print(f"{name:28}{v['wall_ms']:10.1f}{v['cpu_ms']:10.1f}{v['faults']:10.0f}")
    a, u = r["all"], r["ufuncs only"]
    print(f"result: hot_step_cpu_ms_all = {a['cpu_ms']:.1f}")
    print(f"result: hot_step_cpu_ms_ufuncs_only = {u['cpu_ms']:.1f}")
    print(f"result: hot_step_cpu_all_over_ufuncs_only = {a['cpu_ms'] / u['cpu_ms']:.3f}")
    print(f"result: hot_step_faults_all = {a['faults']:.0f}")
    print(f"result: hot_step_faults_ufuncs_only = {u['faults']:.0f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Print the table and the result lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batch 64, 4 timed steps")
    ap.add_argument("--hot", action="store_true", help="unmetered step time, full layout vs ufunc-only reuse")
    args = ap.parse_args(argv)
    if "LAZYGRAPH_CACHE" not in os.environ:
        lg.settings.update(cache="memory")
    if args.hot:
        return main_hot(*((64, 6, 6) if args.quick else (256, 6, 3)))
    batch, steps, warmup = (64, 4, 2) if args.quick else (256, 8, 2)
    lg.settings.update(measure=True)
    print(
        f"MNIST training step (Dali CNN, SGD + momentum), batch {batch}, {steps} metered steps after {warmup}"
    )
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared)")
    data = mnist_batches(batch, steps + warmup)
    on = run_lazygraph("1", data, warmup)
    off = run_lazygraph("0", data, warmup)
    lg.settings.update(schedule=None)  # back to the environment's value
    peer = run_numpy(data, warmup)
    print(f"{'':34}{'predicted MiB':>14}{'measured MiB':>14}{'vs NumPy':>10}{'reused':>8}{'step ms':>9}")
    for name, r in (("lazygraph, planner on", on), ("lazygraph, LAZYGRAPH_SCHEDULE=0", off)):
        print(
            f"{name:34}{r['predicted'] / MIB:14.2f}{r['measured'] / MIB:14.2f}"
            f"{r['measured'] / peer:10.2f}{r['reused']:8.0f}{r['step_ms']:9.1f}"
        )
    print(f"{'NumPy by hand (tracemalloc)':34}{'':14}{peer / MIB:14.2f}{1.0:10.2f}")
    kinds = on["by_kind"]
    reused_mib = sum(b for _, b in kinds.values()) / MIB
    detail = ", ".join(f"{k} {n} ({b / MIB:.2f} MiB)" for k, (n, b) in sorted(kinds.items())) or "none"
    print(f"planner on, steps writing into a freed buffer: {detail}")
    print(
        f"steps whose measured peak differs from the prediction: {on['mismatch_steps'] + off['mismatch_steps']}"
    )
    print(f"result: mnist_peak_mib_planner = {on['measured'] / MIB:.2f}")
    print(f"result: mnist_peak_mib_predicted_planner = {on['predicted'] / MIB:.2f}")
    print(f"result: mnist_peak_mib_recorded_order = {off['measured'] / MIB:.2f}")
    print(f"result: mnist_peak_mib_numpy = {peer / MIB:.2f}")
    print(f"result: mnist_peak_planner_over_recorded = {on['measured'] / off['measured']:.3f}")
    print(f"result: mnist_buffers_reused_planner = {on['reused']:.0f}")
    print(f"result: mnist_reused_mib_planner = {reused_mib:.2f}")
    print(f"result: mnist_step_ms_planner = {on['step_ms']:.1f}")
    print(f"result: mnist_step_ms_recorded_order = {off['step_ms']:.1f}")
    print(f"result: peak_mismatch_steps = {on['mismatch_steps'] + off['mismatch_steps']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
