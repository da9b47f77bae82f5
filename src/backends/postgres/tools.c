/* SPDX-License-Identifier: MIT */
/*
 * tools.c — the PostgreSQL backend's harness operations (src/harness/tools.h),
 * for dlock bench and dlock check: compiled into dlock_harness, not
 * libdlock.so.
 */
#include "pg_int.h"
#include "harness/tools.h"

#include <libpq-fe.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The least a statement costs: SELECT 1 on a pooled session. */
struct baseline_arg {
    pg_conn *k;
    int op_timeout_ms;
};

static int baseline_step(void *arg, char *why, size_t wlen)
{
    struct baseline_arg *a = arg;
    PGresult *r;
    int rc = pg_run_fixed(a->k, "SELECT 1", 0, NULL, dl_deadline_in(a->op_timeout_ms),
                       -1, &r, why, wlen);
    pg_lib.clear(r);
    return rc;
}

static int pg_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                            dh_timing *out)
{
    (void)name;
    pgclient *pc = pc_of(c);
    char why[300] = "";
    struct baseline_arg a = {NULL, pc->op_timeout_ms};
    int64_t *v = NULL;
    size_t n = 0;
    int rc = pg_conn_get(pc, dl_deadline_in(pc->connect_timeout_ms), -1, &a.k, why,
                      sizeof why);
    if (!rc) /* the first twenty warm up */
        rc = dh_repeat(baseline_step, &a, iters, 20, max_ns, &v, &n, why, sizeof why);
    if (rc)
        pg_conn_close(a.k);
    else
        pg_conn_put(pc, a.k);
    return dh_done(c, rc, "baseline", why, v, n, out, "SELECT 1 on a kept session");
}

/* The bare hand-over chain: one session's pg_advisory_unlock waking another
 * session blocked in pg_advisory_lock on the same key, from just before the
 * unlock is sent to the waiter's reply. */
static int pg_tool_relay(dlock_client *c, const char *name, int iters, dh_timing *out)
{
    pgclient *pc = pc_of(c);
    char why[300] = "", key[24], relay[DL_NAME_MAX + 16];
    snprintf(relay, sizeof relay, "%s\x01relay", name);
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc, relay));
    const char *p[] = {key};
    int64_t bound = (int64_t)pc->op_timeout_ms * 1000000;
    pg_conn *a = NULL, *b = NULL;
    int rc = pg_conn_open(pc, dl_now_ns() + bound, -1, &a, why, sizeof why);
    if (!rc)
        rc = pg_conn_open(pc, dl_now_ns() + bound, -1, &b, why, sizeof why);
    int64_t *v = malloc(sizeof *v * (size_t)(iters > 0 ? iters : 1));
    if (!v && !rc) {
        rc = DLOCK_ENOMEM;
        snprintf(why, sizeof why, "out of memory");
    }
    PGresult *r = NULL;
    if (!rc)
        rc = pg_run(a, "SELECT pg_advisory_lock($1::bigint)", 1, p, dl_now_ns() + bound, -1, &r,
                 why, sizeof why);
    pg_lib.clear(r);
    size_t n = 0;
    for (int i = -5; rc == 0 && i < iters; i++) {
        rc = pg_stmt_send(b, "SELECT pg_advisory_lock($1::bigint)", 1, p, dl_now_ns() + bound, -1,
                       why, sizeof why);
        struct timespec gap = {0, 1000000}; /* let b queue on the server */
        nanosleep(&gap, NULL);
        int64_t t0 = dl_now_ns();
        if (!rc)
            rc = pg_stmt_send(a, "SELECT pg_advisory_unlock($1::bigint)", 1, p, t0 + bound, -1, why,
                           sizeof why);
        if (!rc)
            rc = pg_stmt_wait(b, t0 + bound, -1, &r, why, sizeof why);
        int64_t t1 = dl_now_ns();
        pg_lib.clear(r);
        if (!rc)
            rc = pg_stmt_wait(a, t0 + bound, -1, &r, why, sizeof why);
        pg_lib.clear(r);
        if (rc == 0 && i >= 0)
            v[n++] = t1 - t0;
        pg_conn *t = a; /* b holds now */
        a = b;
        b = t;
    }
    pg_conn_close(a); /* the sessions' end lets go of the key */
    pg_conn_close(b);
    return dh_done(c, rc, "relay", why, v, n, out,
                     "pg_advisory_unlock waking a session blocked in pg_advisory_lock");
}

/* libpq's host list is failover, in order: the deployment is one server. */
static int pg_tool_server_ready(dlock_client *c, const dh_member *m)
{
    (void)m; /* one server: the URL's */
    PGresult *r;
    char why[300];
    int rc = pg_pool_run(c, "SELECT 1", 0, NULL, &r, why, sizeof why);
    pg_lib.clear(r);
    return rc ? dl_client_err(c, rc, "%s", why) : 0;
}

const struct dh_tools dh_tools_postgres = {
    .baseline = pg_tool_baseline,
    .relay = pg_tool_relay,
    .lock_servers = dh_url_servers,
    .topology = dh_one_server_topology,
    .members = dh_url_members,
    .server_ready = pg_tool_server_ready,
};
