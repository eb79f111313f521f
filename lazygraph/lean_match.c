/* A template's matcher in C (cache/tmatch.py describes the checks; lazygraph/lean_native.py
   builds and loads it).

   The generated Python matcher costs about 0.13 us a slot with warm caches and three times that
   right after a large step's kernels, most of it the interpreter's own traffic. This one does
   the very same checks, in the same order, over the template's slot tables: per operation (from
   the roots down) its inputs tuple, whose length is its arity, each input landing in its slot or
   compared by identity with the node already there; every operation's local id; the Python
   scalars' types; the held buffers' memoized (static, local id, owner), or `buffers_ok` in
   Python when one differs or memory is shared in the template; distinct nodes where two slots
   could hold the same one. It returns the nodes by slot, None (another structure) or SLOW (a node
   without its local id, or anything unexpected: the general match decides). Each node is owned
   by the result list from the moment it lands in its slot.

   It is compiled into the C recorder's module (lean_native.py puts this text before
   lean_record.c's, whose method table and init take `MATCH_METHODS` and `match_types_ready`):
   one build and one load for both. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdlib.h>
#include <string.h>

static Py_ssize_t off_inputs = -1, off_kid = -1, off_buffer = -1, off_static = -1;

#define MSLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

static int offset_of(PyTypeObject *t, const char *name, Py_ssize_t *out) {
    PyObject *d = PyDict_GetItemString(t->tp_dict, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", t->tp_name, name);
        return -1;
    }
    *out = ((PyMemberDescrObject *)d)->d_member->offset;
    return 0;
}

static PyTypeObject *match_node_type;

static PyObject *match_setup(PyObject *self, PyObject *args) {
    PyObject *n;
    if (!PyArg_ParseTuple(args, "O!", &PyType_Type, &n)) return NULL;
    PyTypeObject *t = (PyTypeObject *)n;
    if (offset_of(t, "inputs", &off_inputs) < 0 || offset_of(t, "kid", &off_kid) < 0 ||
        offset_of(t, "buffer", &off_buffer) < 0 || offset_of(t, "static", &off_static) < 0)
        return NULL;
    Py_XDECREF(match_node_type);
    Py_INCREF(n);
    match_node_type = t;
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Py_ssize_t n, nroots, nops, nkids, nscalars, nbuffers, nmaybe, alias;
    Py_ssize_t *roots;     /* root slots */
    Py_ssize_t *ops;       /* per operation, consumers first: slot, arity, the arity input slots */
    Py_ssize_t opslen;
    Py_ssize_t *inner;     /* operation slots in the order of `kids` */
    long long *kids;       /* each operation's local id */
    Py_ssize_t *scalars;   /* scalar slots, their types in `stypes` */
    PyObject *stypes;      /* tuple of types */
    Py_ssize_t *buffers;   /* held-buffer slots, their local ids in `bids`, marks in `bmarks` */
    long long *bids;
    PyObject *bmarks;      /* tuple of the tokens' static marks */
    Py_ssize_t *maybe;     /* slots that could hold one node between them */
    PyObject *t, *buffers_ok, *slow;
} Matcher;

/* the template holds its matcher and the matcher its template: the collector sees the cycle */
static int matcher_traverse(PyObject *self, visitproc visit, void *arg) {
    Matcher *m = (Matcher *)self;
    Py_VISIT(m->stypes); Py_VISIT(m->bmarks); Py_VISIT(m->t); Py_VISIT(m->buffers_ok); Py_VISIT(m->slow);
    return 0;
}

static int matcher_clear(PyObject *self) {
    Matcher *m = (Matcher *)self;
    Py_CLEAR(m->stypes); Py_CLEAR(m->bmarks); Py_CLEAR(m->t); Py_CLEAR(m->buffers_ok); Py_CLEAR(m->slow);
    return 0;
}

static void matcher_dealloc(PyObject *self) {
    Matcher *m = (Matcher *)self;
    PyObject_GC_UnTrack(self);
    free(m->roots); free(m->ops); free(m->inner); free(m->kids); free(m->scalars);
    free(m->buffers); free(m->bids); free(m->maybe);
    matcher_clear(self);
    PyObject_GC_Del(self);
}

/* an int object's value, or the flag set (not an exact int, or out of range) */
static inline long long int_of(PyObject *o, int *bad) {
    if (!PyLong_CheckExact(o)) { *bad = 1; return 0; }
    int over = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &over);
    if (over || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); *bad = 1; }
    return v;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

#define STACK_SLOTS 512

/* 1: the held buffers pass the inline checks (ids, marks, distinct owners); 0: they do not;
   -1: an error */
static int buffers_inline(Matcher *m, PyObject **nodes) {
    long long stack[STACK_SLOTS], *owners = stack;
    if (m->nbuffers > STACK_SLOTS && (owners = malloc(sizeof(long long) * m->nbuffers)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int ok = 1;
    for (Py_ssize_t i = 0; i < m->nbuffers && ok; i++) {
        PyObject *node = nodes[m->buffers[i]];
        PyObject *c = MSLOT(node, off_kid);
        if (c == NULL || !PyTuple_CheckExact(c) || PyTuple_GET_SIZE(c) < 3) { ok = 0; break; }
        int bad = 0;
        long long id = int_of(PyTuple_GET_ITEM(c, 1), &bad);
        owners[i] = int_of(PyTuple_GET_ITEM(c, 2), &bad);
        if (bad || id != m->bids[i]) { ok = 0; break; }
        PyObject *mark = MSLOT(node, off_static), *want = PyTuple_GET_ITEM(m->bmarks, i);
        if (mark != want) {
            int eq = mark == NULL ? 0 : PyObject_RichCompareBool(mark, want, Py_EQ);
            if (eq < 0) { if (owners != stack) free(owners); return -1; }
            if (!eq) ok = 0;
        }
    }
    if (ok && m->nbuffers > 1) {
        qsort(owners, (size_t)m->nbuffers, sizeof(long long), cmp_ll);
        for (Py_ssize_t i = 1; i < m->nbuffers; i++)
            if (owners[i] == owners[i - 1]) { ok = 0; break; }
    }
    if (owners != stack) free(owners);
    return ok;
}

static PyObject *match_nodes(Matcher *m, PyObject *roots) {
    if (m->t == NULL) {  /* cleared by the collector */
        PyErr_SetString(PyExc_RuntimeError, "a cleared matcher");
        return NULL;
    }
    if (!(PyList_CheckExact(roots) || PyTuple_CheckExact(roots))) return Py_NewRef(m->slow);
    /* the result first: each node is owned from the moment it lands in its slot, so nothing an
       allocation or a comparison runs (a collection's finalizers, a mark's __eq__) can free one */
    PyObject *out = PyList_New(m->n);
    if (out == NULL) return NULL;
    PyObject **nodes = ((PyListObject *)out)->ob_item, **given = PySequence_Fast_ITEMS(roots);
    PyObject *answer = Py_None;  /* what a failed match returns: None, or SLOW */
    if (PySequence_Fast_GET_SIZE(roots) != m->nroots) goto fail;
    for (Py_ssize_t i = 0; i < m->nroots; i++) {
        PyObject *r = given[i], **d = &nodes[m->roots[i]];
        if (!Py_IS_TYPE(r, match_node_type)) { answer = m->slow; goto fail; }
        if (*d == NULL) *d = Py_NewRef(r);
        else if (*d != r) goto fail;
    }
    for (Py_ssize_t p = 0; p < m->opslen;) {
        PyObject *node = nodes[m->ops[p]];
        Py_ssize_t arity = m->ops[p + 1];
        PyObject *ins = node == NULL ? NULL : MSLOT(node, off_inputs);
        if (ins == NULL || !PyTuple_CheckExact(ins)) { answer = m->slow; goto fail; }
        if (PyTuple_GET_SIZE(ins) != arity) goto fail;
        for (Py_ssize_t k = 0; k < arity; k++) {
            PyObject *x = PyTuple_GET_ITEM(ins, k), **d = &nodes[m->ops[p + 2 + k]];
            if (*d == NULL) {
                if (!Py_IS_TYPE(x, match_node_type)) { answer = m->slow; goto fail; }
                *d = Py_NewRef(x);
            } else if (*d != x) {
                goto fail;
            }
        }
        p += 2 + arity;
    }
    for (Py_ssize_t s = 0; s < m->n; s++)
        if (nodes[s] == NULL) { answer = m->slow; goto fail; }  /* a slot no root reaches: not this template */
    {
        int differs = 0, unnumbered = 0;
        for (Py_ssize_t i = 0; i < m->nkids; i++) {
            PyObject *k = MSLOT(nodes[m->inner[i]], off_kid);
            if (k == NULL || k == Py_None) { unnumbered = differs = 1; continue; }
            int bad = 0;
            if (int_of(k, &bad) != m->kids[i] || bad) differs = 1;
        }
        if (differs) {
            if (unnumbered) answer = m->slow;
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < m->nscalars; i++) {
        PyObject *b = MSLOT(nodes[m->scalars[i]], off_buffer);
        if (b == NULL || (PyObject *)Py_TYPE(b) != PyTuple_GET_ITEM(m->stypes, i)) goto fail;
    }
    if (m->nmaybe > 1) {
        PyObject *few[STACK_SLOTS], **seen = few;
        if (m->nmaybe > STACK_SLOTS && (seen = malloc(sizeof(PyObject *) * m->nmaybe)) == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        for (Py_ssize_t i = 0; i < m->nmaybe; i++) seen[i] = nodes[m->maybe[i]];
        qsort(seen, (size_t)m->nmaybe, sizeof(PyObject *), cmp_ptr);
        int same = 0;
        for (Py_ssize_t i = 1; i < m->nmaybe; i++)
            if (seen[i] == seen[i - 1]) { same = 1; break; }
        if (seen != few) free(seen);
        if (same) goto fail;
    }
    if (m->nbuffers) {
        int ok = m->alias ? 0 : buffers_inline(m, nodes);
        if (ok < 0) goto error;
        if (!ok) {
            PyObject *held = PyTuple_New(m->nbuffers);
            if (held == NULL) goto error;
            for (Py_ssize_t i = 0; i < m->nbuffers; i++)
                PyTuple_SET_ITEM(held, i, Py_NewRef(nodes[m->buffers[i]]));
            PyObject *r = PyObject_CallFunctionObjArgs(m->buffers_ok, m->t, held, NULL);
            Py_DECREF(held);
            int yes = r == NULL ? -1 : PyObject_IsTrue(r);
            Py_XDECREF(r);
            if (yes < 0) goto error;
            if (yes == 0) goto fail;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return Py_NewRef(answer);
error:
    Py_DECREF(out);
    return NULL;
}

static PyObject *matcher_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "a matcher takes the roots only");
        return NULL;
    }
    return match_nodes((Matcher *)self, args[0]);
}

static PyTypeObject MatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_lazygraph_lean.Matcher",
    .tp_basicsize = sizeof(Matcher),
    .tp_dealloc = matcher_dealloc,
    .tp_vectorcall_offset = offsetof(Matcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = matcher_traverse,
    .tp_clear = matcher_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One template's matcher: the nodes by slot, None (another structure) or SLOW.",
};

/* a C array of the sequence's integers (NULL with an error set; `count` gets its length) */
static void *ints_of(PyObject *seq, Py_ssize_t *count, int wide) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of integers");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    void *out = malloc((wide ? sizeof(long long) : sizeof(Py_ssize_t)) * (n ? n : 1));
    if (out == NULL) { Py_DECREF(fast); PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) { free(out); Py_DECREF(fast); return NULL; }
        if (wide) ((long long *)out)[i] = v;
        else ((Py_ssize_t *)out)[i] = (Py_ssize_t)v;
    }
    Py_DECREF(fast);
    if (count) *count = n;
    return out;
}

static PyObject *match_make(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    int alias;
    PyObject *roots, *ops, *inner, *kids, *scalars, *stypes, *buffers, *bids, *bmarks, *maybe, *t, *ok, *slow;
    if (!PyArg_ParseTuple(args, "nOOOOOO!OOO!OpOOO", &n, &roots, &ops, &inner, &kids, &scalars,
                          &PyTuple_Type, &stypes, &buffers, &bids, &PyTuple_Type, &bmarks, &maybe,
                          &alias, &t, &ok, &slow))
        return NULL;
    if (match_node_type == NULL) { PyErr_SetString(PyExc_RuntimeError, "match_setup() first"); return NULL; }
    Matcher *m = PyObject_GC_New(Matcher, &MatcherType);
    if (m == NULL) return NULL;
    m->vectorcall = (vectorcallfunc)matcher_call;
    m->roots = m->ops = m->inner = m->scalars = m->buffers = m->maybe = NULL;
    m->kids = m->bids = NULL;
    m->stypes = Py_NewRef(stypes);
    m->bmarks = Py_NewRef(bmarks);
    m->t = Py_NewRef(t);
    m->buffers_ok = Py_NewRef(ok);
    m->slow = Py_NewRef(slow);
    m->n = n;
    m->alias = alias;
    Py_ssize_t nbids = 0;
    if ((m->roots = ints_of(roots, &m->nroots, 0)) == NULL || (m->ops = ints_of(ops, &m->opslen, 0)) == NULL ||
        (m->inner = ints_of(inner, &m->nkids, 0)) == NULL || (m->kids = ints_of(kids, NULL, 1)) == NULL ||
        (m->scalars = ints_of(scalars, &m->nscalars, 0)) == NULL ||
        (m->buffers = ints_of(buffers, &m->nbuffers, 0)) == NULL || (m->bids = ints_of(bids, &nbids, 1)) == NULL ||
        (m->maybe = ints_of(maybe, &m->nmaybe, 0)) == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyTuple_GET_SIZE(stypes) != m->nscalars || PyTuple_GET_SIZE(bmarks) != m->nbuffers || nbids != m->nbuffers) {
        Py_DECREF(m);
        PyErr_SetString(PyExc_ValueError, "the scalar or buffer tables differ in length");
        return NULL;
    }
    /* every slot the tables name must be a slot */
    Py_ssize_t *all[] = {m->roots, m->inner, m->scalars, m->buffers, m->maybe};
    Py_ssize_t lens[] = {m->nroots, m->nkids, m->nscalars, m->nbuffers, m->nmaybe};
    for (int a = 0; a < 5; a++)
        for (Py_ssize_t i = 0; i < lens[a]; i++)
            if (all[a][i] < 0 || all[a][i] >= n) goto bad;
    m->nops = 0;
    for (Py_ssize_t p = 0; p < m->opslen; m->nops++) {
        if (p + 1 >= m->opslen || m->ops[p] < 0 || m->ops[p] >= n || m->ops[p + 1] < 0 ||
            p + 2 + m->ops[p + 1] > m->opslen)
            goto bad;
        for (Py_ssize_t k = 0; k < m->ops[p + 1]; k++)
            if (m->ops[p + 2 + k] < 0 || m->ops[p + 2 + k] >= n) goto bad;
        p += 2 + m->ops[p + 1];
    }
    PyObject_GC_Track((PyObject *)m);
    return (PyObject *)m;
bad:
    Py_DECREF(m);
    PyErr_SetString(PyExc_ValueError, "a slot out of range in the matcher's tables");
    return NULL;
}

#define MATCH_METHODS \
    {"match_setup", match_setup, METH_VARARGS, "match_setup(Node): read the node's slot offsets, before any matcher."}, \
    {"match_make", match_make, METH_VARARGS, \
     "match_make(n, roots, ops, inner, kids, scalars, scalar types, buffers, buffer ids, buffer marks, " \
     "maybe, alias, template, buffers_ok, SLOW): one template's matcher."},

static int match_types_ready(void) { return PyType_Ready(&MatcherType); }
