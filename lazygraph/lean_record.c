/* The lean recorders' hit path in C (lazygraph/lean_native.py builds and loads it).

   A Python-level recorder costs about 1.5 us an operator on a slow machine, most of it frames
   and attribute traffic; this does the same work in one C call. It handles only the common
   case the Python recorder's memo already answers (array operands without a view, or one
   array and a Python float or an int in 0..127 on either side, a signature remembered, the
   operands on one device); anything else calls the Python recorder it was built from, which
   does everything, so the two never disagree on what they record: this one builds the same
   node, storage and array, field by field, with the same hash. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* slot offsets of Node (ops/node.py) and Array (lazygraph/array.py), read from their member
   descriptors by `setup` */
enum { N_OP, N_INPUTS, N_ATTRS, N_SHAPE, N_DTYPE, N_BUFFER, N_USERS, N_RG, N_GL, N_STATIC,
       N_DEVICE, N_KID, N_H, N_COUNT };
static const char *node_fields[N_COUNT] = {"op", "inputs", "attrs", "shape", "dtype", "buffer",
    "users", "requires_grad", "grad_leaf", "static", "device", "kid", "h"};
enum { A_STORAGE, A_VIEW, A_READONLY, A_VNODE, A_VBASE, A_COUNT };
static const char *array_fields[A_COUNT] = {"_storage", "_view", "_readonly", "_vnode", "_vbase"};

static Py_ssize_t noff[N_COUNT], aoff[A_COUNT];
static PyTypeObject *node_type, *storage_type, *array_type;
/* the names every recorder reads (recorders.py passes them once, to `setup`) */
static PyObject *plain, *scalar_op, *grad, *hint_of, *note_origin, *f64, *i64, *small, *host;
static PyObject *str_node, *str_enabled, *str_users, *one, *zero, *empty;
static int ready;

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

static void set_slot(PyObject *o, Py_ssize_t off, PyObject *v) {
    Py_INCREF(v);
    PyObject *old = SLOT(o, off);
    SLOT(o, off) = v;
    Py_XDECREF(old);
}

static int offsets(PyTypeObject *t, const char **names, Py_ssize_t *out, int n) {
    for (int i = 0; i < n; i++) {
        PyObject *d = PyDict_GetItemString(t->tp_dict, names[i]);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", t->tp_name, names[i]);
            return -1;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", t->tp_name, names[i]);
            return -1;
        }
        out[i] = m->offset;
    }
    return 0;
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *n, *s, *a, *o[9];
    if (!PyArg_ParseTuple(args, "O!O!O!OOOOOOOOO", &PyType_Type, &n, &PyType_Type, &s, &PyType_Type, &a,
                          &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8]))
        return NULL;
    if (ready) { PyErr_SetString(PyExc_RuntimeError, "setup() runs once"); return NULL; }
    if (!PyAnySet_Check(o[0])) { PyErr_SetString(PyExc_TypeError, "the plain types must be a set"); return NULL; }
    if (offsets((PyTypeObject *)n, node_fields, noff, N_COUNT) < 0) return NULL;
    if (offsets((PyTypeObject *)a, array_fields, aoff, A_COUNT) < 0) return NULL;
    Py_INCREF(n); Py_INCREF(s); Py_INCREF(a);
    node_type = (PyTypeObject *)n;
    storage_type = (PyTypeObject *)s;
    array_type = (PyTypeObject *)a;
    PyObject **f[9] = {&plain, &scalar_op, &grad, &hint_of, &note_origin, &f64, &i64, &small, &host};
    for (int i = 0; i < 9; i++) { Py_INCREF(o[i]); *f[i] = o[i]; }
    ready = 1;
    Py_RETURN_NONE;
}

/* Storage.__del__ (lazygraph/array.py) in C: the dropped storage's node has one user fewer.
   Python's method costs a frame on every array dropped: recording and dropping `a + b` took
   0.95 us with it and 0.87 with this one (best of alternated runs; 0.65 with no finalizer at
   all). At interpreter shutdown a missing name is ignored, as there. */
static PyObject *storage_del(PyObject *self, PyObject *unused) {
    PyObject *node = PyObject_GetAttr(self, str_node);
    if (node == NULL) goto missing;
    PyObject *u = Py_IS_TYPE(node, node_type) ? SLOT(node, noff[N_USERS]) : NULL;
    if (u != NULL && PyLong_CheckExact(u)) {
        PyObject *v = PyNumber_Subtract(u, one);
        if (v == NULL) { Py_DECREF(node); return NULL; }
        SLOT(node, noff[N_USERS]) = v;
        Py_DECREF(u);
    } else { /* not a Node, or its count unset: Python's own arithmetic */
        u = PyObject_GetAttr(node, str_users);
        PyObject *v = u == NULL ? NULL : PyNumber_Subtract(u, one);
        Py_XDECREF(u);
        int bad = v == NULL || PyObject_SetAttr(node, str_users, v) < 0;
        Py_XDECREF(v);
        if (bad) { Py_DECREF(node); goto missing; }
    }
    Py_DECREF(node);
    Py_RETURN_NONE;
missing:
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
}

static PyMethodDef storage_del_def = {"__del__", storage_del, METH_NOARGS,
    "The node this storage held loses a user (lean_record.c)."};

/* Storage's __del__ as a method descriptor of the class `setup` was given */
static PyObject *storage_finalizer(PyObject *self, PyObject *unused) {
    if (!ready) { PyErr_SetString(PyExc_RuntimeError, "setup() first"); return NULL; }
    return PyDescr_NewMethod(storage_type, &storage_del_def);
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int arity, swap;
    Py_ssize_t handled, passed; /* recordings done here, and handed to the Python recorder */
    PyObject *opdef, *cache, *fallback;
} Recorder;

/* a new Node, every field set as recorders._made / _scalar_leaf set them */
static PyObject *new_node(PyObject *op, PyObject *inputs, PyObject *shape, PyObject *dtype,
                          PyObject *buffer, PyObject *users, PyObject *rg, PyObject *gl,
                          PyObject *device, PyObject *kid, PyObject *h) {
    PyObject *node = node_type->tp_alloc(node_type, 0);
    if (node == NULL) return NULL;
    PyObject *attrs = PyDict_New();
    if (attrs == NULL) { Py_DECREF(node); return NULL; }
    set_slot(node, noff[N_OP], op);
    set_slot(node, noff[N_INPUTS], inputs);
    SLOT(node, noff[N_ATTRS]) = attrs;
    set_slot(node, noff[N_SHAPE], shape);
    set_slot(node, noff[N_DTYPE], dtype);
    set_slot(node, noff[N_BUFFER], buffer);
    set_slot(node, noff[N_USERS], users);
    set_slot(node, noff[N_RG], rg);
    set_slot(node, noff[N_GL], gl);
    set_slot(node, noff[N_STATIC], Py_False);
    set_slot(node, noff[N_DEVICE], device);
    set_slot(node, noff[N_KID], kid);
    set_slot(node, noff[N_H], h);
    return node;
}

/* Array(Storage(node)) as recorders._made builds it */
static PyObject *new_array(PyObject *node) {
    PyObject *storage = storage_type->tp_alloc(storage_type, 0);
    if (storage == NULL) return NULL;
    if (PyObject_SetAttr(storage, str_node, node) < 0) { Py_DECREF(storage); return NULL; }
    PyObject *arr = array_type->tp_alloc(array_type, 0);
    if (arr == NULL) { Py_DECREF(storage); return NULL; }
    SLOT(arr, aoff[A_STORAGE]) = storage;
    set_slot(arr, aoff[A_VIEW], Py_None);
    set_slot(arr, aoff[A_VNODE], Py_None);
    set_slot(arr, aoff[A_VBASE], Py_None);
    set_slot(arr, aoff[A_READONLY], Py_False);
    return arr;
}

/* the node of a plain array operand without a view (a new reference), or NULL (no error) */
static PyObject *plain_node(PyObject *x) {
    int is_plain = PySet_Contains(plain, (PyObject *)Py_TYPE(x));
    if (is_plain <= 0) { PyErr_Clear(); return NULL; }
    PyObject *view = SLOT(x, aoff[A_VIEW]), *st = SLOT(x, aoff[A_STORAGE]);
    if (view != Py_None || st == NULL) return NULL;
    PyObject *node = PyObject_GetAttr(st, str_node);
    if (node == NULL) { PyErr_Clear(); return NULL; }
    if (!Py_IS_TYPE(node, node_type) || SLOT(node, noff[N_DTYPE]) == NULL ||
        SLOT(node, noff[N_SHAPE]) == NULL || SLOT(node, noff[N_DEVICE]) == NULL) {
        Py_DECREF(node);
        return NULL;
    }
    return node;
}

/* the node's structural hint: its `h`, else cache.key.hint_of(node) (a new reference) */
static PyObject *hint(PyObject *memo, PyObject *node) {
    if (memo != Py_None) { Py_INCREF(memo); return memo; }
    PyObject *h = SLOT(node, noff[N_H]);
    if (h != NULL && h != Py_None) { Py_INCREF(h); return h; }
    return PyObject_CallOneArg(hint_of, node);
}

static PyObject *fall(Recorder *r, PyObject *const *args, size_t nargs) {
    r->passed++;
    return PyObject_Vectorcall(r->fallback, args, nargs, NULL);
}

/* gradmode.track: (requires_grad, grad_leaf) of a differentiable result */
static int track(PyObject *fc, PyObject *nx, PyObject *ny, PyObject **rg, PyObject **gl) {
    *rg = *gl = Py_False;
    if (fc != Py_True) return 0;
    PyObject *en = PyObject_GetAttr(grad, str_enabled);
    if (en == NULL) return -1;
    int on = PyObject_IsTrue(en);
    Py_DECREF(en);
    if (on < 0) return -1;
    if (!on) { *gl = Py_True; return 0; }
    PyObject *a = SLOT(nx, noff[N_RG]);
    if (a != NULL && a == Py_True) { *rg = Py_True; return 0; }
    if (ny != NULL) {
        PyObject *b = SLOT(ny, noff[N_RG]);
        if (b != NULL && b == Py_True) *rg = Py_True;
    }
    return 0;
}

static PyObject *finish(Recorder *r, PyObject *node) {
    if (node == NULL) return NULL;
    r->handled++;
    PyObject *arr = new_array(node);
    Py_DECREF(node);
    return arr;
}

/* The recorded array: a node of the memo hit's shape, dtype and local id over `inputs`, whose
   hint is hash(parts) as cache/key.py hashes it, with its gradient marks; a node whose kernel
   can fail remembers the user's line (txn.note_origin). */
static PyObject *result(Recorder *r, PyObject *hit, PyObject *parts, PyObject *inputs, PyObject *rg,
                        PyObject *gl, PyObject *device) {
    Py_hash_t h = PyObject_Hash(parts);
    if (h == -1) return NULL;
    PyObject *hobj = PyLong_FromSsize_t(h);
    if (hobj == NULL) return NULL;
    PyObject *node = new_node(r->opdef, inputs, PyTuple_GET_ITEM(hit, 0), PyTuple_GET_ITEM(hit, 1),
                              Py_None, one, rg, gl, device, PyTuple_GET_ITEM(hit, 4), hobj);
    Py_DECREF(hobj);
    if (node != NULL && PyObject_IsTrue(PyTuple_GET_ITEM(hit, 3))) {
        PyObject *res = PyObject_CallOneArg(note_origin, node);
        if (res == NULL) Py_CLEAR(node);
        Py_XDECREF(res);
    }
    return finish(r, node);
}

/* One operand of a binary recorder: its node (a new reference; a Python scalar's private leaf)
   and its two memo-key parts (borrowed). 1: done; 0: not handled here (nothing to undo); -1:
   an error. `*scalar` says whether it is a Python scalar. */
static int operand(PyObject *v, PyObject **node, PyObject **k0, PyObject **k1, int *scalar) {
    PyTypeObject *t = Py_TYPE(v);
    *scalar = t == &PyFloat_Type || t == &PyLong_Type;
    if (*scalar) {
        PyObject *dtype = f64, *sig = (PyObject *)&PyFloat_Type;
        if (t == &PyLong_Type) {
            int overflow;
            long i = PyLong_AsLongAndOverflow(v, &overflow);
            if (overflow || i < 0 || i > 127) return 0; /* other ints: Python's `_weak_sig` */
            dtype = i64;
            sig = small;
        }
        *node = new_node(scalar_op, empty, empty, dtype, v, zero, Py_False, Py_False, host,
                         Py_None, Py_None);
        *k0 = sig;
        *k1 = Py_None;
        return *node == NULL ? -1 : 1;
    }
    *node = plain_node(v);
    if (*node == NULL) return 0;
    *k0 = SLOT(*node, noff[N_DTYPE]);
    *k1 = SLOT(*node, noff[N_SHAPE]);
    return 1;
}

static PyObject *binary_call(Recorder *r, PyObject *const *args, size_t nargsf, PyObject *kw) {
    size_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kw != NULL) { r->passed++; return PyObject_Vectorcall(r->fallback, args, nargsf, kw); }
    /* a reflected dunder (`__radd__(self, other)`) records `other + self` */
    PyObject *x = args[r->swap], *y = args[1 - r->swap];
    PyObject *nx = NULL, *ny = NULL, *key = NULL, *out = NULL, *kx0, *kx1, *ky0, *ky1;
    int sx, sy;
    int ok = operand(x, &nx, &kx0, &kx1, &sx);
    if (ok == 1) ok = operand(y, &ny, &ky0, &ky1, &sy);
    if (ok == 1 && sx && sy) ok = 0; /* two Python scalars: `record` */
    if (ok <= 0) {
        Py_XDECREF(nx);
        Py_XDECREF(ny);
        return ok == 0 ? fall(r, args, 2) : NULL;
    }
    key = PyTuple_Pack(4, kx0, kx1, ky0, ky1);
    if (key == NULL) goto done;
    PyObject *hit = PyDict_GetItemWithError(r->cache, key); /* borrowed */
    if (hit == NULL) {
        if (!PyErr_Occurred()) out = fall(r, args, 2);
        goto done;
    }
    if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 7) { out = fall(r, args, 2); goto done; }
    Py_INCREF(hit);
    PyObject *device = SLOT(nx, noff[N_DEVICE]);
    PyObject *dy = SLOT(ny, noff[N_DEVICE]);
    if (SLOT(nx, noff[N_OP]) == scalar_op && SLOT(ny, noff[N_OP]) == scalar_op) {
        device = Py_None;
    } else if (device != dy) { /* a scalar or NumPy operand joins; two devices raise: Python's */
        Py_DECREF(hit);
        out = fall(r, args, 2);
        goto done;
    }
    PyObject *rg, *gl;
    PyObject *hx = NULL, *hy = NULL, *parts = NULL, *inputs = NULL;
    if (track(PyTuple_GET_ITEM(hit, 2), nx, ny, &rg, &gl) < 0) goto fail;
    hx = hint(PyTuple_GET_ITEM(hit, 5), nx);
    if (hx == NULL) goto fail;
    hy = hint(PyTuple_GET_ITEM(hit, 6), ny);
    if (hy == NULL) goto fail;
    parts = PyTuple_Pack(3, PyTuple_GET_ITEM(hit, 4), hx, hy);
    inputs = PyTuple_Pack(2, nx, ny);
    if (parts != NULL && inputs != NULL) out = result(r, hit, parts, inputs, rg, gl, device);
fail:
    Py_XDECREF(hx); Py_XDECREF(hy); Py_XDECREF(parts); Py_XDECREF(inputs);
    Py_DECREF(hit);
done:
    Py_XDECREF(key);
    Py_XDECREF(ny);
    Py_DECREF(nx);
    return out;
}

static PyObject *unary_call(Recorder *r, PyObject *const *args, size_t nargsf, PyObject *kw) {
    size_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || kw != NULL) { r->passed++; return PyObject_Vectorcall(r->fallback, args, nargsf, kw); }
    PyObject *nx = plain_node(args[0]);
    if (nx == NULL) return fall(r, args, 1);
    PyObject *out = NULL, *hx = NULL, *parts = NULL, *inputs = NULL;
    PyObject *key = PyTuple_Pack(2, SLOT(nx, noff[N_DTYPE]), SLOT(nx, noff[N_SHAPE]));
    if (key == NULL) goto done;
    PyObject *hit = PyDict_GetItemWithError(r->cache, key);
    if (hit == NULL || !PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 6) {
        if (!PyErr_Occurred()) out = fall(r, args, 1);
        goto done;
    }
    Py_INCREF(hit);
    PyObject *rg, *gl;
    if (track(PyTuple_GET_ITEM(hit, 2), nx, NULL, &rg, &gl) < 0) goto fail;
    hx = hint(Py_None, nx);
    if (hx == NULL) goto fail;
    parts = PyTuple_Pack(2, PyTuple_GET_ITEM(hit, 4), hx);
    inputs = PyTuple_Pack(1, nx);
    if (parts != NULL && inputs != NULL)
        out = result(r, hit, parts, inputs, rg, gl, SLOT(nx, noff[N_DEVICE]));
fail:
    Py_XDECREF(hx); Py_XDECREF(parts); Py_XDECREF(inputs);
    Py_DECREF(hit);
done:
    Py_XDECREF(key);
    Py_DECREF(nx);
    return out;
}

static PyObject *recorder_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    Recorder *r = (Recorder *)self;
    return r->arity == 2 ? binary_call(r, args, nargsf, kw) : unary_call(r, args, nargsf, kw);
}

static void recorder_dealloc(PyObject *self) {
    Recorder *r = (Recorder *)self;
    Py_XDECREF(r->opdef); Py_XDECREF(r->cache); Py_XDECREF(r->fallback);
    Py_TYPE(self)->tp_free(self);
}

/* a method when installed on a class (`a.__add__` binds as a function would) */
static PyObject *recorder_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) { Py_INCREF(self); return self; }
    return PyMethod_New(self, obj);
}

static PyObject *recorder_getattro(PyObject *self, PyObject *name) {
    /* __name__, __qualname__, __doc__, __wrapped__ ...: the Python recorder's */
    PyObject *v = PyObject_GenericGetAttr(self, name);
    if (v != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) return v;
    PyErr_Clear();
    return PyObject_GetAttr(((Recorder *)self)->fallback, name);
}

static PyMemberDef recorder_members[] = {
    {"python", T_OBJECT, offsetof(Recorder, fallback), READONLY, "the Python recorder it calls otherwise"},
    {"memo", T_OBJECT, offsetof(Recorder, cache), READONLY, "the signature memo it reads (the operator's)"},
    {"handled", T_PYSSIZET, offsetof(Recorder, handled), READONLY, "recordings made here"},
    {"passed", T_PYSSIZET, offsetof(Recorder, passed), READONLY, "recordings handed to the Python recorder"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_lazygraph_lean.Recorder",
    .tp_basicsize = sizeof(Recorder),
    .tp_dealloc = recorder_dealloc,
    .tp_vectorcall_offset = offsetof(Recorder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getattro = recorder_getattro,
    .tp_descr_get = recorder_get,
    .tp_members = recorder_members,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A lean recorder's hit path in C; anything else goes to the Python recorder.",
};

static PyObject *make(PyObject *self, PyObject *args) {
    int arity, swap;
    PyObject *opdef, *memo, *fallback;
    if (!PyArg_ParseTuple(args, "iiOO!O", &arity, &swap, &opdef, &PyDict_Type, &memo, &fallback)) return NULL;
    if (!ready) { PyErr_SetString(PyExc_RuntimeError, "setup() first"); return NULL; }
    Recorder *r = PyObject_New(Recorder, &RecorderType);
    if (r == NULL) return NULL;
    r->vectorcall = recorder_call;
    r->handled = r->passed = 0;
    r->arity = arity;
    r->swap = swap != 0;
    Py_INCREF(opdef); Py_INCREF(memo); Py_INCREF(fallback);
    r->opdef = opdef;
    r->cache = memo;
    r->fallback = fallback;
    return (PyObject *)r;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(Node, Storage, Array, plain types, SCALAR, grad state, hint_of, "
     "note_origin, f64, i64, small-int signature, HOST): once, before any recorder."},
    {"make", make, METH_VARARGS, "make(arity, swap, opdef, memo, python): one operator's recorder."},
    {"storage_finalizer", storage_finalizer, METH_NOARGS, "Storage.__del__ in C (after setup)."},
#ifdef MATCH_METHODS
    MATCH_METHODS  /* the templates' matchers (lean_match.c, compiled before this text) */
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lazygraph_lean", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__lazygraph_lean(void) {
    if (PyType_Ready(&RecorderType) < 0) return NULL;
#ifdef MATCH_METHODS
    if (match_types_ready() < 0) return NULL;
#endif
    str_node = PyUnicode_InternFromString("node");
    str_enabled = PyUnicode_InternFromString("enabled");
    str_users = PyUnicode_InternFromString("users");
    one = PyLong_FromLong(1);
    zero = PyLong_FromLong(0);
    empty = PyTuple_New(0);
    if (str_node == NULL || str_enabled == NULL || str_users == NULL || one == NULL || zero == NULL || empty == NULL)
        return NULL;
    return PyModule_Create(&module);
}
