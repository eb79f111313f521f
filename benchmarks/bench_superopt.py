"""Superoptimizer benchmark: the rule library, then search and speedup per model.

    python benchmarks/bench_superopt.py            # full sizes (several minutes on 2 cores)
    python benchmarks/bench_superopt.py --quick    # small models, small budgets: under a minute
    python benchmarks/bench_superopt.py --generate # also regenerate + verify the library here
    python benchmarks/bench_superopt.py --blas-threads 1   # single-threaded GEMMs (see --help)

Part 1, the library: rules by status in optimizer/superopt/rules.json and the generation and
verification times recorded in it by `python -m optimizer generate` (or, with --generate,
measured in this run). Part 2, per model (benchmarks/models/, batch 1): the superopt search
on the model's graph (rules applied, cost-model speedup, search time) and the measured CPU
speedup of the optimized over the unoptimized graph: the same model, the same buffers, the
rest of lazygraph's passes on in both: the model is optimized into two plans, and each timed
round records the model again on the same arrays and runs one plan, then the other
(interleaved, after a warm-up round; more rounds for graphs that run in milliseconds);
"CPU x" is the ratio of the medians, "min x" the ratio of the fastest runs, "step x" the ratio
of the sums of each step's fastest time (this machine is shared: other processes' bursts land
on either plan at random; the step sums are the least sensitive to them). Anchors: TASO/Tensat/MCTS speedups on GPUs (shared/reference/anchors.md).

Between the two, the searches table (skip with --no-searches): per model, the graph the pass
would search, given to the TASO search, the e-graph with greedy extraction, the e-graph with
ILP extraction and MCTS (optimizer/eqsat/) with the same budget and cost model (--quick:
BERT, NasRNN and NASNet-A only unless --models names others, 0.5 s each or
--search-seconds): cost-model speedup, search seconds, e-graph size (e-nodes), the best
one's rules, and the paper's MCTS speedup on an A100. `--no-ematch` runs the e-graph
searches with the library matched on drawn graphs only (the first version, to compare);
`--no-models` stops after this table. `--search` picks the search the measured part's pass runs;
`--cpu-searches taso eqsat mcts` also builds each of those searches' plans from the same
recording and alternates the timed rounds over all of them, then prints a table of measured
CPU speedup per model and search with `result: <search>_cpu_speedup_geomean` lines. A loaded
machine penalizes the larger GEMMs that merged matmuls make (multi-threaded BLAS waits for
descheduled threads): `--blas-threads 1` measures the graphs rather than the machine's load.
`--calibrate` measures the cost model's constants on this machine and stores them (the
analytic model uses them from then on; without it, the built-in guess). Each model's row is
followed by the cost model's predicted milliseconds beside the measured ones and the plan
loop's cost per step, so the model's error can be read off per model.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

if "--blas-threads" in sys.argv[:-1]:  # must be set before NumPy loads its BLAS
    _n = sys.argv[sys.argv.index("--blas-threads") + 1]
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _n

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from models import MODELS  # noqa: E402
from superopt_library import library_part  # noqa: E402

import lazygraph as lg  # noqa: E402
from optimizer.superopt import pass_  # noqa: E402

#: published speedups of the optimized graph (percent), GPU: TASO paper, Tensat / MCTS (PACT'24)
ANCHORS = {
    "bert": "18",
    "nasrnn": "37-42",
    "resnext50": "67-78",
    "squeezenet": "46-51",
    "inception_v3": "0-0.4",
    "resnet50": "0-4",
    "vgg19": "40",
    "nasnet_a": "11-20",
}
QUICK_SCALE = {
    "bert": 0.25,
    "nasrnn": 0.5,
    "resnext50": 0.2,
    "squeezenet": 0.4,
    "inception_v3": 0.27,
    "resnet50": 0.2,
    "vgg19": 0.2,
    "nasnet_a": 0.25,
}


def plan_for(name: str, scale: float, base: object, superopt: bool) -> tuple[object, object, float]:
    """P -> Q -> executable plan for the model recorded on base's arrays, the pass on or off.

    Returns (plan, walk of the recording, optimization seconds).
    """
    import optimizer
    from cache import key as keymod
    from cache.graph import Graph
    from lazygraph.engine import ENGINE
    from lazygraph.engine import compile as compiler

    lg.settings.update(superopt=superopt)
    with lg.no_grad():
        m = MODELS[name](scale, like=base)
    w = keymod.walk([o.node for o in m.outputs])
    t0 = time.perf_counter()
    g = Graph(w)
    optimizer.optimize(g, None, compiler.passes(ENGINE.lowering))
    plan = compiler.build(g.finalize(), w.tokens, ENGINE.constructors)
    return plan, w, time.perf_counter() - t0


def step_minima(plan: object) -> dict[int, float]:
    """Wrap the plan's steps so that each step's shortest time is kept (filled as the plan runs).

    The sum of per-step minima estimates a run without other processes' interruptions: a
    burst lands on a few steps of one run, not on the same steps of every run.
    """
    best: dict[int, float] = {}
    from lazygraph.engine.program import FunctionKernel

    for k, step in enumerate(plan.steps):
        fn = step.kernel.run

        def timed(*args: object, _fn: object = fn, _k: int = k, **kw: object) -> object:
            t0 = time.perf_counter()
            out = _fn(*args, **kw)
            t = time.perf_counter() - t0
            if t < best.get(_k, float("inf")):
                best[_k] = t
            return out

        step.kernel = FunctionKernel(timed)
    plan.refresh()
    return best


def run_plan(plan: object, name: str, scale: float, base: object) -> tuple[float, object]:
    """Record the model again on the same arrays and run the plan on it; (seconds, output)."""
    from cache import key as keymod

    with lg.no_grad():
        m = MODELS[name](scale, like=base)
    w = keymod.walk([o.node for o in m.outputs])
    out = plan.tgraph.pmap[w.roots[0]]
    t0 = time.perf_counter()
    vals = plan.run(w.nodes, {out})
    return time.perf_counter() - t0, vals[out]


def model_part(
    names: list[str], quick: bool, reps: int, seconds: float, graphs: int, cost: str, searches: list[str]
) -> dict:
    """Search results and measured speedups per model and search (CPU x: ratio of medians; min x: of minima).

    One plan per search (and the unoptimized one) is built from the same recording, and timed
    rounds alternate between all of them, so every search's CPU x shares the same machine state.
    The first search gets the full row; the others a row each in the per-search table after.
    """
    window = 0.5 if quick else 4.0
    import numpy as np

    lg.settings.update(superopt_seconds=seconds, superopt_graphs=graphs, superopt_cost=cost)
    print(
        f"\n== models (search budget {seconds} s / {graphs} graphs, cost model {cost}, {reps} timed runs; "
        f"searches {', '.join(searches)}) =="
    )
    head = (
        f"{'model':13} {'scale':>5} {'ops':>4} {'rules applied':38} {'cost x':>7} {'search s':>8} "
        f"{'plain ms':>9} {'opt ms':>8} {'CPU x':>6} {'min x':>6} {'step x':>6} {'runs':>4} {'anchor %':>8}"
    )
    print(head)
    out: dict = {}
    per_search: dict = {}
    for name in names:
        scale = QUICK_SCALE[name] if quick else 1.0
        with lg.no_grad():
            base = MODELS[name](scale)
        plans = {"plain": plan_for(name, scale, base, superopt=False)[0]}
        lasts = {}
        for search in searches:
            lg.settings.update(superopt_search=search)
            pass_.LAST.clear()
            plans[search] = plan_for(name, scale, base, superopt=True)[0]
            lasts[search] = dict(pass_.LAST)  # empty when the pass's condition did not hold: no search
        steps = {which: step_minima(plan) for which, plan in plans.items()}
        times: dict[str, list[float]] = {which: [] for which in plans}
        values = {}
        k, t_end = 0, 0.0
        # interleaved rounds; the first warms up (folded weights, kernels). At least `reps`
        # rounds, more for short graphs (about `window` seconds per variant, at most 300):
        # other processes' bursts on this shared machine last longer than a small graph's run
        while k <= reps or (time.perf_counter() < t_end and k <= 300):
            for which, plan in plans.items():
                t, values[which] = run_plan(plan, name, scale, base)
                if k:
                    times[which].append(t)
            if k == 0:
                t_end = time.perf_counter() + window * len(plans) / 2
            k += 1
        ref = values["plain"]
        plain = statistics.median(times["plain"])
        rows = {}
        for search in searches:
            last = lasts[search]
            err = float(np.abs(values[search] - ref).max() / (np.abs(ref).max() or 1.0))
            opt = statistics.median(times[search])
            rows[search] = {
                "cost": last["start"] / last["cost"] if last.get("cost") else 1.0,
                "cpu": plain / opt,
                "min": min(times["plain"]) / min(times[search]),
                "step": sum(steps["plain"].values()) / max(sum(steps[search].values()), 1e-12),
                "search": last.get("seconds", 0.0),
                "opt_ms": opt * 1e3,
                "err": err,
                "rules": last.get("rules", {}),
                "searched": bool(last),
            }
            if err > 1e-3:
                print(
                    f"  WARNING: {name} optimized by {search} differs from the plain one by {err:.2e} (relative)"
                )
        # the cost model's prediction beside the measurement (absolute: seconds per run), and
        # the plan loop's cost per step (run minimum less the kernels' per-step minima)
        pmin, psteps = min(times["plain"]), sum(steps["plain"].values())
        for search in searches:
            last = lasts[search]
            rows[search]["model_plain_ms"] = last.get("start", 0.0) * 1e3
            rows[search]["model_opt_ms"] = last.get("cost", 0.0) * 1e3
            rows[search]["min_ms"] = min(times[search]) * 1e3
            rows[search]["steps_ms"] = sum(steps[search].values()) * 1e3
        loop = (pmin - psteps) / max(len(plans["plain"].steps), 1)
        r = rows[searches[0]]
        rules = ", ".join(f"{k} x{v}" for k, v in sorted(r["rules"].items()))
        rules = rules or ("-" if r["searched"] else "(not searched)")
        print(
            f"{name:13} {scale:5.2f} {base.total_ops:4d} {rules[:38]:38} {r['cost']:7.3f} "
            f"{r['search']:8.2f} {plain * 1e3:9.1f} {r['opt_ms']:8.1f} {r['cpu']:6.3f} {r['min']:6.3f} "
            f"{r['step']:6.3f} {len(times[searches[0]]):4d} {ANCHORS[name]:>8}"
        )
        print(
            f"  cost model: plain {r['model_plain_ms']:.2f} ms, {searches[0]} {r['model_opt_ms']:.2f} ms; "
            f"measured minima {pmin * 1e3:.2f} / {r['min_ms']:.2f} ms, step sums {psteps * 1e3:.2f} / "
            f"{r['steps_ms']:.2f} ms; plan loop {loop * 1e6:.1f} us/step"
        )
        out[name] = r
        per_search[name] = rows
    if len(searches) > 1:
        print(
            "\n== measured CPU speedup per search (same rounds; cost x / CPU x / min x / step x; "
            "model ms: the cost model's optimized graph / measured minimum) =="
        )
        print(f"{'model':13} " + " ".join(f"{s:>43}" for s in searches))
        for name, rows in per_search.items():
            cells = [
                f"{rows[s]['cost']:6.3f} {rows[s]['cpu']:6.3f} {rows[s]['min']:6.3f} {rows[s]['step']:6.3f} "
                f"{rows[s]['model_opt_ms']:7.2f}/{rows[s]['min_ms']:7.2f}".rjust(43)
                for s in searches
            ]
            print(f"{name:13} " + " ".join(cells))
        for s in searches:
            cpu = statistics.geometric_mean([rows[s]["cpu"] for rows in per_search.values()])
            step = statistics.geometric_mean([rows[s]["step"] for rows in per_search.values()])
            mins = statistics.geometric_mean([rows[s]["min"] for rows in per_search.values()])
            print(f"result: {s}_cpu_speedup_geomean = {cpu:.3f}")
            print(f"result: {s}_cpu_speedup_of_minima_geomean = {mins:.3f}")
            print(f"result: {s}_cpu_speedup_of_step_minima_geomean = {step:.3f}")
    return out


#: MCTS (new greedy / ILP) speedups of the optimized graph on an A100, percent (PACT'24, anchors.md)
MCTS_A100 = {
    "bert": "14.6",
    "nasrnn": "41.2",
    "resnext50": "77.8",
    "squeezenet": "48.2",
    "inception_v3": "-0.0",
    "resnet50": "3.6",
    "vgg19": "39.7",
    "nasnet_a": "17.7",
}


QUICK_SEARCHES = ("bert", "nasrnn", "nasnet_a")


def capture_graph(name: str, scale: float) -> object:
    """The search graph the superopt pass builds for a model (None: the pass's condition fails)."""
    import optimizer
    from cache import key as keymod
    from cache.graph import Graph
    from lazygraph.engine import ENGINE
    from lazygraph.engine import compile as compiler
    from optimizer.superopt.search import SEARCHES, SearchResult

    got = []

    def grab(sg: object, stages: object, model: object = None, **kw: object) -> SearchResult:
        got.append(sg)
        return SearchResult(sg, 0.0, 0.0)  # costs equal: the pass emits nothing

    lg.settings.update(superopt=True, superopt_search="taso")
    saved = SEARCHES["taso"]
    SEARCHES["taso"] = grab
    try:
        with lg.no_grad():
            m = MODELS[name](scale)
        g = Graph(keymod.walk([o.node for o in m.outputs]))
        optimizer.optimize(g, None, compiler.passes(ENGINE.lowering))
    finally:
        SEARCHES["taso"] = saved
    return got[0] if got else None


def search_part(
    names: list[str], quick: bool, seconds: float, graphs: int, cost: str, ematch: bool = True
) -> dict:
    """Per model: TASO vs e-graph + greedy vs e-graph + ILP vs MCTS under one cost model and budget.

    `ematch=False` runs the e-graph searches with the library matched on drawn graphs only."""
    from optimizer.eqsat.search import eqsat_search, mcts_search
    from optimizer.superopt.cost import CostModel
    from optimizer.superopt.search import taso_search

    runs = {
        "taso": lambda sg, st, m: taso_search(sg, st, m, seconds=seconds, graphs=graphs),
        "eg+greedy": lambda sg, st, m: eqsat_search(
            sg, st, m, seconds=seconds, graphs=graphs, extract="greedy", ematch=ematch
        ),
        "eg+ilp": lambda sg, st, m: eqsat_search(
            sg, st, m, seconds=seconds, graphs=graphs, extract="ilp", ematch=ematch
        ),
        "mcts": lambda sg, st, m: mcts_search(sg, st, m, seconds=seconds, graphs=graphs, ematch=ematch),
    }
    how = "e-matched" if ematch else "matched on drawn graphs (--no-ematch)"
    print(
        f"\n== searches (cost model {cost}, {seconds} s each, library {how}; cost x: cost-model speedup) =="
    )
    print(
        f"{'model':13} {'ops':>4} "
        + " ".join(f"{k + ' x':>12} {'s':>5} {'nodes':>5}" for k in runs)
        + f" {'MCTS A100 %':>11}"
    )
    out: dict = {}
    for name in names:
        scale = QUICK_SCALE[name] if quick else 1.0
        sg = capture_graph(name, scale)
        if sg is None:
            print(f"{name:13} (the pass's condition does not hold: no search)")
            continue
        stages = pass_.stages()
        row, res = [], {}
        for key, fn in runs.items():
            r = fn(sg, stages, CostModel(cost))
            nodes = getattr(r, "egraph_nodes", None)
            res[key] = {"cost": r.speedup, "seconds": r.seconds, "rules": dict(r.rules)}
            row.append(f"{r.speedup:12.3f} {r.seconds:5.1f} {nodes if nodes is not None else '-':>5}")
        out[name] = res
        print(f"{name:13} {sg.op_count():4d} " + " ".join(row) + f" {MCTS_A100[name]:>11}")
        best = max(res, key=lambda k: res[k]["cost"])
        rules = ", ".join(f"{k} x{v}" for k, v in sorted(res[best]["rules"].items())) or "-"
        print(f"  best {best}: {rules[:100]}")
    return out


def main() -> None:
    """Parse arguments, run both parts, print the result lines."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small models and budgets (under a minute)")
    ap.add_argument("--generate", action="store_true", help="regenerate and verify the library in this run")
    ap.add_argument(
        "--models",
        nargs="*",
        default=None,
        choices=list(MODELS),
        help="models (default: all; the --quick searches table: BERT, NasRNN, NASNet-A unless named)",
    )
    ap.add_argument("--reps", type=int, default=None, help="timed evaluations per graph (median)")
    ap.add_argument("--seconds", type=float, default=None, help="search budget per model")
    ap.add_argument("--graphs", type=int, default=None, help="graphs explored per model at most")
    ap.add_argument("--cost", choices=["analytic", "measured"], default=None)
    ap.add_argument(
        "--search",
        choices=["taso", "eqsat", "mcts", "auto"],
        default="taso",
        help="the search the pass uses for the measured part (LAZYGRAPH_SUPEROPT_SEARCH)",
    )
    ap.add_argument("--no-searches", action="store_true", help="skip the table comparing the searches")
    ap.add_argument(
        "--no-ematch",
        action="store_true",
        help="e-graph searches match the library on drawn graphs only (the first version, to compare)",
    )
    ap.add_argument(
        "--search-seconds",
        type=float,
        default=None,
        help="budget per search in the searches table (default: 0.5 with --quick, else --seconds)",
    )
    ap.add_argument("--no-models", action="store_true", help="skip the measured part (searches table only)")
    ap.add_argument(
        "--cpu-searches",
        nargs="*",
        choices=["taso", "eqsat", "mcts", "auto"],
        default=None,
        help="also time the plans these searches give (default: --search only; --quick --cpu-searches "
        "taso eqsat mcts measures all three on every model)",
    )
    ap.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        help="BLAS threads (on a loaded machine a multi-threaded GEMM waits for a descheduled thread)",
    )
    ap.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the cost model's constants here and store them (superopt_costs.json in the "
        "cache directory): the analytic and measured models use them from then on",
    )
    a = ap.parse_args()
    reps = a.reps or (3 if a.quick else 7)
    seconds = a.seconds or (1.5 if a.quick else 20.0)
    graphs = a.graphs or (40 if a.quick else 400)
    cost = a.cost or "analytic"
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    print(f"bench_superopt: {os.cpu_count()} cores, BLAS threads {blas} (shared machine: timings are noisy)")
    from optimizer.superopt.cost import CostModel

    cm = CostModel()
    if a.calibrate:
        cm.calibrate()
        cm.save()
    state = "calibrated here" if cm.calibrated else "built-in, not calibrated"
    print(
        f"cost model constants ({state}): GEMM {cm.flops / 1e9:.1f} GFLOP/s, bandwidth "
        f"{cm.bandwidth / 1e9:.1f} GB/s, overhead {cm.overhead * 1e6:.2f} us per step"
    )
    library_part(a.generate, a.quick)
    if not a.no_searches:
        # --quick: the three models where the searches differ, 0.5 s each (the minute's budget)
        names = a.models or (list(QUICK_SEARCHES) if a.quick else list(MODELS))
        budget = a.search_seconds or (0.5 if a.quick else seconds)
        found = search_part(names, a.quick, budget, graphs, cost, ematch=not a.no_ematch)
        for key in ("taso", "eg+greedy", "eg+ilp", "mcts"):
            vals = [r[key]["cost"] for r in found.values()]
            if vals:
                print(f"result: {key}_cost_model_speedup_geomean = {statistics.geometric_mean(vals):.3f}")
    if a.no_models:
        return
    searches = [a.search] + [s for s in (a.cpu_searches or []) if s != a.search]
    res = model_part(a.models or list(MODELS), a.quick, reps, seconds, graphs, cost, searches)
    cpu = [r["cpu"] for r in res.values()]
    model = [r["cost"] for r in res.values()]
    print(f"result: cost_model_speedup_geomean = {statistics.geometric_mean(model):.3f}")
    print(f"result: cpu_speedup_geomean = {statistics.geometric_mean(cpu):.3f}")
    mins = [r["min"] for r in res.values()]
    print(f"result: cpu_speedup_of_minima_geomean = {statistics.geometric_mean(mins):.3f}")
    steps = [r["step"] for r in res.values()]
    print(f"result: cpu_speedup_of_step_minima_geomean = {statistics.geometric_mean(steps):.3f}")
    print(f"result: search_seconds_total = {sum(r['search'] for r in res.values()):.2f}")


if __name__ == "__main__":
    main()
