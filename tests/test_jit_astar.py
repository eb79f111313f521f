"""A* over loop parallelism: optimal (equal to exhaustive search), constraints, Table 1 counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import astar
from jit.fusion import find_regions
from jit.ir import ALL, Iterator, KernelIR, Loop, Par, check_complete
from jit.report import DALI_TABLE1, search_stats
from lazygraph.engine.evaluate import schedule

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend


@st.composite
def loop_nests(draw: st.DrawFn) -> KernelIR:
    """Small random kernels: nests per stage, options, reductions, intermediates, fusion."""
    loops: list[Loop] = []
    stages = draw(st.integers(1, 3))
    for stage in range(stages):
        depth = draw(st.integers(1, 3 if stages == 1 else 2))
        parent = None
        for d in range(depth):
            opts = draw(st.lists(st.sampled_from(ALL), min_size=1, max_size=4, unique=True))
            lp = Loop(
                f"s{stage}.l{d}",
                f"n{d}",
                tuple(opts),
                parent,
                stage,
                reduces=draw(st.sampled_from([None, None, "add", "max"])),
                fuse_group=d if d == 0 and stages > 1 and draw(st.booleans()) else None,
                innermost=d == depth - 1,
                hint=draw(st.sampled_from([1, 3, 64, 4096])),
            )
            for k in range(draw(st.integers(0, 2))):
                lp.iterators.append(Iterator(f"a{k}", draw(st.booleans())))
            if loops and draw(st.booleans()):
                lp.iterators.append(Iterator("v", False, draw(st.integers(0, len(loops) - 1))))
            loops.append(lp)
            parent = len(loops) - 1
    work = {s: float(draw(st.integers(1, 20))) for s in range(stages)}
    return KernelIR(loops, work, draw(st.sampled_from(["cpu", "cuda"])))


@settings(max_examples=200)
@given(ir=loop_nests(), target=st.sampled_from([astar.CUDA, astar.cpu_target(8)]))
def test_astar_equals_exhaustive_search(ir: KernelIR, target: astar.Target) -> None:
    try:
        best, count = astar.exhaustive(ir, target)
    except ValueError:
        try:
            astar.astar(ir, target)
        except ValueError:
            return  # neither finds a consistent assignment
        raise AssertionError("A* found an assignment where none is consistent") from None
    found = astar.astar(ir, target)
    assert check_complete(ir, found.assignment)
    assert abs(found.cost - best.cost) <= 1e-9 * max(1.0, best.cost)
    # each data-consistent prefix is scored at most once (a tree search, no re-expansion); a
    # bound in terms of complete assignments does not hold: prefixes can outnumber them
    assert found.heuristic_calls <= _consistent_prefixes(ir)


def _consistent_prefixes(ir: KernelIR) -> int:
    """Non-empty partial assignments (loops in order) that pass astar.consistent."""
    level: list[tuple[Par, ...]] = [()]
    total = 0
    for lp in ir.loops:
        level = [a + (p,) for a in level for p in lp.options if astar.consistent(ir, a + (p,))]
        total += len(level)
    return total


@settings(max_examples=100)
@given(ir=loop_nests(), target=st.sampled_from([astar.CUDA, astar.cpu_target(8)]))
def test_heuristic_is_a_lower_bound_on_every_completion(ir: KernelIR, target: astar.Target) -> None:
    for full in [tuple(lp.options[0] for lp in ir.loops), tuple(lp.options[-1] for lp in ir.loops)]:
        exact = astar.estimate(ir, target, full)
        for k in range(len(full)):
            assert astar.estimate(ir, target, full[:k]) <= exact + 1e-9 * exact


def _nest() -> KernelIR:
    outer = Loop("rows", "n0", ALL, None, 0)
    inner = Loop("cols", "n1", ALL, 0, 0, innermost=True)
    return KernelIR([outer, inner], {0: 1.0}, "cuda")


def test_nested_loops_cannot_both_use_blocks_or_threads() -> None:
    ir = _nest()
    assert not check_complete(ir, (Par.BLOCKS, Par.BLOCKS_AND_THREADS))
    assert not check_complete(ir, (Par.THREADS, Par.THREADS))
    assert check_complete(ir, (Par.BLOCKS, Par.THREADS))
    assert check_complete(ir, (Par.SEQUENTIAL, Par.BLOCKS_AND_THREADS))


def test_reading_an_intermediate_forbids_blocks_over_its_producer() -> None:
    producer = Loop("red", "n", ALL, None, 0, reduces="add", innermost=True)
    reader = Loop("use", "n", ALL, None, 1, innermost=True, iterators=[Iterator("v0", False, 0)])
    ir = KernelIR([producer, reader], {0: 1.0, 1: 1.0}, "cpu")
    assert not check_complete(ir, (Par.BLOCKS, Par.THREADS))
    assert not check_complete(ir, (Par.BLOCKS_AND_THREADS, Par.SEQUENTIAL))
    assert check_complete(ir, (Par.THREADS, Par.BLOCKS))


def test_fused_loops_share_their_parallelism() -> None:
    a = Loop("s0.k", "n0", ALL, None, 0, fuse_group=0, innermost=True)
    b = Loop("s1.k", "n0", ALL, None, 1, fuse_group=0, innermost=True)
    ir = KernelIR([a, b], {0: 1.0, 1: 1.0}, "cpu")
    assert not check_complete(ir, (Par.BLOCKS, Par.THREADS))
    assert check_complete(ir, (Par.THREADS, Par.THREADS))


def _region(arr: lg.Array):  # noqa: ANN202
    roots = [arr.node]
    region = find_regions(schedule(roots), roots)[-1]
    return region, [c.buffer for c in region.inputs]


def test_table1_kernels_need_no_more_heuristic_calls_than_dali() -> None:
    n = 64
    rng = np.random.default_rng(0)
    x = lg.asarray(rng.standard_normal((n, n)).astype(np.float32))
    y = lg.asarray(rng.standard_normal((n, n)).astype(np.float32))
    w = lg.asarray(np.ones(n, np.float32))
    cases = {
        "Softmax": lg.softmax(x, axis=1),
        "LayerNorm": F.layer_norm(x, n, w, w),
        "Add": x + y,
        "Strided Add": x[:, : n // 2] + y[:, n // 2 :],
    }
    for name, arr in cases.items():
        region, values = _region(arr)
        stats = search_stats(region, values, "cuda")
        dali = DALI_TABLE1[name]
        assert stats["optimal"]
        assert stats["heuristic_calls"] <= dali[1], (name, stats)
        assert stats["consistent"] <= stats["space"]
    soft = search_stats(*_region(cases["Softmax"]), "cuda")
    assert soft["variables"] == 6 and soft["space"] == 1024
    # one block per row, threads across it, in every stage
    assert soft["assignment"] == ", ".join(["Blocks", "Threads"] * 3)
    add = search_stats(*_region(cases["Add"]), "cuda")
    assert (add["variables"], add["heuristic_calls"], add["consistent"], add["space"]) == (1, 4, 4, 4)
    assert add["assignment"] == "BlocksAndThreads"
