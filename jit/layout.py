"""From a spec and the arrays of one call to the loops of a kernel.

Sizes stay symbolic: a `Layout` records only what changes the code — which domain axes
coalesce into one loop (every array steps through them as through one dimension), which
arrays move along each loop, and which reads are unit-stride in the innermost loops (so
the C compiler can vectorise them). Calls whose arrays give the same layout share one
compiled kernel; extents and strides are run-time arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jit import ir as kir
from jit import types
from jit.spec import Spec, Val


@dataclass(frozen=True)
class Layout:
    """Loops of one specialization (see the module docstring)."""

    kloops: tuple[tuple[int, ...], ...]  # domain axes per kept loop, outer first
    rloops: tuple[tuple[int, ...], ...]
    moves: tuple[tuple[bool, ...], ...]  # per array, per loop (kept then reduced): steps along it
    unit: tuple[tuple[bool, ...], ...]  # per array, per loop: unit stride (used for innermost loops)

    @property
    def nloops(self) -> int:
        """Kept plus reduced loops."""
        return len(self.kloops) + len(self.rloops)


def axis_strides(spec: Spec, arrays: list[np.ndarray]) -> list[dict[int, int]]:
    """Element strides of every array along every domain axis (0 where it does not move)."""
    out = []
    for ref, arr in zip(spec.arrays, arrays):
        st: dict[int, int] = {}
        item = arr.itemsize
        for dim, root in enumerate(ref.roots):
            if root >= 0 and arr.shape[dim] != 1:
                st[root] = arr.strides[dim] // item
        out.append(st)
    return out


def _coalesce(axes: list[int], sizes: dict[int, int], strides: list[dict[int, int]]) -> list[tuple[int, ...]]:
    groups: list[list[int]] = []
    for a in axes:
        if groups:
            prev = groups[-1][-1]
            if all(st.get(prev, 0) == st.get(a, 0) * sizes[a] for st in strides):
                groups[-1].append(a)
                continue
        groups.append([a])
    return [tuple(g) for g in groups]


def make_layout(spec: Spec, sizes: dict[int, int], strides: list[dict[int, int]]) -> Layout:
    """Coalesce axes and record which arrays move and where reads are unit-stride."""
    kl = _coalesce(spec.K, sizes, strides)
    rl = _coalesce(spec.R, sizes, strides)
    loops = kl + rl
    moves = []
    unit = []
    for st in strides:
        moves.append(tuple(any(st.get(a, 0) != 0 for a in g) for g in loops))
        unit.append(tuple(st.get(g[-1], 0) == 1 for g in loops))
    return Layout(tuple(kl), tuple(rl), tuple(moves), tuple(unit))


def loop_args(spec: Spec, layout: Layout, sizes: dict[int, int], strides: list[dict[int, int]]) -> list[int]:
    """Run-time integers: each loop's extent, then each moving array's stride per loop."""
    out = []
    loops = layout.kloops + layout.rloops
    for g in loops:
        n = 1
        for a in g:
            n *= sizes[a]
        out.append(n)
    for ai, st in enumerate(strides):
        for li, g in enumerate(loops):
            if layout.moves[ai][li]:
                out.append(st.get(g[-1], 0))
    return out


# ---------------------------------------------------------------------------------------
# Stages: which values each stage evaluates inside its loops.


def deps_full(spec: Spec) -> list[set[int]]:
    """For each value, the full-space values (and loads) it needs inside the reduced loops."""
    R = set(spec.R)
    need: list[set[int]] = []
    for i, v in enumerate(spec.values):
        s: set[int] = set()
        if v.axes & R and v.kind != "reduce":
            s.add(i)
            for a in v.args:
                s |= need[a]
        need.append(s)
    return need


def stage_reductions(spec: Spec) -> dict[int, list[int]]:
    """Reductions per stage (stage = level)."""
    out: dict[int, list[int]] = {}
    for i, v in enumerate(spec.values):
        if v.kind == "reduce":
            out.setdefault(v.level, []).append(i)
    return out


def final_outputs(spec: Spec) -> list[tuple[int, int]]:
    """Outputs that vary along reduced axes (stored in the final stage's loops)."""
    return [(v, a) for v, a in spec.outputs if spec.full(spec.values[v])]


def work_of(spec: Spec, vals: set[int]) -> float:
    """Operations per iteration for evaluating `vals` (loads count one each)."""
    w = 0.0
    for i in vals:
        v: Val = spec.values[i]
        w += 1.0 if v.kind == "load" else _cost(v)
    return max(w, 1.0)


def _cost(v: Val) -> float:
    """Rough price of one evaluation of a value (a transcendental call is 8, else 1)."""
    e = v.expr
    heavy = ("exp(", "log(", "tanh(", "erf(", "sin(", "cos(", "pow(", "sigmoid", "atan")
    return 8.0 if any(h in e for h in heavy) else 1.0


def build_ir(spec: Spec, layout: Layout, target: str, hint: int = 4096) -> kir.KernelIR:
    """The kernel's loops for the A* search (see jit/ir.py for the constraints)."""
    need = deps_full(spec)
    reds = stage_reductions(spec)
    finals = final_outputs(spec)
    nk, nr = len(layout.kloops), len(layout.rloops)
    stages = sorted(reds) + ([max(reds, default=0) + 1] if finals or not nr else [])
    loops: list[kir.Loop] = []
    work: dict[int, float] = {}
    producer_of: dict[int, int] = {}  # reduction value -> innermost loop that accumulates it
    reduced_deps = _reduced_sources(spec)
    for st in stages:
        vals: set[int] = set()
        red_here = reds.get(st, [])
        for r in red_here:
            vals |= need[spec.values[r].args[0]]
        if st not in reds:
            for v, _ in finals:
                vals |= need[v]
            if not nr:
                vals |= set(range(len(spec.values)))
        work[st] = work_of(spec, vals) + len(red_here)
        parent = None
        first = len(loops)
        for li in range(nk + nr):
            is_r = li >= nk
            inner = li == nk + nr - 1
            reduces = None
            if is_r and red_here:
                reduces = spec.values[red_here[0]].combine
            opts = _options(target, inner, bool(reduces))
            name = f"s{st}.{'r' if is_r else 'k'}{li - nk if is_r else li}"
            lp = kir.Loop(
                name,
                f"n{li}",
                opts,
                parent,
                st,
                reduces=reduces,
                fuse_group=None if is_r else li,
                innermost=inner,
                hint=hint,
            )
            for ai, _ref in enumerate(spec.arrays):
                if layout.moves[ai][li] and _reads(spec, ai, vals, finals):
                    lp.iterators.append(kir.Iterator(f"a{ai}", inner and layout.unit[ai][li]))
            loops.append(lp)
            parent = len(loops) - 1
        # reads of reductions made in earlier stages happen in this stage's innermost loop
        reads = set()
        for v in vals:
            reads |= reduced_deps[v]
        for r in red_here:
            if spec.values[r].center >= 0:
                reads |= reduced_deps[spec.values[r].center] | {spec.values[r].center}
        for r in sorted(reads):
            if r in producer_of:
                loops[-1].iterators.append(kir.Iterator(f"v{r}", False, producer_of[r]))
        if nr and red_here:
            for r in red_here:
                producer_of[r] = len(loops) - 1
        # loops of this stage that produce reductions: every reduced loop accumulates them
        if nr and red_here:
            for li in range(first + nk, len(loops)):
                loops[li].reduces = spec.values[red_here[0]].combine
    return kir.KernelIR(loops, work, target)


def _reads(spec: Spec, ai: int, vals: set[int], finals: list[tuple[int, int]]) -> bool:
    if spec.arrays[ai].output:
        return any(a == ai for _, a in finals) or not spec.R
    return any(spec.values[v].kind == "load" and spec.values[v].index == ai for v in vals)


def _reduced_sources(spec: Spec) -> list[set[int]]:
    """For each value, the reductions it reads (directly or through kept-axis values)."""
    out: list[set[int]] = []
    for v in spec.values:
        s: set[int] = set()
        for a in v.args:
            if spec.values[a].kind == "reduce":
                s.add(a)
            if v.kind != "reduce":
                s |= out[a]
        out.append(s)
    return out


def _options(target: str, innermost: bool, reduces: bool) -> tuple[kir.Par, ...]:
    P = kir.Par
    if target == "cuda":
        # Threads combine through warp shuffles and shared memory; blocks would need a
        # second launch, which a single kernel does not have.
        return (P.THREADS, P.SEQUENTIAL) if reduces else kir.ALL
    # CPU: threads are SIMD lanes, so only innermost loops can use them.
    if innermost:
        return kir.ALL
    return (P.BLOCKS, P.SEQUENTIAL)


def dtype_lanes(spec: Spec) -> int:
    """SIMD lanes of the widest value type the kernel computes with."""
    widest = max((np.dtype(v.dtype).itemsize for v in spec.values), default=4)
    return types.simd_lanes(np.dtype(f"f{min(widest, 8)}") if widest >= 4 else np.dtype(np.int32))
