/* umad2sim.h - internal header of librdma_umad2sim.so, rdma's ibsim client shim. */
#ifndef RDMA_UMAD2SIM_H
#define RDMA_UMAD2SIM_H

/*
 * The shim is preloaded into opensm, infiniband-diags and rdma's own
 * processes.  It gives libibumad one simulated CA, "ibsim0", attached to a
 * node of an ibsim fabric: a private sysfs tree (sysfs.c), and a character
 * device /dev/infiniband/umad0 (and issm0) whose read/write/ioctl behave
 * as the kernel's ib_umad does (agents.c, io.c, rmpp.c), with the MADs
 * carried to and from the ibsim server over its sockets (link.c).  The
 * libc entry points are in preload.c.
 *
 * Every umad file is a real descriptor (an eventfd whose counter is the
 * number of MADs queued on it), so poll/select/epoll and O_NONBLOCK work
 * on it without being intercepted.
 */

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <rdma/ib_user_mad.h>

/* ---- ibsim's socket protocol (the server's layouts, host byte order) */

#define SIM_CTL_MAGIC 0xdeadbeefu
#define SIM_CTL_DATA 64
#define SIM_DEFAULT_BASE "sim"

/* Control operations, in the server's numbering. */
enum sim_ctl_op {
    SIM_OP_ERROR = 0,           /* the server's answer to a failed request */
    SIM_OP_CONNECT = 1,
    SIM_OP_DISCONNECT = 2,
    SIM_OP_GET_VENDOR = 4,
    SIM_OP_GET_NODEINFO = 7,
    SIM_OP_GET_PORTINFO = 8,
    SIM_OP_SET_ISSM = 9,
    SIM_OP_GET_PKEYS = 10,
};

/* One control datagram; the answer comes back in the same layout. */
struct sim_ctl_msg {
    uint32_t magic;
    uint32_t client;            /* our client id (any value for CONNECT) */
    uint32_t op;
    uint32_t len;               /* bytes of data used */
    uint8_t data[SIM_CTL_DATA];
};

/* CONNECT's data: in, our pid (it names our data socket); out, our
 * client id and the name of the node we were attached to. */
struct sim_hello {
    uint32_t id;
    uint32_t qp;
    uint32_t issm;
    char node[32];
};

/* GET_VENDOR's answer. */
struct sim_vendor_info {
    uint32_t vendor_id;
    uint32_t part_id;
    uint32_t hw_rev;
    uint64_t fw_rev;
};

/* One MAD on the data socket.  LIDs: the 16-bit big-endian value in a
 * 32-bit field; QPNs and status big-endian 32-bit; length big-endian. */
struct sim_packet {
    uint32_t dlid;
    uint32_t slid;
    uint32_t dqp;
    uint32_t sqp;
    uint32_t status;            /* nonzero: the server gave our MAD back */
    uint64_t length;
    uint8_t mad[256];
};

_Static_assert(sizeof(struct sim_ctl_msg) == 80, "ibsim control layout");
_Static_assert(offsetof(struct sim_vendor_info, fw_rev) == 16,
               "ibsim vendor layout");
_Static_assert(offsetof(struct sim_packet, mad) == 32 &&
               sizeof(struct sim_packet) == 288, "ibsim packet layout");

/* ---- MAD layout (IBA chapters 13 and 16) */

#define MAD_SIZE 256
#define MAD_HDR 24              /* common MAD header */
#define RMPP_HDR 36             /* common header + RMPP header */
#define RMPP_SEG_PAYLOAD 220    /* what PayloadLength counts per segment */
#define MAD_METHOD_RESP 0x80
#define RMPP_TYPE_DATA 1
#define RMPP_FLAG_ACTIVE 1
#define RMPP_FLAG_FIRST 2
#define RMPP_FLAG_LAST 4
#define GSI_QKEY 0x80010000u

/* Offsets in a MAD. */
enum {
    MO_CLASS = 1, MO_CLASS_VERSION = 2, MO_METHOD = 3, MO_STATUS = 4,
    MO_TID = 8, MO_RMPP_VERSION = 24, MO_RMPP_TYPE = 25,
    MO_RMPP_FLAGS = 26, MO_RMPP_STATUS = 27, MO_RMPP_SEG = 28,
    MO_RMPP_PAYLEN = 32, MO_VENDOR_OUI = 37,
};

/* ---- the shim's objects */

#define FILE_AGENTS 32          /* agents per open file, as the kernel */
#define AGENT_SLOTS 1024        /* agents per process (TID bits 32-41) */
#define TAG_SLOT_BITS 10        /* TID bits 42-47: the slot's generation */
#define FD_LIMIT 65536          /* umad files must get a lower descriptor */
#define HDR_NEW ((size_t)sizeof(struct ib_user_mad_hdr))        /* 64 */
#define HDR_OLD ((size_t)sizeof(struct ib_user_mad_hdr_old))    /* 56 */

/* A MAD waiting to be read from a file. */
struct packet {
    struct packet *next;
    struct ib_user_mad_hdr hdr; /* as read() returns it */
    int returned;               /* our own send given back (timed out) */
    size_t len;                 /* bytes of MAD in data */
    uint8_t data[];
};

struct ufile;

/* A registered agent. */
struct agent {
    struct ufile *file;
    uint32_t id;                /* per file: what the application sees */
    uint16_t tag;               /* slot | generation << TAG_SLOT_BITS */
    uint8_t qpn;
    uint8_t mgmt_class;
    uint8_t class_version;
    uint8_t rmpp_version;
    uint32_t flags;             /* IB_USER_MAD_USER_RMPP */
    uint32_t oui;               /* vendor range 2 only */
    uint64_t methods[2];        /* unsolicited methods it receives */
};

/* An open /dev/infiniband/umad0 or issm0. */
struct ufile {
    int fd;                     /* the eventfd the application holds */
    int issm;                   /* 1: issm0 (the port is SM-capable) */
    int new_hdr;                /* 64-byte headers (else the 56-byte ABI) */
    int used;                   /* an agent was registered on it */
    struct agent *agents[FILE_AGENTS];
    struct packet *head, *tail; /* received, not yet read */
};

/* A request sent with a timeout, waiting for its response. */
struct pending {
    struct pending *next;
    uint16_t tag;               /* the sending agent */
    uint64_t tid;               /* TID bits 0-47 */
    uint64_t deadline_ns;       /* CLOCK_MONOTONIC */
    uint32_t retries_left;
    size_t len;                 /* header + MAD, as written */
    uint8_t umad[];
};

/* A multi-segment RMPP message being joined. */
struct reasm {
    struct reasm *next;
    uint16_t tag;               /* the receiving agent */
    uint64_t tid;
    uint32_t slid;              /* sender, as in the packets */
    uint32_t next_seg;          /* segment number expected */
    size_t len;                 /* bytes joined so far */
    size_t cap;
    uint8_t *buf;
    struct ib_user_mad_hdr hdr; /* address of the first segment */
};

/* The process-wide state. */
struct shim {
    pthread_mutex_t lock;       /* files, agents, queues, pending, reasm */
    pthread_mutex_t ctl_lock;   /* one control exchange at a time */
    int up;                     /* 1: connected, -1: failed */
    int debug;                  /* $UMAD2SIM_DEBUG */
    int ctl_fd, data_fd, wake_fd;
    uint32_t client;            /* our client id at the server */
    char base[64];              /* socket base name ($IBSIM_SOCKNAME) */
    char node[33];              /* the node we sit on */
    uint8_t nodeinfo[64];       /* NodeInfo attribute */
    uint8_t portinfo[64];       /* PortInfo attribute of our port */
    uint8_t pkeys[64];          /* P_Key table, big-endian entries */
    struct sim_vendor_info vendor;
    unsigned port_num;
    char root[PATH_MAX - 128];  /* our sysfs tree: <cwd>/sys-<pid> */
    struct ufile **files;       /* by descriptor, FD_LIMIT entries */
    struct agent *slots[AGENT_SLOTS];
    uint8_t gen[AGENT_SLOTS];
    struct pending *pending;
    struct reasm *reasm;
};

extern struct shim sim;

#define SIM_LOG(...) do { if (sim.debug) shim_log(__VA_ARGS__); } while (0)
void shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* preload.c: the libc functions under ours */
extern ssize_t (*libc_read)(int, void *, size_t);
extern ssize_t (*libc_write)(int, const void *, size_t);
extern int (*libc_close)(int);

/* link.c: the ibsim server */
int link_open(void);
int link_ctl(uint32_t op, void *data, size_t len);
int link_send(const struct sim_packet *pkt, int nowait);
void link_close(void);

/* sysfs.c: the simulated CA's sysfs tree */
int sysfs_build(void);
void sysfs_refresh_port(void);
void sysfs_remove(void);
const char *sysfs_map(const char *path, char *out, size_t size);
int sysfs_is_ports(const char *path);

/* agents.c: files and agents (call with sim.lock held unless noted) */
struct ufile *file_open(int issm, int nonblock, int cloexec); /* unlocked */
void file_release(struct ufile *f);
struct ufile *file_of(int fd);                                /* unlocked */
int file_ioctl(struct ufile *f, unsigned long req, void *arg);
struct agent *agent_by_tag(uint16_t tag);
struct agent *agent_for_request(const uint8_t *mad);
void file_push(struct ufile *f, struct packet *p, int front);
int agent_kernel_rmpp(const struct agent *a);

/* rmpp.c: segmentation and reassembly as the kernel's MAD layer */
int rmpp_class(uint8_t mgmt_class);
size_t rmpp_data_offset(uint8_t mgmt_class);
int rmpp_active(const uint8_t *mad);
int rmpp_send(const struct agent *a, struct sim_packet *tmpl,
              const uint8_t *mad, size_t len, int nowait);
struct packet *rmpp_receive(struct agent *a, const struct sim_packet *pkt,
                            const struct ib_user_mad_hdr *hdr);
void rmpp_forget(uint16_t tag);

/* io.c: write, read and the receiver thread */
ssize_t umad_file_write(struct ufile *f, const void *buf, size_t count);
ssize_t umad_file_read(struct ufile *f, void *buf, size_t count);
int receiver_start(void);
void pending_forget(uint16_t tag);
uint64_t now_ns(void);
struct packet *packet_new(size_t len);

/* Big-endian field access. */
static inline uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

static inline uint64_t get_be64(const uint8_t *p)
{
    return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, v >> 32);
    put_be32(p + 4, (uint32_t)v);
}

#endif
