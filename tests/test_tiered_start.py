"""The background worker's thread starts at import when the worker is on (not in the first call)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = (
    "import sys, threading, lazygraph\n"
    "from jit import background\n"
    "names = sorted(t.name for t in threading.enumerate())\n"
    "x = lazygraph.asarray([1.0, 2.0]) * 3 + 1\n"
    "assert x.numpy().tolist() == [4.0, 7.0]\n"
    "print(background.threads(), 'jit.backend.cpu' in sys.modules, names)\n"
)


@pytest.mark.parametrize("on", ["1", "0"])
def test_worker_starts_at_import_when_on(on, tmp_path):
    env = {**os.environ, "LAZYGRAPH_JIT_BACKGROUND": on, "LAZYGRAPH_CACHE_DIR": str(tmp_path)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    threads, backend, names = out.stdout.split(" ", 2)
    assert backend == "True"  # the CPU backend is built at import too
    if on == "1":
        assert threads == "1" and "lazygraph-background" in names
    else:
        assert "lazygraph-background" not in names
