"""Data-parallel MNIST CNN training over MPI: steps per second for 1 and 2 processes.

    python3 benchmarks/bench_distributed.py            # global batch 256, 8 timed steps
    python3 benchmarks/bench_distributed.py --quick    # global batch 64, 3 timed steps (< 1 minute)

The model is examples/train_mnist.py's Dali CNN with Adam; the global batch stays the same
whatever the process count (each of N processes takes 1/N of it), so steps/s of 2 processes
over 1 is the data-parallel speedup. Each process uses one BLAS/OpenMP thread (the 1-process
run too), so 2 processes use 2 cores. Every configuration first takes three warm-up steps (the
step graph is optimized; the first hit queues its full optimization, which `lg.jit_wait()` lets
finish); then the timed steps run round-robin, one step of each configuration per round (each round starting
at the next configuration) with the ranks lined up before each step, so all see the same
machine load; rank 0's median step
time is reported.

    lazygraph            nn.DataParallel: one all-reduce per gradient recorded, the executor posts
                         them in 1 MiB buckets, overlap on (the defaults)
    per-gradient         executor bucketing off (set_bucket_bytes(0)): one call per gradient
    graph buckets        DataParallel(bucket_bytes=1 MiB): gradients flattened in the graph
    no overlap           each bucket completes where it is posted (set_overlap(False))
    torch DDP            PyTorch DistributedDataParallel over gloo, same model, batch and Adam

`comm share` is the median fraction of rank 0's step time spent in MPI calls and waits (handshake,
posting, completing; waiting for a slower rank counts too). Ratios: bucketing gain =
per-gradient time / bucketed time, overlap gain = no-overlap time / overlap time (above 1:
the feature helps). The driver launches `mpiexec -n 1` and `mpiexec -n 2` with this file in
worker mode; at the end it runs benchmarks/bench_dask.py's `run(quick)` when that file exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

HERE = Path(__file__).resolve().parent
CONFIGS = {  # name -> (DataParallel bucket_bytes, executor bucket bytes, overlap)
    "lazygraph": (0, 1 << 20, True),
    "per-gradient": (0, 0, True),
    "graph buckets": (1 << 20, 0, True),
    "no overlap": (0, 1 << 20, False),
}


def _data(batch: int, steps: int) -> tuple:
    """Bundled MNIST digits, normalized (N, 1, 28, 28) float32, and int64 labels."""
    import numpy as np

    import lazygraph as lg

    d = lg.datasets.load_mnist()
    n = batch * steps
    x = ((d.x_train[:n].astype(np.float32) / 255.0 - 0.1307) / 0.3081)[:, None]
    return x, d.y_train[:n].astype(np.int64)


def _lazygraph(name: str, batch: int, n: int) -> Callable[[int], None]:
    """One configuration's step function (step i uses batch i; this rank takes its slice)."""
    sys.path.insert(0, str(HERE.parent / "examples"))
    from train_mnist import dali_cnn

    import lazygraph as lg
    from lazygraph import nn

    D = lg.distributed
    bucket, executor, overlap = CONFIGS[name]
    r, w = D.rank(), D.world_size()
    x, y = _data(batch, n)
    lg.manual_seed(0)
    model = nn.DataParallel(dali_cnn(), bucket_bytes=bucket)
    opt = lg.optim.Adam(model.parameters(), lr=1e-3)
    per = batch // w

    def step(i: int) -> None:
        D.set_overlap(overlap)
        D.set_bucket_bytes(executor)
        lo = i * batch + r * per
        loss = nn.functional.cross_entropy(model(lg.asarray(x[lo : lo + per])), lg.asarray(y[lo : lo + per]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)
        D.set_overlap(True)
        D.set_bucket_bytes(1 << 20)

    return step


def _torch(batch: int, n: int) -> Callable[[int], None] | None:
    """The same step with PyTorch DistributedDataParallel (gloo); None without torch."""
    try:
        import torch
        import torch.distributed as td
        import torch.nn as tnn
    except ImportError:
        return None
    import lazygraph as lg

    r, w = lg.distributed.rank(), lg.distributed.world_size()
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getppid() % 1000))
    td.init_process_group("gloo", rank=r, world_size=w)
    torch.manual_seed(0)
    model = tnn.Sequential(
        tnn.Conv2d(1, 64, 5, padding="same"),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Conv2d(64, 64, 5, padding="same"),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Flatten(),
        tnn.Linear(3136, 1024),
        tnn.ReLU(),
        tnn.Linear(1024, 10),
    )
    ddp = tnn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    x, y = _data(batch, n)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    per = batch // w

    def step(i: int) -> None:
        lo = i * batch + r * per
        loss = tnn.functional.cross_entropy(ddp(x[lo : lo + per]), y[lo : lo + per])
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)

    return step


def worker(batch: int, warm: int, steps: int) -> None:
    """One mpiexec launch: the configurations' steps round-robin; rank 0 prints one JSON line.

    Round-robin (one step of each configuration per round, the ranks lined up by a barrier
    before each step) lets every configuration see the same machine load; per configuration
    the median step time and the median share of it spent communicating are reported.
    """
    import lazygraph as lg

    D = lg.distributed
    D.init()
    names = list(CONFIGS) if D.world_size() > 1 else ["lazygraph"]
    steps_of: dict[str, Callable[[int], None]] = {n: _lazygraph(n, batch, warm + steps) for n in names}
    peer = _torch(batch, warm + steps)
    if peer is not None:
        steps_of["torch DDP"] = peer
    for i in range(warm):
        for fn in steps_of.values():
            fn(i)
        if i == warm - 2:
            lg.jit_wait()  # the full optimizations and kernel compiles the first hits queued, done
    times: dict[str, list[float]] = {n: [] for n in steps_of}
    comm: dict[str, list[float]] = {n: [] for n in steps_of}
    order = list(steps_of)
    for i in range(warm, warm + steps):
        k = i % len(order)  # a rotating start: no configuration always follows the same one
        for name in order[k:] + order[:k]:
            fn = steps_of[name]
            D.barrier()
            c0, t0 = D.communication_seconds(), time.perf_counter()
            fn(i)
            t = time.perf_counter() - t0
            times[name].append(t)
            comm[name].append((D.communication_seconds() - c0) / t)
    out = {
        n: {
            "steps_s": 1.0 / statistics.median(times[n]),
            "comm": statistics.median(comm[n]) if n != "torch DDP" else float("nan"),
        }
        for n in steps_of
    }
    if D.rank() == 0:
        print("RESULT " + json.dumps(out), flush=True)


def _launch(n: int, batch: int, warm: int, steps: int) -> dict:
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("bench_distributed: mpiexec not found (pip install 'lazygraph[distributed]')")
    cmd = [mpiexec, "-n", str(n), sys.executable, __file__, "--worker", str(batch), str(warm), str(steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"bench_distributed: {n}-process run failed:\n{p.stdout}\n{p.stderr}")
    return json.loads(lines[-1][len("RESULT ") :])


def _dask(quick: bool) -> list[str]:
    """benchmarks/bench_dask.py's result lines, when that benchmark exists."""
    path = HERE / "bench_dask.py"
    if not path.exists():
        return []
    spec = importlib.util.spec_from_file_location("bench_dask", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return list(mod.run(quick))


def main() -> None:
    """Launch the 1- and 2-process runs, print the table and the result lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batch 64, 3 timed steps (< 1 minute)")
    ap.add_argument("--worker", nargs=3, type=int, metavar=("BATCH", "WARM", "STEPS"), help=argparse.SUPPRESS)
    ap.add_argument("--no-dask", action="store_true", help="skip benchmarks/bench_dask.py")
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    batch, warm, steps = (64, 3, 3) if args.quick else (256, 3, 8)
    one = _launch(1, batch, warm, steps)
    two = _launch(2, batch, warm, steps)
    print(f"MNIST CNN (Adam), global batch {batch}, {steps} timed steps; 1 thread per process")
    print(
        f"{'configuration':<14} {'1 proc steps/s':>15} {'2 proc steps/s':>15} {'speedup':>8} {'comm share':>11}"
    )
    for name in [*CONFIGS, "torch DDP"]:
        a, b = one.get(name), two.get(name)
        if b is None:
            continue
        s1 = f"{a['steps_s']:.3f}" if a else "-"
        sp = f"{b['steps_s'] / a['steps_s']:.2f}" if a else "-"
        share = "-" if b["comm"] != b["comm"] else f"{b['comm']:.1%}"
        print(f"{name:<14} {s1:>15} {b['steps_s']:>15.3f} {sp:>8} {share:>11}")
    lg2 = two["lazygraph"]
    bucketing = lg2["steps_s"] / two["per-gradient"]["steps_s"]
    overlap = lg2["steps_s"] / two["no overlap"]["steps_s"]
    lines = [
        f"result: mnist_cnn_steps_per_s_1proc = {one['lazygraph']['steps_s']:.3f}",
        f"result: mnist_cnn_steps_per_s_2proc = {lg2['steps_s']:.3f}",
        f"result: data_parallel_speedup_2proc = {lg2['steps_s'] / one['lazygraph']['steps_s']:.3f}",
        f"result: communication_share_2proc = {lg2['comm']:.3f}",
        f"result: bucketing_gain = {bucketing:.3f}",
        f"result: overlap_gain = {overlap:.3f}",
    ]
    if "torch DDP" in two:
        lines.append(
            f"result: steps_per_s_2proc_vs_torch_ddp = {lg2['steps_s'] / two['torch DDP']['steps_s']:.3f}"
        )
    if not args.no_dask:
        lines += _dask(args.quick)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
