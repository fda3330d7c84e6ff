/* rdma.h - object structs, module state and prototypes shared by csrc/. */
#ifndef PYRDMA_RDMA_H
#define PYRDMA_RDMA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "structmember.h"

#include "errors.h"
#include "provider.h"

/* Module state (PEP 573): exceptions and heap types. */
typedef struct {
    PyObject *SysError;          /* rdma.SysError, from rdma._errors */
    PyObject *WRError;           /* rdma.ibverbs.WRError, from rdma._errors */
    PyObject *AsyncError;        /* rdma.ibverbs.AsyncError, rdma._errors */
    PyObject *GID;               /* rdma.IBA.GID, imported on first use */
    /* verbs objects */
    PyTypeObject *ContextType;
    PyTypeObject *PDType;
    PyTypeObject *CQType;
    PyTypeObject *CompChannelType;
    PyTypeObject *QPType;
    PyTypeObject *SRQType;
    PyTypeObject *MRType;
    PyTypeObject *MWType;
    PyTypeObject *AHType;
    PyTypeObject *SendBatchType;
    PyTypeObject *RecvBatchType;
    PyTypeObject *WCArrayType;
    PyTypeObject *VirtualQPType;
    PyTypeObject *VirtualCQType;
    PyTypeObject *CMEventChannelType;
    PyTypeObject *CMIDType;
    /* struct types, see structs.c */
    PyTypeObject *device_attr;
    PyTypeObject *port_attr;
    PyTypeObject *gid_entry;
    PyTypeObject *global_route;
    PyTypeObject *ah_attr;
    PyTypeObject *qp_cap;
    PyTypeObject *qp_attr;
    PyTypeObject *qp_init_attr;
    PyTypeObject *srq_attr;
    PyTypeObject *sge;
    PyTypeObject *send_wr;
    PyTypeObject *recv_wr;
    PyTypeObject *wc;
    PyTypeObject *async_event;
    PyTypeObject *mw_bind_info;
} pyrdma_state;

/* ---- The verbs object model (obj.c) ---- */

struct pyrdma_obj;

/* A membership of a child in a parent's list of children (intrusive and
   circular; a list head has obj == NULL).  Raw pointers, not weakrefs, so
   that a parent finalized by the cyclic GC still finds its children. */
typedef struct pyrdma_link {
    struct pyrdma_link *prev;   /* previous link in the list */
    struct pyrdma_link *next;   /* next link in the list */
    struct pyrdma_obj *obj;     /* the child; NULL in a list head */
} pyrdma_link;

/* What differs between object types for the generic lifetime code. */
struct pyrdma_objkind {
    const char *name;   /* "QP", used in messages */
    int rank;           /* siblings close in rising rank order */
    /* Free the provider resource (h is still set); 0 or -1 with *st. */
    int (*destroy)(struct pyrdma_obj *o, struct pyrdma_status *st);
    /* After destroy: release what else the object holds (may be NULL). */
    void (*release)(struct pyrdma_obj *o);
};

/* Close ranks: a parent closes QPs first and its comp channels last. */
enum {
    PYRDMA_RANK_QP, PYRDMA_RANK_AH, PYRDMA_RANK_MW, PYRDMA_RANK_SRQ,
    PYRDMA_RANK_MR, PYRDMA_RANK_PD, PYRDMA_RANK_CQ, PYRDMA_RANK_CC,
    PYRDMA_RANK_CONTEXT, PYRDMA_RANK_CMID, PYRDMA_RANK_CMCHANNEL,
};

#define PYRDMA_MAX_PARENTS 4

typedef struct pyrdma_Context pyrdma_Context;

/* The header every verbs object starts with. */
typedef struct pyrdma_obj {
    PyObject_HEAD
    void *h;                        /* provider handle; NULL once closed */
    const struct pyrdma_objkind *kind;  /* type-specific lifetime ops */
    const struct pyrdma_provider *prov; /* the provider that made it */
    pyrdma_state *state;            /* module state, cached */
    pyrdma_link children;           /* head of the list of children */
    pyrdma_link links[PYRDMA_MAX_PARENTS]; /* our place in parents' lists */
    PyObject *parents[PYRDMA_MAX_PARENTS]; /* strong refs, same slots */
    PyObject *weakreflist;          /* weak references to this object */
    int closing;                    /* re-entrancy guard of close() */
    unsigned fork_gen;              /* pyrdma_fork_gen when it was made:
                                       another value means the object was
                                       inherited across fork() */
} pyrdma_obj;

/* A Context: an open device of one provider. */
struct pyrdma_Context {
    pyrdma_obj o;
    PyObject *name;           /* device name (str) */
    PyObject *end_port;       /* the EndPort it was opened for, or None */
};

/* A protection domain. */
typedef struct {
    pyrdma_obj o;             /* parents[0]: Context */
} pyrdma_PD;

/* A completion channel. */
typedef struct {
    pyrdma_obj o;             /* parents[0]: Context */
    int fd;                   /* the pollable fd, -1 once closed */
    int waiters;              /* threads blocked in get_cq_event */
} pyrdma_CompChannel;

/* A completion queue. */
typedef struct {
    pyrdma_obj o;             /* parents: [0] Context, [1] CompChannel */
    int cqe;                  /* actual size */
    unsigned int unacked;     /* events received and not acknowledged */
} pyrdma_CQ;

/* A shared receive queue. */
typedef struct {
    pyrdma_obj o;             /* parents[0]: PD */
} pyrdma_SRQ;

/* A queue pair. */
typedef struct {
    pyrdma_obj o;             /* parents: PD, send CQ, recv CQ, SRQ */
    uint32_t qp_num;          /* QP number */
    int qp_type;              /* IBV_QPT_* */
    struct pyrdma_qp_cap cap; /* actual capacities */
    int sq_sig_all;           /* as created */
} pyrdma_QP;

/* A memory region. */
typedef struct {
    pyrdma_obj o;             /* parents[0]: PD */
    Py_buffer view;           /* the user's buffer, held for our lifetime;
                                 for alloc_mr, view.buf/len describe our
                                 own mapping and view.obj is NULL */
    int have_view;            /* view holds a user buffer export */
    void *owned;              /* alloc_mr: the owned memory, else NULL */
    size_t owned_len;         /* its length */
    void *owned_cookie;       /* the provider's handle of owned memory it
                                 allocated (alloc_mr_mem), NULL if mmap'd */
    Py_ssize_t exports;       /* live buffer exports of the owned memory */
    struct pyrdma_mr_info info; /* lkey, rkey */
    unsigned int access;      /* IBV_ACCESS_* */
} pyrdma_MR;

/* A memory window. */
typedef struct {
    pyrdma_obj o;             /* parents[0]: PD */
    uint32_t rkey;            /* current rkey */
    int type;                 /* IBV_MW_TYPE_* */
} pyrdma_MW;

/* An address handle. */
typedef struct {
    pyrdma_obj o;             /* parents[0]: PD */
    struct pyrdma_ah_attr attr; /* what it was made from */
} pyrdma_AH;

/* The generic struct object behind ibv.qp_attr, ibv.wc, ... */
struct pyrdma_structdef;
typedef struct {
    PyObject_HEAD
    const struct pyrdma_structdef *def;  /* field table of this type */
    uint64_t setmask;                    /* bit i: field i was assigned */
    union {
        uint64_t u;
        double d;
        void *p;
    } data[];                            /* the C struct, then object slots */
} pyrdma_Struct;

/* The Python-facing data of ibv.send_wr: flat fields, laid out into a
   pyrdma_send_wr by opcode when posted. */
struct pyrdma_py_send_wr {
    uint64_t wr_id;          /* returned in the completion */
    uint64_t remote_addr;    /* RDMA / atomic target address */
    uint64_t compare_add;    /* atomic compare (CAS) or add (FAA) value */
    uint64_t swap;           /* atomic swap value (CAS) */
    uint32_t opcode;         /* IBV_WR_* */
    uint32_t send_flags;     /* IBV_SEND_* */
    uint32_t imm_data;       /* network byte order */
    uint32_t rkey;           /* remote key for RDMA / atomics */
    uint32_t remote_qpn;     /* UD destination QP */
    uint32_t remote_qkey;    /* UD destination Q_Key */
    uint32_t invalidate_rkey; /* SEND_WITH_INV */
};
/* Object slots of ibv.send_wr / ibv.recv_wr. */
enum { PYRDMA_WR_SG_LIST, PYRDMA_WR_NEXT, PYRDMA_WR_AH, PYRDMA_WR_MW,
       PYRDMA_WR_BIND_INFO };

/* Python-facing data of ibv.mw_bind_info (its slot 0 holds the MR). */
struct pyrdma_py_mw_bind_info {
    uint64_t addr;            /* start of the window */
    uint64_t length;          /* bytes; 0 unbinds */
    uint32_t mw_access_flags; /* IBV_ACCESS_REMOTE_* */
};

struct pyrdma_py_recv_wr {
    uint64_t wr_id;          /* returned in the completion */
};

/* Python-facing data of ibv.qp_init_attr. */
struct pyrdma_py_qp_init_attr {
    struct pyrdma_qp_cap cap; /* requested capacities */
    int32_t qp_type;          /* IBV_QPT_* */
    int32_t sq_sig_all;       /* 1: every send WR is signaled */
};
/* Object slots of ibv.qp_init_attr (after the nested cap's slot). */
enum { PYRDMA_INIT_CAP, PYRDMA_INIT_SEND_CQ, PYRDMA_INIT_RECV_CQ,
       PYRDMA_INIT_SRQ };

/* Python-facing data of ibv.async_event. */
struct pyrdma_py_async_event {
    int32_t event_type;       /* IBV_EVENT_* */
};

extern PyModuleDef pyrdma_module;

/* module.c */
pyrdma_state *pyrdma_get_state_by_type(PyTypeObject *tp);
const struct pyrdma_provider *pyrdma_find_provider(const char *name);
/* Return rdma.IBA.GID (borrowed, imported on first use), NULL with an error. */
PyObject *pyrdma_gid_type(pyrdma_state *st);
/* Return a new reference to rdma.IBA.GID(raw), NULL with an error set. */
PyObject *pyrdma_gid_from_raw(pyrdma_state *st, const uint8_t raw[16]);
/* Convert a GID/str/16-byte buffer to raw; return 0 or -1 with an error. */
int pyrdma_gid_to_raw(pyrdma_state *st, PyObject *v, uint8_t raw[16],
                      const char *what);

/* errors.c (errors.h), with this module's SysError */
/* Raise SysError from a provider status; return NULL. */
static inline PyObject *
pyrdma_raise_status(pyrdma_state *st, const struct pyrdma_status *s)
{
    return pyrdma_status_error(st->SysError, s);
}
/* Raise SysError(err, func, msg); return NULL. */
static inline PyObject *
pyrdma_raise_sys(pyrdma_state *st, int err, const char *func,
                 const char *msg)
{
    return pyrdma_sys_error(st->SysError, err, func, msg);
}

/* obj.c */
void pyrdma_obj_setup(pyrdma_obj *o, const struct pyrdma_objkind *kind,
                      const struct pyrdma_provider *prov, pyrdma_state *st);
/* Make parent the slot-th parent of child (strong ref + list link). */
void pyrdma_obj_link(pyrdma_obj *child, int slot, pyrdma_obj *parent);
void pyrdma_obj_relink(pyrdma_obj *child, int slot, pyrdma_obj *parent);
/* Close o and its children; return 0 or -1 with an exception set. */
int pyrdma_obj_close(pyrdma_obj *o);
/* Return 1 if o is open, else 0 with ValueError set. */
int pyrdma_obj_check(pyrdma_obj *o);

/* How many fork()s this process descends from (since the module was
   loaded): objects made before the last one belong to an ancestor. */
extern unsigned pyrdma_fork_gen;
/* Count fork()s from now on (idempotent); 0 or an errno. */
int pyrdma_fork_setup(void);
void pyrdma_obj_finalize(PyObject *op);
int pyrdma_obj_traverse(PyObject *op, visitproc visit, void *arg);
int pyrdma_obj_clear(PyObject *op);
void pyrdma_obj_dealloc(PyObject *op);
PyObject *pyrdma_obj_repr(PyObject *op);
extern PyMethodDef pyrdma_obj_methods[];   /* close, __enter__, __exit__ */
extern PyGetSetDef pyrdma_obj_getset[];    /* closed */
extern PyMemberDef pyrdma_obj_members[];   /* __weaklistoffset__ */
/* Make a heap type with the generic object slots plus extra ones. */
PyTypeObject *pyrdma_obj_type(PyObject *module, const char *name,
                              int basicsize, const char *doc,
                              PyMethodDef *methods, PyGetSetDef *getset,
                              const PyType_Slot *extra, int instantiable);
/* Allocate an object of type tp (zeroed, h NULL) sharing like's provider
   and state; NULL with an error set. */
pyrdma_obj *pyrdma_obj_new(PyTypeObject *tp, const struct pyrdma_objkind *kind,
                           pyrdma_obj *like);
/* Parse vectorcall arguments against names (NULL-terminated): out[k] is
   the k-th argument or NULL when not given; the first nreq are required.
   Return 0 or -1 with a TypeError naming fname. */
int pyrdma_fast_args(const char *fname, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames,
                     const char *const *names, int nreq, PyObject **out);
/* An unsigned integer argument, range-checked: PyArg_Parse's "I", "H",
   "k" and "K" truncate silently (-1 becomes 0xffffffff), so methods take
   such arguments with "O&", pyrdma_uint_conv and one of these. */
struct pyrdma_uint {
    const char *fname;          /* the method, for messages */
    const char *name;           /* the argument, for messages */
    unsigned long long max;     /* the largest value accepted (min: 0) */
    unsigned long long v;       /* in: the default; out: the value */
};
/* "O&" converter for a struct pyrdma_uint: 1, or 0 with TypeError (not an
   integer) or ValueError (out of range) naming the argument. */
int pyrdma_uint_conv(PyObject *v, void *p);
/* Parse a timeout (None: forever -> -1); return 0 or -1 with an error. */
int pyrdma_timeout_arg(PyObject *v, double *timeout);
/* Wait for *fdp to be readable with the GIL released, in short slices
   (signals and close() are noticed); return 1 readable, 0 timed out
   (*timeout is then 0), -1 with an exception. */
int pyrdma_wait_fd(pyrdma_obj *o, const int *fdp, double *timeout);

/* structs.c */
int pyrdma_structs_init(PyObject *module, pyrdma_state *st);
/* Return a new struct object of type tp holding a copy of the C struct. */
PyObject *pyrdma_struct_new(PyTypeObject *tp, const void *cstruct, size_t size);
/* Copy nested struct objects into o's data; return the data or NULL. */
void *pyrdma_struct_sync(PyObject *o);
/* The data of a struct object (no sync). */
void *pyrdma_struct_data(PyObject *o);
/* The object slots of a struct object. */
PyObject **pyrdma_struct_slots(PyObject *o);
/* The attribute-mask bits of the fields that were assigned. */
uint32_t pyrdma_struct_mask(PyObject *o);
/* Return 1 if o is an instance of struct type tp. */
int pyrdma_struct_check(PyObject *o, PyTypeObject *tp);

/* context.c, pd.c, cq.c, qp.c, mr.c, wr.c */
int pyrdma_context_init(PyObject *module, pyrdma_state *st);
int pyrdma_pd_init(PyObject *module, pyrdma_state *st);
int pyrdma_cq_init(PyObject *module, pyrdma_state *st);
int pyrdma_qp_init(PyObject *module, pyrdma_state *st);
int pyrdma_mr_init(PyObject *module, pyrdma_state *st);
int pyrdma_wr_init(PyObject *module, pyrdma_state *st);
int pyrdma_capi_init(PyObject *module, pyrdma_state *st);
int pyrdma_vqp_init(PyObject *module, pyrdma_state *st);   /* vqp.c, vcq.c */
int pyrdma_vcq_init(PyObject *module, pyrdma_state *st);
int pyrdma_cm_init(PyObject *module, pyrdma_state *st);    /* cm.c */
/* The C API's entries for VirtualQP/VirtualCQ objects (vqp.c, vcq.c). */
int pyrdma_vqp_capi_send(PyObject *vqp, struct pyrdma_send_wr *wr,
                         struct pyrdma_send_wr **bad);
int pyrdma_vqp_capi_recv(PyObject *vqp, struct pyrdma_recv_wr *wr,
                         struct pyrdma_recv_wr **bad);
int pyrdma_vcq_capi_poll(PyObject *vcq, int n, struct pyrdma_wc *wc);
/* Create objects (used by Context and PD methods). */
PyObject *pyrdma_pd_new(pyrdma_Context *ctx);
PyObject *pyrdma_cq_new(pyrdma_Context *ctx, PyObject *args, PyObject *kw);
PyObject *pyrdma_cc_new(pyrdma_Context *ctx);
/* Poll completions of a CQ or VirtualCQ (cq.c): poll(arg, n, wc) returns
   how many of at most n it wrote to wc[], or -errno. */
typedef int (*pyrdma_poll_fn)(void *arg, int n, struct pyrdma_wc *wc);
/* A list of ibv.wc of up to n completions (n < 0: all there are), polled
   32 at a time; NULL with SysError("ibv_poll_cq") for o when poll fails,
   or with MemoryError. */
PyObject *pyrdma_poll_list(pyrdma_obj *o, pyrdma_poll_fn poll, void *arg,
                           Py_ssize_t n);
/* Find the live child of kind rank among o's descendants whose pointer is
   ptr; return a borrowed reference or NULL. */
pyrdma_obj *pyrdma_find_child(pyrdma_obj *o, void *ptr, int depth);

/* Post helpers shared by QP and SRQ (wr.c): convert and post. */
PyObject *pyrdma_post_recv(pyrdma_obj *target, PyObject *arg, int srq);
PyObject *pyrdma_post_send(pyrdma_QP *qp, PyObject *arg);
/* Convert the send (send=1) or receive WRs of arg and hand the C chain to
   fn(target, wrs, &bad, why, whylen), which returns 0 or an errno (*bad
   the rejected WR, why the reason); raise WRError naming func. */
typedef int (*pyrdma_post_fn)(void *target, void *wrs, void **bad,
                              char *why, size_t whylen);
PyObject *pyrdma_post_via(pyrdma_state *st, PyObject *arg, int send,
                          void *target, pyrdma_post_fn fn, const char *func);
/* WCArray (wr.c): entries and how many the last poll filled. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t capacity;       /* entries */
    Py_ssize_t count;          /* valid entries from the last poll */
    struct pyrdma_wc *wc;      /* the entries */
    pyrdma_state *state;
} pyrdma_WCArray;

#endif /* PYRDMA_RDMA_H */
