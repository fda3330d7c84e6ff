/* cm_front.h - the rdma_* (librdmacm) front end of ucx0 (cm_front.c,
   cm_front_ep.c): its objects.  IDs a program makes are served by the
   fabric's connection manager (fab_cm_*, csrc/fabric/cm.c) or, once an
   address of a real device's decides it, by the real librdmacm
   (cm_front_real.c); calls from UCX and from librdmacm itself go to the
   real librdmacm. */
#ifndef PYRDMA_FABRIC_VERBS_CM_FRONT_H
#define PYRDMA_FABRIC_VERBS_CM_FRONT_H

#include "front.h"

#include <netdb.h>
#include <rdma/rdma_cma.h>

/* An event channel. */
struct fch {
    struct rdma_event_channel ch; /* what the program sees (fd: an epoll
                                     fd over fab_fd and real's fd) */
    struct fab_cm_channel *h;
    int fab_fd;                   /* the fabric channel's eventfd */
    struct rdma_event_channel *real; /* the real librdmacm's channel, made
                                     when an ID on it first goes real */
};

/* A CM ID. */
struct fid {
    struct rdma_cm_id id;        /* what the program sees */
    struct fab_cm_id *h;         /* the fabric's ID (NULL once real) */
    struct rdma_cm_id *real;     /* the real librdmacm's ID carrying it
                                    (its context: this fid), or NULL */
    int decided;                 /* bound or resolved on the fabric */
    int dual;                    /* bound to the wildcard: h and real both
                                    live (a listener on both sides) until
                                    rdma_resolve_addr picks one */
    struct fch *own_ch;          /* synchronous ID (no channel given): its
                                    private channel */
    struct ibv_sa_path_rec path; /* id.route.path_rec once resolved */
    struct rdma_cm_event *last;  /* synchronous: the last event (id.event),
                                    acknowledged by the next or destroy */
    struct ibv_qp_init_attr *qp_init; /* passive rdma_create_ep: the QP
                                    each rdma_get_request makes */
    struct ibv_pd *own_pd;       /* made by rdma_create_qp (pd NULL) */
    int own_cqs;                 /* rdma_create_qp made id's CQs */
    int events_out;              /* fabric events handed out for it (a
                                    CONNECT_REQUEST: for its listener),
                                    not yet acknowledged (fv_ev_lock) */
    int listening;               /* rdma_listen succeeded */
    int tos_set, afonly, reuseaddr; /* rdma_set_option (cm_front_ep.c) */
    uint8_t tos, ack_timeout;
    int ack_timeout_set;
};

/* An event handed out. */
struct fev {
    struct rdma_cm_event ev;     /* what the program sees */
    struct fab_cm_event *h;
    struct rdma_cm_event *real;  /* or the real librdmacm's event */
    struct fid *owner;           /* the ID whose events_out counts it */
};

/* cm_front.c */
#define CM_REAL(ret, name, params) \
    static ret (*real_fn) params; \
    if (real_fn == NULL) \
        *(void **)&real_fn = fv_cm_real(#name)
/* A call the program did not make: from UCX, from librdmacm, or made
   while the front end itself is in a real librdmacm function (which may
   reach a front-end entry point by a tail call, whose return address is
   then the front end's own). */
#define CM_CALLER_REAL() \
    (fv_cm_in_real > 0 || fv_real_caller(__builtin_return_address(0)))
/* Call the real librdmacm (CM_CALL(real_fn(...)), any return type). */
extern __thread int fv_cm_in_real;
struct fv_cm_guard { int unused; };
static inline struct fv_cm_guard
fv_cm_enter(void)
{
    struct fv_cm_guard g = { 0 };
    fv_cm_in_real++;
    return g;
}
static inline void
fv_cm_leave(struct fv_cm_guard *g)
{
    (void)g;
    fv_cm_in_real--;
}
#define CM_CALL(call) \
    ({ \
        struct fv_cm_guard g_ __attribute__((cleanup(fv_cm_leave))) = \
            fv_cm_enter(); \
        (void)g_; \
        call; \
    })
void *fv_cm_real(const char *name);
struct ibv_context *fv_cm_verbs(void);
int fv_cm_wait(struct fid *f, int want);
void fv_cm_route(struct fid *f);

/* A call on an ID the real librdmacm carries goes there (real_fn of
   CM_REAL), and the program's view of the ID follows. */
#define CM_FORWARD(f, ...) \
    do { \
        if ((f)->real != NULL) { \
            int rc_ = real_fn ? CM_CALL(real_fn((f)->real, __VA_ARGS__)) \
                              : -1; \
            fv_cm_sync(f); \
            return rc_; \
        } \
    } while (0)
#define CM_FORWARD0(f) \
    do { \
        if ((f)->real != NULL) { \
            int rc_ = real_fn ? CM_CALL(real_fn((f)->real)) : -1; \
            fv_cm_sync(f); \
            return rc_; \
        } \
    } while (0)

/* cm_front_real.c */
int fv_cm_real_side(const struct sockaddr *addr);
int fv_cm_wildcard_both(const struct sockaddr *addr);
int fv_cm_go_real(struct fid *f, int keep_fabric);
void fv_cm_sync(struct fid *f);
struct rdma_event_channel *fv_cm_real_channel(struct fch *c);
int fv_cm_real_event(struct fch *c, struct rdma_cm_event **out);
struct fid *fv_cm_wrap(struct rdma_cm_id *real, const struct fid *like);
int fv_cm_real_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
                  struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr);

/* cm_front_ep.c */
int fv_cm_qp_to(struct fid *f, int state);

#endif /* PYRDMA_FABRIC_VERBS_CM_FRONT_H */
