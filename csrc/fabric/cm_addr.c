/* cm_addr.c - the connection manager's addressing: which IPv4 addresses
   reach which fabric nodes, and the port claims of bound IDs. */
#include "cm.h"

#include <ifaddrs.h>

#define EXPORT __attribute__((visibility("default")))

/* Is ip (network order) an address of this host (its network
   namespace): loopback, the node's own (RDMA_UCX_ADDR) or an
   interface's?  1 or 0. */
int
cm_addr_local(uint32_t ip)
{
    struct ifaddrs *ifa, *i;
    int found = 0;

    if ((ntohl(ip) >> 24) == 127 || ip == N.ip)
        return 1;
    if (getifaddrs(&ifa) != 0)
        return 0;
    for (i = ifa; i != NULL && !found; i = i->ifa_next)
        if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr == ip)
            found = 1;
    freeifaddrs(ifa);
    return found;
}

/* A node of the rendezvous directory whose listener is at ip (it set
   RDMA_UCX_ADDR=ip) and that lives: 1 with its network namespace in
   *netns, or 0. */
static int
node_at(uint32_t ip, unsigned long *netns)
{
    DIR *d = opendir(N.dir);
    struct dirent *e;
    int found = 0;

    if (d == NULL)
        return 0;
    while (!found && (e = readdir(d)) != NULL) {
        unsigned long long g;
        uint64_t be;
        uint32_t gip;
        char tail;
        if (sscanf(e->d_name, "node-%16llx%c", &g, &tail) != 1)
            continue;
        be = htobe64((uint64_t)g);
        memcpy(&gip, &be, 4);
        if (gip == ip && fab_node_netns((uint64_t)g, netns))
            found = 1;
    }
    closedir(d);
    return found;
}

/* Resolve ip (network order) to the network namespace whose nodes it
   reaches, and the source address to use: 0, or -1 if no node is behind
   it. */
int
cm_resolve_ip(uint32_t ip, unsigned long *netns, uint32_t *src_ip)
{
    if (ip == 0)
        return -1;
    if (cm_addr_local(ip)) {
        *netns = N.netns;
        *src_ip = ip;
        return 0;
    }
    if (!node_at(ip, netns))
        return -1;
    *src_ip = N.ip;
    return 0;
}

/* Which side an IPv4 address is on, for the librdmacm front end
   (fab_cm_addr_kind in fabric_lib.h). */
EXPORT int
fab_cm_addr_kind(const struct sockaddr *sa)
{
    uint32_t ip;
    unsigned long netns;

    if (sa == NULL || sa->sa_family != AF_INET)
        return FAB_CM_ADDR_OTHER;
    ip = ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr;
    if (ip == 0)
        return FAB_CM_ADDR_ANY;
    if ((ntohl(ip) >> 24) == 127 || ip == N.ip)
        return FAB_CM_ADDR_NODE;
    if (cm_addr_local(ip))
        return FAB_CM_ADDR_HOST;
    return node_at(ip, &netns) ? FAB_CM_ADDR_NODE : FAB_CM_ADDR_OTHER;
}

static void
claim_name(char *buf, size_t n, int ps, uint16_t port, unsigned long netns)
{
    snprintf(buf, n, "%s/cm-%04x-%04x-%lx", N.dir, (unsigned)ps, port, netns);
}

/* Read a port claim ("<pid> <guid> <lid>\n") from fd: its GUID if its
   holder lives, else 0. */
static uint64_t
claim_read(int fd, uint16_t *lid, int need_listen)
{
    char buf[96];
    unsigned long long g;
    unsigned l;
    int pid, held;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);

    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%d %llx %x", &pid, &g, &l) != 3 ||
        (need_listen && strstr(buf, " L\n") == NULL))
        return 0;
    held = fab_file_held(fd);
    if (held == 0 || (held < 0 && !fab_pid_alive(pid)))
        return 0;
    if (lid != NULL)
        *lid = (uint16_t)l;
    return (uint64_t)g;
}

/* The node that holds port in port space ps among the nodes of network
   namespace netns (with its LID; need_listen: and listens on it), or 0. */
uint64_t
cm_claim_owner(int ps, uint16_t port, unsigned long netns, uint16_t *lid,
               int need_listen)
{
    char path[300];
    uint64_t g;
    int fd;

    claim_name(path, sizeof(path), ps, port, netns);
    fd = fab_priv_open(path, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    g = claim_read(fd, lid, need_listen);
    close(fd);
    return g;
}

/* A port for an ID that does not listen (not claimed). */
uint16_t
cm_ephemeral(void)
{
    uint16_t r = 0;
    fab_random_bytes(&r, sizeof(r));
    return (uint16_t)(32768 + r % 28232);
}

/* Link the claim written in tmp to port's name; 0, 1 if a live holder
   has it, -1 on another error. */
static int
claim_link(const char *tmp, struct fab_cm_id *id, uint16_t port)
{
    char path[300];
    int tries;

    claim_name(path, sizeof(path), id->ps, port, N.netns);
    for (tries = 0; tries < 4; tries++) {
        if (link(tmp, path) == 0) {
            snprintf(id->claim, sizeof(id->claim), "%s", path);
            return 0;
        }
        if (errno != EEXIST)
            return -1;
        if (cm_claim_owner(id->ps, port, N.netns, NULL, 0) != 0)
            return 1;
        unlink(path);           /* stale: its holder is gone */
    }
    return 1;
}

/* Claim port (0: an ephemeral one) in id's port space for this node, as
   a LID is claimed (node.c): written and locked in a temporary file,
   then linked into place.  0, or -1 with *st set (EADDRINUSE: taken). */
int
cm_claim(struct fab_cm_id *id, uint16_t port, struct pyrdma_status *st)
{
    char tmp[300], buf[96];
    int fd, len, rc = 1, tries;

    snprintf(tmp, sizeof(tmp), "%s/cm-claim.tmp%d.%u", N.dir, (int)getpid(),
             id->local_id);
    fd = fab_priv_open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return pyrdma_fail(st, errno, "rdma_bind_addr", "cannot write a "
                           "port claim in %s", N.dir);
    len = snprintf(buf, sizeof(buf), "%d %016llx %x\n", (int)getpid(),
                   (unsigned long long)N.guid, N.lid);
    if (fab_file_hold(fd) != 0 || write(fd, buf, (size_t)len) != len)
        rc = -1;
    for (tries = 0; rc == 1 && tries < (port ? 1 : 2000); tries++) {
        uint16_t p = port ? port : cm_ephemeral();
        rc = claim_link(tmp, id, p);
        if (rc == 0)
            id->src.sin_port = htons(p);
    }
    unlink(tmp);
    if (rc != 0) {
        close(fd);
        if (rc > 0)
            return pyrdma_fail(st, EADDRINUSE, "rdma_bind_addr", "port %u "
                               "is in use on ucx0", port);
        return pyrdma_fail(st, errno ? errno : EIO, "rdma_bind_addr",
                           "cannot claim a port in %s", N.dir);
    }
    id->claim_fd = fd;
    return 0;
}

/* Mark id's claim as listening (" L" after its fields): what a test or
   tool waiting for the listener reads; 0 or -1. */
int
cm_claim_listening(struct fab_cm_id *id)
{
    struct stat sb;
    if (id->claim_fd < 0 || fstat(id->claim_fd, &sb) != 0 || sb.st_size < 1)
        return -1;
    return pwrite(id->claim_fd, " L\n", 3, sb.st_size - 1) == 3 ? 0 : -1;
}

/* Release id's port claim. */
void
cm_unclaim(struct fab_cm_id *id)
{
    if (id->claim_fd < 0)
        return;
    unlink(id->claim);
    close(id->claim_fd);
    id->claim_fd = -1;
}
