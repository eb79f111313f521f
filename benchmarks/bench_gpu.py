"""lazygraph on a CUDA device: training steps, window steps and fused kernels, values checked everywhere.

    python3 benchmarks/bench_gpu.py            # full sizes
    python3 benchmarks/bench_gpu.py --quick    # small sizes (under a minute)

On a machine where `lg.devices()` lists "cuda" (CuPy sees a GPU, NVRTC present), it runs
  - an MNIST-shaped MLP (784-256-10, Adam) and CNN (conv 5x5 1->8, maxpool 2, FC, SGD) training
    step, its losses checked against the CPU device, timed against the same step in PyTorch
    CUDA eager (where torch sees the GPU);
  - window steps (max and average pooling and their gradients, conv2d forward and its input
    and weight gradients) checked against the CPU device and timed against PyTorch CUDA eager;
  - fused softmax / layer norm / GELU / Adam kernels as a fraction of the device's copy
    bandwidth (bytes the kernel must read and write over its time, divided by a device copy's),
    and against the same programs written NumPy-style in CuPy.
Each peer column runs only where that library and the GPU exist; a missing one prints n/a and
why. Everywhere else it runs the same programs on "cuda-emulated" (the generated CUDA kernels,
window kernels included, run on the host) and checks their values against the CPU device and
NumPy only: emulated timings say nothing about a GPU, so none are printed. The last lines read
`result: <metric> = <number>`; on the emulated device `result: gpu_values_checked = N` (how
many programs agreed).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import backend, nvrtc
from lazygraph.engine.evaluate import evaluate

#: names of the programs whose values disagreed (the run still prints its timings, then fails)
MISMATCHES: list[str] = []


def agree(name: str, got: object, want: object, rtol: float, atol: float) -> bool:
    """Whether `got` matches `want`; a mismatch is printed and counted, not raised. The absolute
    tolerance grows with the values' magnitude: a float32 sum of many products (a convolution's
    gradient) rounds relative to its largest terms, not to each result."""
    want = np.asarray(want)
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    try:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol + 1e-5 * scale, err_msg=name)
    except AssertionError as e:
        MISMATCHES.append(name)
        print(f"MISMATCH {name}: " + " ".join(str(e).split())[:400])
        return False
    return True


def _sync() -> None:
    """Waits for the GPU (the CuPy stream lazygraph's CUDA device launches on)."""
    import cupy

    cupy.cuda.Device().synchronize()


def _median_time(fn: Callable[[], object], reps: int, sync: Callable[[], object] = _sync) -> float:
    """Median seconds of `fn()` on the GPU (`sync` waits for it), after one warm-up run."""
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def peers() -> dict[str, str]:
    """Peer -> "" where it runs on this machine's GPU, else why it does not."""
    why = {}
    try:
        import torch

        why["torch"] = "" if torch.cuda.is_available() else "torch sees no CUDA GPU"
    except ImportError:
        why["torch"] = "torch is not installed"
    try:
        import cupy

        why["cupy"] = "" if cupy.cuda.runtime.getDeviceCount() > 0 else "CuPy sees no GPU"
    except Exception as e:  # not installed, or no driver
        why["cupy"] = f"CuPy unusable ({type(e).__name__})"
    return why


def _torch_sync() -> None:
    import torch

    torch.cuda.synchronize()


def fused_programs(d: int) -> dict[str, tuple[Callable[..., object], int]]:
    """name -> (program over a namespace, `lg` or `np`, for rows of `d`; its array arguments)."""

    def ln(ns: object, x: object) -> object:
        if ns is not lg:  # NumPy, or CuPy written the same way
            c = x - x.mean(-1, keepdims=True)
            return c / ns.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
        return F.layer_norm(x, d)

    def adam(ns: object, p: object, g: object, m: object, v: object) -> object:
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        return p - 0.01 * m / (ns.sqrt(v) + 1e-8)

    def softmax(ns: object, x: object) -> object:
        if ns is not lg:
            e = ns.exp(x - x.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        return lg.softmax(x, axis=-1)

    def gelu(ns: object, x: object) -> object:
        return 0.5 * x * (1.0 + ns.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

    return {"softmax": (softmax, 1), "layer_norm": (ln, 1), "gelu": (gelu, 1), "adam": (adam, 4)}


def check_fused(
    dev: str, n: int, d: int, reps: int, cupy_ok: bool = False
) -> tuple[int, dict[str, float], dict[str, float]]:
    """Values of each fused program on `dev` against NumPy; on a GPU, its bandwidth fraction
    and its time over the NumPy-style CuPy program's (where CuPy runs)."""
    rng = np.random.default_rng(0)
    fractions: dict[str, float] = {}
    vs_cupy: dict[str, float] = {}
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
            # lg.realize, not lg.eval: the result stays on the GPU (eval would time a copy back)
            t = _median_time(lambda prog=prog, xs=xs: lg.realize(prog(lg, *xs)), reps)
            fractions[name] = (nargs + 1) * n * d * 4 / t / copy_bw
            if cupy_ok:
                import cupy

                cs = [cupy.asarray(a) for a in args]
                np.testing.assert_allclose(cupy.asnumpy(prog(cupy, *cs)), want, rtol=2e-4, atol=2e-5)
                vs_cupy[name] = t / _median_time(lambda prog=prog, cs=cs: prog(cupy, *cs), reps)
    return checked, fractions, vs_cupy


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


def train_losses(
    dev: str, name: str, batch: int, steps: int, hidden: int, copies: list | None = None
) -> list[float]:
    """Losses of `steps` training steps of model `name` on `dev` (same data and start).

    `copies` receives, per step, the host <-> device copies it made (jit.backend.transfers)
    and the device buffers it allocated (jit.backend.allocations: "alloc", "alloc_bytes").
    """
    lg.manual_seed(0)
    model = _models(hidden)[name]().to(dev)
    opt = (lg.optim.Adam if name == "mlp" else lg.optim.SGD)(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)
    x = lg.asarray(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32), device=dev)
    y = lg.asarray(rng.integers(0, 10, batch), device=dev)
    losses = []
    for _ in range(steps):
        before = {**backend.transfers(dev), **_allocs(dev)}
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        if copies is not None:
            after = {**backend.transfers(dev), **_allocs(dev)}
            copies.append({k: after[k] - before[k] for k in after})
    return losses


def _allocs(dev: str) -> dict:
    """The device's allocation counters, named for `train_losses`' per-step records."""
    a = backend.allocations(dev)
    return {"alloc": a["count"], "alloc_bytes": a["bytes"]}


def _torch_models(hidden: int) -> dict[str, Callable[[], object]]:
    """The same models in PyTorch."""
    import torch.nn as tnn

    return {
        "mlp": lambda: tnn.Sequential(
            tnn.Flatten(), tnn.Linear(784, hidden), tnn.ReLU(), tnn.Linear(hidden, 10)
        ),
        "cnn": lambda: tnn.Sequential(
            tnn.Conv2d(1, 8, 5, padding=2),
            tnn.ReLU(),
            tnn.MaxPool2d(2),
            tnn.Flatten(),
            tnn.Linear(8 * 14 * 14, 10),
        ),
    }


def stencil_step(dev: str, n: int, steps: int) -> dict:
    """A Jacobi stencil `u[1:-1, 1:-1] = mean of u's four shifted views`, evaluated each step:
    checked against NumPy; the last (warm) step's allocations and copies (values stay on the
    device, and the write goes into u's own buffer: engine/device_memory.py)."""
    u0 = np.random.default_rng(2).standard_normal((n, n))
    u, want = lg.asarray(u0, device=dev), u0.copy()
    last: dict = {}
    for _ in range(steps):
        before = {**backend.transfers(dev), **_allocs(dev)}
        for a in (u, want):
            a[1:-1, 1:-1] = 0.25 * (a[2:, 1:-1] + a[:-2, 1:-1] + a[1:-1, 2:] + a[1:-1, :-2])
        evaluate([u.node])  # not lg.eval: that copies the value back
        after = {**backend.transfers(dev), **_allocs(dev)}
        last = {k: after[k] - before[k] for k in after}
    np.testing.assert_allclose(u.numpy(), want, rtol=1e-12, atol=1e-12)
    return last


def step_times(name: str, batch: int, hidden: int, reps: int, torch_ok: bool) -> tuple[float, float | None]:
    """Seconds per training step of model `name` on "cuda": lazygraph, and PyTorch CUDA eager."""
    lg.manual_seed(0)
    model = _models(hidden)[name]().to("cuda")
    opt = (lg.optim.Adam if name == "mlp" else lg.optim.SGD)(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    ys = rng.integers(0, 10, batch)
    x, y = lg.asarray(xs, device="cuda"), lg.asarray(ys, device="cuda")

    def lg_step() -> None:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()  # the step's evaluation point: parameters and loss stay on the GPU

    ours = _median_time(lg_step, reps)
    if not torch_ok:
        return ours, None
    import torch

    torch.manual_seed(0)
    tm = _torch_models(hidden)[name]().cuda()
    topt = (torch.optim.Adam if name == "mlp" else torch.optim.SGD)(tm.parameters(), lr=1e-2)
    tx, ty = torch.from_numpy(xs).cuda(), torch.from_numpy(ys).cuda()

    def torch_step() -> None:
        loss = torch.nn.functional.cross_entropy(tm(tx), ty)
        topt.zero_grad()
        loss.backward()
        topt.step()

    return ours, _median_time(torch_step, reps, _torch_sync)


#: window steps: (lazygraph or torch functional namespace, x, w) -> values, forward and backward
WINDOWS: dict[str, Callable[..., tuple]] = {
    "max_pool2d": lambda f, x, w: (f.max_pool2d(x, 3, 2, 1),),
    "avg_pool2d": lambda f, x, w: (f.avg_pool2d(x, 3, 2, 1, count_include_pad=False),),
    "conv2d": lambda f, x, w: (f.conv2d(x, w, None, 1, 1),),
}


def _window_inputs(dev: str, xs: np.ndarray, ws: np.ndarray) -> tuple[lg.Array, lg.Array, lg.Array]:
    """The data x, zeros e that require grad (so d/dx flows while the data stays data, not a
    folded constant) and the weights w, copied to `dev` once, as torch's are."""
    e = lg.asarray(np.zeros_like(xs), device=dev, requires_grad=True)
    return lg.asarray(xs, device=dev), e, lg.asarray(ws, device=dev, requires_grad=True)


def _lg_window(name: str, x: lg.Array, e: lg.Array, w: lg.Array) -> list:
    """Step `name` with its gradients: the value, d/dx and, for conv2d, d/dw."""
    e.grad = w.grad = None
    (y,) = WINDOWS[name](F, x + e, w)
    (y * y).sum().backward()
    return [y, e.grad] + ([w.grad] if name == "conv2d" else [])


def check_windows(
    dev: str, n: int, c: int, hw: int, reps: int, torch_ok: bool
) -> tuple[int, dict[str, tuple]]:
    """Window steps on `dev` against the CPU device; on a GPU, their times against PyTorch eager."""
    from jit import window_cuda

    rng = np.random.default_rng(2)
    xs = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    ws = (rng.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32)
    checked, times = 0, {}
    for name in WINDOWS:
        before = sum(v for (d, _), v in window_cuda.LAUNCHES.items() if d == dev)
        inputs = _window_inputs(dev, xs, ws)
        got = [v.numpy() for v in _lg_window(name, *inputs)]
        launched = sum(v for (d, _), v in window_cuda.LAUNCHES.items() if d == dev) - before
        want = [v.numpy() for v in _lg_window(name, *_window_inputs("cpu", xs, ws))]
        if all(agree(name, g, wv, 1e-4, 1e-4) for g, wv in zip(got, want)):
            print(
                f"{name}: forward and gradients agree with the CPU device ({launched} CUDA window-kernel launches)"
            )
            checked += 1
        if dev != "cuda":
            continue
        ours = _median_time(lambda name=name, inputs=inputs: lg.realize(*_lg_window(name, *inputs)), reps)
        theirs = None
        if torch_ok:
            import torch

            tx = torch.from_numpy(xs).cuda().requires_grad_()
            tw = torch.from_numpy(ws).cuda().requires_grad_()

            def torch_window(name: str = name, tx: object = tx, tw: object = tw) -> None:
                (y,) = WINDOWS[name](torch.nn.functional, tx, tw)
                (y * y).sum().backward()

            theirs = _median_time(torch_window, reps, _torch_sync)
        times[name] = (ours, theirs)
    return checked, times


def _row(cells: list[str]) -> str:
    return "  ".join(f"{c:>22}" if i else f"{c:<24}" for i, c in enumerate(cells))


def main() -> None:
    """Runs the benchmark and prints its table and `result:` lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    args = ap.parse_args()
    gpu = "cuda" in lg.devices()
    dev = "cuda" if gpu else "cuda-emulated"
    if args.quick or not gpu:  # the emulator runs every CUDA thread on the host: keep it small
        n, d, batch, steps, hidden, reps, win = 64, 256, 8, 2, 32, 5, (2, 4, 12)
    else:
        n, d, batch, steps, hidden, reps, win = 8192, 1024, 256, 5, 256, 20, (64, 64, 56)
    why = peers() if gpu else {"torch": "no GPU", "cupy": "no GPU"}
    print(f"device: {dev}" + ("" if gpu else " (values only: no GPU timings on the emulator)"))
    for peer, reason in why.items():
        if reason:
            print(f"peer {peer}: n/a ({reason})")
    checked, fractions, vs_cupy = check_fused(dev, n, d, reps, cupy_ok=gpu and not why["cupy"])
    wchecked, wtimes = check_windows(dev, *win, reps, torch_ok=gpu and not why["torch"])
    checked += wchecked
    steps_t: dict[str, tuple] = {}
    for name in ("mlp", "cnn"):
        copies: list[dict] = []
        got = train_losses(dev, name, batch, steps, hidden, copies)
        want = train_losses("cpu", name, batch, steps, hidden)
        if agree(name, got, want, 1e-4, 0.0):
            print(f"{name}: {steps} steps, losses agree with the CPU device ({got[-1]:.4f})")
        last = copies[-1]  # a warm step: values stay on the device (engine/device_run.py)
        print(
            f"{name}: a warm step copies {last['to_device']} values ({last['to_device_bytes']} bytes) to "
            f"the device and {last['to_host']} ({last['to_host_bytes']} bytes) back"
        )
        print(f"result: {name}_step_host_device_bytes = {last['to_device_bytes'] + last['to_host_bytes']}")
        print(f"{name}: a warm step allocates {last['alloc']} device buffers ({last['alloc_bytes']} bytes)")
        print(f"result: {name}_step_device_allocations = {last['alloc']}")
        checked += name not in MISMATCHES
        if gpu:
            steps_t[name] = step_times(name, batch, hidden, reps, torch_ok=not why["torch"])
    side = 1024 if gpu and not args.quick else 256
    st = stencil_step(dev, side, 4)
    print(
        f"stencil {side}x{side} float64: a warm step allocates {st['alloc']} device buffers "
        f"({st['alloc_bytes']} bytes, the buffer is {side * side * 8}) and copies "
        f"{st['to_device_bytes'] + st['to_host_bytes']} bytes between host and device"
    )
    print(f"result: stencil_step_device_allocation_bytes = {st['alloc_bytes']}")
    checked += 1
    if gpu:
        print(_row(["step (ms)", "lazygraph", "torch cuda eager", "lazygraph / torch"]))
        for label, (ours, theirs) in [*((f"{k} train step", v) for k, v in steps_t.items()), *wtimes.items()]:
            ratio = "n/a" if theirs is None else f"{ours / theirs:.2f}"
            tt = "n/a" if theirs is None else f"{theirs * 1e3:.3f}"
            print(_row([label, f"{ours * 1e3:.3f}", tt, ratio]))
        print(_row(["fused kernel", "fraction of copy bw", "", "lazygraph / cupy"]))
        for name, f in fractions.items():
            print(_row([name, f"{f:.3f}", "", f"{vs_cupy[name]:.2f}" if name in vs_cupy else "n/a"]))
        for name, (ours, theirs) in steps_t.items():
            if theirs is not None:
                print(f"result: {name}_step_vs_torch_cuda = {ours / theirs:.3f}")
        for name, (ours, theirs) in wtimes.items():
            if theirs is not None:
                print(f"result: {name}_fwd_bwd_vs_torch_cuda = {ours / theirs:.3f}")
        for name, r in vs_cupy.items():
            print(f"result: {name}_vs_cupy = {r:.3f}")
    for name, f in fractions.items():
        print(f"result: {name}_fraction_of_copy_bandwidth = {f:.3f}")
    print(f"result: gpu_values_checked = {checked}")
    # Run twice with one LAZYGRAPH_CACHE_DIR: the second (warm) run should compile and optimize nothing.
    stats = lg.cache.stats()
    print(
        f"this run: {nvrtc.COUNTS['compiled']} kernels compiled by NVRTC, {nvrtc.COUNTS['from_store']} "
        f"read from the kernel store; {stats['misses']} structures optimized, {stats['disk_hits']} "
        f"transformations read from disk"
    )
    print(f"result: nvrtc_compiles = {nvrtc.COUNTS['compiled']}")
    print(f"result: structures_optimized = {stats['misses']}")
    if MISMATCHES:
        raise SystemExit(f"bench_gpu: values disagree for {', '.join(MISMATCHES)}")


if __name__ == "__main__":
    main()
