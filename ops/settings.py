"""One settings object: every LAZYGRAPH_* setting, parsed from the environment once.

`SETTINGS.jit`, `SETTINGS.jit_min_size`, ... are plain attributes after their first read: a
field is parsed from its environment variable the first time it is used (so a malformed value
is an error naming the variable at the first evaluation that needs it, not at import), then
kept. Nothing on the evaluation path reads `os.environ`. Users change settings through the API
(`lazygraph.settings.update(jit=False)`, or `with lazygraph.settings.override(...)`), which
validates the value the same way; `reload()` re-reads the environment (after `os.environ`
changed in-process, as tests do).

A setting that cannot mean anything (`inf`, `nan`, a word, a value below its minimum) is an
error naming the variable and what it accepts: a silent fallback would run the program with a
value the user did not ask for. An unset or empty variable means the default.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


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
    raw: str | None = None,
) -> float | int:
    """The value of `name` (or `raw`) as a finite number within its bounds, else a SettingError.

    `minimum` is inclusive, `above` exclusive; `accepted` describes the valid values in words
    (built from the bounds when empty); `hint` is appended (e.g. how to turn a feature off).
    """
    if raw is None:
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


_FALSE = ("0", "false", "off", "no")
_TRUE = ("1", "true", "on", "yes")


def _switch(default: bool, strict: bool = False) -> Callable[[str, str], bool]:
    """A yes/no setting: unset means `default`; strict ones reject words they do not know."""

    def parse(name: str, raw: str) -> bool:
        text = raw.strip().lower()
        if text == "":
            return default
        if text in _FALSE:
            return False
        if text in _TRUE or not strict:
            return True
        raise SettingError(
            f"{name}={raw!r} is not valid: expected 0 or 1 (also false/true, off/on, no/yes; "
            f"unset means {int(default)})"
        )

    return parse


def _off_if_zero(name: str, raw: str) -> bool:
    # the historical rule of LAZYGRAPH_OPTIMIZE/SCHEDULE/SUPEROPT: only "0" turns them off
    return raw.strip() != "0"


def _flag(name: str, raw: str) -> bool:
    # LAZYGRAPH_MEASURE / EXPLAIN_MISSES: on unless unset, empty or "0"
    return raw.strip() not in ("", "0")


def _choice(default: str, accepted: tuple[str, ...], lenient: bool = False) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        text = raw.strip()
        if text == "":
            return default
        if text in accepted:
            return text
        if lenient:
            return default
        raise SettingError(f"{name}={raw!r} is not valid: expected one of {', '.join(accepted)}")

    return parse


def _num(default: float, **bounds: Any) -> Callable[[str, str], Any]:
    return lambda name, raw: number(name, default, raw=raw, **bounds)


def _text(name: str, raw: str) -> str | None:
    return raw.strip() or None


def _cache_mode(name: str, raw: str) -> str:
    text = raw.strip()
    return text if text in ("0", "memory") else "1"  # anything else means on, as it always has


@dataclass(frozen=True)
class Field:
    """One setting: its environment variable, parser (name, raw text) -> value, and meaning."""

    env: str
    parse: Callable[[str, str], Any]
    doc: str


FIELDS: dict[str, Field] = {
    "jit": Field("LAZYGRAPH_JIT", _switch(True), "compile fused regions and window kernels (0 turns it off)"),
    "conv_simd": Field(
        "LAZYGRAPH_CONV_SIMD",
        _switch(True),
        "float32 convolutions on the AVX-512/AVX2 implicit-GEMM kernels where they apply (0: the chunked BLAS path)",
    ),
    "blas_quiet": Field(
        "LAZYGRAPH_BLAS_QUIET",
        _switch(True),
        "stop OpenBLAS's spinning worker threads before compiled OpenMP kernels (0 leaves them)",
    ),
    "native_record": Field(
        "LAZYGRAPH_NATIVE_RECORD",
        _switch(True),
        "record common elementwise operators through the C recorder (lazygraph/lean_record.c; 0: Python only)",
    ),
    "native_match": Field(
        "LAZYGRAPH_NATIVE_MATCH",
        _switch(True),
        "check a recurring graph against its template in C (lazygraph/lean_match.c; 0: generated Python)",
    ),
    "malloc_keep": Field(
        "LAZYGRAPH_MALLOC_KEEP",
        _switch(True),
        "keep freed array memory mapped for reuse (glibc: no trimming, 32 MB mmap threshold; 0 leaves malloc as it is)",
    ),
    "gc_freeze": Field(
        "LAZYGRAPH_GC_FREEZE",
        _switch(True),
        "take the objects alive after import out of the cyclic collector's scans (gc.freeze; 0 leaves the collector as it is)",
    ),
    "jit_min_size": Field(
        "LAZYGRAPH_JIT_MIN_SIZE",
        _num(1, minimum=0, integer=True),
        "fused regions whose arrays are all below this many elements run op by op on NumPy (default 1: compiled at any size; 65536 at least when launches go through ctypes)",
    ),
    "device": Field(
        "LAZYGRAPH_DEVICE",
        _choice("cpu", ("cpu", "cuda-emulated", "cuda")),
        "where arrays are created when no device is given (cpu, cuda-emulated, cuda)",
    ),
    "fast_math": Field(
        "LAZYGRAPH_FAST_MATH", _switch(False, strict=True), "allow contractions that change NumPy's bits"
    ),
    "optimize": Field("LAZYGRAPH_OPTIMIZE", _off_if_zero, "run the optimizer's passes (0: Q = P)"),
    "cache": Field("LAZYGRAPH_CACHE", _cache_mode, "1: memory and disk, memory: this process only, 0: off"),
    "cache_dir": Field("LAZYGRAPH_CACHE_DIR", _text, "where cached graphs and kernels live"),
    "xdg_cache_home": Field("XDG_CACHE_HOME", _text, "the cache directory's default parent (XDG)"),
    "cache_limit_mb": Field(
        "LAZYGRAPH_CACHE_LIMIT_MB",
        _num(
            256,
            above=0,
            maximum=2**40,
            accepted="a positive number of megabytes (default 256)",
            hint="LAZYGRAPH_CACHE=memory keeps cached graphs off the disk",
        ),
        "disk space for cached graphs and kernels together",
    ),
    "schedule": Field("LAZYGRAPH_SCHEDULE", _off_if_zero, "choose the order of least peak memory"),
    "schedule_budget": Field(
        "LAZYGRAPH_SCHEDULE_BUDGET",
        _num(0.2, minimum=0, accepted="seconds >= 0"),
        "seconds the order search may take on one miss",
    ),
    "optimize_budget_ms": Field(
        "LAZYGRAPH_OPTIMIZE_BUDGET_MS",
        _num(1.0, minimum=0, accepted="milliseconds >= 0 (0: no time box)"),
        "time box of a new structure's passes and order search before its first run (then finished in the background)",
    ),
    "jit_background": Field(
        "LAZYGRAPH_JIT_BACKGROUND",
        _switch(True, strict=True),
        "compile kernels and finish time-boxed optimization on a background thread (0: on the critical path)",
    ),
    "superopt": Field("LAZYGRAPH_SUPEROPT", _off_if_zero, "run the superoptimizer's search"),
    "superopt_seconds": Field("LAZYGRAPH_SUPEROPT_SECONDS", _num(0.5, minimum=0), "search time per graph"),
    "superopt_graphs": Field(
        "LAZYGRAPH_SUPEROPT_GRAPHS", _num(100, minimum=0, integer=True), "graphs one search may visit"
    ),
    "superopt_cost": Field(
        "LAZYGRAPH_SUPEROPT_COST", _choice("analytic", ("analytic", "measured"), lenient=True), "cost model"
    ),
    "superopt_search": Field(
        "LAZYGRAPH_SUPEROPT_SEARCH",
        _choice("taso", ("taso", "eqsat", "mcts", "auto"), lenient=True),
        "superopt search: TASO backtracking, e-graph, e-graph built by MCTS, or TASO then e-graph",
    ),
    "measure": Field("LAZYGRAPH_MEASURE", _flag, "meter every run's memory"),
    "explain_misses": Field("LAZYGRAPH_EXPLAIN_MISSES", _flag, "log why each cache miss missed"),
    "debug": Field(
        "LAZYGRAPH_DEBUG",
        _num(0, minimum=0, maximum=4, integer=True, accepted="an integer 0-4"),
        "0 (quiet) to 4 (everything)",
    ),
    "cc": Field("CC", _text, "the C compiler for CPU kernels (default: cc, gcc, clang)"),
    "fallback_warnings": Field(
        "LAZYGRAPH_FALLBACK_WARNINGS",
        _switch(True, strict=True),
        "warn once per NumPy function that runs eagerly on evaluated lazy arrays (0 silences it)",
    ),
}


class Settings:
    """This process's settings (see the module docstring): one attribute per field of `FIELDS`."""

    def __init__(self) -> None:
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_user", {})  # values set through update(): they win over the environment

    def __getattr__(self, name: str) -> Any:
        # only reached when the field has not been parsed since the last reload
        field = FIELDS.get(name)
        if field is None:
            raise AttributeError(f"no setting {name!r} (known: {', '.join(FIELDS)})")
        with self._lock:
            if name in self._user:
                value = self._user[name]
            else:
                value = field.parse(field.env, os.environ.get(field.env, ""))
            self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        self.update(**{name: value})

    def reload(self) -> None:
        """Forget parsed values: the next read of each setting re-reads the environment."""
        with self._lock:
            for name in FIELDS:
                self.__dict__.pop(name, None)
            _changed()

    def update(self, **changes: Any) -> dict[str, Any]:
        """Set fields for this process (validated like the environment); returns the old user values."""
        parsed = {}
        for name, value in changes.items():
            field = FIELDS.get(name)
            if field is None:
                raise AttributeError(f"no setting {name!r} (known: {', '.join(FIELDS)})")
            parsed[name] = _coerce(name, field, value)
        with self._lock:
            old = {k: self._user.get(k, _UNSET) for k in parsed}
            for name, value in parsed.items():
                if value is _UNSET:
                    self._user.pop(name, None)
                    self.__dict__.pop(name, None)
                else:
                    self._user[name] = value
                    self.__dict__[name] = value
            _changed()
        return old

    @contextmanager
    def override(self, **changes: Any) -> Iterator[Settings]:
        """Change settings inside a `with` block (process-wide), restoring them after."""
        old = self.update(**changes)
        try:
            yield self
        finally:
            self.update(**old)

    def as_dict(self) -> dict[str, Any]:
        """Every setting's current value (for `python -m lazygraph` and bug reports)."""
        return {name: getattr(self, name) for name in FIELDS}


_UNSET: Any = object()


def _coerce(name: str, field: Field, value: Any) -> Any:
    """A value given through the API, checked by the field's own parser."""
    if value is _UNSET or value is None and field.parse is _text:
        return _UNSET if value is _UNSET else None
    if value is None:
        return _UNSET  # None through the API: back to the environment's value
    text = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return field.parse(field.env, text)


#: the process's settings
SETTINGS = Settings()

#: `HOT[0]`: the settings every evaluation reads, as `hot(build)` read them, or None after a change.
#: A `Settings` attribute goes through its `__getattr__` hook: about 0.5 us each with the caches
#: cold from the previous run, 7 us for the engine's dozen reads; one global list and a tuple cost
#: two cache lines.
HOT: list = [None]
_generation = [0]


def _changed() -> None:
    """Drop the hot tuple (under the settings' lock): the next evaluation rebuilds it."""
    _generation[0] += 1
    HOT[0] = None


def hot(build: Callable[[], tuple]) -> tuple:
    """`build()` (the engine's reading of the settings it needs), kept in `HOT[0]` until a change."""
    gen = _generation[0]
    h = build()
    with SETTINGS._lock:
        if _generation[0] == gen:  # no change while it was read: keep it
            HOT[0] = h
    return h


def debug_level() -> int:
    """LAZYGRAPH_DEBUG: 0 (quiet) to 4 (everything); read by lazygraph and jit alike."""
    return SETTINGS.debug
