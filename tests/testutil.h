/* SPDX-License-Identifier: MIT */
/*
 * testutil.h — what the cmocka tests that open clients share (the
 * conformance suite and the backends' own tests): clocks, unique names,
 * opening clients and locks that fail the test with the library's message,
 * inspecting, waiting for waiters and for losses, a listener on a spare
 * loopback port, shell commands. Included by one test program each
 * (everything static), after cmocka.h. (test_url and test_checker test
 * parsers and open nothing: they need none of it.)
 */
#ifndef DLOCK_TESTUTIL_H
#define DLOCK_TESTUTIL_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/wait.h>

static int name_seq;
static atomic_int lost_calls; /* count_lost's count */

static inline int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void sleep_ms(int64_t ms)
{
    if (ms > 0) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
}

/* Send sig to the server tests/servers.sh started as name (its pid file). */
static inline void server_signal(const char *name, int sig)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.pid", getenv("DLOCK_TEST_SERVERS"), name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long pid = 0;
    assert_int_equal(fscanf(f, "%ld", &pid), 1);
    fclose(f);
    assert_int_equal(kill((pid_t)pid, sig), 0);
}

/* How often this process's threads named comm (dlock names its
 * background threads) have gone to sleep and been woken: their voluntary
 * context switches, from /proc/self/task/TID/{comm,status}; -1 when no
 * thread has that name. For tests that say a call wakes no background
 * thread. */
#define DLOCK_SESSIONS_THREAD "dlock-sessions" /* (src/internal.h: DL_SWATCH_THREAD) */
static inline long long thread_wakeups(const char *comm)
{
    long long sum = -1;
    char path[300], line[256];
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* (a thread that ended meanwhile) */
        bool named = fgets(line, sizeof line, f) && strcspn(line, "\n") == strlen(comm) &&
                     strncmp(line, comm, strlen(comm)) == 0;
        fclose(f);
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        if (!named || !(f = fopen(path, "r")))
            continue;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
                sum = (sum < 0 ? 0 : sum) + atoll(line + 24);
        fclose(f);
    }
    closedir(d);
    return sum;
}

/* A socket listening on a spare loopback port (*port), for the fake
 * servers of the tests that feed the client junk. */
static inline int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    assert_int_equal(listen(fd, 16), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static inline void unique(char *buf, size_t len, const char *base)
{
    snprintf(buf, len, "%s-%d-%d", base, (int)getpid(), ++name_seq);
}

static inline dlock_client *open_url(const char *url)
{
    dlock_client *c = NULL;
    if (dlock_client_open(&c, url, NULL)) /* (the message names the URL, password hidden) */
        fail_msg("open: %s", dlock_client_errmsg(NULL));
    return c;
}

/* A lock with the options o (NULL: the defaults), or the test fails with
 * the library's message; the makers below and the tests' own fill o. */
static inline dlock_lock *lock_with(dlock_client *c, const char *name, const dlock_lock_opts *o)
{
    dlock_lock *l = NULL;
    if (dlock_lock_new(&l, c, name, o))
        fail_msg("lock_new \"%s\": %s", name, dlock_client_errmsg(c));
    return l;
}

static inline dlock_lock *mk(dlock_client *c, const char *name, dlock_lost_cb cb, void *arg)
{
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.on_lost = cb;
    o.on_lost_arg = arg;
    return lock_with(c, name, &o);
}

/* A lock of the given kind, permits, lease (0: the default) and fairness
 * (-1: the backend's default). */
static inline dlock_lock *mk_lock(dlock_client *c, const char *name, dlock_kind kind,
                                  unsigned permits, int ttl_ms, int fair)
{
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.kind = kind;
    o.permits = permits;
    o.ttl_ms = ttl_ms;
    o.fair = fair;
    return lock_with(c, name, &o);
}

static inline void acquire_ok(dlock_lock *l, int timeout_ms)
{
    int rc = dlock_acquire(l, timeout_ms);
    if (rc != 0)
        fail_msg("acquire %s: %s: %s", dlock_lock_name(l), dlock_err_name(rc),
                 dlock_lock_errmsg(l));
}

static inline dlock_info inspect(dlock_client *c, const char *name)
{
    dlock_info info;
    memset(&info, 0, sizeof info);
    int rc = dlock_inspect(c, name, &info);
    if (rc != 0)
        fail_msg("inspect %s: %s: %s", name, dlock_err_name(rc), dlock_client_errmsg(c));
    return info;
}

/* Until NAME has `waiters` waiters (at most limit_ms). */
static inline void wait_waiters(dlock_client *c, const char *name, int waiters, int limit_ms)
{
    int64_t end = now_ms() + limit_ms;
    dlock_info info;
    do {
        info = inspect(c, name);
        if (info.waiters == waiters)
            return;
        sleep_ms(2);
    } while (now_ms() < end);
    fail_msg("%s: %d waiters, not %d, after %d ms", name, info.waiters, waiters, limit_ms);
}

/* Wait until l's loss descriptor is readable: ms waited, -1 if not within limit_ms. */
static inline int64_t wait_lost(dlock_lock *l, int limit_ms)
{
    struct pollfd p = {.fd = dlock_lost_fd(l), .events = POLLIN};
    if (p.fd < 0)
        return -1;
    int64_t t0 = now_ms();
    int n;
    while ((n = poll(&p, 1, limit_ms)) < 0) {
    }
    return n == 1 ? now_ms() - t0 : -1;
}

static inline void count_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    atomic_fetch_add(&lost_calls, 1);
}

static inline void wait_lost_calls(int n, int limit_ms)
{
    for (int i = 0; i < limit_ms / 5 && atomic_load(&lost_calls) < n; i++)
        sleep_ms(5);
}

/* A waiter in a thread of its own: acquires (and releases at once if asked),
 * records its rank among those that got the lock and its token. */
struct waiter {
    dlock_lock *l;
    int timeout;
    bool release; /* release at once once held */
    atomic_int rc;
    atomic_int done;
    int order; /* rank among the waiters that got the lock */
    uint64_t token;
    pthread_t t;
};
static atomic_int order_counter;

static inline void *waiter_main(void *p)
{
    struct waiter *w = p;
    int rc = dlock_acquire(w->l, w->timeout);
    if (rc == 0) {
        w->order = atomic_fetch_add(&order_counter, 1);
        w->token = dlock_token(w->l);
        if (w->release && dlock_release(w->l) != 0)
            rc = 99;
    }
    atomic_store(&w->rc, rc);
    atomic_store(&w->done, 1);
    return NULL;
}

static inline void waiter_start(struct waiter *w, dlock_lock *l, int timeout, bool release)
{
    w->l = l;
    w->timeout = timeout;
    w->release = release;
    atomic_store(&w->rc, -1000);
    atomic_store(&w->done, 0);
    assert_int_equal(pthread_create(&w->t, NULL, waiter_main, w), 0);
}

static inline int waiter_join(struct waiter *w)
{
    assert_int_equal(pthread_join(w->t, NULL), 0);
    return atomic_load(&w->rc);
}

/* Run a shell command; its standard output into out (NUL-terminated,
 * truncated to len; may be NULL); its exit status returned (-1 if it did
 * not exit). Needs cmocka.h first. */
static inline int shell_out(char *out, size_t len, const char *cmd)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        fail_msg("popen %s: %s", cmd, strerror(errno));
    size_t got = 0;
    char sink[4096];
    for (;;) {
        char *to = out && got + 1 < len ? out + got : sink;
        size_t room = out && got + 1 < len ? len - got - 1 : sizeof sink;
        size_t r = fread(to, 1, room, f);
        if (r == 0)
            break;
        if (to != sink)
            got += r;
    }
    if (out && len)
        out[got] = '\0';
    int st = pclose(f);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* s in single quotes for sh, its own single quotes as '\'' */
static inline void shell_quote(char *buf, size_t len, const char *s)
{
    size_t j = 0;
    assert_true(len > 2);
    buf[j++] = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            assert_true(j + 5 < len);
            memcpy(buf + j, "'\\''", 4);
            j += 4;
        } else {
            assert_true(j + 2 < len);
            buf[j++] = *s;
        }
    }
    buf[j++] = '\'';
    buf[j] = '\0';
}

/* shell_out with the trailing newlines of out dropped. */
static inline int run_cmd(char *out, size_t len, const char *cmd)
{
    int rc = shell_out(out, len, cmd);
    size_t got = out && len ? strlen(out) : 0;
    while (got > 0 && out[got - 1] == '\n')
        out[--got] = '\0';
    return rc;
}

/* Issue 24: 100 cycles of take and let go on url (a backend whose locks
 * hold a server session: PostgreSQL, MySQL) wake the session watcher
 * thread at most a few times (it waits on an epoll set the callers change
 * themselves; before, every grant woke it). label names the case. */
static inline void cycles_wake_no_thread(const char *url, const char *label)
{
    char name[64];
    unique(name, sizeof name, "nowake");
    dlock_client *c = open_url(url);
    dlock_lock *l = mk(c, name, NULL, NULL);
    acquire_ok(l, 0); /* (the watcher starts with the first grant) */
    assert_int_equal(dlock_release(l), 0);
    long long before = thread_wakeups(DLOCK_SESSIONS_THREAD);
    if (before < 0)
        fail_msg("%s: no thread named %s", label, DLOCK_SESSIONS_THREAD);
    for (int i = 0; i < 100; i++) {
        acquire_ok(l, 0);
        assert_int_equal(dlock_release(l), 0);
    }
    long long woke = thread_wakeups(DLOCK_SESSIONS_THREAD) - before;
    fprintf(stderr, "# %s: the session watcher woke %lld times in 100 cycles\n", label, woke);
    if (woke > 10)
        fail_msg("%s: the session watcher woke %lld times in 100 cycles", label, woke);
    dlock_lock_free(l);
    dlock_client_close(c);
}

#endif
