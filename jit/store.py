"""The on-disk store of compiled kernels: $LAZYGRAPH_CACHE_DIR/jit/v1 (default ~/.cache/lazygraph).

An entry is a binary (a shared library, PTX or a CUBIN) plus a JSON record naming the key
and the binary's SHA-256. The key hashes the kernel source, the compiler's identity and
version, the options and the architecture, so a new compiler or machine never reuses an old
binary. Nothing is unpickled: the record is JSON, and the binary is only used after its hash
matches the record; a missing, truncated or altered entry is ignored (and rebuilt by the
caller). Writes go to a temporary file first and are renamed into place (atomic). A compiled
library is native code by nature: whoever can write this directory can run code as the
user, as with any build cache, so it lives under the user's own cache directory.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ops.fileio import atomic_write

VERSION = 1


def root() -> Path:
    """Directory of the kernel store (created on first write)."""
    base = os.environ.get("LAZYGRAPH_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "lazygraph"
    )
    return Path(base) / "jit" / f"v{VERSION}"


def make_key(source: str, compiler: str, options: list[str], arch: str) -> str:
    """The content key of a compiled kernel."""
    h = hashlib.sha256()
    for part in (f"lazygraph-jit-v{VERSION}", source, compiler, "\0".join(options), arch):
        h.update(part.encode())
        h.update(b"\0\0")
    return h.hexdigest()


def put(key: str, ext: str, data: bytes, info: dict) -> Path:
    """Store a binary under `key`; returns the path of the stored binary."""
    d = root()
    binary = d / f"{key}.{ext}"
    record = {
        "version": VERSION,
        "key": key,
        "ext": ext,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "info": info,
    }
    atomic_write(binary, data)
    atomic_write(d / f"{key}.json", json.dumps(record, sort_keys=True).encode())
    return binary


def _load(key: str, ext: str) -> tuple[Path, bytes] | None:
    d = root()
    try:
        record = json.loads((d / f"{key}.json").read_text())
        data = (d / f"{key}.{ext}").read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("version") != VERSION or record.get("key") != key:
        return None
    if record.get("size") != len(data) or record.get("sha256") != hashlib.sha256(data).hexdigest():
        return None
    return d / f"{key}.{ext}", data


def get(key: str, ext: str) -> Path | None:
    """The verified binary stored under `key`, or None (missing or corrupt entries are ignored)."""
    hit = _load(key, ext)
    return None if hit is None else hit[0]


def read(key: str, ext: str) -> bytes | None:
    """The verified bytes stored under `key` (PTX, CUBIN), or None."""
    hit = _load(key, ext)
    return None if hit is None else hit[1]


def clear() -> int:
    """Remove every stored kernel; returns how many entries were removed."""
    d = root()
    n = 0
    if not d.exists():
        return 0
    for p in d.iterdir():
        if p.suffix == ".json":
            n += 1
        try:
            p.unlink()
        except OSError:
            pass
    return n
