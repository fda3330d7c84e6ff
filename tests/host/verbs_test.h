/* verbs_test.h - what the C verbs programs of tests/host share
   (c_front_probe.c, c_front_teardown.c, c_front_mt_post.c, mr_safety.c,
   adopt_race.c and others): the exit on a failed call, connecting an RC
   QP, and whether memory is an adopted SysV segment.  Functions are
   static inline, so a program that uses only some of them compiles
   cleanly under -Wall -Wextra -Werror. */
#ifndef RDMA_TESTS_VERBS_TEST_H
#define RDMA_TESTS_VERBS_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

/* Print what failed (with errno) and exit 2. */
#define DIE(what) do { perror(what); exit(2); } while (0)

/* Bring qp from RESET to RTS on port 1, connected to QP number dqpn at
   LID lid (the fabric addresses by LID), with remote access flags access
   and retry_cnt and rnr_retry both retry.  0, or the errno of the
   modify_qp that failed. */
static inline int
connect_rc(struct ibv_qp *qp, uint32_t dqpn, uint16_t lid, int access,
           int retry)
{
    struct ibv_qp_attr a;
    int rc;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    if ((rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                            IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dqpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = lid;
    a.ah_attr.port_num = 1;
    if ((rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
                            IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                            IBV_QP_MIN_RNR_TIMER)))
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = retry;
    a.rnr_retry = retry;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* 1 if the mapping that holds p is a SysV shared memory segment (the
   fabric adopted the memory), else 0. */
static inline int
in_sysv_segment(const volatile void *p)
{
    char line[512];
    int r = 0;
    FILE *f = fopen("/proc/self/maps", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 &&
            lo <= (unsigned long)p && (unsigned long)p < hi) {
            r = strstr(line, "/SYSV") != NULL;
            break;
        }
    }
    if (f != NULL)
        fclose(f);
    return r;
}

#endif /* RDMA_TESTS_VERBS_TEST_H */
