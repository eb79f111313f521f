"""The on-disk store: one file per structural key, shared safely by several processes.

File format (nothing in it can execute code):

    LGC1 <payload length> <sha256 of payload>\\n<payload: UTF-8 JSON>

The payload holds the format number, the library version tag, the whole key (compared
with the live key on every load), the variants' transformation graphs and some counts.
File names hash the version tag with the key, so entries of another library version are
never read. Writes go to a temporary file in the same directory and are moved into place
with `os.replace`, so readers see a whole old file or a whole new one. A short, garbled,
mismatching or undecodable file is reported once (through `report`), ignored, and rewritten
by the next miss. The directory has a byte limit; least recently used files go first
(a hit refreshes the file's modification time).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cache.plan import TransformationGraph
from cache.recipe import RecipeError
from cache.store import Entry, digest_of
from ops.fileio import atomic_write

FORMAT = 1
MAGIC = b"LGC1"
SUFFIX = ".lgc"
DEFAULT_LIMIT = 256 * 1024 * 1024
RUN_LOGS_KEPT = 20


class CorruptEntry(ValueError):
    """A cache file that is truncated, garbled or does not match its key."""


def default_dir() -> Path:
    """$LAZYGRAPH_CACHE_DIR, else lazygraph/ under the user's cache directory."""
    env = os.environ.get("LAZYGRAPH_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lazygraph"


def version_tag(parts: list[str], dirs: list[Path]) -> str:
    """A tag that changes with the library: given version strings plus the sources' bytes."""
    h = hashlib.sha256(f"format {FORMAT}\n".encode())
    for p in parts:
        h.update(p.encode() + b"\n")
    for d in dirs:
        for f in sorted(d.rglob("*.py")):
            h.update(str(f.relative_to(d)).encode() + b"\0")
            try:
                h.update(f.read_bytes())
            except OSError:
                pass
    return h.hexdigest()[:16]


def encode(payload: dict) -> bytes:
    """Header + JSON payload."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    return MAGIC + b" %d %s\n" % (len(body), hashlib.sha256(body).hexdigest().encode()) + body


def decode(data: bytes) -> dict:
    """Verify header, length and checksum; parse the JSON payload."""
    head, sep, body = data.partition(b"\n")
    parts = head.split(b" ")
    if not sep or len(parts) != 3 or parts[0] != MAGIC:
        raise CorruptEntry("bad header")
    try:
        length = int(parts[1])
    except ValueError:
        raise CorruptEntry("bad length") from None
    if len(body) != length:
        raise CorruptEntry(f"truncated: {len(body)} of {length} bytes")
    if hashlib.sha256(body).hexdigest().encode() != parts[2]:
        raise CorruptEntry("checksum mismatch")
    try:
        payload = json.loads(body)
    except ValueError as e:
        raise CorruptEntry(f"bad JSON: {e}") from None
    if not isinstance(payload, dict):
        raise CorruptEntry("payload is not an object")
    return payload


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and os.replace."""
    atomic_write(path, data)


class DiskStore:
    """Entries under `root/graphs`, run logs under `root/runs`."""

    def __init__(self, root: Path, version: str, limit: int = DEFAULT_LIMIT, report: Callable | None = None):
        self.root = Path(root)
        self.graphs = self.root / "graphs"
        self.runs = self.root / "runs"
        self.version = version
        self.limit = limit
        self.report = report or (lambda msg: None)
        self._reported: set[str] = set()
        self._approx_bytes: int | None = None
        self._writes_since_scan = 0

    def path_for(self, text: str) -> Path:
        """The file of a key (as JSON) in this library version."""
        return self.graphs / (digest_of(self.version + "\n" + text) + SUFFIX)

    def _corrupt(self, path: Path, why: str) -> None:
        if str(path) not in self._reported:
            self._reported.add(str(path))
            self.report(f"cache: ignoring corrupt entry {path.name} ({why}); it will be rewritten")

    def load(self, key: tuple, skey: tuple, text: str) -> tuple[Entry | None, bool]:
        """The stored entry for this key (flat, structural, JSON), and whether a file was corrupt."""
        path = self.path_for(text)
        try:
            data = path.read_bytes()
        except OSError:
            return None, False
        try:
            payload = decode(data)
            if payload.get("format") != FORMAT or payload.get("version") != self.version:
                return None, False  # another library version (or a forced hash collision)
            if json.dumps(payload.get("key"), separators=(",", ":")) != text:
                return None, False  # same file name, different key: a hash collision
            entry = Entry(key, skey, text)
            for v in reversed(payload["variants"]):
                entry.add(TransformationGraph.from_json(v, skey[0]))
            if not entry.variants:
                raise CorruptEntry("no variants")
        except (CorruptEntry, RecipeError, KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            self._corrupt(path, str(e) or type(e).__name__)
            return None, True
        try:
            os.utime(path)  # least recently used eviction reads modification times
        except OSError:
            pass
        return entry, False

    def save(self, entry: Entry, meta: dict[str, Any]) -> None:
        """Write the entry (all its variants) atomically; evict if over the limit."""
        payload = {
            "format": FORMAT,
            "version": self.version,
            "key": entry.skey,
            "created": entry.created,
            "meta": meta,
            "variants": [p.tgraph.to_json() for p in entry.variants],
        }
        data = encode(payload)
        path = self.path_for(entry.json)
        try:
            self.graphs.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
        except OSError as e:
            self._corrupt(path, f"cannot write: {e}")
            return
        self._writes_since_scan += 1
        if self._approx_bytes is not None:
            self._approx_bytes += len(data)
        if self._approx_bytes is None or self._approx_bytes > self.limit or self._writes_since_scan >= 100:
            self.evict()

    def files(self) -> list[tuple[Path, int, float]]:
        """(path, bytes, mtime) of every entry file."""
        out = []
        try:
            it = list(os.scandir(self.graphs))
        except OSError:
            return out
        for d in it:
            if d.name.endswith(SUFFIX) and not d.name.startswith("."):
                try:
                    st = d.stat()
                except OSError:
                    continue
                out.append((Path(d.path), st.st_size, st.st_mtime))
        return out

    def evict(self) -> int:
        """Delete least recently used files until under 80% of the limit; returns how many."""
        files = self.files()
        total = sum(s for _, s, _ in files)
        self._writes_since_scan = 0
        removed = 0
        if total > self.limit:
            for path, size, _ in sorted(files, key=lambda f: f[2]):
                if total <= 0.8 * self.limit:
                    break
                try:
                    path.unlink()
                except OSError:
                    continue
                total -= size
                removed += 1
        self._sweep_temporaries()
        self._approx_bytes = total
        return removed

    def _sweep_temporaries(self) -> None:
        # Temporary files of writers that died mid-write; an hour is far longer than a write.
        now = time.time()
        try:
            for d in os.scandir(self.graphs):
                if d.name.startswith(".tmp-") and now - d.stat().st_mtime > 3600:
                    os.unlink(d.path)
        except OSError:
            pass

    def listing(self) -> list[dict]:
        """Every entry file, decoded when possible (for `python -m lazygraph cache list`)."""
        rows = []
        for path, size, mtime in sorted(self.files(), key=lambda f: -f[2]):
            row: dict[str, Any] = {"file": path.name, "bytes": size, "last_used": mtime}
            try:
                payload = decode(path.read_bytes())
                variants = payload["variants"]
                first = variants[0] if variants else {}
                row.update(
                    status="current" if payload.get("version") == self.version else "other version",
                    key=digest_of(json.dumps(payload["key"], separators=(",", ":")))[:12],
                    p_nodes=len(payload["key"][0]),
                    q_nodes=len(first.get("nodes", ())),
                    variants=len(variants),
                    passes=first.get("passes", []),
                    created=payload.get("created"),
                    optimize_seconds=payload.get("meta", {}).get("optimize_seconds"),
                )
            except (OSError, CorruptEntry, KeyError, TypeError, IndexError, AttributeError) as e:
                row.update(status=f"corrupt ({e})")
            rows.append(row)
        return rows

    def clear(self) -> int:
        """Delete every entry file, temporary file and run log; returns how many files."""
        n = 0
        for d in (self.graphs, self.runs):
            try:
                names = list(os.scandir(d))
            except OSError:
                continue
            for f in names:
                if f.is_file():
                    try:
                        os.unlink(f.path)
                        n += 1
                    except OSError:
                        pass
        self._approx_bytes = 0
        return n

    # -- run logs: what `python -m lazygraph cache stats|plot` shows about past runs ---------

    def save_run(self, record: dict) -> Path | None:
        """Write one process's statistics and history; keep the newest few logs."""
        try:
            self.runs.mkdir(parents=True, exist_ok=True)
            name = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
            path = self.runs / name
            write_atomic(path, json.dumps(record, separators=(",", ":")).encode())
            logs = sorted(self.runs.glob("run-*.json"), key=lambda p: p.stat().st_mtime)
            for old in logs[:-RUN_LOGS_KEPT]:
                old.unlink()
            return path
        except OSError:
            return None

    def latest_run(self) -> dict | None:
        """The newest readable run log."""
        try:
            logs = sorted(self.runs.glob("run-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            return None
        for p in logs:
            try:
                record = json.loads(p.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict):
                record["file"] = str(p)
                return record
        return None
