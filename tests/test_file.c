/* SPDX-License-Identifier: MIT */
/*
 * test_file.c — the embedded file backend and the core, with real processes
 * and threads contending on real kernel locks in a scratch directory.
 * The lock contract itself (tokens, re-entry, timeouts, cancel, shared
 * locks, semaphores, multi-lock, election, inspect/list, loss, dead
 * holders, contention) is tests/test_conformance.c's, run on this backend
 * too; what is here is the file backend's own.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "testutil.h"

static char dir[256];
static char url[300];
static char self_exe[4096];

static dlock_client *open_client(void)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, url, NULL);
    if (rc)
        fail_msg("open %s: %s", url, dlock_client_errmsg(NULL));
    return c;
}

/* A lock of the kind and permits given, the backend's defaults else. */
static dlock_lock *new_lock(dlock_client *c, const char *name, dlock_kind kind, unsigned permits)
{
    return mk_lock(c, name, kind, permits, 0, -1);
}

/* The next ticket, read from the lock file's header ("next N"). */
static long next_ticket(const char *name)
{
    char path[400], buf[64] = {0};
    snprintf(path, sizeof path, "%s/locks/%s.lock", dir, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = pread(fd, buf, 54, 0);
    close(fd);
    return n == 54 ? atol(buf + 33) : -1;
}

struct fifo_arg {
    dlock_lock *l;
    atomic_int *order;
    int got;
};

static void *fifo_waiter(void *p)
{
    struct fifo_arg *a = p;
    if (dlock_acquire(a->l, 10000) == 0) {
        a->got = atomic_fetch_add(a->order, 1);
        dlock_release(a->l);
    } else {
        a->got = -1;
    }
    return NULL;
}

/* Fair exclusive locks are granted in arrival order: each waiter sleeps on
 * its predecessor's ticket, so a release wakes exactly the next one. */
static void test_fifo_order(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *h = new_lock(c, "fifo", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(h, 0), 0);
    long base = next_ticket("fifo");
    enum { N = 6 };
    struct fifo_arg a[N];
    pthread_t t[N];
    atomic_int order = 0;
    for (int i = 0; i < N; i++) {
        a[i] = (struct fifo_arg){.l = new_lock(c, "fifo", DLOCK_EXCLUSIVE, 1), .order = &order};
        assert_int_equal(pthread_create(&t[i], NULL, fifo_waiter, &a[i]), 0);
        for (int k = 0; k < 5000 && next_ticket("fifo") != base + i + 1; k++)
            usleep(1000);
        assert_int_equal(next_ticket("fifo"), base + i + 1);
    }
    assert_int_equal(dlock_release(h), 0);
    for (int i = 0; i < N; i++) /* (all ended before a verdict: they use a[]) */
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].got, i);
        dlock_lock_free(a[i].l);
    }
    dlock_lock_free(h);
    dlock_client_close(c);
}

/* Our children (the backend's waiting tasks: each sleeps in the kernel
 * for a waiter), up to max: how many. */
static int helpers(pid_t *out, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[300], buf[512];
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = '\0';
        const char *p = strrchr(buf, ')');
        char state;
        int ppid;
        if (p && sscanf(p + 1, " %c %d", &state, &ppid) == 2 && ppid == getpid() && n < max)
            out[n++] = atoi(e->d_name);
    }
    closedir(d);
    return n;
}

/* A task's voluntary context switches (one per sleep it went back to
 * after a wake-up), once it has slept 100 ms without one. */
static long settled_switches(pid_t pid)
{
    long last = -1;
    for (int k = 0; k < 100; k++) {
        char path[64], line[256], state = '?';
        long v = -1;
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "State:", 6) == 0)
                sscanf(line + 6, " %c", &state);
            if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
                v = atol(line + 24);
        }
        fclose(f);
        if (state == 'S' && v >= 0 && v == last)
            return v;
        last = state == 'S' ? v : -1;
        usleep(100000);
    }
    fail_msg("task %d never settled asleep", (int)pid);
    return -1;
}

struct wake_arg {
    dlock_lock *l;
    atomic_int done;
    int rc;
};

static void *wake_waiter(void *p)
{
    struct wake_arg *a = p;
    a->rc = dlock_acquire(a->l, 30000);
    atomic_store(&a->done, 1);
    return NULL;
}

/* A fair hand-over wakes the next in line and no one else: the waiter
 * behind it sleeps on through it. (The new holder took its predecessor's
 * queue byte with a write lock, which merged with its own queue byte, the
 * next one, into one lock; giving the first back shrank that lock, and the
 * kernel woke every task asleep on it: the waiter behind, for nothing, at
 * every hand-over.) */
static void test_handover_wakes_only_next(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *h = new_lock(c, "wakes", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(h, 0), 0);
    long base = next_ticket("wakes");
    struct wake_arg a[2];
    pthread_t t[2];
    pid_t pids[8];
    for (int i = 0; i < 2; i++) {
        a[i] = (struct wake_arg){.l = new_lock(c, "wakes", DLOCK_EXCLUSIVE, 1)};
        assert_int_equal(pthread_create(&t[i], NULL, wake_waiter, &a[i]), 0);
        for (int k = 0; k < 10000 && (next_ticket("wakes") != base + i + 1 ||
                                      helpers(pids, 8) != i + 1);
             k++)
            usleep(1000);
        assert_int_equal(next_ticket("wakes"), base + i + 1);
        assert_int_equal(helpers(pids, 8), i + 1);
    }
    pid_t task[2];
    long sw[2];
    assert_int_equal(helpers(task, 2), 2);
    for (int i = 0; i < 2; i++)
        sw[i] = settled_switches(task[i]);
    assert_int_equal(dlock_release(h), 0);
    for (int k = 0; k < 30000 && !atomic_load(&a[0].done); k++)
        usleep(1000);
    assert_true(atomic_load(&a[0].done));
    assert_int_equal(a[0].rc, 0);
    /* the first waiter's task ended with its wait: the one left is the
     * second waiter's, still asleep, and woken not once */
    assert_int_equal(helpers(pids, 8), 1);
    int j = pids[0] == task[0] ? 0 : 1;
    assert_int_equal(pids[0], task[j]);
    long after = settled_switches(task[j]);
    fprintf(stderr, "# the second waiter's task: %ld wake-ups while the first took over\n",
            after - sw[j]);
    assert_int_equal(after, sw[j]);
    assert_false(atomic_load(&a[1].done));
    assert_int_equal(dlock_release(a[0].l), 0);
    assert_int_equal(pthread_join(t[1], NULL), 0);
    assert_int_equal(a[1].rc, 0);
    assert_int_equal(pthread_join(t[0], NULL), 0);
    assert_int_equal(dlock_release(a[1].l), 0);
    for (int i = 0; i < 2; i++)
        dlock_lock_free(a[i].l);
    dlock_lock_free(h);
    dlock_client_close(c);
}

static void test_bad_input(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *l = NULL;
    const char *bad[] = {"", "a/b", "..", ".hidden", "a\\b", "tab\there"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(dlock_lock_new(&l, c, bad[i], NULL), DLOCK_ENAME);
        assert_null(l);
    }
    char longname[202];
    memset(longname, 'n', 201);
    longname[201] = '\0';
    assert_int_equal(dlock_lock_new(&l, c, longname, NULL), DLOCK_ENAME);
    longname[200] = '\0';
    assert_int_equal(dlock_lock_new(&l, c, longname, NULL), 0);
    assert_int_equal(dlock_acquire(l, 0), 0);
    dlock_lock_free(l);
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.kind = DLOCK_SEMAPHORE;
    o.permits = 0;
    assert_int_equal(dlock_lock_new(&l, c, "sem0", &o), DLOCK_EINVAL);
    /* fair is 1, 0 or -1 (issue 22, item 10: 5 was taken) */
    dlock_lock_opts_init(&o);
    o.fair = 5;
    assert_int_equal(dlock_lock_new(&l, c, "fair5", &o), DLOCK_EINVAL);
    assert_null(l);
    assert_non_null(strstr(dlock_client_errmsg(c), "not 5"));
    dlock_client_close(c);

    dlock_client *bc = NULL;
    assert_int_equal(dlock_client_open(&bc, "file:///nonexistent-parent/x/y", NULL), DLOCK_EIO);
    assert_null(bc);
    assert_non_null(strstr(dlock_client_errmsg(NULL), "/nonexistent-parent/x/y"));
    assert_true(dlock_client_open(&bc, "file:///proc/dlock-test", NULL) < 0);
    assert_int_equal(dlock_client_open(&bc, "nosuch://x", NULL), DLOCK_EURL);
    assert_int_equal(dlock_client_open(&bc, "memcached://127.0.0.1:1", NULL), DLOCK_EUNREACHABLE);
    assert_int_equal(dlock_client_open(&bc, "mysql://u:sekrit@127.0.0.1:1/db", NULL),
                     DLOCK_EUNREACHABLE);
    assert_null(strstr(dlock_client_errmsg(NULL), "sekrit"));
    assert_int_equal(dlock_client_open(&bc, "redis://u:sekrit@127.0.0.1:1", NULL),
                     DLOCK_EUNREACHABLE);
    assert_null(strstr(dlock_client_errmsg(NULL), "sekrit"));
}

/* A lock file's first bytes, NUL-terminated. */
static void header_of(const char *name, char *buf, size_t len)
{
    char path[400];
    snprintf(path, sizeof path, "%s/locks/%s.lock", dir, name);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = pread(fd, buf, len - 1, 0);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
}

/* A lock file made of text alone. */
static void put_header(const char *name, const char *text)
{
    char path[400];
    snprintf(path, sizeof path, "%s/locks/%s.lock", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_corrupt_token_refused(void **state)
{
    (void)state;
    put_header("corrupt", "garbage that is not a header\n");
    dlock_client *c = open_client();
    dlock_lock *l = new_lock(c, "corrupt", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EPROTO);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    dlock_lock_free(l);
    /* 20 digits above 2^64 - 1: refused, not read modulo 2^64 (a token
     * that would go back; found by fuzz_file) */
    put_header("overflow", "dlock2 20000000000000000041\nnext 00000000000000000008\n");
    l = new_lock(c, "overflow", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EPROTO);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* A header written by dlock up to 0.1.0 ("dlock1", with or without the
 * ticket line) goes on from its token and becomes a "dlock2" one, whose
 * token an exclusive holder writes without META (see file.c). */
#define META_BYTE (((off_t)1 << 40) + 1) /* file.c's OFF_META */

/* A try whose lock's META byte stays held (a taker stopped between a
 * header read and its write) says DLOCK_EBUSY, as a try promises, not
 * DLOCK_ETIMEDOUT (seen under valgrind, where a taker of a busy name was
 * not scheduled for a second). */
static void test_try_on_stuck_header_is_busy(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *l = new_lock(c, "stuckmeta", DLOCK_EXCLUSIVE, 1);
    acquire_ok(l, 0);
    assert_int_equal(dlock_release(l), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/locks/stuckmeta.lock", dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    struct flock meta = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = META_BYTE,
                         .l_len = 1};
    assert_int_equal(fcntl(fd, F_OFD_SETLK, &meta), 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    assert_non_null(strstr(dlock_lock_errmsg(l), "busy"));
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_acquire(l, 200), DLOCK_ETIMEDOUT);
    meta.l_type = F_UNLCK;
    assert_int_equal(fcntl(fd, F_OFD_SETLK, &meta), 0);
    assert_int_equal(close(fd), 0);
    acquire_ok(l, 0);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void test_old_header_carried_on(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    put_header("oldfair", "dlock1 00000000000000000041\nnext 00000000000000000007\n");
    put_header("oldany", "dlock1 00000000000000000050\n");
    dlock_lock *l = new_lock(c, "oldfair", DLOCK_EXCLUSIVE, 1);
    acquire_ok(l, 0);
    assert_int_equal(dlock_token(l), 42);
    char h[64];
    header_of("oldfair", h, sizeof h);
    assert_string_equal(h, "dlock2 00000000000000000042\nnext 00000000000000000008\n");
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    l = mk_lock(c, "oldany", DLOCK_EXCLUSIVE, 1, 0, 0); /* not fair: no ticket */
    acquire_ok(l, 0);
    assert_int_equal(dlock_token(l), 51);
    header_of("oldany", h, sizeof h);
    assert_string_equal(h, "dlock2 00000000000000000051\nnext 00000000000000000000\n");
    assert_int_equal(dlock_release(l), 0);
    acquire_ok(l, 0);
    assert_int_equal(dlock_token(l), 52);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

#define MIX_ROUNDS 150
struct mix_arg {
    dlock_lock *l;
    int mode; /* 0 waits, 1 tries, 2 shared, 3 waits 1 ms at most */
    uint64_t *tokens;
    bool *shared_at;
    atomic_int *n;
    int rc;
};

static void *mix_taker(void *p)
{
    struct mix_arg *a = p;
    for (int i = 0; i < MIX_ROUNDS; i++) {
        int rc = dlock_acquire(a->l, a->mode == 1 ? 0 : a->mode == 3 ? 1 : 10000);
        if ((rc == DLOCK_EBUSY && a->mode == 1) || (rc == DLOCK_ETIMEDOUT && a->mode == 3)) {
            i--;
            continue;
        }
        if (rc) {
            a->rc = rc;
            return NULL;
        }
        int at = atomic_fetch_add(a->n, 1);
        a->tokens[at] = dlock_token(a->l);
        a->shared_at[at] = a->mode == 2;
        if ((rc = dlock_release(a->l)) != 0) {
            a->rc = rc;
            return NULL;
        }
    }
    return NULL;
}

/* Fair and unfair waiters, tries and shared takers on one name: every
 * exclusive grant's token is above every token issued before it, and
 * no taker finds its ticket taken (a try that found the lock held let META
 * go before its ticket byte). Ticket takers and exclusive holders write
 * the header's two fields apart (an uncontended fair taker reads the token
 * again once MAIN is its own). */
static void test_tokens_rise_with_mixed_takers(void **state)
{
    (void)state;
    enum { N = 9 };
    static const int fair[N] = {1, 1, 1, 0, 0, 1, 1, 1, 0};
    static const int mode[N] = {0, 0, 0, 0, 0, 1, 2, 3, 1};
    dlock_client *c = open_client();
    uint64_t *tokens = calloc(N * MIX_ROUNDS, sizeof *tokens);
    bool *shared_at = calloc(N * MIX_ROUNDS, sizeof *shared_at);
    assert_non_null(tokens);
    assert_non_null(shared_at);
    atomic_int n = 0;
    struct mix_arg a[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        a[i] = (struct mix_arg){.l = mk_lock(c, "mixed", mode[i] == 2 ? DLOCK_SHARED
                                                                        : DLOCK_EXCLUSIVE,
                                             1, 0, fair[i]),
                                .mode = mode[i], .tokens = tokens, .shared_at = shared_at,
                                .n = &n};
        assert_int_equal(pthread_create(&t[i], NULL, mix_taker, &a[i]), 0);
    }
    /* Every taker ends before any verdict: a failure that left the rest
     * running would have them read this frame's a[] after it was gone. */
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < N; i++) {
        if (a[i].rc)
            fail_msg("taker %d: %s: %s", i, dlock_err_name(a[i].rc), dlock_lock_errmsg(a[i].l));
        dlock_lock_free(a[i].l);
    }
    assert_int_equal(atomic_load(&n), N * MIX_ROUNDS);
    uint64_t top = 0;
    for (int i = 0; i < N * MIX_ROUNDS; i++) {
        if (!shared_at[i] && tokens[i] <= top)
            fail_msg("grant %d: token %" PRIu64 " after %" PRIu64, i, tokens[i], top);
        if (tokens[i] > top)
            top = tokens[i];
    }
    free(tokens);
    free(shared_at);
    dlock_client_close(c);
}

static void test_errors_table(void **state)
{
    (void)state;
    assert_string_equal(dlock_strerror(0), "success");
    assert_string_equal(dlock_strerror(DLOCK_ETIMEDOUT), "timed out waiting for the lock");
    assert_string_equal(dlock_err_name(DLOCK_EBUSY), "EBUSY");
    assert_string_equal(dlock_strerror(-9999), "unknown error");
    /* Codes are distinct and each has a message. */
    int codes[] = {
#define CODE_(n, v, m) v,
        DLOCK_ERRNO_MAP(CODE_)
#undef CODE_
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        assert_true(codes[i] < 0);
        assert_string_not_equal(dlock_strerror(codes[i]), "unknown error");
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(codes[i], codes[j]);
    }
    assert_string_equal(dlock_version(), DLOCK_VERSION_STRING);
    size_t n = dlock_backend_count();
    assert_true(n >= 8);
    int available = 0;
    for (size_t i = 0; i < n; i++) {
        const dlock_backend_info *b = dlock_backend_at(i);
        assert_non_null(b);
        assert_non_null(b->liveness);
        available += b->available;
        if (!b->available)
            assert_non_null(b->missing);
    }
    assert_true(available >= 1);
    assert_null(dlock_backend_at(n));
}

/* Closing a client gives back what its handles hold (issue 16, item 3):
 * another process sees the lock free at once, and the handles, detached,
 * can still be freed afterwards — before the client's memory goes. */
static void test_close_releases_held_locks(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *held = new_lock(c, "close-held", DLOCK_EXCLUSIVE, 1);
    dlock_lock *twice = new_lock(c, "close-twice", DLOCK_EXCLUSIVE, 1);
    dlock_lock *idle = new_lock(c, "close-idle", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(held, 0), 0);
    assert_int_equal(dlock_acquire(twice, 0), 0);
    assert_int_equal(dlock_acquire(twice, 0), 0); /* re-entered: still one release */
    dlock_client_close(c);

    /* Another process, so that the kernel's view decides, not ours. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dlock_client *c2 = NULL;
        dlock_lock *a = NULL, *b = NULL;
        int ok = dlock_client_open(&c2, url, NULL) == 0 &&
                 dlock_lock_new(&a, c2, "close-held", NULL) == 0 &&
                 dlock_lock_new(&b, c2, "close-twice", NULL) == 0 && dlock_acquire(a, 0) == 0 &&
                 dlock_acquire(b, 0) == 0;
        /* Free ours and our copy of the parent's handles: valgrind, when it
         * checks forked children, counts what only dead registers reached. */
        dlock_lock_free(a);
        dlock_lock_free(b);
        dlock_client_close(c2);
        dlock_lock_free(twice);
        dlock_lock_free(held);
        dlock_lock_free(idle);
        _exit(ok ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* Detached handles: idle, an acquisition refused with a reason, and
     * freeing them (in any order) is safe; the last one frees the client. */
    assert_int_equal(dlock_state(held), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_release(held), DLOCK_ENOTHELD);
    assert_int_equal(dlock_acquire(idle, 0), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_lock_errmsg(idle), "closed"));
    dlock_lock_free(twice);
    dlock_lock_free(held);
    dlock_lock_free(idle);
}

/* A fair waiter behind another ticket wakes on its predecessor's call (an
 * abstract datagram socket named after the lock file and its ticket), but
 * the call is only a hint: anyone can send one, and a call while the lock
 * is held takes nothing. A predecessor that dies calls nobody: the waiter
 * still gets the lock (its helper, started when no call came, sees the
 * kernel give the ranges back). */
static void test_call_is_only_a_hint(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        dlock_client *c = NULL;
        dlock_lock *l = NULL;
        char ok = dlock_client_open(&c, url, NULL) == 0 &&
                  dlock_lock_new(&l, c, "hint", NULL) == 0 && dlock_acquire(l, 0) == 0;
        if (write(p[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause(); /* killed holding it */
    }
    close(p[1]);
    char ok = 0;
    assert_int_equal(read(p[0], &ok, 1), 1);
    close(p[0]);
    assert_true(ok);
    long base = next_ticket("hint");

    dlock_client *c = open_client();
    struct wake_arg a = {.l = new_lock(c, "hint", DLOCK_EXCLUSIVE, 1)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wake_waiter, &a), 0);
    for (int k = 0; k < 10000 && next_ticket("hint") != base + 1; k++)
        usleep(1000);
    assert_int_equal(next_ticket("hint"), base + 1);

    /* Forged calls to the waiter's ticket, while the holder holds. */
    char path[400];
    snprintf(path, sizeof path, "%s/locks/hint.lock", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "dlock-call/%jx/%jx/%ld",
                     (uintmax_t)st.st_dev, (uintmax_t)st.st_ino, base);
    int s = socket(AF_UNIX, SOCK_DGRAM, 0);
    assert_true(s >= 0);
    for (int i = 0; i < 3; i++) {
        (void)sendto(s, "c", 1, MSG_DONTWAIT, (struct sockaddr *)&sa,
                     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n));
        usleep(5000);
    }
    close(s);
    usleep(200000);
    assert_false(atomic_load(&a.done));

    /* The holder dies without a word. */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, 0);
    assert_int_equal(dlock_release(a.l), 0);
    dlock_lock_free(a.l);
    dlock_client_close(c);
}

/* NULL where a pointer is wanted is DLOCK_EINVAL (or nothing), never a
 * crash (issue 16, item 6). */
static void test_null_arguments(void **state)
{
    (void)state;
    dlock_lock_opts_init(NULL);
    dlock_client_opts_init(NULL);
    dlock_client *c = open_client();
    dlock_lock *a = new_lock(c, "null-a", DLOCK_EXCLUSIVE, 1);
    dlock_lock *set[3] = {a, NULL, a};
    assert_int_equal(dlock_acquire_all(set, 2, 0), DLOCK_EINVAL);
    dlock_lock *only_null[1] = {NULL};
    assert_int_equal(dlock_acquire_all(only_null, 1, 0), DLOCK_EINVAL);
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_acquire(NULL, 0), DLOCK_EINVAL);
    assert_int_equal(dlock_release(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_valid_ms(NULL), 0);
    dlock_lock_free(a);
    dlock_client_close(c);
}

/* An explicitly empty URL is a mistake (an unset variable), never the
 * default backend; NULL still is the default (issue 22, item 1). */
static void test_empty_url_refused(void **state)
{
    (void)state;
    dlock_client *c = (dlock_client *)&c;
    assert_int_equal(dlock_client_open(&c, "", NULL), DLOCK_EURL);
    assert_null(c);
    assert_non_null(strstr(dlock_client_errmsg(NULL), "empty"));
    char old[400];
    const char *env = getenv("DLOCK_URL");
    snprintf(old, sizeof old, "%s", env ? env : "");
    assert_int_equal(setenv("DLOCK_URL", url, 1), 0);
    assert_int_equal(dlock_client_open(&c, NULL, NULL), 0);
    assert_non_null(strstr(dlock_client_url(c), dir));
    dlock_client_close(c);
    /* A set DLOCK_URL does not rescue an explicit "". */
    assert_int_equal(dlock_client_open(&c, "", NULL), DLOCK_EURL);
    assert_null(c);
    if (env)
        setenv("DLOCK_URL", old, 1);
    else
        unsetenv("DLOCK_URL");
}

/* Threads sharing a client, each failing dlock_lock_new its own way, each
 * read their own message, whole (issue 22, item 3: they read each other's
 * and torn ones); and a NULL argument says so instead of leaving an older
 * message in place. Run under TSan by scripts/test.sh. */
enum { MSG_THREADS = 6, MSG_ROUNDS = 2000 };

struct msg_arg {
    dlock_client *c;
    int kind;
    int wrong; /* messages that were not this thread's */
};

static void *msg_thread(void *p)
{
    struct msg_arg *a = p;
    for (int i = 0; i < MSG_ROUNDS; i++) {
        dlock_lock_opts o;
        dlock_lock_opts_init(&o);
        dlock_lock *l = NULL;
        const char *name = "msg-ok", *want;
        int rc, want_rc;
        switch (a->kind) {
        case 0:
            name = "a/b", want = "'/'", want_rc = DLOCK_ENAME;
            break;
        case 1:
            o.kind = DLOCK_SEMAPHORE, o.permits = 5000, want = "permits",
            want_rc = DLOCK_EINVAL;
            break;
        case 2:
            o.ttl_ms = 5, want = "too short", want_rc = DLOCK_EINVAL;
            break;
        case 3:
            o.kind = (dlock_kind)9, want = "unknown lock kind", want_rc = DLOCK_EINVAL;
            break;
        case 4:
            o.ttl_ms = -3, want = "positive", want_rc = DLOCK_EINVAL;
            break;
        default:
            name = ".dot", want = "'.'", want_rc = DLOCK_ENAME;
            break;
        }
        rc = dlock_lock_new(&l, a->c, name, &o);
        const char *msg = dlock_client_errmsg(a->c);
        if (rc != want_rc || !strstr(msg, want))
            a->wrong++;
    }
    return NULL;
}

static void test_client_errmsg_per_thread(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    pthread_t th[MSG_THREADS];
    struct msg_arg args[MSG_THREADS];
    for (int i = 0; i < MSG_THREADS; i++) {
        args[i] = (struct msg_arg){.c = c, .kind = i};
        assert_int_equal(pthread_create(&th[i], NULL, msg_thread, &args[i]), 0);
    }
    for (int i = 0; i < MSG_THREADS; i++) /* (all ended before a verdict: they use args[]) */
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < MSG_THREADS; i++) {
        if (args[i].wrong)
            fail_msg("thread %d read %d messages that were not its own", i, args[i].wrong);
    }
    /* The main thread failed nothing: no message of the others is its own. */
    assert_string_equal(dlock_client_errmsg(c), "");
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(&l, c, "a/b", NULL), DLOCK_ENAME);
    assert_int_equal(dlock_lock_new(NULL, c, "fine", NULL), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_client_errmsg(c), "NULL"));
    assert_int_equal(dlock_inspect(c, "fine", NULL), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_client_errmsg(c), "NULL"));
    dlock_client_close(c);
}

/* Two handles of one name in one multi-lock: refused, and every handle says
 * why (it used to be EINVAL with an empty message; issue 16, item 10). */
static void test_multi_lock_same_name_twice(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *a = new_lock(c, "twice-x", DLOCK_EXCLUSIVE, 1);
    dlock_lock *b = new_lock(c, "twice-y", DLOCK_EXCLUSIVE, 1);
    dlock_lock *a2 = new_lock(c, "twice-x", DLOCK_EXCLUSIVE, 1);
    dlock_lock *set[3] = {a, b, a2};
    assert_int_equal(dlock_acquire_all(set, 3, 0), DLOCK_EINVAL);
    for (int i = 0; i < 3; i++)
        assert_non_null(strstr(dlock_lock_errmsg(set[i]), "appears twice"));
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_lock_free(a2);
    dlock_client_close(c);
}

/* A parameter the backend does not read is a malformed URL naming it, not
 * a silently ignored typo; bad values and negative timeouts are refused
 * (issue 16, item 9). */
static void test_url_parameters_checked(void **state)
{
    (void)state;
    static const char *const bad[] = {"?wiat=2", "?bogus=1", "?sync=2",
                                      "?connect_timeout_ms=abc", "?op_timeout_ms=-5",
                                      "?op_timeout_ms=0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char u[400];
        snprintf(u, sizeof u, "%s%s", url, bad[i]);
        dlock_client *c = NULL;
        assert_int_equal(dlock_client_open(&c, u, NULL), DLOCK_EURL);
        assert_null(c);
        const char *name = bad[i] + 1;
        char key[32];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(name, "="), name);
        if (!strstr(dlock_client_errmsg(NULL), key))
            fail_msg("%s: message does not name %s: %s", bad[i], key, dlock_client_errmsg(NULL));
    }
    static const char *const good[] = {"?sync=1", "?sync=0", "?sync",
                                       "?connect_timeout_ms=500&op_timeout_ms=700"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char u[400];
        snprintf(u, sizeof u, "%s%s", url, good[i]);
        dlock_client *c = NULL;
        if (dlock_client_open(&c, u, NULL) != 0)
            fail_msg("%s: %s", u, dlock_client_errmsg(NULL));
        dlock_client_close(c);
    }
    dlock_client_opts o;
    dlock_client_opts_init(&o);
    o.op_timeout_ms = -1;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open(&c, url, &o), DLOCK_EINVAL);
    o.op_timeout_ms = 0;
    o.connect_timeout_ms = -20;
    assert_int_equal(dlock_client_open(&c, url, &o), DLOCK_EINVAL);
    assert_null(c);
}

/* Holding more locks than RLIMIT_NOFILE allows (one descriptor each) fails
 * with a message naming the limit, and what was held stays held. In a child,
 * which lowers its soft limit, so that ours is untouched. */

/* The forked child pid ended with 0 (77: it skipped the test). */
static void child_ok(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77)
        skip();
    assert_int_equal(WEXITSTATUS(st), 0);
}
static void test_too_many_open_files(void **state)
{
    (void)state;
    enum { LIMIT = 64, MAX_LOCKS = LIMIT + 32 };
    int up[2], down[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        dlock_client *c = NULL;
        static dlock_lock *held[MAX_LOCKS];
        int n = 0, status = 0, rc = 0;
        char msg[600] = "";
        if (dlock_client_open(&c, url, NULL) != 0)
            _exit(2);
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < LIMIT)
            _exit(3);
        rl.rlim_cur = LIMIT;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(4);
        for (; n < MAX_LOCKS; n++) {
            char name[32];
            snprintf(name, sizeof name, "nofile-%d", n);
            if (dlock_lock_new(&held[n], c, name, NULL) != 0)
                _exit(5);
            rc = dlock_acquire(held[n], 0);
            if (rc != 0) {
                snprintf(msg, sizeof msg, "%s", dlock_lock_errmsg(held[n]));
                if (dlock_state(held[n]) != DLOCK_STATE_IDLE)
                    status = 6;
                dlock_lock_free(held[n]);
                break;
            }
        }
        if (n == MAX_LOCKS)
            status = 77; /* the limit is not enforced (valgrind keeps its own) */
        else if (n == 0 || rc != DLOCK_EIO || !strstr(msg, "RLIMIT_NOFILE") ||
                 !strstr(msg, "too many open files") || !strstr(msg, "nofile-"))
            status = 7;
        for (int i = 0; i < n && status == 0; i++)
            if (dlock_state(held[i]) != DLOCK_STATE_HELD)
                status = 8;
        if (status && status != 77)
            fprintf(stderr, "child: status %d after %d locks, rc %d: %s\n", status, n, rc, msg);
        int report[2] = {status, n};
        char go;
        if (write(up[1], report, sizeof report) != (ssize_t)sizeof report ||
            read(down[0], &go, 1) != 1)
            _exit(9);
        for (int i = 0; i < n; i++) {
            if (dlock_release(held[i]) != 0)
                _exit(10);
            dlock_lock_free(held[i]);
        }
        /* The descriptors came back: a lock can be taken again. */
        dlock_lock *again = NULL;
        if (dlock_lock_new(&again, c, "nofile-again", NULL) != 0 || dlock_acquire(again, 0) != 0 ||
            dlock_release(again) != 0)
            _exit(11);
        dlock_lock_free(again);
        dlock_client_close(c);
        _exit(status);
    }
    close(up[1]);
    close(down[0]);
    int report[2] = {-1, 0};
    assert_int_equal(read(up[0], report, sizeof report), (ssize_t)sizeof report);
    if (report[0] == 0) {
        /* The kernel's view: every lock the child took is still its own. */
        dlock_client *c = open_client();
        for (int i = 0; i < report[1]; i++) {
            char name[32];
            snprintf(name, sizeof name, "nofile-%d", i);
            dlock_lock *l = new_lock(c, name, DLOCK_EXCLUSIVE, 1);
            assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
            dlock_lock_free(l);
        }
        dlock_client_close(c);
    }
    assert_int_equal(write(down[1], "g", 1), 1);
    close(up[0]);
    close(down[1]);
    child_ok(pid);
    assert_int_equal(report[0], 0);
    assert_true(report[1] > 0 && report[1] < LIMIT);
}

/* Run by test_leaves_nofile in a freshly exec'd process: soft < hard on
 * entry, and neither a file:// client nor holding locks changes the
 * process's limit (issue 22, item 9: the library raised it to the hard
 * limit, and every child inherited that). */
static int nofile_check(const char *u)
{
    struct rlimit before, after;
    if (getrlimit(RLIMIT_NOFILE, &before) != 0)
        return 2;
    if (before.rlim_cur >= before.rlim_max)
        return 77; /* not set up as asked (valgrind keeps its own limits) */
    dlock_client *c = NULL;
    if (dlock_client_open(&c, u, NULL) != 0)
        return 3;
    dlock_lock *l = NULL;
    if (dlock_lock_new(&l, c, "nofile-kept", NULL) != 0 || dlock_acquire(l, 0) != 0)
        return 4;
    dlock_lock_free(l);
    dlock_client_close(c);
    if (getrlimit(RLIMIT_NOFILE, &after) != 0)
        return 2;
    if (after.rlim_cur != before.rlim_cur) {
        fprintf(stderr, "soft limit %llu became %llu\n", (unsigned long long)before.rlim_cur,
                (unsigned long long)after.rlim_cur);
        return 1;
    }
    return 0;
}

static void test_leaves_nofile(void **state)
{
    (void)state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max <= 64 || !self_exe[0])
        skip();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        rl.rlim_cur = rl.rlim_max > 256 ? 256 : rl.rlim_max / 2;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(4);
        execl(self_exe, self_exe, "--nofile-check", url, (char *)NULL);
        _exit(5);
    }
    child_ok(pid);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--nofile-check") == 0)
        return nofile_check(argv[2]);
    ssize_t len = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe[len > 0 ? len : 0] = '\0';
    snprintf(dir, sizeof dir, "/tmp/dlock-test-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    snprintf(url, sizeof url, "file://%s/locks", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors_table),
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_handover_wakes_only_next),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_corrupt_token_refused),
        cmocka_unit_test(test_old_header_carried_on),
        cmocka_unit_test(test_try_on_stuck_header_is_busy),
        cmocka_unit_test(test_tokens_rise_with_mixed_takers),
        cmocka_unit_test(test_close_releases_held_locks),
        cmocka_unit_test(test_call_is_only_a_hint),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_empty_url_refused),
        cmocka_unit_test(test_client_errmsg_per_thread),
        cmocka_unit_test(test_multi_lock_same_name_twice),
        cmocka_unit_test(test_url_parameters_checked),
        cmocka_unit_test(test_too_many_open_files),
        cmocka_unit_test(test_leaves_nofile),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return failed ? 1 : 0;
}
