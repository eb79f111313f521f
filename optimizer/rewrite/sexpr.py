"""S-expressions for rule patterns: `(multiply ?x 1)` <-> nested lists, JSON-ready.

Atoms: `?name` (a pattern variable), numbers (`1`, `0.0`, `-1`), `true`/`false`, words (op
names, attribute names, keywords such as `:shape`). Lists nest with parentheses. Parsing
never evaluates anything: a rule file is data.
"""

from __future__ import annotations

from typing import Any

SExpr = Any  # str | int | float | bool | list[SExpr]


class RuleSyntaxError(ValueError):
    """A pattern or rule that does not parse or uses unknown vocabulary."""


def _atom(tok: str) -> SExpr:
    if tok == "true":
        return True
    if tok == "false":
        return False
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        return float(tok)
    except ValueError:
        return tok


def parse(text: str) -> SExpr:
    """One s-expression from text (`(negative (negative ?x))` -> nested lists)."""
    toks = text.replace("(", " ( ").replace(")", " ) ").split()
    if not toks:
        raise RuleSyntaxError("empty pattern")
    pos = 0

    def read() -> SExpr:
        nonlocal pos
        if pos >= len(toks):
            raise RuleSyntaxError(f"unbalanced parentheses in {text!r}")
        tok = toks[pos]
        pos += 1
        if tok == ")":
            raise RuleSyntaxError(f"unexpected ')' in {text!r}")
        if tok != "(":
            return _atom(tok)
        out = []
        while pos < len(toks) and toks[pos] != ")":
            out.append(read())
        if pos >= len(toks):
            raise RuleSyntaxError(f"unbalanced parentheses in {text!r}")
        pos += 1
        return out

    result = read()
    if pos != len(toks):
        raise RuleSyntaxError(f"trailing text in {text!r}")
    return result


def unparse(e: SExpr) -> str:
    """The text form of a parsed s-expression (inverse of `parse`)."""
    if isinstance(e, list):
        return "(" + " ".join(unparse(x) for x in e) + ")"
    if e is True:
        return "true"
    if e is False:
        return "false"
    return str(e)


def is_var(e: SExpr) -> bool:
    """A pattern variable: `?x`."""
    return isinstance(e, str) and e.startswith("?") and len(e) > 1


def head(e: list) -> tuple[str, str | None]:
    """The operator name of a pattern list and the variable its node binds (`reshape@?r`)."""
    if not e or not isinstance(e[0], str):
        raise RuleSyntaxError(f"a pattern list must start with an operator name: {unparse(e)}")
    name, _, bind = e[0].partition("@")
    if bind and not is_var(bind):
        raise RuleSyntaxError(f"bad binding {e[0]!r} (expected op@?name)")
    return name, bind or None
