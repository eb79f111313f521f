"""Part 1 of bench_superopt.py: the proven rule library's size and the times it took to build."""

from __future__ import annotations

import time


def library_part(generate: bool, quick: bool) -> None:
    """Rules by status, and the times to generate and verify them."""
    from optimizer.superopt.adapt import SKIPPED, library_rules
    from optimizer.superopt.rulefile import LIBRARY, read_rules

    print("== rule library ==")
    if generate:
        from optimizer.superopt.generate import generate as run

        max_ops = 2 if quick else 3
        t0 = time.perf_counter()
        rules, report = run(max_ops=max_ops, budget_s=60 if quick else 300)
        print(
            f"generated here (max {max_ops} ops): {len(rules)} candidates in {time.perf_counter() - t0:.1f} s"
        )
        print(
            f"  generate {report['generate_seconds']} s, verify {report['verify_seconds']} s, {report['status']}"
        )
    doc = read_rules(LIBRARY)
    counts = {s: sum(r.status == s for r in doc.rules) for s in ("proven", "refuted", "unknown")}
    meta = {}
    try:
        import json

        meta = json.loads(LIBRARY.read_text()).get("meta", {})
    except (OSError, ValueError, AttributeError):
        meta = {}
    print(f"library {LIBRARY.name}: {len(doc.rules)} rules, by status {counts}")
    if meta:
        shown = {
            k: meta[k] for k in ("generate_seconds", "verify_seconds", "max_ops", "candidates") if k in meta
        }
        print(f"  recorded by `python -m optimizer generate`: {shown}")
    usable = library_rules()
    print(
        f"  usable by the search: {len(usable)} (skipped: {len(SKIPPED)}; e.g. {list(SKIPPED.items())[:2]})"
    )
    print(
        "  anchor (TASO): 743 rules generated in 5 min + 10 min of verification; 133 in its public rule file"
    )
    print(f"result: library_proven_rules = {counts['proven']}")
    if meta.get("generate_seconds") is not None and meta.get("verify_seconds") is not None:
        print(
            f"result: library_generate_verify_seconds = {meta['generate_seconds'] + meta['verify_seconds']:.1f}"
        )
