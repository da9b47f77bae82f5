/* SPDX-License-Identifier: MIT */
/*
 * test_many.c — one client holding many leases at once, on real servers
 * (a single Redis, a cluster, a Redlock of five masters, two memcached
 * servers that share the names, PostgreSQL's lease table): renewals go in
 * batches, so that none is lost while the servers answer; a lock that a
 * batch's reply says is no longer ours is lost at once; when the servers
 * stop answering (SIGSTOP) every lock is reported lost, each by its own
 * deadline; Redlock's are all kept with one master of five stopped. Runs
 * inside tests/servers.sh (redis, cluster, redlock, memcached, postgres).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "testutil.h"
#include "harness/tools.h"

/* Enough locks that one renewal per round trip could not keep them (2 000
 * round trips within ttl/3 = 500 ms under valgrind), few enough to take
 * quickly. */
#define NLOCKS 2000
/* The leases' length: 1500 ms, or DLOCK_TEST_MANY_TTL_MS. Under valgrind
 * (tests/CMakeLists.txt sets 4000 there), beside another valgrind test on
 * two cores, a 1500 ms lease lost 18 of 2000 Redlock locks: a renewal batch
 * of 2000 locks over three masters then outlasts a third of it. */
static int ttl_ms = 1500;
/* Slack for a loaded machine (valgrind, sanitizers, tests beside this one
 * on two cores): the watchdog may wake late; a loss reported only when a
 * renewal request times out (op_timeout_ms=5000 below) would be 5 s late.
 * 1000 ms, or DLOCK_TEST_MANY_SLACK_MS: under valgrind (2500 there), beside
 * another valgrind test and a CPU hog, the last of 2000 frozen locks was
 * told 1.1 s past its deadline (valgrind runs one thread at a time). */
static int slack_ms = 1000;

typedef struct target {
    const char *label;
    char url[1024];
    const char *servers[5]; /* servers.sh names to freeze, NULL-ended */
} target;

static target targets[5];

static void freeze(const target *t, int sig)
{
    for (int i = 0; t->servers[i]; i++)
        server_signal(t->servers[i], sig);
}

/* Loss callbacks: how many, and the latest moment past its lock's own
 * deadline that one came (the deadline read just before freezing). */
typedef struct held {
    dlock_lock *l;
    int64_t deadline_ms; /* monotonic: acquisition or last renewal + valid_ms */
    _Atomic int64_t told_ms;
} held;

static atomic_int loss_notices; /* loss callbacks */

static void on_lost(dlock_lock *l, void *arg)
{
    (void)l;
    held *h = arg;
    atomic_store(&h->told_ms, now_ms());
    atomic_fetch_add(&loss_notices, 1);
}

static held *hold_many(dlock_client *c, const char *prefix, int n)
{
    held *hs = calloc((size_t)n, sizeof *hs);
    assert_non_null(hs);
    for (int i = 0; i < n; i++) {
        dlock_lock_opts o;
        dlock_lock_opts_init(&o);
        o.ttl_ms = ttl_ms;
        o.on_lost = on_lost;
        o.on_lost_arg = &hs[i];
        char name[64];
        /* every fifth name odd: quotes, a comma, braces, a space (they
         * travel in array literals, hash tags and memcached keys) */
        snprintf(name, sizeof name, i % 5 ? "%s-%d-%d" : "%s-%d-%d \"q\",{x} y'", prefix,
                 (int)getpid(), i);
        assert_int_equal(dlock_lock_new(&hs[i].l, c, name, &o), 0);
        if (dlock_acquire(hs[i].l, 2000) != 0)
            fail_msg("acquire %s: %s", name, dlock_lock_errmsg(hs[i].l));
    }
    return hs;
}

static void free_many(held *hs, int n)
{
    for (int i = 0; i < n; i++)
        dlock_lock_free(hs[i].l);
    free(hs);
}

static int count_held(const held *hs, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += dlock_state(hs[i].l) == DLOCK_STATE_HELD;
    return k;
}

/* Held for several leases while the servers answer: none lost, and the
 * renewals went in batches (far fewer backend calls than renewals). With
 * stopped (a servers.sh name, or NULL): that server is stopped (SIGSTOP)
 * once they are held, for the whole time: a minority of Redlock's masters. */
static void none_lost_beside(target *t, const char *stopped)
{
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open(&c, t->url, NULL), 0);
    atomic_store(&loss_notices, 0);
    held *hs = hold_many(c, "many-kept", NLOCKS);
    if (stopped)
        server_signal(stopped, SIGSTOP);
    sleep_ms(3 * ttl_ms);
    int kept = count_held(hs, NLOCKS);
    dh_renewals rs;
    dh_renewal_stats(c, &rs);
    fprintf(stderr, "# %s%s%s: %d of %d held after %d ms; %" PRIu64 " renewals in %" PRIu64
                    " calls\n",
            t->label, stopped ? ", stopped: " : "", stopped ? stopped : "", kept, NLOCKS,
            3 * ttl_ms, rs.renewed, rs.calls);
    /* a loss says why (the first few, and when) */
    for (int i = 0, said = 0; i < NLOCKS && said < 3 && kept != NLOCKS; i++)
        if (dlock_state(hs[i].l) != DLOCK_STATE_HELD) {
            fprintf(stderr, "# %s: lost %" PRId64 " ms before the count: %s\n", t->label,
                    now_ms() - atomic_load(&hs[i].told_ms), dlock_lock_errmsg(hs[i].l));
            said++;
        }
    assert_int_equal(kept, NLOCKS);
    assert_int_equal(atomic_load(&loss_notices), 0);
    /* every lock renewed at least twice in three leases */
    assert_true(rs.renewed >= 2u * NLOCKS);
    assert_true(rs.calls * 20 < rs.renewed);
    /* and the servers agree: another client cannot take them */
    dlock_client *other = NULL;
    assert_int_equal(dlock_client_open(&other, t->url, NULL), 0);
    for (int i = 0; i < NLOCKS; i += NLOCKS / 10) {
        dlock_lock *o = NULL;
        assert_int_equal(dlock_lock_new(&o, other, dlock_lock_name(hs[i].l), NULL), 0);
        assert_int_equal(dlock_acquire(o, 0), DLOCK_EBUSY);
        dlock_lock_free(o);
    }
    dlock_client_close(other);
    for (int i = 0; i < NLOCKS; i++)
        assert_int_equal(dlock_release(hs[i].l), 0);
    free_many(hs, NLOCKS);
    dlock_client_close(c);
}

static void none_lost(target *t)
{
    none_lost_beside(t, NULL);
}

/* A lock broken by someone else is reported lost at its next renewal (a
 * batch's reply says so), not at its deadline; the others stay held. */
static void broken_lost_at_once(target *t)
{
    dlock_client *c = NULL, *other = NULL;
    assert_int_equal(dlock_client_open(&c, t->url, NULL), 0);
    assert_int_equal(dlock_client_open(&other, t->url, NULL), 0);
    atomic_store(&loss_notices, 0);
    held *hs = hold_many(c, "many-broken", NLOCKS);
    int victim = NLOCKS / 2;
    dlock_info info;
    int64_t broken_at = now_ms();
    int64_t deadline = broken_at + dlock_valid_ms(hs[victim].l);
    assert_int_equal(dlock_break(other, dlock_lock_name(hs[victim].l), &info), 0);
    /* its next renewal (within ttl/3) says so, well before its lease
     * would have run out */
    struct pollfd p = {.fd = dlock_lost_fd(hs[victim].l), .events = POLLIN};
    assert_true(p.fd >= 0);
    assert_int_equal(poll(&p, 1, ttl_ms * 3), 1);
    int64_t told = now_ms();
    fprintf(stderr, "# %s: broken lock told lost %" PRId64 " ms after the break, %" PRId64
                    " ms before its deadline: %s\n",
            t->label, told - broken_at, deadline - told, dlock_lock_errmsg(hs[victim].l));
    assert_int_equal(dlock_state(hs[victim].l), DLOCK_STATE_LOST);
    const char *why = dlock_lock_errmsg(hs[victim].l);
    assert_non_null(strstr(why, "lost"));
    assert_null(strstr(why, "no renewal succeeded")); /* the reply, not the clock */
    assert_true(told <= deadline + slack_ms);
    sleep_ms(ttl_ms);
    assert_int_equal(count_held(hs, NLOCKS), NLOCKS - 1);
    assert_int_equal(atomic_load(&loss_notices), 1);
    assert_int_equal(dlock_release(hs[victim].l), DLOCK_ELOST);
    free_many(hs, NLOCKS);
    dlock_client_close(other);
    dlock_client_close(c);
}

/* The servers stop answering: every lock is reported lost (callback,
 * state), each no later than its own deadline. */
static void all_lost_when_frozen(target *t)
{
    if (!t->servers[0])
        skip(); /* PostgreSQL: stopping the postmaster leaves its sessions running */
    dlock_client *c = NULL;
    char url[1200];
    /* requests may wait longer than a lease: the watchdog, not a timeout,
     * must tell */
    snprintf(url, sizeof url, "%s%sop_timeout_ms=5000", t->url, strchr(t->url, '?') ? "&" : "?");
    assert_int_equal(dlock_client_open(&c, url, NULL), 0);
    atomic_store(&loss_notices, 0);
    held *hs = hold_many(c, "many-frozen", NLOCKS);
    sleep_ms(ttl_ms / 2);
    freeze(t, SIGSTOP);
    /* a reply sent before the freeze has arrived by now: no lease grows */
    sleep_ms(50);
    int64_t t0 = now_ms();
    for (int i = 0; i < NLOCKS; i++)
        hs[i].deadline_ms = t0 + dlock_valid_ms(hs[i].l);
    int64_t until = now_ms() + ttl_ms + 3000;
    while (atomic_load(&loss_notices) < NLOCKS && now_ms() < until)
        sleep_ms(20);
    freeze(t, SIGCONT);
    int64_t late = 0;
    for (int i = 0; i < NLOCKS; i++) {
        int64_t told = atomic_load(&hs[i].told_ms);
        if (told && told - hs[i].deadline_ms > late)
            late = told - hs[i].deadline_ms;
    }
    fprintf(stderr, "# %s: %d of %d told lost; latest %" PRId64 " ms past its deadline\n",
            t->label, atomic_load(&loss_notices), NLOCKS, late);
    assert_int_equal(atomic_load(&loss_notices), NLOCKS);
    assert_int_equal(count_held(hs, NLOCKS), 0);
    assert_true(late <= slack_ms);
    for (int i = 0; i < NLOCKS; i++)
        assert_int_equal(dlock_release(hs[i].l), DLOCK_ELOST);
    free_many(hs, NLOCKS);
    dlock_client_close(c);
}

#define PER_TARGET(fn)                                                                       \
    static void fn##_single(void **s)                                                        \
    {                                                                                        \
        (void)s;                                                                             \
        fn(&targets[0]);                                                                     \
    }                                                                                        \
    static void fn##_cluster(void **s)                                                       \
    {                                                                                        \
        (void)s;                                                                             \
        fn(&targets[1]);                                                                     \
    }                                                                                        \
    static void fn##_redlock(void **s)                                                       \
    {                                                                                        \
        (void)s;                                                                             \
        fn(&targets[2]);                                                                     \
    }                                                                                        \
    static void fn##_memcached(void **s)                                                     \
    {                                                                                        \
        (void)s;                                                                             \
        fn(&targets[3]);                                                                     \
    }                                                                                        \
    static void fn##_postgres(void **s)                                                      \
    {                                                                                        \
        (void)s;                                                                             \
        fn(&targets[4]);                                                                     \
    }
PER_TARGET(none_lost)
PER_TARGET(broken_lost_at_once)
PER_TARGET(all_lost_when_frozen)

/* One of Redlock's five masters stopped while 2000 locks are held: the
 * renewals go on at the other four's pace (the stopped one's connection
 * cannot hold the batch up, whether it waits to connect or to write). */
static void none_lost_redlock_beside_a_stopped_master(void **s)
{
    (void)s;
    none_lost_beside(&targets[2], "redlock4");
}

static int resume_redlock4(void **s)
{
    (void)s;
    server_signal("redlock4", SIGCONT);
    return 0;
}

int main(void)
{
    const char *single = getenv("DLOCK_TEST_REDIS"), *cluster = getenv("DLOCK_TEST_CLUSTER"),
               *redlock = getenv("DLOCK_TEST_REDLOCK"), *mc = getenv("DLOCK_TEST_MEMCACHED2"),
               *pg = getenv("DLOCK_TEST_POSTGRES_LEASE");
    const char *ttl = getenv("DLOCK_TEST_MANY_TTL_MS");
    if (ttl && atoi(ttl) >= 1500)
        ttl_ms = atoi(ttl);
    const char *slack = getenv("DLOCK_TEST_MANY_SLACK_MS");
    if (slack && atoi(slack) >= 1000)
        slack_ms = atoi(slack);
    if (!single || !cluster || !redlock || !mc || !pg || !getenv("DLOCK_TEST_SERVERS")) {
        fprintf(stderr, "test_many: run inside tests/servers.sh run redis cluster redlock "
                        "memcached postgres -- ...\n");
        return 77;
    }
    targets[0] = (target){.label = "redis", .servers = {"single"}};
    snprintf(targets[0].url, sizeof targets[0].url, "%s", single);
    targets[1] = (target){.label = "cluster", .servers = {"cluster1", "cluster2", "cluster3"}};
    snprintf(targets[1].url, sizeof targets[1].url, "%s", cluster);
    /* three of five masters: no quorum can renew */
    targets[2] = (target){.label = "redlock", .servers = {"redlock1", "redlock2", "redlock3"}};
    snprintf(targets[2].url, sizeof targets[2].url, "%s", redlock);
    targets[3] = (target){.label = "memcached", .servers = {"memcached", "memcached2"}};
    snprintf(targets[3].url, sizeof targets[3].url, "%s", mc);
    targets[4] = (target){.label = "postgres-lease"};
    snprintf(targets[4].url, sizeof targets[4].url, "%s", pg);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(none_lost_single),
        cmocka_unit_test(broken_lost_at_once_single),
        cmocka_unit_test(all_lost_when_frozen_single),
        cmocka_unit_test(none_lost_cluster),
        cmocka_unit_test(broken_lost_at_once_cluster),
        cmocka_unit_test(all_lost_when_frozen_cluster),
        cmocka_unit_test(none_lost_redlock),
        cmocka_unit_test(broken_lost_at_once_redlock),
        cmocka_unit_test(all_lost_when_frozen_redlock),
        cmocka_unit_test_teardown(none_lost_redlock_beside_a_stopped_master, resume_redlock4),
        cmocka_unit_test(none_lost_memcached),
        cmocka_unit_test(broken_lost_at_once_memcached),
        cmocka_unit_test(all_lost_when_frozen_memcached),
        cmocka_unit_test(none_lost_postgres),
        cmocka_unit_test(broken_lost_at_once_postgres),
        cmocka_unit_test(all_lost_when_frozen_postgres),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
