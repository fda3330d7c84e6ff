/* umad.c - rdma._umad: user MADs through libibumad, loaded with dlopen. */

/*
 * libibumad.so.3 (or $RDMA_UMAD_LIBRARY) is loaded the first time it is
 * needed, so importing the module never requires it.  The module offers:
 *
 *   _load()              load the library (SysError naming the package)
 *   get_ca_names()       the CA names libibumad sees
 *   get_ca(name)         a CA and its ports as plain dicts
 *   Port(ca, port_num)   an open umad port: register/unregister agents,
 *                        send a MAD, receive one with a timeout, and
 *                        transact() a batch of requests
 *
 * Transactions (matching replies to requests, retries) are done in Python
 * (rdma/umad.py, rdma/sched.py) on top of Port.send/Port.recv, except
 * Port.transact: many requests in flight, matched and re-sent in C (the
 * SubnGet batches of rdma.sched.MADSchedule.mget).  Port.recv waits in short
 * slices with the GIL released and checks for signals between slices, so
 * Ctrl-C interrupts a wait.  All libibumad calls go through the table U, so
 * the extension has no undefined umad_* symbol; libibumad itself calls
 * open/read/write/ioctl through libc, which keeps the ibsim shim
 * (LD_PRELOAD librdma_umad2sim.so, csrc/umad2sim/) working.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <endian.h>
#include <infiniband/umad.h>

#include "dlload.h"
#include "errors.h"

/* Longest wait with the GIL released before signals are checked (ms). */
#define SLICE_MS 50
/* First receive buffer size (bytes of MAD data); grows on ENOSPC. */
#define FIRST_BUF 256
/* Largest receive buffer accepted (bytes of MAD data). */
#define MAX_BUF (16 * 1024 * 1024)

/* The libibumad functions this module uses, resolved by load(). */
static struct {
    int loaded;                         /* 1 once every symbol is resolved */
    void *dl;                           /* dlopen handle */
    int (*init)(void);
    int (*get_cas_names)(char cas[][UMAD_CA_NAME_LEN], int max);
    int (*get_ca)(const char *ca_name, umad_ca_t *ca);
    int (*release_ca)(umad_ca_t *ca);
    int (*open_port)(const char *ca_name, int portnum);
    int (*close_port)(int portid);
    size_t (*size)(void);
    int (*set_addr)(void *umad, int dlid, int dqp, int sl, int qkey);
    int (*set_grh)(void *umad, void *mad_addr);
    int (*set_pkey)(void *umad, int pkey_index);
    int (*send)(int portid, int agentid, void *umad, int length,
                int timeout_ms, int retries);
    int (*recv)(int portid, void *umad, int *length, int timeout_ms);
    int (*reg)(int portid, int mgmt_class, int mgmt_version,
               uint8_t rmpp_version, long method_mask[16 / sizeof(long)]);
    int (*unreg)(int portid, int agentid);
} U;

/* Module state (PEP 573). */
typedef struct {
    PyObject *SysError;          /* rdma.SysError, from rdma._errors */
    PyTypeObject *PortType;      /* rdma._umad.Port */
} umad_state;

/* An open umad port (one file descriptor of /dev/infiniband/umadN). */
typedef struct {
    PyObject_HEAD
    int portid;              /* libibumad port id, -1 once closed */
    int busy;                /* calls running with the GIL released */
    int closing;             /* close() was asked while busy */
    int port_num;            /* the port number it was opened on */
    PyObject *ca_name;       /* the CA name (str) */
    size_t buf_hint;         /* receive buffer size that fitted last time */
    umad_state *state;       /* module state, cached */
    PyObject *weakreflist;   /* weak references to this object */
} umad_Port;

static PyModuleDef umad_module;

/* Raise SysError(err, func, msg) (errors.c); return NULL. */
static PyObject *
raise_sys(umad_state *st, int err, const char *func, const char *msg)
{
    return pyrdma_sys_error(st->SysError, err, func, msg);
}

/* libibumad, loaded by load(). */
static const struct pyrdma_dllib libibumad = {
    .setting = PYRDMA_SET_UMAD_LIBRARY,
    .package = "libibumad3 (rdma-core)",
    .name = "libibumad",
    .too_old = "rdma-core too old?",
};

#define SYM(field, name) {name, (void **)&U.field, 0}
static const struct pyrdma_dlsym umad_syms[] = {
    SYM(init, "umad_init"),
    SYM(get_cas_names, "umad_get_cas_names"),
    SYM(get_ca, "umad_get_ca"),
    SYM(release_ca, "umad_release_ca"),
    SYM(open_port, "umad_open_port"),
    SYM(close_port, "umad_close_port"),
    SYM(size, "umad_size"),
    SYM(set_addr, "umad_set_addr"),
    SYM(set_grh, "umad_set_grh"),
    SYM(set_pkey, "umad_set_pkey"),
    SYM(send, "umad_send"),
    SYM(recv, "umad_recv"),
    SYM(reg, "umad_register"),
    SYM(unreg, "umad_unregister"),
    {NULL, NULL, 0},
};
#undef SYM

/* Load libibumad (or $RDMA_UMAD_LIBRARY) and umad_init() it; return 0, or
   -1 with SysError set. */
static int
load(umad_state *st)
{
    struct pyrdma_status status = {0};

    if (U.loaded)
        return 0;
    U.dl = pyrdma_dlopen(&libibumad, umad_syms, &status);
    if (U.dl == NULL) {
        pyrdma_status_error(st->SysError, &status);
        return -1;
    }
    if (U.init() < 0) {
        raise_sys(st, EIO, "umad_init", "");
        dlclose(U.dl);
        U.dl = NULL;
        return -1;
    }
    U.loaded = 1;
    return 0;
}

/* Return the errno of a libibumad failure (its return value or errno). */
static int
err_of(int rc)
{
    if (rc < 0 && rc != -1)
        return -rc;
    return errno ? errno : EIO;
}

/* ---- module functions ------------------------------------------------ */

static PyObject *
mod_load(PyObject *m, PyObject *noargs)
{
    (void)noargs;
    if (load(PyModule_GetState(m)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
mod_get_ca_names(PyObject *m, PyObject *noargs)
{
    umad_state *st = PyModule_GetState(m);
    char (*names)[UMAD_CA_NAME_LEN];
    PyObject *list = NULL;
    int n, i;

    (void)noargs;
    if (load(st) < 0)
        return NULL;
    names = calloc(UMAD_MAX_DEVICES, UMAD_CA_NAME_LEN);
    if (names == NULL)
        return PyErr_NoMemory();
    errno = 0;
    n = U.get_cas_names(names, UMAD_MAX_DEVICES);
    if (n < 0) {
        /* No umad support in the kernel: no CAs, not an error. */
        if (errno == ENOENT || errno == ENODEV || n == -ENOENT)
            n = 0;
        else {
            raise_sys(st, err_of(n), "umad_get_cas_names", "");
            goto out;
        }
    }
    list = PyList_New(0);
    if (list == NULL)
        goto out;
    for (i = 0; i < n; i++) {
        PyObject *s;
        names[i][UMAD_CA_NAME_LEN - 1] = '\0';
        s = PyUnicode_FromString(names[i]);
        if (s == NULL || PyList_Append(list, s) < 0) {
            Py_XDECREF(s);
            Py_CLEAR(list);
            goto out;
        }
        Py_DECREF(s);
    }
out:
    free(names);
    return list;
}

/* Return a new dict describing one umad port, NULL with an error set. */
static PyObject *
port_dict(const umad_port_t *p)
{
    PyObject *d, *pkeys;
    unsigned i;

    pkeys = PyList_New(0);
    if (pkeys == NULL)
        return NULL;
    for (i = 0; p->pkeys != NULL && i < p->pkeys_size; i++) {
        PyObject *v = PyLong_FromLong(p->pkeys[i]);
        if (v == NULL || PyList_Append(pkeys, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(pkeys);
            return NULL;
        }
        Py_DECREF(v);
    }
    d = Py_BuildValue(
        "{s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:k,s:K,s:K,s:N,s:s}",
        "port_id", p->portnum,
        "lid", p->base_lid,
        "lmc", p->lmc,
        "sm_lid", p->sm_lid,
        "sm_sl", p->sm_sl,
        "state", p->state,
        "phys_state", p->phys_state,
        "rate", p->rate,
        "capmask", (unsigned long)be32toh(p->capmask),
        "gid_prefix", (unsigned long long)be64toh(p->gid_prefix),
        "port_guid", (unsigned long long)be64toh(p->port_guid),
        "pkeys", pkeys,
        "link_layer", p->link_layer);
    return d;
}

static PyObject *
mod_get_ca(PyObject *m, PyObject *arg)
{
    umad_state *st = PyModule_GetState(m);
    umad_ca_t ca;
    const char *name;
    PyObject *ports = NULL, *res = NULL;
    int rc, i;
    char msg[128];

    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "CA name must be a str, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    name = PyUnicode_AsUTF8(arg);
    if (name == NULL || load(st) < 0)
        return NULL;
    if (strlen(name) >= UMAD_CA_NAME_LEN) {
        PyErr_Format(PyExc_ValueError, "CA name too long: %s", name);
        return NULL;
    }
    memset(&ca, 0, sizeof(ca));
    errno = 0;
    rc = U.get_ca(name, &ca);
    if (rc < 0) {
        PyOS_snprintf(msg, sizeof(msg), "no umad device %s", name);
        return raise_sys(st, err_of(rc), "umad_get_ca", msg);
    }
    ports = PyList_New(0);
    if (ports == NULL)
        goto out;
    for (i = 0; i < UMAD_CA_MAX_PORTS; i++) {
        PyObject *d;
        if (ca.ports[i] == NULL)
            continue;
        d = port_dict(ca.ports[i]);
        if (d == NULL || PyList_Append(ports, d) < 0) {
            Py_XDECREF(d);
            goto out;
        }
        Py_DECREF(d);
    }
    ca.fw_ver[sizeof(ca.fw_ver) - 1] = '\0';
    ca.ca_type[sizeof(ca.ca_type) - 1] = '\0';
    ca.hw_ver[sizeof(ca.hw_ver) - 1] = '\0';
    res = Py_BuildValue("{s:s,s:I,s:i,s:s,s:s,s:s,s:K,s:K,s:O}",
                        "name", ca.ca_name,
                        "node_type", ca.node_type,
                        "numports", ca.numports,
                        "fw_ver", ca.fw_ver,
                        "ca_type", ca.ca_type,
                        "hw_ver", ca.hw_ver,
                        "node_guid",
                        (unsigned long long)be64toh(ca.node_guid),
                        "system_guid",
                        (unsigned long long)be64toh(ca.system_guid),
                        "ports", ports);
out:
    Py_XDECREF(ports);
    U.release_ca(&ca);
    return res;
}

/* ---- Port -------------------------------------------------------------- */

/* Return 1 if the port is open; else 0 with ValueError set. */
static int
check_open(umad_Port *self)
{
    if (self->portid < 0 || self->closing) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed umad Port");
        return 0;
    }
    return 1;
}

static PyObject *
port_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    umad_Port *self;
    PyObject *m = PyType_GetModuleByDef(tp, &umad_module);

    (void)args;
    (void)kw;
    if (m == NULL)
        return NULL;
    self = (umad_Port *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    self->state = PyModule_GetState(m);
    self->portid = -1;
    self->buf_hint = FIRST_BUF;
    return (PyObject *)self;
}

static int
port_init(PyObject *op, PyObject *args, PyObject *kw)
{
    umad_Port *self = (umad_Port *)op;
    static char *kwlist[] = {"ca_name", "port_num", NULL};
    const char *name;
    int port_num, portid;
    char msg[160];

    if (!PyArg_ParseTupleAndKeywords(args, kw, "si:Port", kwlist, &name,
                                     &port_num))
        return -1;
    if (self->portid >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "umad Port is already open");
        return -1;
    }
    if (port_num < 0 || port_num > 255) {
        PyErr_Format(PyExc_ValueError, "port_num out of range: %d", port_num);
        return -1;
    }
    if (load(self->state) < 0)
        return -1;
    errno = 0;
    Py_BEGIN_ALLOW_THREADS
    portid = U.open_port(name, port_num);
    Py_END_ALLOW_THREADS
    if (portid < 0) {
        PyOS_snprintf(msg, sizeof(msg), "cannot open umad port %s/%d",
                      name, port_num);
        raise_sys(self->state, err_of(portid), "umad_open_port", msg);
        return -1;
    }
    self->portid = portid;
    self->port_num = port_num;
    Py_XSETREF(self->ca_name, PyUnicode_FromString(name));
    return self->ca_name == NULL ? -1 : 0;
}

/* Close the port if nobody is using it; return 0, or -1 with an error. */
static int
port_do_close(umad_Port *self)
{
    int portid = self->portid;

    if (portid < 0)
        return 0;
    if (self->busy > 0) {
        /* A wait in another thread closes it when its slice ends. */
        self->closing = 1;
        return 0;
    }
    self->portid = -1;   /* steal first: never closed twice */
    self->closing = 0;
    if (U.close_port(portid) < 0) {
        raise_sys(self->state, EIO, "umad_close_port", "");
        return -1;
    }
    return 0;
}

static PyObject *
port_close(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    if (port_do_close((umad_Port *)op) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
port_enter(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    if (!check_open((umad_Port *)op))
        return NULL;
    return Py_NewRef(op);
}

static PyObject *
port_exit(PyObject *op, PyObject *args)
{
    (void)args;
    if (port_do_close((umad_Port *)op) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *
port_register(PyObject *op, PyObject *args, PyObject *kw)
{
    umad_Port *self = (umad_Port *)op;
    static char *kwlist[] = {"mgmt_class", "mgmt_version", "rmpp_version",
                             "method_mask", NULL};
    int mgmt_class, mgmt_version, rmpp_version = 0, rc, i;
    PyObject *mask_obj = Py_None;
    long mask[16 / sizeof(long)];
    Py_buffer raw;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "ii|iO:register", kwlist,
                                     &mgmt_class, &mgmt_version,
                                     &rmpp_version, &mask_obj))
        return NULL;
    if (!check_open(self))
        return NULL;
    if (mgmt_class < 0 || mgmt_class > 255 || mgmt_version < 0 ||
        mgmt_version > 255 || rmpp_version < 0 || rmpp_version > 255) {
        PyErr_SetString(PyExc_ValueError,
                        "mgmt_class, mgmt_version and rmpp_version are "
                        "8-bit values");
        return NULL;
    }
    memset(mask, 0, sizeof(mask));
    if (mask_obj != Py_None) {
        /* 16 bytes, little endian: bit n set means method n is received. */
        const unsigned char *b;
        if (PyObject_GetBuffer(mask_obj, &raw, PyBUF_SIMPLE) < 0)
            return NULL;
        if (raw.len != 16) {
            PyBuffer_Release(&raw);
            PyErr_SetString(PyExc_ValueError, "method_mask is 16 bytes");
            return NULL;
        }
        b = raw.buf;
        for (i = 0; i < 128; i++)
            if (b[i / 8] & (1u << (i % 8)))
                mask[i / (8 * sizeof(long))] |=
                    1L << (i % (8 * sizeof(long)));
        PyBuffer_Release(&raw);
    }
    errno = 0;
    rc = U.reg(self->portid, mgmt_class, mgmt_version, (uint8_t)rmpp_version,
               mask_obj != Py_None ? mask : NULL);
    if (rc < 0)
        return raise_sys(self->state, err_of(rc), "umad_register", "");
    return PyLong_FromLong(rc);
}

static PyObject *
port_unregister(PyObject *op, PyObject *arg)
{
    umad_Port *self = (umad_Port *)op;
    long agent = PyLong_AsLong(arg);
    int rc;

    if (agent == -1 && PyErr_Occurred())
        return NULL;
    if (!check_open(self))
        return NULL;
    errno = 0;
    rc = U.unreg(self->portid, (int)agent);
    if (rc < 0)
        return raise_sys(self->state, err_of(rc), "umad_unregister", "");
    Py_RETURN_NONE;
}

/* An unsigned integer argument for "O&" and uint_conv: PyArg_Parse's "I"
 * and "k" wrap silently (2**64 + 5 becomes 5). */
struct uint_arg {
    const char *name;           /* the argument, for the message */
    unsigned long long max;     /* the largest value accepted (min: 0) */
    unsigned long long v;       /* in: the default; out: the value */
};

/* "O&" converter for a struct uint_arg: 1, or 0 with TypeError or
 * ValueError naming the argument. */
static int
uint_conv(PyObject *v, void *p)
{
    struct uint_arg *u = p;
    unsigned long long x = 0;
    int overflow = 0;
    long long sx;
    PyObject *i = PyNumber_Index(v);

    if (i == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s",
                         u->name, Py_TYPE(v)->tp_name);
        }
        return 0;
    }
    sx = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (sx == -1 && PyErr_Occurred()) {
        Py_DECREF(i);
        return 0;
    }
    if (overflow == 0 && sx >= 0 && (unsigned long long)sx <= u->max)
        x = (unsigned long long)sx;
    else {
        PyErr_Format(PyExc_ValueError, "%s must be in range 0..%llu, not %R",
                     u->name, u->max, i);
        Py_DECREF(i);
        return 0;
    }
    Py_DECREF(i);
    u->v = x;
    return 1;
}

/* Fill the GRH of a umad from a tuple (dgid, sgid_index, hop_limit,
 * traffic_class, flow_label); return 0, or -1 with an error set. */
static int
set_grh(void *umad, PyObject *grh)
{
    ib_mad_addr_t addr;
    Py_buffer gid;
    struct uint_arg sgid_index = {"grh sgid_index", 255, 0},
        hop_limit = {"grh hop_limit", 255, 0},
        tclass = {"grh traffic_class", 255, 0},
        flow = {"grh flow_label", 0xFFFFF, 0};

    if (!PyArg_ParseTuple(grh, "y*O&O&O&O&:grh", &gid, uint_conv,
                          &sgid_index, uint_conv, &hop_limit, uint_conv,
                          &tclass, uint_conv, &flow))
        return -1;
    if (gid.len != 16) {
        PyBuffer_Release(&gid);
        PyErr_SetString(PyExc_ValueError,
                        "grh is (16-byte dgid, sgid_index, hop_limit, "
                        "traffic_class, 20-bit flow_label)");
        return -1;
    }
    memset(&addr, 0, sizeof(addr));
    memcpy(addr.gid, gid.buf, 16);
    PyBuffer_Release(&gid);
    addr.grh_present = 1;
    addr.gid_index = (uint8_t)sgid_index.v;
    addr.hop_limit = (uint8_t)hop_limit.v;
    addr.traffic_class = (uint8_t)tclass.v;
    /* umad_set_grh wants the flow label in host order (it converts), and
       does not copy the source GID index: set it here, or the MAD leaves
       from GID 0 (on RoCE: the wrong address family, EIO) */
    addr.flow_label = (uint32_t)flow.v;
    U.set_grh(umad, &addr);
    ((ib_user_mad_t *)umad)->addr.gid_index = (uint8_t)sgid_index.v;
    return 0;
}

static PyObject *
port_send(PyObject *op, PyObject *args, PyObject *kw)
{
    umad_Port *self = (umad_Port *)op;
    static char *kwlist[] = {"agent_id", "mad", "dlid", "dqpn", "sl", "qkey",
                             "pkey_index", "timeout_ms", "retries", "grh",
                             NULL};
    int agent, dlid = -1, dqpn = 1, sl = 0, pkey_index = 0, timeout_ms = 0;
    int retries = 0, rc, portid;
    struct uint_arg qkey = {"qkey", 0xFFFFFFFFUL, 0x80010000UL};
    PyObject *grh = Py_None;
    Py_buffer mad;
    void *umad;
    size_t hdr;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "iy*|$iiiO&iiiO:send", kwlist,
                                     &agent, &mad, &dlid, &dqpn, &sl,
                                     uint_conv, &qkey, &pkey_index,
                                     &timeout_ms, &retries, &grh))
        return NULL;
    if (dlid == -1) {
        PyErr_SetString(PyExc_TypeError, "send() needs the keyword dlid");
        goto fail;
    }
    if (!check_open(self))
        goto fail;
    if (mad.len < 24 || mad.len > MAX_BUF) {
        PyErr_Format(PyExc_ValueError, "a MAD is 24 to %d bytes, not %zd",
                     MAX_BUF, mad.len);
        goto fail;
    }
    if (dlid < 0 || dlid > 0xFFFF || dqpn < 0 || dqpn > 0xFFFFFF || sl < 0 ||
        sl > 15 || pkey_index < 0 ||
        pkey_index > 0xFFFF || timeout_ms < 0 || retries < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "send: dlid (16 bit), dqpn (24 bit), sl (4 bit), "
                        "pkey_index (16 bit), timeout_ms, retries "
                        "out of range");
        goto fail;
    }
    hdr = U.size();
    umad = calloc(1, hdr + (size_t)mad.len);
    if (umad == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy((char *)umad + hdr, mad.buf, (size_t)mad.len);
    U.set_addr(umad, dlid, dqpn, sl, (int)qkey.v);
    U.set_pkey(umad, pkey_index);
    if (grh != Py_None && set_grh(umad, grh) < 0) {
        free(umad);
        goto fail;
    }
    portid = self->portid;
    self->busy++;
    errno = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = U.send(portid, agent, umad, (int)mad.len, timeout_ms, retries);
    Py_END_ALLOW_THREADS
    self->busy--;
    free(umad);
    PyBuffer_Release(&mad);
    if (self->closing && self->busy == 0)
        port_do_close(self);
    if (rc < 0)
        return raise_sys(self->state, err_of(rc), "umad_send", "");
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&mad);
    return NULL;
}

/* Return the monotonic clock in milliseconds. */
static long long
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Build the (agent_id, status, mad, addr) result of a receive. */
static PyObject *
recv_result(void *umad, size_t hdr, int agent, int len)
{
    const ib_user_mad_t *u = umad;
    const ib_mad_addr_t *a = &u->addr;
    PyObject *addr;

    addr = Py_BuildValue("(IIIIIIy#IIIII)",
                         (unsigned int)be16toh(a->lid),
                         (unsigned int)be32toh(a->qpn),
                         (unsigned int)be32toh(a->qkey),
                         (unsigned int)a->sl,
                         (unsigned int)a->path_bits,
                         (unsigned int)a->grh_present,
                         (const char *)a->gid, (Py_ssize_t)16,
                         (unsigned int)a->hop_limit,
                         (unsigned int)a->traffic_class,
                         (unsigned int)be32toh(a->flow_label),
                         (unsigned int)a->pkey_index,
                         (unsigned int)a->gid_index);
    if (addr == NULL)
        return NULL;
    return Py_BuildValue("(iIy#N)", agent, (unsigned int)u->status,
                         (const char *)umad + hdr, (Py_ssize_t)len, addr);
}

/* umad_recv failed with ENOSPC: the MAD stays queued and len is the size
   it needs.  Grow *buf (header of hdr bytes + *cap bytes of MAD) to fit
   it; return 0, or -1 with an error set. */
static int
grow_recv_buf(umad_state *st, void **buf, size_t *cap, size_t hdr, int len)
{
    void *bigger;

    if (len <= (int)*cap || len > MAX_BUF) {
        raise_sys(st, ENOSPC, "umad_recv",
                  "received MAD has an impossible length");
        return -1;
    }
    bigger = realloc(*buf, hdr + (size_t)len);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = bigger;
    *cap = (size_t)len;
    return 0;
}

/* Return 1 if umad_recv's result rc (and errno) is a failure, 0 if it only
   says that no MAD came in the slice (or a signal interrupted it). */
static int
recv_failed(int rc)
{
    return rc != -ETIMEDOUT && errno != ETIMEDOUT && errno != EAGAIN &&
           errno != EINTR;
}

static PyObject *
port_recv(PyObject *op, PyObject *args, PyObject *kw)
{
    umad_Port *self = (umad_Port *)op;
    static char *kwlist[] = {"timeout_ms", NULL};
    int timeout_ms = -1, portid, rc = 0, len, slice;
    size_t hdr, cap;
    void *umad = NULL;
    PyObject *res = NULL;
    long long deadline = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:recv", kwlist,
                                     &timeout_ms))
        return NULL;
    if (!check_open(self))
        return NULL;
    if (timeout_ms >= 0)
        deadline = now_ms() + timeout_ms;
    hdr = U.size();
    cap = self->buf_hint;
    umad = malloc(hdr + cap);
    if (umad == NULL)
        return PyErr_NoMemory();
    portid = self->portid;
    self->busy++;
    for (;;) {
        if (timeout_ms >= 0) {
            long long left = deadline - now_ms();
            if (left <= 0) {
                res = Py_NewRef(Py_None);   /* timed out */
                break;
            }
            slice = left > SLICE_MS ? SLICE_MS : (int)left;
        }
        else
            slice = SLICE_MS;
        len = (int)cap;
        errno = 0;
        Py_BEGIN_ALLOW_THREADS
        rc = U.recv(portid, umad, &len, slice);
        Py_END_ALLOW_THREADS
        if (rc >= 0) {
            if (len < 0 || (size_t)len > cap)
                len = (int)cap;
            res = recv_result(umad, hdr, rc, len);
            break;
        }
        if (rc == -ENOSPC || errno == ENOSPC) {
            if (grow_recv_buf(self->state, &umad, &cap, hdr, len) < 0)
                break;
            self->buf_hint = cap;
            continue;
        }
        if (recv_failed(rc)) {
            raise_sys(self->state, err_of(rc), "umad_recv", "");
            break;
        }
        if (PyErr_CheckSignals() < 0)
            break;
        if (self->closing) {
            PyErr_SetString(PyExc_ValueError,
                            "the umad Port was closed during recv()");
            break;
        }
    }
    self->busy--;
    free(umad);
    if (self->closing && self->busy == 0 && port_do_close(self) < 0)
        Py_CLEAR(res);
    return res;
}

/* One request of Port.transact(). */
struct txn {
    void *umad;              /* ib_user_mad header + the MAD, to (re)send */
    int len;                 /* bytes of MAD after the header */
    int agent;               /* agent id it is sent with */
    int timeout_ms;          /* response timeout of one try */
    int retries;             /* re-sends left */
    uint64_t key;            /* mgmt class << 32 | TransactionID[31:0] */
    long long deadline;      /* when the try in flight is over (ms) */
};

/* The match key of a MAD: its class and the low 32 bits of its TID (the
   kernel and the ibsim shim rewrite the upper 32). */
static uint64_t
mad_key(const unsigned char *mad)
{
    return ((uint64_t)mad[1] << 32) | ((uint64_t)mad[12] << 24) |
        ((uint64_t)mad[13] << 16) | ((uint64_t)mad[14] << 8) | mad[15];
}

/* Send (again) request t with the GIL released; 0 or an errno. */
static int
txn_send(umad_Port *self, struct txn *t)
{
    int rc, portid = self->portid;

    errno = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = U.send(portid, t->agent, t->umad, t->len, t->timeout_ms, 0);
    Py_END_ALLOW_THREADS
    t->deadline = now_ms() + t->timeout_ms + t->timeout_ms / 4 + 1;
    return rc < 0 ? err_of(rc) : 0;
}

/* The state of one Port.transact() call. */
struct transact {
    umad_Port *port;         /* the port it runs on */
    struct txn *txns;        /* the requests, n of them */
    Py_ssize_t n;            /* how many requests */
    Py_ssize_t next;         /* the first request never sent */
    Py_ssize_t done;         /* requests answered, failed or given up */
    Py_ssize_t *inflight;    /* indexes of the requests in flight */
    Py_ssize_t nin;          /* how many are in flight */
    int window;              /* the most requests in flight at once */
    long long sends;         /* MADs sent */
    long long unmatched;     /* MADs received that matched no request */
    PyObject *results;       /* per request: reply bytes, None or errno */
    void *rbuf;              /* receive buffer: header + cap bytes */
    size_t hdr;              /* size of the ib_user_mad header */
    size_t cap;              /* bytes of MAD rbuf holds */
};

/* Raise the ValueError of a port closed while transact() ran; return -1. */
static int
closed_during_transact(void)
{
    PyErr_SetString(PyExc_ValueError,
                    "the umad Port was closed during transact()");
    return -1;
}

/* Parse request i, a tuple (agent_id, mad, dlid, sl, timeout_ms, retries),
   into tx->txns[i]: its umad addressed to QP0 for SMPs, to QP1 with the
   GSI Q_Key otherwise.  Return 0, or -1 with an error set. */
static int
parse_request(struct transact *tx, Py_ssize_t i, PyObject *item)
{
    struct txn *t = &tx->txns[i];
    unsigned char mgmt_class;
    Py_buffer mad;
    int dlid, sl;

    if (!PyTuple_Check(item)) {
        PyErr_Format(PyExc_TypeError, "transact: request %zd is not a "
                     "tuple (agent_id, mad, dlid, sl, timeout_ms, "
                     "retries)", i);
        return -1;
    }
    if (!PyArg_ParseTuple(item, "iy*iiii:transact", &t->agent, &mad,
                          &dlid, &sl, &t->timeout_ms, &t->retries))
        return -1;
    if (mad.len < 24 || mad.len > MAX_BUF || dlid < 0 ||
        dlid > 0xFFFF || sl < 0 || sl > 15 || t->timeout_ms < 1 ||
        t->retries < 0) {
        PyErr_Format(PyExc_ValueError, "transact: request %zd: a MAD "
                     "is 24 to %d bytes (not %zd), dlid 16 bit, sl 4 "
                     "bit, timeout_ms >= 1, retries >= 0", i, MAX_BUF,
                     mad.len);
        PyBuffer_Release(&mad);
        return -1;
    }
    t->umad = calloc(1, tx->hdr + (size_t)mad.len);
    if (t->umad == NULL) {
        PyBuffer_Release(&mad);
        PyErr_NoMemory();
        return -1;
    }
    memcpy((char *)t->umad + tx->hdr, mad.buf, (size_t)mad.len);
    t->len = (int)mad.len;
    t->key = mad_key((const unsigned char *)mad.buf);
    PyBuffer_Release(&mad);
    /* SMPs: QP0, Q_Key 0; other classes QP1 with the GSI Q_Key. */
    mgmt_class = ((unsigned char *)t->umad)[tx->hdr + 1];
    if (mgmt_class == 0x01 || mgmt_class == 0x81)
        U.set_addr(t->umad, dlid, 0, sl, 0);
    else
        U.set_addr(t->umad, dlid, 1, sl, (int)0x80010000U);
    return 0;
}

/* Allocate tx's tables and parse the requests of seq into them (the
   results start as None).  Return 0, or -1 with an error set. */
static int
transact_setup(struct transact *tx, PyObject *seq)
{
    Py_ssize_t i;

    tx->n = PySequence_Fast_GET_SIZE(seq);
    tx->hdr = U.size();
    tx->cap = FIRST_BUF;
    tx->txns = PyMem_Calloc((size_t)tx->n + 1, sizeof(*tx->txns));
    tx->inflight = PyMem_Calloc((size_t)tx->window, sizeof(*tx->inflight));
    tx->results = PyList_New(tx->n);
    tx->rbuf = malloc(tx->hdr + tx->cap);
    if (tx->txns == NULL || tx->inflight == NULL || tx->rbuf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (tx->results == NULL)
        return -1;
    for (i = 0; i < tx->n; i++) {
        PyList_SET_ITEM(tx->results, i, Py_NewRef(Py_None));
        if (parse_request(tx, i, PySequence_Fast_GET_ITEM(seq, i)) < 0)
            return -1;
    }
    return 0;
}

/* Free what transact_setup() allocated. */
static void
transact_free(struct transact *tx)
{
    Py_ssize_t i;

    if (tx->txns != NULL)
        for (i = 0; i < tx->n; i++)
            free(tx->txns[i].umad);
    PyMem_Free(tx->txns);
    PyMem_Free(tx->inflight);
    free(tx->rbuf);
    Py_XDECREF(tx->results);
}

/* Send requests until window of them are in flight or none is left (a
   request whose send fails gets the errno as its result).  Return 0, or
   -1 with an error set. */
static int
fill_window(struct transact *tx)
{
    while (tx->nin < tx->window && tx->next < tx->n) {
        int err = txn_send(tx->port, &tx->txns[tx->next]);
        if (err) {
            PyObject *e = PyLong_FromLong(err);
            if (e == NULL)
                return -1;
            PyList_SetItem(tx->results, tx->next, e);
            tx->done++;
        }
        else {
            tx->inflight[tx->nin++] = tx->next;
            tx->sends++;
        }
        tx->next++;
        if (tx->port->closing)
            return closed_during_transact();
    }
    return 0;
}

/* Wait for one MAD (GIL released) until the earliest deadline of the tries
   in flight, at most SLICE_MS; return umad_recv's result, with *len the
   length of the MAD (or, on ENOSPC, the size it needs). */
static int
wait_reply(struct transact *tx, int *len)
{
    long long wait = tx->txns[tx->inflight[0]].deadline, now;
    int rc, portid = tx->port->portid, slice;
    void *rbuf = tx->rbuf;
    Py_ssize_t k;

    for (k = 1; k < tx->nin; k++)
        if (tx->txns[tx->inflight[k]].deadline < wait)
            wait = tx->txns[tx->inflight[k]].deadline;
    now = now_ms();
    wait = wait > now ? wait - now : 0;
    slice = wait > SLICE_MS ? SLICE_MS : (int)wait;
    *len = (int)tx->cap;
    errno = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = U.recv(portid, rbuf, len, slice);
    Py_END_ALLOW_THREADS
    return rc;
}

/* Match the MAD of len bytes in tx->rbuf to the request in flight it
   answers and record the reply, or the error status the kernel gave it;
   a MAD that answers none (late, stray, or a request) counts as unmatched.
   A request the kernel gave back (ETIMEDOUT) has its try ended.  Return 0,
   or -1 with an error set. */
static int
take_reply(struct transact *tx, int len)
{
    const unsigned char *mad = (const unsigned char *)tx->rbuf + tx->hdr;
    Py_ssize_t k, i;
    uint64_t key;
    int status;

    if (len < 24 || (size_t)len > tx->cap) {
        tx->unmatched++;
        return 0;
    }
    key = mad_key(mad);
    status = ((ib_user_mad_t *)tx->rbuf)->status;
    for (k = 0; k < tx->nin; k++)
        if (tx->txns[tx->inflight[k]].key == key)
            break;
    if (k == tx->nin || (!status && !(mad[3] & 0x80))) {
        tx->unmatched++;    /* late, stray, or a request */
        return 0;
    }
    i = tx->inflight[k];
    if (status == ETIMEDOUT) {
        /* The kernel gave the request back: this try is over. */
        tx->txns[i].deadline = 0;
        return 0;
    }
    tx->inflight[k] = tx->inflight[--tx->nin];
    tx->done++;
    PyList_SetItem(tx->results, i, status ?
                   PyLong_FromLong(status) :
                   PyBytes_FromStringAndSize((const char *)mad, len));
    return PyList_GET_ITEM(tx->results, i) == NULL ? -1 : 0;
}

/* Re-send the tries in flight whose time is over while they have retries
   left; give up the others (their result stays None, or is the errno of a
   failed re-send).  Return 0, or -1 with an error set. */
static int
expire_tries(struct transact *tx)
{
    long long now = now_ms();
    Py_ssize_t k;

    for (k = 0; k < tx->nin;) {
        struct txn *t = &tx->txns[tx->inflight[k]];
        if (t->deadline > now) {
            k++;
            continue;
        }
        if (t->retries > 0) {
            int err;
            t->retries--;
            err = txn_send(tx->port, t);
            if (!err) {
                tx->sends++;
                k++;
                continue;
            }
            PyList_SetItem(tx->results, tx->inflight[k],
                           PyLong_FromLong(err));
            if (PyList_GET_ITEM(tx->results, tx->inflight[k]) == NULL)
                return -1;
        }
        tx->inflight[k] = tx->inflight[--tx->nin];   /* None: timed out */
        tx->done++;
    }
    return 0;
}

/* One round of transact(): fill the window, wait for one MAD and take it,
   then re-send or give up the tries whose time is over.  Return 0, or -1
   with an error set. */
static int
transact_round(struct transact *tx)
{
    int rc, len;

    if (fill_window(tx) < 0)
        return -1;
    if (tx->nin == 0)
        return 0;
    rc = wait_reply(tx, &len);
    if (tx->port->closing)
        return closed_during_transact();
    if (rc >= 0) {
        if (take_reply(tx, len) < 0)
            return -1;
    }
    else if (rc == -ENOSPC || errno == ENOSPC)
        return grow_recv_buf(tx->port->state, &tx->rbuf, &tx->cap, tx->hdr,
                             len);
    else if (recv_failed(rc)) {
        raise_sys(tx->port->state, err_of(rc), "umad_recv", "");
        return -1;
    }
    else if (PyErr_CheckSignals() < 0)
        return -1;
    return expire_tries(tx);
}

static PyObject *
port_transact(PyObject *op, PyObject *args, PyObject *kw)
{
    umad_Port *self = (umad_Port *)op;
    static char *kwlist[] = {"requests", "window", NULL};
    struct transact tx = {.port = self};
    PyObject *reqs, *seq, *res = NULL;
    int rc = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oi:transact", kwlist, &reqs,
                                     &tx.window))
        return NULL;
    if (tx.window < 1 || tx.window > 4096) {
        PyErr_Format(PyExc_ValueError, "transact: window is 1 to 4096, "
                     "not %d", tx.window);
        return NULL;
    }
    if (!check_open(self))
        return NULL;
    seq = PySequence_Fast(reqs, "transact: requests must be a sequence");
    if (seq == NULL)
        return NULL;
    if (transact_setup(&tx, seq) == 0) {
        self->busy++;
        while (rc == 0 && tx.done < tx.n)
            rc = transact_round(&tx);
        if (rc == 0)
            res = Py_BuildValue("(OLL)", tx.results, tx.sends, tx.unmatched);
        self->busy--;
        if (self->closing && self->busy == 0 && port_do_close(self) < 0)
            Py_CLEAR(res);
    }
    transact_free(&tx);
    Py_DECREF(seq);
    return res;
}

static PyObject *
port_get_fd(PyObject *op, void *closure)
{
    umad_Port *self = (umad_Port *)op;
    (void)closure;
    return PyLong_FromLong(self->portid);
}

static PyObject *
port_get_closed(PyObject *op, void *closure)
{
    umad_Port *self = (umad_Port *)op;
    (void)closure;
    return PyBool_FromLong(self->portid < 0 || self->closing);
}

static PyObject *
port_repr(PyObject *op)
{
    umad_Port *self = (umad_Port *)op;
    if (self->ca_name == NULL)
        return PyUnicode_FromString("<rdma._umad.Port (not open)>");
    return PyUnicode_FromFormat("<rdma._umad.Port %U/%d%s>", self->ca_name,
                                self->port_num,
                                self->portid < 0 ? " (closed)" : "");
}

static void
port_finalize(PyObject *op)
{
    umad_Port *self = (umad_Port *)op;
    PyObject *et, *ev, *tb;

    if (self->portid < 0)
        return;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyErr_ResourceWarning(op, 1, "unclosed %R", op) < 0)
        PyErr_WriteUnraisable(op);
    self->busy = 0;
    if (port_do_close(self) < 0)
        PyErr_WriteUnraisable(op);
    PyErr_Restore(et, ev, tb);
}

static int
port_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    return 0;
}

static void
port_dealloc(PyObject *op)
{
    umad_Port *self = (umad_Port *)op;
    PyTypeObject *tp = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    if (PyObject_CallFinalizerFromDealloc(op) < 0)
        return;   /* resurrected */
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs(op);
    Py_CLEAR(self->ca_name);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef port_methods[] = {
    {"close", port_close, METH_NOARGS,
     "close($self, /)\n--\n\nClose the port (idempotent); its agents go "
     "with it."},
    {"__enter__", port_enter, METH_NOARGS, NULL},
    {"__exit__", port_exit, METH_VARARGS, NULL},
    {"register", (PyCFunction)(void (*)(void))port_register,
     METH_VARARGS | METH_KEYWORDS,
     "register($self, /, mgmt_class, mgmt_version, rmpp_version=0, "
     "method_mask=None)\n--\n\n"
     "Register an agent for a management class (umad_register); return "
     "its agent id.  rmpp_version=1 makes the kernel do RMPP for it; "
     "method_mask (16 bytes, little endian, bit n = method n) receives unsolicited requests."},
    {"unregister", port_unregister, METH_O,
     "unregister($self, agent_id, /)\n--\n\nUnregister an agent."},
    {"send", (PyCFunction)(void (*)(void))port_send,
     METH_VARARGS | METH_KEYWORDS,
     "send($self, agent_id, mad, /, *, dlid, dqpn=1, sl=0, qkey=0x80010000, "
     "pkey_index=0, timeout_ms=0, retries=0, grh=None)\n--\n\n"
     "Send one MAD (bytes, from the common MAD header on) to dlid/dqpn.  "
     "grh is None or (dgid, sgid_index, hop_limit, traffic_class, "
     "flow_label).  A non-zero timeout_ms asks the kernel to track the "
     "reply."},
    {"recv", (PyCFunction)(void (*)(void))port_recv,
     METH_VARARGS | METH_KEYWORDS,
     "recv($self, /, timeout_ms=-1)\n--\n\n"
     "Wait for one MAD (GIL released, Ctrl-C interrupts); return None on "
     "timeout, else (agent_id, status, mad, addr) with addr = (slid, sqpn, "
     "qkey, sl, path_bits, grh_present, sgid, hop_limit, traffic_class, "
     "flow_label, pkey_index, gid_index).  The buffer grows to fit large (RMPP) "
     "MADs."},
    {"transact", (PyCFunction)(void (*)(void))port_transact,
     METH_VARARGS | METH_KEYWORDS,
     "transact($self, /, requests, window)\n--\n\n"
     "Send many requests and collect their replies, up to window of them "
     "in flight (GIL released during each send and wait; Ctrl-C "
     "interrupts).  requests is a sequence of (agent_id, mad, dlid, sl, "
     "timeout_ms, retries): SMP classes go to QP0, others to QP1 with the "
     "GSI Q_Key; each try waits timeout_ms (also given to the kernel) and "
     "a quarter more, then is sent again up to retries times.  A reply "
     "matches its request by class and the low 32 bits of the TID.  "
     "Returns (results, sends, unmatched): results[i] is the reply MAD "
     "(bytes), None when every try timed out, or an int errno when the "
     "send failed or came back with that status; sends counts the MADs "
     "sent, unmatched the MADs received that matched no request."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef port_getset[] = {
    {"fd", port_get_fd, NULL, "The libibumad port id (-1 once closed).",
     NULL},
    {"closed", port_get_closed, NULL, "True once close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef port_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(umad_Port, weakreflist),
     READONLY, NULL},
    {"ca_name", T_OBJECT, offsetof(umad_Port, ca_name), READONLY,
     "The CA name."},
    {"port_num", T_INT, offsetof(umad_Port, port_num), READONLY,
     "The port number."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot port_slots[] = {
    {Py_tp_doc, "Port(ca_name, port_num)\n--\n\n"
                "An open umad port (umad_open_port); a context manager."},
    {Py_tp_new, port_new},
    {Py_tp_init, port_init},
    {Py_tp_dealloc, port_dealloc},
    {Py_tp_finalize, port_finalize},
    {Py_tp_traverse, port_traverse},
    {Py_tp_repr, port_repr},
    {Py_tp_methods, port_methods},
    {Py_tp_getset, port_getset},
    {Py_tp_members, port_members},
    {0, NULL},
};

static PyType_Spec port_spec = {
    .name = "rdma._umad.Port",
    .basicsize = sizeof(umad_Port),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = port_slots,
};

/* ---- module ------------------------------------------------------------ */

static PyMethodDef mod_methods[] = {
    {"_load", mod_load, METH_NOARGS,
     "_load($module, /)\n--\n\nLoad libibumad; raise SysError naming the "
     "package when it is missing."},
    {"get_ca_names", mod_get_ca_names, METH_NOARGS,
     "get_ca_names($module, /)\n--\n\nThe names of the CAs libibumad sees "
     "(an empty list without umad support)."},
    {"get_ca", mod_get_ca, METH_O,
     "get_ca($module, name, /)\n--\n\nA CA as a dict (name, node_type, "
     "numports, fw_ver, ca_type, hw_ver, node_guid, system_guid, ports); "
     "each port a dict (port_id, lid, lmc, sm_lid, sm_sl, state, "
     "phys_state, rate, capmask, gid_prefix, port_guid, pkeys, "
     "link_layer)."},
    {NULL, NULL, 0, NULL},
};

static int
mod_exec(PyObject *m)
{
    umad_state *st = PyModule_GetState(m);
    PyObject *errors;

    errors = PyImport_ImportModule("rdma._errors");
    if (errors == NULL)
        return -1;
    st->SysError = PyObject_GetAttrString(errors, "SysError");
    Py_DECREF(errors);
    if (st->SysError == NULL)
        return -1;
    st->PortType = (PyTypeObject *)PyType_FromModuleAndSpec(m, &port_spec,
                                                            NULL);
    if (st->PortType == NULL)
        return -1;
    if (PyModule_AddObjectRef(m, "Port", (PyObject *)st->PortType) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "SLICE_MS", SLICE_MS) < 0)
        return -1;
    return 0;
}

static int
mod_traverse(PyObject *m, visitproc visit, void *arg)
{
    umad_state *st = PyModule_GetState(m);
    Py_VISIT(st->SysError);
    Py_VISIT(st->PortType);
    return 0;
}

static int
mod_clear(PyObject *m)
{
    umad_state *st = PyModule_GetState(m);
    Py_CLEAR(st->SysError);
    Py_CLEAR(st->PortType);
    return 0;
}

static void
mod_free(void *m)
{
    mod_clear((PyObject *)m);
}

static PyModuleDef_Slot mod_slots[] = {
    {Py_mod_exec, mod_exec},
    {0, NULL},
};

static PyModuleDef umad_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rdma._umad",
    .m_doc = "User MADs through libibumad (loaded on first use).",
    .m_size = sizeof(umad_state),
    .m_methods = mod_methods,
    .m_slots = mod_slots,
    .m_traverse = mod_traverse,
    .m_clear = mod_clear,
    .m_free = mod_free,
};

PyMODINIT_FUNC
PyInit__umad(void)
{
    return PyModuleDef_Init(&umad_module);
}
