/* mr.c - memory and keys: MRs and the key table (reg_mr, dereg_mr),
   alloc_mr memory (UCX-allocated, shared: the one-sided fast path) and
   its revocation (mem_revoke), and the key page that same-host
   initiators check (publishing QPs and MRs, mapping peers' pages, their
   rkeys, the in-flight counts). */
#include "fabric.h"

#include <dlfcn.h>
#include <sys/ioctl.h>
#include <ucm/api/ucm.h>

/* ------------------------------------------------------------------ */
/* the key page (one-sided fast path)                                  */

/* Publish q's responder state for one-sided initiators (N.lock held):
   RC, RTR/RTS, connected.  Withdrawing it only clears qpn; destroy_qp
   then waits for the initiators still inside an op (fab_sh_quiesce). */
void
fab_sh_qp_sync(struct uqp *q)
{
    struct sh_qp *e;
    int ok;
    if (N.sh == NULL)
        return;
    e = &N.sh->qp[q->qpn & (MAX_QP - 1)];
    ok = !q->destroyed && q->type == IBV_QPT_RC && q->peer != NULL &&
         (q->attr.qp_state == IBV_QPS_RTR || q->attr.qp_state == IBV_QPS_RTS ||
          q->attr.qp_state == IBV_QPS_SQD);
    if (!ok) {
        if (__atomic_load_n(&e->qpn, __ATOMIC_RELAXED) == q->qpn)
            __atomic_store_n(&e->qpn, 0, __ATOMIC_SEQ_CST);
        return;
    }
    if (__atomic_load_n(&e->qpn, __ATOMIC_RELAXED) == q->qpn &&
        e->dest_qpn == q->attr.dest_qp_num &&
        e->peer_guid == q->peer->guid) {
        __atomic_store_n(&e->access, q->attr.qp_access_flags,
                         __ATOMIC_SEQ_CST);
        return;
    }
    __atomic_store_n(&e->qpn, 0, __ATOMIC_SEQ_CST);
    e->dest_qpn = q->attr.dest_qp_num;
    e->peer_guid = q->peer->guid;
    e->pd = (uint64_t)(uintptr_t)q->pd;
    e->access = q->attr.qp_access_flags;
    __atomic_store_n(&e->qpn, q->qpn, __ATOMIC_SEQ_CST);
}

/* Wait (bounded) until no initiator is inside an op counted by *ctr.  An
   initiator killed or stopped inside an op leaves the count up: after
   SH_WAIT_NS the count is reset.  Return 0, or 1 if it was reset (an
   initiator may still be inside: see mem_revoke). */
int
fab_sh_quiesce(uint32_t *ctr)
{
    uint64_t t0 = 0;
    while (__atomic_load_n(ctr, __ATOMIC_SEQ_CST) != 0) {
        uint64_t t = now_ns();
        if (t0 == 0)
            t0 = t;
        else if (t - t0 > SH_WAIT_NS) {
            __atomic_store_n(ctr, 0, __ATOMIC_SEQ_CST);
            return 1;
        }
        sched_yield();
    }
    return 0;
}

/* Map the key page of a same-host node (NULL if it has none). */
struct sh_page *
fab_sh_map(uint64_t guid)
{
    char path[300];
    struct sh_page *sh;
    snprintf(path, sizeof(path), "%s/keys-%016llx", N.dir,
             (unsigned long long)guid);
    sh = fab_shm_file_map(path, sizeof(*sh), 0, NULL);
    if (sh == NULL)
        return NULL;
    if (sh->magic != SH_MAGIC || sh->version != SH_VERSION ||
        sh->guid != guid) {
        munmap(sh, sizeof(*sh));
        return NULL;
    }
    return sh;
}

/* Test hook (docs/fabric.rst): RDMA_UCX_DEBUG_CMA_STOP=1 makes an
   initiator stop itself (SIGSTOP) once, after its checks and before its
   first cross-memory-attach copy: the case dereg_mr must fence out. */
int fab_cma_debug_stop;

/* Yama's ptrace_scope: 0 without Yama (or unreadable). */
static int
yama_scope(void)
{
    char buf[16] = "";
    ssize_t n;
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    return n > 0 ? atoi(buf) : 0;
}

/* May same-host peers reach this process's own memory by cross-memory
   attach (process_vm_writev/readv)?  Decided before UCX starts (its own
   cma transport follows the same rule: node.c leaves it out of UCX_TLS
   when this is 0 under Yama).  The kernel allows it to processes of the
   same user while this one is dumpable; Yama's ptrace_scope 1 allows it
   only to ancestors and named ptracers.  Lifting that (naming any process
   as ptracer, PR_SET_PTRACER_ANY) lets every process of the user read and
   write this process's memory and attach a debugger to it, so under
   scope 1 it takes RDMA_UCX_CMA=1; under 2 and 3 it is never open, and
   RDMA_UCX_CMA=0 closes it everywhere.  Sets and returns N.cma_in. */
int
fab_cma_policy(void)
{
    int off = FAB_SET_NUM(UCX_CMA) == 1;    /* auto|0|1 */
    int on = FAB_SET_NUM(UCX_CMA) == 2;

    N.yama = yama_scope();
    N.cma_in = !off && (N.yama == 0 || (N.yama == 1 && on));
    return N.cma_in;
}

/* After UCX started (node.c, after ucp_init and the worker): UCX's cma
   component names any process as this one's ptracer under scope 1 when
   it is loaded, whatever UCX_TLS says.  Keep that only where cross-memory
   attach was asked for (fab_cma_policy); else withdraw it (which also
   withdraws an exception the program may have made itself before; docs/
   fabric.rst). */
void
fab_cma_ptracer(void)
{
    if (N.yama != 1)
        return;
    if (N.cma_in && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        N.cma_in = 0;
    if (!N.cma_in)
        prctl(PR_SET_PTRACER, 0, 0, 0, 0);
}

/* Cross-memory attach for this node as initiator and as target:
   RDMA_UCX_CMA=0 turns it off as both; WRs of fewer than
   RDMA_UCX_CMA_MIN bytes (default CMA_MIN_DEFAULT, or CMA_MIN_CAP for an
   initiator with CAP_SYS_PTRACE) keep the request ring (faster while the
   target runs; they wait for it when it is stopped).  1 if this process
   is open as a target (fab_cma_policy, and dumpable). */
static int
cma_allowed(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];

    N.cma_out = FAB_SET_NUM(UCX_CMA) != 1;   /* not "0" */
    fab_cma_debug_stop = (int)FAB_SET_NUM(UCX_DEBUG_CMA_STOP);
    /* as an initiator: does this process pass a target's dumpable flag? */
    memset(d, 0, sizeof(d));
    N.cma_cap = syscall(SYS_capget, &h, d) != 0 ||
                (d[CAP_SYS_PTRACE >> 5].effective &
                 (1u << (CAP_SYS_PTRACE & 31))) != 0;
    /* below these sizes the request ring is faster while the target runs
       (measured: a copy is a system call; with CAP_SYS_PTRACE, two more) */
    N.cma_min = N.cma_cap ? CMA_MIN_CAP : CMA_MIN_DEFAULT;
    if (FAB_SET_TEXT(UCX_CMA_MIN) != NULL)
        N.cma_min = FAB_SET_NUM(UCX_CMA_MIN);
    if (!N.cma_out || !N.cma_in)
        return 0;
    return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1;
}

/* Create this node's key page; without it there is no fast path. */
void
fab_sh_create(void)
{
    char tmp[300];
    struct sh_page *sh;
    snprintf(N.shfile, sizeof(N.shfile), "%s/keys-%016llx", N.dir,
             (unsigned long long)N.guid);
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", N.shfile, (int)getpid());
    sh = fab_shm_file_create(tmp, sizeof(*sh));
    if (sh == NULL)
        return;
    sh->version = SH_VERSION;
    sh->pid = getpid();
    sh->guid = N.guid;
    sh->cma_open = (uint64_t)cma_allowed();
    __atomic_store_n(&sh->magic, SH_MAGIC, __ATOMIC_SEQ_CST);
    if (rename(tmp, N.shfile) != 0) {
        munmap(sh, sizeof(*sh));
        unlink(tmp);
        return;
    }
    N.sh = sh;
}

/* Unpack and cache the rkey of key at peer p (N.lock not held: UCP is
   called).  A key the page does not (or no longer) describe is not
   cached: its WRs keep the active-message path. */
void
fab_rk_fetch(struct peer *p, uint32_t key)
{
    struct sh_mr *m;
    uint8_t buf[SH_RKEY_MAX];
    uint32_t k1, len;
    uint64_t addr, xaddr;
    ucp_rkey_h rkey = NULL, old = NULL;
    void *base = NULL;
    struct rkc *c;

    if (p->sh == NULL || (key >> 8) == 0 || (key >> 8) >= SH_MR)
        return;
    m = &p->sh->mr[key >> 8];
    k1 = __atomic_load_n(&m->key, __ATOMIC_SEQ_CST);
    len = m->rkey_len;
    addr = m->addr;
    xaddr = m->xaddr;
    if (k1 != key || len > SH_RKEY_MAX)
        return;
    if (len == 0 && p->sh == N.sh) {
        /* this process's own memory, a QP of its own the target: the
           initiator copies at the address itself (CARRY_MAPPED).  No
           cross-memory attach (the kernel lets a process reach its own
           memory whatever it is, so that fence would not hold); what
           fences instead: post_send holds N.lock from its checks to the
           end of its copy, which dereg_mr takes before it withdraws the
           MR, and the unmap hook (own_unmapped) waits for the in-flight
           count the copy holds */
        base = (void *)(uintptr_t)xaddr;
    }
    else if (len == 0) {
        /* another process's own memory: cross-memory attach, nothing to
           unpack (fast_op checks the entry at every op) */
        if (!N.cma_out || p->cma_off || p->pid <= 0 || p->pid == N.pid ||
            !__atomic_load_n(&p->sh->cma_open, __ATOMIC_RELAXED))
            return;
    }
    else {
        memcpy(buf, m->rkey, len);
        if (__atomic_load_n(&m->key, __ATOMIC_SEQ_CST) != key)
            return;             /* changed while we copied */
        if (U.ep_rkey_unpack(p->ep, buf, &rkey) != UCS_OK)
            return;
        /* base: where addr is mapped here (rkey_ptr wants the address
           UCX knows, which differs for adopted user memory) */
        if (U.rkey_ptr(rkey, xaddr, &base) != UCS_OK)
            base = NULL;        /* not mappable: the AM path stays */
    }
    LOCK();
    c = &p->rk[key >> 8];
    if (c->key == key) {
        old = rkey;             /* someone else was quicker */
    }
    else {
        old = c->rkey;
        c->addr = addr;
        c->base = base;
        c->cma = len == 0 && base == NULL;
        c->self = len == 0 && base != NULL;
        c->rkey = rkey;
        __atomic_store_n(&c->key, key, __ATOMIC_RELEASE);
    }
    UNLOCK();
    if (old != NULL)
        U.rkey_destroy(old);
}

/* ------------------------------------------------------------------ */
/* MRs and alloc_mr memory                                            */

/* Check a local s/g list against the key table: 0 or an IBV_WC_* status. */
int
fab_check_sges(struct upd *pd, const struct pyrdma_sge *sg, int n, int write,
               int bad_status)
{
    int i;
    for (i = 0; i < n; i++) {
        struct umr *mr;
        if (sg[i].length == 0)
            continue;
        mr = mr_lookup(sg[i].lkey);
        if (mr == NULL || mr->pd != pd || !in_mr(mr, sg[i].addr, sg[i].length)
            || (write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) ||
            __atomic_load_n(&mr->gone, __ATOMIC_SEQ_CST))
            return bad_status;
    }
    return 0;
}

static int
mr_insert(struct umr *mr, struct pyrdma_mr_info *info,
          struct pyrdma_status *st)
{
    uint32_t i;
    LOCK();
    for (i = 1; i < N.nmr; i++)
        if (N.mrs[i] == NULL)
            break;
    if (i >= N.nmr) {
        uint32_t nn = N.nmr ? N.nmr * 2 : 256;
        struct umr **m;
        uint8_t *g;
        if (nn > MW_IDX0) {    /* the indexes above are windows' */
            UNLOCK();
            return pyrdma_fail(st, ENOMEM, "ibv_reg_mr", "too many MRs");
        }
        m = realloc(N.mrs, sizeof(*m) * nn);
        if (m == NULL) {
            UNLOCK();
            return pyrdma_fail(st, ENOMEM, "ibv_reg_mr", "");
        }
        N.mrs = m;
        g = realloc(N.mr_gen, nn);
        if (g == NULL) {
            UNLOCK();
            return pyrdma_fail(st, ENOMEM, "ibv_reg_mr", "");
        }
        N.mr_gen = g;
        memset(N.mrs + N.nmr, 0, sizeof(*m) * (nn - N.nmr));
        memset(N.mr_gen + N.nmr, 0, nn - N.nmr);
        if (N.nmr == 0)
            i = 1;
        else
            i = N.nmr;
        N.nmr = nn;
    }
    N.mr_gen[i]++;
    mr->key = (i << 8) | N.mr_gen[i];
    N.mrs[i] = mr;
    UNLOCK();
    info->lkey = info->rkey = mr->key;
    return 0;
}

/* Read the first number in file path into *v; return 0, or -1 if there
   is none ("max", no file). */
static int
read_num(const char *path, unsigned long long *v)
{
    FILE *f = fopen(path, "re");
    int n;
    if (f == NULL)
        return -1;
    n = fscanf(f, "%llu", v);
    fclose(f);
    return n == 1 ? 0 : -1;
}

/* The smallest memory limit of the process's memory cgroup and its
   ancestors (cgroup v2 memory.max, v1 memory.limit_in_bytes);
   ULLONG_MAX if none. */
static unsigned long long
cgroup_mem_limit(void)
{
    unsigned long long lim = ULLONG_MAX, v;
    char line[512], v1[1024] = "", v2[1024] = "", *path, *slash;
    const char *file;
    size_t root;
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return lim;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *c = strchr(line, ':'), *d = c ? strchr(c + 1, ':') : NULL;
        if (d == NULL)
            continue;
        line[strcspn(line, "\n")] = 0;
        *d = 0;
        if (strcmp(line, "0") == 0 && c[1] == 0)            /* v2 */
            snprintf(v2, sizeof(v2), "/sys/fs/cgroup%s", d + 1);
        else if (strstr(c + 1, "memory") != NULL)          /* v1 */
            snprintf(v1, sizeof(v1), "/sys/fs/cgroup/memory%s", d + 1);
    }
    fclose(f);
    /* v1's memory controller if it has one (a hybrid layout), else v2 */
    path = v1[0] ? v1 : v2;
    file = v1[0] ? "memory.limit_in_bytes" : "memory.max";
    root = strlen(v1[0] ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup");
    while (path[0]) {           /* the cgroup, then each ancestor */
        char fp[1100];
        snprintf(fp, sizeof(fp), "%s/%s", path, file);
        if (read_num(fp, &v) == 0 && v < lim)
            lim = v;
        slash = strrchr(path, '/');
        if (slash == NULL || (size_t)(slash - path) < root)
            break;
        *slash = 0;
    }
    return lim;
}

/* The memory the process can have backed: RAM and swap, the memory
   cgroup's limit (and swap); *as_left: the address space RLIMIT_AS leaves
   (ULLONG_MAX: no limit). */
static unsigned long long
mem_backable(unsigned long long *as_left)
{
    unsigned long long lim = ULLONG_MAX, swap = 0, cg, vm;
    struct sysinfo si;
    struct rlimit rl;
    if (sysinfo(&si) == 0) {
        swap = (unsigned long long)si.totalswap * si.mem_unit;
        lim = (unsigned long long)si.totalram * si.mem_unit + swap;
    }
    cg = cgroup_mem_limit();
    if (cg < lim && cg + swap < lim)
        lim = cg + swap;
    *as_left = ULLONG_MAX;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        if (read_num("/proc/self/statm", &vm) < 0)
            vm = 0;
        vm *= (unsigned long long)sysconf(_SC_PAGESIZE);
        *as_left = rl.rlim_cur > vm ? rl.rlim_cur - vm : 0;
    }
    return lim;
}

/* Parse one line of /proc/self/maps into *m (its name "" for anonymous
   memory).  0, or -1 if it is not such a line. */
int
fab_maps_parse(const char *line, struct maps_line *m)
{
    unsigned long long start, end;
    m->name[0] = 0;
    if (sscanf(line, "%llx-%llx %7s %*s %*s %llu %4095s", &start, &end,
               m->perms, &m->ino, m->name) < 4)
        return -1;
    m->start = (uintptr_t)start;
    m->end = (uintptr_t)end;
    return 0;
}

/* The mapping of this process holding addr, into *m.  0, or -1 if there
   is none (or /proc/self/maps cannot be read). */
int
fab_maps_find(uintptr_t addr, struct maps_line *m)
{
    char line[4096];
    int rc = -1;
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    while (rc < 0 && fgets(line, sizeof(line), f) != NULL)
        if (fab_maps_parse(line, m) == 0 && m->start <= addr &&
            addr < m->end)
            rc = 0;
    fclose(f);
    return rc;
}

/* The kernel's PROCMAP_QUERY (Linux 6.11; uapi linux/fs.h, which older
   headers lack): the mapping holding an address, from an ioctl on
   /proc/self/maps, without the text of all mappings. */
struct vma_query {
    uint64_t size, flags, addr;         /* in */
    uint64_t start, end, vflags;        /* out: the mapping */
    uint64_t page_size, offset, inode;
    uint32_t dev_major, dev_minor;
    uint32_t name_size, build_id_size;  /* in/out (0: not wanted) */
    uint64_t name_addr, build_id_addr;  /* in */
};
#define VMA_QUERY _IOWR('f', 17, struct vma_query)
#define VMA_READABLE 1
#define VMA_WRITABLE 2

/* Check one mapping's permissions (r, w as in /proc/self/maps): 0, or -1
   with *what set. */
static int
perms_ok(int r, int w, int write, const char **what)
{
    if (write && !w) {
        *what = "not writable";
        return -1;
    }
    if (!write && !r) {
        *what = "not readable";
        return -1;
    }
    return 0;
}

/* range_mapped by PROCMAP_QUERY: 0 or -1 as range_mapped (*pos the first
   address not checked), or -2 if the kernel has no such query. */
static int
range_query(uintptr_t *pos, uintptr_t e, int write, const char **what)
{
    struct vma_query q;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), rc = 0;
    if (fd < 0)
        return -2;
    while (rc == 0 && *pos < e) {
        memset(&q, 0, sizeof(q));
        q.size = sizeof(q);
        q.addr = *pos;
        if (ioctl(fd, VMA_QUERY, &q) != 0)
            rc = errno == ENOENT ? -1 : -2;     /* a hole, or no query */
        else if (q.start > *pos || q.end <= *pos)
            rc = -1;
        else if (perms_ok((q.vflags & VMA_READABLE) != 0,
                          (q.vflags & VMA_WRITABLE) != 0, write, what) < 0)
            rc = -1;
        else
            *pos = (uintptr_t)q.end;
    }
    close(fd);
    return rc;
}

/* Is every page of [addr, addr + len) mapped, readable, and writable if
   write is set?  What the kernel's ib_umem_get pins (without
   FOLL_FORCE): 0, or -1 with *bad the first page that is not and *what
   saying why ("not mapped", "not writable", "not readable"). */
static int
range_mapped(uintptr_t addr, size_t len, int write, uintptr_t *bad,
             const char **what)
{
    char line[4096];
    struct maps_line m;
    uintptr_t pos = addr & ~(uintptr_t)4095, e = addr + len;
    FILE *f;
    int rc;
    *what = "not mapped";
    rc = range_query(&pos, e, write, what);
    if (rc == -2) {             /* an older kernel: the text */
        pos = addr & ~(uintptr_t)4095;
        *what = "not mapped";
        if ((f = fopen("/proc/self/maps", "re")) == NULL)
            return 0;           /* cannot tell: the pages are used as is */
        while (pos < e && fgets(line, sizeof(line), f) != NULL) {
            if (fab_maps_parse(line, &m) < 0 || m.end <= pos)
                continue;
            if (m.start > pos || perms_ok(m.perms[0] == 'r',
                                          m.perms[1] == 'w', write,
                                          what) < 0)
                break;          /* a hole, or the permissions */
            pos = m.end;
        }
        fclose(f);
        rc = pos >= e ? 0 : -1;
    }
    *bad = pos < addr ? addr : pos;
    return rc;
}

/* What UCX mapped at addr: 1 a SysV segment (its id in *shmid), 0
   anonymous memory (mmap), -1 anything else or not found. */
int
fab_mem_kind(const void *addr, int *shmid)
{
    struct maps_line m;
    /* (anonymous mappings may have merged with a neighbour) */
    if (fab_maps_find((uintptr_t)addr, &m) < 0)
        return -1;
    if (strncmp(m.name, "/SYSV", 5) == 0 && m.ino <= INT32_MAX &&
        m.start == (uintptr_t)addr) {
        *shmid = (int)m.ino;    /* a SysV segment's inode is its id */
        return 1;
    }
    return m.name[0] == 0 && m.ino == 0 ? 0 : -1;
}

/* Make the SysV segment shmid, just created by this process and attached
   once (here), private: mode 0600 instead of UCX's 0660.  Return 0, or -1
   if it cannot be, or if another process attached it in the meantime. */
int
fab_shm_private(int shmid, size_t length)
{
    struct shmid_ds ds;
    if (shmctl(shmid, IPC_STAT, &ds) < 0 || ds.shm_cpid != getpid() ||
        ds.shm_segsz < length)
        return -1;
    ds.shm_perm.mode = (ds.shm_perm.mode & ~0777u) | 0600;
    if (shmctl(shmid, IPC_SET, &ds) < 0 || shmctl(shmid, IPC_STAT, &ds) < 0)
        return -1;
    return (ds.shm_perm.mode & 0777) == 0600 && ds.shm_nattch == 1 ? 0 : -1;
}

/* PD.alloc_mr memory: UCX allocates it (shared memory a same-host peer
   can map: the one-sided fast path).  UCX is asked only for what max_mr_size
   allows and memory can back (it would otherwise fall back to a POSIX
   segment and write every byte of it); only SysV segments (made private
   to the user) or anonymous memory are used (ALLOC_PRIO at init), both
   zero-filled by the kernel, so no page is touched here. */
/* UCX allocates len bytes for u (ucp_mem_map ALLOCATE: u->memh), and
   tells where (*a: address and length).  0; -1 if UCX refused (*s);
   -2 if what it gave cannot be queried or is not page-aligned (unmapped
   again). */
int
fab_umem_alloc(struct umem *u, size_t len, ucp_mem_attr_t *a,
               ucs_status_t *s)
{
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = NULL;
    mp.length = len;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    *s = U.mem_map(N.uctx, &mp, &u->memh);
    if (*s != UCS_OK)
        return -1;
    memset(a, 0, sizeof(*a));
    a->field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    if (U.mem_query(u->memh, a) != UCS_OK ||
        ((uintptr_t)a->address & 4095) != 0 || a->length < len) {
        U.mem_unmap(N.uctx, u->memh);
        return -2;
    }
    return 0;
}

/* u's packed rkey (kept if it fits the key page), and u on the node's
   list (N.lock not held). */
void
fab_umem_add(struct umem *u)
{
    void *rbuf = NULL;
    size_t rlen = 0;
    if (U.rkey_pack(N.uctx, u->memh, &rbuf, &rlen) == UCS_OK) {
        if (rlen <= SH_RKEY_MAX && (u->rkey = malloc(rlen)) != NULL) {
            memcpy(u->rkey, rbuf, rlen);
            u->rkey_len = rlen;
        }
        U.rkey_buffer_release(rbuf);
    }
    LOCK();
    u->next = N.umems;
    N.umems = u;
    UNLOCK();
}

/* u off the node's list (N.lock held). */
void
fab_umem_unlink(struct umem *u)
{
    struct umem **pp;
    for (pp = &N.umems; *pp; pp = &(*pp)->next)
        if (*pp == u) {
            *pp = u->next;
            break;
        }
}

/* UCX unmaps u's memory (N.lock not held: its hooks run); u is freed. */
void
fab_umem_free(struct umem *u)
{
    U.mem_unmap(N.uctx, u->memh);
    free(u->rkey);
    free(u);
}

int
fab_alloc_mr_mem(void *pd, size_t length, void **mem, void **cookie,
                 struct pyrdma_status *st)
{
    ucp_mem_attr_t a;
    struct umem *u;
    ucs_status_t s;
    unsigned long long can, as_left, held = 0;
    int kind, rc, shmid = -1;
    (void)pd;
    if (length > MAX_MR_SIZE)
        return pyrdma_fail(st, ENOMEM, "ibv_reg_mr", "alloc_mr(): %zu bytes "
                           "is more than max_mr_size (%llu)", length,
                           MAX_MR_SIZE);
    /* what a NIC would pin: the live alloc_mr memory of this process
       holds part of what memory can back */
    can = mem_backable(&as_left);
    LOCK();
    for (u = N.umems; u != NULL; u = u->next)
        held += u->len;
    UNLOCK();
    if (length > as_left || length > can || held > can - length)
        return pyrdma_fail(st, ENOMEM, "mmap", "alloc_mr(): %zu bytes "
                           "cannot be backed: RAM and swap or the memory "
                           "cgroup allow %llu (alloc_mr memory holds %llu), "
                           "RLIMIT_AS leaves %llu", length, can, held,
                           as_left);
    u = calloc(1, sizeof(*u));
    if (u == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    rc = fab_umem_alloc(u, length, &a, &s);
    if (rc < 0) {
        free(u);
        if (rc == -1)
            return ucs_fail(st, s, "ucp_mem_map", "alloc_mr()");
        return pyrdma_fail(st, ENOMEM, "ucp_mem_map", "alloc_mr(): UCX "
                           "gave no page-aligned memory");
    }
    u->addr = a.address;
    u->len = length;
    u->maplen = (a.length + 4095) & ~(size_t)4095;
    kind = fab_mem_kind(u->addr, &shmid);
    if (kind == 1 && fab_shm_private(shmid, length) < 0) {
        fab_umem_free(u);
        return pyrdma_fail(st, EACCES, "shmctl", "alloc_mr(): could not make "
                           "the shared memory segment private (mode 0600)");
    }
    if (kind < 0)
        memset(u->addr, 0, length);     /* not known to be zero-filled */
    fab_umem_add(u);
    *mem = u->addr;
    *cookie = u;
    return 0;
}

/* Move the mapping of len bytes at from to to (replacing what is there),
   with the system call itself: UCX's memory hooks intercept mremap(3)
   and do not pass a new address on.  to, or MAP_FAILED. */
void *
fab_raw_mremap(void *from, size_t len, void *to)
{
    long r = syscall(SYS_mremap, from, len, len,
                     MREMAP_MAYMOVE | MREMAP_FIXED, to);
    return r == -1 ? MAP_FAILED : (void *)r;
}

/* The last view of alloc_mr memory is gone and its MR is deregistered. */
void
fab_free_mr_mem(void *cookie)
{
    struct umem *u = cookie;
    LOCK();
    fab_umem_unlink(u);
    if (u->shadow != NULL) {
        /* UCX's own mapping goes back where UCX unmaps it (in place of
           the private copy) */
        if (fab_raw_mremap(u->shadow, u->maplen, u->addr) == MAP_FAILED)
            munmap(u->shadow, u->maplen);
        u->shadow = NULL;
    }
    UNLOCK();
    fab_umem_free(u);
}

/* An initiator is still inside a one-sided op on memory u after its MR
   was deregistered and the wait for it ran out (stopped with SIGSTOP, or
   descheduled for a second, in the middle of a large copy): it writes or
   reads through its own mapping of UCX's shared memory, which only
   ending the sharing can stop.  So this process's view of u becomes a
   private copy (no byte an initiator writes from now on lands in it, and
   no read sees what the owner writes from now on), every other MR in u
   leaves the key page (they go on through the active-message path, into
   the private copy), and UCX's mapping moves aside until free_mr_mem.
   N.lock held (the responder touches user memory only under it).
   0 or -1 (then nothing changed but the withdrawals). */
static int
mem_revoke(struct umem *u)
{
    uint8_t *copy, *aside;
    uint32_t i;

    /* (adopted memory the program no longer has at addr: what is there
       now is not u's, and the program does not see u's pages) */
    if (u->shadow != NULL || fab_adopt_moved(u))
        return 0;
    for (i = 1; i < N.nmr && i < SH_MR; i++) {
        struct umr *m = N.mrs[i];
        if (m != NULL && m->umem == u && m->shared) {
            __atomic_store_n(&N.sh->mr[i].key, 0, __ATOMIC_SEQ_CST);
            m->shared = 0;
        }
    }
    copy = mmap(NULL, u->maplen, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    aside = mmap(NULL, u->maplen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
    if (copy == MAP_FAILED || aside == MAP_FAILED) {
        if (copy != MAP_FAILED)
            munmap(copy, u->maplen);
        if (aside != MAP_FAILED)
            munmap(aside, u->maplen);
        return -1;
    }
    memcpy(copy, u->addr, u->maplen);
    /* the shared pages move aside (into the reservation), the copy takes
       their place: a few microseconds in which addr is unmapped, under
       N.lock (Python code runs under the GIL, held by the caller) */
    if (fab_raw_mremap(u->addr, u->maplen, aside) == MAP_FAILED) {
        munmap(copy, u->maplen);
        munmap(aside, u->maplen);
        return -1;
    }
    if (fab_raw_mremap(copy, u->maplen, u->addr) == MAP_FAILED) {
        /* put the shared pages back: the owner keeps its memory */
        fab_raw_mremap(aside, u->maplen, u->addr);
        munmap(copy, u->maplen);
        return -1;
    }
    u->shadow = aside;
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_revoked, 1, __ATOMIC_RELAXED);
    return 0;
}

/* dereg_mr of an MR in this process's own memory ran out of patience
   with an initiator still counted inside an op on it (stopped, or
   descheduled, between its checks and its copy).  Its copy is a
   process_vm_writev/readv that has not started or is running: the
   kernel checks the right to it when the call starts, and a call never
   stops halfway (SIGSTOP takes effect when it returns).  So: make this
   process non-dumpable, which makes every cross-memory attach to it
   from a process of the same user fail from now on (EPERM); then wait
   until the initiators with a count on one of our QPs are stopped, gone
   or out (those running may be inside a call: it ends).  Cross-memory
   attach to this process stays closed (cma_open 0): its MRs go on
   through the active-message path.  Not dumpable also means no core
   dumps and no ptrace by the same user (docs/fabric.rst). */
/* Is an initiator counted inside an op on one of our QPs alive, and if
   so, running (it may be inside a copy: 2) or stopped (1)?  0: none, or
   all dead. */
static int
cma_initiators(void)
{
    uint32_t i;
    int worst = 0;
    LOCK();
    for (i = 0; i < N.qp_hi && i < MAX_QP && worst < 2; i++) {
        struct uqp *q = N.qps[i];
        char c;
        if (q == NULL || q->peer == NULL || q->peer->pid <= 0 ||
            __atomic_load_n(&N.sh->qp[q->qpn & (MAX_QP - 1)].inflight,
                            __ATOMIC_SEQ_CST) == 0)
            continue;
        c = fab_pid_state(q->peer->pid);
        if (c == 'T' || c == 't')
            worst = worst > 1 ? worst : 1;
        else if (c != 0 && c != 'Z')
            worst = 2;
    }
    UNLOCK();
    return worst;
}

static void
cma_fence(void)
{
    uint64_t t0 = now_ns();
    uint32_t i;

    if (cma_initiators() == 0)
        return;                 /* killed inside an op: nothing to fence */
    __atomic_store_n(&N.sh->cma_open, 0, __ATOMIC_SEQ_CST);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    __atomic_fetch_add(&N.sh->st_cma_fenced, 1, __ATOMIC_RELAXED);
    for (;;) {
        int running = cma_initiators() == 2;
        LOCK();
        /* the MRs that are still published may take new initiators:
           withdraw every one in our own memory (they go on through the
           active-message path) */
        for (i = 1; i < N.nmr && i < SH_MR; i++) {
            struct umr *m = N.mrs[i];
            if (m != NULL && m->shared && m->umem == NULL) {
                __atomic_store_n(&N.sh->mr[i].key, 0, __ATOMIC_SEQ_CST);
                m->shared = 0;
            }
        }
        UNLOCK();
        if (!running || now_ns() - t0 > SH_WAIT_NS)
            return;
        usleep(1000);
    }
}

/* Publish mr in the key page if it lies in UCX-allocated memory, or in
   this process's own memory and cross-memory attach is open (N.lock
   held). */
static void
sh_mr_publish(struct umr *mr)
{
    struct umem *u;
    struct sh_mr *e;
    uint32_t idx = mr->key >> 8;
    if (N.sh == NULL || idx >= SH_MR)
        return;
    for (u = N.umems; u; u = u->next)
        if (!u->detached && mr->addr >= u->addr && mr->len <= u->len &&
            (size_t)(mr->addr - u->addr) <= u->len - mr->len)
            break;
    mr->umem = u;
    if (u == NULL) {
        /* the program's own memory: reachable by this process's own
           QPs (fab_rk_fetch), and by cross-memory attach (WRITE and
           READ; atomics need this process) while cma_open, which other
           initiators check */
        if (!(mr->access & (IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ)) || mr->len == 0)
            return;
    }
    else {
        if (u->xaddr != NULL)
            u->refs++;
        if (u->rkey == NULL || u->shadow != NULL)
            return;             /* no rkey, or revoked (mem_revoke) */
    }
    e = &N.sh->mr[idx];
    __atomic_store_n(&e->key, 0, __ATOMIC_SEQ_CST);
    e->access = mr->access;
    e->pd = (uint64_t)(uintptr_t)mr->pd;
    e->addr = (uint64_t)(uintptr_t)mr->addr;
    e->xaddr = (uint64_t)(uintptr_t)(u == NULL || u->xaddr == NULL ?
                                     mr->addr :
                                     u->xaddr + (mr->addr - u->addr));
    e->len = mr->len;
    if (u != NULL)
        memcpy(e->rkey, u->rkey, u->rkey_len);
    e->rkey_len = u != NULL ? (uint32_t)u->rkey_len : 0;
    __atomic_store_n(&e->key, mr->key, __ATOMIC_SEQ_CST);
    mr->shared = 1;
}

/* ------------------------------------------------------------------ */
/* the program's own memory, unmapped under an MR                      */

/* A NIC keeps the pages of an MR pinned: the program's munmap does not
   free them, and a peer's WRITE lands in them, never in memory mapped at
   that address later.  Adopted memory does the same (its segment stays
   the MR's: mr_at).  The program's other memory cannot be kept; so UCX's
   memory hooks (libucm, which intercept munmap, mmap over a range,
   mremap, shmat and shmdt, brk and madvise that discards pages) call
   own_unmapped before such memory goes, which marks the MRs in it gone
   (the responder and local work requests then refuse them: REM_ACCESS_ERR,
   LOC_PROT_ERR), withdraws them from the key page, and waits for the
   cross-memory-attach initiators and a landing of the responder that are
   inside them (as dereg_mr does). */

int fab_landing;
int fab_own_count;
__thread int fab_self_remap;

/* The watched MRs (fab_own_watch); own_lock is taken by the hook in any
   thread, so nothing that allocates or unmaps memory, nor any other
   lock, is taken under it. */
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static struct umr *own_list;
static int own_hooked;

/* Mark gone the watched MRs that overlap [s, e) and withdraw them from
   the key page (own_lock held): how many it marked; the key page indexes
   of those it withdrew into idx (at most max, *nidx of them). */
static int
own_mark_gone(uintptr_t s, uintptr_t e, uint32_t *idx, int max, int *nidx)
{
    struct umr *m;
    int marked = 0;
    *nidx = 0;
    for (m = own_list; m != NULL; m = m->own_next) {
        uintptr_t a = (uintptr_t)m->addr;
        uint32_t k = m->key, i = m->key >> 8;
        if (m->gone || a >= e || a + m->len <= s)
            continue;
        __atomic_store_n(&m->gone, 1, __ATOMIC_SEQ_CST);
        marked++;
        if (N.sh != NULL && i < SH_MR &&
            __atomic_compare_exchange_n(&N.sh->mr[i].key, &k, 0, 0,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
            && *nidx < max)
            idx[(*nidx)++] = i;
    }
    return marked;
}

/* libucm: memory of this process is about to be unmapped (or replaced,
   moved, discarded).  Called in the thread that does it, before. */
static void
own_unmapped(ucm_event_type_t type, ucm_event_t *ev, void *arg)
{
    uintptr_t s = (uintptr_t)ev->vm_unmapped.address;
    uintptr_t e = s + ev->vm_unmapped.size;
    uint32_t idx[32];
    int n, i, marked, stuck = 0;
    (void)type;
    (void)arg;
    if (__atomic_load_n(&fab_own_count, __ATOMIC_RELAXED) == 0 ||
        fab_self_remap || e <= s)
        return;
    pthread_mutex_lock(&own_lock);
    marked = own_mark_gone(s, e, idx, 32, &n);
    pthread_mutex_unlock(&own_lock);
    if (marked == 0)
        return;                 /* (no MR there: the usual case) */
    /* a landing begun before it saw the mark ends first (fab_land_begin) */
    while (__atomic_load_n(&fab_landing, __ATOMIC_SEQ_CST))
        sched_yield();
    for (i = 0; i < n; i++)
        stuck |= fab_sh_quiesce(&N.sh->mr[idx[i]].inflight);
    if (stuck)
        cma_fence();            /* as dereg_mr */
}

static void
own_hook(void)
{
    ucs_status_t (*set)(int, int, ucm_event_callback_t, void *);
    *(void **)&set = dlsym(U.dl, "ucm_set_event_handler");
    own_hooked = set != NULL &&
                 set(UCM_EVENT_VM_UNMAPPED, 0, own_unmapped, NULL) == UCS_OK;
}

/* Watch mr, in the program's own memory, for unmapping (N.lock not
   held: the hooks are installed the first time).  Without UCX's hooks
   nothing is watched (docs/fabric.rst). */
static void
own_watch(struct umr *mr)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, own_hook);
    if (!own_hooked)
        return;
    pthread_mutex_lock(&own_lock);
    mr->own = 1;
    mr->own_next = own_list;
    own_list = mr;
    __atomic_fetch_add(&fab_own_count, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&own_lock);
}

static void
own_unwatch(struct umr *mr)
{
    struct umr **pp;
    if (!mr->own)
        return;
    pthread_mutex_lock(&own_lock);
    for (pp = &own_list; *pp != NULL; pp = &(*pp)->own_next)
        if (*pp == mr) {
            *pp = mr->own_next;
            __atomic_fetch_sub(&fab_own_count, 1, __ATOMIC_SEQ_CST);
            break;
        }
    pthread_mutex_unlock(&own_lock);
}

/* Make mr (in the key table, N.lock not held) reachable by the fast
   paths: adopt its memory where that is on, publish it in the key page,
   watch the program's own memory under it for unmapping. */
static void
mr_publish(struct umr *mr)
{
    pthread_mutex_lock(&fab_adopt_lock);
    fab_adopt_check(mr->addr, mr->len);
    if (fab_adopt_enabled() && N.sh != NULL && (mr->key >> 8) < SH_MR &&
        (mr->access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC)))
        fab_mem_adopt(mr->addr, mr->len);
    LOCK();
    sh_mr_publish(mr);
    UNLOCK();
    pthread_mutex_unlock(&fab_adopt_lock);
    if (mr->umem == NULL && mr->len > 0)
        own_watch(mr);
}

/* Check reg_mr's access flags and the memory under [addr, addr+length)
   as the kernel does when it pins it.  0, or -1 with st set. */
static int
mr_check_new(const char *fn, void *addr, size_t length, unsigned int access,
             struct pyrdma_status *st)
{
    const char *what;
    uintptr_t bad;
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE))
        return pyrdma_fail(st, EINVAL, fn, "remote write or atomic "
                           "access needs IBV_ACCESS_LOCAL_WRITE");
    /* the pages a NIC would pin, pinned as the kernel would (write
       access: writable pages only) */
    if (length > 0 &&
        range_mapped((uintptr_t)addr, length,
                     (access & (IBV_ACCESS_LOCAL_WRITE |
                                IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_ATOMIC |
                                IBV_ACCESS_MW_BIND)) != 0,
                     &bad, &what) < 0)
        return pyrdma_fail(st, EFAULT, fn, "the memory at %#lx "
                           "(of %#lx, %zu bytes) is %s", (unsigned long)bad,
                           (unsigned long)(uintptr_t)addr, length, what);
    return 0;
}

int
fab_reg_mr(void *pd, void *addr, size_t length, unsigned int access,
           void **out, struct pyrdma_mr_info *info,
           struct pyrdma_status *st)
{
    struct umr *mr;
    if (mr_check_new("ibv_reg_mr", addr, length, access, st) < 0)
        return -1;
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    mr->pd = pd;
    mr->addr = addr;
    mr->len = length;
    mr->access = access;
    if (mr_insert(mr, info, st) < 0) {
        free(mr);
        return -1;
    }
    mr_publish(mr);
    *out = mr;
    return 0;
}

/* Take mr out of the fast paths (its key page entry, the unmapping
   watch, adopted memory's use count) and wait for the one-sided
   initiators inside an op on it; mr stays in the key table, and the
   active-message path goes on seeing it (N.lock not held).  With drop,
   it leaves the key table first (dereg_mr). */
static void
mr_withdraw(struct umr *mr, int drop)
{
    struct sh_mr *e = NULL;
    own_unwatch(mr);
    LOCK();
    mr->own = 0;
    if (drop)
        N.mrs[mr->key >> 8] = NULL;
    if (mr->shared) {
        /* no new one-sided op can start; wait for those inside one */
        e = &N.sh->mr[mr->key >> 8];
        __atomic_store_n(&e->key, 0, __ATOMIC_SEQ_CST);
        mr->shared = 0;
    }
    UNLOCK();
    if (e != NULL && fab_sh_quiesce(&e->inflight)) {
        /* an initiator is still inside an op on it: fence it out */
        if (mr->umem == NULL)
            cma_fence();
        LOCK();
        if (mr->umem != NULL)
            mem_revoke(mr->umem);
        UNLOCK();
    }
    if (mr->umem != NULL && mr->umem->xaddr != NULL) {
        /* adopted memory: the last MR in it gives the pages back */
        struct umem *u = mr->umem;
        int last;
        pthread_mutex_lock(&fab_adopt_lock);
        LOCK();
        last = --u->refs == 0;
        UNLOCK();
        if (last)
            fab_mem_unadopt(u);
        pthread_mutex_unlock(&fab_adopt_lock);
    }
    mr->umem = NULL;
}

/* Windows bound to mr: as rxe (and the IB spec), neither dereg_mr nor
   rereg_mr while there are.  0, or -1 with st set. */
static int
mr_check_unbound(struct umr *mr, const char *fn, struct pyrdma_status *st)
{
    int n;
    LOCK();
    n = mr->nmw;
    UNLOCK();
    if (n > 0)
        return pyrdma_fail(st, EINVAL, fn, "%d memory window(s) are bound "
                           "to the MR", n);
    return 0;
}

int
fab_dereg_mr(void *vmr, struct pyrdma_status *st)
{
    struct umr *mr = vmr;
    if (mr_check_unbound(mr, "ibv_dereg_mr", st) < 0)
        return -1;
    mr_withdraw(mr, 1);
    free(mr);
    return 0;
}

/* rereg_mr's flags (IBV_REREG_MR_CHANGE_*) */
enum { RR_TRANSLATION = 1, RR_PD = 2, RR_ACCESS = 4 };

/* Re-register mr as the IB spec has it (deregister, register again,
   keep what did not change): a new PD, new access flags, a new range.
   The keys stay unless the range changes; then they take the next
   generation, and a peer's rkey of the old range fails (REM_ACCESS_ERR)
   instead of reaching the new one.  On an error mr stays as it was. */
int
fab_rereg_mr(void *vmr, int flags, void *pd, void *addr, size_t length,
             unsigned int access, struct pyrdma_mr_info *info,
             struct pyrdma_status *st)
{
    struct umr *mr = vmr;
    const char *fn = "ibv_rereg_mr";
    uint32_t idx = mr->key >> 8;
    if (flags == 0 || (flags & ~(RR_TRANSLATION | RR_PD | RR_ACCESS)))
        return pyrdma_fail(st, EINVAL, fn, "flags %#x", (unsigned)flags);
    if ((flags & RR_PD) && pd == NULL)
        return pyrdma_fail(st, EINVAL, fn, "no PD");
    if (!(flags & RR_TRANSLATION)) {
        addr = mr->addr;
        length = mr->len;
    }
    if (!(flags & RR_ACCESS))
        access = mr->access;
    if (mr_check_unbound(mr, fn, st) < 0 ||
        mr_check_new(fn, addr, length, access, st) < 0)
        return -1;
    mr_withdraw(mr, 0);
    LOCK();
    if (flags & RR_PD)
        mr->pd = pd;
    mr->access = access;
    if (flags & RR_TRANSLATION) {
        mr->addr = addr;
        mr->len = length;
        mr->gone = 0;
        N.mr_gen[idx]++;
        mr->key = (idx << 8) | N.mr_gen[idx];
    }
    UNLOCK();
    mr_publish(mr);
    info->lkey = info->rkey = mr->key;
    return 0;
}
