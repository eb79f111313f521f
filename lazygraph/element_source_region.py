"""The second half of the element extension's C source: region updates, Array's C base class, configure().

lazygraph/element_source.py appends it to the first half (element reads, writes and `s op= v`);
one translation unit, split only to keep each file readable.
"""

REGION_SOURCE = r"""/* whether UFUNC[k] is NumPy's own ufunc of the operator: `region op= o` (the number protocol)
   is then the same call as `ufunc(region, o, out=region)` without parsing a keyword (80 ns) */
static int NUMBER_OK[4];
static PyObject *inplace_number(int k, PyObject *a, PyObject *b) {
  switch (k) {
    case 0: return PyNumber_InPlaceAdd(a, b);
    case 1: return PyNumber_InPlaceSubtract(a, b);
    case 2: return PyNumber_InPlaceMultiply(a, b);
    default: return PyNumber_InPlaceTrueDivide(a, b);
  }
}

/* (view, base shape) -> RECIPES' entry, by identity (borrowed, or NULL without an error): a row
   loop asks for the same memoized row views again and again, and hashing the nested tuples
   of the key cost about as much as the index itself. The cache holds its keys, so a pointer
   seen again is the same (immutable) tuple; a recipe depends only on its key's values. */
#define RCACHE 256
static PyObject *RC_VIEW[RCACHE], *RC_SHAPE[RCACHE], *RC_HOW[RCACHE];
static PyObject *recipe_of(PyObject *view, PyObject *shape) {
  size_t h = (((uintptr_t)view >> 4) ^ ((uintptr_t)shape >> 6)) & (RCACHE - 1);
  if (RC_VIEW[h] == view && RC_SHAPE[h] == shape) return RC_HOW[h];
  PyObject *rk = PyTuple_Pack(2, view, shape);
  PyObject *how = rk == NULL ? NULL : PyDict_GetItemWithError(RECIPES, rk);
  Py_XDECREF(rk);
  if (how == NULL) { PyErr_Clear(); return NULL; }
  PyObject *ov = RC_VIEW[h], *os = RC_SHAPE[h], *oh = RC_HOW[h];
  RC_VIEW[h] = Py_NewRef(view);
  RC_SHAPE[h] = Py_NewRef(shape);
  RC_HOW[h] = Py_NewRef(how);
  Py_XDECREF(ov);
  Py_XDECREF(os);
  Py_XDECREF(oh);
  return how;
}

/* `row op= o` over a 1-d view of a C-contiguous float64 buffer, o a float64 scalar or a float64
   vector of the row's length, as C doubles: a NumPy ufunc call costs 0.3-0.4 us, a row of 8
   doubles 10 ns. 1 when written; 0 when not this case or when some element would raise a
   floating-point flag (np.errstate decides what that does: NumPy's own call then does the
   whole row), with nothing written. Results are stored after every element was checked. */
#define F64_ROW_MAX 256
static int f64_row(int k, PyObject *buf, PyObject *view, PyObject *o) {
  PyArrayObject *a = (PyArrayObject *)buf;
  PyArray_Descr *d = PyArray_DESCR(a);
  if (!F64_OK || d->type_num != NPY_DOUBLE || !PyArray_ISNBO(d->byteorder) || !(PyArray_FLAGS(a) & NPY_ARRAY_ALIGNED))
    return 0;
  PyObject *vs = PyTuple_GET_ITEM(view, 0), *vst = PyTuple_GET_ITEM(view, 1);
  if (!PyTuple_CheckExact(vs) || PyTuple_GET_SIZE(vs) != 1 || !PyTuple_CheckExact(vst) || PyTuple_GET_SIZE(vst) != 1)
    return 0;
  Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(vs, 0)), st = PyLong_AsSsize_t(PyTuple_GET_ITEM(vst, 0));
  Py_ssize_t off = PyLong_AsSsize_t(PyTuple_GET_ITEM(view, 2));
  if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
  Py_ssize_t total = 1;
  for (int i = 0; i < PyArray_NDIM(a); i++) total *= PyArray_DIMS(a)[i];
  /* inside the buffer (views are made in range: checked anyway, it costs nothing) */
  if (n < 1 || n > F64_ROW_MAX || off < 0 || off >= total || off + (n - 1) * st < 0 || off + (n - 1) * st >= total)
    return 0;
  const double *yv = NULL;
  double ys = 0.0;
  if (Py_TYPE(o) == T_ndarray) {
    PyArrayObject *b = (PyArrayObject *)o;
    PyArray_Descr *e = PyArray_DESCR(b);
    if (e->type_num != NPY_DOUBLE || !PyArray_ISNBO(e->byteorder) || PyArray_NDIM(b) != 1 || PyArray_DIMS(b)[0] != n
        || (n > 1 && PyArray_STRIDES(b)[0] != (npy_intp)sizeof(double)) || !(PyArray_FLAGS(b) & NPY_ARRAY_ALIGNED))
      return 0;
    yv = (const double *)PyArray_BYTES(b);
  } else if (!f64_operand(o, &ys)) {
    return 0;
  }
  double *x = (double *)PyArray_BYTES(a) + off, r[F64_ROW_MAX];
  for (Py_ssize_t j = 0; j < n; j++) {
    double xj = x[j * st], yj = yv ? yv[j] : ys;
    r[j] = k == 3 && yj == 0.0 ? NAN : f64_op(k, xj, yj);
    if (!f64_quiet(k, xj, yj, r[j])) return 0;
  }
  for (Py_ssize_t j = 0; j < n; j++) x[j * st] = r[j];
  return 1;
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
  if (f64_row(k, buf, view, o)) {
    Py_DECREF(o);
    Py_DECREF(node);
    return Py_NewRef(self);
  }
  /* ops.views.materialize(buf, view, writeable=True): a basic index of the buffer when its
     recipe memo says so (`base[arg]`, kind "i"), else the function itself */
  PyObject *region = NULL, *how = recipe_of(view, SLOT(node, N_SHAPE));
  if (how != NULL && PyTuple_CheckExact(how) && PyTuple_GET_SIZE(how) == 2 && PyTuple_GET_ITEM(how, 0) == KIND_INDEX)
    region = PyObject_GetItem(buf, PyTuple_GET_ITEM(how, 1));
  else {
    PyErr_Clear();
    PyObject *margs[3] = {buf, view, Py_True};
    region = PyObject_Vectorcall(MATERIALIZE, margs, 2, KW_WRITEABLE);
  }
  if (region == NULL) { PyErr_Clear(); goto slow; }
  PyObject *res;
  if (NUMBER_OK[k] && Py_TYPE(region) == T_ndarray) {
    res = inplace_number(k, region, o);  /* NumPy's array returns itself, written */
  } else {  /* (a 0-d region is a NumPy scalar: its `+=` would make a new one, writing nothing) */
    PyObject *uargs[3] = {region, o, region};
    res = PyObject_Vectorcall(UFUNC[k], uargs, 2, KW_OUT);
  }
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
  /* refills and `s op= v` read and write a `_Held`'s val and src in its dict: no class attribute
     may stand for them */
  if (PyObject_HasAttr((PyObject *)T_Held, S_VAL) || PyObject_HasAttr((PyObject *)T_Held, S_SRC)) {
    PyErr_SetString(PyExc_TypeError, "configure: _Held.val or _Held.src");
    return NULL;
  }
  /* the float64 paths read and write np.float64's value as a Python float's */
  F64_OK = PyType_IsSubtype(T_F64, &PyFloat_Type) && T_F64->tp_basicsize == (Py_ssize_t)sizeof(PyFloatObject)
           && T_F64->tp_itemsize == 0;
  REGION_MAX = PyLong_AsSsize_t(REGION_MAX_OBJ);
  if (REGION_MAX < 0) return NULL;
  if (!PyDict_CheckExact(RECIPES)) { PyErr_SetString(PyExc_TypeError, "configure: recipes"); return NULL; }
  PyObject *np = PyImport_ImportModule("numpy");
  if (np == NULL) return NULL;
  const char *ufuncs[] = {"add", "subtract", "multiply", "true_divide"};
  for (int k = 0; k < 4; k++) {
    PyObject *u = PyObject_GetAttrString(np, ufuncs[k]);
    if (u == NULL) { Py_DECREF(np); return NULL; }
    NUMBER_OK[k] = u == UFUNC[k];
    Py_DECREF(u);
  }
  Py_DECREF(np);
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
