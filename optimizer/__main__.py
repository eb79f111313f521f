"""`python -m optimizer`: regenerate, re-prove and inspect the superoptimizer's rule library.

    python -m optimizer verify [FILE] [--timeout-ms 2000] [--write] [--jobs N]
    python -m optimizer generate [--out FILE] [--max-ops 4] [--max-terms 120000] [--budget-s 300]
                                 [--timeout-ms 1000] [--max-candidates 1250] [--jobs N]
    python -m optimizer axioms [--redundancy]

`verify` reads any rule file, in the superopt format or the rewrite engine's (the library by
default), proves every rule again with the verifier of its vocabulary (term rules against the
axioms, rules over lazygraph's operators from their z3 facets) and prints one status per rule (proven / refuted with a counterexample / unknown)
and totals; it exits with 1 when a rule is refuted. `generate` enumerates, fingerprints and
proves candidates and writes the library. `axioms` checks every axiom numerically and, with
--redundancy, reports the axioms z3 derives from the others.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from optimizer.superopt.rulefile import LIBRARY, read_rules, write_rules


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def cmd_verify(args: argparse.Namespace) -> int:
    """Re-prove every rule of a file and print statuses and totals."""
    from optimizer.superopt.verify import apply_verdict, verify_many

    path = Path(args.file) if args.file else LIBRARY
    loaded = read_rules(path)
    for e in loaded.errors:
        print(f"skipped: {e}")
    if not loaded.rules:
        print(f"{path}: no rules")
        return 2 if loaded.errors else 0
    counts: Counter = Counter()
    changed = 0
    t0 = time.perf_counter()
    print(f"{'rule':<24} {'status':<8} {'s':>6}  detail")
    rules = loaded.rules
    bar = tqdm(
        total=len(rules),
        desc="verifying",
        unit="rule",
        file=sys.stderr,
        disable=len(rules) < 20 or args.quiet,
    )
    verdicts = verify_many(
        rules, timeout_ms=args.timeout_ms, jobs=args.jobs, progress=lambda i, n: bar.update(1)
    )
    for rule, v in zip(rules, verdicts):
        before = rule.status
        counts[v.status] += 1
        changed += v.status != before
        apply_verdict(rule, v)
        if v.status == "refuted":
            detail = f"counterexample {v.counterexample}"
        elif v.status == "proven":
            detail = f"{' | '.join(rule.source)} => {' | '.join(rule.target)}"
        else:
            detail = v.counterexample or "not proven within the timeout"
        if not args.quiet or v.status != "proven":
            bar.write(f"{_short(rule.name, 24):<24} {v.status:<8} {v.seconds:6.2f}  {_short(detail, 140)}")
    bar.close()
    total = time.perf_counter() - t0
    print(
        f"totals: {len(rules)} rules: {counts['proven']} proven, {counts['refuted']} refuted, "
        f"{counts['unknown']} unknown ({changed} changed status) in {total:.1f} s"
    )
    if args.write:
        write_rules(path, rules, {"verified_seconds": round(total, 2)})
        print(f"statuses written to {path}")
    return 1 if counts["refuted"] else 0


def cmd_generate(args: argparse.Namespace) -> int:
    """Enumerate, prove and write the rule library."""
    from optimizer.superopt.generate import generate

    bar = tqdm(desc="proving", unit="rule", file=sys.stderr, disable=args.quiet)

    def progress(i: int, n: int) -> None:
        bar.total = n
        bar.update(1)

    rules, report = generate(
        max_ops=args.max_ops,
        budget_s=args.budget_s,
        timeout_ms=args.timeout_ms,
        seed=args.seed,
        progress=progress,
        max_candidates=args.max_candidates,
        max_terms=args.max_terms or None,
        jobs=args.jobs,
    )
    bar.close()
    keep = [r for r in rules if r.status != "refuted"]
    out = Path(args.out) if args.out else LIBRARY
    write_rules(out, keep, report)
    s = report["status"]
    print(
        f"generated {report['candidates']} candidates from {report['terms']} graphs in "
        f"{report['generate_seconds']} s; verified in {report['verify_seconds']} s"
    )
    print(f"status: {s['proven']} proven, {s['unknown']} unknown, {s['refuted']} refuted (dropped)")
    print("pruned: " + ", ".join(f"{k} {v}" for k, v in sorted(report["pruned"].items())))
    print(f"wrote {len(keep)} rules to {out}")
    return 0


def cmd_axioms(args: argparse.Namespace) -> int:
    """Numeric check of every axiom; optionally the redundant ones."""
    from optimizer.superopt.axioms import AXIOMS, check_axiom

    bad = 0
    for ax in AXIOMS:
        r = check_axiom(ax)
        bad += r.failure is not None
        print(f"{ax.name:<28} {'WRONG' if r.failure else 'ok':<6} {r.instances:4d} checks  {r.failure or ''}")
    print(f"totals: {len(AXIOMS)} axioms, {bad} wrong")
    if args.redundancy:
        from optimizer.superopt.verify import redundant_axioms

        red = redundant_axioms(timeout_ms=args.timeout_ms)
        print("redundant (provable from the others): " + (", ".join(red) or "none"))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m optimizer`."""
    p = argparse.ArgumentParser(prog="python -m optimizer", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="re-prove the rules of a file")
    v.add_argument("file", nargs="?", help="rule file (default: the library)")
    v.add_argument("--timeout-ms", type=int, default=2000)
    v.add_argument("--write", action="store_true", help="store the new statuses in the file")
    v.add_argument("--quiet", action="store_true", help="list only rules that are not proven")
    v.add_argument("--jobs", type=int, default=None, help="verifier processes (default: one per core)")
    g = sub.add_parser("generate", help="regenerate the rule library")
    g.add_argument("--out", help="output file (default: the library)")
    # the defaults are the committed library's recipe (docs/superopt.md)
    g.add_argument("--max-ops", type=int, default=4)
    g.add_argument("--budget-s", type=float, default=300.0, help="enumeration time budget")
    g.add_argument("--max-terms", type=int, default=120000, help="terms enumerated per world (0: no limit)")
    g.add_argument(
        "--timeout-ms", type=int, default=1000, help="z3 budget per rule (resource units, see verify.py)"
    )
    g.add_argument("--max-candidates", type=int, default=1250, help="candidates proven (smallest first)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--jobs", type=int, default=None, help="verifier processes (default: one per core)")
    g.add_argument("--quiet", action="store_true")
    a = sub.add_parser("axioms", help="check the axioms numerically")
    a.add_argument("--redundancy", action="store_true")
    a.add_argument("--timeout-ms", type=int, default=500)
    args = p.parse_args(argv)
    return {"verify": cmd_verify, "generate": cmd_generate, "axioms": cmd_axioms}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
