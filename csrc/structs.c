/* structs.c - table-driven struct objects (ibv.device_attr, ibv.port_attr...). */

/*
 * Each verbs struct is one heap type whose instances embed the provider-
 * neutral C struct from provider.h.  A field table gives every attribute a
 * kind and an offset; one getter, one setter, __init__ (keyword arguments),
 * __repr__ and __eq__ serve every type.  Assigning a field records it in
 * setmask, from which modify masks are derived.
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <string.h>

#include "rdma.h"

/* Field kinds: the C type of the field, or what the slot holds. */
enum fkind {
    K_U8, K_U16, K_U32, K_U64, K_I32, K_STR, K_GID,
    K_BE32,     /* uint32 stored in network order, an int in Python */
    K_STRUCT,   /* a nested struct, embedded in the C struct; its object
                   lives in a slot, created on first access */
    K_OBJ,      /* a Python object in a slot (check says which) */
};

/* What a K_OBJ slot accepts. */
enum ocheck { O_ANY, O_CQ, O_SRQ, O_AH, O_SGLIST, O_SEND_WR, O_RECV_WR,
              O_MR, O_MW, O_BIND_INFO };

/* One attribute of a struct type. */
struct pyrdma_field {
    const char *name;       /* attribute name (the C field name) */
    enum fkind kind;        /* C type */
    size_t offset;          /* offset in the C struct */
    size_t size;            /* size of the C field (K_STR: buffer size) */
    const char *doc;        /* docstring */
    uint32_t flag;          /* attribute-mask bit set when assigned */
    int slot;               /* object slot (K_STRUCT, K_OBJ), else -1 */
    const struct pyrdma_structdef *sub; /* K_STRUCT: the nested type */
    int check;              /* K_OBJ: enum ocheck */
};

/* One struct type. */
struct pyrdma_structdef {
    const char *name;                 /* qualified type name */
    const char *doc;                  /* class docstring */
    size_t csize;                     /* sizeof the C struct */
    const struct pyrdma_field *fields;
    int nfields;                      /* at most 64 (setmask bits) */
    int nslots;                       /* object slots after the data */
    size_t state_offset;              /* where its type lives in the state */
};

#define KIND(T, f) _Generic(((T *)0)->f, \
    uint8_t: K_U8, uint16_t: K_U16, uint32_t: K_U32, uint64_t: K_U64, \
    int32_t: K_I32, char *: K_STR, uint8_t *: K_GID)
#define FIELD(T, f, doc) { #f, KIND(T, f), offsetof(T, f), \
                           sizeof(((T *)0)->f), doc, 0, -1, NULL, 0 }
#define FLAG(T, f, flag, doc) { #f, KIND(T, f), offsetof(T, f), \
                           sizeof(((T *)0)->f), doc, flag, -1, NULL, 0 }
#define BE32(T, f, doc) { #f, K_BE32, offsetof(T, f), 4, doc, 0, -1, NULL, 0 }
#define ALIAS(T, name, f, doc) { name, KIND(T, f), offsetof(T, f), \
                           sizeof(((T *)0)->f), doc, 0, -1, NULL, 0 }
#define NESTED(T, f, sub, slot, flag, doc) { #f, K_STRUCT, offsetof(T, f), \
                           sizeof(((T *)0)->f), doc, flag, slot, sub, 0 }
#define OBJ(name, slot, check, doc) { name, K_OBJ, 0, 0, doc, 0, slot, NULL, \
                           check }

#define DA struct pyrdma_device_attr
static const struct pyrdma_field device_attr_fields[] = {
    FIELD(DA, fw_ver, "Firmware version string."),
    FIELD(DA, node_guid, "Node GUID (host byte order integer)."),
    FIELD(DA, sys_image_guid, "System image GUID (host byte order)."),
    FIELD(DA, max_mr_size, "Largest contiguous block that can be registered."),
    FIELD(DA, page_size_cap, "Supported memory shift sizes (bit mask)."),
    FIELD(DA, vendor_id, "Vendor ID, per IEEE."),
    FIELD(DA, vendor_part_id, "Vendor supplied part ID."),
    FIELD(DA, hw_ver, "Hardware version."),
    FIELD(DA, max_qp, "Maximum number of QPs."),
    FIELD(DA, max_qp_wr, "Maximum number of outstanding WRs on any queue."),
    FIELD(DA, device_cap_flags, "IBV_DEVICE_* capability flags."),
    FIELD(DA, max_sge, "Maximum scatter/gather entries per WR (non-RD QPs)."),
    FIELD(DA, max_sge_rd, "Maximum scatter/gather entries per WR (RD QPs)."),
    FIELD(DA, max_cq, "Maximum number of CQs."),
    FIELD(DA, max_cqe, "Maximum number of entries per CQ."),
    FIELD(DA, max_mr, "Maximum number of MRs."),
    FIELD(DA, max_pd, "Maximum number of PDs."),
    FIELD(DA, max_qp_rd_atom, "Maximum outstanding RDMA read/atomic per QP as target."),
    FIELD(DA, max_ee_rd_atom, "Maximum outstanding RDMA read/atomic per EEC as target."),
    FIELD(DA, max_res_rd_atom, "Maximum responder resources for RDMA read/atomic."),
    FIELD(DA, max_qp_init_rd_atom, "Maximum RDMA read/atomic per QP as initiator."),
    FIELD(DA, max_ee_init_rd_atom, "Maximum RDMA read/atomic per EEC as initiator."),
    FIELD(DA, atomic_cap, "Atomic support (IBV_ATOMIC_*)."),
    FIELD(DA, max_ee, "Maximum number of EE contexts."),
    FIELD(DA, max_rdd, "Maximum number of RD domains."),
    FIELD(DA, max_mw, "Maximum number of memory windows."),
    FIELD(DA, max_raw_ipv6_qp, "Maximum number of raw IPv6 datagram QPs."),
    FIELD(DA, max_raw_ethy_qp, "Maximum number of raw ethertype datagram QPs."),
    FIELD(DA, max_mcast_grp, "Maximum number of multicast groups."),
    FIELD(DA, max_mcast_qp_attach, "Maximum QPs per multicast group."),
    FIELD(DA, max_total_mcast_qp_attach, "Maximum QPs attached to multicast groups."),
    FIELD(DA, max_ah, "Maximum number of address handles."),
    FIELD(DA, max_fmr, "Maximum number of FMRs."),
    FIELD(DA, max_map_per_fmr, "Maximum remaps per FMR before an unmap."),
    FIELD(DA, max_srq, "Maximum number of SRQs."),
    FIELD(DA, max_srq_wr, "Maximum number of WRs per SRQ."),
    FIELD(DA, max_srq_sge, "Maximum scatter/gather entries per SRQ WR."),
    FIELD(DA, max_pkeys, "Number of entries in the P_Key table."),
    FIELD(DA, local_ca_ack_delay, "Local CA ack delay."),
    FIELD(DA, phys_port_cnt, "Number of physical ports."),
};
#undef DA

#define PA struct pyrdma_port_attr
static const struct pyrdma_field port_attr_fields[] = {
    FIELD(PA, state, "Logical port state (IBV_PORT_*)."),
    FIELD(PA, max_mtu, "Maximum MTU supported (IBV_MTU_*)."),
    FIELD(PA, active_mtu, "Active MTU (IBV_MTU_*)."),
    FIELD(PA, gid_tbl_len, "Length of the GID table."),
    FIELD(PA, port_cap_flags, "Port capability mask."),
    FIELD(PA, max_msg_sz, "Maximum message size."),
    FIELD(PA, bad_pkey_cntr, "Bad P_Key counter."),
    FIELD(PA, qkey_viol_cntr, "Q_Key violation counter."),
    FIELD(PA, pkey_tbl_len, "Length of the P_Key table."),
    FIELD(PA, lid, "Base LID of the port."),
    FIELD(PA, sm_lid, "LID of the subnet manager."),
    FIELD(PA, lmc, "LID mask control."),
    FIELD(PA, max_vl_num, "Maximum number of VLs."),
    FIELD(PA, sm_sl, "SL to reach the subnet manager."),
    FIELD(PA, subnet_timeout, "Subnet propagation delay."),
    FIELD(PA, init_type_reply, "InitTypeReply value from the SM."),
    FIELD(PA, active_width, "Active link width."),
    FIELD(PA, active_speed, "Active link speed."),
    FIELD(PA, phys_state, "Physical port state."),
    FIELD(PA, link_layer, "Link layer (IBV_LINK_LAYER_*)."),
    FIELD(PA, flags, "Port flags."),
    FIELD(PA, port_cap_flags2, "Extended port capability mask."),
};
#undef PA

#define GE struct pyrdma_gid_entry
static const struct pyrdma_field gid_entry_fields[] = {
    FIELD(GE, gid, "The GID (rdma.IBA.GID)."),
    FIELD(GE, gid_index, "Index in the port's GID table."),
    FIELD(GE, gid_type, "IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1 or _V2."),
    FIELD(GE, ndev_ifindex, "Network device index (RoCE), else 0."),
};
#undef GE

#define GR struct pyrdma_global_route
static const struct pyrdma_field global_route_fields[] = {
    FIELD(GR, dgid, "Destination GID (rdma.IBA.GID; a str or 16 bytes "
                    "are accepted)."),
    FIELD(GR, flow_label, "IPv6 flow label."),
    FIELD(GR, sgid_index, "Index of the source GID in the port's table."),
    FIELD(GR, hop_limit, "Hop limit."),
    FIELD(GR, traffic_class, "Traffic class."),
};
#undef GR

static const struct pyrdma_structdef global_route_def;
static const struct pyrdma_structdef ah_attr_def;
static const struct pyrdma_structdef qp_cap_def;

#define AA struct pyrdma_ah_attr
static const struct pyrdma_field ah_attr_fields[] = {
    NESTED(AA, grh, &global_route_def, 0, 0,
           "The global route (ibv.global_route), used when is_global."),
    FIELD(AA, dlid, "Destination LID."),
    FIELD(AA, sl, "Service level."),
    FIELD(AA, src_path_bits, "Source path bits."),
    FIELD(AA, static_rate, "Static rate (IBV_RATE_*)."),
    FIELD(AA, is_global, "1 if a GRH is used."),
    FIELD(AA, port_num, "Local port number."),
};
#undef AA

#define QC struct pyrdma_qp_cap
static const struct pyrdma_field qp_cap_fields[] = {
    FIELD(QC, max_send_wr, "Send queue depth."),
    FIELD(QC, max_recv_wr, "Receive queue depth."),
    FIELD(QC, max_send_sge, "Scatter/gather entries per send WR."),
    FIELD(QC, max_recv_sge, "Scatter/gather entries per receive WR."),
    FIELD(QC, max_inline_data, "Bytes that can be sent inline."),
};
#undef QC

#define QA struct pyrdma_qp_attr
static const struct pyrdma_field qp_attr_fields[] = {
    FLAG(QA, qp_state, PYRDMA_QP_STATE, "QP state (IBV_QPS_*)."),
    FLAG(QA, cur_qp_state, PYRDMA_QP_CUR_STATE, "Assumed current state."),
    FLAG(QA, path_mtu, PYRDMA_QP_PATH_MTU, "Path MTU (IBV_MTU_*)."),
    FLAG(QA, path_mig_state, PYRDMA_QP_PATH_MIG_STATE,
         "Path migration state (IBV_MIG_*)."),
    FLAG(QA, qkey, PYRDMA_QP_QKEY, "Q_Key (UD)."),
    FLAG(QA, rq_psn, PYRDMA_QP_RQ_PSN, "Receive queue PSN."),
    FLAG(QA, sq_psn, PYRDMA_QP_SQ_PSN, "Send queue PSN."),
    FLAG(QA, dest_qp_num, PYRDMA_QP_DEST_QPN, "Destination QP number."),
    FLAG(QA, qp_access_flags, PYRDMA_QP_ACCESS_FLAGS,
         "Remote access allowed (IBV_ACCESS_REMOTE_*)."),
    NESTED(QA, cap, &qp_cap_def, 0, PYRDMA_QP_CAP, "Capacities (ibv.qp_cap)."),
    NESTED(QA, ah_attr, &ah_attr_def, 1, PYRDMA_QP_AV,
           "Primary path address vector (ibv.ah_attr)."),
    NESTED(QA, alt_ah_attr, &ah_attr_def, 2, PYRDMA_QP_ALT_PATH,
           "Alternate path address vector (ibv.ah_attr)."),
    FLAG(QA, pkey_index, PYRDMA_QP_PKEY_INDEX, "P_Key index."),
    FLAG(QA, alt_pkey_index, PYRDMA_QP_ALT_PATH, "Alternate P_Key index."),
    FLAG(QA, en_sqd_async_notify, PYRDMA_QP_EN_SQD_ASYNC_NOTIFY,
         "Ask for an event when the SQ is drained."),
    FIELD(QA, sq_draining, "The SQ is draining (query only)."),
    FLAG(QA, max_rd_atomic, PYRDMA_QP_MAX_QP_RD_ATOMIC,
         "Outstanding RDMA reads/atomics as initiator."),
    FLAG(QA, max_dest_rd_atomic, PYRDMA_QP_MAX_DEST_RD_ATOMIC,
         "Responder resources for RDMA reads/atomics."),
    FLAG(QA, min_rnr_timer, PYRDMA_QP_MIN_RNR_TIMER,
         "Minimum RNR NAK timer (encoded)."),
    FLAG(QA, port_num, PYRDMA_QP_PORT, "Port number."),
    FLAG(QA, timeout, PYRDMA_QP_TIMEOUT, "Local ack timeout (encoded)."),
    FLAG(QA, retry_cnt, PYRDMA_QP_RETRY_CNT, "Transport retry count."),
    FLAG(QA, rnr_retry, PYRDMA_QP_RNR_RETRY, "RNR retry count (7: infinite)."),
    FLAG(QA, alt_port_num, PYRDMA_QP_ALT_PATH, "Alternate port number."),
    FLAG(QA, alt_timeout, PYRDMA_QP_ALT_PATH, "Alternate ack timeout."),
    FLAG(QA, rate_limit, PYRDMA_QP_RATE_LIMIT, "Rate limit in kbps."),
};
#undef QA

#define QI struct pyrdma_py_qp_init_attr
static const struct pyrdma_field qp_init_attr_fields[] = {
    NESTED(QI, cap, &qp_cap_def, PYRDMA_INIT_CAP, 0,
           "Requested capacities (ibv.qp_cap)."),
    FIELD(QI, qp_type, "QP type (IBV_QPT_RC, _UC, _UD)."),
    FIELD(QI, sq_sig_all, "1: every send WR generates a completion."),
    OBJ("send_cq", PYRDMA_INIT_SEND_CQ, O_CQ, "CQ for send completions."),
    OBJ("recv_cq", PYRDMA_INIT_RECV_CQ, O_CQ, "CQ for receive completions."),
    OBJ("srq", PYRDMA_INIT_SRQ, O_SRQ, "Shared receive queue, or None."),
};
#undef QI

#define SA struct pyrdma_srq_attr
static const struct pyrdma_field srq_attr_fields[] = {
    FLAG(SA, max_wr, PYRDMA_SRQ_MAX_WR, "Depth of the SRQ."),
    FIELD(SA, max_sge, "Scatter/gather entries per WR."),
    FLAG(SA, srq_limit, PYRDMA_SRQ_LIMIT,
         "Low watermark: IBV_EVENT_SRQ_LIMIT_REACHED below it."),
};
#undef SA

#define SG struct pyrdma_sge
static const struct pyrdma_field sge_fields[] = {
    FIELD(SG, addr, "Start address."),
    FIELD(SG, length, "Length in bytes."),
    FIELD(SG, lkey, "Local key of the MR covering it."),
};
#undef SG

#define SW struct pyrdma_py_send_wr
static const struct pyrdma_field send_wr_fields[] = {
    FIELD(SW, wr_id, "Returned in the work completion."),
    OBJ("sg_list", PYRDMA_WR_SG_LIST, O_SGLIST,
        "One ibv.sge or a sequence of them."),
    FIELD(SW, opcode, "IBV_WR_* operation."),
    FIELD(SW, send_flags, "IBV_SEND_* flags."),
    BE32(SW, imm_data, "Immediate data (an int; sent in network order)."),
    FIELD(SW, remote_addr, "Remote address (RDMA and atomics)."),
    FIELD(SW, rkey, "Remote key (RDMA and atomics)."),
    FIELD(SW, compare_add, "Compare value (CAS) or addend (fetch-and-add)."),
    FIELD(SW, swap, "Swap value (CAS)."),
    OBJ("ah", PYRDMA_WR_AH, O_AH, "Address handle (UD)."),
    FIELD(SW, remote_qpn, "Destination QP number (UD)."),
    FIELD(SW, remote_qkey, "Destination Q_Key (UD)."),
    FIELD(SW, invalidate_rkey, "rkey to invalidate (SEND_WITH_INV, "
                               "LOCAL_INV)."),
    OBJ("next", PYRDMA_WR_NEXT, O_SEND_WR, "Next WR of a chain, or None."),
    OBJ("mw", PYRDMA_WR_MW, O_MW, "The type 2 memory window to bind "
                                  "(IBV_WR_BIND_MW; rkey is its new rkey)."),
    OBJ("bind_info", PYRDMA_WR_BIND_INFO, O_BIND_INFO,
        "An ibv.mw_bind_info: what IBV_WR_BIND_MW binds."),
};
#undef SW

#define BI struct pyrdma_py_mw_bind_info
static const struct pyrdma_field mw_bind_info_fields[] = {
    OBJ("mr", 0, O_MR, "The MR the window opens onto (registered with "
                       "IBV_ACCESS_MW_BIND)."),
    FIELD(BI, addr, "Start address of the window (inside the MR)."),
    FIELD(BI, length, "Length of the window in bytes (0 unbinds)."),
    FIELD(BI, mw_access_flags, "IBV_ACCESS_REMOTE_* rights through it."),
};
#undef BI

#define RW struct pyrdma_py_recv_wr
static const struct pyrdma_field recv_wr_fields[] = {
    FIELD(RW, wr_id, "Returned in the work completion."),
    OBJ("sg_list", PYRDMA_WR_SG_LIST, O_SGLIST,
        "One ibv.sge or a sequence of them."),
    OBJ("next", PYRDMA_WR_NEXT, O_RECV_WR, "Next WR of a chain, or None."),
};
#undef RW

#define WC struct pyrdma_wc
static const struct pyrdma_field wc_fields[] = {
    FIELD(WC, wr_id, "wr_id of the completed work request."),
    FIELD(WC, status, "IBV_WC_* status (IBV_WC_SUCCESS is 0)."),
    FIELD(WC, opcode, "IBV_WC_* opcode."),
    FIELD(WC, vendor_err, "Vendor error syndrome."),
    FIELD(WC, byte_len, "Bytes received (receive completions)."),
    BE32(WC, imm_data, "Immediate data (an int), if wc_flags has "
                       "IBV_WC_WITH_IMM."),
    ALIAS(WC, "invalidated_rkey", imm_data,
          "Invalidated rkey, if wc_flags has IBV_WC_WITH_INV."),
    FIELD(WC, qp_num, "Local QP number."),
    FIELD(WC, src_qp, "Remote QP number (UD)."),
    FIELD(WC, wc_flags, "IBV_WC_GRH, IBV_WC_WITH_IMM, ..."),
    FIELD(WC, pkey_index, "P_Key index."),
    FIELD(WC, slid, "Source LID (UD)."),
    FIELD(WC, sl, "Service level (UD)."),
    FIELD(WC, dlid_path_bits, "DLID path bits (UD)."),
};
#undef WC

#define AE struct pyrdma_py_async_event
static const struct pyrdma_field async_event_fields[] = {
    FIELD(AE, event_type, "IBV_EVENT_* type."),
    OBJ("element", 0, O_ANY, "The QP, CQ or SRQ it is about, the port "
                             "number for port events, or None."),
    OBJ("obj", 1, O_ANY, "What it is about, as python-rdma has it: the "
                         "QP, CQ or SRQ, the rdma.devices.EndPort for port "
                         "events, the Device for IBV_EVENT_DEVICE_FATAL "
                         "(the port number / None when the Context was "
                         "opened without an end port), or None."),
};
#undef AE

#define NF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define SDEF(var, pyname, ctype, fields, nslots, doc) \
    static const struct pyrdma_structdef var = { \
        "rdma.ibverbs." pyname, pyname "(**fields)\n--\n\n" doc, \
        sizeof(ctype), fields, NF(fields), nslots, \
        offsetof(pyrdma_state, PYRDMA_CAT(pyname)) }
#define PYRDMA_CAT(n) n
/* offsetof needs an identifier: expand per type instead. */
#undef SDEF
#define SDEF(var, field, ctype, fields, nslots, doc) \
    static const struct pyrdma_structdef var = { \
        "rdma.ibverbs." #field, #field "(**fields)\n--\n\n" doc, \
        sizeof(ctype), fields, NF(fields), nslots, \
        offsetof(pyrdma_state, field) }

SDEF(device_attr_def, device_attr, struct pyrdma_device_attr,
     device_attr_fields, 0,
     "Device attributes, as returned by Context.query_device().");
SDEF(port_attr_def, port_attr, struct pyrdma_port_attr, port_attr_fields, 0,
     "Port attributes, as returned by Context.query_port().");
SDEF(gid_entry_def, gid_entry, struct pyrdma_gid_entry, gid_entry_fields, 0,
     "A GID table entry, as returned by Context.query_gid_ex().");
SDEF(global_route_def, global_route, struct pyrdma_global_route,
     global_route_fields, 0, "The GRH part of an address vector.");
SDEF(ah_attr_def, ah_attr, struct pyrdma_ah_attr, ah_attr_fields, 1,
     "An address vector: for PD.ah() and qp_attr.ah_attr.");
SDEF(qp_cap_def, qp_cap, struct pyrdma_qp_cap, qp_cap_fields, 0,
     "QP capacities.");
SDEF(qp_attr_def, qp_attr, struct pyrdma_qp_attr, qp_attr_fields, 3,
     "QP attributes for QP.modify() and from QP.query().  The attribute "
     "mask of modify() is made from the fields that were assigned.");
SDEF(qp_init_attr_def, qp_init_attr, struct pyrdma_py_qp_init_attr,
     qp_init_attr_fields, 4, "What PD.qp() creates.");
SDEF(srq_attr_def, srq_attr, struct pyrdma_srq_attr, srq_attr_fields, 0,
     "SRQ attributes for SRQ.modify() and from SRQ.query().");
SDEF(sge_def, sge, struct pyrdma_sge, sge_fields, 0,
     "A scatter/gather element; MR.sge() makes one.");
SDEF(send_wr_def, send_wr, struct pyrdma_py_send_wr, send_wr_fields, 5,
     "A send work request for QP.post_send().  The fields are flat: "
     "remote_addr/rkey serve RDMA and atomics, ah/remote_qpn/remote_qkey "
     "serve UD.");
SDEF(recv_wr_def, recv_wr, struct pyrdma_py_recv_wr, recv_wr_fields, 2,
     "A receive work request for QP.post_recv() and SRQ.post_recv().");
SDEF(mw_bind_info_def, mw_bind_info, struct pyrdma_py_mw_bind_info,
     mw_bind_info_fields, 1,
     "What a memory window is bound to: QP.bind_mw() (type 1) or a send_wr "
     "with opcode IBV_WR_BIND_MW (type 2).");
SDEF(wc_def, wc, struct pyrdma_wc, wc_fields, 0,
     "A work completion, from CQ.poll().");
SDEF(async_event_def, async_event, struct pyrdma_py_async_event,
     async_event_fields, 2,
     "An asynchronous event, from Context.get_async_event().");

/* Every struct type, in the order they are made. */
static const struct pyrdma_structdef *const all_defs[] = {
    &device_attr_def, &port_attr_def, &gid_entry_def, &global_route_def,
    &ah_attr_def, &qp_cap_def, &qp_attr_def, &qp_init_attr_def,
    &srq_attr_def, &sge_def, &send_wr_def, &recv_wr_def, &wc_def,
    &async_event_def, &mw_bind_info_def,
};
#define NDEFS (sizeof(all_defs) / sizeof(all_defs[0]))

/* Bytes of data before the object slots. */
static inline size_t
data_size(const struct pyrdma_structdef *def)
{
    return (def->csize + sizeof(void *) - 1) & ~(sizeof(void *) - 1);
}

/* The data of a struct object. */
static inline char *
sdata(pyrdma_Struct *s)
{
    return (char *)s->data;
}

static inline PyObject **
sslots(pyrdma_Struct *s)
{
    return (PyObject **)(sdata(s) + data_size(s->def));
}

static inline PyTypeObject *
def_type(pyrdma_state *st, const struct pyrdma_structdef *def)
{
    return *(PyTypeObject **)((char *)st + def->state_offset);
}

void *
pyrdma_struct_data(PyObject *o)
{
    return sdata((pyrdma_Struct *)o);
}

PyObject **
pyrdma_struct_slots(PyObject *o)
{
    return sslots((pyrdma_Struct *)o);
}

int
pyrdma_struct_check(PyObject *o, PyTypeObject *tp)
{
    return PyObject_TypeCheck(o, tp);
}

static PyObject *s_new(PyTypeObject *tp, PyObject *args, PyObject *kw);

/* Get one field as a new Python object. */
static PyObject *
field_get(pyrdma_Struct *self, const struct pyrdma_field *f)
{
    char *p = sdata(self) + f->offset;

    switch (f->kind) {
    case K_U8: return PyLong_FromUnsignedLong(*(uint8_t *)p);
    case K_U16: return PyLong_FromUnsignedLong(*(uint16_t *)p);
    case K_U32: return PyLong_FromUnsignedLong(*(uint32_t *)p);
    case K_U64: return PyLong_FromUnsignedLongLong(*(uint64_t *)p);
    case K_I32: return PyLong_FromLong(*(int32_t *)p);
    case K_BE32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return PyLong_FromUnsignedLong(ntohl(v));
    }
    case K_STR: return PyUnicode_DecodeUTF8(p, strnlen(p, f->size), "replace");
    case K_GID: {
        pyrdma_state *st = pyrdma_get_state_by_type(Py_TYPE(self));
        if (st == NULL)
            return NULL;
        return pyrdma_gid_from_raw(st, (const uint8_t *)p);
    }
    case K_STRUCT: {
        PyObject **slot = &sslots(self)[f->slot];
        if (*slot == NULL) {
            /* First access: a nested object holding the embedded data. */
            pyrdma_state *st = pyrdma_get_state_by_type(Py_TYPE(self));
            PyObject *sub;
            if (st == NULL)
                return NULL;
            sub = s_new(def_type(st, f->sub), NULL, NULL);
            if (sub == NULL)
                return NULL;
            memcpy(pyrdma_struct_data(sub), p, f->size);
            *slot = sub;
        }
        return Py_NewRef(*slot);
    }
    case K_OBJ: {
        PyObject *v = sslots(self)[f->slot];
        return Py_NewRef(v ? v : Py_None);
    }
    }
    PyErr_SetString(PyExc_SystemError, "bad field kind");
    return NULL;
}

/* Range-check an integer for field f; return 0 or -1 with an error set. */
static int
int_arg(PyObject *v, const struct pyrdma_field *f, PyTypeObject *tp,
        long long lo, unsigned long long hi, unsigned long long *out,
        long long *sout)
{
    int overflow = 0;
    long long sv;

    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s.%s must be an int, not %.100s",
                     tp->tp_name, f->name, Py_TYPE(v)->tp_name);
        return -1;
    }
    sv = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (sv == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0 && lo >= 0) {
        unsigned long long uv = PyLong_AsUnsignedLongLong(v);
        if (uv == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto range;
        }
        if (uv > hi)
            goto range;
        *out = uv;
        return 0;
    }
    if (overflow != 0 || sv < lo || (sv >= 0 && (unsigned long long)sv > hi))
        goto range;
    *out = (unsigned long long)sv;
    *sout = sv;
    return 0;
range:
    PyErr_Format(PyExc_ValueError, "%s.%s must be in range %lld..%llu",
                 tp->tp_name, f->name, lo, hi);
    return -1;
}

/* Check what a K_OBJ slot may hold; return 0 or -1 with TypeError. */
static int
obj_check(pyrdma_Struct *self, const struct pyrdma_field *f, PyObject *v)
{
    PyTypeObject *tp = Py_TYPE(self);
    pyrdma_state *st;
    PyTypeObject *want = NULL;
    const char *what = NULL;

    if (v == Py_None || f->check == O_ANY)
        return 0;
    st = pyrdma_get_state_by_type(tp);
    if (st == NULL)
        return -1;
    switch (f->check) {
    case O_CQ: want = st->CQType; what = "a CQ"; break;
    case O_SRQ: want = st->SRQType; what = "an SRQ"; break;
    case O_AH: want = st->AHType; what = "an AH"; break;
    case O_SEND_WR: want = st->send_wr; what = "a send_wr"; break;
    case O_RECV_WR: want = st->recv_wr; what = "a recv_wr"; break;
    case O_MR: want = st->MRType; what = "an MR"; break;
    case O_MW: want = st->MWType; what = "an MW"; break;
    case O_BIND_INFO: want = st->mw_bind_info; what = "an ibv.mw_bind_info";
        break;
    case O_SGLIST:
        if (PyObject_TypeCheck(v, st->sge) || PyList_Check(v) ||
            PyTuple_Check(v))
            return 0;
        what = "an ibv.sge or a list of them";
        break;
    }
    if (want != NULL && PyObject_TypeCheck(v, want))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s.%s must be %s or None, not %.100s",
                 tp->tp_name, f->name, what, Py_TYPE(v)->tp_name);
    return -1;
}

/* Set an integer field (K_U8 .. K_I32, K_BE32) at p from v; return 0 or -1
   with an error naming the field. */
static int
set_int(const struct pyrdma_field *f, PyTypeObject *tp, char *p, PyObject *v)
{
    unsigned long long u = 0;
    long long s = 0;

    switch (f->kind) {
    case K_U8:
        if (int_arg(v, f, tp, 0, UINT8_MAX, &u, &s)) return -1;
        *(uint8_t *)p = (uint8_t)u;
        break;
    case K_U16:
        if (int_arg(v, f, tp, 0, UINT16_MAX, &u, &s)) return -1;
        *(uint16_t *)p = (uint16_t)u;
        break;
    case K_U32:
        if (int_arg(v, f, tp, 0, UINT32_MAX, &u, &s)) return -1;
        *(uint32_t *)p = (uint32_t)u;
        break;
    case K_BE32: {
        uint32_t be;
        if (int_arg(v, f, tp, 0, UINT32_MAX, &u, &s)) return -1;
        be = htonl((uint32_t)u);
        memcpy(p, &be, 4);
        break;
    }
    case K_U64:
        if (int_arg(v, f, tp, 0, UINT64_MAX, &u, &s)) return -1;
        *(uint64_t *)p = (uint64_t)u;
        break;
    case K_I32:
        if (int_arg(v, f, tp, INT32_MIN, INT32_MAX, &u, &s)) return -1;
        *(int32_t *)p = (int32_t)s;
        break;
    default:        /* not an integer kind: field_set never asks */
        break;
    }
    return 0;
}

/* Set a K_STR field at p (NUL padded, shorter than its size) from the str
   v; return 0 or -1 with an error naming the field. */
static int
set_str(const struct pyrdma_field *f, PyTypeObject *tp, char *p, PyObject *v)
{
    Py_ssize_t n;
    const char *c;

    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s.%s must be a str",
                     tp->tp_name, f->name);
        return -1;
    }
    c = PyUnicode_AsUTF8AndSize(v, &n);
    if (c == NULL)
        return -1;
    if ((size_t)n >= f->size) {
        PyErr_Format(PyExc_ValueError, "%s.%s is limited to %zu bytes",
                     tp->tp_name, f->name, f->size - 1);
        return -1;
    }
    memset(p, 0, f->size);
    memcpy(p, c, (size_t)n);
    return 0;
}

/* Set a K_GID field at p from a GID, str or 16 bytes; return 0 or -1 with
   an error naming the field. */
static int
set_gid(const struct pyrdma_field *f, PyTypeObject *tp, char *p, PyObject *v)
{
    pyrdma_state *st = pyrdma_get_state_by_type(tp);
    char what[128];

    if (st == NULL)
        return -1;
    PyOS_snprintf(what, sizeof(what), "%s.%s", tp->tp_name, f->name);
    return pyrdma_gid_to_raw(st, v, (uint8_t *)p, what) < 0 ? -1 : 0;
}

/* Set a K_STRUCT field to v, a struct of the field's type (kept in the
   field's slot); return 0 or -1 with TypeError naming the field. */
static int
set_struct(pyrdma_Struct *self, const struct pyrdma_field *f, PyObject *v)
{
    PyTypeObject *tp = Py_TYPE(self), *want;
    pyrdma_state *st = pyrdma_get_state_by_type(tp);

    if (st == NULL)
        return -1;
    want = def_type(st, f->sub);
    if (!PyObject_TypeCheck(v, want)) {
        PyErr_Format(PyExc_TypeError, "%s.%s must be a %s, not %.100s",
                     tp->tp_name, f->name, want->tp_name,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(sslots(self)[f->slot], v);
    return 0;
}

/* Set a K_OBJ field to v (None empties the slot); return 0 or -1 with
   TypeError when v is not what the field holds. */
static int
set_obj(pyrdma_Struct *self, const struct pyrdma_field *f, PyObject *v)
{
    if (obj_check(self, f, v) < 0)
        return -1;
    if (v == Py_None)
        Py_CLEAR(sslots(self)[f->slot]);
    else {
        Py_INCREF(v);
        Py_XSETREF(sslots(self)[f->slot], v);
    }
    return 0;
}

/* Set one field from a Python object; return 0 or -1 with an error set. */
static int
field_set(pyrdma_Struct *self, const struct pyrdma_field *f, PyObject *v)
{
    PyTypeObject *tp = Py_TYPE(self);
    char *p = sdata(self) + f->offset;
    int rc = 0;

    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s.%s",
                     tp->tp_name, f->name);
        return -1;
    }
    switch (f->kind) {
    case K_U8: case K_U16: case K_U32: case K_BE32: case K_U64: case K_I32:
        rc = set_int(f, tp, p, v);
        break;
    case K_STR: rc = set_str(f, tp, p, v); break;
    case K_GID: rc = set_gid(f, tp, p, v); break;
    case K_STRUCT: rc = set_struct(self, f, v); break;
    case K_OBJ: rc = set_obj(self, f, v); break;
    }
    if (rc < 0)
        return -1;
    self->setmask |= 1ULL << (f - self->def->fields);
    return 0;
}

static PyObject *
s_getter(PyObject *self, void *closure)
{
    return field_get((pyrdma_Struct *)self, closure);
}

static int
s_setter(PyObject *self, PyObject *v, void *closure)
{
    return field_set((pyrdma_Struct *)self, closure, v);
}

void *
pyrdma_struct_sync(PyObject *o)
{
    pyrdma_Struct *self = (pyrdma_Struct *)o;
    int i;

    for (i = 0; i < self->def->nfields; i++) {
        const struct pyrdma_field *f = &self->def->fields[i];
        PyObject *sub;
        if (f->kind != K_STRUCT || (sub = sslots(self)[f->slot]) == NULL)
            continue;
        memcpy(sdata(self) + f->offset, pyrdma_struct_sync(sub), f->size);
    }
    return sdata(self);
}

/* Return 1 if field i of o was assigned (nested: any field inside). */
static int
field_is_set(pyrdma_Struct *self, int i)
{
    const struct pyrdma_field *f = &self->def->fields[i];
    PyObject *sub;
    int j;

    if (self->setmask & (1ULL << i))
        return 1;
    if (f->kind != K_STRUCT || (sub = sslots(self)[f->slot]) == NULL)
        return 0;
    for (j = 0; j < ((pyrdma_Struct *)sub)->def->nfields; j++)
        if (field_is_set((pyrdma_Struct *)sub, j))
            return 1;
    return 0;
}

uint32_t
pyrdma_struct_mask(PyObject *o)
{
    pyrdma_Struct *self = (pyrdma_Struct *)o;
    uint32_t mask = 0;
    int i;

    for (i = 0; i < self->def->nfields; i++)
        if (self->def->fields[i].flag && field_is_set(self, i))
            mask |= self->def->fields[i].flag;
    return mask;
}

/* Return the def of tp (or of its struct base class), NULL if none. */
static const struct pyrdma_structdef *
def_of(PyTypeObject *tp)
{
    pyrdma_state *st = pyrdma_get_state_by_type(tp);
    size_t i;

    if (st == NULL) {
        PyErr_Clear();
        return NULL;
    }
    for (; tp != NULL; tp = tp->tp_base)
        for (i = 0; i < NDEFS; i++)
            if (def_type(st, all_defs[i]) == tp)
                return all_defs[i];
    return NULL;
}

static PyObject *
s_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    pyrdma_Struct *self;
    const struct pyrdma_structdef *def = def_of(tp);

    (void)args;
    (void)kw;
    if (def == NULL) {
        PyErr_Format(PyExc_TypeError, "cannot create %s", tp->tp_name);
        return NULL;
    }
    self = (pyrdma_Struct *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    self->def = def;
    self->setmask = 0;
    /* tp_alloc zeroes the object: data and slots start empty. */
    return (PyObject *)self;
}

static int
s_init(PyObject *op, PyObject *args, PyObject *kw)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;

    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_Format(PyExc_TypeError, "%s() takes keyword arguments only",
                     Py_TYPE(op)->tp_name);
        return -1;
    }
    if (kw == NULL)
        return 0;
    while (PyDict_Next(kw, &pos, &key, &value)) {
        /* Go through setattr so subclasses and descriptors behave. */
        if (PyObject_SetAttr(op, key, value) < 0) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "%s() got an unexpected keyword argument '%U'",
                             Py_TYPE(op)->tp_name, key);
            }
            return -1;
        }
    }
    return 0;
}

static int
s_traverse(PyObject *op, visitproc visit, void *arg)
{
    pyrdma_Struct *self = (pyrdma_Struct *)op;
    int i;

    Py_VISIT(Py_TYPE(op));
    for (i = 0; i < self->def->nslots; i++)
        Py_VISIT(sslots(self)[i]);
    return 0;
}

/* Drop a send_wr/recv_wr next chain without recursing: each link only this
   chain holds is emptied of its own next before it is released, so freeing
   a million links takes a loop, not a million nested deallocs. */
static void
clear_next_chain(pyrdma_Struct *self)
{
    PyObject *n = sslots(self)[PYRDMA_WR_NEXT];

    sslots(self)[PYRDMA_WR_NEXT] = NULL;
    while (n != NULL && Py_REFCNT(n) == 1 &&
           ((pyrdma_Struct *)n)->def == self->def) {
        PyObject *after = sslots((pyrdma_Struct *)n)[PYRDMA_WR_NEXT];
        sslots((pyrdma_Struct *)n)[PYRDMA_WR_NEXT] = NULL;
        Py_DECREF(n);           /* its next is empty: no recursion */
        n = after;
    }
    Py_XDECREF(n);              /* shared: someone else still holds it */
}

static int
s_clear(PyObject *op)
{
    pyrdma_Struct *self = (pyrdma_Struct *)op;
    int i;

    if (self->def == &send_wr_def || self->def == &recv_wr_def)
        clear_next_chain(self);
    for (i = 0; i < self->def->nslots; i++)
        Py_CLEAR(sslots(self)[i]);
    return 0;
}

static void
s_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    pyrdma_Struct *self = (pyrdma_Struct *)op;

    if (self->def->nslots) {
        PyObject_GC_UnTrack(op);
        s_clear(op);
    }
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyObject *
s_repr(PyObject *op)
{
    pyrdma_Struct *self = (pyrdma_Struct *)op;
    const struct pyrdma_structdef *def = self->def;
    PyObject *parts, *sep, *joined, *res, *name;
    int i, rc;

    rc = Py_ReprEnter(op);
    if (rc != 0)
        return rc > 0 ? PyUnicode_FromString("...") : NULL;
    parts = PyList_New(0);
    if (parts == NULL)
        goto fail;
    for (i = 0; i < def->nfields; i++) {
        const struct pyrdma_field *f = &def->fields[i];
        PyObject *v, *item;
        /* Empty object slots are left out to keep the repr readable. */
        if (f->kind == K_OBJ && sslots(self)[f->slot] == NULL)
            continue;
        v = field_get(self, f);
        if (v == NULL)
            goto fail;
        item = PyUnicode_FromFormat("%s=%R", f->name, v);
        Py_DECREF(v);
        if (item == NULL || PyList_Append(parts, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    sep = PyUnicode_FromString(", ");
    if (sep == NULL)
        goto fail;
    joined = PyUnicode_Join(sep, parts);
    Py_DECREF(sep);
    Py_CLEAR(parts);
    if (joined == NULL)
        goto fail;
    name = PyType_GetName(Py_TYPE(op));
    if (name == NULL) {
        Py_DECREF(joined);
        goto fail;
    }
    res = PyUnicode_FromFormat("%U(%U)", name, joined);
    Py_DECREF(name);
    Py_DECREF(joined);
    Py_ReprLeave(op);
    return res;
fail:
    Py_XDECREF(parts);
    Py_ReprLeave(op);
    return NULL;
}

static PyObject *
s_richcompare(PyObject *a, PyObject *b, int op)
{
    pyrdma_Struct *x = (pyrdma_Struct *)a, *y = (pyrdma_Struct *)b;
    int i, eq = 1;

    if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b))
        Py_RETURN_NOTIMPLEMENTED;
    for (i = 0; i < x->def->nfields && eq; i++) {
        const struct pyrdma_field *f = &x->def->fields[i];
        if (f->kind == K_STRUCT || f->kind == K_OBJ) {
            PyObject *u = field_get(x, f), *v;
            if (u == NULL)
                return NULL;
            v = field_get(y, f);
            if (v == NULL) {
                Py_DECREF(u);
                return NULL;
            }
            eq = PyObject_RichCompareBool(u, v, Py_EQ);
            Py_DECREF(u);
            Py_DECREF(v);
            if (eq < 0)
                return NULL;
        }
        else if (f->kind == K_STR)
            eq = strncmp(sdata(x) + f->offset, sdata(y) + f->offset,
                         f->size) == 0;
        else
            eq = memcmp(sdata(x) + f->offset, sdata(y) + f->offset,
                        f->size) == 0;
    }
    if (op == Py_NE)
        eq = !eq;
    return PyBool_FromLong(eq);
}

static PyObject *
s_reduce(PyObject *op, PyObject *noargs)
{
    pyrdma_Struct *self = (pyrdma_Struct *)op;
    PyObject *kw, *res;
    int i;

    (void)noargs;
    kw = PyDict_New();
    if (kw == NULL)
        return NULL;
    for (i = 0; i < self->def->nfields; i++) {
        const struct pyrdma_field *f = &self->def->fields[i];
        PyObject *v;
        if (f->kind == K_OBJ && sslots(self)[f->slot] == NULL)
            continue;
        v = field_get(self, f);
        if (v == NULL || PyDict_SetItemString(kw, f->name, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(kw);
            return NULL;
        }
        Py_DECREF(v);
    }
    /* Unpickling calls type() and then __setstate__(kw). */
    res = Py_BuildValue("(O()(OK))", (PyObject *)Py_TYPE(op), kw,
                        (unsigned long long)self->setmask);
    Py_DECREF(kw);
    return res;
}

static PyObject *
s_setstate(PyObject *op, PyObject *state)
{
    PyObject *kw, *key, *value;
    unsigned long long mask;
    Py_ssize_t pos = 0;

    if (!PyArg_ParseTuple(state, "O!K:__setstate__", &PyDict_Type, &kw,
                          &mask))
        return NULL;
    while (PyDict_Next(kw, &pos, &key, &value))
        if (PyObject_SetAttr(op, key, value) < 0)
            return NULL;
    /* Keep which fields were assigned (the modify mask) as it was. */
    ((pyrdma_Struct *)op)->setmask = mask;
    Py_RETURN_NONE;
}

static PyObject *
s_fields(PyObject *tp, PyObject *noargs)
{
    const struct pyrdma_structdef *def = def_of((PyTypeObject *)tp);
    PyObject *t;
    int i;

    (void)noargs;
    if (def == NULL)
        return PyTuple_New(0);
    t = PyTuple_New(def->nfields);
    if (t == NULL)
        return NULL;
    for (i = 0; i < def->nfields; i++) {
        PyObject *n = PyUnicode_FromString(def->fields[i].name);
        if (n == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, n);
    }
    return t;
}

static PyObject *
s_mask(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    return PyLong_FromUnsignedLong(pyrdma_struct_mask(op));
}

static PyObject *
s_copy(PyObject *op, PyObject *noargs)
{
    pyrdma_Struct *self = (pyrdma_Struct *)op, *c;
    int i;

    (void)noargs;
    c = (pyrdma_Struct *)s_new(Py_TYPE(op), NULL, NULL);
    if (c == NULL)
        return NULL;
    memcpy(sdata(c), pyrdma_struct_sync(op), self->def->csize);
    c->setmask = self->setmask;
    for (i = 0; i < self->def->nfields; i++) {
        const struct pyrdma_field *f = &self->def->fields[i];
        PyObject *v = f->slot >= 0 ? sslots(self)[f->slot] : NULL;
        if (v == NULL)
            continue;
        if (f->kind == K_STRUCT)
            v = s_copy(v, NULL);          /* nested structs are copied */
        else
            Py_INCREF(v);                 /* objects are shared */
        if (v == NULL) {
            Py_DECREF(c);
            return NULL;
        }
        sslots(c)[f->slot] = v;
    }
    return (PyObject *)c;
}

static PyMethodDef s_methods[] = {
    {"__reduce__", s_reduce, METH_NOARGS, NULL},
    {"__setstate__", s_setstate, METH_O, NULL},
    {"__copy__", s_copy, METH_NOARGS, NULL},
    {"copy", s_copy, METH_NOARGS,
     "copy($self, /)\n--\n\nA copy (nested structs copied, objects shared)."},
    {"_fields", s_fields, METH_NOARGS | METH_CLASS,
     "_fields($cls, /)\n--\n\nThe names of the fields, in C order."},
    {"_mask", s_mask, METH_NOARGS,
     "_mask($self, /)\n--\n\nThe attribute mask of the assigned fields "
     "(the IBV_QP_* / IBV_SRQ_* bits)."},
    {NULL, NULL, 0, NULL},
};

/* Make the heap type for def; return it (new reference) or NULL. */
static PyTypeObject *
make_type(PyObject *module, const struct pyrdma_structdef *def)
{
    /* One getset table per def for the whole process: it must outlive
       every type made from it (module instances may come and go). */
    static PyGetSetDef *cache[NDEFS];
    PyGetSetDef *gs;
    PyTypeObject *tp;
    size_t k;
    int i;

    for (k = 0; all_defs[k] != def; k++)
        ;
    if (cache[k] == NULL) {
        gs = PyMem_RawCalloc((size_t)def->nfields + 1, sizeof(*gs));
        if (gs == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (i = 0; i < def->nfields; i++) {
            gs[i].name = def->fields[i].name;
            gs[i].get = s_getter;
            gs[i].set = s_setter;
            gs[i].doc = def->fields[i].doc;
            gs[i].closure = (void *)&def->fields[i];
        }
        cache[k] = gs;
    }
    gs = cache[k];
    {
        PyType_Slot slots[] = {
            {Py_tp_doc, (void *)def->doc},
            {Py_tp_new, s_new},
            {Py_tp_init, s_init},
            {Py_tp_dealloc, s_dealloc},
            {Py_tp_repr, s_repr},
            {Py_tp_richcompare, s_richcompare},
            {Py_tp_getset, gs},
            {Py_tp_methods, s_methods},
                /* Without object slots the list ends here: no GC needed. */
            {def->nslots ? Py_tp_traverse : 0, s_traverse},
            {Py_tp_clear, s_clear},
            {0, NULL},
        };
        PyType_Spec spec = {
            .name = def->name,
            .basicsize = (int)(offsetof(pyrdma_Struct, data) + data_size(def)
                               + sizeof(PyObject *) * (size_t)def->nslots),
            .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE |
                     Py_TPFLAGS_IMMUTABLETYPE |
                     (def->nslots ? Py_TPFLAGS_HAVE_GC : 0),
            .slots = slots,
        };
        tp = (PyTypeObject *)PyType_FromModuleAndSpec(module, &spec, NULL);
    }
    return tp;
}

PyObject *
pyrdma_struct_new(PyTypeObject *tp, const void *cstruct, size_t size)
{
    pyrdma_state *st = PyType_GetModuleState(tp);
    const struct pyrdma_structdef *def = NULL;
    pyrdma_Struct *s;
    size_t i;

    /* Results (wc, attributes) are made with our exact types. */
    if (st == NULL)
        return NULL;
    for (i = 0; i < NDEFS; i++)
        if (def_type(st, all_defs[i]) == tp) {
            def = all_defs[i];
            break;
        }
    s = (pyrdma_Struct *)tp->tp_alloc(tp, 0);
    if (s == NULL)
        return NULL;
    if (def == NULL || size != def->csize) {
        Py_DECREF(s);
        PyErr_SetString(PyExc_SystemError, "struct size mismatch");
        return NULL;
    }
    s->def = def;
    memcpy(sdata(s), cstruct, size);
    return (PyObject *)s;
}

int
pyrdma_structs_init(PyObject *module, pyrdma_state *st)
{
    size_t i;

    for (i = 0; i < NDEFS; i++) {
        PyTypeObject **slot = (PyTypeObject **)((char *)st +
                                                all_defs[i]->state_offset);
        *slot = make_type(module, all_defs[i]);
        if (*slot == NULL)
            return -1;
        if (PyModule_AddType(module, *slot) < 0)
            return -1;
    }
    return 0;
}
