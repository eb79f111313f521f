"""Keep freed array memory in the process, so arrays allocated again each step reuse mapped pages.

A training step or a multi-output kernel allocates arrays of a few MB, frees them and
allocates them again on the next step. glibc's malloc serves such sizes from the heap, but
frees trim the heap's top back to the system (`M_TRIM_THRESHOLD`, adjusted up to twice the
dynamic mmap threshold) and larger blocks are mmap'd and unmapped each time, so the next
allocation touches fresh pages: a page fault per 4 KB, the kernel zeroing each page. Measured
here (2 cores, a VM, under load): allocating and filling two 4 MB arrays took 3.6 ms median
(0.24 ms with this setting, about a plain copy's time); a LayerNorm gradient region with two
4 MB outputs took 7-9 ms through the evaluator against 0.6 ms for the kernel into existing
memory. JAX and PyTorch keep their own arenas for the same reason.

`keep_freed_memory()` sets, once per process, `M_MMAP_THRESHOLD` to 32 MB (blocks below it
come from the heap and are reused), `M_MMAP_MAX` to 0 (larger blocks come from the heap too:
glibc caps the threshold at 32 MB, and a 64 MB kernel output mapped afresh each call cost
5-7 ms of faults: a layernorm evaluation took 16.6 ms against 9.3 ms for its kernel into an
existing array) and `M_TRIM_THRESHOLD` to 1 GB (freed heap memory stays mapped; more free
memory than that at the heap's top is returned). The process's resident size then stays near
its peak, as with JAX's and PyTorch's caching allocators. It does nothing where the C library
has no `mallopt` (not glibc) or when LAZYGRAPH_MALLOC_KEEP=0. No value changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

from ops.settings import SETTINGS

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
#: blocks below this come from the heap (glibc's largest fixed threshold on 64-bit: 32 MB)
MMAP_THRESHOLD = 32 << 20
#: freed heap memory kept mapped up to this much
TRIM_THRESHOLD = 1 << 30

_done = False
_lock = threading.Lock()


def keep_freed_memory() -> bool:
    """Apply the policy once per process (module docstring); True when mallopt accepted it."""
    global _done
    if _done:
        return False
    with _lock:
        if _done:
            return False
        _done = True
        if not SETTINGS.malloc_keep:
            return False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            return False
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mallopt.restype = ctypes.c_int
        done = [mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD), mallopt(M_MMAP_MAX, 0)]
        return all(done) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
