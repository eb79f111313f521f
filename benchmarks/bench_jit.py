"""Fused JIT kernels on the CPU against NumPy, PyTorch, JAX and MLX, plus Dali's Table 1.

    python3 benchmarks/bench_jit.py            # 4096 x 4096 float32 (a few minutes: MLX on the CPU is slow)
    python3 benchmarks/bench_jit.py --quick    # 1024 x 1024, fewer repeats (seconds)

(a) Table 1: the A* search over loop parallelism for Softmax, LayerNorm, Add and Strided Add
    (variables, heuristic calls, data-consistent solutions, solution space) beside Dali's
    figures. Ours are searched for the CUDA target, as Dali's were; the CPU search is shown too.
(b) Fused kernels on 4096 x 4096 float32: softmax, layernorm (with weight and bias), a GELU
    chain (tanh form), cross-entropy (log-softmax + NLL of integer labels, mean) and an Adam
    update (m, v and the parameter). lazygraph records the program and evaluates it; the
    evaluation fuses each chain into one kernel (OpenMP C, compiled once before timing). The
    peers run the same program: NumPy, PyTorch eager, JAX eager and jax.jit, MLX eager and
    mx.compile (CPU device), each where it is installed (a missing one's column shows `-`).
    "copy x" is the time over the time of the minimum memory traffic (each input read once,
    each output written once) at the bandwidth of a plain copy into an existing array
    measured in the same run, so 1.0 is the bandwidth limit.
(c) softmax and layernorm against a copy of the same array, both ways: the kernel writing into
    an existing output array beside `np.copyto` into an existing array (the kernels' own
    speed), and the whole evaluation, which allocates its result, beside `x.copy()`, which
    allocates too (a fresh 64 MB array costs its page faults: part of both sides). Measured
    before any peer runs (printed after (b)): a peer's threads, still busy after its calls,
    slowed our two-thread kernel beside the one-thread copy (softmax 1.11x -> 1.72x copy time).

lazygraph is evaluated as a user's program is: `lg.eval` on the recorded arrays, a cache hit of
the optimized program (one fused region step each here) once the warm-up calls have compiled its
kernels. (The JIT's own runner, jit.runner.run_graph, fuses the graph again on every call: about
0.5 ms more per call at 1024 x 1024.)
Every time is the median of several repeats, each framework's in a block of its own (ours
first, then NumPy, then the peers): alternated call by call, ours always followed a peer's call
whose threads were still busy on both cores. The last lines read `result: <metric> = <number>`.
"""

from __future__ import annotations

import argparse
import functools
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
from jit.kernel import compile_region  # noqa: E402
from jit.report import DALI_TABLE1, search_stats  # noqa: E402
from lazygraph.engine.evaluate import schedule  # noqa: E402

try:
    import torch
except ImportError:  # the PyTorch column is left out
    torch = None
try:
    import jax
    import jax.numpy as jnp
except ImportError:  # the JAX columns are left out
    jax = jnp = None
try:
    import mlx.core as mx
except ImportError:  # the MLX columns are left out
    mx = None

#: the peers' columns: (key, heading)
PEERS = [
    ("np", "NumPy"),
    ("torch", "PyTorch"),
    ("jax", "JAX"),
    ("jax_jit", "JAX jit"),
    ("mlx", "MLX"),
    ("mlx_c", "MLX comp"),
]


def evaluate(*arrays: lg.Array) -> tuple[np.ndarray, ...]:
    """lazygraph's evaluation of `arrays`: the engine's cached program with its fused kernels."""
    return lg.eval(*arrays)


def _time(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per call of each function, interleaved so they share the load."""
    for _ in range(2):  # a new structure's second evaluation queues its full optimization
        for fn in fns.values():
            fn()  # warm-up (and the one-time compile of the JIT kernels)
    lg.jit_wait()  # the full program and its kernels are in place before timing
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            samples[k].append(_time(fn))
    return {k: statistics.median(v) for k, v in samples.items()}


# -- the programs, each written for lazygraph, NumPy and PyTorch -----------------------------


def gelu(xp: Any, x: Any) -> Any:
    """GELU, tanh form, in namespace `xp` (numpy, jax.numpy, mlx.core or lazygraph)."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + xp.tanh(c * (x + 0.044715 * x * x * x)))


def layernorm(xp: Any, x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    """LayerNorm over the last axis, written out (the peers' program)."""
    d = x - x.mean(axis=-1, keepdims=True)
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / xp.sqrt(var + eps) * w + b


def softmax(xp: Any, x: Any) -> Any:
    """Softmax over the last axis, written out (the peers' program)."""
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def xent(xp: Any, x: Any, labels: Any) -> Any:
    """Mean cross-entropy of integer labels (log-softmax + NLL), written out."""
    m = x.max(axis=1, keepdims=True)
    lse = xp.log(xp.exp(x - m).sum(axis=1)) + m[:, 0]
    return (lse - xp.take_along_axis(x, labels[:, None], axis=1)[:, 0]).mean()


def xent_lg(x: lg.Array, labels: lg.Array) -> lg.Array:
    """The same cross-entropy recorded by lazygraph: logsumexp fused over each row."""
    picked = x[lg.arange(x.shape[0]), labels]
    return (lg.logsumexp(x, axis=1) - picked).mean()


B1, B2, LR, EPS = 0.9, 0.999, 1e-3, 1e-8


def adam(xp: Any, p: Any, g: Any, m: Any, v: Any, t: int = 1) -> tuple:
    """One Adam step (new m, v, p) in namespace `xp`."""
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    p = p - (LR / (1 - B1**t)) * m / (xp.sqrt(v) / math.sqrt(1 - B2**t) + EPS)
    return m, v, p


def _mlx_run(f: Callable[..., Any], *a: Any) -> Any:
    r = f(*a)
    mx.eval(r)
    return r


def peers(progs: dict[str, tuple[Callable[..., Any], tuple]]) -> dict[str, dict[str, Callable[[], Any]]]:
    """case -> {peer: call returning its values} for JAX (eager, jit) and MLX (eager, compiled)."""
    out: dict[str, dict[str, Callable[[], Any]]] = {k: {} for k in progs}
    for name, (fn, args) in progs.items():
        if jax is not None:
            ja = [jax.device_put(a) for a in args]
            out[name]["jax"] = functools.partial(lambda f, a: jax.block_until_ready(f(jnp, *a)), fn, ja)
            jf = jax.jit(functools.partial(fn, jnp))
            out[name]["jax_jit"] = functools.partial(lambda f, a: jax.block_until_ready(f(*a)), jf, ja)
        if mx is not None:
            ma = [mx.array(a) for a in args]
            out[name]["mlx"] = functools.partial(_mlx_run, functools.partial(fn, mx), *ma)
            out[name]["mlx_c"] = functools.partial(_mlx_run, mx.compile(functools.partial(fn, mx)), *ma)
    return out


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
    repeats = 9 if args.quick else 7  # quick sizes are short: more repeats steady the medians

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
    progs = {
        "softmax": (softmax, (x,)),
        "layernorm": (layernorm, (x, w, b)),
        "gelu": (gelu, (x,)),
        "cross_entropy": (xent, (x, labels)),
        "adam": (adam, (p, g, m, v)),
    }
    lg_calls = {
        "softmax": lambda: evaluate(lg.softmax(X, axis=1)),
        "layernorm": lambda: evaluate(F.layer_norm(X, n, W, Bv)),
        "gelu": lambda: evaluate(gelu(lg, X)),
        "cross_entropy": lambda: evaluate(xent_lg(X, L)),
        "adam": lambda: evaluate(*adam(lg, P, G, M, V)),
    }
    traffic = {"softmax": 2, "layernorm": 2, "gelu": 2, "cross_entropy": 1, "adam": 7}
    cases: dict[str, dict[str, Any]] = {}
    for name, (fn, fargs) in progs.items():
        cases[name] = {"lg": lg_calls[name], "np": functools.partial(fn, np, *fargs)}
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
    # (c) first, before any peer runs: a peer's thread pool still busy after its calls took
    # softmax's kernel from 1.11x to 1.72x copy time in one process (it runs on both cores,
    # np.copyto on one)
    near = copy_limit(X, W, Bv, x, n, repeats)
    for name, calls in peers(progs).items():
        cases[name].update(calls)

    # Same values as NumPy before timing anything (PyTorch's Adam updates its state: not rerun).
    for name, case in cases.items():
        ref = case["np"]()
        ref = ref if isinstance(ref, tuple) else (ref,)
        for key in ["lg"] + [k for k, _ in PEERS if k in case and k not in ("np", "torch")]:
            got = case[key]()
            got = got if isinstance(got, (tuple, list)) else (got,)
            for a, r in zip(got, ref):
                np.testing.assert_allclose(np.asarray(a), r, rtol=2e-3, atol=2e-5, err_msg=f"{name} {key}")

    src = x
    dst = np.empty_like(x)
    copy_s = measure({"copy": lambda: np.copyto(dst, src)}, repeats)["copy"]
    bw = 2 * nbytes / copy_s
    print(f"\n(b) fused kernels, {n} x {n} float32; copy: {copy_s * 1e3:.2f} ms = {bw / 1e9:.1f} GB/s")
    print(
        "path: lg.eval (the engine's cached program, fused OpenMP C kernels); peers' ms, then x = peer / ours"
    )
    shown = [(k, h) for k, h in PEERS if k in cases["softmax"]]
    head = f"{'case':<14} {'ours ms':>8} " + " ".join(f"{h:>9}" for _, h in shown) + " |"
    print(head + " ".join(f"{'x ' + h:>11}" for _, h in shown) + f" {'copy x':>7}")
    results: dict[str, dict[str, float]] = {}
    for name, case in cases.items():
        # each framework in its own block, ours first: interleaved, ours ran right after the
        # last peer's call, whose threads were still busy on both cores (see (c))
        t = {k: measure({k: fn}, repeats)[k] for k, fn in case.items()}
        limit = traffic[name] * nbytes / bw
        row = f"{name:<14} {t['lg'] * 1e3:>8.2f} " + " ".join(f"{t[k] * 1e3:>9.2f}" for k, _ in shown)
        print(
            row + " |" + " ".join(f"{t[k] / t['lg']:>11.2f}" for k, _ in shown) + f" {t['lg'] / limit:>7.2f}"
        )
        results[name] = {**t, "copy": t["lg"] / limit}

    print(f"\n(c) softmax and layernorm over a copy of the same {n} x {n} float32 array")
    for name, (kernels, passes) in plan_shape(X, W, Bv, n).items():
        print(
            f"  plan: {name} runs {kernels} kernel(s), {passes} passes over each row (the first from memory)"
        )
    for label, (ours, copy) in near.items():
        print(f"  {label:<55} {ours * 1e3:8.2f} ms, copy {copy * 1e3:8.2f} ms: {ours / copy:5.2f}x")
    print()
    for name, t in results.items():
        for key, _ in PEERS:
            if key in t:
                print(f"result: {name}_speedup_vs_{'numpy' if key == 'np' else key} = {t[key] / t['lg']:.2f}")
        print(f"result: {name}_time_over_copy_limit = {t['copy']:.2f}")
    for label, (ours, copy) in near.items():
        print(f"result: {label.split(':')[0]} = {ours / copy:.2f}")
    soft = next(r for r in rows if r[0] == "Softmax")[1]
    print(f"result: softmax_astar_heuristic_calls = {soft['heuristic_calls']}")
    return 0


def plan_shape(X: lg.Array, W: lg.Array, Bv: lg.Array, n: int) -> dict[str, tuple[int, int]]:
    """name -> (fused kernels, passes over a row in the last kernel: its reduction stages + the final one)."""
    progs = {
        "softmax": lg.softmax(X, axis=1),
        "log_softmax": lg.log_softmax(X, axis=1),
        "layernorm": F.layer_norm(X, n, W, Bv),
    }
    out = {}
    for name, arr in progs.items():
        roots = [arr.node]
        regions = find_regions(schedule(roots), roots)
        spec = compile_region(regions[-1]).spec
        out[name] = (len(regions), len({v.level for v in spec.values if v.kind == "reduce"}) + 1)
    return out


def copy_limit(X: lg.Array, W: lg.Array, Bv: lg.Array, x: np.ndarray, n: int, repeats: int) -> dict:
    """label -> (our seconds, copy seconds): kernels into an existing array beside np.copyto,
    and whole evaluations (allocating their result) beside x.copy(), each pair measured together."""
    dst, out = np.empty_like(x), np.empty_like(x)
    progs = {"softmax": lambda: lg.softmax(X, axis=1), "layernorm": lambda: F.layer_norm(X, n, W, Bv)}
    res = {}
    for name, make in progs.items():
        roots = [make().node]
        (region,) = find_regions(schedule(roots), roots)
        k, vals = compile_region(region), [c.buffer for c in region.inputs]
        t = measure({"k": functools.partial(k, *vals, out=out), "copy": lambda: np.copyto(dst, x)}, repeats)
        res[f"{name}_over_copy: kernel into an existing array"] = (t["k"], t["copy"])
        t = measure({"lg": lambda make=make: evaluate(make()), "copy": x.copy}, repeats)
        res[f"{name}_eval_over_fresh_copy: evaluation, fresh result"] = (t["lg"], t["copy"])
    return res


if __name__ == "__main__":
    sys.exit(main())
