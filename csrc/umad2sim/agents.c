/* agents.c - umad files and their agents: open, close and the register/unregister/enable-pkey ioctls as ib_umad has them. */
#define _GNU_SOURCE
#include "umad2sim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

/* Management classes and limits the kernel checks a registration by. */
#define CLASS_SMI 0x01
#define CLASS_SMI_DR 0x81
#define CLASS_LIMIT 0x50        /* classes above it: only CLASS_SMI_DR */
#define CLASS_VERSION_LIMIT 8
#define VENDOR2_FIRST 0x30
#define VENDOR2_LAST 0x4f

static int is_vendor2(uint8_t c)
{
    return c >= VENDOR2_FIRST && c <= VENDOR2_LAST;
}

/* A new umad (issm = 0) or issm file on a fresh eventfd; NULL with errno.
 * Opening issm0 makes our port SM-capable, as the kernel does. */
struct ufile *file_open(int issm, int nonblock, int cloexec)
{
    struct ufile *f = calloc(1, sizeof(*f));
    int flags = EFD_SEMAPHORE | (nonblock ? EFD_NONBLOCK : 0) |
                (cloexec ? EFD_CLOEXEC : 0);
    int err;

    if (!f)
        return NULL;
    f->fd = eventfd(0, flags);
    if (f->fd < 0 || f->fd >= FD_LIMIT) {
        err = f->fd < 0 ? errno : EMFILE;
        if (f->fd >= 0)
            libc_close(f->fd);
        free(f);
        errno = err;
        return NULL;
    }
    f->issm = issm;
    if (issm && link_ctl(SIM_OP_SET_ISSM, &(int){1}, sizeof(int)) < 0)
        SIM_LOG("SET_ISSM 1 failed: %s", strerror(errno));
    pthread_mutex_lock(&sim.lock);
    __atomic_store_n(&sim.files[f->fd], f, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&sim.lock);
    return f;
}

/* The umad file open on fd, or NULL (any lock state; cheap). */
struct ufile *file_of(int fd)
{
    struct ufile **files = __atomic_load_n(&sim.files, __ATOMIC_ACQUIRE);

    if (fd < 0 || fd >= FD_LIMIT || !files)
        return NULL;
    return __atomic_load_n(&files[fd], __ATOMIC_ACQUIRE);
}

/* Forget an agent: its id and slot are free again (the slot with a new
 * generation, so late answers to the old agent are not taken for the
 * next one's). */
static void agent_drop(struct agent *a)
{
    unsigned slot = a->tag & (AGENT_SLOTS - 1);

    pending_forget(a->tag);
    rmpp_forget(a->tag);
    sim.slots[slot] = NULL;
    sim.gen[slot]++;
    a->file->agents[a->id] = NULL;
    free(a);
}

/* Close a file: drop its agents and queued MADs (the caller closes the
 * descriptor, ends SM-capability for issm0 without sim.lock, and frees
 * f). */
void file_release(struct ufile *f)
{
    struct packet *p;
    unsigned i;

    for (i = 0; i < FILE_AGENTS; i++)
        if (f->agents[i])
            agent_drop(f->agents[i]);
    while ((p = f->head) != NULL) {
        f->head = p->next;
        free(p);
    }
    __atomic_store_n(&sim.files[f->fd], NULL, __ATOMIC_RELEASE);
}

/* Return 0 if the kernel would take this registration, else an errno. */
static int check_registration(const struct agent *s)
{
    int smi = s->mgmt_class == CLASS_SMI || s->mgmt_class == CLASS_SMI_DR;

    if (s->qpn > 1 || s->rmpp_version > 1)
        return EINVAL;
    if (!s->mgmt_class)             /* an agent for answers only */
        return 0;
    if (s->class_version >= CLASS_VERSION_LIMIT)
        return EINVAL;
    if (s->mgmt_class >= CLASS_LIMIT && s->mgmt_class != CLASS_SMI_DR)
        return EINVAL;
    if (smi != (s->qpn == 0))
        return EINVAL;
    if (s->rmpp_version && !rmpp_class(s->mgmt_class))
        return EINVAL;
    if (is_vendor2(s->mgmt_class) && !s->oui)
        return EINVAL;
    return 0;
}

/* Register a copy of *s on f; return its id, or -1 with errno (ENOMEM
 * when the file already has FILE_AGENTS agents). */
static int agent_add(struct ufile *f, const struct agent *s)
{
    unsigned id, slot;
    struct agent *a;
    int err = check_registration(s);

    if (err) {
        errno = err;
        return -1;
    }
    for (id = 0; id < FILE_AGENTS && f->agents[id]; id++)
        ;
    for (slot = 0; slot < AGENT_SLOTS && sim.slots[slot]; slot++)
        ;
    if (id == FILE_AGENTS || slot == AGENT_SLOTS ||
        !(a = malloc(sizeof(*a)))) {
        errno = ENOMEM;
        return -1;
    }
    *a = *s;
    a->file = f;
    a->id = id;
    a->tag = (uint16_t)(slot | (sim.gen[slot] & 0x3f) << TAG_SLOT_BITS);
    f->agents[id] = a;
    sim.slots[slot] = a;
    SIM_LOG("agent %u (tag 0x%x): class 0x%x v%u qp%u rmpp %u", id, a->tag,
            a->mgmt_class, a->class_version, a->qpn, a->rmpp_version);
    return (int)id;
}

/* IB_USER_MAD_REGISTER_AGENT. */
static int register_v1(struct ufile *f, struct ib_user_mad_reg_req *r)
{
    struct agent s;
    int id;

    memset(&s, 0, sizeof(s));
    s.qpn = r->qpn;
    s.mgmt_class = r->mgmt_class;
    s.class_version = r->mgmt_class_version;
    s.rmpp_version = r->rmpp_version;
    s.oui = (uint32_t)r->oui[0] << 16 | (uint32_t)r->oui[1] << 8 | r->oui[2];
    memcpy(s.methods, r->method_mask, sizeof(s.methods));
    if (!is_vendor2(s.mgmt_class))
        s.oui = 0;
    id = agent_add(f, &s);
    if (id < 0)
        return -1;
    f->used = 1;
    r->id = (uint32_t)id;
    return 0;
}

/* IB_USER_MAD_REGISTER_AGENT2: flags (only USER_RMPP), and a first
 * registration switches the file to 64-byte headers. */
static int register_v2(struct ufile *f, struct ib_user_mad_reg_req2 *r)
{
    struct agent s;
    int id;

    if (r->flags & ~(uint32_t)IB_USER_MAD_REG_FLAGS_CAP) {
        r->flags = IB_USER_MAD_REG_FLAGS_CAP;
        errno = EINVAL;
        return -1;
    }
    if (r->oui & 0xff000000u) {
        errno = EINVAL;
        return -1;
    }
    memset(&s, 0, sizeof(s));
    s.qpn = (uint8_t)(r->qpn > 1 ? 2 : r->qpn);
    s.mgmt_class = r->mgmt_class;
    s.class_version = r->mgmt_class_version;
    s.rmpp_version = r->rmpp_version;
    s.flags = r->flags;
    s.oui = is_vendor2(s.mgmt_class) ? r->oui : 0;
    memcpy(s.methods, r->method_mask, sizeof(s.methods));
    id = agent_add(f, &s);
    if (id < 0)
        return -1;
    if (!f->used)
        f->new_hdr = 1;
    f->used = 1;
    r->id = (uint32_t)id;
    return 0;
}

/* IB_USER_MAD_UNREGISTER_AGENT. */
static int unregister(struct ufile *f, const uint32_t *id)
{
    if (*id >= FILE_AGENTS || !f->agents[*id]) {
        errno = EINVAL;
        return -1;
    }
    SIM_LOG("agent %u unregistered", *id);
    agent_drop(f->agents[*id]);
    return 0;
}

/* An ioctl on a umad file (sim.lock held); return 0 or -1 with errno. */
int file_ioctl(struct ufile *f, unsigned long req, void *arg)
{
    if (f->issm) {
        errno = ENOTTY;
        return -1;
    }
    if (!arg && req != IB_USER_MAD_ENABLE_PKEY) {
        errno = EFAULT;
        return -1;
    }
    switch (req) {
    case IB_USER_MAD_REGISTER_AGENT:
        return register_v1(f, arg);
    case IB_USER_MAD_REGISTER_AGENT2:
        return register_v2(f, arg);
    case IB_USER_MAD_UNREGISTER_AGENT:
        return unregister(f, arg);
    case IB_USER_MAD_ENABLE_PKEY:
        if (f->used) {
            errno = EINVAL;
            return -1;
        }
        f->new_hdr = 1;
        return 0;
    default:
        errno = ENOTTY;
        return -1;
    }
}

/* The agent whose TID tag this is, or NULL. */
struct agent *agent_by_tag(uint16_t tag)
{
    struct agent *a = sim.slots[tag & (AGENT_SLOTS - 1)];

    return a && a->tag == tag ? a : NULL;
}

/* The agent that takes an unsolicited MAD: same class and class version,
 * its method in the agent's mask (and, for vendor range 2, the OUI). */
struct agent *agent_for_request(const uint8_t *mad)
{
    uint8_t cls = mad[MO_CLASS], method = mad[MO_METHOD];
    uint32_t oui = (uint32_t)mad[MO_VENDOR_OUI] << 16 |
                   (uint32_t)mad[MO_VENDOR_OUI + 1] << 8 |
                   mad[MO_VENDOR_OUI + 2];
    unsigned i;

    for (i = 0; i < AGENT_SLOTS; i++) {
        struct agent *a = sim.slots[i];

        if (!a || a->mgmt_class != cls ||
            a->class_version != mad[MO_CLASS_VERSION] || method > 127 ||
            !(a->methods[method / 64] >> (method % 64) & 1))
            continue;
        if (is_vendor2(cls) && a->oui != oui)
            continue;
        return a;
    }
    return NULL;
}

/* Queue p on f (at the head: a MAD read() gave back) and count it on the
 * eventfd, which makes f readable. */
void file_push(struct ufile *f, struct packet *p, int front)
{
    uint64_t one = 1;

    if (front) {
        p->next = f->head;
        f->head = p;
        if (!f->tail)
            f->tail = p;
    } else {
        p->next = NULL;
        if (f->tail)
            f->tail->next = p;
        else
            f->head = p;
        f->tail = p;
    }
    if (libc_write(f->fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        SIM_LOG("eventfd write failed");
}

/* Return 1 if the kernel would run RMPP for this agent. */
int agent_kernel_rmpp(const struct agent *a)
{
    return a->rmpp_version && !(a->flags & IB_USER_MAD_USER_RMPP);
}
