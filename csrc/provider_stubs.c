/* provider_stubs.c - stubs for the ops a provider lacks (no Python here).

   pyrdma_provider_fill() copies a provider's ops table and points every
   optional op it leaves NULL at a stub here that fails with EOPNOTSUPP
   naming the verb, so the object model calls ops without checking them
   for NULL first (rdma-core fills its ops tables the same way). */
#include <errno.h>

#include "provider.h"

/* Fill *st for a verb the provider does not implement; return -1. */
static int
unsupported(struct pyrdma_status *st, const char *verb)
{
    return pyrdma_fail(st, EOPNOTSUPP, verb,
                       "the provider does not implement it");
}

static int
no_query_device(void *ctx, struct pyrdma_device_attr *attr,
                struct pyrdma_status *st)
{
    (void)ctx, (void)attr;
    return unsupported(st, "ibv_query_device");
}

static int
no_query_port(void *ctx, uint8_t port, struct pyrdma_port_attr *attr,
              struct pyrdma_status *st)
{
    (void)ctx, (void)port, (void)attr;
    return unsupported(st, "ibv_query_port");
}

static int
no_query_gid(void *ctx, uint8_t port, int index,
             struct pyrdma_gid_entry *entry, struct pyrdma_status *st)
{
    (void)ctx, (void)port, (void)index, (void)entry;
    return unsupported(st, "ibv_query_gid");
}

static int
no_query_pkey(void *ctx, uint8_t port, int index, uint16_t *pkey,
              struct pyrdma_status *st)
{
    (void)ctx, (void)port, (void)index, (void)pkey;
    return unsupported(st, "ibv_query_pkey");
}

static int
no_get_async_event(void *ctx, struct pyrdma_async_event *ev,
                   struct pyrdma_status *st)
{
    (void)ctx, (void)ev;
    return unsupported(st, "ibv_get_async_event");
}

static int
no_alloc_pd(void *ctx, void **pd, struct pyrdma_status *st)
{
    (void)ctx, (void)pd;
    return unsupported(st, "ibv_alloc_pd");
}

static int
no_reg_mr(void *pd, void *addr, size_t length, unsigned int access,
          void **mr, struct pyrdma_mr_info *info, struct pyrdma_status *st)
{
    (void)pd, (void)addr, (void)length, (void)access, (void)mr, (void)info;
    return unsupported(st, "ibv_reg_mr");
}

static int
no_rereg_mr(void *mr, int flags, void *pd, void *addr, size_t length,
            unsigned int access, struct pyrdma_mr_info *info,
            struct pyrdma_status *st)
{
    (void)mr, (void)flags, (void)pd, (void)addr, (void)length;
    (void)access, (void)info;
    return unsupported(st, "ibv_rereg_mr");
}

static int
no_alloc_mw(void *pd, int type, void **mw, uint32_t *rkey,
            struct pyrdma_status *st)
{
    (void)pd, (void)type, (void)mw, (void)rkey;
    return unsupported(st, "ibv_alloc_mw");
}

static int
no_dealloc_mw(void *mw, struct pyrdma_status *st)
{
    (void)mw;
    return unsupported(st, "ibv_dealloc_mw");
}

static int
no_bind_mw(void *qp, void *mw, uint64_t wr_id, unsigned int flags,
           const struct pyrdma_mw_bind_info *bi, uint32_t *rkey,
           struct pyrdma_status *st)
{
    (void)qp, (void)mw, (void)wr_id, (void)flags, (void)bi, (void)rkey;
    return unsupported(st, "ibv_bind_mw");
}

/* A provider without its own MW objects has nothing to rekey. */
static void
no_mw_rekeyed(void *mw, uint32_t rkey)
{
    (void)mw, (void)rkey;
}

static int
no_create_comp_channel(void *ctx, void **cc, int *fd,
                       struct pyrdma_status *st)
{
    (void)ctx, (void)cc, (void)fd;
    return unsupported(st, "ibv_create_comp_channel");
}

static int
no_create_cq(void *ctx, int cqe, void *cq_context, void *cc, int comp_vector,
             void **cq, int *actual_cqe, struct pyrdma_status *st)
{
    (void)ctx, (void)cqe, (void)cq_context, (void)cc, (void)comp_vector;
    (void)cq, (void)actual_cqe;
    return unsupported(st, "ibv_create_cq");
}

static int
no_resize_cq(void *cq, int cqe, int *actual_cqe, struct pyrdma_status *st)
{
    (void)cq, (void)cqe, (void)actual_cqe;
    return unsupported(st, "ibv_resize_cq");
}

static int
no_create_srq(void *pd, struct pyrdma_srq_attr *attr, void *srq_context,
              void **srq, struct pyrdma_status *st)
{
    (void)pd, (void)attr, (void)srq_context, (void)srq;
    return unsupported(st, "ibv_create_srq");
}

static int
no_create_qp(void *pd, struct pyrdma_qp_init_attr *attr, void **qp,
             uint32_t *qp_num, struct pyrdma_status *st)
{
    (void)pd, (void)attr, (void)qp, (void)qp_num;
    return unsupported(st, "ibv_create_qp");
}

static int
no_create_ah(void *pd, struct pyrdma_ah_attr *attr, void **ah,
             struct pyrdma_status *st)
{
    (void)pd, (void)attr, (void)ah;
    return unsupported(st, "ibv_create_ah");
}

static int
no_cm_create_channel(void **ch, int *fd, struct pyrdma_status *st)
{
    (void)ch, (void)fd;
    return unsupported(st, "rdma_create_event_channel");
}

static int
no_cm_join_multicast(void *id, const struct sockaddr *addr,
                     struct pyrdma_status *st)
{
    (void)id, (void)addr;
    return unsupported(st, "rdma_join_multicast");
}

static int
no_cm_leave_multicast(void *id, const struct sockaddr *addr,
                      struct pyrdma_status *st)
{
    (void)id, (void)addr;
    return unsupported(st, "rdma_leave_multicast");
}

/* Point op at stub when the provider left it NULL. */
#define FILL(op, stub) \
    if (out->op == NULL) \
        out->op = stub

void
pyrdma_provider_fill(struct pyrdma_provider *out,
                     const struct pyrdma_provider *p)
{
    *out = *p;
    FILL(query_device, no_query_device);
    FILL(query_port, no_query_port);
    FILL(query_gid, no_query_gid);
    FILL(query_pkey, no_query_pkey);
    FILL(get_async_event, no_get_async_event);
    FILL(alloc_pd, no_alloc_pd);
    FILL(reg_mr, no_reg_mr);
    FILL(rereg_mr, no_rereg_mr);
    FILL(alloc_mw, no_alloc_mw);
    FILL(dealloc_mw, no_dealloc_mw);
    FILL(bind_mw, no_bind_mw);
    FILL(mw_rekeyed, no_mw_rekeyed);
    FILL(create_comp_channel, no_create_comp_channel);
    FILL(create_cq, no_create_cq);
    FILL(resize_cq, no_resize_cq);
    FILL(create_srq, no_create_srq);
    FILL(create_qp, no_create_qp);
    FILL(create_ah, no_create_ah);
    FILL(cm_create_channel, no_cm_create_channel);
    FILL(cm_join_multicast, no_cm_join_multicast);
    FILL(cm_leave_multicast, no_cm_leave_multicast);
}
