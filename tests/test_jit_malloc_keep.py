"""The allocator policy fused kernels apply once per process (jit/malloc_keep.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np

import lazygraph as lg

SCRIPT = r"""
import ctypes.util, numpy as np
from jit import malloc_keep
first = malloc_keep.keep_freed_memory()
second = malloc_keep.keep_freed_memory()
print(first, second, bool(ctypes.util.find_library("c")))
"""


def run(env: dict[str, str]) -> list[str]:
    """The script's printed words in a fresh process (the policy is once per process)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_applied_once_and_switched_off_by_the_setting() -> None:
    first, second, libc = run({"LAZYGRAPH_MALLOC_KEEP": "1"})
    glibc = platform.libc_ver()[0] == "glibc"
    assert first == str(glibc and libc == "True") and second == "False"
    assert run({"LAZYGRAPH_MALLOC_KEEP": "0"})[:2] == ["False", "False"]


def test_multi_output_regions_reuse_memory_and_keep_values() -> None:
    """A region with two large outputs, evaluated repeatedly: the NumPy values every time."""
    x = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
    a = lg.asarray(x)
    for _ in range(3):
        d = a - a.mean(axis=1, keepdims=True)
        y, z = lg.eval(d / lg.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5), d * 2)
        dn = x - x.mean(axis=1, keepdims=True)
        np.testing.assert_allclose(
            y, dn / np.sqrt((dn * dn).mean(axis=1, keepdims=True) + 1e-5), rtol=2e-4, atol=2e-5
        )
        np.testing.assert_allclose(z, dn * 2, rtol=2e-4, atol=2e-5)
