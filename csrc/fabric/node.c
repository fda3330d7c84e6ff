/* node.c - the process's fabric node: libucp (dlopen), the UCP
   context, worker and listener, the rendezvous directory and its files,
   the node record, the LID, the progress thread, start-up (node_up) and
   the end of the process (node_atexit); it defines N and U. */
#include "fabric.h"
#include "../dlload.h"

/* libucp's functions (fab_load fills them). */
struct fab_ucp U;

/* The process's fabric node. */
struct node N = {.lock = PTHREAD_MUTEX_INITIALIZER,
                 .drain_lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* This process was forked from one whose node was up.  UCX's async thread
   (which serves its tcp transport's sockets) is not in the child, and UCX
   starts no new one: only shared memory works here. */
int fab_forked_from_node;

/* ------------------------------------------------------------------ */
/* libucp, loaded with dlopen                                         */

static const struct pyrdma_dllib libucp = {
    .setting = PYRDMA_SET_UCX_LIBRARY,
    .package = "libucx0 (UCX)",
    .name = NULL,               /* the file loaded */
    .too_old = "UCX too old? 1.13 or later is needed",
};

#define SYM(field, name) {name, (void **)&U.field, 0}
static const struct pyrdma_dlsym ucp_syms[] = {
    SYM(config_read, "ucp_config_read"),
    SYM(config_release, "ucp_config_release"),
    SYM(config_modify, "ucp_config_modify"),
    SYM(init_version, "ucp_init_version"),
    SYM(cleanup, "ucp_cleanup"),
    SYM(get_version, "ucp_get_version"),
    SYM(worker_create, "ucp_worker_create"),
    SYM(worker_get_address, "ucp_worker_get_address"),
    SYM(worker_release_address, "ucp_worker_release_address"),
    SYM(worker_progress, "ucp_worker_progress"),
    SYM(worker_get_efd, "ucp_worker_get_efd"),
    SYM(worker_arm, "ucp_worker_arm"),
    SYM(worker_signal, "ucp_worker_signal"),
    SYM(worker_flush_nbx, "ucp_worker_flush_nbx"),
    SYM(worker_set_am_recv_handler, "ucp_worker_set_am_recv_handler"),
    SYM(listener_create, "ucp_listener_create"),
    SYM(listener_query, "ucp_listener_query"),
    SYM(listener_reject, "ucp_listener_reject"),
    SYM(ep_create, "ucp_ep_create"),
    SYM(ep_close_nbx, "ucp_ep_close_nbx"),
    SYM(conn_request_query, "ucp_conn_request_query"),
    SYM(am_send_nbx, "ucp_am_send_nbx"),
    SYM(am_recv_data_nbx, "ucp_am_recv_data_nbx"),
    SYM(request_free, "ucp_request_free"),
    SYM(status_string, "ucs_status_string"),
    SYM(mem_map, "ucp_mem_map"),
    SYM(mem_unmap, "ucp_mem_unmap"),
    SYM(mem_query, "ucp_mem_query"),
    SYM(rkey_pack, "ucp_rkey_pack"),
    SYM(rkey_buffer_release, "ucp_rkey_buffer_release"),
    SYM(ep_rkey_unpack, "ucp_ep_rkey_unpack"),
    SYM(rkey_ptr, "ucp_rkey_ptr"),
    SYM(rkey_destroy, "ucp_rkey_destroy"),
    {NULL, NULL, 0},
};
#undef SYM

int
fab_load(struct pyrdma_status *st)
{
    if (U.loaded)
        return 0;
    U.dl = pyrdma_dlopen(&libucp, ucp_syms, st);
    if (U.dl == NULL)
        return -1;
    U.loaded = 1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* files of the rendezvous directory                                  */

/* Is the open file fd private to this user: a regular file owned by
   the effective uid, no permission bits for group or others?  Every file
   of the rendezvous directory is (the node makes them 0600); one that is
   not was put there by someone else and is not trusted.  1 or 0. */
static int
fd_private(int fd, struct stat *sb)
{
    return fstat(fd, sb) == 0 && S_ISREG(sb->st_mode) &&
           sb->st_uid == geteuid() && (sb->st_mode & 077) == 0;
}

/* open(2) for a file of the rendezvous directory: never through a
   symbolic link, and only a private file (fd_private); -1 with errno
   EPERM for a file of someone else's. */
int
fab_priv_open(const char *path, int flags, mode_t mode)
{
    struct stat sb;
    int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -1;
    if (!fd_private(fd, &sb)) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* Map the shared file at path, which must be size bytes (open flags
   oflags besides O_RDWR | O_CLOEXEC), anywhere (at NULL) or at address
   at; NULL if it cannot be (or is not private: fab_priv_open). */
void *
fab_shm_file_map(const char *path, size_t size, int oflags, void *at)
{
    struct stat sb;
    void *m;
    int fd = fab_priv_open(path, O_RDWR | oflags, 0);
    if (fd < 0)
        return NULL;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != size) {
        close(fd);
        return NULL;
    }
    /* at: in place of what is mapped there (MAP_FIXED; not mremap, which
       UCX's memory hooks do not pass a new address to) */
    m = mmap(at, size, PROT_READ | PROT_WRITE,
             MAP_SHARED | (at != NULL ? MAP_FIXED : 0), fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

/* Create the temporary file tmp, size bytes of zeros, and map it (the
   caller fills it, then renames it into place); NULL (and no file, errno
   set) if it cannot be.  Its space is reserved here, every page of it:
   /dev/shm is shared by every user and may be full, and a page of a
   sparse file that finds no space when it is first touched is SIGBUS for
   this process and for every peer that maps the file, long after the
   call that made it (a reg_mr writing a new entry of the key page, a
   SEND writing its first request into a new ring). */
void *
fab_shm_file_create(const char *tmp, size_t size)
{
    void *m;
    int rc, fd = fab_priv_open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return NULL;
    if ((rc = posix_fallocate(fd, 0, (off_t)size)) != 0) {
        close(fd);
        unlink(tmp);
        errno = rc;
        return NULL;
    }
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        rc = errno;
        unlink(tmp);
        errno = rc;
        return NULL;
    }
    return m;
}

/* ------------------------------------------------------------------ */
/* the progress thread                                                */

static void *
progress_main(void *arg)
{
    struct epoll_event ev[4];
    sigset_t all;
    int idle = 0;
    uint64_t last_timers = 0, seen_polls = 0, app_at = 0;

    (void)arg;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    while (!N.stop) {
        unsigned n = 0, k;
        uint64_t t = now_ns(), polls;
        polls = __atomic_load_n(&N.app_polls, __ATOMIC_RELAXED);
        if (polls != seen_polls) {
            seen_polls = polls;
            app_at = t;
        }
        if (app_at != 0 && t - app_at < 2000000ull) {
            /* the application polls (and so progresses and drains)
               itself: stay off the worker entirely (no lock contention
               with it on a small machine), keep only the timers */
            if ((N.timers && t - last_timers > 1000000ull) ||
                t - last_timers > 100000000ull) {
                fab_timers();
                last_timers = t;
            }
            /* ACKs the application deferred and has not sent (it got
               its completion and is busy elsewhere), requests in rings
               while it polls another CQ: at most ~1 ms late */
            if (N.nrx)
                fab_rings_poll();
            fab_drain(1);
            k = (unsigned)epoll_wait(N.quietfd, ev, 4, 1);
            if ((int)k > 0)
                fab_guard_events(ev, (int)k);
            fab_guard_maybe(now_ns());
            idle = 0;
            continue;
        }
        while ((k = U.worker_progress(N.w)) != 0 && n < 10000) {
            uint64_t t2;
            n += k;
            /* a long burst (a stream of large messages) does not hold
               back the responses it queued: ACKs leave at least every
               ~100 us, not once the burst is over (which took 100s of
               ms for 224 1 MiB WRITEs, near a requester's ACK timeout) */
            if (__atomic_load_n(&N.ob_head, __ATOMIC_RELAXED) != NULL &&
                (t2 = now_ns()) - t > 100000ull) {
                fab_drain(1);
                t = t2;
            }
        }
        if (N.nrx)
            n += fab_rings_poll();
        fab_drain(1);
        t = now_ns();
        if ((N.timers && t - last_timers > 1000000ull) ||
            t - last_timers > 100000000ull) {
            fab_timers();
            fab_drain(1);
            last_timers = t;
            fab_guard_maybe(t);
        }
        if (n) {
            idle = 0;
            continue;
        }
        if (++idle < 64)
            continue;           /* spin a little before sleeping */
        if (U.worker_arm(N.w) == UCS_ERR_BUSY)
            continue;
        if (N.nrx) {
            /* ring writers ring from now on (struct ring) */
            fab_rings_sleep(1);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            if (fab_rings_poll() != 0) {
                fab_rings_sleep(0);
                fab_drain(1);
                idle = 0;
                continue;
            }
        }
        __atomic_store_n(&N.pt_asleep, 1, __ATOMIC_SEQ_CST);
        k = (unsigned)epoll_wait(N.epfd, ev, 4,
                                 N.timers || N.guard_at ? 5 : 100);
        __atomic_store_n(&N.pt_asleep, 0, __ATOMIC_RELAXED);
        if ((int)k > 0)
            fab_guard_events(ev, (int)k);
        fab_guard_maybe(now_ns());
        if (N.nrx)
            fab_rings_sleep(0);
        idle = 0;
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* the node                                                            */

static void
read_boot_id(void)
{
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = 0;
    struct stat sb;
    if (fd >= 0) {
        n = read(fd, N.boot_id, sizeof(N.boot_id) - 1);
        close(fd);
    }
    N.boot_id[n > 0 ? n : 0] = '\0';
    if (n > 0 && N.boot_id[n - 1] == '\n')
        N.boot_id[n - 1] = '\0';
    N.netns = stat("/proc/self/ns/net", &sb) == 0 ? (unsigned long)sb.st_ino
                                                   : 0;
    N.pidns = stat("/proc/self/ns/pid", &sb) == 0 ? (unsigned long)sb.st_ino
                                                   : 0;
}

static void
flushed_cb(void *req, ucs_status_t status, void *arg)
{
    (void)status;
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
    U.request_free(req);
}

/* Let the transports hand over what UCP has completed (UCT's tcp keeps in
   its own buffer what the socket did not take), for at most 200 ms. */
static void
flush_worker(void)
{
    ucp_request_param_t p;
    ucs_status_ptr_t r;
    uint64_t t0 = now_ns();
    int done = 0;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = flushed_cb;
    p.user_data = &done;
    r = U.worker_flush_nbx(N.w, &p);
    if (!UCS_PTR_IS_PTR(r))
        return;
    while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE) &&
           now_ns() - t0 < 200000000ull)
        U.worker_progress(N.w);
}

static void
node_atexit(void)
{
    int i;
    if (!N.up || N.pid != getpid())
        return;
    /* what the outbox holds, deferred ACKs too, goes out: a process that
       ends right after its last poll (exit(3), sooner than the progress
       thread's next look) has received what its peer sent, and a NIC
       would have acknowledged it */
    fab_drain_out();
    flush_worker();
    N.stop = 1;
    if (N.stopfd >= 0) {
        uint64_t one = 1;
        if (write(N.stopfd, &one, sizeof(one)) < 0) {
            /* nothing to do at exit */
        }
    }
    pthread_join(N.thr, NULL);
    for (i = 0; i < N.npeers; i++) {
        /* a ring its receiver never mapped (and so never unlinked) */
        struct peer *p = N.peers[i];
        if (p->tx != NULL && !__atomic_load_n(&p->tx->open, __ATOMIC_ACQUIRE)) {
            char path[300];
            fab_ring_name(path, sizeof(path), N.guid, p->guid);
            unlink(path);
        }
    }
    if (N.sh != NULL)
        unlink(N.shfile);
    fab_mcast_node_end();
    unlink(N.nodefile);
    unlink(N.lidfile);
}

/* Claim a LID near hint in the rendezvous directory; 0 or -1.  The
   claim ("<pid> <guid>\n") is written and locked (fab_file_hold) in a
   temporary file first, then linked into place: a LID file is never seen
   unlocked or half written by a node that would take it for a stale one. */
static int
claim_lid(uint16_t hint)
{
    char tmp[300], buf[64];
    int tries, fd, len, rc = -1;

    snprintf(tmp, sizeof(tmp), "%s/lid-claim.tmp%d", N.dir, (int)getpid());
    fd = fab_priv_open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    len = snprintf(buf, sizeof(buf), "%d %016llx\n", (int)getpid(),
                   (unsigned long long)N.guid);
    if (fab_file_hold(fd) != 0 || write(fd, buf, (size_t)len) != len)
        goto out;
    for (tries = 0; tries < 4096; tries++) {
        uint16_t lid = (uint16_t)(1 + (hint + tries) % 0xBFFE);
        char path[260];
        snprintf(path, sizeof(path), "%s/lid-%04x", N.dir, lid);
        if (link(tmp, path) != 0) {
            if (errno == EEXIST && fab_lid_owner(lid) == 0) {
                /* stale: its owner died */
                unlink(path);
                tries--;
                continue;
            }
            if (errno != EEXIST)
                goto out;
            continue;
        }
        N.lid = lid;
        snprintf(N.lidfile, sizeof(N.lidfile), "%s", path);
        N.lidfd = fd;
        rc = 0;
        break;
    }
out:
    unlink(tmp);
    if (rc < 0)
        close(fd);
    return rc;
}

static int
write_record(void)
{
    struct record rec;
    char tmp[300];
    int fd;

    memset(&rec, 0, sizeof(rec));
    rec.magic = REC_MAGIC;
    rec.pid = getpid();
    rec.netns = N.netns;
    rec.pidns = N.pidns;
    snprintf(rec.boot_id, sizeof(rec.boot_id), "%s", N.boot_id);
    rec.guid = N.guid;
    rec.lid = N.lid;
    memcpy(rec.secret, N.secret, sizeof(rec.secret));
    rec.alen = (uint32_t)N.waddr_len;
    snprintf(N.nodefile, sizeof(N.nodefile), "%s/node-%016llx", N.dir,
             (unsigned long long)N.guid);
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", N.nodefile, (int)getpid());
    fd = fab_priv_open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    /* held from before it is in place until the process ends */
    if (fab_file_hold(fd) != 0 ||
        write(fd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec) ||
        write(fd, N.waddr, N.waddr_len) != (ssize_t)N.waddr_len ||
        rename(tmp, N.nodefile) != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    N.recfd = fd;
    return 0;
}

/* Choose the node's GUID (IPv4 | port | a random salt) and GID: a GUID
   whose record a live node holds is taken; a dead one's record and key
   page go. */
static void
pick_guid(void)
{
    uint8_t salt[2];
    uint64_t be;
    int tries, fd;
    char path[300];

    for (tries = 0; tries < SALT_TRIES; tries++) {
        uint8_t g[8];
        int rfd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (rfd < 0 || read(rfd, salt, 2) != 2) {
            salt[0] = (uint8_t)getpid();
            salt[1] = (uint8_t)(getpid() >> 8) ^ (uint8_t)tries;
        }
        if (rfd >= 0)
            close(rfd);
        memcpy(g, &N.ip, 4);
        g[4] = (uint8_t)(N.port >> 8);
        g[5] = (uint8_t)N.port;
        g[6] = salt[0];
        g[7] = salt[1];
        memcpy(&be, g, 8);
        N.guid = be64toh(be);
        snprintf(path, sizeof(path), "%s/node-%016llx", N.dir,
                 (unsigned long long)N.guid);
        fd = fab_priv_open(path, O_RDONLY, 0);
        if (fd < 0)
            break;
        {
            struct record r;
            ssize_t n = read(fd, &r, sizeof(r));
            int held = fab_file_held(fd);
            close(fd);
            if (n != (ssize_t)sizeof(r) || held == 0 ||
                (held < 0 && !fab_pid_alive(r.pid))) {
                unlink(path);
                snprintf(path, sizeof(path), "%s/keys-%016llx", N.dir,
                         (unsigned long long)N.guid);
                unlink(path);
                break;
            }
        }
    }
    memset(N.gid, 0, 16);
    N.gid[0] = 0xfe;
    N.gid[1] = 0x80;
    be = htobe64(N.guid);
    memcpy(N.gid + 8, &be, 8);
}

/* fork(): the child shares the open file descriptions of the node record
   and LID claim, and with them their liveness locks, which would keep the
   parent's node "alive" for as long as the child lives.  The child is not
   that node (fab_node_up starts a new one there): it lets go of them. */
static void
node_fork_child(void)
{
    if (N.recfd >= 0)
        close(N.recfd);
    if (N.lidfd >= 0)
        close(N.lidfd);
    N.recfd = N.lidfd = -1;
}

/* No record or LID claim open yet; a child of fork() lets go of them. */
static void
node_files_init(void)
{
    static int atfork;
    N.recfd = N.lidfd = -1;
    if (!atfork && pthread_atfork(NULL, NULL, node_fork_child) == 0)
        atfork = 1;
}

/* Choose the rendezvous directory and make sure it is ours alone: a
   directory (not a symbolic link) owned by the effective uid with no
   permission bits for group or others.  Anyone who can write there can
   remove a node's records or plant a key page its peers would trust, and
   /dev/shm is shared by every user, so a directory someone else made
   first is refused, never used.  0 or -1 with *st set. */
static int
pick_dir(struct pyrdma_status *st)
{
    const char *d = FAB_SET_TEXT(UCX_DIR);
    struct stat sb;
    if (d != NULL)
        snprintf(N.dir, sizeof(N.dir), "%s", d);
    else
        snprintf(N.dir, sizeof(N.dir), "/dev/shm/rdma-ucx-%u",
                 (unsigned)getuid());
    if (mkdir(N.dir, 0700) != 0 && errno != EEXIST)
        return pyrdma_fail(st, errno, "mkdir", "cannot make the rendezvous "
                           "directory %s (set RDMA_UCX_DIR)", N.dir);
    if (lstat(N.dir, &sb) != 0)
        return pyrdma_fail(st, errno, "lstat", "rendezvous directory %s",
                           N.dir);
    if (!S_ISDIR(sb.st_mode))
        return pyrdma_fail(st, ENOTDIR, "lstat", "the rendezvous directory "
                           "%s is not a directory (a symbolic link or a "
                           "file is refused): remove it or set "
                           "RDMA_UCX_DIR", N.dir);
    if (sb.st_uid != geteuid())
        return pyrdma_fail(st, EPERM, "lstat", "the rendezvous directory "
                           "%s belongs to uid %u, not to this user (uid "
                           "%u): refusing it (another user may have made "
                           "it); set RDMA_UCX_DIR to a directory of "
                           "yours", N.dir, (unsigned)sb.st_uid,
                           (unsigned)geteuid());
    if ((sb.st_mode & 077) != 0)
        return pyrdma_fail(st, EPERM, "lstat", "the rendezvous directory "
                           "%s has mode %04o: it must be 0700 (not "
                           "readable or writable by group or others); "
                           "chmod 700 it or set RDMA_UCX_DIR", N.dir,
                           (unsigned)(sb.st_mode & 07777));
    return 0;
}

/* Start-up, phase 1 (init_lock held): a node left up by the parent of a
   forked child is not ours: start afresh (its memory is left alone: UCP
   may map it); such a child can use shared memory only.  0 or -1. */
static int
node_fresh(struct pyrdma_status *st)
{
    if (N.up) {
        struct node fresh = {.lock = PTHREAD_MUTEX_INITIALIZER,
                             .drain_lock = PTHREAD_MUTEX_INITIALIZER};
        memcpy(&N, &fresh, sizeof(N));
        fab_forked_from_node = 1;
    }
    if (pyrdma_settings_read(&N.set, "fabric", st) < 0)
        return -1;
    pyrdma_settings_warn_unknown();
    if (fab_forked_from_node && !fab_tls_shm())
        return pyrdma_fail(st, EOPNOTSUPP, "ucp_init", FORK_TCP_MSG
                           " (UCX_TLS=%s)", FAB_SET_TEXT(UCX_TLS));
    N.stopfd = N.efd = N.epfd = -1;
    node_files_init();
    fab_auth_init();
    read_boot_id();
    return 0;
}

/* Phase 2, authentication: the rendezvous directory, this node's key (in
   its record), the shared one of RDMA_UCX_SECRET.  0 or -1. */
static int
node_auth(struct pyrdma_status *st)
{
    const char *sec = FAB_SET_TEXT(UCX_SECRET);
    if (pick_dir(st) < 0)
        return -1;
    if (fab_random_bytes(N.secret, sizeof(N.secret)) < 0)
        return pyrdma_fail(st, errno ? errno : EIO, "read", "/dev/urandom: "
                           "no random bytes for the node's key");
    N.have_shared = sec != NULL;
    if (N.have_shared)
        fab_secret_key(sec, N.shared);
    if (access(N.dir, W_OK) != 0)
        return pyrdma_fail(st, errno, "mkdir", "rendezvous directory %s is "
                           "not writable (set RDMA_UCX_DIR)", N.dir);
    fab_sweep_stale();
    return 0;
}

/* The UCX configuration the fabric runs with (UCX_* variables override
   each setting). */
static void
ucp_configure(ucp_config_t *cfg)
{
    /* Two threads share the worker (the application's poll_cq and the
       progress thread): a spinlock held by a preempted thread makes the
       other spin for a whole time slice on a small machine (ms round
       trips); a mutex sleeps instead.  UCX_USE_MT_MUTEX=n overrides. */
    if (FAB_SET_TEXT(UCX_USE_MT_MUTEX) == NULL)
        U.config_modify(cfg, "USE_MT_MUTEX",
                        FAB_SET_DEFAULT(UCX_USE_MT_MUTEX));
    /* Messages up to 256 KiB go eagerly (UCX's "auto" threshold picks its
       rendezvous protocol lower, from 64 KiB over tcp): a responder here
       is usually a progress thread asleep in epoll, not a busy poller, and
       every step of a rendezvous (RTS in, RTR out, data in, ATP) wakes it
       (64 KiB WRITEs over tcp: 1.7 GB/s with it, 2.7 without; over shm
       eager is as fast or faster at every size).  Above that a rendezvous
       spares the receiver a whole message in its buffers (1 MiB over
       tcp is faster with it).  UCX_RNDV_THRESH overrides. */
    if (FAB_SET_TEXT(UCX_RNDV_THRESH) == NULL)
        U.config_modify(cfg, "RNDV_THRESH", FAB_SET_DEFAULT(UCX_RNDV_THRESH));
    /* Transports: shared memory and TCP, which the fabric is built and
       tested on.  Left to itself UCX also picks its verbs transports on
       any RDMA device of the machine; on Soft-RoCE (rxe) those break the
       fabric (RC WRs end in RETRY_EXC_ERR; UCX 1.13's ud_verbs aborts).
       UCX_TLS overrides.  UCX's cma transport (in "shm") reaches a
       peer's memory by cross-memory attach: under Yama it is used only
       where the fabric's own is (fab_cma_policy). */
    if (FAB_SET_TEXT(UCX_TLS) == NULL)
        U.config_modify(cfg, "TLS", fab_cma_policy() || N.yama == 0
                        ? FAB_SET_DEFAULT(UCX_TLS)
                        : "sysv,posix,self,tcp");
    else
        fab_cma_policy();
    /* alloc_mr memory: SysV shared memory (made mode 0600 there), else
       anonymous memory; never a POSIX segment, whose allocation writes
       every byte of it to /dev/shm first (see alloc_mr_mem) */
    U.config_modify(cfg, "ALLOC_PRIO", "md:sysv,mmap");
}

/* Phase 3a, UCP: its context, configured.  0 or -1. */
static int
node_ucp_context(struct pyrdma_status *st)
{
    ucp_config_t *cfg = NULL;
    ucp_params_t pp;
    ucs_status_t s = U.config_read(NULL, NULL, &cfg);

    if (s != UCS_OK)
        return ucs_fail(st, s, "ucp_config_read",
                        "reading the UCX configuration");
    ucp_configure(cfg);
    memset(&pp, 0, sizeof(pp));
    pp.field_mask = UCP_PARAM_FIELD_FEATURES;
    pp.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA;
    s = U.init_version(UCP_API_MAJOR, UCP_API_MINOR, &pp, cfg, &N.uctx);
    U.config_release(cfg);
    if (s != UCS_OK)
        return ucs_fail(st, s, "ucp_init", "initializing UCX");
    return 0;
}

/* Phase 3b, UCP: the worker, its active-message handlers (requests and
   responses both go to fab_am_cb), its address.  0 or -1. */
static int
node_ucp_worker(struct pyrdma_status *st)
{
    ucp_worker_params_t wp;
    ucp_am_handler_param_t ap;
    ucs_status_t s;

    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    s = U.worker_create(N.uctx, &wp, &N.w);
    if (s != UCS_OK)
        /* UCX's posix transport makes its receive FIFO in /dev/shm */
        return ucs_fail(st, s, "ucp_worker_create", s == UCS_ERR_NO_MEMORY
                        ? "creating the UCX worker (its shared-memory FIFO "
                          "is in /dev/shm: is /dev/shm full?)"
                        : "creating the UCX worker");
    fab_cma_ptracer();          /* what UCX's cma component did to Yama */
    memset(&ap, 0, sizeof(ap));
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    ap.flags = UCP_AM_FLAG_WHOLE_MSG;
    ap.cb = fab_am_cb;
    ap.id = AM_REQ;
    ap.arg = NULL;
    if ((s = U.worker_set_am_recv_handler(N.w, &ap)) != UCS_OK)
        return ucs_fail(st, s, "ucp_worker_set_am_recv_handler",
                        "AM handler");
    ap.id = AM_RESP;
    if ((s = U.worker_set_am_recv_handler(N.w, &ap)) != UCS_OK)
        return ucs_fail(st, s, "ucp_worker_set_am_recv_handler",
                        "AM handler");
    s = U.worker_get_address(N.w, &N.waddr, &N.waddr_len);
    if (s != UCS_OK)
        return ucs_fail(st, s, "ucp_worker_get_address", "worker address");
    return 0;
}

/* Phase 4, the listener: the one setting, RDMA_UCX_ADDR, says where; none
   (same host only) if it is not set and UCX cannot listen.  Decides the
   open mode.  0 or -1. */
static int
node_listener(struct pyrdma_status *st)
{
    const char *ipstr = FAB_SET_TEXT(UCX_ADDR);
    int asked = ipstr != NULL;
    ucp_listener_params_t lp;
    ucp_listener_attr_t la;
    struct sockaddr_in sin;
    ucs_status_t s;

    if (!asked)
        ipstr = "127.0.0.1";
    if (inet_pton(AF_INET, ipstr, &N.ip) != 1)
        return pyrdma_fail(st, EINVAL, "inet_pton", "RDMA_UCX_ADDR=%s is "
                           "not an IPv4 address", ipstr);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = N.ip;
    memset(&lp, 0, sizeof(lp));
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                    UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (struct sockaddr *)&sin;
    lp.sockaddr.addrlen = sizeof(sin);
    lp.conn_handler.cb = fab_conn_cb;
    s = U.listener_create(N.w, &lp, &N.listener);
    if (s == UCS_OK) {
        memset(&la, 0, sizeof(la));
        la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        if (U.listener_query(N.listener, &la) == UCS_OK)
            N.port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
    }
    else if (asked)
        return ucs_fail(st, s, "ucp_listener_create", "listening on "
                        "RDMA_UCX_ADDR (does UCX_TLS include tcp?)");
    else
        N.listener = NULL;      /* same-host only */
    /* open mode: no secret and a listener others can reach */
    N.open_mode = !N.have_shared && N.listener != NULL &&
                  (ntohl(N.ip) >> 24) != 127;
    return 0;
}

/* Phase 5, the guard: UCX's listening sockets are those in after[0..n)
   that were not in before[0..nbefore) (fab_listen_scan's inodes; lfd,
   lport: the sockets of after). */
static void
node_guard(const uint64_t *before, int nbefore, const uint64_t *after,
           int n, const int *lfd, const uint16_t *lport)
{
    int i, k;
    N.nlsn = 0;
    for (i = 0; i < n && N.nlsn < 32; i++) {
        for (k = 0; k < nbefore; k++)
            if (before[k] == after[i])
                break;
        if (k < nbefore)
            continue;
        N.lsn_fd[N.nlsn] = lfd[i];
        N.lsn_port[N.nlsn] = lport[i];
        N.nlsn++;
    }
}

/* Phase 6, identity: GUID = IPv4 | port | salt, a LID unique on this
   host, the node record, the key page.  0 or -1. */
static int
node_identity(struct pyrdma_status *st)
{
    pick_guid();
    if (claim_lid((uint16_t)(N.guid ^ (N.guid >> 16) ^ (N.guid >> 32))) < 0
        || write_record() < 0)
        return pyrdma_fail(st, errno ? errno : EIO, "open",
                           "cannot register in %s", N.dir);
    fab_sh_create();
    return 0;
}

/* Phase 7, wake-ups: the progress thread sleeps in epoll on UCP's event
   fd and the stop eventfd (N.epfd), or on the stop fd alone while the
   node is quiet (N.quietfd); a new connection to a listening socket
   wakes the guard in both.  0 or -1. */
static int
node_wakeups(struct pyrdma_status *st)
{
    struct epoll_event ev, le;
    ucs_status_t s;
    int i;

    if ((s = U.worker_get_efd(N.w, &N.efd)) != UCS_OK)
        return ucs_fail(st, s, "ucp_worker_get_efd", "event fd");
    N.epfd = epoll_create1(EPOLL_CLOEXEC);
    N.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (N.epfd < 0 || N.stopfd < 0)
        return pyrdma_fail(st, errno, "epoll_create1", "");
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    epoll_ctl(N.epfd, EPOLL_CTL_ADD, N.efd, &ev);
    epoll_ctl(N.epfd, EPOLL_CTL_ADD, N.stopfd, &ev);
    N.quietfd = epoll_create1(EPOLL_CLOEXEC);
    if (N.quietfd < 0)
        return pyrdma_fail(st, errno, "epoll_create1", "");
    epoll_ctl(N.quietfd, EPOLL_CTL_ADD, N.stopfd, &ev);
    memset(&le, 0, sizeof(le));
    le.events = EPOLLIN | EPOLLET;
    le.data.u64 = GUARD_TAG;
    for (i = 0; i < N.nlsn; i++) {
        epoll_ctl(N.epfd, EPOLL_CTL_ADD, N.lsn_fd[i], &le);
        epoll_ctl(N.quietfd, EPOLL_CTL_ADD, N.lsn_fd[i], &le);
    }
    return 0;
}

/* Phase 8: the progress thread, the exit handler.  0 or -1. */
static int
node_start(struct pyrdma_status *st)
{
    static int registered;
    N.pid = getpid();
    N.qp_next = 2;
    if (pthread_create(&N.thr, NULL, progress_main, NULL) != 0)
        return pyrdma_fail(st, EAGAIN, "pthread_create", "progress thread");
    if (!registered) {
        registered = 1;
        atexit(node_atexit);
    }
    return 0;
}

/* A start-up that failed: leave UCP objects alone (a retry makes new
   ones); close the fds, give the LID back. */
static void
node_up_undo(void)
{
    if (N.epfd >= 0)
        close(N.epfd);
    if (N.stopfd >= 0)
        close(N.stopfd);
    if (N.lidfile[0])
        unlink(N.lidfile);
    if (N.lidfd >= 0)
        close(N.lidfd);
    N.epfd = N.stopfd = N.lidfd = -1;
}

/* Bring the node up once per process; 0 or -1 with *st set. */
int
fab_node_up(struct pyrdma_status *st)
{
    uint64_t before[64], after[64];
    int lfd[64], nbefore, nafter;
    uint16_t lport[64];
    int rc = -1;

    pthread_mutex_lock(&init_lock);
    if (N.up && N.pid == getpid()) {
        pthread_mutex_unlock(&init_lock);
        return 0;
    }
    if (node_fresh(st) < 0) {
        pthread_mutex_unlock(&init_lock);
        return -1;
    }
    if (node_auth(st) < 0 || node_ucp_context(st) < 0)
        goto out;
    nbefore = fab_listen_scan(before, lfd, lport, 64);
    if (node_ucp_worker(st) < 0 || node_listener(st) < 0)
        goto out;
    nafter = fab_listen_scan(after, lfd, lport, 64);
    node_guard(before, nbefore, after, nafter, lfd, lport);
    if (node_identity(st) < 0 || node_wakeups(st) < 0 || node_start(st) < 0)
        goto out;
    N.up = 1;
    rc = 0;
out:
    if (rc < 0)
        node_up_undo();
    pthread_mutex_unlock(&init_lock);
    return rc;
}
