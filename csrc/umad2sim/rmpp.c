/* rmpp.c - RMPP for agents registered with an rmpp_version: a long send cut into DATA segments, DATA segments joined on receipt. */
#define _GNU_SOURCE
#include "umad2sim.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The classes that may use RMPP and the size of their headers (common,
 * RMPP and class header: where a segment's data starts). */
#define CLASS_SA 0x03
#define CLASS_DEV_MGT 0x06
#define CLASS_DEV_ADM 0x10
#define CLASS_BIS 0x12
#define RESPTIME_NONE (0x1f << 3)   /* RRespTime bits of the flags byte */

int rmpp_class(uint8_t c)
{
    return c == CLASS_SA || c == CLASS_DEV_MGT || c == CLASS_DEV_ADM ||
           c == CLASS_BIS || (c >= 0x30 && c <= 0x4f);
}

size_t rmpp_data_offset(uint8_t c)
{
    if (c == CLASS_SA)
        return 56;
    if (c == CLASS_DEV_MGT || c == CLASS_DEV_ADM || c == CLASS_BIS)
        return 64;
    if (c >= 0x30 && c <= 0x4f)
        return 40;
    return RMPP_HDR;
}

/* Return 1 if the MAD is of an RMPP class and has the Active flag. */
int rmpp_active(const uint8_t *mad)
{
    return rmpp_class(mad[MO_CLASS]) &&
           (mad[MO_RMPP_FLAGS] & RMPP_FLAG_ACTIVE);
}

/* Send the message mad[0..len) as DATA segments, each in *pkt (whose
 * addresses the caller set): the headers of the message, then the next
 * piece of data, with the RMPP header as the kernel writes it (First on
 * the first, Last on the last, PayloadLength on both).  ibsim neither
 * drops nor reorders, so there is no window and no ACK to wait for.
 * nowait: as for link_send.  Return 0 or -1 with errno. */
int rmpp_send(const struct agent *a, struct sim_packet *pkt,
              const uint8_t *mad, size_t len, int nowait)
{
    size_t hdr = rmpp_data_offset(mad[MO_CLASS]);
    size_t seg = MAD_SIZE - hdr, data, nseg, pad, i, off, n;
    uint32_t paylen;
    uint8_t *m = pkt->mad;

    if (len < hdr) {
        errno = EINVAL;
        return -1;
    }
    data = len - hdr;
    nseg = data ? (data + seg - 1) / seg : 1;
    pad = nseg * seg - data;
    for (i = 1; i <= nseg; i++) {
        off = hdr + (i - 1) * seg;
        n = off < len ? len - off : 0;
        if (n > seg)
            n = seg;
        memset(m, 0, MAD_SIZE);
        memcpy(m, mad, hdr);
        memcpy(m + hdr, mad + off, n);
        m[MO_RMPP_VERSION] = a->rmpp_version;
        m[MO_RMPP_TYPE] = RMPP_TYPE_DATA;
        m[MO_RMPP_FLAGS] = RESPTIME_NONE | RMPP_FLAG_ACTIVE |
                           (i == 1 ? RMPP_FLAG_FIRST : 0) |
                           (i == nseg ? RMPP_FLAG_LAST : 0);
        m[MO_RMPP_STATUS] = 0;
        put_be32(m + MO_RMPP_SEG, (uint32_t)i);
        paylen = 0;
        if (i == 1)
            paylen = (uint32_t)(nseg * RMPP_SEG_PAYLOAD - pad);
        if (i == nseg)
            paylen = (uint32_t)(RMPP_SEG_PAYLOAD - pad);
        put_be32(m + MO_RMPP_PAYLEN, paylen);
        pkt->length = htobe64(MAD_SIZE);
        if (link_send(pkt, nowait) < 0)
            return -1;
    }
    SIM_LOG("sent %zu bytes as %zu RMPP segments", len, nseg);
    return 0;
}

static struct reasm *find(uint16_t tag, uint64_t tid, uint32_t slid)
{
    struct reasm *r;

    for (r = sim.reasm; r; r = r->next)
        if (r->tag == tag && r->tid == tid && r->slid == slid)
            return r;
    return NULL;
}

static void discard(struct reasm *r)
{
    struct reasm **pp;

    for (pp = &sim.reasm; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    free(r->buf);
    free(r);
}

/* Append n bytes to r's buffer; return 0 or -1 (no memory). */
static int append(struct reasm *r, const uint8_t *p, size_t n)
{
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        uint8_t *b;

        while (cap < r->len + n)
            cap *= 2;
        b = realloc(r->buf, cap);
        if (!b)
            return -1;
        r->buf = b;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    return 0;
}

/* A new transfer for the First segment pkt; NULL when out of memory. */
static struct reasm *start(struct agent *a, const struct sim_packet *pkt,
                           const struct ib_user_mad_hdr *hdr)
{
    struct reasm *r = calloc(1, sizeof(*r));

    if (!r)
        return NULL;
    r->tag = a->tag;
    r->tid = get_be64(pkt->mad + MO_TID);
    r->slid = pkt->slid;
    r->next_seg = 1;
    r->hdr = *hdr;
    r->next = sim.reasm;
    sim.reasm = r;
    return r;
}

/* The joined message of a transfer whose Last segment came: its length
 * is what the segments hold less the pad the Last PayloadLength tells. */
static struct packet *finish(struct reasm *r, const uint8_t *last)
{
    size_t hdr = rmpp_data_offset(r->buf[MO_CLASS]);
    uint32_t paylen = get_be32(last + MO_RMPP_PAYLEN);
    size_t pad = paylen <= RMPP_SEG_PAYLOAD ? RMPP_SEG_PAYLOAD - paylen : 0;
    size_t len = r->len;
    struct packet *p;

    if (pad > len - hdr)
        pad = 0;
    len -= pad;
    p = packet_new(len);
    if (p) {
        p->hdr = r->hdr;
        memcpy(p->data, r->buf, len);
        SIM_LOG("joined %u RMPP segments: %zu bytes", r->next_seg - 1,
                len);
    }
    discard(r);
    return p;
}

/* Take one RMPP MAD for a kernel-RMPP agent (sim.lock held): a DATA
 * segment is joined to its transfer, and the whole message is returned
 * after its Last segment; ACK, STOP and ABORT are consumed, as the
 * kernel's MAD layer does.  A segment out of sequence drops its transfer
 * (the application's timeout reports it).  NULL: nothing to deliver. */
struct packet *rmpp_receive(struct agent *a, const struct sim_packet *pkt,
                            const struct ib_user_mad_hdr *hdr)
{
    const uint8_t *m = pkt->mad;
    uint8_t flags = m[MO_RMPP_FLAGS];
    uint32_t seg = get_be32(m + MO_RMPP_SEG);
    size_t off = rmpp_data_offset(m[MO_CLASS]);
    struct reasm *r;

    if (m[MO_RMPP_TYPE] != RMPP_TYPE_DATA)
        return NULL;
    r = find(a->tag, get_be64(m + MO_TID), pkt->slid);
    if (flags & RMPP_FLAG_FIRST) {
        if (r)
            discard(r);
        r = seg == 1 ? start(a, pkt, hdr) : NULL;
        if (!r || append(r, m, MAD_SIZE) < 0)
            goto drop;
    } else if (!r || seg != r->next_seg ||
               append(r, m + off, MAD_SIZE - off) < 0) {
        goto drop;
    }
    r->next_seg++;
    if (flags & RMPP_FLAG_LAST)
        return finish(r, m);
    return NULL;
drop:
    SIM_LOG("RMPP segment %u out of sequence: transfer dropped", seg);
    if (r)
        discard(r);
    return NULL;
}

/* Drop every transfer of an agent that goes away. */
void rmpp_forget(uint16_t tag)
{
    struct reasm **pp = &sim.reasm;

    while (*pp) {
        struct reasm *r = *pp;

        if (r->tag == tag) {
            *pp = r->next;
            free(r->buf);
            free(r);
        } else {
            pp = &r->next;
        }
    }
}
