/* convert.c - the verbs front end: libibverbs' attribute structs to the
   fabric's (provider.h) and back. */
#include "front.h"

/* ------------------------------------------------------------------ */
/* conversions                                                         */

/* Each struct pair below has the same field names on both sides: one
   list of them serves both directions (F: copy one field). */
#define AH_FIELDS(F)                                                    \
    F(grh.flow_label) F(grh.sgid_index) F(grh.hop_limit)                \
    F(grh.traffic_class) F(dlid) F(sl) F(src_path_bits) F(static_rate)  \
    F(is_global) F(port_num)
#define CAP_FIELDS(F)                                                   \
    F(max_send_wr) F(max_recv_wr) F(max_send_sge) F(max_recv_sge)       \
    F(max_inline_data)
#define QP_ATTR_FIELDS(F)                                               \
    F(qp_state) F(cur_qp_state) F(path_mtu) F(path_mig_state) F(qkey)   \
    F(rq_psn) F(sq_psn) F(dest_qp_num) F(pkey_index) F(alt_pkey_index)  \
    F(en_sqd_async_notify) F(sq_draining) F(max_rd_atomic)              \
    F(max_dest_rd_atomic) F(min_rnr_timer) F(port_num) F(timeout)       \
    F(retry_cnt) F(rnr_retry) F(alt_port_num) F(alt_timeout)            \
    F(rate_limit)
#define COPY(f) o->f = a->f;

void
fv_ah_in(struct pyrdma_ah_attr *o, const struct ibv_ah_attr *a)
{
    memset(o, 0, sizeof(*o));
    memcpy(o->grh.dgid, a->grh.dgid.raw, 16);
    AH_FIELDS(COPY)
}

void
fv_ah_out(struct ibv_ah_attr *o, const struct pyrdma_ah_attr *a)
{
    memset(o, 0, sizeof(*o));
    memcpy(o->grh.dgid.raw, a->grh.dgid, 16);
    AH_FIELDS(COPY)
}

void
fv_cap_in(struct pyrdma_qp_cap *o, const struct ibv_qp_cap *a)
{
    CAP_FIELDS(COPY)
}

void
fv_cap_out(struct ibv_qp_cap *o, const struct pyrdma_qp_cap *a)
{
    CAP_FIELDS(COPY)
}

void
fv_qp_attr_in(struct pyrdma_qp_attr *o, const struct ibv_qp_attr *a)
{
    memset(o, 0, sizeof(*o));
    QP_ATTR_FIELDS(COPY)
    o->qp_access_flags = (uint32_t)a->qp_access_flags;
    fv_cap_in(&o->cap, &a->cap);
    fv_ah_in(&o->ah_attr, &a->ah_attr);
    fv_ah_in(&o->alt_ah_attr, &a->alt_ah_attr);
}

void
fv_qp_attr_out(struct ibv_qp_attr *o, const struct pyrdma_qp_attr *a)
{
    memset(o, 0, sizeof(*o));
    QP_ATTR_FIELDS(COPY)
    o->qp_access_flags = (int)a->qp_access_flags;
    fv_cap_out(&o->cap, &a->cap);
    fv_ah_out(&o->ah_attr, &a->ah_attr);
    fv_ah_out(&o->alt_ah_attr, &a->alt_ah_attr);
}

void
fv_port_out(struct ibv_port_attr *o, const struct pyrdma_port_attr *a)
{
    memset(o, 0, sizeof(*o));
    o->state = a->state;
    o->max_mtu = a->max_mtu;
    o->active_mtu = a->active_mtu;
    o->gid_tbl_len = a->gid_tbl_len;
    o->port_cap_flags = a->port_cap_flags;
    o->max_msg_sz = a->max_msg_sz;
    o->bad_pkey_cntr = a->bad_pkey_cntr;
    o->qkey_viol_cntr = a->qkey_viol_cntr;
    o->pkey_tbl_len = a->pkey_tbl_len;
    o->lid = a->lid;
    o->sm_lid = a->sm_lid;
    o->lmc = a->lmc;
    o->max_vl_num = a->max_vl_num;
    o->sm_sl = a->sm_sl;
    o->subnet_timeout = a->subnet_timeout;
    o->init_type_reply = a->init_type_reply;
    o->active_width = a->active_width;
    o->active_speed = a->active_speed;
    o->phys_state = a->phys_state;
    o->link_layer = a->link_layer;
    o->flags = a->flags;
    o->port_cap_flags2 = a->port_cap_flags2;
}

void
fv_device_out(struct ibv_device_attr *o, const struct pyrdma_device_attr *a)
{
    memset(o, 0, sizeof(*o));
    snprintf(o->fw_ver, sizeof(o->fw_ver), "%s", a->fw_ver);
    o->node_guid = htobe64(a->node_guid);
    o->sys_image_guid = htobe64(a->sys_image_guid);
    o->max_mr_size = a->max_mr_size;
    o->page_size_cap = a->page_size_cap;
    o->vendor_id = a->vendor_id;
    o->vendor_part_id = a->vendor_part_id;
    o->hw_ver = a->hw_ver;
    o->max_qp = a->max_qp;
    o->max_qp_wr = a->max_qp_wr;
    o->device_cap_flags = a->device_cap_flags;
    o->max_sge = a->max_sge;
    o->max_sge_rd = a->max_sge_rd;
    o->max_cq = a->max_cq;
    o->max_cqe = a->max_cqe;
    o->max_mr = a->max_mr;
    o->max_pd = a->max_pd;
    o->max_qp_rd_atom = a->max_qp_rd_atom;
    o->max_ee_rd_atom = a->max_ee_rd_atom;
    o->max_res_rd_atom = a->max_res_rd_atom;
    o->max_qp_init_rd_atom = a->max_qp_init_rd_atom;
    o->max_ee_init_rd_atom = a->max_ee_init_rd_atom;
    o->atomic_cap = a->atomic_cap;
    o->max_ee = a->max_ee;
    o->max_rdd = a->max_rdd;
    o->max_mw = a->max_mw;
    o->max_raw_ipv6_qp = a->max_raw_ipv6_qp;
    o->max_raw_ethy_qp = a->max_raw_ethy_qp;
    o->max_mcast_grp = a->max_mcast_grp;
    o->max_mcast_qp_attach = a->max_mcast_qp_attach;
    o->max_total_mcast_qp_attach = a->max_total_mcast_qp_attach;
    o->max_ah = a->max_ah;
    o->max_fmr = a->max_fmr;
    o->max_map_per_fmr = a->max_map_per_fmr;
    o->max_srq = a->max_srq;
    o->max_srq_wr = a->max_srq_wr;
    o->max_srq_sge = a->max_srq_sge;
    o->max_pkeys = a->max_pkeys;
    o->local_ca_ack_delay = a->local_ca_ack_delay;
    o->phys_port_cnt = a->phys_port_cnt;
}

