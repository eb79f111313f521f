"""The element extension's compile waits for the program to pause but still gets built (empty cache)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend


def test_fresh_cache_builds_after_idle(tmp_path: Path) -> None:
    code = (
        "import numpy as np, lazygraph as lg\n"
        "from lazygraph import element_ext\n"
        "a = lg.asarray(np.arange(6.0))\n"
        "a[2] = 7.0\n"  # the first direct write asks for the build
        "assert element_ext.prepare(), element_ext.status()\n"
        "b = lg.asarray(np.arange(6.0))\n"
        "b[3] = 5.0\n"
        "assert float(b[3]) == 5.0 and float(a[2]) == 7.0\n"
        "ref = np.arange(6.0); ref[3] = 5.0\n"
        "assert np.array_equal(np.asarray(b.numpy()), ref)\n"
        "print(element_ext.status())\n"
    )
    env = {**os.environ, "LAZYGRAPH_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    status = out.stdout.strip()
    assert status == "extension" or status.startswith("python (no "), status
    if status == "extension":
        assert any(tmp_path.rglob("*.bin"))
