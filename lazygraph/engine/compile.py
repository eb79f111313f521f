"""Compile: a graph P to the program that computes it, once per structure, in one order.

    P (walked)  --passes + lowering-->  Q (cache.graph.Graph)  --finalize-->  transformation graph
                --constructors-->  Program (program.py)  --planner-->  order (memory.py)

`transform` runs the optimizer's registered passes together with the engine's own lowering
passes (window kernels at priority 110, fused regions at 50: lower_window.py,
lower_fusion.py), which this module installs by handing them to the pass runner, not by
registering them anywhere. `build` turns a transformation graph into a `Program`: each New
node's recipe names a constructor, looked up in the table `constructors` builds here, from
the packages that make such nodes (the optimizer's library, memo and superoptimizer steps,
the lowering passes' region and window steps). `load` is `build` for a graph read from disk:
it first checks what the stored recipes rely on against the key (region_check.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optimizer
from cache.graph import Graph
from cache.key import Walk
from cache.recipe import Recipe, RecipeError
from cache.tgraph import TransformationGraph
from lazygraph import debug
from lazygraph.engine import lower_fusion, lower_window, memory, region_check
from lazygraph.engine.program import FunctionKernel, Kernel, OpKernel, Program
from ops.base import REGISTRY
from optimizer import fold, library
from optimizer.registry import Pass
from optimizer.rewrite.report import REPORT
from optimizer.superopt import convert as superopt_convert
from optimizer.superopt import pass_ as superopt_pass

#: the engine's lowering passes, run with the optimizer's passes in one priority order
LOWERING: tuple[Pass, ...] = (lower_window.PASS, lower_fusion.PASS)

Constructor = Callable[[Recipe, dict], Any]


def _op(recipe: Recipe, artifacts: dict) -> Kernel:
    """A New node of a plain operator: its reference kernel."""
    op = REGISTRY.get(str(recipe.op))
    if op is None:
        raise RecipeError(f"unknown operator {recipe.op!r}")
    return OpKernel(op)


def _library(recipe: Recipe, artifacts: dict) -> Kernel:
    """A library step; a GEMM producer writes into a given buffer, a convolution allocates."""
    d = recipe.data
    writes = isinstance(d, dict) and d.get("producer") == "matmul"
    return FunctionKernel(library.build_library(recipe, artifacts), writes=writes)


def constructors(regions: lower_fusion.RegionKernels) -> dict[str, Constructor]:
    """Recipe constructor name -> kernel builder, for an engine whose region kernels are `regions`."""
    return {
        "op": _op,
        "jit_region": regions.build,
        "jit_window": lower_window.build_window,
        "library": _library,
        "memo": fold.build_memo,
        "superopt": superopt_convert.build_superopt,
        "superopt_view": superopt_pass.build_view,
    }


def passes(lowering: dict[str, Pass]) -> list[Pass]:
    """The passes a miss runs: the registered ones and the installed lowering, by priority."""
    return optimizer.ordered(lowering.values())


def transform(
    w: Walk, keep: set[int], opt: bool, lowering: dict[str, Pass], verbose: int = 0, report: bool = True
) -> tuple[Graph, TransformationGraph]:
    """P -> Q (counted in the pass report), and Q's transformation graph."""
    g = Graph(w, frozenset(keep))
    if opt:

        def trace(name: str, fired: bool, seconds: float, n: int) -> None:
            if report:
                REPORT.record_pass(name, fired, seconds, n)
            if verbose >= 2:
                what = "fired" if fired else "no change"
                debug.log(f"  pass {name}: {what} in {seconds * 1e6:.0f} us ({n} nodes)", at=2)

        optimizer.optimize(g, trace, passes(lowering))
        if report:
            REPORT.finish(g)
    return g, g.finalize()


def build(tg: TransformationGraph, tokens: tuple, table: dict[str, Constructor]) -> Program:
    """The program of a transformation graph (its recipes' constructors looked up in `table`)."""

    def kernel_for(recipe: Recipe, artifacts: dict) -> Kernel:
        make = table.get(recipe.ctor)
        if make is None:
            raise RecipeError(f"unknown constructor {recipe.ctor!r}")
        k = make(recipe, artifacts)
        # a constructor may give a plain callable (one value, allocated): the common case
        return k if isinstance(k, Kernel) else FunctionKernel(k)

    return Program(tg, tokens, kernel_for)


def load(tg: TransformationGraph, tokens: tuple, table: dict[str, Constructor]) -> Program:
    """`build` for a graph read from disk: fused regions' descriptions must fit the key first."""
    region_check.check_regions(tg, tokens)
    return build(tg, tokens, table)


def keep_slots(program: Program, keep: set[int]) -> set[int]:
    """The Q slots holding the memoized P nodes."""
    pmap = program.pmap
    return {q for q in (pmap[p] for p in keep) if q >= 0}


def compile_graph(
    w: Walk,
    keep: set[int],
    opt: bool,
    sched: bool,
    lowering: dict[str, Pass],
    table: dict[str, Constructor],
    verbose: int = 0,
    report: bool = True,
) -> tuple[Graph, Program]:
    """P -> passes and lowering -> program -> order: everything a miss makes, once, in order.

    The chosen order is part of the transformation (stored with the entry, replayed on hits);
    the program is complete before it is returned, so it can be published to other threads.
    """
    g, tg = transform(w, keep, opt, lowering, verbose, report)
    program = build(tg, w.tokens, table)
    if sched:
        memory.schedule(program, w.nodes, keep_slots(program, keep))
    return g, program


def fingerprint(lowering: dict[str, Pass]) -> str:
    """What cached entries depend on of the passes: names and priorities, lowering included."""
    return optimizer.fingerprint(passes(lowering))
