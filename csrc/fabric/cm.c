/* cm.c - the fabric's connection manager: event channels, CM IDs and the
   fab_cm_* API (csrc/fabric_lib.h).  Messages and the CM's thread are in
   cm_msg.c, addresses and port claims in cm_addr.c; docs/fabric.rst,
   "The connection manager", describes the whole. */
#include "cm.h"

#include <poll.h>

#define EXPORT __attribute__((visibility("default")))

pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;

#define CM_HASH 1024
static struct fab_cm_id *id_hash[CM_HASH]; /* by local_id */
static uint32_t next_local_id;

#define CM_LOCK() pthread_mutex_lock(&cm_lock)
#define CM_UNLOCK() pthread_mutex_unlock(&cm_lock)

/* ------------------------------------------------------------------ */
/* IDs and events (cm_lock held)                                       */

struct fab_cm_id *
cm_id_find(uint32_t local_id)
{
    struct fab_cm_id *id = id_hash[local_id % CM_HASH];
    while (id != NULL && id->local_id != local_id)
        id = id->hnext;
    return id;
}

/* Walk every ID: cm_id_first, then cm_id_next until NULL. */
static struct fab_cm_id *
from_bucket(unsigned b)
{
    for (; b < CM_HASH; b++)
        if (id_hash[b] != NULL)
            return id_hash[b];
    return NULL;
}

struct fab_cm_id *
cm_id_first(void)
{
    return from_bucket(0);
}

struct fab_cm_id *
cm_id_next(struct fab_cm_id *id)
{
    return id->hnext != NULL ? id->hnext
                             : from_bucket(id->local_id % CM_HASH + 1);
}

int
cm_qp_type(int ps)
{
    return ps == FAB_CM_PS_UDP || ps == FAB_CM_PS_IPOIB ? IBV_QPT_UD
                                                        : IBV_QPT_RC;
}

static uint32_t
new_local_id(void)
{
    if (next_local_id == 0)
        fab_random_bytes(&next_local_id, sizeof(next_local_id));
    do
        next_local_id++;
    while (next_local_id == 0 || cm_id_find(next_local_id) != NULL);
    return next_local_id;
}

struct fab_cm_id *
cm_id_new(struct fab_cm_channel *ch, void *context, int ps)
{
    struct fab_cm_id *id = calloc(1, sizeof(*id));
    if (id == NULL)
        return NULL;
    id->ch = ch;
    id->context = context;
    id->ps = ps;
    id->qp_type = cm_qp_type(ps);
    id->claim_fd = -1;
    id->local_id = new_local_id();
    id->src.sin_family = id->dst.sin_family = AF_INET;
    id->retry = 7;
    id->rnr_retry = 7;
    fab_random_bytes(&id->psn, sizeof(id->psn));
    id->psn &= 0xFFFFFF;
    id->hnext = id_hash[id->local_id % CM_HASH];
    id_hash[id->local_id % CM_HASH] = id;
    ch->nids++;
    return id;
}

static void
id_unhash(struct fab_cm_id *id)
{
    struct fab_cm_id **pp = &id_hash[id->local_id % CM_HASH];
    while (*pp != NULL && *pp != id)
        pp = &(*pp)->hnext;
    if (*pp != NULL)
        *pp = id->hnext;
}

/* A new event of type for id (not queued yet: cm_event_post); NULL if
   out of memory (the event is lost, as a full kernel queue loses it). */
struct cmev *
cm_event(struct fab_cm_id *id, int type, int status)
{
    struct cmev *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->ev.event = type;
    e->ev.status = status;
    e->ev.id = id;
    e->ev.context = id->context;
    e->lid_of = id->local_id;
    return e;
}

/* The private data of m in e, len bytes (the message's field, padded
   with zeros, as the kernel gives it). */
void
cm_event_pdata(struct cmev *e, const struct cm_msg *m, int len)
{
    if (e == NULL)
        return;
    memcpy(e->ev.private_data, m->pdata,
           m->pdata_len < len ? m->pdata_len : (size_t)len);
    e->ev.private_data_len = (uint8_t)len;
}

void
cm_event_post(struct cmev *e)
{
    struct fab_cm_channel *ch;
    uint64_t one = 1;
    if (e == NULL)
        return;
    ch = e->ev.id->ch;
    if (ch->tail != NULL)
        ch->tail->next = e;
    else
        ch->head = e;
    ch->tail = e;
    if (write(ch->fd, &one, sizeof(one)) != sizeof(one))
        fab_rx_bad();           /* cannot happen: the count stays small */
}

/* Drop the queued events of id (it is being destroyed). */
static void
drop_events(struct fab_cm_id *id)
{
    struct fab_cm_channel *ch = id->ch;
    struct cmev **pp = &ch->head, *e;
    uint64_t v;

    ch->tail = NULL;
    while ((e = *pp) != NULL) {
        if (e->lid_of == id->local_id ||
            (e->ev.listen_id == id && e->ev.event ==
             FAB_CM_EVENT_CONNECT_REQUEST)) {
            if (e->ev.listen_id == id)
                e->ev.listen_id = NULL;
            if (e->lid_of == id->local_id) {
                *pp = e->next;
                free(e);
                if (read(ch->fd, &v, sizeof(v)) != sizeof(v))
                    fab_rx_bad();
                continue;
            }
        }
        ch->tail = e;
        pp = &e->next;
    }
}

/* TIMEWAIT_EXIT for id, a while after DISCONNECTED (the CM thread). */
void
cm_timewait(struct fab_cm_id *id)
{
    id->timewait_at = now_ns() + 200000000ull;
    cm_wake();
}

/* id's peer is gone (died, or cannot be reached): what the kernel gives
   when the IB CM's retries run out. */
void
cm_peer_gone(struct fab_cm_id *id, int status)
{
    switch (id->state) {
    case CS_REQ_SENT:
    case CS_REP_SENT:
        id->state = CS_DONE;
        cm_event_post(cm_event(id, FAB_CM_EVENT_UNREACHABLE, status));
        break;
    case CS_REP_RCVD:
    case CS_ESTABLISHED:
        if (id->qp_type == IBV_QPT_UD)
            break;
        id->state = CS_DISCONNECTED;
        cm_event_post(cm_event(id, FAB_CM_EVENT_DISCONNECTED, 0));
        cm_timewait(id);
        break;
    case CS_DREQ_SENT:
        id->state = CS_DISCONNECTED;
        cm_event_post(cm_event(id, FAB_CM_EVENT_DISCONNECTED, status));
        cm_timewait(id);
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------ */
/* channels                                                            */

EXPORT int
fab_cm_create_channel(struct fab_cm_channel **out, int *fd,
                      struct pyrdma_status *st)
{
    struct fab_cm_channel *ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return pyrdma_fail(st, ENOMEM, "rdma_create_event_channel", "");
    ch->fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    if (ch->fd < 0) {
        int e = errno;
        free(ch);
        return pyrdma_fail(st, e, "eventfd", "event channel");
    }
    *out = ch;
    *fd = ch->fd;
    return 0;
}

EXPORT int
fab_cm_destroy_channel(struct fab_cm_channel *ch, struct pyrdma_status *st)
{
    struct cmev *e;
    CM_LOCK();
    if (ch->nids != 0) {
        int n = ch->nids;
        CM_UNLOCK();
        return pyrdma_fail(st, EBUSY, "rdma_destroy_event_channel",
                           "%d CM IDs still use the channel", n);
    }
    while ((e = ch->head) != NULL) {
        ch->head = e->next;
        free(e);
    }
    CM_UNLOCK();
    close(ch->fd);
    free(ch);
    return 0;
}

/* Take the first event of ch (cm_lock held), or NULL. */
static struct cmev *
take_event(struct fab_cm_channel *ch)
{
    struct cmev *e = ch->head;
    uint64_t v;
    if (e == NULL)
        return NULL;
    ch->head = e->next;
    if (ch->head == NULL)
        ch->tail = NULL;
    e->next = NULL;
    if (read(ch->fd, &v, sizeof(v)) != sizeof(v))
        fab_rx_bad();
    if (e->ev.event == FAB_CM_EVENT_CONNECT_REQUEST && e->ev.listen_id)
        e->ev.listen_id->pending--;
    return e;
}

EXPORT int
fab_cm_get_event(struct fab_cm_channel *ch, int wait,
                 struct fab_cm_event **out, struct pyrdma_status *st)
{
    for (;;) {
        struct pollfd pfd;
        struct cmev *e;
        CM_LOCK();
        e = take_event(ch);
        CM_UNLOCK();
        if (e != NULL) {
            *out = &e->ev;
            return 0;
        }
        if (!wait)
            return pyrdma_fail(st, EAGAIN, "rdma_get_cm_event",
                               "no event");
        pfd.fd = ch->fd;
        pfd.events = POLLIN;
        if (poll(&pfd, 1, -1) < 0 && errno == EINTR)
            return pyrdma_fail(st, EINTR, "rdma_get_cm_event",
                               "interrupted");
    }
}

EXPORT int
fab_cm_ack_event(struct fab_cm_event *ev, struct pyrdma_status *st)
{
    (void)st;
    free((struct cmev *)(void *)ev);
    return 0;
}

static const char *const ev_names[] = {
    "RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
    "RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR",
    "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
    "RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
    "RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED",
    "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
    "RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
    "RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT"
};

EXPORT const char *
fab_cm_event_str(int event)
{
    if (event < 0 || event >= (int)(sizeof(ev_names) / sizeof(ev_names[0])))
        return "UNKNOWN EVENT";
    return ev_names[event];
}

/* ------------------------------------------------------------------ */
/* IDs                                                                 */

static int
ps_ok(int ps)
{
    return ps == FAB_CM_PS_TCP || ps == FAB_CM_PS_UDP ||
           ps == FAB_CM_PS_IB || ps == FAB_CM_PS_IPOIB;
}

EXPORT int
fab_cm_create_id(struct fab_cm_channel *ch, void *context, int ps,
                 struct fab_cm_id **out, struct pyrdma_status *st)
{
    struct fab_cm_id *id;
    if (!ps_ok(ps))
        return pyrdma_fail(st, EINVAL, "rdma_create_id", "port space "
                           "0x%x: not TCP, UDP, IB nor IPOIB", ps);
    if (ch == NULL)
        return pyrdma_fail(st, EINVAL, "rdma_create_id", "no event channel");
    if (fab_load(st) < 0 || fab_node_up(st) < 0 || cm_thread_start(st) < 0)
        return -1;
    CM_LOCK();
    id = cm_id_new(ch, context, ps);
    CM_UNLOCK();
    if (id == NULL)
        return pyrdma_fail(st, ENOMEM, "rdma_create_id", "");
    *out = id;
    return 0;
}

/* What destroying id in its state tells its peer (cm_lock held): what
   the kernel sends for the IDs of a process that ends, too (cm_msg.c). */
void
cm_tell_peer(struct fab_cm_id *id)
{
    struct cmout *o;
    switch (id->state) {
    case CS_REQ_SENT:
    case CS_REQ_RCVD:
    case CS_REP_SENT:
        if (id->qp_type == IBV_QPT_UD)
            return;
        o = cm_out_new(id->peer_guid, CM_REJ);
        if (o == NULL)
            return;
        o->m.reason = id->state == CS_REQ_SENT ? 4 /* timeout */
                                               : FAB_CM_REJ_CONSUMER_DEFINED;
        cm_send(id, CM_REJ, o);
        break;
    case CS_REP_RCVD:
    case CS_ESTABLISHED:
        if (id->qp_type == IBV_QPT_UD)
            return;
        o = cm_out_new(id->peer_guid, CM_DREQ);
        if (o != NULL)
            cm_send(id, CM_DREQ, o);
        break;
    default:
        break;
    }
}

EXPORT int
fab_cm_destroy_id(struct fab_cm_id *id, struct pyrdma_status *st)
{
    struct cm_mc *mc;
    (void)st;
    CM_LOCK();
    cm_tell_peer(id);
    id_unhash(id);
    drop_events(id);
    id->ch->nids--;
    cm_unclaim(id);
    mc = id->mc;
    id->mc = NULL;
    CM_UNLOCK();
    cm_mc_leave_all(mc);       /* its groups, without cm_lock */
    free(id);
    return 0;
}

EXPORT void *
fab_cm_id_context(const struct fab_cm_id *id)
{
    return id->context;
}

EXPORT void
fab_cm_set_context(struct fab_cm_id *id, void *context)
{
    CM_LOCK();
    id->context = context;
    CM_UNLOCK();
}

EXPORT int
fab_cm_migrate_id(struct fab_cm_id *id, struct fab_cm_channel *ch,
                  struct pyrdma_status *st)
{
    struct fab_cm_channel *old;
    struct cmev **pp, *e, *moved = NULL, **mt = &moved;
    uint64_t v;

    if (ch == NULL)
        return pyrdma_fail(st, EINVAL, "rdma_migrate_id", "no channel");
    CM_LOCK();
    old = id->ch;
    for (pp = &old->head; (e = *pp) != NULL;) {
        if (e->lid_of != id->local_id) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;          /* its queued events go with it */
        if (read(old->fd, &v, sizeof(v)) != sizeof(v))
            fab_rx_bad();
        e->next = NULL;
        *mt = e;
        mt = &e->next;
    }
    old->tail = NULL;
    for (e = old->head; e != NULL; e = e->next)
        old->tail = e;
    old->nids--;
    id->ch = ch;
    ch->nids++;
    while ((e = moved) != NULL) {
        moved = e->next;
        e->next = NULL;
        cm_event_post(e);
    }
    CM_UNLOCK();
    return 0;
}

EXPORT int
fab_cm_set_qp(struct fab_cm_id *id, uint32_t qp_num, struct pyrdma_status *st)
{
    if (qp_num > 0xFFFFFF)
        return pyrdma_fail(st, EINVAL, "rdma_create_qp", "QP number 0x%x",
                           qp_num);
    CM_LOCK();
    id->qpn = qp_num;
    CM_UNLOCK();
    return 0;
}
