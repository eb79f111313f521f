"""How planning scales: first-evaluation time of deep graphs against graph size.

    python3 benchmarks/bench_plan.py            # chains of 100 to 10,000 links (several minutes)
    python3 benchmarks/bench_plan.py --quick    # chains up to 1,000 links (under a minute)

(a) A chain of elementwise links on 100,000 float32 elements, trained one step: each link
    is `x = tanh(x) * 0.5 + x`, then `x.sum().backward()` and a gradient is read (the
    evaluation point: forward and backward in one graph, about eight nodes per link). Two
    variants: `param`, where x starts as a Parameter (as reported in issue 22: the whole
    graph then depends on model state only, so the fold pass computes it as one memoized
    constant), and `data`, where x starts as a data array times a Parameter of ones (the
    chain is work per step: fusion, kernels and compilation all take part). Every measurement runs in a fresh process with a private, empty
    LAZYGRAPH_CACHE_DIR, so it is a true first evaluation: recording, the passes (P -> Q),
    the memory-aware order, compiling any fused kernels and running. Three configurations:
    `jit` (the default: passes and fused C kernels), `nojit` (passes, LAZYGRAPH_JIT=0) and
    `noopt` (LAZYGRAPH_OPTIMIZE=0: no passes, the reference executor). `numpy` is the same
    chain run eagerly in NumPy (forward, then the hand-written backward), for context.
    The table gives seconds per configuration and size, the optimizer's own share
    (`lg.cache.stats()["optimize_seconds"]`), the log-log slope of time against links (1.0 is
    linear) fitted over all sizes, and the ratio to `noopt` at the largest size.
(b) The benchmark models' first evaluation, the same three configurations: the MLP and the
    Dali CNN training step of bench_train.py (batch 64 here) and, from benchmarks/models,
    ResNet-50 and BERT inference at reduced scale.

Every time is measured inside its own process (interpreter start-up and imports excluded); the
three configurations of one size run back to back. The last lines read
`result: <metric> = <number>`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ELEMENTS = 100_000
CONFIGS = {
    "jit": {"LAZYGRAPH_OPTIMIZE": "1", "LAZYGRAPH_JIT": "1"},
    "nojit": {"LAZYGRAPH_OPTIMIZE": "1", "LAZYGRAPH_JIT": "0"},
    "noopt": {"LAZYGRAPH_OPTIMIZE": "0", "LAZYGRAPH_JIT": "0"},
}


# -- children: one measurement each ------------------------------------------------------------


def child_chain(arg: str) -> dict:
    """Record and evaluate one chain (forward and backward); seconds and a checksum."""
    import lazygraph as lg

    variant, links = arg.split(":")
    lg.cache.clear()
    a = np.random.default_rng(0).standard_normal(ELEMENTS).astype(np.float32)
    t0 = time.perf_counter()
    if variant == "param":
        x0 = lg.nn.Parameter(lg.asarray(a))
        x = x0
    else:
        x0 = lg.nn.Parameter(lg.ones(ELEMENTS, dtype=np.float32))
        x = lg.asarray(a) * x0
    for _ in range(int(links)):
        x = lg.tanh(x) * 0.5 + x
    x.sum().backward()
    t1 = time.perf_counter()
    g = x0.grad.numpy()
    t2 = time.perf_counter()
    st = lg.cache.stats()
    return {
        "seconds": t2 - t0,
        "record": t1 - t0,
        "optimize": st["optimize_seconds"],
        "check": float(g.sum()),
    }


def child_numpy(arg: str) -> dict:
    """The same chain eagerly in NumPy: forward keeping tanh's values, then the backward."""
    a = np.random.default_rng(0).standard_normal(ELEMENTS).astype(np.float32)
    t0 = time.perf_counter()
    x = a
    ts = []
    for _ in range(int(arg.split(":")[1])):
        t = np.tanh(x)
        ts.append(t)
        x = t * np.float32(0.5) + x
    g = np.ones_like(x)
    for t in reversed(ts):
        g = g * ((np.float32(1) - t * t) * np.float32(0.5)) + g
    if arg.startswith("data"):
        g = g * a
    return {"seconds": time.perf_counter() - t0, "check": float(g.sum())}


def child_model(name: str) -> dict:
    """First evaluation of one benchmark model (training step or inference graph)."""
    sys.path.insert(0, HERE)
    import lazygraph as lg

    lg.cache.clear()
    t0 = time.perf_counter()
    if name in ("mlp", "cnn"):
        from bench_train import batches, lazygraph_step

        step, _ = lazygraph_step(name)
        x, y = batches(name, 1)[0]
        x, y = x[:64], y[:64]
        t0 = time.perf_counter()
        check = step(x, y)
    else:
        from models import MODELS

        with lg.no_grad():
            m = MODELS[name](0.25 if name == "resnet50" else 0.5)
        t0 = time.perf_counter()
        check = float(sum(float(np.asarray(v).sum()) for v in lg.eval(*m.outputs)))
    st = lg.cache.stats()
    return {"seconds": time.perf_counter() - t0, "optimize": st["optimize_seconds"], "check": check}


def measure(kind: str, arg: str, config: str | None, timeout: float) -> dict:
    """Run one child in a fresh process with an empty private cache directory."""
    env = dict(os.environ)
    env.update(CONFIGS.get(config or "", {}))
    env.pop("LAZYGRAPH_CACHE", None)
    with tempfile.TemporaryDirectory(prefix="lazygraph-bench-plan-") as d:
        env["LAZYGRAPH_CACHE_DIR"] = d
        cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, arg]
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"seconds": math.inf, "error": f"over {timeout:.0f} s"}
    if r.returncode != 0:
        return {"seconds": math.nan, "error": r.stderr.strip().splitlines()[-1:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


# -- the parent ---------------------------------------------------------------------------------


def slope(sizes: list[int], times: list[float]) -> float:
    """Least-squares slope of log(time) against log(size) (1.0: linear)."""
    pts = [(math.log(s), math.log(t)) for s, t in zip(sizes, times) if 0 < t < math.inf]
    if len(pts) < 2:
        return math.nan
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den


def chain_part(variant: str, sizes: list[int], timeout: float) -> dict:
    """Table (a) for one variant; returns times per configuration."""
    names = [*CONFIGS, "numpy"]
    times: dict[str, list[float]] = {c: [] for c in names}
    optimize: dict[str, list[float]] = {c: [] for c in CONFIGS}
    start = "x = Parameter(a)" if variant == "param" else "x = data * Parameter(ones)"
    print(f"\n(a) {variant} chain: {start}, then `x = tanh(x) * 0.5 + x` links on {ELEMENTS:,} float32,")
    print("    forward + backward; first evaluation in a fresh process and cache; seconds")
    print("    (the optimizer's share in brackets)")
    head = f"{'links':>7} " + " ".join(f"{c:>17}" for c in CONFIGS) + f" {'numpy':>9} {'jit/noopt':>9}"
    print(head)
    for n in sizes:
        row = f"{n:>7} "
        checks = []
        for c in CONFIGS:
            r = measure("chain", f"{variant}:{n}", c, timeout)
            times[c].append(r["seconds"])
            optimize[c].append(r.get("optimize", math.nan))
            checks.append(r.get("check"))
            cell = f"{r['seconds']:.2f} [{r.get('optimize', math.nan):.2f}]"
            row += f" {cell:>17}"
        r = measure("numpy", f"{variant}:{n}", None, timeout)
        times["numpy"].append(r["seconds"])
        checks.append(r.get("check"))
        ratio = times["jit"][-1] / times["noopt"][-1]
        row += f" {r['seconds']:>9.3f} {ratio:>9.2f}"
        good = [c for c in checks if c is not None and math.isfinite(c)]
        if good and max(good) - min(good) > 1e-3 * max(1.0, abs(max(good))):
            row += f"  (checksums differ: {checks})"
        print(row, flush=True)
    print(f"{'slope':>7} " + " ".join(f"{slope(sizes, times[c]):>17.2f}" for c in CONFIGS), end="")
    print(f" {slope(sizes, times['numpy']):>9.2f}")
    print(f"{'opt.':>7} " + " ".join(f"{slope(sizes, optimize[c]):>17.2f}" for c in CONFIGS))
    print("    (slope: log-log fit of seconds against links; opt.: the same for the optimizer's share)")
    return {"times": times, "optimize": optimize}


def model_part(models: list[str], timeout: float) -> dict:
    """Table (b); returns seconds per model and configuration."""
    print("\n(b) benchmark models, first evaluation in a fresh process and cache; seconds")
    print(f"{'model':>10} " + " ".join(f"{c:>17}" for c in CONFIGS) + f" {'jit/noopt':>9}")
    out = {}
    for m in models:
        rs = {c: measure("model", m, c, timeout) for c in CONFIGS}
        cells = " ".join(
            f"{rs[c]['seconds']:.2f} [{rs[c].get('optimize', math.nan):.2f}]".rjust(17) for c in CONFIGS
        )
        print(f"{m:>10} {cells} {rs['jit']['seconds'] / rs['noopt']['seconds']:>9.2f}", flush=True)
        out[m] = rs
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with --child, one measurement)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="chains up to 1,000 links, two models")
    ap.add_argument("--sizes", type=str, default="", help="comma-separated chain lengths")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per measurement at most")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "ARG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, arg = args.child
        fn = {"chain": child_chain, "numpy": child_numpy, "model": child_model}[kind]
        print(json.dumps(fn(arg)))
        return 0
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    else:
        sizes = [100, 300, 1000] if args.quick else [100, 300, 1000, 3000, 10000]
    models = ["mlp", "resnet50"] if args.quick else ["mlp", "cnn", "resnet50", "bert"]
    print(f"bench_plan: {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cores")
    a = chain_part("param", sizes, args.timeout)
    d = chain_part("data", sizes, args.timeout)
    b = model_part(models, args.timeout)
    big = sizes[-1]
    print()
    for prefix, part in (("", a), ("data", d)):
        t = part["times"]
        print(f"result: {prefix}plan_slope_jit = {slope(sizes, t['jit']):.2f}")
        print(f"result: {prefix}plan_slope_nojit = {slope(sizes, t['nojit']):.2f}")
        print(f"result: {prefix}plan_slope_noopt = {slope(sizes, t['noopt']):.2f}")
        print(f"result: {prefix}optimizer_slope_jit = {slope(sizes, part['optimize']['jit']):.2f}")
        print(f"result: {prefix}chain{big}_jit_s = {t['jit'][-1]:.2f}")
        print(f"result: {prefix}chain{big}_vs_noopt = {t['jit'][-1] / t['noopt'][-1]:.2f}")
        print(f"result: {prefix}chain{big}_nojit_vs_noopt = {t['nojit'][-1] / t['noopt'][-1]:.2f}")
        print(f"result: {prefix}chain{big}_noopt_vs_numpy = {t['noopt'][-1] / t['numpy'][-1]:.2f}")
    for m, rs in b.items():
        print(f"result: {m}_first_eval_vs_noopt = {rs['jit']['seconds'] / rs['noopt']['seconds']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
