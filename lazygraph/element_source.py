"""The C source of the element extension (lazygraph/element_ext.py builds, loads and installs it).

Each function runs the proof of its Python counterpart (lazygraph/direct.py, lazygraph/elements.py)
and calls that counterpart when any check fails, so the extension changes speed only.
"""

from lazygraph.element_source_region import REGION_SOURCE

SOURCE = r"""#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/ndarraytypes.h>

/* Filled by configure(): the classes, the slots' offsets, the sets of types, the Python paths. */
static PyTypeObject *T_Array, *T_Scalar, *T_Storage, *T_Held, *T_Node, *T_ndarray;
/* np.float64: the common element type, checked before the type sets (it is in NP_SCALARS and REAL_SCALARS) */
static PyTypeObject *T_F64;
static PyObject *HOST, *INT_KEYS, *DIRECT_VALUES, *NP_SCALARS, *REAL_SCALARS, *COMPLEX_VALUES;
static PyObject *PY_GETITEM, *PY_SETITEM, *PY_FLOAT, *PY_HELD_SCALAR, *EMPTY, *ROWS;
static PyObject *PY_IOP[4], *PY_REC[4], *PY_ARR_IOP[4], *UFUNC[4], *OPNAME[4], *PY_RECORDED, *MATERIALIZE;
static PyObject *KW_OUT, *KW_WRITEABLE, *REGION_MAX_OBJ, *RECIPES, *KIND_INDEX;
static Py_ssize_t REGION_MAX;
static Py_ssize_t A_STORAGE, A_VIEW, A_READONLY, A_VNODE, A_VBASE;
static Py_ssize_t N_BUFFER, N_USERS, N_GRAD, N_STATIC, N_DEVICE, N_SHAPE;
static PyObject *S_NODE, *S_VAL, *S_SRC, *S_HIST, *S_GRAD, *S_STATIC;
static int READY = 0;
static PyObject *LAST_SRC;  /* the weak reference of the latest element read of a floating buffer */

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

static PyObject *call(PyObject *fn, PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *stack[4];
  if (nargs > 3) { PyErr_SetString(PyExc_TypeError, "too many arguments"); return NULL; }
  stack[0] = self;
  for (Py_ssize_t i = 0; i < nargs; i++) stack[i + 1] = args[i];
  return PyObject_Vectorcall(fn, stack, nargs + 1, NULL);
}

static int in_set(PyObject *set, PyObject *o) {
  int r = PySet_Contains(set, (PyObject *)Py_TYPE(o));
  if (r < 0) { PyErr_Clear(); return 0; }
  return r;
}

static int int_key(PyObject *k) { return PyLong_CheckExact(k) || in_set(INT_KEYS, k); }

/* a key of integers only: 0 no, 1 one integer, n+1 a tuple of n integers */
static Py_ssize_t int_index(PyObject *key) {
  if (PyLong_CheckExact(key)) return 1;
  if (PyTuple_CheckExact(key)) {
    Py_ssize_t n = PyTuple_GET_SIZE(key);
    for (Py_ssize_t i = 0; i < n; i++)
      if (!int_key(PyTuple_GET_ITEM(key, i))) return 0;
    return n + 1;
  }
  return in_set(INT_KEYS, key) ? 1 : 0;
}

static int is_false(PyObject *o) { return o == Py_False; }

/* the memoized view of row `key` of a whole base of this node's shape (elements._ROWS), a
   borrowed reference, or NULL (not a row of 2 or more dimensions, or not memoized yet) */
static PyObject *row_of(PyObject *node, PyObject *key) {
  PyObject *shape = SLOT(node, N_SHAPE);
  if (shape == NULL || !PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) < 2) return NULL;
  PyObject *k = PyTuple_Pack(2, shape, key);
  if (k == NULL) { PyErr_Clear(); return NULL; }
  PyObject *row = PyDict_GetItemWithError(ROWS, k);
  Py_DECREF(k);
  if (row == NULL) PyErr_Clear();
  return row;
}

/* the `node` of a Storage (exact type: a plain instance attribute), read from its dict: a new
   reference, or NULL without error */
static PyObject *storage_node(PyObject *st) {
  PyObject *d = PyObject_GenericGetDict(st, NULL);
  if (d == NULL) { PyErr_Clear(); return NULL; }
  PyObject *node = PyDict_GetItemWithError(d, S_NODE);
  Py_XINCREF(node);
  Py_DECREF(d);
  if (node == NULL) PyErr_Clear();
  return node;
}

#define WEAKLIST(o) (*(PyObject **)((char *)(o) + Py_TYPE(o)->tp_weaklistoffset))

/* The Scalar last made by held_scalar, kept: when nothing else holds it any more (count 1, no weak
   reference, still its own `_Held` of the two fields), the next element read refills it instead
   of allocating and freeing a Scalar and a `_Held` per read. */
static PyObject *SPARE;

static PyObject *refill_spare(PyObject *val, PyObject *src) {
  PyObject *out = SPARE, *held;
  if (out == NULL || Py_REFCNT(out) != 1 || WEAKLIST(out) != NULL) return NULL;
  held = SLOT(out, A_STORAGE);
  if (held == NULL || Py_TYPE(held) != T_Held || Py_REFCNT(held) != 1 || WEAKLIST(held) != NULL) return NULL;
  PyObject *d = PyObject_GenericGetDict(held, NULL);  /* materialized once, the spare's own */
  if (d == NULL) { PyErr_Clear(); return NULL; }
  /* exactly `val` and `src` (anything set since, `.grad`, makes a new one) */
  int ok = PyDict_GET_SIZE(d) == 2 && PyDict_SetItem(d, S_VAL, val) == 0 && PyDict_SetItem(d, S_SRC, src) == 0
           && PyDict_GET_SIZE(d) == 2;
  Py_DECREF(d);
  if (!ok) { PyErr_Clear(); Py_CLEAR(SPARE); return NULL; }
  Py_XSETREF(SLOT(out, A_VIEW), Py_NewRef(Py_None));
  Py_XSETREF(SLOT(out, A_VNODE), Py_NewRef(Py_None));
  Py_XSETREF(SLOT(out, A_VBASE), Py_NewRef(Py_None));
  Py_XSETREF(SLOT(out, A_READONLY), Py_NewRef(Py_False));
  return Py_NewRef(out);
}

/* direct._held_scalar(val, src): a Scalar whose storage is a `_Held` of the NumPy scalar `val` */
static PyObject *held_scalar(PyObject *val, PyObject *src) {
  PyObject *out = refill_spare(val, src);
  if (out != NULL) return out;
  PyObject *held = T_Held->tp_new(T_Held, EMPTY, NULL);
  if (held == NULL) return NULL;
  if (PyObject_SetAttr(held, S_VAL, val) < 0 || PyObject_SetAttr(held, S_SRC, src) < 0) {
    Py_DECREF(held);
    return NULL;
  }
  out = T_Scalar->tp_new(T_Scalar, EMPTY, NULL);
  if (out == NULL) { Py_DECREF(held); return NULL; }
  SLOT(out, A_STORAGE) = held;
  SLOT(out, A_VIEW) = Py_NewRef(Py_None);
  SLOT(out, A_VNODE) = Py_NewRef(Py_None);
  SLOT(out, A_VBASE) = Py_NewRef(Py_None);
  SLOT(out, A_READONLY) = Py_NewRef(Py_False);
  Py_XSETREF(SPARE, Py_NewRef(out));
  return out;
}

/* a[key]: elements.__getitem__'s first branch (`_held_element`), and rows of a whole base */
static PyObject *lg_getitem(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (!READY || nargs != 1 || Py_TYPE(self) != T_Array || SLOT(self, A_VIEW) != Py_None) goto slow;
  PyObject *key = args[0], *st = SLOT(self, A_STORAGE);
  if (st == NULL || Py_TYPE(st) != T_Storage) goto slow;
  PyObject *node = storage_node(st);
  if (node == NULL) goto slow;
  if (Py_TYPE(node) != T_Node) goto slow_node;
  PyObject *shape = SLOT(node, N_SHAPE);
  if (PyLong_CheckExact(key) && shape != NULL && PyTuple_CheckExact(shape) && PyTuple_GET_SIZE(shape) >= 2) {
    /* a row of a whole base, evaluated or not (elements.__getitem__'s `_ROWS` branch) */
    PyObject *row = row_of(node, key);
    Py_DECREF(node);
    if (row == NULL || SLOT(self, A_READONLY) == NULL) goto slow;  /* the Python method memoizes it, or raises */
    PyObject *out = T_Array->tp_new(T_Array, EMPTY, NULL);
    if (out == NULL) return NULL;
    SLOT(out, A_STORAGE) = Py_NewRef(st);
    SLOT(out, A_VIEW) = Py_NewRef(row);
    SLOT(out, A_VNODE) = Py_NewRef(Py_None);
    SLOT(out, A_VBASE) = Py_NewRef(Py_None);
    SLOT(out, A_READONLY) = Py_NewRef(SLOT(self, A_READONLY));
    return out;
  }
  PyObject *buf = SLOT(node, N_BUFFER);
  if (buf == NULL || Py_TYPE(buf) != T_ndarray || !is_false(SLOT(node, N_GRAD)) || SLOT(node, N_DEVICE) != HOST)
    goto slow_node;
  char kind = PyArray_DESCR((PyArrayObject *)buf)->kind;
  Py_ssize_t n = int_index(key), nd = PyArray_NDIM((PyArrayObject *)buf);
  if (!(kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f' || kind == 'c')) goto slow_node;
  if (!(n == 1 ? nd == 1 && !PyTuple_CheckExact(key) : n > 1 && n - 1 == nd)) goto slow_node;
  PyObject *val = PyObject_GetItem(buf, key);
  if (val == NULL) { PyErr_Clear(); goto slow_node; }  /* out of range: the general path raises */
  if (Py_TYPE(val) == T_ndarray) { Py_DECREF(val); goto slow_node; }
  PyObject *src = kind == 'f' ? PyWeakref_NewRef(node, NULL) : Py_NewRef(Py_None);
  Py_DECREF(node);
  /* kept: a loop's reads of one node then share its weak reference (PyWeakref_NewRef returns
     the live one) instead of making and freeing one per read */
  if (src != NULL && src != Py_None && src != LAST_SRC) Py_XSETREF(LAST_SRC, Py_NewRef(src));
  PyObject *out = src == NULL ? NULL : held_scalar(val, src);
  Py_XDECREF(src);
  Py_DECREF(val);
  return out;
slow_node:
  Py_DECREF(node);
slow:
  return call(PY_GETITEM, self, args, nargs);
}

/* direct._writable's proof for storage `st`: a new reference to its node when the node's buffer
   is an ndarray that nothing else can read (no write history, not a parameter or model state,
   on the host, owning its memory, the node held by the storage alone and the buffer by the
   node alone); else NULL, no error set */
static PyObject *dead_buffer(PyObject *st) {
  PyObject *node;
  if (st == NULL || Py_TYPE(st) != T_Storage) return NULL;
  /* a Storage's own fields, read from its dict: hist, requires_grad and static are class
     defaults (None, False, False: configure checked) until set on the instance */
  PyObject *d = PyObject_GenericGetDict(st, NULL), *hist, *grad, *stat;
  if (d == NULL) { PyErr_Clear(); return NULL; }
  node = PyDict_GetItemWithError(d, S_NODE);
  hist = PyDict_GetItemWithError(d, S_HIST);
  /* `node` and `hist` its only fields (the common case): the other two are the class defaults */
  int known = node != NULL && PyDict_GET_SIZE(d) == 1 + (hist != NULL);
  grad = known ? NULL : PyDict_GetItemWithError(d, S_GRAD);
  stat = known ? NULL : PyDict_GetItemWithError(d, S_STATIC);
  int pending = (hist != NULL && hist != Py_None) || (grad != NULL && grad != Py_False) || (stat != NULL && stat != Py_False);
  Py_XINCREF(node);
  Py_DECREF(d);
  if (PyErr_Occurred()) PyErr_Clear();
  if (pending || node == NULL) { Py_XDECREF(node); return NULL; }
  if (Py_TYPE(node) != T_Node) { Py_DECREF(node); return NULL; }
  PyObject *users = SLOT(node, N_USERS), *buf = SLOT(node, N_BUFFER);
  if (users == NULL || !PyLong_CheckExact(users) || PyLong_AsSsize_t(users) != 1 || !is_false(SLOT(node, N_GRAD))
      || !is_false(SLOT(node, N_STATIC)) || SLOT(node, N_DEVICE) != HOST || buf == NULL || Py_TYPE(buf) != T_ndarray
      || PyArray_BASE((PyArrayObject *)buf) != NULL || Py_REFCNT(node) != 2 || Py_REFCNT(buf) != 1) {
    Py_DECREF(node);
    return NULL;
  }
  return node;
}

/* direct._writable(arr): the buffer of an evaluated host array nothing else can read, or None */
static PyObject *lg_writable(PyObject *mod, PyObject *arr) {
  if (!READY || !PyObject_TypeCheck(arr, T_Array)) Py_RETURN_NONE;
  PyObject *node = dead_buffer(SLOT(arr, A_STORAGE));
  if (node == NULL) Py_RETURN_NONE;
  PyObject *buf = Py_NewRef(SLOT(node, N_BUFFER));
  Py_DECREF(node);
  return buf;
}

/* a[key] = v: direct._direct_set and direct._writable, for integer keys, unviewed arrays */
static PyObject *lg_setitem(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *node = NULL, *v = NULL;
  if (!READY || nargs != 2 || Py_TYPE(self) != T_Array || !is_false(SLOT(self, A_READONLY))
      || SLOT(self, A_VBASE) != Py_None || SLOT(self, A_VIEW) != Py_None)
    goto slow;
  PyObject *key = args[0], *value = args[1], *st = SLOT(self, A_STORAGE);
  if (Py_TYPE(value) == T_Array) {
    /* `a[i] = r` for r = a[i] written through (`a[i] += v` of a row): NumPy's no-op
       (recorders._lean_setitem's first case), when the storage is no parameter */
    if (!PyLong_CheckExact(key) || st == NULL || Py_TYPE(st) != T_Storage || SLOT(value, A_STORAGE) != st)
      goto slow;
    PyObject *attr = PyObject_GetAttr(st, S_GRAD);
    if (attr == NULL) { PyErr_Clear(); goto slow; }
    Py_DECREF(attr);
    if (attr != Py_False) goto slow;
    node = PyObject_GetAttr(st, S_NODE);
    if (node == NULL) { PyErr_Clear(); goto slow; }
    if (Py_TYPE(node) != T_Node || SLOT(value, A_VIEW) != row_of(node, key)) goto slow;
    Py_DECREF(node);
    Py_RETURN_NONE;
  }
  if (PyFloat_CheckExact(value) || PyLong_CheckExact(value) || in_set(DIRECT_VALUES, value)) {
    v = Py_NewRef(value);
  } else if (Py_TYPE(value) == T_Scalar) {
    PyObject *vs = SLOT(value, A_STORAGE);
    if (vs == NULL || Py_TYPE(vs) != T_Held) goto slow;
    v = PyObject_GetAttr(vs, S_VAL);
    if (v == NULL) { PyErr_Clear(); goto slow; }
  } else {
    goto slow;
  }
  if (!int_index(key)) goto slow;
  node = dead_buffer(st);
  if (node == NULL) goto slow;
  PyObject *buf = SLOT(node, N_BUFFER);
  PyArrayObject *a = (PyArrayObject *)buf;
  if (!(PyArray_FLAGS(a) & NPY_ARRAY_WRITEABLE)) goto slow;  /* the Python path makes it writeable */
  if (PyArray_DESCR(a)->kind != 'c' && !PyFloat_CheckExact(v) && !PyLong_CheckExact(v) && Py_TYPE(v) != T_F64
      && in_set(COMPLEX_VALUES, v))
    goto slow;  /* it warns at the user's line */
  if (PyObject_SetItem(buf, key, v) < 0) { PyErr_Clear(); goto slow; }
  Py_DECREF(node);
  Py_DECREF(v);
  Py_RETURN_NONE;
slow:
  Py_XDECREF(node);
  Py_XDECREF(v);
  return call(PY_SETITEM, self, args, nargs);
}

/* float(s): Scalar.__float__ of a held element of a real kind */
static PyObject *lg_float(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *st = SLOT(self, A_STORAGE);
  if (READY && nargs == 0 && st != NULL && Py_TYPE(st) == T_Held) {
    PyObject *val = PyObject_GetAttr(st, S_VAL);
    if (val == NULL) { PyErr_Clear(); }
    else {
      PyObject *r = Py_TYPE(val) == T_F64 || in_set(REAL_SCALARS, val) ? PyNumber_Float(val) : NULL;
      Py_DECREF(val);
      if (r != NULL) return r;
      PyErr_Clear();
    }
  }
  return call(PY_FLOAT, self, args, nargs);
}

/* s op= v: elements.scalar_inplace's held branch with a Python or NumPy scalar */
static PyObject *iop(int k, PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *st = SLOT(self, A_STORAGE);
  if (!READY || nargs != 1 || st == NULL || Py_TYPE(st) != T_Held) return call(PY_IOP[k], self, args, nargs);
  PyObject *other = args[0];
  if (!(PyFloat_CheckExact(other) || PyLong_CheckExact(other) || in_set(DIRECT_VALUES, other)))
    return call(PY_IOP[k], self, args, nargs);
  PyObject *val = PyObject_GetAttr(st, S_VAL);
  if (val == NULL) { PyErr_Clear(); return call(PY_IOP[k], self, args, nargs); }
  PyObject *r;
  switch (k) {
    case 0: r = PyNumber_Add(val, other); break;
    case 1: r = PyNumber_Subtract(val, other); break;
    case 2: r = PyNumber_Multiply(val, other); break;
    default: r = PyNumber_TrueDivide(val, other); break;
  }
  Py_DECREF(val);
  if (r == NULL || !(Py_TYPE(r) == T_F64 || in_set(NP_SCALARS, r))) {  /* the recorded path raises it, or records it */
    if (r == NULL) PyErr_Clear();
    Py_XDECREF(r);
    return call(PY_REC[k], self, args, nargs);
  }
  /* held by the statement alone (`a[i] += v`): nobody sees the old value go */
  if (Py_REFCNT(self) == 1 + (self == SPARE) && Py_REFCNT(st) == 1) {
    int bad = PyObject_SetAttr(st, S_VAL, r);
    Py_DECREF(r);
    return bad ? NULL : Py_NewRef(self);
  }
  PyObject *src = PyObject_GetAttr(st, S_SRC);
  if (src == NULL) { Py_DECREF(r); return NULL; }
  PyObject *out = held_scalar(r, src);
  Py_DECREF(r);
  Py_DECREF(src);
  return out;
}

"""

# the region updates, Array's C base class and configure() (one C translation unit: appended)
SOURCE += REGION_SOURCE
