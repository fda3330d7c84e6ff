/* Context import through the verbs front end
   (tests/host/test_c_front.py): an unmodified libibverbs program on ucx0.
   ibv_import_device on a dup of a context's cmd_fd, ibv_import_pd and
   ibv_import_mr by handle (keys and length, no address, as the kernel
   gives), a QP of the imported context in the imported PD WRITEs with
   the imported MR's lkey into the original MR; the original PD and MR
   are busy while views of them are left; bad handles; unimport, then
   everything closes.  Prints key=value lines. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs_test.h"

#define SZ 4096
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
             IBV_ACCESS_REMOTE_READ)

static const char *
write_self(struct ibv_context *ctx, struct ibv_pd *pd, uint16_t lid,
           struct ibv_mr *src, void *from, struct ibv_mr *dst, void *to)
{
    struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    struct ibv_qp_init_attr ia;
    struct ibv_sge sge = {(uintptr_t)from, 8, src->lkey};
    struct ibv_send_wr wr, *bad;
    struct ibv_wc wc;
    struct ibv_qp *qp;
    int i, n = 0;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 2;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp = cq != NULL ? ibv_create_qp(pd, &ia) : NULL;
    if (qp == NULL || connect_rc(qp, qp->qp_num, lid, ACC, 7))
        DIE("qp on the imported context");
    memset(&wr, 0, sizeof(wr));
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.rkey = dst->rkey;
    wr.wr.rdma.remote_addr = (uintptr_t)to;
    if (ibv_post_send(qp, &wr, &bad))
        DIE("post");
    for (i = 0; i < 100000 && n == 0; i++) {
        n = ibv_poll_cq(cq, 1, &wc);
        if (n == 0)
            usleep(50);
    }
    if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq))
        DIE("teardown of the QP");
    return n == 1 ? ibv_wc_status_str(wc.status) : "none";
}

int
main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = NULL, *ictx;
    struct ibv_port_attr port;
    struct ibv_pd *pd, *ipd;
    struct ibv_mr *mr, *imr;
    char *buf = calloc(1, SZ);
    int i;

    setvbuf(stdout, NULL, _IOLBF, 0);
    for (i = 0; list != NULL && list[i] != NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), "ucx0") == 0)
            ctx = ibv_open_device(list[i]);
    if (ctx == NULL || ibv_query_port(ctx, 1, &port))
        DIE("ucx0");
    pd = ibv_alloc_pd(ctx);
    mr = pd != NULL ? ibv_reg_mr(pd, buf, SZ, ACC) : NULL;
    if (mr == NULL)
        DIE("objects");
    ictx = ibv_import_device(dup(ctx->cmd_fd));
    printf("import_device=%d\n", ictx != NULL);
    if (ictx == NULL)
        return 1;
    ipd = ibv_import_pd(ictx, pd->handle);
    imr = ipd != NULL ? ibv_import_mr(ipd, mr->handle) : NULL;
    printf("import_pd=%d %d\n", ipd != NULL, ipd && ipd->handle == pd->handle);
    if (imr == NULL)
        return 1;
    printf("import_mr=%d %d %d %d\n", imr->addr == NULL,
           imr->length == SZ, imr->lkey == mr->lkey, imr->rkey == mr->rkey);
    errno = 0;
    i = ibv_import_pd(ictx, 0xdead) == NULL;
    printf("bad_pd_handle=%d %s\n", i, strerror(errno));
    errno = 0;
    i = ibv_import_mr(ipd, 0xbeef) == NULL;
    printf("bad_mr_handle=%d %s\n", i, strerror(errno));
    memcpy(buf, "imported", 8);
    printf("write=%s %.8s\n", write_self(ictx, ipd, port.lid, imr, buf, mr,
                                         buf + 1024), buf + 1024);
    printf("busy=%s %s\n", strerror(ibv_dereg_mr(mr)),
           strerror(ibv_dealloc_pd(pd)));
    ibv_unimport_mr(imr);
    ibv_unimport_pd(ipd);
    printf("close_imported=%d\n", ibv_close_device(ictx));
    printf("close=%d %d %d\n", ibv_dereg_mr(mr), ibv_dealloc_pd(pd),
           ibv_close_device(ctx));
    ibv_free_device_list(list);
    free(buf);
    return 0;
}
