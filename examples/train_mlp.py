"""A small MLP with Adam on the bundled MNIST digits: the lazygraph training API in one page.

    python3 examples/train_mlp.py [--epochs 10] [--hidden 256] [--save mlp.npz]

Every line below records into a lazy graph; `opt.step()` evaluates the whole step
(forward, backward, Adam update) as one graph, so `float(loss)` afterwards is free.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import lazygraph as lg
from lazygraph import nn
from lazygraph.datasets import batches, load_mnist


def main(argv: list[str] | None = None) -> float:
    """Train, print one line per epoch, optionally save the weights; returns test accuracy."""
    ap = argparse.ArgumentParser(description="Train an MLP on MNIST with lazygraph.")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", metavar="PATH", help="write the trained weights to this .npz file")
    args = ap.parse_args(argv)

    lg.manual_seed(args.seed)  # weights and dropout masks are reproducible
    d = load_mnist()
    x_train = d.x_train.reshape(-1, 784).astype(np.float32) / 255.0
    x_test = d.x_test.reshape(-1, 784).astype(np.float32) / 255.0
    y_train, y_test = d.y_train.astype(np.int64), d.y_test.astype(np.int64)

    model = nn.Sequential(
        nn.Linear(784, args.hidden),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(args.hidden, 10),
    )
    opt = lg.optim.Adam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)
    acc = 0.0
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        total = 0.0
        for xb, yb in batches(x_train, y_train, args.batch_size, shuffle=True, rng=rng):
            loss = nn.functional.cross_entropy(model(lg.asarray(xb)), yb, label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss) * len(yb)
        model.eval()  # dropout off
        with lg.no_grad():
            acc = float((model(lg.asarray(x_test)).argmax(axis=1) == y_test).mean())
        print(
            f"epoch {epoch}: train loss {total / len(y_train):.4f}, test accuracy {acc:.2%}, "
            f"{time.perf_counter() - t0:.2f} s"
        )
    if args.save:
        model.save(args.save)  # .npz, no pickle; load with model.load(path)
        print(f"saved {args.save}")
    print(f"test accuracy: {acc * 100:.2f}%")
    return acc


if __name__ == "__main__":
    main()
