"""Fused JIT kernels on the CPU against NumPy eager and PyTorch eager, plus Dali's Table 1.

    python3 benchmarks/bench_jit.py            # 4096 x 4096 float32 (about a minute)
    python3 benchmarks/bench_jit.py --quick    # 1024 x 1024, fewer repeats (seconds)

(a) Table 1: the A* search over loop parallelism for Softmax, LayerNorm, Add and Strided Add
    (variables, heuristic calls, data-consistent solutions, solution space) beside Dali's
    figures. Ours are searched for the CUDA target, as Dali's were; the CPU search is shown too.
(b) Fused kernels on 4096 x 4096 float32: softmax, layernorm (with weight and bias), a GELU
    chain (tanh form), cross-entropy (log-softmax + NLL of integer labels, mean) and an Adam
    update (m, v and the parameter). lazygraph records the program and evaluates it; the
    evaluation fuses each chain into one kernel (OpenMP C, compiled once before timing). The
    peers run the same program eagerly: NumPy, and PyTorch on the CPU when it is installed.
    "copy x" is the time over the time of the minimum memory traffic (each input read once,
    each output written once) at the bandwidth of a plain copy measured in the same run, so
    1.0 is the bandwidth limit.

lazygraph is evaluated through the JIT's own runner (jit.runner.run_graph on the recorded
graph), or through the executor when it dispatches to the JIT (the `path` line says which).
Every time is the median of several repeats; the peers' loops alternate with ours so all see
the same machine load. The last lines read `result: <metric> = <number>`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lazygraph as lg  # noqa: E402
import lazygraph.nn.functional as F  # noqa: E402
from jit.fusion import find_regions  # noqa: E402
from jit.report import DALI_TABLE1, search_stats  # noqa: E402
from jit.runner import run_graph  # noqa: E402
from lazygraph.engine.evaluate import schedule  # noqa: E402

try:
    import torch
except ImportError:  # the PyTorch column is left out
    torch = None


def evaluate(*arrays: lg.Array) -> list[np.ndarray]:
    """lazygraph's evaluation of `arrays` with fused kernels."""
    roots = [a.node for a in arrays]
    return run_graph(schedule(roots), roots)


def _time(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per call of each function, interleaved so they share the load."""
    for fn in fns.values():
        fn()  # warm-up (and the one-time compile of the JIT kernels)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            samples[k].append(_time(fn))
    return {k: statistics.median(v) for k, v in samples.items()}


# -- the programs, each written for lazygraph, NumPy and PyTorch -----------------------------


def gelu_np(x: np.ndarray) -> np.ndarray:
    """GELU, tanh form, as NumPy eager code."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x * x * x)))


def gelu_lg(x: lg.Array) -> lg.Array:
    """The same GELU recorded by lazygraph."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + lg.tanh(c * (x + 0.044715 * x * x * x)))


def layernorm_np(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm over the last axis as NumPy eager code."""
    d = x - x.mean(axis=-1, keepdims=True)
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / np.sqrt(var + eps) * w + b


def softmax_np(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis as NumPy eager code."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def xent_np(x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean cross-entropy of integer labels as NumPy eager code (log-softmax + NLL)."""
    m = x.max(axis=1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(axis=1)) + m[:, 0]
    return np.mean(lse - x[np.arange(x.shape[0]), labels])


def xent_lg(x: lg.Array, labels: lg.Array) -> lg.Array:
    """The same cross-entropy recorded by lazygraph: logsumexp fused over each row."""
    picked = x[lg.arange(x.shape[0]), labels]
    return (lg.logsumexp(x, axis=1) - picked).mean()


B1, B2, LR, EPS = 0.9, 0.999, 1e-3, 1e-8


def adam_np(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int = 1) -> tuple:
    """One Adam step as NumPy eager code (new m, v, p)."""
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    p = p - (LR / (1 - B1**t)) * m / (np.sqrt(v) / math.sqrt(1 - B2**t) + EPS)
    return m, v, p


def adam_lg(p: lg.Array, g: lg.Array, m: lg.Array, v: lg.Array, t: int = 1) -> tuple:
    """The same Adam step recorded by lazygraph."""
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    p = p - (LR / (1 - B1**t)) * m / (lg.sqrt(v) / math.sqrt(1 - B2**t) + EPS)
    return m, v, p


def table1(n: int) -> list[tuple[str, dict, dict]]:
    """Our search statistics (CUDA and CPU targets) for Dali's four kernels."""
    rng = np.random.default_rng(0)
    x = lg.asarray(rng.standard_normal((n, n)).astype(np.float32))
    y = lg.asarray(rng.standard_normal((n, n)).astype(np.float32))
    w = lg.asarray(np.ones(n, np.float32))
    half = n // 2
    cases = {
        "Softmax": lg.softmax(x, axis=1),
        "LayerNorm": F.layer_norm(x, n, w, w),
        "Add": x + y,
        "Strided Add": x[:, :half] + y[:, half:],  # rows are strided: two loops
    }
    out = []
    for name, arr in cases.items():
        roots = [arr.node]
        region = find_regions(schedule(roots), roots)[-1]
        values = [c.buffer for c in region.inputs]
        out.append((name, search_stats(region, values, "cuda"), search_stats(region, values, "cpu")))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables and `result:` lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1024 x 1024 and fewer repeats")
    args = parser.parse_args(argv)
    n = 1024 if args.quick else 4096
    repeats = 3 if args.quick else 7

    print("(a) A* kernel search, Table 1 (ours for CUDA | ours for the CPU | Dali)")
    print(f"{'operation':<12} {'vars':>4} {'calls':>6} {'consistent':>10} {'space':>6} | "
          f"{'calls':>5} {'space':>5} | {'vars':>4} {'calls':>5} {'consistent':>10} {'space':>5}")  # fmt: skip
    rows = table1(256)
    for name, cu, cpu in rows:
        d = DALI_TABLE1[name]
        print(
            f"{name:<12} {cu['variables']:>4} {cu['heuristic_calls']:>6} {cu['consistent']:>10} {cu['space']:>6} | "
            f"{cpu['heuristic_calls']:>5} {cpu['space']:>5} | {d[0]:>4} {d[1]:>5} {d[2]:>10} {d[3]:>5}"
        )
    for name, cu, cpu in rows:
        print(f"  {name}: CUDA -> {cu['assignment']}; CPU -> {cpu['assignment']}")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    labels = rng.integers(0, n, size=n)
    p, g = x.copy(), (0.01 * rng.standard_normal((n, n))).astype(np.float32)
    m, v = np.zeros_like(x), np.zeros_like(x)
    X, W, Bv, L = lg.asarray(x), lg.asarray(w), lg.asarray(b), lg.asarray(labels)
    P, G, M, V = lg.asarray(p), lg.asarray(g), lg.asarray(m), lg.asarray(v)
    nbytes = x.nbytes
    cases: dict[str, dict[str, Any]] = {
        "softmax": {
            "lg": lambda: evaluate(lg.softmax(X, axis=1)),
            "np": lambda: softmax_np(x),
            "bytes": 2 * nbytes,
        },
        "layernorm": {
            "lg": lambda: evaluate(F.layer_norm(X, n, W, Bv)),
            "np": lambda: layernorm_np(x, w, b),
            "bytes": 2 * nbytes,
        },
        "gelu": {"lg": lambda: evaluate(gelu_lg(X)), "np": lambda: gelu_np(x), "bytes": 2 * nbytes},
        "cross_entropy": {
            "lg": lambda: evaluate(xent_lg(X, L)),
            "np": lambda: xent_np(x, labels),
            "bytes": nbytes,
        },
        "adam": {
            "lg": lambda: evaluate(*adam_lg(P, G, M, V)),
            "np": lambda: adam_np(p, g, m, v),
            "bytes": 7 * nbytes,
        },
    }
    if torch is not None:
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        tl = torch.from_numpy(labels)
        tp = torch.nn.Parameter(torch.from_numpy(p.copy()))
        tp.grad = torch.from_numpy(g)
        opt = torch.optim.Adam([tp], lr=LR, betas=(B1, B2), eps=EPS)
        cases["softmax"]["torch"] = lambda: torch.softmax(tx, dim=1)
        cases["layernorm"]["torch"] = lambda: torch.nn.functional.layer_norm(tx, (n,), tw, tb)
        cases["gelu"]["torch"] = lambda: torch.nn.functional.gelu(tx, approximate="tanh")
        cases["cross_entropy"]["torch"] = lambda: torch.nn.functional.cross_entropy(tx, tl)
        cases["adam"]["torch"] = opt.step

    # Same values as NumPy before timing anything.
    for name, case in cases.items():
        ours = case["lg"]()
        ref = case["np"]()
        ref = ref if isinstance(ref, tuple) else (ref,)
        for a, r in zip(ours, ref):
            np.testing.assert_allclose(a, r, rtol=2e-3, atol=2e-5, err_msg=name)

    src = x
    dst = np.empty_like(x)
    copy_s = measure({"copy": lambda: np.copyto(dst, src)}, repeats)["copy"]
    bw = 2 * nbytes / copy_s
    print(f"\n(b) fused kernels, {n} x {n} float32; copy: {copy_s * 1e3:.2f} ms = {bw / 1e9:.1f} GB/s")
    print("path: jit.runner.run_graph on the recorded graph (OpenMP C kernels)")
    head = f"{'case':<14} {'lazygraph ms':>12} {'NumPy ms':>9} {'x NumPy':>8}"
    head += f" {'PyTorch ms':>10} {'x PyTorch':>9}" if torch is not None else ""
    print(head + f" {'copy x':>7}")
    results: dict[str, dict[str, float]] = {}
    for name, case in cases.items():
        fns = {k: fn for k, fn in case.items() if k in ("lg", "np", "torch")}
        t = measure(fns, repeats)
        limit = case["bytes"] / bw
        row = f"{name:<14} {t['lg'] * 1e3:>12.2f} {t['np'] * 1e3:>9.2f} {t['np'] / t['lg']:>8.2f}"
        if "torch" in t:
            row += f" {t['torch'] * 1e3:>10.2f} {t['torch'] / t['lg']:>9.2f}"
        print(row + f" {t['lg'] / limit:>7.2f}")
        results[name] = {**t, "copy": t["lg"] / limit}
    print()
    for name, t in results.items():
        print(f"result: {name}_speedup_vs_numpy = {t['np'] / t['lg']:.2f}")
        if "torch" in t:
            print(f"result: {name}_speedup_vs_torch = {t['torch'] / t['lg']:.2f}")
        print(f"result: {name}_time_over_copy_limit = {t['copy']:.2f}")
    soft = next(r for r in rows if r[0] == "Softmax")[1]
    print(f"result: softmax_astar_heuristic_calls = {soft['heuristic_calls']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
