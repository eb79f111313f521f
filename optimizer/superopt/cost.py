"""The search's cost model: seconds per graph on this device, with fusion and folding in mind.

A graph's cost is the sum of its steps' costs, where steps are what lazygraph will run:

- weight-only subgraphs (everything computed from parameters and Python scalars) are free:
  the `fold` pass memoizes them, so at steady state they are not recomputed (a concatenation
  of two weight matrices costs once, at the first evaluation);
- leaves, views and slices are free (NumPy views, no copy);
- a matmul with its bias add and ReLU, or a conv2d with its ReLU, is one library step
  (optimizer/library.py) when each fused intermediate has one reader: the epilogue is free;
- elementwise ops are grouped the way the JIT fuses them (jit/fusion.py): a connected set of
  elementwise producers and consumers is one region costing one memory pass (its outside
  inputs read once, the values read outside it written once) plus a launch; regions whose
  arrays are all below the JIT's minimum size run op by op on NumPy, one pass per op;
- every other op costs its own time.

Per-op times: `mode="measured"` runs each op configuration (operator, input shapes and dtypes,
attributes) with the NumPy reference kernel on random data, takes the shortest of a few runs
(noise from other processes only adds time) and caches it on disk (`superopt_costs.json` in the lazygraph cache directory, written atomically,
keyed by a machine and version tag; a corrupt or foreign file is ignored). `mode="analytic"`
(the default, and what tests use) is a FLOP/byte model: GEMM-like work at `flops` per second,
memory traffic at `bandwidth` bytes per second, plus `overhead` per step. Its built-in
constants are a fixed guess (deterministic: the tests' model); `calibrate()` measures the
three on this machine and `save()` stores them in the same file, after which both the
analytic and the measured modes use them (`python benchmarks/bench_superopt.py --calibrate`).
The built-in guess overcharges a CPU's bytes tenfold and so underprices merges: on NasRNN it
predicts 1.07x for the merged graph, which measures 1.3-1.5x (fastest runs, one BLAS thread);
calibrated it predicts 1.6-1.7x (docs/superopt.md, "Cost model against measured time").
`mode="unit"` counts one per operator step (the unit-cost examples of the benchmark graphs).
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from ops import storage
from ops.base import REGISTRY
from ops.fileio import atomic_write
from ops.settings import SETTINGS
from optimizer.superopt.apply import SGraph, SNode, frozen

VERSION = 6  # part of the machine tag: times measured by older versions are not reused
#: lazygraph's plan loop per step (slot reads, frees, the kernel's call), beyond the NumPy call:
#: (run time - sum of per-step kernel times) / steps measured 4-6 us on NasRNN's and BERT's
#: plans here (bench_superopt.py prints it per model); the optimizer cannot build plans to
#: measure it itself (imports flow lazygraph -> optimizer), so callers may pass their own
PLAN_STEP = 5e-6
#: built-in depthwise convolution rate (flop/s): conv_grouped measured 2.7-3.5 GFLOP/s here
DEPTH_FLOPS = 3.0e9
#: built-in pool price against its memory passes at `bandwidth`: avg_pool2d_forward's 3x3 pools
#: ran at 0.2x that (window reads from cache; e.g. (1, 168, 42, 42) in 0.42-0.53 ms against 2.4
#: priced); at 1.0 pool-as-conv was chosen on SqueezeNet and NASNet-A and measured 0.93-0.97x
POOL_SCALE = 0.2
FREE_OPS = frozenset(("view", "slice_axis", "reshape", "astype_view"))
ELEMENTWISE_KINDS = frozenset(("elementwise",))


def machine_tag() -> str:
    """What measured times depend on: machine, core count, NumPy, the model's version."""
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "-"
    return f"{platform.machine()}-{os.cpu_count()}-np{np.__version__}-t{threads}-v{VERSION}"


def _store_path() -> Path:
    return storage.cache_root() / "superopt_costs.json"  # the one cache root (ops/storage.py)


def _nbytes(shape: tuple, dtype: np.dtype) -> float:
    return float(math.prod(shape)) * dtype.itemsize


class CostModel:
    """Seconds per node and per graph (see the module docstring for the modes)."""

    def __init__(self, mode: str = "analytic", path: Path | None = None) -> None:
        if mode not in ("analytic", "measured", "unit"):
            raise ValueError(f"cost model mode must be analytic, measured or unit, not {mode!r}")
        self.mode = mode
        self.path = path
        self.flops = 2.0e10  # GEMM flop/s (2 cores, float32 BLAS): replaced by calibrate()
        self.bandwidth = 5.0e9  # bytes/s for one streaming pass
        self.overhead = 5e-6  # per step: dispatch through the plan and NumPy
        # lazygraph's convolutions (im2col + GEMM) and pools run far below the GEMM rate, grouped
        # ones (a batched GEMM over groups) slower still: calibrate() measures each (the
        # built-in model prices them as GEMMs, which the tests' expectations assume)
        self.conv_flops = self.flops
        self.group_flops = self.flops
        # depthwise ones (one channel per group) are memory-bound gathers with tiny GEMMs:
        # 2.7-3.5 GFLOP/s measured here (conv_grouped) where 32 groups of 4 channels run at 8-14;
        # at the GEMM rate a depthwise convolution looked cheaper than the average pool it can
        # replace (pool-as-conv), which now runs 1.1-3x faster than that convolution
        self.depth_flops = DEPTH_FLOPS
        self.pool_scale = POOL_SCALE  # pools are priced as memory passes: this many times slower
        self.times: dict[str, float] = {}
        self._memo: dict[SNode, float] = {}  # per node object: nodes are immutable, shapes fixed
        self.measured = 0  # configurations timed in this process
        self.calibrated = False  # constants measured on this machine (calibrate() or the store)
        self._dirty = False
        # analytic with the built-in constants when nothing is stored (the tests' cache is
        # private and empty): the same graph gets the same costs on every machine
        if mode != "unit" and (mode == "measured" or path is not None or _store_path().exists()):
            self._load()

    # -- the disk store ----------------------------------------------------------------------

    def _file(self) -> Path:
        return self.path or _store_path()

    def _load(self) -> None:
        try:
            # one safe read: no link, FIFO or device, this user's file, size capped (BadEntry: ValueError)
            d = json.loads(storage.read_entry(self._file(), 64 * 2**20) or b"null")
            if d.get("tag") != machine_tag():
                return
            times = {str(k): float(v) for k, v in d["times"].items()}
            calib = d.get("calib")
            if calib:
                self.flops, self.bandwidth, self.overhead = (
                    float(calib[k]) for k in ("flops", "bw", "overhead")
                )
                self.conv_flops = float(calib.get("conv", self.flops))
                self.pool_scale = float(calib.get("pool", 1.0))
                self.group_flops = float(calib.get("group", self.flops))
                self.depth_flops = float(calib.get("depth", self.group_flops))
                self.calibrated = True
            self.times = times
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return  # missing, corrupt or foreign: measure again

    def save(self) -> None:
        """Write measured times and calibration atomically (a no-op when nothing is new)."""
        if not self._dirty:
            return
        calib = {
            "flops": self.flops,
            "bw": self.bandwidth,
            "overhead": self.overhead,
            "conv": self.conv_flops,
            "pool": self.pool_scale,
            "group": self.group_flops,
            "depth": self.depth_flops,
        }
        data = {"tag": machine_tag(), "times": self.times, "calib": calib if self.calibrated else None}
        path = self._file()
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data, separators=(",", ":")).encode())
        self._dirty = False

    def calibrate(self, plan_step: float = PLAN_STEP) -> None:
        """Measure GEMM speed, streaming bandwidth and per-step overhead on this machine.

        `plan_step`: the executor's own cost per step (its loop), added to the measured NumPy
        dispatch; the benchmark measures it on real plans."""
        rng = np.random.default_rng(0)
        a = rng.standard_normal((512, 512), dtype=np.float32)
        # more runs than elsewhere: with two BLAS threads on a loaded machine a GEMM waits for
        # a descheduled thread (11 GFLOP/s measured once where a quiet run gives 100-200)
        self.flops = 2 * 512**3 / _best(lambda: a @ a, reps=25)
        big = rng.standard_normal(1 << 22, dtype=np.float32)
        self.bandwidth = 2 * big.nbytes / _best(lambda: np.add(big, 1.0))
        small = np.ones(8, np.float32)
        # a kernel call costs a few NumPy calls of dispatch (four tiny adds stand in for it),
        # and the plan's loop its own; together they are what merging k steps into one saves
        self.overhead = max(_best(lambda: np.add(small, 1.0), reps=50) * 4, 1e-6) + max(plan_step, 0.0)
        self._calibrate_windows(rng)
        self.calibrated = True
        self._memo.clear()
        self._dirty = True

    def _calibrate_windows(self, rng: np.random.Generator) -> None:
        """Convolution and pooling rates of lazygraph's own kernels (measured on this 2-core
        machine: 40-60 GFLOP/s for a 3x3 convolution where GEMMs reach 100, 8-14 for a grouped
        one, 2.7-3.5 for a depthwise one, and a 3x3 average pool 39-46 times slower than its
        memory passes through the window reduction, about 2 times through ops/window.py's
        `avg_pool2d_forward`): pool-as-conv pays only against the slow pool."""
        conv, pool = REGISTRY["conv2d"], REGISTRY["avg_pool2d"]
        win = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
        x = rng.standard_normal((1, 32, 28, 28), dtype=np.float32)
        w = rng.standard_normal((32, 32, 3, 3), dtype=np.float32)
        flops = conv.cost((1, 32, 28, 28), [x.shape, w.shape], {**win, "groups": 1})[0]
        self.conv_flops = flops / _best(lambda: conv.kernel(x, w, groups=1, **win))
        xg = rng.standard_normal((1, 128, 14, 14), dtype=np.float32)
        wg = rng.standard_normal((128, 4, 3, 3), dtype=np.float32)
        attrs = {**win, "groups": 32}
        gflops = conv.cost((1, 128, 14, 14), [xg.shape, wg.shape], attrs)[0]
        self.group_flops = gflops / _best(lambda: conv.kernel(xg, wg, **attrs))
        # depthwise at NASNet-A's cell size; pool-as-conv trades an average pool for one
        xd = rng.standard_normal((1, 64, 16, 16), dtype=np.float32)
        wd = rng.standard_normal((64, 1, 3, 3), dtype=np.float32)
        dattrs = {**win, "groups": 64}
        dflops = conv.cost(xd.shape, [xd.shape, wd.shape], dattrs)[0]
        self.depth_flops = dflops / _best(lambda: conv.kernel(xd, wd, **dattrs))
        pattrs = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "count_include_pad": True}
        extra = pool.cost((1, 32, 28, 28), [x.shape], pattrs)[1]
        moved = x.nbytes * (2 + extra)  # as _analytic counts it: input, output, extra passes
        self.pool_scale = max(1.0, _best(lambda: pool.kernel(x, **pattrs)) / (moved / self.bandwidth))

    # -- per node ----------------------------------------------------------------------------

    def op_time(self, sg: SGraph, i: int) -> float:
        """Seconds for node i run alone (measured or analytic; remembered per node)."""
        n = sg.nodes[i]
        t = self._memo.get(n)
        if t is None:
            t = self._memo[n] = self._op_time(sg, i)
        return t

    def _op_time(self, sg: SGraph, i: int) -> float:
        n = sg.nodes[i]
        if self.mode == "unit":
            return 1.0
        if self.mode == "measured" and n.op in REGISTRY and n.op not in FREE_OPS:
            key = self._config(sg, i)
            t = self.times.get(key)
            if t is None:
                t = self._measure(sg, i)
                self.times[key] = t
                self.measured += 1
                self._dirty = True
            return t
        return self._analytic(sg, i)

    def _config(self, sg: SGraph, i: int) -> str:
        n = sg.nodes[i]
        ins = [(sg.nodes[c].shape, sg.nodes[c].dtype.str) for c in n.inputs]
        vals = [repr(sg.nodes[c].value) for c in n.inputs if sg.nodes[c].op == "scalar"]
        return repr((n.op, ins, vals, frozen(n.attrs)))

    def _measure(self, sg: SGraph, i: int) -> float:
        n = sg.nodes[i]
        rng = np.random.default_rng(0)
        args: list[Any] = []
        for c in n.inputs:
            m = sg.nodes[c]
            if m.op == "scalar":
                args.append(m.value)
            elif m.dtype.kind == "f":
                args.append(rng.standard_normal(m.shape).astype(m.dtype))
            else:
                args.append(np.ones(m.shape, m.dtype))
        kernel = REGISTRY[n.op].kernel
        # the shortest of a few runs: on a shared machine noise only ever adds time, and a
        # noisy low median would make the search prefer rewrites that do more work
        return _best(lambda: kernel(*args, **n.attrs), reps=5) + self.overhead

    def _analytic(self, sg: SGraph, i: int) -> float:
        n = sg.nodes[i]
        ins = [sg.nodes[c] for c in n.inputs]
        out = _nbytes(n.shape, n.dtype)
        moved = out + sum(_nbytes(c.shape, c.dtype) for c in ins if c.op != "scalar")
        flops = 0.0
        opdef = REGISTRY.get(n.op)
        if opdef is not None and opdef.cost is not None:  # the record's cost facet (ops/)
            flops, extra = opdef.cost(n.shape, [c.shape for c in ins], n.attrs)
            moved += out * extra
        if n.op == "conv2d":
            groups = int(n.attrs.get("groups", 1))
            rate = self.conv_flops if groups == 1 else self.group_flops
            if groups > 1 and len(ins[0].shape) == 4 and groups == ins[0].shape[1]:
                rate = self.depth_flops
            return self.overhead + flops / rate + moved / self.bandwidth
        if n.op in ("avg_pool2d", "max_pool2d"):
            moved *= self.pool_scale
        return self.overhead + flops / self.flops + moved / self.bandwidth

    # -- per graph ---------------------------------------------------------------------------

    def graph_cost(self, sg: SGraph, order: list[int] | None = None) -> float:
        """Steady-state seconds for the graph (folded constants free, fusion as the JIT does)."""
        order = order if order is not None else (sg.topo() or [])
        const = sg.constant_ids(order)
        users = sg.consumers(order)
        absorbed = self._epilogues(sg, order, const, users)
        total = 0.0
        ew: list[int] = []
        for i in order:
            n = sg.nodes[i]
            if n.leaf or i in const or i in absorbed or n.op in FREE_OPS:
                continue
            opdef = REGISTRY.get(n.op)
            if opdef is not None and opdef.kind in ELEMENTWISE_KINDS and self.mode != "unit":
                ew.append(i)
                continue
            total += self.op_time(sg, i)
        return total + self._regions(sg, ew, const, users)

    def _epilogues(self, sg: SGraph, order: list[int], const: set[int], users: dict) -> set[int]:
        """Bias adds and ReLUs that the library pass folds into their matmul/conv2d."""
        absorbed: set[int] = set()
        if self.mode == "unit":
            return absorbed
        for i in order:
            n = sg.nodes[i]
            if n.op not in ("matmul", "conv2d") or i in const:
                continue
            end = i
            nxt = users.get(end, [])
            if n.op == "matmul" and len(nxt) == 1 and sg.nodes[nxt[0]].op == "add":
                add = sg.nodes[nxt[0]]
                other = add.inputs[1] if add.inputs[0] == end else add.inputs[0]
                if other != end and add.shape == n.shape and sg.nodes[other].op != "scalar":
                    absorbed.add(nxt[0])
                    end = nxt[0]
            nxt = users.get(end, [])
            if len(nxt) == 1 and end not in sg.outputs and _is_relu(sg, nxt[0]):
                absorbed.add(nxt[0])
        return absorbed

    def _regions(self, sg: SGraph, ew: list[int], const: set[int], users: dict) -> float:
        """Elementwise nodes grouped into fused regions: one memory pass and one launch each."""
        if not ew:
            return 0.0
        member = set(ew)
        parent = {i: i for i in ew}

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i in ew:
            n = sg.nodes[i]
            if n.dtype.kind == "f" and _size(n.shape) >= SETTINGS.jit_min_size:
                for c in n.inputs:
                    if c in member and sg.nodes[c].shape == n.shape:
                        parent[find(c)] = find(i)
        groups: dict[int, list[int]] = {}
        for i in ew:
            groups.setdefault(find(i), []).append(i)
        outs = set(sg.outputs)
        total = 0.0
        for nodes in groups.values():
            if len(nodes) == 1:
                total += self.op_time(sg, nodes[0])
                continue
            inside = set(nodes)
            read: set[int] = set()
            moved = 0.0
            for i in nodes:
                for c in sg.nodes[i].inputs:
                    if c not in inside and c not in read and sg.nodes[c].op != "scalar":
                        read.add(c)
                        moved += _nbytes(sg.nodes[c].shape, sg.nodes[c].dtype)
                if i in outs or any(u not in inside for u in users.get(i, [])):
                    moved += _nbytes(sg.nodes[i].shape, sg.nodes[i].dtype)
            total += self.overhead + moved / self.bandwidth
        return total


def _size(shape: tuple) -> int:
    return math.prod(shape)


def _is_relu(sg: SGraph, i: int) -> bool:
    n = sg.nodes[i]
    if n.op != "maximum" or len(n.inputs) != 2:
        return False
    return any(sg.nodes[c].op in ("scalar", "const") and sg.nodes[c].value == 0 for c in n.inputs)


def _best(fn: Any, reps: int = 7) -> float:
    """Shortest of a few runs: what the machine can do (others share it; noise only adds time)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
