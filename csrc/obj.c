/* obj.c - the lifetime contract shared by every verbs object. */

/*
 * Each object holds strong references to its parents and sits in each
 * parent's intrusive list of children.  close() closes the children first,
 * in rank order (QPs before SRQs and CQs, everything before the PD and the
 * Context), then frees the provider resource, then leaves the parents'
 * lists.  The provider handle is dropped once it is freed, so a second
 * close() does nothing, and every method checks the handle first.  A
 * close the provider refuses (EBUSY, EINVAL: a window bound to the MR, a
 * QP attached to a multicast group) raises and keeps the object open and
 * usable, in its parents' lists: a close after the cause is gone frees it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>

#include "rdma.h"
#include "structmember.h"

static void
list_init(pyrdma_link *head)
{
    head->prev = head->next = head;
    head->obj = NULL;
}

static void
list_unlink(pyrdma_link *l)
{
    if (l->next == NULL)
        return;
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = NULL;
}

unsigned pyrdma_fork_gen;

static void
fork_child(void)
{
    pyrdma_fork_gen++;
}

int
pyrdma_fork_setup(void)
{
    static int done;
    if (done)
        return 0;
    if (pthread_atfork(NULL, NULL, fork_child) != 0)
        return ENOMEM;
    done = 1;
    return 0;
}

/* Was o made in an ancestor of this process (before a fork())?  Like the
   objects of libibverbs without ibv_fork_init, it is the parent's: the
   child must neither use it nor free it (that would destroy the parent's
   resources, or take a lock the parent's threads held at fork time). */
static int
inherited(const pyrdma_obj *o)
{
    return o->fork_gen != pyrdma_fork_gen;
}

void
pyrdma_obj_setup(pyrdma_obj *o, const struct pyrdma_objkind *kind,
                 const struct pyrdma_provider *prov, pyrdma_state *st)
{
    int i;

    o->fork_gen = pyrdma_fork_gen;
    o->kind = kind;
    o->prov = prov;
    o->state = st;
    list_init(&o->children);
    for (i = 0; i < PYRDMA_MAX_PARENTS; i++) {
        o->links[i].prev = o->links[i].next = NULL;
        o->links[i].obj = o;
    }
}

void
pyrdma_obj_link(pyrdma_obj *child, int slot, pyrdma_obj *parent)
{
    pyrdma_link *l = &child->links[slot], *head = &parent->children;

    Py_INCREF(parent);
    Py_XSETREF(child->parents[slot], (PyObject *)parent);
    l->obj = child;
    l->next = head;
    l->prev = head->prev;
    head->prev->next = l;
    head->prev = l;
}

/* Move child from its parent in slot to parent (MR.rereg's new PD). */
void
pyrdma_obj_relink(pyrdma_obj *child, int slot, pyrdma_obj *parent)
{
    list_unlink(&child->links[slot]);
    pyrdma_obj_link(child, slot, parent);
}

/* Leave every parent's list (the strong references stay until dealloc). */
static void
unlink_all(pyrdma_obj *o)
{
    int i;
    for (i = 0; i < PYRDMA_MAX_PARENTS; i++)
        list_unlink(&o->links[i]);
}

/* Close the children of o in rank order; return 0 or -1 (first error). */
static int
close_children(pyrdma_obj *o)
{
    pyrdma_link *l;
    pyrdma_obj **kids;
    Py_ssize_t n = 0, i, j;
    int rc = 0;
    PyObject *et = NULL, *ev = NULL, *tb = NULL;

    for (l = o->children.next; l != &o->children; l = l->next)
        n++;
    if (n == 0)
        return 0;
    kids = PyMem_Malloc(sizeof(*kids) * (size_t)n);
    if (kids == NULL) {
        /* Out of memory: close one at a time from the head instead. */
        while (o->children.next != &o->children) {
            pyrdma_obj *c = o->children.next->obj;
            Py_INCREF(c);
            if (pyrdma_obj_close(c) < 0)
                PyErr_Clear();
            list_unlink(o->children.next);
            Py_DECREF(c);
        }
        PyErr_NoMemory();
        return -1;
    }
    /* Snapshot (each child referenced while we work), insertion-sorted by
       rank; a child listed twice (QP on one CQ for send and recv) is
       closed once, the second close being a no-op. */
    i = 0;
    for (l = o->children.next; l != &o->children; l = l->next) {
        pyrdma_obj *c = l->obj;
        Py_INCREF(c);
        for (j = i; j > 0 && kids[j - 1]->kind->rank > c->kind->rank; j--)
            kids[j] = kids[j - 1];
        kids[j] = c;
        i++;
    }
    for (i = 0; i < n; i++) {
        if (pyrdma_obj_close(kids[i]) < 0) {
            if (et == NULL)
                PyErr_Fetch(&et, &ev, &tb);
            else
                PyErr_Clear();
            rc = -1;
        }
    }
    for (i = 0; i < n; i++)
        Py_DECREF(kids[i]);
    PyMem_Free(kids);
    if (et != NULL)
        PyErr_Restore(et, ev, tb);
    return rc;
}

int
pyrdma_obj_close(pyrdma_obj *o)
{
    struct pyrdma_status st = {0};
    int rc = 0;

    if (o->h == NULL || o->closing)
        return 0;
    o->closing = 1;
    Py_INCREF(o);
    /* a child that stays open (its close refused) keeps o open: o's
       resource is still in use */
    if (close_children(o) < 0)
        rc = -1;
    /* an inherited object is only forgotten here: the resource is the
       parent's */
    if (rc == 0 && !inherited(o) && o->kind->destroy(o, &st) < 0) {
        /* the provider refused (EBUSY, EINVAL: something still uses it):
           the object stays open and usable, a later close may succeed */
        pyrdma_raise_status(o->state, &st);
        rc = -1;
    }
    if (rc < 0) {
        o->closing = 0;
        Py_DECREF(o);
        return -1;
    }
    o->h = NULL;
    if (o->kind->release != NULL)
        o->kind->release(o);
    unlink_all(o);
    o->closing = 0;
    Py_DECREF(o);
    return rc;
}

int
pyrdma_obj_check(pyrdma_obj *o)
{
    if (o->h != NULL && !inherited(o))
        return 1;
    if (o->h != NULL) {
        char msg[256];
        PyOS_snprintf(msg, sizeof(msg), "this %s was made before fork(): "
                      "objects inherited across fork() are unusable in the "
                      "child (as with libibverbs without ibv_fork_init); "
                      "open a new Context in the child with "
                      "rdma.get_verbs()", o->kind->name);
        pyrdma_raise_sys(o->state, EPERM, "fork", msg);
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "operation on a closed %s", o->kind->name);
    return 0;
}

void
pyrdma_obj_finalize(PyObject *op)
{
    pyrdma_obj *o = (pyrdma_obj *)op;
    PyObject *et, *ev, *tb;

    if (o->h == NULL)
        return;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyErr_ResourceWarning(op, 1, "unclosed %R", op) < 0)
        PyErr_WriteUnraisable(op);
    if (pyrdma_obj_close(o) < 0)
        PyErr_WriteUnraisable(op);
    PyErr_Restore(et, ev, tb);
}

int
pyrdma_obj_traverse(PyObject *op, visitproc visit, void *arg)
{
    pyrdma_obj *o = (pyrdma_obj *)op;
    int i;

    Py_VISIT(Py_TYPE(op));
    for (i = 0; i < PYRDMA_MAX_PARENTS; i++)
        Py_VISIT(o->parents[i]);
    return 0;
}

int
pyrdma_obj_clear(PyObject *op)
{
    pyrdma_obj *o = (pyrdma_obj *)op;
    int i;

    /* Only a closed object lets go of its parents: an open one still
       needs them to be freed correctly (finalizers run before this). */
    if (o->h != NULL)
        return 0;
    for (i = 0; i < PYRDMA_MAX_PARENTS; i++)
        Py_CLEAR(o->parents[i]);
    return 0;
}

void
pyrdma_obj_dealloc(PyObject *op)
{
    pyrdma_obj *o = (pyrdma_obj *)op;
    PyTypeObject *tp = Py_TYPE(op);
    pyrdma_link *l;
    int i;

    PyObject_GC_UnTrack(op);
    if (PyObject_CallFinalizerFromDealloc(op) < 0)
        return;   /* resurrected */
    if (o->h != NULL) {
        /* Finalizer failed to close: never free an object still in use. */
        o->h = NULL;
    }
    unlink_all(o);
    /* Children keep us alive through their strong references, so none
       can be left; detach defensively anyway. */
    while ((l = o->children.next) != NULL && l != &o->children)
        list_unlink(l);
    if (o->weakreflist != NULL)
        PyObject_ClearWeakRefs(op);
    /* A type's own tp_clear drops its own references too. */
    if (tp->tp_clear != NULL && tp->tp_clear != pyrdma_obj_clear)
        tp->tp_clear(op);
    for (i = 0; i < PYRDMA_MAX_PARENTS; i++)
        Py_CLEAR(o->parents[i]);
    tp->tp_free(op);
    Py_DECREF(tp);
}

PyObject *
pyrdma_obj_repr(PyObject *op)
{
    pyrdma_obj *o = (pyrdma_obj *)op;
    return PyUnicode_FromFormat("<rdma.ibverbs.%s at %p%s>", o->kind->name,
                                op, o->h ? "" : " closed");
}

pyrdma_obj *
pyrdma_find_child(pyrdma_obj *o, void *ptr, int depth)
{
    pyrdma_link *l;

    for (l = o->children.next; l != &o->children; l = l->next) {
        if ((void *)l->obj == ptr && l->obj->h != NULL)
            return l->obj;
        if (depth > 1) {
            pyrdma_obj *r = pyrdma_find_child(l->obj, ptr, depth - 1);
            if (r != NULL)
                return r;
        }
    }
    return NULL;
}

static PyObject *
obj_close(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    if (pyrdma_obj_close((pyrdma_obj *)op) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
obj_enter(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    if (!pyrdma_obj_check((pyrdma_obj *)op))
        return NULL;
    return Py_NewRef(op);
}

static PyObject *
obj_exit(PyObject *op, PyObject *args)
{
    (void)args;
    if (pyrdma_obj_close((pyrdma_obj *)op) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

PyMethodDef pyrdma_obj_methods[] = {
    {"close", obj_close, METH_NOARGS,
     "close($self, /)\n--\n\nRelease the object and, first, every object "
     "made from it. Idempotent. A close the device refuses raises "
     "SysError and leaves the object open and usable."},
    {"__enter__", obj_enter, METH_NOARGS, NULL},
    {"__exit__", obj_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyObject *
obj_get_closed(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((pyrdma_obj *)op)->h == NULL);
}

PyGetSetDef pyrdma_obj_getset[] = {
    {"closed", obj_get_closed, NULL, "True once the object is closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyMemberDef pyrdma_obj_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pyrdma_obj, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* Concatenate the generic method/getset tables with a type's own. */
static void *
concat(const void *generic, size_t gn, const void *own, size_t on, size_t sz)
{
    char *t = PyMem_RawCalloc(gn + on + 1, sz);
    if (t == NULL)
        return NULL;
    memcpy(t, generic, gn * sz);
    if (on)
        memcpy(t + gn * sz, own, on * sz);
    return t;
}

static size_t
count_methods(const PyMethodDef *m)
{
    size_t n = 0;
    while (m && m[n].ml_name)
        n++;
    return n;
}

static size_t
count_getset(const PyGetSetDef *g)
{
    size_t n = 0;
    while (g && g[n].name)
        n++;
    return n;
}

PyTypeObject *
pyrdma_obj_type(PyObject *module, const char *name, int basicsize,
                const char *doc, PyMethodDef *methods, PyGetSetDef *getset,
                const PyType_Slot *extra, int instantiable)
{
    /* The tables must outlive the type: allocated once per type name for
       the process (module re-initialization reuses them). */
    PyMethodDef *m = concat(pyrdma_obj_methods, 3, methods,
                            count_methods(methods), sizeof(PyMethodDef));
    PyGetSetDef *g = concat(pyrdma_obj_getset, 1, getset,
                            count_getset(getset), sizeof(PyGetSetDef));
    PyType_Slot slots[24] = {
        {Py_tp_doc, (void *)doc},
        {Py_tp_dealloc, pyrdma_obj_dealloc},
        {Py_tp_finalize, pyrdma_obj_finalize},
        {Py_tp_traverse, pyrdma_obj_traverse},
        {Py_tp_clear, pyrdma_obj_clear},
        {Py_tp_repr, pyrdma_obj_repr},
        {Py_tp_methods, m},
        {Py_tp_getset, g},
        {Py_tp_members, pyrdma_obj_members},
    };
    PyType_Spec spec = {
        .name = name,
        .basicsize = basicsize,
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
                 Py_TPFLAGS_IMMUTABLETYPE |
                 (instantiable ? 0 : Py_TPFLAGS_DISALLOW_INSTANTIATION),
        .slots = slots,
    };
    PyTypeObject *tp;
    int n = 9;

    /* A type's own slots come later and override the generic ones. */
    for (; extra != NULL && extra->slot != 0 && n < 23; extra++)
        slots[n++] = *extra;

    if (m == NULL || g == NULL) {
        PyMem_RawFree(m);
        PyMem_RawFree(g);
        PyErr_NoMemory();
        return NULL;
    }
    tp = (PyTypeObject *)PyType_FromModuleAndSpec(module, &spec, NULL);
    if (tp == NULL) {
        PyMem_RawFree(m);
        PyMem_RawFree(g);
        return NULL;
    }
    if (PyModule_AddType(module, tp) < 0) {
        Py_DECREF(tp);
        return NULL;
    }
    return tp;
}

pyrdma_obj *
pyrdma_obj_new(PyTypeObject *tp, const struct pyrdma_objkind *kind,
               pyrdma_obj *like)
{
    pyrdma_obj *o = (pyrdma_obj *)tp->tp_alloc(tp, 0);

    if (o == NULL)
        return NULL;
    pyrdma_obj_setup(o, kind, like->prov, like->state);
    return o;
}

int
pyrdma_fast_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames, const char *const *names, int nreq,
                 PyObject **out)
{
    Py_ssize_t i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int k, nnames = 0;

    while (names[nnames] != NULL)
        nnames++;
    for (k = 0; k < nnames; k++)
        out[k] = NULL;
    if (nargs > nnames) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments "
                     "(%zd given)", fname, nnames, nargs + nkw);
        return -1;
    }
    for (i = 0; i < nargs; i++)
        out[i] = args[i];
    for (i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        for (k = 0; k < nnames; k++)
            if (PyUnicode_CompareWithASCIIString(key, names[k]) == 0)
                break;
        if (k == nnames) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword "
                         "argument '%U'", fname, key);
            return -1;
        }
        if (out[k] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for "
                         "argument '%s'", fname, names[k]);
            return -1;
        }
        out[k] = args[nargs + i];
    }
    for (k = 0; k < nreq; k++)
        if (out[k] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument "
                         "'%s'", fname, names[k]);
            return -1;
        }
    return 0;
}

int
pyrdma_uint_conv(PyObject *v, void *p)
{
    struct pyrdma_uint *u = p;
    unsigned long long x;
    PyObject *i;
    int overflow = 0;
    long long sx;

    i = PyNumber_Index(v);
    if (i == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s(): %s must be an int, not "
                         "%.100s", u->fname, u->name, Py_TYPE(v)->tp_name);
        }
        return 0;
    }
    sx = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (sx == -1 && PyErr_Occurred()) {
        Py_DECREF(i);
        return 0;
    }
    if (overflow > 0) {
        x = PyLong_AsUnsignedLongLong(i);
        if (x == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto range;
        }
    }
    else if (overflow < 0 || sx < 0)
        goto range;
    else
        x = (unsigned long long)sx;
    if (x > u->max)
        goto range;
    Py_DECREF(i);
    u->v = x;
    return 1;
range:
    PyErr_Format(PyExc_ValueError, "%s(): %s must be in range 0..%llu, "
                 "not %R", u->fname, u->name, u->max, i);
    Py_DECREF(i);
    return 0;
}

int
pyrdma_timeout_arg(PyObject *v, double *timeout)
{
    double t;

    if (v == NULL || v == Py_None) {
        *timeout = -1;
        return 0;
    }
    t = PyFloat_AsDouble(v);
    if (t == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "timeout must be a number or None, "
                     "not %.100s", Py_TYPE(v)->tp_name);
        return -1;
    }
    if (t < 0 || t != t) {
        PyErr_SetString(PyExc_ValueError, "timeout must be >= 0 or None");
        return -1;
    }
    *timeout = t;
    return 0;
}

int
pyrdma_wait_fd(pyrdma_obj *o, const int *fdp, double *timeout)
{
    struct timespec start, now;
    double left = *timeout;

    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct pollfd p;
        int ms, rc;

        if (!pyrdma_obj_check(o))
            return -1;
        /* Short slices: Ctrl-C and a close() from another thread are seen
           within 50 ms. */
        ms = 50;
        if (left >= 0 && left * 1000 < ms)
            ms = (int)(left * 1000);
        p.fd = *fdp;
        p.events = POLLIN;
        p.revents = 0;
        Py_BEGIN_ALLOW_THREADS
        rc = poll(&p, 1, ms);
        Py_END_ALLOW_THREADS
        if (rc < 0 && errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
        if (rc > 0 && (p.revents & POLLIN))
            return 1;
        if (rc > 0 && (p.revents & (POLLNVAL | POLLERR)))
            continue;       /* closed under us: obj_check raises */
        if (*timeout >= 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            left = *timeout - ((double)(now.tv_sec - start.tv_sec) +
                               (now.tv_nsec - start.tv_nsec) / 1e9);
            if (left <= 0) {
                *timeout = 0;
                return 0;
            }
        }
    }
}
