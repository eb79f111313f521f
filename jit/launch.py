"""Launching a compiled CPU kernel with a small fixed cost: a tiny C extension, else ctypes.

A kernel call through ctypes costs about 4 µs whatever the kernel does (building four ctypes
arrays, reading each array's address through `.ctypes`), as much as a few NumPy operations on
100 elements. The launcher here is a CPython extension of one function, built once per machine
with the system compiler against `Python.h` and kept beside the kernel store (jit/extension.py:
verified by its SHA-256, written atomically, imported from a private copy):

    run(fn, ints, plan, flags, values, outs)

`fn` is the kernel's address, `ints` its loop arguments packed as int64 (fixed per argument
signature, so packed once), `plan` says for each input value whether it is an array (whose
address goes to `ptrs`), a float scalar (`fs`) or an integer scalar (`is`), with the element
size an array must have. The extension reads addresses through the buffer protocol, converts
scalars as `float(v)` / `int(v)` (integers modulo 2**64, as the ctypes path does) and calls
the kernel, releasing the GIL when `flags` says the launch is large. With `flags & CHECK_OUT`
it refuses (ValueError) a first output whose memory bounds overlap an input's, as
`np.may_share_memory` does. Given a signature before `values` (`checked_launcher`: ndim,
shape and strides per array), it launches only when the arrays match it and returns True, else
False with nothing written: a kernel's repeated call needs no key. docs/jit.md records the
measurement behind this choice (ctypes, ctypes with prebuilt blocks, cffi's ABI mode, this
extension).

Without `Python.h` or a compiler, or with `use_extension(False)`, a ctypes closure does the
same in Python: same results, the old per-call cost.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jit import compile_c, extension

#: plan codes per input value
ARRAY, FLOAT, INT = 0, 1, 2
#: flags: check the first output against the inputs; release the GIL during the kernel
CHECK_OUT, NOGIL = 1, 2
#: arrays and scalars one launch passes in the extension's stack blocks (more take a heap block)
MAX_ARGS = 64

MODULE = "_lazygraph_launch"
#: the built extension's directory in the cache (beside the kernel store, not in it: the store
#: holds kernels only) and the most bytes read back from it
STORE_DIR = "launch"

SOURCE = r"""#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef void (*lg_fn)(void **, const int64_t *, const double *, const int64_t *);
#define LG_MAX 64

/* [lo, hi) bytes an array's elements span (lo == hi: no elements) */
static void lg_bounds(const Py_buffer *v, char **lo, char **hi) {
  char *l = (char *)v->buf, *h = (char *)v->buf;
  for (int d = 0; d < v->ndim; d++) {
    if (v->shape[d] == 0) { *lo = *hi = (char *)v->buf; return; }
    Py_ssize_t ext = (v->shape[d] - 1) * (v->strides ? v->strides[d] : 0);
    if (ext < 0) l += ext; else h += ext;
  }
  *lo = l; *hi = h + v->itemsize;
}

static PyObject *lg_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  /* run(fn, ints, plan, flags, [sig,] values, outs): with sig (bytes of int64: per array value,
     ndim, shape, strides) a launch whose arrays differ from it returns False and runs nothing */
  PyObject *sigobj = NULL, *a6[6];
  if (nargs == 7) {
    sigobj = args[4];
    a6[0] = args[0]; a6[1] = args[1]; a6[2] = args[2]; a6[3] = args[3]; a6[4] = args[5]; a6[5] = args[6];
    args = a6;
    nargs = 6;
    if (!PyBytes_Check(sigobj)) { PyErr_SetString(PyExc_TypeError, "run: sig must be bytes"); return NULL; }
  }
  if (nargs != 6 || !PyBytes_Check(args[1]) || !PyBytes_Check(args[2]) || !PyTuple_Check(args[4])
      || !PyList_Check(args[5])) {
    PyErr_SetString(PyExc_TypeError, "run(fn, ints: bytes, plan: bytes, flags, [sig: bytes,] values: tuple, outs: list)");
    return NULL;
  }
  const int64_t *sig = sigobj ? (const int64_t *)PyBytes_AS_STRING(sigobj) : NULL;
  const Py_ssize_t nsig = sigobj ? PyBytes_GET_SIZE(sigobj) / (Py_ssize_t)sizeof(int64_t) : 0;
  Py_ssize_t at = 0;
  lg_fn fn = (lg_fn)PyLong_AsVoidPtr(args[0]);
  if (fn == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "run: null kernel address");
    return NULL;
  }
  const int64_t *ints = (const int64_t *)PyBytes_AS_STRING(args[1]);
  const int32_t *plan = (const int32_t *)PyBytes_AS_STRING(args[2]);
  const Py_ssize_t nplan = PyBytes_GET_SIZE(args[2]) / (Py_ssize_t)(3 * sizeof(int32_t));
  const long flags = PyLong_AsLong(args[3]);
  PyObject *values = args[4], *outs = args[5];
  const Py_ssize_t nout = PyList_GET_SIZE(outs);
  if (flags == -1 && PyErr_Occurred()) return NULL;
  if (PyTuple_GET_SIZE(values) != nplan) {
    PyErr_SetString(PyExc_TypeError, "run: the values do not match the plan");
    return NULL;
  }
  /* small launches use the stack; a region with more arguments takes one heap block */
  const Py_ssize_t cap = nplan + nout;
  void *ptrs_s[LG_MAX];
  double fs_s[LG_MAX];
  int64_t is_s[LG_MAX];
  Py_buffer views_s[LG_MAX];
  void **ptrs = ptrs_s;
  double *fs = fs_s;
  int64_t *is = is_s;
  Py_buffer *views = views_s;
  char *heap = NULL;
  if (cap > LG_MAX) {
    heap = PyMem_Malloc(cap * (sizeof(void *) + sizeof(double) + sizeof(int64_t) + sizeof(Py_buffer)));
    if (heap == NULL) return PyErr_NoMemory();
    views = (Py_buffer *)heap;
    ptrs = (void **)(views + cap);
    fs = (double *)(ptrs + cap);
    is = (int64_t *)(fs + cap);
  }
  int nv = 0, na = 0;
  PyObject *ret = NULL;
  for (Py_ssize_t i = 0; i < nplan; i++) {
    const int32_t kind = plan[3 * i], slot = plan[3 * i + 1], size = plan[3 * i + 2];
    PyObject *v = PyTuple_GET_ITEM(values, i);
    if (slot < 0 || slot >= (cap > LG_MAX ? cap : LG_MAX)) { PyErr_SetString(PyExc_ValueError, "run: bad plan"); goto done; }
    if (kind == 0) {
      if (v == Py_None) {
        if (sig) { ret = Py_False; Py_INCREF(ret); goto done; }
        ptrs[na++] = NULL;
        continue;
      }
      if (PyObject_GetBuffer(v, &views[nv], PyBUF_STRIDES) < 0) goto done;
      nv++;
      if (views[nv - 1].itemsize != size) {
        PyErr_SetString(PyExc_TypeError, "run: an array's element size is not the kernel's");
        goto done;
      }
      if (sig) {
        const Py_buffer *b = &views[nv - 1];
        int same = at < nsig && sig[at] == b->ndim && at + 1 + 2 * (Py_ssize_t)b->ndim <= nsig;
        for (int d = 0; same && d < b->ndim; d++)
          same = sig[at + 1 + d] == b->shape[d] && b->strides && sig[at + 1 + b->ndim + d] == b->strides[d];
        if (!same) { ret = Py_False; Py_INCREF(ret); goto done; }
        at += 1 + 2 * (Py_ssize_t)b->ndim;
      }
      ptrs[na++] = views[nv - 1].buf;
    } else if (kind == 1) {
      const double d = PyFloat_AsDouble(v);
      if (d == -1.0 && PyErr_Occurred()) goto done;
      fs[slot] = d;
    } else {
      PyObject *l = PyNumber_Long(v);
      if (l == NULL) goto done;
      const unsigned long long u = PyLong_AsUnsignedLongLongMask(l);
      Py_DECREF(l);
      if (u == (unsigned long long)-1 && PyErr_Occurred()) goto done;
      is[slot] = (int64_t)u;
    }
  }
  if (sig && at != nsig) { ret = Py_False; Py_INCREF(ret); goto done; }
  const int nin = nv;
  for (Py_ssize_t j = 0; j < nout; j++) {
    PyObject *o = PyList_GET_ITEM(outs, j);
    if (PyObject_GetBuffer(o, &views[nv], PyBUF_STRIDES) < 0) goto done;
    ptrs[na++] = views[nv++].buf;
  }
  if ((flags & 1) && nout > 0) {
    char *lo, *hi, *l2, *h2;
    lg_bounds(&views[nin], &lo, &hi);
    for (int k = 0; k < nin && lo < hi; k++) {
      lg_bounds(&views[k], &l2, &h2);
      if (l2 < h2 && lo < h2 && l2 < hi) {
        PyErr_SetString(PyExc_ValueError, "jit region: out= shares memory with an input the kernel reads");
        goto done;
      }
    }
  }
  for (int k = nin; k < nv; k++) {
    if (views[k].readonly) {
      PyErr_SetString(PyExc_ValueError, "jit region: an output array is not writeable");
      goto done;
    }
  }
  if (flags & 2) {
    Py_BEGIN_ALLOW_THREADS
    fn(ptrs, ints, fs, is);
    Py_END_ALLOW_THREADS
  } else {
    fn(ptrs, ints, fs, is);
  }
  ret = sig ? Py_True : Py_None;
  Py_INCREF(ret);
done:
  for (int k = 0; k < nv; k++) PyBuffer_Release(&views[k]);
  PyMem_Free(heap);
  return ret;
}

static PyMethodDef lg_methods[] = {
  {"run", (PyCFunction)(void (*)(void))lg_run, METH_FASTCALL, "Launch a kernel (jit/launch.py)."},
  {NULL, NULL, 0, NULL}};
static struct PyModuleDef lg_module = {PyModuleDef_HEAD_INIT, "_lazygraph_launch", NULL, -1, lg_methods};
PyMODINIT_FUNC PyInit__lazygraph_launch(void) { return PyModule_Create(&lg_module); }
"""

Run = Callable[[int, bytes, bytes, int, tuple, list], None]

#: False once launches are known to go through ctypes (no extension here, or turned off)
FAST = True
#: with the ctypes launcher, arrays below this many elements are faster op by op on NumPy
CTYPES_MIN_SIZE = 65536

_lock = threading.Lock()
_ext: Run | None = None
_tried = False
_enabled = True
_error: str | None = None


def _build() -> Run | None:
    global _error
    try:
        return extension.load(MODULE, SOURCE, STORE_DIR, [], "launcher C", count=1).run
    except (compile_c.CompileError, ImportError, OSError) as e:
        _error = str(e).splitlines()[0] if str(e) else type(e).__name__
        return None


def prepare() -> None:
    """Build or load the extension now (kernel compilation calls this, off the critical path)."""
    global _ext, _tried, FAST
    if _tried:
        return
    with _lock:
        if not _tried:
            _ext = _build()
            _tried = True
            FAST = _ext is not None and _enabled


def launcher(fn: int, ints: Sequence[int], plan: bytes, flags: int) -> Callable[[tuple, list], None]:
    """`launch(values, outs)` for kernel address `fn`: the extension's `run` with the fixed
    arguments bound, else a ctypes closure over the same (same effect, the old per-call cost)."""
    if not _tried:
        prepare()
    if _ext is not None and _enabled:
        return functools.partial(_ext, fn, pack_ints(ints), plan, flags)
    return _ctypes_launcher(fn, ints, plan, flags)


def checked_launcher(
    fn: int, ints: Sequence[int], plan: bytes, flags: int, arrays: Sequence[Any]
) -> Callable[[tuple, list], bool] | None:
    """`launch(values, outs) -> bool` that runs only when the array values have the shapes and
    strides of `arrays` (False: nothing ran), so a repeated call needs no signature key; None
    without the extension."""
    if not _tried:
        prepare()
    if _ext is None or not _enabled:
        return None
    return functools.partial(_ext, fn, pack_ints(ints), plan, flags, pack_signature(arrays))


def pack_signature(arrays: Sequence[Any]) -> bytes:
    """Per array: ndim, shape, strides as int64 (what `checked_launcher` compares)."""
    flat: list[int] = []
    for a in arrays:
        flat += [len(a.shape), *a.shape, *a.strides]
    return struct.pack(f"{len(flat)}q", *flat)


def use_extension(on: bool) -> None:
    """Choose the extension (True, when it could be built) or ctypes for launchers made from now on."""
    global _enabled, FAST
    _enabled = on
    FAST = on and (_ext is not None or not _tried)


def extension_status() -> str:
    """'extension', 'ctypes (<why>)', or 'not built yet' (for docs, benchmarks and tests)."""
    if not _tried:
        return "not built yet"
    if _ext is None:
        return f"ctypes ({_error})"
    return "extension" if _enabled else "ctypes (use_extension(False))"


# -- packing (once per argument signature) and the ctypes path -------------------------------


def pack_ints(ints: Sequence[int]) -> bytes:
    """The kernel's int64 loop arguments (at least one, as the C side reads a pointer)."""
    return struct.pack(f"{max(len(ints), 1)}q", *(ints or [0]))


def pack_plan(plan: Sequence[tuple[int, int, int]]) -> bytes:
    """(kind, slot, element size) per input value as int32 triples."""
    flat = [x for p in plan for x in p]
    return struct.pack(f"{len(flat)}i", *flat)


def _ctypes_launcher(fn: int, ints: Sequence[int], plan: bytes, flags: int) -> Callable[[tuple, list], None]:
    """What the extension's `run` does, through ctypes (the fallback without `Python.h`)."""
    flat = struct.unpack(f"{len(plan) // 4}i", plan)
    steps = [flat[i : i + 3] for i in range(0, len(flat), 3)]
    nf = max([slot + 1 for kind, slot, _ in steps if kind == FLOAT], default=0)
    ni = max([slot + 1 for kind, slot, _ in steps if kind == INT], default=0)
    block = (ctypes.c_int64 * max(len(ints), 1))(*ints)  # fixed per signature: built once
    f = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4)(fn)
    f_array, i_array = ctypes.c_double * nf, ctypes.c_int64 * ni

    def run(values: tuple, outs: list) -> None:
        ptrs: list[int | None] = []
        fs = [0.0] * nf
        is_ = [0] * ni
        arrays = []
        for (kind, slot, size), v in zip(steps, values, strict=True):
            if kind == ARRAY:
                if v is None:
                    ptrs.append(None)
                    continue
                a = np.asarray(v)
                if a.itemsize != size:
                    raise TypeError("run: an array's element size is not the kernel's")
                arrays.append(a)
                ptrs.append(a.ctypes.data)
            elif kind == FLOAT:
                fs[slot] = float(v)
            else:
                is_[slot] = ctypes.c_int64(int(v) % (1 << 64)).value
        if flags & CHECK_OUT and outs and any(np.may_share_memory(outs[0], a) for a in arrays):
            raise ValueError("jit region: out= shares memory with an input the kernel reads")
        for o in outs:
            if not o.flags.writeable:
                raise ValueError("jit region: an output array is not writeable")
            ptrs.append(o.ctypes.data)
        ptr_block = (ctypes.c_void_p * max(len(ptrs), 1))(*ptrs)
        f(ptr_block, block, f_array(*fs) if nf else None, i_array(*is_) if ni else None)

    return run
