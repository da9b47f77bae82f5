/* SPDX-License-Identifier: MIT */
/*
 * test_postgres.c — the PostgreSQL backend's own behaviour (mode=advisory)
 * against a real server started by tests/servers.sh
 * (DLOCK_TEST_POSTGRES=postgres://dlock:s3cret@127.0.0.1:P/dlock; beside it
 * DLOCK_TEST_POSTGRES_RO, a role that may not create tables nor touch
 * dlock's, DLOCK_TEST_POSTGRES_ADMIN, the superuser, and
 * DLOCK_TEST_SERVERS/postgres.{pid,cmd,port} to restart the server). The
 * lock contract itself is tests/test_conformance.c's; what is here needs
 * PostgreSQL: names that look like SQL, LIKE patterns in list prefixes,
 * the longest names, conflicts and timeouts in the server's lock manager,
 * shared locks, sessions ended from the server's side
 * (pg_terminate_backend, a restart, dlock_break) — held ones and pooled
 * idle ones —, waiters cancelled on the server, roles without rights,
 * unknown roles and databases, a key collision in the lock table, election
 * values, the URL's modes. (A release that frees at once, a wrong
 * password, listeners that are not PostgreSQL or never answer are the
 * conformance suite's, on every mode's URL.) The test
 * reads the server's own account with psql as the superuser (pg_locks,
 * pg_stat_activity, the lock table). Run it as
 *
 *   tests/servers.sh run postgres -- tests/test_postgres [TEST-NAME-PATTERN]
 *
 * Without DLOCK_TEST_POSTGRES it is skipped (exit 77).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "testutil.h"
#include "token_crash.h"

static const char *pg_url;    /* postgres://dlock:s3cret@127.0.0.1:P/dlock */
static const char *ro_url;    /* postgres://dlock_ro:ro@127.0.0.1:P/dlock */
static const char *admin_url; /* postgres://postgres:pgpw@127.0.0.1:P/dlock */

/* pg_url?QUERY */
static void url_with(char *buf, size_t len, const char *base, const char *query)
{
    int n = snprintf(buf, len, "%s?%s", base, query);
    assert_true(n > 0 && (size_t)n < len);
}

/* ---- the server's own account --------------------------------------------------- */


/* s as an SQL string literal: '...' with its quotes doubled */
static void sql_lit(char *buf, size_t len, const char *s)
{
    size_t j = 0;
    assert_true(len > 2);
    buf[j++] = '\'';
    for (; *s; s++) {
        assert_true(j + 3 < len);
        if (*s == '\'')
            buf[j++] = '\'';
        buf[j++] = *s;
    }
    buf[j++] = '\'';
    buf[j] = '\0';
}

/* One statement as the superuser through psql (unaligned, tuples only):
 * its output into out, psql's exit status returned. */
static int __attribute__((format(printf, 3, 4)))
psql(char *out, size_t len, const char *fmt, ...)
{
    char sql[2048], qsql[4200], qurl[512], cmd[5000];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof sql);
    shell_quote(qsql, sizeof qsql, sql);
    shell_quote(qurl, sizeof qurl, admin_url);
    n = snprintf(cmd, sizeof cmd, "psql %s -X -q -A -t -v ON_ERROR_STOP=1 -c %s 2>&1", qurl,
                 qsql);
    assert_true(n > 0 && (size_t)n < sizeof cmd);
    return run_cmd(out, len, cmd);
}

/* A statement that must succeed; its output (one value) as a number. */
static long long __attribute__((format(printf, 1, 2))) psql_num(const char *fmt, ...)
{
    char sql[2048], out[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof sql);
    int rc = psql(out, sizeof out, "%s", sql);
    if (rc != 0)
        fail_msg("psql %s: exit %d: %s", sql, rc, out);
    char *end = NULL;
    long long v = strtoll(out, &end, 10);
    if (end == out || *end)
        fail_msg("psql %s: not a number: \"%s\"", sql, out);
    return v;
}

/* pg_locks of NAME's advisory key (read from the lock table), as in the
 * backend: an int8 key is named by its halves, objsubid 1. */
#define LOCKS_OF_NAME                                                                        \
    "FROM pg_locks l JOIN dlock t ON l.locktype = 'advisory' AND l.objsubid = 1 AND "        \
    "l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND "     \
    "l.classid = ((t.key >> 32) & 4294967295)::oid AND l.objid = (t.key & 4294967295)::oid " \
    "WHERE t.name = "

/* Granted advisory locks on NAME's key. */
static long long granted_on(const char *name)
{
    char lit[512];
    sql_lit(lit, sizeof lit, name);
    return psql_num("SELECT count(*) " LOCKS_OF_NAME "%s AND l.granted", lit);
}

/* Advisory lock requests still waiting anywhere on the server. */
static long long waiting_anywhere(void)
{
    return psql_num("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
}

/* Until f() == want (at most limit_ms): whether it was. */
static bool wait_count(long long (*f)(void), long long want, int limit_ms)
{
    int64_t end = now_ms() + limit_ms;
    do {
        if (f() == want)
            return true;
        sleep_ms(50);
    } while (now_ms() < end);
    return false;
}

static bool wait_granted(const char *name, long long want, int limit_ms)
{
    int64_t end = now_ms() + limit_ms;
    do {
        if (granted_on(name) == want)
            return true;
        sleep_ms(50);
    } while (now_ms() < end);
    return false;
}

/* The backend pid of the only session that holds NAME. */
static long long holder_pid(const char *name)
{
    char lit[512], out[256];
    sql_lit(lit, sizeof lit, name);
    int rc = psql(out, sizeof out, "SELECT l.pid " LOCKS_OF_NAME "%s AND l.granted", lit);
    if (rc != 0)
        fail_msg("psql: holder of %s: exit %d: %s", name, rc, out);
    if (!out[0] || strchr(out, '\n'))
        fail_msg("%s: not exactly one holding session: \"%s\"", name, out);
    return strtoll(out, NULL, 10);
}

/* ---- messages ------------------------------------------------------------------- */

static void assert_no_password(const char *msg)
{
    assert_non_null(msg);
    if (strstr(msg, "s3cret") || strstr(msg, "n0t-it-pw") || strstr(msg, "pgpw") ||
        strstr(msg, ":ro@") || strstr(msg, "pw-not-shown"))
        fail_msg("a password leaked: %s", msg);
}

/* Open url expecting failure: its code (checked against want unless 0),
 * the message checked (one line, no password) and the time bounded. */
static int expect_open_fails(const char *url, int want, const char *what)
{
    dlock_client *c = (dlock_client *)1;
    int64_t t0 = now_ms();
    int rc = dlock_client_open(&c, url, NULL);
    int64_t took = now_ms() - t0;
    const char *msg = dlock_client_errmsg(NULL);
    fprintf(stderr, "# %s: %s after %" PRId64 " ms: %s\n", what, dlock_err_name(rc), took, msg);
    if (rc == 0) {
        dlock_client_close(c);
        fail_msg("%s: the open succeeded", what);
    }
    assert_true(rc < 0);
    if (want && rc != want)
        fail_msg("%s: %s, expected %s: %s", what, dlock_err_name(rc), dlock_err_name(want), msg);
    assert_null(c);
    assert_true(took < 5000);
    assert_non_null(msg);
    assert_true(msg[0] != '\0');
    assert_null(strchr(msg, '\n'));
    assert_no_password(msg);
    return rc;
}

/* dlock_list's callback: the names it was given. */
struct seen {
    int n;
    char names[64][256];
};

static int collect(const char *name, void *arg)
{
    struct seen *s = arg;
    if (s->n < 64)
        snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
    s->n++;
    return 0;
}

static bool seen_has(const struct seen *s, const char *name)
{
    for (int i = 0; i < s->n && i < 64; i++)
        if (strcmp(s->names[i], name) == 0)
            return true;
    return false;
}

/* ---- 1. names that look like SQL ------------------------------------------------ */

/* Names are parameters, never SQL: quotes, comments, semicolons and LIKE's
 * wildcards lock and unlock like any name, each its own key; the table is
 * still there afterwards; a list prefix with % or _ matches only itself. */
static void test_sql_injection_names(void **state)
{
    (void)state;
    char tag[64];
    unique(tag, sizeof tag, "");
    static const char *const bases[] = {
        "x'); DROP TABLE dlock; --",
        "a\" OR 1=1",
        "' OR '1'='1",
        "\"; DELETE FROM dlock WHERE 'a'='a",
        "$1::bigint); SELECT pg_sleep(10); --",
        "a%",
        "a_",
        "ab",
        "ax",
        "100% _done_",
        "E'\\\\x' -- not a name",
    };
    enum { N = sizeof bases / sizeof bases[0] };
    char names[N][256];
    dlock_client *c1 = open_url(pg_url), *c2 = open_url(pg_url);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "%s%s", bases[i], tag);
        if (strchr(names[i], '\\')) {
            /* '\\' is not a lock name: refused before any SQL */
            dlock_lock *bad = NULL;
            assert_int_equal(dlock_lock_new(&bad, c1, names[i], NULL), DLOCK_ENAME);
            assert_null(bad);
            dlock_info info;
            assert_int_equal(dlock_inspect(c1, names[i], &info), DLOCK_ENAME);
            snprintf(names[i], sizeof names[i], "E'x' -- not a name%s", tag);
        }
        char why[128];
        if (dlock_name_valid(names[i], why, sizeof why) != 0)
            fail_msg("%s: %s", names[i], why);
    }
    dlock_lock *ls[N], *os[N];
    uint64_t tokens[N];
    for (int i = 0; i < N; i++) { /* every one at once: no two share a key */
        ls[i] = mk(c1, names[i], NULL, NULL);
        os[i] = mk(c2, names[i], NULL, NULL);
        acquire_ok(ls[i], 0);
        tokens[i] = dlock_token(ls[i]);
        assert_true(tokens[i] > 0);
    }
    for (int i = 0; i < N; i++) {
        int rc = dlock_acquire(os[i], 0);
        if (rc != DLOCK_EBUSY)
            fail_msg("\"%s\" held by c1, c2's try: %s: %s", names[i], dlock_err_name(rc),
                     dlock_lock_errmsg(os[i]));
        dlock_info info = inspect(c2, names[i]);
        assert_int_equal(info.held, 1);
        assert_int_equal(info.token, tokens[i]);
        assert_int_equal(granted_on(names[i]), 1);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(dlock_release(ls[i]), 0);
        acquire_ok(os[i], 2000); /* at once: test_release_frees_at_once */
        uint64_t otok = dlock_token(os[i]);
        assert_true(otok > tokens[i]);
        assert_int_equal(dlock_release(os[i]), 0);
        acquire_ok(ls[i], 2000);
        assert_true(dlock_token(ls[i]) > otok);
        assert_int_equal(dlock_release(ls[i]), 0);
    }

    /* The table is still there, and holds each name as it was written. */
    assert_int_equal(psql_num("SELECT count(*) FROM pg_class WHERE relname = 'dlock' AND "
                              "relkind = 'r'"),
                     1);
    for (int i = 0; i < N; i++) {
        char lit[512];
        sql_lit(lit, sizeof lit, names[i]);
        /* (written by os[i]'s first grant: a handle's later grants leave
         * it, and a free lock's inspect gives no token) */
        long long tok = psql_num("SELECT token FROM dlock WHERE name = %s", lit);
        assert_true(tok > (long long)tokens[i]);
        dlock_info info = inspect(c2, names[i]);
        assert_int_equal(info.held, 0);
        assert_int_equal(info.token, 0);
    }

    /* LIKE's wildcards in a prefix are literal. */
    char pfx[128], want_pct[128], want_us[128], ab[128], ax[128];
    snprintf(want_pct, sizeof want_pct, "a%%%s", tag);
    snprintf(want_us, sizeof want_us, "a_%s", tag);
    snprintf(ab, sizeof ab, "ab%s", tag);
    snprintf(ax, sizeof ax, "ax%s", tag);
    struct seen *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_int_equal(dlock_list(c1, "a%", collect, s), 0);
    for (int j = 0; j < s->n && j < 64; j++)
        if (strncmp(s->names[j], "a%", 2) != 0)
            fail_msg("dlock_list(\"a%%\") returned \"%s\"", s->names[j]);
    assert_true(seen_has(s, want_pct));
    assert_false(seen_has(s, ab));
    memset(s, 0, sizeof *s);
    assert_int_equal(dlock_list(c1, "a_", collect, s), 0);
    for (int j = 0; j < s->n && j < 64; j++)
        if (strncmp(s->names[j], "a_", 2) != 0)
            fail_msg("dlock_list(\"a_\") returned \"%s\"", s->names[j]);
    assert_true(seen_has(s, want_us));
    assert_false(seen_has(s, ax));
    assert_false(seen_has(s, ab));
    /* a '\\' in a prefix is literal too (and no name has one) */
    memset(s, 0, sizeof *s);
    assert_int_equal(dlock_list(c1, "a\\", collect, s), 0);
    assert_int_equal(s->n, 0);
    memset(s, 0, sizeof *s);
    assert_int_equal(dlock_list(c1, "%", collect, s), 0);
    for (int j = 0; j < s->n && j < 64; j++)
        if (s->names[j][0] != '%')
            fail_msg("dlock_list(\"%%\") returned \"%s\"", s->names[j]);
    /* the injection name is found by its own prefix */
    memset(s, 0, sizeof *s);
    snprintf(pfx, sizeof pfx, "x'); DROP TABLE dlock; --%s", tag);
    assert_int_equal(dlock_list(c2, pfx, collect, s), 0);
    assert_int_equal(s->n, 1);
    assert_string_equal(s->names[0], names[0]);
    free(s);

    for (int i = 0; i < N; i++) {
        dlock_lock_free(ls[i]);
        dlock_lock_free(os[i]);
    }
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 2. the longest names ------------------------------------------------------- */

static void test_long_names(void **state)
{
    (void)state;
    char tag[64], a[256], b[256], too_long[256];
    unique(tag, sizeof tag, "long");
    /* 200 bytes, quotes included; a and b differ in their last byte only */
    memset(a, 'n', 200);
    a[200] = '\0';
    memcpy(a, tag, strlen(tag));
    memcpy(a + 100, "'\";--%_", 7);
    a[199] = 'A';
    memcpy(b, a, sizeof b);
    b[199] = 'B';
    memcpy(too_long, a, 200);
    too_long[200] = 'x';
    too_long[201] = '\0';
    assert_int_equal(strlen(a), 200);
    assert_int_equal(dlock_name_valid(a, NULL, 0), 0);
    assert_int_equal(dlock_name_valid(too_long, NULL, 0), DLOCK_ENAME);

    dlock_client *c1 = open_url(pg_url), *c2 = open_url(pg_url);
    dlock_lock *bad = NULL;
    assert_int_equal(dlock_lock_new(&bad, c1, too_long, NULL), DLOCK_ENAME);
    assert_null(bad);

    dlock_lock *la = mk(c1, a, NULL, NULL), *lb = mk(c1, b, NULL, NULL);
    dlock_lock *oa = mk(c2, a, NULL, NULL);
    acquire_ok(la, 0);
    acquire_ok(lb, 0); /* another key */
    uint64_t ta = dlock_token(la);
    assert_int_equal(dlock_acquire(oa, 0), DLOCK_EBUSY);
    dlock_info info = inspect(c2, a);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, ta);
    char lit[512];
    sql_lit(lit, sizeof lit, a);
    assert_int_equal(psql_num("SELECT length(name) FROM dlock WHERE name = %s", lit), 200);
    struct seen *s = calloc(1, sizeof *s);
    assert_non_null(s);
    char pfx[256];
    snprintf(pfx, sizeof pfx, "%.199s", a);
    assert_int_equal(dlock_list(c2, pfx, collect, s), 0);
    assert_int_equal(s->n, 2);
    assert_true(seen_has(s, a));
    assert_true(seen_has(s, b));
    free(s);

    assert_int_equal(dlock_release(la), 0);
    acquire_ok(oa, 2000);
    assert_true(dlock_token(oa) > ta);
    assert_int_equal(dlock_release(oa), 0);
    assert_int_equal(dlock_release(lb), 0);
    dlock_lock_free(oa);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 3. exclusive conflicts, timeouts, hand-over --------------------------------- */

static void test_exclusive_busy_timeout(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "excl");
    dlock_client *c1 = open_url(pg_url), *c2 = open_url(pg_url);
    dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
    acquire_ok(h, 0);
    uint64_t t1 = dlock_token(h);
    assert_int_equal(dlock_state(h), DLOCK_STATE_HELD);
    assert_int_equal(dlock_valid_ms(h), -1); /* a session: no deadline on our clock */

    assert_int_equal(dlock_acquire(w, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_state(w), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_token(w), 0);

    int64_t t0 = now_ms();
    int rc = dlock_acquire(w, 300);
    int64_t took = now_ms() - t0;
    fprintf(stderr, "# timed acquire of a held lock: %s after %" PRId64 " ms: %s\n",
            dlock_err_name(rc), took, dlock_lock_errmsg(w));
    assert_int_equal(rc, DLOCK_ETIMEDOUT);
    assert_true(took >= 280);
    assert_true(took < 5000);
    assert_int_equal(dlock_state(w), DLOCK_STATE_IDLE);
    /* the waiter that timed out is not left in the server's queue */
    if (!wait_count(waiting_anywhere, 0, 2000))
        fail_msg("%lld advisory requests still waiting after the timeout", waiting_anywhere());
    assert_int_equal(granted_on(name), 1);

    /* Re-entry keeps the token. */
    acquire_ok(h, 0);
    assert_int_equal(dlock_held_count(h), 2);
    assert_int_equal(dlock_token(h), t1);
    assert_int_equal(dlock_release(h), 0);
    assert_int_equal(dlock_acquire(w, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(h), 0);
    assert_int_equal(dlock_release(h), DLOCK_ENOTHELD);

    acquire_ok(w, 2000); /* at once: test_release_frees_at_once */
    uint64_t t2 = dlock_token(w);
    assert_true(t2 > t1);

    /* A waiter gets it when the holder lets go, with a higher token. */
    struct waiter ws;
    waiter_start(&ws, h, 10000, false);
    wait_waiters(c1, name, 1, 5000);
    assert_int_equal(dlock_release(w), 0);
    assert_int_equal(waiter_join(&ws), 0);
    assert_true(dlock_token(h) > t2);
    assert_int_equal(dlock_release(h), 0);
    assert_true(wait_granted(name, 0, 2000));
    dlock_lock_free(w);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* A wait for ever on a session whose last wait was timed: the session's
 * lock_timeout is set again (advisory_send leaves it alone only where it
 * is already the wait's), or the wait would end after the old bound. */
static void test_wait_forever_after_timed_wait(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "forever");
    dlock_client *c1 = open_url(pg_url), *c2 = open_url(pg_url);
    dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
    /* c2's one session opened (and the handle's first grant, which writes
     * its row, made), then granted within a 1 s bound: the session keeps
     * lock_timeout at about 1 s (twice: the second grant is a bare one) */
    acquire_ok(w, -1);
    assert_int_equal(dlock_release(w), 0);
    for (int i = 0; i < 2; i++) {
        acquire_ok(w, 1000);
        assert_int_equal(dlock_release(w), 0);
    }
    acquire_ok(h, 0);
    struct waiter ws;
    waiter_start(&ws, w, -1, true);
    wait_waiters(c1, name, 1, 5000);
    usleep(2500 * 1000); /* past the old bound, twice over */
    assert_int_equal(atomic_load(&ws.done), 0);
    assert_int_equal(dlock_release(h), 0);
    assert_int_equal(waiter_join(&ws), 0);
    /* and a timed wait after it is bounded again */
    acquire_ok(h, 0);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(w, 300), DLOCK_ETIMEDOUT);
    assert_true(now_ms() - t0 < 5000);
    assert_int_equal(dlock_release(h), 0);
    dlock_lock_free(w);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 4. shared locks ------------------------------------------------------------ */

static void test_shared_readers_block_writer(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "rw");
    dlock_client *c1 = open_url(pg_url), *c2 = open_url(pg_url), *c3 = open_url(pg_url);
    unsigned caps = dlock_client_caps(c1);
    assert_true(caps & DLOCK_CAP_SHARED);
    assert_true(caps & DLOCK_CAP_FENCING);
    assert_true(caps & DLOCK_CAP_SESSION);
    assert_false(caps & DLOCK_CAP_SEMAPHORE);
    assert_false(caps & DLOCK_CAP_LEASE);
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.kind = DLOCK_SHARED;
    dlock_lock *r1 = NULL, *r2 = NULL;
    assert_int_equal(dlock_lock_new(&r1, c1, name, &o), 0);
    assert_int_equal(dlock_lock_new(&r2, c2, name, &o), 0);
    dlock_lock *w = mk(c3, name, NULL, NULL);

    acquire_ok(r1, 0);
    acquire_ok(r2, 0);
    assert_true(dlock_token(r2) > dlock_token(r1));
    dlock_info info = inspect(c3, name);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.holders, 2);
    assert_int_equal(granted_on(name), 2);
    assert_int_equal(dlock_acquire(w, 0), DLOCK_EBUSY);

    struct waiter ws;
    waiter_start(&ws, w, 10000, false);
    wait_waiters(c3, name, 1, 5000);
    assert_int_equal(dlock_release(r1), 0);
    sleep_ms(300);
    assert_int_equal(atomic_load(&ws.done), 0); /* one reader still holds */
    assert_int_equal(dlock_state(w), DLOCK_STATE_WAITING);
    info = inspect(c3, name);
    assert_int_equal(info.holders, 1);
    assert_int_equal(info.waiters, 1);
    uint64_t rtok = dlock_token(r2);
    assert_int_equal(dlock_release(r2), 0);
    int rc = waiter_join(&ws);
    if (rc != 0)
        fail_msg("writer: %s: %s", dlock_err_name(rc), dlock_lock_errmsg(w));
    assert_true(dlock_token(w) > rtok);
    info = inspect(c3, name);
    assert_int_equal(info.holders, 1);
    assert_int_equal(info.waiters, 0);
    /* readers wait for the writer in turn */
    assert_int_equal(dlock_acquire(r1, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(w), 0);
    acquire_ok(r1, 2000);
    assert_int_equal(dlock_release(r1), 0);

    dlock_lock_free(w);
    dlock_lock_free(r2);
    dlock_lock_free(r1);
    dlock_client_close(c3);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 5. the holder's session ended by the server ---------------------------------- */

static void test_session_terminated(void **state)
{
    (void)state;
    char name[64], out[256];
    unique(name, sizeof name, "terminated");
    dlock_client *c1 = open_url(pg_url), *c2 = open_url(pg_url);
    atomic_store(&lost_calls, 0);
    dlock_lock *h = mk(c1, name, count_lost, NULL), *o = mk(c2, name, NULL, NULL);
    acquire_ok(h, 0);
    uint64_t token = dlock_token(h);
    long long pid = holder_pid(name);
    assert_true(wait_lost(h, 0) < 0);

    int64_t t0 = now_ms();
    int rc = psql(out, sizeof out, "SELECT pg_terminate_backend(%lld)", pid);
    if (rc != 0 || strcmp(out, "t") != 0)
        fail_msg("pg_terminate_backend(%lld): exit %d: %s", pid, rc, out);
    int64_t told = wait_lost(h, 5000);
    fprintf(stderr, "# holder told %" PRId64 " ms after pg_terminate_backend returned (%" PRId64
            " ms after it was sent)\n", told, now_ms() - t0);
    assert_true(told >= 0);
    assert_int_equal(dlock_state(h), DLOCK_STATE_LOST);
    wait_lost_calls(1, 2000);
    assert_int_equal(atomic_load(&lost_calls), 1);

    /* Another client gets it, with a higher token. */
    acquire_ok(o, 2000);
    assert_true(dlock_token(o) > token);
    assert_int_equal(granted_on(name), 1);
    assert_true(holder_pid(name) != pid);

    /* The holder's release says so; its handle works again. */
    rc = dlock_release(h);
    fprintf(stderr, "# release after the session ended: %s: %s\n", dlock_err_name(rc),
            dlock_lock_errmsg(h));
    assert_int_equal(rc, DLOCK_ELOST);
    assert_int_equal(dlock_state(h), DLOCK_STATE_IDLE);
    assert_int_equal(dlock_acquire(h, 0), DLOCK_EBUSY);
    uint64_t otok = dlock_token(o);
    assert_int_equal(dlock_release(o), 0);
    acquire_ok(h, 2000);
    assert_true(dlock_token(h) > otok);
    assert_int_equal(dlock_release(h), 0);
    assert_int_equal(atomic_load(&lost_calls), 1);
    dlock_lock_free(o);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 7. a cancelled waiter leaves the server's queue -------------------------------- */

struct canceller {
    dlock_lock *l;
    int delay_ms;
    int64_t at; /* when dlock_cancel was called */
    pthread_t t;
};

static void *canceller_main(void *p)
{
    struct canceller *k = p;
    sleep_ms(k->delay_ms);
    k->at = now_ms();
    dlock_cancel(k->l);
    return NULL;
}

static void test_cancel_leaves_no_waiter(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "cancel");
    dlock_client *c1 = open_url(pg_url), *c2 = open_url(pg_url);
    dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
    acquire_ok(h, 0);
    uint64_t token = dlock_token(h);
    static const int timeouts[] = {-1, 30000};
    for (int i = 0; i < 2; i++) {
        /* once queued on the server (seen in pg_locks), cancelled from another thread */
        struct waiter ws;
        waiter_start(&ws, w, timeouts[i], false);
        wait_waiters(c1, name, 1, 5000);
        assert_int_equal(waiting_anywhere(), 1);
        struct canceller k = {.l = w, .delay_ms = 100};
        assert_int_equal(pthread_create(&k.t, NULL, canceller_main, &k), 0);
        int rc = waiter_join(&ws);
        int64_t took = now_ms() - k.at;
        assert_int_equal(pthread_join(k.t, NULL), 0);
        fprintf(stderr, "# cancelled waiter (timeout %d): %s %" PRId64 " ms after the cancel: %s\n",
                timeouts[i], dlock_err_name(rc), took, dlock_lock_errmsg(w));
        assert_int_equal(rc, DLOCK_ECANCELED);
        assert_true(took < 2000);
        assert_int_equal(dlock_state(w), DLOCK_STATE_IDLE);
        if (!wait_count(waiting_anywhere, 0, 2000))
            fail_msg("%lld advisory requests still waiting 2 s after the cancel",
                     waiting_anywhere());
        assert_int_equal(granted_on(name), 1);
        assert_int_equal(dlock_state(h), DLOCK_STATE_HELD);
    }
    /* The handle works again once the holder lets go. */
    assert_int_equal(dlock_release(h), 0);
    acquire_ok(w, 2000);
    assert_true(dlock_token(w) > token);
    assert_int_equal(dlock_release(w), 0);
    dlock_lock_free(w);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 8. a role without rights ---------------------------------------------------- */

/* Upgrading: a role that may not create tables, on the tables of a version
 * before token epochs (dlock_token_run missing): the open fails with
 * DLOCK_EPERM naming the new tables, not only dlock_names (which is there);
 * once their owner makes them, the role locks. */
static void test_role_without_create_on_older_tables(void **state)
{
    (void)state;
    char out[512];
    dlock_client *c = open_url(pg_url); /* the tables exist */
    assert_int_equal(psql(out, sizeof out, "ALTER TABLE dlock_token_run RENAME TO dlock_run_away"),
                     0);
    expect_open_fails(ro_url, DLOCK_EPERM, "a role without CREATE, the token epochs' tables missing");
    char msg[600];
    snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(NULL));
    assert_int_equal(psql(out, sizeof out, "ALTER TABLE dlock_run_away RENAME TO dlock_token_run"),
                     0);
    if (!strstr(msg, "dlock_token_run") || !strstr(msg, "dlock_token_epoch") ||
        !strstr(msg, "may not create"))
        fail_msg("the message does not name the missing tables: %s", msg);
    dlock_client *ro = open_url(ro_url);
    dlock_client_close(ro);
    dlock_client_close(c);
}

static void test_role_without_rights(void **state)
{
    (void)state;
    char url[512], name[64];
    unique(name, sizeof name, "ro");
    /* the table exists (made by its owner) */
    dlock_client *c = open_url(pg_url);

    /* A table it would have to create. */
    url_with(url, sizeof url, ro_url, "table=dlock_other");
    expect_open_fails(url, DLOCK_EPERM, "a role without CREATE, a new table");
    const char *msg = dlock_client_errmsg(NULL);
    if (!strstr(msg, "dlock_other") || !strstr(msg, "may not create"))
        fail_msg("the message does not name the table and say it may not be created: %s", msg);
    assert_int_equal(psql_num("SELECT count(*) FROM pg_class WHERE relname = 'dlock_other'"), 0);

    /* The existing table, on which it has no rights. */
    dlock_client *ro = open_url(ro_url);
    dlock_lock *l = mk(ro, name, NULL, NULL);
    static const int timeouts[] = {0, 1000};
    for (int i = 0; i < 2; i++) {
        int rc = dlock_acquire(l, timeouts[i]);
        fprintf(stderr, "# a role without rights on the table, acquire(%d): %s: %s\n",
                timeouts[i], dlock_err_name(rc), dlock_lock_errmsg(l));
        assert_int_equal(rc, DLOCK_EPERM);
        if (!strstr(dlock_lock_errmsg(l), "permission denied"))
            fail_msg("the message does not say permission denied: %s", dlock_lock_errmsg(l));
        assert_no_password(dlock_lock_errmsg(l));
        assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    }
    /* listing reads the table too */
    struct seen *s = calloc(1, sizeof *s);
    assert_non_null(s);
    int rc = dlock_list(ro, "", collect, s);
    fprintf(stderr, "# a role without rights on the table, list: %s: %s\n", dlock_err_name(rc),
            dlock_client_errmsg(ro));
    assert_int_equal(rc, DLOCK_EPERM);
    free(s);
    /* nothing was left held on the server */
    dlock_lock *ok = mk(c, name, NULL, NULL);
    acquire_ok(ok, 0);
    assert_int_equal(dlock_release(ok), 0);
    dlock_lock_free(ok);
    dlock_lock_free(l);
    dlock_client_close(ro);
    dlock_client_close(c);
}

/* ---- 9. an unknown role, an unknown database ------------------------------------------ */

/* (A wrong password is the conformance suite's wrong_credentials, on every
 * mode's URL.) */
static void test_unknown_role_and_database(void **state)
{
    (void)state;
    const char *at = strchr(pg_url, '@');
    assert_non_null(at);
    char url[512];
    snprintf(url, sizeof url, "postgres://nobody-here:n0t-it-pw%s", at);
    expect_open_fails(url, DLOCK_EPERM, "unknown role");
    /* right password, a database that does not exist */
    const char *slash = strrchr(pg_url, '/');
    assert_non_null(slash);
    snprintf(url, sizeof url, "%.*s/no_such_db", (int)(slash - pg_url), pg_url);
    expect_open_fails(url, DLOCK_ENOENT, "no such database");
}

/* ---- 11. a key collision in the lock table ------------------------------------------ */

/* A forged row of another name with the real name's key: the real name's
 * next acquisition by a new handle fails, naming the other one — never a
 * silent shared key. (A handle checks at its first grant, which writes the
 * name's row; its later grants write nothing.) */
static void test_key_collision(void **state)
{
    (void)state;
    char name[64], forged[64], lit[128], flit[128];
    unique(name, sizeof name, "collide");
    unique(forged, sizeof forged, "forged-other");
    sql_lit(lit, sizeof lit, name);
    sql_lit(flit, sizeof flit, forged);
    dlock_client *c = open_url(pg_url);
    dlock_lock *l = mk(c, name, NULL, NULL);
    acquire_ok(l, 0);
    uint64_t token = dlock_token(l);
    assert_int_equal(dlock_release(l), 0);
    long long key = psql_num("SELECT key FROM dlock WHERE name = %s", lit);
    assert_int_equal(psql_num("WITH u AS (UPDATE dlock SET name = %s WHERE name = %s "
                              "RETURNING 1) SELECT count(*) FROM u",
                              flit, lit),
                     1);
    assert_int_equal(psql_num("SELECT key FROM dlock WHERE name = %s", flit), key);

    static const int timeouts[] = {0, 1000};
    for (int i = 0; i < 2; i++) {
        dlock_lock_free(l);
        l = mk(c, name, NULL, NULL);
        int rc = dlock_acquire(l, timeouts[i]);
        const char *msg = dlock_lock_errmsg(l);
        fprintf(stderr, "# acquire(%d) of a name whose key another name has: %s: %s\n",
                timeouts[i], dlock_err_name(rc), msg);
        assert_int_equal(rc, DLOCK_ENAME);
        if (!strstr(msg, forged))
            fail_msg("the message does not name \"%s\": %s", forged, msg);
        assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
        assert_int_equal(dlock_token(l), 0);
        /* the advisory lock the failed statement took is let go */
        if (!wait_granted(forged, 0, 2000))
            fail_msg("the key is still held on the server after the failed acquisition");
    }
    assert_int_equal(psql_num("SELECT count(*) FROM dlock WHERE name = %s", lit), 0);

    /* The row back: the name works again, its tokens still rising. */
    assert_int_equal(psql_num("WITH u AS (UPDATE dlock SET name = %s WHERE name = %s "
                              "RETURNING 1) SELECT count(*) FROM u",
                              lit, flit),
                     1);
    acquire_ok(l, 0);
    assert_true(dlock_token(l) > token);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- 12. election ------------------------------------------------------------------ */

/* dlock_leader until it says there is none (at most limit_ms): its last code.
 * (Immediately after a resign: test_release_frees_at_once.) */
static int wait_no_leader(dlock_client *c, const char *name, int limit_ms)
{
    char buf[300];
    int64_t end = now_ms() + limit_ms;
    int rc;
    while ((rc = dlock_leader(c, name, buf, sizeof buf)) == 0 && now_ms() < end)
        sleep_ms(5);
    return rc;
}

static void test_election(void **state)
{
    (void)state;
    char name[64], buf[300];
    unique(name, sizeof name, "elect");
    dlock_client *c1 = open_url(pg_url), *c2 = open_url(pg_url);
    dlock_lock *a = mk(c1, name, NULL, NULL), *b = mk(c2, name, NULL, NULL);
    assert_int_equal(dlock_leader(c2, name, buf, sizeof buf), DLOCK_ENOENT);

    static const char va[] = "node-a:8080 'quoted' \"and\" %_";
    assert_int_equal(dlock_campaign(a, va, 0), 0);
    uint64_t ta = dlock_token(a);
    int rc = dlock_leader(c2, name, buf, sizeof buf);
    if (rc != 0)
        fail_msg("leader: %s: %s", dlock_err_name(rc), dlock_client_errmsg(c2));
    assert_string_equal(buf, va);
    assert_int_equal(dlock_leader(c1, name, buf, sizeof buf), 0);
    assert_string_equal(buf, va);
    assert_int_equal(dlock_campaign(b, "node-b", 0), DLOCK_EBUSY);
    assert_int_equal(dlock_campaign(b, "node-b", 200), DLOCK_ETIMEDOUT);
    assert_int_equal(dlock_leader(c2, name, buf, sizeof buf), 0);
    assert_string_equal(buf, va);

    assert_int_equal(dlock_resign(a), 0);
    assert_int_equal(dlock_state(a), DLOCK_STATE_IDLE);
    assert_int_equal(wait_no_leader(c2, name, 2000), DLOCK_ENOENT);

    /* The next leader publishes its own value; a plain acquisition none. */
    assert_int_equal(dlock_campaign(b, "node-b", 2000), 0);
    assert_true(dlock_token(b) > ta);
    assert_int_equal(dlock_leader(c1, name, buf, sizeof buf), 0);
    assert_string_equal(buf, "node-b");
    assert_int_equal(dlock_resign(b), 0);
    assert_int_equal(wait_no_leader(c1, name, 2000), DLOCK_ENOENT);
    acquire_ok(a, 2000);
    assert_int_equal(dlock_leader(c2, name, buf, sizeof buf), DLOCK_ENOENT);
    assert_int_equal(dlock_release(a), 0);
    dlock_lock_free(b);
    dlock_lock_free(a);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 13. break --------------------------------------------------------------------- */

static void test_break(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "break");
    dlock_client *ca = open_url(pg_url), *cb = open_url(pg_url), *adm = open_url(admin_url);
    atomic_store(&lost_calls, 0);
    dlock_lock *a = mk(ca, name, count_lost, NULL), *b = mk(cb, name, count_lost, NULL);
    dlock_info broken;
    assert_int_equal(dlock_break(cb, name, &broken), DLOCK_ENOTHELD);

    /* The same role breaks. */
    acquire_ok(a, 0);
    uint64_t ta = dlock_token(a);
    int64_t t0 = now_ms();
    int rc = dlock_break(cb, name, &broken);
    if (rc != 0)
        fail_msg("break: %s: %s", dlock_err_name(rc), dlock_client_errmsg(cb));
    assert_int_equal(broken.held, 1);
    assert_int_equal(broken.token, ta);
    int64_t told = wait_lost(a, 5000);
    fprintf(stderr, "# holder told %" PRId64 " ms after the break returned (%" PRId64
            " ms after it began)\n", told, now_ms() - t0);
    assert_true(told >= 0);
    assert_int_equal(dlock_state(a), DLOCK_STATE_LOST);
    acquire_ok(b, 2000);
    uint64_t tb = dlock_token(b);
    assert_true(tb > ta);
    assert_int_equal(dlock_release(a), DLOCK_ELOST);

    /* The superuser breaks. */
    rc = dlock_break(adm, name, &broken);
    if (rc != 0)
        fail_msg("break as the superuser: %s: %s", dlock_err_name(rc), dlock_client_errmsg(adm));
    assert_int_equal(broken.token, tb);
    assert_true(wait_lost(b, 5000) >= 0);
    assert_int_equal(dlock_state(b), DLOCK_STATE_LOST);
    acquire_ok(a, 2000);
    assert_true(dlock_token(a) > tb);
    assert_int_equal(dlock_release(b), DLOCK_ELOST);
    wait_lost_calls(2, 2000);
    assert_int_equal(atomic_load(&lost_calls), 2);
    assert_int_equal(dlock_release(a), 0);
    assert_true(wait_granted(name, 0, 2000));
    assert_int_equal(dlock_break(adm, name, &broken), DLOCK_ENOTHELD);
    dlock_lock_free(b);
    dlock_lock_free(a);
    dlock_client_close(adm);
    dlock_client_close(cb);
    dlock_client_close(ca);
}

/* ---- 15. clients that create the tables at the same moment -------------------------- */

struct opener {
    char url[512];
    int rc;
    pthread_t t;
};

static void *opener_main(void *arg)
{
    struct opener *o = arg;
    dlock_client *c = NULL;
    o->rc = dlock_client_open(&c, o->url, NULL);
    dlock_client_close(c);
    return NULL;
}

static void test_tables_created_at_once(void **state)
{
    (void)state;
    /* Six clients of each mode open on tables nobody has made yet, at the
     * same moment: every one opens (CREATE ... IF NOT EXISTS races on the
     * catalog; the slower ones look again). */
    static const char *const modes[] = {"advisory", "lease", "rowlock"};
    for (int m = 0; m < 3; m++) {
        struct opener o[6];
        char q[160];
        /* (generous bounds: six connects at once are slow under valgrind) */
        snprintf(q, sizeof q, "mode=%s&table=race_%s_%ld&op_timeout_ms=15000&connect_timeout_ms=15000",
                 modes[m], modes[m], (long)getpid());
        for (int i = 0; i < 6; i++) {
            url_with(o[i].url, sizeof o[i].url, pg_url, q);
            assert_int_equal(pthread_create(&o[i].t, NULL, opener_main, &o[i]), 0);
        }
        for (int i = 0; i < 6; i++) {
            pthread_join(o[i].t, NULL);
            if (o[i].rc != 0)
                fail_msg("mode=%s: open %d: %s", modes[m], i, dlock_err_name(o[i].rc));
        }
    }
}

/* ---- 14. the URL's modes and table ----------------------------------------------------- */

static void test_url_modes(void **state)
{
    (void)state;
    char url[512];
    /* The modes other than advisory: one not built yet says so at open
     * (ENOTSUP, naming it); one that is built opens with its own
     * capabilities (mode=lease: leases and semaphores, no shared locks). */
    static const char *const modes[] = {"lease", "rowlock"};
    for (int i = 0; i < 2; i++) {
        char q[32], what[32];
        snprintf(q, sizeof q, "mode=%s", modes[i]);
        snprintf(what, sizeof what, "mode=%s", modes[i]);
        url_with(url, sizeof url, pg_url, q);
        dlock_client *m = NULL;
        int rc = dlock_client_open(&m, url, NULL);
        const char *msg = dlock_client_errmsg(NULL);
        fprintf(stderr, "# %s: %s%s%s\n", what, dlock_err_name(rc), rc ? ": " : "",
                rc ? msg : "");
        if (rc == 0) {
            unsigned caps = dlock_client_caps(m);
            if (strcmp(modes[i], "lease") == 0) {
                assert_true(caps & DLOCK_CAP_LEASE);
                assert_true(caps & DLOCK_CAP_FENCING);
                assert_false(caps & DLOCK_CAP_SHARED);
            }
            dlock_client_close(m);
            continue;
        }
        if (rc != DLOCK_ENOTSUP)
            fail_msg("%s: %s, expected ENOTSUP (or a client): %s", what, dlock_err_name(rc), msg);
        assert_null(m);
        assert_non_null(strstr(msg, what));
        assert_null(strchr(msg, '\n'));
        assert_no_password(msg);
    }
    url_with(url, sizeof url, pg_url, "mode=bogus");
    expect_open_fails(url, DLOCK_EURL, "mode=bogus");
    assert_non_null(strstr(dlock_client_errmsg(NULL), "bogus"));
    url_with(url, sizeof url, pg_url, "table=Bad-Name");
    expect_open_fails(url, DLOCK_EURL, "table=Bad-Name");
    url_with(url, sizeof url, pg_url, "table=x%22%3Bdrop");
    expect_open_fails(url, DLOCK_EURL, "table=x\";drop");
    url_with(url, sizeof url, pg_url, "schema=Public");
    expect_open_fails(url, DLOCK_EURL, "schema=Public");
    url_with(url, sizeof url, pg_url, "no_such_param=1");
    expect_open_fails(url, DLOCK_EURL, "an unknown parameter");
    assert_non_null(strstr(dlock_client_errmsg(NULL), "no_such_param"));

    /* mode=advisory said aloud, and a table of its own made by its owner:
     * the same name there is another lock. */
    char name[64];
    unique(name, sizeof name, "modes");
    url_with(url, sizeof url, pg_url, "mode=advisory&table=dlock_mine");
    dlock_client *c1 = open_url(url), *c2 = open_url(pg_url);
    assert_int_equal(psql_num("SELECT count(*) FROM pg_class WHERE relname = 'dlock_mine' AND "
                              "relkind = 'r'"),
                     1);
    assert_null(strstr(dlock_client_url(c1), "s3cret"));
    assert_string_equal(dlock_client_backend(c1), "postgres");
    dlock_lock *l1 = mk(c1, name, NULL, NULL), *l2 = mk(c2, name, NULL, NULL);
    acquire_ok(l1, 0);
    acquire_ok(l2, 0);
    char lit[128];
    sql_lit(lit, sizeof lit, name);
    assert_int_equal(psql_num("SELECT count(*) FROM dlock_mine WHERE name = %s", lit), 1);
    assert_int_equal(dlock_release(l2), 0);
    assert_int_equal(dlock_release(l1), 0);
    dlock_lock_free(l2);
    dlock_lock_free(l1);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 6. a server restart while a lock is held ------------------------------------------ */

/* A crash: the postmaster and its children (backends, WAL writer, …)
 * frozen, then killed with SIGKILL, so that none of them writes anything
 * after that moment (a backend left alive goes on until it notices the
 * postmaster gone, and may still flush the WAL); then its command again,
 * then until it accepts connections (as srv_restart in tests/servers.sh). */
static void restart_server(void)
{
    const char *dir = getenv("DLOCK_TEST_SERVERS");
    assert_non_null(dir);
    char qdir[600], cmd[2400], out[2048];
    shell_quote(qdir, sizeof qdir, dir);
    int n = snprintf(
        cmd, sizeof cmd,
        "bash -c 'd=$1; p=$(cat \"$d/postgres.port\") || exit 2; "
        "pm=$(cat \"$d/postgres.pid\") || exit 3; kill -STOP \"$pm\" || exit 3; "
        "kids=$(ps -o pid= --ppid \"$pm\"); kill -STOP $kids 2>/dev/null; "
        "kill -KILL \"$pm\" $kids 2>/dev/null; sleep 0.05; "
        "eval \"$(cat \"$d/postgres.cmd\") </dev/null >>$d/postgres/out 2>&1 &\"; "
        "echo $! >\"$d/postgres.pid\"; "
        "for i in $(seq 300); do pg_isready -q -h \"$d/postgres\" -p \"$p\" -U postgres "
        "&& exit 0; sleep 0.1; done; echo did not start; exit 1' restart %s 2>&1",
        qdir);
    assert_true(n > 0 && (size_t)n < sizeof cmd);
    int rc = run_cmd(out, sizeof out, cmd);
    if (rc != 0)
        fail_msg("restarting the server: exit %d: %s", rc, out);
}

static void test_server_restart(void **state)
{
    (void)state;
    if (!getenv("DLOCK_TEST_SERVERS"))
        skip();
    char name[64];
    unique(name, sizeof name, "restart");
    dlock_client *c1 = open_url(pg_url);
    atomic_store(&lost_calls, 0);
    dlock_lock *h = mk(c1, name, count_lost, NULL);
    acquire_ok(h, 0);
    uint64_t token = dlock_token(h);

    int64_t t0 = now_ms();
    restart_server();
    fprintf(stderr, "# server restarted in %" PRId64 " ms\n", now_ms() - t0);
    int64_t told = wait_lost(h, 5000);
    fprintf(stderr, "# holder told within %" PRId64 " ms of the restart's end\n", told);
    assert_true(told >= 0);
    assert_int_equal(dlock_state(h), DLOCK_STATE_LOST);
    wait_lost_calls(1, 2000);
    assert_int_equal(atomic_load(&lost_calls), 1);
    int rc = dlock_release(h);
    fprintf(stderr, "# release after the restart: %s: %s\n", dlock_err_name(rc),
            dlock_lock_errmsg(h));
    assert_int_equal(rc, DLOCK_ELOST);
    assert_int_equal(dlock_state(h), DLOCK_STATE_IDLE);

    /* A new client gets the lock, with a higher token: the table survived. */
    dlock_client *c2 = open_url(pg_url);
    dlock_lock *n2 = mk(c2, name, NULL, NULL);
    acquire_ok(n2, 2000);
    uint64_t t2 = dlock_token(n2);
    fprintf(stderr, "# token before the restart %" PRIu64 ", after %" PRIu64 "\n", token, t2);
    assert_true(t2 > token);
    dlock_info info = inspect(c2, name);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, t2);
    assert_int_equal(dlock_release(n2), 0);
    assert_int_equal(atomic_load(&lost_calls), 1);
    dlock_lock_free(n2);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* WAL writes over 100 uncontended cycles in the URL's mode, less what the
 * WAL writer may have written meanwhile: a commit that waits for a flush
 * writes the WAL out itself (pg_stat_wal's wal_write counts it, with fsync
 * off too); one that does not leaves it to the WAL writer, at most 5 times
 * a second (wal_writer_delay), 6 allowed here, whatever the rate (a slow
 * client, under valgrind, takes longer). */
static long long wal_writes_per_100(const char *url)
{
    int64_t t0 = now_ms();
    char name[64];
    unique(name, sizeof name, "flushes");
    dlock_client *c = open_url(url);
    dlock_lock *l = mk(c, name, NULL, NULL);
    acquire_ok(l, 0); /* (first use: the tables, the name's rows) */
    assert_int_equal(dlock_release(l), 0);
    psql_num("SELECT count(*) FROM (SELECT pg_stat_reset_shared('wal')) AS r");
    for (int i = 0; i < 100; i++) {
        acquire_ok(l, 0);
        assert_int_equal(dlock_release(l), 0);
    }
    dlock_lock_free(l);
    dlock_client_close(c); /* its sessions end, and report their counts */
    struct timespec settle = {1, 0};
    nanosleep(&settle, NULL);
    long long n = psql_num("SELECT wal_write FROM pg_stat_wal");
    long long writer = 6 * ((now_ms() - t0) / 1000 + 1);
    const char *mode = strstr(url, "mode="); /* (not the URL: it has the password) */
    fprintf(stderr, "# %s: %lld WAL writes in 100 cycles (the WAL writer's: at most %lld)\n",
            mode ? mode : "mode=advisory", n, writer);
    return n - writer;
}

/* A grant no longer waits for a WAL flush: advisory and rowlock wrote
 * (and flushed) the WAL at every cycle, 100 and 300 times in 100 cycles;
 * lease at its take and at its release, 200 (its take is the lease's one
 * durable write). */
static void test_no_flush_per_grant(void **state)
{
    (void)state;
    char row[600], lease[600];
    url_with(row, sizeof row, pg_url, "mode=rowlock");
    url_with(lease, sizeof lease, pg_url, "mode=lease");
    assert_true(wal_writes_per_100(pg_url) < 40);
    assert_true(wal_writes_per_100(row) < 40);
    assert_true(wal_writes_per_100(lease) < 140);
}

/* The holder's row is written by a handle's first grant only: 50 more
 * cycles (tries and waits, one hand-over to a waiter) leave the row as it
 * was (same version), while inspect still names each holder exactly — its
 * token, its pid, how long — from the token lock its grant took; a free
 * lock's inspect gives no token. */
static void test_later_grants_write_nothing(void **state)
{
    (void)state;
    char name[64], lit[128], want[64];
    unique(name, sizeof name, "bare");
    sql_lit(lit, sizeof lit, name);
    snprintf(want, sizeof want, "pid %ld", (long)getpid());
    dlock_client *c = open_url(pg_url), *c2 = open_url(pg_url);
    dlock_lock *l = mk(c, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
    acquire_ok(w, 0); /* (each handle's first grant writes the row) */
    assert_int_equal(dlock_release(w), 0);
    acquire_ok(l, 0);
    assert_int_equal(dlock_release(l), 0);
    char before[64], after[64];
    static const char version[] = "SELECT xmin::text || ctid::text FROM dlock WHERE name = %s";
    assert_int_equal(psql(before, sizeof before, version, lit), 0);
    uint64_t last = 0;
    for (int i = 0; i < 50; i++) {
        acquire_ok(l, i % 2 ? 1000 : 0);
        assert_true(dlock_token(l) > last);
        last = dlock_token(l);
        dlock_info info = inspect(c2, name);
        assert_int_equal(info.held, 1);
        assert_int_equal(info.token, last);
        if (!strstr(info.holder, want))
            fail_msg("holder \"%s\" does not name %s", info.holder, want);
        assert_true(info.held_ms >= 0 && info.held_ms < 10000);
        assert_int_equal(dlock_release(l), 0);
    }
    /* a waiter's grant (the bare wait) */
    acquire_ok(l, 0);
    struct waiter ws;
    waiter_start(&ws, w, 10000, false);
    wait_waiters(c, name, 1, 5000);
    assert_int_equal(dlock_release(l), 0);
    assert_int_equal(waiter_join(&ws), 0);
    assert_true(dlock_token(w) > last);
    dlock_info info = inspect(c, name);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, dlock_token(w));
    assert_int_equal(dlock_release(w), 0);
    info = inspect(c, name);
    assert_int_equal(info.held, 0);
    assert_int_equal(info.token, 0);
    assert_int_equal(psql(after, sizeof after, version, lit), 0);
    assert_string_equal(after, before);
    dlock_lock_free(w);
    dlock_lock_free(l);
    dlock_client_close(c2);
    dlock_client_close(c);
}

/* The tokens' sequences of advisory and rowlock tables are UNLOGGED
 * (servers from 15 on), so that a grant writes no WAL; one an older
 * version left logged is made so at the next open by its owner, keeping
 * its value (tokens rise on); a lease table's stays logged (its tokens are
 * the sequence's own values). */
static void test_token_sequence_unlogged(void **state)
{
    (void)state;
    if (psql_num("SELECT current_setting('server_version_num')::int") < 150000) {
        skip();
        return;
    }
    static const char *const modes[] = {"advisory", "rowlock", "lease"};
    for (int m = 0; m < 3; m++) {
        char q[160], url[600], name[64];
        snprintf(q, sizeof q, "mode=%s&table=unlog_%s_%ld", modes[m], modes[m], (long)getpid());
        url_with(url, sizeof url, pg_url, q);
        unique(name, sizeof name, "unlog");
        char persistence[16];
        static const char seq_of[] =
            "SELECT relpersistence FROM pg_class WHERE relname = 'unlog_%s_%ld_token'";
        dlock_client *c = open_url(url);
        dlock_lock *l = mk(c, name, NULL, NULL);
        acquire_ok(l, 0);
        uint64_t before = dlock_token(l);
        assert_int_equal(dlock_release(l), 0);
        assert_int_equal(psql(persistence, sizeof persistence, seq_of, modes[m], (long)getpid()), 0);
        assert_string_equal(persistence, m < 2 ? "u" : "p");
        if (m < 2) { /* as an older version left it */
            char out[200];
            assert_int_equal(psql(out, sizeof out, "ALTER SEQUENCE unlog_%s_%ld_token SET LOGGED",
                                  modes[m], (long)getpid()),
                             0);
        }
        dlock_lock_free(l);
        dlock_client_close(c);
        c = open_url(url);
        l = mk(c, name, NULL, NULL);
        for (int i = 0; i < 3; i++) {
            acquire_ok(l, 0);
            assert_true(dlock_token(l) > before);
            before = dlock_token(l);
            assert_int_equal(dlock_release(l), 0);
        }
        assert_int_equal(psql(persistence, sizeof persistence, seq_of, modes[m], (long)getpid()), 0);
        assert_string_equal(persistence, m < 2 ? "u" : "p");
        dlock_lock_free(l);
        dlock_client_close(c);
    }
}

/* Tokens across a crash: workers on names of their own take and release
 * as fast as they can (their draws from the table's one sequence
 * interleave: a logged sequence could hand out a value again whose
 * batch's WAL record was not flushed, an unlogged one starts again from
 * its first value) until the server crashes under them and
 * after it is back: every token granted after the crash must be above
 * every token granted before it. */
static void test_tokens_across_crash(void **state)
{
    (void)state;
    if (!getenv("DLOCK_TEST_SERVERS"))
        skip();
    char row[600];
    url_with(row, sizeof row, pg_url, "mode=rowlock");
    const char *const urls[2][CRASH_DRAWERS] = {{pg_url, pg_url, pg_url, pg_url},
                                                {row, row, row, row}};
    for (int round = 0; round < 2; round++)
        for (int m = 0; m < 2; m++) {
            crash_tokens t = tokens_across_crash(urls[m], restart_server);
            fprintf(stderr, "# mode=%s: %d grants; highest token before the crash %" PRIu64
                    ", lowest after %" PRIu64 "\n",
                    m ? "rowlock" : "advisory", t.grants, t.max_before, t.min_after);
        }
}

/* A client whose idle pooled sessions the server ended (`end` does it,
 * and returns once they are gone): its next calls must work at once, on
 * new sessions — also within DL_POOL_TRUSTED_MS of the sessions' last
 * use, where the client sends on them without looking first. Fails
 * naming the first failure and how many calls in a row failed. */
static void pool_survives(const char *what, void (*end)(void))
{
    char name[64], other[64];
    unique(name, sizeof name, "pooled");
    unique(other, sizeof other, "pooled-other");
    dlock_client *c = open_url(pg_url);
    dlock_lock *l = mk(c, name, NULL, NULL), *o = mk(c, other, NULL, NULL);
    /* two sessions back in the pool */
    acquire_ok(l, 0);
    acquire_ok(o, 0);
    uint64_t token = dlock_token(l);
    assert_int_equal(dlock_release(o), 0);
    assert_int_equal(dlock_release(l), 0);
    (void)inspect(c, name);
    assert_true(wait_granted(name, 0, 2000));

    end();

    int rc = dlock_acquire(l, 2000);
    if (rc != 0) {
        char first[512];
        snprintf(first, sizeof first, "%s: %s", dlock_err_name(rc), dlock_lock_errmsg(l));
        int failed = 1;
        while (failed < 12 && (rc = dlock_acquire(l, 2000)) != 0)
            failed++;
        fprintf(stderr, "# %s: %d acquire(2000) calls in a row failed (the first: %s); then %s\n",
                what, failed, first, dlock_err_name(rc));
        if (rc == 0)
            assert_int_equal(dlock_release(l), 0);
        fail_msg("%s: the client's first %d acquisitions failed: %s", what, failed, first);
    }
    assert_true(dlock_token(l) > token);
    dlock_info info;
    rc = dlock_inspect(c, name, &info);
    if (rc != 0)
        fail_msg("%s: inspect: %s: %s", what, dlock_err_name(rc), dlock_client_errmsg(c));
    assert_int_equal(info.token, dlock_token(l));
    acquire_ok(o, 2000);
    assert_int_equal(dlock_release(o), 0);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(o);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* pg_terminate_backend of every idle session of role dlock (the pools'),
 * each waited for until it has ended. */
static void terminate_idle_sessions(void)
{
    long long n = psql_num("SELECT count(pg_terminate_backend(pid, 10000)) FROM "
                           "pg_stat_activity WHERE usename = 'dlock' AND state = 'idle'");
    fprintf(stderr, "# ended %lld idle sessions\n", n);
    assert_true(n >= 1);
}

static void test_pool_after_sessions_ended(void **state)
{
    (void)state;
    pool_survives("idle sessions ended by pg_terminate_backend", terminate_idle_sessions);
}

static void test_pool_after_restart(void **state)
{
    (void)state;
    if (!getenv("DLOCK_TEST_SERVERS"))
        skip();
    pool_survives("a client opened before a server restart", restart_server);
    /* (restart_server returns once the server answers again: its old
     * sessions ended before) */
}


static const char *const mode_query[] = {"mode=advisory", "mode=rowlock", "mode=lease"};

/* Issue 24: taking and letting go of a lock wake no background thread in
 * the modes that hold a session. */
static void test_cycles_wake_no_thread(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) { /* advisory, rowlock */
        char url[512];
        url_with(url, sizeof url, pg_url, mode_query[m]);
        cycles_wake_no_thread(url, mode_query[m]);
    }
}

/* Signal the whole server: the postmaster and every backend it forked (a
 * stopped postmaster alone leaves running backends answering). */
static void server_signal_all(int sig)
{
    const char *dir = getenv("DLOCK_TEST_SERVERS");
    assert_non_null(dir);
    char qdir[600], cmd[1400], out[256];
    shell_quote(qdir, sizeof qdir, dir);
    int n = snprintf(cmd, sizeof cmd,
                     "bash -c 'p=$(cat \"$1/postgres.pid\") || exit 2; kill -%d $p || exit 3; "
                     "for c in $(pgrep -P $p); do kill -%d $c; done; exit 0' sig %s 2>&1",
                     sig, sig, qdir);
    assert_true(n > 0 && (size_t)n < sizeof cmd);
    int rc = run_cmd(out, sizeof out, cmd);
    if (rc != 0)
        fail_msg("signal %d to the server: exit %d: %s", sig, rc, out);
}

struct stopper {
    int delay_ms;
    pthread_t t;
};

static void *stopper_main(void *p)
{
    struct stopper *s = p;
    sleep_ms(s->delay_ms);
    server_signal_all(SIGSTOP);
    return NULL;
}

/* A 2 s wait whose server stops 0.5 s in ends by its deadline plus the
 * promised 100 ms (dlock.h): giving up must not wait for a stopped server
 * (it cancelled the wait from a new session with 2 s bounds: 4.1-6.1 s). */
static void test_stopped_server_bounds_wait(void **state)
{
    (void)state;
    if (!getenv("DLOCK_TEST_SERVERS"))
        skip();
    for (int m = 0; m < 3; m++) {
        char url[512], name[64];
        url_with(url, sizeof url, pg_url, mode_query[m]);
        unique(name, sizeof name, "stopped");
        dlock_client *c1 = open_url(url), *c2 = open_url(url);
        dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
        acquire_ok(h, 0);
        struct stopper st = {.delay_ms = 500};
        assert_int_equal(pthread_create(&st.t, NULL, stopper_main, &st), 0);
        int64_t t0 = now_ms();
        int rc = dlock_acquire(w, 2000);
        int64_t took = now_ms() - t0;
        assert_int_equal(pthread_join(st.t, NULL), 0);
        server_signal_all(SIGCONT);
        fprintf(stderr, "# %s: a 2 s wait, server stopped 0.5 s in: %s after %" PRId64 " ms: %s\n",
                mode_query[m], dlock_err_name(rc), took, dlock_lock_errmsg(w));
        assert_true(rc == DLOCK_ETIMEDOUT || rc == DLOCK_EUNREACHABLE);
        assert_true(took >= 1900); /* it did not give up early either */
        /* The promise is 2100 ms; 500 more for a loaded machine running
         * this under valgrind or TSan, far below the 2 s the bug added. */
        if (took > 2600)
            fail_msg("%s: the 2 s wait returned after %" PRId64 " ms", mode_query[m], took);
        rc = dlock_release(h); /* the lease may have run out meanwhile */
        assert_true(rc == 0 || rc == DLOCK_ELOST);
        dlock_lock_free(w);
        dlock_lock_free(h);
        dlock_client_close(c2);
        dlock_client_close(c1);
    }
}

/* A role with the limits production databases set: statement_timeout,
 * idle_session_timeout and idle_in_transaction_session_timeout well below
 * the waits and holds below. It may use dlock's tables (member of dlock).
 * Its URL (with query) into url. */
static void limited_role_url(char *url, size_t len, const char *query)
{
    char out[512];
    int rc = psql(out, sizeof out,
                  "DO $$BEGIN CREATE ROLE dlock_limited LOGIN PASSWORD 'lim' IN ROLE dlock; "
                  "EXCEPTION WHEN duplicate_object THEN NULL; END$$; "
                  "ALTER ROLE dlock_limited SET statement_timeout = '300ms'; "
                  "ALTER ROLE dlock_limited SET idle_session_timeout = '500ms'; "
                  "ALTER ROLE dlock_limited SET idle_in_transaction_session_timeout = '500ms'");
    if (rc != 0)
        fail_msg("creating role dlock_limited: exit %d: %s", rc, out);
    const char *at = strchr(pg_url, '@');
    assert_non_null(at);
    int n = snprintf(url, len, "postgres://dlock_limited:lim%s?%s", at, query);
    assert_true(n > 0 && (size_t)n < len);
}

/* The role's statement_timeout does not end a wait (it ended every
 * advisory and rowlock wait at 300 ms, "canceled"); its idle limits do not
 * end a held lock (advisory at idle_session_timeout, rowlock at
 * idle_in_transaction_session_timeout) nor a lease waiter's LISTEN
 * session. */
static void test_role_limits(void **state)
{
    (void)state;
    for (int m = 0; m < 3; m++) {
        char url[512], name[64];
        limited_role_url(url, sizeof url, mode_query[m]);
        unique(name, sizeof name, "limits");
        dlock_client *c1 = open_url(url), *c2 = open_url(url);
        atomic_store(&lost_calls, 0);
        dlock_lock *h = mk(c1, name, count_lost, NULL), *w = mk(c2, name, NULL, NULL);
        acquire_ok(h, 0);
        int64_t t0 = now_ms();
        int rc = dlock_acquire(w, 2000);
        int64_t took = now_ms() - t0;
        fprintf(stderr, "# %s, statement_timeout 300ms: a 2 s wait: %s after %" PRId64 " ms: %s\n",
                mode_query[m], dlock_err_name(rc), took, dlock_lock_errmsg(w));
        assert_int_equal(rc, DLOCK_ETIMEDOUT);
        assert_true(took >= 1900);
        /* held past idle_session_timeout (3 s in all) */
        sleep_ms(1000);
        assert_int_equal(dlock_state(h), DLOCK_STATE_HELD);
        assert_true(wait_lost(h, 0) < 0);
        /* a waiter idles past the limits too, and gets it when it is let go */
        struct waiter ws;
        waiter_start(&ws, w, 6000, true);
        sleep_ms(1500);
        assert_int_equal(dlock_release(h), 0);
        rc = waiter_join(&ws);
        fprintf(stderr, "# %s: waiter after the release: %s: %s\n", mode_query[m],
                dlock_err_name(rc), dlock_lock_errmsg(w));
        assert_int_equal(rc, 0);
        assert_int_equal(atomic_load(&lost_calls), 0);
        dlock_lock_free(w);
        dlock_lock_free(h);
        dlock_client_close(c2);
        dlock_client_close(c1);
    }
}

/* A hostile role setting: lock_timeout 300 ms for the role, and in the
 * server's configuration, reloaded while dlock's sessions are open. A wait
 * for ever still waits: each session sets its own lock_timeout to 0 when it
 * opens, and a setting of the session outlives a reload (advisory_send
 * leaves a session's 0 alone for such a wait). */
static void test_wait_forever_despite_lock_timeout_settings(void **state)
{
    (void)state;
    char url[512], name[64], out[512];
    limited_role_url(url, sizeof url, "mode=advisory");
    unique(name, sizeof name, "hostile-lt");
    int rc = psql(out, sizeof out, "ALTER ROLE dlock_limited SET lock_timeout = '300ms'");
    if (rc != 0)
        fail_msg("ALTER ROLE: exit %d: %s", rc, out);
    dlock_client *c1 = open_url(url), *c2 = open_url(url);
    dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
    /* c2's session opened and the handle's row made by a try, which sets
     * no lock_timeout: the wait below is a bare one on a session that has
     * only the one it set itself when it opened */
    acquire_ok(w, 0);
    assert_int_equal(dlock_release(w), 0);
    rc = psql(out, sizeof out, "ALTER SYSTEM SET lock_timeout = '300ms'");
    if (rc == 0) /* (ALTER SYSTEM: a statement of its own, outside a transaction) */
        rc = psql(out, sizeof out, "SELECT pg_reload_conf()");
    if (rc != 0)
        fail_msg("ALTER SYSTEM: exit %d: %s", rc, out);
    acquire_ok(h, 0);
    struct waiter ws;
    waiter_start(&ws, w, -1, true);
    wait_waiters(c1, name, 1, 5000);
    sleep_ms(1500);
    int done = atomic_load(&ws.done);
    assert_int_equal(dlock_release(h), 0);
    rc = waiter_join(&ws);
    (void)psql(out, sizeof out, "ALTER SYSTEM RESET lock_timeout");
    (void)psql(out, sizeof out, "SELECT pg_reload_conf()");
    (void)psql(out, sizeof out, "ALTER ROLE dlock_limited RESET lock_timeout");
    fprintf(stderr, "# lock_timeout 300 ms for the role and the server: a wait for ever: %s\n",
            dlock_err_name(rc));
    assert_int_equal(done, 0);
    assert_int_equal(rc, 0);
    dlock_lock_free(w);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* A timed acquisition that has to connect (its client's pooled sessions
 * were ended), to a server that accepts and does not answer: its time runs
 * out while connecting, and it times out, DLOCK_ETIMEDOUT, by its deadline
 * plus the promised margin. It said DLOCK_EUNREACHABLE: under valgrind a
 * SCRAM handshake slower than a 200 ms acquire_all failed the conformance
 * suite with it. */
static void test_timed_acquire_connecting_times_out(void **state)
{
    (void)state;
    if (!getenv("DLOCK_TEST_SERVERS"))
        skip();
    for (int m = 0; m < 3; m++) {
        char url[512], q[128], name[64];
        snprintf(q, sizeof q, "%s&application_name=dlock_connecting_%d", mode_query[m], m);
        url_with(url, sizeof url, pg_url, q);
        unique(name, sizeof name, "connecting");
        dlock_client *c = open_url(url);
        dlock_lock *w = mk(c, name, NULL, NULL);
        long long n = psql_num("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                               "WHERE application_name = 'dlock_connecting_%d'",
                               m);
        assert_true(n >= 1);
        sleep_ms(200); /* the ended sessions' sockets show it */
        server_signal_all(SIGSTOP);
        int64_t t0 = now_ms();
        int rc = dlock_acquire(w, 500);
        int64_t took = now_ms() - t0;
        server_signal_all(SIGCONT);
        fprintf(stderr, "# %s: a 0.5 s acquire, connecting to a stopped server: %s after %" PRId64
                        " ms: %s\n",
                mode_query[m], dlock_err_name(rc), took, dlock_lock_errmsg(w));
        assert_int_equal(rc, DLOCK_ETIMEDOUT);
        assert_true(took >= 450);
        if (took > 1500) /* the promise is 600 ms; the rest is for valgrind and TSan */
            fail_msg("%s: the 0.5 s acquire returned after %" PRId64 " ms", mode_query[m], took);
        assert_int_equal(dlock_acquire(w, 5000), 0); /* and the server is fine */
        assert_int_equal(dlock_release(w), 0);
        dlock_lock_free(w);
        dlock_client_close(c);
    }
}

/* A waiter whose session the server ends (pg_terminate_backend) waits on,
 * on a new session, and gets the lock when it is let go (it exited with
 * DLOCK_EUNREACHABLE at once). */
static void test_waiter_session_ended(void **state)
{
    (void)state;
    for (int m = 0; m < 3; m++) {
        char url[512], q[128], name[64], out[256];
        snprintf(q, sizeof q, "%s&application_name=dlock_waiter_%d", mode_query[m], m);
        url_with(url, sizeof url, pg_url, q);
        unique(name, sizeof name, "waiter-ended");
        char hurl[512];
        url_with(hurl, sizeof hurl, pg_url, mode_query[m]);
        dlock_client *c1 = open_url(hurl), *c2 = open_url(url);
        dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
        acquire_ok(h, 0);
        struct waiter ws;
        /* A bound for a hang only: under load the sleeps and psql runs
         * below took 8 s (a CI-like run, three tests at a time beside
         * other builds), and the waiter's grant then ran out of time. */
        waiter_start(&ws, w, 60000, true);
        /* twice: the first session may be a pooled one, which was always
         * replaced; the second is the waiter's own new session */
        for (int i = 0; i < 2; i++) {
            sleep_ms(700); /* queued by now */
            long long n = psql_num("SELECT count(pg_terminate_backend(pid)) FROM "
                                   "pg_stat_activity WHERE application_name = 'dlock_waiter_%d'",
                                   m);
            fprintf(stderr, "# %s: ended %lld sessions of the waiter\n", mode_query[m], n);
            assert_true(n >= 1);
        }
        sleep_ms(700);
        int rc = psql(out, sizeof out, "SELECT 1"); /* (the server is fine) */
        assert_int_equal(rc, 0);
        assert_int_equal(dlock_release(h), 0);
        int64_t t0 = now_ms();
        rc = waiter_join(&ws);
        fprintf(stderr, "# %s: the waiter: %s %" PRId64 " ms after the release: %s\n",
                mode_query[m], dlock_err_name(rc), now_ms() - t0, dlock_lock_errmsg(w));
        assert_int_equal(rc, 0);
        dlock_lock_free(w);
        dlock_lock_free(h);
        dlock_client_close(c2);
        dlock_client_close(c1);
    }
}

/* Lease mode: a waiter killed with -9 leaves a row in the waiters' table;
 * it neither holds the hand-over back (its stamp did, up to 3 s: its
 * session is gone at once) nor stays there (it stayed for ever). The
 * waiter is a `dlock run` process: nothing is forked from this threaded
 * test. */
static void test_lease_dead_waiter(void **state)
{
    (void)state;
    const char *cli = getenv("DLOCK_CLI");
    if (!cli)
        skip();
    char url[512], name[64], qurl[600], qcli[600], cmd[1600], out[256], lit[128];
    url_with(url, sizeof url, pg_url, "mode=lease");
    unique(name, sizeof name, "dead-waiter");
    sql_lit(lit, sizeof lit, name);
    dlock_client *c1 = open_url(url), *c2 = open_url(url);
    dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
    acquire_ok(h, 0);
    shell_quote(qurl, sizeof qurl, url);
    shell_quote(qcli, sizeof qcli, cli);
    int n = snprintf(cmd, sizeof cmd, "%s --url %s run -w 30 %s -- true >/dev/null 2>&1 & echo $!",
                     qcli, qurl, name);
    assert_true(n > 0 && (size_t)n < sizeof cmd);
    assert_int_equal(run_cmd(out, sizeof out, cmd), 0);
    long pid = strtol(out, NULL, 10);
    assert_true(pid > 1);
    int64_t end = now_ms() + 5000;
    while (psql_num("SELECT count(*) FROM dlock_lease_wait WHERE name = %s", lit) < 1 &&
           now_ms() < end)
        sleep_ms(20);
    assert_int_equal(psql_num("SELECT count(*) FROM dlock_lease_wait WHERE name = %s", lit), 1);
    struct waiter ws; /* queued behind the process */
    waiter_start(&ws, w, 10000, true);
    end = now_ms() + 5000;
    while (psql_num("SELECT count(*) FROM dlock_lease_wait WHERE name = %s", lit) < 2 &&
           now_ms() < end)
        sleep_ms(20);
    assert_int_equal(psql_num("SELECT count(*) FROM dlock_lease_wait WHERE name = %s", lit), 2);
    assert_int_equal(kill((pid_t)pid, SIGKILL), 0);
    sleep_ms(200); /* its session ends as the server reads the closed socket */
    int64_t t0 = now_ms();
    assert_int_equal(dlock_release(h), 0);
    int rc = waiter_join(&ws);
    int64_t took = now_ms() - t0;
    fprintf(stderr, "# hand-over past a waiter killed with -9: %s after %" PRId64 " ms\n",
            dlock_err_name(rc), took);
    assert_int_equal(rc, 0);
    /* Its row held the hand-over back for the rest of its 3 s stamp (at
     * least 1.8 s here): a prompt one takes milliseconds; 1 s of slack. */
    if (took > 1000)
        fail_msg("the hand-over past a dead waiter took %" PRId64 " ms", took);
    long long left = psql_num("SELECT count(*) FROM dlock_lease_wait WHERE name = %s", lit);
    fprintf(stderr, "# rows left in the waiters' table: %lld\n", left);
    assert_int_equal(left, 0);
    dlock_lock_free(w);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* Behind PgBouncer in transaction pool mode (DLOCK_TEST_PGBOUNCER), with
 * ?pooler=transaction: lease mode works — two clients take turns, and a
 * waiter gets the lock when it is let go — (every client after the first
 * failed: 'prepared statement "dlock0" already exists'); the session modes
 * are refused with a clear error. */
static void test_transaction_pooler(void **state)
{
    (void)state;
    const char *bouncer = getenv("DLOCK_TEST_PGBOUNCER");
    if (!bouncer)
        skip();
    char url[512], name[64];
    url_with(url, sizeof url, bouncer, "mode=advisory&pooler=transaction");
    expect_open_fails(url, DLOCK_EURL, "advisory behind a transaction pooler");
    url_with(url, sizeof url, bouncer, "mode=rowlock&pooler=transaction");
    expect_open_fails(url, DLOCK_EURL, "rowlock behind a transaction pooler");

    url_with(url, sizeof url, bouncer, "mode=lease&pooler=transaction");
    unique(name, sizeof name, "bouncer");
    dlock_client *c[2] = {open_url(url), open_url(url)};
    dlock_lock *l[2] = {mk(c[0], name, NULL, NULL), mk(c[1], name, NULL, NULL)};
    uint64_t last = 0;
    int64_t t0 = now_ms();
    for (int i = 0; i < 40; i++) { /* turns */
        dlock_lock *x = l[i % 2];
        acquire_ok(x, 2000);
        assert_true(dlock_token(x) > last);
        last = dlock_token(x);
        assert_int_equal(dlock_acquire(l[(i + 1) % 2], 0), DLOCK_EBUSY);
        assert_int_equal(dlock_release(x), 0);
    }
    fprintf(stderr, "# 40 turns behind PgBouncer: %" PRId64 " ms\n", now_ms() - t0);
    /* a waiter (no LISTEN there: it re-checks every second) */
    acquire_ok(l[0], 0);
    struct waiter ws;
    waiter_start(&ws, l[1], 5000, true);
    sleep_ms(300);
    assert_int_equal(dlock_release(l[0]), 0);
    t0 = now_ms();
    int rc = waiter_join(&ws);
    fprintf(stderr, "# the waiter behind PgBouncer: %s %" PRId64 " ms after the release: %s\n",
            dlock_err_name(rc), now_ms() - t0, dlock_lock_errmsg(l[1]));
    assert_int_equal(rc, 0);
    for (int i = 0; i < 2; i++) {
        dlock_lock_free(l[i]);
        dlock_client_close(c[i]);
    }
}

/* Arrival order: a holder that lets go and at once tries again finds the
 * lock given to the waiter queued before it (rowlock: the row was free
 * between the commit and the woken waiter's lock, and the try took it —
 * bench -P 8 saw a third of the sections overtaken). */
static void test_no_overtaking(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        char url[512], name[64];
        url_with(url, sizeof url, pg_url, mode_query[m]);
        unique(name, sizeof name, "fifo");
        dlock_client *c1 = open_url(url), *c2 = open_url(url);
        dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
        int overtaken = 0;
        for (int i = 0; i < 50; i++) {
            acquire_ok(h, 2000);
            struct waiter ws;
            waiter_start(&ws, w, 5000, false);
            wait_waiters(c1, name, 1, 5000);
            assert_int_equal(dlock_release(h), 0);
            int rc = dlock_acquire(h, 0);
            if (rc == 0) {
                overtaken++;
                assert_int_equal(dlock_release(h), 0);
            } else {
                assert_int_equal(rc, DLOCK_EBUSY);
            }
            assert_int_equal(waiter_join(&ws), 0);
            assert_int_equal(dlock_release(w), 0);
        }
        fprintf(stderr, "# %s: a try right after the release overtook the waiter %d of 50 times\n",
                mode_query[m], overtaken);
        assert_int_equal(overtaken, 0);
        dlock_lock_free(w);
        dlock_lock_free(h);
        dlock_client_close(c2);
        dlock_client_close(c1);
    }
}

/* One name is one lock across modes: a name held in one mode is refused
 * to a client of another (it was granted to both, with tokens from two
 * counters), with DLOCK_ECONFLICT naming the mode; once let go, the other mode
 * takes it. */
static void test_one_name_across_modes(void **state)
{
    (void)state;
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 3; b++) {
            if (a == b)
                continue;
            char ua[512], ub[512], name[64];
            url_with(ua, sizeof ua, pg_url, mode_query[a]);
            url_with(ub, sizeof ub, pg_url, mode_query[b]);
            unique(name, sizeof name, "modes");
            dlock_client *ca = open_url(ua), *cb = open_url(ub);
            dlock_lock *la = mk(ca, name, NULL, NULL), *lb = mk(cb, name, NULL, NULL);
            acquire_ok(la, 0);
            static const int waits[] = {0, 1000};
            for (int i = 0; i < 2; i++) {
                int64_t t0 = now_ms();
                int rc = dlock_acquire(lb, waits[i]);
                const char *msg = dlock_lock_errmsg(lb);
                fprintf(stderr, "# held in %s, %s acquire(%d): %s after %" PRId64 " ms: %s\n",
                        mode_query[a], mode_query[b], waits[i], dlock_err_name(rc),
                        now_ms() - t0, msg);
                if (rc == 0)
                    fail_msg("%s granted a name held in %s", mode_query[b], mode_query[a]);
                assert_int_equal(rc, DLOCK_ECONFLICT);
                assert_non_null(strstr(msg, mode_query[a]));
                assert_int_equal(dlock_state(la), DLOCK_STATE_HELD);
            }
            assert_int_equal(dlock_release(la), 0);
            acquire_ok(lb, 2000);
            assert_int_equal(dlock_acquire(la, 0), DLOCK_ECONFLICT);
            assert_int_equal(dlock_release(lb), 0);
            acquire_ok(la, 2000);
            assert_int_equal(dlock_release(la), 0);
            dlock_lock_free(lb);
            dlock_lock_free(la);
            dlock_client_close(cb);
            dlock_client_close(ca);
        }
    }
}

/* An advisory handle stops reading the names table after each grant once
 * it has seen only its own row there, for as long as the table's change
 * counter (dlock_names_changes, advanced by a trigger whoever writes) stays:
 * a client of another mode that takes the name while the handle does not
 * hold it moves the counter, and the handle's next grant sees it and gives
 * the name up (it would hold beside it if the counter were not read). */
static void test_names_read_until_changed(void **state)
{
    (void)state;
    char out[512];
    const char *counter = "SELECT pg_sequence_last_value('dlock_names_changes')";
    for (int b = 1; b < 3; b++) {
        char ub[512], name[64], lit[128];
        url_with(ub, sizeof ub, pg_url, mode_query[b]);
        unique(name, sizeof name, "changes");
        sql_lit(lit, sizeof lit, name);
        dlock_client *ca = open_url(pg_url), *cb = open_url(ub);
        assert_int_equal(psql_num("SELECT count(*) FROM pg_trigger WHERE tgname = "
                                  "'dlock_names_announce' AND tgrelid = 'dlock_names'::regclass"),
                         1);
        dlock_lock *la = mk(ca, name, NULL, NULL), *lb = mk(cb, name, NULL, NULL);
        for (int i = 0; i < 4; i++) { /* its row; then a read that finds it alone; then none */
            acquire_ok(la, i % 2 ? 1000 : 0);
            assert_int_equal(dlock_release(la), 0);
        }
        long long before = psql_num("%s", counter);
        acquire_ok(lb, 2000); /* the advisory row goes (not held), this mode's comes */
        assert_true(psql_num("%s", counter) > before);
        assert_int_equal(psql_num("SELECT count(*) FROM dlock_names WHERE name = %s AND mode = "
                                  "'advisory'", lit),
                         0);
        static const int waits[] = {0, 1000};
        for (int i = 0; i < 2; i++) {
            int rc = dlock_acquire(la, waits[i]);
            fprintf(stderr, "# held in %s, a counting advisory handle's acquire(%d): %s: %s\n",
                    mode_query[b], waits[i], dlock_err_name(rc), dlock_lock_errmsg(la));
            if (rc == 0)
                fail_msg("advisory granted a name held in %s", mode_query[b]);
            assert_int_equal(rc, DLOCK_ECONFLICT);
        }
        assert_int_equal(dlock_release(lb), 0);
        for (int i = 0; i < 3; i++) { /* the advisory handle counts again */
            acquire_ok(la, 1000);
            assert_int_equal(dlock_release(la), 0);
        }
        /* A writer with rights on the table only (as a client of an older
         * version, which knows nothing of the counter) moves it too. */
        before = psql_num("%s", counter);
        assert_int_equal(psql(out, sizeof out, "GRANT INSERT ON dlock_names TO dlock_ro"), 0);
        int rc = psql(out, sizeof out,
                      "SET ROLE dlock_ro; INSERT INTO dlock_names VALUES (%s, 'lease', "
                      "'\"dlock_lease\"') ON CONFLICT DO NOTHING",
                      lit);
        if (rc != 0)
            fail_msg("an insert by a role with INSERT only: %s", out);
        assert_int_equal(psql(out, sizeof out, "REVOKE INSERT ON dlock_names FROM dlock_ro"), 0);
        assert_true(psql_num("%s", counter) > before);
        acquire_ok(la, 0); /* read again: the lease row goes, the name not held there */
        assert_int_equal(psql_num("SELECT count(*) FROM dlock_names WHERE name = %s AND mode = "
                                  "'lease'", lit),
                         0);
        assert_int_equal(dlock_release(la), 0);
        dlock_lock_free(lb);
        dlock_lock_free(la);
        dlock_client_close(cb);
        dlock_client_close(ca);
    }
    /* A trigger dropped (or never made) is made again by the table's owner. */
    assert_int_equal(psql(out, sizeof out, "DROP TRIGGER dlock_names_announce ON dlock_names"), 0);
    dlock_client *c = open_url(pg_url);
    assert_int_equal(psql_num("SELECT count(*) FROM pg_trigger WHERE tgname = "
                              "'dlock_names_announce'"),
                     1);
    dlock_client_close(c);
}

int main(int argc, char **argv)
{
    pg_url = getenv("DLOCK_TEST_POSTGRES");
    ro_url = getenv("DLOCK_TEST_POSTGRES_RO");
    admin_url = getenv("DLOCK_TEST_POSTGRES_ADMIN");
    if (!pg_url || !ro_url || !admin_url) {
        fprintf(stderr, "test_postgres: run inside tests/servers.sh run postgres -- ...: "
                        "skipped\n");
        return 77;
    }
    if (strncmp(pg_url, "postgres://", 11) != 0 || strchr(pg_url, '?')) {
        fprintf(stderr, "test_postgres: expected postgres://USER:PW@HOST:PORT/DB, not %s\n",
                pg_url);
        return 1;
    }
    if (run_cmd(NULL, 0, "psql --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_postgres: psql is needed (Debian package postgresql-client)\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sql_injection_names),
        cmocka_unit_test(test_long_names),
        cmocka_unit_test(test_exclusive_busy_timeout),
        cmocka_unit_test(test_wait_forever_after_timed_wait),
        cmocka_unit_test(test_shared_readers_block_writer),
        cmocka_unit_test(test_session_terminated),
        cmocka_unit_test(test_cancel_leaves_no_waiter),
        cmocka_unit_test(test_role_without_rights),
        cmocka_unit_test(test_role_without_create_on_older_tables),
        cmocka_unit_test(test_unknown_role_and_database),
        cmocka_unit_test(test_key_collision),
        cmocka_unit_test(test_election),
        cmocka_unit_test(test_break),
        cmocka_unit_test(test_url_modes),
        cmocka_unit_test(test_tables_created_at_once),
        cmocka_unit_test(test_pool_after_sessions_ended),
        cmocka_unit_test(test_role_limits),
        cmocka_unit_test(test_wait_forever_despite_lock_timeout_settings),
        cmocka_unit_test(test_waiter_session_ended),
        cmocka_unit_test(test_stopped_server_bounds_wait),
        cmocka_unit_test(test_timed_acquire_connecting_times_out),
        cmocka_unit_test(test_cycles_wake_no_thread),
        cmocka_unit_test(test_lease_dead_waiter),
        cmocka_unit_test(test_transaction_pooler),
        cmocka_unit_test(test_no_overtaking),
        cmocka_unit_test(test_one_name_across_modes),
        cmocka_unit_test(test_names_read_until_changed),
        cmocka_unit_test(test_no_flush_per_grant),
        cmocka_unit_test(test_later_grants_write_nothing),
        cmocka_unit_test(test_token_sequence_unlogged),
        cmocka_unit_test(test_tokens_across_crash), /* last: every pool's sessions die */
        cmocka_unit_test(test_server_restart),
        cmocka_unit_test(test_pool_after_restart),
    };
    if (argc > 1) /* a test's name, or a pattern with '*' and '?' */
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
