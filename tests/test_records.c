/* SPDX-License-Identifier: MIT */
/*
 * test_records.c — claims' records (dlock once, issue 28) through the
 * backend operations record_get/put/del, on every target URL of
 * tests/targets.list whose client has them (the others are skipped): none
 * for an unknown key, bytes back exactly (NUL bytes, DL_RECORD_MAX of them), replacement,
 * expiry, deletion, two clients writing one new key at once (the first
 * claims on a fresh server: both make the table or folder at once; one
 * wins), writes conditional on the version read (a stale one changes
 * nothing), and keys of every character a name may have, kept apart, and
 * apart from the lock of the same name. Run under
 * tests/servers.sh (the ctest entry does), which exports the URLs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "internal.h"

static const struct target_def {
    const char *label, *env;
} TARGETS[] = {
#include "conformance_targets.h"
};
#define NTARGETS (sizeof TARGETS / sizeof TARGETS[0])

#define NCASES 6

/* One target under test: its URL and the names of its cases. */
struct target {
    const char *label;
    char url[1100];
    char names[NCASES][80];
};

static char prefix[32]; /* keys of this run: "r<pid>-" */

static dlock_client *open_client(const struct target *t)
{
    dlock_client_opts o;
    dlock_client_opts_init(&o);
    /* generous: a loaded machine's slow handshake is no failure here */
    o.connect_timeout_ms = 15000;
    o.op_timeout_ms = 15000;
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, t->url, &o);
    if (rc)
        fail_msg("%s: open: %s", t->label, dlock_client_errmsg(NULL));
    return c;
}

static void key_of(char *buf, size_t len, const char *base)
{
    snprintf(buf, len, "%s%s", prefix, base);
}

/* The record of key: NULL when none (*len then 0); its version in *ver
 * (0 exactly when none). */
static char *get_ver(dlock_client *c, const char *key, size_t *len, uint64_t *ver)
{
    char *v = (char *)1;
    *len = 99;
    *ver = 99;
    int rc = c->ops->record_get(c, key, &v, len, ver);
    if (rc)
        fail_msg("get \"%s\": %s", key, dlock_client_errmsg(c));
    if (v)
        assert_int_equal(v[*len], '\0');
    if ((*ver == 0) != (v == NULL))
        fail_msg("get \"%s\": version %llu with %s", key, (unsigned long long)*ver,
                 v ? "a record" : "none");
    return v;
}

static char *get_ok(dlock_client *c, const char *key, size_t *len)
{
    uint64_t ver;
    return get_ver(c, key, len, &ver);
}

static uint64_t ver_of(dlock_client *c, const char *key)
{
    size_t len;
    uint64_t ver;
    free(get_ver(c, key, &len, &ver));
    return ver;
}

/* A write at version ver: its answer, failing on an error. */
static int put_at(dlock_client *c, const char *key, const char *val, size_t len, int64_t ttl_ms,
                  uint64_t ver)
{
    int rc = c->ops->record_put(c, key, val, len, ttl_ms, ver);
    if (rc != 0 && rc != DL_RECORD_CHANGED)
        fail_msg("put \"%s\" at %llu: %s", key, (unsigned long long)ver, dlock_client_errmsg(c));
    return rc;
}

/* A write over whatever is there (the version read just before). */
static void put_ok(dlock_client *c, const char *key, const char *val, size_t len, int64_t ttl_ms)
{
    if (put_at(c, key, val, len, ttl_ms, ver_of(c, key)) != 0)
        fail_msg("put \"%s\": changed since read (nobody else writes it)", key);
}

static void expect(dlock_client *c, const char *key, const char *want, size_t wlen)
{
    size_t len;
    char *v = get_ok(c, key, &len);
    if (!v)
        fail_msg("get \"%s\": none, expected %zu bytes", key, wlen);
    assert_int_equal(len, wlen);
    assert_memory_equal(v, want, wlen);
    free(v);
}

static void expect_none(dlock_client *c, const char *key)
{
    size_t len;
    char *v = get_ok(c, key, &len);
    if (v)
        fail_msg("get \"%s\": %zu bytes, expected none", key, len);
}

static void del_ok(dlock_client *c, const char *key)
{
    int rc = c->ops->record_del(c, key);
    if (rc)
        fail_msg("del \"%s\": %s", key, dlock_client_errmsg(c));
}

/* ---- two clients writing one new key at once ---------------------------------------- */

struct racer {
    dlock_client *c;
    pthread_barrier_t *start;
    const char *key;
    char val[32];
    int rc;
    char msg[DL_ERRMSG_MAX];
};

static void *racer_main(void *p)
{
    struct racer *r = p;
    pthread_barrier_wait(r->start);
    r->rc = r->c->ops->record_put(r->c, r->key, r->val, strlen(r->val), 600000, 0);
    if (r->rc < 0)
        snprintf(r->msg, sizeof r->msg, "%s", dlock_client_errmsg(r->c));
    return NULL;
}

/* First case of each target: on a fresh server the two first writes also
 * make the table (postgres, mysql) or the folder (zk) at once. Both write
 * "only if none": one lands, the other is told it changed. */
static void test_race(void **state)
{
    const struct target *t = *state;
    char key[100];
    key_of(key, sizeof key, "race");
    struct racer r[2];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
    for (int i = 0; i < 2; i++) {
        r[i] = (struct racer){.c = open_client(t), .start = &start, .key = key};
        snprintf(r[i].val, sizeof r[i].val, "racer %d", i);
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, racer_main, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; i++)
        if (r[i].rc < 0)
            fail_msg("racer %d: put: %s", i, r[i].msg);
    if ((r[0].rc == 0) == (r[1].rc == 0))
        fail_msg("racers' puts: %d and %d, expected one 0 and one %d", r[0].rc, r[1].rc,
                 DL_RECORD_CHANGED);
    /* the record is the winner's, whole */
    size_t len;
    char *v = get_ok(r[0].c, key, &len);
    assert_non_null(v);
    assert_string_equal(v, r[r[0].rc == 0 ? 0 : 1].val);
    free(v);
    del_ok(r[1].c, key);
    expect_none(r[0].c, key);
    for (int i = 0; i < 2; i++)
        dlock_client_close(r[i].c);
}

/* ---- bytes, replacement, deletion ----------------------------------------------------- */

static void test_bytes(void **state)
{
    const struct target *t = *state;
    dlock_client *c = open_client(t);
    char key[100];
    key_of(key, sizeof key, "bytes");
    expect_none(c, key);
    put_ok(c, key, "hello", 5, 600000);
    expect(c, key, "hello", 5);

    /* NUL bytes and every other byte value, as large as a record gets */
    size_t big = DL_RECORD_MAX;
    char *v = malloc(big);
    assert_non_null(v);
    for (size_t i = 0; i < big; i++)
        v[i] = (char)((i * 31 + i / 256) & 0xff);
    v[0] = '\0';
    v[big - 1] = '\0';
    put_ok(c, key, v, big, 600000);
    expect(c, key, v, big);
    free(v);

    /* a put replaces; an empty record is a record */
    put_ok(c, key, "a\0b", 3, 600000);
    expect(c, key, "a\0b", 3);
    put_ok(c, key, "", 0, 600000);
    expect(c, key, "", 0);

    del_ok(c, key);
    expect_none(c, key);
    del_ok(c, key); /* none: 0 too */
    expect_none(c, key);
    dlock_client_close(c);
}

/* ---- writes conditional on the version ------------------------------------------------ */

static void test_cas(void **state)
{
    const struct target *t = *state;
    dlock_client *c = open_client(t);
    char key[100];
    key_of(key, sizeof key, "cas");
    size_t len;
    uint64_t v0;
    free(get_ver(c, key, &len, &v0));
    assert_true(v0 == 0);
    /* none: version 0 writes, and only once */
    assert_int_equal(put_at(c, key, "one", 3, 600000, 0), 0);
    uint64_t v1 = ver_of(c, key);
    assert_true(v1 != 0);
    assert_int_equal(put_at(c, key, "zero", 4, 600000, 0), DL_RECORD_CHANGED);
    expect(c, key, "one", 3);
    assert_true(ver_of(c, key) == v1);
    /* the current version writes, and the version changes */
    assert_int_equal(put_at(c, key, "two", 3, 600000, v1), 0);
    uint64_t v2 = ver_of(c, key);
    assert_true(v2 != 0 && v2 != v1);
    expect(c, key, "two", 3);
    /* a stale one, or one never given, changes nothing */
    assert_int_equal(put_at(c, key, "stale", 5, 600000, v1), DL_RECORD_CHANGED);
    assert_int_equal(put_at(c, key, "made-up", 7, 600000, v2 + 1000), DL_RECORD_CHANGED);
    expect(c, key, "two", 3);
    assert_true(ver_of(c, key) == v2);
    /* another client's write makes this one's version stale */
    dlock_client *d = open_client(t);
    assert_int_equal(put_at(d, key, "other", 5, 600000, v2), 0);
    assert_int_equal(put_at(c, key, "late", 4, 600000, v2), DL_RECORD_CHANGED);
    expect(c, key, "other", 5);
    dlock_client_close(d);
    /* gone: a version is stale (nothing made), 0 writes */
    uint64_t v3 = ver_of(c, key);
    del_ok(c, key);
    assert_int_equal(put_at(c, key, "ghost", 5, 600000, v3), DL_RECORD_CHANGED);
    expect_none(c, key);
    assert_int_equal(put_at(c, key, "new", 3, 600000, 0), 0);
    expect(c, key, "new", 3);
    del_ok(c, key);
    dlock_client_close(c);
}

/* ---- expiry ---------------------------------------------------------------------------- */

static void test_expiry(void **state)
{
    const struct target *t = *state;
    dlock_client *c = open_client(t);
    char key[100], other[100];
    key_of(key, sizeof key, "expiry");
    key_of(other, sizeof other, "expiry-kept");
    put_ok(c, other, "kept", 4, 600000);
    put_ok(c, key, "short", 5, 1000);
    uint64_t old = ver_of(c, key);
    /* gone within its second and a generous margin (etcd rounds a lease up
     * to its minimum; a loaded machine is slow): no bound on speed here */
    size_t len;
    char *v = NULL;
    for (int i = 0; i < 600; i++) {
        v = get_ok(c, key, &len);
        if (!v)
            break;
        free(v);
        usleep(100 * 1000);
    }
    if (v)
        fail_msg("\"%s\" still there a minute after its second", key);
    /* an expired record's version is not current; a replacement after
     * expiry is a fresh record (version 0); the other key is kept */
    assert_int_equal(put_at(c, key, "stale", 5, 600000, old), DL_RECORD_CHANGED);
    expect_none(c, key);
    assert_int_equal(put_at(c, key, "again", 5, 600000, 0), 0);
    expect(c, key, "again", 5);
    expect(c, other, "kept", 4);
    del_ok(c, key);
    del_ok(c, other);
    dlock_client_close(c);
}

/* ---- a claim and a lock of one name --------------------------------------------------- */

/* The record is apart from the name's lock (a table, a prefix, a folder of
 * its own): neither disturbs the other. */
static void test_apart(void **state)
{
    const struct target *t = *state;
    dlock_client *c = open_client(t);
    char key[100];
    key_of(key, sizeof key, "apart");
    put_ok(c, key, "rec", 3, 600000);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(&l, c, key, NULL), 0);
    if (dlock_acquire(l, 10000))
        fail_msg("acquire \"%s\": %s", key, dlock_lock_errmsg(l));
    expect(c, key, "rec", 3);
    dlock_info info;
    if (dlock_inspect(c, key, &info))
        fail_msg("inspect \"%s\": %s", key, dlock_client_errmsg(c));
    assert_int_equal(info.held, 1);
    put_ok(c, key, "rec2", 4, 600000);
    del_ok(c, key);
    expect_none(c, key);
    /* the lock lived through it all */
    if (dlock_release(l))
        fail_msg("release \"%s\": %s", key, dlock_lock_errmsg(l));
    dlock_lock_free(l);
    put_ok(c, key, "rec3", 4, 600000);
    expect(c, key, "rec3", 4);
    del_ok(c, key);
    dlock_client_close(c);
}

/* ---- keys of every character a name may have ------------------------------------------- */

static void test_hostile(void **state)
{
    const struct target *t = *state;
    dlock_client *c = open_client(t);
    static const char *const bases[] = {
        "k:1", "k 1", "k%1", "k%2F1", "k'1", "k\"1", "k;1", "k*1", "k?1", "k_1", "K_1", "k-1",
        "k.1", "k..", "k`1", "k{1}", "k[1]", "k|1", "k$1", "k#1", "k&1=2", "k~1", "k,1", "k@1",
        "lock:{k}", "k<1>", "k!1", "k^1", "k(1)", "k+1", "kk", "k", "dlock_claims",
    };
    enum { N = sizeof bases / sizeof bases[0] };
    char keys[N + 1][DLOCK_NAME_MAX + 1];
    for (int i = 0; i < N; i++)
        key_of(keys[i], sizeof keys[i], bases[i]);
    /* and one of the longest a name may be */
    memset(keys[N], 'x', DLOCK_NAME_MAX);
    keys[N][DLOCK_NAME_MAX] = '\0';
    memcpy(keys[N], prefix, strlen(prefix));
    for (int i = 0; i <= N; i++) {
        char why[200];
        if (dlock_name_valid(keys[i], why, sizeof why))
            fail_msg("test key \"%s\": %s", keys[i], why);
        char val[DLOCK_NAME_MAX + 20];
        int n = snprintf(val, sizeof val, "%d=%s", i, keys[i]);
        put_ok(c, keys[i], val, (size_t)n, 600000);
    }
    for (int i = 0; i <= N; i++) {
        char val[DLOCK_NAME_MAX + 20];
        int n = snprintf(val, sizeof val, "%d=%s", i, keys[i]);
        expect(c, keys[i], val, (size_t)n);
    }
    /* deleting one leaves the others */
    del_ok(c, keys[0]);
    expect_none(c, keys[0]);
    for (int i = 1; i <= N; i++) {
        char val[DLOCK_NAME_MAX + 20];
        int n = snprintf(val, sizeof val, "%d=%s", i, keys[i]);
        expect(c, keys[i], val, (size_t)n);
        del_ok(c, keys[i]);
    }
    dlock_client_close(c);
}

int main(void)
{
    snprintf(prefix, sizeof prefix, "r%ld-", (long)getpid());
    static struct target targets[NTARGETS];
    static struct CMUnitTest tests[NCASES * NTARGETS];
    static const struct {
        const char *name;
        CMUnitTestFunction fn;
    } cases[NCASES] = {
        {"race", test_race},       {"bytes", test_bytes}, {"cas", test_cas},
        {"expiry", test_expiry},   {"hostile", test_hostile}, {"apart", test_apart},
    };
    char dir[] = "/tmp/dlock-records-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    size_t n = 0;
    for (size_t k = 0; k < NTARGETS; k++) {
        struct target *t = &targets[k];
        t->label = TARGETS[k].label;
        const char *url = TARGETS[k].env ? getenv(TARGETS[k].env) : NULL;
        if (TARGETS[k].env && (!url || !*url))
            continue; /* not started here (a hand-run target, or another kind) */
        if (url)
            snprintf(t->url, sizeof t->url, "%s", url);
        else
            snprintf(t->url, sizeof t->url, "file://%s/locks", dir);
        dlock_client *c = NULL;
        dlock_client_opts o;
        dlock_client_opts_init(&o);
        o.connect_timeout_ms = o.op_timeout_ms = 15000;
        if (dlock_client_open(&c, t->url, &o)) {
            const char *why = dlock_client_errmsg(NULL);
            if (strstr(why, "build")) { /* no client library in this build */
                printf("[ SKIP ] %s: %s\n", t->label, why);
                continue;
            }
            fprintf(stderr, "%s: open: %s\n", t->label, why);
            return 1;
        }
        bool has = c->ops->record_get && c->ops->record_put && c->ops->record_del;
        dlock_client_close(c);
        if (!has) {
            printf("[ SKIP ] %s: no claim records on this backend\n", t->label);
            continue;
        }
        for (int i = 0; i < NCASES; i++) {
            snprintf(t->names[i], sizeof t->names[i], "%s[%s]", cases[i].name, t->label);
            tests[n++] = (struct CMUnitTest){t->names[i], cases[i].fn, NULL, NULL, t};
        }
    }
    int rc = n ? _cmocka_run_group_tests("records", tests, n, NULL, NULL) : 77;
    char cmd[100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
