"""Train the Dali paper's CNN on MNIST with lazygraph (offline: the digits ship with the package).

    python3 examples/train_mnist.py                      # defaults reach >= 96% test accuracy
    python3 examples/train_mnist.py --epochs 1 --limit 512
    python3 examples/train_mnist.py --data ~/mnist       # the full set from the IDX files
    python3 examples/train_mnist.py --device cuda        # on a GPU (CuPy); cuda-emulated: the
                                                         # same CUDA kernels run on the host (slow)
    mpiexec -n 2 python3 examples/train_mnist.py --distributed   # data-parallel over 2 processes

Model (Table 3 of the paper): conv 5x5 1->64 + ReLU, maxpool 2, conv 5x5 64->64 + ReLU,
maxpool 2 ('same' padding, so the FC layer sees 64*7*7 = 3136 features), FC 1024 + ReLU,
FC 1024->10, softmax cross-entropy; batch 256. Without --data it trains on the bundled
4,000-digit split and tests on the 1,000 held-out digits.

Each training step is written as ordinary imperative code, and `opt.step()` is its one
evaluation point: forward, backward and update run as one graph, and the loss read
afterwards is already computed. The last line printed is `test accuracy: <percent>`.

With --distributed (under mpiexec) the model is wrapped in `nn.DataParallel`: every process
takes its shard of each batch (the global batch stays --batch-size), the gradients are
averaged inside each step's graph, and only rank 0 prints.
"""

from __future__ import annotations

import argparse
import sys
import time
from types import ModuleType

import numpy as np

import lazygraph as lg
from lazygraph import nn
from lazygraph.datasets import batches, load_mnist, num_batches

try:
    from tqdm import tqdm
except ImportError:  # tqdm is a dependency, but the example still runs without it
    tqdm = None

MEAN, STD = 0.1307, 0.3081  # MNIST pixel statistics, the usual normalization
TARGET = 0.96  # the test accuracy the default settings reach (CI checks it: exit status 1 below)


def dali_cnn(nn: ModuleType = nn) -> nn.Module:
    """The paper's MNIST CNN (in `lg.nn`, or in `torch.nn`, whose layers take the same arguments:
    benchmarks/mnist_torch.py trains the same model in PyTorch)."""
    return nn.Sequential(
        nn.Conv2d(1, 64, 5, padding="same"),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 5, padding="same"),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(3136, 1024),
        nn.ReLU(),
        nn.Linear(1024, 10),
    )


def prepare(images: np.ndarray) -> np.ndarray:
    """uint8 (N, 28, 28) -> normalized float32 (N, 1, 28, 28)."""
    return ((images.astype(np.float32) / 255.0 - MEAN) / STD)[:, None]


def even_batch_size(n: int, batch_size: int) -> int:
    """A batch size near batch_size that divides n, so every test batch is the same graph."""
    best = max(d for d in range(1, min(n, batch_size) + 1) if n % d == 0)
    return best if best * 2 > batch_size else batch_size


def evaluate_accuracy(
    model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int, device: str = "cpu"
) -> float:
    """Fraction of correctly classified examples (inference mode, no gradients).

    In a distributed run each rank classifies its share of the examples and the counts are summed.
    """
    rank, world = lg.distributed.rank(), lg.distributed.world_size()
    mine = slice(rank * len(y) // world, (rank + 1) * len(y) // world)
    model.eval()
    correct = 0
    with lg.no_grad():
        for xb, yb in batches(x[mine], y[mine], even_batch_size(len(y[mine]), batch_size)):
            pred = model(lg.asarray(xb, device=device)).argmax(axis=1)
            correct += int((pred == yb).sum())
    model.train()
    if world > 1:
        correct = int(lg.distributed.all_reduce(lg.asarray(correct)))
    return correct / len(y)


def say(*args: object, **kwargs: object) -> None:
    """print, on rank 0 only (every rank of a distributed run computes the same figures)."""
    if lg.distributed.rank() == 0:
        print(*args, **kwargs)


class Progress:
    """A tqdm bar per epoch, or one plain line at the end of it when tqdm is missing."""

    def __init__(self, total: int, desc: str) -> None:
        show = tqdm is not None and lg.distributed.rank() == 0
        self.bar = tqdm(total=total, desc=desc, unit="step", leave=False, file=sys.stderr) if show else None

    def update(self, loss: float) -> None:
        """Advance one step, showing the running loss."""
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        """Remove the bar (the epoch line replaces it)."""
        if self.bar is not None:
            self.bar.close()


def parser() -> argparse.ArgumentParser:
    """The command-line options."""
    ap = argparse.ArgumentParser(description="Train the Dali CNN on MNIST with lazygraph.")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--device",
        default="cpu",
        help="where the model trains: cpu, cuda (a GPU), cuda-emulated (CUDA on the host)",
    )
    ap.add_argument("--data", metavar="DIR", help="folder with the MNIST IDX files (default: bundled sample)")
    ap.add_argument("--limit", type=int, default=0, help="train on the first N examples only (smoke runs)")
    ap.add_argument(
        "--distributed",
        action="store_true",
        help="data-parallel over the processes of `mpiexec -n N` (each takes 1/N of every batch)",
    )
    return ap


def train(args: argparse.Namespace) -> float:
    """Train, report each epoch, and return the final test accuracy."""
    lg.manual_seed(args.seed)
    rank, world = 0, 1
    if args.distributed:
        lg.distributed.init()
        rank, world = lg.distributed.rank(), lg.distributed.world_size()
        if args.batch_size % world:
            raise SystemExit(
                f"train_mnist: --batch-size {args.batch_size} does not split over {world} processes"
            )
    shard = slice(rank * args.batch_size // world, (rank + 1) * args.batch_size // world)
    data = load_mnist(args.data)
    x_train, y_train = prepare(data.x_train), data.y_train.astype(np.int64)
    x_test, y_test = prepare(data.x_test), data.y_test.astype(np.int64)
    if args.limit:
        x_train, y_train = x_train[: args.limit], y_train[: args.limit]
    say(
        f"MNIST: {len(y_train)} training and {len(y_test)} test digits; batch {args.batch_size}, "
        f"Adam lr {args.lr}, device {args.device}" + (f", {world} processes" if args.distributed else "")
    )

    model = dali_cnn().to(args.device)
    if args.distributed:
        model = nn.DataParallel(model)  # rank 0's weights everywhere; gradients averaged each step
    opt = lg.optim.Adam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)
    # Full batches only (a different order each epoch): a last, smaller batch would be a
    # second training-step graph to optimize, for a handful of examples.
    drop_last = len(y_train) >= args.batch_size
    steps = num_batches(len(y_train), args.batch_size, drop_last)
    acc = 0.0
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        bar = Progress(steps, f"epoch {epoch}/{args.epochs}")
        total = 0.0
        for xb, yb in batches(x_train, y_train, args.batch_size, shuffle=True, rng=rng, drop_last=drop_last):
            xb, yb = lg.asarray(xb[shard], device=args.device), lg.asarray(yb[shard], device=args.device)
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()  # the one evaluation point of the step: forward, backward, update
            value = float(loss)  # already computed by step()
            total += value
            bar.update(value)
        bar.close()
        if world > 1:  # the mean over every rank's shard: the loss of the whole batch
            total = float(lg.distributed.all_reduce(lg.asarray(total), "mean"))
        acc = evaluate_accuracy(model, x_test, y_test, args.batch_size, args.device)
        seconds = time.perf_counter() - t0
        say(
            f"epoch {epoch}/{args.epochs}: train loss {total / steps:.4f}, "
            f"test accuracy {acc:.2%}, {seconds:.1f} s",
            flush=True,
        )

    cache = getattr(lg, "cache", None)
    if cache is not None and hasattr(cache, "stats"):
        st = cache.stats()
        say(f"distinct graphs evaluated: {st['distinct_graphs']}, cache hit rate: {st['hit_rate']:.1%}")
    else:
        n = lg.debug.evaluation_stats()["evaluations"]
        say(
            f"graphs evaluated: {n} (distinct graphs and the hit rate are counted by lg.cache, not in this build)"
        )
    say(f"test accuracy: {acc * 100:.2f}%")
    return acc


def main(argv: list[str] | None = None) -> int:
    """Exit status: 1 when a run with the default training settings misses TARGET."""
    ap = parser()
    args = ap.parse_args(argv)
    try:
        lg.asarray(np.zeros(1), device=args.device)  # fail early, naming the device, if unavailable
    except ValueError as e:
        ap.error(str(e))
    acc = train(args)
    defaults = ap.parse_args([])
    promised = all(
        getattr(args, k) == getattr(defaults, k) for k in ("epochs", "batch_size", "lr", "data", "limit")
    )
    if promised and acc < TARGET:
        print(f"train_mnist: the default settings should reach {TARGET:.0%} test accuracy", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
