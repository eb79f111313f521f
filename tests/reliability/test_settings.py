"""Bad settings are errors that name the variable and what it accepts (issue 22, item 3)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import __main__ as cli
from lazygraph import debug
from lazygraph.engine import ENGINE, memory
from ops import settings, storage
from ops.settings import SettingError
from optimizer.superopt import pass_ as superopt_pass

BAD = ["inf", "-inf", "nan", "0", "-5", "abc", "1e400", "5 MB"]


@pytest.fixture(autouse=True)
def clean(tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("LAZYGRAPH_CACHE", "LAZYGRAPH_CACHE_LIMIT_MB", "LAZYGRAPH_DEBUG", "LAZYGRAPH_JIT_MIN_SIZE"):
        monkeypatch.delenv(var, raising=False)
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


def evaluate() -> np.ndarray:
    """A fresh structure (a miss: the disk store is asked)."""
    x = np.arange(6.0)
    return (lg.tanh(lg.asarray(x)) * 3 + 1).numpy()


@pytest.mark.parametrize("value", BAD)
def test_bad_cache_limits_are_clear_errors(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LAZYGRAPH_CACHE_LIMIT_MB", value)
    with pytest.raises(SettingError) as e:
        evaluate()
    msg = str(e.value)
    assert "LAZYGRAPH_CACHE_LIMIT_MB" in msg and repr(value) in msg
    assert "a positive number of megabytes" in msg and "LAZYGRAPH_CACHE=memory" in msg
    assert isinstance(e.value, ValueError)


def test_good_cache_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, want in (("0.5", 2**19), ("300", 300 * 2**20), (" 2 ", 2 * 2**20), ("", 256 * 2**20)):
        monkeypatch.setenv("LAZYGRAPH_CACHE_LIMIT_MB", value)
        assert storage.limit_bytes() == want
    np.testing.assert_allclose(evaluate(), np.tanh(np.arange(6.0)) * 3 + 1)


def test_the_cli_reports_a_bad_limit(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("LAZYGRAPH_CACHE_LIMIT_MB", "inf")
    monkeypatch.setattr(ENGINE, "_disk", None)
    assert cli.main(["cache", "stats"]) == 2
    err = capsys.readouterr().err
    assert "LAZYGRAPH_CACHE_LIMIT_MB='inf' is not valid" in err


@pytest.mark.parametrize(
    ("name", "read", "bad", "good"),
    [
        ("LAZYGRAPH_DEBUG", debug.level, ["abc", "-1", "1.5", "9"], [("", 0), ("3", 3)]),
        (
            "LAZYGRAPH_JIT_MIN_SIZE",
            lambda: settings.SETTINGS.jit_min_size,
            ["abc", "-1", "1e3", "inf"],
            [("0", 0), ("100", 100)],
        ),
        (
            "LAZYGRAPH_SCHEDULE_BUDGET",
            memory.budget,
            ["inf", "nan", "-0.1", "soon"],
            [("0", 0.0), ("1.5", 1.5)],
        ),
        (
            "LAZYGRAPH_SUPEROPT_SECONDS",
            lambda: superopt_pass._settings()[0],
            ["inf", "-1", "x"],
            [("0.25", 0.25)],
        ),
        (
            "LAZYGRAPH_SUPEROPT_GRAPHS",
            lambda: superopt_pass._settings()[1],
            ["inf", "-3", "many"],
            [("7", 7)],
        ),
    ],
)
def test_numeric_settings_are_checked(monkeypatch, name, read, bad, good) -> None:  # noqa: ANN001
    for value in bad:
        monkeypatch.setenv(name, value)
        with pytest.raises(SettingError, match=f"{name}={value!r} is not valid: expected"):
            read()
    for value, want in good:
        monkeypatch.setenv(name, value)
        assert read() == want


def test_a_bad_setting_fails_the_evaluation_that_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "loud")
    with pytest.raises(SettingError, match="LAZYGRAPH_DEBUG='loud' is not valid: expected an integer 0-4"):
        evaluate()
    monkeypatch.delenv("LAZYGRAPH_DEBUG")
    np.testing.assert_allclose(evaluate(), np.tanh(np.arange(6.0)) * 3 + 1)  # nothing left behind


def test_the_helper_describes_its_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZYGRAPH_TEST_N", "0")
    with pytest.raises(SettingError, match=r"expected an integer > 0 and <= 10"):
        settings.number("LAZYGRAPH_TEST_N", 1, above=0, maximum=10, integer=True)
    monkeypatch.setenv("LAZYGRAPH_TEST_N", "2.5")
    assert settings.number("LAZYGRAPH_TEST_N", 1.0, minimum=0) == 2.5
    with pytest.raises(SettingError, match="expected an integer >= 0; off: 0"):
        settings.number("LAZYGRAPH_TEST_N", 1, minimum=0, integer=True, hint="off: 0")
    monkeypatch.delenv("LAZYGRAPH_TEST_N")
    assert settings.number("LAZYGRAPH_TEST_N", 7, minimum=0, integer=True) == 7


def test_a_fresh_process_with_an_infinite_limit_says_so(tmp_path) -> None:  # noqa: ANN001
    """The issue's report: `inf` raised OverflowError from deep inside the store."""
    env = {"LAZYGRAPH_CACHE_LIMIT_MB": "inf", "LAZYGRAPH_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    prog = "import lazygraph as lg, numpy as np\nprint((lg.asarray(np.ones(3)) * 2).sum().numpy())\n"
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode != 0
    assert "SettingError: LAZYGRAPH_CACHE_LIMIT_MB='inf' is not valid" in out.stderr
    assert "OverflowError" not in out.stderr
