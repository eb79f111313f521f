"""Command line: `python -m lazygraph cache stats|list|clear|plot`.

The cache directory is $LAZYGRAPH_CACHE_DIR, else $XDG_CACHE_HOME/lazygraph, else
~/.cache/lazygraph (ops/storage.py); it holds graph entries, compiled kernels and run logs.
`stats` and `plot` read the newest run log there: every process that evaluated something
writes one when it exits (statistics plus its per-evaluation history).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

from lazygraph import cachectl
from lazygraph.engine import ENGINE
from ops.settings import SettingError


def _table(rows: list[list[Any]], header: list[str]) -> str:
    """Columns padded to their widest cell (numbers right-aligned)."""
    cells = [[str(c) for c in header]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) for r in rows) for i in range(len(header))]
    lines = []
    for k, r in enumerate(cells):
        parts = [c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v)) or "-"
    return "-" if v is None else str(v)


def _us(seconds: float, n: int) -> str:
    return f"{seconds / n * 1e6:.1f} us" if n else "-"


def _when(t: float | None) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def cmd_stats(args: argparse.Namespace) -> int:
    """Disk store summary and the newest run's figures."""
    store = ENGINE.disk_store()
    rows = store.listing()
    current = [r for r in rows if r.get("status") == "current"]
    size = sum(r["bytes"] for r in rows)
    use = cachectl.usage()
    run = store.latest_run()
    if args.json:
        out = {"directory": str(store.root), "entries": len(rows), "bytes": size, "run": run}
        out.update(kernels=use["kernels"], kernel_bytes=use["kernel_bytes"], limit=store.limit)
        print(json.dumps(out))
        return 0
    print(f"cache directory: {store.root}")
    if use["refused"]:
        print(f"not used by lazygraph: {use['refused']}")
    print(
        f"entries on disk: {len(rows)} ({len(current)} for this library version, "
        f"{len(rows) - len(current)} other/corrupt), {size / 1024:.1f} KiB"
    )
    print(f"compiled kernels: {use['kernels']}, {use['kernel_bytes'] / 1024:.1f} KiB")
    print(f"together {use['bytes'] / 1024:.1f} KiB of the {store.limit / 2**20:.4g} MiB limit")
    if run is None:
        print("no run log yet (one is written when a process that evaluated something exits)")
        return 0
    s = run.get("stats", {})
    looked_up = s.get("hits", 0) + s.get("misses", 0)
    print(
        f"\nnewest run: {' '.join(run.get('argv', [])) or '?'} (pid {run.get('pid')}, {_when(run.get('started'))})"
    )
    print(
        _table(
            [
                ["evaluations", s.get("evaluations", 0), ""],
                ["hits", s.get("hits", 0), f"{s.get('disk_hits', 0)} of them loaded from disk"],
                ["misses", s.get("misses", 0), f"{s.get('disk_writes', 0)} entries written"],
                ["hit rate", f"{s.get('hit_rate', 0.0):.1%}", ""],
                ["distinct graphs", s.get("distinct_graphs", 0), ""],
                [
                    "hash",
                    f"{s.get('hash_seconds', 0.0):.4f} s",
                    _us(s.get("hash_seconds", 0.0), looked_up) + " per lookup",
                ],
                [
                    "replay",
                    f"{s.get('replay_seconds', 0.0):.4f} s",
                    _us(s.get("replay_seconds", 0.0), s.get("hits", 0)) + " per hit",
                ],
                [
                    "optimize",
                    f"{s.get('optimize_seconds', 0.0):.4f} s",
                    _us(s.get("optimize_seconds", 0.0), s.get("misses", 0)) + " per miss",
                ],
                ["run", f"{s.get('run_seconds', 0.0):.4f} s", "kernels, memoization"],
            ],
            ["", "total", "note"],
        )
    )
    entries = sorted(s.get("entries", []), key=lambda e: -(e["hits"] + e["misses"]))[: args.top]
    if entries:
        print(f"\ntop {len(entries)} graphs of that run:")
        print(
            _table(
                [
                    [e["key"], e["hits"], e["misses"], e["p_nodes"], e["q_nodes"], e["guards"], e["passes"]]
                    for e in entries
                ],
                ["key", "hits", "misses", "P nodes", "Q nodes", "guards", "passes fired"],
            )
        )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """One line per entry on disk, most recently used first."""
    store = ENGINE.disk_store()
    rows = store.listing()
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        print(f"no entries in {store.graphs}")
        return 0
    table = [
        [
            r.get("key", r["file"][:12]),
            r["status"],
            r.get("p_nodes"),
            r.get("q_nodes"),
            r.get("variants"),
            r.get("passes"),
            r["bytes"],
            _when(r["last_used"]),
        ]
        for r in rows
    ]
    print(_table(table, ["key", "status", "P nodes", "Q nodes", "variants", "passes", "bytes", "last used"]))
    print(f"\n{len(rows)} entries in {store.graphs}")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    """Delete every graph entry, compiled kernel and run log."""
    n = cachectl.clear(disk=True)
    print(f"removed {n} files from {ENGINE.disk_store().root}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Hit rate and time per evaluation over the newest run, as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "cache plot needs matplotlib, which is not installed (python3 -m pip install matplotlib); "
            "`python -m lazygraph cache stats` prints the same figures as text",
            file=sys.stderr,
        )
        return 2
    store = ENGINE.disk_store()
    run = store.latest_run() if args.run is None else json.loads(open(args.run, "rb").read())
    if not run or not run.get("history"):
        print(f"no run log with a history in {store.runs}", file=sys.stderr)
        return 1
    rows = run["history"]
    n = [r[1] for r in rows]
    x, total = [], 0
    for k in n:
        total += k
        x.append(total)
    cum_hits, hits = [], 0
    for r, xi in zip(rows, x):
        hits += r[2]
        cum_hits.append(hits / xi)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    ax1.plot(x, [r[2] / r[1] for r in rows], ".", ms=3, alpha=0.5, label="hit rate (per point)")
    ax1.plot(x, cum_hits, "-", label="hit rate (cumulative)")
    ax1.set_ylim(-0.05, 1.05)
    ax1.set_ylabel("hit rate")
    ax1.legend(loc="lower right")
    s = run.get("stats", {})
    ax1.set_title(
        f"lazygraph cache: {s.get('evaluations', total)} evaluations, {s.get('distinct_graphs', '?')} distinct graphs, "
        f"hit rate {s.get('hit_rate', 0.0):.1%}"
    )
    for col, label, style in (
        (3, "hash", "-"),
        (4, "replay (hits)", "-"),
        (5, "optimize (misses)", "o"),
        (6, "run", "-"),
    ):
        # zero (no hit or no miss at that point) is not drawn: the axis is logarithmic
        ys = [r[col] / r[1] * 1e3 if r[col] > 0 else float("nan") for r in rows]
        ax2.plot(x, ys, style, label=label, lw=1, ms=4)
    ax2.set_yscale("log")
    ax2.set_ylabel("ms per evaluation")
    ax2.set_xlabel("evaluation")
    ax2.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m lazygraph`."""
    parser = argparse.ArgumentParser(prog="python -m lazygraph", description="lazygraph tools")
    sub = parser.add_subparsers(dest="command", required=True)
    cache = sub.add_parser("cache", help="inspect or clear the cache (graph entries and compiled kernels)")
    csub = cache.add_subparsers(dest="action", required=True)
    p = csub.add_parser("stats", help="entries on disk and the newest run's hits, misses and times")
    p.add_argument("--top", type=int, default=10, help="graphs to list (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(fn=cmd_stats)
    p = csub.add_parser("list", help="one line per cached entry")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(fn=cmd_list)
    p = csub.add_parser("clear", help="delete every cached entry, compiled kernel and run log")
    p.set_defaults(fn=cmd_clear)
    p = csub.add_parser("plot", help="PNG of hit rate and time per evaluation over the newest run")
    p.add_argument("-o", "--output", default="lazygraph-cache.png", help="PNG file to write")
    p.add_argument("--run", help="a run log (JSON) instead of the newest one")
    p.set_defaults(fn=cmd_plot)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except SettingError as e:  # a bad LAZYGRAPH_* value: say which and what it accepts
        print(f"python -m lazygraph: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
