"""Loading and calling compiled C kernels: the CPU backend's loader (window kernels use it too).

A shared library is dlopened from a private copy of its verified bytes (jit/store.py's
`load_library`), once per binary; a `CpuProgram` calls its `lg_kernel(void **ptrs, const
int64_t *dims, const double *fs, const int64_t *is)` through ctypes (fused regions launch
through jit/launch.py, which takes `CpuProgram.address`). It lives outside
jit/backend/ so that the compiled window kernels, which the CPU backend's library calls use,
can load their own programs without importing the backend.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

from jit import store
from jit.runtime import Binary, Program

_ptr_array = ctypes.c_void_p
_i64 = ctypes.c_int64
_f64 = ctypes.c_double


class CpuProgram(Program):
    """`lg_kernel` of a loaded library: the kernel ABI as four pointers (grid and block are unused)."""

    __slots__ = ("address", "fn", "lib")

    def __init__(self, lib: ctypes.CDLL, entry: str) -> None:
        self.lib = lib  # keeps the library mapped while the program lives
        fn = getattr(lib, entry)
        fn.argtypes = [ctypes.c_void_p] * 4
        fn.restype = None
        self.fn = fn
        #: the entry's address, for jit/launch.py's fixed-cost launcher
        self.address: int = ctypes.cast(fn, ctypes.c_void_p).value or 0

    def __call__(
        self,
        arrays: Sequence[Any],
        ints: Sequence[int],
        fs: Sequence[float] = (),
        is_: Sequence[int] = (),
        grid: int = 1,
        block: int = 1,
    ) -> None:
        """Run the kernel on NumPy arrays (None: a null pointer) and the ABI's numbers."""
        self.fn(*abi_args(arrays, ints, fs, is_))


def abi_args(arrays: Sequence[Any], ints: Sequence[int], fs: Sequence[float], is_: Sequence[int]) -> tuple:
    """The kernel ABI's four pointer arguments for a host call (arrays, ints, float and int scalars)."""
    return (
        (_ptr_array * (len(arrays) or 1))(*[None if a is None else a.ctypes.data for a in arrays]),
        (_i64 * (len(ints) or 1))(*ints),
        (_f64 * len(fs))(*fs) if fs else None,
        (_i64 * len(is_))(*is_) if is_ else None,
    )


#: binary key -> its loaded library (a library stays mapped while the process runs)
_libs: dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


def load(binary: Binary, entry: str = "lg_kernel") -> CpuProgram:
    """The program of `entry` in `binary`, dlopened once per binary from its verified bytes.

    A kernel compiled in a batch (jit/compile_c.py's `EntryBinary`) has its own entry name in a
    library shared with other kernels: `lg_kernel` means that entry, and the library loads once.
    """
    renamed = getattr(binary, "entry", None)
    if renamed and entry == "lg_kernel":
        entry = renamed
    name = getattr(binary, "lib", "") or binary.key
    lib = _libs.get(name)
    if lib is None:
        with _lock:
            lib = _libs.get(name)
            if lib is None:
                lib = _libs[name] = store.load_library(binary.data, name)
    return CpuProgram(lib, entry)


def drop_loaded() -> None:
    """Forget loaded libraries, so the next load of each binary reads the store's bytes again."""
    with _lock:
        _libs.clear()
