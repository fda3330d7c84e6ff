/* io.c - write() and read() on a umad file as ib_umad has them, the receiver thread, and sends waiting for their response. */
#define _GNU_SOURCE
#include "umad2sim.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>

#define CLASS_BM 0x05
#define METHOD_TRAP_REPRESS 0x07
#define TID_LOW48 0xffffffffffffull

uint64_t now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* A packet with room for len bytes of MAD; NULL when out of memory. */
struct packet *packet_new(size_t len)
{
    struct packet *p = calloc(1, sizeof(*p) + len);

    if (p)
        p->len = len;
    return p;
}

/* Return 1 if the kernel would take this MAD for a response (its TID
 * then names the agent that sent the request). */
static int is_response(const uint8_t *mad)
{
    uint8_t method = mad[MO_METHOD];

    return (method & MAD_METHOD_RESP) || method == METHOD_TRAP_REPRESS ||
           (mad[MO_CLASS] == CLASS_BM && (mad[23] & 1));
}

/* Send one message of agent a to the address in h: RMPP segments when
 * the kernel would segment it, else one MAD.  nowait: fail rather than
 * wait for room at the server (the receiver thread must never wait on
 * the server, which may be waiting for it).  Return 0 or -1 with errno. */
static int send_message(const struct agent *a, const struct ib_user_mad_hdr *h,
                        const uint8_t *mad, size_t len, int nowait)
{
    struct sim_packet pkt;

    memset(&pkt, 0, sizeof(pkt));
    pkt.dlid = h->lid;
    pkt.slid = h->lid == 0xffff ? 0xffff : 0;   /* 0: the server fills it */
    pkt.dqp = h->qpn;
    pkt.sqp = htobe32(a->qpn);
    if (agent_kernel_rmpp(a) && rmpp_active(mad))
        return rmpp_send(a, &pkt, mad, len, nowait);
    if (len > MAD_SIZE) {
        errno = EINVAL;
        return -1;
    }
    memcpy(pkt.mad, mad, len);
    pkt.length = htobe64(MAD_SIZE);
    return link_send(&pkt, nowait);
}

/* ---- sends that wait for a response (timeout_ms > 0) */

/* When an attempt with this timeout fails.  A little before the timeout
 * (a quarter of it, at most 100 ms): libibmad waits for the answer in
 * poll() with the same timeout and gives up unless the send came back
 * timed out first, which the kernel's timer does at once but our thread,
 * on a loaded machine, may not. */
static uint64_t deadline(uint32_t timeout_ms)
{
    uint64_t t = timeout_ms * 1000000ull;
    uint64_t early = t / 4 < 100000000ull ? t / 4 : 100000000ull;

    return now_ns() + t - early;
}

static void wake_receiver(void)
{
    uint64_t one = 1;

    if (libc_write(sim.wake_fd, &one, sizeof(one)) < 0)
        SIM_LOG("cannot wake the receiver");
}

/* Unlink and return the pending send of agent tag with this TID. */
static struct pending *pending_take(uint16_t tag, uint64_t tid)
{
    struct pending **pp, *p;

    for (pp = &sim.pending; (p = *pp) != NULL; pp = &p->next)
        if (p->tag == tag && p->tid == (tid & TID_LOW48)) {
            *pp = p->next;
            return p;
        }
    return NULL;
}

static void pending_link(struct pending *p)
{
    p->next = sim.pending;
    sim.pending = p;
}

/* Drop the pending sends of an agent that goes away (as the kernel
 * cancels them: nothing comes back). */
void pending_forget(uint16_t tag)
{
    struct pending **pp = &sim.pending;

    while (*pp) {
        struct pending *p = *pp;

        if (p->tag == tag) {
            *pp = p->next;
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

/* Give a send back to its agent's file with status (ETIMEDOUT): the
 * header as written and the MAD's common header, as the kernel does. */
static void give_back(struct pending *p, uint32_t status)
{
    struct agent *a = agent_by_tag(p->tag);
    struct packet *k = a ? packet_new(MAD_HDR) : NULL;
    struct ib_user_mad_hdr *h = (struct ib_user_mad_hdr *)p->umad;

    if (k) {
        k->hdr = *h;
        k->hdr.status = status;
        k->returned = 1;
        memcpy(k->data, p->umad + HDR_NEW, MAD_HDR);
        file_push(a->file, k, 0);
    }
    free(p);
}

/* An attempt of p (unlinked) failed: send it again while retries are
 * left (a resend the server has no room for counts as sent and lost),
 * else give it back timed out. */
static void attempt_failed(struct pending *p)
{
    struct agent *a = agent_by_tag(p->tag);
    struct ib_user_mad_hdr *h = (struct ib_user_mad_hdr *)p->umad;

    if (a && p->retries_left) {
        p->retries_left--;
        p->deadline_ns = deadline(h->timeout_ms);
        if (send_message(a, h, p->umad + HDR_NEW, p->len - HDR_NEW, 1) < 0)
            SIM_LOG("resend failed: %s", strerror(errno));
        pending_link(p);
        return;
    }
    give_back(p, ETIMEDOUT);
}

/* Fail the attempts whose time is up; return the milliseconds until the
 * next deadline (-1: none). */
static int expire_due(void)
{
    uint64_t t = now_ns(), next = UINT64_MAX;
    struct pending **pp = &sim.pending;

    while (*pp) {
        struct pending *p = *pp;

        if (p->deadline_ns <= t) {
            *pp = p->next;
            SIM_LOG("send of agent tag 0x%x timed out", p->tag);
            attempt_failed(p);
            pp = &sim.pending;      /* the list may have changed */
            continue;
        }
        if (p->deadline_ns < next)
            next = p->deadline_ns;
        pp = &p->next;
    }
    if (next == UINT64_MAX)
        return -1;
    return (int)((next - t) / 1000000ull) + 1;
}

/* ---- write */

/* Wait for the response of a request sent with a timeout: a pending
 * entry with a copy of the header and MAD (sim.lock held). */
static void expect_response(uint16_t tag, const struct ib_user_mad_hdr *h,
                            const uint8_t *mad, size_t len)
{
    struct pending *p = calloc(1, sizeof(*p) + HDR_NEW + len);

    if (!p) {
        SIM_LOG("no memory to wait for a response: it will not time out");
        return;
    }
    memcpy(p->umad, h, HDR_NEW);
    memcpy(p->umad + HDR_NEW, mad, len);
    p->len = HDR_NEW + len;
    p->tag = tag;
    p->tid = get_be64(mad + MO_TID) & TID_LOW48;
    p->retries_left = h->retries;
    p->deadline_ns = deadline(h->timeout_ms);
    pending_link(p);
    wake_receiver();
}

/* write() on a umad file: header, then the MAD (a whole RMPP message for
 * an RMPP agent).  A request's TID gets the agent's tag in bits 32-47
 * (ibsim puts its client id in 48-63), so its response finds the agent.
 * The response may be waited for before the send (it can come back
 * before send() returns); the send itself is made without sim.lock.
 * Return count, or -1 with errno. */
ssize_t umad_file_write(struct ufile *f, const void *buf, size_t count)
{
    size_t hs = f->new_hdr ? HDR_NEW : HDR_OLD, len;
    struct ib_user_mad_hdr h;
    struct agent *a, copy;
    uint8_t *mad;
    uint64_t tid = 0;
    int request, rc;

    if (f->issm || count < hs + RMPP_HDR) {
        errno = EINVAL;
        return -1;
    }
    len = count - hs;
    memset(&h, 0, sizeof(h));
    memcpy(&h, buf, hs);
    mad = malloc(len);
    if (!mad)
        return -1;
    memcpy(mad, (const uint8_t *)buf + hs, len);
    request = !is_response(mad);
    memset(&copy, 0, sizeof(copy));
    pthread_mutex_lock(&sim.lock);
    a = h.id < FILE_AGENTS ? f->agents[h.id] : NULL;
    if (a) {
        copy = *a;
        tid = get_be64(mad + MO_TID);
        if (request) {
            tid = (tid & 0xffff0000ffffffffull) | (uint64_t)a->tag << 32;
            put_be64(mad + MO_TID, tid);
            if (h.timeout_ms)
                expect_response(a->tag, &h, mad, len);
        }
    }
    pthread_mutex_unlock(&sim.lock);
    if (!a) {
        free(mad);
        errno = EINVAL;
        return -1;
    }
    rc = send_message(&copy, &h, mad, len, 0);
    if (rc < 0 && request && h.timeout_ms) {
        int err = errno;

        pthread_mutex_lock(&sim.lock);
        free(pending_take(copy.tag, tid));
        pthread_mutex_unlock(&sim.lock);
        errno = err;
    }
    free(mad);
    return rc < 0 ? -1 : (ssize_t)count;
}

/* ---- read */

/* read() on a umad file: one MAD per call, waiting for one unless the
 * file is O_NONBLOCK (EAGAIN then), as the eventfd's own read does.  A
 * buffer smaller than the MAD gets the header (with the length needed)
 * and what fits, ENOSPC, and the MAD stays queued.  Return the bytes
 * read, or -1 with errno. */
ssize_t umad_file_read(struct ufile *f, void *buf, size_t count)
{
    size_t hs = f->new_hdr ? HDR_NEW : HDR_OLD, need, part;
    struct packet *p;
    uint64_t one;

    if (f->issm || count < hs) {
        errno = EINVAL;
        return -1;
    }
    if (libc_read(f->fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        return -1;
    pthread_mutex_lock(&sim.lock);
    p = f->head;
    if (p) {
        f->head = p->next;
        if (!f->head)
            f->tail = NULL;
    }
    pthread_mutex_unlock(&sim.lock);
    if (!p) {
        errno = EAGAIN;
        return -1;
    }
    need = hs + p->len;
    if (!p->returned)
        p->hdr.length = (uint32_t)need;
    if (count < need) {
        part = count - hs < p->len ? count - hs : p->len;
        memcpy(buf, &p->hdr, hs);
        memcpy((uint8_t *)buf + hs, p->data, p->returned ? 0 : part);
        pthread_mutex_lock(&sim.lock);
        file_push(f, p, 1);
        pthread_mutex_unlock(&sim.lock);
        errno = p->returned ? EINVAL : ENOSPC;
        return -1;
    }
    memcpy(buf, &p->hdr, hs);
    memcpy((uint8_t *)buf + hs, p->data, p->len);
    free(p);
    return (ssize_t)need;
}

/* ---- receiving */

/* The header read() gives with a MAD from pkt for agent a. */
static void recv_header(struct ib_user_mad_hdr *h, const struct agent *a,
                        const struct sim_packet *pkt)
{
    memset(h, 0, sizeof(*h));
    h->id = a->id;
    h->qpn = pkt->sqp;
    h->qkey = pkt->sqp == htobe32(1) ? htobe32(GSI_QKEY) : 0;
    h->lid = (uint16_t)pkt->slid;
}

/* The server gave our MAD back undeliverable (no route, no client there,
 * a port dropping MADs): that attempt failed.  A send nobody waits for
 * (timeout_ms 0) is not given back, as with the kernel. */
static void returned_by_server(const struct sim_packet *pkt)
{
    uint64_t tid = get_be64(pkt->mad + MO_TID);
    struct pending *p = pending_take((uint16_t)(tid >> 32), tid);

    SIM_LOG("ibsim gave a MAD back (status %u)%s", be32toh(pkt->status),
            p ? "" : ": nobody waits for it");
    if (p)
        attempt_failed(p);
}

/* Deliver one packet from the server (sim.lock held). */
static void dispatch(const struct sim_packet *pkt)
{
    const uint8_t *m = pkt->mad;
    uint64_t tid = get_be64(m + MO_TID);
    struct ib_user_mad_hdr h;
    struct packet *p;
    struct agent *a;

    if (pkt->status) {
        returned_by_server(pkt);
        return;
    }
    if (is_response(m)) {
        a = agent_by_tag((uint16_t)(tid >> 32));
        if (a)
            free(pending_take(a->tag, tid));
    } else {
        a = agent_for_request(m);
    }
    if (!a) {
        SIM_LOG("no agent for class 0x%x method 0x%x attr 0x%x: dropped",
                m[MO_CLASS], m[MO_METHOD], (unsigned)(m[16] << 8 | m[17]));
        return;
    }
    recv_header(&h, a, pkt);
    if (agent_kernel_rmpp(a) && rmpp_active(m)) {
        p = rmpp_receive(a, pkt, &h);
    } else {
        p = packet_new(MAD_SIZE);
        if (p) {
            p->hdr = h;
            memcpy(p->data, m, MAD_SIZE);
        }
    }
    if (p)
        file_push(a->file, p, 0);
}

static void *receiver(void *arg)
{
    struct pollfd pfd[2];
    struct timespec backoff = {0, 10 * 1000 * 1000};
    struct sim_packet pkt;
    uint64_t v;
    ssize_t n;
    int ms;

    (void)arg;
    pfd[0].fd = sim.data_fd;
    pfd[1].fd = sim.wake_fd;
    pfd[0].events = pfd[1].events = POLLIN;
    for (;;) {
        pthread_mutex_lock(&sim.lock);
        ms = expire_due();
        pthread_mutex_unlock(&sim.lock);
        if (poll(pfd, 2, ms) <= 0)
            continue;
        if (pfd[1].revents && libc_read(sim.wake_fd, &v, sizeof(v)) < 0)
            SIM_LOG("wake read failed");
        if (!pfd[0].revents)
            continue;
        n = recv(sim.data_fd, &pkt, sizeof(pkt), MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            SIM_LOG("receive from ibsim failed: %s", strerror(errno));
            nanosleep(&backoff, NULL);  /* the server is gone: no spin */
            continue;
        }
        if (n != (ssize_t)sizeof(pkt)) {
            if (n >= 0)
                SIM_LOG("short packet from ibsim (%zd bytes) skipped", n);
            continue;
        }
        pthread_mutex_lock(&sim.lock);
        dispatch(&pkt);
        pthread_mutex_unlock(&sim.lock);
    }
    return NULL;
}

/* Start the receiver thread (signals blocked in it, so they go to the
 * application's threads).  Return 0 or -1. */
int receiver_start(void)
{
    pthread_attr_t attr;
    pthread_t t;
    sigset_t all, old;
    int rc;

    sim.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (sim.wake_fd < 0)
        return -1;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &attr, receiver, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc ? -1 : 0;
}
