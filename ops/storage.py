"""One policy for everything lazygraph keeps on disk: graph entries and compiled kernels.

Where: $LAZYGRAPH_CACHE_DIR, else $XDG_CACHE_HOME/lazygraph, else ~/.cache/lazygraph, with
`graphs/` (transformation graphs), `runs/` (run logs) and `jit/` (compiled kernels) below it.
How much: LAZYGRAPH_CACHE_LIMIT_MB (default 256) covers graph entries and kernels together;
the least recently used go first. Which version: `version_tag` hashes every source and data
file that shapes a plan or a kernel, so an edited library never reuses an old entry.

Trust: a compiled kernel is native code, so the store is used only when the user alone can
write it: the root and every directory and entry must be owned by the current user and not
writable by group or others (`trusted_root`, `read_entry`). Entries are opened once without
following links, checked on the open descriptor (regular file, owner, mode, size cap) and
read from it. A store that cannot be used (not a directory, not writable, full, failing)
costs one warning per process and root; the caller then keeps its caches in memory only.
This module lives in ops/ because cache/ and jit/ may both import only ops.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

from ops.fileio import atomic_write
from ops.settings import SETTINGS

GRAPHS, RUNS, KERNELS = "graphs", "runs", "jit"
GRAPH_SUFFIX = ".lgc"
#: compiled kernels, and the C toolchain probe's result (jit/compile_c.py)
KERNEL_SUFFIXES = (".so", ".ptx", ".cubin", ".tc")
DEFAULT_LIMIT_MB = 256
#: files this module may delete in the root itself (besides the three directories)
ROOT_FILES = ("superopt_costs.json",)
#: what shapes a plan or a kernel: these packages' sources and data files (not the datasets)
TAG_PACKAGES = ("lazygraph", "ops", "cache", "optimizer", "jit")
TAG_SUFFIXES = (".py", ".json")
TAG_SKIP = (("lazygraph", "data"),)
#: errors that mean the store as a whole cannot be used (others concern one entry)
STORE_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.EIO,
        errno.ENOTDIR,
        errno.EFBIG,
    }
)


class CacheWarning(RuntimeWarning):
    """The disk store cannot be used; this process caches in memory only."""


class BadEntry(ValueError):
    """A stored file that must not be used (link, not a regular file, foreign, too big)."""


def expected_owner() -> int:
    """The uid that must own the store (tests replace this to play another user)."""
    return os.geteuid()


# -- where, how much, which version -------------------------------------------------------


_ROOT: tuple[tuple, Path] = ((), Path())


def cache_root() -> Path:
    """$LAZYGRAPH_CACHE_DIR, else $XDG_CACHE_HOME/lazygraph, else ~/.cache/lazygraph."""
    global _ROOT
    env = SETTINGS.cache_dir or ""
    xdg = SETTINGS.xdg_cache_home or ""
    # every miss asks: building the Path costs 5-8 us (more with expanduser), so the same
    # settings reuse it; `~` and the default read $HOME, as expanduser does, so it is in the key
    home = os.environ.get("HOME", "") if env.startswith("~") or (not env and not os.path.isabs(xdg)) else ""
    key = (env, xdg, home)
    memo = _ROOT  # one read: another thread may replace it with an equally valid pair
    if memo[0] != key:
        memo = _ROOT = (key, _root(env, xdg))
    return memo[1]


def _root(env: str, xdg: str) -> Path:
    if env:
        return Path(env).expanduser()
    # the XDG specification: a relative path is invalid and must be ignored
    base = Path(xdg) if os.path.isabs(xdg) else Path(os.path.expanduser("~")) / ".cache"
    return base / "lazygraph"


def limit_bytes() -> int:
    """LAZYGRAPH_CACHE_LIMIT_MB in bytes (graph entries and kernels together)."""
    mb = SETTINGS.cache_limit_mb
    return max(1, int(mb * 2**20))


def _tag_names(base: Path, packages: Iterable[str]) -> list[str]:
    """The tagged files' paths relative to `base` (posix), in a fixed order (os.walk: pathlib's
    rglob and relative_to took 10 ms of a process's first evaluation for 221 files)."""
    out = []
    for pkg in packages:
        names = []
        for d, dirs, files in os.walk(base / pkg):
            rel = os.path.relpath(d, base).replace(os.sep, "/")
            parts = tuple(rel.split("/"))
            dirs[:] = [x for x in dirs if x != "__pycache__" and (*parts, x) not in TAG_SKIP]
            names += [f"{rel}/{f}" for f in files if f.endswith(TAG_SUFFIXES)]
        out += sorted(names)  # (a file that cannot be read is tagged as such)
    return out


def tag_files(base: Path, packages: Iterable[str] = TAG_PACKAGES) -> list[Path]:
    """The files the version tag covers, in a fixed order."""
    return [base / n for n in _tag_names(base, packages)]


def version_tag(parts: Iterable[str], base: Path | None = None) -> str:
    """A tag that changes with the library: version strings plus every file that shapes a plan.

    One BLAKE2b stream over every file's name, length and bytes (3.5 MB: 25 -> 8 ms of a
    process's first evaluation against a SHA-256 per file); a tag, not a signature.
    """
    base = Path(__file__).resolve().parent.parent if base is None else base
    h = hashlib.blake2b(b"lazygraph store tag 3\n", digest_size=16)
    for p in parts:
        h.update(p.encode() + b"\n")
    for name in _tag_names(base, TAG_PACKAGES):
        try:
            with open(base / name, "rb") as f:
                data = f.read()
        except OSError:
            data = None
        h.update(f"{name}\0{-1 if data is None else len(data)}\0".encode())
        if data is not None:
            h.update(data)
    return h.hexdigest()[:16]


# -- trust and usability ----------------------------------------------------------------------

_lock = threading.Lock()
_refused: dict[str, str] = {}  # root -> why (warned once; the process stays in memory)
_usage: dict[str, list] = {}  # root -> [approximate bytes or None, writes since the last scan]


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _check_dir(path: Path, follow: bool) -> str | None:
    """Why `path` may not hold entries (None: it may). Creates it (0700) when missing."""
    try:
        if follow:  # the root: its parents may be missing too (they get the usual modes)
            os.makedirs(path.parent, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        return f"cannot create {path} ({e.strerror}); set LAZYGRAPH_CACHE_DIR to a directory you can write"
    return _check_existing(path, follow)


def _check_existing(path: Path, follow: bool = False) -> str | None:
    """Why the existing directory `path` may not hold entries (None: it may)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as e:
        return f"cannot read {path} ({e.strerror}); set LAZYGRAPH_CACHE_DIR to a directory you can write"
    if not stat.S_ISDIR(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        return f"{path} is {what}; remove it or set LAZYGRAPH_CACHE_DIR to a directory"
    uid = expected_owner()
    if st.st_uid != uid:
        return (
            f"{path} is owned by uid {st.st_uid}, not by this user (uid {uid}); compiled kernels are "
            f"only loaded from a directory only you can write: set LAZYGRAPH_CACHE_DIR to one of yours"
        )
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {_mode(st)}); fix: chmod 700 {path}"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable (mode {_mode(st)}); fix: chmod u+rwx {path}"
    return None


def _check_ancestors(root: Path) -> str | None:
    """A parent anyone may write without the sticky bit lets them swap the whole store."""
    for parent in Path(os.path.realpath(root)).parents:
        try:
            st = os.stat(parent)
        except OSError:
            continue
        if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
            return (
                f"{parent}, a parent of the cache directory {root}, is writable by anyone (mode "
                f"{_mode(st)}, no sticky bit); set LAZYGRAPH_CACHE_DIR to a directory under your home"
            )
    return None


def _refuse(root: Path, why: str) -> None:
    with _lock:
        if str(root) in _refused:
            return
        _refused[str(root)] = why
    warnings.warn(
        f"lazygraph: not using the disk cache: {why}. This process keeps its caches in memory only.",
        CacheWarning,
        stacklevel=3,
    )


def refused(root: Path) -> str | None:
    """Why `root` is not used in this process (None: it is used)."""
    return _refused.get(str(root))


def open_dir(root: Path, *sub: str) -> Path | None:
    """root/sub... when the store may be used (made 0700 on first use), else None (warned once)."""
    if str(root) in _refused:
        return None
    why = _check_dir(root, follow=True) or _check_ancestors(root)
    if why is None:  # every directory of the store, not only the one asked for: one verdict per root
        for d in [root / GRAPHS, root / RUNS, root / KERNELS, *_kernel_dirs(root)]:
            if os.path.lexists(d):
                why = _check_existing(d)
                if why is not None:
                    break
    path = root
    for s in sub:
        if why is not None:
            break
        path = path / s
        why = _check_dir(path, follow=False)
    if why is not None:
        _refuse(root, why)
        return None
    return path


def failed(root: Path, err: OSError, doing: str) -> None:
    """A store operation failed: when it is the store's fault, warn once and stop using it."""
    if err.errno not in STORE_ERRNOS:
        return  # one entry's problem (a race with another process, a directory in its place)
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = "free space on its disk, lower LAZYGRAPH_CACHE_LIMIT_MB or move it (LAZYGRAPH_CACHE_DIR)"
    elif err.errno == errno.EIO:
        fix = "check the disk, or set LAZYGRAPH_CACHE_DIR to another one"
    else:
        fix = f"make it writable (chmod u+rwx {root}) or set LAZYGRAPH_CACHE_DIR to a directory you can write"
    _refuse(root, f"{doing} in {root} failed ({err.strerror or err}); {fix}")


# -- entries ----------------------------------------------------------------------------------


def read_entry(path: Path, cap: int, touch: bool = False) -> bytes | None:
    """The bytes of one entry, read from a single descriptor; None when it does not exist.

    Raises BadEntry for a file that must not be used (the caller deletes it) and OSError
    when the disk itself fails. `touch` marks the entry used (least recently used eviction).
    """
    try:
        lst = os.lstat(path)  # refuse FIFOs, devices and links before opening anything
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(lst.st_mode):
        raise BadEntry(f"{path.name} is not a regular file")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EACCES, errno.EPERM, errno.EISDIR):
            raise BadEntry(f"{path.name} cannot be opened safely ({e.strerror})") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino):
            raise BadEntry(f"{path.name} was replaced while it was opened")
        if st.st_uid != expected_owner():
            raise BadEntry(f"{path.name} is owned by uid {st.st_uid}, not by this user")
        if st.st_mode & 0o022:
            raise BadEntry(f"{path.name} is writable by group or others (mode {_mode(st)})")
        if st.st_size > cap:
            raise BadEntry(f"{path.name} holds {st.st_size} bytes, over the {cap}-byte cap")
        chunks, got = [], 0
        while got <= st.st_size:
            b = os.read(fd, min(1 << 22, st.st_size + 1 - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
        if got != st.st_size:
            raise BadEntry(f"{path.name} changed size while it was read")
        if touch:
            try:
                os.utime(fd)
            except OSError:
                pass
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_entry(path: Path, data: bytes) -> None:
    """Write an entry atomically (a 0600 temporary file renamed into place)."""
    atomic_write(path, data)


def discard(path: Path) -> None:
    """Delete a bad entry (whatever it is: a link, a FIFO, a file); a directory stays."""
    try:
        os.unlink(path)
    except OSError:
        pass


# -- size limit and least recently used eviction ----------------------------------------------


def _kernel_dirs(root: Path) -> list[Path]:
    try:
        return [Path(d.path) for d in os.scandir(root / KERNELS) if d.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def units(root: Path) -> list[tuple[list[Path], int, float, str]]:
    """Evictable units: (files, bytes, last use, "graph" or "kernel"); a kernel is its binary and record."""
    out: list[tuple[list[Path], int, float, str]] = []
    scans: list[tuple[Path, str]] = [(root / GRAPHS, "graph")] + [(d, "kernel") for d in _kernel_dirs(root)]
    for d, kind in scans:
        groups: dict[str, list] = {}
        try:
            it = list(os.scandir(d))
        except OSError:
            continue
        for e in it:
            if e.name.startswith("."):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            stem = e.name if kind == "graph" else e.name.split(".", 1)[0]
            g = groups.setdefault(stem, [[], 0, 0.0])
            g[0].append(Path(e.path))
            g[1] += st.st_size
            g[2] = max(g[2], st.st_mtime)
        out.extend((files, size, mtime, kind) for files, size, mtime in groups.values())
    return out


def usage(root: Path) -> dict:
    """Entries and bytes on disk, graphs and kernels apart, with the limit they share."""
    res = {"graph": [0, 0], "kernel": [0, 0]}
    for _, size, _, kind in units(root):
        res[kind][0] += 1
        res[kind][1] += size
    return {
        "graphs": res["graph"][0],
        "graph_bytes": res["graph"][1],
        "kernels": res["kernel"][0],
        "kernel_bytes": res["kernel"][1],
        "bytes": res["graph"][1] + res["kernel"][1],
    }


def evict(root: Path, limit: int) -> int:
    """Delete least recently used units until under 80% of `limit`; returns how many."""
    all_units = units(root)
    total = sum(u[1] for u in all_units)
    removed = 0
    if total > limit:
        for files, size, _, _ in sorted(all_units, key=lambda u: u[2]):
            if total <= 0.8 * limit:
                break
            for f in files:
                discard(f)
            total -= size
            removed += 1
    _sweep_temporaries([root / GRAPHS, *_kernel_dirs(root)])
    with _lock:
        _usage[str(root)] = [total, 0]
    return removed


def note_write(root: Path, nbytes: int, limit: int) -> None:
    """Count a write; scan and evict when the estimate passes the limit (or every 100 writes)."""
    with _lock:
        u = _usage.setdefault(str(root), [None, 0])
        u[1] += 1
        if u[0] is not None:
            u[0] += nbytes
        scan = u[0] is None or u[0] > limit or u[1] >= 100
    if scan:
        evict(root, limit)


def _sweep_temporaries(dirs: list[Path]) -> None:
    # Temporary files of writers that died mid-write; an hour is far longer than a write.
    now = time.time()
    for d in dirs:
        try:
            for e in os.scandir(d):
                if e.name.startswith(".tmp-") and now - e.stat(follow_symlinks=False).st_mtime > 3600:
                    os.unlink(e.path)
        except OSError:
            pass


def clear(root: Path) -> int:
    """Delete every graph entry, run log and compiled kernel under `root`; returns how many files."""
    n = 0
    for sub in (GRAPHS, RUNS):
        try:
            names = list(os.scandir(root / sub))
        except OSError:
            continue
        for e in names:
            if not e.is_dir(follow_symlinks=False):
                n += _unlink(e.path)
    jit = root / KERNELS
    if os.path.islink(jit):
        n += _unlink(str(jit))
    elif jit.is_dir():
        for top, dirs, files in os.walk(jit, topdown=False, followlinks=False):
            for f in files:
                n += _unlink(os.path.join(top, f))
            for d in dirs:
                p = os.path.join(top, d)
                if os.path.islink(p):
                    n += _unlink(p)
                else:
                    try:
                        os.rmdir(p)
                    except OSError:
                        pass
    for name in ROOT_FILES:
        if os.path.lexists(root / name):
            n += _unlink(str(root / name))
    with _lock:
        _usage[str(root)] = [0, 0]
    return n


def _unlink(path: str) -> int:
    try:
        os.unlink(path)
        return 1
    except OSError:
        return 0
