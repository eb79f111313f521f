"""The realistic NumPy programs (benchmarks/programs/) on NumPy, lazygraph, JAX and MLX, side by side.

    python3 benchmarks/bench_programs.py --quick          # small sizes, under a minute
    python3 benchmarks/bench_programs.py                  # medium sizes
    python3 benchmarks/bench_programs.py --only kmeans    # one program (repeatable, or comma-separated)

Each program is `run(np, size)`, written once against the namespace it is given. NumPy and
lazygraph run through programs/run.py's harness: lazygraph's first call (fresh cache
directory: every new structure's optimization is time-boxed; the rest of it and the kernel
compiles go on in the background) and its warm time: the median of the repeats, alternating
with NumPy's, once the background is idle (warm-up calls run until one starts no background
work; the time waited for it is the `bg ms` column). The peers run the very same code: JAX as `jax.numpy` (eager, float64 enabled, so dtypes
match NumPy's) and MLX as `mlx.core` on the CPU, after every NumPy and lazygraph measurement
(their worker threads slowed the next call, whoever made it). Every result is compared with NumPy's
(programs/harness.py) before its time is shown (a peer's dtype may differ from NumPy's where
its promotion rules do: its values are then compared at the less precise dtype's tolerance,
integers exactly); a peer that raises (JAX arrays are
immutable, so in-place programs fail; mlx.core lacks much of NumPy's namespace) or whose
values differ shows `n/a` and the reason is listed under the table. Peers need the `bench`
extra (`pip install -e ".[bench]"`); a missing one is a column of `n/a`.

The last lines read `result: <metric> = <number>`: geometric means of lazygraph over NumPy
(warm, and first call), of the first call over the warm call, how many programs run warm
above 2x NumPy's time, and per peer the geometric mean of peer over NumPy and of lazygraph
over the peer on the programs that peer runs. Timings taken on a busy machine are noisy:
compare ratios measured in one run.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import statistics
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.programs import run as programs  # noqa: E402  (also pins BLAS to one thread)

PEERS = ("jax", "mlx")


@dataclass
class PeerResult:
    """One peer on one program: its median time, or why it has none."""

    median: float | None = None
    first: float | None = None
    reason: str = ""


@dataclass
class Row:
    """One program: NumPy's and lazygraph's result (run.py's) and each peer's."""

    base: programs.Result
    peers: dict[str, PeerResult] = field(default_factory=dict)


def peer_namespace(name: str) -> tuple[Any, str]:
    """The peer's NumPy-like namespace, or None and why it is unavailable."""
    try:
        if name == "jax":
            jax = importlib.import_module("jax")
            jax.config.update("jax_enable_x64", True)  # float64 as in NumPy (JAX's default is float32)
            jax.config.update("jax_platforms", "cpu")
            return importlib.import_module("jax.numpy"), ""
        mx = importlib.import_module("mlx.core")
        mx.set_default_device(mx.cpu)
        return mx, ""
    except Exception as exc:  # noqa: BLE001  (an optional peer: absent or broken, its column is n/a)
        return None, f"not installed ({type(exc).__name__})"


def run_peer(ns: Any, name: str, size: str, repeats: int, budget: float, limit: float) -> PeerResult:
    """Run the program on a peer namespace: compare with NumPy's outputs, then time it."""
    import numpy

    from benchmarks.programs import harness, load

    module = load(name)
    expected = harness.to_numpy(numpy, module.run(numpy, size))

    def call() -> dict[str, numpy.ndarray]:
        return harness.to_numpy(ns, module.run(ns, size))

    try:
        actual, first = programs._call_with_limit(call, limit)
    except (Exception, programs._Timeout) as exc:
        return PeerResult(reason=harness.describe_error(exc, module))
    problem = harness.compare(expected, _as_expected(expected, actual))
    if problem:
        return PeerResult(reason=f"mismatch: {problem}")
    times: list[float] = []
    spent = first
    while len(times) < repeats and (not times or spent < budget):
        try:
            _, t = programs._call_with_limit(call, limit)
        except (Exception, programs._Timeout) as exc:
            return PeerResult(reason="on a repeat: " + harness.describe_error(exc, module))
        times.append(t)
        spent += t
    return PeerResult(statistics.median(times), first)


def _as_expected(expected: dict[str, Any], actual: dict[str, Any]) -> dict[str, Any]:
    """A peer's outputs in NumPy's dtypes where only the dtype differs (JAX and MLX promote
    differently): values are then compared at the tolerance of the less precise of the two."""
    import numpy

    from benchmarks.programs import harness

    out = dict(actual)
    for k, e in expected.items():
        a = actual.get(k)
        if a is None or a.dtype == e.dtype or a.shape != e.shape:
            continue
        if e.dtype.kind in "fc" and a.dtype.kind in "fc" and a.dtype.itemsize < e.dtype.itemsize:
            rtol, atol = harness.TOLERANCES.get(a.dtype.name, (1e-3, 1e-3))
            ok = numpy.isclose(a.astype(e.dtype), e, rtol=rtol, atol=atol, equal_nan=True).all()
            out[k] = e if ok else a.astype(e.dtype)
        elif e.dtype.kind in "biu" and a.dtype.kind in "biu" or e.dtype.kind in "fc" and a.dtype.kind in "fc":
            out[k] = a.astype(e.dtype)
    return out


def geomean(xs: list[float]) -> float:
    """Geometric mean (nan for none)."""
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def print_table(rows: list[Row]) -> None:
    """Times in ms and ratios per program; lazygraph's failures and the peers' reasons below."""
    head = (
        f"{'program':<20} {'np ms':>8} {'lg first':>9} {'lg ms':>8} {'lg/np':>6} {'1st/warm':>8} "
        f"{'bg ms':>7} {'jax ms':>8} {'mlx ms':>8}"
    )
    print(head)
    print("-" * len(head))
    for row in rows:
        r = row.base
        ok = r.status == "ok"
        lg_first = _ms(r.lazy_first) if ok else r.status
        print(
            f"{r.name:<20} {_ms(r.numpy_median):>8} {lg_first:>9} {_ms(r.lazy_median if ok else None):>8} "
            f"{_ratio(r.lazy_median, r.numpy_median) if ok else '-':>6} "
            f"{_ratio(r.lazy_first, r.lazy_median) if ok else '-':>8} {_ms(r.lazy_background):>7} "
            + " ".join(f"{_ms(row.peers[p].median):>8}" for p in PEERS)
        )
    failures = [row.base for row in rows if row.base.status != "ok"]
    if failures:
        print("\nlazygraph failures:")
        for r in failures:
            print(f"  {r.name}: {r.status}: {r.detail}")
    for p in PEERS:
        reasons = [(row.base.name, row.peers[p].reason) for row in rows if row.peers[p].median is None]
        if reasons:
            print(f"\n{p}: n/a on {len(reasons)} of {len(rows)} programs:")
            for name, why in reasons:
                print(f"  {name}: {why[:150]}")


def print_results(rows: list[Row]) -> None:
    """The `result:` lines (module docstring)."""
    ok = [row for row in rows if row.base.status == "ok" and row.base.ratio]
    warm = [row.base.ratio for row in ok]
    first = [row.base.lazy_first / row.base.numpy_median for row in ok]
    first_warm = [row.base.lazy_first / row.base.lazy_median for row in ok]
    print()
    print(f"result: programs_total = {len(rows)}")
    print(f"result: programs_passing = {len(ok)}")
    print(f"result: geomean_ratio_vs_numpy = {geomean(warm):.3f}")
    print(f"result: geomean_first_call_ratio = {geomean(first):.3f}")
    print(f"result: geomean_first_over_warm = {geomean(first_warm):.3f}")
    print(f"result: programs_above_2x = {sum(1 for x in warm if x > 2)}")
    print(f"result: programs_first_above_5x_warm = {sum(1 for x in first_warm if x > 5)}")
    for p in PEERS:
        ran = [row for row in ok if row.peers[p].median is not None]
        vs_np = [row.peers[p].median / row.base.numpy_median for row in ran]
        lg_vs = [row.base.lazy_median / row.peers[p].median for row in ran]
        print(f"result: {p}_programs = {len(ran)}")
        print(f"result: {p}_geomean_ratio_vs_numpy = {geomean(vs_np):.3f}")
        print(f"result: geomean_ratio_vs_{p} = {geomean(lg_vs):.3f}")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (0 unless the arguments are bad)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer repeats (under a minute)")
    parser.add_argument("--only", action="append", default=[], help="program name(s), comma-separated")
    parser.add_argument("--size", choices=("small", "medium", "large"), help="data size (default medium)")
    parser.add_argument("--repeats", type=int, help="timed repeats after the first call (default 5; 3 quick)")
    parser.add_argument("--timeout", type=float, help="seconds allowed per call (default 120; 15 quick)")
    parser.add_argument("--no-peers", action="store_true", help="NumPy and lazygraph only")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # overflow warnings the programs provoke, peers' dtype notes

    if "LAZYGRAPH_CACHE_DIR" not in os.environ:  # first calls optimize from scratch
        os.environ["LAZYGRAPH_CACHE_DIR"] = tempfile.mkdtemp(prefix="lazygraph-programs-")
    from benchmarks.programs import PROGRAMS

    names = [n for spec in args.only for n in spec.split(",") if n] or list(PROGRAMS)
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program(s) {', '.join(unknown)}; choose from {', '.join(PROGRAMS)}")
    size = args.size or ("small" if args.quick else "medium")
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 5)
    limit = args.timeout if args.timeout is not None else (15.0 if args.quick else 120.0)
    budget = 0.3 if args.quick else 10.0  # seconds of repeats per program and peer, after one

    spaces = {p: (None, "not run (--no-peers)") if args.no_peers else peer_namespace(p) for p in PEERS}
    print(f"programs: {len(names)}, size {size}, {repeats} repeats, times in ms (median; first call apart)")
    rows = []
    for name in names:
        rows.append(Row(programs.run_program(name, size, repeats, budget, limit)))
        print(f"  {name}: {rows[-1].base.status}", file=sys.stderr, flush=True)
    # the peers run after every NumPy and lazygraph measurement: a peer's worker threads stay
    # busy after its calls, and the call after an MLX one ran up to 10x slower here (mandelbrot's
    # first call, after knn's MLX run: 158 ms, against 16 ms with no peer before it)
    for row, name in zip(rows, names):
        for p, (ns, why) in spaces.items():
            peer_repeats = min(repeats, 2) if args.quick else repeats  # a peer's first call compiles: slow
            row.peers[p] = (
                PeerResult(reason=why)
                if ns is None
                else run_peer(ns, name, size, peer_repeats, budget, limit)
            )
    print()
    print_table(rows)
    print_results(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
