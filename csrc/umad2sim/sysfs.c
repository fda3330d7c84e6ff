/* sysfs.c - the simulated CA's /sys/class/infiniband{,_mad} tree, kept under <cwd>/sys-<pid>. */
#define _GNU_SOURCE
#include "umad2sim.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYS_IB "/sys/class/infiniband"
#define SYS_IB_MAD "/sys/class/infiniband_mad"
#define CA_NAME "ibsim0"
/* Re-read the port from the server at most this often. */
#define REFRESH_NS (100 * 1000 * 1000ull)

/* NodeInfo and PortInfo fields (IBA 14.2.5.3 and 14.2.5.6). */
enum {
    NI_NODE_TYPE = 2, NI_SYS_GUID = 4, NI_NODE_GUID = 12,
    PI_GID_PREFIX = 8, PI_LID = 16, PI_SM_LID = 18, PI_CAP_MASK = 20,
    PI_LOCAL_PORT = 28, PI_WIDTH_ACTIVE = 31, PI_STATE = 32,
    PI_PHYS_STATE = 33, PI_LMC = 34, PI_SPEED_ACTIVE = 35, PI_SM_SL = 36,
    PI_SPEED_EXT_ACTIVE = 62,
};
#define CAP_EXT_SPEEDS (1u << 14)

static uint64_t refreshed_ns;
static pthread_mutex_t refresh_lock = PTHREAD_MUTEX_INITIALIZER;

/* If path is in /sys/class/infiniband or /sys/class/infiniband_mad,
 * write its place in our tree to out and return out; else NULL. */
const char *sysfs_map(const char *path, char *out, size_t size)
{
    static const char *const dirs[] = {SYS_IB, SYS_IB_MAD};
    size_t i, n;

    if (!path || sim.up != 1)
        return NULL;
    for (i = 0; i < 2; i++) {
        n = strlen(dirs[i]);
        if (strncmp(path, dirs[i], n) == 0 &&
            (path[n] == 0 || path[n] == '/')) {
            if ((size_t)snprintf(out, size, "%s%s", sim.root, path) >= size)
                return NULL;
            return out;
        }
    }
    return NULL;
}

/* Return 1 if path (unmapped) is our port directory or below it. */
int sysfs_is_ports(const char *path)
{
    static const char ports[] = SYS_IB "/" CA_NAME "/ports";

    return path && strncmp(path, ports, sizeof(ports) - 1) == 0;
}

/* mkdir -p <root><dir>. */
static void make_dirs(const char *dir)
{
    char p[PATH_MAX];
    char *s;

    snprintf(p, sizeof(p), "%s%s", sim.root, dir);
    for (s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        mkdir(p, 0755);
        *s = '/';
    }
    mkdir(p, 0755);
}

/* Write <root><dir>/<name> whole (a new file renamed over the old, so
 * a reader never sees it half written). */
static void put_file(const char *dir, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put_file(const char *dir, const char *name, const char *fmt, ...)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    va_list ap;
    FILE *f;

    snprintf(path, sizeof(path), "%s%s/%s", sim.root, dir, name);
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    f = fopen(tmp, "w");
    if (!f) {
        shim_log("cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
    rename(tmp, path);
}

static uint16_t get_be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

/* "xxxx:xxxx:xxxx:xxxx", as the kernel prints a GUID. */
static void guid_text(char *out, size_t n, uint64_t g)
{
    snprintf(out, n, "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
             (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff,
             (unsigned)g & 0xffff);
}

/* The rate file's text ("40 Gb/sec (4X QDR)") from PortInfo. */
static void rate_text(char *out, size_t n)
{
    static const unsigned lanes[] = {0, 1, 4, 0, 8, 0, 0, 0, 12};
    const uint8_t *pi = sim.portinfo;
    unsigned wcode = pi[PI_WIDTH_ACTIVE], w = 0;
    unsigned speed = pi[PI_SPEED_ACTIVE] >> 4;
    unsigned ext = 0, tenths;
    const char *name;

    if (wcode < sizeof(lanes) / sizeof(lanes[0]))
        w = lanes[wcode];
    else if (wcode == 16)
        w = 2;
    if (get_be32(pi + PI_CAP_MASK) & CAP_EXT_SPEEDS)
        ext = pi[PI_SPEED_EXT_ACTIVE] >> 4;
    switch (ext) {
    case 1: tenths = 140; name = " FDR"; break;
    case 2: tenths = 250; name = " EDR"; break;
    case 4: tenths = 500; name = " HDR"; break;
    case 8: tenths = 1000; name = " NDR"; break;
    default:
        tenths = speed == 4 ? 100 : speed == 2 ? 50 : 25;
        name = speed == 4 ? " QDR" : speed == 2 ? " DDR" : "";
    }
    tenths *= w;
    if (tenths % 10)
        snprintf(out, n, "%u.%u Gb/sec (%uX%s)\n", tenths / 10, tenths % 10,
                 w, name);
    else
        snprintf(out, n, "%u Gb/sec (%uX%s)\n", tenths / 10, w, name);
}

/* The files of ports/<n>/ from sim.portinfo and sim.pkeys. */
static void write_port(void)
{
    static const char *const states[] = {"NOP", "DOWN", "INIT", "ARMED",
                                         "ACTIVE", "ACTIVE_DEFER"};
    static const char *const phys[] = {"<unknown>", "Sleep", "Polling",
        "Disabled", "PortConfigurationTraining", "LinkUp",
        "LinkErrorRecovery", "Phy Test"};
    const uint8_t *pi = sim.portinfo;
    unsigned state = pi[PI_STATE] & 0xf, ps = pi[PI_PHYS_STATE] >> 4, i;
    uint64_t guid = get_be64(sim.nodeinfo + NI_NODE_GUID);
    uint64_t prefix = get_be64(pi + PI_GID_PREFIX);
    char dir[128], sub[160], text[64];

    snprintf(dir, sizeof(dir), SYS_IB "/" CA_NAME "/ports/%u", sim.port_num);
    make_dirs(dir);
    put_file(dir, "lid", "0x%x\n", get_be16(pi + PI_LID));
    put_file(dir, "lid_mask_count", "%u\n", pi[PI_LMC] & 7);
    put_file(dir, "sm_lid", "0x%x\n", get_be16(pi + PI_SM_LID));
    put_file(dir, "sm_sl", "%u\n", pi[PI_SM_SL] & 0xf);
    put_file(dir, "state", "%u: %s\n", state,
             state < 6 ? states[state] : "<unknown>");
    put_file(dir, "phys_state", "%u: %s\n", ps, ps < 8 ? phys[ps] : phys[0]);
    put_file(dir, "cap_mask", "0x%08x\n", get_be32(pi + PI_CAP_MASK));
    put_file(dir, "link_layer", "InfiniBand\n");
    rate_text(text, sizeof(text));
    put_file(dir, "rate", "%s", text);
    if (sim.nodeinfo[NI_NODE_TYPE] != 2)        /* a CA port's own GUID */
        guid += sim.port_num;
    snprintf(sub, sizeof(sub), "%s/gids", dir);
    make_dirs(sub);
    put_file(sub, "0", "%04x:%04x:%04x:%04x:%04x:%04x:%04x:%04x\n",
             (unsigned)(prefix >> 48) & 0xffff,
             (unsigned)(prefix >> 32) & 0xffff,
             (unsigned)(prefix >> 16) & 0xffff, (unsigned)prefix & 0xffff,
             (unsigned)(guid >> 48) & 0xffff, (unsigned)(guid >> 32) & 0xffff,
             (unsigned)(guid >> 16) & 0xffff, (unsigned)guid & 0xffff);
    snprintf(sub, sizeof(sub), "%s/pkeys", dir);
    make_dirs(sub);
    for (i = 0; i < sizeof(sim.pkeys) / 2; i++) {
        snprintf(text, sizeof(text), "%u", i);
        put_file(sub, text, "0x%04x\n", get_be16(sim.pkeys + 2 * i));
    }
}

/* The CA's own files and the umad0/issm0 class devices. */
static void write_device(void)
{
    static const char *const types[] = {"<unknown>", "CA", "switch",
                                        "router"};
    const char *ca = SYS_IB "/" CA_NAME;
    unsigned type = sim.nodeinfo[NI_NODE_TYPE];
    char text[64];

    make_dirs(ca);
    put_file(ca, "node_type", "%u: %s\n", type, type < 4 ? types[type]
                                                         : types[0]);
    put_file(ca, "fw_ver", "%llx\n", (unsigned long long)sim.vendor.fw_rev);
    put_file(ca, "hw_rev", "%x\n", sim.vendor.hw_rev);
    put_file(ca, "hca_type", "simulator\n");
    put_file(ca, "node_desc", "%s\n", sim.node);
    guid_text(text, sizeof(text), get_be64(sim.nodeinfo + NI_NODE_GUID));
    put_file(ca, "node_guid", "%s\n", text);
    guid_text(text, sizeof(text), get_be64(sim.nodeinfo + NI_SYS_GUID));
    put_file(ca, "sys_image_guid", "%s\n", text);
    make_dirs(SYS_IB_MAD);
    put_file(SYS_IB_MAD, "abi_version", "%d\n", IB_USER_MAD_ABI_VERSION);
    make_dirs(SYS_IB_MAD "/umad0");
    put_file(SYS_IB_MAD "/umad0", "ibdev", CA_NAME "\n");
    put_file(SYS_IB_MAD "/umad0", "port", "%u\n", sim.port_num);
    make_dirs(SYS_IB_MAD "/issm0");
    put_file(SYS_IB_MAD "/issm0", "ibdev", CA_NAME "\n");
    put_file(SYS_IB_MAD "/issm0", "port", "%u\n", sim.port_num);
}

/* Make the tree at <cwd>/sys-<pid> from what link_open read.  Return 0 or
 * -1. */
int sysfs_build(void)
{
    char cwd[PATH_MAX - 256];

    if (!getcwd(cwd, sizeof(cwd))) {
        shim_log("getcwd: %s", strerror(errno));
        return -1;
    }
    snprintf(sim.root, sizeof(sim.root), "%s/sys-%d", cwd, (int)getpid());
    if (mkdir(sim.root, 0755) < 0 && errno != EEXIST) {
        shim_log("cannot make %s: %s", sim.root, strerror(errno));
        return -1;
    }
    sim.port_num = sim.portinfo[PI_LOCAL_PORT];
    write_device();
    write_port();
    refreshed_ns = now_ns();
    return 0;
}

/* Re-read our PortInfo from the server and rewrite the port's files
 * (LID, SM LID and state change as the SM works), at most every 100 ms. */
void sysfs_refresh_port(void)
{
    uint8_t pi[64];
    uint64_t t;

    if (sim.up != 1)
        return;
    pthread_mutex_lock(&refresh_lock);
    t = now_ns();
    if (t - refreshed_ns >= REFRESH_NS) {
        refreshed_ns = t;
        memset(pi, 0, sizeof(pi));
        if (link_ctl(SIM_OP_GET_PORTINFO, pi, sizeof(pi)) == 0 &&
            memcmp(pi, sim.portinfo, sizeof(pi)) != 0) {
            memcpy(sim.portinfo, pi, sizeof(pi));
            write_port();
        }
    }
    pthread_mutex_unlock(&refresh_lock);
}

static int remove_one(const char *path, const struct stat *st, int flag,
                      struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Remove the tree (at exit). */
void sysfs_remove(void)
{
    if (sim.root[0])
        nftw(sim.root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
