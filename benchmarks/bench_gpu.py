"""lazygraph on a CUDA device: training steps and fused kernels, values checked everywhere.

    python3 benchmarks/bench_gpu.py            # full sizes
    python3 benchmarks/bench_gpu.py --quick    # small sizes (under a minute)

On a machine where `lg.devices()` lists "cuda" (CuPy sees a GPU, NVRTC present), it runs
  - an MNIST-shaped MLP (784-256-10, Adam) and CNN (conv 5x5 1->8, maxpool 2, FC, SGD) training
    step, its losses checked against the CPU device (the PyTorch-CUDA timing is not written yet);
  - fused softmax / layer norm / GELU / Adam kernels as a fraction of the device's copy
    bandwidth (bytes the kernel must read and write over its time, divided by a device copy's).
Everywhere else it runs the same programs on "cuda-emulated" (the generated CUDA kernels run on
the host) and checks their values against the CPU device and NumPy only: emulated timings say
nothing about a GPU, so none are printed. The last lines read `result: <metric> = <number>`;
on the emulated device `result: gpu_values_checked = N` (how many programs agreed).
A CuPy NumPy-style column is not written yet.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import lazygraph as lg
import lazygraph.nn.functional as F


def _sync() -> None:
    """Waits for the GPU (the CuPy stream lazygraph's CUDA device launches on)."""
    import cupy

    cupy.cuda.Device().synchronize()


def _median_time(fn: Callable[[], object], reps: int) -> float:
    """Median seconds of `fn()` on the GPU, after one warm-up run."""
    fn()
    _sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def fused_programs(d: int) -> dict[str, tuple[Callable[..., object], int]]:
    """name -> (program over a namespace, `lg` or `np`, for rows of `d`; its array arguments)."""

    def ln(ns: object, x: object) -> object:
        if ns is np:
            c = x - x.mean(-1, keepdims=True)
            return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
        return F.layer_norm(x, d)

    def adam(ns: object, p: object, g: object, m: object, v: object) -> object:
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        return p - 0.01 * m / (ns.sqrt(v) + 1e-8)

    def softmax(ns: object, x: object) -> object:
        if ns is np:
            e = np.exp(x - x.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        return lg.softmax(x, axis=-1)

    def gelu(ns: object, x: object) -> object:
        return 0.5 * x * (1.0 + ns.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

    return {"softmax": (softmax, 1), "layer_norm": (ln, 1), "gelu": (gelu, 1), "adam": (adam, 4)}


def check_fused(dev: str, n: int, d: int, reps: int) -> tuple[int, dict[str, float]]:
    """Values of each fused program on `dev` against NumPy; on a GPU, its bandwidth fraction."""
    rng = np.random.default_rng(0)
    fractions: dict[str, float] = {}
    checked = 0
    copy_bw = None
    if dev == "cuda":
        import cupy

        a = cupy.ones(n * d, dtype=cupy.float32)
        b = cupy.empty_like(a)
        copy_bw = 2 * a.nbytes / _median_time(lambda: b.__setitem__(Ellipsis, a), reps)
    for name, (prog, nargs) in fused_programs(d).items():
        args = [rng.standard_normal((n, d)).astype(np.float32) for _ in range(nargs)]
        if name == "adam":
            args[3] = np.abs(args[3])
        want = prog(np, *args)
        xs = [lg.asarray(a, device=dev) for a in args]
        got = prog(lg, *xs).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=name)
        checked += 1
        if copy_bw is not None:
            t = _median_time(lambda prog=prog, xs=xs: lg.eval(prog(lg, *xs)), reps)
            fractions[name] = (nargs + 1) * n * d * 4 / t / copy_bw
    return checked, fractions


def _models(hidden: int) -> dict[str, Callable[[], lg.nn.Module]]:
    """The MNIST-shaped models, built after lg.manual_seed so every device starts alike."""
    return {
        "mlp": lambda: lg.nn.Sequential(
            lg.nn.Flatten(), lg.nn.Linear(784, hidden), lg.nn.ReLU(), lg.nn.Linear(hidden, 10)
        ),
        "cnn": lambda: lg.nn.Sequential(
            lg.nn.Conv2d(1, 8, 5, padding=2),
            lg.nn.ReLU(),
            lg.nn.MaxPool2d(2),
            lg.nn.Flatten(),
            lg.nn.Linear(8 * 14 * 14, 10),
        ),
    }


def train_losses(dev: str, name: str, batch: int, steps: int, hidden: int) -> list[float]:
    """Losses of `steps` training steps of model `name` on `dev` (same data and start)."""
    lg.manual_seed(0)
    model = _models(hidden)[name]().to(dev)
    opt = (lg.optim.Adam if name == "mlp" else lg.optim.SGD)(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)
    x = lg.asarray(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32), device=dev)
    y = lg.asarray(rng.integers(0, 10, batch), device=dev)
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def main() -> None:
    """Runs the benchmark and prints its `result:` lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    args = ap.parse_args()
    gpu = "cuda" in lg.devices()
    dev = "cuda" if gpu else "cuda-emulated"
    if args.quick or not gpu:  # the emulator runs every CUDA thread on the host: keep it small
        n, d, batch, steps, hidden, reps = 64, 256, 8, 2, 32, 5
    else:
        n, d, batch, steps, hidden, reps = 8192, 1024, 256, 5, 256, 20
    print(f"device: {dev}" + ("" if gpu else " (values only: no GPU timings on the emulator)"))
    checked, fractions = check_fused(dev, n, d, reps)
    for name in ("mlp", "cnn"):
        got = train_losses(dev, name, batch, steps, hidden)
        want = train_losses("cpu", name, batch, steps, hidden)
        np.testing.assert_allclose(got, want, rtol=1e-4, err_msg=name)
        print(f"{name}: {steps} steps, losses agree with the CPU device ({got[-1]:.4f})")
        checked += 1
    for name, f in fractions.items():
        print(f"result: {name}_fraction_of_copy_bandwidth = {f:.3f}")
    print(f"result: gpu_values_checked = {checked}")


if __name__ == "__main__":
    main()
