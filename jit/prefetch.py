"""A program's kernels built together before they launch (lazygraph/engine/compile.py's `prepare`).

`missing` says which CPU variants launches with given array shapes and strides will need and
lack (`FusedKernel.plan`); `prefetch` renders them and has jit/compile_c.py build them in few
compiler runs, in parallel (docs/jit.md, "A program's kernels compiled together").
"""

from __future__ import annotations

from collections.abc import Sequence

from jit import compile_c
from jit.backend import get as get_backend
from jit.kernel import FusedKernel, Shaped, debug_level, log


def missing(
    work: Sequence[tuple[FusedKernel, Sequence[Shaped | None]]], min_size: int = 0
) -> list[tuple[FusedKernel, tuple]]:
    """The CPU variants launches with these arguments will need that are not built yet."""
    be = get_backend("cpu")
    todo: dict[tuple, tuple[FusedKernel, tuple]] = {}
    for k, args in work:
        vkey = k.plan(be, args, min_size)
        if vkey is not None and vkey not in k.variants:
            todo.setdefault((id(k), vkey), (k, vkey))
    return list(todo.values())


def prefetch(needed: Sequence[tuple[FusedKernel, tuple]], spare: int = 0) -> int:
    """Build, together, the CPU variants `missing` found (few compiler runs, in parallel).

    A program's kernels otherwise compile one at a time at their first launches, each waiting
    for the one before; here they are rendered, then built by `compile_c.compile_libraries`
    (`spare`: cores it leaves to other work). A kernel that fails to render or compile is
    left out: its launch builds it alone and raises its error there, as without prefetching.
    Returns how many variants were installed.
    """
    be = get_backend("cpu")
    if not needed or not be.available():
        return 0
    pairs, srcs = [], []
    for k, vkey in needed:
        if vkey in k.variants:
            continue  # built meanwhile (a launch, another prefetch)
        try:
            srcs.append(k.render_variant(be, vkey))
        except Exception:  # noqa: BLE001  (its launch renders it again and raises there)
            continue
        pairs.append((k, vkey))
    if not pairs:
        return 0
    before = dict(compile_c.RUNS)
    results = compile_c.compile_libraries([s.text for s in srcs], spare)
    n = 0
    for (k, vkey), src, r in zip(pairs, srcs, results):
        if isinstance(r, Exception):
            continue
        with k.lock:
            if vkey not in k.variants:
                k.install(be, vkey, src, r)
                n += 1
    if debug_level() >= 2:
        runs = compile_c.RUNS["invocations"] - before["invocations"]
        log(f"JIT prefetch: {n} of {len(pairs)} kernel variants ready, {runs} compiler runs")
    return n
