/* SPDX-License-Identifier: MIT */
/*
 * test_conformance.c — the lock contract of SPEC §§2–3, stated once and run
 * against every backend URL it is given.
 *
 *   test_conformance [--no-fork] [--case NAME]... [LABEL...]
 *
 * Each LABEL names a row of the table below: "file" always runs (a scratch
 * directory), the others take their URL from the row's environment variable
 * (tests/servers.sh exports them). No LABEL: every row whose variable is
 * set. A LABEL whose variable is unset exits 77 (ctest: skipped).
 *
 * Every case runs in a forked child, in a process group of its own, with its
 * own time limit: a case that hangs is killed (with everything it started)
 * and reported as failed, by name and URL, and the next case runs. A case a
 * backend cannot offer is skipped by the backend's capabilities
 * (dlock_backend_at's DLOCK_CAP_* flags), or by DLOCK_ENOTSUP from the call
 * itself, with the reason printed. cmocka checks inside the child.
 * --no-fork runs the cases in this process (for valgrind), without limits.
 *
 * Adding a backend's URL: one row in tests/targets.list (label, variable,
 * the servers.sh kinds that start its servers, the backend it needs, ci or
 * by hand); tests/servers.sh exports the variable. The table below, the
 * ctest entries and the Python tests' targets are made from that row.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "dlock_debug.h"
#include "testutil.h"
#include "harness/tools.h"
#include "internal.h"

/* (label, environment variable with the URL); NULL: the file backend in a
 * scratch directory. The rows of tests/targets.list, the one list of the
 * URLs the contract is tested on (tests/CMakeLists.txt writes them out). */
static const struct target_def {
    const char *label, *env;
} TARGETS[] = {
#include "conformance_targets.h"
};
#define NTARGETS (sizeof TARGETS / sizeof TARGETS[0])

/* The target under test (set before each case runs). */
static struct {
    const char *label;
    char url[1024];
    char shown[1024]; /* url fit to print (show_url) */
    const char *backend;
    unsigned caps;
    char scratch[256]; /* a private directory for counter files and logs */
    char prefix[64];   /* lock names of this run: "c<pid>-" */
    int lease_slack_ms; /* how long past its ttl the servers may keep a lease */
} T;

static int skip_fd = -1; /* where a child writes why it skipped */

/* ---- helpers ------------------------------------------------------------- */

static bool has(unsigned cap)
{
    return (T.caps & cap) == cap;
}

/* Skip the running case, saying why (the runner prints it). */
#define skip_because(...)                                                                    \
    do {                                                                                     \
        char why_[512];                                                                      \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                            \
        if (skip_fd >= 0)                                                                    \
            (void)!write(skip_fd, why_, strlen(why_));                                       \
        else                                                                                 \
            print_message("  skipped: %s\n", why_);                                          \
        skip();                                                                              \
    } while (0)

/* Does the URL choose a peer's layout (layout=...)? Its keys are the
 * peer's: only what the peer writes is recorded (etcdctl lock's: no hold
 * time), and its names are the peer's (a key prefix, '/' and all). */
static bool peer_layout(void)
{
    return strstr(T.url, "layout=") != NULL;
}

static void nm(char *buf, size_t len, const char *base)
{
    snprintf(buf, len, "%s%s", T.prefix, base);
}

/* The clients a case has open: a case that fails leaves through cmocka's
 * longjmp with its clients open, and their threads would fail every later
 * case that forks (forkguard.h); the in-process runner's teardown closes
 * them. Cases close theirs with close_client. */
static dlock_client *open_clients[64];

/* c was closed (by close_client, or by dlock_release_and_close). */
static void client_closed(const dlock_client *c)
{
    for (size_t i = 0; c && i < sizeof open_clients / sizeof open_clients[0]; i++)
        if (open_clients[i] == c)
            open_clients[i] = NULL;
}

static void close_client(dlock_client *c)
{
    client_closed(c);
    dlock_client_close(c);
}

static int close_leftover_clients(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof open_clients / sizeof open_clients[0]; i++)
        close_client(open_clients[i]);
    return 0;
}

/* T.shown: T.url with its password and secret values as "***" (the
 * library's own redaction), or its scheme alone when it does not parse:
 * a failing case's line must not print a password (SPEC: never print one). */
static void show_url(void)
{
    dl_url *u = NULL;
    char err[256];
    if (dl_url_parse(T.url, &u, err, sizeof err) == 0)
        snprintf(T.shown, sizeof T.shown, "%s", u->redacted);
    else
        snprintf(T.shown, sizeof T.shown, "%.*s://(a URL that does not parse)",
                 (int)strcspn(T.url, ":"), T.url);
    dl_url_free(u);
}

static dlock_client *open_client(void)
{
    dlock_client *c = NULL;
    if (dlock_client_open(&c, T.url, NULL) != 0)
        fail_msg("open: %s", dlock_client_errmsg(NULL)); /* (it names the URL) */
    for (size_t i = 0; i < sizeof open_clients / sizeof open_clients[0]; i++)
        if (!open_clients[i]) {
            open_clients[i] = c;
            break;
        }
    if (strcmp(dlock_client_backend(c), T.backend) != 0)
        fail_msg("%s: backend %s, expected %s", T.shown, dlock_client_backend(c), T.backend);
    return c;
}

static dlock_lock *ex(dlock_client *c, const char *name)
{
    return mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
}

/* fair=1 where the backend queues, its default elsewhere. */
static int fair_if_can(void)
{
    return has(DLOCK_CAP_FAIR) ? 1 : -1;
}

static void release_ok(dlock_lock *l)
{
    int rc = dlock_release(l);
    if (rc != 0)
        fail_msg("release \"%s\": %s: %s", dlock_lock_name(l), dlock_err_name(rc),
                 dlock_lock_errmsg(l));
}

static void wait_state(dlock_lock *l, dlock_state_t st, int ms)
{
    for (int i = 0; i < ms && dlock_state(l) != st; i++)
        usleep(1000);
    assert_int_equal(dlock_state(l), st);
}

/* inspect, or -1 where the backend cannot (its reason is the client's). */
static int inspect_if(dlock_client *c, const char *name, dlock_info *info)
{
    int rc = dlock_inspect(c, name, info);
    if (rc == DLOCK_ENOTSUP)
        return -1;
    if (rc != 0)
        fail_msg("inspect \"%s\": %s: %s", name, dlock_err_name(rc), dlock_client_errmsg(c));
    return 0;
}

/* An acquisition in a thread of its own. Never asserts (cmocka's checks
 * belong to the main thread); the main thread looks at rc. */
struct acq_waiter {
    dlock_lock *l;
    int timeout;
    bool release_after; /* release at once once acquired (FIFO order) */
    atomic_int *order;
    atomic_int rc;
    atomic_int done;
    int got;          /* position in *order */
    int64_t done_ms;
    pthread_t t;
};

static void *acq_waiter_main(void *p)
{
    struct acq_waiter *w = p;
    int rc = dlock_acquire(w->l, w->timeout);
    w->done_ms = now_ms();
    if (rc == 0 && w->order)
        w->got = atomic_fetch_add(w->order, 1);
    if (rc == 0 && w->release_after)
        rc = dlock_release(w->l) == 0 ? 0 : 1000;
    atomic_store(&w->rc, rc);
    atomic_store(&w->done, 1);
    return NULL;
}

static void start_waiter(struct acq_waiter *w, dlock_lock *l, int timeout)
{
    *w = (struct acq_waiter){.l = l, .timeout = timeout, .got = -1};
    assert_int_equal(pthread_create(&w->t, NULL, acq_waiter_main, w), 0);
}

/* Join a waiter that must be done within ms; its rc. */
static int join_waiter(struct acq_waiter *w, int ms)
{
    /* (in steps of 100 us: what comes right after the return, comes soon) */
    for (int i = 0; i < ms * 10 && !atomic_load(&w->done); i++)
        usleep(100);
    if (!atomic_load(&w->done))
        fail_msg("an acquisition of \"%s\" still waits after %d ms", dlock_lock_name(w->l), ms);
    pthread_join(w->t, NULL);
    return atomic_load(&w->rc);
}

/* Until l waits, and — where inspect counts waiters — until the server has
 * n of them queued; elsewhere a pause of pause_ms lets it get in line. */
static void wait_queued_or(dlock_client *c, const char *name, dlock_lock *l, int n, int pause_ms)
{
    wait_state(l, DLOCK_STATE_WAITING, 5000);
    dlock_info info;
    if (inspect_if(c, name, &info) == 0 && info.waiters >= 0) {
        for (int k = 0; k < 5000 && info.waiters != n; k++) {
            usleep(1000);
            assert_int_equal(inspect_if(c, name, &info), 0);
        }
        assert_int_equal(info.waiters, n);
    } else {
        /* The backend cannot count its waiters (mysql mode=rowlock: InnoDB's
         * lock waits need the PROCESS privilege): give the waiter time to
         * reach the server's queue (wait_queued gives it a second: 200 ms
         * was not always enough under ASan beside another suite, as the
         * waiter connects and sets its session first). */
        usleep((useconds_t)pause_ms * 1000);
    }
}

static void wait_queued(dlock_client *c, const char *name, dlock_lock *l, int n)
{
    wait_queued_or(c, name, l, n, 1000);
}

/* The holder child's own program (test_conformance --holder ...): takes
 * NAME (kind/permits/ttl) `count` times on one client, writes one byte to
 * fd, and waits to be killed. */
static int holder_main(char **a)
{
    const char *url = a[0], *name = a[1];
    int kind = atoi(a[2]), ttl = atoi(a[4]), count = atoi(a[5]), fd = atoi(a[6]);
    unsigned permits = (unsigned)atoi(a[3]);
    dlock_client *c = NULL;
    if (dlock_client_open(&c, url, NULL) != 0) {
        fprintf(stderr, "holder child: open: %s\n", dlock_client_errmsg(NULL));
        return 1;
    }
    for (int i = 0; i < count; i++) {
        dlock_lock_opts o;
        dlock_lock_opts_init(&o);
        o.kind = (dlock_kind)kind;
        o.permits = permits;
        o.ttl_ms = ttl;
        dlock_lock *l = NULL;
        if (dlock_lock_new(&l, c, name, &o) != 0 || dlock_acquire(l, 5000) != 0) {
            fprintf(stderr, "holder child: %s\n", l ? dlock_lock_errmsg(l) : dlock_client_errmsg(c));
            return 1;
        }
    }
    if (write(fd, "x", 1) != 1)
        return 2;
    for (;;)
        pause();
}

static char self_exe[4096]; /* this program, for the holder child */

/* A child process that holds NAME (see holder_main): returns its pid once
 * it holds. The child execs this program afresh rather than running on
 * after fork: a fork of a process whose client libraries run threads (the
 * ZooKeeper client's) can inherit a lock held by one of them. */
static pid_t spawn_holder(const char *name, dlock_kind kind, unsigned permits, int ttl_ms,
                          int count)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    char args[5][24];
    snprintf(args[0], sizeof args[0], "%d", (int)kind);
    snprintf(args[1], sizeof args[1], "%u", permits);
    snprintf(args[2], sizeof args[2], "%d", ttl_ms);
    snprintf(args[3], sizeof args[3], "%d", count);
    snprintf(args[4], sizeof args[4], "%d", ready[1]);
    pid_t pid = (fork)(); /* the child only execs: no fork guard */
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        char *argv[] = {self_exe, "--holder", T.url, (char *)name, args[0], args[1],
                        args[2], args[3], args[4], NULL};
        execv(self_exe, argv);
        _exit(127);
    }
    close(ready[1]); /* a child that dies first makes the read return 0 */
    char b;
    ssize_t got = read(ready[0], &b, 1);
    close(ready[0]);
    if (got != 1) {
        int status = 0;
        waitpid(pid, &status, 0);
        fail_msg("the holder child did not take \"%s\" (exit status %d)", name,
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    return pid;
}

/* How long a dead holder may keep a lock: its lease, or its session. A
 * server may keep a lease past its ttl (lease_slack_ms: memcached's whole
 * seconds, padded against a late tick of its clock). */
static int64_t death_bound_ms(int ttl_ms)
{
    if (!has(DLOCK_CAP_LEASE))
        return 5000;
    return ttl_ms + (T.lease_slack_ms > 2000 ? T.lease_slack_ms : 2000);
}

/* ---- the contract ---------------------------------------------------------- */

/* §2.6: a token on every acquisition, strictly greater than every earlier
 * one for the name; exclusion between handles and clients; state, count,
 * validity (§ dlock_valid_ms) as the header says. */
static void case_acquire_release_token(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "basic");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *a = ex(c, n), *b = ex(c2, n), *a2 = ex(c, n);
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_token(a), 0);
    assert_int_equal(dlock_held_count(a), 0);
    assert_int_equal(dlock_valid_ms(a), 0);
    assert_string_equal(dlock_lock_name(a), n);
    acquire_ok(a, 0);
    assert_int_equal(dlock_state(a), DLOCK_STATE_HELD);
    assert_int_equal(dlock_held_count(a), 1);
    uint64_t last = dlock_token(a);
    assert_true(last > 0);
    long long valid = dlock_valid_ms(a);
    if (has(DLOCK_CAP_LEASE))
        assert_true(valid > 0 && valid <= 30000);
    else /* a session: no bound (-1), or one the client vouches for (zk) */
        assert_true(valid == -1 || (valid > 0 && valid <= 30000));
    /* Another client, and another handle of the same client: excluded. */
    assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_token(b), 0);
    assert_int_equal(dlock_acquire(a2, 0), DLOCK_EBUSY);
    release_ok(a);
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_token(a), 0);
    assert_int_equal(dlock_held_count(a), 0);
    assert_int_equal(dlock_release(a), DLOCK_ENOTHELD);
    /* Tokens keep rising, whoever takes the lock and however it waits. */
    dlock_lock *who[3] = {a, b, a2};
    const int waits[3] = {-1, 0, 2000};
    for (int i = 0; i < 9; i++) {
        dlock_lock *l = who[i % 3];
        acquire_ok(l, waits[(i / 3) % 3]);
        if (dlock_token(l) <= last)
            fail_msg("token %" PRIu64 " after %" PRIu64, dlock_token(l), last);
        last = dlock_token(l);
        release_ok(l);
    }
    dlock_lock_free(a);
    dlock_lock_free(a2);
    dlock_lock_free(b);
    close_client(c);
    close_client(c2);
}

/* §2.3: releasing what one does not hold is an error, never a deletion of
 * someone else's lock. */
static void case_release_not_held(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "notheld");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *a = ex(c, n), *b = ex(c2, n);
    assert_int_equal(dlock_release(a), DLOCK_ENOTHELD);
    assert_true(dlock_lock_errmsg(a)[0] != '\0');
    acquire_ok(b, 0);
    uint64_t tb = dlock_token(b);
    assert_int_equal(dlock_release(a), DLOCK_ENOTHELD);
    assert_int_equal(dlock_state(b), DLOCK_STATE_HELD);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_EBUSY); /* still b's */
    dlock_info info;
    if (inspect_if(c, n, &info) == 0) {
        assert_int_equal(info.held, 1);
        assert_int_equal(info.token, tb);
    }
    release_ok(b);
    acquire_ok(a, 0);
    release_ok(a);
    dlock_lock_free(a);
    dlock_lock_free(b);
    close_client(c);
    close_client(c2);
}

/* §2.9: try-once says EBUSY at once; a timed wait says ETIMEDOUT after at
 * least its timeout and not much more (the header: + 100 ms; slack here
 * for loaded machines); neither leaves anything queued behind; a wait
 * forever lasts until the release. */
static void case_try_timed_forever(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "timeouts");
    int fair = fair_if_can();
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *a = mk_lock(c, n, DLOCK_EXCLUSIVE, 1, 0, fair), *b = mk_lock(c2, n, DLOCK_EXCLUSIVE, 1, 0, fair);
    dlock_lock *third = mk_lock(c2, n, DLOCK_EXCLUSIVE, 1, 0, fair);
    acquire_ok(a, 0);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
    int64_t took = now_ms() - t0;
    if (took > 1000)
        fail_msg("try-once took %lld ms", (long long)took);
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    assert_true(dlock_lock_errmsg(b)[0] != '\0');
    t0 = now_ns();
    assert_int_equal(dlock_acquire(b, 300), DLOCK_ETIMEDOUT);
    int64_t waited_us = (now_ns() - t0) / 1000;
    print_message("  %s: acquire(300) on a held lock: ETIMEDOUT after %lld us\n", T.label,
                  (long long)waited_us);
    if (waited_us < 300 * 1000 || waited_us > (300 + 100 + 900) * 1000)
        fail_msg("acquire(300) returned after %lld us", (long long)waited_us);
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_token(b), 0);
    const char *msg = dlock_lock_errmsg(b);
    if (!strstr(msg, n) || (!strstr(msg, "timed out") && !strstr(msg, "timeout")))
        fail_msg("ETIMEDOUT, but the message does not say so for \"%s\": %s", n, msg);
    dlock_info info;
    if (inspect_if(c, n, &info) == 0 && info.waiters >= 0)
        assert_int_equal(info.waiters, 0);
    /* Nothing left queued by the two failed attempts: free means free. */
    release_ok(a);
    acquire_ok(third, 0);
    uint64_t t3 = dlock_token(third);
    /* Only -1 means forever: -7 is a caller's bug, refused at once (issue
     * 22, item 10: it waited forever). */
    assert_int_equal(dlock_acquire(b, -7), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_lock_errmsg(b), "-7"));
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    dlock_lock *pair[2] = {b, third};
    assert_int_equal(dlock_acquire_all(pair, 2, -2), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_lock_errmsg(b), "-2 ms"));
    assert_int_equal(dlock_state(third), DLOCK_STATE_HELD);
    /* Forever: returns when the holder lets go, not before. */
    struct acq_waiter w;
    start_waiter(&w, b, -1);
    wait_state(b, DLOCK_STATE_WAITING, 5000);
    usleep(300 * 1000);
    assert_int_equal(atomic_load(&w.done), 0);
    release_ok(third);
    assert_int_equal(join_waiter(&w, 5000), 0);
    assert_true(dlock_token(b) > t3);
    release_ok(b);
    acquire_ok(a, 0);
    release_ok(a);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_lock_free(third);
    close_client(c);
    close_client(c2);
}

/* §3: re-entrant per handle — count kept, token unchanged, one release per
 * acquisition; other handles (same process too) stay excluded until the
 * last one; freeing a held handle releases it. */
static void case_reentry(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "reenter");
    dlock_client *c = open_client();
    dlock_lock *l = ex(c, n), *other = ex(c, n);
    acquire_ok(l, 0);
    uint64_t t = dlock_token(l);
    acquire_ok(l, 0);
    acquire_ok(l, 100);
    acquire_ok(l, -1);
    assert_int_equal(dlock_held_count(l), 4);
    assert_int_equal(dlock_token(l), t);
    for (int i = 3; i >= 1; i--) {
        release_ok(l);
        assert_int_equal(dlock_held_count(l), (unsigned)i);
        assert_int_equal(dlock_state(l), DLOCK_STATE_HELD);
        assert_int_equal(dlock_token(l), t);
        assert_int_equal(dlock_acquire(other, 0), DLOCK_EBUSY);
    }
    release_ok(l);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_release(l), DLOCK_ENOTHELD);
    acquire_ok(other, 0);
    assert_true(dlock_token(other) > t);
    acquire_ok(other, 0);
    dlock_lock_free(other); /* freed while held (twice): released */
    acquire_ok(l, 1000);
    release_ok(l);
    dlock_lock_free(l);
    close_client(c);
}

/* §2.9: cancel from another thread ends a wait with ECANCELED, leaves no
 * place in the queue behind, and is forgotten once the call returned. */
static void case_cancel(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "cancel");
    int fair = fair_if_can();
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *a = mk_lock(c, n, DLOCK_EXCLUSIVE, 1, 0, fair);
    dlock_lock *b = mk_lock(c2, n, DLOCK_EXCLUSIVE, 1, 0, fair);
    dlock_lock *d = mk_lock(c2, n, DLOCK_EXCLUSIVE, 1, 0, fair);
    acquire_ok(a, 0);
    const int timeouts[2] = {-1, 20000};
    for (int i = 0; i < 2; i++) {
        struct acq_waiter w;
        start_waiter(&w, b, timeouts[i]);
        wait_queued(c, n, b, 1);
        usleep(50 * 1000);
        int64_t t0 = now_ms();
        dlock_cancel(b);
        assert_int_equal(join_waiter(&w, 3000), DLOCK_ECANCELED);
        print_message("  %s: cancel of acquire(%d) took %lld ms\n", T.label, timeouts[i],
                      (long long)(now_ms() - t0));
        assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
        assert_int_equal(dlock_token(b), 0);
        dlock_info info;
        if (inspect_if(c, n, &info) == 0 && info.waiters >= 0)
            assert_int_equal(info.waiters, 0);
    }
    /* A cancel ends only its own wait: another handle of the client waits
     * its full timeout, twice (the core keeps the descriptors of waits for
     * the next ones, never one a cancel wrote to). */
    for (int i = 0; i < 2; i++) {
        int64_t t0 = now_ms();
        assert_int_equal(dlock_acquire(d, 300), DLOCK_ETIMEDOUT);
        if (now_ms() - t0 < 290)
            fail_msg("after a canceled wait, another handle's wait ended after %lld ms",
                     (long long)(now_ms() - t0));
    }
    /* A cancel that comes when no acquisition is in progress is forgotten:
     * the next contended acquisition waits its full timeout (issue 22,
     * item 4: it returned ECANCELED at once). */
    assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
    dlock_cancel(b);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(b, 300), DLOCK_ETIMEDOUT);
    if (now_ms() - t0 < 290)
        fail_msg("a late cancel ended the next wait after %lld ms", (long long)(now_ms() - t0));
    /* On release the lock is simply free: nobody was handed it. */
    release_ok(a);
    acquire_ok(d, 0);
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    release_ok(d);
    /* The cancels are forgotten: b acquires normally. */
    acquire_ok(b, 0);
    release_ok(b);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_lock_free(d);
    close_client(c);
    close_client(c2);
}

/* §2.7: a waiter gets the lock soon after the release (it is woken, it
 * does not find out at its next poll), fair or not. */
static void case_wake_on_release(void **state)
{
    (void)state;
    int fairs[2] = {0, 1};
    int nf = has(DLOCK_CAP_FAIR) ? 2 : 1;
    int64_t bound = has(DLOCK_CAP_NATIVE_BLOCKING) ? 1000 : 2000;
    for (int f = 0; f < nf; f++) {
        char n[128];
        nm(n, sizeof n, fairs[f] ? "wake-fair" : "wake");
        dlock_client *c = open_client(), *c2 = open_client();
        dlock_lock *a = mk_lock(c, n, DLOCK_EXCLUSIVE, 1, 0, fairs[f]);
        dlock_lock *b = mk_lock(c2, n, DLOCK_EXCLUSIVE, 1, 0, fairs[f]);
        acquire_ok(a, 0);
        uint64_t ta = dlock_token(a);
        struct acq_waiter w;
        start_waiter(&w, b, 15000);
        wait_state(b, DLOCK_STATE_WAITING, 5000);
        usleep(300 * 1000);
        assert_int_equal(atomic_load(&w.done), 0);
        int64_t t0 = now_ms();
        release_ok(a);
        assert_int_equal(join_waiter(&w, 15000), 0);
        int64_t took = w.done_ms - t0;
        print_message("  %s: fair=%d waiter had the lock %lld ms after the release\n", T.label,
                      fairs[f], (long long)took);
        if (took > bound)
            fail_msg("fair=%d: the waiter got the lock %lld ms after the release (bound %lld)",
                     fairs[f], (long long)took, (long long)bound);
        assert_true(dlock_token(b) > ta);
        release_ok(b);
        dlock_lock_free(a);
        dlock_lock_free(b);
        close_client(c);
        close_client(c2);
    }
}

/* §2.8: with fair=1, waiters get the lock in arrival order. */
static void case_fifo(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "fifo");
    dlock_client *c = open_client();
    dlock_lock *h = mk_lock(c, n, DLOCK_EXCLUSIVE, 1, 0, 1);
    acquire_ok(h, 0);
    enum { N = 5 };
    struct acq_waiter w[N];
    dlock_client *wc[N];
    atomic_int order = 0;
    for (int i = 0; i < N; i++) {
        wc[i] = open_client();
        start_waiter(&w[i], mk_lock(wc[i], n, DLOCK_EXCLUSIVE, 1, 0, 1), 20000);
        w[i].order = &order; /* read by the thread only after it acquired */
        w[i].release_after = true;
        wait_queued(c, n, w[i].l, i + 1);
    }
    release_ok(h);
    for (int i = 0; i < N; i++) {
        assert_int_equal(join_waiter(&w[i], 20000), 0);
        if (w[i].got != i)
            fail_msg("waiter %d (in arrival order) got the lock as number %d", i, w[i].got);
    }
    for (int i = 0; i < N; i++) {
        dlock_lock_free(w[i].l);
        close_client(wc[i]);
    }
    dlock_lock_free(h);
    close_client(c);
}

/* §3: read-write lock — readers together, a writer alone; a waiting writer
 * is not starved by readers arriving after it. */
static void case_shared(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "rw");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *r1 = mk_lock(c, n, DLOCK_SHARED, 1, 0, -1), *r2 = mk_lock(c2, n, DLOCK_SHARED, 1, 0, -1);
    dlock_lock *r3 = mk_lock(c2, n, DLOCK_SHARED, 1, 0, -1), *w = mk_lock(c, n, DLOCK_EXCLUSIVE, 1, 0, -1);
    acquire_ok(r1, 0);
    acquire_ok(r2, 0);
    assert_true(dlock_token(r2) > dlock_token(r1));
    dlock_info info;
    if (inspect_if(c, n, &info) == 0) {
        assert_int_equal(info.held, 1);
        if (info.holders >= 0)
            assert_int_equal(info.holders, 2);
    }
    assert_int_equal(dlock_acquire(w, 0), DLOCK_EBUSY);
    struct acq_waiter ww;
    start_waiter(&ww, w, 15000);
    wait_state(w, DLOCK_STATE_WAITING, 5000);
    usleep(200 * 1000);
    assert_int_equal(dlock_acquire(r3, 0), DLOCK_EBUSY); /* behind the writer */
    release_ok(r1);
    usleep(100 * 1000);
    assert_int_equal(atomic_load(&ww.done), 0); /* r2 still reads */
    release_ok(r2);
    assert_int_equal(join_waiter(&ww, 5000), 0);
    assert_true(dlock_token(w) > dlock_token(r2) || dlock_token(r2) == 0);
    assert_int_equal(dlock_acquire(r3, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_acquire(r1, 0), DLOCK_EBUSY);
    uint64_t tw = dlock_token(w);
    release_ok(w);
    acquire_ok(r3, 0);
    acquire_ok(r1, 0);
    assert_true(dlock_token(r3) > tw);
    release_ok(r3);
    release_ok(r1);
    dlock_lock_free(r1);
    dlock_lock_free(r2);
    dlock_lock_free(r3);
    dlock_lock_free(w);
    close_client(c);
    close_client(c2);
}

/* §3: a semaphore of N has at most N holders; the N+1th waits and gets a
 * permit when any one is freed; a dead holder's permits come back. */
static void case_semaphore(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "sem");
    const int ttl = 1500;
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = mk_lock(i % 2 ? c2 : c, n, DLOCK_SEMAPHORE, 3, ttl, -1);
    uint64_t last = 0;
    for (int i = 0; i < 3; i++) {
        acquire_ok(p[i], 0);
        assert_true(dlock_token(p[i]) > last);
        last = dlock_token(p[i]);
    }
    assert_int_equal(dlock_acquire(p[3], 0), DLOCK_EBUSY);
    dlock_info info;
    if (inspect_if(c, n, &info) == 0) {
        assert_int_equal(info.held, 1);
        if (info.holders >= 0)
            assert_int_equal(info.holders, 3);
    }
    struct acq_waiter w;
    start_waiter(&w, p[3], 15000);
    wait_state(p[3], DLOCK_STATE_WAITING, 5000);
    usleep(200 * 1000);
    assert_int_equal(atomic_load(&w.done), 0);
    /* The middle permit: a waiter waits for any of them. */
    release_ok(p[1]);
    assert_int_equal(join_waiter(&w, 5000), 0);
    assert_true(dlock_token(p[3]) > last);
    assert_int_equal(dlock_acquire(p[1], 0), DLOCK_EBUSY);
    release_ok(p[0]);
    release_ok(p[2]);
    release_ok(p[3]);

    /* A process holding two of the three permits dies. */
    pid_t kid = spawn_holder(n, DLOCK_SEMAPHORE, 3, ttl, 2);
    acquire_ok(p[0], 0);
    assert_int_equal(dlock_acquire(p[1], 0), DLOCK_EBUSY);
    int64_t t0 = now_ms();
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    acquire_ok(p[1], (int)death_bound_ms(ttl));
    acquire_ok(p[2], (int)death_bound_ms(ttl));
    print_message("  %s: a killed process's two permits were back after %lld ms\n", T.label,
                  (long long)(now_ms() - t0));
    assert_int_equal(dlock_acquire(p[3], 0), DLOCK_EBUSY);
    for (int i = 0; i < 4; i++)
        dlock_lock_free(p[i]);
    close_client(c);
    close_client(c2);
}

/* §3: one name is one lock, whatever kind each taker asks for. A held
 * semaphore shuts out an exclusive taker (which, where the backend can
 * wait, gets the name once every permit is back), an exclusive holder
 * shuts out semaphore takers, a shared holder an exclusive taker, and a
 * taker asking other permits than those in force is DLOCK_ECONFLICT;
 * once free, the name is any kind again. */
static bool not_granted(int rc)
{
    return rc == DLOCK_EBUSY || rc == DLOCK_ECONFLICT || rc == DLOCK_ETIMEDOUT;
}

static void case_kinds(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "kinds");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *e = ex(c, n);
    int rc;
    if (has(DLOCK_CAP_SEMAPHORE)) {
        dlock_lock *s1 = mk_lock(c, n, DLOCK_SEMAPHORE, 2, 0, -1);
        dlock_lock *s2 = mk_lock(c2, n, DLOCK_SEMAPHORE, 2, 0, -1);
        dlock_lock *s3 = mk_lock(c2, n, DLOCK_SEMAPHORE, 3, 0, -1);
        acquire_ok(s1, 0);
        acquire_ok(s2, 0);
        rc = dlock_acquire(s3, 0);
        if (rc != DLOCK_ECONFLICT)
            fail_msg("a semaphore of 3 on one of 2: %s, not ECONFLICT", dlock_err_name(rc));
        /* refused, not waited for (a long bound: a refusal is at once) */
        rc = dlock_acquire(s3, 3000);
        assert_int_equal(rc, DLOCK_ECONFLICT);
        /* (Tries only, beside the one waiter below: a timed wait that gives
         * up under load may leave its registration, which lapses by itself
         * within a lease — dlock.h — and would hold the name meanwhile.) */
        rc = dlock_acquire(e, 0);
        if (!not_granted(rc))
            fail_msg("an exclusive try on a held semaphore: %s", dlock_err_name(rc));
        if (rc != DLOCK_ECONFLICT) {
            /* this backend waits: the exclusive taker gets the name once
             * both permits are back, not before */
            struct acq_waiter w;
            start_waiter(&w, e, 15000);
            wait_state(e, DLOCK_STATE_WAITING, 5000);
            release_ok(s1);
            usleep(200 * 1000);
            assert_int_equal(atomic_load(&w.done), 0);
            release_ok(s2);
            assert_int_equal(join_waiter(&w, 5000), 0);
        } else {
            print_message("  %s: an exclusive taker of a semaphore is refused: %s\n", T.label,
                          dlock_lock_errmsg(e));
            release_ok(s1);
            release_ok(s2);
            acquire_ok(e, 5000);
        }
        /* exclusive held: no permit */
        rc = dlock_acquire(s1, 0);
        if (!not_granted(rc))
            fail_msg("a semaphore try on a held exclusive lock: %s", dlock_err_name(rc));
        rc = dlock_acquire(s2, 0);
        if (!not_granted(rc))
            fail_msg("a semaphore try on a held exclusive lock: %s", dlock_err_name(rc));
        release_ok(e);
        /* free again: a semaphore of 3 this time */
        acquire_ok(s3, 5000);
        rc = dlock_acquire(s1, 0);
        if (rc != DLOCK_ECONFLICT)
            fail_msg("a semaphore of 2 on one of 3: %s, not ECONFLICT", dlock_err_name(rc));
        release_ok(s3);
        dlock_lock_free(s1);
        dlock_lock_free(s2);
        dlock_lock_free(s3);
    }
    if (has(DLOCK_CAP_SHARED)) {
        dlock_lock *r = mk_lock(c2, n, DLOCK_SHARED, 1, 0, -1);
        acquire_ok(r, 5000);
        rc = dlock_acquire(e, 0);
        if (!not_granted(rc))
            fail_msg("an exclusive try on a held shared lock: %s", dlock_err_name(rc));
        release_ok(r);
        if (has(DLOCK_CAP_SEMAPHORE)) {
            dlock_lock *s = mk_lock(c, n, DLOCK_SEMAPHORE, 2, 0, -1);
            acquire_ok(s, 5000);
            rc = dlock_acquire(r, 0);
            if (!not_granted(rc))
                fail_msg("a shared try on a held semaphore: %s", dlock_err_name(rc));
            release_ok(s);
            dlock_lock_free(s);
        }
        dlock_lock_free(r);
    }
    /* every holder gone: the name is a plain lock again */
    acquire_ok(e, 5000);
    release_ok(e);
    dlock_lock_free(e);
    close_client(c);
    close_client(c2);
}

/* §3: multi-lock — all or nothing, within one timeout for the set. */
static void case_multi_lock(void **state)
{
    (void)state;
    char na[128], nb[128], nc[128];
    nm(na, sizeof na, "m-a");
    nm(nb, sizeof nb, "m-b");
    nm(nc, sizeof nc, "m-c");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *set[3] = {ex(c, nc), ex(c, na), ex(c, nb)};
    dlock_lock *spoiler = ex(c2, nb);
    acquire_ok(spoiler, 0);
    /* m-b is taken: m-a (taken first, in name order) must not stay held. */
    assert_int_equal(dlock_acquire_all(set, 3, 0), DLOCK_EBUSY);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_state(set[i]), DLOCK_STATE_IDLE);
    int64_t t0 = now_ms();
    int rc = dlock_acquire_all(set, 3, 200);
    int64_t took = now_ms() - t0;
    if (rc != DLOCK_ETIMEDOUT)
        fail_msg("acquire_all(200) on a held set: %s after %lld ms: %s", dlock_err_name(rc),
                 (long long)took, dlock_lock_errmsg(set[0]));
    if (took < 200 || took > 200 + 100 + 900)
        fail_msg("acquire_all(200) returned after %lld ms", (long long)took);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_state(set[i]), DLOCK_STATE_IDLE);
    dlock_lock *probe = ex(c2, na);
    acquire_ok(probe, 0); /* really free */
    release_ok(probe);
    release_ok(spoiler);
    assert_int_equal(dlock_acquire_all(set, 3, 2000), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_state(set[i]), DLOCK_STATE_HELD);
    assert_int_equal(dlock_acquire(spoiler, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_acquire(probe, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release_all(set, 3), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_state(set[i]), DLOCK_STATE_IDLE);
    acquire_ok(spoiler, 0);
    release_ok(spoiler);
    /* One name twice in the set: refused, not a wait for oneself. */
    dlock_lock *dup[2] = {set[0], ex(c, nc)};
    assert_int_equal(dlock_acquire_all(dup, 2, 0), DLOCK_EINVAL);
    dlock_lock_free(dup[1]);
    for (int i = 0; i < 3; i++)
        dlock_lock_free(set[i]);
    dlock_lock_free(spoiler);
    dlock_lock_free(probe);
    close_client(c);
    close_client(c2);
}

struct pair_arg {
    const char *first, *second;
    int iters;
    atomic_int failures;
    char why[256];
};

static void *pair_worker(void *p)
{
    struct pair_arg *a = p;
    dlock_client *c = NULL;
    if (dlock_client_open(&c, T.url, NULL) != 0) {
        atomic_store(&a->failures, a->iters);
        snprintf(a->why, sizeof a->why, "open: %s", dlock_client_errmsg(NULL));
        return NULL;
    }
    dlock_lock *set[2] = {NULL, NULL};
    if (dlock_lock_new(&set[0], c, a->first, NULL) || dlock_lock_new(&set[1], c, a->second, NULL)) {
        atomic_store(&a->failures, a->iters);
        snprintf(a->why, sizeof a->why, "lock_new: %s", dlock_client_errmsg(c));
    } else {
        for (int i = 0; i < a->iters; i++) {
            int rc = dlock_acquire_all(set, 2, 10000);
            if (rc != 0) {
                if (atomic_fetch_add(&a->failures, 1) == 0)
                    snprintf(a->why, sizeof a->why, "%s: %s", dlock_err_name(rc),
                             dlock_lock_errmsg(set[0]));
            } else if (dlock_release_all(set, 2) != 0) {
                atomic_fetch_add(&a->failures, 1);
            }
        }
    }
    dlock_lock_free(set[0]);
    dlock_lock_free(set[1]);
    close_client(c);
    return NULL;
}

/* §3: two callers taking the same two names in opposite orders never
 * deadlock (canonical order). */
static void case_multi_lock_no_deadlock(void **state)
{
    (void)state;
    char x[128], y[128];
    nm(x, sizeof x, "dx");
    nm(y, sizeof y, "dy");
    struct pair_arg a = {.first = x, .second = y, .iters = 60};
    struct pair_arg b = {.first = y, .second = x, .iters = 60};
    pthread_t t1, t2;
    int64_t t0 = now_ms();
    assert_int_equal(pthread_create(&t1, NULL, pair_worker, &a), 0);
    assert_int_equal(pthread_create(&t2, NULL, pair_worker, &b), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    print_message("  %s: 2 x %d opposite-order acquire_all in %lld ms\n", T.label, a.iters,
                  (long long)(now_ms() - t0));
    if (atomic_load(&a.failures) || atomic_load(&b.failures))
        fail_msg("failures: %d (%s), %d (%s)", atomic_load(&a.failures), a.why,
                 atomic_load(&b.failures), b.why);
}

struct campaigner {
    dlock_lock *l;
    const char *value;
    int timeout;
    atomic_int rc, done;
};

static void *campaign_main(void *p)
{
    struct campaigner *w = p;
    atomic_store(&w->rc, dlock_campaign(w->l, w->value, w->timeout));
    atomic_store(&w->done, 1);
    return NULL;
}

/* §3: election — campaign, observe the leader's value, resign, next. */
static void case_election(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "leader");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *a = ex(c, n), *b = ex(c2, n);
    char buf[300];
    int rc = dlock_leader(c2, n, buf, sizeof buf);
    if (rc != DLOCK_ENOTSUP)
        assert_int_equal(rc, DLOCK_ENOENT);
    rc = dlock_campaign(a, "node-a:8080", 0);
    if (rc == DLOCK_ENOTSUP) {
        char why[256];
        snprintf(why, sizeof why, "%s", dlock_lock_errmsg(a));
        dlock_lock_free(a);
        dlock_lock_free(b);
        close_client(c);
        close_client(c2);
        skip_because("dlock_campaign: ENOTSUP: %s", why);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(dlock_state(a), DLOCK_STATE_HELD);
    assert_int_equal(dlock_leader(c2, n, buf, sizeof buf), 0);
    assert_string_equal(buf, "node-a:8080");
    /* A buffer too short is reported with the size it needs, never cut
     * silently (issue 22, item 10). */
    char small[5];
    assert_int_equal(dlock_leader(c2, n, small, sizeof small), DLOCK_EINVAL);
    assert_string_equal(small, "node");
    assert_non_null(strstr(dlock_client_errmsg(c2), "needs 12 bytes"));
    assert_int_equal(dlock_campaign(b, "node-b", 0), DLOCK_EBUSY);
    /* b campaigns and waits; a resigns (whatever its re-entry count) and b
     * is the leader soon after. */
    acquire_ok(a, 0);
    struct campaigner cb = {.l = b, .value = "node-b", .timeout = 15000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, campaign_main, &cb), 0);
    wait_state(b, DLOCK_STATE_WAITING, 5000);
    usleep(200 * 1000);
    assert_int_equal(atomic_load(&cb.done), 0);
    assert_int_equal(dlock_leader(c2, n, buf, sizeof buf), 0);
    assert_string_equal(buf, "node-a:8080");
    int64_t t0 = now_ms();
    assert_int_equal(dlock_resign(a), 0);
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&cb.rc), 0);
    print_message("  %s: the next leader was in %lld ms after the resignation\n", T.label,
                  (long long)(now_ms() - t0));
    assert_int_equal(dlock_leader(c, n, buf, sizeof buf), 0);
    assert_string_equal(buf, "node-b");
    assert_int_equal(dlock_campaign(a, "node-a", 0), DLOCK_EBUSY);
    assert_int_equal(dlock_resign(b), 0);
    assert_int_equal(dlock_leader(c, n, buf, sizeof buf), DLOCK_ENOENT);
    char other[128];
    nm(other, sizeof other, "leader-never");
    assert_int_equal(dlock_leader(c, other, buf, sizeof buf), DLOCK_ENOENT);
    dlock_lock_free(a);
    dlock_lock_free(b);
    close_client(c);
    close_client(c2);
}

/* dlock_inspect: held, holder, token, times, waiters where knowable. */
static void case_inspect(void **state)
{
    (void)state;
    char n[128], never[128];
    nm(n, sizeof n, "inspected");
    nm(never, sizeof never, "never-used");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_info info;
    if (inspect_if(c2, never, &info) != 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", dlock_client_errmsg(c2));
        close_client(c);
        close_client(c2);
        skip_because("dlock_inspect: ENOTSUP: %s", why);
    }
    assert_int_equal(info.held, 0);
    const int ttl = 20000;
    dlock_lock *l = mk_lock(c, n, DLOCK_EXCLUSIVE, 1, ttl, fair_if_can());
    acquire_ok(l, 0);
    usleep(50 * 1000);
    assert_int_equal(inspect_if(c2, n, &info), 0);
    print_message("  %s: held=%d holders=%d waiters=%d token=%" PRIu64
                  " held_ms=%lld lease_ms=%lld holder=\"%s\"\n",
                  T.label, info.held, info.holders, info.waiters, info.token, info.held_ms,
                  info.lease_ms, info.holder);
    assert_int_equal(info.held, 1);
    assert_true(info.holders == -1 || info.holders == 1);
    assert_int_equal(info.token, dlock_token(l));
    /* every backend records it, in its own layout */
    assert_true((info.held_ms == -1 && peer_layout()) || (info.held_ms >= 0 && info.held_ms < 60000));
    if (has(DLOCK_CAP_LEASE))
        assert_true(info.lease_ms > 0 && info.lease_ms <= ttl);
    char want[64];
    snprintf(want, sizeof want, "pid %ld", (long)getpid());
    if (!strstr(info.holder, want))
        fail_msg("holder \"%s\" does not name %s", info.holder, want);
    /* A waiter is counted where the backend counts them. */
    dlock_lock *w = mk_lock(c2, n, DLOCK_EXCLUSIVE, 1, ttl, fair_if_can());
    struct acq_waiter ws;
    start_waiter(&ws, w, 15000);
    wait_state(w, DLOCK_STATE_WAITING, 5000);
    usleep(200 * 1000);
    assert_int_equal(inspect_if(c2, n, &info), 0);
    assert_true(info.waiters == -1 || info.waiters == 1);
    uint64_t tl = dlock_token(l);
    release_ok(l);
    assert_int_equal(join_waiter(&ws, 5000), 0);
    assert_int_equal(inspect_if(c, n, &info), 0);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, dlock_token(w));
    assert_true(info.waiters == -1 || info.waiters == 0);
    release_ok(w);
    assert_int_equal(inspect_if(c, n, &info), 0);
    assert_int_equal(info.held, 0);
    assert_true(info.token == 0 || info.token >= tl); /* the last issued, if known */
    dlock_lock_free(l);
    dlock_lock_free(w);
    close_client(c);
    close_client(c2);
}

struct seen {
    const char *prefix;
    char names[48][208];
    int counts[48];
    int n, foreign, calls;
    int stop_with;
};

static int see(const char *name, void *arg)
{
    struct seen *s = arg;
    s->calls++;
    if (s->prefix && strncmp(name, s->prefix, strlen(s->prefix)) != 0)
        s->foreign++;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) {
            s->counts[i]++;
            return s->stop_with;
        }
    if (s->n < 48) {
        snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
        s->counts[s->n++] = 1;
    }
    return s->stop_with;
}

static int seen_count(const struct seen *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0)
            return s->counts[i];
    return 0;
}

/* dlock_list: every name with the prefix (held or used), once; a non-zero
 * return stops the walk and is returned. */
static void case_list(void **state)
{
    (void)state;
    char p[128], a[160], b[160];
    nm(p, sizeof p, "listed-");
    snprintf(a, sizeof a, "%sa", p);
    snprintf(b, sizeof b, "%sb", p);
    dlock_client *c = open_client(), *c2 = open_client();
    struct seen s = {.prefix = p};
    int rc = dlock_list(c2, p, see, &s);
    if (rc == DLOCK_ENOTSUP) {
        char why[256];
        snprintf(why, sizeof why, "%s", dlock_client_errmsg(c2));
        close_client(c);
        close_client(c2);
        skip_because("dlock_list: ENOTSUP: %s", why);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(s.calls, 0);
    dlock_lock *la = ex(c, a), *lb = ex(c, b);
    acquire_ok(la, 0);
    acquire_ok(lb, 0);
    release_ok(lb);
    s = (struct seen){.prefix = p};
    assert_int_equal(dlock_list(c2, p, see, &s), 0);
    assert_int_equal(s.foreign, 0);
    assert_int_equal(seen_count(&s, a), 1);
    assert_int_equal(seen_count(&s, b), 1);
    assert_int_equal(s.n, 2);
    s = (struct seen){.prefix = NULL};
    assert_int_equal(dlock_list(c2, NULL, see, &s), 0);
    assert_true(s.calls >= 2);
    s = (struct seen){.prefix = p, .stop_with = 7};
    assert_int_equal(dlock_list(c2, p, see, &s), 7);
    assert_int_equal(s.calls, 1);
    release_ok(la);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    close_client(c);
    close_client(c2);
}

static atomic_int lost_in_caller; /* (and testutil.h's lost_calls) */
static pthread_t lost_caller;
static void on_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    /* The header promises the client's background thread, never the
     * thread that called into the library (the test hook included). */
    if (pthread_equal(pthread_self(), lost_caller))
        atomic_fetch_add(&lost_in_caller, 1);
    atomic_fetch_add(&lost_calls, 1);
}

/* §2.5: a lost lock is told at once — state LOST, the descriptor readable,
 * the callback once — and the next holder gets a higher token; the loser's
 * release says ELOST and returns the handle to idle. */
static void case_loss_notification(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "lose");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.on_lost = on_lost;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(&l, c, n, &o), 0);
    dlock_lock *other = ex(c2, n);
    atomic_store(&lost_calls, 0);
    atomic_store(&lost_in_caller, 0);
    lost_caller = pthread_self();
    assert_int_equal(dlock_debug_force_loss(l), DLOCK_ENOTHELD);
    acquire_ok(l, 0);
    uint64_t tl = dlock_token(l);
    struct pollfd p = {.fd = dlock_lost_fd(l), .events = POLLIN};
    assert_true(p.fd >= 0);
    assert_int_equal(poll(&p, 1, 0), 0);
    assert_int_equal(dlock_debug_force_loss(l), 0);
    assert_int_equal(poll(&p, 1, 2000), 1);
    assert_int_equal(dlock_state(l), DLOCK_STATE_LOST);
    /* A lost holding's token is 0, as when not held (issue 22, item 10). */
    assert_int_equal(dlock_token(l), 0);
    for (int i = 0; i < 200 && atomic_load(&lost_calls) == 0; i++)
        usleep(10 * 1000);
    usleep(200 * 1000);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(atomic_load(&lost_in_caller), 0);
    /* Really gone: someone else takes it, with a higher token. */
    acquire_ok(other, 2000);
    assert_true(dlock_token(other) > tl);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_ELOST);
    assert_int_equal(dlock_state(l), DLOCK_STATE_LOST);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    assert_int_equal(poll(&p, 1, 0), 0);
    assert_int_equal(dlock_release(l), DLOCK_ENOTHELD);
    assert_int_equal(dlock_state(other), DLOCK_STATE_HELD);
    uint64_t to = dlock_token(other);
    release_ok(other);
    acquire_ok(l, 0);
    assert_true(dlock_token(l) > to);
    release_ok(l);
    assert_int_equal(atomic_load(&lost_calls), 1);
    dlock_lock_free(l);
    dlock_lock_free(other);
    close_client(c);
    close_client(c2);
}

/* Warnings told to a holder (on_warn), and whether it came from the
 * caller's thread (it must not). */
static atomic_int warn_calls;

static void count_warning(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    atomic_fetch_add(&warn_calls, 1);
}

/* Issue 28: max_hold_ms gives a lock up at its cap on every backend, even
 * while its renewals succeed (a 1.5 s lease renewed through three periods
 * on lease backends): the loss is told as any other (descriptor, state,
 * on_lost once), its message names the cap, the lock is released on the
 * server (another client takes it at once, long before a lease left
 * behind would run out), the owner's release says ELOST, and no warning
 * (on_warn) comes while renewals succeed. */
static void case_max_hold(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "cap");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = 1500;
    o.max_hold_ms = 4500;
    o.on_lost = on_lost;
    o.on_warn = count_warning;
    dlock_lock *l = NULL, *bad = NULL;
    /* The contract's bounds first: a negative cap, a warning too early. */
    o.max_hold_ms = -1;
    assert_int_equal(dlock_lock_new(&bad, c, n, &o), DLOCK_EINVAL);
    o.max_hold_ms = 4500;
    o.warn_ms = 751;
    assert_int_equal(dlock_lock_new(&bad, c, n, &o), DLOCK_EINVAL);
    o.warn_ms = 0;
    assert_int_equal(dlock_lock_new(&l, c, n, &o), 0);
    /* A lease far longer than the test: only a real release lets it in. */
    dlock_lock_opts ro;
    dlock_lock_opts_init(&ro);
    ro.ttl_ms = 60000;
    dlock_lock *other = NULL;
    assert_int_equal(dlock_lock_new(&other, c2, n, &ro), 0);
    atomic_store(&lost_calls, 0);
    atomic_store(&lost_in_caller, 0);
    atomic_store(&warn_calls, 0);
    lost_caller = pthread_self();
    acquire_ok(l, 5000);
    acquire_ok(l, 0); /* a re-entry does not restart the cap */
    struct pollfd p = {.fd = dlock_lost_fd(l), .events = POLLIN};
    assert_true(p.fd >= 0);
    /* A bound against a hang, not a measure: the cap comes at 4.5 s. */
    assert_int_equal(poll(&p, 1, 60000), 1);
    assert_int_equal(dlock_state(l), DLOCK_STATE_LOST);
    const char *why = dlock_lock_errmsg(l);
    if (!strstr(why, "the max-hold cap of 4500 ms was reached: given up and released"))
        fail_msg("the capped lock's message: %s", why);
    for (int i = 0; i < 1000 && atomic_load(&lost_calls) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(atomic_load(&lost_in_caller), 0);
    assert_int_equal(atomic_load(&warn_calls), 0);
    /* Released on the server: another client gets it on its first try. */
    assert_int_equal(dlock_acquire(other, 0), 0);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    release_ok(other);
    /* The handle is good for a new holding (and a new cap). */
    acquire_ok(l, 5000);
    release_ok(l);
    assert_int_equal(atomic_load(&lost_calls), 1);
    dlock_lock_free(l);
    dlock_lock_free(other);
    close_client(c);
    close_client(c2);
}

/* A release in a thread of its own: on a session backend it waits out the
 * lock's minimum (min_hold_ms) while the test looks at the lock. */
struct releaser {
    dlock_lock *l;
    int rc;
};

static void *release_main(void *arg)
{
    struct releaser *r = arg;
    r->rc = dlock_release(r->l);
    return NULL;
}

/* Issue 28: min_hold_ms keeps a released lock taken until the minimum
 * after its acquisition, on every backend: the release returns at once
 * with the lease handed to the server, or waits holding; either way
 * another client's try before the minimum is refused, and after it the
 * other client gets the lock (within a generous bound). A try that comes
 * after the minimum (a starved machine) proves nothing: the round is run
 * again with a longer minimum. Re-entries do not wait. */
static void case_min_hold(void **state)
{
    (void)state;
    char n[128];
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    dlock_lock *bad = NULL;
    nm(n, sizeof n, "least");
    o.min_hold_ms = -1;
    assert_int_equal(dlock_lock_new(&bad, c, n, &o), DLOCK_EINVAL);
    o.min_hold_ms = 3000;
    o.max_hold_ms = 2000; /* the cap would end it first */
    assert_int_equal(dlock_lock_new(&bad, c, n, &o), DLOCK_EINVAL);
    o.max_hold_ms = 0;
    bool judged = false;
    for (int round = 0; round < 3 && !judged; round++, o.min_hold_ms *= 2) {
        char rn[160];
        snprintf(rn, sizeof rn, "%s-%d", n, round);
        dlock_lock *l = NULL, *other = NULL;
        assert_int_equal(dlock_lock_new(&l, c, rn, &o), 0);
        assert_int_equal(dlock_lock_new(&other, c2, rn, NULL), 0);
        int64_t t0 = now_ms();
        acquire_ok(l, 5000);
        acquire_ok(l, 0);
        assert_int_equal(dlock_release(l), 0); /* a re-entry: no wait */
        struct releaser r = {.l = l, .rc = -1};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, release_main, &r), 0);
        usleep(200 * 1000); /* the release has begun (or, lease, returned) */
        int rc = dlock_acquire(other, 0);
        int64_t tried = now_ms();
        if (rc == 0)
            release_ok(other);
        pthread_join(th, NULL);
        assert_int_equal(r.rc, 0);
        assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
        if (tried < t0 + o.min_hold_ms) {
            judged = true;
            if (rc != DLOCK_EBUSY)
                fail_msg("a try %lld ms after the acquisition, before the %d ms minimum: %s",
                         (long long)(tried - t0), o.min_hold_ms, dlock_strerror(rc));
        }
        /* A bound against a hang, not a measure. */
        assert_int_equal(dlock_acquire(other, 60000), 0);
        release_ok(other);
        dlock_lock_free(l);
        dlock_lock_free(other);
    }
    if (!judged)
        fail_msg("every round's try came after its minimum: the machine is too slow to tell");
    close_client(c);
    close_client(c2);
}

/* What the callback of a broken holding saw and did. */
struct broken_told {
    atomic_int calls;
    atomic_int release_rc;  /* of the release the callback made */
    atomic_int state_after; /* dlock_state after that release */
};

static void release_when_lost(dlock_lock *l, void *arg)
{
    struct broken_told *t = arg;
    /* A loss callback may release its own lock: the thread telling the
     * loss must not wait for itself to finish telling (issue 25). */
    atomic_store(&t->release_rc, dlock_release(l));
    atomic_store(&t->state_after, (int)dlock_state(l));
    atomic_fetch_add(&t->calls, 1);
}

/* §2.5 with a real loss: an operator's break (dlock_break from another
 * client) takes a held lock away; its holder is told once, by the backend's
 * own loss path (a session ending, a watch, a renewal refused), and its
 * callback may release the lock right there: the release says ELOST and
 * leaves the handle idle, and nothing waits on the telling thread. A second
 * holding of the client, not broken, is untouched. */
static void case_broken_holder_told(void **state)
{
    (void)state;
    char n[128], keep_name[128];
    nm(n, sizeof n, "broken");
    nm(keep_name, sizeof keep_name, "unbroken");
    int ttl = has(DLOCK_CAP_LEASE) ? 2000 : 0;
    dlock_client *c = open_client(), *c2 = open_client();
    struct broken_told told = {.release_rc = 1, .state_after = -1};
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = ttl;
    o.on_lost = release_when_lost;
    o.on_lost_arg = &told;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(&l, c, n, &o), 0);
    dlock_lock *keep = mk_lock(c, keep_name, DLOCK_EXCLUSIVE, 1, ttl, -1);
    acquire_ok(l, 5000);
    acquire_ok(keep, 5000);
    uint64_t tl = dlock_token(l);
    dlock_info info;
    int rc = dlock_break(c2, n, &info);
    if (rc == DLOCK_ENOTSUP) {
        release_ok(l);
        release_ok(keep);
        dlock_lock_free(l);
        dlock_lock_free(keep);
        close_client(c);
        close_client(c2);
        skip_because("%s cannot take a lock from its holder (dlock_break)", T.backend);
    }
    if (rc != 0)
        fail_msg("break \"%s\": %s: %s", n, dlock_err_name(rc), dlock_client_errmsg(c2));
    int64_t bound = death_bound_ms(ttl);
    for (int64_t t0 = now_ms(); now_ms() - t0 < bound && atomic_load(&told.calls) == 0;)
        usleep(10 * 1000);
    usleep(100 * 1000); /* a second call would come now */
    assert_int_equal(atomic_load(&told.calls), 1);
    assert_int_equal(atomic_load(&told.release_rc), DLOCK_ELOST);
    assert_int_equal(atomic_load(&told.state_after), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    /* the broken name is free for others, with a higher token */
    dlock_lock *other = ex(c2, n);
    acquire_ok(other, (int)bound);
    assert_true(dlock_token(other) > tl);
    release_ok(other);
    /* the client's other holding is still held and releases cleanly */
    assert_int_equal(dlock_state(keep), DLOCK_STATE_HELD);
    release_ok(keep);
    dlock_lock_free(other);
    dlock_lock_free(keep);
    dlock_lock_free(l);
    close_client(c);
    close_client(c2);
}

/* dlock_break while a waiter waits: the break says what it took (held, one
 * holder, its token, who), the holder is told at once (a session's end or
 * a watch; a lease's next renewal, the lease being 2 s here) through its
 * descriptor and its callback, once; the waiter gets the name with a
 * higher token, and inspect says so; the broken handle's release says
 * ELOST and leaves it idle and usable; a break of a free name is
 * DLOCK_ENOTHELD. */
static void case_break_hands_to_waiter(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "break-waiter");
    int ttl = has(DLOCK_CAP_LEASE) ? 2000 : 0, fair = fair_if_can();
    dlock_client *ch = open_client(), *cw = open_client(), *op = open_client();
    atomic_store(&lost_calls, 0);
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = ttl;
    o.fair = fair;
    o.on_lost = count_lost;
    dlock_lock *h = lock_with(ch, n, &o);
    dlock_lock *w = mk_lock(cw, n, DLOCK_EXCLUSIVE, 1, ttl, fair);
    acquire_ok(h, 5000);
    uint64_t th = dlock_token(h);
    struct acq_waiter ws;
    start_waiter(&ws, w, 20000);
    wait_queued(op, n, w, 1);
    dlock_info broken;
    memset(&broken, 0, sizeof broken);
    int64_t t0 = now_ms();
    int rc = dlock_break(op, n, &broken);
    if (rc == DLOCK_ENOTSUP) {
        dlock_cancel(w);
        join_waiter(&ws, 5000);
        release_ok(h);
        dlock_lock_free(w);
        dlock_lock_free(h);
        close_client(op);
        close_client(cw);
        close_client(ch);
        skip_because("%s cannot take a lock from its holder (dlock_break)", T.backend);
    }
    if (rc != 0)
        fail_msg("break \"%s\": %s: %s", n, dlock_err_name(rc), dlock_client_errmsg(op));
    int64_t bound = ttl ? ttl : 1000;
    int64_t told = wait_lost(h, (int)bound);
    print_message("  %s: break: held=%d holders=%d token=%" PRIu64 " (holder's %" PRIu64
                  ") holder=\"%s\"; the holder told %lld ms after the break returned (%lld "
                  "after it began)\n",
                  T.label, broken.held, broken.holders, broken.token, th, broken.holder,
                  (long long)told, (long long)(now_ms() - t0));
    if (told < 0)
        fail_msg("the broken holder was not told within %lld ms", (long long)bound);
    assert_int_equal(broken.held, 1);
    assert_int_equal(broken.holders, 1);
    assert_int_equal(broken.token, th);
    assert_true(broken.holder[0] != '\0');
    assert_int_equal(dlock_state(h), DLOCK_STATE_LOST);
    wait_lost_calls(1, 1000);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(join_waiter(&ws, 10000), 0);
    uint64_t tw = dlock_token(w);
    assert_true(tw > th);
    assert_int_equal(dlock_release(h), DLOCK_ELOST);
    assert_int_equal(dlock_state(h), DLOCK_STATE_IDLE);
    dlock_info info;
    if (inspect_if(op, n, &info) == 0) {
        assert_int_equal(info.held, 1);
        assert_int_equal(info.token, tw);
    }
    release_ok(w);
    assert_int_equal(dlock_break(op, n, &broken), DLOCK_ENOTHELD);
    /* the broken handle (and its client) works again */
    acquire_ok(h, 5000);
    assert_true(dlock_token(h) > tw);
    release_ok(h);
    assert_int_equal(atomic_load(&lost_calls), 1);
    dlock_lock_free(w);
    dlock_lock_free(h);
    close_client(op);
    close_client(cw);
    close_client(ch);
}

/* §2.2: a holder that is killed loses the lock — at once for a session
 * (kernel lock, connection), within its lease for a lease — and a waiter
 * gets it without anyone releasing. */
static void case_killed_holder(void **state)
{
    (void)state;
    char n[128];
    nm(n, sizeof n, "victim");
    const int ttl = 1500;
    pid_t kid = spawn_holder(n, DLOCK_EXCLUSIVE, 1, ttl, 1);
    dlock_client *c = open_client();
    dlock_lock *l = mk_lock(c, n, DLOCK_EXCLUSIVE, 1, ttl, -1);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    dlock_info info;
    if (inspect_if(c, n, &info) == 0) {
        assert_int_equal(info.held, 1);
        char want[64];
        snprintf(want, sizeof want, "pid %ld", (long)kid);
        if (!strstr(info.holder, want))
            fail_msg("holder \"%s\" does not name %s", info.holder, want);
    }
    struct acq_waiter w;
    start_waiter(&w, l, 20000);
    wait_state(l, DLOCK_STATE_WAITING, 5000);
    int64_t t0 = now_ms();
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    int64_t bound = death_bound_ms(ttl);
    assert_int_equal(join_waiter(&w, 20000), 0);
    int64_t took = w.done_ms - t0;
    print_message("  %s: the waiter had the lock %lld ms after its holder was killed (ttl %d)\n",
                  T.label, (long long)took, ttl);
    if (took > bound)
        fail_msg("the lock came free %lld ms after its holder died (bound %lld)", (long long)took,
                 (long long)bound);
    release_ok(l);
    dlock_lock_free(l);
    close_client(c);
}

/* §2.1: many processes with several threads each, one client per process
 * shared by its threads, increment a counter file under the lock: no two
 * critical sections overlap, tokens rise with time, no update is lost. */
#define PROCS 4
#define THREADS 2
#define ITERS 25

struct section {
    int64_t enter, leave;
    uint64_t token;
};

struct worker_arg {
    dlock_client *c;
    const char *name, *counter;
    int logfd, fair;
    atomic_int failed;
};

static void *contend(void *p)
{
    struct worker_arg *wa = p;
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.fair = wa->fair;
    dlock_lock *l = NULL;
    if (dlock_lock_new(&l, wa->c, wa->name, &o) != 0) {
        fprintf(stderr, "lock_new: %s\n", dlock_client_errmsg(wa->c));
        atomic_store(&wa->failed, 1);
        return NULL;
    }
    for (int i = 0; i < ITERS; i++) {
        int rc = dlock_acquire(l, 30000);
        if (rc != 0) {
            fprintf(stderr, "acquire: %s: %s\n", dlock_err_name(rc), dlock_lock_errmsg(l));
            atomic_store(&wa->failed, 1);
            break;
        }
        struct section s = {.enter = now_ns(), .token = dlock_token(l)};
        FILE *f = fopen(wa->counter, "r+");
        long v = 0;
        if (!f || fscanf(f, "%ld", &v) != 1) {
            atomic_store(&wa->failed, 1);
            if (f)
                fclose(f);
            break;
        }
        rewind(f);
        fprintf(f, "%ld\n", v + 1);
        fclose(f);
        s.leave = now_ns();
        if (write(wa->logfd, &s, sizeof s) != (ssize_t)sizeof s)
            atomic_store(&wa->failed, 1);
        if (dlock_release(l) != 0) {
            fprintf(stderr, "release: %s\n", dlock_lock_errmsg(l));
            atomic_store(&wa->failed, 1);
            break;
        }
    }
    dlock_lock_free(l);
    return NULL;
}

static int by_enter(const void *a, const void *b)
{
    const struct section *x = a, *y = b;
    return x->enter < y->enter ? -1 : x->enter > y->enter;
}

static void counter_run(int fair, const char *base)
{
    char name[128], counter[400], logpath[400];
    nm(name, sizeof name, base);
    snprintf(counter, sizeof counter, "%s/%s.counter", T.scratch, base);
    snprintf(logpath, sizeof logpath, "%s/%s.sections", T.scratch, base);
    FILE *f = fopen(counter, "w");
    assert_non_null(f);
    fputs("0\n", f);
    fclose(f);
    int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    assert_true(logfd >= 0);
    int64_t t0 = now_ms();
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            dlock_client *c = NULL;
            if (dlock_client_open(&c, T.url, NULL) != 0) {
                fprintf(stderr, "open: %s\n", dlock_client_errmsg(NULL));
                _exit(1);
            }
            struct worker_arg wa = {.c = c, .name = name, .counter = counter, .logfd = logfd,
                                    .fair = fair};
            pthread_t t[THREADS];
            for (int i = 0; i < THREADS; i++)
                if (pthread_create(&t[i], NULL, contend, &wa) != 0)
                    _exit(2);
            for (int i = 0; i < THREADS; i++)
                pthread_join(t[i], NULL);
            close_client(c);
            _exit(atomic_load(&wa.failed) ? 3 : 0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int st;
        assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("worker process %d failed (status 0x%x)", p, st);
    }
    close(logfd);
    const int n = PROCS * THREADS * ITERS;
    print_message("  %s: fair=%d: %d critical sections by %d processes x %d threads in %lld ms\n",
                  T.label, fair, n, PROCS, THREADS, (long long)(now_ms() - t0));
    struct section *s = calloc((size_t)n, sizeof *s);
    assert_non_null(s);
    int fd = open(logpath, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, s, (size_t)n * sizeof *s), (ssize_t)((size_t)n * sizeof *s));
    close(fd);
    qsort(s, (size_t)n, sizeof *s, by_enter);
    for (int i = 1; i < n; i++) {
        if (s[i].enter < s[i - 1].leave)
            fail_msg("critical sections %d and %d overlap", i - 1, i);
        if (s[i].token <= s[i - 1].token)
            fail_msg("token %" PRIu64 " after %" PRIu64, s[i].token, s[i - 1].token);
    }
    free(s);
    f = fopen(counter, "r");
    assert_non_null(f);
    long v = 0;
    assert_int_equal(fscanf(f, "%ld", &v), 1);
    fclose(f);
    assert_int_equal(v, n);
}

static void case_counter(void **state)
{
    (void)state;
    counter_run(-1, "counter");
}

static void case_counter_fair(void **state)
{
    (void)state;
    counter_run(1, "counter-fair");
}

static void case_counter_nonfair(void **state)
{
    (void)state;
    counter_run(0, "counter-nonfair");
}

/* Lock names: any printable ASCII but '/' and '\\', not starting with '.',
 * 1..200 bytes — each maps to the backend's keys, paths and identifiers
 * safely (no hash-tag, glob, escape or path games), and no two of them to
 * the same ones (all held at once: "a b" is not "a%20b"). Others are
 * refused. */
static void case_odd_names(void **state)
{
    (void)state;
    static const char *const names[] = {
        "}x", "a b", "x{y}", "%41", "}", "{", "a}b", "}}{{", "x{y}z}", "*", "a*b", "[ab]", "?",
        "~!@#$%^&*()_+=-`|;'\",<>", "a:b:c", "in side", "-dash", "a..b", "x.",
        "dlock:{x}:lock", "%s%n", "\x7e", "}{%*:-~", "with spaces inside", "a%20b",
        "quotes \"double\" and 'single'", "x..y.z", "[brackets]#hash?q=1&r=2",
        "@!$^()+,;=`|<>", "zookeeper", "%00%2F%5C"};
    char longest[201];
    memset(longest, 'n', 200);
    longest[200] = '\0';
    dlock_client *c1 = open_client(), *c2 = open_client();
    bool can_list = true, can_inspect = true;
    size_t count = sizeof names / sizeof names[0] + 1;
    for (size_t i = 0; i < count; i++) {
        const char *name = i < count - 1 ? names[i] : longest;
        char why[128];
        if (dlock_name_valid(name, why, sizeof why) != 0)
            fail_msg("name \"%s\" refused: %s", name, why);
        dlock_lock *a = mk_lock(c1, name, DLOCK_EXCLUSIVE, 1, 0, -1);
        dlock_lock *b = mk_lock(c2, name, DLOCK_EXCLUSIVE, 1, 0, -1);
        int rc = dlock_acquire(a, 0);
        if (rc != 0)
            fail_msg("name \"%s\": %s: %s", name, dlock_err_name(rc), dlock_lock_errmsg(a));
        uint64_t ta = dlock_token(a);
        assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
        dlock_info info;
        if (can_inspect && inspect_if(c2, name, &info) == 0) {
            /* "The last token issued": on a quorum of independent masters
             * (Redlock) a competing try granted on a minority, then given
             * back, may have issued a higher one that never held. */
            bool later_ok = has(DLOCK_CAP_FENCING_WEAK) && info.token > ta;
            if (info.held != 1 || (info.token != ta && !later_ok))
                fail_msg("inspect \"%s\": held %d token %" PRIu64 " (holder's %" PRIu64 ")",
                         name, info.held, info.token, ta);
        } else {
            can_inspect = false;
        }
        if (can_list) {
            struct seen s = {.prefix = NULL};
            rc = dlock_list(c2, NULL, see, &s);
            if (rc == DLOCK_ENOTSUP) {
                can_list = false;
            } else {
                assert_int_equal(rc, 0);
                if (seen_count(&s, name) != 1 && s.n < 48)
                    fail_msg("list: \"%s\" seen %d times", name, seen_count(&s, name));
                s = (struct seen){.prefix = name};
                assert_int_equal(dlock_list(c2, name, see, &s), 0); /* as a prefix */
                if (seen_count(&s, name) != 1 || s.foreign)
                    fail_msg("list with prefix \"%s\": seen %d times, %d others", name,
                             seen_count(&s, name), s.foreign);
            }
        }
        release_ok(a);
        acquire_ok(b, 2000);
        assert_true(dlock_token(b) > ta);
        release_ok(b);
        dlock_lock_free(a);
        dlock_lock_free(b);
    }
    /* All of them at once, on one client: no two share a key, a node, a
     * row or a path on the server. */
    dlock_lock *all[sizeof names / sizeof names[0] + 1];
    for (size_t i = 0; i < count; i++) {
        all[i] = mk_lock(c1, i < count - 1 ? names[i] : longest, DLOCK_EXCLUSIVE, 1, 0, -1);
        acquire_ok(all[i], 0);
    }
    for (size_t i = 0; i < count; i++) {
        dlock_lock *o = mk_lock(c2, dlock_lock_name(all[i]), DLOCK_EXCLUSIVE, 1, 0, -1);
        assert_int_equal(dlock_acquire(o, 0), DLOCK_EBUSY);
        dlock_lock_free(o);
    }
    for (size_t i = 0; i < count; i++) {
        release_ok(all[i]);
        dlock_lock_free(all[i]);
    }
    static const char *const bad[] = {"", ".", "..", ".hidden", "a/b", "/", "a\\b", "tab\there",
                                      "nl\n", "\xc3\xa9", "caf\xc3\xa9", "del\x7f",
                                      /* refused by dlock_name_valid, not (yet) in dlock.h */
                                      " lead", "trail "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char why[128] = "";
        assert_int_not_equal(dlock_name_valid(bad[i], why, sizeof why), 0);
        assert_true(why[0] != '\0');
        /* A peer's layout takes the peer's names: printable ASCII is
         * (etcdctl lock's key prefixes; cli_etcdctl_test.sh tries its own). */
        bool printable = bad[i][0] != '\0';
        for (const char *p = bad[i]; *p; p++)
            printable = printable && *p >= 0x20 && *p <= 0x7e;
        if (printable && peer_layout())
            continue;
        dlock_lock *l = NULL;
        assert_int_equal(dlock_lock_new(&l, c1, bad[i], NULL), DLOCK_ENAME);
        assert_null(l);
        dlock_info info;
        assert_int_equal(dlock_inspect(c1, bad[i], &info), DLOCK_ENAME);
    }
    char toolong[202];
    memset(toolong, 'n', 201);
    toolong[201] = '\0';
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(&l, c1, toolong, NULL), DLOCK_ENAME);
    assert_null(l);
    close_client(c1);
    close_client(c2);
}

/* Whether another process takes names n1 and n2 at once (try once). */
static bool other_process_takes(const char *n1, const char *n2)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dlock_client *c2 = NULL;
        dlock_lock *a = NULL, *b = NULL;
        int ok = dlock_client_open(&c2, T.url, NULL) == 0 &&
                 dlock_lock_new(&a, c2, n1, NULL) == 0 && dlock_lock_new(&b, c2, n2, NULL) == 0 &&
                 dlock_acquire(a, 0) == 0 && dlock_acquire(b, 0) == 0;
        if (!ok)
            fprintf(stderr, "after close: %s\n",
                    b ? dlock_lock_errmsg(b) : a ? dlock_lock_errmsg(a) : dlock_client_errmsg(c2));
        _exit(ok ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* dlock_client_close gives back what its handles hold (re-entered too):
 * another process takes the locks at once, not after a lease; the
 * detached handles are idle and still freed safely afterwards. */
static void case_close_releases(void **state)
{
    (void)state;
    char n1[128], n2[128];
    nm(n1, sizeof n1, "close-held");
    nm(n2, sizeof n2, "close-twice");
    dlock_client *c = open_client();
    dlock_lock *held = ex(c, n1), *twice = ex(c, n2);
    acquire_ok(held, 0);
    acquire_ok(twice, 0);
    acquire_ok(twice, 0);
    close_client(c);
    if (!other_process_takes(n1, n2))
        fail_msg("another process could not take the locks of a closed client");
    assert_int_equal(dlock_state(held), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_release(held), DLOCK_ENOTHELD);
    assert_int_equal(dlock_acquire(held, 0), DLOCK_EINVAL);
    dlock_lock_free(twice);
    dlock_lock_free(held);
}

/* dlock_release_and_close (dlock run's end): the lock released whatever its
 * re-entry count, the client closed with its other locks, the answer the
 * release's. */
static void case_release_and_close(void **state)
{
    (void)state;
    char n1[128], n2[128];
    nm(n1, sizeof n1, "relclose");
    nm(n2, sizeof n2, "relclose-other");
    dlock_client *c = open_client();
    dlock_lock *l = ex(c, n1), *o = ex(c, n2);
    acquire_ok(l, 0);
    acquire_ok(l, 0);
    acquire_ok(o, 0);
    client_closed(c);
    assert_int_equal(dlock_release_and_close(l), 0);
    if (!other_process_takes(n1, n2))
        fail_msg("another process could not take the locks after dlock_release_and_close");
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EINVAL);
    assert_int_equal(dlock_release_and_close(l), DLOCK_EINVAL);
    dlock_lock_free(o);
    dlock_lock_free(l);
}

/* ---- the server's side of the contract: who answers, and who may ---------- */

/* The URL under test with its server part (every host of the list) put in
 * place by `hosts`, `user:password@` kept; 0 when the URL names no server
 * (file://). The URL's own parsing is the library's: this only cuts the
 * text "scheme://[userinfo@]hosts[/path][?query]" at its separators. */
static bool url_with_hosts(char *out, size_t len, const char *hosts)
{
    const char *p = strstr(T.url, "://");
    if (!p)
        return false;
    p += 3;
    size_t alen = strcspn(p, "/?");
    const char *at = NULL;
    for (const char *q = p; q < p + alen; q++)
        if (*q == '@')
            at = q;
    const char *h = at ? at + 1 : p;
    if (h == p + alen)
        return false; /* no host: file:///dir */
    snprintf(out, len, "%.*s%s%s", (int)(h - T.url), T.url, hosts, p + alen);
    return true;
}

/* How many hosts the URL names (the listeners a fake server needs). */
static int url_host_count(void)
{
    const char *p = strstr(T.url, "://");
    if (!p)
        return 0;
    p += 3;
    size_t alen = strcspn(p, "/?");
    const char *h = p;
    for (const char *q = p; q < p + alen; q++)
        if (*q == '@')
            h = q + 1;
    int n = h < p + alen ? 1 : 0;
    for (; h < p + alen; h++)
        n += *h == ',';
    return n;
}

/* The URL's password ("" if none), to check that no message shows it. */
static void url_password(char *out, size_t len)
{
    out[0] = '\0';
    const char *p = strstr(T.url, "://");
    if (!p)
        return;
    p += 3;
    size_t alen = strcspn(p, "/?");
    const char *at = NULL;
    for (const char *q = p; q < p + alen; q++)
        if (*q == '@')
            at = q;
    const char *colon = at ? memchr(p, ':', (size_t)(at - p)) : NULL;
    if (colon)
        snprintf(out, len, "%.*s", (int)(at - colon - 1), colon + 1);
}

/* A fake server on spare loopback ports, one listener per host of the URL,
 * that is not the backend's server: it answers every connection with HTTP
 * (FAKE_GARBAGE), closes it at once (FAKE_CLOSE) or says nothing and keeps
 * it open (FAKE_SILENT). */
enum fake_mode { FAKE_GARBAGE, FAKE_CLOSE, FAKE_SILENT };

struct fake {
    enum fake_mode mode;
    int n, lfd[16], port[16];
    int held[256], nheld;
    atomic_int stop, accepted;
    pthread_t t;
};

static void *fake_main(void *p)
{
    struct fake *f = p;
    static const char junk[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    struct pollfd pl[16];
    while (!atomic_load(&f->stop)) {
        for (int i = 0; i < f->n; i++)
            pl[i] = (struct pollfd){.fd = f->lfd[i], .events = POLLIN};
        if (poll(pl, (nfds_t)f->n, 50) <= 0)
            continue;
        for (int i = 0; i < f->n; i++) {
            if (!(pl[i].revents & POLLIN))
                continue;
            int fd = accept4(f->lfd[i], NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0)
                continue;
            atomic_fetch_add(&f->accepted, 1);
            if (f->mode == FAKE_SILENT && f->nheld < 256) {
                f->held[f->nheld++] = fd;
                continue;
            }
            if (f->mode == FAKE_GARBAGE) {
                char buf[4096];
                struct pollfd pr = {.fd = fd, .events = POLLIN};
                if (poll(&pr, 1, 200) == 1) /* the client's first words, if it speaks first */
                    (void)!read(fd, buf, sizeof buf);
                (void)!send(fd, junk, sizeof junk - 1, MSG_NOSIGNAL);
                shutdown(fd, SHUT_WR);
                for (int k = 0; k < 20 && poll(&pr, 1, 50) == 1; k++)
                    if (read(fd, buf, sizeof buf) <= 0)
                        break;
            }
            close(fd);
        }
    }
    for (int i = 0; i < f->nheld; i++)
        close(f->held[i]);
    return NULL;
}

/* Starts the fake with as many listeners as the URL has hosts and writes
 * the URL that names them into url; false when the URL names no server. */
static bool fake_start(struct fake *f, enum fake_mode mode, char *url, size_t len)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    f->n = url_host_count();
    if (f->n <= 0)
        return false;
    assert_true(f->n <= 16);
    char hosts[16 * 24] = "";
    for (int i = 0; i < f->n; i++) {
        f->lfd[i] = listen_loopback(&f->port[i]);
        size_t u = strlen(hosts);
        snprintf(hosts + u, sizeof hosts - u, "%s127.0.0.1:%d", i ? "," : "", f->port[i]);
    }
    assert_true(url_with_hosts(url, len, hosts));
    assert_int_equal(pthread_create(&f->t, NULL, fake_main, f), 0);
    return true;
}

static void fake_stop(struct fake *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->t, NULL);
    for (int i = 0; i < f->n; i++)
        close(f->lfd[i]);
}

/* A failed open's message: one line, not empty, no password of the URL's
 * (nor `also`, a wrong one tried). */
static void check_open_message(const char *what, const char *also)
{
    const char *msg = dlock_client_errmsg(NULL);
    char pw[256];
    url_password(pw, sizeof pw);
    if (!msg || !msg[0] || strchr(msg, '\n'))
        fail_msg("%s: the message is not one line: \"%s\"", what, msg ? msg : "(null)");
    if ((pw[0] && strstr(msg, pw)) || (also && also[0] && strstr(msg, also)))
        fail_msg("%s: a password shows in the message: %s", what, msg);
}

/* Open `url` where a fake server listens: the open fails with one of the
 * codes wanted (want2 0: only want), within limit_ms, names an address of
 * the fake in its message, and the fake was spoken to. Returns the time. */
static int64_t open_fails_at_fake(struct fake *f, const char *url, const char *what, int want,
                                  int want2, int64_t limit_ms)
{
    dlock_client_opts o;
    dlock_client_opts_init(&o);
    o.connect_timeout_ms = 1000;
    o.op_timeout_ms = 1000;
    dlock_client *c = NULL;
    int64_t t0 = now_ms();
    int rc = dlock_client_open(&c, url, &o);
    int64_t took = now_ms() - t0;
    /* Stopped before any check: a failed one leaves this function, and the
     * fake's thread must not be left reading the caller's stack (TSan). */
    fake_stop(f);
    print_message("  %s: %s: %s after %lld ms: %s\n", T.label, what, dlock_err_name(rc),
                  (long long)took, rc ? dlock_client_errmsg(NULL) : "");
    if (rc == 0) {
        close_client(c);
        fail_msg("%s: the open succeeded", what);
    }
    assert_null(c);
    if (rc != want && (want2 == 0 || rc != want2))
        fail_msg("%s: %s, expected %s%s%s: %s", what, dlock_err_name(rc), dlock_err_name(want),
                 want2 ? " or " : "", want2 ? dlock_err_name(want2) : "",
                 dlock_client_errmsg(NULL));
    check_open_message(what, NULL);
    bool named = false;
    for (int i = 0; i < f->n; i++) {
        char port[16];
        snprintf(port, sizeof port, "%d", f->port[i]);
        named |= strstr(dlock_client_errmsg(NULL), port) != NULL;
    }
    if (!named)
        fail_msg("%s: the message names none of the fake's addresses: %s", what,
                 dlock_client_errmsg(NULL));
    if (took > limit_ms)
        fail_msg("%s: the open took %lld ms (connect_timeout_ms=1000; bound %lld ms)", what,
                 (long long)took, (long long)limit_ms);
    assert_true(atomic_load(&f->accepted) >= 1); /* it did talk to the fake */
    return took;
}

static double timeout_scale(void);

/* A loaded machine's slack in a bound, scaled for a slower runner: valgrind
 * (DLOCK_CONFORMANCE_TIMEOUT_SCALE) or TSan, under which ZooKeeper's client
 * took 6.4 s to give up on a fake server at three tests at a time (its
 * threads end slowly there), where the bound had 4 s of slack. */
static int64_t slack_ms(int64_t ms)
{
    double f = timeout_scale();
#if defined(__SANITIZE_THREAD__)
    f *= 3;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    f *= 3;
#endif
#endif
    return (int64_t)(ms * f);
}

/* A listener at the URL's address(es) that is not the server — it answers
 * HTTP, or closes every connection at once: the open fails at once (well
 * within the connect timeout and a loaded machine's slack), as a protocol
 * error or an unreachable server, in one line naming the address, never
 * a client that seems to work. */
static void case_not_a_server(void **state)
{
    (void)state;
    static const struct {
        enum fake_mode mode;
        const char *what;
    } fakes[] = {{FAKE_GARBAGE, "a listener answering HTTP"},
                 {FAKE_CLOSE, "a listener that closes at once"}};
    for (size_t i = 0; i < sizeof fakes / sizeof fakes[0]; i++) {
        struct fake f;
        char url[1024];
        if (!fake_start(&f, fakes[i].mode, url, sizeof url))
            skip_because("the URL names no server (%.200s)", T.shown);
        /* 1 s: zk takes its connect timeout on a reply it cannot read */
        open_fails_at_fake(&f, url, fakes[i].what, DLOCK_EPROTO, DLOCK_EUNREACHABLE,
                           1000 + slack_ms(4000));
    }
}

/* A listener at the URL's address(es) that accepts and never answers: the
 * open waits for its connect timeout (1 s here), not for ever and not a
 * fraction of it, and says the server is unreachable. Every host of the
 * URL is such a listener, and a client may try them one after the other:
 * the bound is a timeout per host and 2 s of slack for a loaded machine. */
static void case_silent_server(void **state)
{
    (void)state;
    struct fake f;
    char url[1024];
    if (!fake_start(&f, FAKE_SILENT, url, sizeof url))
        skip_because("the URL names no server (%.200s)", T.shown);
    int64_t took = open_fails_at_fake(&f, url, "a listener that never answers",
                                      DLOCK_EUNREACHABLE, 0, 1000LL * f.n + slack_ms(2000));
    if (took < 800)
        fail_msg("the open gave up after %lld ms, before its 1000 ms connect timeout",
                 (long long)took);
}

/* The URL's user with a wrong password: the open (or, for a backend that
 * logs in later, the first acquisition) is refused as DLOCK_EPERM within a
 * few seconds, in one line that shows neither password; it takes no place
 * on the server: the name stays free for the right password. */
static void case_wrong_credentials(void **state)
{
    (void)state;
    char pw[256], wrong[64], url[1024];
    url_password(pw, sizeof pw);
    if (!pw[0])
        skip_because("the URL carries no password (%.200s)", T.shown);
    snprintf(wrong, sizeof wrong, "wrong-pw-%ld", (long)getpid());
    const char *p = strstr(T.url, "://") + 3, *at = p + strcspn(p, "/?");
    while (at > p && *at != '@')
        at--;
    const char *colon = memchr(p, ':', (size_t)(at - p));
    snprintf(url, sizeof url, "%.*s%s%s", (int)(colon + 1 - T.url), T.url, wrong, at);
    char n[128];
    nm(n, sizeof n, "wrong-pw");
    dlock_client *c = NULL;
    int64_t t0 = now_ms();
    int rc = dlock_client_open(&c, url, NULL);
    if (rc == 0) { /* a backend that logs in on first use */
        for (size_t i = 0; i < sizeof open_clients / sizeof open_clients[0]; i++)
            if (!open_clients[i]) {
                open_clients[i] = c;
                break;
            }
        dlock_lock *l = ex(c, n);
        rc = dlock_acquire(l, 2000);
        const char *msg = dlock_lock_errmsg(l);
        print_message("  %s: the wrong password: open ok, acquire %s after %lld ms: %s\n",
                      T.label, dlock_err_name(rc), (long long)(now_ms() - t0), msg);
        if (rc != DLOCK_EPERM)
            fail_msg("the wrong password: acquire says %s, expected EPERM: %s",
                     dlock_err_name(rc), msg);
        if (strchr(msg, '\n') || strstr(msg, wrong) || strstr(msg, pw))
            fail_msg("the wrong password: a bad message: %s", msg);
        dlock_lock_free(l);
        close_client(c);
    } else {
        print_message("  %s: the wrong password: open %s after %lld ms: %s\n", T.label,
                      dlock_err_name(rc), (long long)(now_ms() - t0), dlock_client_errmsg(NULL));
        if (rc != DLOCK_EPERM)
            fail_msg("the wrong password: open says %s, expected EPERM: %s", dlock_err_name(rc),
                     dlock_client_errmsg(NULL));
        check_open_message("the wrong password", wrong);
    }
    int64_t took = now_ms() - t0;
    if (took > 5000)
        fail_msg("the refusal took %lld ms", (long long)took);
    /* nothing was taken in its name */
    dlock_client *ok = open_client();
    dlock_lock *l = ex(ok, n);
    acquire_ok(l, 0);
    release_ok(l);
    dlock_lock_free(l);
    close_client(ok);
}

/* A release that has returned has let go on the server: another client's
 * try-once right after it gets the lock, every time (never EBUSY while a
 * deletion is still on its way), inspect says free, and after a
 * resignation dlock_leader names no leader (it named the campaigner
 * before). */
static void case_release_frees_at_once(void **state)
{
    (void)state;
    enum { ROUNDS = 40 };
    char n[128], buf[300];
    nm(n, sizeof n, "freed");
    dlock_client *c = open_client(), *c2 = open_client(), *c3 = open_client();
    dlock_lock *a = ex(c, n), *b = ex(c2, n);
    uint64_t last = 0;
    int busy = 0, inspected_held = 0, stale_leader = 0, first = -1;
    bool can_inspect = true, can_elect = true;
    for (int i = 0; i < ROUNDS; i++) {
        acquire_ok(a, 5000);
        assert_true(dlock_token(a) > last);
        last = dlock_token(a);
        release_ok(a);
        dlock_info info;
        if (can_inspect && inspect_if(c3, n, &info) == 0) {
            if (info.held)
                inspected_held++;
        } else {
            can_inspect = false;
        }
        int rc = dlock_acquire(b, 0);
        if (rc == DLOCK_EBUSY) {
            busy++;
            if (first < 0)
                first = i;
            acquire_ok(b, 5000);
        } else if (rc != 0) {
            fail_msg("round %d: %s: %s", i, dlock_err_name(rc), dlock_lock_errmsg(b));
        }
        assert_true(dlock_token(b) > last);
        last = dlock_token(b);
        release_ok(b);
        if (!can_elect)
            continue;
        rc = dlock_campaign(a, "leader-a", 5000);
        if (rc == DLOCK_ENOTSUP) {
            can_elect = false;
            continue;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(dlock_leader(c3, n, buf, sizeof buf), 0);
        assert_string_equal(buf, "leader-a");
        last = dlock_token(a);
        assert_int_equal(dlock_resign(a), 0);
        rc = dlock_leader(c3, n, buf, sizeof buf);
        if (rc == 0)
            stale_leader++;
        else
            assert_int_equal(rc, DLOCK_ENOENT);
    }
    print_message("  %s: right after a release: %d of %d tries EBUSY (first in round %d), %d "
                  "inspections held%s; right after a resignation %d leaders%s\n",
                  T.label, busy, ROUNDS, first, inspected_held, can_inspect ? "" : " (no inspect)",
                  stale_leader, can_elect ? "" : " (no election)");
    if (busy || inspected_held || stale_leader)
        fail_msg("a release or resignation returned before the server had let go: %d of %d "
                 "tries by another client got EBUSY, %d inspections said held, %d "
                 "dlock_leader calls named the old leader",
                 busy, ROUNDS, inspected_held, stale_leader);
    dlock_lock_free(a);
    dlock_lock_free(b);
    close_client(c);
    close_client(c2);
    close_client(c3);
}

/* Waiters that gave up by dlock_cancel — each in a client of its own, left
 * open, so that nothing is cleaned up by a session's end — leave nothing on
 * the server: inspect counts only the waiters still there, and once the
 * holder lets go a fresh client takes the name at once (no stale place in
 * a queue before it), with a token above the holder's. */
static void case_cancel_leaves_nothing(void **state)
{
    (void)state;
    enum { N = 3 };
    char n[128];
    nm(n, sizeof n, "cancel-trace");
    int fair = fair_if_can();
    dlock_client *c = open_client(), *wc[N];
    dlock_lock *h = mk_lock(c, n, DLOCK_EXCLUSIVE, 1, 0, fair), *w[N];
    acquire_ok(h, 0);
    uint64_t th = dlock_token(h);
    struct acq_waiter ws[N];
    for (int i = 0; i < N; i++) {
        wc[i] = open_client();
        w[i] = mk_lock(wc[i], n, DLOCK_EXCLUSIVE, 1, 0, fair);
        start_waiter(&ws[i], w[i], i == 1 ? 30000 : -1);
        wait_queued(c, n, w[i], i + 1);
    }
    static const int order[N] = {1, 0, 2}; /* the middle one first */
    for (int k = 0; k < N; k++) {
        int i = order[k];
        dlock_cancel(w[i]);
        assert_int_equal(join_waiter(&ws[i], 3000), DLOCK_ECANCELED);
        assert_int_equal(dlock_state(w[i]), DLOCK_STATE_IDLE);
        assert_int_equal(dlock_token(w[i]), 0);
        dlock_info info;
        if (inspect_if(c, n, &info) == 0) {
            assert_int_equal(info.held, 1);
            assert_int_equal(info.token, th);
            if (info.waiters >= 0) {
                for (int t = 0; t < 3000 && info.waiters != N - 1 - k; t++) {
                    usleep(1000);
                    assert_int_equal(inspect_if(c, n, &info), 0);
                }
                if (info.waiters != N - 1 - k)
                    fail_msg("%d waiters cancelled, %d still counted (expected %d)", k + 1,
                             info.waiters, N - 1 - k);
            }
        }
        assert_int_equal(dlock_state(h), DLOCK_STATE_HELD);
    }
    release_ok(h);
    dlock_client *fresh = open_client();
    dlock_lock *f = mk_lock(fresh, n, DLOCK_EXCLUSIVE, 1, 0, fair);
    acquire_ok(f, 0);
    assert_true(dlock_token(f) > th);
    for (int i = 0; i < N; i++)
        assert_int_equal(dlock_state(w[i]), DLOCK_STATE_IDLE);
    release_ok(f);
    dlock_info info;
    if (inspect_if(fresh, n, &info) == 0) {
        assert_int_equal(info.held, 0);
        if (info.waiters >= 0)
            assert_int_equal(info.waiters, 0);
    }
    /* the cancelled handles work again */
    for (int i = 0; i < N; i++) {
        acquire_ok(w[i], 5000);
        release_ok(w[i]);
        dlock_lock_free(w[i]);
        close_client(wc[i]);
    }
    dlock_lock_free(f);
    dlock_lock_free(h);
    close_client(fresh);
    close_client(c);
}

/* The runner's own check (--selftest): a case that never returns. */
static void case_hang(void **state)
{
    (void)state;
    for (;;)
        pause();
}

/* ---- the runner ---------------------------------------------------------- */

/* Until the backend answers: 32 names (on a cluster, spread over every
 * master) taken and given back in one round, for at most 20 s. A cluster
 * can still say CLUSTERDOWN on some masters just after servers.sh saw one
 * of them report cluster_state:ok. In a child: the runner opens no client
 * (no library threads before its forks). */
static void warm_up(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char last[512] = "";
        int64_t t0 = now_ms();
        for (int round = 0; now_ms() - t0 < 20000; round++) {
            dlock_client *c = NULL;
            int bad = 0;
            if (dlock_client_open(&c, T.url, NULL) != 0) {
                snprintf(last, sizeof last, "open: %s", dlock_client_errmsg(NULL));
                bad = 1;
            }
            for (int i = 0; c && i < 32 && !bad; i++) {
                char n[128];
                snprintf(n, sizeof n, "%swarm-%d", T.prefix, i);
                dlock_lock *l = NULL;
                if (dlock_lock_new(&l, c, n, NULL) != 0 || dlock_acquire(l, 0) != 0 ||
                    dlock_release(l) != 0) {
                    snprintf(last, sizeof last, "%s",
                             l ? dlock_lock_errmsg(l) : dlock_client_errmsg(c));
                    bad = 1;
                }
                dlock_lock_free(l);
            }
            if (c)
                close_client(c);
            if (!bad) {
                if (round > 0)
                    printf("  %s: ready after %lld ms (was: %s)\n", T.label,
                           (long long)(now_ms() - t0), last);
                _exit(0);
            }
            usleep(100 * 1000);
        }
        printf("  %s: not ready after 20 s: %s\n", T.label, last);
        _exit(1);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

/* Claims (dlock once): one runner, the outcome kept and given to every
 * later caller, attempts counted across abandons and dead runners,
 * fingerprints compared, a forgotten record not overwritten. A backend
 * without claims refuses with its reason (then the case is skipped). */
static void begin_ok(dlock_lock *l, const dlock_claim_opts *o, dlock_claim **cl,
                     dlock_claim_state_t want, unsigned attempt)
{
    int rc = dlock_claim_begin(l, o, 5000, cl);
    if (rc != 0)
        fail_msg("claim begin \"%s\": %s: %s", dlock_lock_name(l), dlock_err_name(rc),
                 dlock_lock_errmsg(l));
    assert_int_equal(dlock_claim_state(*cl), want);
    assert_int_equal(dlock_claim_attempt(*cl), attempt);
    assert_int_equal(dlock_state(l), want == DLOCK_CLAIM_RUN ? DLOCK_STATE_HELD
                                                             : DLOCK_STATE_IDLE);
}

static void case_claims(void **state)
{
    (void)state;
    char n[128], n2[128];
    nm(n, sizeof n, "claim");
    nm(n2, sizeof n2, "claim-fp");
    dlock_client *c = open_client(), *c2 = open_client();
    dlock_lock *a = ex(c, n), *b = ex(c2, n);
    dlock_claim *cl = NULL, *cl2 = NULL;
    dlock_claim_opts o;
    dlock_claim_opts_init(&o);
    o.retain_ms = 60000;
    if (!(dlock_client_caps(c) & DLOCK_CAP_CLAIMS)) {
        assert_int_equal(dlock_claim_begin(a, &o, 0, &cl), DLOCK_ENOTSUP);
        assert_null(cl);
        assert_non_null(strstr(dlock_lock_errmsg(a), "cannot keep a claim"));
        assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
        assert_int_equal(dlock_claim_inspect(c, n, &cl), DLOCK_ENOTSUP);
        close_client(c);
        close_client(c2);
        dlock_lock_free(a);
        dlock_lock_free(b);
        skip_because("%s keeps no claims: refused with its reason", T.backend);
    }
    /* The first caller runs it; a second is told it is in progress. */
    begin_ok(a, &o, &cl, DLOCK_CLAIM_RUN, 1);
    assert_int_equal(dlock_claim_begin(b, &o, 0, &cl2), DLOCK_EBUSY);
    assert_null(cl2);
    assert_int_equal(dlock_claim_inspect(c2, n, &cl2), 0);
    assert_int_equal(dlock_claim_state(cl2), DLOCK_CLAIM_RUNNING);
    assert_int_equal(dlock_claim_attempt(cl2), 1);
    dlock_claim_free(cl2);
    /* Bounds: a result too long, a second finish. */
    static char big[DLOCK_CLAIM_RESULT_MAX + 1];
    assert_int_equal(dlock_claim_finish(cl, 0, big, sizeof big), DLOCK_EINVAL);
    assert_int_equal(dlock_claim_finish(cl, 3, "out\0put", 7), 0);
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_claim_finish(cl, 0, NULL, 0), DLOCK_EINVAL);
    dlock_claim_free(cl);
    /* Every later caller gets the outcome, binary result and all. */
    begin_ok(b, &o, &cl2, DLOCK_CLAIM_DONE, 1);
    size_t len;
    const char *res = dlock_claim_result(cl2, &len);
    assert_int_equal(len, 7);
    assert_memory_equal(res, "out\0put", 7);
    assert_int_equal(dlock_claim_status(cl2), 3);
    assert_true(dlock_claim_finished_ms(cl2) >= dlock_claim_started_ms(cl2));
    assert_true(dlock_claim_started_ms(cl2) > 0);
    assert_non_null(strstr(dlock_claim_by(cl2), "pid "));
    dlock_claim_free(cl2);
    /* A failure runs again only when asked; an abandon and a dead runner
     * (freed while running) still count as attempts. */
    o.retry_failed = 1;
    begin_ok(b, &o, &cl2, DLOCK_CLAIM_RUN, 2);
    assert_int_equal(dlock_claim_abandon(cl2), 0);
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    dlock_claim_free(cl2);
    begin_ok(a, &o, &cl, DLOCK_CLAIM_RUN, 3);
    dlock_claim_free(cl); /* as if it died: the record still says running */
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    begin_ok(b, &o, &cl2, DLOCK_CLAIM_RUN, 4);
    assert_int_equal(dlock_claim_finish(cl2, 0, "ok", 2), 0);
    dlock_claim_free(cl2);
    begin_ok(a, &o, &cl, DLOCK_CLAIM_DONE, 4); /* a success is never rerun */
    dlock_claim_free(cl);
    /* An operator forgets it while it runs: the runner records nothing. */
    assert_int_equal(dlock_claim_forget(c2, n), 0);
    assert_int_equal(dlock_claim_inspect(c2, n, &cl2), DLOCK_ENOENT);
    assert_int_equal(dlock_claim_forget(c2, n), DLOCK_ENOENT);
    begin_ok(a, &o, &cl, DLOCK_CLAIM_RUN, 1);
    assert_int_equal(dlock_claim_forget(c2, n), 0);
    assert_int_equal(dlock_claim_finish(cl, 0, NULL, 0), DLOCK_ELOST);
    assert_non_null(strstr(dlock_lock_errmsg(a), "no longer attempt 1's"));
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_claim_inspect(c2, n, &cl2), DLOCK_ENOENT);
    dlock_claim_free(cl);
    /* Another fingerprint is refused, naming both; the lock is left free. */
    dlock_lock *f = ex(c, n2), *g = ex(c2, n2);
    o.fingerprint = "req-1";
    begin_ok(f, &o, &cl, DLOCK_CLAIM_RUN, 1);
    assert_int_equal(dlock_claim_finish(cl, 0, NULL, 0), 0);
    dlock_claim_free(cl);
    o.fingerprint = "req-2";
    assert_int_equal(dlock_claim_begin(g, &o, 5000, &cl2), DLOCK_ECONFLICT);
    assert_null(cl2);
    assert_non_null(strstr(dlock_lock_errmsg(g), "\"req-1\""));
    assert_non_null(strstr(dlock_lock_errmsg(g), "\"req-2\""));
    assert_int_equal(dlock_state(g), DLOCK_STATE_IDLE);
    o.fingerprint = "bad\nline";
    assert_int_equal(dlock_claim_begin(g, &o, 5000, &cl2), DLOCK_EINVAL);
    assert_int_equal(dlock_claim_forget(c, n2), 0);
    dlock_lock_free(f);
    dlock_lock_free(g);
    dlock_lock_free(a);
    dlock_lock_free(b);
    close_client(c);
    close_client(c2);
}

/* A round of the cancel cases: a holder, a waiter and a fresh client on
 * one name, each a client of its own (sessions new to the server). */
struct trio {
    char n[128];
    dlock_client *c, *wc, *fresh;
    dlock_lock *h, *w, *f;
};

static void trio_open(struct trio *t, const char *what, int r, int fair)
{
    char base[64];
    snprintf(base, sizeof base, "%s-%d", what, r);
    nm(t->n, sizeof t->n, base);
    t->c = open_client();
    t->wc = open_client();
    t->fresh = open_client();
    t->h = mk_lock(t->c, t->n, DLOCK_EXCLUSIVE, 1, 0, fair);
    t->w = mk_lock(t->wc, t->n, DLOCK_EXCLUSIVE, 1, 0, fair);
    t->f = mk_lock(t->fresh, t->n, DLOCK_EXCLUSIVE, 1, 0, fair);
}

/* The fresh client's try, right after what `when` says: it must take the
 * name, with a token above the holder's th. */
static void trio_fresh_takes(struct trio *t, uint64_t th, const char *when)
{
    int rc = dlock_acquire(t->f, 0);
    if (rc != 0)
        fail_msg("%s: a fresh client's try right after: %s: %s", when, dlock_err_name(rc),
                 dlock_lock_errmsg(t->f));
    assert_true(dlock_token(t->f) > th);
    release_ok(t->f);
}

static void trio_close(struct trio *t)
{
    dlock_lock_free(t->f);
    dlock_lock_free(t->w);
    dlock_lock_free(t->h);
    close_client(t->fresh);
    close_client(t->wc);
    close_client(t->c);
}

/* A waiter cancelled at any moment of its wait — while it connects, tries
 * first, queues, waits — leaves nothing behind either, even when the holder
 * lets go right after the cancel returned: rounds of a holder, a waiter in
 * a client of its own (left open: its session's end cleans nothing up)
 * cancelled 0 to 4.5 ms after it starts waiting, the holder's release at
 * once, and a fresh client's try, which must take the name. (PostgreSQL's
 * lease mode failed this: a cancelled waiter's first take, still on the
 * wire, ran on the server just after the release, and the name stayed
 * taken by nobody for the whole lease.) */
static void case_cancel_at_any_moment(void **state)
{
    (void)state;
    enum { ROUNDS = 10 };
    int fair = fair_if_can();
    for (int r = 0; r < ROUNDS; r++) {
        struct trio t;
        trio_open(&t, "cancel-moment", r, fair);
        dlock_lock *h = t.h, *w = t.w;
        acquire_ok(h, 0);
        uint64_t th = dlock_token(h);
        struct acq_waiter ws;
        start_waiter(&ws, w, r % 2 ? 120000 : -1);
        for (int i = 0; i < 50000 && dlock_state(w) != DLOCK_STATE_WAITING; i++)
            usleep(100);
        usleep((useconds_t)(r * 500));
        dlock_cancel(w);
        int wrc = join_waiter(&ws, 5000);
        if (wrc != DLOCK_ECANCELED)
            fail_msg("round %d: a waiter cancelled %d us into its wait: %s: %s", r, r * 500,
                     dlock_err_name(wrc), dlock_lock_errmsg(w));
        release_ok(h);
        char when[128];
        snprintf(when, sizeof when,
                 "round %d: a waiter cancelled %d us into its wait, the holder's release", r,
                 r * 500);
        trio_fresh_takes(&t, th, when);
        trio_close(&t);
    }
}

/* A cancel that crosses the grant: the holder lets go and its waiter (a
 * client of its own, queued on the server) is cancelled from a third
 * thread 0 to 1.1 ms after the release began, while the grant is on its
 * way. The acquisition either returns the lock (the grant came first: it
 * is held, with a newer token) or says canceled; then nothing of it may be
 * left: a fresh client's try, right after, takes the name. (A waiter
 * granted just before its cancel that closed its session and returned
 * leaves the name taken until the server sees the session end.) */
struct later_cancel {
    dlock_lock *l;
    int after_us;
    pthread_t t;
};

static void *later_cancel_main(void *p)
{
    struct later_cancel *lc = p;
    usleep((useconds_t)lc->after_us);
    dlock_cancel(lc->l);
    return NULL;
}

static void case_cancel_racing_grant(void **state)
{
    (void)state;
    enum { ROUNDS = 12 };
    int fair = fair_if_can(), granted = 0;
    for (int r = 0; r < ROUNDS; r++) {
        struct trio t;
        trio_open(&t, "cancel-grant", r, fair);
        dlock_lock *h = t.h, *w = t.w, *f = t.f;
        /* (the fresh client connected already: its try must come at once) */
        acquire_ok(f, 0);
        release_ok(f);
        acquire_ok(h, 0);
        uint64_t th = dlock_token(h);
        struct acq_waiter ws;
        start_waiter(&ws, w, r % 2 ? 120000 : -1);
        /* (where waiters cannot be counted, 20 ms to reach the queue: a
         * second a round would make the case long, and a waiter not queued
         * yet must leave nothing behind either) */
        wait_queued_or(t.c, t.n, w, 1, 20);
        struct later_cancel lc = {.l = w, .after_us = r * 100};
        assert_int_equal(pthread_create(&lc.t, NULL, later_cancel_main, &lc), 0);
        release_ok(h);
        pthread_join(lc.t, NULL);
        int wrc = join_waiter(&ws, 5000);
        if (wrc == 0) { /* granted before the cancel */
            assert_true(dlock_token(w) > th);
            release_ok(w);
            granted++;
        } else if (wrc == DLOCK_ECANCELED) {
            char when[128];
            snprintf(when, sizeof when,
                     "round %d: a waiter cancelled %d us into the holder's release", r, r * 100);
            trio_fresh_takes(&t, th, when);
        } else {
            fail_msg("round %d: a waiter cancelled %d us into the holder's release: %s: %s", r,
                     r * 100, dlock_err_name(wrc), dlock_lock_errmsg(w));
        }
        trio_close(&t);
    }
    print_message("cancel_racing_grant: %d of %d waiters granted before their cancel\n", granted,
                  (int)ROUNDS);
}

static const struct kase {
    const char *name;
    void (*fn)(void **);
    unsigned needs;  /* DLOCK_CAP_* all required */
    int timeout_s;
} CASES[] = {
    {"acquire_release_token", case_acquire_release_token, 0, 60},
    {"release_not_held", case_release_not_held, 0, 60},
    {"try_timed_forever", case_try_timed_forever, 0, 60},
    {"reentry", case_reentry, 0, 60},
    {"cancel", case_cancel, 0, 60},
    {"wake_on_release", case_wake_on_release, 0, 60},
    {"fifo", case_fifo, DLOCK_CAP_FAIR, 90},
    {"shared", case_shared, DLOCK_CAP_SHARED, 60},
    {"semaphore", case_semaphore, DLOCK_CAP_SEMAPHORE, 60},
    {"kinds", case_kinds, 0, 90},
    {"multi_lock", case_multi_lock, 0, 60},
    {"multi_lock_no_deadlock", case_multi_lock_no_deadlock, 0, 120},
    {"election", case_election, 0, 60},
    {"inspect", case_inspect, 0, 60},
    {"list", case_list, 0, 60},
    {"loss_notification", case_loss_notification, 0, 60},
    {"max_hold", case_max_hold, 0, 90},
    {"min_hold", case_min_hold, 0, 120},
    {"broken_holder_told", case_broken_holder_told, 0, 60},
    {"break_hands_to_waiter", case_break_hands_to_waiter, 0, 60},
    {"killed_holder", case_killed_holder, 0, 60},
    {"counter", case_counter, DLOCK_CAP_FENCING, 180},
    {"counter_fair", case_counter_fair, DLOCK_CAP_FENCING | DLOCK_CAP_FAIR, 180},
    {"counter_nonfair", case_counter_nonfair, DLOCK_CAP_FENCING | DLOCK_CAP_FAIR, 180},
    {"odd_names", case_odd_names, 0, 120},
    {"close_releases", case_close_releases, 0, 60},
    {"release_and_close", case_release_and_close, 0, 60},
    {"not_a_server", case_not_a_server, 0, 60},
    {"silent_server", case_silent_server, 0, 60},
    {"wrong_credentials", case_wrong_credentials, 0, 60},
    {"release_frees_at_once", case_release_frees_at_once, 0, 90},
    {"cancel_leaves_nothing", case_cancel_leaves_nothing, 0, 60},
    {"cancel_at_any_moment", case_cancel_at_any_moment, 0, 60},
    {"cancel_racing_grant", case_cancel_racing_grant, 0, 60},
    {"claims", case_claims, 0, 60},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static const char *const CAP_NAMES[] = {"FENCING", "FAIR", "SHARED", "SEMAPHORE", "SESSION",
                                        "LEASE", "NATIVE_BLOCKING", "ELECTION", "FENCING_WEAK",
                                        "CLAIMS"};

static void caps_str(unsigned caps, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof CAP_NAMES / sizeof CAP_NAMES[0]; i++)
        if (caps & (1u << i)) {
            size_t u = strlen(buf);
            snprintf(buf + u, len - u, "%s%s", u ? "," : "", CAP_NAMES[i]);
        }
}

/* The backend a URL's scheme belongs to, from the registry. */
static const dlock_backend_info *backend_of(const char *url)
{
    size_t sl = strcspn(url, ":");
    for (size_t i = 0; i < dlock_backend_count(); i++) {
        const dlock_backend_info *b = dlock_backend_at(i);
        for (const char *s = b->schemes; *s;) {
            size_t w = strcspn(s, " ");
            if (w == sl && strncmp(s, url, sl) == 0)
                return b;
            s += w + (s[w] == ' ');
        }
    }
    return NULL;
}

struct tally {
    int pass, fail, skip;
    char failed[4096];
};

static void note_failed(struct tally *t, const char *name)
{
    size_t u = strlen(t->failed);
    snprintf(t->failed + u, sizeof t->failed - u, "%s%s@%s", u ? " " : "", name, T.label);
}

static double timeout_scale(void)
{
    const char *s = getenv("DLOCK_CONFORMANCE_TIMEOUT_SCALE");
    double f = s ? atof(s) : 1.0;
    return f > 0 ? f : 1.0;
}

/* Under a slower runner (valgrind: DLOCK_CONFORMANCE_TIMEOUT_SCALE > 1) a
 * connection's set-up takes longer too: a SCRAM login under valgrind on a
 * loaded machine passes the default 2 s connect timeout. The URL's own
 * connect_timeout_ms, if any, and the cases' explicit options still rule. */
static void scale_connect_timeout(void)
{
    double f = timeout_scale();
    if (f <= 1.0 || strstr(T.url, "connect_timeout_ms="))
        return;
    size_t u = strlen(T.url);
    snprintf(T.url + u, sizeof T.url - u, "%sconnect_timeout_ms=%d", strchr(T.url, '?') ? "&" : "?",
             (int)(2000 * (f < 15 ? f : 15)));
}

/* One case in a child of its own, killed (with its process group) if it
 * overruns. */
static void run_forked(const struct kase *k, struct tally *t)
{
    int sp[2];
    if (pipe(sp) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(stdout);
    fflush(stderr);
    int64_t t0 = now_ms();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        setpgid(0, 0);
        close(sp[0]);
        skip_fd = sp[1];
        const struct CMUnitTest one[] = {{.name = k->name, .test_func = k->fn}};
        cmocka_set_message_output(CM_OUTPUT_TAP); /* terse; CMOCKA_MESSAGE_OUTPUT wins */
        char group[200];
        snprintf(group, sizeof group, "%s@%s", k->name, T.label);
        int failed = _cmocka_run_group_tests(group, one, 1, NULL, NULL);
        fflush(stdout);
        fflush(stderr);
        _exit(failed ? 1 : 0);
    }
    setpgid(pid, pid); /* either side's call wins the race */
    close(sp[1]);
    int64_t limit_ms = (int64_t)(k->timeout_s * 1000 * timeout_scale());
    int status = 0;
    bool timed_out = false;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            perror("waitpid");
            exit(2);
        }
        if (now_ms() - t0 > limit_ms) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            timed_out = true;
            break;
        }
        usleep(5000);
    }
    kill(-pid, SIGKILL); /* whatever the case left running in its group */
    int64_t took = now_ms() - t0;
    char why[512] = "";
    ssize_t n = read(sp[0], why, sizeof why - 1);
    close(sp[0]);
    why[n > 0 ? n : 0] = '\0';
    if (timed_out) {
        printf("[ FAIL ] %-24s %s (%s): hung, killed after %lld ms\n", k->name, T.label, T.shown,
               (long long)took);
        t->fail++;
        note_failed(t, k->name);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && why[0]) {
        printf("[ SKIP ] %-24s %s: %s\n", k->name, T.label, why);
        t->skip++;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        printf("[  OK  ] %-24s %s (%lld ms)\n", k->name, T.label, (long long)took);
        t->pass++;
    } else {
        if (WIFSIGNALED(status))
            printf("[ FAIL ] %-24s %s (%s): killed by signal %d\n", k->name, T.label, T.shown,
                   WTERMSIG(status));
        else
            printf("[ FAIL ] %-24s %s (%s): failed\n", k->name, T.label, T.shown);
        t->fail++;
        note_failed(t, k->name);
    }
    fflush(stdout);
}

static bool wanted(const char *name, char **only, int nonly)
{
    if (nonly == 0)
        return true;
    for (int i = 0; i < nonly; i++)
        if (strcmp(only[i], name) == 0)
            return true;
    return false;
}

/* Runs every applicable case against the current target. */
static void run_target(bool nofork, char **only, int nonly, struct tally *t)
{
    show_url();
    const dlock_backend_info *b = backend_of(T.url);
    if (!b) {
        printf("[ FAIL ] %s: no backend for %s\n", T.label, T.shown);
        t->fail++;
        note_failed(t, "(url)");
        return;
    }
    T.backend = b->name;
    T.caps = b->caps;
    T.lease_slack_ms = 0;
    /* What this URL's client offers: a mode may offer less than its
     * backend (postgres mode=advisory has no lease). */
    if (b->available) {
        dlock_client *c = NULL;
        if (dlock_client_open(&c, T.url, NULL) == 0) {
            T.caps = dlock_client_caps(c);
            dh_topo topo; /* how long its servers may keep a lease past its ttl */
            if (dh_topology(c, &topo) == 0)
                T.lease_slack_ms = topo.lease_slack_ms;
        }
        dlock_client_close(c);
    }
    char caps[256];
    caps_str(T.caps, caps, sizeof caps);
    snprintf(T.prefix, sizeof T.prefix, "c%ld-", (long)getpid());
    printf("=== %s: %s (backend %s; %s)\n", T.label, T.shown, b->name, caps);
    if (!b->available) {
        printf("[ SKIP ] every case              %s: %s\n", T.label, b->missing);
        t->skip++;
        return;
    }
    warm_up();
    int64_t t0 = now_ms();
    struct CMUnitTest inproc[NCASES];
    size_t ninproc = 0;
    for (size_t i = 0; i < NCASES; i++) {
        const struct kase *k = &CASES[i];
        if (!wanted(k->name, only, nonly))
            continue;
        if ((T.caps & k->needs) != k->needs) {
            char missing[256];
            caps_str(k->needs & ~T.caps, missing, sizeof missing);
            printf("[ SKIP ] %-24s %s: backend %s lacks DLOCK_CAP_{%s}\n", k->name, T.label,
                   b->name, missing);
            t->skip++;
            continue;
        }
        if (nofork)
            inproc[ninproc++] = (struct CMUnitTest){
                .name = k->name, .test_func = k->fn, .teardown_func = close_leftover_clients};
        else
            run_forked(k, t);
    }
    if (nofork && ninproc) {
        int failed = _cmocka_run_group_tests(T.label, inproc, ninproc, NULL, NULL);
        t->fail += failed;
        t->pass += (int)ninproc - failed;
        if (failed)
            note_failed(t, "(in-process)");
    }
    printf("=== %s: %lld ms\n", T.label, (long long)(now_ms() - t0));
}

static int selftest(void)
{
    /* A hanging case is killed and reported; the next one still runs. */
    struct kase hang = {"hang", case_hang, 0, 1};
    struct kase ok = {"acquire_release_token", case_acquire_release_token, 0, 60};
    struct tally t = {0};
    run_forked(&hang, &t);
    run_forked(&ok, &t);
    bool good = t.fail == 1 && t.pass == 1 && strstr(t.failed, "hang@file");
    printf("selftest: %s\n", good ? "a hanging case was killed and the next one ran" : "FAILED");
    return good ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[1], "--holder") == 0)
        return holder_main(argv + 2);
    if (!realpath("/proc/self/exe", self_exe))
        snprintf(self_exe, sizeof self_exe, "%s", argv[0]);
    bool nofork = getenv("DLOCK_CONFORMANCE_NOFORK") != NULL, self = false;
    char *only[64], *labels[64];
    int nonly = 0, nlabels = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-fork") == 0)
            nofork = true;
        else if (strcmp(argv[i], "--selftest") == 0)
            self = true;
        else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc && nonly < 64)
            only[nonly++] = argv[++i];
        else if (argv[i][0] != '-' && nlabels < 64)
            labels[nlabels++] = argv[i];
        else {
            fprintf(stderr, "usage: %s [--no-fork] [--selftest] [--case NAME]... [LABEL...]\n",
                    argv[0]);
            return 64;
        }
    }
    for (int i = 0; i < nonly; i++) {
        bool known = false;
        for (size_t k = 0; k < NCASES; k++)
            known |= strcmp(CASES[k].name, only[i]) == 0;
        if (!known) {
            fprintf(stderr, "test_conformance: no case %s\n", only[i]);
            return 64;
        }
    }
    for (int i = 0; i < nlabels; i++) {
        bool known = false;
        for (size_t k = 0; k < NTARGETS; k++)
            known |= strcmp(TARGETS[k].label, labels[i]) == 0;
        if (!known) {
            fprintf(stderr, "test_conformance: no target %s\n", labels[i]);
            return 64;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);

    char dir[] = "/tmp/dlock-conformance-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    snprintf(T.scratch, sizeof T.scratch, "%s", dir);

    struct tally t = {0};
    int ran = 0, status;
    if (self) {
        T.label = "file";
        snprintf(T.url, sizeof T.url, "file://%s/locks", dir);
        T.backend = "file";
        show_url();
        snprintf(T.prefix, sizeof T.prefix, "c%ld-", (long)getpid());
        status = selftest();
        goto out;
    }
    for (size_t k = 0; k < NTARGETS; k++) {
        const struct target_def *d = &TARGETS[k];
        bool named = false;
        for (int i = 0; i < nlabels; i++)
            named |= strcmp(labels[i], d->label) == 0;
        if (nlabels && !named)
            continue;
        const char *url = d->env ? getenv(d->env) : NULL;
        if (d->env && (!url || !*url)) {
            if (named)
                printf("[ SKIP ] %s: %s is not set (run under tests/servers.sh)\n", d->label,
                       d->env);
            continue;
        }
        T.label = d->label;
        if (url)
            snprintf(T.url, sizeof T.url, "%s", url);
        else
            snprintf(T.url, sizeof T.url, "file://%s/locks", dir);
        scale_connect_timeout();
        run_target(nofork, only, nonly, &t);
        ran++;
    }
    printf("=== conformance: %d passed, %d failed, %d skipped%s%s\n", t.pass, t.fail, t.skip,
           t.fail ? "; failed: " : "", t.failed);
    status = t.fail ? 1 : ran == 0 ? 77 : 0;
out:;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return status;
}
