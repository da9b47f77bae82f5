/*
 * test_file.c — the embedded file backend and the core, with real processes
 * and threads contending on real kernel locks in a scratch directory.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

static char dir[256];
static char url[300];

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static dlock_client *open_client(void)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, url, NULL);
    if (rc)
        fail_msg("open %s: %s", url, dlock_client_errmsg(NULL));
    return c;
}

static dlock_lock *new_lock(dlock_client *c, const char *name, dlock_kind kind, unsigned permits)
{
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.kind = kind;
    o.permits = permits;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(&l, c, name, &o);
    if (rc)
        fail_msg("lock_new %s: %s", name, dlock_client_errmsg(c));
    return l;
}

static void test_acquire_release_token(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *l = new_lock(c, "basic", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_acquire(l, 0), 0);
    assert_int_equal(dlock_state(l), DLOCK_STATE_HELD);
    uint64_t t1 = dlock_token(l);
    assert_true(t1 > 0);
    assert_int_equal(dlock_release(l), 0);
    assert_int_equal(dlock_token(l), 0);
    assert_int_equal(dlock_release(l), DLOCK_ENOTHELD);
    assert_int_equal(dlock_acquire(l, -1), 0);
    assert_true(dlock_token(l) > t1);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void test_reentrancy(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *l = new_lock(c, "reenter", DLOCK_EXCLUSIVE, 1);
    dlock_lock *other = new_lock(c, "reenter", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(l, 0), 0);
    uint64_t t = dlock_token(l);
    assert_int_equal(dlock_acquire(l, 0), 0);
    assert_int_equal(dlock_acquire(l, 100), 0);
    assert_int_equal(dlock_held_count(l), 3);
    assert_int_equal(dlock_token(l), t);
    assert_int_equal(dlock_release(l), 0);
    assert_int_equal(dlock_release(l), 0);
    /* Still held once: another handle in the same process is excluded. */
    assert_int_equal(dlock_acquire(other, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(l), 0);
    assert_int_equal(dlock_acquire(other, 0), 0);
    assert_true(dlock_token(other) > t);
    dlock_lock_free(other); /* frees while held: released */
    assert_int_equal(dlock_acquire(l, 0), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void test_try_and_timeout(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *a = new_lock(c, "timeout", DLOCK_EXCLUSIVE, 1);
    dlock_lock *b = new_lock(c, "timeout", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
    int64_t t0 = now_ns();
    assert_int_equal(dlock_acquire(b, 200), DLOCK_ETIMEDOUT);
    int64_t waited = now_ns() - t0;
    assert_true(waited >= 199 * 1000000LL);
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    assert_non_null(strstr(dlock_lock_errmsg(b), "timeout"));
    /* The timed-out waiter left nothing queued behind: a is released and b
     * can take it at once. */
    assert_int_equal(dlock_release(a), 0);
    assert_int_equal(dlock_acquire(b, 0), 0);
    assert_int_equal(dlock_release(b), 0);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

struct waiter_arg {
    dlock_lock *l;
    int timeout;
    atomic_int rc;
    atomic_int done;
};

static void *waiter(void *p)
{
    struct waiter_arg *w = p;
    atomic_store(&w->rc, dlock_acquire(w->l, w->timeout));
    atomic_store(&w->done, 1);
    return NULL;
}

static void wait_state(dlock_lock *l, dlock_state_t st)
{
    for (int i = 0; i < 5000 && dlock_state(l) != st; i++)
        usleep(1000);
    assert_int_equal(dlock_state(l), st);
}

static void test_cancel(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *a = new_lock(c, "cancel", DLOCK_EXCLUSIVE, 1);
    dlock_lock *b = new_lock(c, "cancel", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    struct waiter_arg w = {.l = b, .timeout = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, &w), 0);
    wait_state(b, DLOCK_STATE_WAITING);
    usleep(20000); /* let it reach the kernel wait */
    dlock_cancel(b);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&w.rc), DLOCK_ECANCELED);
    assert_int_equal(dlock_state(b), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_release(a), 0);
    /* A canceled waiter does not keep a place in the queue. */
    assert_int_equal(dlock_acquire(b, 0), 0);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

static void test_waiter_wakes_on_release(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *a = new_lock(c, "wake", DLOCK_EXCLUSIVE, 1);
    dlock_lock *b = new_lock(c, "wake", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    uint64_t ta = dlock_token(a);
    struct waiter_arg w = {.l = b, .timeout = 10000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, &w), 0);
    wait_state(b, DLOCK_STATE_WAITING);
    usleep(20000);
    assert_int_equal(atomic_load(&w.done), 0);
    assert_int_equal(dlock_release(a), 0);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&w.rc), 0);
    assert_true(dlock_token(b) > ta);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

/*
 * Many processes, each with several threads, increment a counter file under
 * the lock and log every critical section; afterwards no two sections
 * overlap, tokens rise with time, and no increment was lost.
 */
#define PROCS 6
#define THREADS 3
#define ITERS 60

struct section {
    int64_t enter, leave;
    uint64_t token;
};

struct worker_arg {
    int logfd;
    const char *counter;
};

static void *contend(void *p)
{
    struct worker_arg *wa = p;
    dlock_client *c = open_client();
    dlock_lock *l = new_lock(c, "contended", DLOCK_EXCLUSIVE, 1);
    for (int i = 0; i < ITERS; i++) {
        if (dlock_acquire(l, 20000) != 0)
            fail_msg("acquire: %s", dlock_lock_errmsg(l));
        struct section s = {.enter = now_ns(), .token = dlock_token(l)};
        FILE *f = fopen(wa->counter, "r+");
        long v = 0;
        if (!f || fscanf(f, "%ld", &v) != 1)
            fail_msg("read counter");
        rewind(f);
        fprintf(f, "%ld\n", v + 1);
        fclose(f);
        s.leave = now_ns();
        if (write(wa->logfd, &s, sizeof s) != (ssize_t)sizeof s)
            fail_msg("log write");
        assert_int_equal(dlock_release(l), 0);
    }
    dlock_lock_free(l);
    dlock_client_close(c);
    return NULL;
}

static int by_enter(const void *a, const void *b)
{
    const struct section *x = a, *y = b;
    return x->enter < y->enter ? -1 : x->enter > y->enter;
}

static void test_many_processes_and_threads(void **state)
{
    (void)state;
    char counter[300], logpath[300];
    snprintf(counter, sizeof counter, "%s/counter", dir);
    snprintf(logpath, sizeof logpath, "%s/sections", dir);
    FILE *f = fopen(counter, "w");
    assert_non_null(f);
    fputs("0\n", f);
    fclose(f);
    int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    assert_true(logfd >= 0);
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            struct worker_arg wa = {.logfd = logfd, .counter = counter};
            pthread_t t[THREADS];
            for (int i = 0; i < THREADS; i++)
                pthread_create(&t[i], NULL, contend, &wa);
            for (int i = 0; i < THREADS; i++)
                pthread_join(t[i], NULL);
            _exit(0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int st;
        assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    close(logfd);
    const int n = PROCS * THREADS * ITERS;
    struct section *s = calloc(n, sizeof *s);
    int fd = open(logpath, O_RDONLY);
    assert_int_equal(read(fd, s, n * sizeof *s), (ssize_t)(n * sizeof *s));
    close(fd);
    qsort(s, n, sizeof *s, by_enter);
    for (int i = 1; i < n; i++) {
        if (s[i].enter < s[i - 1].leave)
            fail_msg("sections %d and %d overlap", i - 1, i);
        if (s[i].token <= s[i - 1].token)
            fail_msg("token %" PRIu64 " after %" PRIu64, s[i].token, s[i - 1].token);
    }
    free(s);
    f = fopen(counter, "r");
    long v = 0;
    assert_int_equal(fscanf(f, "%ld", &v), 1);
    fclose(f);
    assert_int_equal(v, n);
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
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].got, i);
        dlock_lock_free(a[i].l);
    }
    dlock_lock_free(h);
    dlock_client_close(c);
}

static void test_killed_holder_frees_lock(void **state)
{
    (void)state;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dlock_client *c = open_client();
        dlock_lock *l = new_lock(c, "victim", DLOCK_EXCLUSIVE, 1);
        if (dlock_acquire(l, 5000) != 0)
            _exit(1);
        char one = 1;
        if (write(ready[1], &one, 1) != 1)
            _exit(2);
        pause();
        _exit(0);
    }
    close(ready[1]); /* a child that dies first makes the read return 0 */
    char b;
    if (read(ready[0], &b, 1) != 1) {
        int status = 0;
        waitpid(pid, &status, 0);
        fail_msg("the holder child did not take the lock (exit status %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    dlock_client *c = open_client();
    dlock_lock *l = new_lock(c, "victim", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    dlock_info info;
    assert_int_equal(dlock_inspect(c, "victim", &info), 0);
    assert_int_equal(info.held, 1);
    char want[64];
    snprintf(want, sizeof want, "pid %ld ", (long)pid);
    assert_non_null(strstr(info.holder, want));
    /* A waiter blocked in the kernel gets the lock the moment the holder
     * dies, without polling. */
    struct waiter_arg w = {.l = l, .timeout = 10000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, &w), 0);
    wait_state(l, DLOCK_STATE_WAITING);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&w.rc), 0);
    assert_int_equal(dlock_release(l), 0);
    close(ready[0]);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void test_shared(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *r1 = new_lock(c, "rw", DLOCK_SHARED, 1);
    dlock_lock *r2 = new_lock(c, "rw", DLOCK_SHARED, 1);
    dlock_lock *r3 = new_lock(c, "rw", DLOCK_SHARED, 1);
    dlock_lock *w = new_lock(c, "rw", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(r1, 0), 0);
    assert_int_equal(dlock_acquire(r2, 0), 0);
    assert_true(dlock_token(r2) > dlock_token(r1));
    assert_int_equal(dlock_acquire(w, 0), DLOCK_EBUSY);
    /* A waiting writer holds the turnstile: later readers queue behind it. */
    struct waiter_arg wa = {.l = w, .timeout = 10000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, &wa), 0);
    wait_state(w, DLOCK_STATE_WAITING);
    usleep(50000);
    assert_int_equal(dlock_acquire(r3, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(r1), 0);
    assert_int_equal(dlock_release(r2), 0);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&wa.rc), 0);
    assert_int_equal(dlock_acquire(r3, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(w), 0);
    assert_int_equal(dlock_acquire(r3, 0), 0);
    dlock_lock_free(r1);
    dlock_lock_free(r2);
    dlock_lock_free(r3);
    dlock_lock_free(w);
    dlock_client_close(c);
}

static void test_semaphore(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = new_lock(c, "sem", DLOCK_SEMAPHORE, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_acquire(p[i], 0), 0);
    assert_int_equal(dlock_acquire(p[3], 0), DLOCK_EBUSY);
    dlock_info info;
    assert_int_equal(dlock_inspect(c, "sem", &info), 0);
    assert_int_equal(info.holders, 3);
    struct waiter_arg w = {.l = p[3], .timeout = 10000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, &w), 0);
    wait_state(p[3], DLOCK_STATE_WAITING);
    usleep(30000);
    assert_int_equal(atomic_load(&w.done), 0);
    /* Freeing the middle permit wakes the waiter: it sleeps on all of them. */
    assert_int_equal(dlock_release(p[1]), 0);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&w.rc), 0);
    assert_int_equal(dlock_acquire(p[1], 0), DLOCK_EBUSY);
    for (int i = 0; i < 4; i++)
        dlock_lock_free(p[i]);
    dlock_client_close(c);
}

static void test_multi_lock(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *set[3] = {new_lock(c, "m-c", DLOCK_EXCLUSIVE, 1),
                          new_lock(c, "m-a", DLOCK_EXCLUSIVE, 1),
                          new_lock(c, "m-b", DLOCK_EXCLUSIVE, 1)};
    dlock_lock *spoiler = new_lock(c, "m-b", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(spoiler, 0), 0);
    /* All or nothing: m-b is taken, so m-a must not stay held. */
    assert_int_equal(dlock_acquire_all(set, 3, 100), DLOCK_ETIMEDOUT);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_state(set[i]), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_release(spoiler), 0);
    assert_int_equal(dlock_acquire_all(set, 3, 1000), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_state(set[i]), DLOCK_STATE_HELD);
    assert_int_equal(dlock_acquire(spoiler, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release_all(set, 3), 0);
    dlock_lock *dup[2] = {set[0], new_lock(c, "m-c", DLOCK_EXCLUSIVE, 1)};
    assert_int_equal(dlock_acquire_all(dup, 2, 0), DLOCK_EINVAL);
    dlock_lock_free(dup[1]);
    for (int i = 0; i < 3; i++)
        dlock_lock_free(set[i]);
    dlock_lock_free(spoiler);
    dlock_client_close(c);
}

struct pair_arg {
    const char *first, *second;
    atomic_int failures;
};

static void *pair_worker(void *p)
{
    struct pair_arg *a = p;
    dlock_client *c = open_client();
    dlock_lock *set[2] = {new_lock(c, a->first, DLOCK_EXCLUSIVE, 1),
                          new_lock(c, a->second, DLOCK_EXCLUSIVE, 1)};
    for (int i = 0; i < 200; i++) {
        if (dlock_acquire_all(set, 2, 10000) != 0)
            atomic_fetch_add(&a->failures, 1);
        else
            dlock_release_all(set, 2);
    }
    dlock_lock_free(set[0]);
    dlock_lock_free(set[1]);
    dlock_client_close(c);
    return NULL;
}

static void test_multi_lock_no_deadlock(void **state)
{
    (void)state;
    struct pair_arg a = {.first = "x", .second = "y"}, b = {.first = "y", .second = "x"};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, pair_worker, &a);
    pthread_create(&t2, NULL, pair_worker, &b);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(atomic_load(&a.failures), 0);
    assert_int_equal(atomic_load(&b.failures), 0);
}

static atomic_int lost_calls;
static void on_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    atomic_fetch_add(&lost_calls, 1);
}

static void test_loss_notification(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.on_lost = on_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(&l, c, "lose", &o), 0);
    dlock_lock *other = new_lock(c, "lose", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_debug_force_loss(l), DLOCK_ENOTHELD);
    assert_int_equal(dlock_acquire(l, 0), 0);
    struct pollfd p = {.fd = dlock_lost_fd(l), .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 0);
    assert_int_equal(dlock_debug_force_loss(l), 0);
    assert_int_equal(poll(&p, 1, 1000), 1);
    assert_int_equal(dlock_state(l), DLOCK_STATE_LOST);
    assert_int_equal(atomic_load(&lost_calls), 1);
    /* The lock is really gone: someone else can take it now. */
    assert_int_equal(dlock_acquire(other, 0), 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_ELOST);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    assert_int_equal(poll(&p, 1, 0), 0);
    assert_int_equal(dlock_release(other), 0);
    assert_int_equal(dlock_acquire(l, 0), 0);
    dlock_lock_free(l);
    dlock_lock_free(other);
    dlock_client_close(c);
}

static void test_election(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *a = new_lock(c, "leader", DLOCK_EXCLUSIVE, 1);
    dlock_lock *b = new_lock(c, "leader", DLOCK_EXCLUSIVE, 1);
    char buf[300];
    assert_int_equal(dlock_leader(c, "leader", buf, sizeof buf), DLOCK_ENOENT);
    assert_int_equal(dlock_campaign(a, "node-a:8080", 0), 0);
    assert_int_equal(dlock_leader(c, "leader", buf, sizeof buf), 0);
    assert_string_equal(buf, "node-a:8080");
    assert_int_equal(dlock_campaign(b, "node-b", 0), DLOCK_EBUSY);
    assert_int_equal(dlock_resign(a), 0);
    assert_int_equal(dlock_leader(c, "leader", buf, sizeof buf), DLOCK_ENOENT);
    assert_int_equal(dlock_campaign(b, "node-b", 0), 0);
    assert_int_equal(dlock_leader(c, "leader", buf, sizeof buf), 0);
    assert_string_equal(buf, "node-b");
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

static int collect(const char *name, void *arg)
{
    char *acc = arg;
    strcat(acc, name);
    strcat(acc, ",");
    return 0;
}

static void test_inspect_and_list(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *l = new_lock(c, "listed-1", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(l, 0), 0);
    dlock_info info;
    assert_int_equal(dlock_inspect(c, "listed-1", &info), 0);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, dlock_token(l));
    assert_true(info.held_ms >= 0);
    assert_true(strncmp(info.holder, "pid ", 4) == 0);
    assert_int_equal(dlock_inspect(c, "never-used", &info), 0);
    assert_int_equal(info.held, 0);
    char acc[4096] = "";
    assert_int_equal(dlock_list(c, "listed-", collect, acc), 0);
    assert_string_equal(acc, "listed-1,");
    dlock_lock_free(l);
    assert_int_equal(dlock_inspect(c, "listed-1", &info), 0);
    assert_int_equal(info.held, 0);
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
    dlock_client_close(c);

    dlock_client *bc = NULL;
    assert_int_equal(dlock_client_open(&bc, "file:///nonexistent-parent/x/y", NULL), DLOCK_EIO);
    assert_null(bc);
    assert_non_null(strstr(dlock_client_errmsg(NULL), "/nonexistent-parent/x/y"));
    assert_true(dlock_client_open(&bc, "file:///proc/dlock-test", NULL) < 0);
    assert_int_equal(dlock_client_open(&bc, "nosuch://x", NULL), DLOCK_EURL);
    assert_int_equal(dlock_client_open(&bc, "zk://u:sekrit@127.0.0.1:2190", NULL),
                     DLOCK_ENOTSUP);
    assert_null(strstr(dlock_client_errmsg(NULL), "sekrit"));
    assert_int_equal(dlock_client_open(&bc, "redis://u:sekrit@127.0.0.1:1", NULL),
                     DLOCK_EUNREACHABLE);
    assert_null(strstr(dlock_client_errmsg(NULL), "sekrit"));
}

static void test_corrupt_token_refused(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/locks/corrupt.lock", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("garbage that is not a header\n", f);
    fclose(f);
    dlock_client *c = open_client();
    dlock_lock *l = new_lock(c, "corrupt", DLOCK_EXCLUSIVE, 1);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EPROTO);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    dlock_lock_free(l);
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

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/dlock-test-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    snprintf(url, sizeof url, "file://%s/locks", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors_table),
        cmocka_unit_test(test_acquire_release_token),
        cmocka_unit_test(test_reentrancy),
        cmocka_unit_test(test_try_and_timeout),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_waiter_wakes_on_release),
        cmocka_unit_test(test_many_processes_and_threads),
        cmocka_unit_test(test_killed_holder_frees_lock),
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_shared),
        cmocka_unit_test(test_semaphore),
        cmocka_unit_test(test_multi_lock),
        cmocka_unit_test(test_multi_lock_no_deadlock),
        cmocka_unit_test(test_loss_notification),
        cmocka_unit_test(test_election),
        cmocka_unit_test(test_inspect_and_list),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_corrupt_token_refused),
        cmocka_unit_test(test_close_releases_held_locks),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_multi_lock_same_name_twice),
        cmocka_unit_test(test_url_parameters_checked),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return failed ? 1 : 0;
}
