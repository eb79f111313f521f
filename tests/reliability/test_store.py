"""The disk store's policy and defences (issue 22, items 2 and 3).

Every store fault below ends the same way: the evaluation returns NumPy's values, and the
fault costs at most one warning. Faults of the whole store (not a directory, not writable,
full, failing, writable by others, owned by someone else) give exactly one CacheWarning and
leave this process caching in memory; faults of one entry (a link, a FIFO, a truncated,
oversized, deeply nested or edited file) drop that entry and rebuild it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import lazygraph as lg
from cache import disk
from jit import backend, compile_c, kernel
from jit import store as kstore
from lazygraph import __main__ as cli
from lazygraph.engine import ENGINE, region_check
from ops import storage

pytestmark = [
    pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler for fused kernels"),
    pytest.mark.host_backend,
]

N = 3000


def forget() -> None:
    """Drop this process's graphs and kernels, so the next evaluation reads the disk."""
    lg.cache.clear(disk=False)
    backend.get("cpu").drop_loaded()
    kernel._kernels.clear()
    ENGINE.regions.clear()


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh cache root (not created yet), with fused kernels on for small arrays."""
    r = tmp_path / "cache"
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(r))
    monkeypatch.setenv("LAZYGRAPH_JIT", "1")
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "0")
    for var in ("LAZYGRAPH_CACHE", "LAZYGRAPH_OPTIMIZE", "LAZYGRAPH_CACHE_LIMIT_MB", "LAZYGRAPH_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    forget()
    yield r
    forget()


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(N).astype(np.float32) for _ in range(3))  # type: ignore[return-value]


def check_fused(k: int = 0, seed: int = 0) -> None:
    """One fused evaluation (k+1 elementwise links) against NumPy, bit for bit.

    (x + y) * 2 - z and its longer forms: doubling is exact, so even a contracted
    multiply-add rounds as NumPy does; the values do not depend on other flags.
    """
    x, y, z = data(seed)
    got = (lg.asarray(x) + lg.asarray(y)) * 2.0 - lg.asarray(z)
    want = (x + y) * np.float32(2.0) - z
    for _ in range(k):
        got = got * 2.0 - lg.asarray(z)
        want = want * np.float32(2.0) - z
    np.testing.assert_array_equal(got.numpy(), want)


def entries(r: Path) -> tuple[list[Path], list[Path]]:
    """(graph entry files, compiled library files) under the root."""
    return sorted((r / "graphs").glob("*.lgc")), sorted((r / "jit" / "v1").glob("*.so"))


class Warned:
    """Collects CacheWarnings (every one, not once per place)."""

    def __enter__(self) -> Warned:
        self._cm = warnings.catch_warnings(record=True)
        self.all = self._cm.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)

    @property
    def cache(self) -> list[str]:
        return [str(w.message) for w in self.all if issubclass(w.category, storage.CacheWarning)]


def run_three(r: Path) -> list[str]:
    """Three fused evaluations, each compiling or loading its kernel anew; their warnings."""
    with Warned() as w:
        for seed in range(3):
            forget()
            check_fused(seed % 2, seed)
    return w.cache


# -- a store that cannot be used ----------------------------------------------------------------


def test_a_file_as_cache_dir_costs_one_warning_and_no_evaluation(root: Path) -> None:
    root.write_text("not a directory")
    msgs = run_three(root)
    assert len(msgs) == 1, msgs
    assert str(root) in msgs[0] and "LAZYGRAPH_CACHE_DIR" in msgs[0]
    assert lg.cache.usage()["refused"]
    assert root.read_text() == "not a directory"


def test_a_file_as_cache_dir_in_a_fresh_process(root: Path) -> None:
    """The issue's report: with the cache dir a file, 0 of 3 fused evaluations ran."""
    root.write_text("x")
    prog = (
        "import numpy as np, lazygraph as lg\n"
        "x = np.arange(3000, dtype=np.float32)\n"
        "for k in range(3):\n"
        "    got = ((lg.asarray(x) + k) * 2.0 - lg.asarray(x)).numpy()\n"
        "    assert np.array_equal(got, (x + np.float32(k)) * np.float32(2) - x)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert out.stderr.count("CacheWarning") == 1, out.stderr


@pytest.mark.parametrize(
    "err", [errno.EROFS, errno.ENOSPC, errno.EIO, errno.EACCES], ids=["read-only", "full", "eio", "denied"]
)
def test_failing_writes_cost_one_warning(root: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    def fail(path: object, data: bytes) -> None:
        raise OSError(err, os.strerror(err), str(path))

    monkeypatch.setattr(storage, "atomic_write", fail)
    monkeypatch.setattr(disk, "atomic_write", fail)
    msgs = run_three(root)
    assert len(msgs) == 1, msgs
    assert str(root) in msgs[0] and os.strerror(err) in msgs[0]
    if err == errno.ENOSPC:
        assert "LAZYGRAPH_CACHE_LIMIT_MB" in msgs[0]


def test_a_failing_disk_on_read_costs_one_warning(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check_fused()  # entries exist
    real = storage.read_entry

    def eio(path: Path, cap: int, touch: bool = False) -> bytes | None:
        if path.parent.name in ("graphs", "v1"):
            raise OSError(errno.EIO, "Input/output error", str(path))
        return real(path, cap, touch)

    monkeypatch.setattr(storage, "read_entry", eio)
    msgs = run_three(root)
    assert len(msgs) == 1 and "Input/output error" in msgs[0], msgs


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory modes")
def test_a_read_only_directory_costs_one_warning(root: Path) -> None:
    root.mkdir(mode=0o500)
    try:
        msgs = run_three(root)
    finally:
        root.chmod(0o700)
    assert len(msgs) == 1 and "chmod u+rwx" in msgs[0], msgs


# -- a store others could write ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["root", "graphs", "kernels"])
def test_a_store_writable_by_others_is_refused(root: Path, where: str) -> None:
    check_fused()  # a trusted store first: the entries are there
    target = {"root": root, "graphs": root / "graphs", "kernels": root / "jit" / "v1"}[where]
    target.chmod(0o777 if where == "root" else 0o775)
    before = [p.read_bytes() for p in sum(entries(root), [])]
    forget()
    msgs = run_three(root)
    assert len(msgs) == 1 and "writable by group or others" in msgs[0] and f"chmod 700 {target}" in msgs[0]
    assert lg.cache.stats()["disk_hits"] == 0
    assert [p.read_bytes() for p in sum(entries(root), [])] == before  # neither read nor rewritten


def test_a_store_of_another_owner_is_refused(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check_fused()
    forget()
    monkeypatch.setattr(storage, "expected_owner", lambda: os.geteuid() + 4242)
    msgs = run_three(root)
    assert len(msgs) == 1 and "owned by uid" in msgs[0], msgs
    assert lg.cache.stats()["disk_hits"] == 0


def test_an_entry_of_another_owner_or_writable_by_others_is_dropped(root: Path) -> None:
    check_fused()
    (graph,), (so,) = entries(root)
    graph.chmod(0o666)
    so.chmod(0o646)
    forget()
    with Warned() as w:
        check_fused()
    assert not w.cache
    assert lg.cache.stats()["corrupt_entries"] == 1
    (graph,), (so,) = entries(root)
    assert stat.S_IMODE(graph.stat().st_mode) == 0o600 and stat.S_IMODE(so.stat().st_mode) == 0o600


def test_directories_are_private_and_files_0600(root: Path) -> None:
    check_fused()
    for d in (root, root / "graphs", root / "jit", root / "jit" / "v1"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in sum(entries(root), []) + sorted((root / "jit" / "v1").glob("*.json")):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


# -- planted and swapped libraries ------------------------------------------------------------------


def plant(so: Path, marker: Path, update_record: bool) -> None:
    """Replace a stored library by one that writes `marker` when loaded (optionally fixing its record)."""
    src = so.with_name("planted.c")
    src.write_text(
        "#include <stdio.h>\n"
        f'__attribute__((constructor)) static void ran(void) {{ FILE *f = fopen("{marker}", "w");'
        ' if (f) { fputs("ran", f); fclose(f); } }\n'
        "void lg_kernel(void *a, void *b, void *c, void *d) { }\n"
    )
    out = so.with_name("planted.bin")
    cc = compile_c.toolchain()["cc"]
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(out)], check=True, timeout=120)
    src.unlink()
    data = out.read_bytes()
    out.unlink()
    so.write_bytes(data)
    if update_record:
        rec_path = so.with_suffix(".json")
        rec = json.loads(rec_path.read_text())
        rec.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        rec_path.write_text(json.dumps(rec, sort_keys=True))


def test_the_marker_library_runs_when_the_store_trusts_it(root: Path, tmp_path: Path) -> None:
    """Control: a planted library with a matching record in the user's own store is loaded.

    That is the trust boundary (whoever writes as the user runs code as the user); the tests
    below show that the same library is never loaded from a store others can write, nor when
    its record was not rewritten with it.
    """
    check_fused()
    marker = tmp_path / "ran"
    plant(entries(root)[1][0], marker, update_record=True)
    forget()
    x, y, z = data()
    ((lg.asarray(x) + lg.asarray(y)) * 2.0 - lg.asarray(z)).numpy()
    assert marker.exists()


def test_a_planted_library_in_a_world_writable_store_never_runs(root: Path, tmp_path: Path) -> None:
    check_fused()
    marker = tmp_path / "ran"
    plant(entries(root)[1][0], marker, update_record=True)
    root.chmod(0o777)
    forget()
    msgs = run_three(root)
    assert len(msgs) == 1 and "chmod 700" in msgs[0]
    assert not marker.exists()


def test_a_swapped_library_whose_record_was_not_rewritten_never_runs(root: Path, tmp_path: Path) -> None:
    check_fused()
    marker = tmp_path / "ran"
    so = entries(root)[1][0]
    good = so.read_bytes()
    plant(so, marker, update_record=False)
    forget()
    with Warned() as w:
        check_fused()
    assert not w.cache and not marker.exists()
    assert so.read_bytes() == good  # dropped and rebuilt


def test_libraries_are_loaded_from_the_verified_bytes(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's path is never given to the loader: what was hashed is what is mapped."""
    check_fused()
    loaded: list[str] = []
    real_cdll = kstore.ctypes.CDLL

    def spy(name: str, *a: object, **k: object) -> object:
        loaded.append(str(name))
        return real_cdll(name, *a, **k)

    monkeypatch.setattr(kstore.ctypes, "CDLL", spy)
    forget()
    check_fused()
    assert loaded and not any(str(root) in p for p in loaded), loaded


# -- damaged entries ----------------------------------------------------------------------------


def damage_and_rerun(root: Path, damage: object) -> None:
    check_fused()
    (graph,), (so,) = entries(root)
    record = so.with_suffix(".json")
    damage(graph, so, record)  # type: ignore[operator]
    forget()
    with Warned() as w:
        old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("reading an entry hung"))
        signal.alarm(60)
        try:
            check_fused()
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    assert not w.cache
    assert lg.cache.stats()["corrupt_entries"] == 1
    (graph,), (so,) = entries(root)
    for f in (graph, so, so.with_suffix(".json")):  # rebuilt as plain private files
        assert stat.S_ISREG(f.lstat().st_mode) and stat.S_IMODE(f.stat().st_mode) == 0o600


def _symlinks(graph: Path, so: Path, record: Path) -> None:
    elsewhere = so.parent.parent / "elsewhere.bin"  # the very bytes, but behind a link
    shutil.move(so, elsewhere)
    so.symlink_to(elsewhere)
    graph.unlink()
    graph.symlink_to("/dev/zero")


def _fifos(graph: Path, so: Path, record: Path) -> None:
    for f in (graph, record):
        f.unlink()
        os.mkfifo(f, 0o600)


def _truncated(graph: Path, so: Path, record: Path) -> None:
    for f in (graph, so):
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _oversized(graph: Path, so: Path, record: Path) -> None:
    for f, cap in ((graph, disk.ENTRY_CAP), (record, kstore.RECORD_CAP)):
        with open(f, "r+b") as fh:
            fh.truncate(cap + 1)  # sparse: the cap is checked before a byte is read


def _nested(graph: Path, so: Path, record: Path) -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    graph.write_bytes(
        disk.MAGIC + b" %d %s\n" % (len(deep), hashlib.sha256(deep).hexdigest().encode()) + deep
    )
    record.write_bytes(b'{"a":' * 50_000 + b"1" + b"}" * 50_000)


@pytest.mark.parametrize(
    "damage", [_symlinks, _fifos, _truncated, _oversized, _nested], ids=lambda f: f.__name__.strip("_")
)
def test_damaged_entries_are_dropped_and_rebuilt(root: Path, damage: object) -> None:
    damage_and_rerun(root, damage)


def edit_region(payload: dict) -> None:
    """Make a fused region compute something else, keeping its digest and names consistent."""
    (v,) = payload["variants"]
    regions = v["artifacts"]["jit_regions"]
    (sig, desc), *_ = regions.items()
    ops = [m["op"] for m in desc["members"]]
    k = ops.index("subtract")
    desc["members"][k]["op"] = "add"
    new = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:24]
    v["artifacts"]["jit_regions"] = {new: desc}
    for n in v["nodes"]:
        if n[0] == "new" and n[1]["ctor"] == "jit_region" and n[1]["data"]["region"] == sig:
            n[1]["data"]["region"] = new


def test_an_edited_kernel_description_is_dropped_not_run(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check_fused()
    (graph,), _ = entries(root)
    payload = disk.decode(graph.read_bytes())
    edit_region(payload)
    edited = disk.encode(payload)  # a valid checksum over the edited payload
    graph.write_bytes(edited)
    forget()
    check_fused()  # NumPy's values: the entry was dropped and rebuilt
    assert lg.cache.stats()["corrupt_entries"] == 1 and lg.cache.stats()["disk_hits"] == 0
    assert graph.read_bytes() != edited

    # control: without the check the edited entry loads and computes x + y + ... wrongly
    graph.write_bytes(edited)
    monkeypatch.setattr(region_check, "check_regions", lambda tg, tokens: None)
    forget()
    x, y, z = data()
    got = ((lg.asarray(x) + lg.asarray(y)) * 2.0 - lg.asarray(z)).numpy()
    assert lg.cache.stats()["disk_hits"] == 1
    assert not np.array_equal(got, (x + y) * np.float32(2.0) - z)


def test_an_edited_description_is_dropped_by_the_next_process(root: Path) -> None:
    check_fused()
    (graph,), _ = entries(root)
    payload = disk.decode(graph.read_bytes())
    edit_region(payload)
    graph.write_bytes(disk.encode(payload))
    prog = (
        "import numpy as np, lazygraph as lg\n"
        "from tests.reliability.test_store import check_fused\n"
        "check_fused()\n"
        "print(lg.cache.stats()['corrupt_entries'])\n"
    )
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and out.stdout.split()[-1] == "1", out.stderr


# -- one policy: where, how much, clear, stats, version -------------------------------------------


def test_the_limit_covers_kernels_least_recently_used_out(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_fused(0)
    so_bytes = entries(root)[1][0].stat().st_size
    limit = 4 * so_bytes  # room for about three kernels and their graphs
    monkeypatch.setenv("LAZYGRAPH_CACHE_LIMIT_MB", str(limit / 2**20))
    monkeypatch.setattr(ENGINE, "_disk", None)
    for k in range(1, 9):
        check_fused(k)
        assert storage.usage(root)["bytes"] <= limit
    use = storage.usage(root)
    assert 1 <= use["kernels"] < 9 and use["graphs"] < 9
    forget()
    check_fused(8)  # the newest survived
    assert lg.cache.stats()["disk_hits"] == 1
    forget()
    check_fused(1)  # an old one did not
    assert lg.cache.stats()["disk_hits"] == 0


def test_clear_and_stats_cover_kernels(root: Path, capsys: pytest.CaptureFixture) -> None:
    check_fused(0)
    check_fused(1)
    assert cli.main(["cache", "stats"]) == 0
    out = capsys.readouterr().out
    assert "compiled kernels: 2" in out and "limit" in out
    assert cli.main(["cache", "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kernels"] == 2
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 6 files" in capsys.readouterr().out  # 2 graphs, 2 libraries, 2 records
    assert entries(root) == ([], []) and not list((root / "jit").rglob("*.*"))
    forget()
    check_fused(0)
    assert lg.cache.clear() == 3 and entries(root) == ([], [])


def test_xdg_cache_home_holds_graphs_and_kernels(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAZYGRAPH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    check_fused()
    g, k = entries(tmp_path / "xdg" / "lazygraph")
    assert len(g) == 1 and len(k) == 1
    assert lg.cache.directory() == tmp_path / "xdg" / "lazygraph"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid by the specification: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert storage.cache_root() == tmp_path / "home" / ".cache" / "lazygraph"


def test_the_version_tag_covers_every_file_that_shapes_a_plan(tmp_path: Path) -> None:
    here = Path(storage.__file__).resolve().parent.parent
    base = tmp_path / "lib"
    for pkg in storage.TAG_PACKAGES:
        shutil.copytree(here / pkg, base / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.npz"))
    names = {f.relative_to(base).as_posix() for f in storage.tag_files(base)}
    assert {
        "lazygraph/engine/evaluate.py",
        "lazygraph/engine/lower_fusion.py",
        "optimizer/superopt/rules.json",
    } <= names
    assert {"ops/storage.py", "jit/render_c.py", "cache/tgraph.py", "optimizer/passes.py"} <= names
    tag = storage.version_tag(["v"], base)
    assert storage.version_tag(["v"], base) == tag
    assert storage.version_tag(["w"], base) != tag
    (base / "lazygraph" / "data").mkdir(exist_ok=True)
    (base / "lazygraph" / "data" / "extra.json").write_text("{}")  # datasets shape no plan
    (base / "jit" / "__pycache__").mkdir(exist_ok=True)
    (base / "jit" / "__pycache__" / "x.py").write_text("")
    assert storage.version_tag(["v"], base) == tag
    for f in ("lazygraph/engine/lower_fusion.py", "optimizer/superopt/rules.json"):
        p = base / f
        old = p.read_bytes()
        p.write_bytes(old.replace(b"{", b"{ ", 1) if f.endswith(".json") else old + b"\n# edited\n")
        assert storage.version_tag(["v"], base) != tag, f
        p.write_bytes(old)
    assert storage.version_tag(["v"], base) == tag
