"""Import rules: the packages' layering (import-linter's contracts in pyproject.toml) and no cycles.

Imports flow one way, `lazygraph -> optimizer -> jit | cache -> ops`, and no module imports
another that imports it back, not even from inside a function (a deferred import only hides a
cycle) and not through a package's `__init__` (`import lazygraph as lg` inside lazygraph).
Imports under `if TYPE_CHECKING:` never run and are not counted.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import deque
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lazygraph", "ops", "jit", "cache", "optimizer")


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Components of more than one module (Tarjan's algorithm, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def shortest_cycle(edges: dict[str, set[str]], members: list[str]) -> list[str]:
    """One shortest cycle through `members[0]` inside the component, as a path that returns to it."""
    inside = set(members)
    start = members[0]
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges[v] & inside):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {members}")


def describe(graph: grimp.ImportGraph, cycle: list[str]) -> str:
    """A cycle as its import lines, so that a failure says which line to change."""
    lines = [" -> ".join(cycle)]
    for a, b in zip(cycle, cycle[1:]):
        for d in graph.get_import_details(importer=a, imported=b):
            lines.append(f"    {a}:{d['line_number']}  {d['line_contents']}")
    return "\n".join(lines)


def test_cycle_finder_on_a_known_graph() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert strongly_connected(edges) == [["d", "e"], ["a", "b", "c"]]
    assert shortest_cycle(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = _graph()
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    report = []
    for component in strongly_connected(edges):
        report.append(f"{len(component)} modules in one cycle: {', '.join(component)}")
        covered: set[str] = set()
        shown = 0
        for module in component:  # shortest cycles until every module is in one (five at most)
            if module not in covered and shown < 5:
                cycle = shortest_cycle(edges, [module, *component])
                covered.update(cycle)
                report.append(describe(graph, cycle))
                shown += 1
    assert not report, "import cycles (module-level or inside functions):\n" + "\n".join(report)


def test_ops_imports_only_numpy_and_the_standard_library() -> None:
    graph = grimp.build_graph(
        *PACKAGES, include_external_packages=True, exclude_type_checking_imports=True, cache_dir=None
    )
    allowed = {"ops", "numpy", *sys.stdlib_module_names}
    outside = sorted(
        f"{m} imports {t}"
        for m in graph.find_descendants("ops") | {"ops"}
        for t in graph.find_modules_directly_imported_by(m)
        if t.partition(".")[0] not in allowed
    )
    assert not outside, "ops/ may import only numpy and the standard library: " + ", ".join(outside)


def test_import_contracts() -> None:
    # the contracts (layers, cache below the engine, no cycles among siblings) live in pyproject.toml;
    # this is .ci/run's `lint-imports` step, so that the README's test command checks them too
    run = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"]
        + ["--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    summary = re.search(r"Contracts: (\d+) kept, (\d+) broken", run.stdout)
    assert summary is not None, run.stdout
    assert int(summary[1]) >= 3 and int(summary[2]) == 0, run.stdout
