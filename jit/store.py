"""The on-disk store of compiled kernels: jit/v1 under the cache root (ops/storage.py).

An entry is a binary (a shared library, PTX or a CUBIN) plus a JSON record naming the key
and the binary's SHA-256. The key hashes the kernel source, the compiler's identity and
version, the options and the architecture, so a new compiler or machine never reuses an old
binary. Nothing is unpickled: the record is JSON checked against a fixed schema, and the
binary is used only when its hash matches the record. Both files are read once each from a
descriptor opened without following links, after checking that it is a regular file owned
by the user, writable by no one else and under a size cap (ops/storage.py). A compiled
library is loaded from a private copy of the very bytes that were hashed (`load_library`),
never from the store's path, so a file swapped in after the check is never run. Any entry
that fails a check is deleted and rebuilt by the caller. A kernel compiled in a batch
(jit/compile_c.py) is stored under its own key with its batch's library, the record's `info`
naming its entry (`read_info`). A store that cannot be used
(`storage.open_dir` refuses it with one warning) leaves kernels in memory only.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import itertools
import json
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

from ops import storage

VERSION = 1
EXTS = ("so", "ptx", "cubin", "tc")  # tc: the C toolchain probe (jit/compile_c.py)
BINARY_CAP = 512 * 2**20  # far above any generated kernel; bounds what one read may allocate
RECORD_CAP = 64 * 2**10
_HEX64 = re.compile(r"[0-9a-f]{64}")


def root() -> Path:
    """Directory of the kernel store (created on first use)."""
    return storage.cache_root() / storage.KERNELS / f"v{VERSION}"


def make_key(source: str, compiler: str, options: list[str], arch: str) -> str:
    """The content key of a compiled kernel."""
    h = hashlib.sha256()
    for part in (f"lazygraph-jit-v{VERSION}", source, compiler, "\0".join(options), arch):
        h.update(part.encode())
        h.update(b"\0\0")
    return h.hexdigest()


def _dir() -> Path | None:
    return storage.open_dir(storage.cache_root(), storage.KERNELS, f"v{VERSION}")


def put(key: str, ext: str, data: bytes, info: dict) -> Path | None:
    """Store a binary under `key`; its path, or None when the store cannot be used (warned once)."""
    d = _dir()
    if d is None:
        return None
    binary = d / f"{key}.{ext}"
    record = {
        "version": VERSION,
        "key": key,
        "ext": ext,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "info": info,
    }
    try:
        storage.write_entry(binary, data)
        storage.write_entry(d / f"{key}.json", json.dumps(record, sort_keys=True).encode())
    except OSError as e:
        storage.failed(storage.cache_root(), e, "writing a compiled kernel")
        return None
    storage.note_write(storage.cache_root(), len(data), storage.limit_bytes())
    return binary


def _valid_record(record: object, key: str, ext: str) -> bool:
    """The record's schema: exactly these fields, with these types and ranges."""
    if not isinstance(record, dict) or set(record) != {"version", "key", "ext", "sha256", "size", "info"}:
        return False
    size, sha, info = record["size"], record["sha256"], record["info"]
    return (
        record["version"] == VERSION
        and record["key"] == key
        and record["ext"] == ext
        and isinstance(sha, str)
        and _HEX64.fullmatch(sha) is not None
        and type(size) is int
        and 0 < size <= BINARY_CAP
        and isinstance(info, dict)
        and all(isinstance(k, str) for k in info)
    )


def _load(key: str, ext: str) -> tuple[Path, bytes, dict] | None:
    if _HEX64.fullmatch(key) is None or ext not in EXTS:
        return None
    d = _dir()
    if d is None:
        return None
    rec_path, bin_path = d / f"{key}.json", d / f"{key}.{ext}"
    try:
        raw = storage.read_entry(rec_path, RECORD_CAP)
        if raw is None:
            return None
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            raise storage.BadEntry("the record is not JSON") from None
        if not _valid_record(record, key, ext):
            raise storage.BadEntry("the record does not match its schema")
        data = storage.read_entry(bin_path, record["size"], touch=True)
        if data is None:
            raise storage.BadEntry("the binary is missing")
        if len(data) != record["size"] or hashlib.sha256(data).hexdigest() != record["sha256"]:
            raise storage.BadEntry("the binary does not match its record")
    except storage.BadEntry:
        storage.discard(bin_path)
        storage.discard(rec_path)
        return None
    except OSError as e:
        storage.failed(storage.cache_root(), e, "reading a compiled kernel")
        return None
    return bin_path, data, record["info"]


def get(key: str, ext: str) -> Path | None:
    """Where the verified binary of `key` lies, or None (for inspection: load with `read`)."""
    hit = _load(key, ext)
    return None if hit is None else hit[0]


def read(key: str, ext: str) -> bytes | None:
    """The verified bytes stored under `key`, or None (missing or bad entries are dropped)."""
    hit = _load(key, ext)
    return None if hit is None else hit[1]


def read_info(key: str, ext: str) -> tuple[bytes, dict] | None:
    """`read` plus the record's `info` (a batch-compiled library names its kernel's entry there)."""
    hit = _load(key, ext)
    return None if hit is None else (hit[1], hit[2])


def clear() -> int:
    """Remove every stored kernel; returns how many entries were removed."""
    d = root()
    n = 0
    try:
        names = list(os.scandir(d))
    except OSError:
        return 0
    for e in names:
        if e.name.endswith(".json"):
            n += 1
        if not e.is_dir(follow_symlinks=False):
            storage.discard(Path(e.path))
    return n


# -- loading a library from the verified bytes ------------------------------------------------

_load_lock = threading.Lock()
_serial = itertools.count()
_private_dir: str | None = None
#: memfds of loaded libraries stay open: dlopen knows a library by its path, and a closed
#: descriptor's number (hence its /proc path) would come back for another library
_memfds: list[int] = []
MAX_MEMFDS = 256


def load_library(data: bytes, name: str) -> ctypes.CDLL:
    """dlopen the verified bytes `data` from a private copy (a memfd, else a private directory)."""
    with _load_lock:
        if hasattr(os, "memfd_create") and len(_memfds) < MAX_MEMFDS and os.path.isdir("/proc/self/fd"):
            try:
                fd = os.memfd_create(f"lazygraph-{name[:16]}", getattr(os, "MFD_CLOEXEC", 1))
            except OSError:
                fd = -1
            if fd >= 0:
                try:
                    _write_all(fd, data)
                    lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
                except BaseException:
                    os.close(fd)
                    raise
                _memfds.append(fd)
                return lib
        return _load_from_private_file(data, name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _load_from_private_file(data: bytes, name: str) -> ctypes.CDLL:
    global _private_dir
    if _private_dir is None or not os.path.isdir(_private_dir):
        _private_dir = tempfile.mkdtemp(prefix="lazygraph-kernels-")  # 0700, this process's own
    # a fresh name per load: dlopen returns an already loaded library of the same path
    path = os.path.join(_private_dir, f"{next(_serial)}-{name[:16]}.so")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)
    try:
        return ctypes.CDLL(path)
    finally:
        os.unlink(path)  # the mapping stays; nothing is left on disk


def _remove_private_dir() -> None:
    if _private_dir is not None:
        shutil.rmtree(_private_dir, ignore_errors=True)


atexit.register(_remove_private_dir)
