"""Numeric LAZYGRAPH_* settings, read and checked in one place.

A setting that cannot mean anything (`inf`, `nan`, a word, a value below its minimum) is an
error naming the variable and what it accepts, raised where the setting is read: a silent
fallback would run the program with a value the user did not ask for. An unset or empty
variable means the default.
"""

from __future__ import annotations

import math
import os


class SettingError(ValueError):
    """An environment setting whose value is not one of the accepted values."""


def number(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
    accepted: str = "",
    hint: str = "",
) -> float | int:
    """The value of `name` as a finite number within its bounds, else a SettingError.

    `minimum` is inclusive, `above` exclusive; `accepted` describes the valid values in words
    (built from the bounds when empty); `hint` is appended (e.g. how to turn a feature off).
    """
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return default
    text = raw.strip()
    what = accepted or _describe(minimum, above, maximum, integer)
    try:
        value: float | int = int(text, 10) if integer else float(text)
    except ValueError:
        value = math.nan
    ok = not (isinstance(value, float) and not math.isfinite(value))
    if ok and minimum is not None and value < minimum:
        ok = False
    if ok and above is not None and value <= above:
        ok = False
    if ok and maximum is not None and value > maximum:
        ok = False
    if not ok:
        extra = f"; {hint}" if hint else ""
        raise SettingError(f"{name}={raw!r} is not valid: expected {what}{extra}")
    return value


def _describe(minimum: float | None, above: float | None, maximum: float | None, integer: bool) -> str:
    kind = "an integer" if integer else "a finite number"
    parts = []
    if minimum is not None:
        parts.append(f">= {minimum:g}")
    if above is not None:
        parts.append(f"> {above:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return kind + (" " + " and ".join(parts) if parts else "")


def debug_level() -> int:
    """LAZYGRAPH_DEBUG: 0 (quiet) to 4 (everything); read by lazygraph and jit alike."""
    return int(number("LAZYGRAPH_DEBUG", 0, minimum=0, maximum=4, integer=True, accepted="an integer 0-4"))
