"""The small CPython extensions lazygraph builds for itself: the JIT's launcher (jit/launch.py)
and the element methods (lazygraph/element_ext.py).

Each is compiled once with the system compiler against `Python.h`, stored in the kernel cache
under a key of its source, compiler, Python and flags, in a file named by the SHA-256 of its
bytes (checked on every read, so a corrupt or edited file is discarded and rebuilt), written
atomically, and imported from a private copy of those verified bytes, never from the store's
path. Nothing here runs unless a caller asks for its extension.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from typing import Any

from jit import compile_c, store
from ops import storage

BINARY_CAP = 16 * 2**20  # an extension is tens of KB: anything larger is not one of ours


def headers() -> str | None:
    """The directory holding `Python.h`, or None where the headers are not installed."""
    inc = sysconfig.get_paths().get("include")
    return inc if inc and os.path.isfile(os.path.join(inc, "Python.h")) else None


def load(
    module: str,
    source: str,
    store_dir: str,
    flags: list[str],
    what: str,
    count: int | None,
    depends: str = "",
    before_compile: Callable[[], None] | None = None,
) -> Any:
    """The imported extension `module` built from `source`: from the kernel store, or compiled
    now and stored (`count`: as `compile_c.build_shared` counts it; `depends`: what else the
    binary depends on, e.g. NumPy's version for its headers; `before_compile`: called before a
    compile, not before a stored binary's load). Raises ImportError (no compiler, no headers),
    CompileError or OSError."""
    tc = compile_c.toolchain()
    inc = headers()
    if tc is None or inc is None:
        raise ImportError("no C compiler" if tc is None else "no Python.h")
    fl = ["-O2", "-fPIC", "-shared", f"-I{inc}", *flags]
    ident = f"{tc['id']} python {sys.version} {sysconfig.get_config_var('EXT_SUFFIX')} {depends}"
    key = store.make_key(source, ident, fl, tc["arch"])
    d = storage.open_dir(storage.cache_root(), storage.KERNELS, store_dir)
    data = None if d is None else _stored(d, key)
    if data is None:
        if before_compile is not None:
            before_compile()
        data = compile_c.build_shared(tc["cc"], fl, source, [], what=what, count=count)
        if d is not None:
            storage.write_entry(d / f"{key}-{hashlib.sha256(data).hexdigest()}.bin", data)
    return _import_bytes(module, data)


def _stored(d: Any, key: str) -> bytes | None:
    """The verified bytes of a built extension (its file name ends with their SHA-256)."""
    for path in sorted(d.glob(f"{key}-*.bin")):
        try:
            data = storage.read_entry(path, BINARY_CAP)
        except storage.BadEntry:
            data = None
        if data is not None and hashlib.sha256(data).hexdigest() == path.stem[len(key) + 1 :]:
            return data
        storage.discard(path)
    return None


def _import_bytes(module: str, data: bytes) -> Any:
    """Import the extension from a private copy of its verified bytes (never the store's path)."""
    d = tempfile.mkdtemp(prefix="lazygraph-ext-")
    try:
        path = os.path.join(d, module + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        spec = importlib.util.spec_from_file_location(module, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no loader for {module}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        shutil.rmtree(d, ignore_errors=True)  # the mapping stays; nothing is left on disk
