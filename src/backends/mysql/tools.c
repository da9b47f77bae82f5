/* SPDX-License-Identifier: MIT */
/*
 * tools.c — the MySQL backend's harness operations (src/harness/tools.h),
 * for dlock bench and dlock check: compiled into dlock_harness, not
 * libdlock.so.
 */
#include "my_int.h"
#include "harness/tools.h"

#include <mysql.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The least a statement costs: a prepared SELECT 1 on a kept connection. */
struct baseline_arg {
    my_conn *k;
    int op_timeout_ms;
};

static int baseline_step(void *arg, char *why, size_t wlen)
{
    struct baseline_arg *a = arg;
    my_res r = {0};
    int rc = my_q_exec(a->k, "SELECT 1", NULL, 0, &r, dl_deadline_in(a->op_timeout_ms),
                    -1, why, wlen);
    my_res_free(&r);
    return rc;
}

static int my_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                            dh_timing *out)
{
    (void)name;
    myclient *mc = mc_of(c);
    char why[300] = "";
    struct baseline_arg a = {NULL, mc->op_timeout_ms};
    int64_t *v = NULL;
    size_t n = 0;
    int rc = my_conn_get(mc, false, dl_deadline_in(mc->connect_timeout_ms), -1, &a.k,
                      why, sizeof why);
    if (!rc) /* the first twenty warm up */
        rc = dh_repeat(baseline_step, &a, iters, 20, max_ns, &v, &n, why, sizeof why);
    my_conn_put(mc, a.k);
    return dh_done(c, rc, "baseline", why, v, n, out, "prepared SELECT 1 on a kept connection");
}

/* The bare hand-over chain: one connection's RELEASE_LOCK waking another
 * blocked in GET_LOCK on the same name, from just before the release is
 * sent to the waiter's reply. */
static int my_tool_relay(dlock_client *c, const char *name, int iters, dh_timing *out)
{
    myclient *mc = mc_of(c);
    char why[300] = "", key[MY_KEY_MAX + 1];
    my_key_of("-relay", name, key, sizeof key);
    int64_t bound = (int64_t)mc->op_timeout_ms * 1000000;
    my_conn *a = NULL, *b = NULL;
    int rc = my_conn_open(mc, dl_now_ns() + bound, -1, &a, why, sizeof why);
    if (!rc)
        rc = my_conn_open(mc, dl_now_ns() + bound, -1, &b, why, sizeof why);
    int64_t *v = malloc(sizeof *v * (size_t)(iters > 0 ? iters : 1));
    if (!v && !rc) {
        rc = DLOCK_ENOMEM;
        snprintf(why, sizeof why, "out of memory");
    }
    my_arg lk[] = {A_S(key), A_D(60.0)}, rel[] = {A_S(key)};
    my_res r = {0};
    if (!rc)
        rc = my_q_exec(a, mc->sql_queue, lk, 2, &r, dl_now_ns() + bound, -1, why, sizeof why);
    my_res_free(&r);
    size_t n = 0;
    for (int i = -5; rc == 0 && i < iters; i++) {
        /* b waits in GET_LOCK: sent by a thread-free trick, the start of
         * the non-blocking execute, which returns once the request is out */
        MYSQL_STMT *st;
        rc = my_stmt_of(b, mc->sql_queue, dl_now_ns() + bound, -1, &st, why, sizeof why);
        if (rc)
            break;
        MYSQL_BIND bb[2];
        unsigned long klen = strlen(key);
        double secs = 60.0;
        memset(bb, 0, sizeof bb);
        bb[0].buffer_type = MYSQL_TYPE_STRING;
        bb[0].buffer = key;
        bb[0].buffer_length = klen;
        bb[0].length = &klen;
        bb[1].buffer_type = MYSQL_TYPE_DOUBLE;
        bb[1].buffer = &secs;
        int ret = 0;
        if (my_lib.bind_param(st, bb)) {
            rc = DLOCK_EIO;
            break;
        }
        int status = my_lib.execute_start(&ret, st);
        struct timespec gap = {0, 1000000}; /* let b queue on the server */
        nanosleep(&gap, NULL);
        int64_t t0 = dl_now_ns();
        rc = my_q_exec(a, mc->sql_release, rel, 1, &r, t0 + bound, -1, why, sizeof why);
        my_res_free(&r);
        while (!rc && status) {
            int ev = my_wait(b->m, status, t0 + bound, -1);
            if (ev < 0) {
                rc = ev;
                my_cut_why(rc, why, sizeof why);
                break;
            }
            status = my_lib.execute_cont(&ret, st, ev);
        }
        if (!rc && my_lib.field_count(st) > 0) {
            MY_DRIVE(rc, b->m, t0 + bound, -1, my_lib.store_start(&ret, st),
                     my_lib.store_cont(&ret, st, ev_));
            (void)my_lib.free_result(st);
        }
        int64_t t1 = dl_now_ns();
        if (!rc && ret) {
            rc = DLOCK_EPROTO;
            snprintf(why, sizeof why, "%s", my_lib.stmt_error(st));
        }
        if (rc == 0 && i >= 0)
            v[n++] = t1 - t0;
        my_conn *t = a; /* b holds now */
        a = b;
        b = t;
    }
    if (a)
        a->failed = true;
    if (b)
        b->failed = true;
    my_conn_close(a); /* the connections' end lets go of the name */
    my_conn_close(b);
    return dh_done(c, rc, "relay", why, v, n, out,
                   "RELEASE_LOCK waking a connection blocked in GET_LOCK");
}

static int my_tool_server_ready(dlock_client *c, const dh_member *m)
{
    (void)m; /* one server: the URL's */
    my_res r = {0};
    char why[300];
    int rc = my_pool_exec(c, "SELECT 1", NULL, 0, &r, why, sizeof why);
    my_res_free(&r);
    return rc ? dl_client_err(c, rc, "%s", why) : 0;
}

const struct dh_tools dh_tools_mysql = {
    .baseline = my_tool_baseline,
    .relay = my_tool_relay,
    .lock_servers = dh_url_servers,
    .topology = dh_one_server_topology,
    .members = dh_url_members,
    .server_ready = my_tool_server_ready,
};
