/*
 * bench_adapter.c — the backends' entries of `dlock bench` (bench_adapter.h):
 * the embedded backend, whose round trip is a kernel lock on a file of its
 * directory and whose names leave NAME.lock files there; and every backend
 * with servers, whose figures come from the library's tool operations.
 */
#include "bench_adapter.h"
#include "measure.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the embedded backend ------------------------------------------------ */

static void file_open(bench_site *s)
{
    if (ms_file_dir(s->url, s->dir, sizeof s->dir) != 0)
        s->dir[0] = '\0';
}

/* An uncontended F_OFD_SETLK lock+unlock on a scratch file of the lock
 * directory: what every acquisition and release of the backend does at
 * least. */
static int file_baseline(bench_site *s, const char *name, int iters, int64_t max_ns,
                         dh_timing *out, char *err, size_t errlen)
{
    (void)name;
    if (!s->dir[0])
        return DLOCK_ENOTSUP;
    char path[4200];
    snprintf(path, sizeof path, "%s/.bench-rtt-%ld", s->dir, (long)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return DLOCK_EIO;
    }
    int64_t *v = malloc((size_t)iters * sizeof *v);
    size_t n = 0;
    int rc = v ? 0 : DLOCK_ENOMEM;
    if (!v)
        snprintf(err, errlen, "out of memory");
    int64_t stop = ms_now_ns() + max_ns;
    while (rc == 0 && n < (size_t)iters && ms_now_ns() < stop) {
        struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        int64_t t0 = ms_now_ns();
        if (fcntl(fd, F_OFD_SETLK, &lk) != 0 || fcntl(fd, F_OFD_SETLK, &un) != 0) {
            snprintf(err, errlen, "fcntl: %s", strerror(errno));
            rc = DLOCK_EIO;
            break;
        }
        v[n++] = ms_now_ns() - t0;
    }
    close(fd);
    if (unlink(path) != 0) {
        /* a stray dot-file is ignored by `dlock list`; nothing to do */
    }
    if (rc == 0) {
        ms_sort_i64(v, n);
        out->all.p50 = ms_pct(v, n, 500);
        out->all.p99 = ms_pct(v, n, 990);
        out->all.samples = n;
        out->one = out->all;
        out->servers = 0;
        snprintf(out->what, sizeof out->what,
                 "uncontended F_OFD_SETLK lock+unlock on a scratch file in the lock directory");
    }
    free(v);
    return rc;
}

static int none_timing(bench_site *s, const char *name, int iters, dh_timing *out,
                       char *err, size_t errlen)
{
    (void)s, (void)name, (void)iters, (void)out, (void)err, (void)errlen;
    return DLOCK_ENOTSUP;
}

static int none_counters(bench_site *s, const char *name, dh_counters *out, char *err,
                         size_t errlen)
{
    (void)s, (void)name, (void)out, (void)err, (void)errlen;
    return DLOCK_ENOTSUP;
}

/* The backend keeps one file per name, NAME.lock, in its directory. */
static void file_forget(bench_site *s, const char *name)
{
    if (!s->dir[0])
        return;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s.lock", s->dir, name);
    if (unlink(path) != 0) {
        /* never created (a name no waiter picked) */
    }
}

/* ---- backends with servers: the library's tool operations ------------------ */

static int tool_result(bench_site *s, int rc, char *err, size_t errlen)
{
    if (rc && rc != DLOCK_ENOTSUP)
        snprintf(err, errlen, "%s", dlock_client_errmsg(s->client));
    return rc;
}

static int lib_baseline(bench_site *s, const char *name, int iters, int64_t max_ns,
                        dh_timing *out, char *err, size_t errlen)
{
    if (!s->client)
        return DLOCK_ENOTSUP;
    return tool_result(s, dh_baseline(s->client, name, iters, max_ns, out), err, errlen);
}

static int lib_relay(bench_site *s, const char *name, int iters, dh_timing *out,
                     char *err, size_t errlen)
{
    if (!s->client)
        return DLOCK_ENOTSUP;
    return tool_result(s, dh_relay(s->client, name, iters, out), err, errlen);
}

static int lib_counters(bench_site *s, const char *name, dh_counters *out, char *err,
                        size_t errlen)
{
    if (!s->client)
        return DLOCK_ENOTSUP;
    return tool_result(s, dh_read_counters(s->client, name, out), err, errlen);
}

static const bench_adapter adapters[] = {
    {.backend = "file",
     .open = file_open,
     .baseline = file_baseline,
     .relay = none_timing,
     .counters = none_counters,
     .forget = file_forget},
    /* the rest: whatever the library offers for the backend */
    {.backend = NULL, .baseline = lib_baseline, .relay = lib_relay, .counters = lib_counters},
};

const bench_adapter *bench_adapter_for(const char *backend)
{
    size_t i = 0;
    while (adapters[i].backend && (!backend || strcmp(adapters[i].backend, backend) != 0))
        i++;
    return &adapters[i];
}
