"""Time per training step: lazygraph against the same models in plain NumPy and PyTorch CPU eager.

    python3 benchmarks/bench_train.py            # full run (a few minutes on 2 cores)
    python3 benchmarks/bench_train.py --quick    # fewer steps

Two models, batch 256 of real MNIST digits (the bundled sample):
  cnn: the Dali CNN (conv 5x5 1->64 + ReLU, maxpool 2, conv 5x5 64->64 + ReLU, maxpool 2,
       FC 3136->1024 + ReLU, FC 1024->10, softmax cross-entropy), SGD with momentum 0.9;
  mlp: 784-1024-1024-10 with ReLU, Adam.
A step is forward, backward and update as a user writes it: for lazygraph, recording the
model and loss, `loss.backward()`, `opt.step()` (the evaluation point) and reading the loss.
All implementations start from the same weights; the first steps' losses must agree (a
correctness check printed before the table). Steps then run round-robin, one step of each
implementation per round, so all see the same machine load; every figure is a median over
rounds and each ratio (lazygraph / peer, below 1 means lazygraph is faster) is the median of
the per-round ratios. PyTorch is optional (pip install ".[bench]"); without it its columns
are skipped. The last lines read `result: <metric> = <number>`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from numpy_models import NumpyCNN, NumpyMLP  # noqa: E402

import lazygraph as lg  # noqa: E402
from lazygraph import nn  # noqa: E402

try:
    import torch
except ImportError:  # optional peer
    torch = None

BATCH = 256
CNN_LR, CNN_MOMENTUM, MLP_LR = 0.01, 0.9, 1e-3
# PyTorch CPU eager on a 2-core machine (../shared/reference/anchors.md), for orientation only.
ANCHOR_TORCH_S = {"cnn": 0.57, "mlp": 0.025}

Step = Callable[[np.ndarray, np.ndarray], float]


def build(name: str, ns: Any) -> Any:
    """The model in a namespace with PyTorch's module names (lg.nn or torch.nn)."""
    if name == "cnn":
        return ns.Sequential(
            ns.Conv2d(1, 64, 5, padding=2),
            ns.ReLU(),
            ns.MaxPool2d(2),
            ns.Conv2d(64, 64, 5, padding=2),
            ns.ReLU(),
            ns.MaxPool2d(2),
            ns.Flatten(),
            ns.Linear(3136, 1024),
            ns.ReLU(),
            ns.Linear(1024, 10),
        )
    return ns.Sequential(
        ns.Linear(784, 1024), ns.ReLU(), ns.Linear(1024, 1024), ns.ReLU(), ns.Linear(1024, 10)
    )


def lazygraph_step(name: str) -> tuple[Step, dict[str, np.ndarray]]:
    """A lazygraph training step and the initial weights it starts from."""
    model = build(name, nn)
    if name == "cnn":
        opt = lg.optim.SGD(model.parameters(), lr=CNN_LR, momentum=CNN_MOMENTUM)
    else:
        opt = lg.optim.Adam(model.parameters(), lr=MLP_LR)

    def step(x: np.ndarray, y: np.ndarray) -> float:
        loss = nn.functional.cross_entropy(model(lg.asarray(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss)

    return step, {k: np.array(v) for k, v in model.state_dict().items()}


def numpy_step(name: str, weights: dict[str, np.ndarray]) -> Step:
    """The same step written by hand in NumPy."""
    impl = NumpyCNN(weights, CNN_LR, CNN_MOMENTUM) if name == "cnn" else NumpyMLP(weights, MLP_LR)
    return impl.step


def torch_step(name: str, weights: dict[str, np.ndarray]) -> Step:
    """The same step in PyTorch eager mode on the CPU."""
    model = build(name, torch.nn)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()})
    if name == "cnn":
        opt = torch.optim.SGD(model.parameters(), lr=CNN_LR, momentum=CNN_MOMENTUM)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=MLP_LR)

    def step(x: np.ndarray, y: np.ndarray) -> float:
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def batches(name: str, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`count` batches of real digits, shaped for the model."""
    d = lg.datasets.load_mnist()
    x = (d.x_train.astype(np.float32) / 255.0 - 0.1307) / 0.3081
    x = x[:, None] if name == "cnn" else x.reshape(-1, 784)
    y = d.y_train.astype(np.int64)
    n = len(y) // BATCH
    return [
        (x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH])
        for i in (j % n for j in range(count))
    ]


def bench(name: str, warmup: int, rounds: int) -> dict[str, Any]:
    """Check the first steps agree, then time `rounds` round-robin steps of each implementation."""
    lg.manual_seed(0)
    lg_step, weights = lazygraph_step(name)
    steps = {"lazygraph": lg_step, "numpy": numpy_step(name, weights)}
    if torch is not None:
        steps["torch"] = torch_step(name, weights)
    data = batches(name, warmup + rounds)
    losses: dict[str, list[float]] = {k: [] for k in steps}
    times: dict[str, list[float]] = {k: [] for k in steps}
    for i, (x, y) in enumerate(data):
        for impl, fn in steps.items():
            t0 = time.perf_counter()
            loss = fn(x, y)
            dt = time.perf_counter() - t0
            if i < warmup:
                losses[impl].append(loss)
            else:
                times[impl].append(dt)
    for impl, ls in losses.items():
        if not np.allclose(ls, losses["numpy"], rtol=2e-4, atol=1e-5):
            raise SystemExit(f"bench_train: {name} losses disagree: {impl} {ls} vs numpy {losses['numpy']}")
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = {k: statistics.median(a / b for a, b in zip(times["lazygraph"], v)) for k, v in times.items()}
    return {"median": med, "ratio": ratio, "losses": losses}


def main(argv: list[str] | None = None) -> int:
    """Run both models and print the table and the result lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer timed steps")
    args = ap.parse_args(argv)
    plan = {"cnn": (2, 2), "mlp": (2, 8)} if args.quick else {"cnn": (2, 6), "mlp": (2, 30)}
    print(f"bench_train: batch {BATCH}; python {platform.python_version()}, numpy {np.__version__}, ", end="")
    print(f"torch {torch.__version__ if torch else 'not installed'}; {os.cpu_count()} CPUs")
    t_start = time.perf_counter()
    results = {}
    for name, (warmup, rounds) in plan.items():
        results[name] = res = bench(name, warmup, rounds)
        shown = ", ".join(f"{k} {v[0]:.4f}" for k, v in res["losses"].items())
        print(f"check: {name} first-step losses agree ({shown})")
    header = f"{'model':<6} {'steps':>5} {'lazygraph s':>12} {'numpy s':>10} {'torch s':>10} {'vs numpy':>9} {'vs torch':>9}"
    print("\n" + header)
    print("-" * len(header))
    for name, res in results.items():
        med, ratio = res["median"], res["ratio"]
        tt = f"{med['torch']:>10.4f}" if "torch" in med else f"{'-':>10}"
        tr = f"{ratio['torch']:>9.2f}" if "torch" in ratio else f"{'-':>9}"
        rounds = plan[name][1]
        print(
            f"{name:<6} {rounds:>5} {med['lazygraph']:>12.4f} {med['numpy']:>10.4f} {tt} {ratio['numpy']:>9.2f} {tr}"
        )
    print("(ratios: lazygraph time / peer time, median of per-round ratios; below 1 is faster)")
    anchors = ", ".join(f"{k} {v} s" for k, v in ANCHOR_TORCH_S.items())
    print(f"reference: PyTorch CPU eager on a 2-core machine ({anchors}; anchors.md)")
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s\n")
    for name, res in results.items():
        print(f"result: {name}_step_seconds = {res['median']['lazygraph']:.4f}")
        print(f"result: {name}_step_ratio_vs_numpy = {res['ratio']['numpy']:.2f}")
        if "torch" in res["ratio"]:
            print(f"result: {name}_step_ratio_vs_torch = {res['ratio']['torch']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
