/* fabric_rogue.c - a raw UCP peer of the software fabric for the security
   tests (tests/host/test_fabric_security.py): it connects to a fabric node
   and sends whatever active messages it is told to, headers and all, so
   that forged and malformed messages reach the node exactly as a hostile
   peer would send them.

   Usage:  fabric_rogue addr RECORD_FILE   (the node's worker address,
                                            read from its node record)
           fabric_rogue sock IPV4 PORT     (the node's sockaddr listener)
   Then one command per line on stdin, one answer line on stdout:
     send AM_ID FLAGS HEADER_HEX PAYLOAD_HEX|-   -> "sent STATUS"
         (FLAGS 1: UCP_AM_SEND_FLAG_REPLY)
     wait MS    progress for MS ms                -> "alive" or "closed"
     recv MS    progress until an active message comes (the node's
                CHALLENGE to a HELLO), at most MS ms
                                         -> "got HEADER_HEX" or "none"
     quit
   The record layout is the provider's struct record (csrc/fabric/fabric.h). */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <ucp/api/ucp.h>

/* The head of a node record (struct record in csrc/fabric/fabric.h). */
struct record {
    uint32_t magic;        /* REC_MAGIC */
    pid_t pid;             /* owner */
    unsigned long netns;   /* its network namespace */
    unsigned long pidns;   /* its pid namespace */
    char boot_id[40];      /* its host */
    uint64_t guid;         /* its GUID */
    uint16_t lid;          /* its LID */
    uint64_t secret[2];    /* its HELLO key */
    uint32_t alen;         /* worker address bytes that follow */
};

static int ep_failed;      /* the node closed the endpoint (or it failed) */

/* Headers of the active messages received, not yet printed. */
#define RXQ 64
static uint8_t rxq[RXQ][256];
static size_t rxq_len[RXQ];
static int rxq_head, rxq_tail;

static ucs_status_t
am_cb(void *arg, const void *header, size_t header_length, void *data,
      size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg;
    (void)data;
    (void)length;
    (void)param;
    if (rxq_tail - rxq_head < RXQ && header_length <= sizeof(rxq[0])) {
        memcpy(rxq[rxq_tail % RXQ], header, header_length);
        rxq_len[rxq_tail % RXQ] = header_length;
        rxq_tail++;
    }
    return UCS_OK;
}

static void
err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    (void)status;
    ep_failed = 1;
}

static double
now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Hex string to bytes (malloc'd); "-" is empty. */
static uint8_t *
unhex(const char *s, size_t *n)
{
    size_t len = strcmp(s, "-") == 0 ? 0 : strlen(s) / 2, i;
    uint8_t *b = malloc(len ? len : 1);
    for (i = 0; b != NULL && i < len; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        b[i] = (uint8_t)v;
    }
    *n = len;
    return b;
}

int
main(int argc, char **argv)
{
    ucp_params_t pp;
    ucp_worker_params_t wp;
    ucp_ep_params_t ep;
    ucp_context_h ctx;
    ucp_worker_h w;
    ucp_ep_h e;
    struct sockaddr_in sin;
    void *addr = NULL;
    char line[1 << 17];

    if (argc < 3) {
        fprintf(stderr, "usage: fabric_rogue addr RECORD | sock IP PORT\n");
        return 2;
    }
    memset(&pp, 0, sizeof(pp));
    pp.field_mask = UCP_PARAM_FIELD_FEATURES;
    pp.features = UCP_FEATURE_AM;
    if (ucp_init(&pp, NULL, &ctx) != UCS_OK)
        return 3;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(ctx, &wp, &w) != UCS_OK)
        return 3;
    {
        ucp_am_handler_param_t hp;
        memset(&hp, 0, sizeof(hp));
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                        UCP_AM_HANDLER_PARAM_FIELD_CB;
        hp.id = 17;             /* AM_REQ: control messages come so */
        hp.cb = am_cb;
        if (ucp_worker_set_am_recv_handler(w, &hp) != UCS_OK)
            return 3;
    }
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.err_handler.cb = err_cb;
    if (strcmp(argv[1], "addr") == 0) {
        struct record r;
        FILE *f = fopen(argv[2], "rb");
        if (f == NULL || fread(&r, sizeof(r), 1, f) != 1 ||
            (addr = malloc(r.alen)) == NULL ||
            fread(addr, r.alen, 1, f) != 1) {
            fprintf(stderr, "fabric_rogue: cannot read %s\n", argv[2]);
            return 4;
        }
        fclose(f);
        ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep.address = addr;
        ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    }
    else if (argc >= 4) {
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)atoi(argv[3]));
        inet_pton(AF_INET, argv[2], &sin.sin_addr);
        ep.field_mask |= UCP_EP_PARAM_FIELD_SOCK_ADDR |
                         UCP_EP_PARAM_FIELD_FLAGS;
        ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        ep.sockaddr.addr = (struct sockaddr *)&sin;
        ep.sockaddr.addrlen = sizeof(sin);
        ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    }
    if (ucp_ep_create(w, &ep, &e) != UCS_OK)
        return 5;
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        char hdr[4096], pl[sizeof(line)];
        unsigned id, flags;
        int ms;
        if (sscanf(line, "send %u %u %4095s %131000s", &id, &flags, hdr,
                   pl) == 4) {
            size_t hn, pn;
            uint8_t *h = unhex(hdr, &hn), *p = unhex(pl, &pn);
            ucp_request_param_t prm;
            ucs_status_ptr_t r;
            ucs_status_t st = UCS_OK;
            double t0 = now_s();
            memset(&prm, 0, sizeof(prm));
            prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            prm.flags = flags;
            r = ucp_am_send_nbx(e, id, h, hn, p, pn, &prm);
            if (UCS_PTR_IS_PTR(r)) {
                while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS &&
                       now_s() - t0 < 5)
                    ucp_worker_progress(w);
                ucp_request_free(r);
            }
            else
                st = UCS_PTR_STATUS(r);
            printf("sent %d\n", (int)st);
            free(h);
            free(p);
        }
        else if (sscanf(line, "recv %d", &ms) == 1) {
            double t0 = now_s();
            while (rxq_head == rxq_tail && now_s() - t0 < ms / 1000.0)
                ucp_worker_progress(w);
            if (rxq_head == rxq_tail)
                printf("none\n");
            else {
                size_t i, k = (size_t)(rxq_head++ % RXQ);
                printf("got ");
                for (i = 0; i < rxq_len[k]; i++)
                    printf("%02x", rxq[k][i]);
                printf("\n");
            }
        }
        else if (sscanf(line, "wait %d", &ms) == 1) {
            double t0 = now_s();
            while (!ep_failed && now_s() - t0 < ms / 1000.0)
                ucp_worker_progress(w);
            printf(ep_failed ? "closed\n" : "alive\n");
        }
        else
            break;
        fflush(stdout);
    }
    /* the process ends: the node sees the connection go */
    return 0;
}
