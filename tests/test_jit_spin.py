"""The OpenMP wait defaults jit/compile_c.py sets before libgomp loads (docs/jit.md, "Row kernels")."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = (
    "import os, jit.compile_c; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"
)


def env_after_import(**set_vars: str) -> list[str]:
    """OMP_WAIT_POLICY and GOMP_SPINCOUNT as a fresh process sees them after importing the compiler module."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(set_vars)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_threads_spin_briefly_then_sleep_by_default() -> None:
    from jit import compile_c

    assert env_after_import() == ["passive", str(compile_c.SPIN_COUNT)]


def test_a_users_own_setting_wins() -> None:
    assert env_after_import(OMP_WAIT_POLICY="active") == ["active", "None"]
    assert env_after_import(GOMP_SPINCOUNT="0") == ["passive", "0"]
