"""What users see of the machinery: LAZYGRAPH_DEBUG logging, `explain`, `to_dot`."""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Sequence
from typing import Any

from ops.node import Node, postorder
from ops.settings import SETTINGS


class Totals:
    """Evaluations and steps run since start, process-wide (the log numbers evaluations by them).

    Each thread counts into its own pair, so an evaluation takes no lock (it used to take one,
    ~0.13 us of every warm evaluation); the evaluation's number comes from one shared
    `itertools.count`, whose `next` is a single C call.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # only for registering a thread's pair
        self._local = threading.local()
        self._pairs: list[list[int]] = []
        self._numbers = itertools.count(1)

    def count(self, steps: int) -> int:
        """Account one evaluation of `steps` steps; returns its number."""
        try:
            c = self._local.c
        except AttributeError:
            c = self._local.c = [0, 0]
            with self._lock:
                self._pairs.append(c)  # kept after the thread ends: its counts stay in the totals
        c[0] += 1
        c[1] += steps
        return next(self._numbers)

    def summary(self) -> dict[str, int]:
        """{"evaluations": ..., "kernels": ...} (kernels: steps run)."""
        with self._lock:
            pairs = list(self._pairs)
        return {"evaluations": sum(c[0] for c in pairs), "kernels": sum(c[1] for c in pairs)}


#: what `evaluation_stats` reports (counted by every engine; never reset)
TOTALS = Totals()


def level() -> int:
    """Current LAZYGRAPH_DEBUG level (0 = quiet)."""
    return SETTINGS.debug


def log(msg: str, at: int = 1) -> None:
    """Write one line to stderr when the debug level is at least `at`."""
    if level() >= at:
        print(f"[lazygraph] {msg}", file=sys.stderr)


def log_evaluation(
    number: int, roots: Sequence[Node], kernels: int, seconds: float, detail: str = ""
) -> None:
    """The line of evaluation `number` at level 1 (the engine logs kernels and passes at 2, the graph at 3)."""
    outs = ", ".join(f"{r.dtype}{list(r.shape)}" for r in roots)
    extra = f" [{detail}]" if detail else ""
    log(f"eval #{number}: {kernels} nodes run in {seconds * 1e3:.3f} ms -> {outs}{extra}")


def fmt_bytes(n: int) -> str:
    """Bytes for log lines: 512 B, 3.1 KiB, 12.0 MiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def evaluation_stats() -> dict[str, int]:
    """Totals since start: evaluations run and kernels executed."""
    return TOTALS.summary()


def _attr_str(v: Any) -> str:
    if hasattr(v, "_asdict"):
        return "(" + ", ".join(f"{k}={w}" for k, w in v._asdict().items()) + ")"
    return repr(v)


def graph_lines(roots: Sequence[Node]) -> list[str]:
    """Readable listing, one node per line, inputs first: `%3 = add(%1, %2) : float32[3,4]`."""
    order: list[Node] = postorder(roots)
    names = {id(n): f"%{i}" for i, n in enumerate(order)}
    lines = []
    for n in order:
        ty = f"{n.dtype}[{','.join(map(str, n.shape))}]"
        if n.op.name == "scalar":
            body = f"scalar {n.buffer!r}"
        elif n.op.name == "buffer":
            body = "buffer"
        else:
            args = [names[id(c)] for c in n.inputs]
            args += [f"{k}={_attr_str(v)}" for k, v in n.attrs.items()]
            body = f"{n.op.name}({', '.join(args)})"
        lines.append(f"{names[id(n)]} = {body} : {ty}")
    outs = ", ".join(names[id(r)] for r in roots)
    lines.append(f"return {outs}")
    return lines


def dot_source(roots: Sequence[Node]) -> str:
    """Graphviz source for the graph computing `roots`."""
    lines = graph_lines(roots)
    out = ["digraph lazygraph {", "  node [shape=box, fontname=monospace];"]
    edges = []
    for line in lines[:-1]:
        name, rest = line.split(" = ", 1)
        nid = name[1:]
        label = rest.replace('"', '\\"')
        out.append(f'  n{nid} [label="{name}: {label}"];')
        if "(" in rest:
            inner = rest[rest.index("(") + 1 :]
            for tok in inner.replace(")", ",").split(","):
                tok = tok.strip()
                if tok.startswith("%") and tok[1:].isdigit():
                    edges.append(f"  n{tok[1:]} -> n{nid};")
    out.extend(edges)
    out.append("}")
    return "\n".join(out)
