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
#include <float.h>
#include <math.h>

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
/* np.float64 has Python float's layout (a subclass adding no field): configure() checks it */
static int F64_OK = 0;
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

/* d[name] for an interned attribute name, borrowed, or NULL without error: a dict of an
   instance's one or two fields (a Storage's `node`, a `_Held`'s `val` and `src`) is walked in
   order, which costs less than hashing into it; a larger one is looked up */
static PyObject *field(PyObject *d, PyObject *name) {
  if (PyDict_GET_SIZE(d) <= 2) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v))
      if (k == name) return v;
  }
  PyObject *v = PyDict_GetItemWithError(d, name);
  if (v == NULL) PyErr_Clear();
  return v;
}

/* o.name read from o's instance dict (no class attribute stands for it): a new reference, or
   NULL without error */
static PyObject *dict_field(PyObject *o, PyObject *name) {
  PyObject *d = PyObject_GenericGetDict(o, NULL);
  if (d == NULL) { PyErr_Clear(); return NULL; }
  PyObject *v = Py_XNewRef(field(d, name));
  Py_DECREF(d);
  return v;
}

/* the `node` of a Storage (exact type: a plain instance attribute) */
static PyObject *storage_node(PyObject *st) { return dict_field(st, S_NODE); }

#define WEAKLIST(o) (*(PyObject **)((char *)(o) + Py_TYPE(o)->tp_weaklistoffset))

/* -- float64 elements moved as C doubles --------------------------------------------------------
   NumPy's own `a[i] += v` on a float64 vector spends most of its time in its general machinery:
   index parsing, a scalar made per read (PyArray_Scalar copies the element's bytes into a new
   np.float64), scalar arithmetic that converts both operands and reads the floating-point
   status, a store that parses the index again. For a native, aligned float64 buffer indexed
   by Python ints the element is a C double at a computed address, and np.float64 subclasses
   Python's float without adding a field (PyFloatObject's layout), so the paths below move the
   double itself: the bits NumPy's read copies, its arithmetic computes (one IEEE operation of
   the same operands) and its store writes. Anything else takes NumPy's own calls, as before. */

/* position `k` along a dimension of length n (negative counts from the end): 1 with *out, or 0
   (not an exact int, or out of range: the caller's general path raises), no error set */
static int axis_index(PyObject *k, npy_intp n, npy_intp *out) {
  if (!PyLong_CheckExact(k)) return 0;
  Py_ssize_t i = PyLong_AsSsize_t(k);
  if (i == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
  if (i < 0) i += n;
  if (i < 0 || i >= n) return 0;
  *out = i;
  return 1;
}

/* the address of element `key` (an int for a vector, a tuple of one int per dimension) of a
   native, aligned float64 buffer; NULL for another dtype or key, or an index out of range */
static char *f64_at(PyArrayObject *a, PyObject *key) {
  PyArray_Descr *d = PyArray_DESCR(a);
  if (!F64_OK || d->type_num != NPY_DOUBLE || !PyArray_ISNBO(d->byteorder) || !(PyArray_FLAGS(a) & NPY_ARRAY_ALIGNED))
    return NULL;
  int nd = PyArray_NDIM(a);
  npy_intp *dims = PyArray_DIMS(a), *strides = PyArray_STRIDES(a), i;
  char *p = PyArray_BYTES(a);
  if (PyTuple_CheckExact(key)) {
    if (PyTuple_GET_SIZE(key) != nd) return NULL;
    for (int j = 0; j < nd; j++) {
      if (!axis_index(PyTuple_GET_ITEM(key, j), dims[j], &i)) return NULL;
      p += i * strides[j];
    }
    return p;
  }
  if (nd != 1 || !axis_index(key, dims[0], &i)) return NULL;
  return p + i * strides[0];
}

/* a new np.float64 holding x: what PyArray_Scalar makes (tp_alloc, then the value's bytes) */
static PyObject *f64_new(double x) {
  PyObject *o = T_F64->tp_alloc(T_F64, 0);
  if (o != NULL) ((PyFloatObject *)o)->ob_fval = x;
  return o;
}

/* the double of a Python float or np.float64 (*x), or of an exact int of at most 2**53 in
   magnitude (converted exactly, as NumPy converts it); 0 for anything else, no error set */
static int f64_operand(PyObject *o, double *x) {
  if (PyFloat_CheckExact(o) || Py_TYPE(o) == T_F64) {
    *x = PyFloat_AS_DOUBLE(o);
    return 1;
  }
  if (PyLong_CheckExact(o)) {
    int over = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &over);
    if (v == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (over || v > (1LL << 53) || v < -(1LL << 53)) return 0;
    *x = (double)v;
    return 1;
  }
  return 0;
}

/* x op y as NumPy's float64 scalar arithmetic computes it */
static double f64_op(int k, double x, double y) {
  switch (k) {
    case 0: return x + y;
    case 1: return x - y;
    case 2: return x * y;
    default: return x / y;
  }
}

/* whether NumPy's scalar arithmetic gives r = x op y without a floating-point flag it reports
   (overflow, invalid, divide by zero, underflow: np.errstate decides what those do, so they
   take NumPy's own call): a finite result of normal magnitude, or an exact zero */
static int f64_quiet(int k, double x, double y, double r) {
  if (!isfinite(r)) return 0;
  if (fabs(r) >= DBL_MIN) return 1;
  if (r != 0.0) return 0;  /* subnormal: an underflow when inexact */
  switch (k) {
    case 0: case 1: return 1;  /* x = -y or x = y: exact cancellation */
    case 2: return x == 0.0 || y == 0.0;  /* (finite: r is not NaN) */
    default: return x == 0.0 && y != 0.0;
  }
}

/* the referent of weak reference w, borrowed (Py_None once dead) */
static PyObject *weak_target(PyObject *w) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject *o = NULL;
  if (PyWeakref_GetRef(w, &o) < 0) { PyErr_Clear(); return Py_None; }
  if (o == NULL) return Py_None;
  Py_DECREF(o);  /* alive: the caller holds the object it compares against */
  return o;
#else
  return PyWeakref_GET_OBJECT(w);
#endif
}

/* `ref(node)` (the `src` of a floating element read): the one kept from the latest read when
   it is to the same node, else made and kept; a new reference */
static PyObject *weak_to(PyObject *node) {
  if (LAST_SRC != NULL && weak_target(LAST_SRC) == node) return Py_NewRef(LAST_SRC);
  PyObject *w = PyWeakref_NewRef(node, NULL);
  if (w != NULL) Py_XSETREF(LAST_SRC, Py_NewRef(w));
  return w;
}

/* the `val` of a `_Held` (configure checked no class attribute stands for it) */
static PyObject *held_val(PyObject *held) { return dict_field(held, S_VAL); }

/* The Scalar last made by held_scalar, kept: when nothing else holds it any more (count 1, no weak
   reference, still its own `_Held` of the two fields), the next element read refills it instead
   of allocating and freeing a Scalar and a `_Held` per read. */
static PyObject *SPARE;

/* the spare's `_Held` when nothing else holds the spare or it (borrowed), else NULL */
static PyObject *spare_held(void) {
  PyObject *out = SPARE, *held;
  if (out == NULL || Py_REFCNT(out) != 1 || WEAKLIST(out) != NULL) return NULL;
  held = SLOT(out, A_STORAGE);
  if (held == NULL || Py_TYPE(held) != T_Held || Py_REFCNT(held) != 1 || WEAKLIST(held) != NULL) return NULL;
  return held;
}

/* the refilled spare's Array fields put back to a plain scalar's; a new reference to it */
static PyObject *spare_reset(PyObject *out) {
  if (SLOT(out, A_VIEW) != Py_None) Py_XSETREF(SLOT(out, A_VIEW), Py_NewRef(Py_None));
  if (SLOT(out, A_VNODE) != Py_None) Py_XSETREF(SLOT(out, A_VNODE), Py_NewRef(Py_None));
  if (SLOT(out, A_VBASE) != Py_None) Py_XSETREF(SLOT(out, A_VBASE), Py_NewRef(Py_None));
  if (SLOT(out, A_READONLY) != Py_False) Py_XSETREF(SLOT(out, A_READONLY), Py_NewRef(Py_False));
  return Py_NewRef(out);
}

static PyObject *refill_spare(PyObject *val, PyObject *src) {
  PyObject *out = SPARE, *held = spare_held();
  if (held == NULL) return NULL;
  PyObject *d = PyObject_GenericGetDict(held, NULL);  /* materialized once, the spare's own */
  if (d == NULL) { PyErr_Clear(); return NULL; }
  /* exactly `val` and `src` (anything set since, `.grad`, makes a new one) */
  int ok = PyDict_GET_SIZE(d) == 2 && PyDict_SetItem(d, S_VAL, val) == 0 && PyDict_SetItem(d, S_SRC, src) == 0
           && PyDict_GET_SIZE(d) == 2;
  Py_DECREF(d);
  if (!ok) { PyErr_Clear(); Py_CLEAR(SPARE); return NULL; }
  return spare_reset(out);
}

/* the spare refilled with element x of a float64 buffer of `node`: its np.float64 overwritten
   when the spare's dict alone holds it (nothing can see the old value go), else a new one */
static PyObject *refill_f64(double x, PyObject *node) {
  PyObject *held = spare_held();
  if (held == NULL) return NULL;
  PyObject *d = PyObject_GenericGetDict(held, NULL);  /* materialized once, the spare's own */
  if (d == NULL) { PyErr_Clear(); return NULL; }
  /* exactly `val` and `src` (anything set since, `.grad`, makes a new one) */
  PyObject *val = NULL, *src = NULL, *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_GET_SIZE(d) == 2 && (val == NULL || src == NULL) && PyDict_Next(d, &pos, &k, &v)) {
    /* one walk finds both */
    if (k == S_VAL) val = v;
    else if (k == S_SRC) src = v;
  }
  if (val == NULL || src == NULL) {  /* (names stored uninterned: looked up) */
    val = PyDict_GET_SIZE(d) == 2 ? field(d, S_VAL) : NULL;
    src = val == NULL ? NULL : field(d, S_SRC);
  }
  PyObject *w = src == NULL ? NULL : weak_to(node);
  int ok = w != NULL;
  if (ok && Py_TYPE(val) == T_F64 && Py_REFCNT(val) == 1) {
    ((PyFloatObject *)val)->ob_fval = x;
  } else if (ok) {
    PyObject *nv = f64_new(x);
    ok = nv != NULL && PyDict_SetItem(d, S_VAL, nv) == 0;
    Py_XDECREF(nv);
  }
  if (ok && src != w) ok = PyDict_SetItem(d, S_SRC, w) == 0;
  Py_XDECREF(w);
  Py_DECREF(d);
  if (!ok) { PyErr_Clear(); Py_CLEAR(SPARE); return NULL; }
  return spare_reset(SPARE);
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
  char *at = kind == 'f' ? f64_at((PyArrayObject *)buf, key) : NULL;
  if (at != NULL) {  /* a float64 element: its double, into the spare or a new Scalar */
    double x = *(double *)at;
    PyObject *out = refill_f64(x, node);
    if (out == NULL) {
      PyObject *fv = f64_new(x), *w = fv == NULL ? NULL : weak_to(node);
      out = w == NULL ? NULL : held_scalar(fv, w);
      Py_XDECREF(w);
      Py_XDECREF(fv);
    }
    Py_DECREF(node);
    return out;
  }
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
  node = field(d, S_NODE);
  /* `node` its only field (the common case: the other three are the class defaults), or
     `node` and `hist` */
  Py_ssize_t size = PyDict_GET_SIZE(d);
  hist = node == NULL || size == 1 ? NULL : PyDict_GetItemWithError(d, S_HIST);
  int known = node != NULL && size == 1 + (hist != NULL);
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
    v = held_val(vs);
    if (v == NULL) goto slow;
  } else {
    goto slow;
  }
  if (!int_index(key)) goto slow;
  node = dead_buffer(st);
  if (node == NULL) goto slow;
  PyObject *buf = SLOT(node, N_BUFFER);
  PyArrayObject *a = (PyArrayObject *)buf;
  int flags = PyArray_FLAGS(a);
  char *at = PyFloat_CheckExact(v) || Py_TYPE(v) == T_F64 ? f64_at(a, key) : NULL;
  if (at != NULL && (flags & (NPY_ARRAY_WRITEABLE | NPY_ARRAY_OWNDATA))) {
    /* a double into a float64 element: the bits NumPy's store writes. An evaluated value is
       read-only (`_value` hands it out so again); a buffer that owns its memory, which nothing
       else can read, stays writeable for the next write, as direct._direct_set leaves it */
    if (!(flags & NPY_ARRAY_WRITEABLE)) PyArray_ENABLEFLAGS(a, NPY_ARRAY_WRITEABLE);
    *(double *)at = PyFloat_AS_DOUBLE(v);
    Py_DECREF(node);
    Py_DECREF(v);
    Py_RETURN_NONE;
  }
  if (!(flags & NPY_ARRAY_WRITEABLE)) goto slow;  /* the Python path makes it writeable */
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
    PyObject *val = held_val(st);
    if (val != NULL) {
      PyObject *r = Py_TYPE(val) == T_F64 && F64_OK ? PyFloat_FromDouble(PyFloat_AS_DOUBLE(val))
                    : in_set(REAL_SCALARS, val) ? PyNumber_Float(val) : NULL;
      Py_DECREF(val);
      if (r != NULL) return r;
      PyErr_Clear();
    }
  }
  return call(PY_FLOAT, self, args, nargs);
}

/* `s op= y` of a held np.float64 with the double y, in C: NULL without an error where NumPy's
   scalar arithmetic runs instead (another type, a result that sets a flag NumPy reports) */
static PyObject *f64_iop(int k, PyObject *self, PyObject *st, double y) {
  PyObject *d = PyObject_GenericGetDict(st, NULL);
  if (d == NULL) { PyErr_Clear(); return NULL; }
  PyObject *val = field(d, S_VAL), *out = NULL;
  if (val == NULL || Py_TYPE(val) != T_F64) { Py_DECREF(d); return NULL; }
  double x = PyFloat_AS_DOUBLE(val), r = k == 3 && y == 0.0 ? NAN : f64_op(k, x, y);
  if (!f64_quiet(k, x, y, r)) { Py_DECREF(d); return NULL; }
  if (Py_REFCNT(self) == 1 + (self == SPARE) && Py_REFCNT(st) == 1) {
    /* held by the statement alone (`a[i] += v`): nobody sees the old value go; nor the old
       np.float64's, when the dict alone holds it */
    if (Py_REFCNT(val) == 1) {
      ((PyFloatObject *)val)->ob_fval = r;
      out = Py_NewRef(self);
    } else {
      PyObject *nv = f64_new(r);
      if (nv != NULL && PyDict_SetItem(d, S_VAL, nv) == 0) out = Py_NewRef(self);
      Py_XDECREF(nv);
    }
  } else {
    PyObject *src = PyDict_GetItemWithError(d, S_SRC), *nv;
    if (src == NULL && !PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, S_SRC);
    if (src != NULL && (nv = f64_new(r)) != NULL) {
      Py_INCREF(src);
      out = held_scalar(nv, src);
      Py_DECREF(src);
      Py_DECREF(nv);
    }
  }
  Py_DECREF(d);
  return out;
}

/* s op= v: elements.scalar_inplace's held branch with a Python or NumPy scalar */
static PyObject *iop(int k, PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *st = SLOT(self, A_STORAGE);
  if (!READY || nargs != 1 || st == NULL || Py_TYPE(st) != T_Held) return call(PY_IOP[k], self, args, nargs);
  PyObject *other = args[0];
  double y;
  if (F64_OK && f64_operand(other, &y)) {
    PyObject *out = f64_iop(k, self, st, y);
    if (out != NULL || PyErr_Occurred()) return out;
  }
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
