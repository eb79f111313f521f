"""The MNIST example's model and training loop in PyTorch eager: the peer of train_mnist's timings.

    python3 benchmarks/mnist_torch.py --device cuda    # beside examples/train_mnist.py --device cuda
    python3 benchmarks/mnist_torch.py --device cpu

Same data (the bundled split, normalized alike), the same Dali CNN (examples/train_mnist.py),
batch 256 with full batches only, Adam at lr 1e-3, a new order each epoch, and a test pass at the
end of every epoch, timed the same way (the epoch's wall time including its test pass). Prints
one line per epoch and ends with `result: torch_<device>_epoch_seconds = <median>`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from train_mnist import dali_cnn, even_batch_size, prepare  # noqa: E402

from lazygraph.datasets import batches, load_mnist, num_batches  # noqa: E402


def main() -> None:
    """Trains and prints per-epoch times and the test accuracy."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=256)
    args = ap.parse_args()
    import torch

    dev = torch.device(args.device)
    torch.manual_seed(0)
    data = load_mnist()
    x_train, y_train = prepare(data.x_train), data.y_train.astype(np.int64)
    x_test, y_test = prepare(data.x_test), data.y_test.astype(np.int64)
    net = dali_cnn(torch.nn).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    steps = num_batches(len(y_train), args.batch_size, True)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        total = 0.0
        for xb, yb in batches(x_train, y_train, args.batch_size, shuffle=True, rng=rng, drop_last=True):
            xb, yb = torch.from_numpy(xb).to(dev), torch.from_numpy(yb).to(dev)
            loss = torch.nn.functional.cross_entropy(net(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss)  # one read per step, as train_mnist's `float(loss)`
        net.eval()
        correct = 0
        with torch.no_grad():
            for xb, yb in batches(x_test, y_test, even_batch_size(len(y_test), args.batch_size)):
                pred = net(torch.from_numpy(xb).to(dev)).argmax(1).cpu().numpy()
                correct += int((pred == yb).sum())
        net.train()
        sync()
        seconds = time.perf_counter() - t0
        times.append(seconds)
        print(
            f"epoch {epoch}/{args.epochs}: train loss {total / steps:.4f}, "
            f"test accuracy {correct / len(y_test):.2%}, {seconds:.2f} s",
            flush=True,
        )
    print(f"result: torch_{dev.type}_epoch_seconds = {statistics.median(times[1:] or times):.3f}")


if __name__ == "__main__":
    main()
