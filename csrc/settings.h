/* settings.h - the one table of the environment settings the C core reads
   (the software fabric, its verbs front end and the library loaders), and
   how they are read: once, into a struct pyrdma_settings, when a fabric
   node starts (csrc/fabric/node.c) or a library is loaded.  No Python
   here; the fabric library exports the table (fabric_lib.c) and
   `python -m rdma.fabric config` prints it. */
#ifndef PYRDMA_SETTINGS_H
#define PYRDMA_SETTINGS_H

#include <stddef.h>

#include "provider.h"

/*
 * The table, one X(...) entry per setting: X(id, name, type, default,
 * reader, meaning).  Adding a setting is adding one entry here; the code
 * that uses it reads pyrdma_settings_num(s, PYRDMA_SET_<id>) or _text().
 *   type    how the value is parsed (pyrdma_setting_parse): "flag" (0 or
 *           1; no/yes, off/on, false/true too), "size" (bytes: a number,
 *           with K, M or G), "path", "text", "secret" (never shown),
 *           "ipv4", "ucx" (UCX's own variable, passed on to UCX as it is)
 *           or "choice a|b|c" (one of those words)
 *   default what applies when the variable is unset or empty, as text
 *   reader  who reads it: "fabric" (when a node starts), "front end"
 *           (librdma_fabric_verbs.so), "loader" (when the library loads)
 */
#define PYRDMA_SETTINGS(X) \
    X(UCX_DIR, "RDMA_UCX_DIR", "path", "/dev/shm/rdma-ucx-<uid>", "fabric", \
      "rendezvous directory of the host's nodes (mode 0700, yours)") \
    X(UCX_SECRET, "RDMA_UCX_SECRET", "secret", "", "fabric", \
      "shared secret: nodes of other hosts must present it") \
    X(UCX_ADDR, "RDMA_UCX_ADDR", "ipv4", "127.0.0.1", "fabric", \
      "IPv4 address the node listens on for peers of other hosts") \
    X(UCX_CMA, "RDMA_UCX_CMA", "choice auto|0|1", "auto", "fabric", \
      "cross-memory attach: 0 off, 1 on also under Yama ptrace_scope 1") \
    X(UCX_CMA_MIN, "RDMA_UCX_CMA_MIN", "size", \
      "4096 (64K with CAP_SYS_PTRACE)", "fabric", \
      "smallest WR that goes by cross-memory attach, not the ring") \
    X(UCX_NO_RING, "RDMA_UCX_NO_RING", "flag", "0", "fabric", \
      "1: no request rings to same-host peers, no requests executed in " \
      "place to this process") \
    X(UCX_ADOPT, "RDMA_UCX_ADOPT", "flag", "1", "fabric", \
      "0: never adopt a program's own memory into shared memory") \
    X(UCX_DEBUG_ADOPT_WP, "RDMA_UCX_DEBUG_ADOPT_WP", "choice auto|none|user", \
      "auto", "fabric", "test hook: the write protection adoption uses") \
    X(UCX_DEBUG_CMA_STOP, "RDMA_UCX_DEBUG_CMA_STOP", "flag", "0", "fabric", \
      "test hook: stop before the first cross-memory attach copy") \
    X(UCX_TLS, "UCX_TLS", "ucx", "shm,self,tcp", "fabric", \
      "UCX's transports (no rings unless it names shared memory)") \
    X(UCX_RNDV_THRESH, "UCX_RNDV_THRESH", "ucx", "256K", "fabric", \
      "UCX's rendezvous threshold (smaller messages go eagerly)") \
    X(UCX_USE_MT_MUTEX, "UCX_USE_MT_MUTEX", "ucx", "y", "fabric", \
      "UCX's worker lock: a mutex, not a spinlock") \
    X(UCX_LIBRARY, "RDMA_UCX_LIBRARY", "path", "libucp.so.0", "loader", \
      "the UCP library the fabric loads") \
    X(IBVERBS_LIBRARY, "RDMA_IBVERBS_LIBRARY", "path", "libibverbs.so.1", \
      "loader", "the libibverbs rdma._ibverbs loads for verbs devices") \
    X(UMAD_LIBRARY, "RDMA_UMAD_LIBRARY", "path", "libibumad.so.3", \
      "loader", "the libibumad rdma._umad loads") \
    X(RDMACM_LIBRARY, "RDMA_RDMACM_LIBRARY", "path", "librdmacm.so.1", \
      "loader", "the librdmacm rdma.cm loads for verbs devices") \
    X(FABRIC_VERBS_DEBUG, "RDMA_FABRIC_VERBS_DEBUG", "flag", "0", \
      "front end", "1: the verbs front end logs each failure on stderr") \
    X(UCX_CM, "RDMA_UCX_CM", "choice auto|ucx0", "auto", "front end", \
      "ucx0: every rdma_cm ID of a C program on ucx0, also where a real " \
      "device is")

#define PYRDMA_SETTING_ID(id, ...) PYRDMA_SET_##id,
enum pyrdma_setting_id { PYRDMA_SETTINGS(PYRDMA_SETTING_ID) PYRDMA_NSETTINGS };
#undef PYRDMA_SETTING_ID

/* One row of the table (the layout the fabric library exports: keep it
   in step with rdma/fabric/settings.py). */
struct pyrdma_setting {
    const char *name;       /* the environment variable */
    const char *type;
    const char *dflt;
    const char *reader;
    const char *meaning;
};

extern const struct pyrdma_setting pyrdma_settings_table[PYRDMA_NSETTINGS];

/* The values read once (pyrdma_settings_read). */
struct pyrdma_settings {
    int read;                               /* 1 once read */
    char *text[PYRDMA_NSETTINGS];           /* the environment's, or NULL */
    unsigned long long num[PYRDMA_NSETTINGS]; /* flag, size, choice index,
                                               ipv4 (network order) */
};

/* The environment's value of setting id: NULL when unset or empty. */
const char *pyrdma_setting_env(int id);

/* Parse text (NULL: the default) as setting id's type into *num (for a
   choice: the index of the word; for text, path, secret and ucx: 0).
   0, or -1 with err holding a message naming the setting. */
int pyrdma_setting_parse(int id, const char *text, unsigned long long *num,
                         char *err, size_t errlen);

/* Read every setting of reader ("fabric", ...; NULL: all) from the
   environment into *s (freeing what it held).  0, or -1 with *st set
   (EINVAL naming the setting) for a value that does not parse. */
int pyrdma_settings_read(struct pyrdma_settings *s, const char *reader,
                         struct pyrdma_status *st);

/* Free what *s holds. */
void pyrdma_settings_free(struct pyrdma_settings *s);

/* The known name closest to name (edit distance), or NULL if none is
   close (more than a third of it differs). */
const char *pyrdma_setting_closest(const char *name);

/* Warn on stderr of each variable in the environment that starts with
   "RDMA_UCX_" and is no setting, naming the closest one. */
void pyrdma_settings_warn_unknown(void);

#endif /* PYRDMA_SETTINGS_H */
