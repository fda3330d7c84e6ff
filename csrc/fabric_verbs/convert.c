/* convert.c - the verbs front end: libibverbs' attribute structs to the
   fabric's (provider.h) and back. */
#include "front.h"

/* ------------------------------------------------------------------ */
/* conversions                                                         */

void
fv_ah_in(struct pyrdma_ah_attr *o, const struct ibv_ah_attr *a)
{
    memset(o, 0, sizeof(*o));
    memcpy(o->grh.dgid, a->grh.dgid.raw, 16);
    o->grh.flow_label = a->grh.flow_label;
    o->grh.sgid_index = a->grh.sgid_index;
    o->grh.hop_limit = a->grh.hop_limit;
    o->grh.traffic_class = a->grh.traffic_class;
    o->dlid = a->dlid;
    o->sl = a->sl;
    o->src_path_bits = a->src_path_bits;
    o->static_rate = a->static_rate;
    o->is_global = a->is_global;
    o->port_num = a->port_num;
}

void
fv_ah_out(struct ibv_ah_attr *o, const struct pyrdma_ah_attr *a)
{
    memset(o, 0, sizeof(*o));
    memcpy(o->grh.dgid.raw, a->grh.dgid, 16);
    o->grh.flow_label = a->grh.flow_label;
    o->grh.sgid_index = a->grh.sgid_index;
    o->grh.hop_limit = a->grh.hop_limit;
    o->grh.traffic_class = a->grh.traffic_class;
    o->dlid = a->dlid;
    o->sl = a->sl;
    o->src_path_bits = a->src_path_bits;
    o->static_rate = a->static_rate;
    o->is_global = a->is_global;
    o->port_num = a->port_num;
}

void
fv_cap_in(struct pyrdma_qp_cap *o, const struct ibv_qp_cap *c)
{
    o->max_send_wr = c->max_send_wr;
    o->max_recv_wr = c->max_recv_wr;
    o->max_send_sge = c->max_send_sge;
    o->max_recv_sge = c->max_recv_sge;
    o->max_inline_data = c->max_inline_data;
}

void
fv_cap_out(struct ibv_qp_cap *o, const struct pyrdma_qp_cap *c)
{
    o->max_send_wr = c->max_send_wr;
    o->max_recv_wr = c->max_recv_wr;
    o->max_send_sge = c->max_send_sge;
    o->max_recv_sge = c->max_recv_sge;
    o->max_inline_data = c->max_inline_data;
}

void
fv_qp_attr_in(struct pyrdma_qp_attr *o, const struct ibv_qp_attr *a)
{
    memset(o, 0, sizeof(*o));
    o->qp_state = a->qp_state;
    o->cur_qp_state = a->cur_qp_state;
    o->path_mtu = a->path_mtu;
    o->path_mig_state = a->path_mig_state;
    o->qkey = a->qkey;
    o->rq_psn = a->rq_psn;
    o->sq_psn = a->sq_psn;
    o->dest_qp_num = a->dest_qp_num;
    o->qp_access_flags = (uint32_t)a->qp_access_flags;
    fv_cap_in(&o->cap, &a->cap);
    fv_ah_in(&o->ah_attr, &a->ah_attr);
    fv_ah_in(&o->alt_ah_attr, &a->alt_ah_attr);
    o->pkey_index = a->pkey_index;
    o->alt_pkey_index = a->alt_pkey_index;
    o->en_sqd_async_notify = a->en_sqd_async_notify;
    o->sq_draining = a->sq_draining;
    o->max_rd_atomic = a->max_rd_atomic;
    o->max_dest_rd_atomic = a->max_dest_rd_atomic;
    o->min_rnr_timer = a->min_rnr_timer;
    o->port_num = a->port_num;
    o->timeout = a->timeout;
    o->retry_cnt = a->retry_cnt;
    o->rnr_retry = a->rnr_retry;
    o->alt_port_num = a->alt_port_num;
    o->alt_timeout = a->alt_timeout;
    o->rate_limit = a->rate_limit;
}

void
fv_qp_attr_out(struct ibv_qp_attr *o, const struct pyrdma_qp_attr *a)
{
    memset(o, 0, sizeof(*o));
    o->qp_state = a->qp_state;
    o->cur_qp_state = a->cur_qp_state;
    o->path_mtu = a->path_mtu;
    o->path_mig_state = a->path_mig_state;
    o->qkey = a->qkey;
    o->rq_psn = a->rq_psn;
    o->sq_psn = a->sq_psn;
    o->dest_qp_num = a->dest_qp_num;
    o->qp_access_flags = (int)a->qp_access_flags;
    fv_cap_out(&o->cap, &a->cap);
    fv_ah_out(&o->ah_attr, &a->ah_attr);
    fv_ah_out(&o->alt_ah_attr, &a->alt_ah_attr);
    o->pkey_index = a->pkey_index;
    o->alt_pkey_index = a->alt_pkey_index;
    o->en_sqd_async_notify = a->en_sqd_async_notify;
    o->sq_draining = a->sq_draining;
    o->max_rd_atomic = a->max_rd_atomic;
    o->max_dest_rd_atomic = a->max_dest_rd_atomic;
    o->min_rnr_timer = a->min_rnr_timer;
    o->port_num = a->port_num;
    o->timeout = a->timeout;
    o->retry_cnt = a->retry_cnt;
    o->rnr_retry = a->rnr_retry;
    o->alt_port_num = a->alt_port_num;
    o->alt_timeout = a->alt_timeout;
    o->rate_limit = a->rate_limit;
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

