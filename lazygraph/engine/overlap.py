"""Communication overlap: post collectives as early as possible, complete them as late as possible.

A collective is two steps (ops/collective.py): `collective_start` posts a non-blocking
transfer, `collective_wait` completes it. The memory planner orders steps for the peak, so it
often puts a wait right after its start, and the transfer overlaps nothing. `hoist` keeps
every other step in the planner's order and moves each start to just after its inputs are
computed and each wait to just before its first reader, and the steps that read a collective's
result (an optimizer's updates) after every step that does not (the rest of backward), so a
gradient's all-reduce runs while backward computes the gradients of earlier layers. Starts keep their relative order (each
reads the previous pending start), so every rank still posts them in the same order. The
order is part of the transformation: a cache hit (or a disk hit) replays it.
"""

from __future__ import annotations

from lazygraph.engine.program import Program

START, WAIT = "collective_start", "collective_wait"


def hoist(program: Program) -> bool:
    """Reorder `program`'s steps for overlap (True when it has collectives)."""
    steps = program.steps
    starts = [i for i, s in enumerate(steps) if s.name == START]
    if not starts:
        return False
    producer = {q: i for i, s in enumerate(steps) for q in s.outs}
    emitted = [False] * len(steps)
    order: list[int] = []

    def ensure(i: int) -> None:
        if emitted[i]:
            return
        for q in steps[i].ins:
            j = producer.get(q)
            if j is not None:
                ensure(j)
        emitted[i] = True
        order.append(i)

    def post_ready() -> None:
        again = True
        while again:
            again = False
            for i in starts:
                if not emitted[i] and all(emitted[producer[q]] for q in steps[i].ins if q in producer):
                    ensure(i)
                    again = True

    # steps that read a collective's result (the optimizer's updates) go after all the others
    # (the rest of backward), each group in the planner's order
    after = [False] * len(steps)
    for i, s in enumerate(steps):
        after[i] = s.name == WAIT or any(after[producer[q]] for q in s.ins if q in producer)
    post_ready()
    for late in (False, True):
        for i, s in enumerate(steps):
            if after[i] == late and s.name not in (START, WAIT):
                ensure(i)  # pulls in the waits it reads (and their starts), no earlier
                post_ready()
    for i in range(len(steps)):
        ensure(i)  # waits nobody reads: the outputs, completed last
    program.reorder([steps[i].outs[0] for i in order])
    return True
