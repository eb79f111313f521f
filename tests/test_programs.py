"""The realistic NumPy programs of benchmarks/programs/ give NumPy's outputs when run on lazygraph.

Each program runs at its small size with NumPy and with lazygraph (nothing changed but the
namespace) and the outputs are compared as `benchmarks/programs/run.py` does. A program that
cannot run yet because lazygraph lacks a function is a strict xfail naming what is missing: once
the functions exist the test passes unexpectedly and fails the suite, so update MISSING then.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lazygraph as lg  # noqa: E402
from benchmarks.programs import PROGRAMS, harness, load  # noqa: E402

# What each program needs that lazygraph does not have (the names `run.py` lists for it).
MISSING: dict[str, str] = {
    "heat": "np.unravel_index",
    "pca": "np.linalg.eigh, np.linalg.svd, np.argsort",
    "nbody": "np.fill_diagonal, np.triu_indices",
    "montecarlo": "np.percentile",
    "filters": "np.median",
    "histogram": "np.histogram, np.bincount",
    "running_stats": "np.insert, np.maximum.accumulate",
    "scatter_add": "np.add.at, np.maximum.at",
    "groupby": "np.unique, np.bincount, np.argsort, np.maximum.reduceat",
    "polyfit": "np.polyfit, np.linalg.lstsq, np.linalg.solve",
    "int_overflow": "np.fmod, np.bitwise_xor.reduce",
    "jacobi": "np.diagflat, np.linalg.norm",
    "pagerank": "np.argsort",
    "knn": "np.argpartition, np.argsort, np.sort",
    "mandelbrot": "Array.real",
    "spectral": "np.fft.rfft, np.fft.irfft, np.fft.rfftfreq, np.hanning, np.median",
}


def _param(name: str) -> object:
    if name in MISSING:
        reason = f"lazygraph lacks {MISSING[name]}"
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, raises=AttributeError, reason=reason))
    return name


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", [_param(n) for n in PROGRAMS])
def test_program_matches_numpy(name: str) -> None:
    """The program's outputs on lazygraph equal NumPy's (shapes, dtypes, values within tolerance)."""
    module = load(name)
    expected = harness.to_numpy(numpy, module.run(numpy, "small"))
    actual = harness.to_numpy(lg, module.run(lg, "small"))
    problem = harness.compare(expected, actual)
    assert problem is None, f"{name}: {problem}"


def test_every_program_module_is_listed() -> None:
    """Every program module in benchmarks/programs/ is in PROGRAMS, so none escapes the suite."""
    here = ROOT / "benchmarks" / "programs"
    modules = {p.stem for p in here.glob("*.py")} - {"__init__", "run", "harness", "probe"}
    assert modules == set(PROGRAMS)
    assert set(MISSING) <= set(PROGRAMS)


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
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
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
