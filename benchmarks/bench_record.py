"""Recording cost and per-evaluation overhead of lazygraph's reference executor.

    python3 benchmarks/bench_record.py            # full run (about 30 s on a desktop CPU)
    python3 benchmarks/bench_record.py --quick    # smaller run (well under a minute)

(a) Recording: the cost of recording one op without evaluating it, in microseconds, for
    several op kinds (elementwise, views, reductions, matmul, in-place writes).
(b) Evaluation overhead: small programs written once against a namespace (`np` or `lg`) and
    timed both ways in the same run. The lazygraph time is the whole program as a user
    writes it, recording plus evaluation at `.numpy()`; inputs are created beforehand in
    both cases. Ratio = lazygraph / NumPy eager, the median over adjacent pairs of loops.

(c) Small-chain latency: a 15-op elementwise chain on 100 float32 values, recorded and
    evaluated on each call, beside NumPy, MLX (mlx.core on the CPU, `mx.eval` per call) and
    JAX eager (jax.numpy, `block_until_ready` per call) in the same run, each peer timed
    alternating with lazygraph; a peer that is not installed leaves its column blank.
(d) Loops of small in-place writes (`a[i] += 1.5` with one evaluation at the end or a read
    every 10 writes, `a[i] += v` over rows, `a[i] = float(i)`) and of element reads
    (`float(a[i, j])` of an evaluated array), recorded and evaluated, against NumPy's own,
    timed alternating; microseconds per write (or read) and the paired ratio. An evaluated
    array's elements and small regions are written into its buffer directly when nothing
    else can read the old value (lazygraph/array.py `_direct_set`), so after the first
    evaluation these loops run NumPy's own writes plus lazygraph's Python work. Last, one
    step of a 256x256 five-point stencil written into `u[1:-1, 1:-1]`, evaluated per step
    (the engine writes into u's dead buffer: no whole-buffer copy).

Every figure is the median of several repeats, each timing a loop sized to run at least
a few milliseconds, after a warm-up. In (b) the NumPy and lazygraph loops alternate, so both
see the same machine load. BLAS runs on one thread unless OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS or MKL_NUM_THREADS is set. The last lines read `result: <metric> = <n>`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# One BLAS thread (unless set by the caller): the small matmuls here then measure lazygraph's
# overhead rather than thread scheduling, which swings wildly on a busy machine.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import lazygraph as lg  # noqa: E402
from lazygraph import element_ext  # noqa: E402

# -- timing ---------------------------------------------------------------------------------


def _loop_size(fn: Callable[[], Any], min_time: float) -> int:
    """Calls per timed loop so that one loop lasts at least `min_time` (fn is warmed up)."""
    fn()  # warm-up
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time or number >= 1 << 20:
            return number
        number *= 2 if elapsed == 0 else max(2, min(10, int(min_time / elapsed) + 1))


def _sample(fn: Callable[[], Any], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def per_call_seconds(fn: Callable[[], Any], repeats: int, min_time: float) -> float:
    """Median seconds per call of fn over `repeats` loops, each lasting at least `min_time`."""
    number = _loop_size(fn, min_time)
    return statistics.median(_sample(fn, number) for _ in range(repeats))


def paired_seconds(
    fn_a: Callable[[], Any], fn_b: Callable[[], Any], repeats: int, min_time: float
) -> tuple[float, float, float]:
    """Median seconds per call of two functions, and the median of the ratios b / a.

    The loops alternate and each ratio compares two adjacent loops, so both sides see the
    same machine load and the ratio stays meaningful on a busy machine.
    """
    n_a, n_b = _loop_size(fn_a, min_time), _loop_size(fn_b, min_time)
    a, b = [], []
    for _ in range(repeats):
        a.append(_sample(fn_a, n_a))
        b.append(_sample(fn_b, n_b))
    ratio = statistics.median(y / x for x, y in zip(a, b))
    return statistics.median(a), statistics.median(b), ratio


# -- (a) recording --------------------------------------------------------------------------


def lazy(shape: tuple[int, ...]) -> lg.Array:
    """An array whose value is not computed yet (so views of it record view nodes)."""
    return lg.asarray(np.ones(shape)) + 0.0


def recording_cases(n_ops: int) -> list[tuple[str, Callable[[], None]]]:
    """(name, fn) pairs; each fn records `n_ops` ops of one kind and evaluates nothing."""
    shape = (64, 64)

    def add() -> None:
        a, b = lazy(shape), lazy(shape)
        for _ in range(n_ops):
            a + b

    def mul_scalar() -> None:
        a = lazy(shape)
        for _ in range(n_ops):
            a * 2.0

    def tanh() -> None:
        a = lazy(shape)
        for _ in range(n_ops):
            lg.tanh(a)

    def chain() -> None:
        y = lazy(shape)
        for _ in range(n_ops):
            y = y + 1.0

    def getitem_view() -> None:
        a = lazy(shape)
        for _ in range(n_ops):
            _ = a[1:, ::2].node  # a view enters the graph when it is used

    def transpose() -> None:
        a = lazy(shape)
        for _ in range(n_ops):
            _ = a.T.node

    def reshape() -> None:
        a = lazy(shape)
        for _ in range(n_ops):
            _ = a.reshape(-1).node

    def sum_axis() -> None:
        a = lazy(shape)
        for _ in range(n_ops):
            a.sum(axis=0)

    def mean_all() -> None:
        a = lazy(shape)
        for _ in range(n_ops):
            a.mean()

    def matmul() -> None:
        a, b = lazy(shape), lazy(shape)
        for _ in range(n_ops):
            a @ b

    def iadd_view() -> None:
        a = lazy(shape)
        v = a[1:, ::2]
        for _ in range(n_ops):
            v += 1.0

    def setitem_row() -> None:
        a = lazy(shape)
        for _ in range(n_ops):
            a[0] = 0.0

    def iadd_element() -> None:
        a = lazy(shape)
        for i in range(n_ops):
            a[i % 64, 3] += 1.5  # read, add, write back: three nodes per write

    return [
        ("add a + b", add),
        ("multiply a * 2.0", mul_scalar),
        ("tanh(a)", tanh),
        ("chain y = y + 1.0", chain),
        ("view a[1:, ::2]", getitem_view),
        ("transpose a.T", transpose),
        ("reshape a.reshape(-1)", reshape),
        ("reduce a.sum(axis=0)", sum_axis),
        ("reduce a.mean()", mean_all),
        ("matmul a @ b", matmul),
        ("in-place v += 1.0 (view)", iadd_view),
        ("setitem a[0] = 0.0", setitem_row),
        ("element a[i, 3] += 1.5", iadd_element),
    ]


def bench_recording(n_ops: int, repeats: int, min_time: float) -> dict[str, float]:
    """Microseconds per recorded op, per kind."""
    setup = per_call_seconds(lambda: (lazy((64, 64)), lazy((64, 64))), repeats, min_time)
    out = {}
    for name, fn in recording_cases(n_ops):
        seconds = per_call_seconds(fn, repeats, min_time)
        out[name] = max(seconds - setup, 0.0) / n_ops * 1e6
    return out


# -- (b) evaluation overhead ------------------------------------------------------------------


def chain10(xp: Any, x: Any) -> Any:
    """Ten elementwise ops."""
    y = x * 1.5
    y = y + 0.5
    y = xp.tanh(y)
    y = y * y
    y = y - 0.25
    y = xp.exp(y)
    y = y / 3.0
    y = xp.sqrt(y)
    y = y + x
    return xp.maximum(y, 0.1)


def mlp(xp: Any, x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    """Two dense layers: matmul + bias + tanh, then matmul + bias."""
    h = xp.tanh(x @ w1 + b1)
    return h @ w2 + b2


def eval_cases() -> list[tuple[str, str, str, tuple[np.ndarray, ...], Callable]]:
    """(case, size label, metric suffix, NumPy inputs, program)."""
    rng = np.random.default_rng(0)
    cases = []
    sizes = [((1, 1), "small"), ((100,), "100"), ((10_000,), "10k"), ((1_000_000,), "1m")]
    for shape, suffix in sizes:
        label = "x".join(map(str, shape))
        cases.append(("10-op elementwise chain", label, suffix, (rng.normal(size=shape),), chain10))
    mlp_inputs = (
        rng.normal(size=(32, 256)),
        rng.normal(size=(256, 128)) / 16,
        rng.normal(size=128),
        rng.normal(size=(128, 10)) / 11,
        rng.normal(size=10),
    )
    cases.append(("MLP forward 256-128-10", "batch 32", "mlp32", mlp_inputs, mlp))
    return cases


def bench_eval(repeats: int, min_time: float) -> list[tuple[str, str, str, float, float, float]]:
    """(case, size, metric suffix, numpy seconds, lazygraph seconds, ratio) per case."""
    rows = []
    for case, label, suffix, np_inputs, program in eval_cases():
        lg_inputs = tuple(lg.asarray(a) for a in np_inputs)
        expected = program(np, *np_inputs)
        got = program(lg, *lg_inputs).numpy()
        getattr(lg, "jit_wait", lambda: None)()  # kernels compiled off the critical path: steady state
        if not np.allclose(got, expected, rtol=1e-12, atol=1e-12):
            raise SystemExit(f"bench_record: {case} {label}: lazygraph and NumPy disagree")
        t_np, t_lg, ratio = paired_seconds(
            lambda p=program, a=np_inputs: p(np, *a),
            lambda p=program, a=lg_inputs: p(lg, *a).numpy(),
            repeats,
            min_time,
        )
        rows.append((case, label, suffix, t_np, t_lg, ratio))
    return rows


# -- (d) loops of small in-place writes -------------------------------------------------------------


def element_loop(xp: Any, a: Any, every: int) -> Any:
    """`a[i] += 1.5` over every element; a Python float read every `every` writes (0: none)."""
    for i in range(a.shape[0]):
        a[i] += 1.5
        if every and i % every == every - 1:
            float(a[i])
    return a


def row_loop(xp: Any, a: Any, v: Any) -> Any:
    """`a[i] += v` over every row (a view: NumPy writes through it, then stores it onto itself)."""
    for i in range(a.shape[0]):
        a[i] += v
    return a


def set_loop(xp: Any, a: Any) -> Any:
    """`a[i] = float(i)` over every element (a Python scalar stored into one element)."""
    for i in range(a.shape[0]):
        a[i] = float(i)
    return a


def read_loop(xp: Any, a: Any) -> Any:
    """`float(a[i, j])` over every element of an evaluated array (one evaluation point each)."""
    total = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            total += float(a[i, j])
    a[0, 0] = total - total  # keeps the array the result (unchanged) without a second pass
    return a


def stencil_step(xp: Any, u: Any) -> Any:
    """One step of a five-point stencil written into `u[1:-1, 1:-1]` (heat.py's update)."""
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
    u[1:-1, 1:-1] = u[1:-1, 1:-1] + 0.2 * lap
    return u


def write_cases() -> list[tuple[str, str, Callable[[Any], tuple], Callable]]:
    """(case, metric suffix, namespace -> fresh inputs, program); each ends with one evaluation."""
    vec = np.arange(8.0)
    field = np.random.default_rng(0).random((256, 256))
    return [
        ("a[i] += 1.5, 200 writes, 1 evaluation", "element", lambda xp: (xp.zeros(200), 0), element_loop),
        ("a[i] += 1.5, evaluated every 10", "element_k10", lambda xp: (xp.zeros(200), 10), element_loop),
        ("a[i] += v, 200 rows of 8", "row", lambda xp: (xp.zeros((200, 8)), xp.asarray(vec)), row_loop),
        ("a[i] = float(i), 200 writes", "set_element", lambda xp: (xp.zeros(200),), set_loop),
        ("float(a[i, j]), 20x10 evaluated", "read_element", lambda xp: (xp.zeros((20, 10)),), read_loop),
        ("u[1:-1, 1:-1] = f(u), 256x256, per step", "stencil", lambda xp: (xp.array(field),), stencil_step),
    ]


def bench_writes(repeats: int, min_time: float) -> list[tuple[str, str, float, float, float]]:
    """(case, metric suffix, numpy µs per write, lazygraph µs per write, ratio) per write loop.

    Each side runs the program on inputs made once (NumPy keeps adding into its array, as
    lazygraph does), lazygraph ending with `.numpy()`, so the time is recording plus evaluation.
    """
    out = []
    for case, suffix, make, program in write_cases():
        expected = program(np, *make(np))
        got = program(lg, *make(lg)).numpy()
        getattr(lg, "jit_wait", lambda: None)()
        # the stencil's fused arithmetic may round differently from NumPy's op-by-op
        same = (
            np.allclose(got, expected, rtol=1e-12)
            if program is stencil_step
            else np.array_equal(got, expected)
        )
        if not same:
            raise SystemExit(f"bench_record: {case}: lazygraph and NumPy disagree")
        np_in, lg_in = make(np), make(lg)
        n = {read_loop: np_in[0].size, stencil_step: 1}.get(program, np_in[0].shape[0])
        t_np, t_lg, ratio = paired_seconds(
            lambda p=program, a=np_in: p(np, *a),
            lambda p=program, a=lg_in: p(lg, *a).numpy(),
            repeats,
            min_time,
        )
        out.append((case, suffix, t_np / n * 1e6, t_lg / n * 1e6, ratio))
    return out


# -- (c) small-chain latency against eager peers ------------------------------------------------


def chain15(xp: Any, x: Any) -> Any:
    """Fifteen elementwise ops, written once for NumPy, lazygraph, MLX and jax.numpy."""
    y = x * 1.5
    y = y + 0.5
    y = xp.tanh(y)
    y = y * y
    y = y - 0.25
    y = xp.exp(y)
    y = y / 3.0
    y = xp.sqrt(y)
    y = y + x
    y = xp.maximum(y, 0.1)
    y = y * 0.75
    y = xp.abs(y)
    y = y - 0.125
    y = xp.minimum(y, 2.0)
    return y * 2.0


def _peers() -> dict[str, Callable[[np.ndarray], Callable[[], Any]] | None]:
    """name -> (NumPy input -> one eager evaluation of chain15, returning it), None where not importable."""
    peers: dict[str, Callable[[np.ndarray], Callable[[], Any]] | None] = {"mlx": None, "jax": None}
    try:
        import mlx.core as mx

        mx.set_default_device(mx.cpu)

        def mlx_run(x: np.ndarray) -> Callable[[], Any]:
            xm = mx.array(x)

            def run() -> Any:
                y = chain15(mx, xm)
                mx.eval(y)
                return y

            return run

        peers["mlx"] = mlx_run
    except ImportError:
        pass
    try:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax.numpy as jnp

        def jax_run(x: np.ndarray) -> Callable[[], Any]:
            xj = jnp.asarray(x)
            return lambda: chain15(jnp, xj).block_until_ready()

        peers["jax"] = jax_run
    except ImportError:
        pass
    return peers


def bench_small_chain(repeats: int, min_time: float) -> dict[str, float | None]:
    """Microseconds per call of chain15 on 100 float32 values; lazygraph records and evaluates each call.

    Each peer is timed alternating with lazygraph, and `ratio_<peer>` is the median of the
    paired ratios lazygraph / peer (meaningful on a busy machine).
    """
    x = np.random.default_rng(1).normal(size=100).astype(np.float32)
    xl = lg.asarray(x)
    expected = chain15(np, x)
    run_lg = lambda: chain15(lg, xl).numpy()  # noqa: E731
    for _ in range(3):
        got = run_lg()
        getattr(lg, "jit_wait", lambda: None)()  # kernels compiled off the critical path: steady state
    if not np.allclose(got, expected, rtol=1e-5, atol=1e-6):
        raise SystemExit("bench_record: small chain: lazygraph and NumPy disagree")
    t_np, t_lg, ratio = paired_seconds(lambda: chain15(np, x), run_lg, repeats, min_time)
    out: dict[str, float | None] = {"numpy": t_np * 1e6, "lazygraph": t_lg * 1e6, "ratio_numpy": ratio}
    for name, make in _peers().items():
        if make is None:
            out[name] = out[f"ratio_{name}"] = None
            continue
        run = make(x)
        if not np.allclose(np.asarray(run()), expected, rtol=1e-5, atol=1e-6):
            raise SystemExit(f"bench_record: small chain: {name} and NumPy disagree")
        t_peer, _, r = paired_seconds(run, run_lg, repeats, min_time)
        out[name], out[f"ratio_{name}"] = t_peer * 1e6, r
    return out


# -- report -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer ops and repeats (well under a minute)")
    parser.add_argument(
        "--python-elements", action="store_true", help="(d) without the element extension (its Python paths)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        n_ops, repeats, min_time = 500, 7, 0.01
    else:
        n_ops, repeats, min_time = 5000, 15, 0.05

    print(
        f"lazygraph {lg.__version__}, NumPy {np.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()} ({'quick' if args.quick else 'full'} run: median of {repeats} repeats)"
    )
    t_start = time.perf_counter()

    print(f"\n(a) recording cost, {n_ops} ops per run, nothing evaluated")
    print(f"{'op kind':<28} {'µs/op':>8}")
    record = bench_recording(n_ops, repeats, min_time)
    for name, us in record.items():
        print(f"{name:<28} {us:>8.2f}")

    print(
        "\n(b) one evaluation, record + evaluate (lazygraph) vs eager (NumPy); ratio = median of paired ratios"
    )
    header = f"{'case':<26} {'size':>10} {'numpy µs':>12} {'lazygraph µs':>14} {'ratio':>8}"
    print(header)
    print("-" * len(header))
    rows = bench_eval(repeats, min_time)
    for case, label, _, t_np, t_lg, ratio in rows:
        print(f"{case:<26} {label:>10} {t_np * 1e6:>12.1f} {t_lg * 1e6:>14.1f} {ratio:>8.2f}")

    print("\n(c) 15-op elementwise chain on 100 float32, recorded and evaluated per call (µs per call)")
    small = bench_small_chain(repeats, min_time)
    cols = ("numpy", "lazygraph", "mlx", "jax")
    print(" ".join(f"{c:>12}" for c in cols))
    print(" ".join(f"{small[c]:>12.1f}" if small[c] is not None else f"{'':>12}" for c in cols))

    # the element extension is built in the background at the first element access; built
    # (or loaded) here first so that every loop below times the same path
    ext = element_ext.status() if args.python_elements else (element_ext.prepare() and element_ext.status())
    if args.python_elements:
        element_ext.use_extension(False)
    print(
        f"\n(d) loops of small in-place writes, recorded and evaluated (µs per write; ratio = paired); "
        f"element paths: {ext or element_ext.status()}"
    )
    header = f"{'case':<40} {'numpy µs':>9} {'lazygraph µs':>13} {'ratio':>8}"
    print(header)
    print("-" * len(header))
    loops = bench_writes(repeats, min_time)
    for case, _, us_np, us_lg, ratio in loops:
        print(f"{case:<40} {us_np:>9.2f} {us_lg:>13.2f} {ratio:>8.1f}")

    print(f"\ntotal {time.perf_counter() - t_start:.1f} s\n")
    elementwise = [record[k] for k in ("add a + b", "multiply a * 2.0", "tanh(a)", "chain y = y + 1.0")]
    print(f"result: record_us_per_op = {statistics.median(record.values()):.2f}")
    print(f"result: record_us_per_elementwise_op = {statistics.median(elementwise):.2f}")
    for _, _, suffix, _, _, ratio in rows:
        print(f"result: eval_overhead_ratio_{suffix} = {ratio:.2f}")
    print(f"result: small_chain_lazygraph_us = {small['lazygraph']:.1f}")
    for peer in ("mlx", "jax"):
        if small[f"ratio_{peer}"] is not None:
            print(f"result: small_chain_lazygraph_over_{peer} = {small[f'ratio_{peer}']:.2f}")
    for _, suffix, _, us_lg, ratio in loops:
        print(f"result: write_loop_us_per_write_{suffix} = {us_lg:.2f}")
        print(f"result: write_loop_ratio_{suffix} = {ratio:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
