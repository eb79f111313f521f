"""A miss asks the disk through the graphs directory's listing: no store checks, hash or open for
an entry that is not there; an entry written since (by this process or another) is still found.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import lazygraph as lg
from cache import disk
from cache.store import Entry
from lazygraph.engine import ENGINE
from ops import storage

# A fresh cache directory per test (conftest.py), with the cache fully on.
pytestmark = pytest.mark.usefixtures("cache_dir")


def program(k: int) -> np.ndarray:
    """A structure per k (k tanh steps)."""
    x = lg.positive(lg.asarray(np.arange(6.0)))
    for _ in range(k):
        x = lg.tanh(x) * 1.5
    return x.numpy()


def expected(k: int) -> np.ndarray:
    x = np.arange(6.0)
    for _ in range(k):
        x = np.tanh(x) * 1.5
    return x


def test_misses_in_a_store_without_the_entry_skip_the_store_checks(cache_dir, monkeypatch):
    np.testing.assert_allclose(program(1), expected(1))  # creates the store, writes one entry
    opened = []
    real = storage.open_dir
    monkeypatch.setattr(storage, "open_dir", lambda *a: (opened.append(a[1:]), real(*a))[1])
    for k in (2, 3, 4):
        np.testing.assert_allclose(program(k), expected(k))
    # the loads asked the listing; each miss's save still checks the store before it writes
    assert opened.count(("graphs",)) == 3, opened
    assert lg.cache.stats()["disk_hits"] == 0


def test_an_entry_written_since_the_listing_is_found(cache_dir):
    np.testing.assert_allclose(program(2), expected(2))
    store = ENGINE.disk_store()
    (entry,) = [e for e in ENGINE.memory.entries() if e.disk_hits == 0 and e.variants]
    text = entry.json
    path = store.path_for(text)
    data = path.read_bytes()
    path.unlink()  # as if another process had not written it yet
    assert store._absent(text)
    # another process writes it: the directory changes, the next look lists it again
    tmp = path.with_name(".other-process")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    assert not store._absent(text)
    lg.cache.clear(disk=False)
    np.testing.assert_allclose(program(2), expected(2))
    assert lg.cache.stats()["disk_hits"] == 1


def test_a_settled_listing_is_read_once_until_the_directory_changes(cache_dir, monkeypatch):
    np.testing.assert_allclose(program(1), expected(1))
    store = ENGINE.disk_store()
    graphs = store.graphs
    old = time.time_ns() - 10 * 10**9  # a directory last changed 10 s ago
    os.utime(graphs, ns=(old, old))
    reads = []
    real = os.listdir
    monkeypatch.setattr(disk.os, "listdir", lambda p: (reads.append(p), real(p))[1])
    text = Entry((1,), ((("<S>", "int"),), (0,))).json
    for _ in range(3):
        assert store._absent(text)
    assert len(reads) == 1
    (graphs / "x.tmp").write_bytes(b"")  # the directory changes: listed again
    assert store._absent(text)
    assert len(reads) == 2


def test_a_first_miss_in_a_fresh_store_leaves_the_source_hash_alone(cache_dir, monkeypatch):
    """The sources' hash (milliseconds) is computed when an entry is written, not to look one up."""
    monkeypatch.setattr(ENGINE, "_disk", None)
    monkeypatch.setattr(ENGINE, "_version", None)
    hashed = []
    real = storage.version_tag
    monkeypatch.setattr(storage, "version_tag", lambda *a: (hashed.append(1), real(*a))[1])
    store = ENGINE.disk_store()
    found, corrupt = store.load(
        (1,), ((("<S>", "int"),), (0,)), Entry((1,), ((("<S>", "int"),), (0,))).json, None
    )
    assert found is None and not corrupt and not hashed  # no graphs directory: nothing to read
    np.testing.assert_allclose(program(2), expected(2))  # the miss writes its entry: hashed once
    assert len(hashed) == 1 and ENGINE.disk_store().version.endswith(store.passes)
