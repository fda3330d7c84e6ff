/* sqd.c - send WRs posted while the QP is in SQD.  The IBA lets a
   program post to a QP whose send queue is drained (or draining); a NIC
   queues the WRs and starts none of them until the QP is back in RTS.
   The fabric starts a WR in ibv_post_send itself, so a WR posted in SQD
   is checked as post_send would check it (the same errno values), copied
   (its s/g list, and its data if inline: the program may reuse an
   inline buffer at once) and kept on the QP's held list.  On SQD -> RTS
   the list is posted, in order, before any WR posted later (modify_qp
   posts it; a post_send that finds it first posts it before its own);
   a move to ERR flushes it (IBV_WC_WR_FLUSH_ERR, after the completions
   of the WRs posted before), RESET and destroy forget it. */
#include "fabric.h"

/* One held WR: the WR, its s/g list, and inline data after it. */
struct held {
    struct pyrdma_send_wr wr;      /* first: the list links the WRs */
    struct pyrdma_sge sge[];
};

/* A copy of wr that outlives the caller's buffers; NULL if out of
   memory. */
static struct pyrdma_send_wr *
held_copy(const struct pyrdma_send_wr *wr)
{
    int inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
    size_t n = (size_t)wr->num_sge, total = 0, i;
    struct held *h;
    uint8_t *data;

    for (i = 0; i < n; i++)
        total += wr->sg_list[i].length;
    h = malloc(sizeof(*h) + n * sizeof(h->sge[0]) + (inl ? total : 0));
    if (h == NULL)
        return NULL;
    h->wr = *wr;
    h->wr.next = NULL;
    h->wr.sg_list = h->sge;
    if (!inl) {
        if (n != 0)
            memcpy(h->sge, wr->sg_list, n * sizeof(h->sge[0]));
        return &h->wr;
    }
    /* inline: the bytes now, as one element (its lkey is not used) */
    data = (uint8_t *)&h->sge[n];
    for (i = 0, total = 0; i < n; i++) {
        memcpy(data + total, (const void *)(uintptr_t)wr->sg_list[i].addr,
               wr->sg_list[i].length);
        total += wr->sg_list[i].length;
    }
    h->wr.num_sge = total != 0;
    h->sge[0].addr = (uint64_t)(uintptr_t)data;
    h->sge[0].length = (uint32_t)total;
    h->sge[0].lkey = 0;
    return &h->wr;
}

/* Hold the WRs of the list wr on q, in SQD (post_lock and N.lock held):
   0, or the errno of the first one refused (left at *bad; the ones
   before it are held). */
int
fab_sqd_hold(struct uqp *q, struct pyrdma_send_wr *wr,
             struct pyrdma_send_wr **bad)
{
    for (; wr != NULL; wr = wr->next) {
        struct pyrdma_send_wr *c;
        int rc = fab_post_check(q, wr);
        if (rc == 0 &&
            q->n_held + (q->sq_tail - q->sq_head) >= q->cap.max_send_wr)
            rc = ENOMEM;
        if (rc == 0 && (c = held_copy(wr)) == NULL)
            rc = ENOMEM;
        if (rc) {
            *bad = wr;
            return rc;
        }
        if (q->held == NULL)
            q->held = c;
        else
            q->held_last->next = c;
        q->held_last = c;
        q->n_held++;
    }
    return 0;
}

/* The held list, taken from q if q is out of SQD (N.lock held): in RTS
   to be posted, in ERR to flush in the order of posting; NULL if there
   is none. */
struct pyrdma_send_wr *
fab_sqd_take(struct uqp *q)
{
    struct pyrdma_send_wr *l = q->held;
    if (l == NULL || q->attr.qp_state == IBV_QPS_SQD)
        return NULL;
    q->held = q->held_last = NULL;
    q->n_held = 0;
    return l;
}

/* The WRs of a taken list from rest on that post_send refused: back at
   the head of q's held list (N.lock held); the ones before rest, posted,
   are freed. */
void
fab_sqd_put_back(struct uqp *q, struct pyrdma_send_wr *l,
                 struct pyrdma_send_wr *rest)
{
    struct pyrdma_send_wr *w;
    while (l != rest) {
        w = l->next;
        free(l);
        l = w;
    }
    if (rest == NULL)
        return;
    for (w = rest; w->next != NULL; w = w->next)
        q->n_held++;
    q->n_held++;
    w->next = q->held;
    if (q->held == NULL)
        q->held_last = w;
    q->held = rest;
}

/* Forget q's held WRs (RESET, destroy; N.lock held). */
void
fab_sqd_forget(struct uqp *q)
{
    fab_sqd_put_back(q, q->held, NULL);
    q->held = q->held_last = NULL;
    q->n_held = 0;
}

/* q is in ERR and its send queue empty (N.lock held): each held WR
   completes with IBV_WC_WR_FLUSH_ERR, in order. */
void
fab_sqd_flush(struct uqp *q)
{
    struct pyrdma_send_wr *w;
    if (q->held == NULL || q->attr.qp_state != IBV_QPS_ERR ||
        q->sq_head != q->sq_tail)
        return;
    for (w = q->held; w != NULL; w = w->next) {
        struct pyrdma_wc wc;
        memset(&wc, 0, sizeof(wc));
        wc.wr_id = w->wr_id;
        wc.status = IBV_WC_WR_FLUSH_ERR;
        wc.opcode = (w->opcode >= 0 && w->opcode <= IBV_WR_SEND_WITH_INV)
                    ? fab_wc_opcode_of[w->opcode] : IBV_WC_SEND;
        wc.qp_num = q->qpn;
        fab_cq_push(q->scq, &wc, 0);
    }
    fab_sqd_forget(q);
}
