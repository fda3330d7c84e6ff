/* structs.c - table-driven struct objects (ibv.device_attr, ibv.port_attr...). */

/*
 * Each verbs struct is one heap type whose instances embed the provider-
 * neutral C struct from provider.h.  A field table gives every attribute a
 * kind and an offset; one getter, one setter, __init__ (keyword arguments),
 * __repr__ and __eq__ serve every type.  Assigning a field records it in
 * setmask, from which modify masks are derived.
 */
#include <stddef.h>
#include <string.h>

#include "rdma.h"

/* Field kinds: the C type of the field. */
enum fkind { K_U8, K_U16, K_U32, K_U64, K_I32, K_STR, K_GID };

/* One attribute of a struct type. */
struct pyrdma_field {
    const char *name;       /* attribute name (the C field name) */
    enum fkind kind;        /* C type */
    size_t offset;          /* offset in the C struct */
    size_t size;            /* size of the C field (K_STR: buffer size) */
    const char *doc;        /* docstring */
};

/* One struct type. */
struct pyrdma_structdef {
    const char *name;                 /* qualified type name */
    const char *doc;                  /* class docstring */
    size_t csize;                     /* sizeof the C struct */
    const struct pyrdma_field *fields;
    int nfields;                      /* at most 64 (setmask bits) */
};

#define KIND(T, f) _Generic(((T *)0)->f, \
    uint8_t: K_U8, uint16_t: K_U16, uint32_t: K_U32, uint64_t: K_U64, \
    int32_t: K_I32, char *: K_STR, uint8_t *: K_GID)
#define FIELD(T, f, doc) { #f, KIND(T, f), offsetof(T, f), \
                           sizeof(((T *)0)->f), doc }

#define DA struct pyrdma_device_attr
static const struct pyrdma_field device_attr_fields[] = {
    FIELD(DA, fw_ver, "Firmware version string."),
    FIELD(DA, node_guid, "Node GUID (host byte order integer)."),
    FIELD(DA, sys_image_guid, "System image GUID (host byte order)."),
    FIELD(DA, max_mr_size, "Largest contiguous block that can be registered."),
    FIELD(DA, page_size_cap, "Supported memory shift sizes (bit mask)."),
    FIELD(DA, vendor_id, "Vendor ID, per IEEE."),
    FIELD(DA, vendor_part_id, "Vendor supplied part ID."),
    FIELD(DA, hw_ver, "Hardware version."),
    FIELD(DA, max_qp, "Maximum number of QPs."),
    FIELD(DA, max_qp_wr, "Maximum number of outstanding WRs on any queue."),
    FIELD(DA, device_cap_flags, "IBV_DEVICE_* capability flags."),
    FIELD(DA, max_sge, "Maximum scatter/gather entries per WR (non-RD QPs)."),
    FIELD(DA, max_sge_rd, "Maximum scatter/gather entries per WR (RD QPs)."),
    FIELD(DA, max_cq, "Maximum number of CQs."),
    FIELD(DA, max_cqe, "Maximum number of entries per CQ."),
    FIELD(DA, max_mr, "Maximum number of MRs."),
    FIELD(DA, max_pd, "Maximum number of PDs."),
    FIELD(DA, max_qp_rd_atom, "Maximum outstanding RDMA read/atomic per QP as target."),
    FIELD(DA, max_ee_rd_atom, "Maximum outstanding RDMA read/atomic per EEC as target."),
    FIELD(DA, max_res_rd_atom, "Maximum responder resources for RDMA read/atomic."),
    FIELD(DA, max_qp_init_rd_atom, "Maximum RDMA read/atomic per QP as initiator."),
    FIELD(DA, max_ee_init_rd_atom, "Maximum RDMA read/atomic per EEC as initiator."),
    FIELD(DA, atomic_cap, "Atomic support (IBV_ATOMIC_*)."),
    FIELD(DA, max_ee, "Maximum number of EE contexts."),
    FIELD(DA, max_rdd, "Maximum number of RD domains."),
    FIELD(DA, max_mw, "Maximum number of memory windows."),
    FIELD(DA, max_raw_ipv6_qp, "Maximum number of raw IPv6 datagram QPs."),
    FIELD(DA, max_raw_ethy_qp, "Maximum number of raw ethertype datagram QPs."),
    FIELD(DA, max_mcast_grp, "Maximum number of multicast groups."),
    FIELD(DA, max_mcast_qp_attach, "Maximum QPs per multicast group."),
    FIELD(DA, max_total_mcast_qp_attach, "Maximum QPs attached to multicast groups."),
    FIELD(DA, max_ah, "Maximum number of address handles."),
    FIELD(DA, max_fmr, "Maximum number of FMRs."),
    FIELD(DA, max_map_per_fmr, "Maximum remaps per FMR before an unmap."),
    FIELD(DA, max_srq, "Maximum number of SRQs."),
    FIELD(DA, max_srq_wr, "Maximum number of WRs per SRQ."),
    FIELD(DA, max_srq_sge, "Maximum scatter/gather entries per SRQ WR."),
    FIELD(DA, max_pkeys, "Number of entries in the P_Key table."),
    FIELD(DA, local_ca_ack_delay, "Local CA ack delay."),
    FIELD(DA, phys_port_cnt, "Number of physical ports."),
};
#undef DA

#define PA struct pyrdma_port_attr
static const struct pyrdma_field port_attr_fields[] = {
    FIELD(PA, state, "Logical port state (IBV_PORT_*)."),
    FIELD(PA, max_mtu, "Maximum MTU supported (IBV_MTU_*)."),
    FIELD(PA, active_mtu, "Active MTU (IBV_MTU_*)."),
    FIELD(PA, gid_tbl_len, "Length of the GID table."),
    FIELD(PA, port_cap_flags, "Port capability mask."),
    FIELD(PA, max_msg_sz, "Maximum message size."),
    FIELD(PA, bad_pkey_cntr, "Bad P_Key counter."),
    FIELD(PA, qkey_viol_cntr, "Q_Key violation counter."),
    FIELD(PA, pkey_tbl_len, "Length of the P_Key table."),
    FIELD(PA, lid, "Base LID of the port."),
    FIELD(PA, sm_lid, "LID of the subnet manager."),
    FIELD(PA, lmc, "LID mask control."),
    FIELD(PA, max_vl_num, "Maximum number of VLs."),
    FIELD(PA, sm_sl, "SL to reach the subnet manager."),
    FIELD(PA, subnet_timeout, "Subnet propagation delay."),
    FIELD(PA, init_type_reply, "InitTypeReply value from the SM."),
    FIELD(PA, active_width, "Active link width."),
    FIELD(PA, active_speed, "Active link speed."),
    FIELD(PA, phys_state, "Physical port state."),
    FIELD(PA, link_layer, "Link layer (IBV_LINK_LAYER_*)."),
    FIELD(PA, flags, "Port flags."),
    FIELD(PA, port_cap_flags2, "Extended port capability mask."),
};
#undef PA

#define GE struct pyrdma_gid_entry
static const struct pyrdma_field gid_entry_fields[] = {
    FIELD(GE, gid, "The GID (rdma.IBA.GID)."),
    FIELD(GE, gid_index, "Index in the port's GID table."),
    FIELD(GE, gid_type, "IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1 or _V2."),
    FIELD(GE, ndev_ifindex, "Network device index (RoCE), else 0."),
};
#undef GE

#define NF(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const struct pyrdma_structdef device_attr_def = {
    "rdma.ibverbs.device_attr",
    "device_attr(**fields)\n--\n\n"
    "Device attributes, as returned by Context.query_device().",
    sizeof(struct pyrdma_device_attr), device_attr_fields,
    NF(device_attr_fields)};
static const struct pyrdma_structdef port_attr_def = {
    "rdma.ibverbs.port_attr",
    "port_attr(**fields)\n--\n\n"
    "Port attributes, as returned by Context.query_port().",
    sizeof(struct pyrdma_port_attr), port_attr_fields, NF(port_attr_fields)};
static const struct pyrdma_structdef gid_entry_def = {
    "rdma.ibverbs.gid_entry",
    "gid_entry(**fields)\n--\n\n"
    "A GID table entry, as returned by Context.query_gid_ex().",
    sizeof(struct pyrdma_gid_entry), gid_entry_fields, NF(gid_entry_fields)};

/* The data of a struct object. */
static inline char *
sdata(pyrdma_Struct *s)
{
    return (char *)s->data;
}

/* Get one field as a new Python object. */
static PyObject *
field_get(pyrdma_Struct *self, const struct pyrdma_field *f)
{
    char *p = sdata(self) + f->offset;

    switch (f->kind) {
    case K_U8: return PyLong_FromUnsignedLong(*(uint8_t *)p);
    case K_U16: return PyLong_FromUnsignedLong(*(uint16_t *)p);
    case K_U32: return PyLong_FromUnsignedLong(*(uint32_t *)p);
    case K_U64: return PyLong_FromUnsignedLongLong(*(uint64_t *)p);
    case K_I32: return PyLong_FromLong(*(int32_t *)p);
    case K_STR: return PyUnicode_DecodeUTF8(p, strnlen(p, f->size), "replace");
    case K_GID: {
        pyrdma_state *st = pyrdma_get_state_by_type(Py_TYPE(self));
        if (st == NULL)
            return NULL;
        return pyrdma_gid_from_raw(st, (const uint8_t *)p);
    }
    }
    PyErr_SetString(PyExc_SystemError, "bad field kind");
    return NULL;
}

/* Range-check an integer for field f; return 0 or -1 with an error set. */
static int
int_arg(PyObject *v, const struct pyrdma_field *f, PyTypeObject *tp,
        long long lo, unsigned long long hi, unsigned long long *out,
        long long *sout)
{
    int overflow = 0;
    long long sv;

    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s.%s must be an int, not %.100s",
                     tp->tp_name, f->name, Py_TYPE(v)->tp_name);
        return -1;
    }
    sv = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (sv == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0 && lo >= 0) {
        unsigned long long uv = PyLong_AsUnsignedLongLong(v);
        if (uv == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto range;
        }
        if (uv > hi)
            goto range;
        *out = uv;
        return 0;
    }
    if (overflow != 0 || sv < lo || (sv >= 0 && (unsigned long long)sv > hi))
        goto range;
    *out = (unsigned long long)sv;
    *sout = sv;
    return 0;
range:
    PyErr_Format(PyExc_ValueError, "%s.%s must be in range %lld..%llu",
                 tp->tp_name, f->name, lo, hi);
    return -1;
}

/* Set one field from a Python object; return 0 or -1 with an error set. */
static int
field_set(pyrdma_Struct *self, const struct pyrdma_field *f, PyObject *v)
{
    PyTypeObject *tp = Py_TYPE(self);
    char *p = sdata(self) + f->offset;
    unsigned long long u = 0;
    long long s = 0;

    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s.%s",
                     tp->tp_name, f->name);
        return -1;
    }
    switch (f->kind) {
    case K_U8:
        if (int_arg(v, f, tp, 0, UINT8_MAX, &u, &s)) return -1;
        *(uint8_t *)p = (uint8_t)u;
        break;
    case K_U16:
        if (int_arg(v, f, tp, 0, UINT16_MAX, &u, &s)) return -1;
        *(uint16_t *)p = (uint16_t)u;
        break;
    case K_U32:
        if (int_arg(v, f, tp, 0, UINT32_MAX, &u, &s)) return -1;
        *(uint32_t *)p = (uint32_t)u;
        break;
    case K_U64:
        if (int_arg(v, f, tp, 0, UINT64_MAX, &u, &s)) return -1;
        *(uint64_t *)p = (uint64_t)u;
        break;
    case K_I32:
        if (int_arg(v, f, tp, INT32_MIN, INT32_MAX, &u, &s)) return -1;
        *(int32_t *)p = (int32_t)s;
        break;
    case K_STR: {
        Py_ssize_t n;
        const char *c;
        if (!PyUnicode_Check(v)) {
            PyErr_Format(PyExc_TypeError, "%s.%s must be a str",
                         tp->tp_name, f->name);
            return -1;
        }
        c = PyUnicode_AsUTF8AndSize(v, &n);
        if (c == NULL)
            return -1;
        if ((size_t)n >= f->size) {
            PyErr_Format(PyExc_ValueError, "%s.%s is limited to %zu bytes",
                         tp->tp_name, f->name, f->size - 1);
            return -1;
        }
        memset(p, 0, f->size);
        memcpy(p, c, (size_t)n);
        break;
    }
    case K_GID: {
        Py_buffer b;
        if (PyUnicode_Check(v)) {
            /* Accept the textual forms through rdma.IBA.GID. */
            pyrdma_state *st = pyrdma_get_state_by_type(tp);
            PyObject *g;
            int rc;
            if (st == NULL || pyrdma_gid_type(st) == NULL)
                return -1;
            g = PyObject_CallOneArg(st->GID, v);
            if (g == NULL)
                return -1;
            rc = field_set(self, f, g);
            Py_DECREF(g);
            return rc;
        }
        if (PyObject_GetBuffer(v, &b, PyBUF_SIMPLE) < 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s.%s must be a GID, a str or 16 bytes",
                         tp->tp_name, f->name);
            return -1;
        }
        if (b.len != 16) {
            PyBuffer_Release(&b);
            PyErr_Format(PyExc_ValueError, "%s.%s must be 16 bytes, not %zd",
                         tp->tp_name, f->name, b.len);
            return -1;
        }
        memcpy(p, b.buf, 16);
        PyBuffer_Release(&b);
        break;
    }
    }
    self->setmask |= 1ULL << (f - self->def->fields);
    return 0;
}

static PyObject *
s_getter(PyObject *self, void *closure)
{
    return field_get((pyrdma_Struct *)self, closure);
}

static int
s_setter(PyObject *self, PyObject *v, void *closure)
{
    return field_set((pyrdma_Struct *)self, closure, v);
}

/* The defs of the struct types, to find a type's def in tp_new. */
static const struct pyrdma_structdef *const all_defs[] = {
    &device_attr_def, &port_attr_def, &gid_entry_def,
};

/* Return the def of tp (or of its struct base class), NULL if none. */
static const struct pyrdma_structdef *
def_of(PyTypeObject *tp)
{
    for (; tp != NULL; tp = tp->tp_base) {
        const char *n = tp->tp_name;
        size_t i;
        for (i = 0; i < sizeof(all_defs) / sizeof(all_defs[0]); i++)
            if (strcmp(all_defs[i]->name, n) == 0 &&
                tp->tp_basicsize == (Py_ssize_t)(offsetof(pyrdma_Struct, data)
                                                 + all_defs[i]->csize))
                return all_defs[i];
    }
    return NULL;
}

static PyObject *
s_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    pyrdma_Struct *self;
    const struct pyrdma_structdef *def = def_of(tp);

    (void)args;
    (void)kw;
    if (def == NULL) {
        PyErr_Format(PyExc_TypeError, "cannot create %s", tp->tp_name);
        return NULL;
    }
    self = (pyrdma_Struct *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    self->def = def;
    self->setmask = 0;
    memset(sdata(self), 0, def->csize);
    return (PyObject *)self;
}

static int
s_init(PyObject *op, PyObject *args, PyObject *kw)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;

    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_Format(PyExc_TypeError, "%s() takes keyword arguments only",
                     Py_TYPE(op)->tp_name);
        return -1;
    }
    if (kw == NULL)
        return 0;
    while (PyDict_Next(kw, &pos, &key, &value)) {
        /* Go through setattr so subclasses and descriptors behave. */
        if (PyObject_SetAttr(op, key, value) < 0) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "%s() got an unexpected keyword argument '%U'",
                             Py_TYPE(op)->tp_name, key);
            }
            return -1;
        }
    }
    return 0;
}

static PyObject *
s_repr(PyObject *op)
{
    pyrdma_Struct *self = (pyrdma_Struct *)op;
    const struct pyrdma_structdef *def = self->def;
    PyObject *parts, *sep, *joined, *res, *name;
    int i;

    parts = PyList_New(0);
    if (parts == NULL)
        return NULL;
    for (i = 0; i < def->nfields; i++) {
        PyObject *v = field_get(self, &def->fields[i]), *item;
        if (v == NULL)
            goto fail;
        item = PyUnicode_FromFormat("%s=%R", def->fields[i].name, v);
        Py_DECREF(v);
        if (item == NULL || PyList_Append(parts, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    sep = PyUnicode_FromString(", ");
    if (sep == NULL)
        goto fail;
    joined = PyUnicode_Join(sep, parts);
    Py_DECREF(sep);
    Py_DECREF(parts);
    if (joined == NULL)
        return NULL;
    name = PyType_GetName(Py_TYPE(op));
    if (name == NULL) {
        Py_DECREF(joined);
        return NULL;
    }
    res = PyUnicode_FromFormat("%U(%U)", name, joined);
    Py_DECREF(name);
    Py_DECREF(joined);
    return res;
fail:
    Py_DECREF(parts);
    return NULL;
}

static PyObject *
s_richcompare(PyObject *a, PyObject *b, int op)
{
    pyrdma_Struct *x = (pyrdma_Struct *)a, *y = (pyrdma_Struct *)b;
    int i, eq = 1;

    if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b))
        Py_RETURN_NOTIMPLEMENTED;
    for (i = 0; i < x->def->nfields && eq; i++) {
        const struct pyrdma_field *f = &x->def->fields[i];
        if (f->kind == K_STR)
            eq = strncmp(sdata(x) + f->offset, sdata(y) + f->offset,
                         f->size) == 0;
        else
            eq = memcmp(sdata(x) + f->offset, sdata(y) + f->offset,
                        f->size) == 0;
    }
    if (op == Py_NE)
        eq = !eq;
    return PyBool_FromLong(eq);
}

static PyObject *
s_reduce(PyObject *op, PyObject *noargs)
{
    pyrdma_Struct *self = (pyrdma_Struct *)op;
    PyObject *kw, *res;
    int i;

    (void)noargs;
    kw = PyDict_New();
    if (kw == NULL)
        return NULL;
    for (i = 0; i < self->def->nfields; i++) {
        PyObject *v = field_get(self, &self->def->fields[i]);
        if (v == NULL || PyDict_SetItemString(kw, self->def->fields[i].name,
                                              v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(kw);
            return NULL;
        }
        Py_DECREF(v);
    }
    /* Unpickling calls type() and then __setstate__(kw). */
    res = Py_BuildValue("(O()O)", (PyObject *)Py_TYPE(op), kw);
    Py_DECREF(kw);
    return res;
}

static PyObject *
s_setstate(PyObject *op, PyObject *state)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;

    if (!PyDict_Check(state)) {
        PyErr_SetString(PyExc_TypeError, "state must be a dict");
        return NULL;
    }
    while (PyDict_Next(state, &pos, &key, &value))
        if (PyObject_SetAttr(op, key, value) < 0)
            return NULL;
    Py_RETURN_NONE;
}

static PyObject *
s_fields(PyObject *tp, PyObject *noargs)
{
    const struct pyrdma_structdef *def = def_of((PyTypeObject *)tp);
    PyObject *t;
    int i;

    (void)noargs;
    if (def == NULL)
        return PyTuple_New(0);
    t = PyTuple_New(def->nfields);
    if (t == NULL)
        return NULL;
    for (i = 0; i < def->nfields; i++) {
        PyObject *n = PyUnicode_FromString(def->fields[i].name);
        if (n == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, n);
    }
    return t;
}

static PyMethodDef s_methods[] = {
    {"__reduce__", s_reduce, METH_NOARGS, NULL},
    {"__setstate__", s_setstate, METH_O, NULL},
    {"_fields", s_fields, METH_NOARGS | METH_CLASS,
     "_fields($cls, /)\n--\n\nThe names of the fields, in C order."},
    {NULL, NULL, 0, NULL},
};

/* Make the heap type for def; return it (new reference) or NULL. */
static PyTypeObject *
make_type(PyObject *module, const struct pyrdma_structdef *def)
{
    PyGetSetDef *gs;
    PyTypeObject *tp;
    int i;

    /* One getset table per def for the whole process: it must outlive
       every type made from it (module instances may come and go). */
    static PyGetSetDef *cache[sizeof(all_defs) / sizeof(all_defs[0])];
    size_t k;

    for (k = 0; all_defs[k] != def; k++)
        ;
    if (cache[k] != NULL)
        goto have;
    gs = PyMem_RawCalloc((size_t)def->nfields + 1, sizeof(*gs));
    if (gs == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (i = 0; i < def->nfields; i++) {
        gs[i].name = def->fields[i].name;
        gs[i].get = s_getter;
        gs[i].set = s_setter;
        gs[i].doc = def->fields[i].doc;
        gs[i].closure = (void *)&def->fields[i];
    }
    cache[k] = gs;
have:
    gs = cache[k];
    {
        PyType_Slot slots[] = {
            {Py_tp_doc, (void *)def->doc},
            {Py_tp_new, s_new},
            {Py_tp_init, s_init},
            {Py_tp_repr, s_repr},
            {Py_tp_richcompare, s_richcompare},
            {Py_tp_getset, gs},
            {Py_tp_methods, s_methods},
            {0, NULL},
        };
        PyType_Spec spec = {
            .name = def->name,
            .basicsize = (int)(offsetof(pyrdma_Struct, data) + def->csize),
            .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE |
                     Py_TPFLAGS_IMMUTABLETYPE,
            .slots = slots,
        };
        tp = (PyTypeObject *)PyType_FromModuleAndSpec(module, &spec, NULL);
    }
    return tp;
}

PyObject *
pyrdma_struct_new(PyTypeObject *tp, const void *cstruct, size_t size)
{
    pyrdma_Struct *s = (pyrdma_Struct *)s_new(tp, NULL, NULL);

    if (s == NULL)
        return NULL;
    if (size != s->def->csize) {
        Py_DECREF(s);
        PyErr_SetString(PyExc_SystemError, "struct size mismatch");
        return NULL;
    }
    memcpy(sdata(s), cstruct, size);
    return (PyObject *)s;
}

int
pyrdma_structs_init(PyObject *module, pyrdma_state *st)
{
    struct { const struct pyrdma_structdef *def; PyTypeObject **slot; } t[] = {
        {&device_attr_def, &st->device_attr},
        {&port_attr_def, &st->port_attr},
        {&gid_entry_def, &st->gid_entry},
    };
    size_t i;

    for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        *t[i].slot = make_type(module, t[i].def);
        if (*t[i].slot == NULL)
            return -1;
        if (PyModule_AddType(module, *t[i].slot) < 0)
            return -1;
    }
    return 0;
}
