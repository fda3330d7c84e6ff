/* adopt.c - adopted user memory: reg_mr turns a program's own
   page-aligned private memory into UCX shared memory at the same address
   (mem_adopt), so that same-host peers reach it one-sided, and gives it
   back when the last MR in it is gone (mem_unadopt).  Stores other
   threads make meanwhile wait (userfaultfd); a child of fork() gets a
   private copy (fork handlers).  On by default; RDMA_UCX_ADOPT=0 turns
   it off.  docs/fabric.rst "Adopted
   user memory". */
#include "fabric.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif

/* Serializes mem_adopt and mem_unadopt (they call UCP, so N.lock cannot
   be held across them) with the publishing that takes a reference, and
   with fork() (the ranges a child must make private). */
pthread_mutex_t fab_adopt_lock = PTHREAD_MUTEX_INITIALIZER;

/* At most this many adopted ranges per process: each is a SysV segment,
   and a system has 4096 of them by default (kernel.shmmni) for everyone. */
#define ADOPT_MAX 256

/* Adopted ranges, for fork's child (fab_adopt_lock). */
static struct { uintptr_t s; size_t len; int shmid; } *ranges;
static size_t nranges, cap_ranges;
static int fork_pipe[2] = {-1, -1};

static int is_attach(uintptr_t s, size_t len, int shmid);

/* Adoption on unless RDMA_UCX_ADOPT=0. */
int
fab_adopt_enabled(void)
{
    return (int)FAB_SET_NUM(UCX_ADOPT);
}

/* 1 if this process has a kernel RDMA device open (/dev/infiniband/
   uverbsN: rdma-core, or UCX's own verbs transports).  Such a device
   may hold the physical pages of the program's memory (a registration
   pins them): replacing them would leave it with stale pages. */
static int
uverbs_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    char target[64];
    int found = 0;
    if (d == NULL)
        return 1;               /* cannot tell: assume so */
    while (!found && (de = readdir(d)) != NULL) {
        ssize_t n;
        if (de->d_name[0] == '.')
            continue;
        n = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = 0;
            found = strncmp(target, "/dev/infiniband/uverbs", 22) == 0;
        }
    }
    closedir(d);
    return found;
}

/* RDMA_UCX_DEBUG_ADOPT_WP (a test hook): "none" copies without
   protection (to show that the race test sees lost stores), "user" takes
   the unprivileged protection (user-mode stores only) even with the
   privilege for more. */
static int
debug_wp(const char *what)
{
    const char *e = FAB_SET_TEXT(UCX_DEBUG_ADOPT_WP);
    return e != NULL && strcmp(e, what) == 0;
}

/* A userfaultfd descriptor with the API features wanted, or -1. */
static int
uffd_with(uint64_t features)
{
    struct uffdio_api api;
    int fd = -1;
    if (!debug_wp("user"))
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        fd = (int)syscall(SYS_userfaultfd,
                          O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0)
        return -1;
    memset(&api, 0, sizeof(api));
    api.api = UFFD_API;
    api.features = features;
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Block every signal this thread can block (the old mask into *old):
   while it copies a range under userfaultfd's protection, a store into
   the range from this same thread (its signal handler's) would wait for
   the end of the protection, which only this thread can bring.  Signals
   that come meanwhile are delivered by signals_on. */
static void
signals_off(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, old);
}

static void
signals_on(const sigset_t *old)
{
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Write-protect [s, s + len) with userfaultfd: a store another thread
   makes to it waits until wp_end (its fault is retried then, against
   whatever is mapped there).  Private anonymous memory only (the kernel
   does not protect SysV segments this way).  The descriptor, or -1 if
   the kernel offers no such protection here (then the caller does not
   copy).  Unprivileged (vm.unprivileged_
   userfaultfd 0, no CAP_SYS_PTRACE) only user-mode stores wait: a system
   call writing into the range meanwhile fails with EFAULT. */
static int
wp_begin(uintptr_t s, size_t len)
{
    struct uffdio_register reg;
    struct uffdio_writeprotect wp;
    int fd = uffd_with(UFFD_FEATURE_PAGEFAULT_FLAG_WP |
                       UFFD_FEATURE_WP_UNPOPULATED);
    if (fd < 0) {
        /* an older kernel: no WP_UNPOPULATED */
        fd = uffd_with(UFFD_FEATURE_PAGEFAULT_FLAG_WP);
        if (fd < 0)
            return -1;
        /* populate it, so that every page has an entry to protect */
        for (uintptr_t p = s; p < s + len; p += 4096)
            (void)*(volatile const char *)p;
    }
    memset(&reg, 0, sizeof(reg));
    reg.range.start = s;
    reg.range.len = len;
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0)
        goto fail;
    memset(&wp, 0, sizeof(wp));
    wp.range.start = s;
    wp.range.len = len;
    wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
    if (ioctl(fd, UFFDIO_WRITEPROTECT, &wp) != 0)
        goto fail;
    return fd;
fail:
    close(fd);                  /* unregisters the range */
    return -1;
}

/* End wp_begin's protection: if the range still holds what was
   protected (replaced 0), lift the protection; then wake the stores that
   wait (they retry against what is mapped there now) and close. */
static void
wp_end(int fd, uintptr_t s, size_t len, int replaced)
{
    struct uffdio_range r = {s, len};
    if (fd == INT_MAX)
        return;                 /* debug_wp("none") */
    if (!replaced) {
        struct uffdio_writeprotect wp;
        memset(&wp, 0, sizeof(wp));
        wp.range = r;
        wp.mode = 0;            /* and wake */
        (void)ioctl(fd, UFFDIO_WRITEPROTECT, &wp);
    }
    (void)ioctl(fd, UFFDIO_WAKE, &r);
    close(fd);                  /* wakes any that are left */
}

/* fork(): the child gets a private copy of every adopted range (as with
   a NIC and a kernel that copies pinned pages for the child) before
   fork() returns in it; the parent's fork() returns after that, so the
   child sees the memory as it was when fork() was called. */
static void
fork_prepare(void)
{
    pthread_mutex_lock(&fab_adopt_lock);
    if (nranges > 0 && pipe2(fork_pipe, O_CLOEXEC) != 0)
        fork_pipe[0] = fork_pipe[1] = -1;
}

static void
fork_parent(void)
{
    if (fork_pipe[0] >= 0) {
        struct pollfd pf = {fork_pipe[0], POLLIN, 0};
        char c;
        close(fork_pipe[1]);
        /* the child writes a byte once it is done, or exits (EOF); a
           child stopped before that is not waited for longer than 10 s */
        while (poll(&pf, 1, 10000) < 0 && errno == EINTR)
            ;
        if (pf.revents)
            (void)!read(fork_pipe[0], &c, 1);
        close(fork_pipe[0]);
        fork_pipe[0] = fork_pipe[1] = -1;
    }
    pthread_mutex_unlock(&fab_adopt_lock);
}

static void
fork_child(void)
{
    size_t i;
    for (i = 0; i < nranges; i++) {
        void *s = (void *)ranges[i].s;
        size_t len = ranges[i].len;
        void *copy;
        if (!is_attach(ranges[i].s, len, ranges[i].shmid))
            continue;           /* the program unmapped it meanwhile */
        copy = mmap(NULL, len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (copy == MAP_FAILED)
            continue;           /* stays shared with the parent */
        memcpy(copy, s, len);
        if (fab_raw_mremap(copy, len, s) == MAP_FAILED)
            munmap(copy, len);
    }
    nranges = 0;                /* the child adopted nothing */
    if (fork_pipe[1] >= 0) {
        (void)!write(fork_pipe[1], "", 1);
        close(fork_pipe[1]);
        close(fork_pipe[0]);
        fork_pipe[0] = fork_pipe[1] = -1;
    }
    pthread_mutex_unlock(&fab_adopt_lock);
}

static void
install_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void reclaim(void);

static void
range_add(uintptr_t s, size_t len, int shmid)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_fork_handlers);
    if (nranges == cap_ranges) {
        size_t n = cap_ranges ? cap_ranges * 2 : 16;
        void *p = realloc(ranges, n * sizeof(*ranges));
        if (p == NULL)
            return;
        ranges = p;
        cap_ranges = n;
    }
    ranges[nranges].s = s;
    ranges[nranges].len = len;
    ranges[nranges].shmid = shmid;
    nranges++;
}

static void
range_del(uintptr_t s, int shmid)
{
    size_t i;
    for (i = 0; i < nranges; i++)
        if (ranges[i].s == s && ranges[i].shmid == shmid) {
            ranges[i] = ranges[--nranges];
            return;
        }
}

/* 1 if [s, e) is wholly private, anonymous, read-write memory (no file,
   SysV segment, hugetlbfs or device mapping: those keep the AM path). */
static int
anon_private(uintptr_t s, uintptr_t e)
{
    char line[4096];
    struct maps_line m;
    uintptr_t pos = s;
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return 0;
    while (pos < e && fgets(line, sizeof(line), f) != NULL) {
        if (fab_maps_parse(line, &m) < 0)
            break;
        if (m.end <= pos)
            continue;
        if (m.start > pos || m.perms[0] != 'r' || m.perms[1] != 'w' ||
            m.perms[3] != 'p' || m.ino != 0 ||
            (m.name[0] != 0 && strcmp(m.name, "[heap]") != 0))
            break;
        pos = m.end;
    }
    fclose(f);
    return pos >= e;
}

/* 1 if the mapping at s covers [s, s + len) and is SysV segment shmid. */
static int
is_attach(uintptr_t s, size_t len, int shmid)
{
    struct maps_line m;
    return fab_maps_find(s, &m) == 0 && m.start == s && m.end >= s + len &&
           m.ino == (unsigned)shmid && strncmp(m.name, "/SYSV", 5) == 0;
}

/*
 * Adopt the user memory [addr, addr + len) (fab_adopt_lock held, N.lock
 * not): the whole pages holding it become a SysV segment UCX allocated,
 * so that MRs in them take the one-sided fast path.  UCX allocates the
 * segment (ucp_mem_map ALLOCATE, as alloc_mr) and maps it at xaddr; the
 * user's pages are write-protected (wp_begin), copied into it, then the
 * segment is attached a second time at the user's address with SHM_REMAP,
 * which replaces the user's pages in one step (the process keeps its
 * virtual addresses and its data; stores that waited meanwhile land in
 * the segment).  The key page publishes, for rkey_ptr, the address UCX
 * knows (xaddr + offset).  Not adopted (the MR keeps cross-memory attach
 * or the active-message path): a range that is not whole pages (other
 * data in its first or last page would move into shared memory), memory
 * that is not private anonymous, a range overlapping other UCX or adopted
 * memory, a segment that is not SysV or not exactly the pages, a process
 * with a kernel RDMA device open (uverbs_open), no userfaultfd, ADOPT_MAX
 * ranges adopted already.
 */
void
fab_mem_adopt(uint8_t *addr, size_t len)
{
    uintptr_t s = (uintptr_t)addr;
    uintptr_t e = s + len;
    ucp_mem_attr_t a;
    ucs_status_t st;
    struct umem *u;
    struct shmid_ds ds;
    sigset_t sigs;
    int shmid = -1, wp;

    reclaim();
    if (len == 0 || e < s || (s & 4095) != 0 || (len & 4095) != 0 ||
        nranges >= ADOPT_MAX)
        return;
    LOCK();
    for (u = N.umems; u != NULL; u = u->next)
        if (!u->detached && (uintptr_t)u->addr < e &&
            s < (uintptr_t)u->addr + u->maplen)
            break;              /* contained (already fast) or overlap */
    UNLOCK();
    if (u != NULL || !anon_private(s, e) || uverbs_open())
        return;
    u = calloc(1, sizeof(*u));
    if (u == NULL)
        return;
    if (fab_umem_alloc(u, len, &a, &st) < 0) {
        free(u);
        return;
    }
    if (fab_mem_kind(a.address, &shmid) != 1 ||
        shmctl(shmid, IPC_STAT, &ds) != 0 ||
        ((ds.shm_segsz + 4095) & ~(size_t)4095) != len ||
        fab_shm_private(shmid, len) < 0)
        goto fail;
    /* the segment's pages, allocated in one call rather than one fault
       each during the copy (while other threads' stores wait) */
    (void)madvise(a.address, len, MADV_POPULATE_WRITE);
    /* a store into the range from this thread (a signal handler's) would
       wait for this thread's own wp_end: no signal until then */
    signals_off(&sigs);
    wp = debug_wp("none") ? INT_MAX : wp_begin(s, len);
    if (wp < 0) {
        signals_on(&sigs);
        goto fail;
    }
    memcpy(a.address, (void *)s, len);
    /* the user's pages are replaced by the segment (one mmap_lock'ed
       step); UCX's memory hooks see the shmat and drop what they cached
       for the range */
    fab_self_remap = 1;         /* (the same data: MRs over it go on) */
    if (shmat(shmid, (void *)s, SHM_REMAP) != (void *)s) {
        fab_self_remap = 0;
        wp_end(wp, s, len, 0);
        signals_on(&sigs);
        goto fail;
    }
    fab_self_remap = 0;
    wp_end(wp, s, len, 1);
    signals_on(&sigs);
    u->addr = (uint8_t *)s;
    u->len = len;
    u->maplen = len;
    u->xaddr = a.address;
    u->shmid = shmid;
    range_add(s, len, shmid);
    fab_umem_add(u);
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_adopted, 1, __ATOMIC_RELAXED);
    return;
fail:
    fab_umem_free(u);
}

/* A registration of [addr, addr + len) is about to be matched against
   adopted memory (fab_adopt_lock held, N.lock not).  Adopted memory
   there that is no longer what the program has mapped at its address
   (it unmapped the range, or mapped other memory over it, while an MR
   still held the segment) is detached: the MRs in it keep the segment (a
   NIC's pinned pages), and no new MR is matched to it, so that the new
   memory is registered (adopted) afresh.  Memory that was revoked
   (mem_revoke: a private copy at addr) is left as it is. */
void
fab_adopt_check(const uint8_t *addr, size_t len)
{
    uintptr_t s = (uintptr_t)addr, e = s + len;
    struct umem *cand[16], *u;
    size_t n = 0, i;

    LOCK();
    for (u = N.umems; u != NULL && n < 16; u = u->next)
        if (u->xaddr != NULL && !u->detached && u->shadow == NULL &&
            (uintptr_t)u->addr < e && s < (uintptr_t)u->addr + u->maplen)
            cand[n++] = u;
    UNLOCK();
    for (i = 0; i < n; i++) {
        u = cand[i];
        if (is_attach((uintptr_t)u->addr, u->maplen, u->shmid))
            continue;
        LOCK();
        u->detached = 1;
        UNLOCK();
    }
}

/* 1 if u is adopted memory that is no longer what the program has
   mapped at its address (then it is detached, as by fab_adopt_check);
   0 for any other memory.  Either lock held. */
int
fab_adopt_moved(struct umem *u)
{
    if (u->xaddr == NULL || u->shadow != NULL)
        return 0;
    if (!u->detached &&
        is_attach((uintptr_t)u->addr, u->maplen, u->shmid))
        return 0;
    u->detached = 1;
    return 1;
}

/* Adopted memory with no MR left whose range the program unmapped or
   replaced (fab_adopt_lock held, N.lock not): UCX's mapping of it goes,
   and with it the segment's pages (nothing else attaches them). */
static void
reclaim(void)
{
    struct umem *idle[64], *u, *gone = NULL;
    int kept[64] = {0};
    size_t n = 0, i;
    char line[4096];
    struct maps_line m;
    FILE *f;

    /* the candidates (fab_adopt_lock keeps them: only mem_unadopt and
       reclaim free adopted memory, and an MR over one would need that
       lock too) */
    LOCK();
    for (u = N.umems; u != NULL && n < 64; u = u->next)
        if (u->xaddr != NULL && u->refs == 0 && u->shadow == NULL)
            idle[n++] = u;
    UNLOCK();
    if (n == 0 || (f = fopen("/proc/self/maps", "re")) == NULL)
        return;                 /* (cannot tell: keep them) */
    while (fgets(line, sizeof(line), f) != NULL) {
        if (fab_maps_parse(line, &m) < 0 ||
            strncmp(m.name, "/SYSV", 5) != 0)
            continue;
        for (i = 0; i < n; i++)
            if (m.start == (uintptr_t)idle[i]->addr &&
                m.end >= (uintptr_t)idle[i]->addr + idle[i]->maplen &&
                m.ino == (unsigned)idle[i]->shmid)
                kept[i] = 1;
    }
    fclose(f);
    LOCK();
    for (i = 0; i < n; i++)
        if (!kept[i]) {
            fab_umem_unlink(idle[i]);
            range_del((uintptr_t)idle[i]->addr, idle[i]->shmid);
            idle[i]->next = gone;
            gone = idle[i];
        }
    UNLOCK();
    while (gone != NULL) {
        u = gone->next;
        fab_umem_free(gone);
        gone = u;
    }
}

/* Giving adopted pages back (give_back): the user's range becomes
   private anonymous memory again with the segment's contents.  Stores
   must not be lost, and userfaultfd cannot protect the SysV mapping they
   go to, so the range is replaced at once by empty private memory
   registered for missing-page faults (mremap of a registered mapping:
   UFFD_FEATURE_EVENT_REMAP, whose event a helper thread reads, since
   mremap waits for that), and filled from the segment (UFFDIO_COPY,
   which peers no longer write: the MR is gone and quiesced).  A thread
   that touches a page before it is filled waits in its fault until the
   filling reaches it, then goes on with the page's data. */
struct giveback {
    int fd, stop[2];
    uintptr_t s;
    size_t len;
    const uint8_t *src;
};

/* Fill [a, a + n) of g's range from the segment, skipping a page that is
   there already.  0, or -1 if the kernel refused. */
static int
fill(const struct giveback *g, uintptr_t a, size_t n)
{
    while (n > 0) {
        struct uffdio_copy c;
        memset(&c, 0, sizeof(c));
        c.dst = a;
        c.src = (uintptr_t)(g->src + (a - g->s));
        c.len = n;
        if (ioctl(g->fd, UFFDIO_COPY, &c) == 0)
            return 0;
        if (c.copy > 0) {
            a += (size_t)c.copy;
            n -= (size_t)c.copy;
        }
        else if (errno == EEXIST) {
            a += 4096;
            n -= 4096;
        }
        else if (errno != EAGAIN)
            return -1;
    }
    return 0;
}

static void *
giveback_events(void *arg)
{
    struct giveback *g = arg;
    struct pollfd pf[2] = {{g->fd, POLLIN, 0}, {g->stop[0], POLLIN, 0}};
    for (;;) {
        struct uffd_msg m;
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[1].revents)
            break;
        /* UFFD_EVENT_REMAP: reading it lets the mremap return (until
           then the kernel refuses UFFDIO_COPY with EAGAIN, so this
           thread serves no fault itself); UFFD_EVENT_PAGEFAULT: the
           thread that faulted waits until fill reaches its page, whose
           UFFDIO_COPY wakes it */
        (void)!read(g->fd, &m, sizeof(m));
    }
    return NULL;
}

/* 1 if u's range is private memory again with the segment's contents,
   0 if it is still the segment (nothing changed). */
static int
give_back(struct umem *u)
{
    struct giveback g;
    struct uffdio_register reg;
    pthread_t th;
    sigset_t old;
    void *t;
    int ok = 0;

    g.s = (uintptr_t)u->addr;
    g.len = u->maplen;
    g.src = u->xaddr;
    g.stop[0] = g.stop[1] = -1;
    if (debug_wp("none")) {
        /* the test hook: copy and replace, unprotected */
        t = mmap(NULL, g.len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (t == MAP_FAILED)
            return 0;
        memcpy(t, u->addr, g.len);
        if (fab_raw_mremap(t, g.len, u->addr) != MAP_FAILED)
            return 1;
        munmap(t, g.len);
        return 0;
    }
    if ((g.fd = uffd_with(UFFD_FEATURE_EVENT_REMAP)) < 0)
        return 0;
    t = MAP_FAILED;
    if (pipe2(g.stop, O_CLOEXEC) != 0)
        goto out;
    t = mmap(NULL, g.len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        goto out;
    memset(&reg, 0, sizeof(reg));
    reg.range.start = (uintptr_t)t;
    reg.range.len = g.len;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (ioctl(g.fd, UFFDIO_REGISTER, &reg) != 0)
        goto out;
    /* the helper takes no signal of the program's; nor does this thread
       until the range is filled (its signal handler touching a page not
       yet filled would wait for this thread's own fill) */
    signals_off(&old);
    ok = pthread_create(&th, NULL, giveback_events, &g) == 0;
    if (!ok) {
        signals_on(&old);
        goto out;
    }
    ok = fab_raw_mremap(t, g.len, u->addr) != MAP_FAILED;
    if (ok) {
        t = MAP_FAILED;         /* moved */
        /* (the kernel refuses a copy only for a range that is not
           registered, which this one is until the close below) */
        (void)fill(&g, g.s, g.len);
    }
    signals_on(&old);
    (void)!write(g.stop[1], "", 1);
    pthread_join(th, NULL);
out:
    if (t != MAP_FAILED)
        munmap(t, g.len);
    if (g.stop[0] >= 0) {
        close(g.stop[0]);
        close(g.stop[1]);
    }
    close(g.fd);                /* unregisters what is left */
    return ok;
}

/* Tell UCX's memory hooks (libucm, a dependency of libucp) that the pages
   at addr were replaced behind their back (fab_raw_mremap): its
   registration cache drops what it holds for them.  Nothing if libucm
   has no such call. */
static void
vm_unmapped(void *addr, size_t len)
{
    static void (*fn)(void *, size_t);
    static int looked;
    if (!looked) {
        *(void **)&fn = dlsym(U.dl, "ucm_vm_munmap");
        looked = 1;
    }
    if (fn != NULL)
        fn(addr, len);
}

/* The last MR in adopted memory u is gone (fab_adopt_lock held, N.lock
   not, no initiator inside an op on it).  Its pages become the program's
   private memory again, with what peers wrote into them (give_back), and
   UCX's mapping of the segment goes.  Kept as the segment, with its data,
   when that cannot be done safely: a kernel RDMA device is open (it may
   have registered the range since: its pages must stay), no userfaultfd;
   such memory stays private to a child of fork, an MR registered over it
   again is fast at once, and UCX's mapping goes when the program unmaps
   the range (reclaim).  Revoked memory (mem_revoke: a private copy is at
   addr already) goes now. */
void
fab_mem_unadopt(struct umem *u)
{
    int gone = 0;
    if (u->shadow != NULL) {
        munmap(u->shadow, u->maplen);
        u->shadow = NULL;
        gone = 1;
    }
    else if (!is_attach((uintptr_t)u->addr, u->maplen, u->shmid))
        gone = 1;               /* the program unmapped or replaced it */
    else if (!uverbs_open() && give_back(u)) {
        gone = 1;
        fab_self_remap = 1;
        vm_unmapped(u->addr, u->maplen);
        fab_self_remap = 0;
    }
    if (gone) {
        LOCK();
        fab_umem_unlink(u);
        UNLOCK();
        range_del((uintptr_t)u->addr, u->shmid);
        fab_umem_free(u);
    }
    reclaim();
}
