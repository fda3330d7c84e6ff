/* verbs_loop.c - C reference loops for the benchmarks: two RC QPs in one
 * process and one thread, connected through one device (rxe0 loopback).
 *
 *   verbs_loop write-rate SECONDS [SIZE]   RDMA WRITE, signaled, <=64 in flight
 *   verbs_loop send-rate SECONDS [SIZE]    SEND, signaled, <=64 in flight
 *   verbs_loop pingpong SECONDS [SIZE]     SEND/RECV round trip, A->B->A
 *   verbs_loop write-bw SECONDS [SIZE]     RDMA WRITE of SIZE (64 KiB), <=16
 *   verbs_loop mw-rate SECONDS [SIZE]      IBV_WR_BIND_MW of a type 2 window
 *                                          over SIZE bytes + IBV_WR_LOCAL_INV
 *                                          of it (ops: pairs), <=32 in flight
 *
 * Environment: BENCH_DEVICE (rxe0), BENCH_GID_INDEX (1).  Prints one line:
 * "<mode> size=<n> ops=<n> seconds=<s> mops=<x> usec=<x> mib_s=<x>".
 * Build: gcc -O2 -o verbs_loop verbs_loop.c -libverbs (no -march=native).
 */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEPTH 64

struct end {
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static int gid_index = 1;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void make_end(struct end *e, size_t size)
{
	struct ibv_qp_init_attr ia = {0};

	e->scq = ibv_create_cq(ctx, 4 * DEPTH, NULL, NULL, 0);
	e->rcq = ibv_create_cq(ctx, 4 * DEPTH, NULL, NULL, 0);
	if (!e->scq || !e->rcq)
		die("ibv_create_cq");
	ia.send_cq = e->scq;
	ia.recv_cq = e->rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	ia.cap.max_send_wr = 2 * DEPTH;
	ia.cap.max_recv_wr = 2 * DEPTH;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	e->qp = ibv_create_qp(pd, &ia);
	if (!e->qp)
		die("ibv_create_qp");
	e->buf = aligned_alloc(4096, size < 4096 ? 4096 : size);
	memset(e->buf, 0x5a, size);
	e->mr = ibv_reg_mr(pd, e->buf, size, IBV_ACCESS_LOCAL_WRITE |
			   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			   IBV_ACCESS_MW_BIND);
	if (!e->mr)
		die("ibv_reg_mr");
}

static void bring_up(struct end *me, struct end *peer)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(me->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 1;
	if (ibv_modify_qp(me->qp, &a, IBV_QP_STATE | IBV_QP_AV |
			  IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(me->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			  IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify RTS");
}

static void post_recv(struct end *e, size_t size)
{
	struct ibv_sge s = {(uintptr_t)e->buf, (uint32_t)size, e->mr->lkey};
	struct ibv_recv_wr w = {.wr_id = 2, .sg_list = &s, .num_sge = 1}, *bad;

	if (ibv_post_recv(e->qp, &w, &bad))
		die("ibv_post_recv");
}

static void post_one(struct end *from, struct end *to, enum ibv_wr_opcode op,
		     size_t size)
{
	struct ibv_sge s = {(uintptr_t)from->buf, (uint32_t)size, from->mr->lkey};
	struct ibv_send_wr w = {0}, *bad;

	w.wr_id = 1;
	w.sg_list = &s;
	w.num_sge = 1;
	w.opcode = op;
	w.send_flags = IBV_SEND_SIGNALED;
	w.wr.rdma.remote_addr = (uintptr_t)to->buf;
	w.wr.rdma.rkey = to->mr->rkey;
	if (ibv_post_send(from->qp, &w, &bad))
		die("ibv_post_send");
}

static int poll_some(struct ibv_cq *cq, int max)
{
	struct ibv_wc wc[DEPTH];
	int n = ibv_poll_cq(cq, max < DEPTH ? max : DEPTH, wc);

	if (n < 0)
		die("ibv_poll_cq");
	for (int i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_SUCCESS) {
			fprintf(stderr, "completion error: %s\n",
				ibv_wc_status_str(wc[i].status));
			exit(1);
		}
	return n;
}

/* Streams of WRITE or SEND with at most `window` in flight. */
static long stream(struct end *a, struct end *b, enum ibv_wr_opcode op,
		   size_t size, int window, double seconds, double *elapsed)
{
	long done = 0, posted = 0;
	int recvs = 0;
	double t0 = now(), t = t0;

	if (op == IBV_WR_SEND)
		for (; recvs < 2 * DEPTH - 1; recvs++)
			post_recv(b, size);
	while (t - t0 < seconds) {
		while (posted - done < window) {
			post_one(a, b, op, size);
			posted++;
		}
		done += poll_some(a->scq, DEPTH);
		if (op == IBV_WR_SEND) {
			int n = poll_some(b->rcq, DEPTH);

			for (int i = 0; i < n; i++)
				post_recv(b, size);
		}
		t = now();
	}
	while (done < posted)
		done += poll_some(a->scq, DEPTH);
	*elapsed = now() - t0;
	return done;
}

/* Post a BIND_MW of mw (type 2) over e's buffer with the next rkey, then
   a LOCAL_INV of that rkey, both signaled, each its own ibv_post_send. */
static void post_bind_inv(struct end *e, struct ibv_mw *mw, size_t size)
{
	struct ibv_send_wr w = {0}, *bad;

	w.wr_id = 3;
	w.opcode = IBV_WR_BIND_MW;
	w.send_flags = IBV_SEND_SIGNALED;
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	w.bind_mw.bind_info.mr = e->mr;
	w.bind_mw.bind_info.addr = (uintptr_t)e->buf;
	w.bind_mw.bind_info.length = size;
	w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE |
					      IBV_ACCESS_REMOTE_READ;
	if (ibv_post_send(e->qp, &w, &bad))
		die("ibv_post_send BIND_MW");
	mw->rkey = w.bind_mw.rkey;
	memset(&w, 0, sizeof(w));
	w.wr_id = 4;
	w.opcode = IBV_WR_LOCAL_INV;
	w.send_flags = IBV_SEND_SIGNALED;
	w.invalidate_rkey = mw->rkey;
	if (ibv_post_send(e->qp, &w, &bad))
		die("ibv_post_send LOCAL_INV");
}

/* Bind + invalidate pairs with at most DEPTH / 2 pairs in flight. */
static long mw_pairs(struct end *a, size_t size, double seconds,
		     double *elapsed)
{
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	long done = 0, posted = 0;
	double t0 = now(), t = t0;

	if (!mw)
		die("ibv_alloc_mw");
	while (t - t0 < seconds) {
		while (posted - done < DEPTH) {
			post_bind_inv(a, mw, size);
			posted += 2;
		}
		done += poll_some(a->scq, DEPTH);
		t = now();
	}
	while (done < posted)
		done += poll_some(a->scq, DEPTH);
	*elapsed = now() - t0;
	if (ibv_dealloc_mw(mw))
		die("ibv_dealloc_mw");
	return done / 2;
}

static long pingpong(struct end *a, struct end *b, size_t size, double seconds,
		     double *elapsed)
{
	long iters = 0;
	double t0 = now();

	post_recv(a, size);
	post_recv(b, size);
	do {
		for (int k = 0; k < 16; k++) {
			post_one(a, b, IBV_WR_SEND, size);
			while (!poll_some(b->rcq, 1))
				;
			post_recv(b, size);
			post_one(b, a, IBV_WR_SEND, size);
			while (!poll_some(a->rcq, 1))
				;
			post_recv(a, size);
			/* the send completions are there by now */
			while (!poll_some(a->scq, 1))
				;
			while (!poll_some(b->scq, 1))
				;
			iters++;
		}
	} while (now() - t0 < seconds);
	*elapsed = now() - t0;
	return iters;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	const char *dev = getenv("BENCH_DEVICE");
	const char *gi = getenv("BENCH_GID_INDEX");
	const char *mode;
	double seconds, elapsed = 0;
	size_t size;
	struct end a, b;
	long ops;
	int n;

	if (argc < 3) {
		fprintf(stderr, "usage: %s write-rate|send-rate|pingpong|write-bw"
			"|mw-rate SECONDS [SIZE]\n", argv[0]);
		return 2;
	}
	mode = argv[1];
	seconds = atof(argv[2]);
	size = argc > 3 ? strtoul(argv[3], NULL, 0) :
	       (strcmp(mode, "write-bw") ? 8 : 65536);
	if (gi)
		gid_index = atoi(gi);
	list = ibv_get_device_list(&n);
	for (int i = 0; i < n && !ctx; i++)
		if (!dev || !strcmp(ibv_get_device_name(list[i]), dev))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	if (!pd || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_alloc_pd/ibv_query_gid");
	make_end(&a, size);
	make_end(&b, size);
	bring_up(&a, &b);
	bring_up(&b, &a);

	if (!strcmp(mode, "write-rate"))
		ops = stream(&a, &b, IBV_WR_RDMA_WRITE, size, DEPTH, seconds, &elapsed);
	else if (!strcmp(mode, "send-rate"))
		ops = stream(&a, &b, IBV_WR_SEND, size, DEPTH, seconds, &elapsed);
	else if (!strcmp(mode, "write-bw"))
		ops = stream(&a, &b, IBV_WR_RDMA_WRITE, size, 16, seconds, &elapsed);
	else if (!strcmp(mode, "pingpong"))
		ops = pingpong(&a, &b, size, seconds, &elapsed);
	else if (!strcmp(mode, "mw-rate"))
		ops = mw_pairs(&a, size, seconds, &elapsed);
	else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	printf("%s size=%zu ops=%ld seconds=%.4f mops=%.6f usec=%.3f mib_s=%.3f\n",
	       mode, size, ops, elapsed, ops / elapsed / 1e6, elapsed * 1e6 / ops,
	       ops * (double)size / elapsed / (1 << 20));
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	ibv_dereg_mr(a.mr);
	ibv_dereg_mr(b.mr);
	ibv_destroy_cq(a.scq);
	ibv_destroy_cq(a.rcq);
	ibv_destroy_cq(b.scq);
	ibv_destroy_cq(b.rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
