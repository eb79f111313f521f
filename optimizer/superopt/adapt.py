"""The library's proven rules as search rules (filled in below)."""

from __future__ import annotations

from optimizer.superopt.match import Rule


def library_rules() -> list[Rule]:
    """Proven library rules the search can match on lazygraph's operators."""
    return []
