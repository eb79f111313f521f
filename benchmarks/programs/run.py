"""Run the realistic NumPy programs with NumPy and with lazygraph: compare their outputs, time both.

    python3 benchmarks/programs/run.py --quick          # small sizes, under a minute
    python3 benchmarks/programs/run.py                  # medium sizes
    python3 benchmarks/programs/run.py --only kmeans    # one program (repeatable, or comma-separated)

Each program is `run(np, size)` in its own module, written once against the namespace it is
given. Outputs are compared with NumPy's (same shapes and dtypes; floats within rtol 1e-5 for
float64, 1e-4 for float32, 1e-3 for float16; integers and booleans exactly). Times are wall
clock of the whole program including evaluating its outputs: the first call apart (lazygraph's
includes the time-boxed optimization of every new graph structure, whose full optimization and
kernel compiles go on in the background; the cache directory is a fresh temporary one unless
LAZYGRAPH_CACHE_DIR is set or --keep-cache is given), then, once that background work is done,
the median of the repeats, NumPy and lazygraph alternating so both see the same load. The ratio is lazygraph
over NumPy; the last lines read `result: <metric> = <number>` (the geometric mean is over the
programs that pass).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One BLAS thread (unless set by the caller), as in the other benchmarks: a busy 2-core machine
# otherwise makes matmul timings swing.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass
class Result:
    """One program's outcome: status, detail and the timings in seconds (None when not measured)."""

    name: str
    status: str = "ok"
    detail: str = ""
    numpy_first: float | None = None
    numpy_median: float | None = None
    lazy_first: float | None = None
    lazy_median: float | None = None
    lazy_background: float | None = None  # waited after the first call for background work to finish
    missing: list[str] = field(default_factory=list)
    stand_ins: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)  # NumPy functions run eagerly (lazygraph.fallback)

    @property
    def ratio(self) -> float | None:
        """lazygraph's median time over NumPy's."""
        if self.lazy_median is None or not self.numpy_median:
            return None
        return self.lazy_median / self.numpy_median


class _Timeout(BaseException):
    pass


def _wait_background(lazygraph: Any, limit: float) -> float:
    """Seconds spent waiting for lazygraph's background work (optimization, compiles) to finish.

    Not a call of the program, so not held to its limit: a large kernel's compile takes 12-15 s
    of one core here (mandelbrot's), over the quick limit when the machine is busy. Waits at
    most 20 times the limit; the repeats then time whatever plan is in place.
    """
    t = time.perf_counter()
    lazygraph.jit_wait(20 * limit)
    return time.perf_counter() - t


def _call_with_limit(fn: Callable[[], Any], seconds: float) -> tuple[Any, float]:
    """fn's value and its wall time; raises _Timeout past `seconds` (SIGALRM, main thread only)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Timeout(f"timeout: more than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        t0 = time.perf_counter()
        value = fn()
        return value, time.perf_counter() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_program(name: str, size: str, repeats: int, budget: float, limit: float) -> Result:
    """Run one program with NumPy and lazygraph, compare the outputs and time both."""
    import numpy

    import lazygraph
    from benchmarks.programs import harness, load

    module = load(name)
    result = Result(name, missing=harness.missing_names(module, lazygraph))

    from benchmarks.programs import probe

    probe.USED.clear()

    def program(ns: Any) -> Callable[[], dict[str, numpy.ndarray]]:
        return lambda: harness.to_numpy(ns, module.run(ns, size))

    try:
        expected, result.numpy_first = _call_with_limit(program(numpy), limit)
    except (Exception, _Timeout) as exc:
        result.status, result.detail = "numpy error", harness.describe_error(exc, module)
        return result
    from lazygraph import fallback

    fallback.reset_warnings()  # each program names every NumPy function it falls back to
    lazygraph.jit_wait()  # the previous program's background work is not this one's first call
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", fallback.LazygraphFallbackWarning)
            actual, result.lazy_first = _call_with_limit(program(lazygraph), limit)
        result.fallbacks = sorted(
            {
                m.group(1)
                for w in caught
                if issubclass(w.category, fallback.LazygraphFallbackWarning)
                and (m := re.search(r"call of (\S+)", str(w.message)))
            }
        )
    except _Timeout as exc:
        result.status, result.detail = "timeout", str(exc)
        return result
    except Exception as exc:
        result.status, result.detail = "error", harness.describe_error(exc, module)
        return result
    result.stand_ins = sorted(probe.USED)
    problem = harness.compare(expected, actual)
    if problem:
        result.status, result.detail = "mismatch", problem

    # The repeats measure the steady state: what the first call left to the background is done,
    # and so is what the next calls start there (the fully optimized program's kernels compile
    # when it first runs). Warm-up calls continue until one leaves nothing to the background.
    from jit import background

    result.lazy_background = _wait_background(lazygraph, limit)
    for _ in range(3 if repeats > 0 else 0):
        before = background.COUNTS["submitted"]
        try:
            _call_with_limit(program(lazygraph), limit)
        except (Exception, _Timeout) as exc:
            result.status, result.detail = (
                "error",
                "on a warm-up call: " + harness.describe_error(exc, module),
            )
            return result
        result.lazy_background += _wait_background(lazygraph, limit)
        if background.COUNTS["submitted"] == before:
            break
    numpy_times: list[float] = []
    lazy_times: list[float] = []
    spent = result.numpy_first + result.lazy_first
    while len(lazy_times) < repeats and (not lazy_times or spent < budget):
        try:
            _, t_np = _call_with_limit(program(numpy), limit)
            _, t_lg = _call_with_limit(program(lazygraph), limit)
        except (Exception, _Timeout) as exc:
            result.status, result.detail = "error", "on a repeat: " + harness.describe_error(exc, module)
            break
        numpy_times.append(t_np)
        lazy_times.append(t_lg)
        spent += t_np + t_lg
    if lazy_times:
        result.numpy_median = statistics.median(numpy_times)
        result.lazy_median = statistics.median(lazy_times)
    return result


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def print_table(results: list[Result], width: int = 70) -> None:
    """The table of programs, statuses, times and ratios, then the details of every failure."""
    head = f"{'program':<20} {'status':<{width}} {'np first':>9} {'np ms':>9} {'lg first':>9} {'lg ms':>9} {'ratio':>7}"
    print(head)
    print("-" * len(head))
    for r in results:
        status = r.status if r.status == "ok" else f"{r.status}: {r.detail}"
        if r.status == "ok" and r.fallbacks:
            status = "ok, NumPy fallback: " + ", ".join(f.removeprefix("numpy.") for f in r.fallbacks)
        if len(status) > width:
            status = status[: width - 3] + "..."
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        print(
            f"{r.name:<20} {status:<{width}} {_ms(r.numpy_first):>9} {_ms(r.numpy_median):>9} "
            f"{_ms(r.lazy_first):>9} {_ms(r.lazy_median):>9} {ratio:>7}"
        )
    probed = [r for r in results if r.stand_ins]
    if probed:
        print("\nNumPy stand-ins used (--probe):")
        for r in probed:
            print(f"  {r.name}: {', '.join(r.stand_ins)}")
    failures = [r for r in results if r.status != "ok"]
    if failures:
        print("\nfailures:")
        for r in failures:
            print(f"  {r.name}: {r.status}: {r.detail}")
            if r.missing:
                print(f"    np names lazygraph lacks (static scan): {', '.join(r.missing)}")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (0 unless the arguments are bad)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer repeats (under a minute)")
    parser.add_argument("--only", action="append", default=[], help="program name(s), comma-separated")
    parser.add_argument("--size", choices=("small", "medium", "large"), help="data size (default medium)")
    parser.add_argument("--repeats", type=int, help="timed repeats after the first call (default 5; 3 quick)")
    parser.add_argument("--timeout", type=float, help="seconds allowed per call (default 120; 15 quick)")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="give lazygraph NumPy-backed stand-ins for what it lacks (probe.py), to see past missing functions",
    )
    parser.add_argument("--keep-cache", action="store_true", help="use the usual lazygraph cache directory")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # overflow/invalid warnings the programs provoke

    if not args.keep_cache and "LAZYGRAPH_CACHE_DIR" not in os.environ:
        os.environ["LAZYGRAPH_CACHE_DIR"] = tempfile.mkdtemp(prefix="lazygraph-programs-")
    from benchmarks.programs import PROGRAMS

    names = [n for spec in args.only for n in spec.split(",") if n] or list(PROGRAMS)
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program(s) {', '.join(unknown)}; choose from {', '.join(PROGRAMS)}")
    size = args.size or ("small" if args.quick else "medium")
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 5)
    limit = args.timeout if args.timeout is not None else (15.0 if args.quick else 120.0)
    budget = 1.0 if args.quick else 10.0  # seconds of repeats per program, after at least one

    if args.probe:
        import lazygraph
        from benchmarks.programs import harness, load, probe

        wanted = sorted({m for n in names for m in harness.missing_names(load(n), lazygraph)})
        installed = probe.install(lazygraph, wanted)
        print(f"probe: NumPy-backed stand-ins for {', '.join(installed)}")
    print(f"programs: {len(names)}, size {size}, {repeats} repeats, times in ms (median; first call apart)")
    results = []
    for name in names:
        results.append(run_program(name, size, repeats, budget, limit))
        print(f"  {name}: {results[-1].status}", file=sys.stderr, flush=True)
    print()
    print_table(results)
    passing = [r for r in results if r.status == "ok"]
    ratios = [r.ratio for r in passing if r.ratio]
    geomean = math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else float("nan")
    print()
    print(f"result: programs_total = {len(results)}")
    print(f"result: programs_passing = {len(passing)}")
    print(f"result: programs_passing_without_fallback = {sum(1 for r in passing if not r.fallbacks)}")
    print(f"result: geomean_ratio_vs_numpy = {geomean:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
