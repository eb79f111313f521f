"""The on-disk store: format, corruption, versions, eviction, several processes, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import lazygraph as lg
from cache import disk
from lazygraph import __main__ as cli
from lazygraph.engine import ENGINE

# A fresh cache directory per test (conftest.py), with the cache fully on.
pytestmark = pytest.mark.usefixtures("cache_dir")


def lazy(a) -> lg.Array:
    """An unevaluated copy of a NumPy array."""
    return lg.positive(lg.asarray(np.asarray(a)))


def run_program(n: int = 4) -> np.ndarray:
    """A graph with a write, views and CSE; returns its value."""
    x = lazy(np.arange(float(n * 3)).reshape(n, 3))
    y = lg.tanh(x * 2) + lg.tanh(x * 2)
    y[0] = -1.0
    return (y[1:].sum(axis=0) * 1).numpy()


def expected(n: int = 4) -> np.ndarray:
    x = np.arange(float(n * 3)).reshape(n, 3)
    y = np.tanh(x * 2) * 2
    y[0] = -1.0
    return y[1:].sum(axis=0)


def entry_files(d: Path) -> list[Path]:
    return sorted((d / "graphs").glob("*.lgc"))


def corrupt_truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def corrupt_flip(data: bytes) -> bytes:
    return data[:-5] + bytes([data[-5] ^ 0x20]) + data[-4:]


def corrupt_header(data: bytes) -> bytes:
    return b"PK\x03\x04" + data[4:]


def corrupt_empty(data: bytes) -> bytes:
    return b""


def corrupt_schema(data: bytes) -> bytes:
    # a well-formed file (right checksum) whose transformation graph points nowhere
    payload = disk.decode(data)
    payload["variants"][0]["nodes"][0] = ["leaf", 10_000]
    return disk.encode(payload)


def corrupt_constructor(data: bytes) -> bytes:
    payload = disk.decode(data)
    payload["variants"][0]["nodes"].append(
        [
            "new",
            {
                "ctor": "__import__('os').system",
                "op": None,
                "attrs": {},
                "shape": ["const", []],
                "dtype": "<f8",
            },
            [],
        ]
    )
    return disk.encode(payload)


@pytest.mark.parametrize(
    "damage",
    [corrupt_truncate, corrupt_flip, corrupt_header, corrupt_empty, corrupt_schema, corrupt_constructor],
)
def test_corrupt_entries_are_reported_once_ignored_and_rewritten(damage, cache_dir, monkeypatch, capsys):
    np.testing.assert_allclose(run_program(), expected())
    (path,) = entry_files(cache_dir)
    good = path.read_bytes()
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "1")
    for _ in range(2):
        path.write_bytes(damage(good))
        lg.cache.clear(disk=False)  # the next evaluation must go to the disk
        np.testing.assert_allclose(run_program(), expected())
        assert lg.cache.stats()["corrupt_entries"] == 1
        assert disk.decode(path.read_bytes())["version"]  # rewritten whole
    err = capsys.readouterr().err
    assert err.count("ignoring corrupt entry") == 1, err  # reported once per file and process
    lg.cache.clear(disk=False)
    np.testing.assert_allclose(run_program(), expected())
    assert lg.cache.stats()["disk_hits"] == 1


def test_file_format_is_checksummed_json(cache_dir):
    run_program()
    (path,) = entry_files(cache_dir)
    data = path.read_bytes()
    head, _, body = data.partition(b"\n")
    magic, length, checksum = head.split(b" ")
    assert magic == b"LGC1" and int(length) == len(body)
    payload = json.loads(body)
    assert payload["format"] == disk.FORMAT and isinstance(payload["variants"], list)
    assert not list((cache_dir / "graphs").glob(".tmp-*"))  # written via a temporary file


def test_entries_of_another_library_version_are_never_read(cache_dir, monkeypatch):
    run_program()
    monkeypatch.setattr(ENGINE, "_version", "another-version")
    monkeypatch.setattr(ENGINE, "_disk", None)
    lg.cache.clear(disk=False)
    np.testing.assert_allclose(run_program(), expected())
    s = lg.cache.stats()
    assert s["disk_hits"] == 0 and s["misses"] == 1
    statuses = sorted(r["status"] for r in lg.cache.entries())
    assert statuses == ["current", "other version"]


def test_registering_a_pass_later_makes_a_new_version(cache_dir, monkeypatch):
    # the version is read on every miss, not frozen at the first one: entries built with
    # another set of passes must never be read back as if the passes had not changed
    from optimizer.registry import register_pass, unregister_pass

    run_program()
    first = ENGINE.disk_store().version
    register_pass("test_noop_pass", 1)(lambda g: False)
    try:
        assert ENGINE.disk_store().version != first
        lg.cache.clear(disk=False)
        np.testing.assert_allclose(run_program(), expected())
        assert lg.cache.stats()["disk_hits"] == 0
        assert sorted(r["status"] for r in lg.cache.entries()) == ["current", "other version"]
    finally:
        unregister_pass("test_noop_pass")
    assert ENGINE.disk_store().version == first


def test_least_recently_used_entries_are_evicted_past_the_limit(cache_dir, monkeypatch):
    monkeypatch.setenv("LAZYGRAPH_CACHE_LIMIT_MB", str(20000 / 2**20))
    monkeypatch.setattr(ENGINE, "_disk", None)
    for k in range(1, 25):  # 24 structures: elementwise chains of growing length
        y = lazy(np.arange(3.0))
        for _ in range(k):
            y = lg.tanh(y)
        y.numpy()
    files = [(p.stat().st_size, p) for p in entry_files(cache_dir)]
    assert sum(s for s, _ in files) <= 20000
    assert 2 <= len(files) < 24
    # the newest structure survived, the oldest did not
    lg.cache.clear(disk=False)
    y = lazy(np.arange(3.0))
    for _ in range(24):
        y = lg.tanh(y)
    y.numpy()
    assert lg.cache.stats()["disk_hits"] == 1
    lg.cache.clear(disk=False)
    lg.tanh(lazy(np.arange(3.0))).numpy()
    assert lg.cache.stats()["disk_hits"] == 0


WORKER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import lazygraph as lg
    rng = np.random.default_rng(int(sys.argv[1]))
    for step in range(40):
        k = step % 5
        n = int(rng.integers(2, 6))
        x = lg.positive(lg.asarray(rng.normal(size=(n, 3))))
        y = x
        for _ in range(k + 1):
            y = lg.tanh(y * 1.5) + x
        got = y.sum(axis=0).numpy()
        xn = np.asarray(x)
        ref = xn
        for _ in range(k + 1):
            ref = np.tanh(ref * 1.5) + xn
        assert np.allclose(got, ref.sum(axis=0), rtol=1e-12), (step, got, ref)
    print(json.dumps(lg.cache.stats(per_entry=False)))
    """
)


def test_several_processes_share_one_directory(cache_dir):
    env = dict(os.environ, LAZYGRAPH_CACHE_DIR=str(cache_dir))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(seed)], env=env, stdout=subprocess.PIPE, text=True
        )
        for seed in range(3)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    files = entry_files(cache_dir)
    assert len(files) == 5
    for f in files:
        disk.decode(f.read_bytes())  # every file is whole
    # a later run starts warm: everything comes from the disk
    out = subprocess.run(
        [sys.executable, "-c", WORKER, "7"], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert stats["misses"] == 0 and stats["disk_hits"] == 5 and stats["hits"] == 40, stats
    assert len(list((cache_dir / "runs").glob("run-*.json"))) == 4  # one log per process


# -- the command line -----------------------------------------------------------------------


def test_cli_stats_list_clear(cache_dir, capsys):
    for n in (3, 4, 5):
        run_program(n)
    ENGINE.save_run()
    assert cli.main(["cache", "stats"]) == 0
    out = capsys.readouterr().out
    assert "hit rate" in out and "66.7%" in out and "distinct graphs" in out
    assert cli.main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "current" in out and "1 entries" in out
    assert cli.main(["cache", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["status"] == "current" and rows[0]["p_nodes"] > 5
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 2 files" in capsys.readouterr().out  # the entry and the run log
    assert entry_files(cache_dir) == []


def test_cli_plot_writes_a_png_or_says_what_is_missing(cache_dir, tmp_path, capsys):
    for n in (3, 4):
        run_program(n)
    ENGINE.save_run()
    png = tmp_path / "cache.png"
    rc = cli.main(["cache", "plot", "-o", str(png)])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert rc == 2 and "needs matplotlib" in capsys.readouterr().err
    else:
        assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_runs_as_a_module(cache_dir):
    out = subprocess.run(
        [sys.executable, "-m", "lazygraph", "cache", "list"],
        env=dict(os.environ, LAZYGRAPH_CACHE_DIR=str(cache_dir)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "no entries" in out.stdout
