"""Kernel IR: loops with symbolic extents, the parallelism each allows, and the constraints.

Following Dali (section 4.1), every loop of a fused kernel lists the ways it may run —
Blocks, Threads, Blocks and Threads, or Sequential — and whether it fuses with a neighbour
(the kept-axis loops of successive stages are one loop in the rendered code, so they must
agree). Iterators hang off loops; an iterator is marked when it reads non-sequentially and
when it reads an intermediate made inside the kernel, naming the loop that produced it.

Constraints an assignment must meet (data consistency):
- a read of an in-kernel intermediate forbids block parallelism over the loop that produced
  it (blocks do not see each other's partial results);
- along any nest of loops at most one loop uses blocks and at most one uses threads;
- loops fused with each other get the same parallelism;
- a reducing loop needs a combining strategy for its parallelism: the target lists those
  (CPU: SIMD lanes and OpenMP reductions; CUDA: warp shuffles and shared memory within a
  block, so no blocks), and the loop's options only offer parallelism that has one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Par(enum.Enum):
    """How one loop's iterations are spread."""

    BLOCKS = "Blocks"
    THREADS = "Threads"
    BLOCKS_AND_THREADS = "BlocksAndThreads"
    SEQUENTIAL = "Sequential"

    @property
    def blocks(self) -> bool:
        """Uses blocks (CUDA blocks, OpenMP threads on the CPU)."""
        return self in (Par.BLOCKS, Par.BLOCKS_AND_THREADS)

    @property
    def threads(self) -> bool:
        """Uses threads (CUDA threads in a block, SIMD lanes on the CPU)."""
        return self in (Par.THREADS, Par.BLOCKS_AND_THREADS)


ALL = (Par.BLOCKS, Par.THREADS, Par.BLOCKS_AND_THREADS, Par.SEQUENTIAL)


@dataclass
class Iterator:
    """A read inside a loop: of `source` (an array or an intermediate value)."""

    source: str
    sequential: bool  # consecutive iterations read consecutive elements
    producer: int | None = None  # loop that made the intermediate read here, if any


@dataclass
class Loop:
    """One loop of a kernel (see the module docstring)."""

    name: str
    extent: str  # symbolic extent (a kernel argument)
    options: tuple[Par, ...]
    parent: int | None
    stage: int
    reduces: str | None = None  # combine rule when the loop accumulates a reduction
    fuse_group: int | None = None
    innermost: bool = False
    hint: int = 4096  # extent the cost model assumes (sizes are symbolic)
    iterators: list[Iterator] = field(default_factory=list)


@dataclass
class KernelIR:
    """The loops of one kernel plus per-stage work (operations per innermost iteration)."""

    loops: list[Loop]
    work: dict[int, float]
    target: str = "cpu"

    def ancestors(self, i: int) -> list[int]:
        """Enclosing loops of loop i, innermost first."""
        out = []
        p = self.loops[i].parent
        while p is not None:
            out.append(p)
            p = self.loops[p].parent
        return out

    def space(self) -> int:
        """Number of assignments, consistent or not (the product of option counts)."""
        n = 1
        for lp in self.loops:
            n *= len(lp.options)
        return n

    def describe(self) -> str:
        """One line per loop: name, extent, options, marks."""
        lines = []
        for i, lp in enumerate(self.loops):
            opts = "/".join(o.value for o in lp.options)
            marks = []
            if lp.reduces:
                marks.append(f"reduces:{lp.reduces}")
            if lp.fuse_group is not None:
                marks.append(f"fused:{lp.fuse_group}")
            for it in lp.iterators:
                m = it.source + ("" if it.sequential else "~")
                if it.producer is not None:
                    m += f"<-L{it.producer}"
                marks.append(m)
            parent = "" if lp.parent is None else f" in L{lp.parent}"
            lines.append(f"L{i} {lp.name}[{lp.extent}]{parent} stage {lp.stage}: {opts} {' '.join(marks)}")
        return "\n".join(lines)


def consistent(ir: KernelIR, assign: tuple[Par, ...]) -> bool:
    """Whether a (partial, in loop order) assignment meets every constraint so far."""
    k = len(assign) - 1
    if k < 0:
        return True
    lp = ir.loops[k]
    par = assign[k]
    if par not in lp.options:
        return False
    blocks, threads = int(par.blocks), int(par.threads)
    for a in ir.ancestors(k):
        if a < len(assign):
            blocks += assign[a].blocks
            threads += assign[a].threads
    if blocks > 1 or threads > 1:
        return False
    if lp.fuse_group is not None:
        for j in range(k):
            if ir.loops[j].fuse_group == lp.fuse_group and assign[j] != par:
                return False
    # A read of an intermediate made by a blocks loop breaks consistency whichever way the
    # reading loop runs, so it prunes as soon as the producer is assigned.
    for other in ir.loops:
        for it in other.iterators:
            if it.producer is not None and it.producer <= k and assign[it.producer].blocks:
                return False
    return True


def check_complete(ir: KernelIR, assign: tuple[Par, ...]) -> bool:
    """Whether a complete assignment is data-consistent (every prefix checked)."""
    return len(assign) == len(ir.loops) and all(consistent(ir, assign[: i + 1]) for i in range(len(assign)))
