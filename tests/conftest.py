"""Test configuration: hypothesis profiles, the cuda marker's skip, shared cache fixtures."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from ops.settings import SETTINGS

# "ci" keeps the README's test command well under 15 minutes on 2 cores; "thorough" is
# the long fuzzing run (LAZYGRAPH_HYPOTHESIS_PROFILE=thorough) done before resolving.
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("LAZYGRAPH_HYPOTHESIS_PROFILE", "ci"))

# The suite's cache entries go to a private directory, not the user's cache (unless asked).
if "LAZYGRAPH_CACHE_DIR" not in os.environ:
    os.environ["LAZYGRAPH_CACHE_DIR"] = _dir = tempfile.mkdtemp(prefix="lazygraph-test-cache-")
    atexit.register(shutil.rmtree, _dir, ignore_errors=True)


# Tiered compilation (a time-boxed miss finished by a background thread, kernels compiled in
# the background) makes what a given evaluation runs depend on timing; the suite checks what
# each tier does deterministically, so it runs with both off unless asked (tests/test_tiered.py
# turns them on).
os.environ.setdefault("LAZYGRAPH_JIT_BACKGROUND", "0")
os.environ.setdefault("LAZYGRAPH_OPTIMIZE_BUDGET_MS", "0")


# lazygraph reads its settings once (ops/settings.py) and re-reads the environment when told
# to. Tests change LAZYGRAPH_* variables through monkeypatch (and its undo), so those calls
# tell it, as a user changing os.environ in-process would call `lg.settings.reload()`.
def _reloading(method):
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        finally:
            SETTINGS.reload()

    return wrapper


for _name in ("setenv", "delenv", "undo"):
    setattr(pytest.MonkeyPatch, _name, _reloading(getattr(pytest.MonkeyPatch, _name)))


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Each test starts from the environment's settings (an earlier test's changes are gone)."""
    SETTINGS.reload()
    yield
    SETTINGS.reload()


@pytest.fixture(autouse=True)
def _host_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests marked `host_backend` check the CPU backend's own machinery (its C launcher, its
    in-place writes, its bit-for-bit agreement with NumPy's loops): under LAZYGRAPH_DEVICE=cuda
    (the whole suite on a GPU) they still run, on the CPU device they are about."""
    if request.node.get_closest_marker("host_backend") is not None:
        monkeypatch.delenv("LAZYGRAPH_DEVICE", raising=False)
    yield


@pytest.fixture
def memory_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An in-process cache, no background tiers, no templates from earlier tests."""
    # Imported here: lazygraph is first imported after the environment above is set.
    import lazygraph as lg
    from cache import template

    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    lg.cache.clear(disk=False)
    template.clear()
    yield
    template.clear()


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh cache directory per test, with the cache fully on."""
    import lazygraph as lg

    d = tmp_path / "cache"
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(d))
    for var in ("LAZYGRAPH_CACHE", "LAZYGRAPH_OPTIMIZE", "LAZYGRAPH_CACHE_LIMIT_MB", "LAZYGRAPH_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    # Without the JIT, entry sizes are those of the built-in passes (tests/test_cache_disk.py).
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    lg.cache.clear(disk=False)
    yield d
    lg.cache.clear(disk=False)


def _have_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip cuda-marked tests cleanly on machines without a GPU."""
    if any("cuda" in item.keywords for item in items) and not _have_gpu():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(skip)
