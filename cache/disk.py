"""The on-disk store of transformation graphs: one file per structural key, shared safely by
several processes, under the cache root that ops/storage.py decides (with the kernels).

File format (nothing in it can execute code):

    LGC1 <payload length> <sha256 of payload>\\n<payload: UTF-8 JSON>

The payload holds the format number, the library version tag, the whole key (compared
with the live key on every load), the variants' transformation graphs and some counts.
File names hash the version tag with the key, so entries of another library version are
never read. Writes go to a temporary file in the same directory and are moved into place
with `os.replace`, so readers see a whole old file or a whole new one. A file is read once
from a descriptor opened without following links, after checking that it is a regular file
of this user that no one else can write, under a size cap (ops/storage.py). A short,
garbled, mismatching, undecodable or foreign file, or a payload outside the schema, is
reported once (through `report`), deleted, and rewritten by the next miss. Graph entries
and compiled kernels share one byte limit; least recently used files go first (a hit
refreshes the file's modification time). A store that cannot be used costs one warning;
the process then caches in memory only.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cache.recipe import RecipeError
from cache.store import Entry, digest_of
from cache.tgraph import TransformationGraph
from ops import storage
from ops.fileio import atomic_write

FORMAT = 2  # 2: multi-output steps ("out" nodes); entries of format 1 are ignored
MAGIC = b"LGC1"
SUFFIX = storage.GRAPH_SUFFIX
DEFAULT_LIMIT = storage.DEFAULT_LIMIT_MB * 2**20
ENTRY_CAP = 256 * 2**20  # one entry may not claim more memory than this when read
RUN_LOGS_KEPT = 20
_PAYLOAD_KEYS = {"format", "version", "key", "created", "meta", "variants"}
_VARIANT_KEYS = {"nodes", "order", "pmap", "guards", "passes", "p_size", "artifacts"}


class CorruptEntry(ValueError):
    """A cache file that is truncated, garbled or does not match its key."""


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
    except RecursionError:
        raise CorruptEntry("JSON nested too deeply") from None
    if not isinstance(payload, dict):
        raise CorruptEntry("payload is not an object")
    return payload


def check_schema(payload: dict) -> None:
    """Raise CorruptEntry unless the payload has exactly the fields, types and ranges we write.

    Transformation graphs are checked further as they are decoded (`TransformationGraph.from_json`)
    and as the engine builds them.
    """
    if set(payload) != _PAYLOAD_KEYS:
        raise CorruptEntry(f"payload fields {sorted(payload)} are not {sorted(_PAYLOAD_KEYS)}")
    if type(payload["format"]) is not int or not isinstance(payload["version"], str):
        raise CorruptEntry("bad format or version field")
    if not isinstance(payload["created"], (int, float)) or not isinstance(payload["meta"], dict):
        raise CorruptEntry("bad created or meta field")
    variants = payload["variants"]
    if not isinstance(variants, list) or not 1 <= len(variants) <= 64:
        raise CorruptEntry("variants must be a list of 1 to 64 transformation graphs")
    for v in variants:
        if not isinstance(v, dict) or set(v) != _VARIANT_KEYS:
            raise CorruptEntry("a variant does not have the transformation graph's fields")
        if type(v["p_size"]) is not int or not isinstance(v["artifacts"], dict):
            raise CorruptEntry("bad p_size or artifacts")
        for name in ("nodes", "order", "pmap", "guards", "passes"):
            if not isinstance(v[name], list):
                raise CorruptEntry(f"{name} is not a list")
        if not all(type(i) is int for i in v["order"]) or not all(type(i) is int for i in v["pmap"]):
            raise CorruptEntry("order and pmap must hold integers")
        if not all(isinstance(n, list) and n for n in v["nodes"]):
            raise CorruptEntry("a node is not a non-empty list")
        if not all(isinstance(p, str) for p in v["passes"]):
            raise CorruptEntry("passes must be names")


class DiskStore:
    """Entries under `root/graphs`, run logs under `root/runs` (kernels: jit/store.py)."""

    def __init__(
        self,
        root: Path,
        version: str | Callable[[], str],
        limit: int = DEFAULT_LIMIT,
        report: Callable | None = None,
    ):
        self.root = Path(root)
        self.graphs = self.root / storage.GRAPHS
        self.runs = self.root / storage.RUNS
        # the library version tag, or what computes it on first use (hashing the sources costs
        # milliseconds: a miss in a store that lists no entry never needs it)
        self._version = version
        self.passes: str | None = None  # the engine's pass fingerprint in the tag (engine/state.py)
        self.limit = limit  # bytes, shared with the compiled kernels under the same root
        self.report = report or (lambda msg: None)
        self._reported: set[str] = set()
        #: the graphs directory's entry names and the stamp of the directory they were read at
        #: (None: read them again at the next look); see `_absent`
        self._names: frozenset[str] = frozenset()
        self._stamp: tuple | None = None

    @property
    def version(self) -> str:
        """The library version tag that entries are written and read under."""
        v = self._version
        if not isinstance(v, str):
            v = self._version = v()
        return v

    def path_for(self, text: str) -> Path:
        """The file of a key (as JSON) in this library version."""
        return self.graphs / (digest_of(self.version + "\n" + text) + SUFFIX)

    def _corrupt(self, path: Path, why: str) -> None:
        if str(path) not in self._reported:
            self._reported.add(str(path))
            self.report(f"cache: ignoring corrupt entry {path.name} ({why}); it will be rewritten")

    def load(
        self, key: tuple, skey: tuple, text: str, build: Callable[[TransformationGraph], Any]
    ) -> tuple[Entry | None, bool]:
        """The stored entry for this key (flat, structural, JSON), and whether a file was corrupt.

        `build` turns each decoded transformation graph into the engine's program; it raises
        RecipeError for what it cannot trust (an unknown constructor, a description that does
        not fit the key), and the file is then dropped like any corrupt one.
        """
        if self._absent(text):
            return None, False
        if storage.open_dir(self.root, storage.GRAPHS) is None:
            return None, False
        path = self.path_for(text)
        try:
            data = storage.read_entry(path, ENTRY_CAP)
        except storage.BadEntry as e:
            self._drop(path, str(e))
            return None, True
        except OSError as e:
            storage.failed(self.root, e, "reading a cached graph")
            return None, False
        if data is None:
            return None, False
        try:
            payload = decode(data)
            if payload.get("format") != FORMAT or payload.get("version") != self.version:
                return None, False  # another library version (or a forced hash collision)
            check_schema(payload)
            if json.dumps(payload["key"], separators=(",", ":")) != text:
                return None, False  # same file name, different key: a hash collision
            entry = Entry(key, skey, text)
            for v in reversed(payload["variants"]):
                tg = TransformationGraph.from_json(v, skey[0])
                entry.add(tg, build(tg))
            if not entry.variants:
                raise CorruptEntry("no variants")
        except (CorruptEntry, RecipeError, RecursionError) as e:
            self._drop(path, str(e) or type(e).__name__)
            return None, True
        except Exception as e:  # whatever a damaged entry provokes, it is never fatal
            self._drop(path, f"{type(e).__name__}: {e}")
            return None, True
        try:
            os.utime(path)  # least recently used eviction reads modification times
        except OSError:
            pass
        return entry, False

    def _absent(self, text: str) -> bool:
        """Whether the graphs directory surely holds no entry for this key (JSON `text`).

        A miss asks the disk first; in a fresh or small store the answer is mostly no, and
        asking costs the store's checks (`storage.open_dir`: about 15 system calls), the file
        name's SHA-256 and a failed open: 2-3 ms a miss on a busy machine, 4 misses in heat's
        first call. The directory's listing answers instead: re-read when the directory
        changed (a file moved in or deleted changes its modification time), and re-read on
        every look while that time is recent (a coarse clock could hide a change made in the
        same tick). False when unsure (no directory yet: the full path creates it and checks
        it); a file that is listed goes through every check as before.
        """
        try:
            st = os.stat(self.graphs)
        except FileNotFoundError:
            return True  # no entry was ever written here (the first save creates it, checked)
        except OSError:
            return False
        try:
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                names = frozenset(os.listdir(self.graphs))
                settled = time.time_ns() - st.st_mtime_ns > 2_000_000_000
                self._names, self._stamp = names, stamp if settled else None
        except OSError:
            return False
        names = self._names
        return not names or self.path_for(text).name not in names

    def _drop(self, path: Path, why: str) -> None:
        self._corrupt(path, why)
        storage.discard(path)

    def save(self, entry: Entry, meta: dict[str, Any]) -> None:
        """Write the entry (all its variants) atomically; evict past the shared limit."""
        payload = {
            "format": FORMAT,
            "version": self.version,
            "key": entry.skey,
            "created": entry.created,
            "meta": meta,
            "variants": [v.tgraph.to_json() for v in entry.variants],
        }
        data = encode(payload)
        if storage.open_dir(self.root, storage.GRAPHS) is None:
            return
        try:
            atomic_write(self.path_for(entry.json), data)
        except OSError as e:
            storage.failed(self.root, e, "writing a cached graph")
            return
        storage.note_write(self.root, len(data), self.limit)

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
                    st = d.stat(follow_symlinks=False)
                except OSError:
                    continue
                out.append((Path(d.path), st.st_size, st.st_mtime))
        return out

    def evict(self) -> int:
        """Delete least recently used graphs and kernels until under 80% of the limit; returns how many."""
        return storage.evict(self.root, self.limit)

    def usage(self) -> dict:
        """Entries and bytes of graphs and kernels under this root (`cache stats`)."""
        return storage.usage(self.root)

    def listing(self) -> list[dict]:
        """Every entry file, decoded when possible (for `python -m lazygraph cache list`)."""
        rows = []
        for path, size, mtime in sorted(self.files(), key=lambda f: -f[2]):
            row: dict[str, Any] = {"file": path.name, "bytes": size, "last_used": mtime}
            try:
                data = storage.read_entry(path, ENTRY_CAP)
                if data is None:
                    continue
                payload = decode(data)
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
            except (
                OSError,
                ValueError,
                KeyError,
                TypeError,
                IndexError,
                AttributeError,
                RecursionError,
            ) as e:
                row.update(status=f"corrupt ({e})")
            rows.append(row)
        return rows

    def clear(self) -> int:
        """Delete every graph entry, run log and compiled kernel; returns how many files."""
        return storage.clear(self.root)

    # -- run logs: what `python -m lazygraph cache stats|plot` shows about past runs ---------

    def save_run(self, record: dict) -> Path | None:
        """Write one process's statistics and history; keep the newest few logs."""
        if storage.open_dir(self.root, storage.RUNS) is None:
            return None
        try:
            name = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
            path = self.runs / name
            atomic_write(path, json.dumps(record, separators=(",", ":")).encode())
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
                data = storage.read_entry(p, ENTRY_CAP)
                record = json.loads(data) if data is not None else None
            except (OSError, ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                record["file"] = str(p)
                return record
        return None
