"""The pass registry: P -> Q by applying registered passes in priority order.

A pass has a name, a priority (higher runs first), a condition (a cheap test on the graph:
is there anything for the transform to do?) and a transform that rewrites a
`cache.graph.Graph` in place and returns whether it changed anything. After every pass
that changed the graph, the graph is checked: each P node's value must still be available
with the same shape and dtype, and every node must read only nodes computed before it.

Register a pass with the decorator:

    @register_pass("fold_something", priority=250)
    def fold_something(g: Graph) -> bool: ...

Passes only run on a cache miss; a hit replays their combined effect (see cache/tgraph.py).
The engine adds its own lowering passes to a run (`ordered(extra)`, `optimize(..., passes)`):
they are not registered here, so this table holds the optimizer's passes and users' only.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cache.graph import Graph


def _always(g: Graph) -> bool:
    return True


@dataclass(frozen=True)
class Pass:
    """One registered graph transformation."""

    name: str
    priority: int
    transform: Callable[[Graph], bool]
    condition: Callable[[Graph], bool] = _always


PASSES: dict[str, Pass] = {}


def register_pass(
    name: str, priority: int, condition: Callable[[Graph], bool] | None = None
) -> Callable[[Callable[[Graph], bool]], Callable[[Graph], bool]]:
    """Decorator: add `transform` to the registry under `name` (names are unique)."""

    def add(transform: Callable[[Graph], bool]) -> Callable[[Graph], bool]:
        if name in PASSES:
            raise ValueError(f"pass {name!r} is already registered")
        PASSES[name] = Pass(name, priority, transform, condition or _always)
        return transform

    return add


def unregister_pass(name: str) -> None:
    """Remove a pass (tests and experiments)."""
    PASSES.pop(name, None)


def ordered(extra: Iterable[Pass] = ()) -> list[Pass]:
    """Registered passes and `extra` ones, highest priority first (ties by name: a stable order)."""
    return sorted([*PASSES.values(), *extra], key=lambda p: (-p.priority, p.name))


def fingerprint(passes: Iterable[Pass] | None = None) -> str:
    """Names and priorities of the passes (default: registered): part of what cached entries depend on."""
    text = ";".join(f"{p.name}:{p.priority}" for p in (ordered() if passes is None else passes))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def optimize(
    g: Graph, trace: Callable[[str, bool, float, int], None] | None = None, passes: list[Pass] | None = None
) -> list[str]:
    """Apply the passes (default: every registered one) in priority order; return those that fired.

    `trace(name, fired, seconds, nodes_after)` is called for each pass whose condition held.
    """
    for p in ordered() if passes is None else passes:
        if not p.condition(g):
            continue
        t0 = time.perf_counter()
        changed = bool(p.transform(g))
        if changed:
            g.check(p.name)
            g.fired.append(p.name)
        if trace is not None:
            trace(p.name, changed, time.perf_counter() - t0, len(g.nodes))
    return list(g.fired)
