"""The C source of the element extension (lazygraph/element_ext.py builds, loads and installs it).

Each function runs the proof of its Python counterpart (lazygraph/direct.py, lazygraph/elements.py)
and calls that counterpart when any check fails, so the extension changes speed only.
"""

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

/* region op= other: elements._inplace's direct branch (direct._direct_inplace) for a view
   array whose node was never read, over a buffer nothing else can read */
static PyObject *arr_iop(int k, PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *node = NULL, *o = NULL;
  if (!READY || nargs != 1 || Py_TYPE(self) != T_Array || UFUNC[k] == Py_None || !is_false(SLOT(self, A_READONLY))
      || SLOT(self, A_VBASE) != Py_None)
    goto slow;
  PyObject *view = SLOT(self, A_VIEW), *other = args[0];
  if (view == NULL || view == Py_None || !PyTuple_Check(view) || PyTuple_GET_SIZE(view) != 3) goto slow;
  if (Py_TYPE(other) == T_Array) {
    PyObject *ost = SLOT(other, A_STORAGE);
    if (SLOT(other, A_VIEW) != Py_None || ost == NULL || Py_TYPE(ost) != T_Storage) goto slow;
    PyObject *onode = PyObject_GetAttr(ost, S_NODE);
    if (onode == NULL) { PyErr_Clear(); goto slow; }
    o = Py_TYPE(onode) == T_Node ? Py_XNewRef(SLOT(onode, N_BUFFER)) : NULL;
    Py_DECREF(onode);
    if (o == NULL || Py_TYPE(o) != T_ndarray) goto slow;
  } else if (Py_TYPE(other) == T_ndarray || PyFloat_CheckExact(other) || PyLong_CheckExact(other)
             || in_set(DIRECT_VALUES, other)) {
    o = Py_NewRef(other);
  } else {
    goto slow;
  }
  node = dead_buffer(SLOT(self, A_STORAGE));
  if (node == NULL) goto slow;
  PyObject *buf = SLOT(node, N_BUFFER), *vshape = PyTuple_GET_ITEM(view, 0);
  if (!PyTuple_CheckExact(vshape)) goto slow;
  Py_ssize_t size = 1;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(vshape); i++) {
    Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(vshape, i));
    if (d < 0) { PyErr_Clear(); goto slow; }
    size *= d;
    if (size > REGION_MAX) goto slow;  /* larger regions stay recorded, to fuse */
  }
  int flags = PyArray_FLAGS((PyArrayObject *)buf);
  /* another layout would be materialized as a copy; a read-only buffer: the Python path
     makes it writeable (`_value` handed it out) */
  if (!(flags & NPY_ARRAY_C_CONTIGUOUS) || !(flags & NPY_ARRAY_WRITEABLE)) goto slow;
  /* ops.views.materialize(buf, view, writeable=True): a basic index of the buffer when its
     recipe memo says so (`base[arg]`, kind "i"), else the function itself */
  PyObject *region = NULL, *rk = PyTuple_Pack(2, view, SLOT(node, N_SHAPE));
  PyObject *how = rk == NULL ? NULL : PyDict_GetItemWithError(RECIPES, rk);
  Py_XDECREF(rk);
  if (how != NULL && PyTuple_CheckExact(how) && PyTuple_GET_SIZE(how) == 2 && PyTuple_GET_ITEM(how, 0) == KIND_INDEX)
    region = PyObject_GetItem(buf, PyTuple_GET_ITEM(how, 1));
  else {
    PyErr_Clear();
    PyObject *margs[3] = {buf, view, Py_True};
    region = PyObject_Vectorcall(MATERIALIZE, margs, 2, KW_WRITEABLE);
  }
  if (region == NULL) { PyErr_Clear(); goto slow; }
  PyObject *uargs[3] = {region, o, region};
  PyObject *res = PyObject_Vectorcall(UFUNC[k], uargs, 2, KW_OUT);
  Py_DECREF(region);
  Py_DECREF(o);
  Py_DECREF(node);
  if (res == NULL) {
    if (PyErr_ExceptionMatches(PyExc_FloatingPointError)) return NULL;  /* np.errstate asked for it */
    PyErr_Clear();  /* a cast or shape NumPy refuses: nothing written, the recorded path raises */
    PyObject *rargs[3] = {self, OPNAME[k], other};
    return PyObject_Vectorcall(PY_RECORDED, rargs, 3, NULL);
  }
  Py_DECREF(res);
  return Py_NewRef(self);
slow:
  Py_XDECREF(node);
  Py_XDECREF(o);
  return call(PY_ARR_IOP[k], self, args, nargs);
}

static PyObject *lg_arr_iadd(PyObject *s, PyObject *const *a, Py_ssize_t n) { return arr_iop(0, s, a, n); }
static PyObject *lg_arr_isub(PyObject *s, PyObject *const *a, Py_ssize_t n) { return arr_iop(1, s, a, n); }
static PyObject *lg_arr_imul(PyObject *s, PyObject *const *a, Py_ssize_t n) { return arr_iop(2, s, a, n); }
static PyObject *lg_arr_itruediv(PyObject *s, PyObject *const *a, Py_ssize_t n) { return arr_iop(3, s, a, n); }

static PyObject *lg_iadd(PyObject *s, PyObject *const *a, Py_ssize_t n) { return iop(0, s, a, n); }
static PyObject *lg_isub(PyObject *s, PyObject *const *a, Py_ssize_t n) { return iop(1, s, a, n); }
static PyObject *lg_imul(PyObject *s, PyObject *const *a, Py_ssize_t n) { return iop(2, s, a, n); }
static PyObject *lg_itruediv(PyObject *s, PyObject *const *a, Py_ssize_t n) { return iop(3, s, a, n); }

/* The same functions as type slots of a base class with no fields of its own (Array's base once
   built, element_ext._install): `a[i]` then calls lg_getitem directly, where a method in Array's
   dict costs a name lookup and a bound call per operation (slot_mp_subscript). */
static PyObject *S_DELITEM, *PY_ARR_FLOAT;
static PyObject *b_subscript(PyObject *self, PyObject *key) { return lg_getitem(self, &key, 1); }
static int b_ass_subscript(PyObject *self, PyObject *key, PyObject *value) {
  if (value == NULL) {  /* `del a[i]`: what Array without __delitem__ raised (slot_mp_ass_subscript) */
    PyErr_SetObject(PyExc_AttributeError, S_DELITEM);
    return -1;
  }
  PyObject *args[2] = {key, value};
  PyObject *r = lg_setitem(self, args, 2);
  if (r == NULL) return -1;
  Py_DECREF(r);
  return 0;
}
/* `s op= v` of a Scalar, `region op= v` of any other Array (each defers to its own Python method) */
static PyObject *b_iop(int k, PyObject *self, PyObject *other) {
  if (PyObject_TypeCheck(self, T_Scalar)) return iop(k, self, &other, 1);
  return arr_iop(k, self, &other, 1);
}
static PyObject *b_iadd(PyObject *s, PyObject *o) { return b_iop(0, s, o); }
static PyObject *b_isub(PyObject *s, PyObject *o) { return b_iop(1, s, o); }
static PyObject *b_imul(PyObject *s, PyObject *o) { return b_iop(2, s, o); }
static PyObject *b_itruediv(PyObject *s, PyObject *o) { return b_iop(3, s, o); }
/* float(s) of a Scalar; any other Array: Array.__float__ (the Python method the base stands for) */
static PyObject *b_float(PyObject *self) {
  if (PyObject_TypeCheck(self, T_Scalar)) return lg_float(self, NULL, 0);
  return call(PY_ARR_FLOAT, self, NULL, 0);
}
static PyType_Slot BASE_SLOTS[] = {{Py_mp_subscript, b_subscript}, {Py_mp_ass_subscript, b_ass_subscript},
                                   {Py_nb_float, b_float},
                                   {Py_nb_inplace_add, b_iadd}, {Py_nb_inplace_subtract, b_isub},
                                   {Py_nb_inplace_multiply, b_imul}, {Py_nb_inplace_true_divide, b_itruediv},
                                   {Py_tp_doc, "Array's base: element reads and writes in C (lazygraph/element_ext.py)"},
                                   {0, NULL}};
static PyType_Spec BASE_SPEC = {"lazygraph.ElementBase", sizeof(PyObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, BASE_SLOTS};

static PyMethodDef ARRAY_METHODS[] = {
  {"__getitem__", (PyCFunction)(void (*)(void))lg_getitem, METH_FASTCALL, "a[key] (element loops in C)"},
  {"__setitem__", (PyCFunction)(void (*)(void))lg_setitem, METH_FASTCALL, "a[key] = v (element loops in C)"},
  {"__iadd__", (PyCFunction)(void (*)(void))lg_arr_iadd, METH_FASTCALL, "region += v (row loops in C)"},
  {"__isub__", (PyCFunction)(void (*)(void))lg_arr_isub, METH_FASTCALL, "region -= v (row loops in C)"},
  {"__imul__", (PyCFunction)(void (*)(void))lg_arr_imul, METH_FASTCALL, "region *= v (row loops in C)"},
  {"__itruediv__", (PyCFunction)(void (*)(void))lg_arr_itruediv, METH_FASTCALL, "region /= v (row loops in C)"},
  {NULL, NULL, 0, NULL}};
static PyMethodDef SCALAR_METHODS[] = {
  {"__float__", (PyCFunction)(void (*)(void))lg_float, METH_FASTCALL, "float(s) (element loops in C)"},
  {"__iadd__", (PyCFunction)(void (*)(void))lg_iadd, METH_FASTCALL, "s += v (element loops in C)"},
  {"__isub__", (PyCFunction)(void (*)(void))lg_isub, METH_FASTCALL, "s -= v (element loops in C)"},
  {"__imul__", (PyCFunction)(void (*)(void))lg_imul, METH_FASTCALL, "s *= v (element loops in C)"},
  {"__itruediv__", (PyCFunction)(void (*)(void))lg_itruediv, METH_FASTCALL, "s /= v (element loops in C)"},
  {NULL, NULL, 0, NULL}};

static int offset(PyObject *cls, const char *name, Py_ssize_t *out) {
  PyObject *d = PyObject_GetAttrString(cls, name);
  if (d == NULL) return -1;
  if (Py_TYPE(d) != &PyMemberDescr_Type) {
    Py_DECREF(d);
    PyErr_Format(PyExc_TypeError, "%s is not a slot", name);
    return -1;
  }
  *out = ((PyMemberDescrObject *)d)->d_member->offset;
  Py_DECREF(d);
  return 0;
}

static PyObject *get(PyObject *cfg, const char *name) {
  PyObject *o = PyDict_GetItemString(cfg, name);
  if (o == NULL) PyErr_Format(PyExc_KeyError, "configure: %s missing", name);
  return Py_XNewRef(o);
}

/* configure(cfg: dict) -> (array descriptors: dict, scalar descriptors: dict, Array's base class) */
static PyObject *lg_configure(PyObject *mod, PyObject *cfg) {
  PyObject *rows = PyDict_Check(cfg) ? PyDict_GetItemString(cfg, "rows") : NULL;
  if (READY || rows == NULL || !PyDict_CheckExact(rows)) { PyErr_SetString(PyExc_RuntimeError, "configure: once, with a dict"); return NULL; }
  PyObject **objs[] = {(PyObject **)&T_Array, (PyObject **)&T_Scalar, (PyObject **)&T_Storage, (PyObject **)&T_Held,
                       (PyObject **)&T_Node, (PyObject **)&T_ndarray, &HOST, &INT_KEYS, &DIRECT_VALUES, &NP_SCALARS,
                       &REAL_SCALARS, &COMPLEX_VALUES, &PY_GETITEM, &PY_SETITEM, &PY_FLOAT, &PY_HELD_SCALAR,
                       &PY_IOP[0], &PY_IOP[1], &PY_IOP[2], &PY_IOP[3], &PY_REC[0], &PY_REC[1], &PY_REC[2], &PY_REC[3],
                       &ROWS, &PY_ARR_IOP[0], &PY_ARR_IOP[1], &PY_ARR_IOP[2], &PY_ARR_IOP[3], &UFUNC[0], &UFUNC[1],
                       &UFUNC[2], &UFUNC[3], &OPNAME[0], &OPNAME[1], &OPNAME[2], &OPNAME[3], &PY_RECORDED, &MATERIALIZE,
                       &REGION_MAX_OBJ, &RECIPES, &KIND_INDEX, &PY_ARR_FLOAT, (PyObject **)&T_F64};
  const char *names[] = {"Array", "Scalar", "Storage", "Held", "Node", "ndarray", "HOST", "INT_KEYS", "DIRECT_VALUES",
                         "NP_SCALARS", "REAL_SCALARS", "COMPLEX_VALUES", "getitem", "setitem", "float", "held_scalar",
                         "iadd", "isub", "imul", "itruediv", "add", "subtract", "multiply", "divide", "rows",
                         "arr_iadd", "arr_isub", "arr_imul", "arr_itruediv", "ufunc_add", "ufunc_subtract",
                         "ufunc_multiply", "ufunc_divide", "name_add", "name_subtract", "name_multiply", "name_divide",
                         "recorded", "materialize", "region_max", "recipes", "kind_index", "arr_float", "float64"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if ((*objs[i] = get(cfg, names[i])) == NULL) return NULL;
  PyObject *arr = (PyObject *)T_Array, *nod = (PyObject *)T_Node;
  if (offset(arr, "_storage", &A_STORAGE) || offset(arr, "_view", &A_VIEW) || offset(arr, "_readonly", &A_READONLY)
      || offset(arr, "_vnode", &A_VNODE) || offset(arr, "_vbase", &A_VBASE) || offset(nod, "buffer", &N_BUFFER)
      || offset(nod, "users", &N_USERS) || offset(nod, "requires_grad", &N_GRAD) || offset(nod, "static", &N_STATIC)
      || offset(nod, "device", &N_DEVICE) || offset(nod, "shape", &N_SHAPE))
    return NULL;
  if (!(S_NODE = PyUnicode_InternFromString("node")) || !(S_VAL = PyUnicode_InternFromString("val"))
      || !(S_SRC = PyUnicode_InternFromString("src")) || !(S_HIST = PyUnicode_InternFromString("hist"))
      || !(S_GRAD = PyUnicode_InternFromString("requires_grad")) || !(S_STATIC = PyUnicode_InternFromString("static"))
      || !(EMPTY = PyTuple_New(0)) || !(KW_OUT = Py_BuildValue("(s)", "out"))
      || !(KW_WRITEABLE = Py_BuildValue("(s)", "writeable")))
    return NULL;
  /* dead_buffer reads a Storage's fields from its dict over these class defaults */
  const char *fields[] = {"hist", "requires_grad", "static"};
  PyObject *defaults[] = {Py_None, Py_False, Py_False};
  for (int i = 0; i < 3; i++) {
    PyObject *v = PyObject_GetAttrString((PyObject *)T_Storage, fields[i]);
    if (v == NULL) return NULL;
    Py_DECREF(v);
    if (v != defaults[i]) { PyErr_Format(PyExc_TypeError, "configure: Storage.%s", fields[i]); return NULL; }
  }
  REGION_MAX = PyLong_AsSsize_t(REGION_MAX_OBJ);
  if (REGION_MAX < 0) return NULL;
  if (!PyDict_CheckExact(RECIPES)) { PyErr_SetString(PyExc_TypeError, "configure: recipes"); return NULL; }
  PyObject *ad = PyDict_New(), *sd = PyDict_New();
  if (ad == NULL || sd == NULL) return NULL;
  for (PyMethodDef *m = ARRAY_METHODS; m->ml_name; m++) {
    PyObject *d = PyDescr_NewMethod(T_Array, m);
    if (d == NULL || PyDict_SetItemString(ad, m->ml_name, d) < 0) return NULL;
    Py_DECREF(d);
  }
  for (PyMethodDef *m = SCALAR_METHODS; m->ml_name; m++) {
    PyObject *d = PyDescr_NewMethod(T_Scalar, m);
    if (d == NULL || PyDict_SetItemString(sd, m->ml_name, d) < 0) return NULL;
    Py_DECREF(d);
  }
  if (!(S_DELITEM = PyUnicode_InternFromString("__delitem__"))) return NULL;
  PyObject *base = PyType_FromSpec(&BASE_SPEC);
  if (base == NULL) return NULL;
  READY = 1;
  return Py_BuildValue("(NNN)", ad, sd, base);
}

static PyMethodDef FUNCS[] = {{"configure", lg_configure, METH_O, "configure(cfg) -> (Array methods, Scalar methods, base class)"},
                              {"writable", lg_writable, METH_O, "direct._writable(arr) in C"},
                              {NULL, NULL, 0, NULL}};
static struct PyModuleDef MOD = {PyModuleDef_HEAD_INIT, "_lazygraph_elements", NULL, -1, FUNCS};
PyMODINIT_FUNC PyInit__lazygraph_elements(void) { return PyModule_Create(&MOD); }
"""
