"""The realistic NumPy programs of benchmarks/programs/ give NumPy's outputs when run on lazygraph.

Each program runs at its small size with NumPy and with lazygraph (nothing changed but the
namespace) and the outputs are compared as `benchmarks/programs/run.py` does. A program that
cannot run yet because lazygraph lacks a function is a strict xfail naming what is missing: once
the functions exist the test passes unexpectedly and fails the suite, so update MISSING then.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import warnings

import numpy
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lazygraph as lg  # noqa: E402
from benchmarks.programs import PROGRAMS, harness, load  # noqa: E402

# The NumPy functions each program still reaches only through lazygraph's NumPy fallback (run
# eagerly on evaluated arguments, with a warning). Exact: a function made lazy, or a new
# fallback, fails the test until this list says so.
FALLBACK: dict[str, set[str]] = {}
MISSING: dict[str, str] = {}  # programs that cannot run at all (none today)


def _param(name: str) -> object:
    if name in MISSING:
        reason = f"lazygraph lacks {MISSING[name]}"
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, raises=AttributeError, reason=reason))
    return name


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", [_param(n) for n in PROGRAMS])
def test_program_matches_numpy(name: str) -> None:
    """The program's outputs on lazygraph equal NumPy's; the NumPy fallbacks it takes are the listed ones."""
    from lazygraph import fallback

    module = load(name)
    expected = harness.to_numpy(numpy, module.run(numpy, "small"))
    fallback.reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", fallback.LazygraphFallbackWarning)
        actual = harness.to_numpy(lg, module.run(lg, "small"))
    problem = harness.compare(expected, actual)
    assert problem is None, f"{name}: {problem}"
    used = {
        m.group(1)
        for w in caught
        if issubclass(w.category, fallback.LazygraphFallbackWarning)
        and (m := re.search(r"call of (\S+)", str(w.message)))
    }
    assert used == FALLBACK.get(name, set()), f"{name}: NumPy fallbacks {sorted(used)}"


def test_every_program_module_is_listed() -> None:
    """Every program module in benchmarks/programs/ is in PROGRAMS, so none escapes the suite."""
    here = ROOT / "benchmarks" / "programs"
    modules = {p.stem for p in here.glob("*.py")} - {"__init__", "run", "harness", "probe"}
    assert modules == set(PROGRAMS)
    assert set(MISSING) <= set(PROGRAMS) and set(FALLBACK) <= set(PROGRAMS)


def test_missing_lists_name_what_the_static_scan_finds() -> None:
    """Every np.<name> chain lazygraph lacks is named in MISSING (the scan cannot see Array methods)."""
    for name in PROGRAMS:
        scanned = set(harness.missing_names(load(name), lg))
        listed = {s.strip() for s in MISSING.get(name, "").split(",") if s.strip()}
        assert scanned <= listed, f"{name}: lazygraph lacks {sorted(scanned - listed)} too"


def test_programs_match_numpy_past_their_missing_functions() -> None:
    """With NumPy stand-ins for what is missing (run.py --probe, own process), the rest matches NumPy."""
    script = ROOT / "benchmarks" / "programs" / "run.py"
    cmd = [sys.executable, str(script), "--quick", "--probe", "--repeats", "0"]
    # Values through the reference kernels: the compiled kernels of every program are checked
    # in-process above, and compiling them all again in this process (foreground compiles, as
    # the suite runs, into a cache directory another worker may have filled) took up to 35 s.
    env = {**os.environ, "LAZYGRAPH_JIT": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"result: programs_passing = {len(PROGRAMS)}" in done.stdout, done.stdout[-4000:]


def test_compare_checks_dtype_shape_and_values() -> None:
    """The comparison catches a wrong dtype, shape, value or a missing output, and allows rounding."""
    a = {"x": numpy.arange(3.0)}
    assert harness.compare(a, {"x": numpy.arange(3.0) * (1 + 1e-7)}) is None
    assert "dtype" in harness.compare(a, {"x": numpy.arange(3.0, dtype=numpy.float32)})
    assert "shape" in harness.compare(a, {"x": numpy.arange(4.0)})
    assert "differ" in harness.compare(a, {"x": numpy.arange(3.0) + 1e-3})
    assert "differ" in harness.compare({"i": numpy.arange(3)}, {"i": numpy.arange(3) + [0, 0, 1]})
    assert "missing" in harness.compare(a, {})
