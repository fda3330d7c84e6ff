/* mcast.c - UD multicast: attach_mcast and detach_mcast, the registry of
   groups the fabric's nodes share, the members a multicast AH sends to,
   and the groups a multicast SEND is delivered to at its receiver.

   A group is named by its GID (ff..) and its LID (0xC000..0xFFFE), as
   ibv_attach_mcast gives them.  A node with a QP attached to a group
   holds a file in the rendezvous directory's mcast/ folder,
   <GID, 32 hex digits>-<LID, 4>-<GUID of the node, 16>, from the first
   attach of one of its QPs to the last detach (or its end): like the LID
   claims, the registry covers the nodes of one host (shared memory or
   TCP).  A multicast AH (a DGID ff.. or a DLID from 0xC000) resolves to
   no peer: each post_send of a WR through it looks the group's members
   up (again when the folder changed: its mtime), and the requester
   sends one copy of the SEND to every member node (the sender's own
   included), each with F_MCAST, dst_qpn 0xFFFFFF and the group's GID
   (raddr and cmp, the LID in rkey); a UD WR completes once its copies
   are queued, as a UD WR completes once sent.  The receiving node
   delivers a copy to each of its QPs attached to the group whose Q_Key
   matches, with a GRH whose DGID is the group's: a QP that sent it gets
   it too when attached, as rxe's multicast does through the IP loopback.
   A QP attached to a group cannot be destroyed (EBUSY, as the kernel
   says: detach it first). */
#include "fabric.h"

/* ------------------------------------------------------------------ */
/* the registry (files in <rendezvous>/mcast/)                         */

static void
reg_dir(char *buf, size_t n)
{
    snprintf(buf, n, "%s/mcast", N.dir);
}

static void
reg_name(char *buf, size_t n, const uint8_t gid[16], uint16_t lid,
         uint64_t guid)
{
    char d[260];
    int i, k;
    reg_dir(d, sizeof(d));
    k = snprintf(buf, n, "%s/", d);
    for (i = 0; i < 16 && k > 0 && (size_t)k + 2 < n; i++)
        k += snprintf(buf + k, n - (size_t)k, "%02x", gid[i]);
    snprintf(buf + k, n - (size_t)k, "-%04x-%016llx", lid,
             (unsigned long long)guid);
}

/* This node is (in 1) or is no longer (in 0) a member of the group. */
static void
reg_member(const uint8_t gid[16], uint16_t lid, int in)
{
    char d[260], path[400];
    int fd;
    reg_name(path, sizeof(path), gid, lid, N.guid);
    if (!in) {
        unlink(path);
        return;
    }
    reg_dir(d, sizeof(d));
    if (mkdir(d, 0700) < 0 && errno != EEXIST)
        return;
    fd = fab_priv_open(path, O_CREAT | O_WRONLY, 0600);
    if (fd >= 0)
        close(fd);
}

/* ------------------------------------------------------------------ */
/* this node's groups (N.lock held)                                    */

static struct mcg *
mcg_find(const uint8_t gid[16], uint16_t lid)
{
    uint32_t i;
    for (i = 0; i < N.nmcg; i++)
        if (N.mcg[i].nqp && N.mcg[i].lid == lid &&
            memcmp(N.mcg[i].gid, gid, 16) == 0)
            return &N.mcg[i];
    return NULL;
}

/* The group a multicast request h is for (its GID, or its LID when the
   sender addressed it by LID alone), or NULL. */
const struct mcg *
fab_mcg_of(const struct wire *h)
{
    uint8_t gid[16];
    uint32_t i;
    memcpy(gid, &h->raddr, 8);
    memcpy(gid + 8, &h->cmp, 8);
    for (i = 0; i < N.nmcg; i++) {
        const struct mcg *g = &N.mcg[i];
        if (g->nqp == 0)
            continue;
        if (gid[0] == 0xff ? memcmp(g->gid, gid, 16) == 0
                           : g->lid == (uint16_t)h->rkey)
            return g;
    }
    return NULL;
}

static int
mcg_has(const struct mcg *g, uint32_t qpn)
{
    uint32_t i;
    for (i = 0; i < g->nqp; i++)
        if (g->qpn[i] == qpn)
            return 1;
    return 0;
}

/* Take qpn out of group g; 1 if g is empty now. */
static int
mcg_drop(struct mcg *g, uint32_t qpn)
{
    uint32_t i;
    for (i = 0; i < g->nqp; i++)
        if (g->qpn[i] == qpn) {
            g->qpn[i] = g->qpn[--g->nqp];
            N.mcg_total--;
            return g->nqp == 0;
        }
    return 0;
}

/* Attach q to the group: 0, or an errno.  *first: the node's first QP in
   it (the registry gets the node). */
static int
mcg_attach(struct uqp *q, const uint8_t gid[16], uint16_t lid, int *first)
{
    struct mcg *g = mcg_find(gid, lid);
    uint32_t i;
    *first = 0;
    if (g != NULL && mcg_has(g, q->qpn))
        return 0;               /* attached already: nothing to do */
    if (N.mcg_total >= MAX_MCG * MAX_MCG_QP)
        return ENOMEM;
    if (g == NULL) {
        for (i = 0; i < N.nmcg && N.mcg[i].nqp; i++)
            ;
        if (i == MAX_MCG)
            return ENOMEM;
        if (N.mcg == NULL &&
            (N.mcg = calloc(MAX_MCG, sizeof(*N.mcg))) == NULL)
            return ENOMEM;
        if (i == N.nmcg)
            N.nmcg++;
        g = &N.mcg[i];
        memcpy(g->gid, gid, 16);
        g->lid = lid;
        *first = 1;
    }
    else if (g->nqp == MAX_MCG_QP)
        return ENOMEM;
    g->qpn[g->nqp++] = q->qpn;
    N.mcg_total++;
    return 0;
}

/* The checks of ib_attach_mcast and ib_detach_mcast: a UD QP, a multicast
   GID, a multicast LID. */
static int
mcast_args(const struct uqp *q, const uint8_t gid[16], uint16_t lid,
           struct pyrdma_status *st, const char *func)
{
    if (q->type != IBV_QPT_UD)
        return pyrdma_fail(st, EINVAL, func, "QP 0x%x is not a UD QP",
                           q->qpn);
    if (gid[0] != 0xff)
        return pyrdma_fail(st, EINVAL, func, "the GID is not a multicast "
                           "GID (ff..)");
    if (lid < 0xC000 || lid == 0xFFFF)
        return pyrdma_fail(st, EINVAL, func, "LID 0x%x is not a multicast "
                           "LID (0xc000..0xfffe)", lid);
    return 0;
}

int
fab_attach_mcast(void *vq, const uint8_t gid[16], uint16_t lid,
                 struct pyrdma_status *st)
{
    struct uqp *q = vq;
    int rc, first;
    if (mcast_args(q, gid, lid, st, "ibv_attach_mcast") < 0)
        return -1;
    LOCK();
    rc = mcg_attach(q, gid, lid, &first);
    UNLOCK();
    if (rc)
        return pyrdma_fail(st, rc, "ibv_attach_mcast", "%s",
                           "too many multicast groups or attachments "
                           "(max_mcast_grp, max_mcast_qp_attach)");
    if (first)
        reg_member(gid, lid, 1);
    return 0;
}

int
fab_detach_mcast(void *vq, const uint8_t gid[16], uint16_t lid,
                 struct pyrdma_status *st)
{
    struct uqp *q = vq;
    struct mcg *g;
    int last = 0, found = 0;
    if (mcast_args(q, gid, lid, st, "ibv_detach_mcast") < 0)
        return -1;
    LOCK();
    g = mcg_find(gid, lid);
    if (g != NULL && mcg_has(g, q->qpn)) {
        found = 1;
        last = mcg_drop(g, q->qpn);
    }
    UNLOCK();
    if (!found)
        return pyrdma_fail(st, EINVAL, "ibv_detach_mcast", "QP 0x%x is not "
                           "attached to that group", q->qpn);
    if (last)
        reg_member(gid, lid, 0);
    return 0;
}

/* How many groups q is attached to (N.lock held): destroy_qp refuses
   such a QP with EBUSY, as the kernel does. */
int
fab_mcast_qp_attached(const struct uqp *q)
{
    uint32_t i;
    int n = 0;
    for (i = 0; N.mcg_total && i < N.nmcg; i++)
        if (N.mcg[i].nqp && mcg_has(&N.mcg[i], q->qpn))
            n++;
    return n;
}

/* The node ends: it leaves every group's registry. */
void
fab_mcast_node_end(void)
{
    uint32_t i;
    for (i = 0; i < N.nmcg; i++)
        if (N.mcg[i].nqp)
            reg_member(N.mcg[i].gid, N.mcg[i].lid, 0);
}

/* ------------------------------------------------------------------ */
/* the sender: a multicast AH and its members                          */

/* Is a an address of a multicast group?  (its GID, or its LID when it
   has no GRH) */
int
fab_ah_is_mcast(const struct pyrdma_ah_attr *a)
{
    return a->is_global ? a->grh.dgid[0] == 0xff
                        : a->dlid >= 0xC000 && a->dlid != 0xFFFF;
}

/* Does registry file name (without its folder) name a member of ah's
   group?  Its GUID in *guid. */
static int
reg_match(const struct uah *ah, const char *name, uint64_t *guid)
{
    char want[40];
    unsigned lid;
    unsigned long long g;
    int i;
    if (strlen(name) != 32 + 1 + 4 + 1 + 16 ||
        sscanf(name + 33, "%4x-%16llx", &lid, &g) != 2)
        return 0;
    *guid = g;
    if (!ah->attr.is_global)
        return lid == ah->attr.dlid;
    for (i = 0; i < 16; i++)
        snprintf(want + 2 * i, 3, "%02x", ah->attr.grh.dgid[i]);
    return strncmp(name, want, 32) == 0;
}

/* Add the node of guid to the members list *mp (*n entries; a peer:
   N.lock not held). */
static void
member_add(struct peer ***mp, int *n, uint64_t guid)
{
    struct pyrdma_ah_attr a;
    struct pyrdma_status st;
    struct peer *p, **np;
    uint64_t be = htobe64(guid);
    if (guid != N.guid && !fab_record_alive(guid))
        return;                 /* a node that ended without leaving */
    memset(&a, 0, sizeof(a));
    a.is_global = 1;
    memcpy(a.grh.dgid, N.gid, 8);
    memcpy(a.grh.dgid + 8, &be, 8);
    memset(&st, 0, sizeof(st));
    if (fab_ah_resolve(&a, &p, &st, "ibv_post_send") < 0)
        return;
    np = realloc(*mp, sizeof(*np) * (size_t)(*n + 1));
    if (np == NULL)
        return;
    *mp = np;
    np[(*n)++] = p;
}

/* Is ah's list of members what the registry says now?  Its folder's
   mtime has not changed since, and is old enough (50 ms) that a change
   within the same clock tick would have shown.  mp_lock held. */
static int
members_fresh(const struct uah *ah, const struct stat *sb)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return ah->mp_valid && sb->st_mtim.tv_sec == ah->mp_mtime.tv_sec &&
           sb->st_mtim.tv_nsec == ah->mp_mtime.tv_nsec &&
           (now.tv_sec - sb->st_mtim.tv_sec) * 1000000000ll +
           (now.tv_nsec - sb->st_mtim.tv_nsec) > 50000000ll;
}

/* Before N.lock (peers may be made): the member nodes of the group of
   multicast AH ah, looked up again when the registry may have changed.
   The list is made without mp_lock (peers take N.lock, and the requester
   reads the list under N.lock, then mp_lock), then swapped in. */
void
fab_mcast_members(struct uah *ah)
{
    char d[260];
    struct stat sb;
    DIR *dir;
    struct dirent *e;
    struct peer **mp = NULL, **old;
    uint64_t guid;
    int n = 0, fresh;

    reg_dir(d, sizeof(d));
    if (stat(d, &sb) < 0)
        memset(&sb, 0, sizeof(sb));
    pthread_mutex_lock(&ah->mp_lock);
    fresh = members_fresh(ah, &sb);
    pthread_mutex_unlock(&ah->mp_lock);
    if (fresh)
        return;
    if ((dir = opendir(d)) != NULL) {
        while ((e = readdir(dir)) != NULL)
            if (reg_match(ah, e->d_name, &guid))
                member_add(&mp, &n, guid);
        closedir(dir);
    }
    pthread_mutex_lock(&ah->mp_lock);
    old = ah->mp;
    ah->mp = mp;
    ah->nmp = n;
    ah->mp_mtime = sb.st_mtim;
    ah->mp_valid = 1;
    pthread_mutex_unlock(&ah->mp_lock);
    free(old);
}

/* ------------------------------------------------------------------ */
/* the connection manager's joins (cm_mcast.c): a QP by its number     */

/* Attach (attach 1) or detach (0) the QP numbered qpn of this node to
   the group, looked up and changed under one hold of N.lock (the QP
   may be destroyed meanwhile by another thread): 0, or -1 with *st. */
int
fab_mcast_qpn(uint32_t qpn, const uint8_t gid[16], uint16_t lid,
              int attach, struct pyrdma_status *st)
{
    const char *func = attach ? "rdma_join_multicast"
                              : "rdma_leave_multicast";
    struct mcg *g;
    struct uqp *q;
    int rc = 0, edge = 0;

    LOCK();
    q = qp_lookup(qpn);
    if (q == NULL || mcast_args(q, gid, lid, st, func) < 0) {
        UNLOCK();
        return q == NULL ? pyrdma_fail(st, ENOENT, func, "QP 0x%x is "
                                       "gone", qpn) : -1;
    }
    if (attach)
        rc = mcg_attach(q, gid, lid, &edge);
    else if ((g = mcg_find(gid, lid)) != NULL && mcg_has(g, qpn))
        edge = mcg_drop(g, qpn);
    UNLOCK();
    if (rc)
        return pyrdma_fail(st, rc, func, "%s", "too many multicast groups "
                           "or attachments (max_mcast_grp, "
                           "max_mcast_qp_attach)");
    if (edge)
        reg_member(gid, lid, attach);
    return 0;
}
