"""lazygraph quickstart: record a program, evaluate it, and train a tiny model.

Runs on the CPU in a few seconds with no data to download:

    python3 examples/quickstart.py [--steps 200]

1. The issue's example: a view, an in-place write through it, a matmul and tanh, all
   recorded; `y.numpy()` and `float(x.sum())` are the evaluation points.
2. Logistic regression on synthetic data with hand-written gradient steps
   (`w -= lr * grad_w`), evaluated once per step with `lg.eval`, checked against the
   same computation run eagerly on NumPy. Exits with status 1 if they disagree.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import lazygraph as lg

TOLERANCE = 1e-9


def views_and_writes() -> float:
    """The example from the issue; returns max |lazygraph - numpy|."""
    x = lg.asarray(np.arange(12.0).reshape(3, 4))
    v = x[1:, ::2]  # a view: shares x's memory
    v += 1  # an in-place write through the view, seen by x
    y = lg.tanh(x @ x.T) * 2  # recorded, not computed
    y_val, total = y.numpy(), float(x.sum())  # evaluation points
    print("y =")
    print(y_val)
    print("x.sum() =", total)

    a = np.arange(12.0).reshape(3, 4)
    b = a[1:, ::2]
    b += 1
    ref_y, ref_total = np.tanh(a @ a.T) * 2, float(a.sum())
    return max(float(np.max(np.abs(y_val - ref_y))), abs(total - ref_total))


def make_data(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two noisy classes separated by a random hyperplane."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    true_w = rng.normal(size=d)
    y = (X @ true_w + 0.5 * rng.normal(size=n) > 0).astype(np.float64)
    return X, y


def lg_step(X, y, w, b, lr: float):
    """One gradient step in lazygraph; updates w and b in place and returns the loss."""
    n = X.shape[0]
    z = X @ w + b
    # Binary cross-entropy, stable form: softplus(z) - y z.
    loss = lg.mean(lg.maximum(z, 0.0) + lg.log1p(lg.exp(-lg.abs(z))) - y * z)
    r = lg.sigmoid(z) - y  # d loss / d z, times n
    w -= lr * (X.T @ r) / n
    b -= lr * lg.mean(r)
    return loss


def np_sigmoid(z: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1 / (1 + e), e / (1 + e))


def np_step(X, y, w, b, lr: float):
    """The same step, eagerly in NumPy."""
    n = X.shape[0]
    z = X @ w + b
    loss = np.mean(np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z))) - y * z)
    r = np_sigmoid(z) - y
    w -= lr * (X.T @ r) / n
    b -= lr * np.mean(r)
    return float(loss)


def train(steps: int, lr: float) -> tuple[float, float, float]:
    """Fit with lazygraph and with NumPy; returns (final loss, accuracy, max difference)."""
    X_np, y_np = make_data(n=256, d=8)
    X, y = lg.asarray(X_np), lg.asarray(y_np)
    w, b = lg.zeros(8), lg.zeros(())

    ref_w, ref_b = np.zeros(8), np.zeros(())
    diff = 0.0
    loss_val = float("nan")
    t0 = time.perf_counter()
    for step in range(steps):
        loss = lg_step(X, y, w, b, lr)
        if step == 0:
            print("\nthe graph of one training step (w, b, loss), as lg.explain prints it:")
            lg.explain(w, b, loss)
        w_val, b_val, loss_val = lg.eval(w, b, loss)  # one evaluation per step
        ref_loss = np_step(X_np, y_np, ref_w, ref_b, lr)
        diff = max(
            diff,
            float(np.max(np.abs(w_val - ref_w))),
            float(abs(b_val - ref_b)),
            abs(float(loss_val) - ref_loss),
        )
        if step % max(steps // 5, 1) == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {float(loss_val):.6f}")
    seconds = time.perf_counter() - t0

    pred = (X @ w + b) > 0
    accuracy = float(lg.mean(pred == (y > 0.5)))
    print(
        f"{steps} steps in {seconds:.2f} s ({seconds / max(steps, 1) * 1e3:.2f} ms/step, NumPy reference included)"
    )
    print(f"training accuracy {accuracy:.3f}")
    return float(loss_val), accuracy, diff


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="gradient steps (default 200)")
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    diff = views_and_writes()
    loss, _, train_diff = train(args.steps, args.lr)
    diff = max(diff, train_diff)
    if not diff <= TOLERANCE:
        print(f"quickstart: FAILED (max |lazygraph - numpy| = {diff:.3g} > {TOLERANCE:g})", file=sys.stderr)
        return 1
    print(f"quickstart: ok (loss {loss:.6f}, max |lazygraph - numpy| = {diff:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
