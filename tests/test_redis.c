/* SPDX-License-Identifier: MIT */
/*
 * test_redis.c — the Redis family against real servers started by
 * tests/servers.sh (URLs in DLOCK_TEST_REDIS, _SENTINEL, _CLUSTER, _REDLOCK).
 * The test also talks to the servers directly (hiredis) to play the parts
 * that are hard to produce on cue: a lease that expired, a dropped
 * connection, a second user with its own password.
 * The lock contract itself (tokens, re-entry, timeouts, cancel, FIFO order,
 * shared locks, semaphores, multi-lock, election, inspect/list, loss, dead
 * holders, contention) is tests/test_conformance.c's, run on every URL of
 * the family; what is here is the family's own.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "testutil.h"

static const char *redis_url, *sentinel_url, *cluster_url, *redlock_url;
static int redis_port;

static int port_of(const char *url)
{
    const char *colon = strrchr(url, ':');
    return colon ? atoi(colon + 1) : 0;
}

/* A direct connection to the single master, for playing the server's part. */
static redisContext *direct(void)
{
    redisContext *ctx = redisConnect("127.0.0.1", redis_port);
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    return ctx;
}

static long long rint_cmd(redisContext *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -999;
    freeReplyObject(r);
    return v;
}

/* Classic bug: a holder whose lease expired releases and deletes the next
 * holder's lock. Ours must say ELOST and leave the other holder alone. */
static void test_release_after_expiry_spares_new_holder(void **state)
{
    (void)state;
    char name[64], key[128];
    unique(name, sizeof name, "expired");
    snprintf(key, sizeof key, "dlock:{%s}:lock", name);
    dlock_client *c = open_url(redis_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    dlock_lock *b = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    redisContext *d = direct();
    assert_int_equal(rint_cmd(d, "DEL %s", key), 1); /* a's lease "expired" */
    assert_int_equal(dlock_acquire(b, 0), 0);
    assert_int_equal(dlock_release(a), DLOCK_ELOST);
    assert_non_null(strstr(dlock_lock_errmsg(a), "expired"));
    assert_int_equal(rint_cmd(d, "EXISTS %s", key), 1);
    assert_int_equal(dlock_state(b), DLOCK_STATE_HELD);
    assert_int_equal(dlock_release(b), 0);
    redisFree(d);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

static void test_renewal_keeps_short_lease(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "renew");
    dlock_client *c = open_url(redis_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 1000, -1);
    dlock_lock *b = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 1000, -1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    usleep(3500 * 1000); /* more than three leases */
    assert_int_equal(dlock_state(a), DLOCK_STATE_HELD);
    assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(a), 0);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

/* Classic bug: a renewal that outlives the release and extends (or
 * re-creates) the lock of whoever holds it next. */
static void test_renewal_stops_at_release(void **state)
{
    (void)state;
    char name[64], key[128];
    unique(name, sizeof name, "outlive");
    snprintf(key, sizeof key, "dlock:{%s}:lock", name);
    dlock_client *c = open_url(redis_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 600, -1);
    dlock_lock *b = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 60000, -1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    assert_int_equal(dlock_release(a), 0);
    redisContext *d = direct();
    assert_int_equal(rint_cmd(d, "EXISTS %s", key), 0);
    assert_int_equal(dlock_acquire(b, 0), 0);
    assert_int_equal(rint_cmd(d, "PEXPIRE %s 5000", key), 1); /* b's lease, shortened */
    usleep(800 * 1000); /* a's renewals would have run by now */
    long long pttl = rint_cmd(d, "PTTL %s", key);
    assert_true(pttl > 0 && pttl <= 4300); /* nobody extended it */
    assert_int_equal(dlock_release(b), 0);
    redisFree(d);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

/* Classic bug: renewal re-creating a lock that expired. */
static void test_renewal_never_recreates(void **state)
{
    (void)state;
    char name[64], key[128];
    unique(name, sizeof name, "norecreate");
    snprintf(key, sizeof key, "dlock:{%s}:lock", name);
    dlock_client *c = open_url(redis_url);
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = 1500;
    o.on_lost = count_lost;
    dlock_lock *a;
    assert_int_equal(dlock_lock_new(&a, c, name, &o), 0);
    atomic_store(&lost_calls, 0);
    assert_int_equal(dlock_acquire(a, 0), 0);
    redisContext *d = direct();
    /* (If the machine stalled for a whole lease, the key expired by itself
     * already: the outcome to check is the same.) */
    (void)rint_cmd(d, "DEL %s", key);
    struct pollfd p = {.fd = dlock_lost_fd(a), .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1); /* told within one renewal period */
    assert_int_equal(dlock_state(a), DLOCK_STATE_LOST);
    /* The renewal thread signals the descriptor, then calls the callback. */
    for (int i = 0; i < 200 && atomic_load(&lost_calls) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(atomic_load(&lost_calls), 1);
    usleep(300 * 1000);
    assert_int_equal(rint_cmd(d, "EXISTS %s", key), 0);
    assert_int_equal(dlock_release(a), DLOCK_ELOST);
    redisFree(d);
    dlock_lock_free(a);
    dlock_client_close(c);
}

static void test_bad_ttl(void **state)
{
    (void)state;
    dlock_client *c = open_url(redis_url);
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    dlock_lock *l = NULL;
    o.ttl_ms = -5;
    assert_int_equal(dlock_lock_new(&l, c, "ttl", &o), DLOCK_EINVAL);
    o.ttl_ms = 10;
    assert_int_equal(dlock_lock_new(&l, c, "ttl", &o), DLOCK_EINVAL);
    assert_null(l);
    dlock_client_close(c);
}

/* A waiter handed the lock long after it started waiting must not count its
 * lease from when it started (it would believe in an expired lease), nor
 * from after it got the reply (it would outlive the server's lease). */
static void test_long_wait_then_handover(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "handover");
    dlock_client *c = open_url(redis_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 1200, 1);
    dlock_lock *b = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 1200, 1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    uint64_t ta = dlock_token(a);
    struct waiter w = {.l = b, .timeout = 10000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    usleep(3000 * 1000); /* more than two of b's leases */
    assert_int_equal(atomic_load(&w.done), 0);
    assert_int_equal(dlock_release(a), 0);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&w.rc), 0);
    assert_true(dlock_token(b) > ta);
    usleep(2000 * 1000);
    assert_int_equal(dlock_state(b), DLOCK_STATE_HELD);
    assert_int_equal(dlock_release(b), 0);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

static int64_t ms_since(int64_t t0)
{
    return (now_ns() - t0) / 1000000;
}

/* test_dead_waiter_and_dead_holder's holder: on its go byte, takes NAME
 * with a 500 ms lease, says so on ready, and waits to be killed. */
__attribute__((noreturn)) static void dead_holder_child(int go[2], int ready[2], const char *name)
{
    close(go[1]);
    close(ready[0]);
    char g;
    if (read(go[0], &g, 1) != 1)
        _exit(0);
    dlock_client *kc = NULL;
    if (dlock_client_open(&kc, redis_url, NULL) != 0) {
        fprintf(stderr, "holder child: open: %s\n", dlock_client_errmsg(NULL));
        _exit(1);
    }
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = 500;
    dlock_lock *kl = NULL;
    if (dlock_lock_new(&kl, kc, name, &o) != 0 || dlock_acquire(kl, 5000) != 0) {
        fprintf(stderr, "holder child: %s\n",
                kl ? dlock_lock_errmsg(kl) : dlock_client_errmsg(kc));
        _exit(1);
    }
    if (write(ready[1], "x", 1) != 1)
        _exit(2);
    pause();
    _exit(0);
}

/* A waiter that dies in the queue and is then handed the lock (its lease
 * 30 s) blocks it only until its registration lapses (3 s after its last
 * look), when a live waiter takes the uncollected hand-over back; a holder
 * that dies blocks only until its lease runs out. */
static void test_dead_waiter_and_dead_holder(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "dead");
    /* Both children are forked before this process opens a client: a fork
     * of a process whose client runs threads (the lease renewal) may
     * inherit a lock one of them holds. Each starts on its byte. */
    int go1[2], go2[2], ready[2];
    assert_int_equal(pipe(go1), 0);
    assert_int_equal(pipe(go2), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t holder_kid = fork();
    assert_true(holder_kid >= 0);
    if (holder_kid == 0)
        dead_holder_child(go2, ready, name);
    close(go2[0]);
    close(ready[1]); /* a child that dies before writing makes the read return 0 */
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        close(go1[1]);
        char g;
        if (read(go1[0], &g, 1) != 1)
            _exit(0);
        dlock_client *kc = open_url(redis_url);
        dlock_lock *kl = mk_lock(kc, name, DLOCK_EXCLUSIVE, 1, 30000, 1);
        dlock_acquire(kl, -1); /* queued first; then killed */
        _exit(0);
    }
    close(go1[0]);
    dlock_client *c = open_url(redis_url);
    dlock_lock *h = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, 1);
    assert_int_equal(dlock_acquire(h, 0), 0);
    assert_int_equal(write(go1[1], "g", 1), 1);
    close(go1[1]);
    dlock_info info;
    for (int k = 0; k < 3000 && (dlock_inspect(c, name, &info), info.waiters < 1); k++)
        usleep(1000);
    assert_int_equal(info.waiters, 1);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    dlock_lock *w = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, 1);
    struct waiter ws = {.l = w, .timeout = 15000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &ws), 0);
    usleep(100 * 1000);
    int64_t t0 = now_ns();
    assert_int_equal(dlock_release(h), 0); /* handed to the dead waiter */
    pthread_join(t, NULL);
    print_message("the dead waiter's hand-over taken back: the live waiter had the lock %lld ms "
                  "after the release\n",
                  (long long)ms_since(t0));
    if (atomic_load(&ws.rc) != 0) /* 15 s: half the dead waiter's lease */
        fail_msg("the live waiter did not get the lock a dead waiter was handed: %s",
                 dlock_lock_errmsg(w));
    assert_int_equal(dlock_release(w), 0);

    /* A holder killed while holding a 500 ms lease. */
    assert_int_equal(write(go2[1], "g", 1), 1);
    close(go2[1]);
    kid = holder_kid;
    char b;
    ssize_t got = read(ready[0], &b, 1);
    kill(kid, SIGKILL);
    int status = 0;
    waitpid(kid, &status, 0);
    if (got != 1)
        fail_msg("the holder child did not take the lock (exit status %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    assert_int_equal(dlock_acquire(w, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_acquire(w, 5000), 0);
    close(ready[0]);
    dlock_lock_free(w);
    dlock_lock_free(h);
    dlock_client_close(c);
}

/* A writer's release hands the lock to the run of readers queued behind it
 * (all of them, in one step) and not to the writer queued after them; the
 * lock's record (holder, time held, lease) is the new holder's. */
static void test_writer_hands_to_readers(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "w2r");
    dlock_client *c = open_url(redis_url);
    dlock_lock *w1 = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, 1);
    dlock_lock *w2 = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, 1);
    dlock_lock *r[2] = {mk_lock(c, name, DLOCK_SHARED, 1, 0, 1), mk_lock(c, name, DLOCK_SHARED, 1, 0, 1)};
    assert_int_equal(dlock_acquire(w1, 0), 0);
    struct waiter ws[3] = {{.l = r[0], .timeout = 10000},
                           {.l = r[1], .timeout = 10000},
                           {.l = w2, .timeout = 10000}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pthread_create(&t[i], NULL, waiter_main, &ws[i]), 0);
        usleep(100 * 1000); /* queued in this order */
    }
    dlock_info info;
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.waiters, 3);
    assert_int_equal(info.token, dlock_token(w1));
    assert_true(info.held_ms >= 250);
    assert_true(info.lease_ms > 0);
    assert_non_null(strstr(info.holder, "pid "));
    assert_int_equal(dlock_release(w1), 0);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    assert_int_equal(atomic_load(&ws[0].rc), 0);
    assert_int_equal(atomic_load(&ws[1].rc), 0);
    assert_true(dlock_token(r[1]) > dlock_token(r[0]));
    assert_true(dlock_token(r[0]) > dlock_token(w1));
    usleep(100 * 1000);
    assert_int_equal(atomic_load(&ws[2].done), 0);
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.holders, 2);
    assert_int_equal(info.waiters, 1);
    assert_int_equal(dlock_release(r[0]), 0);
    assert_int_equal(dlock_release(r[1]), 0);
    pthread_join(t[2], NULL);
    assert_int_equal(atomic_load(&ws[2].rc), 0);
    assert_true(dlock_token(w2) > dlock_token(r[1]));
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, dlock_token(w2));
    assert_true(info.held_ms >= 0 && info.held_ms < 1000);
    assert_int_equal(dlock_release(w2), 0);
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.held, 0);
    for (int i = 0; i < 2; i++)
        dlock_lock_free(r[i]);
    dlock_lock_free(w1);
    dlock_lock_free(w2);
    dlock_client_close(c);
}

/* The lock script as a function library (FCALL), and the fallback to a
 * script (EVALSHA) where the server has no functions: a Redis 6 stand-in,
 * a user who may not load functions, a Redlock whose masters differ; and a
 * server that lost the library (FUNCTION FLUSH: a restart without
 * persistence) gets it again. */
static void exchange(const char *url, const char *base)
{
    char name[64];
    unique(name, sizeof name, base);
    dlock_client *c = open_url(url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 2000, 1);
    dlock_lock *b = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 2000, 1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    struct waiter w = {.l = b, .timeout = 10000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    usleep(100 * 1000);
    dlock_info info;
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.held, 1);
    if (strncmp(url, "redlock:", 8) != 0) /* Redlock does not count them */
        assert_int_equal(info.waiters, 1);
    assert_int_equal(dlock_release(a), 0);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&w.rc), 0);
    assert_true(dlock_token(b) > dlock_token(a));
    assert_int_equal(dlock_release(b), 0);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

/* FUNCTION FLUSH on the single master; how many dlock libraries it has. */
static void flush_functions(redisContext *d)
{
    redisReply *r = redisCommand(d, "FUNCTION FLUSH");
    assert_true(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

static size_t dlock_libraries(redisContext *d)
{
    redisReply *r = redisCommand(d, "FUNCTION LIST LIBRARYNAME dlock_*");
    assert_true(r && r->type == REDIS_REPLY_ARRAY);
    size_t n = r->elements;
    freeReplyObject(r);
    return n;
}

static void test_functions_and_scripts(void **state)
{
    (void)state;
    const char *old_url = getenv("DLOCK_TEST_REDIS6");
    if (!old_url)
        skip();
    redisContext *d = direct();
    flush_functions(d);
    exchange(redis_url, "fcall");
    assert_int_equal(dlock_libraries(d), 1);

    /* The library vanishes under a held lock: release loads it again. */
    char name[64];
    unique(name, sizeof name, "flushed");
    dlock_client *c = open_url(redis_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    flush_functions(d);
    assert_int_equal(dlock_release(a), 0);
    assert_int_equal(rint_cmd(d, "EXISTS dlock:{%s}:lock", name), 0);
    dlock_lock_free(a);
    dlock_client_close(c);

    /* No functions on the server: the same, by EVALSHA. */
    exchange(old_url, "noffunc");
    redisContext *o = redisConnect("127.0.0.1", port_of(old_url));
    assert_true(o && !o->err);
    redisReply *r = redisCommand(o, "INFO commandstats");
    assert_true(r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cmdstat_evalsha:"));
    freeReplyObject(r);

    /* A user who may not load functions (but may run scripts). */
    r = redisCommand(d, "ACL SETUSER dlocknofn on >nofn-pw ~* +@all -function");
    assert_true(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    char url[256];
    snprintf(url, sizeof url, "redis://dlocknofn:nofn-pw@127.0.0.1:%d", redis_port);
    flush_functions(d);
    exchange(url, "nofnuser");
    assert_int_equal(dlock_libraries(d), 0);

    /* Redlock over masters with and without functions: every one of them
     * takes part (the lock is on all three). */
    if (redlock_url) {
        char rl[512];
        const char *first = strchr(redlock_url + strlen("redlock://"), ',');
        assert_non_null(first);
        snprintf(rl, sizeof rl, "redlock://127.0.0.1:%d,127.0.0.1:%d,%.*s", redis_port,
                 port_of(old_url), (int)(first - redlock_url - strlen("redlock://")),
                 redlock_url + strlen("redlock://"));
        exchange(rl, "mixed");
        unique(name, sizeof name, "mixed-held");
        c = open_url(rl);
        a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
        assert_int_equal(dlock_acquire(a, 0), 0);
        assert_int_equal(rint_cmd(d, "EXISTS dlock:{%s}:lock", name), 1);
        assert_int_equal(rint_cmd(o, "EXISTS dlock:{%s}:lock", name), 1);
        assert_int_equal(dlock_release(a), 0);
        /* A release returns once a quorum answered: the last master may
         * apply it a little later. */
        for (int k = 0; k < 200 && rint_cmd(o, "EXISTS dlock:{%s}:lock", name) != 0; k++)
            usleep(10 * 1000);
        assert_int_equal(rint_cmd(o, "EXISTS dlock:{%s}:lock", name), 0);
        dlock_lock_free(a);
        dlock_client_close(c);
    }
    redisFree(o);
    redisFree(d);
}

static void test_auth_db_and_reconnect(void **state)
{
    (void)state;
    redisContext *d = direct();
    redisReply *r = redisCommand(d, "ACL SETUSER dlocktest on >s3cret-pw ~* +@all");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    char url[256];
    snprintf(url, sizeof url, "redis://dlocktest:s3cret-pw@127.0.0.1:%d/3", redis_port);
    dlock_client *c = open_url(url);
    assert_null(strstr(dlock_client_url(c), "s3cret"));
    char name[64];
    unique(name, sizeof name, "authdb");
    dlock_lock *l = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 1500, -1);
    assert_int_equal(dlock_acquire(l, 0), 0);
    /* The lock lives in database 3. */
    assert_int_equal(rint_cmd(d, "SELECT 3"), -999);
    assert_int_equal(rint_cmd(d, "EXISTS dlock:{%s}:lock", name), 1);
    /* Drop every client connection: renewal reconnects and re-verifies. */
    r = redisCommand(d, "CLIENT KILL USER dlocktest");
    freeReplyObject(r);
    usleep(1200 * 1000);
    assert_int_equal(dlock_state(l), DLOCK_STATE_HELD);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);

    snprintf(url, sizeof url, "redis://dlocktest:wrong-pw@127.0.0.1:%d", redis_port);
    dlock_client *bad = NULL;
    assert_int_equal(dlock_client_open(&bad, url, NULL), DLOCK_EPERM);
    assert_null(strstr(dlock_client_errmsg(NULL), "wrong-pw"));
    assert_int_equal(dlock_client_open(&bad, "redis://127.0.0.1:1", NULL), DLOCK_EUNREACHABLE);
    assert_non_null(strstr(dlock_client_errmsg(NULL), "127.0.0.1:1"));
    redisFree(d);
}

static void test_sentinel(void **state)
{
    (void)state;
    if (!sentinel_url)
        skip();
    char name[64];
    unique(name, sizeof name, "sentinel");
    dlock_client *c = open_url(sentinel_url);
    dlock_lock *l = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(l, 0), 0);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
    /* Requiring replica acknowledgements: two replicas exist, three do not. */
    char url[512];
    snprintf(url, sizeof url, "%s?wait=2&wait_timeout=2000", sentinel_url);
    c = open_url(url);
    l = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(l, 0), 0);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
    /* Fewer replicas than asked for: the URL's fault (DLOCK_EURL), not the
     * network's. */
    snprintf(url, sizeof url, "%s?wait=3&wait_timeout=200", sentinel_url);
    c = open_url(url);
    l = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EURL);
    assert_non_null(strstr(dlock_lock_errmsg(l), "wait=3 asks for more replicas"));
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void test_cluster(void **state)
{
    (void)state;
    if (!cluster_url)
        skip();
    dlock_client *c = open_url(cluster_url);
    /* Names spread over all three masters: each lock's keys in one slot. */
    enum { N = 30 };
    dlock_lock *l[N];
    for (int i = 0; i < N; i++) {
        char name[64];
        unique(name, sizeof name, "cl");
        l[i] = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
        assert_int_equal(dlock_acquire(l[i], 0), 0);
        dlock_info info;
        assert_int_equal(dlock_inspect(c, name, &info), 0);
        assert_int_equal(info.held, 1);
    }
    dlock_lock *other = mk_lock(c, dlock_lock_name(l[7]), DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(other, 0), DLOCK_EBUSY);
    struct waiter ws = {.l = other, .timeout = 5000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &ws), 0);
    usleep(100 * 1000);
    assert_int_equal(dlock_release(l[7]), 0);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&ws.rc), 0);
    assert_int_equal(dlock_release(other), 0);
    dlock_lock_free(other);
    for (int i = 0; i < N; i++)
        dlock_lock_free(l[i]);
    dlock_client_close(c);
}

static redisReply *cmd_on(redisContext *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    return r;
}

static void expect_ok(redisContext *ctx, const char *fmt, const char *a, const char *b)
{
    redisReply *r = cmd_on(ctx, fmt, a, b);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", fmt, r->str);
    freeReplyObject(r);
}

/* A slot moves to another master under a client that knows the old map:
 * first half-way (ASK redirections), then for good (MOVED). */
static void test_cluster_resharding(void **state)
{
    (void)state;
    if (!cluster_url)
        skip();
    int ports[3];
    const char *p = strstr(cluster_url, "://") + 3;
    for (int i = 0; i < 3; i++) {
        p = strchr(p, ':') + 1;
        ports[i] = atoi(p);
    }
    redisContext *ctx[3];
    char id[3][64];
    for (int i = 0; i < 3; i++) {
        ctx[i] = redisConnect("127.0.0.1", ports[i]);
        assert_true(ctx[i] && !ctx[i]->err);
        redisReply *r = cmd_on(ctx[i], "CLUSTER MYID");
        snprintf(id[i], sizeof id[i], "%s", r->str);
        freeReplyObject(r);
    }
    char name[64], key[128];
    unique(name, sizeof name, "reshard");
    snprintf(key, sizeof key, "dlock:{%s}:lock", name);
    redisReply *r = cmd_on(ctx[0], "CLUSTER KEYSLOT %s", key);
    long long slot = r->integer;
    freeReplyObject(r);
    int owner = -1;
    for (int i = 0; i < 3 && owner < 0; i++) {
        r = cmd_on(ctx[i], "GET %s", key);
        if (r->type != REDIS_REPLY_ERROR)
            owner = i;
        freeReplyObject(r);
    }
    assert_true(owner >= 0);
    int to = (owner + 1) % 3;
    char slotstr[16];
    snprintf(slotstr, sizeof slotstr, "%lld", slot);

    dlock_client *c = open_url(cluster_url);
    dlock_lock *l = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(l, 0), 0);
    uint64_t t1 = dlock_token(l);
    assert_int_equal(dlock_release(l), 0);

    /* Half-way: keys moved, slot still the old master's (ASK). */
    expect_ok(ctx[to], "CLUSTER SETSLOT %s IMPORTING %s", slotstr, id[owner]);
    expect_ok(ctx[owner], "CLUSTER SETSLOT %s MIGRATING %s", slotstr, id[to]);
    r = cmd_on(ctx[owner], "CLUSTER GETKEYSINSLOT %s 1000", slotstr);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements >= 1); /* at least the token */
    for (size_t k = 0; k < r->elements; k++) {
        redisReply *m = cmd_on(ctx[owner], "MIGRATE 127.0.0.1 %d %s 0 5000", ports[to],
                               r->element[k]->str);
        if (m->type == REDIS_REPLY_ERROR)
            fail_msg("MIGRATE: %s", m->str);
        freeReplyObject(m);
    }
    freeReplyObject(r);
    assert_int_equal(dlock_acquire(l, 0), 0);
    uint64_t t2 = dlock_token(l);
    assert_true(t2 > t1);
    assert_int_equal(dlock_release(l), 0);

    /* For good: every master learns the new owner (MOVED). */
    for (int i = 0; i < 3; i++)
        expect_ok(ctx[i], "CLUSTER SETSLOT %s NODE %s", slotstr, id[to]);
    assert_int_equal(dlock_acquire(l, 0), 0);
    assert_true(dlock_token(l) > t2);
    dlock_info info;
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.held, 1);
    assert_int_equal(dlock_release(l), 0);
    r = cmd_on(ctx[to], "EXISTS dlock:{%s}:token", name);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    dlock_lock_free(l);
    dlock_client_close(c);
    for (int i = 0; i < 3; i++)
        redisFree(ctx[i]);
}

/* Run a servers.sh function (srv_restart NAME, ...) on our servers. */
static void servers(const char *fn, const char *name)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "bash -c '. \"%s/tests/servers.sh\"; srv_dir=\"%s\"; %s %s' >/dev/null",
             getenv("DLOCK_SOURCE_DIR"), getenv("DLOCK_TEST_SERVERS"), fn, name);
    assert_int_equal(system(cmd), 0);
}

static void kill_server(const char *name, int sig)
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

/* kill_server on each of names[0..n). */
static void signal_servers(const char *const *names, int n, int sig)
{
    for (int i = 0; i < n; i++)
        kill_server(names[i], sig);
}

/* The first sentinel of the URL stopped (it accepts connections and never
 * answers): the client asks every sentinel at once, so opening, inspecting
 * and locking go on with the others' answer instead of waiting out the op
 * timeout (20 s here) on the first. The bound is a hang's, not a speed:
 * asked one after the other, the open alone took the 20 s. */
static void test_sentinel_beside_stopped_sentinel(void **state)
{
    (void)state;
    if (!sentinel_url || !getenv("DLOCK_TEST_SERVERS"))
        skip();
    char name[64];
    unique(name, sizeof name, "sentinel-stopped");
    dlock_client_opts co;
    dlock_client_opts_init(&co);
    co.op_timeout_ms = 20000;
    kill_server("sentinel1", SIGSTOP);
    int64_t t0 = now_ns();
    dlock_client *c = NULL;
    int orc = dlock_client_open(&c, sentinel_url, &co), irc = -1, arc = -1, rrc = -1;
    dlock_info info;
    dlock_lock *a = NULL;
    if (orc == 0) {
        irc = dlock_inspect(c, name, &info);
        a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 5000, -1);
        arc = dlock_acquire(a, 5000);
        rrc = arc == 0 ? dlock_release(a) : -1;
    }
    int64_t took_ms = (now_ns() - t0) / 1000000;
    kill_server("sentinel1", SIGCONT);
    if (orc != 0 || irc != 0 || arc != 0 || rrc != 0 || took_ms >= 10000)
        fail_msg("first sentinel stopped: open %d, inspect %d, acquire %d, release %d after "
                 "%lld ms: %s",
                 orc, irc, arc, rrc, (long long)took_ms,
                 orc ? dlock_client_errmsg(NULL) : dlock_client_errmsg(c));
    assert_false(info.held);
    dlock_lock_free(a);
    dlock_client_close(c);
}

/* A failover: a lock taken with two replica acknowledgements survives the
 * death of its master. The client follows the sentinels to the promoted
 * replica, where the lock is still held by its owner: renewals go on, a
 * rival is refused, and after the release the next token is higher. */
static void test_sentinel_failover(void **state)
{
    (void)state;
    if (!sentinel_url || !getenv("DLOCK_SOURCE_DIR") || !getenv("DLOCK_TEST_SERVERS"))
        skip();
    char url[512], name[64];
    snprintf(url, sizeof url, "%s?wait=2&wait_timeout=2000", sentinel_url);
    unique(name, sizeof name, "failover");
    dlock_client *c = open_url(url);
    /* The rival asks for no acknowledgements: one replica is left after. */
    dlock_client *c2 = open_url(sentinel_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 10000, -1);
    dlock_lock *b = mk_lock(c2, name, DLOCK_EXCLUSIVE, 1, 10000, -1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    uint64_t ta = dlock_token(a);
    kill_server("smaster", SIGKILL); /* the master servers.sh started */
    int rc = DLOCK_EUNREACHABLE;
    for (int i = 0; i < 300 && rc != DLOCK_EBUSY; i++) {
        rc = dlock_acquire(b, 0); /* unreachable until a replica is promoted */
        assert_true(rc == DLOCK_EBUSY || rc == DLOCK_EUNREACHABLE);
        if (rc != DLOCK_EBUSY)
            usleep(100 * 1000);
    }
    assert_int_equal(rc, DLOCK_EBUSY);
    usleep(4000 * 1000); /* a renewal (every 3.3 s) on the new master */
    assert_int_equal(dlock_state(a), DLOCK_STATE_HELD);
    assert_int_equal(dlock_release(a), 0);
    assert_int_equal(dlock_acquire(b, 0), 0);
    assert_true(dlock_token(b) > ta);
    assert_int_equal(dlock_release(b), 0);
    servers("srv_restart", "smaster"); /* back, empty: the sentinels make it a replica */
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
    dlock_client_close(c2);
}

static void test_redlock(void **state)
{
    (void)state;
    if (!redlock_url || !getenv("DLOCK_SOURCE_DIR"))
        skip();
    char name[64];
    unique(name, sizeof name, "redlock");
    dlock_client *c = open_url(redlock_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    dlock_lock *b = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    dlock_lock *shared = NULL;
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.kind = DLOCK_SHARED;
    assert_int_equal(dlock_lock_new(&shared, c, name, &o), DLOCK_ENOTSUP);
    assert_int_equal(dlock_acquire(a, 0), 0);
    uint64_t t1 = dlock_token(a);
    assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
    dlock_info info;
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, t1);
    assert_int_equal(dlock_release(a), 0);
    assert_int_equal(dlock_acquire(b, 1000), 0);
    uint64_t t2 = dlock_token(b);
    assert_true(t2 > t1);
    assert_int_equal(dlock_release(b), 0);

    /* Two of five masters down: still safe and available; tokens rise. */
    kill_server("redlock1", SIGKILL);
    kill_server("redlock2", SIGKILL);
    dlock_lock *r = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 1500, -1);
    assert_int_equal(dlock_acquire(r, 1000), 0);
    assert_true(dlock_token(r) > t2);
    uint64_t t3 = dlock_token(r);
    usleep(2500 * 1000); /* renewed with a quorum of three */
    assert_int_equal(dlock_state(r), DLOCK_STATE_HELD);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(r), 0);
    /* A third one down: no quorum, the acquisition fails. */
    kill_server("redlock3", SIGKILL);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_EUNREACHABLE);
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    servers("srv_restart", "redlock1");
    servers("srv_restart", "redlock2");
    servers("srv_restart", "redlock3");
    /* The restarted three lost their counters, but the quorum of any later
     * acquisition includes one of the two that kept theirs. */
    assert_int_equal(dlock_acquire(a, 2000), 0);
    assert_true(dlock_token(a) > t3);
    assert_int_equal(dlock_release(a), 0);
    dlock_lock_free(r);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

/* A stopped master is left behind: each operation completes with the other
 * four, the stopped one's connection owes a reply for every request sent to
 * it, and once it runs again those late replies are skipped, never taken
 * for the answer to a later request. */
static void test_redlock_slow_master(void **state)
{
    (void)state;
    if (!redlock_url || !getenv("DLOCK_TEST_SERVERS"))
        skip();
    char name[64];
    unique(name, sizeof name, "redlock-slow");
    dlock_client *c = open_url(redlock_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 5000, -1);
    kill_server("redlock4", SIGSTOP);
    uint64_t last = 0;
    for (int i = 0; i < 40; i++) {
        if (i == 20)
            kill_server("redlock4", SIGCONT);
        assert_int_equal(dlock_acquire(a, 2000), 0);
        assert_true(dlock_token(a) > last);
        last = dlock_token(a);
        assert_int_equal(dlock_release(a), 0);
    }
    dlock_info info;
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.held, 0);
    assert_true(info.token >= last);
    if (getenv("DLOCK_SOURCE_DIR")) {
        /* Killed with our requests unread, the master resets the
         * connections: writing on them again must fail cleanly, not raise
         * SIGPIPE and kill this process. */
        kill_server("redlock4", SIGSTOP);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(dlock_acquire(a, 2000), 0);
            assert_int_equal(dlock_release(a), 0);
        }
        kill_server("redlock4", SIGKILL);
        servers("srv_restart", "redlock4");
        for (int i = 0; i < 10; i++) {
            assert_int_equal(dlock_acquire(a, 2000), 0);
            assert_true(dlock_token(a) > last);
            last = dlock_token(a);
            assert_int_equal(dlock_release(a), 0);
        }
    }
    dlock_lock_free(a);
    dlock_client_close(c);
}

/* Stopped masters (they accept connections and never answer) hold up
 * neither the client's open nor its first lock: the lock code is loaded on
 * every master at once, and the open goes on once a quorum answered. The
 * bounds are a hang's, not a speed: one load at a time took the 2 s op
 * timeout per stopped master (4 s with two stopped, 10 s with all five). */
static void test_redlock_open_beside_stopped_masters(void **state)
{
    (void)state;
    if (!redlock_url || !getenv("DLOCK_TEST_SERVERS"))
        skip();
    char name[64];
    unique(name, sizeof name, "redlock-open");
    const char *const all[] = {"redlock1", "redlock2", "redlock3", "redlock4", "redlock5"};
    signal_servers(all, 2, SIGSTOP);
    int64_t t0 = now_ns();
    dlock_client *c = NULL;
    int orc = dlock_client_open(&c, redlock_url, NULL);
    int arc = -1;
    dlock_lock *a = NULL;
    if (orc == 0) {
        a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 5000, -1);
        arc = dlock_acquire(a, 0);
    }
    int64_t took_ms = (now_ns() - t0) / 1000000;
    signal_servers(all, 2, SIGCONT);
    if (orc != 0 || arc != 0 || took_ms >= 3500)
        fail_msg("two masters stopped: open %d, acquire %d after %lld ms", orc, arc,
                 (long long)took_ms);
    assert_int_equal(dlock_release(a), 0);
    dlock_lock_free(a);
    dlock_client_close(c);

    signal_servers(all, 5, SIGSTOP);
    t0 = now_ns();
    c = NULL;
    orc = dlock_client_open(&c, redlock_url, NULL);
    took_ms = (now_ns() - t0) / 1000000;
    signal_servers(all, 5, SIGCONT);
    if (orc != DLOCK_EUNREACHABLE || took_ms >= 6000)
        fail_msg("every master stopped: open %d after %lld ms", orc, (long long)took_ms);
    if (c)
        dlock_client_close(c);
}

/* Status beside a stopped minority, from a client opened after the stop
 * (what `dlock status` does): what a quorum of masters says is the answer,
 * so neither the open's load of the lock code nor inspect waits out the op
 * timeout (20 s here) for the two masters that will not answer. It names
 * the holder and the token a quorum shows, then, released, the lock free.
 * The bound is a hang's, not a speed: before, the open and each inspect
 * took the whole 20 s. */
static void test_redlock_status_beside_stopped_minority(void **state)
{
    (void)state;
    if (!redlock_url || !getenv("DLOCK_TEST_SERVERS"))
        skip();
    char name[64];
    unique(name, sizeof name, "redlock-inspect");
    dlock_client_opts co;
    dlock_client_opts_init(&co);
    co.op_timeout_ms = 20000;
    dlock_client *c = NULL;
    if (dlock_client_open(&c, redlock_url, &co))
        fail_msg("open: %s", dlock_client_errmsg(NULL));
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 30000, -1);
    assert_int_equal(dlock_acquire(a, 5000), 0);
    uint64_t token = dlock_token(a);
    const char *const minority[] = {"redlock4", "redlock5"};
    signal_servers(minority, 2, SIGSTOP);
    dlock_info held, freed;
    int64_t t0 = now_ns();
    dlock_client *c2 = NULL;
    int orc = dlock_client_open(&c2, redlock_url, &co);
    int hrc = orc ? orc : dlock_inspect(c2, name, &held);
    int64_t held_ms = (now_ns() - t0) / 1000000;
    int rrc = dlock_release(a);
    t0 = now_ns();
    int frc = orc ? orc : dlock_inspect(c2, name, &freed);
    int64_t freed_ms = (now_ns() - t0) / 1000000;
    signal_servers(minority, 2, SIGCONT);
    if (hrc != 0 || held_ms >= 10000 || rrc != 0 || frc != 0 || freed_ms >= 10000)
        fail_msg("two masters stopped: open %d, open and inspect %d after %lld ms, release %d, "
                 "inspect %d after %lld ms: %s",
                 orc, hrc, (long long)held_ms, rrc, frc, (long long)freed_ms,
                 orc ? dlock_client_errmsg(NULL) : dlock_client_errmsg(c2));
    assert_true(held.held);
    assert_int_equal(held.token, token);
    assert_false(freed.held);
    assert_true(freed.token >= token);
    dlock_lock_free(a);
    dlock_client_close(c2);
    dlock_client_close(c);
}

/* A wait that saw the lock held, whose last tries a majority of masters
 * left unanswered (stopped here; a loaded machine does the same to the
 * 100 ms per-node timeout of a 1 s lease), timed out: the lock was taken.
 * It said "unreachable" once, which is for masters no try could reach
 * (test_late_grant_given_back's majority down). */
static void test_redlock_wait_timed_out_beside_stopped_masters(void **state)
{
    (void)state;
    if (!redlock_url || !getenv("DLOCK_TEST_SERVERS"))
        skip();
    char name[64];
    unique(name, sizeof name, "redlock-wait-stopped");
    dlock_client *c = open_url(redlock_url), *c2 = open_url(redlock_url);
    dlock_lock *h = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 5000, -1);
    dlock_lock *a = mk_lock(c2, name, DLOCK_EXCLUSIVE, 1, 1000, -1);
    assert_int_equal(dlock_acquire(h, 0), 0);
    struct waiter w = {.l = a, .timeout = 1500};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    usleep(500 * 1000); /* its tries hear a quorum say the lock is held */
    const char *const majority[] = {"redlock1", "redlock2", "redlock3"};
    signal_servers(majority, 3, SIGSTOP);
    pthread_join(t, NULL);
    signal_servers(majority, 3, SIGCONT);
    if (atomic_load(&w.rc) != DLOCK_ETIMEDOUT)
        fail_msg("a wait on a held lock, a majority stopped: %d: %s", atomic_load(&w.rc),
                 dlock_lock_errmsg(a));
    (void)dlock_release(h); /* (its renewals failed meanwhile: it may be lost) */
    dlock_lock_free(a);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c);
}

/* Validity counts from before the request was sent, never from the reply.
 * Single master: a grant that comes back after the whole lease could have
 * run out (the server was stopped while the request sat in its socket) is
 * given back, not reported as held. Redlock: a quorum stopped the same way
 * is given up on after the per-node timeout (a tenth of the lease), long
 * before the lease is at risk; its grants, arriving once it resumes, are
 * given back by the release sent to every master. Either way nothing stays
 * held and the lock then works with a higher token. */
static void late_grant_case(const char *url, const char *const *servers, int nservers,
                            const char *base, int want_rc, const char *want_msg,
                            int fails_before_resume)
{
    char name[64];
    unique(name, sizeof name, base);
    dlock_client *c = open_url(url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 300, 1);
    assert_int_equal(dlock_acquire(a, 0), 0); /* connections made, script loaded */
    uint64_t before = dlock_token(a);
    assert_int_equal(dlock_release(a), 0);
    for (int i = 0; i < nservers; i++)
        kill_server(servers[i], SIGSTOP);
    struct waiter w = {.l = a, .timeout = 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    usleep(800 * 1000); /* well past the 300 ms lease, within the 2 s op timeout */
    int done_before_resume = atomic_load(&w.done);
    for (int i = 0; i < nservers; i++)
        kill_server(servers[i], SIGCONT);
    pthread_join(t, NULL);
    const char *msg = dlock_lock_errmsg(a);
    if (atomic_load(&w.rc) != want_rc || !strstr(msg, want_msg))
        fail_msg("late grant reported as %d: %s", atomic_load(&w.rc), msg);
    assert_int_equal(done_before_resume, fails_before_resume);
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    dlock_info info;
    assert_int_equal(dlock_inspect(c, name, &info), 0);
    assert_int_equal(info.held, 0); /* given back, not left to expire */
    assert_int_equal(dlock_acquire(a, 0), 0);
    assert_true(dlock_token(a) > before);
    assert_int_equal(dlock_release(a), 0);
    dlock_lock_free(a);
    dlock_client_close(c);
}

static void test_late_grant_given_back(void **state)
{
    (void)state;
    if (!getenv("DLOCK_TEST_SERVERS"))
        skip();
    late_grant_case(redis_url, (const char *const[]){"single"}, 1, "late-grant", DLOCK_EBUSY,
                    "lease could have run out", 0);
    if (!redlock_url)
        return;
    const char *const majority[] = {"redlock1", "redlock2", "redlock3"};
    late_grant_case(redlock_url, majority, 3, "late-grant-rl", DLOCK_EUNREACHABLE, "only 2 of 5",
                    1);
    /* With the majority stopped, a waiting acquisition keeps to its own
     * deadline: giving back each try's grants does not wait for the
     * stopped masters (that took the 2 s op timeout per try). */
    char name[64];
    unique(name, sizeof name, "majority-down");
    dlock_client *c = open_url(redlock_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 300, 1);
    assert_int_equal(dlock_acquire(a, 0), 0);
    assert_int_equal(dlock_release(a), 0);
    for (int i = 0; i < 3; i++)
        kill_server(majority[i], SIGSTOP);
    int64_t t0 = now_ns() / 1000000;
    int rc = dlock_acquire(a, 400);
    int64_t took = now_ns() / 1000000 - t0;
    for (int i = 0; i < 3; i++)
        kill_server(majority[i], SIGCONT);
    if (rc != DLOCK_EUNREACHABLE || took > 1900)
        fail_msg("majority down: %d after %lld ms: %s", rc, (long long)took,
                 dlock_lock_errmsg(a));
    assert_int_equal(dlock_acquire(a, 2000), 0);
    assert_int_equal(dlock_release(a), 0);
    dlock_lock_free(a);
    dlock_client_close(c);
}

/* An operator's break: every holder loses the lock (its renewal says so),
 * the queued waiter gets it with a higher token, readers and permits go too,
 * and breaking a free lock says there was nothing to break. */
static void break_case(const char *url, const char *base, int shared_too)
{
    char name[64];
    unique(name, sizeof name, base);
    dlock_client *c = open_url(url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 900, 1);
    dlock_lock *b = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 900, 1);
    dlock_info info;
    assert_int_equal(dlock_break(c, name, &info), DLOCK_ENOTHELD);
    assert_int_equal(dlock_acquire(a, 0), 0);
    uint64_t ta = dlock_token(a);
    assert_int_equal(dlock_break(c, name, &info), 0);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.holders, 1);
    assert_int_equal(info.token, ta);
    assert_true(strncmp(info.holder, "pid ", 4) == 0);
    assert_int_equal(dlock_acquire(b, 2000), 0);
    assert_true(dlock_token(b) > ta);
    usleep(1200 * 1000); /* a's renewals (every 300 ms) find the lock gone */
    assert_int_equal(dlock_state(a), DLOCK_STATE_LOST);
    assert_int_equal(dlock_state(b), DLOCK_STATE_HELD);
    assert_int_equal(dlock_release(a), DLOCK_ELOST);
    assert_int_equal(dlock_release(b), 0);
    if (shared_too) {
        dlock_lock *r1 = mk_lock(c, name, DLOCK_SHARED, 1, 900, 1);
        dlock_lock *r2 = mk_lock(c, name, DLOCK_SHARED, 1, 900, 1);
        assert_int_equal(dlock_acquire(r1, 0), 0);
        assert_int_equal(dlock_acquire(r2, 0), 0);
        assert_int_equal(dlock_break(c, name, &info), 0);
        assert_int_equal(info.holders, 2);
        assert_int_equal(dlock_acquire(a, 0), 0); /* no readers left */
        assert_int_equal(dlock_release(a), 0);
        (void)dlock_release(r1);
        (void)dlock_release(r2);
        dlock_lock_free(r1);
        dlock_lock_free(r2);
    }
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

static void test_break(void **state)
{
    (void)state;
    break_case(redis_url, "break", 1);
    if (redlock_url)
        break_case(redlock_url, "break-redlock", 0);
}

/* A listening port whose accept queue is full: connects to it hang, as to
 * a host that is down (SYNs dropped), with no netem needed. */
static int blackhole(int *port, int *fill, int nfill)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 0), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    for (int i = 0; i < nfill; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        (void)connect(fill[i], (struct sockaddr *)&a, sizeof a);
    }
    usleep(100 * 1000);
    return l;
}

/* One master of five drops connection attempts: acquisitions go on with the
 * other four. Masters are connected in parallel and the hanging connect is
 * not waited for again, so no attempt outlives its 3 s lease (connecting to
 * one master after another, each up to the 10 s connect timeout, would). */
static void test_redlock_blackholed_master(void **state)
{
    (void)state;
    if (!redlock_url)
        skip();
    int port, fill[4];
    int l = blackhole(&port, fill, 4);
    /* First in the list: opening the client does not wait for it either. */
    char url[512];
    const char *rest = strchr(redlock_url, ',');
    assert_non_null(rest);
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d%s", port, rest);
    dlock_client_opts co;
    dlock_client_opts_init(&co);
    co.connect_timeout_ms = 10000;
    dlock_client *c = NULL;
    if (dlock_client_open(&c, url, &co))
        fail_msg("open %s: %s", url, dlock_client_errmsg(NULL));
    char name[64];
    unique(name, sizeof name, "redlock-hole");
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 3000, -1);
    uint64_t last_token = 0;
    for (int i = 0; i < 10; i++) {
        if (dlock_acquire(a, 0) != 0)
            fail_msg("attempt %d: %s", i, dlock_lock_errmsg(a));
        assert_true(dlock_token(a) > last_token);
        last_token = dlock_token(a);
        assert_int_equal(dlock_release(a), 0);
    }
    dlock_lock_free(a);
    dlock_client_close(c);
    for (int i = 0; i < 4; i++)
        close(fill[i]);
    close(l);
}

/* ---- issue 16: names with '}', bounds on stalled servers, messages ------ */

/* The library's own slot computation (src/backends/redis/cluster.c), to compare with
 * the server's CLUSTER KEYSLOT. */
unsigned rd_key_slot(const char *key, size_t len);

struct name_seen {
    const char *want;
    int seen;
};

static int see_name(const char *name, void *arg)
{
    struct name_seen *ns = arg;
    if (strcmp(name, ns->want) == 0)
        ns->seen++;
    return 0;
}

/* Every valid name works on every scheme: a '}' in it must not end the
 * key's hash tag (on a cluster the keys of one lock would land in
 * different slots: "keys that do not hash to the same slot"). */
static void brace_names_case(const char *url, bool cluster)
{
    static const char *const names[] = {"}x", "a}b", "{x}", "}", "{", "}}{{", "x{y}z}"};
    dlock_client *c1 = open_url(url), *c2 = open_url(url);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *name = names[i];
        dlock_lock *a = mk_lock(c1, name, DLOCK_EXCLUSIVE, 1, 900, 1);
        dlock_lock *b = mk_lock(c2, name, DLOCK_EXCLUSIVE, 1, 900, 1);
        if (dlock_acquire(a, 0) != 0)
            fail_msg("%s: name \"%s\": %s", url, name, dlock_lock_errmsg(a));
        uint64_t ta = dlock_token(a);
        assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
        dlock_info info;
        if (dlock_inspect(c2, name, &info) != 0)
            fail_msg("inspect \"%s\": %s", name, dlock_client_errmsg(c2));
        assert_int_equal(info.held, 1);
        assert_int_equal(info.token, ta);
        struct name_seen ns = {.want = name};
        assert_int_equal(dlock_list(c2, NULL, see_name, &ns), 0);
        assert_int_equal(ns.seen, 1);
        ns.seen = 0;
        assert_int_equal(dlock_list(c2, name, see_name, &ns), 0); /* as a prefix too */
        assert_int_equal(ns.seen, 1);
        assert_int_equal(dlock_break(c2, name, &info), 0);
        assert_int_equal(info.token, ta);
        assert_int_equal(dlock_acquire(b, 2000), 0);
        assert_true(dlock_token(b) > ta);
        assert_int_equal(dlock_release(a), DLOCK_ELOST); /* broken: not ours */
        assert_int_equal(dlock_release(b), 0);
        dlock_lock_free(a);
        dlock_lock_free(b);
        /* The keys' slot as the library computes it is the server's. */
        char key[256];
        size_t k = (size_t)snprintf(key, sizeof key, "dlock:{");
        for (const char *p = name; *p; p++)
            key[k++] = *p == '}' ? '\x7f' : *p;
        k += (size_t)snprintf(key + k, sizeof key - k, "}:token");
        if (cluster) {
            redisContext *d = redisConnect("127.0.0.1", port_of(strrchr(url, ',')));
            assert_true(d && !d->err);
            redisReply *r = redisCommand(d, "CLUSTER KEYSLOT %b", key, k);
            assert_true(r && r->type == REDIS_REPLY_INTEGER);
            assert_int_equal((unsigned)r->integer, rd_key_slot(key, k));
            freeReplyObject(r);
            redisFree(d);
        } else {
            redisContext *d = direct();
            redisReply *r = redisCommand(d, "EXISTS %b", key, k);
            assert_true(r && r->type == REDIS_REPLY_INTEGER);
            assert_int_equal(r->integer, 1); /* the encoded key holds the counter */
            freeReplyObject(r);
            redisFree(d);
        }
    }
    dlock_client_close(c1);
    dlock_client_close(c2);
}

static void test_brace_names(void **state)
{
    (void)state;
    brace_names_case(redis_url, false);
    if (cluster_url)
        brace_names_case(cluster_url, true);
}

static int port_file(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.port", getenv("DLOCK_TEST_SERVERS"), name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int port = 0;
    assert_int_equal(fscanf(f, "%d", &port), 1);
    fclose(f);
    return port;
}

/* A server that accepts and answers anything with garbage: "+OK\r\n"
 * (mode 0) or random bytes (mode 1). */
struct garbage {
    int lfd, stop[2], mode, port;
    pthread_t t;
};

static void *garbage_main(void *p)
{
    struct garbage *g = p;
    struct pollfd fds[64] = {{.fd = g->lfd, .events = POLLIN}, {.fd = g->stop[0], .events = POLLIN}};
    nfds_t n = 2;
    unsigned seed = 12345;
    for (;;) {
        if (poll(fds, n, -1) < 0)
            continue;
        if (fds[1].revents)
            break;
        if (fds[0].revents) {
            int c = accept(g->lfd, NULL, NULL);
            if (c >= 0 && n < 64)
                fds[n++] = (struct pollfd){.fd = c, .events = POLLIN};
            else if (c >= 0)
                close(c);
        }
        for (nfds_t i = 2; i < n; i++) {
            if (!fds[i].revents)
                continue;
            char buf[4096];
            ssize_t k = read(fds[i].fd, buf, sizeof buf);
            if (k <= 0) {
                close(fds[i].fd);
                fds[i] = fds[--n];
                fds[i].revents = 0; /* looked at in the next round */
                continue;
            }
            if (g->mode == 0) {
                (void)send(fds[i].fd, "+OK\r\n", 5, MSG_NOSIGNAL);
            } else {
                char junk[24];
                for (size_t j = 0; j < sizeof junk; j++)
                    junk[j] = (char)rand_r(&seed);
                (void)send(fds[i].fd, junk, sizeof junk, MSG_NOSIGNAL);
            }
        }
    }
    for (nfds_t i = 2; i < n; i++)
        close(fds[i].fd);
    return NULL;
}

static void garbage_start(struct garbage *g, int mode)
{
    g->mode = mode;
    g->lfd = listen_loopback(&g->port);
    assert_int_equal(pipe(g->stop), 0);
    assert_int_equal(pthread_create(&g->t, NULL, garbage_main, g), 0);
}

static void garbage_stop(struct garbage *g)
{
    assert_int_equal(write(g->stop[1], "x", 1), 1);
    pthread_join(g->t, NULL);
    close(g->stop[0]);
    close(g->stop[1]);
    close(g->lfd);
}

/* -w is a bound whatever the server does: against a stopped master an
 * acquisition returns by its deadline (plus the 100 ms margin; 1 s allowed
 * here for scheduling), and what its unanswered requests did is undone
 * once the server runs again (the lock is free for the next one at once,
 * not after a 30 s lease or a 3 s registration). */
static void test_stalled_master_bound(void **state)
{
    (void)state;
    if (!getenv("DLOCK_TEST_SERVERS"))
        skip();
    char name[64];
    unique(name, sizeof name, "stalled");
    dlock_client *c = open_url(redis_url);
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, 1);
    dlock_lock *b = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, 1);
    assert_int_equal(dlock_acquire(a, 0), 0); /* connected, code loaded */
    assert_int_equal(dlock_release(a), 0);
    static const int waits[] = {1000, 3000};
    for (size_t i = 0; i < 2; i++) {
        kill_server("single", SIGSTOP);
        int64_t t0 = now_ns();
        int rc = dlock_acquire(a, waits[i]);
        int64_t took = ms_since(t0);
        kill_server("single", SIGCONT);
        print_message("acquire(%d) against a stopped redis: %s after %lld ms: %s\n", waits[i],
                      dlock_err_name(rc), (long long)took, dlock_lock_errmsg(a));
        if ((rc != DLOCK_ETIMEDOUT && rc != DLOCK_EUNREACHABLE) || took > waits[i] + 1000)
            fail_msg("acquire(%d) against a stopped redis: %d after %lld ms", waits[i], rc,
                     (long long)took);
        assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
        t0 = now_ns();
        if (dlock_acquire(b, 2000) != 0)
            fail_msg("left behind after the stall: %s", dlock_lock_errmsg(b));
        assert_int_equal(dlock_release(b), 0);
    }
    /* Stopped while a waiter blocks (BLPOP): the same bound, and its
     * registration is withdrawn (a release does not hand it the lock). */
    assert_int_equal(dlock_acquire(b, 0), 0);
    struct waiter w = {.l = a, .timeout = 3000};
    pthread_t t;
    int64_t t0 = now_ns();
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    usleep(300 * 1000);
    kill_server("single", SIGSTOP);
    pthread_join(t, NULL);
    int64_t took = ms_since(t0);
    kill_server("single", SIGCONT);
    int rc = atomic_load(&w.rc);
    print_message("waiting acquire(3000), redis stopped after 300 ms: %s after %lld ms\n",
                  dlock_err_name(rc), (long long)took);
    if ((rc != DLOCK_ETIMEDOUT && rc != DLOCK_EUNREACHABLE) || took > 3000 + 1000)
        fail_msg("waiting acquire(3000) against a stopped redis: %d after %lld ms", rc,
                 (long long)took);
    usleep(100 * 1000);
    assert_int_equal(dlock_release(b), 0);
    if (dlock_acquire(b, 2000) != 0)
        fail_msg("the timed-out waiter was handed the lock: %s", dlock_lock_errmsg(b));
    assert_int_equal(dlock_release(b), 0);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

/* A renewal waits no longer than its lease has left: one master of a
 * cluster that stops answering writes (CLIENT PAUSE, which leaves the
 * cluster bus alone) must not hold the client's renewal thread for the
 * whole 10 s op timeout, so that a lock on another master keeps its lease. */
static void test_renewal_bounded_by_lease(void **state)
{
    (void)state;
    if (!cluster_url)
        skip();
    int ports[3];
    const char *p = strstr(cluster_url, "://") + 3;
    for (int i = 0; i < 3; i++) {
        p = strchr(p, ':') + 1;
        ports[i] = atoi(p);
    }
    redisContext *ctx[3];
    for (int i = 0; i < 3; i++) {
        ctx[i] = redisConnect("127.0.0.1", ports[i]);
        assert_true(ctx[i] && !ctx[i]->err);
    }
    /* Two names on two different masters. */
    char nx[64], ny[64];
    int ox = -1, oy = -1;
    for (int tries = 0; tries < 100 && (oy < 0 || oy == ox); tries++) {
        char name[64], key[128];
        unique(name, sizeof name, "renew-bound");
        snprintf(key, sizeof key, "dlock:{%s}:lock", name);
        int owner = -1;
        for (int i = 0; i < 3 && owner < 0; i++) {
            redisReply *r = cmd_on(ctx[i], "GET %s", key);
            if (r->type != REDIS_REPLY_ERROR)
                owner = i;
            freeReplyObject(r);
        }
        if (ox < 0) {
            ox = owner;
            snprintf(nx, sizeof nx, "%s", name);
        } else {
            oy = owner;
            snprintf(ny, sizeof ny, "%s", name);
        }
    }
    assert_true(ox >= 0 && oy >= 0 && ox != oy);
    char url[512];
    snprintf(url, sizeof url, "%s?op_timeout_ms=10000", cluster_url);
    dlock_client *c = open_url(url);
    dlock_lock *x = mk_lock(c, nx, DLOCK_EXCLUSIVE, 1, 600, -1);
    dlock_lock *y = mk_lock(c, ny, DLOCK_EXCLUSIVE, 1, 1500, -1);
    assert_int_equal(dlock_acquire(x, 0), 0);
    assert_int_equal(dlock_acquire(y, 0), 0);
    redisReply *r = cmd_on(ctx[ox], "CLIENT PAUSE 3000 WRITE");
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    usleep(3300 * 1000);
    /* x's master did not answer for longer than x's lease: lost; y's
     * renewals went on meanwhile. */
    assert_int_equal(dlock_state(x), DLOCK_STATE_LOST);
    if (dlock_state(y) != DLOCK_STATE_HELD)
        fail_msg("a lock on another master lost its lease while a renewal waited");
    assert_int_equal(dlock_release(y), 0);
    (void)dlock_release(x);
    dlock_lock_free(x);
    dlock_lock_free(y);
    dlock_client_close(c);
    for (int i = 0; i < 3; i++)
        redisFree(ctx[i]);
}

/* Redlock with one stopped and one garbage-speaking master of three: no
 * quorum can form, and a 3 s wait still ends by its deadline. Answers that
 * are not Redis's say what was expected and what came. */
static void test_redlock_stalled_and_garbage(void **state)
{
    (void)state;
    if (!redlock_url || !getenv("DLOCK_TEST_SERVERS"))
        skip();
    struct garbage junk, ok;
    garbage_start(&junk, 1);
    garbage_start(&ok, 0);
    char url[512];
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             port_file("redlock5"), port_file("redlock4"), junk.port);
    dlock_client *c = open_url(url);
    char name[64];
    unique(name, sizeof name, "redlock-stalled");
    dlock_lock *a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    kill_server("redlock4", SIGSTOP);
    int64_t t0 = now_ns();
    int rc = dlock_acquire(a, 3000);
    int64_t took = ms_since(t0);
    kill_server("redlock4", SIGCONT);
    print_message("redlock acquire(3000), one master stopped, one speaking garbage: %s after "
                  "%lld ms: %s\n",
                  dlock_err_name(rc), (long long)took, dlock_lock_errmsg(a));
    if ((rc != DLOCK_ETIMEDOUT && rc != DLOCK_EUNREACHABLE) || took > 3000 + 1000)
        fail_msg("redlock acquire(3000): %d after %lld ms", rc, (long long)took);
    dlock_lock_free(a);
    dlock_client_close(c);

    /* "+OK" to everything: a one-line message naming what was expected. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ok.port);
    dlock_client *bad = NULL;
    assert_int_equal(dlock_client_open(&bad, url, NULL), DLOCK_EPROTO);
    const char *msg = dlock_client_errmsg(NULL);
    if (!strstr(msg, "expected") || !strstr(msg, "got status \"OK\""))
        fail_msg("open against a +OK server: %s", msg);
    assert_null(strchr(msg, '\n'));
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             port_file("redlock5"), ok.port, junk.port);
    c = open_url(url);
    a = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_EUNREACHABLE);
    msg = dlock_lock_errmsg(a);
    if (!strstr(msg, "expected an array of 2 integers from the lock script, got status \"OK\""))
        fail_msg("redlock with a +OK master: %s", msg);
    dlock_lock_free(a);
    dlock_client_close(c);
    garbage_stop(&junk);
    garbage_stop(&ok);
}

/* A server that was reached but cannot do what the URL asks is a
 * configuration error (DLOCK_EURL: the CLI's exit 64), not "unreachable". */
static void test_config_errors(void **state)
{
    (void)state;
    char url[512];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/99", redis_port); /* 16 databases */
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open(&c, url, NULL), DLOCK_EURL);
    const char *msg = dlock_client_errmsg(NULL);
    if (!strstr(msg, "database 99") || !strstr(msg, "out of range"))
        fail_msg("bad database: %s", msg);
    /* The single master has no replicas: wait=1 can never be met. */
    snprintf(url, sizeof url, "%s?wait=1&wait_timeout=200", redis_url);
    c = open_url(url);
    char name[64];
    unique(name, sizeof name, "wait-none");
    dlock_lock *l = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EURL);
    msg = dlock_lock_errmsg(l);
    if (!strstr(msg, "wait=1") || !strstr(msg, "0 connected"))
        fail_msg("wait=1 without replicas: %s", msg);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    dlock_lock_free(l);
    dlock_client_close(c);
    c = open_url(redis_url);
    l = mk_lock(c, name, DLOCK_EXCLUSIVE, 1, 0, -1);
    assert_int_equal(dlock_acquire(l, 0), 0); /* given back */
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

int main(void)
{
    redis_url = getenv("DLOCK_TEST_REDIS");
    sentinel_url = getenv("DLOCK_TEST_SENTINEL");
    cluster_url = getenv("DLOCK_TEST_CLUSTER");
    redlock_url = getenv("DLOCK_TEST_REDLOCK");
    if (!redis_url) {
        fprintf(stderr, "test_redis: run me through tests/servers.sh (DLOCK_TEST_REDIS unset)\n");
        return 1;
    }
    redis_port = port_of(redis_url);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_after_expiry_spares_new_holder),
        cmocka_unit_test(test_renewal_keeps_short_lease),
        cmocka_unit_test(test_renewal_never_recreates),
        cmocka_unit_test(test_renewal_stops_at_release),
        cmocka_unit_test(test_bad_ttl),
        cmocka_unit_test(test_long_wait_then_handover),
        cmocka_unit_test(test_dead_waiter_and_dead_holder),
        cmocka_unit_test(test_writer_hands_to_readers),
        cmocka_unit_test(test_functions_and_scripts),
        cmocka_unit_test(test_auth_db_and_reconnect),
        cmocka_unit_test(test_sentinel),
        cmocka_unit_test(test_sentinel_failover),
        cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_cluster_resharding),
        cmocka_unit_test(test_redlock),
        cmocka_unit_test(test_redlock_slow_master),
        cmocka_unit_test(test_redlock_open_beside_stopped_masters),
        cmocka_unit_test(test_redlock_status_beside_stopped_minority),
        cmocka_unit_test(test_sentinel_beside_stopped_sentinel),
        cmocka_unit_test(test_redlock_wait_timed_out_beside_stopped_masters),
        cmocka_unit_test(test_redlock_blackholed_master),
        cmocka_unit_test(test_break),
        cmocka_unit_test(test_late_grant_given_back),
        cmocka_unit_test(test_brace_names),
        cmocka_unit_test(test_stalled_master_bound),
        cmocka_unit_test(test_renewal_bounded_by_lease),
        cmocka_unit_test(test_redlock_stalled_and_garbage),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
