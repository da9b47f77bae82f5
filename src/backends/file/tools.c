/* SPDX-License-Identifier: MIT */
/*
 * tools.c — the embedded backend's harness operations (src/harness/tools.h):
 * its round trip is a kernel lock on a file of its directory, and its names
 * leave NAME.lock files there.
 */
#include "file_int.h"
#include "harness/tools.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* One uncontended F_OFD_SETLK lock and unlock of a scratch file. */
static int baseline_step(void *arg, char *why, size_t wlen)
{
    int fd = *(int *)arg;
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &lk) != 0 || fcntl(fd, F_OFD_SETLK, &un) != 0) {
        snprintf(why, wlen, "fcntl: %s", strerror(errno));
        return DLOCK_EIO;
    }
    return 0;
}

/* What every acquisition and release of the backend does at least: an
 * uncontended OFD lock and unlock, on a scratch file of the lock
 * directory (so on its file system). */
static int file_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                              dh_timing *out)
{
    (void)name;
    file_client *fc = fc_of(c);
    char path[PATH_MAX], why[PATH_MAX + 100] = "";
    int64_t *v = NULL;
    size_t n = 0;
    int rc = 0;
    if (snprintf(path, sizeof path, "%s/.bench-rtt-%ld", fc->dir, (long)getpid()) >=
        (int)sizeof path)
        return dl_client_err(c, DLOCK_EINVAL, "baseline: the lock directory's path is too long");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = DLOCK_EIO;
        snprintf(why, sizeof why, "cannot create %s: %s", path, strerror(errno));
    } else {
        rc = dh_repeat(baseline_step, &fd, iters, 20, max_ns, &v, &n, why, sizeof why);
        close(fd);
        if (unlink(path) != 0) {
            /* a stray dot-file is ignored by `dlock list`; nothing to do */
        }
    }
    rc = dh_done(c, rc, "baseline", why, v, n, out,
                 "uncontended F_OFD_SETLK lock+unlock on a scratch file in the lock directory");
    if (rc == 0)
        out->servers = 0; /* no server: the kernel */
    return rc;
}

/* A name's lock file, NAME.lock: kept on release (removing it safely
 * would take a lock of the directory), so a benchmark's names remove
 * theirs afterwards. */
static int file_tool_forget(dlock_client *c, const char *name)
{
    file_client *fc = fc_of(c);
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s.lock", fc->dir, name) >= (int)sizeof path)
        return dl_client_err(c, DLOCK_EINVAL, "forget: the lock file's path is too long");
    if (unlink(path) != 0 && errno != ENOENT)
        return dl_client_err(c, DLOCK_EIO, "cannot remove %s: %s", path, strerror(errno));
    return 0;
}

const struct dh_tools dh_tools_file = {
    .baseline = file_tool_baseline,
    .forget = file_tool_forget,
};
