/* cm_mcast.c - the connection manager's multicast: join and leave the
   group of a multicast IP address (rdma_join_multicast,
   rdma_leave_multicast).  An IP group becomes a fabric group (an MGID and
   an MLID, csrc/fabric/mcast.c) the way the kernel's rdma_cm maps it for
   an IB port; the ID's QP is attached to it on joining and detached on
   leaving or when the ID is destroyed.  See fab_cm_join_multicast in
   csrc/fabric_lib.h. */
#include "cm.h"

#include <netinet/in.h>

#define EXPORT __attribute__((visibility("default")))
#define CM_LOCK() pthread_mutex_lock(&cm_lock)
#define CM_UNLOCK() pthread_mutex_unlock(&cm_lock)

/* The group address of addr (IPv4 224/4 or IPv6 ff00::/8) in *out:
   0, or -1 with *st (EINVAL, EAFNOSUPPORT). */
static int
group_addr(const struct sockaddr *addr, struct sockaddr_storage *out,
           const char *func, struct pyrdma_status *st)
{
    if (addr == NULL)
        return pyrdma_fail(st, EINVAL, func, "no address");
    memset(out, 0, sizeof(*out));
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const void *)addr;
        if (!IN_MULTICAST(ntohl(s->sin_addr.s_addr)))
            return pyrdma_fail(st, EINVAL, func, "%s is not a multicast "
                               "address (224.0.0.0/4)",
                               inet_ntoa(s->sin_addr));
        memcpy(out, s, sizeof(*s));
        return 0;
    }
    if (addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const void *)addr;
        if (s->sin6_addr.s6_addr[0] != 0xff)
            return pyrdma_fail(st, EINVAL, func, "the IPv6 address is not "
                               "a multicast address (ff00::/8)");
        memcpy(out, s, sizeof(*s));
        return 0;
    }
    return pyrdma_fail(st, EAFNOSUPPORT, func, "address family %d: a "
                       "multicast group is IPv4 or IPv6", addr->sa_family);
}

/* The MGID of group address a in port space ps: the IPoIB mapping of
   an IB port with the default P_Key, the UDP port space marked with the
   rdma_cm's signature (0x01 in the fourth byte). */
static void
group_mgid(const struct sockaddr_storage *a, int ps, uint8_t mgid[16])
{
    memset(mgid, 0, 16);
    mgid[0] = 0xff;
    mgid[1] = 0x12;             /* transient, link-local scope */
    mgid[4] = mgid[5] = 0xff;   /* P_Key 0xffff */
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const void *)a;
        const uint8_t *ip = (const uint8_t *)&s->sin_addr.s_addr;
        mgid[2] = 0x40;
        mgid[3] = 0x1b;
        mgid[12] = ip[0] & 0x0f;
        memcpy(mgid + 13, ip + 1, 3);
    }
    else {
        const struct sockaddr_in6 *s = (const void *)a;
        const uint8_t *ip = s->sin6_addr.s6_addr;
        if ((ip[1] & 0xf0) == 0x10 && ip[2] == 0xa0 && ip[3] == 0x1b) {
            memcpy(mgid, ip, 16); /* an MGID the SA gave: itself */
            return;
        }
        mgid[2] = 0x60;
        mgid[3] = 0x1b;
        memcpy(mgid + 6, ip + 6, 10);
    }
    if (ps == FAB_CM_PS_UDP)
        mgid[3] = 0x01;
}

/* The MLID of an MGID: 0xc000 plus its FNV-1a hash, below 0xffff. */
static uint16_t
group_mlid(const uint8_t mgid[16])
{
    uint32_t h = 2166136261u;
    int i;
    for (i = 0; i < 16; i++)
        h = (h ^ mgid[i]) * 16777619u;
    return (uint16_t)(0xC000 + h % 0x3FFF);
}

static int
same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr
            == ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
                  16) == 0;
}

/* The event of a join: MULTICAST_JOIN with the group's address, or
   MULTICAST_ERROR with status (cm_lock held). */
static void
join_event(struct fab_cm_id *id, const struct cm_mc *mc, int status,
           void *context)
{
    struct cmev *e = cm_event(id, status ? FAB_CM_EVENT_MULTICAST_ERROR
                                         : FAB_CM_EVENT_MULTICAST_JOIN,
                              status);
    struct pyrdma_ah_attr *a;
    if (e == NULL)
        return;
    e->ev.mc_context = context;
    a = &e->ev.ah_attr;
    a->is_global = 1;
    memcpy(a->grh.dgid, mc->mgid, 16);
    a->grh.hop_limit = 1;
    a->dlid = mc->mlid;
    a->port_num = 1;
    e->ev.qp_num = 0xFFFFFF;
    e->ev.qkey = FAB_CM_UDP_QKEY;
    cm_event_post(e);
}

EXPORT int
fab_cm_join_multicast(struct fab_cm_id *id, const struct sockaddr *addr,
                      int flags, void *context, struct pyrdma_status *st)
{
    const char *func = "rdma_join_multicast";
    struct pyrdma_status ast;
    struct cm_mc *mc = calloc(1, sizeof(*mc));
    int status = 0;

    if (mc == NULL)
        return pyrdma_fail(st, ENOMEM, func, "");
    if (group_addr(addr, &mc->addr, func, st) < 0 ||
        (flags & ~FAB_CM_MC_SENDONLY) != 0) {
        free(mc);
        return flags & ~FAB_CM_MC_SENDONLY
            ? pyrdma_fail(st, EINVAL, func, "join flags 0x%x", flags) : -1;
    }
    CM_LOCK();
    if (id->qp_type != IBV_QPT_UD || id->src.sin_addr.s_addr == 0 ||
        (id->state != CS_BOUND && id->state != CS_ADDR)) {
        int ud = id->qp_type == IBV_QPT_UD;
        CM_UNLOCK();
        free(mc);
        return pyrdma_fail(st, EINVAL, func, ud ? "the CM ID is not bound "
                           "or resolved to an address of this host"
                           : "the CM ID is not of a UD port space");
    }
    group_mgid(&mc->addr, id->ps, mc->mgid);
    mc->mlid = group_mlid(mc->mgid);
    if (!(flags & FAB_CM_MC_SENDONLY))
        mc->qpn = id->qpn;
    CM_UNLOCK();
    /* the QP, with N.lock and without cm_lock (never both) */
    if (mc->qpn != 0 && fab_mcast_qpn(mc->qpn, mc->mgid, mc->mlid, 1,
                                      &ast) < 0) {
        status = -ast.err;
        mc->qpn = 0;
    }
    CM_LOCK();
    join_event(id, mc, status, context);
    if (status == 0) {
        mc->next = id->mc;
        id->mc = mc;
        mc = NULL;
    }
    CM_UNLOCK();
    free(mc);
    return 0;
}

EXPORT int
fab_cm_leave_multicast(struct fab_cm_id *id, const struct sockaddr *addr,
                       struct pyrdma_status *st)
{
    const char *func = "rdma_leave_multicast";
    struct sockaddr_storage a;
    struct cm_mc **pp, *mc = NULL;

    if (group_addr(addr, &a, func, st) < 0)
        return -1;
    CM_LOCK();
    for (pp = &id->mc; *pp != NULL; pp = &(*pp)->next)
        if (same_addr(&(*pp)->addr, &a)) {
            mc = *pp;
            *pp = mc->next;
            mc->next = NULL;
            break;
        }
    CM_UNLOCK();
    if (mc == NULL)
        return pyrdma_fail(st, EADDRNOTAVAIL, func, "the CM ID has not "
                           "joined that group");
    cm_mc_leave_all(mc);
    return 0;
}

/* Detach the QPs of the groups of list and free it (cm_lock not held).
   (A QP attached to a group cannot be destroyed: it is there.) */
void
cm_mc_leave_all(struct cm_mc *list)
{
    struct pyrdma_status st;
    struct cm_mc *mc;
    while ((mc = list) != NULL) {
        list = mc->next;
        if (mc->qpn != 0)
            fab_mcast_qpn(mc->qpn, mc->mgid, mc->mlid, 0, &st);
        free(mc);
    }
}
