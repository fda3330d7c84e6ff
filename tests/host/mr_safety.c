/* mr_safety.c - MRs over memory that is not (or no longer) what it was,
   for tests/host/test_fabric_mr_safety.py.  Run on ucx0 through the
   verbs front end; one check per run, named by argv[1]:

   ro      ibv_reg_mr with write access over a PROT_READ mapping, and over
           a range that is not mapped, fails with EFAULT (as the kernel's
           ib_umem_get); read-only access over the PROT_READ mapping is
           allowed, and a peer's WRITE into it ends in REM_ACCESS_ERR
           (the MR has no remote write), the program goes on.
   unmap   the program unmaps a registered buffer (still registered) and
           maps other memory at its address: a peer's WRITE through the
           MR must not land in that memory (prints what the WRITE's
           completion said and what the new memory holds).
   local   the same with a buffer of the program's own WRs: a READ into
           it through the old MR ends in an error, the new memory is
           untouched.
   stale   an MR over a buffer, the buffer unmapped, new memory mapped at
           the same address and registered: WRITE and READ through the
           new MR see the new memory (argv[2] "keep": the first MR stays
           registered meanwhile; "dereg": it is deregistered first).
   signal  a SIGALRM handler stores into the buffer while the main thread
           registers and deregisters it, again and again: registration
           never hangs, and no store of the handler is lost.

   The peer is a QP of the same process connected to itself.  Prints
   "name=value" lines; exits 0 if the run got to its end. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "verbs_test.h"

#define PAGE 4096
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
            IBV_ACCESS_REMOTE_READ)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static uint8_t *local;          /* the requester's buffer */
static struct ibv_mr *lmr;

/* A new RC QP connected to itself (the previous one, if any, goes: a
   failed WR leaves it in ERR). */
static void
new_qp(void)
{
    struct ibv_qp_init_attr qa;
    struct ibv_port_attr pa;
    if (qp != NULL)
        ibv_destroy_qp(qp);
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 16;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &qa);
    if (qp == NULL)
        DIE("ibv_create_qp");
    if (ibv_query_port(ctx, 1, &pa))
        DIE("ibv_query_port");
    errno = connect_rc(qp, qp->qp_num, pa.lid,
                       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 7);
    if (errno != 0)
        DIE("modify_qp");
}

static void
setup(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    if (list == NULL || list[0] == NULL)
        DIE("ibv_get_device_list");
    ctx = ibv_open_device(list[0]);
    if (ctx == NULL)
        DIE("ibv_open_device");
    ibv_free_device_list(list);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    if (pd == NULL || cq == NULL)
        DIE("pd/cq");
    local = malloc(PAGE);
    if (local == NULL)
        DIE("malloc");
    lmr = ibv_reg_mr(pd, local, PAGE, IBV_ACCESS_LOCAL_WRITE);
    if (lmr == NULL)
        DIE("ibv_reg_mr local");
    new_qp();
}

/* Post one RDMA op of len bytes between local and raddr (rkey), wait for
   its completion; its status (-1: none within 10 s). */
static int
rdma_op(enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey, uint32_t len)
{
    struct ibv_sge sge = {(uintptr_t)local, len, lmr->lkey};
    struct ibv_send_wr wr, *bad;
    struct ibv_recv_wr rwr, *rbad;
    struct ibv_wc wc;
    int i, n = 0;
    if (op == IBV_WR_RDMA_WRITE_WITH_IMM) {
        /* (the active-message path: its receive) */
        memset(&rwr, 0, sizeof(rwr));
        rwr.wr_id = 9;
        if (ibv_post_recv(qp, &rwr, &rbad))
            DIE("ibv_post_recv");
    }
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 7;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(qp, &wr, &bad))
        DIE("ibv_post_send");
    for (i = 0; i < 100000 && n == 0; i++) {
        n = ibv_poll_cq(cq, 1, &wc);
        if (n > 0 && wc.wr_id != 7)
            n = 0;              /* the receive's */
        else if (n == 0)
            usleep(100);
    }
    if (n < 0)
        DIE("ibv_poll_cq");
    return n == 0 ? -1 : (int)wc.status;
}

static const char *
status(int s)
{
    return s < 0 ? "none" : ibv_wc_status_str((enum ibv_wc_status)s);
}

/* errno of a registration that is expected to fail, 0 if it did not. */
static int
reg_errno(void *addr, size_t len, int access)
{
    struct ibv_mr *mr;
    errno = 0;
    mr = ibv_reg_mr(pd, addr, len, access);
    if (mr != NULL) {
        ibv_dereg_mr(mr);
        return 0;
    }
    return errno;
}

static int
check_ro(void)
{
    uint8_t *ro = mmap(NULL, 2 * PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    uint8_t *gone = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *half = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct ibv_mr *mr;
    if (ro == MAP_FAILED || gone == MAP_FAILED || half == MAP_FAILED)
        DIE("mmap");
    munmap(gone, 2 * PAGE);
    munmap(half + PAGE, PAGE);
    errno = 0;
    mr = ibv_reg_mr(pd, ro, 2 * PAGE, RW);
    printf("ro_remote_write=%s\n", mr == NULL ? strerror(errno) : "ok");
    if (mr != NULL) {
        /* a peer's WRITE into it must not crash this process */
        memset(local, 0x5a, 8);
        printf("ro_write_rw=%s\n", status(rdma_op(
            IBV_WR_RDMA_WRITE, (uintptr_t)ro, mr->rkey, 8)));
        ibv_dereg_mr(mr);
        new_qp();
    }
    printf("ro_local_write=%s\n", strerror(reg_errno(
        ro, 8, IBV_ACCESS_LOCAL_WRITE)));
    printf("unmapped=%s\n", strerror(reg_errno(gone, 2 * PAGE, RW)));
    printf("unmapped_read=%s\n", strerror(reg_errno(
        gone, 64, IBV_ACCESS_REMOTE_READ)));
    printf("half_unmapped=%s\n", strerror(reg_errno(half, 2 * PAGE, RW)));
    fflush(stdout);
    /* read-only access is what a read-only mapping allows */
    mr = ibv_reg_mr(pd, ro, 2 * PAGE, IBV_ACCESS_REMOTE_READ);
    printf("ro_read_only=%s\n", mr != NULL ? "ok" : strerror(errno));
    fflush(stdout);
    if (mr == NULL)
        return 1;
    memset(local, 0x5a, 8);
    printf("ro_read=%s\n", status(rdma_op(IBV_WR_RDMA_READ,
                                          (uintptr_t)ro, mr->rkey, 8)));
    fflush(stdout);
    printf("ro_write=%s\n", status(rdma_op(IBV_WR_RDMA_WRITE,
                                           (uintptr_t)ro, mr->rkey, 8)));
    fflush(stdout);
    ibv_dereg_mr(mr);
    printf("end=ok\n");
    return 0;
}

/* Is [p, p + n) all byte c? */
static int
all(const uint8_t *p, size_t n, int c)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i] != c)
            return 0;
    return 1;
}

/* n fresh private anonymous bytes at addr (exactly there), filled with c;
   NULL if the system placed them elsewhere. */
static uint8_t *
map_at(void *addr, size_t n, int c)
{
    uint8_t *p = mmap(addr, n, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        DIE("mmap");
    if (addr != NULL && p != addr) {
        munmap(p, n);
        return NULL;
    }
    memset(p, c, n);
    return p;
}

static int
check_unmap(const char *how)
{
    size_t n = 4 * PAGE, off = 0;
    uint8_t *raw, *buf, *other;
    struct ibv_mr *mr;
    enum ibv_wr_opcode op = IBV_WR_RDMA_WRITE;
    int s;
    /* "unaligned": a buffer that does not start a page (not adopted);
       "imm": WRITE_WITH_IMM, which the target executes itself (a plain
       WRITE may be the initiator's, one-sided) */
    if (strstr(how, "unaligned") != NULL)
        off = 64;
    if (strstr(how, "imm") != NULL)
        op = IBV_WR_RDMA_WRITE_WITH_IMM;
    raw = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
               -1, 0);
    if (raw == MAP_FAILED)
        DIE("mmap");
    buf = raw + off;
    memset(raw, 'a', n);
    mr = ibv_reg_mr(pd, buf, n - off, RW);
    if (mr == NULL)
        DIE("ibv_reg_mr");
    printf("adopted=%d\n", in_sysv_segment(buf));
    munmap(raw, n);
    other = map_at(raw, n, 'o');
    if (other == NULL) {
        printf("placed=elsewhere\n");
        return 0;
    }
    memset(local, 'W', 8);
    s = rdma_op(op, (uintptr_t)buf + PAGE, mr->rkey, 8);
    printf("write=%s\n", status(s));
    printf("other_untouched=%d\n", all(other, n, 'o'));
    if (s == IBV_WC_SUCCESS) {
        /* a NIC's pinned pages: READ gives back what the WRITE put there */
        memset(local, 0, 8);
        if (rdma_op(IBV_WR_RDMA_READ, (uintptr_t)buf + PAGE, mr->rkey, 8) ==
            IBV_WC_SUCCESS)
            printf("read_back=%.8s\n", (const char *)local);
    }
    else
        new_qp();
    fflush(stdout);
    if (ibv_dereg_mr(mr))
        DIE("ibv_dereg_mr");
    printf("other_after_dereg=%d\n", all(other, n, 'o'));
    munmap(other, n);
    return 0;
}

/* local: the program unmaps a buffer registered for its own WRs (the
   requester's side), maps other memory there, and READs a peer's bytes
   into it through the old MR: the READ must end in an error, and the
   other memory stay as it is. */
static int
check_local(void)
{
    size_t n = 4 * PAGE;
    uint8_t *raw = map_at(NULL, n, 'a'), *src = map_at(NULL, n, 'S');
    uint8_t *other, *keep = local;
    struct ibv_mr *mr, *smr, *keep_mr = lmr;
    int s;
    mr = ibv_reg_mr(pd, raw + 64, n - 64, IBV_ACCESS_LOCAL_WRITE);
    smr = ibv_reg_mr(pd, src, n, RW);
    if (mr == NULL || smr == NULL)
        DIE("ibv_reg_mr");
    munmap(raw, n);
    other = map_at(raw, n, 'o');
    if (other == NULL) {
        printf("placed=elsewhere\n");
        return 0;
    }
    local = raw + 64 + PAGE;    /* rdma_op's s/g list: the old MR */
    lmr = mr;
    s = rdma_op(IBV_WR_RDMA_READ, (uintptr_t)src, smr->rkey, 8);
    local = keep;
    lmr = keep_mr;
    printf("read=%s\n", status(s));
    printf("other_untouched=%d\n", all(other, n, 'o'));
    ibv_dereg_mr(mr);
    ibv_dereg_mr(smr);
    return 0;
}

static int
check_stale(const char *how)
{
    size_t n = 4 * PAGE;
    uint8_t *buf = map_at(NULL, n, 'a'), *again;
    struct ibv_mr *old, *mr;
    int s;
    old = ibv_reg_mr(pd, buf, n, RW);
    if (old == NULL)
        DIE("ibv_reg_mr");
    if (strcmp(how, "dereg") == 0) {
        ibv_dereg_mr(old);
        old = NULL;
    }
    munmap(buf, n);
    again = map_at(buf, n, 'n');
    if (again == NULL) {
        printf("placed=elsewhere\n");
        return 0;
    }
    mr = ibv_reg_mr(pd, again, n, RW);
    if (mr == NULL)
        DIE("ibv_reg_mr again");
    memset(local, 'W', 8);
    s = rdma_op(IBV_WR_RDMA_WRITE, (uintptr_t)again + PAGE, mr->rkey, 8);
    printf("write=%s\n", status(s));
    printf("write_seen=%d\n", all(again + PAGE, 8, 'W'));
    again[2 * PAGE] = 'R';
    memset(local, 0, 8);
    s = rdma_op(IBV_WR_RDMA_READ, (uintptr_t)again + 2 * PAGE, mr->rkey, 8);
    printf("read=%s\n", status(s));
    printf("read_got=%.8s\n", (const char *)local);
    fflush(stdout);
    ibv_dereg_mr(mr);
    if (old != NULL)
        ibv_dereg_mr(old);
    munmap(again, n);
    return 0;
}

/* signal: the handler stores a counter that goes up by one into the
   buffer's words in turn; the main thread registers and deregisters. */
#define SIG_WORDS (64 * PAGE / 8)
static volatile uint64_t *sbuf;
static volatile uint64_t stored;        /* stores the handler made */

static void
on_alarm(int sig)
{
    (void)sig;
    sbuf[stored % SIG_WORDS] = stored + 1;
    stored++;
}

/* A timer whose signal goes to this thread only (a process-directed
   SIGALRM goes to any thread that does not block it, and two handlers
   at once would race on the counter): 0 or -1. */
static int
thread_timer(timer_t *t, long ns)
{
    struct sigevent ev;
    struct itimerspec it;
    memset(&ev, 0, sizeof(ev));
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGALRM;
    ev._sigev_un._tid = gettid();
    if (timer_create(CLOCK_MONOTONIC, &ev, t))
        return -1;
    memset(&it, 0, sizeof(it));
    it.it_interval.tv_nsec = ns;
    it.it_value.tv_nsec = ns;
    return timer_settime(*t, 0, &it, NULL);
}

static int
check_signal(int rounds)
{
    struct sigaction sa;
    timer_t t;
    uint64_t i, n, bad = 0;
    int r;
    sbuf = (volatile uint64_t *)map_at(NULL, 64 * PAGE, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL))
        DIE("sigaction");
    if (thread_timer(&t, 50000))
        DIE("timer");
    for (r = 0; r < rounds; r++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, (void *)sbuf, 64 * PAGE, RW);
        if (mr == NULL)
            DIE("ibv_reg_mr");
        if (r == 0)
            printf("adopted=%d\n", in_sysv_segment((const void *)sbuf));
        if (ibv_dereg_mr(mr))
            DIE("ibv_dereg_mr");
    }
    timer_delete(t);
    n = stored;
    /* each word holds what the handler stored there last */
    for (i = n > SIG_WORDS ? n - SIG_WORDS : 0; i < n; i++)
        if (sbuf[i % SIG_WORDS] != i + 1)
            bad++;
    printf("rounds=%d\n", rounds);
    printf("signals=%s\n", n > 0 ? "some" : "none");
    printf("lost=%llu\n", (unsigned long long)bad);
    return 0;
}

int
main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    const char *how = argc > 2 ? argv[2] : "";
    setvbuf(stdout, NULL, _IOLBF, 0);
    setup();
    if (strcmp(what, "ro") == 0)
        return check_ro();
    if (strcmp(what, "unmap") == 0)
        return check_unmap(how);
    if (strcmp(what, "local") == 0)
        return check_local();
    if (strcmp(what, "stale") == 0)
        return check_stale(how);
    if (strcmp(what, "signal") == 0)
        return check_signal(argc > 2 ? atoi(how) : 200);
    fprintf(stderr, "usage: mr_safety ro|unmap [unaligned][imm]|local|"
            "stale keep|dereg|signal [rounds]\n");
    return 2;
}
