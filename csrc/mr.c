/* mr.c - rdma.ibverbs.MR (memory region) and MW (memory window). */
#include <errno.h>
#include <sys/mman.h>

#include "rdma.h"

static int
mr_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->dereg_mr(o->h, st);
}

/* After deregistration: let go of the user's buffer. */
static void
mr_release(pyrdma_obj *o)
{
    pyrdma_MR *mr = (pyrdma_MR *)o;
    if (mr->have_view) {
        mr->have_view = 0;
        PyBuffer_Release(&mr->view);
    }
}

static const struct pyrdma_objkind mr_kind = {
    "MR", PYRDMA_RANK_MR, mr_destroy, mr_release,
};

/* PyObject_GetBuffer(buf, flags) raised BufferError: say why in PD.mr's
   terms -- the buffer is not contiguous, or the device may write and the
   buffer is read-only -- else leave the exporter's error. */
static void
buffer_refused(PyObject *buf, unsigned int access, int flags)
{
    PyObject *type, *value, *tb;
    Py_buffer v;
    int contiguous, readonly;

    PyErr_Fetch(&type, &value, &tb);
    if (PyObject_GetBuffer(buf, &v, PyBUF_FULL_RO) < 0) {
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return;
    }
    contiguous = PyBuffer_IsContiguous(&v, 'A');
    readonly = v.readonly;
    PyBuffer_Release(&v);
    if (!contiguous) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        PyErr_Format(PyExc_BufferError, "PD.mr(): the %.100s buffer is not "
                     "contiguous; the device needs one contiguous range "
                     "(register the underlying object, or a contiguous "
                     "copy)", Py_TYPE(buf)->tp_name);
    }
    else if (readonly && (flags & PyBUF_WRITABLE)) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        PyErr_Format(PyExc_TypeError, "PD.mr(): access 0x%x lets the "
                     "device write, but the %.100s buffer is read-only",
                     access, Py_TYPE(buf)->tp_name);
    }
    else
        PyErr_Restore(type, value, tb);
}

PyObject *
pyrdma_pd_mr(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buf", "access", NULL};
    pyrdma_obj *pd = (pyrdma_obj *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_uint acc = {"PD.mr", "access", UINT32_MAX, 0};
    unsigned int access;
    PyObject *buf;
    pyrdma_MR *mr;
    int flags;
    void *h;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O&:mr", kwlist, &buf,
                                     pyrdma_uint_conv, &acc))
        return NULL;
    access = (unsigned int)acc.v;
    if (!pyrdma_obj_check(pd))
        return NULL;
    /* The IBA requires local write with remote write or atomic access;
       python-rdma scripts pass IBV_ACCESS_REMOTE_WRITE alone, so add it. */
    if (access & (PYRDMA_ACCESS_REMOTE_WRITE | PYRDMA_ACCESS_REMOTE_ATOMIC))
        access |= PYRDMA_ACCESS_LOCAL_WRITE;
    mr = (pyrdma_MR *)pyrdma_obj_new(pd->state->MRType, &mr_kind, pd);
    if (mr == NULL)
        return NULL;
    /* The device may write: only a writable buffer will do.  PyBUF_SIMPLE
       also insists on contiguous memory. */
    flags = PyBUF_SIMPLE;
    if (access & (PYRDMA_ACCESS_LOCAL_WRITE | PYRDMA_ACCESS_REMOTE_WRITE |
                  PYRDMA_ACCESS_REMOTE_ATOMIC))
        flags |= PyBUF_WRITABLE;
    if (PyObject_GetBuffer(buf, &mr->view, flags) < 0) {
        Py_DECREF(mr);
        /* BufferError, or ValueError from numpy */
        if (PyErr_ExceptionMatches(PyExc_BufferError) ||
            PyErr_ExceptionMatches(PyExc_ValueError))
            buffer_refused(buf, access, flags);
        return NULL;
    }
    mr->have_view = 1;
    mr->access = access;
    if (pd->prov->reg_mr(pd->h, mr->view.buf, (size_t)mr->view.len, access,
                         &h, &mr->info, &st) < 0) {
        mr_release(&mr->o);
        Py_DECREF(mr);
        return pyrdma_raise_status(pd->state, &st);
    }
    mr->o.h = h;
    pyrdma_obj_link(&mr->o, 0, pd);
    return (PyObject *)mr;
}

/* PD.alloc_mr: memory the library owns (page aligned, zeroed), registered
   and exported through the MR's own buffer protocol.  Closing the MR
   deregisters it; the memory stays mapped until the last memoryview of it
   is gone (the views keep the MR object alive), then dealloc unmaps it.
   A provider may allocate it (alloc_mr_mem: the ucx fabric's one-sided
   fast path needs memory UCX allocated); otherwise it is an mmap. */
PyObject *
pyrdma_pd_alloc_mr(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"length", "access", NULL};
    pyrdma_obj *pd = (pyrdma_obj *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_uint acc = {"PD.alloc_mr", "access", UINT32_MAX,
                              PYRDMA_ACCESS_LOCAL_WRITE};
    unsigned int access;
    Py_ssize_t length;
    pyrdma_MR *mr;
    void *mem, *h;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O&:alloc_mr", kwlist,
                                     &length, pyrdma_uint_conv, &acc))
        return NULL;
    access = (unsigned int)acc.v;
    if (!pyrdma_obj_check(pd))
        return NULL;
    if (length < 1) {
        PyErr_Format(PyExc_ValueError, "alloc_mr(): length must be >= 1, "
                     "not %zd", length);
        return NULL;
    }
    if (access & (PYRDMA_ACCESS_REMOTE_WRITE | PYRDMA_ACCESS_REMOTE_ATOMIC))
        access |= PYRDMA_ACCESS_LOCAL_WRITE;
    mr = (pyrdma_MR *)pyrdma_obj_new(pd->state->MRType, &mr_kind, pd);
    if (mr == NULL)
        return NULL;
    if (pd->prov->alloc_mr_mem != NULL) {
        /* the provider's own memory (the ucx fabric: one-sided access) */
        if (pd->prov->alloc_mr_mem(pd->h, (size_t)length, &mem,
                                   &mr->owned_cookie, &st) < 0) {
            Py_DECREF(mr);
            return pyrdma_raise_status(pd->state, &st);
        }
    }
    else {
        mem = mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            Py_DECREF(mr);
            return pyrdma_raise_sys(pd->state, errno, "mmap", "alloc_mr()");
        }
    }
    mr->owned = mem;
    mr->owned_len = (size_t)length;
    mr->view.buf = mem;
    mr->view.len = length;
    mr->access = access;
    if (pd->prov->reg_mr(pd->h, mem, (size_t)length, access, &h, &mr->info,
                         &st) < 0) {
        Py_DECREF(mr);      /* dealloc unmaps */
        return pyrdma_raise_status(pd->state, &st);
    }
    mr->o.h = h;
    pyrdma_obj_link(&mr->o, 0, pd);
    return (PyObject *)mr;
}

static int
mr_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    pyrdma_MR *mr = (pyrdma_MR *)op;

    if (mr->owned == NULL) {
        PyErr_SetString(PyExc_BufferError, "only an MR made by "
                        "PD.alloc_mr() exports its memory; use mr.buf for "
                        "the buffer you registered");
        return -1;
    }
    if (mr->o.h == NULL) {
        PyErr_SetString(PyExc_BufferError, "the MR is closed");
        return -1;
    }
    if (PyBuffer_FillInfo(view, op, mr->owned, (Py_ssize_t)mr->owned_len, 0,
                          flags) < 0)
        return -1;
    mr->exports++;
    return 0;
}

static void
mr_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    ((pyrdma_MR *)op)->exports--;
}

/* Unmap owned memory once nothing can reach it (called from dealloc). */
static int
mr_clear(PyObject *op)
{
    pyrdma_MR *mr = (pyrdma_MR *)op;
    if (mr->o.h == NULL && mr->owned != NULL && mr->exports == 0) {
        /* memory made before a fork() is the parent's provider's (the
           child's copy of the mapping goes with the child) */
        if (mr->o.fork_gen != pyrdma_fork_gen)
            ;
        else if (mr->owned_cookie != NULL)
            mr->o.prov->free_mr_mem(mr->owned_cookie);
        else
            munmap(mr->owned, mr->owned_len);
        mr->owned = NULL;
        mr->owned_cookie = NULL;
    }
    return pyrdma_obj_clear(op);
}

static PyObject *
mr_sge(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"length", "off", NULL};
    pyrdma_MR *mr = (pyrdma_MR *)op;
    PyObject *lobj = Py_None;
    Py_ssize_t off = 0, length;
    struct pyrdma_sge sge;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|On:sge", kwlist, &lobj,
                                     &off))
        return NULL;
    if (!pyrdma_obj_check(&mr->o))
        return NULL;
    if (off < 0 || off > mr->view.len) {
        PyErr_Format(PyExc_ValueError, "MR.sge(): off %zd is outside the "
                     "%zd-byte region", off, mr->view.len);
        return NULL;
    }
    if (lobj == Py_None)
        length = mr->view.len - off;
    else {
        length = PyLong_AsSsize_t(lobj);
        if (length == -1 && PyErr_Occurred())
            return NULL;
        if (length < 0 || length > mr->view.len - off) {
            PyErr_Format(PyExc_ValueError, "MR.sge(): length %zd at off %zd "
                         "exceeds the %zd-byte region", length, off,
                         mr->view.len);
            return NULL;
        }
    }
    if (length > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "MR.sge(): an sge is at most "
                        "4 GiB - 1");
        return NULL;
    }
    sge.addr = (uint64_t)(uintptr_t)mr->view.buf + (uint64_t)off;
    sge.length = (uint32_t)length;
    sge.lkey = mr->info.lkey;
    return pyrdma_struct_new(mr->o.state->sge, &sge, sizeof(sge));
}

static PyObject *
mr_get_lkey(PyObject *op, void *c)
{
    pyrdma_MR *mr = (pyrdma_MR *)op;
    (void)c;
    if (!pyrdma_obj_check(&mr->o))
        return NULL;
    return PyLong_FromUnsignedLong(mr->info.lkey);
}

static PyObject *
mr_get_rkey(PyObject *op, void *c)
{
    pyrdma_MR *mr = (pyrdma_MR *)op;
    (void)c;
    if (!pyrdma_obj_check(&mr->o))
        return NULL;
    return PyLong_FromUnsignedLong(mr->info.rkey);
}

static PyObject *
mr_get_addr(PyObject *op, void *c)
{
    pyrdma_MR *mr = (pyrdma_MR *)op;
    (void)c;
    if (!pyrdma_obj_check(&mr->o))
        return NULL;
    return PyLong_FromUnsignedLongLong((uintptr_t)mr->view.buf);
}

static PyObject *
mr_get_length(PyObject *op, void *c)
{
    pyrdma_MR *mr = (pyrdma_MR *)op;
    (void)c;
    if (!pyrdma_obj_check(&mr->o))
        return NULL;
    return PyLong_FromSsize_t(mr->view.len);
}

static PyObject *
mr_get_buf(PyObject *op, void *c)
{
    pyrdma_MR *mr = (pyrdma_MR *)op;
    (void)c;
    if (!pyrdma_obj_check(&mr->o))
        return NULL;
    if (mr->owned != NULL)
        return PyMemoryView_FromObject(op);   /* writable view of our memory */
    return Py_NewRef(mr->view.obj ? mr->view.obj : Py_None);
}

static PyObject *
mr_get_access(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(((pyrdma_MR *)op)->access);
}

static PyObject *
obj_get_pd(PyObject *op, void *closure)
{
    PyObject *pd = ((pyrdma_obj *)op)->parents[0];
    (void)closure;
    return Py_NewRef(pd ? pd : Py_None);
}

static int
mr_traverse(PyObject *op, visitproc visit, void *arg)
{
    pyrdma_MR *mr = (pyrdma_MR *)op;
    if (mr->have_view)
        Py_VISIT(mr->view.obj);
    return pyrdma_obj_traverse(op, visit, arg);
}

/* MR.rereg's arguments, checked against the MR: the new PD (a PD of the
   MR's context) and the new buffer's export (writable if the access lets
   the device write).  0, or -1 with an exception. */
static int
rereg_args(pyrdma_MR *mr, int flags, PyObject *pdobj, PyObject *buf,
           unsigned int access, Py_buffer *nv)
{
    pyrdma_obj *old_pd = (pyrdma_obj *)mr->o.parents[0];
    int bflags = PyBUF_SIMPLE;
    if (access & (PYRDMA_ACCESS_LOCAL_WRITE | PYRDMA_ACCESS_REMOTE_WRITE |
                  PYRDMA_ACCESS_REMOTE_ATOMIC))
        bflags |= PyBUF_WRITABLE;
    if (flags & PYRDMA_REREG_PD) {
        pyrdma_obj *pd = (pyrdma_obj *)pdobj;
        if (!PyObject_TypeCheck(pdobj, mr->o.state->PDType)) {
            PyErr_SetString(PyExc_TypeError, "MR.rereg(): "
                            "IBV_REREG_MR_CHANGE_PD needs pd, a PD");
            return -1;
        }
        if (!pyrdma_obj_check(pd))
            return -1;
        if (pd->parents[0] != old_pd->parents[0]) {
            PyErr_SetString(PyExc_ValueError, "MR.rereg(): the new PD is "
                            "of another Context");
            return -1;
        }
    }
    if (!(flags & PYRDMA_REREG_TRANSLATION)) {
        if ((bflags & PyBUF_WRITABLE) && mr->view.readonly) {
            PyErr_Format(PyExc_TypeError, "MR.rereg(): access 0x%x lets "
                         "the device write, but the buffer is read-only",
                         access);
            return -1;
        }
        return 0;
    }
    if (mr->owned != NULL) {
        PyErr_SetString(PyExc_ValueError, "MR.rereg(): an MR made by "
                        "PD.alloc_mr() keeps its memory (no "
                        "IBV_REREG_MR_CHANGE_TRANSLATION)");
        return -1;
    }
    if (buf == Py_None) {
        PyErr_SetString(PyExc_TypeError, "MR.rereg(): "
                        "IBV_REREG_MR_CHANGE_TRANSLATION needs buf");
        return -1;
    }
    if (PyObject_GetBuffer(buf, nv, bflags) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError) ||
            PyErr_ExceptionMatches(PyExc_ValueError))
            buffer_refused(buf, access, bflags);
        return -1;
    }
    return 0;
}

/* MR.rereg(flags, pd=None, buf=None, access=0): ibv_rereg_mr. */
static PyObject *
mr_rereg(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"flags", "pd", "buf", "access", NULL};
    pyrdma_MR *mr = (pyrdma_MR *)op;
    struct pyrdma_uint fl = {"MR.rereg", "flags", INT32_MAX, 0};
    struct pyrdma_uint acc = {"MR.rereg", "access", UINT32_MAX, 0};
    PyObject *pdobj = Py_None, *buf = Py_None;
    struct pyrdma_status st = {0};
    struct pyrdma_mr_info info;
    Py_buffer nv = {0};
    unsigned int access;
    int flags;
    void *pdh = NULL, *addr = NULL;
    size_t len = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|OOO&:rereg", kwlist,
                                     pyrdma_uint_conv, &fl, &pdobj, &buf,
                                     pyrdma_uint_conv, &acc))
        return NULL;
    flags = (int)fl.v;
    access = (flags & PYRDMA_REREG_ACCESS) ? (unsigned int)acc.v
                                           : mr->access;
    if (!pyrdma_obj_check(&mr->o))
        return NULL;
    if (flags == 0 || (flags & ~PYRDMA_REREG_ALL)) {
        PyErr_Format(PyExc_ValueError, "MR.rereg(): flags 0x%x (the "
                     "IBV_REREG_MR_CHANGE_* bits)", (unsigned)flags);
        return NULL;
    }
    if (access & (PYRDMA_ACCESS_REMOTE_WRITE | PYRDMA_ACCESS_REMOTE_ATOMIC))
        access |= PYRDMA_ACCESS_LOCAL_WRITE;      /* as PD.mr */
    if (rereg_args(mr, flags, pdobj, buf, access, &nv) < 0)
        return NULL;
    if (flags & PYRDMA_REREG_PD)
        pdh = ((pyrdma_obj *)pdobj)->h;
    if (flags & PYRDMA_REREG_TRANSLATION) {
        addr = nv.buf;
        len = (size_t)nv.len;
    }
    if (mr->o.prov->rereg_mr(mr->o.h, flags, pdh, addr, len, access, &info,
                             &st) < 0) {
        if (flags & PYRDMA_REREG_TRANSLATION)
            PyBuffer_Release(&nv);
        return pyrdma_raise_status(mr->o.state, &st);
    }
    if (flags & PYRDMA_REREG_TRANSLATION) {
        mr_release(&mr->o);
        mr->view = nv;
        mr->have_view = 1;
    }
    if (flags & PYRDMA_REREG_PD)
        pyrdma_obj_relink(&mr->o, 0, (pyrdma_obj *)pdobj);
    mr->access = access;
    mr->info = info;
    Py_RETURN_NONE;
}

static PyMethodDef mr_methods[] = {
    {"rereg", (PyCFunction)(void (*)(void))mr_rereg,
     METH_VARARGS | METH_KEYWORDS,
     "rereg($self, /, flags, pd=None, buf=None, access=0)\n--\n\n"
     "Re-register (ibv_rereg_mr): flags is IBV_REREG_MR_CHANGE_PD (to pd, "
     "a PD of the same Context), _TRANSLATION (to the buffer buf) and/or "
     "_ACCESS (to access).  lkey and rkey may change; on an error the MR "
     "is as it was."},
    {"sge", (PyCFunction)(void (*)(void))mr_sge, METH_VARARGS | METH_KEYWORDS,
     "sge($self, /, length=None, off=0)\n--\n\nAn ibv.sge covering length "
     "bytes (default: to the end) from offset off of the region."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef mr_getset[] = {
    {"lkey", mr_get_lkey, NULL, "Local key.", NULL},
    {"rkey", mr_get_rkey, NULL, "Remote key.", NULL},
    {"addr", mr_get_addr, NULL, "Start address of the region.", NULL},
    {"length", mr_get_length, NULL, "Length of the region in bytes.", NULL},
    {"buf", mr_get_buf, NULL, "The registered buffer object; for an MR of "
     "PD.alloc_mr(), a writable memoryview of its memory.", NULL},
    {"access", mr_get_access, NULL, "IBV_ACCESS_* flags.", NULL},
    {"pd", obj_get_pd, NULL, "The PD it belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot mr_slots[] = {
    {Py_tp_traverse, mr_traverse},
    {Py_tp_clear, mr_clear},
    {Py_bf_getbuffer, mr_getbuffer},
    {Py_bf_releasebuffer, mr_releasebuffer},
    {0, NULL},
};

/* ---- MW ---- */

static int
mw_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->dealloc_mw(o->h, st);
}

static const struct pyrdma_objkind mw_kind = {
    "MW", PYRDMA_RANK_MW, mw_destroy, NULL,
};

PyObject *
pyrdma_pd_mw(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"type", NULL};
    pyrdma_obj *pd = (pyrdma_obj *)op;
    struct pyrdma_status st = {0};
    int type = 1;
    pyrdma_MW *mw;
    void *h;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:mw", kwlist, &type))
        return NULL;
    if (!pyrdma_obj_check(pd))
        return NULL;
    if (type != 1 && type != 2) {
        PyErr_Format(PyExc_ValueError, "PD.mw(): type must be IBV_MW_TYPE_1 "
                     "or IBV_MW_TYPE_2, not %d", type);
        return NULL;
    }
    mw = (pyrdma_MW *)pyrdma_obj_new(pd->state->MWType, &mw_kind, pd);
    if (mw == NULL)
        return NULL;
    if (pd->prov->alloc_mw(pd->h, type, &h, &mw->rkey, &st) < 0) {
        Py_DECREF(mw);
        return pyrdma_raise_status(pd->state, &st);
    }
    mw->type = type;
    mw->o.h = h;
    pyrdma_obj_link(&mw->o, 0, pd);
    return (PyObject *)mw;
}

static PyObject *
mw_get_rkey(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(((pyrdma_MW *)op)->rkey);
}

static PyObject *
mw_get_type(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromLong(((pyrdma_MW *)op)->type);
}

static PyGetSetDef mw_getset[] = {
    {"rkey", mw_get_rkey, NULL, "Remote key of the window.", NULL},
    {"type", mw_get_type, NULL, "IBV_MW_TYPE_1 or IBV_MW_TYPE_2.", NULL},
    {"pd", obj_get_pd, NULL, "The PD it belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

int
pyrdma_mr_init(PyObject *module, pyrdma_state *st)
{
    st->MRType = pyrdma_obj_type(module, "rdma.ibverbs.MR", sizeof(pyrdma_MR),
                                 "A registered memory region: PD.mr().",
                                 mr_methods, mr_getset, mr_slots, 0);
    if (st->MRType == NULL)
        return -1;
    st->MWType = pyrdma_obj_type(module, "rdma.ibverbs.MW", sizeof(pyrdma_MW),
                                 "A memory window: PD.mw().",
                                 NULL, mw_getset, NULL, 0);
    return st->MWType == NULL ? -1 : 0;
}
