/* preload.c - the libc entry points the shim takes over (open, close, read, write, ioctl, opendir, scandir) and its start and exit. */
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include "umad2sim.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* The entry points must stay visible: the library is built with
 * -fvisibility=hidden. */
#define EXPORT __attribute__((visibility("default")))
#define DEV_DIR "/dev/infiniband/"
#define SYS_DIR "/sys/class/infiniband"

struct shim sim = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .ctl_lock = PTHREAD_MUTEX_INITIALIZER,
    .ctl_fd = -1,
    .data_fd = -1,
    .wake_fd = -1,
};

ssize_t (*libc_read)(int, void *, size_t);
ssize_t (*libc_write)(int, const void *, size_t);
int (*libc_close)(int);
static int (*libc_open)(const char *, int, ...);
static int (*libc_ioctl)(int, unsigned long, ...);
static DIR *(*libc_opendir)(const char *);
static int (*libc_scandir)(const char *, struct dirent ***,
                           int (*)(const struct dirent *),
                           int (*)(const struct dirent **,
                                   const struct dirent **));

static pthread_once_t resolved = PTHREAD_ONCE_INIT;
static pthread_once_t started = PTHREAD_ONCE_INIT;
static pid_t owner;             /* the process that connected */

void shim_log(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    n = snprintf(line, sizeof(line), "umad2sim[%d]: ", (int)getpid());
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    fputs(line, stderr);
}

static void resolve(void)
{
    libc_read = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    libc_write = (ssize_t (*)(int, const void *, size_t))
        dlsym(RTLD_NEXT, "write");
    libc_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    libc_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    libc_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    libc_opendir = (DIR * (*)(const char *)) dlsym(RTLD_NEXT, "opendir");
    *(void **)&libc_scandir = dlsym(RTLD_NEXT, "scandir");
}

/* At exit: give our ibsim client slot back and remove the sysfs tree
 * (not in a child forked without exec: both are its parent's). */
static void stop(void)
{
    if (getpid() != owner)
        return;
    link_close();
    sysfs_remove();
}

/* Connect to ibsim, make the sysfs tree and start receiving (once, on
 * the first look at the CA).  On failure the process sees no CA. */
static void start(void)
{
    sim.debug = getenv("UMAD2SIM_DEBUG") != NULL;
    sim.files = calloc(FD_LIMIT, sizeof(*sim.files));
    if (!sim.files || link_open() < 0) {
        sim.up = -1;
        return;
    }
    if (sysfs_build() < 0 || receiver_start() < 0) {
        link_close();
        sim.up = -1;
        return;
    }
    sim.up = 1;
    owner = getpid();
    atexit(stop);
}

/* Start the shim if path is one of the CA's (sysfs or device); with it
 * up, refresh the port's files when path is among them. */
static void touch(const char *path)
{
    pthread_once(&resolved, resolve);
    if (!path || (strncmp(path, SYS_DIR, sizeof(SYS_DIR) - 1) != 0 &&
                  strncmp(path, DEV_DIR, sizeof(DEV_DIR) - 1) != 0))
        return;
    pthread_once(&started, start);
    if (sysfs_is_ports(path))
        sysfs_refresh_port();
}

/* If path is umad0 or issm0, open it as a new file and return 1 with
 * *fd its descriptor (or -1); else return 0.  (Not inlined into open(),
 * whose path is declared nonnull, so that a NULL path is still checked.) */
static __attribute__((noinline)) int open_device(const char *path, int flags,
                                                 int *fd)
{
    struct ufile *f;
    int issm;

    if (sim.up != 1 || !path)
        return 0;
    if (strcmp(path, DEV_DIR "umad0") == 0)
        issm = 0;
    else if (strcmp(path, DEV_DIR "issm0") == 0)
        issm = 1;
    else
        return 0;
    f = file_open(issm, flags & O_NONBLOCK, flags & O_CLOEXEC);
    *fd = f ? f->fd : -1;
    return 1;
}

EXPORT int open(const char *path, int flags, ...)
{
    char buf[PATH_MAX];
    const char *mapped;
    mode_t mode = 0;
    va_list ap;
    int fd;

    if (flags & (O_CREAT | __O_TMPFILE)) {
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    touch(path);
    if (open_device(path, flags, &fd))
        return fd;
    mapped = sysfs_map(path, buf, sizeof(buf));
    return libc_open(mapped ? mapped : path, flags, mode);
}

EXPORT int close(int fd)
{
    struct ufile *f;
    int rc;

    pthread_once(&resolved, resolve);
    f = file_of(fd);
    if (!f)
        return libc_close(fd);
    pthread_mutex_lock(&sim.lock);
    file_release(f);
    pthread_mutex_unlock(&sim.lock);
    /* Never a control exchange under sim.lock: the server may be
     * waiting for our receiver, which waits for the lock. */
    if (f->issm && link_ctl(SIM_OP_SET_ISSM, &(int){0}, sizeof(int)) < 0)
        SIM_LOG("SET_ISSM 0 failed: %s", strerror(errno));
    rc = libc_close(fd);
    free(f);
    return rc;
}

EXPORT ssize_t read(int fd, void *buf, size_t count)
{
    struct ufile *f;

    pthread_once(&resolved, resolve);
    f = file_of(fd);
    return f ? umad_file_read(f, buf, count) : libc_read(fd, buf, count);
}

EXPORT ssize_t write(int fd, const void *buf, size_t count)
{
    struct ufile *f;

    pthread_once(&resolved, resolve);
    f = file_of(fd);
    return f ? umad_file_write(f, buf, count) : libc_write(fd, buf, count);
}

EXPORT int ioctl(int fd, unsigned long req, ...)
{
    struct ufile *f;
    va_list ap;
    void *arg;
    int rc;

    va_start(ap, req);
    arg = va_arg(ap, void *);
    va_end(ap);
    pthread_once(&resolved, resolve);
    f = file_of(fd);
    if (!f)
        return libc_ioctl(fd, req, arg);
    pthread_mutex_lock(&sim.lock);
    rc = file_ioctl(f, req, arg);
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

EXPORT DIR *opendir(const char *path)
{
    char buf[PATH_MAX];
    const char *mapped;

    touch(path);
    mapped = sysfs_map(path, buf, sizeof(buf));
    return libc_opendir(mapped ? mapped : path);
}

EXPORT int scandir(const char *path, struct dirent ***list,
            int (*filter)(const struct dirent *),
            int (*compar)(const struct dirent **, const struct dirent **))
{
    char buf[PATH_MAX];
    const char *mapped;

    touch(path);
    mapped = sysfs_map(path, buf, sizeof(buf));
    return libc_scandir(mapped ? mapped : path, list, filter, compar);
}
